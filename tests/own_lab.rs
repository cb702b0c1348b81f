//! A crate's own lab (`lab/examples/own_lab.rs`: `lab::cli::main_with` with a scenario of the
//! crate's): `scenarios` lists it beside the shipped ones, and `compare` boots it to a verdict
//! and writes its record, as the `lab` binary does for a shipped scenario.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// The example's binary, built as the tests' profile builds the library (a no-op when fresh).
fn own_lab() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    lab::process::without_cargo_run_env(&mut cmd)
        .args(["build", "-q", "-p", "lab", "--example", "own_lab"])
        .current_dir(lab::repo_path(""));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    let status = cmd.status().unwrap();
    assert!(status.success(), "building the own_lab example: {status}");
    let bin = profile_dir.join("examples").join("own_lab");
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
}
