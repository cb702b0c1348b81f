//! Seed S4 (`docs/SCENARIOS.md`, thread `003_1be668a0000025c9.txt`): NUMA balancing's PTE scan
//! on a numa01_THREAD_ALLOC-shaped workload. `fc137c0ddab2` ("sched/numa: enhance vma scanning
//! logic") let a task scan a VMA only in its first two passes or after a hinting fault of its
//! own there; on numa01_THREAD_ALLOC the scan then stalled (numa_pte_updates 1822797 before,
//! 493 with it, 1559111 with the seed's fix). v6.12 carries the fix's upstream form
//! (b7a5b537c55c, partial-VMA continuation) and three more relaxations of the same rule. One
//! experiment boots three kernels, interleaved, one boot per sample:
//!
//! - `v6.12`;
//! - `v6.12+numa-scan-revert`: the seed's fix alone taken out;
//! - `v6.12+numa-scan-pid-only`: every relaxation since fc137c0ddab2 taken out (the seed's
//!   regressed rule).
//!
//! The table is printed so a failing run shows its numbers. The lab ships S4 as a scenario file
//! (`scenarios/numa-scan.toml`, built into the lab): this test runs it.

mod common;

use lab::experiment::{Experiment, Outcome};
use lab::scenarios::file::ScenarioFile;
use lab::stats::Magnitude;

/// The scenario's three kernels.
const BASE: &str = "v6.12";
const REVERT: &str = "v6.12+numa-scan-revert";
const PID_ONLY: &str = "v6.12+numa-scan-pid-only";

async fn run(lab: &lab::Lab, experiment: Experiment<ScenarioFile>) -> Outcome {
    let outcome = common::run_on(lab, experiment).await;
    for b in outcome.record.boots() {
        let m = &b.samples;
        println!(
            "  {:<26} pte {:>7.0}  late {:>7.0}  hint {:>7.0}  local {:>7.0}  migrated {:>7.0}  {:.2} GiB/s  {:.1} s  sys {:.0} s",
            b.variant,
            m["numa_pte_updates"],
            m["late_numa_pte_updates"],
            m["numa_hint_faults"],
            m["numa_hint_faults_local"],
            m["numa_pages_migrated"],
            m["gib_per_s"],
            m["elapsed_s"],
            m["system_s"],
        );
    }
    outcome
}

/// The scenario's comparison as `lab compare numa-scan` runs it (its three default kernels,
/// scan tunables and size: lab-numa01 over 2 x 768 MiB for 30 s, the late window from 15 s),
/// decided on PTE updates: 5 boots per kernel, then more while a verdict is UNKNOWN, at most
/// `S4_CAP`.
///
/// From 2026-12-05 to 12-07 the test ran at half that size (2 x 384 MiB for 15 s) to save time
/// (issue [P]: 233-259 s against 449 s on the 2-core Xeon), and CI failed on it on 2026-12-07:
/// pid-only UNKNOWN at the cap of 10 (shift -329748 against a magnitude of 213706, p=0.029),
/// three of its ten boots not stalled (220042-639294 PTE updates against v6.12's
/// 329125-802041). Runs drawn again from the recorded boots (`lab bench resample`, 4,000 runs
/// over the four half-size records of 2026-12-07 on a 2-core EPYC and CI's, docs/VERDICTS.md)
/// put that in numbers: pid-only DIFFERENT in 88.3% of runs, the revert SAME in 86.5%, both in
/// 78.2%; a cap of 19 only took that to 94.2%. At full size (two records of 10 boots a side,
/// 2026-12-08, the same host): pid-only DIFFERENT in 100.0% of runs at 7 boots (shifts -872456
/// and -618106 against 394283 and 315137: 2.0-2.2x the magnitude, as measured before the
/// halving), the revert SAME in 87.7% at a cap of 10 and 99.4% at 19 (99.5% at seed 2), its
/// mean boots 9.2 and 10.1: SAME takes 9 boots, and a cap of 10 leaves it one more look (the
/// cap since: [`S4_CAP`]).
fn s4() -> Experiment<ScenarioFile> {
    Experiment::new(ScenarioFile::shipped("numa-scan").unwrap())
        .named("numa-scan")
        .adaptive(5, S4_CAP)
}

/// The workload's memory, MiB over both processes (the scenario's `mib`).
const S4_MIB: u64 = 1536;

/// PTEs of one pass over both processes' regions (4 KiB pages).
const ONE_PASS: f64 = (S4_MIB * 1024 / 4) as f64;

/// The most boots per kernel the S4 run may take: the revert's SAME at 9 boots misses a look
/// in about one run of eight, and the looks at 14, 19 and 24 catch nearly all of those. A third
/// full-size record (12 boots a side, 2026-12-08, the same host) passed in 98.5% of drawn runs
/// at a cap of 19, 99.5% at 24, 100% at 29 (mean boots 11.0, 11.2, 11.3): the looks past 19 cost
/// a run nearly nothing on average and spare about one CI run in a hundred.
/// With it the test's run (the same day and host, beside builds): the revert SAME at 9 (shift
/// -144021 against 464647), pid-only DIFFERENT at 7 (shift -1040011, p=0.010), 598 s.
const S4_CAP: usize = 24;

#[tokio::test]
async fn the_scan_stalls_under_fc137c0ddab2s_rule_not_on_v6_12_nor_without_the_fix_alone() {
    // Measured here (TCG single-threaded, 2-core host, two boots side by side; lab-numa01 with
    // 2 processes x 4 threads over 2 x 768 MiB for 30 s; scan delay 100 ms, period 100 ms to
    // 6 s), numa_pte_updates per boot over five runs (3 boots per kernel, then 4, 4, 4, 4; 212-218
    // s per 4-boot run):
    // - v6.12: 527855-1056534 (run means 753824-797750);
    // - numa-scan-revert: 622837-945546 (ratio of means 0.99-1.09);
    // - numa-scan-pid-only: 12541-342180 (ratio of means 0.12-0.23). After the 15 s mark its
    //   scan had stopped in 13 of those 19 boots (0-89 PTE updates in the last 15 s; the seed's
    //   regressed kernel: 493 in all), against 166777-575475 on v6.12.
    // The decision is on numa_pte_updates with 40% of v6.12's mean as the smallest change that
    // matters (scenario): pid-only DIFFERENT and lower; the seed's fix alone SAME, the 95%
    // interval of its shift inside +-40%. In the verdicts' soak of 2026-12-01: v6.12
    // 632090-1208229, revert 623023-1082011, pid-only 43406-235505; pid-only decided at 5 boots
    // (shift about -850000 against a magnitude of about 380000), the revert SAME at 5 to 9 boots
    // a side (shifts -21735 to -161097, intervals inside -362469..+278747). In the five runs of
    // 2026-12-02 (CI and a 4-run soak): v6.12 587900-1060000, revert 583700-1250000, pid-only
    // 18120-357300; pid-only decided at 5 boots (shift -601814 to -746789, magnitude
    // 299468-350900), the revert SAME at 4 to 9 a side (shifts +2356 to +132549, intervals
    // inside -182107..+326804). Under the verdict rules of 2026-12-04 (two decisions: the
    // first look that can decide is 7 a side; SAME takes 9), three runs: v6.12 766300-1552000,
    // revert 786500-1480000, pid-only 30080-259100; pid-only DIFFERENT at 7 (shifts -829800 to
    // -1046000), the revert SAME at 9 each time (shifts -29710 to +79950, both intervals inside
    // -212934..+255232 against magnitudes of about 450000). All of that at the scenario's own
    // size (2 x 768 MiB for 30 s).
    //
    // At half size (2 x 384 MiB for 15 s, late window from 7.5 s, the test from 2026-12-05 to
    // 12-07), five runs of the binary on 2026-12-05 (2-core Intel Xeon, TCG, two boots side by side), every one
    // deciding as before: v6.12 379864-852879 (run means 553130-717174, at least 1.9 passes of
    // ONE_PASS), revert 421363-918611, pid-only 32734-488637 (run means 167515-274487; after
    // 7.5 s under 100 PTE updates in 22 of its 37 boots, v6.12 33234-491530). Pid-only
    // DIFFERENT at 7 a side in four runs and at 9 in one (a boot at 488637), shifts -391454 to
    // -567769 against magnitudes of 220119-294807 (1.6-2.0x the magnitude; 1.8-2.3x at full
    // size: its first two passes cover more of the smaller regions); the revert SAME at 9 every
    // time (shifts -13378 to +18757, both intervals inside -158872..+153788). The binary took
    // 233-259 s, against 449 s at full size on the same host that day. As the shipped file, with
    // Welch's halfway degrees of freedom (2026-12-07, 2-core AMD EPYC, beside other builds):
    // v6.12 370061-858538, revert 517067-707691, pid-only 37252-410820; the revert SAME at 9
    // (shift -40935), pid-only DIFFERENT at 9 (shift -471467 against 252324, p=3.9e-4); 246 s.
    let lab = common::lab().await;
    let mut experiment = s4();
    if lab.on_kvm() {
        // The seed's time: numa01_THREAD_ALLOC took 1m23.3s with the regression against
        // 1m1.5s before it (35% longer), so the stalled kernel does less work per second.
        experiment = experiment.also_primary("gib_per_s", Magnitude::relative(0.1));
    }
    let outcome = run(&lab, experiment).await;
    let ab = outcome.comparison();
    ab.assert_lower("numa_pte_updates", PID_ONLY).unwrap();
    // The seed's fix alone: on 6.12 the starving-VMA check and the forced scan of skipped VMAs
    // keep the regions scanned without it, so taking it out changes nothing that matters here.
    // If this fails with DIFFERENT, the fix matters on its own again: the scenario's
    // description and docs/SCENARIOS.md must say so.
    ab.assert_same("numa_pte_updates", REVERT).unwrap();
    // The v6.12 kernel keeps scanning: every boot updated more PTEs than one pass over both
    // regions has (ONE_PASS pages; measured 1.3-2.7 passes at the scenario's own size).
    for b in outcome.record.boots().iter().filter(|b| b.variant == BASE) {
        assert!(
            b.samples["numa_pte_updates"] > ONE_PASS,
            "{}: only {} PTE updates\n{ab}",
            b.variant,
            b.samples["numa_pte_updates"]
        );
    }
    if lab::skip::kvm_only(
        &lab,
        "time part",
        "Under TCG remote memory costs nothing, so the stalled kernel only saves the scan's \
         overhead (measured here on 2026-12-07: pid-only 4.2-5.4 GiB/s, v6.12 0.9-4.1); under KVM \
         v6.12+numa-scan-pid-only must do less work per second, DIFFERENT by more than 10%.",
    ) {
        ab.assert_lower("gib_per_s", PID_ONLY).unwrap();
    }
}
