//! Where one traced task ran and how it was woken: the fold of a [`super::TaskTrace`]'s events
//! into placement facts ([`TaskPlacement`]) and one record per wakeup ([`task_wakeups`]), the
//! waking paired with its wakeup by pid.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::TraceEvent;
use crate::topology::Topology;

/// Where one task ran and how it was woken, from a trace ([`super::TaskTrace`]'s, parsed by
/// [`super::parse_trace`]). Per-wakeup records, for figures of a scenario's own, are
/// [`task_wakeups`]; which wakeups moved it where, [`super::Attribution`].
///
/// ```
/// use lab::observe::{parse_trace, TaskPlacement};
/// use lab::topology::Topology;
///
/// let trace = "\
///  <idle>-0 [002] d..2. 10.0005: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=copy0 next_pid=90 next_prio=120
///  copy0-90 [002] d..2. 10.0015: sched_switch: prev_comm=copy0 prev_pid=90 prev_prio=120 prev_state=S ==> next_comm=swapper/2 next_pid=0 next_prio=120
/// ";
/// let topology = Topology::by_name("ci-2node-4llc").unwrap();
/// let p = TaskPlacement::from_events("copy", &parse_trace(trace), &topology);
/// assert_eq!(p.share_on(&[2]), Some(100.0));
/// assert_eq!(p.runtime_us[&2].round(), 1000.0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskPlacement {
    /// The command-name prefix the task was found by.
    pub task_prefix: String,
    /// Switch-ins of the task per CPU.
    pub switch_ins: BTreeMap<u32, u64>,
    /// Time on CPU per CPU, microseconds.
    pub runtime_us: BTreeMap<u32, f64>,
    /// The CPU of the task's first switch-in.
    pub first_cpu: Option<u32>,
    /// The CPU of the task's first switch-in after its first wakeup: where a thread created
    /// asleep really started its work.
    pub started_on: Option<u32>,
    /// Wakeups of the task (`sched_wakeup`).
    pub wakeups: u64,
    /// Wakeups whose target CPU is the CPU that ran the waker (the completion's CPU).
    pub wakeups_on_waker_cpu: u64,
    /// CPUs that issued wakeups of the task.
    pub waker_cpus: BTreeMap<u32, u64>,
    /// CPUs wakeups targeted.
    pub wakeup_targets: BTreeMap<u32, u64>,
    /// `sched_migrate_task` events of the task: wakeup placements on another CPU and load
    /// balancing.
    pub migrations: u64,
    /// Migrations done by a CPU's stopper thread (`migration/N`): the load balancer moving the
    /// task while it ran (active balance), not a wakeup choosing a new CPU.
    pub balancer_migrations: u64,
    /// Migrations to another LLC.
    pub cross_llc_migrations: u64,
    /// Migrations to another node.
    pub cross_node_migrations: u64,
    /// Handler invocations of the traced interrupt per CPU.
    pub irq_cpus: BTreeMap<u32, u64>,
}

impl TaskPlacement {
    /// Folds trace events into placement facts, judging LLC and node by `topology`.
    pub fn from_events(
        task_prefix: &str,
        events: &[TraceEvent],
        topology: &Topology,
    ) -> TaskPlacement {
        let mut p = TaskPlacement {
            task_prefix: task_prefix.to_string(),
            ..TaskPlacement::default()
        };
        let is_task = |comm: Option<&String>| is_task(task_prefix, comm);
        let mut on_cpu_since: BTreeMap<u32, f64> = BTreeMap::new();
        let mut pairing = WakeupPairing::default();
        let llc = |c: u32| topology.llc_of(c).map(|l| l.id);
        for e in events {
            match e.name.as_str() {
                "sched_waking" if is_task(e.fields.get("comm")) => pairing.waking(e),
                "sched_switch" => {
                    if is_task(e.fields.get("prev_comm")) {
                        if let Some(since) = on_cpu_since.remove(&e.cpu) {
                            *p.runtime_us.entry(e.cpu).or_default() += e.timestamp_us - since;
                        }
                    }
                    if is_task(e.fields.get("next_comm")) {
                        *p.switch_ins.entry(e.cpu).or_default() += 1;
                        p.first_cpu.get_or_insert(e.cpu);
                        if p.wakeups > 0 {
                            p.started_on.get_or_insert(e.cpu);
                        }
                        on_cpu_since.insert(e.cpu, e.timestamp_us);
                    }
                }
                "sched_wakeup" if is_task(e.fields.get("comm")) => {
                    let wakeup = pairing.wakeup(e);
                    p.wakeups += 1;
                    *p.waker_cpus.entry(wakeup.waker_cpu).or_default() += 1;
                    if let Some(target) = wakeup.target_cpu {
                        *p.wakeup_targets.entry(target).or_default() += 1;
                        if target == wakeup.waker_cpu {
                            p.wakeups_on_waker_cpu += 1;
                        }
                    }
                }
                "sched_migrate_task" if is_task(e.fields.get("comm")) => {
                    let cpu = |k: &str| e.fields.get(k).and_then(|v| v.parse::<u32>().ok());
                    if let (Some(from), Some(to)) = (cpu("orig_cpu"), cpu("dest_cpu")) {
                        p.migrations += 1;
                        if e.task.starts_with("migration/") {
                            p.balancer_migrations += 1;
                        }
                        let node = |c| topology.node_of(c).map(|n| n.id);
                        if llc(from) != llc(to) {
                            p.cross_llc_migrations += 1;
                        }
                        if node(from) != node(to) {
                            p.cross_node_migrations += 1;
                        }
                    }
                }
                "irq_handler_entry" => {
                    *p.irq_cpus.entry(e.cpu).or_default() += 1;
                }
                _ => {}
            }
        }
        p
    }

    /// Switch-ins of the task on every CPU.
    pub fn total_switch_ins(&self) -> u64 {
        self.switch_ins.values().sum()
    }

    /// Percentage of the task's switch-ins on any of `cpus`; `None` when it never ran.
    pub fn share_on(&self, cpus: &[u32]) -> Option<f64> {
        let total = self.total_switch_ins();
        if total == 0 {
            return None;
        }
        let on: u64 = cpus.iter().filter_map(|c| self.switch_ins.get(c)).sum();
        Some(100.0 * on as f64 / total as f64)
    }

    /// The share of the task's time on CPU spent on `cpus`, in percent; `None` if it never
    /// ran. For a task that seldom switches (a polling thread: a handful of switch-ins a boot)
    /// this is where it ran, where a share of switch-ins counts a moment's visit as much as
    /// seconds of running.
    pub fn runtime_share_on(&self, cpus: &[u32]) -> Option<f64> {
        let total: f64 = self.runtime_us.values().sum();
        if total <= 0.0 {
            return None;
        }
        // A fold from +0.0: an empty f64 sum is -0.0, which a table would print as "-0.0%".
        let on = cpus
            .iter()
            .filter_map(|c| self.runtime_us.get(c))
            .fold(0.0, |sum, us| sum + us);
        Some(100.0 * on / total)
    }

    /// The largest single-CPU share of switch-ins, in percent, and that CPU.
    pub fn max_cpu_share(&self) -> (Option<u32>, f64) {
        let total = self.total_switch_ins();
        match self.switch_ins.iter().max_by_key(|(_, n)| **n) {
            Some((cpu, n)) if total > 0 => (Some(*cpu), 100.0 * *n as f64 / total as f64),
            _ => (None, 0.0),
        }
    }
}

/// One wakeup of a traced task: which CPU woke it, who ran there, where the task was and where
/// the wakeup put it. Generic facts; a scenario folds them with its topology into its own
/// figures (S1: which cross-LLC wakeups pulled its thread to the waker's LLC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskWakeup {
    /// The CPU that issued the wakeup: `sched_waking`'s when the trace has it (a queued
    /// wakeup's `sched_wakeup` fires on the target CPU, in the IPI), else `sched_wakeup`'s.
    pub waker_cpu: u32,
    /// The task running on the waker's CPU, by command name (`<idle>` for an interrupt on an
    /// idle CPU, `ksoftirqd/N` for deferred softirqs, ...); `None` without a `sched_waking`.
    pub waker: Option<String>,
    /// The CPU the task was on when woken (`sched_waking`'s `target_cpu`); `None` without a
    /// `sched_waking`.
    pub woken_on: Option<u32>,
    /// The CPU the wakeup placed the task on (`sched_wakeup`'s `target_cpu`).
    pub target_cpu: Option<u32>,
    /// Issued in hard-interrupt context (`sched_waking`'s flags: `h` or `H`).
    pub in_hard_irq: bool,
    /// Issued in softirq context (`sched_waking`'s flags: `s`), not in a hard interrupt.
    pub in_soft_irq: bool,
}

/// Every wakeup of the tasks whose command name starts with `task_prefix`, in trace order.
pub fn task_wakeups(task_prefix: &str, events: &[TraceEvent]) -> Vec<TaskWakeup> {
    let mut pairing = WakeupPairing::default();
    let mut out = Vec::new();
    for e in events
        .iter()
        .filter(|e| is_task(task_prefix, e.fields.get("comm")))
    {
        match e.name.as_str() {
            "sched_waking" => pairing.waking(e),
            "sched_wakeup" => out.push(pairing.wakeup(e)),
            _ => {}
        }
    }
    out
}

fn is_task(task_prefix: &str, comm: Option<&String>) -> bool {
    comm.is_some_and(|c| c.starts_with(task_prefix))
}

/// Pairs a task's `sched_waking` (fired on the waker's CPU, while the task is still where it
/// slept) with the `sched_wakeup` that follows it (the placement), by pid.
#[derive(Default)]
struct WakeupPairing {
    /// Per pid: the `sched_waking` seen last.
    pending: BTreeMap<String, Waking>,
}

/// A `sched_waking`: the waker's CPU and command name, the task's CPU, the context.
struct Waking {
    cpu: u32,
    waker: String,
    on: u32,
    flags: String,
}

impl WakeupPairing {
    fn waking(&mut self, e: &TraceEvent) {
        let on = e
            .fields
            .get("target_cpu")
            .and_then(|t| t.parse::<u32>().ok());
        if let (Some(pid), Some(on)) = (e.fields.get("pid"), on) {
            let waker = e.task.rsplit_once('-').map_or(&*e.task, |(c, _)| c);
            let waking = Waking {
                cpu: e.cpu,
                waker: waker.to_string(),
                on,
                flags: e.flags.clone(),
            };
            self.pending.insert(pid.clone(), waking);
        }
    }

    fn wakeup(&mut self, e: &TraceEvent) -> TaskWakeup {
        let target_cpu = e
            .fields
            .get("target_cpu")
            .and_then(|t| t.parse::<u32>().ok());
        match e.fields.get("pid").and_then(|pid| self.pending.remove(pid)) {
            Some(w) => {
                // tracefs' context column: `h`/`H` hard IRQ (`H`: in an NMI too), `s` softirq.
                let hard = w.flags.contains(['h', 'H']);
                TaskWakeup {
                    waker_cpu: w.cpu,
                    waker: Some(w.waker),
                    woken_on: Some(w.on),
                    target_cpu,
                    in_hard_irq: hard,
                    in_soft_irq: !hard && w.flags.contains('s'),
                }
            }
            None => TaskWakeup {
                waker_cpu: e.cpu,
                waker: None,
                woken_on: None,
                target_cpu,
                in_hard_irq: false,
                in_soft_irq: false,
            },
        }
    }
}
