//! The host description and its mirror, on the sysfs trees of `lab/tests/fixtures/hosts/`:
//! models of the seed's machines written by `generate.py` (2x Xeon Gold 6132, EPYC 7313 in NPS1
//! and NPS4: the shapes their papers and `lscpu` give, not captures), the real trees
//! `capture.sh` copied from hosts (`captured-*`), and this host's own `/sys`.

use super::*;
use crate::topology::{GuestView, Mapping};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/hosts")).join(name)
}

fn host(name: &str) -> HostTopology {
    HostTopology::read(fixture(name)).unwrap_or_else(|e| panic!("{e:#}"))
}

fn shipped(name: &str) -> Topology {
    Topology::load(
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../topologies"))
            .join(format!("{name}.toml")),
    )
    .unwrap()
}

fn mirror(host_name: &str) -> Mirror {
    host(host_name)
        .mirror(&MirrorOptions::named("m"))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

type Shape = (
    String,
    u32,
    u32,
    Mapping,
    Vec<(Vec<u32>, u64)>,
    Vec<Vec<u32>>,
    Vec<Vec<u32>>,
    GuestView,
    Vec<String>,
);

/// Everything that makes two topologies the same machine for a guest; not name, pins or
/// memory binding.
fn shape(t: &Topology) -> Shape {
    // The QEMU line without the memory backends' host binding.
    let args = t
        .qemu_args()
        .args
        .into_iter()
        .map(|a| match a.find(",host-nodes=") {
            Some(i) => a[..i].to_string(),
            None => a,
        })
        .collect();
    (
        t.cpu_model().to_string(),
        t.sockets(),
        t.threads_per_core(),
        t.mapping(),
        t.nodes()
            .iter()
            .map(|n| (n.cpus.clone(), n.memory_bytes))
            .collect(),
        t.llcs().iter().map(|l| l.cpus.clone()).collect(),
        t.distances().to_vec(),
        t.guest_view(),
        args,
    )
}

/// A 2-vCPU AMD EPYC cloud machine (the development host of 2026-12-01), captured with
/// `capture.sh /sys`: two CPUs, one core each, one package, one node, one L3 over both.
#[test]
fn reads_a_captured_two_cpu_epyc() {
    let h = host("captured-epyc-2cpu");
    assert_eq!(h.online(), [0, 1]);
    assert_eq!(h.vendor(), Vendor::Amd);
    assert_eq!(h.nodes().len(), 1);
    assert_eq!(h.nodes()[0].distances, vec![10]);
    assert!(h.nodes()[0].mem_total.unwrap() > 1 << 30);
    let cpu = h.cpu(1).unwrap();
    assert_eq!((cpu.package, cpu.core_id, cpu.node), (0, 1, 0));
    assert_eq!(cpu.siblings, vec![1], "no SMT siblings");
    assert_eq!(h.llcs(), vec![vec![0, 1]]);
    assert_eq!(h.hugepages_count(None, 2 << 20, "nr_hugepages"), Some(0));
    assert_eq!(
        h.hugepage_pools(),
        ["2 MiB: 0 of 0 free", "1 GiB: 0 of 0 free"]
    );
    assert!(host("xeon-gold-6132-2s").hugepage_pools().is_empty());
    let m = h.mirror(&MirrorOptions::named("captured")).unwrap();
    assert_eq!(m.topology.nr_cpus(), 2);
}

/// `capture.sh` on this host's `/sys` gives a tree the lab reads exactly as it reads `/sys`.
#[test]
fn a_capture_of_this_host_reads_like_this_host() {
    let out = tempfile::tempdir().unwrap();
    let tree = out.path().join("here");
    let status = std::process::Command::new(fixture("capture.sh"))
        .args([std::path::Path::new("/sys"), &tree])
        .output()
        .expect("capture.sh runs");
    assert!(status.status.success(), "{status:?}");
    let (live, captured) = (HostTopology::this_host().unwrap(), host_at(&tree));
    assert_eq!(live.online(), captured.online());
    assert_eq!(live.vendor(), captured.vendor());
    assert_eq!(live.llcs(), captured.llcs());
    let cpus = |h: &HostTopology| h.cpus().cloned().collect::<Vec<_>>();
    assert_eq!(cpus(&live), cpus(&captured));
    // Free memory moves between the two reads; the rest of each node may not.
    let nodes = |h: &HostTopology| {
        h.nodes()
            .iter()
            .map(|n| (n.id, n.cpus.clone(), n.distances.clone(), n.mem_total))
            .collect::<Vec<_>>()
    };
    assert_eq!(nodes(&live), nodes(&captured));
}

fn host_at(dir: &std::path::Path) -> HostTopology {
    HostTopology::read(dir).unwrap_or_else(|e| panic!("{e:#}"))
}

#[test]
fn reads_the_modelled_xeon() {
    let h = host("xeon-gold-6132-2s");
    assert_eq!(h.online(), (0..56).collect::<Vec<_>>());
    assert_eq!(h.vendor(), Vendor::Intel);
    let cpu = h.cpu(30).unwrap();
    assert_eq!((cpu.package, cpu.core_id, cpu.node), (0, 2, 0));
    assert_eq!(cpu.siblings, vec![2, 30]);
    // The L3 (index3), not the per-core L1/L2 listed before it.
    assert_eq!(format_cpulist(&cpu.llc), "0-13,28-41");
    assert_eq!(
        h.cpu(14).unwrap().core_id,
        0,
        "second package restarts core ids"
    );
    assert_eq!(h.llcs().len(), 2);
    assert_eq!(h.nodes().len(), 2);
    assert_eq!(h.nodes()[1].distances, vec![21, 10]);
    assert_eq!(format_cpulist(&h.nodes()[1].cpus), "14-27,42-55");
    assert_eq!(h.nodes()[0].mem_total, Some(94 << 30));
    assert_eq!(h.nodes()[0].mem_free, Some(90 << 30));
}

#[test]
fn reads_the_modelled_epycs() {
    let nps1 = host("epyc-7313-nps1");
    assert_eq!(nps1.vendor(), Vendor::Amd);
    assert_eq!(nps1.nodes().len(), 1);
    let llcs: Vec<String> = nps1.llcs().iter().map(|l| format_cpulist(l)).collect();
    assert_eq!(
        llcs,
        ["0-3,16-19", "4-7,20-23", "8-11,24-27", "12-15,28-31"]
    );
    let nps4 = host("epyc-7313-nps4");
    assert_eq!(nps4.nodes().len(), 4);
    assert_eq!(nps4.cpu(21).unwrap().node, 1);
    assert_eq!(nps4.nodes()[2].distances, vec![12, 12, 10, 11]);
    assert_eq!(nps4.nodes()[1].mem_free, Some(29 << 30));
}

#[test]
fn from_host_on_the_xeon_gives_the_seed_shape() {
    let m = mirror("xeon-gold-6132-2s");
    assert_eq!(shape(&m.topology), shape(&shipped("xeon-gold-6132-2s")));
    // Siblings n and n+28 on the host are consecutive vCPUs; socket 1 starts at host CPU 14.
    let p = m.topology.pinning();
    assert_eq!((p[&0], p[&1], p[&2], p[&3]), (0, 28, 1, 29));
    assert_eq!((p[&27], p[&28], p[&29], p[&55]), (41, 14, 42, 55));
    assert!(m.housekeeping.is_empty());
    assert!(m.text.contains("Housekeeping: none left"), "{}", m.text);
    let args = m.topology.qemu_args().args;
    assert!(
        args.contains(
            &"memory-backend-memfd,id=ram1,size=2048M,share=on,host-nodes=1,policy=bind".into()
        ),
        "{args:?}"
    );
    m.topology
        .check_against(&host("xeon-gold-6132-2s"))
        .unwrap();
}

#[test]
fn from_host_on_the_epycs_gives_the_nps1_and_nps4_shapes() {
    let nps1 = mirror("epyc-7313-nps1");
    assert_eq!(shape(&nps1.topology), shape(&shipped("epyc-7313-nps1")));
    let p = nps1.topology.pinning();
    // CCX 1 holds host CPUs 4-7 and their siblings 20-23.
    assert_eq!((p[&8], p[&9], p[&15]), (4, 20, 23));
    nps1.topology
        .check_against(&host("epyc-7313-nps1"))
        .unwrap();

    let nps4 = mirror("epyc-7313-nps4");
    assert_eq!(shape(&nps4.topology), shape(&shipped("epyc-7313-nps4")));
    assert_eq!(nps4.topology.mapping(), Mapping::LlcAsSocket);
    let hosts: Vec<Option<u32>> = nps4.topology.nodes().iter().map(|n| n.host_node).collect();
    assert_eq!(hosts, [Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(nps4.topology.pinning()[&31], 31);
    nps4.topology
        .check_against(&host("epyc-7313-nps4"))
        .unwrap();
}

#[test]
fn the_written_file_round_trips_through_the_parser() {
    for name in ["xeon-gold-6132-2s", "epyc-7313-nps1", "epyc-7313-nps4"] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("{name}-mirror.toml"));
        let mut options = MirrorOptions::named(format!("{name}-mirror"));
        options.file = Some(file.clone());
        let m = host(name).mirror(&options).unwrap();
        std::fs::write(&file, &m.text).unwrap();
        let loaded = Topology::load(&file).unwrap_or_else(|e| panic!("{e}\n{}", m.text));
        assert_eq!(loaded.pinning(), m.topology.pinning());
        assert_eq!(loaded.nodes(), m.topology.nodes());
        assert_eq!(loaded.qemu_args(), m.topology.qemu_args());
        // Every host CPU once.
        let mut hosts: Vec<u32> = loaded.pinning().values().copied().collect();
        hosts.sort_unstable();
        assert_eq!(hosts, host(name).online());
    }
}

#[test]
fn max_cpus_drops_the_first_cores_of_every_llc_for_housekeeping() {
    let h = host("xeon-gold-6132-2s");
    let mut options = MirrorOptions::named("small");
    options.max_cpus = Some(17);
    let m = h.mirror(&options).unwrap();
    let t = &m.topology;
    // 2 LLCs x 4 cores x 2 threads: 8 cores of 17 CPUs' worth, rounded down per LLC.
    assert_eq!(
        (
            t.nr_cpus(),
            t.sockets(),
            t.threads_per_core(),
            t.llcs().len()
        ),
        (16, 2, 2, 2)
    );
    assert_eq!(format_cpulist(&m.housekeeping), "0-9,14-23,28-37,42-51");
    assert_eq!(
        t.housekeeping_cpus(h.online()),
        Some(m.housekeeping.clone())
    );
    let p = t.pinning();
    assert_eq!((p[&0], p[&1], p[&8]), (10, 38, 24));
    assert!(
        m.text
            .contains("Housekeeping: host CPUs 0-9,14-23,28-37,42-51"),
        "{}",
        m.text
    );
    t.check_against(&h).unwrap();

    options.max_cpus = Some(3);
    let err = h.mirror(&options).unwrap_err().to_string();
    assert!(
        err.contains("--max-cpus 3") && err.contains("4 vCPUs"),
        "{err}"
    );

    // NPS4: one core of each of the four CCXs.
    options.max_cpus = Some(8);
    let m = host("epyc-7313-nps4").mirror(&options).unwrap();
    assert_eq!((m.topology.nr_cpus(), m.topology.nodes().len()), (8, 4));
    assert_eq!(format_cpulist(&m.topology.nodes()[3].cpus), "6-7");
}

/// A 2-node guest pinned to host CPUs 0-3, memory bound as `host_nodes` says.
fn bound(memory: [&str; 2], host_nodes: [u32; 2], pin_host: &str) -> Topology {
    let text = format!(
        r#"name = "b"
sockets = 2
[[node]]
cpus = "0-1"
memory = "{}"
host_node = {}
[[node]]
cpus = "2-3"
memory = "{}"
host_node = {}
[[pin]]
vcpus = "0-3"
host = "{pin_host}"
"#,
        memory[0], host_nodes[0], memory[1], host_nodes[1]
    );
    Topology::from_toml_str(&text, "topologies/b.toml").unwrap()
}

#[test]
fn host_checks_name_the_file_and_field() {
    let xeon = host("xeon-gold-6132-2s");
    let nps1 = host("epyc-7313-nps1");
    bound(["2G", "2G"], [0, 1], "0-3")
        .check_against(&xeon)
        .unwrap();

    // A pinned host CPU that is not online.
    let err = mirror("xeon-gold-6132-2s")
        .topology
        .check_against(&nps1)
        .unwrap_err();
    assert!(
        err.starts_with("m.toml: pin[")
            && err.contains("host CPU 32")
            && err.contains("online: 0-31"),
        "{err}"
    );
    // A host node that does not exist.
    let err = bound(["2G", "2G"], [0, 1], "0-3")
        .check_against(&nps1)
        .unwrap_err();
    assert!(
        err.starts_with("topologies/b.toml: node[1].host_node: host node 1 does not exist"),
        "{err}"
    );
    // More than the node's MemFree (node 1 of the NPS4 tree: 29 GiB free).
    let nps4 = host("epyc-7313-nps4");
    bound(["29G", "29G"], [0, 1], "0-3")
        .check_against(&nps4)
        .unwrap();
    let err = bound(["1G", "30G"], [0, 1], "0-3")
        .check_against(&nps4)
        .unwrap_err();
    assert!(
        err.starts_with("topologies/b.toml: node[1].host_node: binds 30 GiB to host node 1")
            && err.contains("29696 MiB free")
            && err.contains("node1/meminfo"),
        "{err}"
    );
    // Two guest nodes on one host node count together.
    let err = bound(["16G", "16G"], [2, 2], "0-3")
        .check_against(&nps4)
        .unwrap_err();
    assert!(
        err.contains("node[0].host_node: with guest nodes 0, 1 binds 32 GiB to host node 2"),
        "{err}"
    );
}

#[test]
fn housekeeping_is_the_online_cpus_no_vcpu_takes() {
    let t = bound(["1G", "1G"], [0, 0], "2-5");
    let online: Vec<u32> = (0..8).collect();
    assert_eq!(t.housekeeping_cpus(&online), Some(vec![0, 1, 6, 7]));
    assert_eq!(t.housekeeping_cpus(&[2, 3, 4, 5]), None, "nothing left");
    let unpinned = Topology::from_toml_str(
        "name = \"u\"\n[[node]]\ncpus = \"0-1\"\nmemory = \"1G\"\n",
        "u.toml",
    )
    .unwrap();
    assert_eq!(unpinned.housekeeping_cpus(&online), None);
    assert!(!unpinned.needs_host());
    assert!(t.needs_host());
}

#[test]
fn a_host_without_numa_or_caches_is_one_node_and_one_llc_per_package() {
    let dir = tempfile::tempdir().unwrap();
    let cpu = dir.path().join("devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-3\n").unwrap();
    for c in 0..4 {
        let t = cpu.join(format!("cpu{c}/topology"));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("physical_package_id"), "0\n").unwrap();
        std::fs::write(t.join("core_id"), format!("{c}\n")).unwrap();
        std::fs::write(t.join("thread_siblings_list"), format!("{c}\n")).unwrap();
    }
    let h = HostTopology::read(dir.path()).unwrap();
    assert_eq!(h.nodes().len(), 1);
    assert_eq!(h.nodes()[0].mem_free, None);
    assert_eq!(h.cpu(3).unwrap().llc, vec![0, 1, 2, 3]);
    let m = h.mirror(&MirrorOptions::named("plain")).unwrap();
    assert_eq!(m.topology.cpu_model(), "qemu64");
    assert_eq!(m.topology.nodes()[0].host_node, None, "{}", m.text);
    assert!(m.text.contains("not bound to host nodes"), "{}", m.text);
}

#[test]
fn this_hosts_mirror_is_a_valid_topology() {
    let h = match HostTopology::this_host() {
        Ok(h) => h,
        Err(e) => {
            return crate::skip::host_lacks(
                "mirror of this host",
                &format!("no readable /sys here ({e:#})"),
                "Run it where sysfs is mounted.",
            )
        }
    };
    let m = h
        .mirror(&MirrorOptions::named("this-host"))
        .unwrap_or_else(|e| panic!("{e:#}"));
    Topology::from_toml_str(&m.text, "this-host.toml").unwrap();
    let online = format_cpulist(h.online());
    m.topology.check_pins_against(&online).unwrap();
}

/// The modelled 2-socket Xeon with 2 MiB hugepage pools: `(free, reserved)` for the whole host
/// and for nodes 0 and 1 (`None`: no pool of that size).
fn xeon_with_hugepages(pools: [Option<(u64, u64)>; 3]) -> (tempfile::TempDir, HostTopology) {
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-r")
        .arg(fixture("xeon-gold-6132-2s").join("devices"))
        .arg(dir.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let places = [
        "kernel/mm/hugepages".to_string(),
        "devices/system/node/node0/hugepages".to_string(),
        "devices/system/node/node1/hugepages".to_string(),
    ];
    for (place, pool) in places.iter().zip(pools) {
        if let Some((free, reserved)) = pool {
            let pool_dir = dir.path().join(place).join("hugepages-2048kB");
            std::fs::create_dir_all(&pool_dir).unwrap();
            std::fs::write(pool_dir.join("free_hugepages"), format!("{free}\n")).unwrap();
            std::fs::write(pool_dir.join("nr_hugepages"), format!("{reserved}\n")).unwrap();
        }
    }
    let host = HostTopology::read(dir.path()).unwrap();
    (dir, host)
}

#[test]
fn hugepage_pools_are_checked_on_the_host_and_on_each_bound_node() {
    // 1 GiB per guest node = 512 pages of 2 MiB, node 0 on host node 0, node 1 on host node 1.
    let text = "name = \"h\"\nhugepages = \"2M\"\nsockets = 2\n\
                [[node]]\ncpus = \"0-1\"\nmemory = \"1G\"\nhost_node = 0\n\
                [[node]]\ncpus = \"2-3\"\nmemory = \"1G\"\nhost_node = 1\n";
    let t = Topology::from_toml_str(text, "topologies/h.toml").unwrap();

    let (_d, h) = xeon_with_hugepages([Some((1024, 1024)), Some((512, 512)), Some((512, 512))]);
    t.check_against(&h).unwrap();

    let (_d, h) = xeon_with_hugepages([Some((812, 1024)), Some((512, 512)), Some((300, 512))]);
    let err = t.check_against(&h).unwrap_err();
    assert!(
        err.starts_with("topologies/h.toml: hugepages: needs 1024 free 2 MiB hugepages on this host, which has 812 free")
            && err.contains("echo 1236 > ")
            && err.contains("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"),
        "{err}"
    );
    let (_d, h) = xeon_with_hugepages([Some((2048, 2048)), Some((1536, 1536)), Some((300, 512))]);
    let err = t.check_against(&h).unwrap_err();
    assert!(
        err.starts_with("topologies/h.toml: node[1].host_node: needs 512 free 2 MiB hugepages on host node 1, which has 300 free")
            && err.contains("echo 724 > ")
            && err.contains("node/node1/hugepages/hugepages-2048kB/nr_hugepages"),
        "{err}"
    );
    let (_d, h) = xeon_with_hugepages([None, None, None]);
    let err = t.check_against(&h).unwrap_err();
    assert!(
        err.contains("hugepages: needs 1024 free 2 MiB hugepages on this host, which has no pool of that size"),
        "{err}"
    );
    // Hugepages are not MemFree: 100 GiB per node passes with pools that hold it although the
    // modelled nodes have 90 GiB free.
    let big = text.replace("memory = \"1G\"", "memory = \"100G\"");
    let t = Topology::from_toml_str(&big, "topologies/h.toml").unwrap();
    let (_d, h) = xeon_with_hugepages([
        Some((102400, 102400)),
        Some((51200, 51200)),
        Some((51200, 51200)),
    ]);
    t.check_against(&h).unwrap();
}

#[test]
fn from_host_with_hugepages_writes_them_and_refuses_memory_they_do_not_divide() {
    let mut options = MirrorOptions::named("m");
    options.hugepages = Some("1G".into());
    let m = host("epyc-7313-nps4").mirror(&options).unwrap();
    assert!(m.text.contains("\nhugepages = \"1G\"\n"), "{}", m.text);
    assert_eq!(m.topology.hugepage_bytes(), Some(1 << 30));
    options.node_memory = Some(1536 << 20);
    let err = format!("{:#}", host("epyc-7313-nps4").mirror(&options).unwrap_err());
    assert!(
        err.contains("node[0].memory") && err.contains("1 GiB hugepages"),
        "{err}"
    );
}
