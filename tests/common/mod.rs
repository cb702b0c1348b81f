//! Shared helpers for the scenario tests.
#![allow(dead_code)]

use std::time::Duration;

mod own_cache;
// Each test binary compiles this module; most use none of the stand-in helpers.
#[allow(unused_imports)]
pub use own_cache::own_cache;

use lab::experiment::{Experiment, Outcome, Scenario};
use lab::Lab;

/// dmatest's buffers in S1's tests under TCG (the seed's: 1 MiB); tests/dma_wakeup.rs says why.
pub const S1_TCG_BUF_SIZE: u32 = 0x20000;

/// dmatest's copies a boot in S1's tests under TCG (the seed's: 1000); measured in
/// tests/dma_wakeup.rs.
pub const S1_TCG_ITERATIONS: u32 = 500;

/// S1's dmatest as its tests run it under TCG ([`S1_TCG_BUF_SIZE`], [`S1_TCG_ITERATIONS`]), as
/// options of `lab compare` and `lab bisect`.
pub fn s1_tcg_dmatest() -> [String; 4] {
    [
        "--set".into(),
        format!("dmatest.test_buf_size={S1_TCG_BUF_SIZE}"),
        "--set".into(),
        format!("dmatest.iterations={S1_TCG_ITERATIONS}"),
    ]
}

/// The lab for this test process (provisioning is cached across processes). Progress (builds,
/// boots of an experiment) goes to stderr as plain lines, which nextest shows for failures.
/// With `LAB_REQUIRE_KVM=1` (the hardware CI job) a lab without KVM fails the test: no VM test
/// may fall back to TCG there.
pub async fn lab() -> Lab {
    lab::progress::install_for_stderr();
    // A test killed with its runner takes its guests with it.
    lab::process::watch_parent();
    let lab = Lab::from_env_async()
        .await
        .unwrap_or_else(|e| panic!("the lab could not start on this host: {e:#}"));
    lab.restore_passthrough();
    if lab::skip::kvm_required() {
        lab::skip::require_kvm(
            &lab,
            "LAB_REQUIRE_KVM=1: no VM test may fall back to TCG on this host.",
        );
    }
    lab
}

/// The `lab` binary cargo built beside this test binary (`target/<profile>/lab`), for tests that
/// run the CLI as a user would; `None` after a LAB-SKIP line for `part` where it is missing.
pub fn lab_binary(part: &str) -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let lab_bin = exe.parent().and_then(|d| d.parent()).unwrap().join("lab");
    if lab_bin.exists() {
        return Some(lab_bin);
    }
    lab::skip::host_lacks(
        part,
        &format!("no lab binary at {}", lab_bin.display()),
        "Build it (`cargo build -p lab`) before the tests.",
    );
    None
}

/// Whether process `pid` still exists (zombies count as gone: they hold no resources and
/// cannot run).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Waits up to `limit` for `pid` to be gone.
pub fn wait_gone(pid: u32, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !process_alive(pid)
}

/// Runs a comparison on this test process's lab, panicking with the whole error chain, and
/// prints its table and where its record is, so a failing run shows its numbers.
pub async fn run_experiment<S: Scenario>(experiment: Experiment<S>) -> (Lab, Outcome) {
    let lab = lab().await;
    let outcome = run_on(&lab, experiment).await;
    (lab, outcome)
}

/// [`run_experiment`] on a lab the test already has (to ask it `on_kvm()` first).
pub async fn run_on<S: Scenario>(lab: &Lab, experiment: Experiment<S>) -> Outcome {
    let outcome = experiment
        .run(lab)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    println!("{}", outcome.comparison().table());
    println!("record: {}", outcome.record_path.display());
    if let Some(html) = &outcome.html_path {
        println!("report: {}", html.display());
    }
    outcome
}
