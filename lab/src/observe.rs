//! Observations collected inside the guest: where a task ran and was woken (tracefs sched and irq
//! events), per-CPU interrupt counts (`/proc/interrupts` deltas) and `/proc/vmstat` counters
//! (deltas of the names a caller picks). Raw traces are returned with the parsed values so
//! results can keep them for anyone who wants to look.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::topology::Topology;
use crate::vm::Vm;

mod attribution;
mod wakeups;
pub use attribution::{waker_class, Attribution, Landing};
pub use wakeups::task_class;
pub(crate) use wakeups::{allowed_cpus, read_id_cpulists, WakeupTrace, Wakeups, HARD_IRQ};

const TRACEFS: &str = "/sys/kernel/tracing";

/// A tracefs session following one task (by command-name prefix) and, optionally, one
/// interrupt (by handler-name prefix or IRQ number).
#[derive(Debug, Clone)]
pub struct TaskTrace {
    pub(crate) task_prefix: String,
    pub(crate) irq_name: Option<String>,
    pub(crate) irq_number: Option<u32>,
    /// Per-CPU ring size; the seed run produces a few thousand events.
    pub(crate) buffer_kb: u32,
}

impl TaskTrace {
    /// Follows tasks whose command name starts with `task_prefix`.
    pub fn of(task_prefix: &str) -> TaskTrace {
        TaskTrace {
            task_prefix: task_prefix.to_string(),
            irq_name: None,
            irq_number: None,
            buffer_kb: 4096,
        }
    }

    /// Follows the interrupt whose handler name starts with `handler_prefix` too.
    pub fn with_irq(mut self, handler_prefix: &str) -> TaskTrace {
        self.irq_name = Some(handler_prefix.to_string());
        self
    }

    /// Follows the interrupt with this number (its handler's name varies by driver).
    pub fn with_irq_number(mut self, irq: u32) -> TaskTrace {
        self.irq_number = Some(irq);
        self
    }

    fn events(&self) -> Vec<(&'static str, String)> {
        let t = &self.task_prefix;
        let mut events = vec![
            (
                "sched/sched_switch",
                format!("prev_comm ~ \"{t}*\" || next_comm ~ \"{t}*\""),
            ),
            // Fires on the waker's CPU with the wakee's CPU before the choice (`target_cpu`);
            // sched_wakeup fires after it, on the target CPU when the wakeup was queued there.
            ("sched/sched_waking", format!("comm ~ \"{t}*\"")),
            ("sched/sched_wakeup", format!("comm ~ \"{t}*\"")),
            ("sched/sched_migrate_task", format!("comm ~ \"{t}*\"")),
        ];
        if let Some(irq) = &self.irq_name {
            events.push(("irq/irq_handler_entry", format!("name ~ \"{irq}*\"")));
        } else if let Some(irq) = self.irq_number {
            events.push(("irq/irq_handler_entry", format!("irq == {irq}")));
        }
        events
    }

    /// Clears the ring, sets filters and starts recording.
    pub async fn start(&self, vm: &Vm) -> Result<()> {
        start_tracing(vm, self.buffer_kb, &self.events())
            .await
            .context("starting the sched trace")
    }

    /// Stops recording and returns the raw trace text. A ring that lost events refuses the
    /// boot's sample: shares computed from a trace with holes would be a silently different
    /// sample.
    pub async fn stop(&self, vm: &Vm) -> Result<String> {
        let (text, lost) = stop_tracing(vm, &self.events()).await?;
        lost.refuse("the sched trace", self.buffer_kb)?;
        Ok(text)
    }
}

/// Clears tracefs' ring, sizes it, filters and enables `events` (`subsystem/event`, filter)
/// and starts recording.
async fn start_tracing(
    vm: &Vm,
    buffer_kb: u32,
    events: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Result<()> {
    let mut script = format!(
        "set -e\ncd {TRACEFS}\necho 0 > tracing_on\necho > trace\necho {buffer_kb} > buffer_size_kb\necho global > trace_clock\n"
    );
    for (event, filter) in events {
        let (event, filter) = (event.as_ref(), filter.as_ref());
        let filter = if filter.is_empty() { "0" } else { filter };
        script.push_str(&format!(
            "echo '{filter}' > events/{event}/filter\necho 1 > events/{event}/enable\n"
        ));
    }
    script.push_str("echo 1 > tracing_on\n");
    vm.sh(&script).await?;
    Ok(())
}

/// Stops recording, disables `events` and returns the raw trace with what the ring lost.
async fn stop_tracing(
    vm: &Vm,
    events: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Result<(String, RingLoss)> {
    vm.sh(&format!("echo 0 > {TRACEFS}/tracing_on")).await?;
    let raw = vm.guest().read_file(&format!("{TRACEFS}/trace")).await?;
    let stats = vm
        .sh(&format!("cat {TRACEFS}/per_cpu/cpu*/stats"))
        .await
        .context("reading the trace ring's per-CPU stats")?;
    let mut disable = format!("cd {TRACEFS}\n");
    for (event, _) in events {
        disable.push_str(&format!("echo 0 > events/{}/enable\n", event.as_ref()));
    }
    vm.sh(&disable).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut lost = RingLoss::from_stats(&stats);
    lost.lost_lines = lost_lines(&text);
    Ok((text, lost))
}

/// Events a trace ring lost, summed over its CPUs (tracefs' `per_cpu/cpu*/stats`) and from the
/// trace text itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RingLoss {
    /// Overwritten before they were read (`overrun:`).
    pub overrun: u64,
    /// Dropped by the writer when the ring was full mid-commit (`commit overrun:`).
    pub commit_overrun: u64,
    /// Dropped because the ring was full and not overwriting (`dropped events:`).
    pub dropped: u64,
    /// Events the reader was told it missed (`LOST n EVENTS` lines of the trace).
    pub lost_lines: u64,
}

impl RingLoss {
    /// Reads the counters of tracefs' per-CPU `stats` files (concatenated).
    pub(crate) fn from_stats(stats: &str) -> RingLoss {
        let sum = |key: &str| -> u64 {
            stats
                .lines()
                .filter_map(|l| l.strip_prefix(key))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum()
        };
        RingLoss {
            overrun: sum("overrun:"),
            commit_overrun: sum("commit overrun:"),
            dropped: sum("dropped events:"),
            lost_lines: 0,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.overrun + self.commit_overrun + self.dropped + self.lost_lines
    }

    /// A [`crate::sample::reject`] naming every counter when `what` lost anything.
    pub(crate) fn refuse(&self, what: &str, buffer_kb: u32) -> Result<()> {
        if self.total() == 0 {
            return Ok(());
        }
        Err(crate::sample::reject(format!(
            "{what} lost events ({} KiB per CPU): {} overwritten, {} commit overruns, {} \
             dropped, {} reported lost in the trace; counts from it would be low",
            buffer_kb, self.overrun, self.commit_overrun, self.dropped, self.lost_lines
        )))
    }
}

/// The sum of the trace's `CPU:N [LOST n EVENTS]` notes.
fn lost_lines(trace: &str) -> u64 {
    trace
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("[LOST ")? + "[LOST ".len()..];
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// A tracefs session that records chosen events (each with its filter) over a span and counts
/// them per event and CPU. Counting needs every event: a ring that overflowed is an error, not a
/// smaller count.
#[derive(Debug, Clone)]
pub(crate) struct EventCount {
    /// `subsystem/event` and its tracefs filter ("" for none).
    pub events: Vec<(String, String)>,
    /// Per-CPU ring size.
    pub buffer_kb: u32,
}

/// What an [`EventCount`] session saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct EventCounts {
    /// Per event name (`sched_switch`), per CPU.
    pub per_cpu: BTreeMap<String, BTreeMap<u32, u64>>,
}

impl EventCount {
    pub(crate) fn new(buffer_kb: u32) -> EventCount {
        EventCount {
            events: Vec::new(),
            buffer_kb,
        }
    }

    /// Also records `event` (`sched/sched_migrate_task`) where `filter` holds ("" for all).
    pub(crate) fn event(mut self, event: &str, filter: &str) -> EventCount {
        self.events.push((event.to_string(), filter.to_string()));
        self
    }

    pub(crate) async fn start(&self, vm: &Vm) -> Result<()> {
        start_tracing(vm, self.buffer_kb, &self.events)
            .await
            .context("starting the event count")
    }

    /// Stops recording; returns the raw trace and its parsed events. Refuses the boot's
    /// sample when the ring lost events.
    pub(crate) async fn stop(&self, vm: &Vm) -> Result<(String, Vec<TraceEvent>)> {
        let (text, lost) = stop_tracing(vm, &self.events).await?;
        lost.refuse("the event count's trace", self.buffer_kb)?;
        parse_trace_off_thread(text).await
    }
}

impl EventCounts {
    pub(crate) fn from_events<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> EventCounts {
        let mut counts = EventCounts::default();
        for e in events {
            *counts
                .per_cpu
                .entry(e.name.clone())
                .or_default()
                .entry(e.cpu)
                .or_default() += 1;
        }
        counts
    }

    /// All CPUs' count of `event`.
    #[cfg(test)]
    pub(crate) fn total(&self, event: &str) -> u64 {
        self.per_cpu.get(event).map_or(0, |m| m.values().sum())
    }
}

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// The task that was running when the event fired, `comm-pid` as tracefs prints it.
    pub task: String,
    /// The CPU it fired on.
    pub cpu: u32,
    /// Its timestamp, in microseconds.
    pub timestamp_us: f64,
    /// The context flags column (`d.h2.`): `h` hard IRQ, `s` softirq.
    pub flags: String,
    /// The event (`sched_switch`).
    pub name: String,
    /// Its `key=value` fields.
    pub fields: BTreeMap<String, String>,
}

/// [`parse_trace`] on a blocking thread (a trace runs to 100 MB; parsing it on the runtime
/// thread would stall every other boot of the run), returning the text with its events.
pub(crate) async fn parse_trace_off_thread(text: String) -> Result<(String, Vec<TraceEvent>)> {
    tokio::task::spawn_blocking(move || {
        let events = parse_trace(&text);
        (text, events)
    })
    .await
    .context("parsing a trace")
}

/// Parses the default tracefs text format. Lines that are not events (headers, `LOST` notes)
/// are skipped.
pub fn parse_trace(text: &str) -> Vec<TraceEvent> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<TraceEvent> {
    if line.starts_with('#') {
        return None;
    }
    // "<task>-<pid> [cpu] flags timestamp: event: fields"; the task name may contain spaces,
    // so anchor on the "[NNN]" column.
    let open = line.find(" [")?;
    let close = open + line[open..].find(']')?;
    let cpu: u32 = line[open + 2..close].trim().parse().ok()?;
    let rest = line[close + 1..].trim_start();
    let (flags, rest) = rest.split_once(' ')?;
    let (ts, rest) = rest.trim_start().split_once(": ")?;
    let (name, fields) = rest.split_once(": ")?;
    let timestamp_us = ts.trim().parse::<f64>().ok()? * 1e6;
    Some(TraceEvent {
        task: line[..open].trim().to_string(),
        cpu,
        timestamp_us,
        flags: flags.to_string(),
        name: name.trim().to_string(),
        fields: parse_fields(fields),
    })
}

/// `key=value` pairs; values end at the next ` key=` (comm values may contain spaces).
fn parse_fields(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let mut key: Option<String> = None;
    let mut value = String::new();
    for token in tokens {
        if token == "==>" {
            continue;
        }
        match token.split_once('=') {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                if let Some(k) = key.take() {
                    out.insert(k, std::mem::take(&mut value));
                }
                key = Some(k.to_string());
                value = v.to_string();
            }
            _ => {
                if key.is_some() {
                    value.push(' ');
                    value.push_str(token);
                }
            }
        }
    }
    if let Some(k) = key {
        out.insert(k, value);
    }
    out
}

/// Where one task ran and how it was woken, from a trace ([`TaskTrace`]'s, parsed by
/// [`parse_trace`]). Per-wakeup records, for figures of a scenario's own, are
/// [`task_wakeups`]; which wakeups moved it where, [`Attribution`].
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

/// A `/proc/interrupts` snapshot: per IRQ line, its name column and per-CPU counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interrupts {
    pub(crate) lines: BTreeMap<String, IrqLine>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct IrqLine {
    pub per_cpu: Vec<u64>,
    /// The trailing description (chip, hwirq, handler names).
    pub description: String,
}

impl Interrupts {
    /// Parses the text of `/proc/interrupts`.
    pub fn parse(text: &str) -> Result<Interrupts> {
        let mut lines = text.lines();
        let header = lines.next().context("empty /proc/interrupts")?;
        let ncpus = header
            .split_whitespace()
            .filter(|w| w.starts_with("CPU"))
            .count();
        if ncpus == 0 {
            bail!("/proc/interrupts has no CPU header: {header:?}");
        }
        let mut out = Interrupts::default();
        for line in lines {
            let Some((irq, rest)) = line.trim_start().split_once(':') else {
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let per_cpu: Vec<u64> = words
                .iter()
                .take(ncpus)
                .map_while(|w| w.parse().ok())
                .collect();
            let description = words
                .iter()
                .skip(per_cpu.len())
                .cloned()
                .collect::<Vec<_>>()
                .join(" ");
            out.lines.insert(
                irq.trim().to_string(),
                IrqLine {
                    per_cpu,
                    description,
                },
            );
        }
        Ok(out)
    }

    /// Reads the guest's `/proc/interrupts` now.
    pub async fn read(vm: &Vm) -> Result<Interrupts> {
        let raw = vm.guest().read_file("/proc/interrupts").await?;
        Interrupts::parse(&String::from_utf8_lossy(&raw))
    }

    /// IRQ numbers whose description contains `name` (e.g. `ioat-msix`).
    pub fn find(&self, name: &str) -> Vec<String> {
        self.lines
            .iter()
            .filter(|(irq, l)| {
                irq.chars().all(|c| c.is_ascii_digit()) && l.description.contains(name)
            })
            .map(|(irq, _)| irq.clone())
            .collect()
    }

    /// Per-CPU counts of every IRQ in `irqs` together since `before`, for `nr_cpus` CPUs (a
    /// device's queue vectors summed: where its completions ran).
    pub(crate) fn delta_summed(
        &self,
        before: &Interrupts,
        irqs: impl IntoIterator<Item = u32>,
        nr_cpus: usize,
    ) -> Vec<u64> {
        let mut sum = vec![0u64; nr_cpus];
        for irq in irqs {
            for (slot, n) in sum.iter_mut().zip(self.delta(before, &irq.to_string())) {
                *slot += n;
            }
        }
        sum
    }

    /// Per-CPU counts of `irq` since `before`.
    pub fn delta(&self, before: &Interrupts, irq: &str) -> Vec<u64> {
        let now = self
            .lines
            .get(irq)
            .map(|l| l.per_cpu.clone())
            .unwrap_or_default();
        let then = before
            .lines
            .get(irq)
            .map(|l| l.per_cpu.clone())
            .unwrap_or_default();
        now.iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(then.get(i).copied().unwrap_or(0)))
            .collect()
    }
}

/// Per-CPU counts (index = CPU) as a `{"cpu": count}` map, the shape records and reports use.
pub(crate) fn per_cpu_map(counts: &[u64]) -> BTreeMap<String, u64> {
    counts
        .iter()
        .enumerate()
        .map(|(cpu, n)| (cpu.to_string(), *n))
        .collect()
}

/// A `/proc/vmstat` snapshot: every counter by name. Which counters matter, and what their
/// changes mean, is the caller's business.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct VmStat {
    pub counters: BTreeMap<String, u64>,
}

impl VmStat {
    /// Parses `name value` lines; any other line is an error (the file has no headers).
    pub(crate) fn parse(text: &str) -> Result<VmStat> {
        let mut counters = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(value), None) = (words.next(), words.next(), words.next()) else {
                bail!(
                    "/proc/vmstat line {}: expected `name value`, got {line:?}",
                    i + 1
                );
            };
            let value: u64 = value.parse().with_context(|| {
                format!(
                    "/proc/vmstat line {}: {name} has no count: {value:?}",
                    i + 1
                )
            })?;
            if counters.insert(name.to_string(), value).is_some() {
                bail!("/proc/vmstat line {}: {name} appears twice", i + 1);
            }
        }
        if counters.is_empty() {
            bail!("/proc/vmstat is empty");
        }
        Ok(VmStat { counters })
    }

    pub(crate) async fn read(vm: &Vm) -> Result<VmStat> {
        let raw = vm.guest().read_file("/proc/vmstat").await?;
        VmStat::parse(&String::from_utf8_lossy(&raw))
    }

    pub(crate) fn get(&self, name: &str) -> Option<u64> {
        self.counters.get(name).copied()
    }

    /// How each of `names` changed since `before` (negative for gauges that fell). A name
    /// missing from either snapshot is an error naming it: the kernel does not count it (a
    /// config option is off), and a zero would look like a measurement.
    pub(crate) fn delta(&self, before: &VmStat, names: &[&str]) -> Result<BTreeMap<String, i64>> {
        let mut out = BTreeMap::new();
        for name in names {
            let (Some(then), Some(now)) = (before.get(name), self.get(name)) else {
                bail!(
                    "/proc/vmstat has no counter {name:?} (the kernel does not count it); it has {} others",
                    self.counters.len()
                );
            };
            let change = i128::from(now) - i128::from(then);
            let change = i64::try_from(change)
                .with_context(|| format!("/proc/vmstat {name}: change {change} out of range"))?;
            out.insert(name.to_string(), change);
        }
        Ok(out)
    }
}

#[cfg(test)]
pub(crate) mod tests;
