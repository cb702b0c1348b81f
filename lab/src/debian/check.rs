//! `lab lock check`: what the archive has done to the lock since it was written, changing
//! nothing. A scheduled CI job runs it so that the lock is updated before a fresh machine meets
//! a version that left: each locked package is looked up as it is pinned (gone, or a checksum
//! that differs), and each bundle is resolved again as `lab lock update` would (what would
//! move, and whether it resolves at all).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::moved::InStep;
use super::{upstream_series, Archive, LockFile, LockedBundle, PackageRef};
use crate::cache::Cache;

/// A locked package the archive no longer serves as pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Left the archive; a run substitutes this newer version of the same upstream series.
    Substituted {
        package: String,
        locked: String,
        used: String,
    },
    /// Left the archive with nothing of its series left: a run that needs it fails.
    NoSeries {
        package: String,
        locked: String,
        /// What the archive has now, newest first.
        versions: Vec<String>,
    },
    /// Served at the pinned version with another checksum: a run refuses it.
    Checksum { package: String, version: String },
}

/// One bundle's state against today's archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BundleCheck {
    pub name: String,
    pub packages: usize,
    pub gone: Vec<Gone>,
    /// What `lab lock update BUNDLE` would change (`name old -> new`, `+ name v`, `- name v`),
    /// or why it would fail.
    pub update: Result<Vec<String>, String>,
    /// An update resolves from the release below the bundle's own, and why.
    pub fell_back: Option<String>,
}

impl BundleCheck {
    /// Whether a fresh machine meets trouble: a run substitutes, fails, or an update fails.
    pub(crate) fn needs_update(&self) -> bool {
        !self.gone.is_empty() || self.update.is_err()
    }
}

/// `lab lock check`'s report: every bundle checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockCheck {
    pub(crate) path: PathBuf,
    pub(crate) bundles: Vec<BundleCheck>,
}

impl LockCheck {
    /// 1 when some bundle needs `lab lock update` (a package left or changed, or a bundle no
    /// longer resolves), else 0: the scheduled job's signal.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.bundles.iter().any(BundleCheck::needs_update))
    }
}

impl fmt::Display for LockCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: checked against today's archive",
            self.path.display()
        )?;
        for b in &self.bundles {
            let state = if b.needs_update() {
                "NEEDS `lab lock update`"
            } else {
                "ok"
            };
            writeln!(f, "{}: {state} ({} packages)", b.name, b.packages)?;
            for g in &b.gone {
                match g {
                    Gone::Substituted { package, locked, used } => writeln!(
                        f,
                        "  gone: {package} {locked}; a run substitutes {used} (same series {})",
                        upstream_series(locked)
                    )?,
                    Gone::NoSeries { package, locked, versions } => writeln!(
                        f,
                        "  GONE: {package} {locked} and its series {}.x; a run fails (the archive has {})",
                        upstream_series(locked),
                        if versions.is_empty() {
                            "none".to_string()
                        } else {
                            versions.join(", ")
                        }
                    )?,
                    Gone::Checksum { package, version } => writeln!(
                        f,
                        "  CHANGED: {package} {version} has another sha256 in the archive; a run refuses it"
                    )?,
                }
            }
            if let Some(why) = &b.fell_back {
                writeln!(f, "  an update {why}")?;
            }
            match &b.update {
                Ok(moves) if moves.is_empty() => writeln!(f, "  an update would move nothing")?,
                Ok(moves) => {
                    writeln!(f, "  an update would move {}:", moves.len())?;
                    for m in moves {
                        writeln!(f, "    {m}")?;
                    }
                }
                Err(e) => writeln!(f, "  AN UPDATE FAILS: {e}")?,
            }
        }
        let behind = self.bundles.iter().filter(|b| b.needs_update()).count();
        if behind == 0 {
            writeln!(
                f,
                "all {} bundles in the archive as locked",
                self.bundles.len()
            )
        } else {
            writeln!(
                f,
                "{behind} of {} bundles need `lab lock update`",
                self.bundles.len()
            )
        }
    }
}

/// What `bundle` looks like against `archive`: `found` is the archive's entry for each locked
/// package (in order, `None`: not served), `versions` what the archive has of a package,
/// `fresh` the bundle resolved again (as `lab lock update` would).
pub(crate) fn check_bundle(
    bundle: &LockedBundle,
    found: &[Option<PackageRef>],
    versions: &mut dyn FnMut(&str) -> Result<Vec<String>>,
    fresh: Result<InStep>,
) -> Result<BundleCheck> {
    let mut gone = Vec::new();
    for (pkg, entry) in bundle.packages.iter().zip(found) {
        match entry {
            Some(e) if e.sha256 == pkg.sha256 => {}
            Some(_) => gone.push(Gone::Checksum {
                package: pkg.name.clone(),
                version: pkg.version.clone(),
            }),
            None => {
                let now = versions(&pkg.name)?;
                let series = upstream_series(&pkg.version);
                gone.push(match now.iter().find(|v| upstream_series(v) == series) {
                    Some(used) => Gone::Substituted {
                        package: pkg.name.clone(),
                        locked: pkg.version.clone(),
                        used: used.clone(),
                    },
                    None => Gone::NoSeries {
                        package: pkg.name.clone(),
                        locked: pkg.version.clone(),
                        versions: now,
                    },
                });
            }
        }
    }
    let (update, fell_back) = match fresh {
        Ok(again) => (
            Ok(super::moved::changes(&bundle.packages, &again.packages)
                .iter()
                .map(super::moved::change_line)
                .collect()),
            again.fell_back.map(|f| f.to_string()),
        ),
        Err(e) => (Err(format!("{e:#}")), None),
    };
    Ok(BundleCheck {
        name: bundle.name.clone(),
        packages: bundle.packages.len(),
        gone,
        update,
        fell_back,
    })
}

/// `lab lock check [BUNDLE...]`: every bundle of the lock file (`LockFile::default_path`), or
/// the ones named, checked through `cache`'s apt states; the lock is not written.
pub fn check_default_lock(cache: &Cache, only: &[String]) -> Result<LockCheck> {
    let path = LockFile::default_path();
    check_lock(&path, only, &mut super::lock::archives_of(cache))
}

/// [`check_default_lock`] for the lock at `path`, each bundle through the archive of its
/// architectures.
pub(crate) fn check_lock(
    path: &Path,
    only: &[String],
    archive_for: &mut dyn FnMut(&[&str]) -> Result<Archive>,
) -> Result<LockCheck> {
    let lock = LockFile::load(path)?;
    lock.check_names(path, only)?;
    let mut bundles = Vec::new();
    for bundle in &lock.bundles {
        if !only.is_empty() && !only.contains(&bundle.name) {
            continue;
        }
        let archive = archive_for(&bundle.archs())?;
        let found = archive.lookup_many(&bundle.wanted())?;
        let fresh = archive.resolve_in_step(
            &bundle.roots,
            bundle.release.as_deref(),
            bundle.only.as_deref(),
        );
        bundles.push(check_bundle(
            bundle,
            &found,
            &mut |name| archive.versions(name),
            fresh,
        )?);
    }
    Ok(LockCheck {
        path: path.to_path_buf(),
        bundles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, version: &str, sha: &str) -> PackageRef {
        PackageRef {
            name: name.into(),
            version: version.into(),
            sha256: sha.into(),
        }
    }

    fn in_step(packages: Vec<PackageRef>) -> InStep {
        InStep {
            packages,
            fell_back: None,
        }
    }

    fn bundle(packages: Vec<PackageRef>) -> LockedBundle {
        LockedBundle {
            name: "cross".into(),
            roots: vec!["rustc".into()],
            release: Some("trixie-backports".into()),
            only: None,
            architectures: vec!["amd64".into(), "arm64".into()],
            packages,
        }
    }

    #[test]
    fn a_package_gone_changed_or_moved_is_named_with_what_a_run_does() {
        let locked = bundle(vec![
            pkg("qemu", "1:11.1.3+ds-1~bpo13+1", "a"),
            pkg("rustc", "1.97.1+dfsg1-1~bpo13+1", "b"),
            pkg("libc6", "2.41-12", "c"),
            pkg("zlib1g", "1:1.3.dfsg-3", "d"),
        ]);
        let found = vec![
            None,
            None,
            Some(pkg("libc6", "2.41-12", "OTHER")),
            Some(pkg("zlib1g", "1:1.3.dfsg-3", "d")),
        ];
        let mut versions = |name: &str| -> Result<Vec<String>> {
            Ok(match name {
                "qemu" => vec!["1:11.1.4+ds-1~bpo13+1".into(), "1:10.0.2+ds-2".into()],
                _ => vec!["1.98.1+dfsg1-1~bpo13+1".into(), "1.85.1+dfsg1-1".into()],
            })
        };
        let fresh = Ok(in_step(vec![
            pkg("qemu", "1:11.1.4+ds-1~bpo13+1", "e"),
            pkg("rustc", "1.98.1+dfsg1-1~bpo13+1", "f"),
            pkg("libc6", "2.41-12", "c"),
            pkg("libnew", "1.0-1", "g"),
        ]));
        let check = check_bundle(&locked, &found, &mut versions, fresh).unwrap();
        assert_eq!(
            check.gone,
            vec![
                Gone::Substituted {
                    package: "qemu".into(),
                    locked: "1:11.1.3+ds-1~bpo13+1".into(),
                    used: "1:11.1.4+ds-1~bpo13+1".into()
                },
                Gone::NoSeries {
                    package: "rustc".into(),
                    locked: "1.97.1+dfsg1-1~bpo13+1".into(),
                    versions: vec!["1.98.1+dfsg1-1~bpo13+1".into(), "1.85.1+dfsg1-1".into()]
                },
                Gone::Checksum {
                    package: "libc6".into(),
                    version: "2.41-12".into()
                },
            ]
        );
        let report = LockCheck {
            path: "images/lock.toml".into(),
            bundles: vec![check],
        };
        assert_eq!(report.exit_code(), 1);
        let text = report.to_string();
        assert!(
            text.ends_with("1 of 1 bundles need `lab lock update`\n"),
            "{text}"
        );
        for line in [
            "cross: NEEDS `lab lock update` (4 packages)",
            "gone: qemu 1:11.1.3+ds-1~bpo13+1; a run substitutes 1:11.1.4+ds-1~bpo13+1 (same series 11.1)",
            "GONE: rustc 1.97.1+dfsg1-1~bpo13+1 and its series 1.97.x; a run fails (the archive has 1.98.1+dfsg1-1~bpo13+1, 1.85.1+dfsg1-1)",
            "CHANGED: libc6 2.41-12 has another sha256",
            "an update would move 4:",
            "qemu 1:11.1.3+ds-1~bpo13+1 -> 1:11.1.4+ds-1~bpo13+1",
            "+ libnew 1.0-1",
            "- zlib1g 1:1.3.dfsg-3",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
    }

    #[test]
    fn a_bundle_in_step_is_ok_and_one_that_no_longer_resolves_needs_an_update() {
        let locked = bundle(vec![pkg("rustc", "1.85.1+dfsg1-1", "b")]);
        let found = vec![Some(pkg("rustc", "1.85.1+dfsg1-1", "b"))];
        let mut none = |_: &str| -> Result<Vec<String>> { unreachable!("nothing is gone") };
        let ok = check_bundle(
            &locked,
            &found,
            &mut none,
            Ok(in_step(vec![pkg("rustc", "1.85.1+dfsg1-1", "b")])),
        )
        .unwrap();
        assert!(!ok.needs_update());
        let text = LockCheck {
            path: "lock.toml".into(),
            bundles: vec![ok],
        }
        .to_string();
        assert!(
            text.contains("cross: ok (1 packages)\n  an update would move nothing"),
            "{text}"
        );
        let broken = check_bundle(
            &locked,
            &found,
            &mut none,
            Err(anyhow::anyhow!(
                "E: Unable to correct problems, you have held broken packages."
            )),
        )
        .unwrap();
        assert!(broken.needs_update());
        let report = LockCheck {
            path: "lock.toml".into(),
            bundles: vec![broken],
        };
        assert_eq!(report.exit_code(), 1);
        assert!(
            report
                .to_string()
                .contains("AN UPDATE FAILS: E: Unable to correct problems"),
            "{report}"
        );
    }
}
