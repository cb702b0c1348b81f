//! A guest's private directory (sockets, device files, its device tree) in the temporary
//! directory, and the sweep of those whose lab died. A lab ended by SIGKILL cannot remove its
//! directories (Ctrl-C and `kill` drop them: `cli::main_with`), and they stayed for ever (72 on
//! the development host one day). Each holds `owner.lock`, locked by its lab while it lives;
//! the first guest of a process removes every `lab-vm-*` whose lock nobody holds. A lock dies
//! with its process, so a reused pid cannot keep a dead lab's directory alive.

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};

/// The lock a living lab holds in each of its scratch directories.
const OWNER: &str = "owner.lock";

/// A guest's scratch directory, removed when dropped.
#[derive(Debug)]
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
    _owner: File,
}

impl Scratch {
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A new scratch directory, owned by this process (and, the first time in a process, the
/// sweep of dead labs' ones).
pub(crate) fn scratch_dir() -> Result<Scratch> {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let removed = sweep(&std::env::temp_dir());
        if removed > 0 {
            tracing::info!("removed {removed} scratch dirs of labs that died");
        }
    });
    let dir = tempfile::Builder::new().prefix("lab-vm-").tempdir()?;
    // Locked under another name, then renamed: a sweep never sees an owner lock not yet held.
    let pending = dir.path().join(".owner.pending");
    let owner = crate::cache::open_lock_file(&pending)?;
    owner
        .try_lock()
        .with_context(|| format!("locking {}", pending.display()))?;
    std::fs::rename(&pending, dir.path().join(OWNER))?;
    Ok(Scratch { dir, _owner: owner })
}

/// Removes every `lab-vm-*` directory under `temp` whose owner lock nobody holds; how many.
/// Directories without one (of labs before the lock, or of other users) are left.
fn sweep(temp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry.file_name().to_string_lossy().starts_with("lab-vm-");
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
        assert_eq!(sweep(temp.path()), 1);
        assert!(!dead.exists());
        assert!(live.exists() && old.exists() && other.exists());
        drop(holder);
        assert_eq!(sweep(temp.path()), 1);
        assert!(!live.exists());
    }

    #[test]
    fn a_scratch_dir_is_held_while_it_lives_and_gone_after() {
        let scratch = scratch_dir().unwrap();
        let path = scratch.path().to_path_buf();
        let owner = File::open(path.join(OWNER)).unwrap();
        assert!(owner.try_lock().is_err(), "held by its lab");
        drop(owner);
        drop(scratch);
        assert!(!path.exists());
    }
}
