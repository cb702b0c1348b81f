//! The lab's lock files (cache entries, CPU slots, the host's package installs). An advisory
//! lock is only as safe as who can open its file: `flock` needs no more than a read-only open,
//! so another local user able to open one could hold it and stop a root lab for ever. So a lock
//! file is created readable by its owner only and refused when someone else owns it, and a wait
//! on one says who holds it and ends after [`WAIT_MOST`] (`LAB_LOCK_WAIT_S`) with an error that
//! names the holder.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a lock is waited for unless `LAB_LOCK_WAIT_S` says otherwise: longer than any build
/// the lab makes on a 2-core host (a cold kernel, about 25 minutes).
pub const WAIT_MOST: Duration = Duration::from_secs(2 * 3600);

/// How often a wait says it still waits.
const WAIT_REPORT: Duration = Duration::from_secs(60);

/// Opens (creating, mode 0600) the lock file `path`; refused when another user owns it.
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening lock {}", path.display()))?;
    let meta = file.metadata()?;
    let me = effective_uid();
    if meta.uid() != me {
        bail!(
            "lock {} belongs to uid {}, not this user (uid {me}): another user could hold it \
             and stop the lab; remove it if that user has no lab running",
            path.display(),
            meta.uid()
        );
    }
    // One made before locks were the owner's alone (0644).
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("making lock {} its owner's alone", path.display()))?;
    }
    Ok(file)
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The longest wait: `LAB_LOCK_WAIT_S` seconds, else [`WAIT_MOST`].
pub(crate) fn wait_most() -> Duration {
    std::env::var("LAB_LOCK_WAIT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(WAIT_MOST, Duration::from_secs)
}

/// Takes `file`'s exclusive lock (`path`, for the messages; `what`: what holds it, for the
/// reader), waiting while another process holds it: said at once and every minute with the
/// holder, an error after `LAB_LOCK_WAIT_S` or [`WAIT_MOST`].
pub(crate) fn wait_for(file: &File, path: &Path, what: &str) -> Result<()> {
    wait_at_most(file, path, what, wait_most())
}

fn wait_at_most(file: &File, path: &Path, what: &str, limit: Duration) -> Result<()> {
    let started = Instant::now();
    let mut said: Option<Instant> = None;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
        let waited = started.elapsed();
        if waited >= limit {
            bail!(
                "{what}: lock {} still held after {}s by {}; set LAB_LOCK_WAIT_S to wait longer",
                path.display(),
                waited.as_secs(),
                holder(file).unwrap_or_else(|| "an unknown process".into())
            );
        }
        if said.is_none_or(|t| t.elapsed() >= WAIT_REPORT) {
            crate::progress::step(format!(
                "{what}: waiting for lock {} ({}, {}s so far)",
                path.display(),
                holder(file).unwrap_or_else(|| "holder unknown".into()),
                waited.as_secs()
            ));
            said = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(200).min(limit - waited));
    }
}

/// Who holds a lock on `file`, from `/proc/locks` (its device and inode): "pid N (command)".
fn holder(file: &File) -> Option<String> {
    let meta = file.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = holder_in(&locks, meta.dev(), meta.ino())?;
    let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .map(|c| c.replace('\0', " ").trim().to_string())
        .unwrap_or_default();
    Some(format!("pid {pid} ({command})"))
}

/// The pid that holds a lock on device `dev`, inode `ino` in the text of `/proc/locks`
/// (`1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; blocked waiters' lines, `->`, skipped).
fn holder_in(locks: &str, dev: u64, ino: u64) -> Option<u32> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&"->") {
            return None;
        }
        let pid: u32 = fields.get(4)?.parse().ok()?;
        let mut id = fields.get(5)?.split(':');
        let (ma, mi, i) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        same.then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_file_is_its_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.lock");
        let file = open_lock_file(&path).unwrap();
        let mode = |f: &File| f.metadata().unwrap().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        // One left readable by an older lab is made its owner's alone.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(mode(&open_lock_file(&path).unwrap()), 0o600);
        if effective_uid() == 0 {
            // Another user's file (as a local user would leave in a shared directory).
            std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
            let err = open_lock_file(&path).unwrap_err().to_string();
            assert!(err.contains("belongs to uid 65534, not this user"), "{err}");
        }
    }

    #[test]
    fn a_held_lock_is_waited_for_with_its_holder_named_then_given_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("entry.lock");
        let held = open_lock_file(&path).unwrap();
        held.lock().unwrap();
        // Another open file description conflicts with it, as another process's would.
        let mine = open_lock_file(&path).unwrap();
        let me = std::process::id();
        assert_eq!(
            holder(&mine).map(|h| h.starts_with(&format!("pid {me} ("))),
            Some(true)
        );
        let err = wait_at_most(&mine, &path, "building kernel x", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("building kernel x: lock "), "{err}");
        assert!(
            err.contains(&format!("still held after 1s by pid {me} (")),
            "{err}"
        );
        drop(held);
        wait_for(&mine, &path, "building kernel x").unwrap();
    }

    #[test]
    fn the_holder_is_read_from_proc_locks() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 77 08:01:1234 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 99 fd:00:555 0 EOF\n";
        let dev = libc::makedev(8, 1);
        assert_eq!(holder_in(locks, dev, 1234), Some(4242));
        assert_eq!(holder_in(locks, libc::makedev(0xfd, 0), 555), Some(99));
        assert_eq!(holder_in(locks, dev, 9), None);
    }
}
