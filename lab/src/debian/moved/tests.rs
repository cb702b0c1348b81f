//! What happens when the archive moves, on a real signed repository built in the test
//! ([`TestRepo`]) and read by real apt through the lab's own apt state.

use std::path::Path;

use super::super::test_repo::{TestDeb, TestRepo};
use super::super::{
    recorded_resolution, resolve_bundle_as, Archive, LockFile, LockedBundle, PackageRef,
};
use super::*;
use crate::cache::Cache;

/// The repository's tools, or a visible skip naming the missing one.
fn tools_here() -> bool {
    super::super::test_repo::tools_here("a test Debian repository")
}

fn deb(
    name: &'static str,
    version: &'static str,
    arch: &'static str,
    suite: &'static str,
    depends: &'static str,
) -> TestDeb {
    TestDeb {
        arch,
        suite,
        depends,
        ..TestDeb::new(name, version)
    }
}

/// `deb` installable for several architectures only at one version (`Multi-Arch: same`, as
/// libstd-rust-dev is).
fn same(
    name: &'static str,
    version: &'static str,
    arch: &'static str,
    suite: &'static str,
) -> TestDeb {
    TestDeb {
        same: true,
        ..deb(name, version, arch, suite, "")
    }
}

/// A lock at `path` with one bundle pinning `packages` (checksums no archive has: a gone
/// version's is never compared).
fn write_lock(path: &Path, name: &str, roots: &[&str], archs: &[&str], packages: &[(&str, &str)]) {
    let mut lock = LockFile::default();
    lock.put(LockedBundle {
        name: name.into(),
        roots: roots.iter().map(|r| r.to_string()).collect(),
        release: None,
        only: None,
        architectures: if archs == ["amd64"] {
            Vec::new()
        } else {
            archs.iter().map(|a| a.to_string()).collect()
        },
        packages: packages
            .iter()
            .map(|(n, v)| PackageRef {
                name: n.to_string(),
                version: v.to_string(),
                sha256: "0".repeat(64),
            })
            .collect(),
    });
    lock.save(path).unwrap();
}

fn versions(packages: &[PackageRef]) -> Vec<(String, String)> {
    let mut out: Vec<_> = packages
        .iter()
        .map(|p| (p.name.clone(), p.version.clone()))
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_locked_series_gone_resolves_the_whole_bundle_again_and_records_it_and_strict_fails() {
    if !tools_here() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let repo = TestRepo::build(
        work.path(),
        &["amd64"],
        &[
            deb("lab-tool", "2.0-1", "amd64", "trixie", "lab-lib (>= 2.0)"),
            deb("lab-lib", "2.0-1", "amd64", "trixie", ""),
        ],
    );
    let cache = Cache::at(work.path().join("cache")).unwrap();
    let archive = Archive::open_at(
        &cache,
        repo.mirror.clone(),
        repo.keyring.clone(),
        &["amd64"],
    )
    .unwrap();

    // The lock pins the 1.x series, of which nothing is left.
    let lock = work.path().join("lock.toml");
    write_lock(
        &lock,
        "tools",
        &["lab-tool"],
        &["amd64"],
        &[("lab-tool", "1.0-1"), ("lab-lib", "1.0-1")],
    );
    let strict =
        resolve_bundle_as(&archive, &lock, "tools", &["lab-tool"], None, None, true).unwrap_err();
    let strict = format!("{strict:#}");
    assert!(
        strict.contains("lab-tool 1.0-1 (locked in")
            && strict.contains("which has 2.0-1")
            && strict.contains("LAB_LOCK_STRICT=1"),
        "{strict}"
    );
    // Resolved again from the lock's release (none here), not the caller's: a release apt does
    // not know would fail it.
    let caller = Some("no-such-release");
    let resolved =
        resolve_bundle_as(&archive, &lock, "tools", &["lab-tool"], caller, None, false).unwrap();
    assert_eq!(
        versions(&resolved.packages),
        pairs(&[("lab-lib", "2.0-1"), ("lab-tool", "2.0-1")])
    );
    assert_eq!(
        resolved.substitutions,
        vec![
            Substitution::new("lab-lib", "1.0-1", "2.0-1"),
            Substitution::new("lab-tool", "1.0-1", "2.0-1"),
        ]
    );
    // Recorded with the resolution: what a warm start reuses without apt and every result's
    // manifest carries.
    let recorded = recorded_resolution(&cache, &lock, "tools", &["lab-tool"], None)
        .unwrap()
        .expect("the resolution is remembered");
    assert_eq!(recorded.substitutions, resolved.substitutions);
    // The lock itself is left as it was: `lab lock update` makes it permanent.
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(text.contains("1.0-1") && !text.contains("2.0-1"), "{text}");

    // A version gone with its series still served: that one package is replaced.
    write_lock(
        &lock,
        "lib",
        &["lab-lib"],
        &["amd64"],
        &[("lab-lib", "2.0-0")],
    );
    let resolved =
        resolve_bundle_as(&archive, &lock, "lib", &["lab-lib"], None, None, false).unwrap();
    assert_eq!(
        resolved.substitutions,
        vec![Substitution::new("lab-lib", "2.0-0", "2.0-1")]
    );
}

#[test]
fn architectures_out_of_step_resolve_from_the_release_below_or_name_what_each_has() {
    if !tools_here() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let repo = TestRepo::build(
        work.path(),
        &["amd64", "arm64"],
        &[
            // Backports moved amd64 to 2.0 and left arm64 at 1.9, as it did with rustc 1.98
            // and libstd-rust-dev:arm64 1.97; trixie has 1.5 for both.
            deb(
                "lab-cc",
                "2.0~bpo13+1",
                "amd64",
                "trixie-backports",
                "lab-std (= 2.0~bpo13+1)",
            ),
            same("lab-std", "2.0~bpo13+1", "amd64", "trixie-backports"),
            same("lab-std", "1.9~bpo13+1", "arm64", "trixie-backports"),
            deb("lab-cc", "1.5-1", "amd64", "trixie", "lab-std (= 1.5-1)"),
            same("lab-std", "1.5-1", "amd64", "trixie"),
            same("lab-std", "1.5-1", "arm64", "trixie"),
            // The same, with nothing for arm64 in trixie: no release has them in step.
            deb(
                "lab-tc",
                "2.0~bpo13+1",
                "amd64",
                "trixie-backports",
                "lab-odd (= 2.0~bpo13+1)",
            ),
            same("lab-odd", "2.0~bpo13+1", "amd64", "trixie-backports"),
            same("lab-odd", "1.9~bpo13+1", "arm64", "trixie-backports"),
            deb("lab-tc", "1.5-1", "amd64", "trixie", "lab-odd (= 1.5-1)"),
            same("lab-odd", "1.5-1", "amd64", "trixie"),
        ],
    );
    let cache = Cache::at(work.path().join("cache")).unwrap();
    let archs = ["amd64", "arm64"];
    let archive =
        Archive::open_at(&cache, repo.mirror.clone(), repo.keyring.clone(), &archs).unwrap();

    let roots = vec!["lab-cc".to_string(), "lab-std:arm64".to_string()];
    let got = archive
        .resolve_in_step(&roots, Some("trixie-backports"), None)
        .unwrap();
    let fell_back = got.fell_back.expect("resolved from the release below");
    assert_eq!(
        (fell_back.configured.as_str(), fell_back.used.as_str()),
        ("trixie-backports", "trixie")
    );
    assert_eq!(
        versions(&got.packages),
        pairs(&[
            ("lab-cc", "1.5-1"),
            ("lab-std", "1.5-1"),
            ("lab-std:arm64", "1.5-1")
        ])
    );

    let roots = vec!["lab-tc".to_string(), "lab-odd:arm64".to_string()];
    let err = archive
        .resolve_in_step(&roots, Some("trixie-backports"), None)
        .unwrap_err();
    let err = format!("{err:#}");
    for said in [
        "lab-tc lab-odd:arm64 resolve to no set with one version for every architecture (amd64, arm64) in trixie-backports or trixie",
        "lab-odd amd64: 2.0~bpo13+1 (trixie-backports), 1.5-1 (trixie)",
        "lab-odd arm64: 1.9~bpo13+1 (trixie-backports)",
        "way out:",
    ] {
        assert!(err.contains(said), "{said:?} missing from\n{err}");
    }
}
