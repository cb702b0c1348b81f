//! The offline bundle (`lab bundle`): S1's default comparison bundled from the shared cache fits
//! in 60 MiB, and run from the bundle in a network namespace with no interfaces (`unshare -n`),
//! an empty cache and a PATH without cargo it prints S1's table and leaves nothing running or
//! unpacked; `lab doctor` runs from it too; a corrupted bundle is refused naming what does not
//! match.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

/// S1's bundle must fit the device machines' 64 MiB transfer with room to spare.
const MAX_BUNDLE_BYTES: u64 = 60 << 20;

/// The system's PATH without the directories that hold cargo (rustup's `~/.cargo/bin`).
fn path_without_cargo() -> String {
    let dirs = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ];
    let kept: Vec<&str> = dirs
        .into_iter()
        .filter(|d| !Path::new(d).join("cargo").exists())
        .collect();
    kept.join(":")
}

/// Processes (other than this one) whose environment holds `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    let needle = format!("LAB_BUNDLE_TEST_MARK={marker}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| e.file_name().to_string_lossy() != me)
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
        })
        .map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            format!("{} {}", e.file_name().to_string_lossy(), comm.trim())
        })
        .collect()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `lab bundle run FILE [--dir D] -- ARGS` as an offline host without cargo runs it: in
/// `unshare -n` where this host allows it, an empty `LAB_CACHE_DIR`, cargo off PATH, its own
/// TMPDIR (to see that the unpacked tree goes).
fn run_bundled(
    lab_bin: &Path,
    offline: bool,
    file: &Path,
    dir: Option<&Path>,
    args: &[&str],
    scratch: &Path,
    marker: &str,
) -> Output {
    let mut cmd = if offline {
        let mut c = Command::new("unshare");
        c.arg("-n").arg(lab_bin);
        c
    } else {
        Command::new(lab_bin)
    };
    cmd.args(["bundle", "run"]).arg(file);
    if let Some(dir) = dir {
        cmd.arg("--dir").arg(dir);
    }
    cmd.arg("--")
        .args(args)
        .env("LAB_CACHE_DIR", scratch.join("empty-cache"))
        .env("LAB_RESULTS_DIR", scratch.join("results"))
        .env("TMPDIR", scratch.join("tmp"))
        .env("PATH", path_without_cargo())
        .env("LAB_BUNDLE_TEST_MARK", marker)
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .output()
        .unwrap()
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none())
}

#[test]
fn s1_runs_from_its_bundle_offline_without_cargo() {
    let Some(lab_bin) = common::lab_binary("offline bundle") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let scratch = scratch.path();
    for d in ["empty-cache", "tmp"] {
        std::fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let file: PathBuf = scratch.join("s1.bundle");

    // Made from the shared cache, where v6.12 and the revert are built.
    let started = Instant::now();
    let out = Command::new(&lab_bin)
        .args(["bundle", "create", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "bundle create failed:\n{stderr}");
    println!("bundle create: {:.1?}\n{stdout}", started.elapsed());
    let bytes = std::fs::metadata(&file).unwrap().len();
    assert!(
        bytes <= MAX_BUNDLE_BYTES,
        "S1's bundle is {bytes} bytes, more than {MAX_BUNDLE_BYTES}:\n{stdout}"
    );
    for part in [
        "lab programs",
        "qemu",
        "kernel v6.12 ",
        "kernel v6.12+wake-affine-idle-revert",
        "recipes",
    ] {
        assert!(stdout.contains(part), "no part {part:?} in:\n{stdout}");
    }

    let path = path_without_cargo();
    assert!(
        path.split(':')
            .all(|d| !Path::new(d).join("cargo").exists()),
        "{path} has cargo"
    );
    let offline = Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !offline {
        lab::skip::host_lacks(
            "the bundle's run without network",
            "`unshare -n` failed here",
            "Run as root or enable unprivileged user namespaces; the run goes on with network.",
        );
    }
    let marker = format!("{}-{}", std::process::id(), started.elapsed().as_nanos());
    let started = Instant::now();
    // A boot a side with dmatest as S1's tests run it under TCG (tests/dma_wakeup.rs: 128 KiB
    // buffers, 500 copies): what is checked here is that the bundle runs S1 offline, not its
    // decision (tests/dma_wakeup.rs). The seed's 1 MiB buffers and 1000 copies took 96.7 s for
    // the two boots in the whole warm CI run of 2026-12-06.
    let dmatest = common::s1_tcg_dmatest();
    let mut compare = vec!["compare", "--repetitions", "1"];
    compare.extend(dmatest.iter().map(String::as_str));
    let out = run_bundled(&lab_bin, offline, &file, None, &compare, scratch, &marker);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "`lab bundle run -- compare` failed ({}):\n{stderr}",
        out.status
    );
    println!(
        "bundle run -- {}: {:.1?}\n{stdout}",
        compare.join(" "),
        started.elapsed()
    );
    for word in ["share_on_irq_cpu", "v6.12+wake-affine-idle-revert"] {
        assert!(stdout.contains(word), "S1's table lacks {word}:\n{stdout}");
    }
    assert!(
        std::fs::read_dir(scratch.join("results/dma-wakeup")).is_ok_and(|mut d| d.next().is_some()),
        "no record under LAB_RESULTS_DIR"
    );
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "left running"
    );
    assert!(
        empty(&scratch.join("tmp")),
        "the unpacked bundle was left in TMPDIR"
    );
    assert!(
        empty(&scratch.join("empty-cache")),
        "the caller's cache was written"
    );

    // `lab doctor` from the bundle, unpacked into a kept directory: what this host offers.
    let kept = scratch.join("kept");
    let out = run_bundled(
        &lab_bin,
        offline,
        &file,
        Some(&kept),
        &["doctor"],
        scratch,
        &marker,
    );
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "doctor from the bundle failed:\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("cache dir      {}", kept.join("cache").display())),
        "{stdout}"
    );
    assert!(stdout.contains("QEMU"), "{stdout}");
    // The kept tree is not unpacked over.
    let out = run_bundled(
        &lab_bin,
        offline,
        &file,
        Some(&kept),
        &["doctor"],
        scratch,
        &marker,
    );
    assert!(!out.status.success());
    assert!(text(&out).1.contains("not empty"), "{}", text(&out).1);

    // A byte flipped in the middle of the file (inside the largest layer) is refused.
    let corrupt = scratch.join("corrupt.bundle");
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&corrupt, bytes).unwrap();
    let out = run_bundled(
        &lab_bin,
        offline,
        &corrupt,
        None,
        &["doctor"],
        scratch,
        &marker,
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("bundle {} refused", corrupt.display()))
            && stderr.contains("layer "),
        "{stderr}"
    );
    assert!(
        empty(&scratch.join("tmp")),
        "a refused bundle was left unpacked"
    );
    assert_eq!(
        processes_with(&marker),
        Vec::<String>::new(),
        "left running"
    );
}

/// A scenario file's comparison bundled (`lab bundle create --scenario FILE`): the bundle
/// carries the file as `scenarios/NAME.toml`, and its lab runs it by that path. The file is the
/// walkthrough's (docs/SCENARIO-FILES.md), a regression the lab does not ship: a NIC, its
/// traffic and the receiver the lab's own guest program.
#[test]
fn a_scenario_file_runs_from_its_bundle() {
    let Some(lab_bin) = common::lab_binary("offline bundle") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let scratch = scratch.path();
    for d in ["empty-cache", "tmp"] {
        std::fs::create_dir_all(scratch.join(d)).unwrap();
    }
    let file = scratch.join("nic-file.bundle");
    let out = Command::new(&lab_bin)
        .args(["bundle", "create", "--scenario"])
        .arg(lab::repo_path("scenarios/nic-wakeup.toml"))
        .arg("-o")
        .arg(&file)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "bundle create failed:\n{stderr}");
    assert!(stdout.contains("recipes"), "{stdout}");
    let marker = format!("{}-file", std::process::id());
    let compare = [
        "compare",
        "--scenario",
        "scenarios/nic-wakeup.toml",
        "--repetitions",
        "1",
    ];
    let out = run_bundled(&lab_bin, false, &file, None, &compare, scratch, &marker);
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "the bundled file did not run:\n{stderr}"
    );
    assert!(
        stderr.contains("compare --scenario scenarios/nic-wakeup.toml"),
        "the bundle says how to run its file:\n{stderr}"
    );
    assert!(stdout.contains("share_on_irq_cpu"), "{stdout}");
    assert!(
        std::fs::read_dir(scratch.join("results/nic-wakeup")).is_ok_and(|mut d| d.next().is_some()),
        "no record under LAB_RESULTS_DIR"
    );
}
