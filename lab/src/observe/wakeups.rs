//! Who woke whom: tracefs `sched_waking` / `sched_wakeup` / `sched_migrate_task` for chosen
//! tasks (by command-name prefix), summarised per task class: which contexts and task classes
//! woke them, how often a wakeup moved them to another CPU, and how often they migrated.
//! A task class is the command name with every run of digits written `N` (`kworker/3:1H` ->
//! `kworker/N:NH`, `kworker/u33:0` -> `kworker/uN:N`), so per-CPU and unbound workers, or the
//! jobs of one program, count together.
//!
//! ```
//! use lab::observe::{parse_trace, Wakeups, HARD_IRQ};
//!
//! // fio's job woken twice: from a hard interrupt (the NVMe's completion), then by a kworker
//! // that put it on another CPU.
//! let trace = "\
//!  <idle>-0 [003] d.h2. 10.000100: sched_waking: comm=fio pid=90 prio=120 target_cpu=001
//!  <idle>-0 [003] d.h2. 10.000110: sched_wakeup: comm=fio pid=90 prio=120 target_cpu=001
//!  kworker/3:1H-50 [003] d..2. 10.000200: sched_waking: comm=fio pid=90 prio=120 target_cpu=001
//!  kworker/3:1H-50 [003] d..2. 10.000210: sched_wakeup: comm=fio pid=90 prio=120 target_cpu=003
//! ";
//! let w = Wakeups::from_events(&parse_trace(trace));
//! assert_eq!(w.woken_by("fio", HARD_IRQ), 1);
//! assert_eq!(w.woken_by("fio", "kworker/N:NH"), 1);
//! assert_eq!(w.moved_at_wakeup["fio"], 1);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{start_tracing, stop_tracing, TraceEvent};
use crate::topology::parse_cpulist;
use crate::vm::Vm;

/// The waker of a wakeup issued from hard-interrupt context, whatever task it interrupted.
pub const HARD_IRQ: &str = "hardirq";
/// The waker of a wakeup issued from softirq context.
pub const SOFT_IRQ: &str = "softirq";

/// A tracefs session recording the wakeups and migrations of tasks whose command name starts
/// with one of `prefixes`. Every event is needed for the counts: an overflowing ring fails.
#[derive(Debug, Clone)]
pub struct WakeupTrace {
    pub(crate) prefixes: Vec<String>,
    /// Per-CPU ring size.
    pub(crate) buffer_kb: u32,
}

/// What a [`WakeupTrace`] saw, per wakee class.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Wakeups {
    /// Wakee class -> waker (a task class, [`HARD_IRQ`] or [`SOFT_IRQ`]) -> wakeups.
    pub woken_by: BTreeMap<String, BTreeMap<String, u64>>,
    /// Wakee class -> wakeups that put the task on another CPU than the one it last ran on.
    pub moved_at_wakeup: BTreeMap<String, u64>,
    /// Wakee class -> wakeups whose chosen CPU the trace showed (`sched_wakeup`).
    pub placed: BTreeMap<String, u64>,
    /// Task class -> `sched_migrate_task` events (wakeup placement and load balancing).
    pub migrations: BTreeMap<String, u64>,
    /// Wakee class -> pids seen woken, for looking up their allowed CPUs.
    pub pids: BTreeMap<String, BTreeSet<u32>>,
    /// pid -> wakeups from hard-interrupt context, for every pid so woken.
    pub hard_irq_wakees: BTreeMap<u32, u64>,
}

impl WakeupTrace {
    /// Records the wakeups of tasks whose command name starts with one of `prefixes`, in a
    /// 16 MiB ring per CPU.
    pub fn of(prefixes: &[&str]) -> WakeupTrace {
        WakeupTrace {
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            buffer_kb: 16384,
        }
    }

    /// With a ring of `kb` KiB per CPU (a busier workload loses events in a smaller one, and
    /// the boot's sample is refused).
    pub fn buffer_kb(mut self, kb: u32) -> WakeupTrace {
        self.buffer_kb = kb;
        self
    }

    fn events(&self) -> Vec<(&'static str, String)> {
        let filter = self
            .prefixes
            .iter()
            .map(|p| format!("comm ~ \"{p}*\""))
            .collect::<Vec<_>>()
            .join(" || ");
        vec![
            ("sched/sched_waking", filter.clone()),
            ("sched/sched_wakeup", filter.clone()),
            ("sched/sched_migrate_task", filter),
        ]
    }

    /// Starts recording in `vm`'s tracefs.
    pub async fn start(&self, vm: &Vm) -> Result<()> {
        start_tracing(vm, self.buffer_kb, &self.events())
            .await
            .context("starting the wakeup trace")
    }

    /// Stops recording; returns the raw trace and its summary. Refuses the boot's sample when
    /// the ring lost events.
    pub async fn stop(&self, vm: &Vm) -> Result<(String, Wakeups)> {
        let (text, lost) = stop_tracing(vm, &self.events()).await?;
        lost.refuse("the wakeup trace", self.buffer_kb)?;
        let (text, events) = super::parse_trace_off_thread(text).await?;
        Ok((text, Wakeups::from_events(&events)))
    }
}

/// The class of a command name: digit runs become `N`.
pub fn task_class(comm: &str) -> String {
    let mut out = String::with_capacity(comm.len());
    let mut in_digits = false;
    for c in comm.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// `comm-pid` as tracefs prints the running task -> its command name.
fn comm_of(task: &str) -> &str {
    task.rsplit_once('-').map_or(task, |(comm, _)| comm)
}

impl Wakeups {
    /// Counts a parsed trace's `sched_waking`, `sched_wakeup` and `sched_migrate_task` events
    /// (of whatever tasks it holds).
    pub fn from_events(events: &[TraceEvent]) -> Wakeups {
        let mut w = Wakeups::default();
        // pid -> (CPU it last ran on as sched_waking saw it).
        let mut waking_cpu: BTreeMap<u32, u32> = BTreeMap::new();
        for e in events {
            let comm = e.fields.get("comm").map(String::as_str).unwrap_or("");
            let class = task_class(comm);
            let pid: Option<u32> = e.fields.get("pid").and_then(|p| p.parse().ok());
            let target: Option<u32> = e.fields.get("target_cpu").and_then(|c| c.parse().ok());
            match e.name.as_str() {
                "sched_waking" => {
                    let waker = if e.flags.contains('h') || e.flags.contains('H') {
                        HARD_IRQ.to_string()
                    } else if e.flags.contains('s') {
                        SOFT_IRQ.to_string()
                    } else {
                        task_class(comm_of(&e.task))
                    };
                    if let Some(pid) = pid {
                        w.pids.entry(class.clone()).or_default().insert(pid);
                        if waker == HARD_IRQ {
                            *w.hard_irq_wakees.entry(pid).or_default() += 1;
                        }
                        if let Some(cpu) = target {
                            waking_cpu.insert(pid, cpu);
                        }
                    }
                    *w.woken_by
                        .entry(class)
                        .or_default()
                        .entry(waker)
                        .or_default() += 1;
                }
                "sched_wakeup" => {
                    let (Some(pid), Some(cpu)) = (pid, target) else {
                        continue;
                    };
                    if let Some(prev) = waking_cpu.remove(&pid) {
                        *w.placed.entry(class.clone()).or_default() += 1;
                        if prev != cpu {
                            *w.moved_at_wakeup.entry(class).or_default() += 1;
                        }
                    }
                }
                "sched_migrate_task" => {
                    *w.migrations.entry(class).or_default() += 1;
                }
                _ => {}
            }
        }
        w
    }

    /// Wakeups of `wakee` (a class) in all.
    pub fn wakeups_of(&self, wakee: &str) -> u64 {
        self.woken_by.get(wakee).map_or(0, |m| m.values().sum())
    }

    /// Wakeups of `wakee` whose waker is `waker`.
    pub fn woken_by(&self, wakee: &str, waker: &str) -> u64 {
        self.woken_by
            .get(wakee)
            .and_then(|m| m.get(waker))
            .copied()
            .unwrap_or(0)
    }

    /// Wakeups issued in hard-interrupt context, all wakees together.
    #[cfg(test)]
    pub(crate) fn hard_irq_wakeups(&self) -> u64 {
        self.woken_by.values().filter_map(|m| m.get(HARD_IRQ)).sum()
    }
}

/// The CPUs each task may run on (`Cpus_allowed_list` of `/proc/PID/status`); tasks that
/// exited meanwhile are left out. With [`Wakeups::pids`]: which wakees were per-CPU tasks.
pub async fn allowed_cpus(vm: &Vm, pids: &BTreeSet<u32>) -> Result<BTreeMap<u32, Vec<u32>>> {
    read_id_cpulists(
        vm,
        pids.iter().copied(),
        "a=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$id/status 2>/dev/null) && [ -n \"$a\" ] && echo $id $a",
    )
    .await
    .context("reading the woken tasks' allowed CPUs")
}

/// Runs `line` (shell, with `$id` set) for each id in one guest command and parses its `ID
/// CPULIST` output; ids whose line prints nothing are left out (one guest command for many
/// interrupts' `effective_affinity_list` or many tasks' allowed CPUs).
pub async fn read_id_cpulists(
    vm: &Vm,
    ids: impl IntoIterator<Item = u32>,
    line: &str,
) -> Result<BTreeMap<u32, Vec<u32>>> {
    let list = ids
        .into_iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(" ");
    if list.is_empty() {
        return Ok(BTreeMap::new());
    }
    let out = vm
        .sh(&format!("for id in {list}; do {line}; done; true"))
        .await?;
    parse_id_cpulists(&out)
}

/// `ID CPULIST` lines (a pid or an IRQ number and its CPUs) into a map; blank lines skipped.
pub(crate) fn parse_id_cpulists(text: &str) -> Result<BTreeMap<u32, Vec<u32>>> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (id, cpus) = line
            .trim()
            .split_once(' ')
            .with_context(|| format!("bad `ID CPULIST` line {line:?}"))?;
        let id: u32 = id
            .parse()
            .with_context(|| format!("bad number in {line:?}"))?;
        out.insert(
            id,
            parse_cpulist(cpus.trim()).with_context(|| format!("bad CPU list in {line:?}"))?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
          <idle>-0       [005] d.h4.   100.000100: sched_waking: comm=kworker/5:1 pid=76 prio=120 target_cpu=005
          <idle>-0       [005] dNh5.   100.000110: sched_wakeup: comm=kworker/5:1 pid=76 prio=120 target_cpu=005
     kworker/5:1-76      [005] d..2.   100.000200: sched_waking: comm=fio pid=300 prio=120 target_cpu=002
     kworker/5:1-76      [005] d..2.   100.000210: sched_migrate_task: comm=fio pid=300 prio=120 orig_cpu=2 dest_cpu=5
     kworker/5:1-76      [005] d..3.   100.000220: sched_wakeup: comm=fio pid=300 prio=120 target_cpu=005
             fio-301     [003] d.h2.   100.000300: sched_waking: comm=fio pid=302 prio=120 target_cpu=003
             fio-301     [003] d.h2.   100.000310: sched_wakeup: comm=fio pid=302 prio=120 target_cpu=003
    kworker/u33:0-56     [001] d..2.   100.000400: sched_waking: comm=fio pid=302 prio=120 target_cpu=003
";

    #[test]
    fn classes_collapse_digits() {
        assert_eq!(task_class("kworker/3:1H"), "kworker/N:NH");
        assert_eq!(task_class("kworker/u33:0"), "kworker/uN:N");
        assert_eq!(task_class("fio"), "fio");
    }

    #[test]
    fn wakeups_are_counted_by_waker_and_placement() {
        let w = Wakeups::from_events(&super::super::parse_trace(TRACE));
        assert_eq!(w.woken_by("kworker/N:N", HARD_IRQ), 1);
        assert_eq!(w.wakeups_of("fio"), 3);
        assert_eq!(w.woken_by("fio", "kworker/N:N"), 1);
        assert_eq!(w.woken_by("fio", HARD_IRQ), 1);
        assert_eq!(w.woken_by("fio", "kworker/uN:N"), 1);
        assert_eq!(w.hard_irq_wakeups(), 2);
        // The kworker's wakeup 5 -> 5 stayed; fio 300 moved 2 -> 5; fio 302 stayed on 3; the
        // last waking has no wakeup (still pending when the trace stopped).
        assert_eq!(w.placed["fio"], 2);
        assert_eq!(w.moved_at_wakeup["fio"], 1);
        assert_eq!(w.moved_at_wakeup.get("kworker/N:N"), None);
        assert_eq!(w.migrations["fio"], 1);
        assert_eq!(w.hard_irq_wakees, BTreeMap::from([(76, 1), (302, 1)]));
        assert_eq!(w.pids["fio"], BTreeSet::from([300, 302]));
    }

    #[test]
    fn allowed_cpus_parse() {
        let m = parse_id_cpulists("76 5\n300 1-7\n").unwrap();
        assert_eq!(m[&76], [5]);
        assert_eq!(m[&300], (1..=7).collect::<Vec<_>>());
        assert!(parse_id_cpulists("76\n").is_err());
    }
}
