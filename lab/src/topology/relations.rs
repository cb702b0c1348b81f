//! CPUs named by their relation to another: the interrupt's CPU in the same LLC, another LLC of
//! the node or another node; a CPU for the control shell outside the watched LLCs. What a
//! placement scenario pins, found on whatever topology a run uses (scenario files' CPU
//! expressions, `same-llc X` and so on, are these).
//!
//! ```
//! use lab::topology::Topology;
//!
//! // ci-2node-4llc: nodes 0-3 and 4-7, LLCs of two CPUs.
//! let t = Topology::by_name("ci-2node-4llc").unwrap();
//! assert_eq!(t.same_llc_cpu(0), Some(1));
//! assert_eq!(t.cross_llc_cpu(0), Some(2));
//! assert_eq!(t.remote_node_cpu(0), Some(4));
//! assert_eq!(t.cpu_outside_llcs(&[0, 2]), Some(7));
//! ```

use super::Topology;

impl Topology {
    /// The first other CPU of `cpu`'s LLC; `None` when it has no other (or `cpu` is not one of
    /// this topology's).
    pub fn same_llc_cpu(&self, cpu: u32) -> Option<u32> {
        self.llc_of(cpu)?.cpus.iter().copied().find(|c| *c != cpu)
    }

    /// The first CPU of the first other LLC in `cpu`'s node; `None` when the node has one LLC.
    pub fn cross_llc_cpu(&self, cpu: u32) -> Option<u32> {
        let (llc, node) = (self.llc_of(cpu)?.id, self.node_of(cpu)?.id);
        self.llcs()
            .iter()
            .find(|l| l.node == node && l.id != llc)
            .map(|l| l.cpus[0])
    }

    /// The first CPU of the first other node; `None` on a single node.
    pub fn remote_node_cpu(&self, cpu: u32) -> Option<u32> {
        let node = self.node_of(cpu)?.id;
        self.nodes()
            .iter()
            .find(|n| n.id != node)
            .map(|n| n.cpus[0])
    }

    /// `cpu`'s first SMT sibling; `None` without SMT.
    pub fn sibling_cpu(&self, cpu: u32) -> Option<u32> {
        self.llc_of(cpu)?;
        self.smt_siblings(cpu).into_iter().find(|c| *c != cpu)
    }

    /// The last CPU outside the LLCs of `cpus`: where a guest script's own shell can run
    /// without disturbing the CPUs being watched. `None` when those LLCs cover the topology.
    pub fn cpu_outside_llcs(&self, cpus: &[u32]) -> Option<u32> {
        let watched: Vec<u32> = cpus
            .iter()
            .filter_map(|c| self.llc_of(*c))
            .flat_map(|l| l.cpus.iter().copied())
            .collect();
        (0..self.nr_cpus()).rev().find(|c| !watched.contains(c))
    }
}
