//! Whether root may use a cache directory. The lab runs QEMU, toolchains and kernels' build
//! scripts from its cache; as root, a cache that another user can write (or that sits in a
//! directory another user can rename entries of) would let that user run code as root. So as
//! root the cache and every directory above it must belong to root and be writable by no one
//! else (a sticky directory such as `/tmp` excepted: others cannot move root's entries there).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Refuses `root` (an existing directory) when this process is root and another user could
/// write it or a directory above it. Any other user's lab is their own business: nothing runs
/// with more rights than they have.
pub(super) fn check_root_may_use(root: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    check_for_root(root)
}

/// [`check_root_may_use`]'s test, whoever runs it.
fn check_for_root(root: &Path) -> Result<()> {
    let root = root
        .canonicalize()
        .with_context(|| format!("resolving cache dir {}", root.display()))?;
    for dir in root.ancestors() {
        let meta = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
        let mode = meta.mode();
        let sticky = mode & 0o1000 != 0;
        let why = if meta.uid() != 0 {
            Some(format!("belongs to uid {}", meta.uid()))
        } else if mode & 0o002 != 0 && !sticky {
            Some(format!(
                "is writable by every user (mode {:o})",
                mode & 0o7777
            ))
        } else if mode & 0o020 != 0 && meta.gid() != 0 && !sticky {
            Some(format!(
                "is writable by group {} (mode {:o})",
                meta.gid(),
                mode & 0o7777
            ))
        } else {
            None
        };
        if let Some(why) = why {
            bail!(
                "cache dir {}: {} {why}: as root the lab runs QEMU and build tools from its cache, \
                 so another user able to change it could run code as root; use a cache only root \
                 can write (LAB_CACHE_DIR, default ~/.cache/lab of root) or fix the owner and mode",
                root.display(),
                if dir == root { "it".to_string() } else { dir.display().to_string() },
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn as_root_a_cache_another_user_can_change_is_refused() {
        // SAFETY: as above.
        if unsafe { libc::geteuid() } != 0 {
            crate::skip::host_lacks(
                "a root-owned cache check",
                "not root: the check applies to root only, and chown needs root",
                "Run the unit tests as root (CI does).",
            );
            return;
        }
        let top = tempfile::tempdir().unwrap();
        let cache = top.path().join("lab");
        std::fs::create_dir(&cache).unwrap();
        check_for_root(&cache).unwrap();
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set(&cache, 0o777);
        let err = check_for_root(&cache).unwrap_err().to_string();
        assert!(
            err.contains(": it is writable by every user (mode 777)"),
            "{err}"
        );
        set(&cache, 0o755);
        // A parent another user owns could swap the cache for theirs.
        std::os::unix::fs::chown(top.path(), Some(65534), None).unwrap();
        let err = check_for_root(&cache).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{} belongs to uid 65534", top.path().display())),
            "{err}"
        );
        std::os::unix::fs::chown(top.path(), Some(0), None).unwrap();
        // A sticky world-writable parent (as /tmp) is fine.
        set(top.path(), 0o1777);
        check_for_root(&cache).unwrap();
    }
}
