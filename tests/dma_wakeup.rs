//! Seed S1 (`docs/SCENARIOS.md`, thread `000_88b7f2099745cb99.txt`): a dmatest thread woken by its DMA
//! engine's completion interrupt. `wake_affine_idle()` in v6.12 only moves the wakee to the
//! interrupted CPU when both share a cache; the proposed revert lets it follow the interrupt
//! anywhere. Each test boots both kernels several times, interleaved, one boot per sample, and
//! compares them; the table is printed so a failing run shows its numbers. The lab ships S1 as
//! a scenario file (`scenarios/dma-wakeup.toml`, built into the lab): these tests run it, as
//! `lab compare dma-wakeup --set placement=...` does.

mod common;

use lab::experiment::{Experiment, Outcome};
use lab::report::Comparison;
use lab::scenarios::file::ScenarioFile;
use lab::stats::{Decision, Magnitude};

/// The base kernel and the base with the seed's fix reverted (the file's variants).
const BASE: &str = "v6.12";
const REVERT: &str = "v6.12+wake-affine-idle-revert";

/// S1 as the lab ships it, the seed's parameters.
fn seed() -> Experiment<ScenarioFile> {
    Experiment::new(ScenarioFile::shipped("dma-wakeup").unwrap())
}

/// With the seed's dmatest run at 128 KiB buffers instead of 1 MiB: dmatest verifies both whole
/// buffers after every copy, which under TCG made the thread compute ~40 ms per copy (46 s of
/// each 60 s boot); with 128 KiB it computes an eighth of that, closer to the hardware's ratio
/// of computing to waiting for the engine. S1_ITERATIONS copies instead of the seed's 1000
/// (issue [P]), 64 KiB transfers, no random sizes. The throughput test on real hardware keeps
/// the seed's own parameters.
fn tcg_dmatest(experiment: Experiment<ScenarioFile>) -> Experiment<ScenarioFile> {
    experiment
        .set(
            "dmatest.test_buf_size",
            &common::S1_TCG_BUF_SIZE.to_string(),
        )
        .set("dmatest.iterations", &S1_ITERATIONS.to_string())
}

/// Copies per boot under TCG (the seed's: 1000). At 500, five runs of this binary (2026-12-06,
/// 2-core Xeon, the binary alone): every placement test DIFFERENT at 5 a side each time (20 of
/// 20), the polled control UNKNOWN at the cap and passing 5 of 5; the measure step 3.55 s a
/// boot against 4.87 s at 1000 in a run the same day (300 and 60 boots).
const S1_ITERATIONS: u32 = common::S1_TCG_ITERATIONS;

/// S1 with `placement` (same-llc, cross-llc, remote-node), under the name its results are kept
/// as.
fn s1(name: &str, placement: &str) -> Experiment<ScenarioFile> {
    tcg_dmatest(seed()).set("placement", placement).named(name)
}

async fn run(experiment: Experiment<ScenarioFile>) -> (lab::Lab, Outcome) {
    let (lab, outcome) = common::run_experiment(experiment).await;
    for b in outcome.record.boots() {
        let m = |name: &str| b.samples.get(name).copied().unwrap_or(f64::NAN);
        println!(
            "  {:<32} irq cpu {} share {:5.1}%  irq LLC {:5.1}%  start LLC {:5.1}%  node {:5.1}%  max {:5.1}%  xLLC/100 {:5.1}  balancer/100 {:5.1}  pulled {:5.1}% of {} (not: {})  iops {:.0}",
            b.variant,
            b.details["scenario"]["cpus"]["irq"],
            m("share_on_irq_cpu"),
            m("share_in_irq_llc"),
            m("share_in_start_llc"),
            m("share_on_irq_node"),
            m("max_cpu_share"),
            m("cross_llc_migrations"),
            m("balancer_migrations"),
            m("pulled_across_llc"),
            b.details["scenario"]["cross_llc_wakeups"]["wakeups_from_other_llc"],
            b.details["scenario"]["cross_llc_wakeups"]["unpulled_wakers"],
            m("iops"),
        );
    }
    (lab, outcome)
}

/// Every completion interrupt landed on the pinned CPU, in every boot (the pinning works).
fn assert_irq_pinned(outcome: &Outcome) {
    for b in outcome.record.boots() {
        assert!(
            b.samples["irq_on_pinned_cpu"] > 99.0,
            "{}: only {:.1}% of the completions hit CPU {} (delta {})",
            b.variant,
            b.samples["irq_on_pinned_cpu"],
            b.details["scenario"]["cpus"]["irq"],
            b.details["scenario"]["irq_delta"]
        );
    }
}

/// The median over boots of `metric` for `variant` is above `limit`; a failure prints the
/// whole table. A level, not a comparison: the KVM-only signature of the revert.
fn assert_median_above(ab: &Comparison, metric: &str, variant: &str, limit: f64, what: &str) {
    let summary = ab.summary(metric, variant).unwrap();
    assert!(
        summary.median > limit,
        "{what}: median {metric} of {variant} is {:.2}, expected above {limit}\n{summary:?}\n{ab}",
        summary.median
    );
}

/// The S1 decision: on the primary metric, the share of the thread's switch-ins on the IRQ
/// CPU, the revert is DIFFERENT from v6.12 and higher, by more than the scenario's 20 points.
/// The other shares (the IRQ's LLC, its node) are in the table with their adjusted p, not
/// asserted: where the base kernel's thread runs within a node is the load balancer's call,
/// and once the balancer has moved it into the IRQ's LLC, v6.12's shared-cache case keeps it
/// there (74 cross-LLC base boots recorded on 2026-12-01: 12 spent 52-87% of their switch-ins
/// in the IRQ's LLC, against single revert boots down to 84.8%). On the IRQ CPU itself they do
/// not overlap: base 0.0-25.5%, revert 66.4-99.4% in those boots.
fn assert_the_thread_follows_the_irq_only_with_the_revert(outcome: &Outcome) {
    assert_irq_pinned(outcome);
    outcome
        .comparison()
        .assert_higher("share_on_irq_cpu", REVERT)
        .unwrap();
}

#[tokio::test]
async fn cross_llc_irq_pulls_the_thread_only_with_the_revert() {
    let (lab, outcome) = run(s1("dma-wakeup-cross-llc", "cross-llc")).await;
    let ab = outcome.comparison();
    // The mechanism behind the verdict and its picture: every boot's wakeups attributed, the
    // page drawing the watched thread.
    for b in outcome.record.boots() {
        let details = &b.details["scenario"];
        assert!(
            details["attribution"]["from_task_cpu"].is_object(),
            "{details}"
        );
    }
    let page = std::fs::read_to_string(outcome.html_path.as_ref().unwrap()).unwrap();
    assert!(
        page.contains("dma0chan0-copy"),
        "the page draws the watched thread"
    );
    // The verdict: the revert DIFFERENT and higher on the IRQ-CPU share, by more than 20
    // points. In the verdicts' soak of 2026-12-01 (TCG, 2-core AMD EPYC host, two boots side by
    // side) every run decided it at 5 boots a side, p=0.008: base 0.0-10.6% in single boots
    // (run medians 0.0%), revert 38.1-98.8% (run medians 91.6-96.6%), shift +90 to +96 points.
    // Under the verdict rules of 2026-12-04 (the first look, 5 a side, takes what a complete
    // separation costs: 0.79 of the 1%), four runs: base 0.0-22.8%, revert 98.0-99.7%, decided
    // at 5 a side each time, shifts +96.4 to +98.3 points; the same-LLC, remote-node and PTDMA
    // tests alike at 5 a side (same-LLC at 9 once, when a base boot sat at 96.5%). At
    // S1_ITERATIONS = 500 copies (2026-12-06, five runs, the primary share on the IRQ CPU):
    // base 0.0-30.7%, revert 49.6-99.1% (one boot under 55), DIFFERENT at 5 a side each time,
    // shifts +88.8 to +96.3 points; same-LLC, remote-node and PTDMA the same (base up to 91.1%
    // in one same-LLC boot and 94.0% in one PTDMA boot, the balancer's, still decided at 5).
    // As the shipped file (`scenarios/dma-wakeup.toml`) under the verdict rules of 2026-12-07
    // (Welch's df halfway to Hsu's), two runs of the binary that evening: every placement test
    // DIFFERENT at 5 a side, p=0.010 (the cap of 10 never reached); the means moved on the IRQ
    // CPU: cross-LLC +88.8 and +81.7 points (one low revert boot in the second), same-LLC +97.2
    // and +96.6, remote-node +96.3 and +94.0, PTDMA +98.1 and +98.9; the polled run UNKNOWN at
    // its cap of 10 both times.
    // On the seed's Xeon the base bounced between two CPUs, one of them the IRQ CPU (417 of 1000
    // iterations there), and the revert stayed on the IRQ CPU for 1000 of 1000. Earlier history
    // of this test (when it asserted medians and a fixed 5-vs-5 permutation test):
    // Measured here with 128 KiB buffers on the lab-minimal v6.12 (TCG single-threaded, 2-core
    // host, two boots side by side, other builds running), share of the thread's switch-ins on
    // the IRQ CPU: base run medians 14.0% and 0.2% (single boots 0.0-24.3%), revert 85.4% and
    // 82.4% (78.1-95.9%); in the IRQ's LLC revert 89.1-98.3%; p=0.008 on all three metrics
    // then asserted in both runs (one more run at load ~8 on an earlier lab-minimal build: base
    // 2.1%, revert 69.5% mean, p=0.008). With the seed's 1 MiB buffers on the defconfig kernel (12
    // runs, one boot at a time, including a 10-in-a-row soak): base run medians 4.2-25.3%,
    // revert 81.2-92.9%. Why base boots vary: the load balancer moves the thread while it
    // verifies its buffers (85-92% of its migrations are done by the migration/N stopper); once
    // it is in the IRQ's LLC, wake_affine_idle()'s shared-cache case keeps it there and puts it
    // on the IRQ CPU whenever its previous CPU is busy. Smaller buffers mean less computing per
    // copy, so fewer such moves: the base kernel's share fell, the revert's stayed. A quiet-host
    // soak with 128 KiB passed 6 of 7 (run medians base 0.0-7.8%, revert 90.5-96.1%); the
    // failing run had a base boot at 76.2% and a revert boot at 58.0%, which broke the 5-vs-5
    // P01. On 2026-12-01 it passed 10 runs in a row at load 2-7 (run medians base 0.0-1.5%,
    // revert 89.3-97.5%; single boots base up to 20.4%, revert down to 66.4%). The shown (not
    // asserted) pulled_across_llc row isolates the patch's own decision: base 0.0-0.8% of 90-748
    // cross-LLC wakeups per boot, revert 37-75% of 4-16; the revert's unpulled ones came from
    // the idle IRQ CPU (wake_wide() with a 2-CPU LLC is the candidate, not confirmed).
    assert_the_thread_follows_the_irq_only_with_the_revert(&outcome);
    if lab::skip::kvm_only(
        &lab,
        "hardware signature",
        "Under TCG the load balancer dilutes the revert's placement (single boots down to 38% on \
         the IRQ CPU); under KVM the revert must keep the thread on the IRQ CPU in more than 95% \
         of switch-ins (the seed: 1000 of 1000 completions).",
    ) {
        // The hardware signature of the thread: 1000 of 1000 completions on the IRQ CPU.
        assert_median_above(
            ab,
            "share_on_irq_cpu",
            REVERT,
            95.0,
            "on KVM the revert should keep the thread on the IRQ CPU",
        );
    }
}

#[tokio::test]
async fn same_llc_irq_keeps_the_thread_in_its_llc() {
    // The IRQ's CPU shares the thread's LLC, so v6.12's wake_affine_idle() takes its
    // shared-cache case: it keeps the thread on its previous CPU when that is idle, and the
    // revert moves it to the interrupted CPU. So the revert runs it on the IRQ CPU far more, and
    // keeps it in the LLC. The verdict: the revert DIFFERENT and higher on the IRQ-CPU share
    // (2026-12-01 soak: base 0.0-92.4%, one boot the balancer left on the IRQ CPU, run medians
    // 0.0-0.3%; revert 82.4-98.8%; decided at 5 boots a side, or 7 when that boot overlapped). Measured here with 128 KiB buffers on the lab-minimal v6.12 (two
    // boots side by side, two runs): IRQ CPU base 0.0-11.3% (medians 0.0, 0.0), revert
    // 75.5-97.0% (medians 90.1, 90.4), p=0.008; in the LLC revert 89.9-99.3% (medians 97.9,
    // 99.2), base 3.5-99.8%.
    // Whether the base thread stays in the LLC is not the wakeup path's doing but the load
    // balancer's: with the seed's 1 MiB buffers it computed ~40 ms per copy and the balancer
    // moved it out in every boot (0.0-61.8% in the LLC, p=0.008 against the revert); with 128
    // KiB it is moved in some boots (balancer migrations 6.5 per 100 completions in the one
    // that left) and not in others (86.5%, 99.8%), p=0.048. So "more in the LLC than the base"
    // is no longer asserted; "on the IRQ CPU" is, and the revert's LLC share is.
    let (_lab, outcome) = run(s1("dma-wakeup-same-llc", "same-llc")).await;
    assert_the_thread_follows_the_irq_only_with_the_revert(&outcome);
}

/// The smallest change of the polled run's share on the IRQ CPU that matters, in percentage
/// points: under a fifth of the split the interrupt makes (base 0-26%, revert 66-99% in the
/// cross-LLC runs, about 85 points between the medians). The lab decides the polled run with it.
const POLLED_MAGNITUDE_PP: f64 = 15.0;

/// The most boots per kernel the polled run takes: the lab's default.
const POLLED_CAP: usize = 10;

/// A boot kept the thread mostly on the IRQ CPU at this share of its time there, in %: what the
/// revert does in every boot when the interrupt wakes the thread (61-99% in the cross-LLC
/// records of 2026-12-05, run medians 97-98%), and the base in few (0-53%).
const MOSTLY_ON_IRQ_CPU_PCT: f64 = 50.0;

/// How many of `boots` (each the share of the thread's time on the IRQ CPU, in %) kept the
/// thread mostly there.
fn mostly_on_the_irq_cpu(boots: &[f64]) -> usize {
    boots
        .iter()
        .filter(|&&share| share >= MOSTLY_ON_IRQ_CPU_PCT)
        .count()
}

/// Whether at least half of `boots` kept the thread mostly on the IRQ CPU: the revert's effect
/// when the interrupt wakes it.
fn typically_on_the_irq_cpu(boots: &[f64]) -> bool {
    2 * mostly_on_the_irq_cpu(boots) >= boots.len()
}

/// The polled thread's share of its time on the IRQ CPU in every polled boot recorded on
/// 2026-12-06 at S1_ITERATIONS (five runs of 10 boots a side, both kernels pooled: 8 and 4 of
/// their 50 boots at 50% or more, which a 2x2 exact test does not tell apart).
const POLLED_BOOTS: [f64; 100] = [
    0.0, 0.0, 0.0, 0.0, 0.02, 0.02, 0.0, 0.0, 0.0, 0.0, 0.0, 98.3, 0.03, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.03, 0.0, 5.93, 0.0, 0.0, 73.77, 0.0, 0.0, 9.03, 0.0, 0.0, 76.94, 0.0, 0.0, 0.0, 0.14,
    2.89, 0.0, 98.85, 0.0, 0.0, 66.72, 0.0, 0.0, 0.0, 80.32, 98.36, 0.0, 67.74, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.53, 0.0, 0.01, 0.02, 0.0, 0.0, 0.0, 0.04, 0.0, 0.0, 0.28, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    65.73, 39.38, 68.11, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0, 98.18, 0.0, 0.0, 14.61, 0.02, 0.04, 49.22, 0.0, 0.0, 93.35,
];

/// The same share with the interrupt (the cross-LLC runs of the same five, 5 boots a side each).
const CROSS_LLC_BASE_BOOTS: [f64; 25] = [
    31.57, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.0,
    0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.0,
];
const CROSS_LLC_REVERT_BOOTS: [f64; 25] = [
    98.38, 93.45, 90.84, 93.15, 69.04, 69.58, 98.59, 94.18, 72.66, 98.41, 93.0, 93.59, 91.82,
    97.65, 97.95, 95.75, 96.63, 99.13, 98.37, 97.56, 98.09, 95.82, 95.77, 65.24, 99.09,
];

#[test]
fn the_polled_check_tells_the_interrupts_effect_and_rarely_fails_like_kernels() {
    // What polled_dmatest_shows_no_placement_difference asserts beside "not DIFFERENT", checked
    // on recorded boots: it fails the revert with its interrupt, passes the base with it, and two
    // kernels whose boots look like the polled ones fail it rarely at the boots the polled run
    // ends with (9 a side when SAME, else the cap of 10). The chance is exact: a kernel fails
    // when at least half of its n boots reach MOSTLY_ON_IRQ_CPU_PCT, binomial in the recorded
    // rate of such boots (12 of 100: 0.37% at 10 a side, either kernel 0.74%; 0.21% and 0.41% at
    // 9; at 1000 copies a boot, 2026-12-05, it was 4 of 38 and either kernel 0.41% at 10). The
    // check it replaced (the 95% interval of the shift inside +-15 points) failed 58% of 20000
    // draws of 10 a side from the 1000-copy boots (lab-stats' own shift_interval, 2026-12-06):
    // a point mass at 0 and a fifth of boots at 30-99% leave the typical boot's shift to chance.
    assert!(typically_on_the_irq_cpu(&CROSS_LLC_REVERT_BOOTS));
    assert!(!typically_on_the_irq_cpu(&CROSS_LLC_BASE_BOOTS));
    let rate = mostly_on_the_irq_cpu(&POLLED_BOOTS) as f64 / POLLED_BOOTS.len() as f64;
    for n in [9usize, 10] {
        let one: f64 = (n.div_ceil(2)..=n)
            .map(|k| {
                lab::stats::rank::choose(n, k)
                    * rate.powi(k as i32)
                    * (1.0 - rate).powi((n - k) as i32)
            })
            .sum();
        let either: f64 = 1.0 - (1.0 - one).powi(2);
        assert!(
            either < 0.01,
            "at {n} boots a side like kernels fail the check {:.2}% of runs",
            either * 100.0
        );
    }
}

#[tokio::test]
async fn polled_dmatest_shows_no_placement_difference() {
    // No interrupt, so no interrupt-context wakeup for the two kernels to treat differently. The
    // polling thread never sleeps, so where it runs is the load balancer's call: its share of
    // time on the IRQ CPU is a point mass at 0 with a fifth of boots anywhere in 30-99% (both
    // kernels, POLLED_BOOTS; the 2026-12-05 CI run's base had three such boots of 10, the revert
    // one). Asserted: the lab does not call the revert DIFFERENT, and neither kernel keeps the
    // thread on the IRQ CPU in a typical boot, as the revert does in every boot with the
    // interrupt (the_polled_check_tells_the_interrupts_effect_and_rarely_fails_like_kernels).
    //
    // Not asserted: SAME, or the typical boot's shift within +-POLLED_MAGNITUDE_PP. Bounding the
    // mean within 15 points for such a share takes about 40 boots a side, which the suite cannot
    // spend on a control; the shift's interval depends on how many boots of each kernel the
    // balancer happened to leave on the IRQ CPU (the CI run of 2026-12-05 failed it at
    // [-30.74, +0.01] with base 3, revert 1 such boot; measured on the recorded boots it fails
    // 58% of runs at 10 a side, 10% at 20). The lab still decides it, shown in the table:
    // UNKNOWN at 10 a side, or SAME at 9 when both sides' few such boots match (2026-12-05);
    // since SAME's minimum follows the magnitude (issue V3: 12 boots a side at 15 points of a
    // share), UNKNOWN at this test's cap of 10.
    //
    // The share is of the thread's time, not of its switch-ins: a polling thread switches in
    // 4-7 times a boot, so one short visit of the IRQ CPU was 14-25 points of the switch-in
    // share (2026-12-02).
    let scenario = tcg_dmatest(seed())
        .set("dmatest.polled", "true")
        .named("dma-wakeup-polled")
        .primary("runtime_on_irq_cpu", POLLED_MAGNITUDE_PP)
        .adaptive(5, POLLED_CAP);
    let (_lab, outcome) = run(scenario).await;
    let c = outcome.comparison();
    let verdict = c.verdict("runtime_on_irq_cpu", REVERT).unwrap();
    assert_ne!(verdict.decision, Decision::Different, "{c}");
    for kernel in [BASE, REVERT] {
        let boots = c.samples("runtime_on_irq_cpu", kernel).unwrap();
        assert!(
            !typically_on_the_irq_cpu(boots),
            "{kernel} kept the polling thread mostly on the IRQ CPU in half its boots or more \
             ({boots:?}): something other than the load balancer moves it there\n{c}"
        );
    }
}

#[tokio::test]
async fn remote_node_irq_costs_the_thread_its_home_node_with_the_revert() {
    // Mel Gorman's objection in the thread: following the interrupt across nodes takes the task
    // away from its memory. Measured here (TCG single-threaded, 5 boots each, IRQ on CPU 4 of
    // node 1, thread started on CPU 0 of node 0):
    // - base: 0.0-0.2% of switch-ins on node 1 (home node kept in every boot), never on the IRQ
    //   CPU; within node 0 it moves between its two LLCs (19-71% in the start LLC);
    // - revert: 98-100% on node 1, 92.6-98.7% in the IRQ's LLC, 47-62% on the IRQ CPU itself;
    //   cross-LLC (here: cross-node) migrations 1.9-3.3 per 100 completions vs base 0.2-0.8,
    //   shown in the table but not asserted (one CI boot of the revert had 0.3).
    // (An earlier version of the lab widened the thread's CPU mask before waking it, so it
    // started wherever kthreadd had created it, often on node 1: the base then looked as if it
    // had left home. The scenario now checks where the thread started.)
    // The node share is asserted by its medians, not by a 5-vs-5 test at p<0.01, which needs
    // all ten boots apart: the load balancer sometimes moves the base's thread to node 1 too
    // (in 4 of the 20 base boots recorded on 2026-12-01: 16.8, 53.3, 54.0 and 84.8% of its
    // switch-ins there, against the revert's 87.0-99.6%; base run medians 0.0-0.1%). On the IRQ
    // CPU they stay apart: base 0.0-13.1%, revert 51.8-94.2% (2026-12-01 soak: base 0.0-31.9%,
    // revert 77.3-96.6%, DIFFERENT at 5 boots a side in every run), which is the verdict.
    let (_lab, outcome) = run(s1("dma-wakeup-remote-node", "remote-node")).await;
    assert_the_thread_follows_the_irq_only_with_the_revert(&outcome);
}

#[tokio::test]
async fn throughput_triples_with_the_revert_on_real_hardware() {
    let lab = common::lab().await;
    // Selected only by the `kvm` nextest profile (the others skip it by name): here no KVM is a
    // failure, not a pass.
    lab::skip::require_kvm(
        &lab,
        "iops under TCG say nothing about the hardware. Run this on a host where KVM boots \
         guests (or set LAB_ACCEL=kvm) with pinned vCPUs, and with \
         LAB_S1_DEVICE=passthrough:NAME (a host file's I/OAT or PTDMA device, LAB_HOST=FILE) \
         to check patched >= 3x base iops on the real engine.",
    );
    // The engine: the emulated I/OAT, or with LAB_S1_DEVICE=passthrough:NAME the host file's
    // device (a Xeon's I/OAT function or an EPYC's PTDMA), everything else unchanged.
    let device = std::env::var("LAB_S1_DEVICE").ok().map(|text| {
        let mut spec = vec![text
            .parse::<lab::devices::DeviceSpec>()
            .unwrap_or_else(|e| panic!("LAB_S1_DEVICE: {e:#}"))];
        lab::devices::resolve(&mut spec, None).unwrap_or_else(|e| panic!("LAB_S1_DEVICE: {e:#}"));
        spec.remove(0)
    });
    let on_ptdma = device
        .as_ref()
        .is_some_and(|d| d.guest_driver().driver == "ptdma");
    // The Gold 6132 has one LLC per socket and node: the seed's cross-LLC interrupt is a
    // cross-node one there. The EPYC 7313 (NPS1) has four-core CCX LLCs in one node: there it
    // is a cross-CCX one.
    let scenario = if on_ptdma {
        seed()
            .set("engine", "ptdma")
            .set("placement", "cross-llc")
            .topology("epyc-7313-nps1")
    } else {
        seed()
            .set("placement", "remote-node")
            .topology("xeon-gold-6132-2s")
    }
    .named("dma-wakeup-throughput");
    let scenario = match device {
        Some(device) => {
            println!("S1 on the host's {}", device.guest_driver().driver);
            scenario.device(0, device)
        }
        None => scenario,
    };
    // The seed: patched at least 3x base, a shift of twice the base.
    let scenario = scenario.also_primary("iops", Magnitude::relative(2.0));
    let (_lab, outcome) = run(scenario).await;
    outcome.comparison().assert_higher("iops", REVERT).unwrap();
}

/// The seed's third machine, an EPYC 7313, has PTDMA engines: the same experiment on the
/// emulated PTDMA, on an EPYC-shaped topology (AMD CPU model, three 4-core CCX LLCs in one node;
/// the thread starts on CPU 0, the IRQ on CPU 4, the first CPU of the second CCX, and the
/// script's shell runs in the third).
#[tokio::test]
async fn ptdma_cross_ccx_irq_pulls_the_thread_only_with_the_revert() {
    // The verdict: the revert DIFFERENT and higher on the IRQ-CPU share (2026-12-01 soak: base
    // 0.0-96.7%, one boot the balancer moved onto the IRQ CPU, run medians 0.0%; revert
    // 95.6-99.1%; decided at 5 boots a side, or 7 with that boot). Measured before the
    // verdicts (TCG single-threaded, 5 boots per kernel, two boots side by side, 128 KiB
    // buffers, lab-minimal v6.12), 6 runs in a row at load 2-8 (other builds running), all
    // passed in 80-309 s: in the IRQ's CCX base 0.0-0.4% in 26 of 30 boots (outliers 7.2,
    // 22.5, 29.3, 66.8%), revert 98.7-99.4% in every boot; on the IRQ CPU base run medians
    // 0.0-0.1%, revert 96.2-98.6% (single boots 90.1-99.4%); p=0.008 on the three
    // metrics then asserted in every run.
    // Why a third CCX: with only two, the script's shell ran beside the thread on CPU 0; the
    // load balancer then moved the thread (migration/0, active balancing) into the idle IRQ
    // CCX within the first 1-17% of its switch-ins in 4 of 5 base boots of a CI run, where
    // wake_affine_idle()'s shared-cache case kept it: base 82.9-98.9% in the IRQ's CCX against
    // the revert's 98.7-99.4%, which failed P01 on share_in_irq_llc (p=0.032). Earlier, with
    // the seed's 1 MiB buffers on the defconfig kernel (3 runs of 514-721 s): base run medians
    // on the IRQ CPU 10.8-25.0%, revert 87.5-94.6%.
    let experiment = tcg_dmatest(seed())
        .set("engine", "ptdma")
        .named("dma-wakeup-ptdma-cross-llc")
        .topology("ci-epyc-3ccx");
    let (_lab, outcome) = run(experiment).await;
    assert_the_thread_follows_the_irq_only_with_the_revert(&outcome);
}
