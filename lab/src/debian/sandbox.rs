//! apt's downloads as the unprivileged `_apt` user when the lab runs as root (issue W2): the
//! methods that parse what the network sends then cannot write where root can. apt drops to
//! `_apt` only where that user can reach the file it downloads into, and the lab's apt state
//! lives in its cache, whose parents (`/root`) `_apt` cannot traverse: there apt warns
//! "Download is performed unsandboxed as root" and goes on as root. So apt downloads into a
//! directory of its own under [`SANDBOX_PARENT`], and the lab takes the results into the cache
//! itself: lists once apt has verified their signatures, packages once the lab has checked the
//! copy it made against the lock's sha256.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Where the download directories go: on every Debian system, traversable by `_apt`, writable by
/// anyone, sticky (a directory made here under a random name is ours alone). Not `TMPDIR`,
/// which may sit under `/root`.
const SANDBOX_PARENT: &str = "/var/tmp";

/// The user apt's methods run as (Debian's default `APT::Sandbox::User`).
const APT_USER: &str = "_apt";

/// One apt call's download directory, removed when dropped, and by the next lab's first
/// sandbox when its lab was killed (`process::owned_dir`).
pub(super) struct Sandbox {
    dir: crate::process::OwnedDir,
    uid: u32,
}

impl Sandbox {
    /// A download directory for one apt call: `Some` when the lab runs as root and the system
    /// has `_apt`; `None` otherwise (apt run by another user cannot change user, and downloads
    /// as that user, into the cache).
    pub(super) fn new() -> Result<Option<Sandbox>> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        let Some(uid) = uid_of(APT_USER) else {
            return Ok(None);
        };
        static SWEPT: std::sync::Once = std::sync::Once::new();
        let dir = crate::process::owned_dir(Path::new(SANDBOX_PARENT), "lab-apt-", &SWEPT)
            .with_context(|| format!("making apt's download directory in {SANDBOX_PARENT}"))?;
        set_mode(dir.path(), 0o755)?;
        Ok(Some(Sandbox { dir, uid }))
    }

    /// The option that names the user apt's methods run as.
    pub(super) fn user_option() -> String {
        format!("APT::Sandbox::User={APT_USER}")
    }

    /// A lists directory for `apt-get update`, holding the current `lists`' files (so apt asks
    /// only for what changed), its `partial` owned by `_apt`. [`Sandbox::keep_lists`] takes it.
    pub(super) fn lists(&self, current: &Path) -> Result<PathBuf> {
        let lists = self.dir.path().join("lists");
        fs::create_dir(&lists)?;
        set_mode(&lists, 0o755)?;
        for entry in fs::read_dir(current)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                let to = lists.join(entry.file_name());
                // A hard link where both are on one file system (apt replaces a list by
                // renaming over it, never writes into it), else a copy.
                if fs::hard_link(entry.path(), &to).is_err() {
                    fs::copy(entry.path(), &to)?;
                }
            }
        }
        self.owned_by_apt(&lists.join("partial"))?;
        Ok(lists)
    }

    /// Replaces `current` with what `apt-get update` left in [`Sandbox::lists`]: every file
    /// apt verified and moved out of `partial`, written by root.
    pub(super) fn keep_lists(&self, current: &Path) -> Result<()> {
        let lists = self.dir.path().join("lists");
        let staged = current.with_extension("new");
        let _ = fs::remove_dir_all(&staged);
        fs::create_dir(&staged)?;
        for entry in fs::read_dir(&lists)? {
            let entry = entry?;
            let meta = fs::symlink_metadata(entry.path())?;
            if meta.is_file() && meta.uid() == 0 {
                let to = staged.join(entry.file_name());
                if fs::hard_link(entry.path(), &to).is_err() {
                    fs::copy(entry.path(), &to)?;
                }
            }
        }
        fs::create_dir_all(staged.join("partial"))?;
        let old = current.with_extension("old");
        let _ = fs::remove_dir_all(&old);
        fs::rename(current, &old)?;
        fs::rename(&staged, current)?;
        fs::remove_dir_all(&old)?;
        Ok(())
    }

    /// The directory `apt-get download` runs in, owned by `_apt`. What is found there is
    /// copied out before it is checked: `_apt` may still change it.
    pub(super) fn downloads(&self) -> Result<PathBuf> {
        let dir = self.dir.path().join("debs");
        self.owned_by_apt(&dir)?;
        Ok(dir)
    }

    /// Copies every `.deb` apt left in [`Sandbox::downloads`] into `dir` (a link is not
    /// followed, a file of another kind skipped): the copies are root's, the lab checks those.
    pub(super) fn take_debs(&self, dir: &Path) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        for entry in fs::read_dir(self.dir.path().join("debs"))? {
            let name = entry?.file_name();
            let Some(text) = name.to_str().filter(|n| n.ends_with(".deb")) else {
                continue;
            };
            let from = self.dir.path().join("debs").join(&name);
            let Ok(mut file) = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&from)
            else {
                continue;
            };
            if !file.metadata()?.is_file() {
                continue;
            }
            let part = dir.join(format!(".{text}.part"));
            let mut to = fs::File::create(&part)?;
            std::io::copy(&mut file, &mut to)
                .with_context(|| format!("copying {}", from.display()))?;
            fs::rename(&part, dir.join(&name))?;
        }
        Ok(())
    }

    fn owned_by_apt(&self, dir: &Path) -> Result<()> {
        fs::create_dir(dir)?;
        set_mode(dir, 0o700)?;
        std::os::unix::fs::chown(dir, Some(self.uid), None)
            .with_context(|| format!("giving {} to {APT_USER}", dir.display()))
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// The uid of `user` from the system's user database (what apt itself looks up).
pub(super) fn uid_of(user: &str) -> Option<u32> {
    let name = std::ffi::CString::new(user).ok()?;
    // SAFETY: passwd is plain data; getpwnam_r writes only into `pwd` and `buf` (whose length
    // it is given) and sets `result` to null or to `pwd`.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            name.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        );
        (rc == 0 && !result.is_null()).then_some(pwd.pw_uid)
    }
}
