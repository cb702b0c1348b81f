//! What the guest must report for a topology, and the human table for `lab topology show`.

use super::cpulist::format_cpulist;
use super::{format_size, Mapping, Topology};
use std::fmt::Write as _;

/// The guest kernel's expected view of one CPU (`/sys/devices/system/cpu/cpuN/...`), as
/// cpulists in the kernel's own format.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuView {
    /// The CPU.
    pub cpu: u32,
    /// Its node.
    pub node: u32,
    /// `cache/index3/shared_cpu_list`: the CPU's LLC.
    pub llc_cpus: String,
    /// `topology/thread_siblings_list`: its SMT siblings, itself included.
    pub thread_siblings: String,
    /// `topology/package_cpus_list`: its QEMU socket (under `Mapping::LlcAsSocket`, its LLC;
    /// under `Mapping::Clusters`, its declared socket).
    pub package_cpus: String,
}

/// The expected view of one node (`/sys/devices/system/node/nodeN/...`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeView {
    /// The node.
    pub node: u32,
    /// `cpulist`.
    pub cpus: String,
    /// Declared memory. Compare it with the node's `present` pages in `/proc/zoneinfo` (see
    /// [`NodeView::present_matches`]). `meminfo`'s MemTotal is lower by what the kernel reserves,
    /// measured on Debian 6.12 under QEMU 11.1: the memmap (1.6% of the node), 64 MiB of swiotlb
    /// on node 0 when RAM reaches above 4 GiB, and the ~40 MiB kernel image on whichever node
    /// KASLR picks; that is 6.6% of a 2 GiB node 0 and 8% of a 1 GiB node in the worst case,
    /// so a 5% MemTotal bound only holds for nodes of 4 GiB or more.
    pub memory_bytes: u64,
    /// `distance`, one entry per node (the file prints them space-separated).
    pub distances: Vec<u32>,
}

impl NodeView {
    /// Whether `present_bytes` (the node's `present` pages in `/proc/zoneinfo` times the page
    /// size) is the declared memory: firmware holes below 1 MiB may be missing from node 0.
    pub fn present_matches(&self, present_bytes: u64) -> bool {
        present_bytes <= self.memory_bytes && self.memory_bytes - present_bytes <= 1 << 20
    }
}

/// Everything the boot test compares with what the guest reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GuestView {
    /// Per CPU, by id.
    pub cpus: Vec<CpuView>,
    /// Per node, by id.
    pub nodes: Vec<NodeView>,
}

impl Topology {
    /// The view the guest must report, derived from the declaration and the mapping.
    pub fn guest_view(&self) -> GuestView {
        let packages = self.qemu_socket_cpus();
        let cpus = (0..self.nr_cpus())
            .map(|cpu| {
                let node = self.node_of(cpu).map_or(0, |n| n.id);
                let llc = self.llc_of(cpu).map(|l| l.cpus.as_slice()).unwrap_or(&[]);
                let package = packages
                    .iter()
                    .find(|p| p.contains(&cpu))
                    .map(|p| p.as_slice())
                    .unwrap_or(&[]);
                CpuView {
                    cpu,
                    node,
                    llc_cpus: format_cpulist(llc),
                    thread_siblings: format_cpulist(&self.smt_siblings(cpu)),
                    package_cpus: format_cpulist(package),
                }
            })
            .collect();
        let nodes = self
            .nodes()
            .iter()
            .map(|n| NodeView {
                node: n.id,
                cpus: format_cpulist(&n.cpus),
                memory_bytes: n.memory_bytes,
                distances: self.distances()[n.id as usize].clone(),
            })
            .collect();
        GuestView { cpus, nodes }
    }

    /// The human table printed by `lab topology show NAME`.
    pub fn render_table(&self) -> String {
        let mut s = String::new();
        let t = self.threads_per_core();
        let _ = writeln!(s, "topology   {}  ({})", self.name(), self.file().display());
        if !self.description().is_empty() {
            let _ = writeln!(s, "           {}", self.description());
        }
        let _ = writeln!(
            s,
            "arch       {} (QEMU {})",
            self.arch(),
            self.arch().machine()
        );
        let _ = writeln!(s, "cpu model  {}", self.cpu_model());
        let _ = writeln!(
            s,
            "vCPUs      {} = {} socket(s) x {} core(s) x {} thread(s)",
            self.nr_cpus(),
            self.sockets(),
            self.cpus_per_socket() / t,
            t
        );
        let _ = writeln!(s, "memory     {}", format_size(self.total_memory_bytes()));
        if let Some(page) = self.hugepage_bytes() {
            let _ = writeln!(s, "hugepages  {} (host pool)", format_size(page));
        }

        let _ = writeln!(s, "\nSOCKET  CPUS");
        for sock in 0..self.sockets() {
            let per = self.cpus_per_socket();
            let cpus: Vec<u32> = (sock * per..(sock + 1) * per).collect();
            let _ = writeln!(s, "{sock:<6}  {}", format_cpulist(&cpus));
        }

        let dist_note = if self.distances_declared() {
            ""
        } else {
            " (default)"
        };
        let _ = writeln!(
            s,
            "\nNODE  MEMORY    CPUS              DISTANCES{dist_note}"
        );
        for n in self.nodes() {
            let d: Vec<String> = self.distances()[n.id as usize]
                .iter()
                .map(u32::to_string)
                .collect();
            let bind = n.host_node.map_or_else(String::new, |h| {
                format!("  (memory bound to host node {h})")
            });
            let _ = writeln!(
                s,
                "{:<4}  {:<8}  {:<16}  {}{bind}",
                n.id,
                format_size(n.memory_bytes),
                format_cpulist(&n.cpus),
                d.join(" ")
            );
        }

        let llc_note = if self.llcs_declared() {
            ""
        } else {
            " (none declared: one per socket)"
        };
        let _ = writeln!(s, "\nLLC   NODE  SOCKET  CPUS{llc_note}");
        for l in self.llcs() {
            let _ = writeln!(
                s,
                "{:<4}  {:<4}  {:<6}  {}",
                l.id,
                l.node,
                l.socket,
                format_cpulist(&l.cpus)
            );
        }

        if t == 1 {
            let _ = writeln!(s, "\nSMT siblings  none (1 thread per core)");
        } else {
            let groups: Vec<String> = (0..self.nr_cpus() / t)
                .map(|core| format_cpulist(&self.smt_siblings(core * t)))
                .collect();
            let _ = writeln!(s, "\nSMT siblings  {}", groups.join(" "));
        }

        if self.pinning().is_empty() {
            let _ = writeln!(s, "pinning       none");
        } else {
            let pins: Vec<String> = self
                .pinning()
                .iter()
                .map(|(v, h)| format!("{v}->{h}"))
                .collect();
            let _ = writeln!(s, "pinning       vCPU->host {}", pins.join(" "));
        }

        let q = self.qemu_args();
        let _ = writeln!(
            s,
            "\nmapping       {}{}",
            q.mapping,
            if q.mapping == Mapping::LlcAsSocket {
                " (guest package ids count LLCs)"
            } else {
                ""
            }
        );
        let _ = writeln!(s, "              {}", self.describe());
        let _ = writeln!(
            s,
            "qemu          -machine {} {}",
            q.machine_arg(self.arch()),
            q.args.join(" ")
        );
        s
    }
}
