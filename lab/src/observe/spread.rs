//! How a device's interrupts spread over the CPUs over a run, from their count per CPU (the
//! sum over the vectors looked at, `Interrupts::delta_summed`): the busiest CPU's share, how
//! many CPUs and nodes took a real part, and the busiest against the mean.

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
        let mut per_node = std::collections::BTreeMap::<u32, u64>::new();
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
}
