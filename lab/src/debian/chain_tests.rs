//! Debian's chain of trust, tested against a hostile archive (issue W2): a real signed
//! repository built in the test ([`TestRepo`]) and read by real apt through the lab's own apt
//! state, then broken one way at a time. The lab must refuse each, naming why: an archive
//! signed by a key the lab does not trust, one whose `Release` is not signed at all, a `.deb`
//! changed after it was indexed, and a `.deb` that is not the one the lock pinned.

use super::test_repo::{TestDeb, TestRepo};
use super::{Archive, PackageRef};
use crate::cache::Cache;

/// The repository's tools, or a visible skip naming the missing one.
fn tools_here() -> bool {
    super::test_repo::tools_here("a hostile Debian repository")
}

fn one_package(work: &std::path::Path) -> TestRepo {
    TestRepo::build(work, &["amd64"], &[TestDeb::new("lab-tool", "1.0-1")])
}

#[test]
fn an_archive_signed_by_another_key_or_not_signed_is_refused() {
    if !tools_here() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let repo = one_package(&work.path().join("a"));
    let other = one_package(&work.path().join("b"));
    let cache = Cache::at(work.path().join("cache")).unwrap();
    // Trusting the other repository's key only.
    let err = Archive::open_at(
        &cache,
        repo.mirror.clone(),
        other.keyring.clone(),
        &["amd64"],
    )
    .map(drop)
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("apt-get update"), "{text}");
    assert!(
        text.contains("NO_PUBKEY") && text.contains("InRelease' is not signed"),
        "{text}"
    );
    // No signature at all: InRelease gone, no Release.gpg.
    for suite in super::SUITES {
        std::fs::remove_file(repo.root.join("dists").join(suite).join("InRelease")).unwrap();
    }
    let cache = Cache::at(work.path().join("cache-unsigned")).unwrap();
    let err = Archive::open_at(
        &cache,
        repo.mirror.clone(),
        repo.keyring.clone(),
        &["amd64"],
    )
    .map(drop)
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("trixie Release' is not signed"), "{text}");
}

#[test]
fn a_deb_changed_after_its_index_or_unlike_the_lock_is_refused() {
    if !tools_here() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let repo = one_package(work.path());
    let cache = Cache::at(work.path().join("cache")).unwrap();
    let archive = Archive::open_at(
        &cache,
        repo.mirror.clone(),
        repo.keyring.clone(),
        &["amd64"],
    )
    .unwrap();
    let served = archive.lookup("lab-tool", "1.0-1").unwrap().unwrap();
    // The lock pinned other bytes than the archive serves: the lab's own check.
    let pinned = PackageRef {
        sha256: "0".repeat(64),
        ..served.clone()
    };
    let err = format!("{:#}", archive.download(&pinned).unwrap_err());
    assert!(
        err.contains("checksum mismatch for lab-tool=1.0-1: expected sha256 0000"),
        "{err}"
    );
    // The pool's file replaced after it was indexed (and signed): apt's check.
    let pool = repo.root.join("pool/main/lab-tool_1.0-1_amd64.deb");
    let mut bytes = std::fs::read(&pool).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&pool, bytes).unwrap();
    let err = format!("{:#}", archive.download(&served).unwrap_err());
    assert!(err.contains("Hash Sum mismatch"), "{err}");
}
