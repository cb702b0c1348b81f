//! A topology against the host it boots on: the `[[pin]]` map's host CPUs online, each
//! `host_node` present with enough free memory (or hugepages), and the housekeeping set (the
//! online host CPUs no vCPU is pinned to) for QEMU's other threads and the device models. Runs
//! before a boot; every error names the topology file and the field. Here, not in `topology`,
//! so that the topology (an input) knows nothing of the host it may run on.

use std::collections::BTreeMap;

use super::HostTopology;
use crate::topology::{format_cpulist, format_size, Node, Topology};

impl Topology {
    /// The `[[pin]]` field that pins `vcpu`, for messages.
    fn pin_field(&self, vcpu: u32) -> String {
        match self.pin_table_of(vcpu) {
            Some(i) => format!("pin[{i}].host"),
            None => "pin".to_string(),
        }
    }

    /// Whether a boot must look at the host first: the file pins vCPUs, binds node memory or
    /// takes hugepages.
    pub(crate) fn needs_host(&self) -> bool {
        !self.pinning().is_empty()
            || self.nodes().iter().any(|n| n.host_node.is_some())
            || self.hugepage_bytes().is_some()
    }

    /// Checks the pin map against the host's online CPUs (a cpulist, as in
    /// `/sys/devices/system/cpu/online`).
    #[cfg(test)]
    pub(crate) fn check_pins_against(&self, online: &str) -> Result<(), String> {
        let online = crate::topology::parse_cpulist(online.trim())
            .map_err(|e| format!("the host's online CPU list {online:?}: {e}"))?;
        self.check_pins_online(&online)
    }

    fn check_pins_online(&self, online: &[u32]) -> Result<(), String> {
        for (vcpu, host) in self.pinning() {
            if online.binary_search(host).is_err() {
                return Err(format!(
                    "{}: {}: puts vCPU {vcpu} on host CPU {host}, which is not online here \
                     (online: {})",
                    self.file().display(),
                    self.pin_field(*vcpu),
                    format_cpulist(online)
                ));
            }
        }
        Ok(())
    }

    /// Everything a boot needs from `host`: pinned host CPUs online (each used once is checked
    /// at load), every `host_node` present on the host, and enough free memory (`MemFree` of
    /// the node's `meminfo`) for all guest nodes bound to it, or, with `hugepages`, enough free
    /// hugepages of that size on the host and on every bound host node.
    pub(crate) fn check_against(&self, host: &HostTopology) -> Result<(), String> {
        self.check_pins_online(host.online())?;
        let file = self.file().display();
        let mut bound: BTreeMap<u32, Vec<(u32, u64)>> = BTreeMap::new();
        for node in self.nodes() {
            let Some(h) = node.host_node else { continue };
            let field = format!("node[{}].host_node", node.id);
            if host.node(h).is_none() {
                let ids: Vec<String> = host.nodes().iter().map(|n| n.id.to_string()).collect();
                return Err(format!(
                    "{file}: {field}: host node {h} does not exist here (host nodes: {}; {})",
                    ids.join(", "),
                    host.root().join("devices/system/node").display()
                ));
            }
            bound
                .entry(h)
                .or_default()
                .push((node.id, node.memory_bytes));
        }
        if let Some(page) = self.hugepage_bytes() {
            // Hugepages are reserved apart from MemFree: their own pools are what counts.
            return self.check_hugepages(host, page);
        }
        for (h, guests) in bound {
            let host_node = host.node(h).expect("checked above");
            let want: u64 = guests.iter().map(|g| g.1).sum();
            let field = format!("node[{}].host_node", guests[0].0);
            let what = if guests.len() == 1 {
                format!("binds {} to host node {h}", format_size(want))
            } else {
                let ids: Vec<String> = guests.iter().map(|g| g.0.to_string()).collect();
                format!(
                    "with guest nodes {} binds {} to host node {h}",
                    ids.join(", "),
                    format_size(want)
                )
            };
            match host_node.mem_free {
                None => {
                    return Err(format!(
                    "{file}: {field}: {what}, but its free memory is unknown (no MemFree in {})",
                    host.meminfo_path(h).display()
                ))
                }
                Some(free) if free < want => {
                    return Err(format!(
                        "{file}: {field}: {what}, which has only {} MiB free (MemFree in {})",
                        free >> 20,
                        host.meminfo_path(h).display()
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Free hugepages of `page` bytes for every guest node: in the host's pool, and in the pool
    /// of each host node guest memory is bound to.
    fn check_hugepages(&self, host: &HostTopology, page: u64) -> Result<(), String> {
        let file = self.file().display();
        let pages = |nodes: &[&Node]| nodes.iter().map(|n| n.memory_bytes / page).sum();
        let all: Vec<&Node> = self.nodes().iter().collect();
        let mut wants: Vec<(Option<u32>, String, u64)> =
            vec![(None, "hugepages".to_string(), pages(&all))];
        let mut bound: BTreeMap<u32, Vec<&Node>> = BTreeMap::new();
        for node in self.nodes() {
            if let Some(h) = node.host_node {
                bound.entry(h).or_default().push(node);
            }
        }
        for (h, nodes) in bound {
            wants.push((
                Some(h),
                format!("node[{}].host_node", nodes[0].id),
                pages(&nodes),
            ));
        }
        let size = format_size(page);
        for (node, field, want) in wants {
            let dir = host.hugepages_dir(node, page);
            let pool = match node {
                Some(h) => format!("host node {h}"),
                None => "this host".to_string(),
            };
            let Some(free) = host.hugepages_count(node, page, "free_hugepages") else {
                return Err(format!(
                    "{file}: {field}: needs {want} free {size} hugepages on {pool}, which has \
                     no pool of that size ({} is missing)",
                    dir.display()
                ));
            };
            if free < want {
                let reserved = host
                    .hugepages_count(node, page, "nr_hugepages")
                    .unwrap_or(0);
                return Err(format!(
                    "{file}: {field}: needs {want} free {size} hugepages on {pool}, which has \
                     {free} free ({}): reserve more as root first, e.g. `echo {} > {}`",
                    dir.join("free_hugepages").display(),
                    reserved + (want - free),
                    dir.join("nr_hugepages").display()
                ));
            }
        }
        Ok(())
    }

    /// [`Self::check_against`] this host, when the file pins or binds anything; returns the
    /// host it read (`None` when there was nothing to check).
    pub(crate) fn check_on_host(&self) -> Result<Option<HostTopology>, String> {
        if !self.needs_host() {
            return Ok(None);
        }
        let host = HostTopology::this_host().map_err(|e| {
            format!(
                "{}: checking [[pin]], host_node and hugepages against this host: {e:#}",
                self.file().display()
            )
        })?;
        self.check_against(&host)?;
        Ok(Some(host))
    }

    /// The host CPUs for QEMU's non-vCPU threads and the device models when the file pins
    /// vCPUs: the online CPUs no vCPU is pinned to. `None` when nothing is pinned, or when
    /// the pins take every online CPU (then those threads stay unpinned).
    pub(crate) fn housekeeping_cpus(&self, online: &[u32]) -> Option<Vec<u32>> {
        if self.pinning().is_empty() {
            return None;
        }
        let pinned: std::collections::BTreeSet<u32> = self.pinning().values().copied().collect();
        let rest: Vec<u32> = online
            .iter()
            .copied()
            .filter(|c| !pinned.contains(c))
            .collect();
        (!rest.is_empty()).then_some(rest)
    }
}
