//! A topology file read and checked: the raw TOML tables, then every rule of the format
//! (module docs of [`super`]), each error naming the file and field.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTopology {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    cpu_model: Option<String>,
    #[serde(default = "default_one")]
    sockets: u32,
    #[serde(default = "default_one")]
    threads_per_core: u32,
    #[serde(default, rename = "node")]
    nodes: Vec<RawNode>,
    #[serde(default, rename = "llc")]
    llcs: Vec<RawLlc>,
    #[serde(default)]
    distances: Option<Vec<Vec<i64>>>,
    #[serde(default, rename = "pin")]
    pins: Vec<RawPin>,
    #[serde(default)]
    hugepages: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNode {
    cpus: String,
    // Optional here so that a missing memory gets our message naming `node[i].memory`.
    memory: Option<String>,
    #[serde(default)]
    host_node: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLlc {
    cpus: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPin {
    vcpus: String,
    host: String,
}

fn default_one() -> u32 {
    1
}

/// A top-level key written after a `[[node]]`/`[[llc]]`/`[[pin]]` header lands inside that table
/// (TOML's rule), and toml then reports it as unknown there; say why.
pub(super) fn syntax_hint(error: &toml::de::Error) -> String {
    const TOP_LEVEL: [&str; 7] = [
        "name",
        "description",
        "arch",
        "cpu_model",
        "sockets",
        "threads_per_core",
        "distances",
    ];
    let misplaced = TOP_LEVEL
        .iter()
        .find(|key| error.message().contains(&format!("unknown field `{key}`")));
    match misplaced {
        Some(key) => format!(
            "(`{key}` is a top-level key: in TOML it must come before the first [[node]], [[llc]] or [[pin]] header, otherwise it belongs to that table)"
        ),
        None => String::new(),
    }
}

/// Builds errors naming the file and field.
struct Check<'a> {
    file: &'a Path,
}

impl Check<'_> {
    fn err(
        &self,
        field: impl Into<String>,
        kind: InvalidKind,
        message: impl Into<String>,
    ) -> TopologyError {
        TopologyError::Invalid {
            file: self.file.to_path_buf(),
            field: field.into(),
            kind,
            message: message.into(),
        }
    }

    fn cpulist(&self, field: &str, text: &str) -> Result<Vec<u32>, TopologyError> {
        parse_cpulist(text).map_err(|e| self.err(field, InvalidKind::CpuList, e.to_string()))
    }
}

pub(super) fn validate(
    raw: RawTopology,
    file: PathBuf,
    text: &str,
) -> Result<Topology, TopologyError> {
    let c = Check { file: &file };
    let (arch, cpu_model) = c.header(&raw)?;
    let (nodes, node_of) = c.nodes(&raw)?;
    let hugepage_bytes = c.hugepages(&raw, arch, &nodes)?;
    let (nr_cpus, per_socket) = c.cpu_count(&raw, &node_of)?;
    let llcs_declared = !raw.llcs.is_empty();
    let llc_lists = c.llc_lists(&raw, nr_cpus, per_socket)?;
    let llcs = c.llcs(&raw, &llc_lists, &node_of, nr_cpus, per_socket)?;
    let mapping = c.mapping(&raw, arch, &llcs, per_socket)?;
    let distances_declared = raw.distances.is_some();
    let distances = c.distances(&raw, nodes.len())?;
    let (pinning, pinned_by) = c.pins(&raw, nr_cpus)?;
    Ok(Topology {
        file,
        source_text: text.to_string(),
        name: raw.name,
        description: raw.description,
        arch,
        cpu_model,
        sockets: raw.sockets,
        threads_per_core: raw.threads_per_core,
        nodes,
        llcs,
        llcs_declared,
        distances,
        distances_declared,
        pinning,
        pinned_by,
        mapping,
        hugepage_bytes,
    })
}

/// A field of an LLC's errors: its `[[llc]]`, or the socket that is one when none is declared.
fn llc_field(raw: &RawTopology, per_socket: u32, i: usize) -> String {
    if raw.llcs.is_empty() {
        let s = i as u32;
        let cpus: Vec<u32> = (s * per_socket..(s + 1) * per_socket).collect();
        format!(
            "llc (none declared, so socket {i} = CPUs {} is one LLC)",
            format_cpulist(&cpus)
        )
    } else {
        format!("llc[{i}].cpus")
    }
}

/// vCPU -> host CPU, and vCPU -> the `[[pin]]` that pinned it.
type Pins = (BTreeMap<u32, u32>, BTreeMap<u32, usize>);

/// The rules, a group each.
impl Check<'_> {
    /// The name, architecture, CPU model, sockets, threads per core, and that nodes exist.
    fn header(&self, raw: &RawTopology) -> Result<(Arch, String), TopologyError> {
        use InvalidKind as K;
        let c = self;
        let name_ok = !raw.name.is_empty()
            && !raw.name.starts_with('.')
            && raw
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch));
        if !name_ok {
            return Err(c.err(
                "name",
                K::Name,
                format!(
                    "{:?} must be non-empty and use only letters, digits, '-', '_' and '.'",
                    raw.name
                ),
            ));
        }
        let arch = match &raw.arch {
            None => Arch::X86_64,
            Some(text) => Arch::parse(text).ok_or_else(|| {
                c.err(
                    "arch",
                    K::Arch,
                    format!(
                        "{text:?} is not an architecture the lab boots: use \"x86_64\" or \"aarch64\""
                    ),
                )
            })?,
        };
        let cpu_model = raw
            .cpu_model
            .clone()
            .unwrap_or_else(|| arch.default_cpu_model().to_string());
        if cpu_model.is_empty() || cpu_model.chars().any(char::is_whitespace) {
            return Err(c.err(
                "cpu_model",
                K::CpuModel,
                format!(
                    "{cpu_model:?} is not a QEMU -cpu name (e.g. \"qemu64\", \"EPYC-v4\", \"max\")"
                ),
            ));
        }
        if raw.sockets == 0 {
            return Err(c.err("sockets", K::Sockets, "must be at least 1"));
        }
        let threads = raw.threads_per_core;
        if threads == 0 {
            return Err(c.err("threads_per_core", K::ThreadsPerCore, "must be at least 1"));
        }
        if raw.nodes.is_empty() {
            return Err(c.err(
                "node",
                K::NoNodes,
                "no [[node]] declared: at least one node with cpus and memory is required",
            ));
        }
        Ok((arch, cpu_model))
    }

    /// Nodes: CPUs, ownership, memory; and which node each CPU is in.
    fn nodes(&self, raw: &RawTopology) -> Result<(Vec<Node>, BTreeMap<u32, usize>), TopologyError> {
        use InvalidKind as K;
        let c = self;
        let mut node_of: BTreeMap<u32, usize> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(raw.nodes.len());
        for (i, n) in raw.nodes.iter().enumerate() {
            let field = format!("node[{i}].cpus");
            let cpus = c.cpulist(&field, &n.cpus)?;
            if cpus.is_empty() {
                return Err(c.err(
                    field,
                    K::NodeWithoutCpus,
                    "is empty: every node needs at least one CPU (memory-only nodes are not supported)",
                ));
            }
            for &cpu in &cpus {
                if let Some(j) = node_of.insert(cpu, i) {
                    return Err(c.err(
                        field,
                        K::CpuInTwoNodes,
                        format!(
                            "CPU {cpu} is already in node[{j}].cpus; a CPU belongs to exactly one node"
                        ),
                    ));
                }
            }
            let mfield = format!("node[{i}].memory");
            let memory_bytes = match &n.memory {
                None => {
                    return Err(c.err(
                        mfield,
                        K::NodeWithoutMemory,
                        "missing: every node needs memory, e.g. memory = \"2G\"",
                    ))
                }
                Some(text) => parse_size(text).map_err(|m| c.err(&mfield, K::MemorySize, m))?,
            };
            if memory_bytes == 0 {
                return Err(c.err(
                    mfield,
                    K::NodeWithoutMemory,
                    "is 0: every node needs memory",
                ));
            }
            if !memory_bytes.is_multiple_of(MIB) {
                return Err(c.err(
                    mfield,
                    K::MemorySize,
                    format!("{memory_bytes} bytes is not a whole number of MiB (QEMU memory backends need that)"),
                ));
            }
            if let Some(h) = n.host_node {
                if h >= MAX_HOST_NODES {
                    return Err(c.err(
                        format!("node[{i}].host_node"),
                        K::HostNode,
                        format!(
                            "is {h}: QEMU binds memory to host nodes 0-{}",
                            MAX_HOST_NODES - 1
                        ),
                    ));
                }
            }
            nodes.push(Node {
                id: i as u32,
                cpus,
                memory_bytes,
                host_node: n.host_node,
            });
        }
        Ok((nodes, node_of))
    }

    /// The hugepage size asked for, which every node's memory must be a whole number of.
    fn hugepages(
        &self,
        raw: &RawTopology,
        arch: Arch,
        nodes: &[Node],
    ) -> Result<Option<u64>, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let hugepage_bytes = match &raw.hugepages {
            None => None,
            Some(text) => {
                let bytes = parse_size(text).map_err(|m| c.err("hugepages", K::Hugepages, m))?;
                if !arch.hugepage_sizes().contains(&bytes) {
                    return Err(c.err(
                        "hugepages",
                        K::Hugepages,
                        format!(
                            "{text:?} is not a hugepage size of {arch} (4 KiB pages): use \"2M\" or \"1G\""
                        ),
                    ));
                }
                if let Some(node) = nodes.iter().find(|n| !n.memory_bytes.is_multiple_of(bytes)) {
                    return Err(c.err(
                        format!("node[{}].memory", node.id),
                        K::Hugepages,
                        format!(
                            "{} is not a whole number of the {} hugepages the file asks for",
                            format_size(node.memory_bytes),
                            format_size(bytes)
                        ),
                    ));
                }
                Some(bytes)
            }
        };
        let total_memory = nodes
            .iter()
            .try_fold(0u64, |sum, n| sum.checked_add(n.memory_bytes));
        if total_memory.is_none() {
            return Err(c.err(
                "node[].memory",
                K::MemorySize,
                "the nodes' memory adds up to more than 2^64 bytes",
            ));
        }
        Ok(hugepage_bytes)
    }

    /// CPU ids must be 0..N-1 (QEMU numbers vCPUs densely), split evenly into sockets of whole
    /// cores: the CPU count and the CPUs per socket.
    fn cpu_count(
        &self,
        raw: &RawTopology,
        node_of: &BTreeMap<u32, usize>,
    ) -> Result<(u32, u32), TopologyError> {
        use InvalidKind as K;
        let c = self;
        let threads = raw.threads_per_core;
        let nr_cpus = node_of.len() as u32;
        let Some((&max_cpu, &max_owner)) = node_of.iter().next_back() else {
            return Err(c.err("node", K::NoNodes, "no node declares a CPU"));
        };
        if max_cpu + 1 != nr_cpus {
            let missing: Vec<u32> = (0..max_cpu)
                .filter(|cpu| !node_of.contains_key(cpu))
                .collect();
            return Err(c.err(
                format!("node[{max_owner}].cpus"),
                K::CpuIdGap,
                format!(
                    "CPU ids must run 0-{max_cpu} without gaps, but {} {} in no node",
                    format_cpulist(&missing),
                    if missing.len() == 1 { "is" } else { "are" }
                ),
            ));
        }

        // Sockets split the CPUs evenly in id order (QEMU's numbering).
        if !nr_cpus.is_multiple_of(raw.sockets) {
            return Err(c.err(
                "sockets",
                K::Sockets,
                format!(
                    "{nr_cpus} CPUs cannot be split evenly into {} sockets",
                    raw.sockets
                ),
            ));
        }
        let per_socket = nr_cpus / raw.sockets;
        if !per_socket.is_multiple_of(threads) {
            return Err(c.err(
                "threads_per_core",
                K::ThreadsPerCore,
                format!("each socket has {per_socket} CPUs, which is not a multiple of {threads} threads per core"),
            ));
        }
        Ok((nr_cpus, per_socket))
    }

    /// LLCs' CPUs: declared, each CPU in exactly one, or one per socket.
    fn llc_lists(
        &self,
        raw: &RawTopology,
        nr_cpus: u32,
        per_socket: u32,
    ) -> Result<Vec<Vec<u32>>, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let llcs_declared = !raw.llcs.is_empty();
        let mut llc_lists: Vec<Vec<u32>> = Vec::new();
        if llcs_declared {
            let mut llc_of: BTreeMap<u32, usize> = BTreeMap::new();
            for (i, l) in raw.llcs.iter().enumerate() {
                let field = format!("llc[{i}].cpus");
                let cpus = c.cpulist(&field, &l.cpus)?;
                if cpus.is_empty() {
                    return Err(c.err(
                        field,
                        K::CpuList,
                        "is empty: an LLC needs at least one CPU",
                    ));
                }
                for &cpu in &cpus {
                    if cpu >= nr_cpus {
                        return Err(c.err(
                            field,
                            K::LlcUnknownCpu,
                            format!(
                                "CPU {cpu} is in no node (the nodes declare CPUs 0-{})",
                                nr_cpus - 1
                            ),
                        ));
                    }
                    if let Some(j) = llc_of.insert(cpu, i) {
                        return Err(c.err(
                            field,
                            K::CpuInTwoLlcs,
                            format!("CPU {cpu} is already in llc[{j}].cpus; a CPU belongs to exactly one LLC"),
                        ));
                    }
                }
                llc_lists.push(cpus);
            }
            let orphans: Vec<u32> = (0..nr_cpus)
                .filter(|cpu| !llc_of.contains_key(cpu))
                .collect();
            if !orphans.is_empty() {
                return Err(c.err(
                    "llc",
                    K::CpuInNoLlc,
                    format!(
                        "CPUs {} are in no [[llc]]; when LLCs are declared every CPU needs exactly one",
                        format_cpulist(&orphans)
                    ),
                ));
            }
        } else {
            llc_lists = (0..raw.sockets)
                .map(|s| (s * per_socket..(s + 1) * per_socket).collect())
                .collect();
        }
        Ok(llc_lists)
    }

    /// Each LLC one range inside one node and one socket, SMT siblings together.
    fn llcs(
        &self,
        raw: &RawTopology,
        llc_lists: &[Vec<u32>],
        node_of: &BTreeMap<u32, usize>,
        nr_cpus: u32,
        per_socket: u32,
    ) -> Result<Vec<Llc>, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let threads = raw.threads_per_core;
        let llc_field = |i: usize| llc_field(raw, per_socket, i);
        let socket_cpus =
            |s: u32| format_cpulist(&(s * per_socket..(s + 1) * per_socket).collect::<Vec<_>>());
        let owner_of = |cpu: u32| llc_lists.iter().position(|l| l.binary_search(&cpu).is_ok());

        let mut llcs = Vec::with_capacity(llc_lists.len());
        for (i, cpus) in llc_lists.iter().enumerate() {
            let (first, last) = (cpus[0], cpus[cpus.len() - 1]);
            if last - first + 1 != cpus.len() as u32 {
                return Err(c.err(
                    llc_field(i),
                    K::LlcNotContiguous,
                    format!(
                        "CPUs {} are not contiguous: QEMU numbers CPUs socket by socket and each LLC may become a QEMU socket, so an LLC must be one range like 4-7",
                        format_cpulist(cpus)
                    ),
                ));
            }
            let node_first = node_of[&first];
            if let Some(&cpu) = cpus.iter().find(|cpu| node_of[cpu] != node_first) {
                return Err(c.err(
                    llc_field(i),
                    K::LlcSpansNodes,
                    format!(
                        "spans nodes: CPU {first} is in node[{node_first}] but CPU {cpu} is in node[{}]; an LLC must lie inside one node",
                        node_of[&cpu]
                    ),
                ));
            }
            let socket = first / per_socket;
            if last / per_socket != socket {
                return Err(c.err(
                    llc_field(i),
                    K::LlcSpansSockets,
                    format!(
                        "spans sockets {socket} ({}) and {} ({}): {nr_cpus} CPUs in {} sockets; an LLC must lie inside one socket",
                        socket_cpus(socket),
                        last / per_socket,
                        socket_cpus(last / per_socket),
                        raw.sockets
                    ),
                ));
            }
            // A contiguous LLC keeps SMT siblings together iff both of its ends fall on core edges.
            let split = if first % threads != 0 {
                Some((first - first % threads, owner_of(first - 1)))
            } else if (last + 1) % threads != 0 {
                Some((last - last % threads, owner_of(last + 1)))
            } else {
                None
            };
            if let Some((core_first, other)) = split {
                let other = other.map_or_else(|| "no LLC".to_string(), |j| format!("llc[{j}]"));
                return Err(c.err(
                    llc_field(i),
                    K::SmtSplit,
                    format!(
                        "SMT siblings {core_first}-{} (threads_per_core = {threads}, siblings are consecutive ids) are split between llc[{i}] and {other}; siblings must share an LLC",
                        core_first + threads - 1
                    ),
                ));
            }
            llcs.push(Llc {
                id: i as u32,
                node: node_first as u32,
                socket,
                cpus: cpus.clone(),
            });
        }
        Ok(llcs)
    }

    /// How LLCs become QEMU's -smp units: on aarch64 every LLC is a cluster of its socket; on
    /// x86 one LLC per socket maps 1:1, otherwise every LLC becomes a QEMU socket of equal size.
    fn mapping(
        &self,
        raw: &RawTopology,
        arch: Arch,
        llcs: &[Llc],
        per_socket: u32,
    ) -> Result<Mapping, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let llc_field = |i: usize| llc_field(raw, per_socket, i);
        let mapping = if arch == Arch::Aarch64 {
            Mapping::Clusters
        } else if llcs.len() as u32 == raw.sockets {
            Mapping::Sockets
        } else {
            Mapping::LlcAsSocket
        };
        // Clusters (aarch64) and LLCs as sockets both become equal -smp units.
        let unit = match mapping {
            Mapping::Clusters => Some("on aarch64 each LLC is a cluster of its socket and -smp needs all clusters the same size"),
            Mapping::LlcAsSocket => Some("a socket holds several LLCs, so each LLC becomes its own QEMU socket and -smp needs all sockets the same size"),
            _ => None,
        };
        if let Some(why) = unit {
            let size0 = llcs[0].cpus.len();
            if let Some(l) = llcs.iter().find(|l| l.cpus.len() != size0) {
                return Err(c.err(
                    llc_field(l.id as usize),
                    K::LlcSizesDiffer,
                    format!("has {} CPUs but llc[0] has {size0}: {why}", l.cpus.len()),
                ));
            }
        }
        Ok(mapping)
    }

    /// The node distance matrix: declared (square, symmetric, 10 on the diagonal, 11-254
    /// elsewhere), or 10 and 20.
    fn distances(&self, raw: &RawTopology, nn: usize) -> Result<Vec<Vec<u32>>, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let distances: Vec<Vec<u32>> = match &raw.distances {
            None => (0..nn)
                .map(|i| {
                    (0..nn)
                        .map(|j| {
                            if i == j {
                                LOCAL_DISTANCE
                            } else {
                                DEFAULT_REMOTE_DISTANCE
                            }
                        })
                        .collect()
                })
                .collect(),
            Some(m) => {
                if m.len() != nn {
                    return Err(c.err(
                        "distances",
                        K::DistanceShape,
                        format!(
                            "has {} rows but there are {nn} nodes: the matrix must be {nn}x{nn}",
                            m.len()
                        ),
                    ));
                }
                for (i, row) in m.iter().enumerate() {
                    if row.len() != nn {
                        return Err(c.err(
                            format!("distances[{i}]"),
                            K::DistanceShape,
                            format!("has {} entries, expected {nn}: the matrix must be square, one row and column per node", row.len()),
                        ));
                    }
                }
                for (i, row) in m.iter().enumerate() {
                    for (j, &v) in row.iter().enumerate() {
                        let field = format!("distances[{i}][{j}]");
                        if i == j && v != LOCAL_DISTANCE as i64 {
                            return Err(c.err(
                                field,
                                K::DistanceDiagonal,
                                format!(
                                    "is {v}: a node's distance to itself must be {LOCAL_DISTANCE}"
                                ),
                            ));
                        }
                        if i != j && !(11..=254).contains(&v) {
                            return Err(c.err(
                                field,
                                K::DistanceRange,
                                format!("is {v}: distances between different nodes must be 11..=254 (Linux ignores the whole table otherwise)"),
                            ));
                        }
                        if i < j && m[j][i] != v {
                            return Err(c.err(
                                field,
                                K::DistanceAsymmetric,
                                format!("is {v} but distances[{j}][{i}] is {}: the matrix must be symmetric", m[j][i]),
                            ));
                        }
                    }
                }
                m.iter()
                    .map(|row| row.iter().map(|&v| v as u32).collect())
                    .collect()
            }
        };
        Ok(distances)
    }

    /// vCPU -> host CPU pins, one-to-one, and which `[[pin]]` pinned each vCPU.
    fn pins(&self, raw: &RawTopology, nr_cpus: u32) -> Result<Pins, TopologyError> {
        use InvalidKind as K;
        let c = self;
        let mut pinning: BTreeMap<u32, u32> = BTreeMap::new();
        let mut pinned_by: BTreeMap<u32, usize> = BTreeMap::new();
        let mut host_used_by: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, p) in raw.pins.iter().enumerate() {
            let vfield = format!("pin[{i}].vcpus");
            let vcpus = c.cpulist(&vfield, &p.vcpus)?;
            let host = c.cpulist(&format!("pin[{i}].host"), &p.host)?;
            if vcpus.is_empty() {
                return Err(c.err(vfield, K::CpuList, "is empty: name the vCPUs to pin"));
            }
            for &v in &vcpus {
                if v >= nr_cpus {
                    return Err(c.err(
                        vfield,
                        K::PinUnknownVcpu,
                        format!(
                            "vCPU {v} does not exist: the topology has vCPUs 0-{}",
                            nr_cpus - 1
                        ),
                    ));
                }
                if let Some(j) = pinned_by.insert(v, i) {
                    return Err(c.err(
                        vfield,
                        K::PinTwice,
                        format!("vCPU {v} is already pinned by pin[{j}]"),
                    ));
                }
            }
            if host.len() != vcpus.len() {
                return Err(c.err(
                    format!("pin[{i}].host"),
                    K::PinLength,
                    format!(
                        "lists {} host CPUs for {} vCPUs; vCPUs are pinned one-to-one, in order",
                        host.len(),
                        vcpus.len()
                    ),
                ));
            }
            for &h in &host {
                // The affinity set the lab hands to sched_setaffinity holds CPUs 0-1023.
                if h as usize >= MAX_HOST_CPUS {
                    return Err(c.err(
                        format!("pin[{i}].host"),
                        K::PinHostRange,
                        format!(
                            "host CPU {h} is beyond the affinity set's {MAX_HOST_CPUS} CPUs (0-{})",
                            MAX_HOST_CPUS - 1
                        ),
                    ));
                }
                if let Some(j) = host_used_by.insert(h, i) {
                    return Err(c.err(
                        format!("pin[{i}].host"),
                        K::PinHostTwice,
                        format!(
                            "host CPU {h} is already taken by pin[{j}]: each vCPU gets a host CPU of its own"
                        ),
                    ));
                }
            }
            pinning.extend(vcpus.into_iter().zip(host));
        }
        Ok((pinning, pinned_by))
    }
}
