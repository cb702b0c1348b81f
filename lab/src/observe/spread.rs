//! How a device's interrupts spread over the CPUs over a run, from their count per CPU (the
//! sum over the vectors looked at, `Interrupts::delta_summed`): the busiest CPU's share, how
//! many CPUs and nodes took a real part, and the busiest against the mean. And where its
//! vectors target (`effective_affinity_list`): how many CPUs and nodes, and the most vectors on
//! one CPU (the seed S5's ITS put every vector on the first CPU of its mask).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::topology::Topology;

/// A CPU takes part with at least this share of the interrupts (a stray one does not count).
const CPU_PART: f64 = 0.01;
/// A node takes part with at least this share.
const NODE_PART: f64 = 0.05;

/// The spread of one run's interrupts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InterruptSpread {
    /// Interrupts over all CPUs.
    pub total: u64,
    /// The busiest CPU's share of them, in %.
    pub busiest_share: f64,
    /// CPUs with at least 1% of them.
    pub cpus: usize,
    /// Nodes with at least 5% of them.
    pub nodes: usize,
    /// The busiest CPU's count over the mean per CPU (1 is even, the CPU count all on one).
    pub max_over_mean: f64,
}

impl InterruptSpread {
    /// The spread of `per_cpu` (index: CPU) on `topology`; `None` when there was none.
    pub fn of(per_cpu: &[u64], topology: &Topology) -> Option<InterruptSpread> {
        let total: u64 = per_cpu.iter().sum();
        if total == 0 {
            return None;
        }
        let part = |n: u64, share: f64| n as f64 >= share * total as f64;
        let mut per_node = BTreeMap::<u32, u64>::new();
        for (cpu, n) in per_cpu.iter().enumerate() {
            if let Some(node) = topology.node_of(cpu as u32) {
                *per_node.entry(node.id).or_default() += n;
            }
        }
        let max = per_cpu.iter().copied().max().unwrap_or(0);
        let mean = total as f64 / per_cpu.len() as f64;
        Some(InterruptSpread {
            total,
            busiest_share: 100.0 * max as f64 / total as f64,
            cpus: per_cpu.iter().filter(|n| part(**n, CPU_PART)).count(),
            nodes: per_node.values().filter(|n| part(**n, NODE_PART)).count(),
            max_over_mean: max as f64 / mean,
        })
    }
}

/// Where a set of vectors targets: read from each one's `effective_affinity_list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VectorTargets {
    /// Distinct CPUs the vectors target.
    pub cpus: usize,
    /// Distinct nodes of those CPUs.
    pub nodes: usize,
    /// The most vectors targeting one CPU.
    pub max_per_cpu: usize,
}

impl VectorTargets {
    /// The targets of `effective` (IRQ -> its effective CPUs) on `topology`.
    pub fn of(effective: &BTreeMap<u32, Vec<u32>>, topology: &Topology) -> VectorTargets {
        let mut per_cpu: BTreeMap<u32, usize> = BTreeMap::new();
        for cpus in effective.values() {
            for cpu in cpus {
                *per_cpu.entry(*cpu).or_default() += 1;
            }
        }
        let nodes: BTreeSet<u32> = per_cpu
            .keys()
            .filter_map(|c| topology.node_of(*c).map(|n| n.id))
            .collect();
        VectorTargets {
            cpus: per_cpu.len(),
            nodes: nodes.len(),
            max_per_cpu: per_cpu.values().copied().max().unwrap_or(0),
        }
    }

    /// Each of `irqs`' effective CPUs, read in the guest in one command.
    pub async fn read(
        vm: &crate::vm::Vm,
        irqs: impl IntoIterator<Item = u32>,
    ) -> anyhow::Result<BTreeMap<u32, Vec<u32>>> {
        use anyhow::Context;
        super::read_id_cpulists(
            vm,
            irqs,
            "read e < /proc/irq/$id/effective_affinity_list; echo $id $e",
        )
        .await
        .context("reading effective_affinity_list")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_stray_and_single_cpu_spreads_read_as_such() {
        let t = Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap();
        let even = InterruptSpread::of(&[100, 110, 90, 100, 105, 95, 100, 100], &t).unwrap();
        assert_eq!((even.total, even.cpus, even.nodes), (800, 8, 2));
        assert!((even.max_over_mean - 1.1).abs() < 1e-9);
        assert!((even.busiest_share - 13.75).abs() < 1e-9);
        // A stray interrupt on node 1 makes no CPU or node of it.
        let one = InterruptSpread::of(&[0, 0, 0, 0, 0, 0, 0, 999], &t).unwrap();
        assert_eq!((one.cpus, one.nodes, one.max_over_mean), (1, 1, 8.0));
        let stray = InterruptSpread::of(&[1, 0, 0, 0, 0, 0, 0, 999], &t).unwrap();
        assert_eq!((stray.cpus, stray.nodes), (1, 1));
        assert_eq!(InterruptSpread::of(&[0; 8], &t), None);
    }

    #[test]
    fn vectors_on_their_own_cpus_or_all_on_one_read_as_such() {
        let t = Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap();
        let own: BTreeMap<u32, Vec<u32>> = (0..8).map(|i| (30 + i, vec![i])).collect();
        let spread = VectorTargets::of(&own, &t);
        assert_eq!((spread.cpus, spread.nodes, spread.max_per_cpu), (8, 2, 1));
        let first: BTreeMap<u32, Vec<u32>> = (0..8).map(|i| (30 + i, vec![0])).collect();
        let one = VectorTargets::of(&first, &t);
        assert_eq!((one.cpus, one.nodes, one.max_per_cpu), (1, 1, 8));
    }
}
