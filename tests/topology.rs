//! Boot each shipped topology that fits this host and check, from inside the guest, that the
//! kernel sees exactly the declared CPUs per node, LLC groups, SMT siblings, node memory and
//! distances.

mod common;

use lab::devices::{bind_and_pin, DeviceSpec};
use lab::topology::{parse_cpulist, Topology};
use lab::workload::Dmatest;
use lab::BootOptions;

/// Reads what the guest kernel reports, as one `key value` line per fact.
const PROBE: &str = r#"
for c in /sys/devices/system/cpu/cpu[0-9]*; do
  n=${c##*/cpu}
  echo "cpu$n.llc $(cat $c/cache/index3/shared_cpu_list 2>/dev/null || echo none)"
  echo "cpu$n.smt $(cat $c/topology/thread_siblings_list)"
done
for d in /sys/devices/system/node/node[0-9]*; do
  n=${d##*/node}
  echo "node$n.cpus $(cat $d/cpulist)"
  echo "node$n.dist $(cat $d/distance)"
  echo "node$n.memkb $(awk '/MemTotal/ {print $4}' $d/meminfo)"
done
# Pages the node really has (MemTotal is lower by what the kernel reserves for itself).
awk '/^Node/ {n=$2; sub(",", "", n)} $1 == "present" {p[n] += $2} END {for (n in p) print "node" n ".present_pages", p[n]}' /proc/zoneinfo
echo "online $(cat /sys/devices/system/cpu/online)"
"#;

async fn check_topology(name: &str) {
    let lab = common::lab().await;
    let vm = lab
        .boot(BootOptions::named(&format!("topology-{name}")).topology(name))
        .await
        .unwrap();
    check_guest_view(name, &vm).await;
    vm.shutdown().await.unwrap();
}

/// Asserts the guest kernel of `vm` sees topology `name` as declared.
async fn check_guest_view(name: &str, vm: &lab::vm::Vm) {
    let topology = Topology::by_name(name).unwrap();
    let report = vm.sh(PROBE).await.unwrap();
    let facts: std::collections::BTreeMap<&str, &str> =
        report.lines().filter_map(|l| l.split_once(' ')).collect();
    let expected = topology.guest_view();
    let mut problems = Vec::new();
    let n = topology.nr_cpus();
    let online = parse_cpulist(facts.get("online").copied().unwrap_or("")).unwrap_or_default();
    if online != (0..n).collect::<Vec<_>>() {
        problems.push(format!("online CPUs {online:?}, declared 0-{}", n - 1));
    }
    for cpu in &expected.cpus {
        let llc = facts.get(format!("cpu{}.llc", cpu.cpu).as_str()).copied();
        if llc != Some(cpu.llc_cpus.as_str()) {
            problems.push(format!(
                "cpu{} LLC: guest {llc:?}, declared {}",
                cpu.cpu, cpu.llc_cpus
            ));
        }
        let smt = facts.get(format!("cpu{}.smt", cpu.cpu).as_str()).copied();
        if smt != Some(cpu.thread_siblings.as_str()) {
            problems.push(format!(
                "cpu{} SMT siblings: guest {smt:?}, declared {}",
                cpu.cpu, cpu.thread_siblings
            ));
        }
    }
    for node in &expected.nodes {
        let cpus = facts
            .get(format!("node{}.cpus", node.node).as_str())
            .copied();
        if cpus != Some(node.cpus.as_str()) {
            problems.push(format!(
                "node{} CPUs: guest {cpus:?}, declared {}",
                node.node, node.cpus
            ));
        }
        let dist = facts
            .get(format!("node{}.dist", node.node).as_str())
            .copied();
        let declared: Vec<String> = node.distances.iter().map(u32::to_string).collect();
        if dist != Some(declared.join(" ").as_str()) {
            problems.push(format!(
                "node{} distances: guest {dist:?}, declared {declared:?}",
                node.node
            ));
        }
        // The node's present pages must be the declared size (within 5%; in practice within
        // the BIOS's sub-1 MiB holes). MemTotal is printed for reference: it is lower by the
        // memmap, swiotlb and the kernel image (up to 8% of a 1 GiB node), so it is no measure
        // of what the machine was given.
        let pages: u64 = facts
            .get(format!("node{}.present_pages", node.node).as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let present = pages * 4096;
        let ratio = present as f64 / node.memory_bytes as f64;
        if !(0.95..=1.0).contains(&ratio) {
            problems.push(format!(
                "node{} memory: guest has {present} bytes present = {:.2}% of the declared {} (want within 5%)",
                node.node,
                ratio * 100.0,
                node.memory_bytes
            ));
        }
    }
    let extra_nodes = facts
        .keys()
        .filter(|k| k.starts_with("node") && k.ends_with(".cpus"))
        .count();
    if extra_nodes != expected.nodes.len() {
        problems.push(format!(
            "guest has {extra_nodes} nodes, declared {}",
            expected.nodes.len()
        ));
    }
    println!("{}", topology.describe());
    println!("booted in {:.1?}; guest report:\n{report}", vm.boot_time);
    assert!(
        problems.is_empty(),
        "{name}: the guest's view differs:\n  {}",
        problems.join("\n  ")
    );
}

#[tokio::test]
async fn ci_2node_4llc_guest_sees_declared_topology() {
    check_topology("ci-2node-4llc").await;
}

#[tokio::test]
async fn ci_smt_guest_sees_smt_siblings() {
    check_topology("ci-smt").await;
}

/// An aarch64 guest on QEMU `virt`: the LLCs are clusters (QEMU's L3 per cluster), the nodes
/// sockets; the lab's arm64 default kernel, cross-built.
#[tokio::test]
async fn ci_arm64_2node_guest_sees_clusters_as_llcs_and_sockets_as_nodes() {
    check_topology("ci-arm64-2node").await;
}

#[tokio::test]
async fn epyc_7313_nps4_guest_sees_four_nodes_and_llcs() {
    check_topology("epyc-7313-nps4").await;
}

/// Bytes of `pid`'s mappings backed by pages of `page` bytes (its smaps' `Size` of every
/// mapping whose `KernelPageSize` is that): per process, so other tests using hugepages meanwhile
/// do not count.
fn mapped_in_pages_of(pid: u32, page: u64) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let kb = |line: &str, key: &str| -> Option<u64> {
        line.strip_prefix(key)?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    };
    let (mut total, mut size) = (0, 0);
    for line in smaps.lines() {
        if let Some(s) = kb(line, "Size:") {
            size = s;
        } else if kb(line, "KernelPageSize:") == Some(page >> 10) {
            total += size << 10;
        }
    }
    total
}

/// `ci-hugepages`: guest memory comes from the host's hugepages (QEMU maps all of both nodes in
/// 2 MiB pages), the guest sees the declared nodes, and a DMA engine, a separate process mapping
/// that memory over vfio-user, copies in it with the seed's dmatest shape.
#[tokio::test]
async fn ci_hugepages_guest_memory_comes_from_host_hugepages() {
    let name = "ci-hugepages";
    let topology = Topology::by_name(name).unwrap();
    let page = topology
        .hugepage_bytes()
        .expect("ci-hugepages takes hugepages");
    let want: u64 = topology.total_memory_bytes() / page;
    let pool = format!("/sys/kernel/mm/hugepages/hugepages-{}kB", page >> 10);
    let free: u64 = std::fs::read_to_string(format!("{pool}/free_hugepages"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0);
    if free < want {
        lab::skip::host_lacks(
            "hugepage-backed guest",
            &format!("this host has {free} free 2 MiB hugepages, the guest needs {want}"),
            &format!("Reserve them as root: `echo {want} > {pool}/nr_hugepages` (.ci/run does)."),
        );
        return;
    }
    let lab = common::lab().await;
    let vm = lab
        .boot(
            BootOptions::named(&format!("topology-{name}"))
                .topology(name)
                .device(DeviceSpec::ioat(1)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let huge = mapped_in_pages_of(vm.qemu_pid, page);
    println!(
        "QEMU maps {} MiB in {} MiB pages; the guest has {} MiB",
        huge >> 20,
        page >> 20,
        topology.total_memory_bytes() >> 20
    );
    assert!(
        huge >= topology.total_memory_bytes(),
        "QEMU maps {huge} bytes in hugepages, the guest's memory is {}",
        topology.total_memory_bytes()
    );
    check_guest_view(name, &vm).await;
    let bound = bind_and_pin(&vm, vm.devices()).await.unwrap();
    assert_eq!(bound[0].driver, "ioatdma");
    let params = Dmatest::seed_parameters().iterations(100);
    let result = params
        .run(&vm)
        .await
        .unwrap_or_else(|e| panic!("dmatest {params:?}: {e:#}"));
    for t in &result.threads {
        assert_eq!((t.tests, t.failures), (100, 0), "{t:?}");
    }
    vm.shutdown().await.unwrap();
}
