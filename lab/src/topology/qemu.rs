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
}

impl std::fmt::Display for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mapping::Sockets => "sockets",
            Mapping::LlcAsSocket => "llc-as-socket",
        })
    }
}

/// The QEMU arguments for a topology (`-smp`, `-m`, memory backends, `-numa`, `-cpu`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QemuTopology {
    pub args: Vec<String>,
    pub mapping: Mapping,
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
        }
    }

    /// The CPUs of each socket QEMU will create, in order.
    pub(crate) fn qemu_socket_cpus(&self) -> Vec<Vec<u32>> {
        let (sockets, cores) = self.qemu_sockets_cores();
        let per = cores * self.threads_per_core();
        (0..sockets)
            .map(|s| (s * per..(s + 1) * per).collect())
            .collect()
    }

    /// Arguments that give the guest this topology. The caller adds machine, accelerator,
    /// kernel and devices. Node memory is a shared memfd (`share=on`) so that vfio-user device
    /// processes can map guest RAM, bound to its `host_node` when the file names one, of
    /// hugepages when it asks for them.
    pub(crate) fn qemu_args(&self) -> QemuTopology {
        let n = self.nr_cpus();
        let t = self.threads_per_core();
        let (sockets, cores) = self.qemu_sockets_cores();
        let mut args: Vec<String> = vec![
            "-smp".into(),
            // dies=1 is accepted by every model; dies > 1 aborts Intel-vendor models on 11.1.
            format!("{n},sockets={sockets},dies=1,cores={cores},threads={t}"),
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
        QemuTopology {
            args,
            mapping: self.mapping(),
        }
    }

    /// One sentence: which `Mapping` is used and why.
    pub fn describe(&self) -> String {
        let (qs, qc) = self.qemu_sockets_cores();
        let smp = format!(
            "-smp {},sockets={qs},dies=1,cores={qc},threads={}",
            self.nr_cpus(),
            self.threads_per_core()
        );
        match self.mapping() {
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
