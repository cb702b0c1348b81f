//! The host machine's shape as Linux describes it in sysfs: online CPUs, packages, cores, SMT
//! siblings, last-level caches, NUMA nodes with their distances and free memory.
//!
//! It serves two things: checking a topology's `[[pin]]` map and `host_node` bindings against
//! the host before a boot (`crate::topology::Topology::check_against`), and writing a topology
//! that mirrors the host (`HostTopology::mirror`, `lab topology from-host`).
//!
//! `HostTopology::read` takes the directory that stands for `/sys`, so tests read the trees
//! in `lab/tests/fixtures/hosts/` (models of the seed's machines written by `generate.py`, and
//! real hosts' files copied by `capture.sh`) exactly as the lab reads the real one. It reads only:
//!
//! - `devices/system/cpu/online` and `devices/system/cpu/modalias` (the CPU vendor),
//! - `devices/system/cpu/cpuN/topology/{physical_package_id,core_id,thread_siblings_list}`,
//! - `devices/system/cpu/cpuN/cache/indexK/{level,type,shared_cpu_list}` (the LLC is the
//!   highest-level data or unified cache; without cache entries, the package),
//! - `devices/system/node/nodeN/{cpulist,distance,meminfo}` (without a node directory, a
//!   kernel without NUMA: one node holding every CPU, memory unknown).
//!
//! Public: `lab topology from-host`, [`write_mirror`] with its [`FromHost`] request.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::topology::{format_cpulist, format_size, parse_cpulist, Topology};

/// One online host CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostCpu {
    pub id: u32,
    /// `topology/physical_package_id`.
    pub package: u32,
    /// `topology/core_id` (unique only within a package; may have gaps).
    pub core_id: u32,
    /// Online SMT siblings, itself included (`topology/thread_siblings_list`).
    pub siblings: Vec<u32>,
    /// Online CPUs sharing its last-level cache, itself included.
    pub llc: Vec<u32>,
    /// Its NUMA node.
    pub node: u32,
}

/// One NUMA node of the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostNode {
    pub id: u32,
    /// Online CPUs of the node (`cpulist`); empty for a memory-only node.
    pub cpus: Vec<u32>,
    /// `distance`: one entry per node, in the order of [`HostTopology::nodes`].
    pub distances: Vec<u32>,
    /// `MemTotal` and `MemFree` from the node's `meminfo`, in bytes; `None` when unknown.
    pub mem_total: Option<u64>,
    pub mem_free: Option<u64>,
}

/// The CPU vendor, from `devices/system/cpu/modalias` (x86's `venXXXX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vendor {
    Intel,
    Amd,
    Other,
}

/// A host as sysfs describes it. Construct it with [`HostTopology::read`] or
/// [`HostTopology::this_host`].
#[derive(Debug, Clone)]
pub(crate) struct HostTopology {
    root: PathBuf,
    online: Vec<u32>,
    cpus: BTreeMap<u32, HostCpu>,
    nodes: Vec<HostNode>,
    vendor: Vendor,
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn read_u32(path: &Path) -> Result<u32> {
    let text = read_text(path)?;
    text.trim()
        .parse()
        .with_context(|| format!("{}: {:?} is not a number", path.display(), text.trim()))
}

fn read_cpulist(path: &Path) -> Result<Vec<u32>> {
    let text = read_text(path)?;
    parse_cpulist(&text).with_context(|| format!("{}", path.display()))
}

/// `nodeN`/`cpuN`/`indexN` entries of `dir`, by number.
fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<(u32, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        found.push((number, entry.path()));
    }
    found.sort();
    Ok(found)
}

/// `MemTotal` and `MemFree` of a node's `meminfo` ("Node 0 MemFree:  123 kB"), in bytes.
fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let mut total = None;
    let mut free = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some("Node"), Some(_), Some(key), Some(value)) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            continue;
        };
        let unit = match words.next() {
            Some("kB") => 1024,
            _ => 1,
        };
        let value = value.parse::<u64>().ok().map(|v| v * unit);
        match key {
            "MemTotal:" => total = value,
            "MemFree:" => free = value,
            _ => {}
        }
    }
    (total, free)
}

impl HostTopology {
    /// This host: [`HostTopology::read`] of `/sys`.
    pub(crate) fn this_host() -> Result<Self> {
        Self::read("/sys")
    }

    /// Reads the host's shape from `root`, a directory laid out as `/sys`.
    pub(crate) fn read(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_path_buf();
        let cpu_dir = root.join("devices/system/cpu");
        let online = read_cpulist(&cpu_dir.join("online"))?;
        if online.is_empty() {
            bail!("{}: no CPU is online", cpu_dir.join("online").display());
        }
        let online_set: BTreeSet<u32> = online.iter().copied().collect();
        let only_online = |cpus: Vec<u32>| -> Vec<u32> {
            cpus.into_iter()
                .filter(|c| online_set.contains(c))
                .collect()
        };
        let vendor = match std::fs::read_to_string(cpu_dir.join("modalias")) {
            Ok(text) if text.contains("ven0000") => Vendor::Intel,
            Ok(text) if text.contains("ven0002") => Vendor::Amd,
            _ => Vendor::Other,
        };

        // Nodes first, so every CPU gets its node.
        let node_dir = root.join("devices/system/node");
        let mut nodes = Vec::new();
        if node_dir.is_dir() {
            for (id, dir) in numbered_entries(&node_dir, "node")? {
                let cpus = only_online(read_cpulist(&dir.join("cpulist"))?);
                let distance_file = dir.join("distance");
                let distances = read_text(&distance_file)?
                    .split_whitespace()
                    .map(|v| {
                        v.parse::<u32>().with_context(|| {
                            format!("{}: {v:?} is not a distance", distance_file.display())
                        })
                    })
                    .collect::<Result<Vec<u32>>>()?;
                let (mem_total, mem_free) = match std::fs::read_to_string(dir.join("meminfo")) {
                    Ok(text) => parse_meminfo(&text),
                    Err(_) => (None, None),
                };
                nodes.push(HostNode {
                    id,
                    cpus,
                    distances,
                    mem_total,
                    mem_free,
                });
            }
        }
        if nodes.is_empty() {
            nodes.push(HostNode {
                id: 0,
                cpus: online.clone(),
                distances: vec![crate::topology::LOCAL_DISTANCE],
                mem_total: None,
                mem_free: None,
            });
        }
        for node in &nodes {
            if node.distances.len() != nodes.len() {
                bail!(
                    "{}: {} distances for {} nodes",
                    node_dir.join(format!("node{}/distance", node.id)).display(),
                    node.distances.len(),
                    nodes.len()
                );
            }
        }
        let mut node_of = BTreeMap::new();
        for node in &nodes {
            for &cpu in &node.cpus {
                if let Some(other) = node_of.insert(cpu, node.id) {
                    bail!(
                        "{}: CPU {cpu} is in node{other} and node{}",
                        node_dir.display(),
                        node.id
                    );
                }
            }
        }

        let mut cpus = BTreeMap::new();
        for &id in &online {
            let dir = cpu_dir.join(format!("cpu{id}"));
            let package = read_u32(&dir.join("topology/physical_package_id"))?;
            let core_id = read_u32(&dir.join("topology/core_id"))?;
            let siblings = only_online(read_cpulist(&dir.join("topology/thread_siblings_list"))?);
            let mut llc: Option<(u32, Vec<u32>)> = None;
            let cache_dir = dir.join("cache");
            if cache_dir.is_dir() {
                for (_, index) in numbered_entries(&cache_dir, "index")? {
                    if read_text(&index.join("type"))?.trim() == "Instruction" {
                        continue;
                    }
                    let level = read_u32(&index.join("level"))?;
                    if llc.as_ref().is_none_or(|(l, _)| level > *l) {
                        let shared = only_online(read_cpulist(&index.join("shared_cpu_list"))?);
                        llc = Some((level, shared));
                    }
                }
            }
            let node = *node_of.get(&id).with_context(|| {
                format!(
                    "{}: online CPU {id} is in no node's cpulist",
                    node_dir.display()
                )
            })?;
            cpus.insert(
                id,
                HostCpu {
                    id,
                    package,
                    core_id,
                    siblings,
                    llc: llc.map(|(_, cpus)| cpus).unwrap_or_default(),
                    node,
                },
            );
        }
        // Without cache entries the package is the LLC.
        let packages: BTreeMap<u32, Vec<u32>> =
            cpus.values().fold(BTreeMap::new(), |mut map, cpu| {
                map.entry(cpu.package).or_default().push(cpu.id);
                map
            });
        for cpu in cpus.values_mut() {
            if cpu.llc.is_empty() {
                cpu.llc = packages[&cpu.package].clone();
            }
        }
        Ok(HostTopology {
            root,
            online,
            cpus,
            nodes,
            vendor,
        })
    }

    /// The directory read as `/sys`.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
    pub(crate) fn online(&self) -> &[u32] {
        &self.online
    }
    #[cfg(test)]
    pub(crate) fn cpus(&self) -> impl Iterator<Item = &HostCpu> {
        self.cpus.values()
    }
    #[cfg(test)]
    pub(crate) fn cpu(&self, id: u32) -> Option<&HostCpu> {
        self.cpus.get(&id)
    }
    pub(crate) fn nodes(&self) -> &[HostNode] {
        &self.nodes
    }
    pub(crate) fn node(&self, id: u32) -> Option<&HostNode> {
        self.nodes.iter().find(|n| n.id == id)
    }
    #[cfg(test)]
    pub(crate) fn vendor(&self) -> Vendor {
        self.vendor
    }
    /// The file a node's memory figures come from, for messages.
    pub(crate) fn meminfo_path(&self, node: u32) -> PathBuf {
        self.root
            .join(format!("devices/system/node/node{node}/meminfo"))
    }

    /// The sysfs directory of the host's hugepages of `page_bytes`: on `node`, or on the whole
    /// host (`None`).
    pub(crate) fn hugepages_dir(&self, node: Option<u32>, page_bytes: u64) -> PathBuf {
        let size = format!("hugepages-{}kB", page_bytes >> 10);
        match node {
            Some(n) => self
                .root
                .join(format!("devices/system/node/node{n}/hugepages"))
                .join(size),
            None => self.root.join("kernel/mm/hugepages").join(size),
        }
    }

    /// A count from [`Self::hugepages_dir`] (`free_hugepages`, `nr_hugepages`), read now:
    /// `None` when the host does not have that size there.
    pub(crate) fn hugepages_count(
        &self,
        node: Option<u32>,
        page_bytes: u64,
        file: &str,
    ) -> Option<u64> {
        std::fs::read_to_string(self.hugepages_dir(node, page_bytes).join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The host-wide hugepage pools, one `2 MiB: FREE of TOTAL free` each (`lab doctor`: what
    /// a topology with `hugepages` can take here); empty when the host has none.
    pub(crate) fn hugepage_pools(&self) -> Vec<String> {
        crate::arch::Arch::host()
            .hugepage_sizes()
            .iter()
            .filter_map(|&page| {
                let free = self.hugepages_count(None, page, "free_hugepages")?;
                let total = self.hugepages_count(None, page, "nr_hugepages")?;
                Some(format!("{}: {free} of {total} free", format_size(page)))
            })
            .collect()
    }

    /// The host's LLCs as CPU lists, each listed once, ordered by package, node and lowest CPU.
    pub(crate) fn llcs(&self) -> Vec<Vec<u32>> {
        let mut seen = BTreeSet::new();
        let mut llcs: Vec<Vec<u32>> = Vec::new();
        for cpu in self.cpus.values() {
            if seen.insert(cpu.llc.clone()) {
                llcs.push(cpu.llc.clone());
            }
        }
        llcs.sort_by_key(|l| {
            let first = &self.cpus[&l[0]];
            (first.package, first.node, l[0])
        });
        llcs
    }

    /// A topology mirroring this host, with every vCPU pinned to the host CPU it mirrors.
    ///
    /// vCPUs are numbered package by package, then node, LLC, core (by lowest sibling) and
    /// thread, so that
    /// SMT siblings get consecutive ids (QEMU's numbering) where Linux numbers them `n` and
    /// `n + cores`. Sockets are the host's packages. With [`MirrorOptions::max_cpus`] the same
    /// number of cores is dropped from every LLC until the guest fits, the lowest-numbered
    /// cores first: the dropped cores (host CPU 0 among them, which usually takes the most
    /// interrupts) become the housekeeping set for QEMU's other threads and the device models.
    /// A full mirror leaves no housekeeping CPU: the shape wins, and those threads then run
    /// unpinned.
    /// How the mirror lays the host's CPUs out as vCPUs: SMT threads per core, the packages
    /// (sockets), the kept cores of every LLC and the dropped ones, and the vCPU order.
    fn mirror_layout(&self, options: &MirrorOptions) -> Result<MirrorLayout> {
        let threads = self
            .cpus
            .values()
            .map(|c| c.siblings.len())
            .collect::<BTreeSet<_>>();
        if threads.len() != 1 {
            bail!(
                "{}: cores have different numbers of online SMT threads ({threads:?}); a topology needs the same number on every core",
                self.root.display()
            );
        }
        let threads_per_core = *threads.iter().next().unwrap() as u32;
        let packages: BTreeSet<u32> = self.cpus.values().map(|c| c.package).collect();
        let sockets = packages.len() as u32;

        // Cores of each LLC, in order; a core is its sorted sibling list.
        let llcs = self.llcs();
        let mut llc_cores: Vec<Vec<Vec<u32>>> = llcs
            .iter()
            .map(|llc| {
                let mut cores: Vec<Vec<u32>> = llc
                    .iter()
                    .map(|c| self.cpus[c].siblings.clone())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                cores.sort_by_key(|c| c[0]);
                cores
            })
            .collect();
        let cores_per_llc = llc_cores.iter().map(Vec::len).max().unwrap_or(0);
        let mut dropped: Vec<u32> = Vec::new();
        if let Some(max) = options.max_cpus {
            let per_core = threads_per_core as usize * llc_cores.len();
            let keep = max as usize / per_core;
            if keep == 0 {
                bail!(
                    "--max-cpus {max} is below one core per LLC: this host has {} LLCs of {} thread(s) per core, so the smallest mirror has {per_core} vCPUs",
                    llc_cores.len(),
                    threads_per_core
                );
            }
            for cores in &mut llc_cores {
                let cut = cores.len().saturating_sub(keep);
                dropped.extend(cores.drain(..cut).flatten());
            }
        }

        // vCPU order: package, node, LLC, core, thread.
        let mut order: Vec<u32> = Vec::new();
        let mut vcpu_llcs: Vec<(u32, u32)> = Vec::new(); // (first vCPU, last vCPU) per LLC
        let mut node_vcpus: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for cores in &llc_cores {
            let first = order.len() as u32;
            for core in cores {
                for &cpu in core {
                    node_vcpus
                        .entry(self.cpus[&cpu].node)
                        .or_default()
                        .push(order.len() as u32);
                    order.push(cpu);
                }
            }
            if order.len() as u32 > first {
                vcpu_llcs.push((first, order.len() as u32 - 1));
            }
        }
        let nr = order.len() as u32;
        // Sockets must split the vCPUs evenly in id order: check the packages come out so.
        for (vcpu, &cpu) in order.iter().enumerate() {
            let socket = vcpu as u32 / (nr / sockets).max(1);
            let package_index = packages
                .iter()
                .position(|p| *p == self.cpus[&cpu].package)
                .unwrap() as u32;
            if socket != package_index {
                bail!(
                    "{}: the packages do not hold equal numbers of CPUs in node order, which a topology's sockets need (host CPU {cpu}, package {})",
                    self.root.display(),
                    self.cpus[&cpu].package
                );
            }
        }

        Ok(MirrorLayout {
            threads_per_core,
            sockets,
            llc_cores,
            cores_per_llc,
            dropped,
            order,
            vcpu_llcs,
            node_vcpus,
        })
    }

    pub(crate) fn mirror(&self, options: &MirrorOptions) -> Result<Mirror> {
        let MirrorLayout {
            threads_per_core,
            sockets,
            llc_cores,
            cores_per_llc,
            dropped,
            order,
            vcpu_llcs,
            node_vcpus,
        } = self.mirror_layout(options)?;
        let nr = order.len() as u32;
        let cpu_model = match &options.cpu_model {
            Some(m) => m.clone(),
            None => match self.vendor {
                Vendor::Intel => "Skylake-Server-v4".to_string(),
                Vendor::Amd => "EPYC-v4".to_string(),
                Vendor::Other => "qemu64".to_string(),
            },
        };
        let memory = options.node_memory.unwrap_or(2 << 30);
        let housekeeping: Vec<u32> = {
            let mut set: Vec<u32> = dropped;
            set.sort_unstable();
            set
        };
        // Guest nodes are the host nodes that keep CPUs, in id order.
        let guest_nodes: Vec<(&HostNode, &Vec<u32>)> = self
            .nodes
            .iter()
            .filter_map(|n| node_vcpus.get(&n.id).map(|v| (n, v)))
            .collect();
        let host_index: Vec<usize> = guest_nodes
            .iter()
            .map(|(n, _)| self.nodes.iter().position(|m| m.id == n.id).unwrap())
            .collect();
        let memory_known = guest_nodes.iter().all(|(n, _)| n.mem_total.is_some());

        let name = &options.name;
        let shape = format!(
            "{sockets} socket(s) x {} cores x {threads_per_core} thread(s) ({nr} vCPUs), {} LLC(s) of {} cores, {} NUMA node(s)",
            nr / sockets / threads_per_core,
            vcpu_llcs.len(),
            llc_cores.first().map_or(0, Vec::len),
            guest_nodes.len()
        );
        let dropped_cores = cores_per_llc - llc_cores.first().map_or(0, Vec::len);
        let mut t = self.mirror_header(&housekeeping, nr, dropped_cores, memory_known);
        let _ = writeln!(t, "name = {}", toml_string(name));
        let _ = writeln!(
            t,
            "description = {}",
            toml_string(&format!("mirror of the host: {shape}"))
        );
        let _ = writeln!(t, "cpu_model = {}", toml_string(&cpu_model));
        let _ = writeln!(t, "sockets = {sockets}");
        let _ = writeln!(t, "threads_per_core = {threads_per_core}");
        if let Some(size) = &options.hugepages {
            let _ = writeln!(t, "hugepages = {}", toml_string(size));
        }
        if guest_nodes.len() > 1 {
            let rows: Vec<String> = host_index
                .iter()
                .map(|&i| {
                    let row: Vec<String> = host_index
                        .iter()
                        .map(|&j| self.nodes[i].distances[j].to_string())
                        .collect();
                    format!("    [{}],", row.join(", "))
                })
                .collect();
            let _ = writeln!(t, "distances = [\n{}\n]", rows.join("\n"));
        }
        for (node, vcpus) in &guest_nodes {
            let _ = writeln!(t, "\n[[node]]");
            let _ = writeln!(
                t,
                "cpus = {}          # host node {}: CPUs {}",
                toml_string(&format_cpulist(vcpus)),
                node.id,
                format_cpulist(&node.cpus)
            );
            let _ = writeln!(
                t,
                "memory = {}",
                toml_string(
                    &format_size(memory)
                        .replace(" GiB", "G")
                        .replace(" MiB", "M")
                )
            );
            if memory_known {
                let _ = writeln!(t, "host_node = {}", node.id);
            }
        }
        let _ = writeln!(t);
        for (first, last) in &vcpu_llcs {
            let host: Vec<u32> = order[*first as usize..=*last as usize].to_vec();
            let _ = writeln!(
                t,
                "[[llc]]\ncpus = {}          # host CPUs {}",
                toml_string(&format_cpulist(&(*first..=*last).collect::<Vec<_>>())),
                format_cpulist(&host)
            );
        }
        t.push_str(&self.pins_text(&order));

        let file = options
            .file
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{name}.toml")));
        let topology = Topology::from_toml_str(&t, &file).map_err(|e| {
            anyhow::anyhow!(
                "the mirror of {} is not a valid topology: {e}\n{t}",
                self.root.display()
            )
        })?;
        let expected: BTreeMap<u32, u32> = order
            .iter()
            .enumerate()
            .map(|(v, &h)| (v as u32, h))
            .collect();
        if topology.pinning() != &expected {
            bail!(
                "internal error: the written pins do not map vCPUs to the mirrored host CPUs\n{t}"
            );
        }
        Ok(Mirror {
            text: t,
            topology,
            housekeeping,
        })
    }

    /// The comments that open a mirror's file: where it came from, the vCPU numbering, the
    /// housekeeping CPUs (`dropped_cores` of every LLC) and whether memory is bound.
    fn mirror_header(
        &self,
        housekeeping: &[u32],
        nr: u32,
        dropped_cores: usize,
        memory_known: bool,
    ) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "# Written by `lab topology from-host` from {}: this host's nodes, LLCs, SMT siblings",
            self.root.display()
        );
        let _ = writeln!(
            t,
            "# and distances, every vCPU pinned to the host CPU it mirrors (host: {} online CPUs, {}).",
            self.online.len(),
            format_cpulist(&self.online)
        );
        let _ = writeln!(
            t,
            "# vCPUs count package by package, then node, LLC, core and thread, so SMT siblings are"
        );
        let _ = writeln!(
            t,
            "# consecutive (QEMU's numbering); the [[pin]] tables say which host CPU each one runs on."
        );
        if housekeeping.is_empty() {
            let _ = writeln!(
                t,
                "# Housekeeping: none left, every host CPU is mirrored, so QEMU's other threads and the"
            );
            let _ = writeln!(
                t,
                "# device models run unpinned; `--max-cpus` below {} drops the first cores of every LLC for them.",
                nr
            );
        } else {
            let _ = writeln!(
                t,
                "# Housekeeping: host CPUs {} (the first {} core(s) of every LLC, dropped by --max-cpus)",
                format_cpulist(housekeeping),
                dropped_cores
            );
            let _ = writeln!(
                t,
                "# run QEMU's other threads and the device models, away from the vCPUs."
            );
        }
        if memory_known {
            let _ = writeln!(
                t,
                "# Each guest node's memory is bound to the host node it mirrors (host_node)."
            );
        } else {
            let _ = writeln!(
                t,
                "# The host's node memory is unknown (no node meminfo), so memory is not bound to host nodes."
            );
        }
        t
    }

    /// The `[[pin]]` tables mapping vCPU `i` to host CPU `order[i]`.
    fn pins_text(&self, order: &[u32]) -> String {
        let mut out = String::new();
        // One [[pin]] per run of vCPUs whose host CPUs rise with them (a pin maps the i-th
        // lowest vCPU to the i-th lowest host CPU): by node and thread, split where needed.
        // (node, thread index) -> chains of (vCPU, host CPU) with rising host CPUs.
        type Chains = Vec<Vec<(u32, u32)>>;
        let mut groups: BTreeMap<(u32, usize), Chains> = BTreeMap::new();
        for (vcpu, &cpu) in order.iter().enumerate() {
            let c = &self.cpus[&cpu];
            let thread = c.siblings.iter().position(|s| *s == cpu).unwrap_or(0);
            let chains = groups.entry((c.node, thread)).or_default();
            let pair = (vcpu as u32, cpu);
            match chains.iter_mut().find(|ch| ch.last().unwrap().1 < cpu) {
                Some(chain) => chain.push(pair),
                None => chains.push(vec![pair]),
            }
        }
        let mut pins: Vec<Vec<(u32, u32)>> = groups.into_values().flatten().collect();
        pins.sort_by_key(|p| p[0].0);
        for pin in &pins {
            let vcpus: Vec<u32> = pin.iter().map(|p| p.0).collect();
            let host: Vec<u32> = pin.iter().map(|p| p.1).collect();
            let _ = writeln!(
                out,
                "\n[[pin]]\nvcpus = {}\nhost = {}",
                toml_string(&format_cpulist(&vcpus)),
                toml_string(&format_cpulist(&host))
            );
        }
        out
    }
}

/// The vCPU layout of a mirror ([`HostTopology::mirror_layout`]).
struct MirrorLayout {
    threads_per_core: u32,
    sockets: u32,
    /// Each LLC's kept cores, each core its sorted SMT siblings.
    llc_cores: Vec<Vec<Vec<u32>>>,
    /// The most cores an LLC had before `--max-cpus`.
    cores_per_llc: usize,
    /// Host CPUs of the cores `--max-cpus` dropped.
    dropped: Vec<u32>,
    /// vCPU i runs on host CPU `order[i]`.
    order: Vec<u32>,
    /// (first vCPU, last vCPU) per LLC.
    vcpu_llcs: Vec<(u32, u32)>,
    /// Host node -> its vCPUs.
    node_vcpus: BTreeMap<u32, Vec<u32>>,
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// What [`HostTopology::mirror`] writes.
#[derive(Debug, Clone)]
pub(crate) struct MirrorOptions {
    /// The topology's `name` (also the file's stem, for `lab` to find it).
    pub name: String,
    /// The file it will be written to, for messages; default `NAME.toml`.
    pub file: Option<PathBuf>,
    /// At most this many vCPUs (whole cores dropped from every LLC).
    pub max_cpus: Option<u32>,
    /// Memory per node in bytes (default 2 GiB).
    pub node_memory: Option<u64>,
    /// QEMU `-cpu` model; default by vendor: `Skylake-Server-v4` (Intel), `EPYC-v4` (AMD),
    /// else `qemu64` (models that boot under KVM and TCG alike; `host` only boots under KVM).
    pub cpu_model: Option<String>,
    /// The topology's `hugepages` (e.g. `2M`): guest memory from the host's hugepages.
    pub hugepages: Option<String>,
}

impl MirrorOptions {
    pub(crate) fn named(name: impl Into<String>) -> Self {
        MirrorOptions {
            name: name.into(),
            file: None,
            max_cpus: None,
            node_memory: None,
            cpu_model: None,
            hugepages: None,
        }
    }
}

/// A topology mirroring a host: the file's text and the parsed topology it round-trips to.
#[derive(Debug, Clone)]
pub struct Mirror {
    /// The topology file's text.
    pub text: String,
    /// The topology it reads back as.
    pub topology: Topology,
    /// Host CPUs left for QEMU's other threads and the device models (empty: none left).
    pub housekeeping: Vec<u32>,
}

mod check;
mod from_host;
#[cfg(test)]
mod tests;

pub use from_host::{write_mirror, FromHost, MirrorWritten};
