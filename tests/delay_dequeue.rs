//! Seed S3 (`docs/SCENARIOS.md`, thread `002_b16d65084fa4a5c4.txt`): v6.12's `DELAY_DEQUEUE`
//! under fio's random writes to ext4 on a dm-thin volume on NVMe, crossed with the shape of the
//! queues' interrupt masks. The seed's regression showed on some machines and not on one whose
//! NVMe vectors had 3-CPU masks; Dietmar Eggemann found that there the tasks woken on the
//! completion path were per-CPU kworkers (`nr_cpus_allowed == 1`), which the feature's wakeup
//! shortcut cannot move anyway. Four columns, three boots each, interleaved: both feature
//! settings with one-CPU masks (8 queues on 8 CPUs) and with multi-CPU masks (3 queues: masks
//! of 4, 2 and 2 CPUs). The lab ships S3 as the file `scenarios/delay-dequeue.toml`: this test
//! runs it.

mod common;

use lab::experiment::{Experiment, Outcome};
use lab::scenarios::file::ScenarioFile;
use lab::stats::Magnitude;

/// The file's multi-CPU-mask columns end so (3 queues: masks of 4, 2 and 2 CPUs).
const FEW_QUEUES_SUFFIX: &str = "-3q";

/// Each CPU's count of the NVMe I/O queues' interrupts over the workload, as the file keeps it.
fn completions_per_cpu(b: &lab::report::BootRecord) -> &serde_json::Value {
    &b.details["scenario"]["vector_interrupts"]["device 0 from 1"]
}

fn print_boots(outcome: &Outcome) {
    for b in outcome.record.boots() {
        let m = &b.samples;
        println!(
            "  {:<20} IRQ CPUs {}  busiest {:5.1}%  hardirq wakees on 1 CPU {:5.1}%  fio woken: hardirq {:5.1}% per-CPU kworker {:5.1}% unbound kworker {:5.1}%  moved at wakeup {:4.1}%  migrations/1k I/Os {:6.1}  iops {:.0}  completions per CPU {}",
            b.variant,
            m["irq_cpus"],
            m["irq_busiest_cpu"],
            m["hardirq_wakees_single_cpu"],
            m["fio_woken_in_hardirq"],
            m["fio_woken_by_percpu_kworker"],
            m["fio_woken_by_unbound_kworker"],
            m["fio_moved_at_wakeup"],
            m["fio_migrations"],
            m["iops"],
            completions_per_cpu(b),
        );
    }
}

/// fio's run per boot here (the scenario's own, which `lab compare delay-dequeue` runs: 5 s).
/// Who the completion path wakes is the same in every second of the run; 2 s still completes
/// 1600-4600 writes a boot under TCG (issue [P]: the fio step 4.0 s a boot instead of 6.6, 36
/// boots a run).
const S3_FIO_SECONDS: u32 = 2;

#[tokio::test]
async fn completions_wake_per_cpu_workers_whatever_the_mask_shape() {
    // The scenario's default columns: both feature settings with one-CPU and multi-CPU masks,
    // decided on who the completion path wakes (the scenario's primary, 10 points).
    let lab = common::lab().await;
    let file = ScenarioFile::shipped("delay-dequeue").unwrap();
    let mut experiment = Experiment::new(file)
        .named("delay-dequeue")
        .set("runtime_s", &S3_FIO_SECONDS.to_string());
    if lab.on_kvm() {
        // The seed's bandwidth (990 vs 992 MB/s with DELAY_DEQUEUE on and off where the
        // regression did not show): 5% is the smallest change that matters.
        experiment = experiment.also_primary("iops", Magnitude::relative(0.05));
    }
    let outcome = common::run_on(&lab, experiment).await;
    print_boots(&outcome);
    // Measured here (TCG single-threaded, lab-minimal v6.12, two boots side by side at load
    // 5-8, 7 fio jobs on CPUs 1-7 for 5 s, 2 GiB namespace; probes and 4 test runs, 64 boots,
    // every test run passed in 146-206 s):
    // - one-CPU masks: completions on all 8 CPUs in every boot, the busiest CPU 14.6-25.5% of
    //   them; 3 queues: on exactly 3 CPUs (x86 targets one CPU of each mask), busiest
    //   37.5-83.5%; 2 queues (a probe): on 2, busiest 50.6-58.4%.
    // - of the wakeups issued in hard-interrupt context, 85.2-99.1% woke a task allowed on one
    //   CPU only (the per-CPU kworker that runs the direct-I/O completion), in every column.
    // - DELAY_DEQUEUE vs NO_DELAY_DEQUEUE: pooled over all runs (15-17 boots per column) no
    //   fio metric differed (wakeups, wakers, moved at wakeup, migrations: p >= 0.18); 2 of 18
    //   comparisons reached p < 0.05 unadjusted, about what 18 tests give by chance, none after
    //   Holm's adjustment. The fio metrics are shown (adjusted), not asserted.
    // The decision: every column is SAME as DELAY_DEQUEUE with one-CPU masks on the share of
    // hard-IRQ wakeups that woke a one-CPU task, within 10 points: neither the feature nor the
    // mask shape changes who the completion path wakes. In the verdicts' soak of 2026-12-01
    // that share was 86.5-99.3% in every column, intervals of the shift within -5.7..+3.4
    // points, SAME at 4 boots per column (7 when one boot dipped to 86.5%). Under the verdict
    // rules of 2026-12-04 SAME takes 9 boots a side: three runs, 97.5-99.5% in every column,
    // SAME at 9 per column each time, shifts -0.93 to +0.11 points, both intervals (shift and
    // means) within -1.39..+0.31 points against the bound of 10. After the storage stack
    // stopped waiting 4.1 s a boot for mke2fs's UUIDs (lab/src/storage.rs; 2026-12-05, 2-core
    // Xeon, the binary alone, five runs): 205-226 s a run instead of 325 s, 36 boots each,
    // every column SAME at 9 (shifts -0.37 to +0.03 points, both intervals within -0.56..+0.25);
    // per boot 8 CPUs completing with one-CPU masks (busiest 13.3-18.7%), 3 with 3 queues
    // (33.8-57.4%), one-CPU wakees 98.8-99.8%.
    // With fio for S3_FIO_SECONDS = 2 s instead of 5 (2026-12-06, same host, the binary alone,
    // five runs): every column SAME at 9 each time, shifts -0.75 to +0.19 points, both
    // intervals within -1.63..+0.60 against the bound of 10; per boot (180) one-CPU wakees
    // 96.5-99.9%, 8 CPUs completing with one-CPU masks (busiest 14.8-26.5%), 3 with 3 queues
    // (37.5-86.4%), 786-2311 IOPS. 198-204 s a run against 225 and 254 s at 5 s that day (the
    // fio step 4.0 s a boot instead of 6.6: fio's own start, about 2 s, does not shrink).
    // Since SAME's minimum follows the magnitude (issue V3: nine boots let a change of 15
    // points carried by 15% of the boots pass as SAME in 23% of runs; 10 points of a share need
    // 19 a side, and the default cap rises to 19): 2026-12-07, 2-core AMD EPYC, the binary with
    // own_device beside it, every column SAME at 19 (looks 5, 7, 9, 14, 19), 76 boots in 485 s;
    // shifts -1.92 to -0.21 points, both intervals within -3.40..+0.36, per-column means
    // 96.2-98.3%.
    // As the shipped file (scenarios/delay-dequeue.toml, 2026-12-08, the same host, the binary
    // alone): every column SAME at 19, shifts -0.36 to +0.03 points, both intervals within
    // -1.27..+0.45, one-CPU wakees 97.6-99.6% in every boot, 76 boots in 336 s.
    let ab = outcome.comparison();
    for column in &ab.variants()[1..] {
        ab.assert_same("hardirq_wakees_single_cpu", column).unwrap();
    }
    // The masks' shape, per boot, from each CPU's count of the I/O queues' interrupts: which
    // CPUs completed writes at all, not how many each did. How the writes split between the
    // queues follows how far each fio job got in its 2 s under TCG, and that varies: a queue
    // took 3 of 1712 completions in one boot, 13 of 2152 in another, each under the 1% from
    // which the `irq_cpus` metric counts a CPU, and this test failed twice on that while it
    // asserted `irq_cpus` (2026-12-06: a cold CI run, then the binary alone).
    //
    // In every boot recorded here on 2026-12-05 and 2026-12-06 (23 runs, fio's 5 s and 2 s;
    // 404 boots of each mask shape): with one-CPU masks all 8 CPUs completed writes (CPU 0,
    // where fio runs no job, through the kernel's own writes, 13 or more; each of fio's CPUs
    // 21 or more), the busiest at most 27.9% (47.0% since, in a starved boot: below); with 3
    // queues exactly CPUs 1, 3 and 7 (the
    // masks 0-1, 2-3 and 4-7: x86 targets one CPU of each), 3 or more each.
    let boots = outcome.record.boots();
    for b in boots {
        let per_cpu = completions_per_cpu(b);
        let completing: Vec<usize> = (0..8)
            .filter(|cpu| per_cpu[cpu.to_string()].as_u64().unwrap_or(0) > 0)
            .collect();
        let few_queues = b.variant.ends_with(FEW_QUEUES_SUFFIX);
        if !few_queues {
            // fio's jobs run on CPUs 1-7 (the seed's job: every CPU but CPU 0), each
            // submitting to its own CPU's queue, which completes there.
            assert!(
                (1..8).all(|cpu| completing.contains(&cpu)),
                "{}: with one-CPU masks each of fio's CPUs 1-7 completes its own queue's \
                 writes; completions per CPU: {per_cpu}",
                b.variant
            );
            // Not bounded: the busiest CPU's share. It measures how far each fio job got in
            // its 2 s under TCG, not the masks: in the cold .ci/run of 2026-12-07 (13:03, the
            // host busy beside it) two starved boots completed 235 and 236 writes instead of
            // about 2000, and one CPU took 37.9% and 47.0% of them, past the 35% this test
            // asserted (at most 27.9% in the 808 boots before). Which CPUs complete at all,
            // above, is the masks' shape.
        } else {
            assert_eq!(
                completing.len(),
                3,
                "{}: 3 queues should complete on 3 CPUs, one per mask; completions per CPU: \
                 {per_cpu}",
                b.variant
            );
        }
    }
    // The seed's reading: the completion path wakes per-CPU kworkers, so most hard-IRQ wakeups
    // wake a one-CPU task. Asserted on each column's median boot, not on every boot: a boot
    // starved beside other guests (2026-12-07, this binary beside two other boot tests: 55
    // IOPS, 53 hard-IRQ wakeups of fio itself) read 67.7%, its column's other 18 boots 93.5% or
    // more. The per-boot values are in the record and the table.
    for column in ab.variants() {
        let mut shares: Vec<f64> = boots
            .iter()
            .filter(|b| &b.variant == column)
            .map(|b| b.samples["hardirq_wakees_single_cpu"])
            .collect();
        shares.sort_by(f64::total_cmp);
        let median = shares[shares.len() / 2];
        assert!(
            median > 80.0,
            "{column}: in the median boot only {median:.1}% of the hard-IRQ wakeups woke a \
             one-CPU task (the seed's reading: the completion path wakes per-CPU kworkers); \
             every boot: {shares:?}"
        );
    }
    if !lab::skip::kvm_only(
        &lab,
        "bandwidth part",
        "fio's bandwidth under TCG says nothing about the scheduler; under KVM (or with a \
         passthrough NVMe) NO_DELAY_DEQUEUE's randwrite IOPS must be SAME as DELAY_DEQUEUE's \
         within 5% with one-CPU masks, where the seed's per-CPU-kworker reading says the \
         feature has nothing to move (the seed: 990 vs 992 MB/s).",
    ) {
        return;
    }
    ab.assert_same("iops", &ab.variants()[1]).unwrap();
}
