//! Topology -> QEMU command-line arguments.

use super::cpulist::ranges;
use super::Topology;

const MIB: u64 = 1 << 20;

/// How declared sockets and LLCs become QEMU sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Mapping {
    /// Every declared socket holds exactly one LLC: QEMU sockets are the declared sockets.
    Sockets,
    /// Some socket holds several LLCs. QEMU 11.1 shows one L3 per socket (qemu64, EPYC-v4) and
    /// Intel-vendor models abort with `dies=` > 1, so each LLC is its own QEMU socket inside its
    /// NUMA node; the guest's package ids then count LLCs, not declared sockets.
    LlcAsSocket,
    /// aarch64 `virt`: QEMU sockets are the declared sockets and every LLC is a cluster of its
    /// socket, whose L3 QEMU describes per cluster (`smp-cache.0.cache=l3,...topology=cluster`).
    Clusters,
}

impl std::fmt::Display for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mapping::Sockets => "sockets",
            Mapping::LlcAsSocket => "llc-as-socket",
            Mapping::Clusters => "clusters",
        })
    }
}

/// The QEMU arguments for a topology (`-smp`, `-m`, memory backends, `-numa`, `-cpu`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QemuTopology {
    pub args: Vec<String>,
    /// Properties the topology adds to `-machine` (after the architecture's machine).
    pub machine: Vec<String>,
    pub mapping: Mapping,
}

impl QemuTopology {
    /// `-machine` with the architecture's machine and this topology's properties.
    pub(crate) fn machine_arg(&self, arch: crate::arch::Arch) -> String {
        std::iter::once(arch.machine().to_string())
            .chain(self.machine.iter().cloned())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Topology {
    /// QEMU sockets and cores per socket under the topology's [`Mapping`].
    pub(crate) fn qemu_sockets_cores(&self) -> (u32, u32) {
        let t = self.threads_per_core();
        match self.mapping() {
            Mapping::Sockets => (self.sockets(), self.cpus_per_socket() / t),
            Mapping::LlcAsSocket => {
                let llc = self.llcs()[0].cpus.len() as u32;
                (self.llcs().len() as u32, llc / t)
            }
            Mapping::Clusters => (self.sockets(), self.llcs()[0].cpus.len() as u32 / t),
        }
    }

    /// Clusters per QEMU socket (1 but under `Mapping::Clusters`).
    pub(crate) fn qemu_clusters(&self) -> u32 {
        match self.mapping() {
            Mapping::Clusters => self.llcs().len() as u32 / self.sockets(),
            _ => 1,
        }
    }

    /// The `-smp` value: the CPU count and how QEMU splits it.
    pub(crate) fn smp(&self) -> String {
        let (sockets, cores) = self.qemu_sockets_cores();
        let (n, t) = (self.nr_cpus(), self.threads_per_core());
        match self.mapping() {
            // `cores` counts the cores of one cluster.
            Mapping::Clusters => format!(
                "{n},sockets={sockets},clusters={},cores={cores},threads={t}",
                self.qemu_clusters()
            ),
            // dies=1 is accepted by every model; dies > 1 aborts Intel-vendor models on 11.1.
            _ => format!("{n},sockets={sockets},dies=1,cores={cores},threads={t}"),
        }
    }

    /// The CPUs of each socket QEMU will create, in order.
    pub(crate) fn qemu_socket_cpus(&self) -> Vec<Vec<u32>> {
        let (sockets, cores) = self.qemu_sockets_cores();
        let per = cores * self.threads_per_core() * self.qemu_clusters();
        (0..sockets)
            .map(|s| (s * per..(s + 1) * per).collect())
            .collect()
    }

    /// Arguments that give the guest this topology. The caller adds machine, accelerator,
    /// kernel and devices. Node memory is a shared memfd (`share=on`) so that vfio-user device
    /// processes can map guest RAM, bound to its `host_node` when the file names one, of
    /// hugepages when it asks for them.
    pub(crate) fn qemu_args(&self) -> QemuTopology {
        let mut args: Vec<String> = vec![
            "-smp".into(),
            self.smp(),
            "-m".into(),
            format!("{}M", self.total_memory_bytes() / MIB),
        ];
        for node in self.nodes() {
            let mut backend = format!(
                "memory-backend-memfd,id=ram{},size={}M,share=on",
                node.id,
                node.memory_bytes / MIB
            );
            // The node's pages come only from the host node it mirrors (mbind MPOL_BIND, applied
            // as pages are first touched).
            if let Some(host) = node.host_node {
                backend.push_str(&format!(",host-nodes={host},policy=bind"));
            }
            // From the host's reserved hugepages (a hugetlbfs memfd, still shareable with the
            // device models).
            if let Some(page) = self.hugepage_bytes() {
                backend.push_str(&format!(",hugetlb=on,hugetlbsize={page}"));
            }
            args.push("-object".into());
            args.push(backend);
        }
        for node in self.nodes() {
            let mut spec = format!("node,nodeid={0},memdev=ram{0}", node.id);
            // QEMU takes a non-contiguous set as repeated cpus= ranges.
            for (a, b) in ranges(&node.cpus) {
                if a == b {
                    spec.push_str(&format!(",cpus={a}"));
                } else {
                    spec.push_str(&format!(",cpus={a}-{b}"));
                }
            }
            args.push("-numa".into());
            args.push(spec);
        }
        // Explicit even when defaulted, so the command line states the distances; QEMU fills in
        // the symmetric half.
        for (i, row) in self.distances().iter().enumerate() {
            for (j, val) in row.iter().enumerate().skip(i + 1) {
                args.push("-numa".into());
                args.push(format!("dist,src={i},dst={j},val={val}"));
            }
        }
        args.push("-cpu".into());
        args.push(self.cpu_model().to_string());
        let machine = match self.mapping() {
            // The guest's LLC is the cluster's L3 (its cache/index3/shared_cpu_list). QEMU 11.1
            // takes a cache description only with every level in it ("Missing cache
            // description" otherwise): L1 and L2 per core, as QEMU's max CPU has them.
            Mapping::Clusters => [
                ("l1d", "core"),
                ("l1i", "core"),
                ("l2", "core"),
                ("l3", "cluster"),
            ]
            .iter()
            .enumerate()
            .flat_map(|(i, (cache, level))| {
                [
                    format!("smp-cache.{i}.cache={cache}"),
                    format!("smp-cache.{i}.topology={level}"),
                ]
            })
            .collect(),
            _ => vec![],
        };
        QemuTopology {
            args,
            machine,
            mapping: self.mapping(),
        }
    }

    /// One sentence: which `Mapping` is used and why.
    pub fn describe(&self) -> String {
        let smp = format!("-smp {}", self.smp());
        match self.mapping() {
            Mapping::Clusters => format!(
                "clusters: aarch64 on QEMU virt; each of the {} declared socket(s) is a QEMU socket and each of its {} LLC(s) ({} CPUs) a cluster, whose L3 QEMU describes per cluster (smp-cache l3=cluster), so the guest sees the declared sockets, LLCs, nodes and SMT siblings ({smp})",
                self.sockets(),
                self.qemu_clusters(),
                self.llcs()[0].cpus.len()
            ),
            Mapping::Sockets => format!(
                "sockets 1:1: each of the {} declared socket(s) holds exactly one LLC, so QEMU's sockets are the declared ones and its one L3 per socket is the declared LLC ({smp})",
                self.sockets()
            ),
            Mapping::LlcAsSocket => format!(
                "LLC-as-socket: a declared socket holds {} LLCs, but QEMU 11.1 shows one L3 per socket (qemu64, EPYC-v4) and Intel-vendor models abort with dies > 1, so each of the {} LLCs ({} CPUs) is its own QEMU socket inside its NUMA node ({smp}); the guest sees the declared LLCs, nodes and SMT siblings, but its package ids count LLCs, not the {} declared socket(s)",
                self.llcs().len() as u32 / self.sockets(),
                self.llcs().len(),
                self.llcs()[0].cpus.len(),
                self.sockets()
            ),
        }
    }
}
