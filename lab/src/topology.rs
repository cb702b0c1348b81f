//! Machine shapes: `topologies/*.toml` -> a validated [`Topology`] -> QEMU arguments, a table
//! for `lab topology show`, and the view the guest kernel must report.
//!
//! # File format
//!
//! ```toml
//! name = "ci-2node-4llc"          # required; must equal the file name without `.toml`
//! description = "..."              # optional, free text
//! arch = "x86_64"                  # optional, "x86_64" (QEMU q35) or "aarch64" (QEMU virt,
//!                                  # GICv3 with its ITS); default "x86_64"
//! cpu_model = "qemu64"             # optional, a QEMU `-cpu` name; default "qemu64" ("max" on
//!                                  # aarch64)
//! sockets = 1                      # optional, default 1; CPUs are split evenly, in id order
//! threads_per_core = 1             # optional, default 1 (no SMT)
//! distances = [[10, 20], [20, 10]] # optional SLIT, one row per node; default 10 local, 20 remote
//! hugepages = "2M"                 # optional: guest memory from host hugepages of this size
//!                                  # ("2M" or "1G"), reserved on the host beforehand
//!                                  # (top-level keys go before the first [[table]], as in TOML)
//!
//! [[node]]                         # NUMA node 0 (nodes are numbered in file order)
//! cpus = "0-3"                     # Linux cpulist
//! memory = "2G"                    # bytes, or with a K/M/G/T suffix (binary); whole MiB
//! host_node = 0                    # optional: host NUMA node its memory is bound to
//! [[node]]                         # NUMA node 1
//! cpus = "4-7"
//! memory = "2G"
//!
//! [[llc]]                          # last-level-cache groups, numbered in file order; optional:
//! cpus = "0-1"                     # without any, each socket is one LLC
//! [[llc]]
//! cpus = "2-3"
//! # ...
//!
//! [[pin]]                          # optional vCPU -> host CPU pinning: the i-th lowest vCPU
//! vcpus = "0-7"                    # goes to the i-th lowest host CPU; use several [[pin]]
//! host = "8-15"                    # for other orders
//! ```
//!
//! Rules, all checked at load with errors naming the file and field (e.g. `node[1].cpus`):
//! - CPU ids are `0..N-1` without gaps; each CPU is in exactly one node and exactly one LLC.
//! - SMT siblings are consecutive groups of `threads_per_core` ids (QEMU numbers threads so), and
//!   must share an LLC. An LLC is a contiguous range inside one node and one socket.
//! - Every node has memory. The distance matrix is square (one row per node), symmetric, 10 on
//!   the diagonal and 11..=254 elsewhere. Pins name existing vCPUs, each at most once, and
//!   host CPUs below 1024, each at most once. `host_node` is below 128 (QEMU's limit).
//! - `hugepages` is 2 MiB or 1 GiB (x86-64's sizes) and every node's memory a whole number of
//!   them.
//! - Unknown keys are errors.
//!
//! Before a boot, a file that pins or binds is checked against the host
//! (`Topology::check_against`, with `crate::host_topology::HostTopology`): pinned host CPUs
//! online, every `host_node` present with enough free memory for the guest nodes bound to it,
//! and with `hugepages` enough free hugepages of that size (on each bound host node).
//! The online host CPUs no vCPU is pinned to are the housekeeping set: QEMU's other threads and
//! the device models run there.
//!
//! # Mapping to QEMU
//!
//! QEMU 11.1 (the lab's pinned QEMU) gives the guest one L3 per socket with `qemu64` and
//! `EPYC-v4`, and aborts with Intel-vendor models when `dies=` > 1, so an L3 cannot be split
//! inside a QEMU socket. When every declared socket holds exactly one LLC the sockets map 1:1
//! (`Mapping::Sockets`); otherwise each LLC becomes its own QEMU socket inside its NUMA node
//! (`Mapping::LlcAsSocket`), which needs LLCs of equal size. The guest then sees the declared
//! LLCs, nodes and SMT siblings, and its package ids count LLCs. On aarch64 (`virt`) a socket
//! may hold several clusters: every declared socket is a QEMU socket and every LLC a cluster
//! (`-smp ...,sockets=S,clusters=C`) whose L3 QEMU describes per cluster (`smp-cache`), so the
//! package ids are the declared sockets (`Mapping::Clusters`). [`Topology::describe`] says
//! which mapping applies and why.

mod cpulist;
mod qemu;
mod relations;
#[cfg(test)]
mod tests;
mod validate;
mod view;

pub use cpulist::{format_cpulist, parse_cpulist, CpuListError};
pub(crate) use qemu::Mapping;
use validate::{syntax_hint, validate, RawTopology};
pub use view::{CpuView, GuestView, NodeView};

use crate::arch::Arch;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Environment variable naming the directory [`Topology::by_name`] and [`Topology::list`] search.
pub(crate) const TOPOLOGIES_DIR_ENV: &str = "LAB_TOPOLOGIES_DIR";

/// NUMA distance of a node to itself (ACPI SLIT and Linux `LOCAL_DISTANCE`).
pub(crate) const LOCAL_DISTANCE: u32 = 10;
/// Distance between nodes when the file declares none (QEMU's and Linux's default).
pub(crate) const DEFAULT_REMOTE_DISTANCE: u32 = 20;

const MIB: u64 = 1 << 20;
pub(crate) use crate::process::MAX_HOST_CPUS;
/// Host nodes a `host_node` may name: QEMU's `host-nodes` takes node ids below 128.
pub(crate) const MAX_HOST_NODES: u32 = 128;

/// What is wrong with a topology file, for callers that match on it; the message has details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidKind {
    Name,
    Arch,
    Hugepages,
    NameMismatch,
    CpuModel,
    Sockets,
    ThreadsPerCore,
    NoNodes,
    NodeWithoutCpus,
    CpuList,
    CpuInTwoNodes,
    CpuIdGap,
    NodeWithoutMemory,
    MemorySize,
    LlcUnknownCpu,
    CpuInTwoLlcs,
    CpuInNoLlc,
    LlcNotContiguous,
    LlcSpansNodes,
    LlcSpansSockets,
    SmtSplit,
    LlcSizesDiffer,
    DistanceShape,
    DistanceDiagonal,
    DistanceRange,
    DistanceAsymmetric,
    PinUnknownVcpu,
    PinTwice,
    PinLength,
    PinHostRange,
    PinHostTwice,
    HostNode,
}

/// Errors from loading or finding a topology. Every message starts with the file (or directory).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TopologyError {
    #[error("{}: cannot read topology file: {error}", file.display())]
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    /// TOML syntax, a wrong type or an unknown key; toml's message carries line and column.
    #[error("{}: {error}{hint}", file.display())]
    Syntax {
        file: PathBuf,
        error: Box<toml::de::Error>,
        /// Empty, or a hint for a common mistake.
        hint: String,
    },
    #[error("{}: {field}: {message}", file.display())]
    Invalid {
        file: PathBuf,
        field: String,
        kind: InvalidKind,
        message: String,
    },
    #[error("no topology named {name:?} in {} (set {TOPOLOGIES_DIR_ENV} to search another directory); available: {available}", dir.display())]
    NotFound {
        name: String,
        dir: PathBuf,
        available: String,
    },
    #[error("{}: cannot list topologies: {error}", dir.display())]
    ListDir { dir: PathBuf, error: std::io::Error },
}

/// At the lab's facade a topology that does not load is bad input: the file and the field.
impl From<TopologyError> for crate::Error {
    fn from(e: TopologyError) -> crate::Error {
        let bad = |file: PathBuf, field: &str, message: String| crate::Error::BadInput {
            file,
            field: field.to_string(),
            message,
        };
        match e {
            TopologyError::Invalid {
                file,
                field,
                message,
                ..
            } => bad(file, &field, message),
            TopologyError::Syntax { file, error, hint } => bad(
                file,
                "TOML",
                format!("{}{hint}", error.to_string().trim_end()),
            ),
            TopologyError::Read { file, error } => {
                bad(file, "file", format!("cannot read: {error}"))
            }
            TopologyError::NotFound {
                name,
                dir,
                available,
            } => bad(
                dir,
                "name",
                format!(
                    "no topology named {name:?} (set {TOPOLOGIES_DIR_ENV} to search another \
                     directory); available: {available}"
                ),
            ),
            TopologyError::ListDir { dir, error } => {
                bad(dir, "directory", format!("cannot list topologies: {error}"))
            }
        }
    }
}

impl TopologyError {
    /// The validation problem, if this is one.
    #[cfg(test)]
    pub(crate) fn kind(&self) -> Option<InvalidKind> {
        match self {
            TopologyError::Invalid { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// A NUMA node as declared (id = position in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its id (its position in the file).
    pub id: u32,
    /// Its CPUs.
    pub cpus: Vec<u32>,
    /// Its memory.
    pub memory_bytes: u64,
    /// The host NUMA node its memory is bound to (`host_node`; QEMU `host-nodes`,
    /// `policy=bind`), if the file says.
    pub host_node: Option<u32>,
}

/// A last-level-cache group (id = position in the file, or the socket when none are declared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Llc {
    /// Its id.
    pub id: u32,
    /// The node it is in.
    pub node: u32,
    /// The socket it is in.
    pub socket: u32,
    /// A contiguous, sorted range of CPU ids.
    pub cpus: Vec<u32>,
}

/// A validated machine shape. Construct it with `Topology::load`, [`Topology::by_name`] or
/// `Topology::from_toml_str`; every instance satisfies the rules in the module docs.
#[derive(Debug, Clone)]
pub struct Topology {
    file: PathBuf,
    source_text: String,
    name: String,
    description: String,
    arch: Arch,
    cpu_model: String,
    sockets: u32,
    threads_per_core: u32,
    nodes: Vec<Node>,
    llcs: Vec<Llc>,
    llcs_declared: bool,
    distances: Vec<Vec<u32>>,
    distances_declared: bool,
    pinning: BTreeMap<u32, u32>,
    /// vCPU -> index of the `[[pin]]` table that pins it, for messages.
    pinned_by: BTreeMap<u32, usize>,
    mapping: Mapping,
    hugepage_bytes: Option<u64>,
}

/// The directory [`Topology::by_name`] searches: `$LAB_TOPOLOGIES_DIR`, else the repository's
/// `topologies/`.
pub(crate) fn topologies_dir() -> PathBuf {
    match std::env::var_os(TOPOLOGIES_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => crate::repo_path("topologies"),
    }
}

impl Topology {
    /// Reads and validates a topology file. Its `name` must equal the file name minus `.toml`.
    pub(crate) fn load(path: impl AsRef<Path>) -> Result<Self, TopologyError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| TopologyError::Read {
            file: path.to_path_buf(),
            error,
        })?;
        let topology = Self::from_toml_str(&text, path)?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if stem != topology.name {
            return Err(TopologyError::Invalid {
                file: path.to_path_buf(),
                field: "name".into(),
                kind: InvalidKind::NameMismatch,
                message: format!(
                    "is {:?} but the file is named {stem:?}.toml; topologies are found by file name, so the two must agree",
                    topology.name
                ),
            });
        }
        Ok(topology)
    }

    /// Finds `NAME.toml` in the topologies directory (`LAB_TOPOLOGIES_DIR`, else `topologies/`
    /// in the checkout) and loads it; a missing or invalid file is [`crate::Error::BadInput`],
    /// naming the file and the field.
    pub fn by_name(name: &str) -> Result<Self, crate::Error> {
        Self::find(name).map_err(crate::Error::from)
    }

    /// [`Topology::by_name`], with the topology module's own error.
    pub(crate) fn find(name: &str) -> Result<Self, TopologyError> {
        let dir = topologies_dir();
        let valid_name = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        let path = dir.join(format!("{name}.toml"));
        if !valid_name || !path.is_file() {
            let available = match Self::list_in(&dir) {
                Ok(names) if names.is_empty() => "none".to_string(),
                Ok(names) => names.join(", "),
                Err(e) => format!("none ({e})"),
            };
            return Err(TopologyError::NotFound {
                name: name.to_string(),
                dir,
                available,
            });
        }
        Self::load(path)
    }

    /// Names of the topologies [`Topology::by_name`] finds, sorted.
    pub fn list() -> Result<Vec<String>, crate::Error> {
        Self::list_in(&topologies_dir()).map_err(crate::Error::from)
    }

    /// `lab topology list`: each topology's name, vCPUs and description, a line each.
    pub fn list_text() -> Result<String, crate::Error> {
        let mut text = String::new();
        for name in Self::list()? {
            let t = Self::by_name(&name)?;
            text += &format!("{name:<20} {:>3} vCPUs  {}\n", t.nr_cpus(), t.description());
        }
        Ok(text)
    }

    fn list_in(dir: &Path) -> Result<Vec<String>, TopologyError> {
        let list_err = |error| TopologyError::ListDir {
            dir: dir.to_path_buf(),
            error,
        };
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(list_err)? {
            let path = entry.map_err(list_err)?.path();
            if path.extension().is_some_and(|e| e == "toml") {
                if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                    names.push(stem.to_string());
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// A plain shape without a file, for `lab run --cpus N --memory SIZE [--nodes K]`: `cpus`
    /// vCPUs and `memory` split evenly over `nodes` NUMA nodes (one socket, one LLC each, no
    /// SMT, distances 10/20, `qemu64`). Validated like a file: CPUs must divide among the nodes
    /// and memory must split into whole MiB ([`crate::Error::BadInput`] otherwise).
    pub fn quick(cpus: u32, memory: &str, nodes: u32) -> Result<Self, crate::Error> {
        Self::quick_shape(cpus, memory, nodes).map_err(crate::Error::from)
    }

    /// [`Topology::quick`], with the topology module's own error.
    fn quick_shape(cpus: u32, memory: &str, nodes: u32) -> Result<Self, TopologyError> {
        let bad = |field: &str, kind: InvalidKind, message: String| TopologyError::Invalid {
            file: PathBuf::from("the command line"),
            field: field.to_string(),
            kind,
            message,
        };
        let bytes = parse_size(memory).map_err(|m| bad("--memory", InvalidKind::MemorySize, m))?;
        if cpus == 0 || nodes == 0 || !cpus.is_multiple_of(nodes) {
            return Err(bad(
                "--cpus",
                InvalidKind::NodeWithoutCpus,
                format!("{cpus} CPUs do not divide into {nodes} node(s) (both at least 1)"),
            ));
        }
        let per_node = bytes / u64::from(nodes);
        if per_node == 0 || !per_node.is_multiple_of(1 << 20) {
            return Err(bad(
                "--memory",
                InvalidKind::MemorySize,
                format!("{memory} does not split into whole MiB over {nodes} node(s)"),
            ));
        }
        let size: String = memory
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
            .to_lowercase();
        let name = format!("quick-{cpus}cpu-{size}-{nodes}node");
        let per = cpus / nodes;
        let mut text = format!(
            "name = \"{name}\"\ndescription = \"lab run --cpus {cpus} --memory {memory} --nodes {nodes}\"\n\
             cpu_model = \"qemu64\"\nsockets = {nodes}\nthreads_per_core = 1\n"
        );
        if nodes > 1 {
            let rows: Vec<String> = (0..nodes)
                .map(|a| {
                    let row: Vec<&str> = (0..nodes)
                        .map(|b| if a == b { "10" } else { "20" })
                        .collect();
                    format!("[{}]", row.join(", "))
                })
                .collect();
            text += &format!("distances = [{}]\n", rows.join(", "));
        }
        for n in 0..nodes {
            text += &format!(
                "[[node]]\ncpus = \"{}-{}\"\nmemory = \"{}\"\n",
                n * per,
                n * per + per - 1,
                format_size(per_node)
            );
        }
        Topology::from_toml_str(&text, format!("{name}.toml"))
    }

    /// Parses and validates topology TOML; `file` is only used in error messages and
    /// [`Topology::file`]. Unlike [`Topology::load`] it does not compare `name` to the file name.
    pub(crate) fn from_toml_str(
        text: &str,
        file: impl Into<PathBuf>,
    ) -> Result<Self, TopologyError> {
        let file = file.into();
        let raw: RawTopology = toml::from_str(text).map_err(|error| TopologyError::Syntax {
            file: file.clone(),
            hint: syntax_hint(&error),
            error: Box::new(error),
        })?;
        validate(raw, file, text)
    }

    /// The `[[pin]]` table (its index) that pins `vcpu`.
    pub(crate) fn pin_table_of(&self, vcpu: u32) -> Option<&usize> {
        self.pinned_by.get(&vcpu)
    }

    pub(crate) fn file(&self) -> &Path {
        &self.file
    }
    /// The file's text, e.g. to hash it into a result's manifest.
    pub(crate) fn source_text(&self) -> &str {
        &self.source_text
    }
    /// The topology's name (its file's stem).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// One line on what it models.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// The guest's architecture (`arch`, default x86_64).
    pub fn arch(&self) -> Arch {
        self.arch
    }
    /// QEMU's `-cpu` model.
    pub fn cpu_model(&self) -> &str {
        &self.cpu_model
    }
    /// Declared sockets (the guest may see more: see `Mapping::LlcAsSocket`).
    pub fn sockets(&self) -> u32 {
        self.sockets
    }
    /// SMT threads per core.
    pub fn threads_per_core(&self) -> u32 {
        self.threads_per_core
    }
    /// Number of vCPUs; their ids are `0..nr_cpus()`.
    pub fn nr_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus.len() as u32).sum()
    }
    pub(crate) fn cpus_per_socket(&self) -> u32 {
        self.nr_cpus() / self.sockets
    }
    /// The NUMA nodes, by id.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }
    /// The LLC groups, by id.
    pub fn llcs(&self) -> &[Llc] {
        &self.llcs
    }
    /// Whether the file declared `[[llc]]` groups (otherwise each socket is one LLC).
    pub(crate) fn llcs_declared(&self) -> bool {
        self.llcs_declared
    }
    /// The full distance matrix, defaults filled in.
    pub fn distances(&self) -> &[Vec<u32>] {
        &self.distances
    }
    pub(crate) fn distances_declared(&self) -> bool {
        self.distances_declared
    }
    /// The host hugepage size guest memory comes from (`hugepages`), if the file asks for it.
    pub fn hugepage_bytes(&self) -> Option<u64> {
        self.hugepage_bytes
    }
    /// vCPU -> host CPU; empty when the file pins nothing.
    pub(crate) fn pinning(&self) -> &BTreeMap<u32, u32> {
        &self.pinning
    }

    pub(crate) fn mapping(&self) -> Mapping {
        self.mapping
    }
    /// The guest's memory, every node together.
    pub fn total_memory_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.memory_bytes).sum()
    }
    /// The node holding `cpu`, if it exists.
    pub fn node_of(&self, cpu: u32) -> Option<&Node> {
        self.nodes
            .iter()
            .find(|n| n.cpus.binary_search(&cpu).is_ok())
    }
    /// The LLC holding `cpu`, if it exists.
    pub fn llc_of(&self, cpu: u32) -> Option<&Llc> {
        self.llcs
            .iter()
            .find(|l| l.cpus.binary_search(&cpu).is_ok())
    }
    /// The SMT siblings of `cpu` (itself included): its consecutive group of
    /// `threads_per_core` ids.
    pub fn smt_siblings(&self, cpu: u32) -> Vec<u32> {
        let first = cpu - cpu % self.threads_per_core;
        (first..first + self.threads_per_core).collect()
    }
}

/// Parses a memory size: bytes, or a number with a binary K/M/G/T suffix (optionally `iB`).
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(split);
    let shift = match suffix.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KIB" => 10,
        "M" | "MIB" => 20,
        "G" | "GIB" => 30,
        "T" | "TIB" => 40,
        _ => {
            return Err(format!(
            "{text:?} is not a size: use bytes or a number with K, M, G or T (binary), e.g. \"2G\""
        ))
        }
    };
    let value: u64 = digits.parse().map_err(|_| {
        format!("{text:?} is not a size: it must start with a whole number, e.g. \"2G\"")
    })?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Formats bytes for people: "2 GiB", "1536 MiB", "4096 B".
pub(crate) fn format_size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} B")
    }
}
