//! The repository's lock file (`images/lock.toml`): named bundles of exact package versions,
//! read once per process while unchanged, written atomically, and `lab lock update`, which
//! resolves its bundles again against today's archive.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{moved, resolution_key, write_if_changed, Archive, PackageRef, DEFAULT_ARCHS};
use crate::cache::Cache;

/// The repo's lock file: named bundles of exact package versions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockFile {
    #[serde(default, rename = "bundle")]
    pub bundles: Vec<LockedBundle>,
}

/// A set of packages resolved together (e.g. QEMU and every library it loads).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockedBundle {
    pub name: String,
    /// What was asked for; the rest of `package` is their dependency closure.
    pub roots: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Keep only closure members whose names start with this (e.g. the versioned kernel image a
    /// metapackage points at, without the tools it drags in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<String>,
    /// The apt state's architectures, the native one first (`["arm64"]` for an aarch64
    /// guest's packages, `["amd64", "arm64"]` for the cross toolchain); empty: the host's
    /// ([`DEFAULT_ARCHS`]). Foreign-architecture packages are named `name:arch`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    #[serde(default, rename = "package")]
    pub packages: Vec<PackageRef>,
}

impl LockedBundle {
    /// The memo key of this entry's resolution ([`resolution_key`]): the key under which
    /// [`resolve_bundle`] records it and [`recorded_resolution`] finds it.
    /// Each locked package as (name, version), to look up in the archive.
    pub(super) fn wanted(&self) -> Vec<(String, String)> {
        self.packages
            .iter()
            .map(|p| (p.name.clone(), p.version.clone()))
            .collect()
    }

    pub(super) fn memo_key(&self) -> String {
        resolution_key(
            &self.name,
            &self.roots,
            self.release.as_deref(),
            self.only.as_deref(),
            &self.archs(),
            &self.packages,
        )
    }

    /// [`LockedBundle::architectures`] with the default filled in.
    pub(crate) fn archs(&self) -> Vec<&str> {
        if self.architectures.is_empty() {
            DEFAULT_ARCHS.to_vec()
        } else {
            self.architectures.iter().map(String::as_str).collect()
        }
    }
}

impl LockFile {
    /// The lock file of this checkout (`LAB_LOCK_FILE` overrides).
    pub(crate) fn default_path() -> PathBuf {
        std::env::var_os("LAB_LOCK_FILE")
            .map(PathBuf::from)
            .unwrap_or_else(|| crate::repo_path("images/lock.toml"))
    }

    /// The lock at `path` (empty when there is none). Parsed once per process while the file's
    /// `stat` is unchanged (and not racily new, see `cache::RACY_WINDOW`): a warm start reads it
    /// for QEMU, the kernel and every image bundle, and parsing its ~2,400 lines costs more than
    /// the rest of those lookups.
    pub(crate) fn load(path: &Path) -> Result<LockFile> {
        let meta = match fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LockFile::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        type Parsed = BTreeMap<PathBuf, (crate::cache::FileStat, LockFile)>;
        static PARSED: std::sync::Mutex<Parsed> = std::sync::Mutex::new(BTreeMap::new());
        let stat = crate::cache::FileStat::of(&meta);
        let mut parsed = PARSED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, lock)) = parsed.get(path) {
            if *seen == stat {
                return Ok(lock.clone());
            }
        }
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let lock: LockFile =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        // A file changed this instant could change again under the same `stat`.
        if !stat.is_racy(SystemTime::now()) {
            parsed.insert(path.to_path_buf(), (stat, lock.clone()));
        }
        Ok(lock)
    }

    pub(crate) fn save(&self, path: &Path) -> Result<()> {
        let header = "# Exact Debian package versions the lab uses. Written by `lab lock update`;\n\
                      # when a version leaves the archive the lab substitutes the newest of the same\n\
                      # upstream series, warns, and records it in each result.\n\n";
        let body = toml::to_string_pretty(self)?;
        write_if_changed(path, format!("{header}{body}").as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    pub(crate) fn bundle(&self, name: &str) -> Option<&LockedBundle> {
        self.bundles.iter().find(|b| b.name == name)
    }

    /// An error naming the lock at `path` and its bundles when `names` holds one it lacks.
    pub(crate) fn check_names(&self, path: &Path, names: &[String]) -> Result<()> {
        if let Some(unknown) = names.iter().find(|n| self.bundle(n).is_none()) {
            let known: Vec<&str> = self.bundles.iter().map(|b| b.name.as_str()).collect();
            bail!(
                "{}: no bundle {unknown:?}; the lock has {}",
                path.display(),
                known.join(", ")
            );
        }
        Ok(())
    }

    /// Replaces (or adds) a bundle.
    pub(crate) fn put(&mut self, bundle: LockedBundle) {
        self.bundles.retain(|b| b.name != bundle.name);
        self.bundles.push(bundle);
        self.bundles.sort_by(|a, b| a.name.cmp(&b.name));
    }
}

/// What `lab lock update` changed in the lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockUpdate {
    pub(crate) path: PathBuf,
    /// One line per changed package or bundle; empty: the lock was up to date.
    pub(crate) changes: Vec<String>,
}

/// `PATH: up to date`, or a line per change.
impl std::fmt::Display for LockUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.changes.is_empty() {
            writeln!(f, "{}: up to date", self.path.display())?;
        }
        for c in &self.changes {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

/// `lab lock update [BUNDLE...]`: the lock file (`LockFile::default_path`) re-resolved
/// against today's archive, through `cache`'s apt states; only the bundles named, when some
/// are (a kernel source's bundle moves every kernel key with it).
pub fn update_default_lock(cache: &Cache, bundles: &[String]) -> Result<LockUpdate> {
    let path = LockFile::default_path();
    LockFile::load(&path)?.check_names(&path, bundles)?;
    let changes = update_lock(&mut archives_of(cache), &path, bundles)?;
    Ok(LockUpdate { path, changes })
}

/// Opens the apt state of a set of architectures once and hands out clones after: `lab lock
/// update` and `lab lock check` go through every bundle, most on the host's architecture.
pub(super) fn archives_of(cache: &Cache) -> impl FnMut(&[&str]) -> Result<Archive> + '_ {
    let mut archives: BTreeMap<Vec<String>, Archive> = BTreeMap::new();
    move |archs: &[&str]| {
        let key: Vec<String> = archs.iter().map(|a| a.to_string()).collect();
        if let Some(a) = archives.get(&key) {
            return Ok(a.clone());
        }
        let archive = Archive::open_for(cache, archs)?;
        archives.insert(key, archive.clone());
        Ok(archive)
    }
}

/// Re-resolves the bundles named in `only` (all when empty) against today's archive, each
/// through the apt state of its architectures (`archive_for`).
fn update_lock(
    archive_for: &mut dyn FnMut(&[&str]) -> Result<Archive>,
    lock_path: &Path,
    only: &[String],
) -> Result<Vec<String>> {
    let mut lock = LockFile::load(lock_path)?;
    let mut changes = Vec::new();
    for bundle in lock.bundles.clone() {
        if !only.is_empty() && !only.contains(&bundle.name) {
            continue;
        }
        let archive = archive_for(&bundle.archs())?;
        let moved::InStep {
            packages,
            fell_back,
        } = moved::resolve_again(
            &archive,
            &bundle.name,
            &bundle.roots,
            bundle.release.as_deref(),
            bundle.only.as_deref(),
        )?;
        if let Some(f) = fell_back {
            changes.push(format!("{}: {f}", bundle.name));
        }
        for c in moved::changes(&bundle.packages, &packages) {
            changes.push(format!("{}: {}", bundle.name, moved::change_line(&c)));
        }
        lock.put(LockedBundle { packages, ..bundle });
    }
    lock.save(lock_path)?;
    Ok(changes)
}

/// Serializes read-modify-write of the lock file between threads of one process; processes
/// sharing a cache are serialized by the apt state's lock, which the `Archive` every resolution
/// takes holds. Others (another cache, another mirror) may lose an update, never tear the file.
pub(super) static LOCK_FILE_MUTEX: std::sync::Mutex<()> = std::sync::Mutex::new(());
