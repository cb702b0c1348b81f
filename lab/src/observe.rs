//! Observations collected inside the guest: where a task ran and was woken (tracefs sched and irq
//! events), per-CPU interrupt counts (`/proc/interrupts` deltas) and `/proc/vmstat` counters
//! (deltas of the names a caller picks). Raw traces are returned with the parsed values so
//! results can keep them for anyone who wants to look.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::vm::Vm;

mod attribution;
mod crossings;
mod placement;
mod spread;
mod wakeups;
mod warm_up;
pub use attribution::{waker_class, Attribution, Landing};
pub use crossings::CrossLlcWakeups;
pub use placement::{task_wakeups, TaskPlacement, TaskWakeup};
pub use spread::{InterruptSpread, VectorTargets};
pub use wakeups::{
    allowed_cpus, read_id_cpulists, task_class, WakeupTrace, Wakeups, HARD_IRQ, SOFT_IRQ,
};
pub use warm_up::warm_up_irq;

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

    /// With a per-CPU ring of `kb` KiB (default 4096): a longer or busier run than S1's loses
    /// events in the default ring, and `stop` then refuses the boot saying so.
    pub fn buffer_kb(mut self, kb: u32) -> TaskTrace {
        self.buffer_kb = kb;
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
pub struct EventCount {
    /// `subsystem/event` and its tracefs filter ("" for none).
    pub(crate) events: Vec<(String, String)>,
    /// Per-CPU ring size.
    pub(crate) buffer_kb: u32,
}

/// What an [`EventCount`] session saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventCounts {
    /// Per event name (`sched_switch`), per CPU.
    pub per_cpu: BTreeMap<String, BTreeMap<u32, u64>>,
}

impl EventCount {
    /// No events yet ([`EventCount::event`] adds them), a ring of `buffer_kb` KiB per CPU.
    pub fn new(buffer_kb: u32) -> EventCount {
        EventCount {
            events: Vec::new(),
            buffer_kb,
        }
    }

    /// Also records `event` (`sched/sched_migrate_task`) where `filter` holds ("" for all).
    pub fn event(mut self, event: &str, filter: &str) -> EventCount {
        self.events.push((event.to_string(), filter.to_string()));
        self
    }

    /// Starts recording in `vm`'s tracefs.
    pub async fn start(&self, vm: &Vm) -> Result<()> {
        start_tracing(vm, self.buffer_kb, &self.events)
            .await
            .context("starting the event count")
    }

    /// Stops recording; returns the raw trace and its parsed events. Refuses the boot's
    /// sample when the ring lost events.
    pub async fn stop(&self, vm: &Vm) -> Result<(String, Vec<TraceEvent>)> {
        let (text, lost) = stop_tracing(vm, &self.events).await?;
        lost.refuse("the event count's trace", self.buffer_kb)?;
        parse_trace_off_thread(text).await
    }
}

impl EventCounts {
    /// Every event of `events` counted by name and CPU.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a TraceEvent>) -> EventCounts {
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
pub async fn parse_trace_off_thread(text: String) -> Result<(String, Vec<TraceEvent>)> {
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
    pub fn delta_summed(
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
pub fn per_cpu_map(counts: &[u64]) -> BTreeMap<String, u64> {
    counts
        .iter()
        .enumerate()
        .map(|(cpu, n)| (cpu.to_string(), *n))
        .collect()
}

/// A `/proc/vmstat` snapshot: every counter by name. Which counters matter, and what their
/// changes mean, is the caller's business.
///
/// ```
/// use lab::observe::VmStat;
///
/// let before = VmStat::parse("numa_pte_updates 100\nnuma_hint_faults 7\n").unwrap();
/// let after = VmStat::parse("numa_pte_updates 1600\nnuma_hint_faults 9\n").unwrap();
/// let delta = after.delta(&before, &["numa_pte_updates"]).unwrap();
/// assert_eq!(delta["numa_pte_updates"], 1500);
/// // A counter the kernel does not keep is an error, not a zero.
/// assert!(after.delta(&before, &["numa_huge_pte_updates"]).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmStat {
    /// Counter name -> value.
    pub counters: BTreeMap<String, u64>,
}

impl VmStat {
    /// Parses `name value` lines; any other line is an error (the file has no headers).
    pub fn parse(text: &str) -> Result<VmStat> {
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

    /// Reads the guest's `/proc/vmstat` now.
    pub async fn read(vm: &Vm) -> Result<VmStat> {
        let raw = vm.guest().read_file("/proc/vmstat").await?;
        VmStat::parse(&String::from_utf8_lossy(&raw))
    }

    /// One counter's value.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.get(name).copied()
    }

    /// How each of `names` changed since `before` (negative for gauges that fell). A name
    /// missing from either snapshot is an error naming it: the kernel does not count it (a
    /// config option is off), and a zero would look like a measurement.
    pub fn delta(&self, before: &VmStat, names: &[&str]) -> Result<BTreeMap<String, i64>> {
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
