use super::*;
use crate::topology::Topology;

/// A task created asleep on CPU 0, woken from CPU 2 and placed there, later moved 2 -> 5 by
/// CPU 2's stopper; scenario unit tests read it too.
pub(crate) const TRACE: &str = "\
# tracer: nop
#
  kworker/0:1-12      [000] d..2.    10.000100: sched_switch: prev_comm=kworker/0:1 prev_pid=12 prev_prio=120 prev_state=I ==> next_comm=dma0chan0-copy0 next_pid=90 next_prio=120
 dma0chan0-copy0-90   [000] d..2.    10.000300: sched_switch: prev_comm=dma0chan0-copy0 prev_pid=90 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
          <idle>-0     [002] d.h1.    10.000400: irq_handler_entry: irq=24 name=ioat-msix
          <idle>-0     [002] d.s2.    10.000440: sched_waking: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=000
          <idle>-0     [002] d.s2.    10.000450: sched_wakeup: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=002
          <idle>-0     [002] d.s2.    10.000451: sched_migrate_task: comm=dma0chan0-copy0 pid=90 prio=120 orig_cpu=0 dest_cpu=2
          <idle>-0     [002] d..2.    10.000500: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=dma0chan0-copy0 next_pid=90 next_prio=120
     migration/2-30    [002] d..2.    10.000900: sched_migrate_task: comm=dma0chan0-copy0 pid=90 prio=130 orig_cpu=2 dest_cpu=5
";

#[test]
fn parses_events_and_fields() {
    let events = parse_trace(TRACE);
    assert_eq!(events.len(), 8);
    assert_eq!(events[0].task, "kworker/0:1-12");
    assert_eq!(events[7].task, "migration/2-30");
    assert_eq!(events[2].name, "irq_handler_entry");
    assert_eq!(events[2].cpu, 2);
    assert!(events[2].flags.contains('h'));
    assert_eq!(events[0].fields["next_comm"], "dma0chan0-copy0");
    assert_eq!(events[4].fields["target_cpu"], "002");
}

#[test]
fn placement_folds_switches_wakeups_and_migrations() {
    // ci-2node-4llc: CPUs 0 and 2 are in different LLCs of node 0.
    let topology = Topology::by_name("ci-2node-4llc").unwrap();
    let p = TaskPlacement::from_events("dma0chan0-copy", &parse_trace(TRACE), &topology);
    assert_eq!(p.switch_ins, BTreeMap::from([(0, 1), (2, 1)]));
    assert_eq!(p.first_cpu, Some(0));
    // The first switch-in came before any wakeup (a thread created asleep); its work
    // started where the wakeup put it.
    assert_eq!(p.started_on, Some(2));
    assert_eq!((p.wakeups, p.wakeups_on_waker_cpu), (1, 1));
    // The same wakeup as a record: woken from CPU 2 while on CPU 0, placed on CPU 2.
    assert_eq!(
        task_wakeups("dma0chan0-copy", &parse_trace(TRACE)),
        [TaskWakeup {
            waker_cpu: 2,
            waker: Some("<idle>".into()),
            woken_on: Some(0),
            target_cpu: Some(2),
            in_hard_irq: false,
            in_soft_irq: true,
        }]
    );
    // One wakeup migration (0 -> 2, same node) and one active balance by CPU 2's stopper
    // (2 -> 5, to node 1).
    assert_eq!(
        (
            p.migrations,
            p.balancer_migrations,
            p.cross_llc_migrations,
            p.cross_node_migrations
        ),
        (2, 1, 2, 1)
    );
    assert_eq!(p.irq_cpus, BTreeMap::from([(2, 1)]));
    assert!((p.runtime_us[&0] - 200.0).abs() < 1e-6);
    assert_eq!(p.share_on(&[2]), Some(50.0));
}

#[test]
fn runtime_share_weighs_time_on_cpu_not_switch_ins() {
    // Six switch-ins, one of them a moment's visit to CPU 2: a sixth of the switch-ins,
    // a thousandth of the time.
    let p = TaskPlacement {
        switch_ins: BTreeMap::from([(0, 5), (2, 1)]),
        runtime_us: BTreeMap::from([(0, 2_997_000.0), (2, 3_000.0)]),
        ..TaskPlacement::default()
    };
    assert!((p.share_on(&[2]).unwrap() - 100.0 / 6.0).abs() < 1e-9);
    assert!((p.runtime_share_on(&[2]).unwrap() - 0.1).abs() < 1e-9);
    // Never on CPU 5: +0.0, not -0.0; a task that never ran: none.
    assert!(p.runtime_share_on(&[5]).unwrap().is_sign_positive());
    assert_eq!(TaskPlacement::default().runtime_share_on(&[0]), None);
}

#[test]
fn a_queued_wakeup_counts_for_the_waker_cpu_not_the_cpu_it_fired_on() {
    // The IRQ on CPU 2 wakes the task whose CPU is 0; the wakeup is queued to CPU 0 and its
    // sched_wakeup fires there, in the IPI. It stayed in its LLC: not pulled.
    let trace = "\
          <idle>-0     [002] d.h1.    10.000400: irq_handler_entry: irq=24 name=ioat-msix
     ksoftirqd/2-21    [002] d.s2.    10.000440: sched_waking: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=000
          <idle>-0     [000] dNh2.    10.000450: sched_wakeup: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=000
";
    let topology = Topology::by_name("ci-2node-4llc").unwrap();
    let p = TaskPlacement::from_events("dma0chan0-copy", &parse_trace(trace), &topology);
    assert_eq!(p.waker_cpus, BTreeMap::from([(2, 1)]));
    assert_eq!(p.wakeups_on_waker_cpu, 0);
    assert_eq!(
        task_wakeups("dma0chan0-copy", &parse_trace(trace)),
        [TaskWakeup {
            waker_cpu: 2,
            waker: Some("ksoftirqd/2".into()),
            woken_on: Some(0),
            target_cpu: Some(0),
            in_hard_irq: false,
            in_soft_irq: true,
        }]
    );
}

#[test]
fn a_wakeup_without_its_waking_is_recorded_where_it_fired() {
    // The trace started between the two events: the waker's CPU is the one sched_wakeup
    // fired on, and who woke the task from where is unknown.
    let trace = "\
          <idle>-0     [003] d.s2.    10.000450: sched_wakeup: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=003
     kworker/1:0-14    [001] d..2.    10.000460: sched_waking: comm=kworker/0:1 pid=12 prio=120 target_cpu=000
";
    assert_eq!(
        task_wakeups("dma0chan0-copy", &parse_trace(trace)),
        [TaskWakeup {
            waker_cpu: 3,
            waker: None,
            woken_on: None,
            target_cpu: Some(3),
            in_hard_irq: false,
            in_soft_irq: false,
        }]
    );
}

#[test]
fn every_kind_of_ring_loss_refuses_the_sample() {
    let stats = "entries: 10\noverrun: 0\ncommit overrun: 0\ndropped events: 0\n\
                     entries: 4\noverrun: 7\ncommit overrun: 1\ndropped events: 2\n\
                     entries: 2\noverrun: 3\ncommit overrun: 0\n";
    let mut lost = RingLoss::from_stats(stats);
    assert_eq!(
        (lost.overrun, lost.commit_overrun, lost.dropped),
        (10, 1, 2)
    );
    lost.lost_lines = lost_lines("x\nCPU:1 [LOST 5 EVENTS]\ny\nCPU:0 [LOST 2 EVENTS]\n");
    assert_eq!(lost.lost_lines, 7);
    assert_eq!(lost.total(), 20);
    let err = lost.refuse("the sched trace", 4096).unwrap_err();
    let rejected = crate::sample::rejection(&err).expect("a rejected sample, not a failure");
    assert!(
        rejected
            .cause
            .contains("10 overwritten, 1 commit overruns, 2 dropped, 7 reported"),
        "{}",
        rejected.cause
    );
    // A commit overrun alone is a loss too.
    let only_commit = RingLoss::from_stats("overrun: 0\ncommit overrun: 3\n");
    assert!(only_commit.refuse("t", 1).is_err());
    assert!(RingLoss::from_stats("overrun: 0\ncommit overrun: 0\n")
        .refuse("t", 1)
        .is_ok());
    assert_eq!(RingLoss::from_stats("").total(), 0);
}

#[test]
fn event_counts_per_event_and_cpu() {
    let counts = EventCounts::from_events(&parse_trace(TRACE));
    assert_eq!(counts.total("sched_switch"), 3);
    assert_eq!(
        counts.per_cpu["sched_migrate_task"],
        BTreeMap::from([(2, 2)])
    );
    assert_eq!(counts.total("no_such_event"), 0);
}

#[test]
fn interrupts_delta_per_cpu() {
    let before = Interrupts::parse(
            "           CPU0       CPU1\n  24:          5          0  PCI-MSIX-0000:00:03.0 0-edge ioat-msix\n NMI:   0 0  Non-maskable interrupts\n",
        )
        .unwrap();
    let after = Interrupts::parse(
            "           CPU0       CPU1\n  24:          5       1000  PCI-MSIX-0000:00:03.0 0-edge ioat-msix\n NMI:   0 0  Non-maskable interrupts\n",
        )
        .unwrap();
    assert_eq!(after.find("ioat-msix"), vec!["24".to_string()]);
    assert_eq!(after.delta(&before, "24"), vec![0, 1000]);
    // Summed over IRQs; an IRQ the snapshots lack adds nothing.
    assert_eq!(after.delta_summed(&before, [24, 99], 2), vec![0, 1000]);
}

/// The head and a few more lines of a lab-minimal v6.12 guest's /proc/vmstat, before and
/// after a workload (values as read, lines as the kernel prints them).
const VMSTAT_BEFORE: &str = "\
nr_free_pages 934102
nr_zone_inactive_anon 2671
nr_zone_active_anon 0
nr_mlock 0
pgfault 15212
pgmajfault 0
pgmigrate_success 0
pgmigrate_fail 0
thp_fault_alloc 0
";
const VMSTAT_AFTER: &str = "\
nr_free_pages 800140
nr_zone_inactive_anon 133699
nr_zone_active_anon 0
nr_mlock 0
pgfault 1064311
pgmajfault 0
pgmigrate_success 48213
pgmigrate_fail 3
thp_fault_alloc 0
";

#[test]
fn vmstat_deltas_of_chosen_counters() {
    let before = VmStat::parse(VMSTAT_BEFORE).unwrap();
    let after = VmStat::parse(VMSTAT_AFTER).unwrap();
    assert_eq!(after.counters.len(), 9);
    assert_eq!(after.get("pgfault"), Some(1064311));
    let d = after
        .delta(
            &before,
            &["pgfault", "pgmigrate_success", "nr_free_pages", "nr_mlock"],
        )
        .unwrap();
    assert_eq!(
        d,
        BTreeMap::from([
            ("pgfault".to_string(), 1049099),
            ("pgmigrate_success".to_string(), 48213),
            // A gauge that fell.
            ("nr_free_pages".to_string(), -133962),
            ("nr_mlock".to_string(), 0),
        ])
    );
    assert!(after.delta(&before, &[]).unwrap().is_empty());
}

#[test]
fn vmstat_missing_counters_and_bad_lines_are_errors() {
    let before = VmStat::parse(VMSTAT_BEFORE).unwrap();
    let after = VmStat::parse(VMSTAT_AFTER).unwrap();
    let e = after
        .delta(&before, &["pgfault", "no_such_counter"])
        .unwrap_err();
    assert!(e.to_string().contains("\"no_such_counter\""), "{e}");
    let fewer = VmStat::parse("pgfault 1\n").unwrap();
    assert!(after.delta(&fewer, &["pgmigrate_success"]).is_err());
    for (text, want) in [
        ("", "empty"),
        ("pgfault\n", "expected `name value`"),
        ("pgfault 1 2\n", "expected `name value`"),
        ("pgfault x\n", "no count"),
        ("pgfault -1\n", "no count"),
        ("pgfault 1\npgfault 2\n", "twice"),
    ] {
        let e = format!("{:#}", VmStat::parse(text).unwrap_err());
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

/// The first 200 events of two recorded S1 boots (`lab compare`, ci-2node-4llc, the DMA
/// interrupt pinned to CPU 2, 2026-12-07, 2-core AMD EPYC under TCG): v6.12, and the
/// wake_affine_idle revert. The copy thread is started on CPU 0 (LLC 0); CPU 2 (LLC 1) takes
/// its interrupts and wakes it from softirq.
const S1_V612: &str = include_str!("fixtures/s1-v6.12.trace");
const S1_REVERT: &str = include_str!("fixtures/s1-revert.trace");

#[test]
fn attribution_tells_a_pull_across_llcs_from_wakeups_that_leave_the_thread_in_place() {
    let topology = Topology::by_name("ci-2node-4llc").unwrap();
    let attribute = |trace: &str| {
        Attribution::of(
            &task_wakeups("dma0chan0-copy", &parse_trace(trace)),
            &topology,
        )
    };
    let idle_softirq = "softirq on <idle>";
    // v6.12: all 37 of the IRQ CPU's softirq wakeups (from the idle CPU 2) leave the thread on
    // its CPU in the other LLC; none pulls it to the waker.
    let base = attribute(S1_V612);
    assert_eq!(base.landed(idle_softirq, Landing::SameCpu), 37, "{base:?}");
    assert_eq!(base.landed(idle_softirq, Landing::OtherLlc), 0);
    assert_eq!(base.toward_waker[idle_softirq][&Landing::OtherLlc], 37);
    assert_eq!(base.waker_cpus[idle_softirq], BTreeMap::from([(2, 37)]));
    // One more from ksoftirqd on CPU 2, and the start: the shell on CPU 0 wakes the thread
    // from CPU 2's LLC to its own CPU.
    assert_eq!(base.landed("softirq on ksoftirqd/N", Landing::SameCpu), 1);
    assert_eq!(base.landed("task on sh", Landing::OtherLlc), 1);
    assert_eq!((base.total(), base.unattributed), (39, 0));
    // The revert: the first such wakeup pulls the thread across to the waker's CPU, and the
    // 37 after it find it there already: the verdict's share comes from one pull.
    let revert = attribute(S1_REVERT);
    assert_eq!(
        revert.landed(idle_softirq, Landing::OtherLlc),
        1,
        "{revert:?}"
    );
    assert_eq!(revert.landed(idle_softirq, Landing::SameCpu), 37);
    assert_eq!(revert.toward_waker[idle_softirq][&Landing::SameCpu], 37);
    assert_eq!(revert.landed_anywhere(Landing::OtherLlc), 1);
    // The placement of the same boots agrees: v6.12 ran on CPU 0, the revert on CPU 2.
    let ran = |trace: &str| {
        TaskPlacement::from_events("dma0chan0-copy", &parse_trace(trace), &topology).switch_ins
    };
    assert_eq!(ran(S1_V612), BTreeMap::from([(0, 36), (1, 3)]));
    assert_eq!(ran(S1_REVERT), BTreeMap::from([(0, 3), (1, 1), (2, 37)]));
}

#[test]
fn landings_follow_the_topology_from_the_cpu_to_the_node() {
    // ci-smt: cores of two threads (0-1, 2-3), LLCs 0-3 and 4-7, one node; ci-2node-4llc: LLCs
    // of two CPUs, nodes of two LLCs.
    let smt = Topology::by_name("ci-smt").unwrap();
    let llcs = Topology::by_name("ci-2node-4llc").unwrap();
    assert_eq!(Landing::of(3, 3, &llcs), Landing::SameCpu);
    assert_eq!(Landing::of(0, 1, &llcs), Landing::SameLlc);
    assert_eq!(Landing::of(0, 2, &llcs), Landing::OtherLlc);
    assert_eq!(Landing::of(0, 5, &llcs), Landing::OtherNode);
    assert_eq!(Landing::of(2, 3, &smt), Landing::SmtSibling);
    assert_eq!(Landing::of(1, 2, &smt), Landing::SameLlc);
    assert_eq!(Landing::of(1, 6, &smt), Landing::OtherLlc);
    assert_eq!(Landing::OtherLlc.label(), "other LLC");
    // The waker's context comes from the flags of its sched_waking.
    let trace = "\
          <idle>-0     [001] dNh2.    10.000440: sched_waking: comm=t0 pid=9 prio=120 target_cpu=000
          <idle>-0     [000] dNh2.    10.000450: sched_wakeup: comm=t0 pid=9 prio=120 target_cpu=000
     kworker/1:2-40    [001] d..2.    10.000540: sched_waking: comm=t0 pid=9 prio=120 target_cpu=000
     kworker/1:2-40    [001] d..2.    10.000550: sched_wakeup: comm=t0 pid=9 prio=120 target_cpu=001
";
    let a = Attribution::of(&task_wakeups("t", &parse_trace(trace)), &llcs);
    assert_eq!(a.landed("hardirq on <idle>", Landing::SameCpu), 1, "{a:?}");
    assert_eq!(
        a.landed("task on kworker/N:N", Landing::SameLlc),
        1,
        "{a:?}"
    );
}
