//! Resolving a bundle: the locked versions where the archive still has them, substitutions
//! of the same upstream series where it does not, the resolution remembered under a key of the
//! lock entry, and the resolved packages downloaded and unpacked.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{
    extract_deb, moved, upstream_series, Archive, LockFile, LockedBundle, PackageRef,
    DEFAULT_ARCHS, LOCK_FILE_MUTEX,
};
use crate::cache::{hash_parts, Cache};

/// A locked version that had left the archive and what was taken instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Substitution {
    pub package: String,
    pub locked: String,
    pub used: String,
}

impl Substitution {
    pub(crate) fn new(package: &str, locked: &str, used: &str) -> Substitution {
        Substitution {
            package: package.to_string(),
            locked: locked.to_string(),
            used: used.to_string(),
        }
    }

    /// Says loudly that a locked version is gone (once: when the bundle is resolved).
    pub(crate) fn warn(&self) {
        crate::progress::warn(format!(
            "LOCKED PACKAGE GONE: {} {} is no longer in the archive; using {} of the same \
             series {}. Results record this. Run `lab lock update` to pin it.",
            self.package,
            self.locked,
            self.used,
            upstream_series(&self.locked)
        ));
    }
}

/// The packages a bundle resolved to on this run, with any substitutions made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResolvedBundle {
    pub name: String,
    pub packages: Vec<PackageRef>,
    pub substitutions: Vec<Substitution>,
}

impl ResolvedBundle {
    /// Logs (at debug level) the substitutions a reused resolution carries: they were said
    /// loudly when the bundle was resolved and are in every result's manifest, so a warm start
    /// does not repeat them.
    pub(crate) fn note_substitutions(&self) {
        for s in &self.substitutions {
            tracing::debug!(
                "{}: locked {} gone, {} used (recorded when resolved)",
                s.package,
                s.locked,
                s.used
            );
        }
    }
}

/// The memo key of a bundle's resolution: the request and its lock entry, so editing either
/// (or `lab lock update`) leads to a fresh resolution.
pub(super) fn resolution_key(
    name: &str,
    roots: &[String],
    release: Option<&str>,
    only: Option<&str>,
    archs: &[&str],
    locked: &[PackageRef],
) -> String {
    let packages: String = locked
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.version, p.sha256))
        .collect();
    let arch_list = archs.join(",");
    let root_list = roots.join(" ");
    let mut parts: Vec<(&str, &[u8])> = vec![
        ("name", name.as_bytes()),
        ("roots", root_list.as_bytes()),
        ("release", release.unwrap_or("").as_bytes()),
        ("only", only.unwrap_or("").as_bytes()),
        ("locked", packages.as_bytes()),
    ];
    // Host-architecture bundles keep the keys they had before other architectures existed.
    if archs != DEFAULT_ARCHS {
        parts.push(("architectures", arch_list.as_bytes()));
    }
    let key = hash_parts(&parts);
    format!("{}-{}", crate::names::sanitize(name), &key[..16])
}

/// The resolution [`resolve_bundle`] last made for this bundle while its lock entry was what it
/// is now, without opening the archive (no apt call, no network). `None` when the lock lacks the
/// bundle, its entry changed since, or it was never resolved with this cache. The packages it
/// names were checked against the lock and the archive when it was made; a caller that must
/// download them resolves afresh instead, and one that uses it calls
/// [`ResolvedBundle::note_substitutions`] (resolving said them loudly already).
pub(crate) fn recorded_resolution(
    cache: &Cache,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    only: Option<&str>,
) -> Result<Option<ResolvedBundle>> {
    let lock = LockFile::load(lock_path)?;
    let roots: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    let Some(locked) = lock.bundle(name) else {
        return Ok(None);
    };
    if locked.roots != roots || locked.only.as_deref() != only {
        return Ok(None);
    }
    Ok(cache.read_memo::<ResolvedBundle>(crate::cache::RESOLUTIONS_MEMO, &locked.memo_key()))
}

/// Resolves a bundle (`roots` and their dependency closure, or only the closure's packages
/// whose names start with `only`):
/// the locked versions where the archive still has them, else the newest of
/// the same upstream series (loudly). A bundle missing from the lock is resolved fresh from
/// `release` and written to the lock, so a new checkout pins what it first used; a locked one
/// keeps the lock's `release`.
pub(crate) fn resolve_bundle(
    archive: &Archive,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
    only: Option<&str>,
) -> Result<ResolvedBundle> {
    let strict = moved::strict_from_env();
    resolve_bundle_as(archive, lock_path, name, roots, release, only, strict)
}

/// [`resolve_bundle`], failing on any version that left the archive when `strict`.
pub(super) fn resolve_bundle_as(
    archive: &Archive,
    lock_path: &Path,
    name: &str,
    roots: &[&str],
    release: Option<&str>,
    only: Option<&str>,
    strict: bool,
) -> Result<ResolvedBundle> {
    let _guard = LOCK_FILE_MUTEX.lock().unwrap_or_else(|p| p.into_inner());
    let mut lock = LockFile::load(lock_path)?;
    let roots_owned: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    let archs: Vec<&str> = archive.archs.iter().map(String::as_str).collect();
    let locked = match lock.bundle(name) {
        Some(b) if b.roots == roots_owned && b.only.as_deref() == only && b.archs() == archs => {
            b.clone()
        }
        _ => {
            let packages = archive.resolve_closure(&roots_owned, release, only)?;
            let bundle = LockedBundle {
                name: name.to_string(),
                roots: roots_owned,
                release: release.map(str::to_string),
                only: only.map(str::to_string),
                architectures: if archs == DEFAULT_ARCHS {
                    Vec::new()
                } else {
                    archive.archs.clone()
                },
                packages,
            };
            lock.put(bundle.clone());
            if let Err(e) = lock.save(lock_path) {
                tracing::warn!("could not write {}: {e:#}", lock_path.display());
            }
            bundle
        }
    };
    // Once locked, the bundle's release is the lock's (`lab lock update` reads it there too);
    // the caller's names the release a bundle new to the lock is resolved from.
    let release = locked.release.as_deref();
    let mut packages = Vec::new();
    let mut substitutions = Vec::new();
    // Locked packages whose whole upstream series left: the bundle resolves again.
    let mut series_gone = Vec::new();
    let available = archive.lookup_many(&locked.wanted())?;
    for (pkg, entry) in locked.packages.iter().zip(available) {
        match entry {
            Some(found) => {
                if found.sha256 != pkg.sha256 {
                    bail!(
                        "{}: {} {} has sha256 {} in the archive but {} in the lock",
                        lock_path.display(),
                        pkg.name,
                        pkg.version,
                        found.sha256,
                        pkg.sha256
                    );
                }
                packages.push(found);
            }
            None if strict => {
                return Err(moved::strict_error(
                    lock_path,
                    &pkg.name,
                    &pkg.version,
                    archive,
                ))
            }
            None => {
                let series = upstream_series(&pkg.version);
                let Some(replacement) = archive
                    .versions(&pkg.name)?
                    .into_iter()
                    .find(|v| upstream_series(v) == series)
                else {
                    series_gone.push(pkg.clone());
                    continue;
                };
                let found = archive
                    .lookup(&pkg.name, &replacement)?
                    .context("replacement vanished")?;
                let substitution = Substitution {
                    package: pkg.name.clone(),
                    locked: pkg.version.clone(),
                    used: replacement,
                };
                substitution.warn();
                substitutions.push(substitution);
                packages.push(found);
            }
        }
    }
    if !series_gone.is_empty() {
        let again = moved::resolve_again(archive, name, &locked.roots, release, only)
            .with_context(|| {
                format!(
                    "{} {} (locked in {}) has left the archive with its whole series",
                    series_gone[0].name,
                    series_gone[0].version,
                    lock_path.display()
                )
            })?;
        substitutions = moved::changes(&locked.packages, &again.packages);
        crate::progress::warn(moved::reresolved_warning(
            name,
            &series_gone,
            &substitutions,
            again.fell_back.as_ref(),
        ));
        packages = again.packages;
    }
    let resolved = ResolvedBundle {
        name: name.to_string(),
        packages,
        substitutions,
    };
    let key = locked.memo_key();
    if let Err(e) = archive
        .cache
        .write_memo(crate::cache::RESOLUTIONS_MEMO, &key, &resolved)
    {
        tracing::debug!("not remembering the resolution of {name}: {e:#}");
    }
    Ok(resolved)
}

/// Downloads and unpacks every package of a resolved bundle into `dest`.
pub(crate) fn unpack_bundle(archive: &Archive, bundle: &ResolvedBundle, dest: &Path) -> Result<()> {
    for deb in archive.download_many(&bundle.packages)? {
        extract_deb(&deb, dest)?;
    }
    Ok(())
}
