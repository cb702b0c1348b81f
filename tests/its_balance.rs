//! Seed S5 on its own code (`docs/SCENARIOS.md`, thread `004_915e87c4f6fb8ab6.txt`): the arm64
//! GICv3 ITS's choice of target CPU for the LPIs of 3 NVMe controllers × 4 I/O queues on the
//! 8-vCPU, two-node aarch64 CI topology. 6.12 picks the least-loaded CPU of each vector's mask
//! (`2f13ff1d1d5c`, `c5d6082d35e0`); the first-CPU kernel restores the pre-5.8 rule
//! (`images/kernels/patches/its-first-cpu.patch`); a third column gives the ITS NUMA node 1 in
//! the device tree, the node path the seed's 2-socket machines take.

mod common;

use lab::arch::Arch;
use lab::experiment::{Experiment, Outcome};
use lab::scenarios::its_balance::{ItsBalance, FIRST_CPU, ITS_NODE};
use lab::stats::Magnitude;

fn print_boots(outcome: &Outcome) {
    for b in outcome.record.boots() {
        let m = &b.samples;
        let s = &b.details["scenario"];
        println!(
            "  {:<10} managed on {} CPUs (max {} on one: {})  admin vectors on {} CPUs {} ({}% in their masks)  completions on {} CPUs, busiest {:5.1}%  moved admin vector to CPU {}: {:5.1}% there, effective {}; widened to all: CPU {} (node {})",
            b.variant,
            m["managed_cpus"],
            m["managed_per_cpu_max"],
            s["managed_per_cpu"],
            m["unmanaged_cpus"],
            s["unmanaged_targets"],
            m["unmanaged_in_mask"],
            m["completion_cpus"],
            m["busiest_cpu"],
            s["moved_admin_vector"]["to_cpu"],
            m.get("moved_vector_on_target").copied().unwrap_or(f64::NAN),
            s["moved_admin_vector"]["effective"],
            s["widened_admin_vector_target"],
            m["widened_target_node"],
        );
    }
}

#[tokio::test]
async fn least_loaded_spreads_lpis_and_the_first_cpu_rule_concentrates_them() {
    let lab = common::lab().await;
    // The decision, on the scenario's primary (managed_cpus, the CPUs the 12 managed vectors
    // target; 1 CPU matters): the first-CPU rule DIFFERENT from 6.12 and lower; the ITS in
    // node 1 SAME as without (its node path is for unmanaged vectors only). Measured
    // (2026-12-03, 2-core AMD EPYC host, 76 boots over two probes, a soak of the base and node
    // columns and the test's runs): 6.12 8 CPUs in every boot, the first-CPU kernel 4; decided
    // at 5 boots a side (p=0.008, the fewest a rank test needs for 0.01) and SAME at 4-5 a side
    // (interval [0, 0]); the test ran in 127 s warm (203 s before device binding stopped
    // forking in its poll loop). Under the verdict rules of 2026-12-04 (two decisions: the
    // first look that can decide is 7 a side; SAME takes 9), three runs: 8 and 4 CPUs in every
    // boot, first-CPU DIFFERENT at 7, the node column SAME at 9, 25 boots of 8-9 s.
    let mut experiment = Experiment::new(ItsBalance::seed()).named("its-balance");
    // The seed's IOPS figures (1.3M to 1.8M reads, +38%) are a statement about arm64 hardware:
    // decided (10% matters) only where an arm64 guest runs under KVM.
    let iops = lab::skip::kvm_only_for(
        &lab,
        Arch::Aarch64,
        "IOPS part",
        "IOPS under TCG measure the emulator, not where the completions land.",
    );
    if iops {
        experiment = experiment.also_primary("iops", Magnitude::relative(0.10));
    }
    let outcome = common::run_on(&lab, experiment).await;
    print_boots(&outcome);
    let comparison = outcome.comparison();
    comparison.assert_lower("managed_cpus", FIRST_CPU).unwrap();
    comparison.assert_same("managed_cpus", ITS_NODE).unwrap();
    for b in outcome.record.boots() {
        let m = &b.samples;
        let (variant, boot) = (b.variant.as_str(), b.sequence);
        let what = format!("boot {boot} ({variant}): {m:?}");
        match variant {
            FIRST_CPU => {
                // Every LPI on the first CPU of its mask: the 4 masks' first CPUs hold 3
                // managed vectors each, every admin vector is on CPU 0 (its mask's first).
                // Measured so in every boot (3,0,3,0,3,0,3,0; completions on 4 CPUs, busiest
                // 26-29%).
                assert_eq!(m["managed_cpus"], 4.0, "{what}");
                assert_eq!(m["managed_per_cpu_max"], 3.0, "{what}");
                assert_eq!(m["unmanaged_cpus"], 1.0, "{what}");
                assert!(m["completion_cpus"] <= 4.0, "{what}");
            }
            _ => {
                // Measured: 12 managed vectors as 2,1,2,1,2,1,2,1 over the CPUs in every boot
                // (in some the pairs swapped, 1,2,2,1,...: which controller probes first), so
                // 8 CPUs, at most 2 on one; the 3 admin vectors on 3 distinct CPUs of 0-3;
                // completions on all 8 CPUs (busiest 17-19%). The bounds are the issue's
                // (at least 7 CPUs, at most 3 on one), one step short of what was seen, so a
                // boot where one probe raced another still passes and the first-CPU rule
                // (4 CPUs, 3 on one) never does.
                assert!(m["managed_cpus"] >= 7.0, "{what}");
                assert!(m["managed_per_cpu_max"] <= 3.0, "{what}");
                assert!(m["unmanaged_cpus"] >= 3.0, "{what}");
                assert!(m["completion_cpus"] >= 7.0, "{what}");
            }
        }
        // Every unmanaged vector targets a CPU of its mask: with the ITS in node 1 too, though
        // the admin queues' masks (their device's node, CPUs 0-3) do not meet it; 6.12 falls
        // back to the mask there instead of leaving the node or failing.
        assert_eq!(m["unmanaged_in_mask"], 100.0, "{what}");
        if variant == ITS_NODE {
            // The node path is taken: a mask of every CPU gets a CPU of the ITS's node.
            assert_eq!(m["widened_target_node"], 1.0, "{what}");
        }
        // A user's mask is honoured, outside the ITS's node too (6.12 falls back to the mask
        // when it and the node do not meet): the moved admin vector's interrupts follow it.
        assert!(
            m["moved_vector_on_target"] >= 75.0,
            "{what}: the moved admin vector's interrupts did not follow it"
        );
    }
    if iops {
        comparison.assert_lower("iops", FIRST_CPU).unwrap();
    }
}
