//! Observations collected inside the guest: where a task ran and was woken (tracefs sched and irq
//! events), and per-CPU interrupt counts (`/proc/interrupts` deltas). Raw traces are returned
//! with the parsed values so results can keep them for anyone who wants to look.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::topology::Topology;
use crate::vm::Vm;

const TRACEFS: &str = "/sys/kernel/tracing";

/// A tracefs session following one task (by command-name prefix) and, optionally, one
/// interrupt (by handler-name prefix or IRQ number).
#[derive(Debug, Clone)]
pub struct TaskTrace {
    pub task_prefix: String,
    pub irq_name: Option<String>,
    pub irq_number: Option<u32>,
    /// Per-CPU ring size; the seed run produces a few thousand events.
    pub buffer_kb: u32,
}

impl TaskTrace {
    pub fn of(task_prefix: &str) -> TaskTrace {
        TaskTrace {
            task_prefix: task_prefix.to_string(),
            irq_name: None,
            irq_number: None,
            buffer_kb: 4096,
        }
    }

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
        let mut script = format!(
            "set -e\ncd {TRACEFS}\necho 0 > tracing_on\necho > trace\necho {} > buffer_size_kb\necho global > trace_clock\n",
            self.buffer_kb
        );
        for (event, filter) in self.events() {
            script.push_str(&format!(
                "echo '{filter}' > events/{event}/filter\necho 1 > events/{event}/enable\n"
            ));
        }
        script.push_str("echo 1 > tracing_on\n");
        vm.sh(&script).await.context("starting the sched trace")?;
        Ok(())
    }

    /// Stops recording and returns the raw trace text.
    pub async fn stop(&self, vm: &Vm) -> Result<String> {
        vm.sh(&format!("echo 0 > {TRACEFS}/tracing_on")).await?;
        let raw = vm.guest().read_file(&format!("{TRACEFS}/trace")).await?;
        let mut disable = format!("cd {TRACEFS}\n");
        for (event, _) in self.events() {
            disable.push_str(&format!("echo 0 > events/{event}/enable\n"));
        }
        vm.sh(&disable).await?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        if text.contains("LOST") && text.contains("EVENTS") {
            tracing::warn!("the trace lost events; raise buffer_kb");
        }
        Ok(text)
    }
}

/// One parsed trace line.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEvent {
    /// The task that was running when the event fired, `comm-pid` as tracefs prints it.
    pub task: String,
    pub cpu: u32,
    pub timestamp_us: f64,
    /// The context flags column (`d.h2.`): `h` hard IRQ, `s` softirq.
    pub flags: String,
    pub name: String,
    pub fields: BTreeMap<String, String>,
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

/// Where one task ran and how it was woken, from a trace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskPlacement {
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
    pub wakeups: u64,
    /// Wakeups whose target CPU is the CPU that ran the waker (the completion's CPU).
    pub wakeups_on_waker_cpu: u64,
    /// CPUs that issued wakeups of the task.
    pub waker_cpus: BTreeMap<u32, u64>,
    /// CPUs wakeups targeted.
    pub wakeup_targets: BTreeMap<u32, u64>,
    pub migrations: u64,
    /// Migrations done by a CPU's stopper thread (`migration/N`): the load balancer moving the
    /// task while it ran (active balance), not a wakeup choosing a new CPU.
    pub balancer_migrations: u64,
    pub cross_llc_migrations: u64,
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
        let is_task = |comm: Option<&String>| comm.is_some_and(|c| c.starts_with(task_prefix));
        let mut on_cpu_since: BTreeMap<u32, f64> = BTreeMap::new();
        for e in events {
            match e.name.as_str() {
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
                    p.wakeups += 1;
                    *p.waker_cpus.entry(e.cpu).or_default() += 1;
                    if let Some(target) = e
                        .fields
                        .get("target_cpu")
                        .and_then(|t| t.parse::<u32>().ok())
                    {
                        *p.wakeup_targets.entry(target).or_default() += 1;
                        if target == e.cpu {
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
                        let llc = |c| topology.llc_of(c).map(|l| l.id);
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

    pub fn total_switch_ins(&self) -> u64 {
        self.switch_ins.values().sum()
    }

    /// Percentage of the task's switch-ins on any of `cpus`.
    pub fn share_on(&self, cpus: &[u32]) -> f64 {
        let total = self.total_switch_ins();
        if total == 0 {
            return 0.0;
        }
        let on: u64 = cpus.iter().filter_map(|c| self.switch_ins.get(c)).sum();
        100.0 * on as f64 / total as f64
    }

    /// The largest single-CPU share of switch-ins, in percent, and that CPU.
    pub fn max_cpu_share(&self) -> (Option<u32>, f64) {
        let total = self.total_switch_ins();
        match self.switch_ins.iter().max_by_key(|(_, n)| **n) {
            Some((cpu, n)) if total > 0 => (Some(*cpu), 100.0 * *n as f64 / total as f64),
            _ => (None, 0.0),
        }
    }

    /// Per-LLC shares of switch-ins, in percent, by LLC id.
    pub fn llc_shares(&self, topology: &Topology) -> BTreeMap<u32, f64> {
        topology
            .llcs()
            .iter()
            .map(|l| (l.id, self.share_on(&l.cpus)))
            .collect()
    }

    /// Per-node shares of switch-ins, in percent, by node id.
    pub fn node_shares(&self, topology: &Topology) -> BTreeMap<u32, f64> {
        topology
            .nodes()
            .iter()
            .map(|n| (n.id, self.share_on(&n.cpus)))
            .collect()
    }
}

/// A `/proc/interrupts` snapshot: per IRQ line, its name column and per-CPU counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interrupts {
    pub lines: BTreeMap<String, IrqLine>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IrqLine {
    pub per_cpu: Vec<u64>,
    /// The trailing description (chip, hwirq, handler names).
    pub description: String,
}

impl Interrupts {
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

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
# tracer: nop
#
  kworker/0:1-12      [000] d..2.    10.000100: sched_switch: prev_comm=kworker/0:1 prev_pid=12 prev_prio=120 prev_state=I ==> next_comm=dma0chan0-copy0 next_pid=90 next_prio=120
 dma0chan0-copy0-90   [000] d..2.    10.000300: sched_switch: prev_comm=dma0chan0-copy0 prev_pid=90 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
          <idle>-0     [002] d.h1.    10.000400: irq_handler_entry: irq=24 name=ioat-msix
          <idle>-0     [002] d.s2.    10.000450: sched_wakeup: comm=dma0chan0-copy0 pid=90 prio=120 target_cpu=002
          <idle>-0     [002] d.s2.    10.000451: sched_migrate_task: comm=dma0chan0-copy0 pid=90 prio=120 orig_cpu=0 dest_cpu=2
          <idle>-0     [002] d..2.    10.000500: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=dma0chan0-copy0 next_pid=90 next_prio=120
     migration/2-30    [002] d..2.    10.000900: sched_migrate_task: comm=dma0chan0-copy0 pid=90 prio=130 orig_cpu=2 dest_cpu=5
";

    #[test]
    fn parses_events_and_fields() {
        let events = parse_trace(TRACE);
        assert_eq!(events.len(), 7);
        assert_eq!(events[0].task, "kworker/0:1-12");
        assert_eq!(events[6].task, "migration/2-30");
        assert_eq!(events[2].name, "irq_handler_entry");
        assert_eq!(events[2].cpu, 2);
        assert!(events[2].flags.contains('h'));
        assert_eq!(events[0].fields["next_comm"], "dma0chan0-copy0");
        assert_eq!(events[3].fields["target_cpu"], "002");
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
        assert_eq!(p.share_on(&[2]), 50.0);
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
    }
}
