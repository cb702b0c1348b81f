//! A cache of a test's own for the stand-ins it makes (fake packages, kernels, archives,
//! registry entries), sharing the user's finished entries of every other kind. A stand-in never
//! enters the user's cache, so no test can break another test's entries or the user's, and it
//! goes with the test's temporary directory, pass or fail.

use std::fs;
use std::path::Path;

/// A temporary cache (for `LAB_CACHE_DIR` or [`lab::cache::Cache::at`]) in which every
/// top-level directory of the user's cache is a link to it, but:
/// - the kinds in `own` (top-level names), empty here: what the lab builds of them stays here;
/// - the paths in `copied` (`memo`, `memo/resolved-bundles`), copied: the lab reads the user's
///   answers and writes its own here.
///
/// `.locks` is linked too: a lab on this cache sweeps the staging dirs of the linked kinds whose
/// locks are free, so it must see the user's locks (a live build's, a push's).
pub fn own_cache(own: &[&str], copied: &[&str]) -> tempfile::TempDir {
    let user = lab::cache::Cache::from_env().unwrap();
    let dir = tempfile::Builder::new()
        .prefix("lab-test-cache-")
        .tempdir()
        .unwrap();
    assert!(
        own.iter().all(|k| !k.contains('/')),
        "own kinds are top-level: {own:?}"
    );
    share(user.root(), dir.path(), Path::new(""), own, copied);
    for kind in own.iter().chain(copied) {
        fs::create_dir_all(dir.path().join(kind)).unwrap();
    }
    dir
}

/// Fills `to`/`rel` from `from`/`rel`: links, own empty dirs and copies as [`own_cache`] says.
fn share(from: &Path, to: &Path, rel: &Path, own: &[&str], copied: &[&str]) {
    let (src, dst) = (from.join(rel), to.join(rel));
    fs::create_dir_all(&dst).unwrap();
    for entry in fs::read_dir(&src).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let path = rel.join(&name);
        let text = path.to_string_lossy();
        let hidden = name.to_string_lossy().starts_with('.');
        if own.contains(&text.as_ref()) || (hidden && text != ".locks") {
            continue;
        }
        if copied.contains(&text.as_ref()) {
            copy_tree(&entry.path(), &to.join(&path));
        } else if copied.iter().any(|c| Path::new(c).starts_with(&path)) {
            share(from, to, &path, own, copied);
        } else {
            std::os::unix::fs::symlink(entry.path(), to.join(&path)).unwrap();
        }
    }
}

/// Copies directory `from` into `to`: its plain files and folders (memos hold nothing else).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).into_iter().flatten().flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest);
        } else if kind.is_file() {
            // A memo replaced at this moment may be gone already: the lab recomputes it.
            fs::copy(entry.path(), dest).ok();
        }
    }
}
