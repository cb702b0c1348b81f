//! Seed S5 on x86 (`docs/SCENARIOS.md`, thread `004_915e87c4f6fb8ab6.txt`): a multi-queue
//! NVMe controller on the two-node CI topology, fio random reads with one job on every CPU.
//! With the kernel's default masks the vectors target, and the completions land on, CPUs of
//! both nodes, evenly; with one queue everything lands on one CPU. Afterwards (`[then]`) the
//! admin queue's vector (not managed) is moved, to record where its interrupts go. The lab
//! ships S5 as the file `scenarios/irq-spread.toml`: this test runs it. What the seed's arm64
//! ITS code path is and what this covers of it: `docs/SCENARIOS.md`.

mod common;

use lab::experiment::{Experiment, Outcome};
use lab::scenarios::file::ScenarioFile;

/// The file's columns: 8 queues (the kernel's default spreading), 4 and 1.
const FOUR_QUEUES: &str = "four-queues";
const ONE_QUEUE: &str = "one-queue";

fn print_boots(outcome: &Outcome) {
    for b in outcome.record.boots() {
        let m = &b.samples;
        let s = &b.details["scenario"];
        println!(
            "  {:<12} targets {} CPUs / {} nodes (max {} vectors on one)  completions on {} CPUs / {} nodes, max/mean {:.2}, busiest {:5.1}%  moved admin vector: {:5.1}% on its new CPU {}  targets {}",
            b.variant,
            m["effective_cpus"],
            m["effective_nodes"],
            m["vectors_per_target_cpu_max"],
            m["completion_cpus"],
            m["completion_nodes"],
            m["completion_max_over_mean"],
            m["busiest_cpu"],
            m.get("moved_vector_on_target").copied().unwrap_or(f64::NAN),
            s["vector_interrupts"]["device 0 vector 0 in then"],
            s["vector_targets"]["device 0 from 1"],
        );
    }
}

#[tokio::test]
async fn default_masks_spread_completions_and_one_queue_concentrates_them() {
    // The scenario's default columns: 8 queues, 4 and 1, decided on the busiest CPU's share of
    // the completions (the scenario's primary, 5 points): 4 queues and 1 DIFFERENT from 8 and
    // higher (2026-12-01 soak: 13.0-14.7% with 8, 25.3-26.1% with 4, 100% with 1; decided at 5
    // boots per column, p=0.008, the boots never overlapping). Under the verdict rules of
    // 2026-12-04 (two decisions share the 1%, so the first look that can decide is 7 a side),
    // three runs: 12.8-14.0% with 8, 25.3-26.5% with 4, 100% with 1; both decided at 7 boots
    // per column (p adjusted 0.010), shifts +12.4 to +12.7 and +86.7 to +87.1 points. Under the
    // rules of 2026-12-07 (Welch beside the rank test, its df halfway to Hsu's), one run: 13.6%
    // mean with 8, 25.8% with 4, 100% with 1; both decided at 7 per column again (p=0.010), the
    // means +12.1 and +86.4 points apart (98 s). As the shipped file (2026-12-08, 2-core AMD
    // EPYC): 4 queues +12.44 points and 1 +86.76, both at 7 per column (p=0.010); the moved
    // admin vector 95.83% (23 of 24) on its new CPU in every boot; 106 s.
    let file = ScenarioFile::shipped("irq-spread").unwrap();
    let (_lab, outcome) = common::run_experiment(Experiment::new(file).named("irq-spread")).await;
    print_boots(&outcome);
    for column in [FOUR_QUEUES, ONE_QUEUE] {
        outcome
            .comparison()
            .assert_higher("busiest_cpu", column)
            .unwrap();
    }
    // Measured here (TCG single-threaded, lab-minimal v6.12, 8 fio jobs of 4 KiB random reads,
    // one per CPU, 3 s; probes and 4 test runs in a row at load 5-8, 40 boots, every run passed
    // in 79-94 s):
    // - 8 queues: one-CPU masks, 8 target CPUs on both nodes, one vector each; completions on
    //   all 8 CPUs, busiest 13.1-15.2%, max/mean 1.04-1.22;
    // - 4 queues: two-CPU masks, one target CPU in each (4 CPUs, both nodes); completions on
    //   those 4, max/mean 2.03-2.11 (2.0 is even over 4 of 8 CPUs);
    // - 1 queue: one vector (mask 0-7, target CPU 7, not the first), 100% of the completions
    //   there (max/mean 8);
    // - the admin vector moved to CPU 7: 22-23 of its 23-24 following interrupts there
    //   (95.7-95.8%); the first still fired on its old CPU, as x86 moves an MSI when it next
    //   fires.
    for b in outcome.record.boots() {
        let m = &b.samples;
        let (variant, boot) = (b.variant.as_str(), b.sequence);
        let what = format!("boot {boot} ({variant}): {m:?}");
        match variant {
            ONE_QUEUE => {
                assert_eq!(m["completion_cpus"], 1.0, "{what}");
                assert!(m["busiest_cpu"] >= 99.0, "{what}");
            }
            _ => {
                let queues = if variant == FOUR_QUEUES { 4.0 } else { 8.0 };
                // One target CPU per vector, never two vectors on one CPU, both nodes served.
                assert_eq!(m["effective_cpus"], queues, "{what}");
                assert_eq!(m["vectors_per_target_cpu_max"], 1.0, "{what}");
                assert_eq!(m["effective_nodes"], 2.0, "{what}");
                assert_eq!(m["completion_nodes"], 2.0, "{what}");
                assert_eq!(m["completion_cpus"], queues, "{what}");
                // Evenly: no CPU near the share of two queues. Completions per CPU follow each
                // CPU's fio job, and under TCG on a loaded host the vCPUs' jobs do not run
                // equally (max/mean 1.04-1.22 of the fair share at load 5-8, 1.74 in one boot at
                // load 11); a CPU serving two vectors would show twice its fair share, which
                // `vectors_per_target_cpu_max` above also rules out directly.
                let fair = 8.0 / queues;
                assert!(
                    m["completion_max_over_mean"] < 2.0 * fair,
                    "{what}: max/mean {:.2}, the share of two queues ({:.2})",
                    m["completion_max_over_mean"],
                    2.0 * fair
                );
            }
        }
        // The moved vector follows (all but the interrupt that carries the move).
        assert!(
            m.get("moved_vector_on_target").is_some_and(|&v| v >= 75.0),
            "{what}: the moved admin vector's interrupts did not follow it"
        );
        let kept = &b.details["scenario"]["vector_interrupts"]["device 0 from 1"];
        assert!(
            kept.is_object(),
            "{what}: the counts per CPU are kept: {kept}"
        );
    }
    let page = std::fs::read_to_string(outcome.html_path.as_ref().unwrap()).unwrap();
    assert!(
        page.contains("the vectors of device 0 from 1"),
        "the page draws the I/O vectors' interrupts"
    );
}
