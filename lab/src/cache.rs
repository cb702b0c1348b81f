//! The lab's content-addressed cache: toolchains, kernels and guest images, keyed by a hash of
//! every input. Entries appear atomically (built in a temp dir, then renamed into place) and a
//! per-key file lock keeps two tests, or two `cargo nextest` processes, from building the same key
//! twice or seeing a half-built entry.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

/// Root of the cache: `$LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/lab` (`~/.cache/lab`).
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// An exclusive lock on a cache key, released on drop (or when the process dies).
#[derive(Debug)]
pub struct CacheLock {
    _file: File,
}

impl Cache {
    pub fn from_env() -> Result<Cache> {
        let root = match std::env::var_os("LAB_CACHE_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => dirs::cache_dir()
                .context("no cache directory: set LAB_CACHE_DIR or HOME")?
                .join("lab"),
        };
        Cache::at(root)
    }

    pub fn at(root: impl Into<PathBuf>) -> Result<Cache> {
        let root = root.into();
        fs::create_dir_all(&root)
            .with_context(|| format!("creating cache dir {}", root.display()))?;
        Ok(Cache { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding all entries of one kind (`kernels`, `images`, `qemu`, ...).
    pub fn dir(&self, kind: &str) -> PathBuf {
        self.root.join(kind)
    }

    /// The complete entry for `key`, if one exists.
    pub fn lookup(&self, kind: &str, key: &str) -> Option<PathBuf> {
        let path = self.dir(kind).join(key);
        path.is_dir().then_some(path)
    }

    /// Takes an exclusive lock named `name` (blocking until it is free).
    pub fn lock(&self, name: &str) -> Result<CacheLock> {
        let dir = self.root.join(".locks");
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening lock {}", path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", path.display()))?;
        Ok(CacheLock { _file: file })
    }

    /// Returns the entry for `key`, building it first if needed. `build` fills a fresh temp dir;
    /// on success the dir is renamed into place, on failure it is removed and the cache is as it
    /// was. Concurrent callers for one key wait for the first and then reuse its entry.
    pub fn get_or_build(
        &self,
        kind: &str,
        key: &str,
        build: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<PathBuf> {
        if let Some(path) = self.lookup(kind, key) {
            return Ok(path);
        }
        let _lock = self.lock(&format!("{kind}-{key}"))?;
        if let Some(path) = self.lookup(kind, key) {
            return Ok(path);
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
        Ok(dest)
    }

    /// Removes staging leftovers of builds that died (only those nobody holds a lock on).
    pub fn remove_stale_staging(&self, kind: &str) -> Result<usize> {
        let staging = self.dir(kind).join(".staging");
        let Ok(entries) = fs::read_dir(&staging) else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let key = name.rsplit_once('-').map(|(k, _)| k).unwrap_or(&name);
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

/// A stable hex digest of labelled inputs. Labels are part of the hash, so moving bytes from one
/// input to the next changes the key.
pub fn hash_parts(parts: &[(&str, &[u8])]) -> String {
    let mut hasher = Sha256::new();
    for (label, bytes) in parts {
        hasher.update((label.len() as u64).to_le_bytes());
        hasher.update(label.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hex::encode(hasher.finalize())
}

/// The sha256 of a file, hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn failed_build_leaves_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path()).unwrap();
        let err = cache
            .get_or_build("things", "k1", |tmp| {
                fs::write(tmp.join("half"), b"x")?;
                anyhow::bail!("boom")
            })
            .unwrap_err();
        assert!(err.to_string().contains("boom"));
        assert!(cache.lookup("things", "k1").is_none());
        let staging: Vec<_> = fs::read_dir(cache.dir("things").join(".staging"))
            .unwrap()
            .collect();
        assert!(staging.is_empty(), "staging not cleaned: {staging:?}");
    }

    #[test]
    fn concurrent_requests_build_once() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::at(dir.path()).unwrap();
        let builds = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let cache = cache.clone();
                let builds = builds.clone();
                std::thread::spawn(move || {
                    cache
                        .get_or_build("things", "same", |tmp| {
                            builds.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(100));
                            fs::write(tmp.join("out"), b"done")?;
                            Ok(())
                        })
                        .unwrap()
                })
            })
            .collect();
        for t in threads {
            let path = t.join().unwrap();
            assert_eq!(fs::read(path.join("out")).unwrap(), b"done");
        }
        assert_eq!(builds.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn hash_depends_on_labels_and_boundaries() {
        let a = hash_parts(&[("a", b"xy"), ("b", b"z")]);
        let b = hash_parts(&[("a", b"x"), ("b", b"yz")]);
        let c = hash_parts(&[("a", b"xy"), ("c", b"z")]);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, hash_parts(&[("a", b"xy"), ("b", b"z")]));
    }
}
