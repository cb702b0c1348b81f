//! The lab's content-addressed cache: toolchains, kernels and guest images, keyed by a hash of
//! every input. Entries appear atomically (built in a temp dir, then renamed into place) and a
//! per-key file lock keeps two tests, or two `cargo nextest` processes, from building the same key
//! twice or seeing a half-built entry.
//!
//! Memos (`<cache>/memo/<kind>/<key>.json`) remember answers that are expensive to recompute and
//! whose inputs are known by a key: a file's sha256 by its `stat`, a bundle's resolution by its
//! lock entry, QEMU's version by its digest. The warm path reads them instead of hashing or
//! asking apt again; a missing or unreadable memo only means recomputing.
//!
//! With `LAB_CACHE_REMOTE=oci://HOST[:PORT]/REPO` every lookup is local first, then the
//! registry ([`remote`]: the entry pulled into staging, every file verified, then renamed into
//! place under the same lock as a build), then a build. A remote that fails is said once
//! through the reporter and the entry is built here. Pushes happen only when asked:
//! [`push_entries`] (`lab cache push`) or `LAB_CACHE_PUSH=1` after each build. The memos that
//! name entries ([`SHARED_MEMOS`]: bundles' resolutions) travel the same way, so a fresh cache
//! finds a guest image or QEMU on the registry without asking apt first.

mod artifact;
pub mod lock;
pub(crate) use lock::open_lock_file;
pub mod remote;
mod trust;

use std::fs::{self, File};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Root of the cache: `$LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/lab` (`~/.cache/lab`).
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    /// The registry behind the local cache (`LAB_CACHE_REMOTE`), if any.
    remote: Option<Arc<remote::Remote>>,
    /// Push every entry this process builds (`LAB_CACHE_PUSH=1`).
    push_built: bool,
}

/// Set to `1` to push each entry to the remote after it was built (trusted main-branch CI).
pub(crate) const PUSH_ENV: &str = "LAB_CACHE_PUSH";

/// Memo kinds the remote carries beside the entries: answers another machine needs before it
/// can name an entry. A guest image's or QEMU's key hashes its bundle's resolution; without it
/// a fresh cache opens the private apt state (lists fetched, a Debian mirror reachable) only to
/// work out the key of an entry the registry already holds.
pub(crate) const SHARED_MEMOS: &[&str] = &[RESOLUTIONS_MEMO];

/// Memo kind of Debian bundles' resolutions (written by `debian`, which names it here: the
/// cache knows which memos travel, not what they hold).
pub(crate) const RESOLUTIONS_MEMO: &str = "resolved-bundles";

/// The one file of a memo's artifact.
const MEMO_FILE: &str = "memo.json";

/// Says that `what` came from the remote, and how long it took.
fn say_pulled(remote: &remote::Remote, what: &str, started: std::time::Instant) {
    crate::progress::step(format!(
        "pulled {what} from {} in {:.1} s",
        remote.url(),
        started.elapsed().as_secs_f64()
    ));
}

/// On the registry, memo `kind`/`key` is entry `memo.<kind>`/`key` (tag
/// `memo.resolved-bundles-<key>`), apart from every entry kind.
fn remote_memo_kind(kind: &str) -> String {
    format!("memo.{kind}")
}

/// An exclusive lock on a cache key, released on drop (or when the process dies).
#[derive(Debug)]
pub(crate) struct CacheLock {
    _file: File,
}

impl Cache {
    /// The cache `LAB_CACHE_DIR` names (default `~/.cache/lab`), with the registry
    /// `LAB_CACHE_REMOTE` names behind it; the first call in a process removes staging
    /// directories of builds that died.
    pub fn from_env() -> Result<Cache> {
        let root = match std::env::var_os("LAB_CACHE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => dirs::cache_dir()
                .context("no cache directory: set LAB_CACHE_DIR or HOME")?
                .join("lab"),
        };
        let mut cache = Cache::at(root)?;
        cache.remote = remote::Remote::from_env()?.map(Arc::new);
        cache.push_built = std::env::var(PUSH_ENV).is_ok_and(|v| v == "1");
        if cache.push_built && cache.remote.is_none() {
            anyhow::bail!(
                "{PUSH_ENV}=1 needs {} to name a registry",
                remote::REMOTE_ENV
            );
        }
        // Once per process: a lab killed mid-build left its staging dirs behind.
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| match cache.remove_all_stale_staging() {
            Ok(0) => {}
            Ok(n) => tracing::info!("removed {n} staging dirs of builds that died"),
            Err(e) => tracing::warn!("could not sweep stale staging dirs: {e:#}"),
        });
        Ok(cache)
    }

    /// The cache at `root`, created if missing (a test's own, say).
    pub fn at(root: impl Into<PathBuf>) -> Result<Cache> {
        let root = root.into();
        fs::create_dir_all(&root)
            .with_context(|| format!("creating cache dir {}", root.display()))?;
        trust::check_root_may_use(&root)?;
        Ok(Cache {
            root,
            remote: None,
            push_built: false,
        })
    }

    /// The cache's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding all entries of one kind (`kernels`, `images`, `qemu`, ...).
    pub fn dir(&self, kind: &str) -> PathBuf {
        self.root.join(kind)
    }

    /// The complete entry for `key`: local, else pulled from the remote (if one is set and
    /// holds it). A remote that fails is reported and `None` returned: the caller builds.
    pub(crate) fn lookup(&self, kind: &str, key: &str) -> Option<PathBuf> {
        if let Some(path) = self.lookup_local(kind, key) {
            return Some(path);
        }
        let remote = self.remote.as_ref()?;
        let _lock = match self.lock(&format!("{kind}-{key}")) {
            Ok(lock) => lock,
            Err(e) => {
                crate::progress::warn(format!("not asking {}: {e:#}", remote.url()));
                return None;
            }
        };
        self.lookup_local(kind, key)
            .or_else(|| self.pull_locked(remote, kind, key))
    }

    /// The complete entry for `key` in the local cache only.
    pub(crate) fn lookup_local(&self, kind: &str, key: &str) -> Option<PathBuf> {
        let path = self.dir(kind).join(key);
        path.is_dir().then_some(path)
    }

    /// Pulls `kind`/`key` into staging and renames it into place; the caller holds its lock.
    /// Any failure is reported (the entry is then built here) and leaves nothing behind.
    fn pull_locked(&self, remote: &remote::Remote, kind: &str, key: &str) -> Option<PathBuf> {
        if remote.unusable().is_some() {
            return None;
        }
        let what = remote::entry_name(kind, key);
        let pulled = (|| -> Result<Option<PathBuf>> {
            let (tmp, scratch) = self.staging_pair(kind, key)?;
            let started = std::time::Instant::now();
            match remote.pull(kind, key, tmp.path(), scratch.path()) {
                Ok(false) => Ok(None),
                Ok(true) => {
                    let dest = self.dir(kind).join(key);
                    fs::rename(tmp.keep(), &dest)
                        .with_context(|| format!("moving {} into the cache", dest.display()))?;
                    say_pulled(remote, &what, started);
                    Ok(Some(dest))
                }
                Err(failure) => Err(failure.into_error()),
            }
        })();
        match pulled {
            Ok(found) => found,
            Err(e) => {
                crate::progress::warn(format!("{e:#}; building {what} here instead"));
                None
            }
        }
    }

    /// A staging dir for an entry and a scratch dir beside it (downloads, packed layers), both
    /// named `<key>-<random>` so a dead process's are swept like a build's.
    fn staging_pair(
        &self,
        kind: &str,
        key: &str,
    ) -> Result<(tempfile::TempDir, tempfile::TempDir)> {
        let staging = self.dir(kind).join(".staging");
        fs::create_dir_all(&staging)?;
        let make = || {
            tempfile::Builder::new()
                .prefix(&format!("{key}-"))
                .tempdir_in(&staging)
        };
        Ok((make()?, make()?))
    }

    /// Fetches optional layer `layer` (a kernel's `tree`) of the local entry `kind`/`key` from
    /// the remote into the entry, if the entry lacks it and the remote has it. Takes the key's
    /// lock. Returns whether the layer is there now; failures are reported, not returned.
    pub(crate) fn fetch_layer(&self, kind: &str, key: &str, layer: &str) -> bool {
        let Some(entry) = self.lookup_local(kind, key) else {
            return false;
        };
        if entry.join(layer).exists() {
            return true;
        }
        let Some(remote) = self.remote.as_ref().filter(|r| r.unusable().is_none()) else {
            return false;
        };
        let what = remote::entry_name(kind, key);
        let fetched = (|| -> Result<bool> {
            let _lock = self.lock(&format!("{kind}-{key}"))?;
            if entry.join(layer).exists() {
                return Ok(true);
            }
            let (tmp, scratch) = self.staging_pair(kind, key)?;
            let started = std::time::Instant::now();
            match remote.pull_optional(kind, key, layer, tmp.path(), scratch.path()) {
                Ok(false) => Ok(false),
                Ok(true) => {
                    fs::rename(tmp.path().join(layer), entry.join(layer))?;
                    say_pulled(remote, &format!("{what}'s {layer}"), started);
                    Ok(true)
                }
                Err(failure) => Err(failure.into_error()),
            }
        })();
        match fetched {
            Ok(there) => there,
            Err(e) => {
                crate::progress::warn(format!("{e:#}; going on without {what}'s {layer}"));
                false
            }
        }
    }

    /// Pushes the local entry `kind`/`key` to the remote, unless its tag exists there.
    pub fn push(&self, kind: &str, key: &str) -> Result<remote::Pushed> {
        let remote = self
            .remote
            .as_ref()
            .with_context(|| format!("no cache remote: set {}", remote::REMOTE_ENV))?;
        let _lock = self.lock(&format!("{kind}-{key}"))?;
        self.push_locked(remote, kind, key)
    }

    fn push_locked(
        &self,
        remote: &remote::Remote,
        kind: &str,
        key: &str,
    ) -> Result<remote::Pushed> {
        let entry = self
            .lookup_local(kind, key)
            .with_context(|| format!("no cache entry {kind}/{key} in {}", self.root.display()))?;
        let (_unused, scratch) = self.staging_pair(kind, key)?;
        remote
            .push(kind, key, &entry, scratch.path())
            .map_err(remote::Failure::into_error)
    }

    /// Takes an exclusive lock named `name` (blocking until it is free).
    pub(crate) fn lock(&self, name: &str) -> Result<CacheLock> {
        let dir = self.root.join(".locks");
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.lock"));
        let file = open_lock_file(&path)?;
        lock::wait_for(&file, &path, &format!("cache entry {name}"))?;
        Ok(CacheLock { _file: file })
    }

    /// Returns the entry for `key`, building it first if needed. `build` fills a fresh temp dir;
    /// on success the dir is renamed into place, on failure it is removed and the cache is as it
    /// was. Concurrent callers for one key wait for the first and then reuse its entry.
    pub(crate) fn get_or_build(
        &self,
        kind: &str,
        key: &str,
        build: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<PathBuf> {
        if let Some(path) = self.lookup_local(kind, key) {
            return Ok(path);
        }
        let _lock = self.lock(&format!("{kind}-{key}"))?;
        if let Some(path) = self.lookup_local(kind, key) {
            return Ok(path);
        }
        if let Some(remote) = &self.remote {
            if let Some(path) = self.pull_locked(remote, kind, key) {
                return Ok(path);
            }
        }
        let staging = self.dir(kind).join(".staging");
        fs::create_dir_all(&staging)?;
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{key}-"))
            .tempdir_in(&staging)?;
        build(tmp.path())?;
        let dest = self.dir(kind).join(key);
        let built = tmp.keep();
        fs::rename(&built, &dest)
            .with_context(|| format!("moving {} into the cache", dest.display()))?;
        if let Some(remote) = self.remote.as_ref().filter(|_| self.push_built) {
            // A failed push never fails the build: the entry is here, the next push retries.
            let what = remote::entry_name(kind, key);
            match self.push_locked(remote, kind, key) {
                Ok(pushed) => crate::progress::step(format!("{what}: {pushed}")),
                Err(e) => crate::progress::warn(format!("{what} not pushed: {e:#}")),
            }
        }
        Ok(dest)
    }

    /// The memo `key` of `kind`, if one was written and still parses; a [`SHARED_MEMOS`] kind
    /// missing here is pulled from the remote (if one is set and holds it) and kept.
    pub(crate) fn read_memo<T: DeserializeOwned>(&self, kind: &str, key: &str) -> Option<T> {
        let path = self.memo_path(kind, key);
        if let Ok(text) = fs::read(&path) {
            return serde_json::from_slice(&text).ok();
        }
        if !SHARED_MEMOS.contains(&kind) {
            return None;
        }
        let text = self.pull_memo(kind, key)?;
        let what = remote::entry_name(&remote_memo_kind(kind), key);
        let value = match serde_json::from_slice(&text) {
            Ok(value) => value,
            Err(e) => {
                crate::progress::warn(format!(
                    "{what} from the cache remote does not parse ({e}); working it out here instead"
                ));
                return None;
            }
        };
        if let Err(e) = self.write_memo_file(kind, key, &text) {
            tracing::debug!("not keeping {what}: {e:#}");
        }
        Some(value)
    }

    /// Pulls memo `kind`/`key` from the remote: its file's bytes, verified like an entry's.
    /// `None` without a usable remote, when it lacks the memo, or on a failure (said).
    fn pull_memo(&self, kind: &str, key: &str) -> Option<Vec<u8>> {
        let remote = self.remote.as_ref().filter(|r| r.unusable().is_none())?;
        let remote_kind = remote_memo_kind(kind);
        let what = remote::entry_name(&remote_kind, key);
        let pulled = (|| -> Result<Option<Vec<u8>>> {
            // One small file: temp dirs of this process, not the cache's staging.
            let dest = tempfile::tempdir()?;
            let scratch = tempfile::tempdir()?;
            let started = std::time::Instant::now();
            match remote.pull(&remote_kind, key, dest.path(), scratch.path()) {
                Ok(false) => Ok(None),
                Ok(true) => {
                    let file = dest.path().join(MEMO_FILE);
                    let text = fs::read(&file).with_context(|| {
                        format!("{what} on {}: no {MEMO_FILE} in it", remote.url())
                    })?;
                    say_pulled(remote, &what, started);
                    Ok(Some(text))
                }
                Err(failure) => Err(failure.into_error()),
            }
        })();
        match pulled {
            Ok(text) => text,
            Err(e) => {
                crate::progress::warn(format!("{e:#}; working {what} out here instead"));
                None
            }
        }
    }

    /// Writes memo `key` of `kind` atomically (a concurrent reader sees the old one or the new
    /// one, never half of it).
    /// With `LAB_CACHE_PUSH=1`, a [`SHARED_MEMOS`] kind is pushed after it is written (a failed
    /// push is said, never returned).
    pub(crate) fn write_memo<T: Serialize>(&self, kind: &str, key: &str, value: &T) -> Result<()> {
        self.write_memo_file(kind, key, &serde_json::to_vec(value)?)?;
        if self.push_built && SHARED_MEMOS.contains(&kind) {
            let what = remote::entry_name(&remote_memo_kind(kind), key);
            match self.push_memo(kind, key) {
                Ok(pushed) => crate::progress::step(format!("{what}: {pushed}")),
                Err(e) => crate::progress::warn(format!("{what} not pushed: {e:#}")),
            }
        }
        Ok(())
    }

    fn write_memo_file(&self, kind: &str, key: &str, text: &[u8]) -> Result<()> {
        let path = self.memo_path(kind, key);
        let dir = path.parent().expect("memo paths have a parent");
        fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut tmp, text)?;
        tmp.persist(&path)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }

    /// Pushes memo `kind`/`key` (a [`SHARED_MEMOS`] kind) to the remote as entry
    /// `memo.<kind>`/`key` holding one file, unless its tag exists there.
    pub fn push_memo(&self, kind: &str, key: &str) -> Result<remote::Pushed> {
        let remote = self
            .remote
            .as_ref()
            .with_context(|| format!("no cache remote: set {}", remote::REMOTE_ENV))?;
        let path = self.memo_path(kind, key);
        let entry = tempfile::tempdir()?;
        let scratch = tempfile::tempdir()?;
        fs::copy(&path, entry.path().join(MEMO_FILE))
            .with_context(|| format!("no memo {kind}/{key}: reading {}", path.display()))?;
        remote
            .push(&remote_memo_kind(kind), key, entry.path(), scratch.path())
            .map_err(remote::Failure::into_error)
    }

    /// The keys of the memos of `kind`, sorted.
    pub(crate) fn memos(&self, kind: &str) -> Result<Vec<String>> {
        let Ok(dir) = fs::read_dir(self.root.join("memo").join(kind)) else {
            return Ok(Vec::new());
        };
        let mut keys: Vec<String> = dir
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_string)
            })
            .collect();
        keys.sort();
        Ok(keys)
    }

    fn memo_path(&self, kind: &str, key: &str) -> PathBuf {
        self.root
            .join("memo")
            .join(kind)
            .join(format!("{key}.json"))
    }

    /// The sha256 of a file, hex, remembered by the file's `stat` (device, inode, size, mtime,
    /// ctime): a file whose `stat` is unchanged is not read again. A file changed within the last
    /// [`RACY_WINDOW`] is hashed but not remembered, since a write in the same clock tick would
    /// leave its `stat` unchanged (git's "racily clean" case).
    pub(crate) fn file_sha256(&self, path: &Path) -> Result<String> {
        let meta = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let stat = FileStat::of(&meta);
        let key = hash_parts(&[("path", path.as_os_str().as_encoded_bytes())])[..24].to_string();
        if let Some(memo) = self.read_memo::<DigestMemo>("sha256", &key) {
            if memo.stat == stat {
                return Ok(memo.sha256);
            }
        }
        let sha256 = sha256_file(path)?;
        if !stat.is_racy(SystemTime::now()) {
            let memo = DigestMemo {
                path: path.to_path_buf(),
                stat,
                sha256: sha256.clone(),
            };
            if let Err(e) = self.write_memo("sha256", &key, &memo) {
                tracing::debug!("not remembering the digest of {}: {e:#}", path.display());
            }
        }
        Ok(sha256)
    }

    /// The kinds that hold entries: every directory with a `.staging` (each build and pull
    /// makes one), so a new kind needs no list.
    pub(crate) fn kinds(&self) -> Result<Vec<String>> {
        let mut kinds = Vec::new();
        for entry in fs::read_dir(&self.root)?.flatten() {
            let kind = entry.file_name().to_string_lossy().into_owned();
            if !kind.starts_with('.') && entry.path().join(".staging").is_dir() {
                kinds.push(kind);
            }
        }
        kinds.sort();
        Ok(kinds)
    }

    /// The keys of the complete entries of `kind`, sorted.
    pub(crate) fn entries(&self, kind: &str) -> Result<Vec<String>> {
        let Ok(dir) = fs::read_dir(self.dir(kind)) else {
            return Ok(Vec::new());
        };
        let mut keys: Vec<String> = dir
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|k| !k.starts_with('.'))
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// [`Cache::remove_stale_staging`] for every kind (kernels, images, QEMU, ...).
    pub(crate) fn remove_all_stale_staging(&self) -> Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(&self.root)?.flatten() {
            let kind = entry.file_name().to_string_lossy().into_owned();
            if !kind.starts_with('.') && entry.path().join(".staging").is_dir() {
                removed += self.remove_stale_staging(&kind)?;
            }
        }
        Ok(removed)
    }

    /// Removes staging leftovers of builds that died (only those nobody holds a lock on).
    pub(crate) fn remove_stale_staging(&self, kind: &str) -> Result<usize> {
        let staging = self.dir(kind).join(".staging");
        let Ok(entries) = fs::read_dir(&staging) else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<key>-<random>` from `get_or_build`, `.gc-<key>` from `kernel::gc`.
            let key = match name.strip_prefix(".gc-") {
                Some(key) => key,
                None => name.rsplit_once('-').map(|(k, _)| k).unwrap_or(&name),
            };
            let lock_path = self.root.join(".locks").join(format!("{kind}-{key}.lock"));
            let free = match File::options().write(true).open(&lock_path) {
                Ok(f) => f.try_lock().is_ok(),
                Err(_) => true,
            };
            if free {
                fs::remove_dir_all(entry.path()).ok();
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// `lab cache push`: entry `KIND/KEY` (a unique key prefix will do; a [`SHARED_MEMOS`] kind
/// names a memo), or every entry and shared memo with `None`. Tags already on the registry are
/// left alone and said so; an entry that fails does not stop the others, and the error lists
/// every outcome.
pub fn push_entries(cache: &Cache, entry: Option<&str>) -> Result<PushReport> {
    let mut wanted = Vec::new();
    match entry {
        Some(spec) => {
            let (kind, prefix) = spec
                .split_once('/')
                .with_context(|| format!("{spec:?}: name an entry as KIND/KEY"))?;
            let keys = if SHARED_MEMOS.contains(&kind) {
                cache.memos(kind)?
            } else {
                cache.entries(kind)?
            };
            let keys: Vec<String> = keys.into_iter().filter(|k| k.starts_with(prefix)).collect();
            match keys.as_slice() {
                [key] => wanted.push((kind.to_string(), key.clone())),
                [] => anyhow::bail!("no cache entry {spec} in {}", cache.root.display()),
                _ => anyhow::bail!(
                    "{spec} matches {} entries: give more of the key",
                    keys.len()
                ),
            }
        }
        None => {
            for kind in cache.kinds()? {
                for key in cache.entries(&kind)? {
                    wanted.push((kind.clone(), key));
                }
            }
            for kind in SHARED_MEMOS {
                for key in cache.memos(kind)? {
                    wanted.push((kind.to_string(), key));
                }
            }
        }
    }
    let mut report = PushReport::default();
    for (kind, key) in wanted {
        let started = std::time::Instant::now();
        let (outcome, name) = if SHARED_MEMOS.contains(&kind.as_str()) {
            (
                cache.push_memo(&kind, &key),
                remote::entry_name(&remote_memo_kind(&kind), &key),
            )
        } else {
            (cache.push(&kind, &key), remote::entry_name(&kind, &key))
        };
        report.entries.push((
            name,
            outcome.map_err(|e| format!("{e:#}")),
            started.elapsed(),
        ));
    }
    let failed = report.entries.iter().filter(|e| e.1.is_err()).count();
    if failed > 0 {
        anyhow::bail!(
            "{report}\n{failed} of {} entries not pushed",
            report.entries.len()
        );
    }
    Ok(report)
}

/// What [`push_entries`] did, one line per entry.
#[derive(Debug, Default)]
pub struct PushReport {
    entries: Vec<(
        String,
        std::result::Result<remote::Pushed, String>,
        Duration,
    )>,
}

impl std::fmt::Display for PushReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (what, outcome, took) in &self.entries {
            match outcome {
                Ok(pushed) => writeln!(f, "{what}: {pushed} ({:.1} s)", took.as_secs_f64())?,
                Err(e) => writeln!(f, "{what}: error: {e}")?,
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for remote::Pushed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mb = |b: u64| b as f64 / 1e6;
        match self {
            remote::Pushed::AlreadyThere => {
                write!(
                    f,
                    "already on the registry, left alone (tags are never overwritten)"
                )
            }
            remote::Pushed::Uploaded {
                layers,
                entry_bytes,
            } => {
                let layers: Vec<String> = layers
                    .iter()
                    .map(|(name, size)| format!("{name} {:.1} MB", mb(*size)))
                    .collect();
                write!(
                    f,
                    "pushed {:.1} MB of files as {}",
                    mb(*entry_bytes),
                    layers.join(", ")
                )
            }
        }
    }
}

/// How recently a file may have changed for its `stat` not to be trusted as its identity.
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(2);

/// What `stat` says about a file's identity and last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileStat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl FileStat {
    pub(crate) fn of(meta: &fs::Metadata) -> FileStat {
        FileStat {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            ctime_ns: meta.ctime() as i128 * 1_000_000_000 + meta.ctime_nsec() as i128,
        }
    }

    /// Whether the file changed so recently (or in the future) that another write could still
    /// land with the same timestamps.
    pub(crate) fn is_racy(&self, now: SystemTime) -> bool {
        let now_ns = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let newest = self.mtime_ns.max(self.ctime_ns);
        now_ns - newest < RACY_WINDOW.as_nanos() as i128
    }
}

/// A remembered file digest.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DigestMemo {
    path: PathBuf,
    stat: FileStat,
    sha256: String,
}

/// A stable hex digest of labelled inputs. Labels are part of the hash, so moving bytes from one
/// input to the next changes the key.
pub(crate) fn hash_parts(parts: &[(&str, &[u8])]) -> String {
    let mut hasher = Sha256::new();
    for (label, bytes) in parts {
        hasher.update((label.len() as u64).to_le_bytes());
        hasher.update(label.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hex::encode(hasher.finalize())
}

/// The mode bits a file or directory the lab unpacks keeps: no setuid, setgid or sticky bit and
/// nothing world-writable. The lab often runs as root and its cache, bundles and registry
/// entries are read by others: a setuid-root `passwd` from a Debian package, or a bundle's
/// crafted file, must not be handed on (issue W2).
pub(crate) const KEPT_MODE: u32 = 0o775;

/// Clears the bits [`KEPT_MODE`] drops on every file and directory under `root` (symlinks are
/// neither followed nor changed); returns how many it changed.
pub(crate) fn drop_special_bits(root: &Path) -> Result<u64> {
    let mut changed = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta =
            fs::symlink_metadata(&path).with_context(|| format!("reading {}", path.display()))?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode() & 0o7777;
        if mode & !KEPT_MODE != 0 {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode & KEPT_MODE))
                .with_context(|| format!("clearing the special bits of {}", path.display()))?;
            changed += 1;
        }
        if meta.is_dir() {
            for entry in fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(changed)
}

/// The sha256 of a file, hex.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests;
