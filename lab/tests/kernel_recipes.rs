//! `lab kernel build` killed during make, from outside as a user runs it: the binary on a tiny
//! fake kernel source (`lab/tests/fixtures/fake-kernel`, whose Makefile hangs in a child of its
//! own while the file `HANG_PATH` exists), a cache and recipes of the test's own. The build logic
//! itself is tested in the library (`lab/src/kernel/tests.rs`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

include!("fixtures/fake-kernel/tarball.rs");

/// A fake kernel source as a tarball, a recipe `base` for it and an empty cache, in a temporary
/// directory.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    recipes: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let tarball = fake_kernel_tarball(&lab::repo_path("lab/tests/fixtures/fake-kernel"), &root);
        let recipes = root.join("kernels");
        fs::create_dir_all(recipes.join("config")).unwrap();
        fs::write(
            recipes.join("config/lab.config"),
            "CONFIG_DMA=m\n# CONFIG_BASE is not set\n",
        )
        .unwrap();
        let sha = sha256(&tarball);
        fs::write(
            recipes.join("base.toml"),
            format!(
                "description = \"fake\"\nconfig = [\"lab.config\"]\n[source]\ntarball = \"{}\"\n\
                 sha256 = \"{sha}\"\n",
                tarball.display()
            ),
        )
        .unwrap();
        Fixture {
            _dir: dir,
            root,
            recipes,
        }
    }

    fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// Complete kernel entries (a directory with its manifest) and anything left in staging.
    fn cache_state(&self) -> (usize, usize) {
        let kernels = lab::cache::Cache::at(self.cache()).unwrap().dir("kernels");
        let entries = fs::read_dir(&kernels).map_or(0, |d| {
            d.flatten()
                .filter(|e| e.path().join("manifest.json").is_file())
                .count()
        });
        let staging = fs::read_dir(kernels.join(".staging")).map_or(0, |d| d.count());
        (entries, staging)
    }
}

/// The sha256 of `path`, as `sha256sum` prints it.
fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

fn have_tools() -> bool {
    let all = fake_kernel_tools();
    if !all {
        lab::skip::host_lacks(
            "fake kernel builds",
            "make, patch, tar, gcc or ld is missing",
            "Install them (`apt-get install build-essential patch`).",
        );
    }
    all
}

/// The pid written to `path`, waiting up to `limit`; `None` sooner if `lab` exits first (a build
/// that failed before make, e.g. for a tool another test is installing, has nothing to wait for).
fn wait_for_pid(
    path: &std::path::Path,
    lab: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<u32> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Some(pid) = fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return Some(pid);
        }
        if lab.try_wait().ok().flatten().is_some() {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next()),
            Some("Z" | "X")
        )
    })
}

/// A `lab kernel build` SIGKILLed while make runs leaves neither make nor what make started,
/// and the next run sweeps the dead staging dir and builds.
#[test]
fn a_killed_kernel_build_leaves_no_make_and_no_partial_entry() {
    if !have_tools() {
        return;
    }
    let f = Fixture::new();
    let hang = f.root.join("hang");
    fs::write(&hang, b"").unwrap();
    let lab = |log: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lab"));
        cmd.args(["kernel", "build", "base"])
            .env("LAB_CACHE_DIR", f.cache())
            .env("LAB_KERNEL_RECIPES", &f.recipes)
            .env("LAB_LOCK_FILE", f.root.join("lock.toml"))
            .env("LAB_KERNEL_JOBS", "1")
            .env("LAB_NO_INSTALL", "1")
            .stdout(fs::File::create(f.root.join(format!("{log}.out"))).unwrap())
            .stderr(fs::File::create(f.root.join(format!("{log}.err"))).unwrap());
        cmd
    };
    let mut first = lab("first").spawn().unwrap();
    let limit = std::time::Duration::from_secs(120);
    let (Some(make), Some(child)) = (
        wait_for_pid(&f.root.join("hang.make"), &mut first, limit),
        wait_for_pid(&f.root.join("hang.child"), &mut first, limit),
    ) else {
        first.kill().ok();
        panic!(
            "the build never reached make:\n{}",
            fs::read_to_string(f.root.join("first.err")).unwrap_or_default()
        );
    };
    first.kill().unwrap();
    first.wait().unwrap();
    let killed = std::time::Instant::now();
    while (alive(make) || alive(child)) && killed.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let survivors: Vec<u32> = [make, child].into_iter().filter(|&p| alive(p)).collect();
    for &pid in &survivors {
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .ok();
    }
    assert!(
        survivors.is_empty(),
        "make {make} / its child {child}: {survivors:?} outlived the killed lab by 5 s"
    );
    println!(
        "make and its child gone {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(f.cache_state(), (0, 1), "the dead build's staging dir");

    fs::remove_file(&hang).unwrap();
    let out = lab("second").output().unwrap();
    assert!(
        out.status.success(),
        "the next build failed:\n{}",
        fs::read_to_string(f.root.join("second.err")).unwrap_or_default()
    );
    assert_eq!(f.cache_state(), (1, 0), "after the next run");
}
