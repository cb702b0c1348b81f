//! Kernel sources: resolving a recipe's source to an exact, checksummed input and unpacking it.
//!
//! Debian sources are pinned in the lock file as bundle `kernel-source:<package>` holding the one
//! `linux-source-X.Y` package. When the locked point release has left the archive the newest of
//! the same series is used (loudly, see `debian::resolve_bundle`) and recorded in the manifest.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::recipe::Source;
use crate::cache::{sha256_file, Cache};
use crate::debian::{self, Archive, LockFile, PackageRef, Substitution};

/// A source pinned to exact bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResolvedSource {
    pub source: Source,
    /// `sha256:<hex>` of the .deb or tarball, or `git:<commit>`.
    pub digest: String,
    /// Debian version or git commit.
    pub version: String,
    /// The version the lock file asked for, when a substitute was used instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub substitution: Option<Substitution>,
    /// Whether the digest was checked against the archive (false: taken from the lock file).
    #[serde(skip)]
    pub verified: bool,
}

/// Resolves sources; opens the Debian archive only when it must, and holds it (and with it the
/// apt state's lock) only while resolving and downloading, never during a build.
pub(crate) struct SourceResolver<'a> {
    cache: &'a Cache,
    lock_path: PathBuf,
    archive: Option<Archive>,
    /// Debian source packages downloaded while resolving, by name and version.
    downloaded: Vec<(PackageRef, PathBuf)>,
}

impl<'a> SourceResolver<'a> {
    pub(crate) fn new(cache: &'a Cache, lock_path: PathBuf) -> Self {
        SourceResolver {
            cache,
            lock_path,
            archive: None,
            downloaded: Vec::new(),
        }
    }

    fn archive(&mut self) -> Result<&Archive> {
        if self.archive.is_none() {
            self.archive = Some(Archive::open(self.cache)?);
        }
        Ok(self.archive.as_ref().expect("just opened"))
    }

    /// What the lock file (or the local file/repo) says, without touching the archive when a
    /// Debian package is already locked. Good enough to look up a cached build.
    pub(crate) fn resolve_offline(&mut self, source: &Source) -> Result<ResolvedSource> {
        match source {
            Source::Debian { package } => {
                let lock = LockFile::load(&self.lock_path)?;
                match locked_package(&lock, package) {
                    Some(p) => Ok(ResolvedSource {
                        source: source.clone(),
                        digest: format!("sha256:{}", p.sha256),
                        version: p.version.clone(),
                        substitution: None,
                        verified: false,
                    }),
                    None => self.resolve(source),
                }
            }
            _ => self.resolve(source),
        }
    }

    /// Pins `source` against the archive (Debian) or the local file/repo.
    pub(crate) fn resolve(&mut self, source: &Source) -> Result<ResolvedSource> {
        match source {
            Source::Tarball { path, sha256 } => {
                if !path.is_file() {
                    bail!(
                        "source tarball {} not found (recipe field `source.tarball`)",
                        path.display()
                    );
                }
                let actual = sha256_file(path)?;
                if &actual != sha256 {
                    bail!(
                        "checksum mismatch for source tarball {}: the recipe's `source.sha256` is {sha256}, \
                         the file's is {actual}",
                        path.display()
                    );
                }
                Ok(ResolvedSource {
                    source: source.clone(),
                    digest: format!("sha256:{actual}"),
                    version: path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    substitution: None,
                    verified: true,
                })
            }
            Source::Git { repo, reference } => {
                if !repo.is_dir() {
                    bail!(
                        "git source {} not found (recipe field `source.git`)",
                        repo.display()
                    );
                }
                let out = crate::process::output(
                    crate::process::command("git")
                        .arg("-C")
                        .arg(repo)
                        .args(["rev-parse", "--verify", "--quiet"])
                        .arg(format!("{reference}^{{commit}}")),
                )
                .context("running git")?;
                if !out.status.success() {
                    bail!("git source {}: ref {reference:?} (recipe field `source.ref`) is not a commit", repo.display());
                }
                let commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
                Ok(ResolvedSource {
                    source: source.clone(),
                    digest: format!("git:{commit}"),
                    version: commit,
                    substitution: None,
                    verified: true,
                })
            }
            Source::Debian { package } => {
                let resolved = self.resolve_debian(source, package);
                // Unlock the apt state: what follows is a build, or a base's resolution.
                self.archive = None;
                resolved
            }
        }
    }

    fn resolve_debian(&mut self, source: &Source, package: &str) -> Result<ResolvedSource> {
        let lock_path = self.lock_path.clone();
        let bundle = bundle_name(package);
        let archive = self.archive()?.clone();
        // `only`: the lock holds the source package itself, not the tools apt would pull in.
        let resolved = debian::resolve_bundle(
            &archive,
            &lock_path,
            &bundle,
            &[package],
            None,
            Some(package),
        )
        .with_context(|| format!("resolving {package} (recipe field `source.debian`)"))?;
        let pkg = resolved
            .packages
            .iter()
            .find(|p| p.name == package)
            .with_context(|| {
                format!(
                    "{}: bundle {bundle} does not hold {package}",
                    lock_path.display()
                )
            })?;
        // Under the same lock as the resolution: the build unpacks it later, unlocked.
        let deb = archive.download(pkg)?;
        self.downloaded.push((pkg.clone(), deb));
        Ok(ResolvedSource {
            source: source.clone(),
            digest: format!("sha256:{}", pkg.sha256),
            version: pkg.version.clone(),
            substitution: resolved
                .substitutions
                .into_iter()
                .find(|s| s.package == package),
            verified: true,
        })
    }

    /// Unpacks a resolved source into `dest` (which must not exist): the kernel tree's top level.
    pub(crate) fn unpack(
        &mut self,
        resolved: &ResolvedSource,
        dest: &Path,
        scratch: &Path,
    ) -> Result<()> {
        match &resolved.source {
            Source::Tarball { path, .. } => untar(path, dest, scratch),
            Source::Git { repo, .. } => {
                fs::create_dir_all(dest)?;
                let mut archive = crate::process::spawn_tree(
                    crate::process::command("git")
                        .arg("-C")
                        .arg(repo)
                        .args(["archive", "--format=tar", &resolved.version])
                        .stdout(Stdio::piped()),
                )
                .context("running git archive")?;
                let stdout = archive
                    .inner()
                    .stdout
                    .take()
                    .context("git archive stdout")?;
                let tar = crate::process::status(
                    crate::process::command("tar")
                        .args(["-x", "--no-same-owner", "-C"])
                        .arg(dest)
                        .stdin(stdout),
                )
                .context("running tar")?;
                let git = archive.inner().wait()?;
                if !git.success() || !tar.success() {
                    bail!(
                        "unpacking {} at {} failed",
                        repo.display(),
                        resolved.version
                    );
                }
                Ok(())
            }
            Source::Debian { package } => {
                let pkg = PackageRef {
                    name: package.clone(),
                    version: resolved.version.clone(),
                    sha256: resolved
                        .digest
                        .strip_prefix("sha256:")
                        .context("Debian source without a sha256")?
                        .to_string(),
                };
                let deb = match self.downloaded.iter().find(|(p, _)| *p == pkg) {
                    Some((_, deb)) => deb.clone(),
                    None => {
                        let deb = self.archive()?.download(&pkg);
                        self.archive = None;
                        deb?
                    }
                };
                let debdir = scratch.join("deb");
                debian::extract_deb(&deb, &debdir)?;
                let src = debdir.join("usr/src");
                let tarball = fs::read_dir(&src)
                    .with_context(|| format!("{package}: no usr/src in the package"))?
                    .flatten()
                    .map(|e| e.path())
                    .find(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with("linux-source") && n.contains(".tar"))
                    })
                    .with_context(|| format!("{package}: no linux-source tarball in usr/src"))?;
                untar(&tarball, dest, scratch)?;
                fs::remove_dir_all(&debdir).ok();
                Ok(())
            }
        }
    }
}

fn bundle_name(package: &str) -> String {
    format!("kernel-source:{package}")
}

fn locked_package<'l>(lock: &'l LockFile, package: &str) -> Option<&'l PackageRef> {
    lock.bundle(&bundle_name(package))
        .filter(|b| {
            b.roots.len() == 1 && b.roots[0] == package && b.only.as_deref() == Some(package)
        })
        .and_then(|b| b.packages.iter().find(|p| p.name == package))
}

/// Extracts `tarball` and moves its single top-level directory (or everything) to `dest`.
fn untar(tarball: &Path, dest: &Path, scratch: &Path) -> Result<()> {
    let tmp = scratch.join("untar");
    fs::create_dir_all(&tmp)?;
    let out = crate::process::output(
        crate::process::command("tar")
            .args(["-x", "--no-same-owner", "-f"])
            .arg(tarball)
            .arg("-C")
            .arg(&tmp),
    )
    .context("running tar")?;
    if !out.status.success() {
        bail!(
            "unpacking {} failed: {}",
            tarball.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let entries: Vec<PathBuf> = fs::read_dir(&tmp)?.flatten().map(|e| e.path()).collect();
    let top = match entries.as_slice() {
        [only] if only.is_dir() => only.clone(),
        _ => tmp.clone(),
    };
    fs::rename(&top, dest).with_context(|| format!("moving the source to {}", dest.display()))?;
    fs::remove_dir_all(&tmp).ok();
    Ok(())
}
