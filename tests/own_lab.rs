//! A crate's own lab (`lab/examples/own_lab.rs`: `lab::cli::main_with` with a scenario of the
//! crate's): `scenarios` lists it beside the shipped ones, and `compare` boots it to a verdict
//! and writes its record, as the `lab` binary does for a shipped scenario.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// The `own_lab` example's binary.
fn own_lab() -> PathBuf {
    example("own_lab")
}

/// An example's binary, built as the tests' profile builds the library (a no-op when fresh).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    lab::process::without_cargo_run_env(&mut cmd)
        .args(["build", "-q", "-p", "lab", "--example", name])
        .current_dir(lab::repo_path(""));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "building the {name} example: {status}");
    let bin = profile_dir.join("examples").join(name);
    assert!(bin.exists(), "{} after the build", bin.display());
    bin
}

#[test]
fn a_crates_own_scenario_runs_under_the_labs_verbs() {
    let bin = own_lab();
    let listed = Command::new(&bin).arg("scenarios").output().unwrap();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{text}");
    assert!(text.contains("feature-probe  reads back"), "{text}");
    assert!(
        text.contains("dma-wakeup  "),
        "the shipped ones stay: {text}"
    );
    let name = format!("own-lab-{}", std::process::id());
    let out = Command::new(&bin)
        .args(["compare", "feature-probe", "--seed", "3", "--name", &name])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // RUN_TO_PARITY on in every base boot, off in every variant boot: a complete separation,
    // decided at the first look.
    assert!(
        stdout.contains("v6.12@feature=NO_RUN_TO_PARITY  DIFFERENT  shift -1.00"),
        "{stdout}"
    );
    let root = lab::results_root().join(&name);
    let runs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let record = lab::report::RunRecord::read_json(&runs[0].join("record.json")).unwrap();
    assert_eq!(record.manifest.parameters["scenario"], "feature-probe");
    assert_eq!(record.boots().len(), 10);
    // `report` re-renders it from the crate's own binary, which knows its scenario.
    let again = Command::new(&bin)
        .arg("report")
        .arg(&runs[0])
        .output()
        .unwrap();
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("DIFFERENT"));
    std::fs::remove_dir_all(&root).unwrap();
    // `bundle create` carries the crate's own binary as the bundle's lab, so the bundle runs
    // the crate's scenario on a host with neither the crate nor cargo.
    let work = tempfile::tempdir().unwrap();
    let bundle = work.path().join("probe.bundle");
    let made = Command::new(&bin)
        .args(["bundle", "create", "--scenario", "feature-probe", "-o"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let ran = Command::new(&bin)
        .args(["bundle", "run"])
        .arg(&bundle)
        .arg("--dir")
        .arg(work.path().join("unpacked"))
        .args(["--", "compare", "feature-probe", "--repetitions", "1"])
        .current_dir(work.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr),
    );
    assert!(ran.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("run_to_parity"), "{stdout}");
}

/// The NIC placement scenario in Rust (`lab/examples/nic_placement.rs`, at most 150 lines on the
/// public API; issue X1): two boots a side under the crate's own `lab compare`, each with its
/// interrupt warmed up and pinned, the receiver's placement and the attribution of its wakeups
/// in the record and on the page. Its verdict, run to 20 a side: docs/SCENARIO-FILES.md.
#[test]
fn a_placement_scenario_in_rust_boots_measures_and_attributes() {
    let bin = example("nic_placement");
    let source = std::fs::read_to_string(lab::repo_path("lab/examples/nic_placement.rs")).unwrap();
    assert!(
        source.lines().count() <= 150,
        "the example grew past 150 lines"
    );
    let name = format!("nic-rust-{}", std::process::id());
    let out = Command::new(&bin)
        .args(["compare", "nic-placement", "--repetitions", "2"])
        .args(["--seed", "3", "--name", &name])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let root = lab::results_root().join(&name);
    let run = std::fs::read_dir(&root)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let record = lab::report::RunRecord::read_json(&run.join("record.json")).unwrap();
    assert_eq!(record.boots().len(), 4);
    for b in record.boots() {
        let share = b.samples["share_on_irq_cpu"];
        assert!((0.0..=100.0).contains(&share), "{}: {share}", b.variant);
        let attribution = &b.details["scenario"]["attribution"]["toward_waker"];
        assert!(
            attribution["softirq on <idle>"].is_object(),
            "the receive softirq on the idle IRQ CPU wakes the receiver: {attribution}"
        );
    }
    let html = std::fs::read_to_string(run.join("record.html")).unwrap();
    assert!(
        html.contains("Which wakeups moved the task"),
        "no attribution on the page"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
