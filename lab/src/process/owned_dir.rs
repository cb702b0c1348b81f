//! Directories the lab makes for a while outside its cache (a guest's scratch directory in the
//! temporary directory, apt's download directories in `/var/tmp`), and the sweep of those whose
//! lab died. A lab ended by SIGKILL cannot remove its directories (Ctrl-C and `kill` drop them:
//! `cli::main_with`), and they stayed for ever (72 on the development host one day; a killed
//! provisioning left apt's). Each holds `owner.lock`, locked by its lab while it lives; the first
//! such directory of a kind a process makes removes every one of that kind whose lock nobody
//! holds. A lock dies with its process, so a reused pid cannot keep a dead lab's directory alive.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

/// The lock a living lab holds in each of its directories.
pub(crate) const OWNER: &str = "owner.lock";

/// A directory this process owns, removed when dropped.
#[derive(Debug)]
pub(crate) struct OwnedDir {
    dir: tempfile::TempDir,
    _owner: File,
}

impl OwnedDir {
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A new directory `PREFIX*` under `parent`, owned by this process; the first time `swept`
/// runs, every `PREFIX*` there of a lab that died (and is this user's) is removed.
pub(crate) fn owned_dir(parent: &Path, prefix: &str, swept: &std::sync::Once) -> Result<OwnedDir> {
    swept.call_once(|| {
        let removed = sweep(parent, prefix);
        if removed > 0 {
            tracing::info!("removed {removed} {prefix}* dirs of labs that died");
        }
    });
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
    // Locked under another name, then renamed: a sweep never sees an owner lock not yet held.
    let pending = dir.path().join(".owner.pending");
    let owner = crate::cache::open_lock_file(&pending)?;
    owner
        .try_lock()
        .with_context(|| format!("locking {}", pending.display()))?;
    std::fs::rename(&pending, dir.path().join(OWNER))?;
    Ok(OwnedDir { dir, _owner: owner })
}

/// Removes every `PREFIX*` directory under `temp` that this user owns and whose owner lock
/// nobody holds; how many. Directories without one (of labs before the lock), links and other
/// users' are left.
fn sweep(temp: &Path, prefix: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(temp) else {
        return 0;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let named = entry.file_name().to_string_lossy().starts_with(prefix);
        let mine = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me);
        let ours = named && mine;
        let Ok(owner) = File::open(path.join(OWNER)) else {
            continue;
        };
        if ours && owner.try_lock().is_ok() && std::fs::remove_dir_all(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_directories_of_dead_labs_are_swept() {
        let temp = tempfile::tempdir().unwrap();
        let make = |name: &str| {
            let dir = temp.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            File::create(dir.join(OWNER)).unwrap();
            dir
        };
        let dead = make("lab-vm-dead");
        let live = make("lab-vm-live");
        // Another open of the file holds it, as a living lab's would.
        let holder = File::open(live.join(OWNER)).unwrap();
        holder.lock().unwrap();
        let old = temp.path().join("lab-vm-old");
        std::fs::create_dir(&old).unwrap();
        let other = make("not-the-lab");
        // Another user's (as root, where chown works): a dead lab's of theirs is theirs to sweep.
        let theirs = make("lab-vm-theirs");
        // SAFETY: geteuid has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        }
        assert_eq!(sweep(temp.path(), "lab-vm-"), if root { 1 } else { 2 });
        assert!(!dead.exists());
        assert!(live.exists() && old.exists() && other.exists());
        assert_eq!(theirs.exists(), root);
        drop(holder);
        assert_eq!(sweep(temp.path(), "lab-vm-"), 1);
        assert!(!live.exists());
    }
}
