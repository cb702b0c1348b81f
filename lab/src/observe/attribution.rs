//! The wakeup behind every placement: each wakeup of a watched task classed by its waker (the
//! CPU it came from, the task running there, idle or not, interrupt context or not) and by
//! where it landed, relative to the CPU the task was on and to the waker's CPU (same CPU, SMT
//! sibling, same LLC, another LLC, another node). A verdict on "share in the IRQ's LLC" says
//! that the task moved; this says which wakeups moved it: a pull across LLCs by the idle IRQ
//! CPU, or a local wakeup inside an LLC it had already reached.
//!
//! ```
//! use lab::observe::{parse_trace, task_wakeups, Attribution, Landing};
//! use lab::topology::Topology;
//!
//! // CPU 2's softirq wakes the thread that slept on CPU 0 and puts it on CPU 2.
//! let trace = "\
//!  <idle>-0 [002] d.s2. 10.000440: sched_waking: comm=copy0 pid=90 prio=120 target_cpu=000
//!  <idle>-0 [002] d.s2. 10.000450: sched_wakeup: comm=copy0 pid=90 prio=120 target_cpu=002
//! ";
//! let topology = Topology::by_name("ci-2node-4llc").unwrap();
//! let a = Attribution::of(&task_wakeups("copy", &parse_trace(trace)), &topology);
//! assert_eq!(a.landed("softirq on <idle>", Landing::OtherLlc), 1);
//! assert_eq!(a.toward_waker["softirq on <idle>"][&Landing::SameCpu], 1);
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::TaskWakeup;
use crate::topology::Topology;

/// Where a wakeup put the task, relative to another CPU: the closest of these that holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Landing {
    /// The CPU itself.
    SameCpu,
    /// Another hardware thread of the same core.
    SmtSibling,
    /// Another core sharing its last-level cache.
    SameLlc,
    /// Another LLC of the same node.
    OtherLlc,
    /// Another NUMA node.
    OtherNode,
}

impl Landing {
    /// Where `to` is seen from `from` on `topology` (CPUs it does not know count as another
    /// node).
    pub fn of(from: u32, to: u32, topology: &Topology) -> Landing {
        let llc = |c: u32| topology.llc_of(c).map(|l| l.id);
        let node = |c: u32| topology.node_of(c).map(|n| n.id);
        if from == to {
            Landing::SameCpu
        } else if topology.smt_siblings(from).contains(&to) {
            Landing::SmtSibling
        } else if llc(from).is_some() && llc(from) == llc(to) {
            Landing::SameLlc
        } else if node(from).is_some() && node(from) == node(to) {
            Landing::OtherLlc
        } else {
            Landing::OtherNode
        }
    }

    /// How the table and page name it.
    pub fn label(self) -> &'static str {
        match self {
            Landing::SameCpu => "same CPU",
            Landing::SmtSibling => "SMT sibling",
            Landing::SameLlc => "same LLC",
            Landing::OtherLlc => "other LLC",
            Landing::OtherNode => "other node",
        }
    }
}

/// A task's wakeups counted by waker and landing ([`Attribution::of`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// Waker ([`waker_class`]) -> where the wakeup put the task, seen from the CPU it was on
    /// (`same_cpu`: it stayed) -> wakeups.
    pub from_task_cpu: BTreeMap<String, BTreeMap<Landing, u64>>,
    /// Waker -> where the wakeup put the task, seen from the waker's CPU (`same_llc` or closer:
    /// pulled to the waker) -> wakeups.
    pub toward_waker: BTreeMap<String, BTreeMap<Landing, u64>>,
    /// Waker -> waker CPU -> wakeups: which CPUs the wakeups of each kind came from.
    pub waker_cpus: BTreeMap<String, BTreeMap<u32, u64>>,
    /// Wakeups whose `sched_waking` the trace lacks, or whose placement it does not show: not
    /// attributed.
    pub unattributed: u64,
}

impl Attribution {
    /// Counts `wakeups` ([`super::task_wakeups`]) by waker and landing on `topology`.
    pub fn of(wakeups: &[TaskWakeup], topology: &Topology) -> Attribution {
        let mut out = Attribution::default();
        for w in wakeups {
            let (Some(_), Some(woken_on), Some(target)) = (&w.waker, w.woken_on, w.target_cpu)
            else {
                out.unattributed += 1;
                continue;
            };
            let waker = waker_class(w);
            let count = |map: &mut BTreeMap<String, BTreeMap<Landing, u64>>, landing| {
                *map.entry(waker.clone())
                    .or_default()
                    .entry(landing)
                    .or_default() += 1;
            };
            count(
                &mut out.from_task_cpu,
                Landing::of(woken_on, target, topology),
            );
            count(
                &mut out.toward_waker,
                Landing::of(w.waker_cpu, target, topology),
            );
            *out.waker_cpus
                .entry(waker.clone())
                .or_default()
                .entry(w.waker_cpu)
                .or_default() += 1;
        }
        out
    }

    /// Wakeups by `waker` that put the task at `landing` from the CPU it was on.
    pub fn landed(&self, waker: &str, landing: Landing) -> u64 {
        self.from_task_cpu
            .get(waker)
            .and_then(|l| l.get(&landing))
            .copied()
            .unwrap_or(0)
    }

    /// All attributed wakeups that put the task at `landing` from the CPU it was on.
    pub fn landed_anywhere(&self, landing: Landing) -> u64 {
        self.from_task_cpu
            .values()
            .filter_map(|l| l.get(&landing))
            .sum()
    }

    /// Attributed wakeups.
    pub fn total(&self) -> u64 {
        self.from_task_cpu.values().flat_map(|l| l.values()).sum()
    }
}

/// A wakeup's waker as the attribution names it: the context (`hardirq`, `softirq` or `task`)
/// and the task running on the waker's CPU with its digits written `N` (`<idle>`,
/// `kworker/N:NH`, `ksoftirqd/N`), so one kind of waker counts together whichever CPU it ran on
/// (`softirq on <idle>`: an interrupt's softirq on an idle CPU).
pub fn waker_class(w: &TaskWakeup) -> String {
    let context = if w.in_hard_irq {
        "hardirq"
    } else if w.in_soft_irq {
        "softirq"
    } else {
        "task"
    };
    let task = w.waker.as_deref().unwrap_or("?");
    format!("{context} on {}", super::wakeups::task_class(task))
}
