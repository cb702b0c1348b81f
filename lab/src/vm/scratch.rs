//! A guest's private directory (sockets, device files, its device tree) in the temporary
//! directory: a directory the lab owns while it lives, swept by the next lab when it died
//! (`process::owned_dir`).

use anyhow::Result;

/// A guest's scratch directory, removed when dropped.
pub(crate) type Scratch = crate::process::OwnedDir;

/// A new scratch directory, owned by this process (and, the first time in a process, the
/// sweep of dead labs' ones).
pub(crate) fn scratch_dir() -> Result<Scratch> {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    crate::process::owned_dir(&std::env::temp_dir(), "lab-vm-", &SWEPT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn a_scratch_dir_is_held_while_it_lives_and_gone_after() {
        let scratch = scratch_dir().unwrap();
        let path = scratch.path().to_path_buf();
        let owner = File::open(path.join(crate::process::OWNER)).unwrap();
        assert!(owner.try_lock().is_err(), "held by its lab");
        drop(owner);
        drop(scratch);
        assert!(!path.exists());
    }
}
