use super::*;

const FILE: &str = "topologies/t.toml";

/// A valid 8-CPU, 2-node, 4-LLC shape; tests replace one line to break one rule.
const BASE: &str = r#"
name = "t"
cpu_model = "qemu64"
sockets = 1
threads_per_core = 1
distances = [[10, 20], [20, 10]]
[[node]]
cpus = "0-3"
memory = "2G"
[[node]]
cpus = "4-7"
memory = "2G"
[[llc]]
cpus = "0-1"
[[llc]]
cpus = "2-3"
[[llc]]
cpus = "4-5"
[[llc]]
cpus = "6-7"
"#;

fn parse(text: &str) -> Result<Topology, TopologyError> {
    Topology::from_toml_str(text, FILE)
}

fn replaced(from: &str, to: &str) -> String {
    assert!(BASE.contains(from), "test bug: {from:?} not in BASE");
    BASE.replacen(from, to, 1)
}

/// Asserts `text` fails with `kind`, and the message names the file and `field`.
#[track_caller]
fn assert_invalid(text: &str, kind: InvalidKind, field: &str) -> String {
    let err = match parse(text) {
        Ok(_) => panic!("expected {kind:?} naming {field}, but the topology is valid:\n{text}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert_eq!(err.kind(), Some(kind), "wrong error: {msg}");
    assert!(
        msg.starts_with(FILE),
        "message does not name the file: {msg}"
    );
    assert!(
        msg.contains(&format!(": {field}: ")),
        "message does not name {field}: {msg}"
    );
    msg
}

#[test]
fn base_is_valid() {
    let t = parse(BASE).unwrap();
    assert_eq!(t.nr_cpus(), 8);
    assert_eq!(t.mapping(), Mapping::LlcAsSocket);
    assert_eq!(t.llcs().len(), 4);
    assert_eq!(t.llcs()[2].node, 1);
}

#[test]
fn cpu_in_two_nodes() {
    let msg = assert_invalid(
        &replaced("cpus = \"4-7\"", "cpus = \"3-7\""),
        InvalidKind::CpuInTwoNodes,
        "node[1].cpus",
    );
    assert!(msg.contains("CPU 3") && msg.contains("node[0]"), "{msg}");
}

#[test]
fn cpu_in_two_llcs() {
    let msg = assert_invalid(
        &replaced("cpus = \"2-3\"", "cpus = \"1-3\""),
        InvalidKind::CpuInTwoLlcs,
        "llc[1].cpus",
    );
    assert!(msg.contains("CPU 1") && msg.contains("llc[0]"), "{msg}");
}

#[test]
fn cpu_in_no_llc() {
    let msg = assert_invalid(
        &replaced("cpus = \"6-7\"", "cpus = \"6\""),
        InvalidKind::CpuInNoLlc,
        "llc",
    );
    assert!(msg.contains("CPUs 7 "), "{msg}");
}

#[test]
fn llc_with_unknown_cpu() {
    assert_invalid(
        &replaced("cpus = \"6-7\"", "cpus = \"6-8\""),
        InvalidKind::LlcUnknownCpu,
        "llc[3].cpus",
    );
}

#[test]
fn llc_spanning_nodes() {
    let text =
        replaced("cpus = \"2-3\"", "cpus = \"2-5\"").replacen("[[llc]]\ncpus = \"4-5\"\n", "", 1);
    let msg = assert_invalid(&text, InvalidKind::LlcSpansNodes, "llc[1].cpus");
    assert!(msg.contains("node[0]") && msg.contains("node[1]"), "{msg}");
}

#[test]
fn default_llc_spanning_nodes_names_the_socket() {
    let text = r#"
name = "t"
[[node]]
cpus = "0-1"
memory = "1G"
[[node]]
cpus = "2-3"
memory = "1G"
"#;
    let msg = assert_invalid(
        text,
        InvalidKind::LlcSpansNodes,
        "llc (none declared, so socket 0 = CPUs 0-3 is one LLC)",
    );
    assert!(msg.contains("spans nodes"), "{msg}");
}

#[test]
fn llc_spanning_sockets() {
    let text = r#"
name = "t"
sockets = 2
[[node]]
cpus = "0-7"
memory = "2G"
[[llc]]
cpus = "0-1"
[[llc]]
cpus = "2-5"
[[llc]]
cpus = "6-7"
"#;
    let msg = assert_invalid(text, InvalidKind::LlcSpansSockets, "llc[1].cpus");
    assert!(msg.contains("sockets 0 (0-3) and 1 (4-7)"), "{msg}");
}

#[test]
fn smt_siblings_split_across_llcs() {
    let text = replaced("threads_per_core = 1", "threads_per_core = 2")
        .replacen("cpus = \"0-1\"", "cpus = \"0-2\"", 1)
        .replacen("cpus = \"2-3\"", "cpus = \"3\"", 1);
    let msg = assert_invalid(&text, InvalidKind::SmtSplit, "llc[0].cpus");
    assert!(
        msg.contains("SMT siblings 2-3") && msg.contains("llc[1]"),
        "{msg}"
    );
}

#[test]
fn node_without_memory() {
    let msg = assert_invalid(
        &replaced("cpus = \"4-7\"\nmemory = \"2G\"", "cpus = \"4-7\""),
        InvalidKind::NodeWithoutMemory,
        "node[1].memory",
    );
    assert!(msg.contains("missing"), "{msg}");
}

#[test]
fn node_with_zero_memory() {
    assert_invalid(
        &replaced(
            "cpus = \"4-7\"\nmemory = \"2G\"",
            "cpus = \"4-7\"\nmemory = \"0M\"",
        ),
        InvalidKind::NodeWithoutMemory,
        "node[1].memory",
    );
}

#[test]
fn bad_memory_size() {
    let msg = assert_invalid(
        &replaced("memory = \"2G\"", "memory = \"2 gigs\""),
        InvalidKind::MemorySize,
        "node[0].memory",
    );
    assert!(msg.contains("2 gigs"), "{msg}");
    assert_invalid(
        &replaced("memory = \"2G\"", "memory = \"1000\""),
        InvalidKind::MemorySize,
        "node[0].memory",
    );
}

#[test]
fn distance_matrix_wrong_row_count() {
    let msg = assert_invalid(
        &replaced("distances = [[10, 20], [20, 10]]", "distances = [[10, 20]]"),
        InvalidKind::DistanceShape,
        "distances",
    );
    assert!(msg.contains("1 rows but there are 2 nodes"), "{msg}");
}

#[test]
fn distance_matrix_not_square() {
    assert_invalid(
        &replaced(
            "distances = [[10, 20], [20, 10]]",
            "distances = [[10, 20], [20, 10, 30]]",
        ),
        InvalidKind::DistanceShape,
        "distances[1]",
    );
}

#[test]
fn distance_matrix_not_symmetric() {
    let msg = assert_invalid(
        &replaced(
            "distances = [[10, 20], [20, 10]]",
            "distances = [[10, 20], [30, 10]]",
        ),
        InvalidKind::DistanceAsymmetric,
        "distances[0][1]",
    );
    assert!(msg.contains("distances[1][0] is 30"), "{msg}");
}

#[test]
fn distance_diagonal_not_10() {
    assert_invalid(
        &replaced(
            "distances = [[10, 20], [20, 10]]",
            "distances = [[10, 20], [20, 11]]",
        ),
        InvalidKind::DistanceDiagonal,
        "distances[1][1]",
    );
}

#[test]
fn distance_out_of_range() {
    assert_invalid(
        &replaced(
            "distances = [[10, 20], [20, 10]]",
            "distances = [[10, 10], [10, 10]]",
        ),
        InvalidKind::DistanceRange,
        "distances[0][1]",
    );
    assert_invalid(
        &replaced(
            "distances = [[10, 20], [20, 10]]",
            "distances = [[10, -3], [-3, 10]]",
        ),
        InvalidKind::DistanceRange,
        "distances[0][1]",
    );
}

#[test]
fn cpu_ids_with_gaps() {
    let text = replaced("cpus = \"4-7\"", "cpus = \"5-8\"")
        .replacen("cpus = \"4-5\"", "cpus = \"5-6\"", 1)
        .replacen("cpus = \"6-7\"", "cpus = \"7-8\"", 1);
    let msg = assert_invalid(&text, InvalidKind::CpuIdGap, "node[1].cpus");
    assert!(
        msg.contains("0-8 without gaps, but 4 is in no node"),
        "{msg}"
    );
}

#[test]
fn unknown_key_keeps_line_and_column() {
    let text = replaced("sockets = 1", "sockets = 1\nsmt = true");
    let err = parse(&text).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TopologyError::Syntax { .. }), "{msg}");
    assert!(msg.starts_with(FILE), "{msg}");
    assert!(msg.contains("smt") && msg.contains("line 5"), "{msg}");
}

#[test]
fn top_level_key_after_a_table_gets_a_hint() {
    let text = format!("{BASE}distances = [[10, 20], [20, 10]]\n");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(
        msg.contains("distances") && msg.contains("before the first [[node]]"),
        "{msg}"
    );
}

#[test]
fn unknown_key_in_node() {
    let text = replaced("memory = \"2G\"", "memory = \"2G\"\nmem = \"1G\"");
    let msg = parse(&text).unwrap_err().to_string();
    assert!(msg.contains("mem") && msg.contains("line 10"), "{msg}");
}

#[test]
fn bad_cpulist_syntax() {
    let msg = assert_invalid(
        &replaced("cpus = \"4-7\"", "cpus = \"4-7,\""),
        InvalidKind::CpuList,
        "node[1].cpus",
    );
    assert!(msg.contains("empty entry"), "{msg}");
    assert_invalid(
        &replaced("cpus = \"2-3\"", "cpus = \"3-2\""),
        InvalidKind::CpuList,
        "llc[1].cpus",
    );
    assert_invalid(
        &replaced("cpus = \"2-3\"", "cpus = \"two\""),
        InvalidKind::CpuList,
        "llc[1].cpus",
    );
}

#[test]
fn llc_not_contiguous() {
    let text = replaced("cpus = \"0-1\"", "cpus = \"0,2\"").replacen(
        "cpus = \"2-3\"",
        "cpus = \"1,3\"",
        1,
    );
    let msg = assert_invalid(&text, InvalidKind::LlcNotContiguous, "llc[0].cpus");
    assert!(msg.contains("0,2") && msg.contains("QEMU socket"), "{msg}");
}

#[test]
fn unequal_llcs_with_llc_as_socket() {
    let text =
        replaced("cpus = \"0-1\"", "cpus = \"0-2\"").replacen("cpus = \"2-3\"", "cpus = \"3\"", 1);
    let msg = assert_invalid(&text, InvalidKind::LlcSizesDiffer, "llc[1].cpus");
    assert!(msg.contains("-smp"), "{msg}");
}

#[test]
fn pin_to_unknown_vcpu() {
    let text = format!("{BASE}[[pin]]\nvcpus = \"6-8\"\nhost = \"0-2\"\n");
    let msg = assert_invalid(&text, InvalidKind::PinUnknownVcpu, "pin[0].vcpus");
    assert!(msg.contains("vCPU 8"), "{msg}");
}

#[test]
fn pin_twice_and_length_mismatch() {
    let text = format!(
        "{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"4-5\"\n[[pin]]\nvcpus = \"1\"\nhost = \"6\"\n"
    );
    assert_invalid(&text, InvalidKind::PinTwice, "pin[1].vcpus");
    let text = format!("{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"4\"\n");
    assert_invalid(&text, InvalidKind::PinLength, "pin[0].host");
}

#[test]
fn pin_host_cpus_must_fit_the_affinity_set_and_be_used_once() {
    let text = format!("{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"1023-1024\"\n");
    let msg = assert_invalid(&text, InvalidKind::PinHostRange, "pin[0].host");
    assert!(msg.contains("host CPU 1024"), "{msg}");
    let text = format!(
        "{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"4-5\"\n[[pin]]\nvcpus = \"2\"\nhost = \"5\"\n"
    );
    let msg = assert_invalid(&text, InvalidKind::PinHostTwice, "pin[1].host");
    assert!(
        msg.contains("host CPU 5") && msg.contains("pin[0]"),
        "{msg}"
    );
}

#[test]
fn pins_are_checked_against_the_host_before_boot() {
    let text = format!("{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"2-3\"\n");
    let t = parse(&text).unwrap();
    assert!(t.check_pins_against("0-3\n").is_ok());
    let err = t.check_pins_against("0-2").unwrap_err();
    assert!(
        err.starts_with(FILE)
            && err.contains("pin[0].host")
            && err.contains("vCPU 1 on host CPU 3")
            && err.contains("online: 0-2"),
        "{err}"
    );
    assert!(parse(BASE).unwrap().check_pins_against("0").is_ok());
}

#[test]
fn host_node_is_bounded_and_binds_the_node_memory() {
    let text = replaced(
        "memory = \"2G\"\n[[node]]",
        "memory = \"2G\"\nhost_node = 128\n[[node]]",
    );
    let msg = assert_invalid(&text, InvalidKind::HostNode, "node[0].host_node");
    assert!(msg.contains("0-127"), "{msg}");
    let text = replaced(
        "memory = \"2G\"\n[[node]]",
        "memory = \"2G\"\nhost_node = 3\n[[node]]",
    );
    let t = parse(&text).unwrap();
    assert_eq!(t.nodes()[0].host_node, Some(3));
    assert_eq!(t.nodes()[1].host_node, None);
    let args = t.qemu_args().args;
    assert_eq!(
        args[5],
        "memory-backend-memfd,id=ram0,size=2048M,share=on,host-nodes=3,policy=bind"
    );
    assert_eq!(args[7], "memory-backend-memfd,id=ram1,size=2048M,share=on");
}

#[test]
fn pinning_is_one_to_one() {
    let text = format!(
        "{BASE}[[pin]]\nvcpus = \"0-1\"\nhost = \"10-11\"\n[[pin]]\nvcpus = \"7\"\nhost = \"3\"\n"
    );
    let t = parse(&text).unwrap();
    let pins: Vec<(u32, u32)> = t.pinning().iter().map(|(a, b)| (*a, *b)).collect();
    assert_eq!(pins, vec![(0, 10), (1, 11), (7, 3)]);
}

#[test]
fn sockets_must_divide_cpus() {
    assert_invalid(
        &replaced("sockets = 1", "sockets = 3"),
        InvalidKind::Sockets,
        "sockets",
    );
}

#[test]
fn threads_must_divide_socket() {
    let text = replaced("threads_per_core = 1", "threads_per_core = 3");
    assert_invalid(&text, InvalidKind::ThreadsPerCore, "threads_per_core");
}

#[test]
fn no_nodes() {
    assert_invalid("name = \"t\"\n", InvalidKind::NoNodes, "node");
}

#[test]
fn bad_name_and_cpu_model() {
    assert_invalid(
        &replaced("name = \"t\"", "name = \"../x\""),
        InvalidKind::Name,
        "name",
    );
    assert_invalid(
        &replaced("cpu_model = \"qemu64\"", "cpu_model = \"\""),
        InvalidKind::CpuModel,
        "cpu_model",
    );
}

#[test]
fn load_checks_name_against_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.toml");
    std::fs::write(&path, BASE).unwrap();
    let err = Topology::load(&path).unwrap_err();
    assert_eq!(err.kind(), Some(InvalidKind::NameMismatch), "{err}");
    assert!(
        err.to_string().contains("other.toml") && err.to_string().contains(": name: "),
        "{err}"
    );
    let good = dir.path().join("t.toml");
    std::fs::write(&good, BASE).unwrap();
    assert_eq!(Topology::load(&good).unwrap().file(), good.as_path());
    let missing = Topology::load(dir.path().join("nope.toml")).unwrap_err();
    assert!(missing.to_string().contains("nope.toml"), "{missing}");
}

#[test]
fn by_name_rejects_unknown_and_path_like_names() {
    for name in ["no-such-topology", "../lab/Cargo", ""] {
        let err = Topology::find(name).unwrap_err();
        assert!(
            matches!(err, TopologyError::NotFound { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(TOPOLOGIES_DIR_ENV), "{err}");
    }
}

// --- cpulists -----------------------------------------------------------------------------

#[test]
fn cpulist_round_trip() {
    assert_eq!(parse_cpulist("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
    assert_eq!(parse_cpulist(" 8,0-1\n").unwrap(), vec![0, 1, 8]);
    assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
    assert_eq!(format_cpulist(&[8, 0, 1, 2, 3]), "0-3,8");
    assert_eq!(
        format_cpulist(&[0, 1]),
        "0-1",
        "the kernel prints a run of two as a range"
    );
    assert_eq!(format_cpulist(&[0, 2, 4, 5]), "0,2,4-5");
    assert_eq!(format_cpulist(&[]), "");
    for s in ["0", "0-31", "1,3,5-6,9-15"] {
        assert_eq!(format_cpulist(&parse_cpulist(s).unwrap()), s);
    }
}

#[test]
fn cpulist_errors() {
    assert!(matches!(
        parse_cpulist("0,,1"),
        Err(CpuListError::EmptyEntry { .. })
    ));
    assert!(matches!(
        parse_cpulist("a"),
        Err(CpuListError::NotACpu { .. })
    ));
    assert!(matches!(
        parse_cpulist("+1"),
        Err(CpuListError::NotACpu { .. })
    ));
    assert!(matches!(
        parse_cpulist("1-"),
        Err(CpuListError::NotACpu { .. })
    ));
    assert!(matches!(
        parse_cpulist("3-1"),
        Err(CpuListError::Backwards { .. })
    ));
    assert!(matches!(
        parse_cpulist("0-3,2"),
        Err(CpuListError::Duplicate { cpu: 2, .. })
    ));
    assert!(matches!(
        parse_cpulist("0-4000000000"),
        Err(CpuListError::TooLarge { .. })
    ));
    assert!(matches!(
        parse_cpulist("99999999999"),
        Err(CpuListError::TooLarge { .. })
    ));
}

#[test]
fn sizes() {
    assert_eq!(parse_size("2G"), Ok(2 << 30));
    assert_eq!(parse_size("512MiB"), Ok(512 << 20));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("G").is_err());
    assert!(parse_size("-1G").is_err());
    assert!(parse_size("99999999999T").is_err());
    assert_eq!(format_size(2 << 30), "2 GiB");
    assert_eq!(format_size(1536 << 20), "1536 MiB");
}

// --- QEMU mapping and guest view ------------------------------------------------------------

#[test]
fn llc_as_socket_args() {
    let t = parse(BASE).unwrap();
    let q = t.qemu_args();
    assert_eq!(q.mapping, Mapping::LlcAsSocket);
    assert_eq!(
        q.args,
        [
            "-smp",
            "8,sockets=4,dies=1,cores=2,threads=1",
            "-m",
            "4096M",
            "-object",
            "memory-backend-memfd,id=ram0,size=2048M,share=on",
            "-object",
            "memory-backend-memfd,id=ram1,size=2048M,share=on",
            "-numa",
            "node,nodeid=0,memdev=ram0,cpus=0-3",
            "-numa",
            "node,nodeid=1,memdev=ram1,cpus=4-7",
            "-numa",
            "dist,src=0,dst=1,val=20",
            "-cpu",
            "qemu64",
        ]
    );
    assert!(
        t.describe().starts_with("LLC-as-socket"),
        "{}",
        t.describe()
    );
    assert!(t.describe().contains("holds 4 LLCs"), "{}", t.describe());
}

#[test]
fn sockets_mapping_with_smt_and_split_node() {
    // 2 sockets x 2 cores x 2 threads, no [[llc]]: one LLC per socket, one node per socket.
    let text = r#"
name = "s"
cpu_model = "Skylake-Server-v4"
sockets = 2
threads_per_core = 2
distances = [[10, 21], [21, 10]]
[[node]]
cpus = "0-3"
memory = "1G"
[[node]]
cpus = "4-7"
memory = "1536M"
"#;
    let t = parse(text).unwrap();
    let q = t.qemu_args();
    assert_eq!(q.mapping, Mapping::Sockets);
    assert_eq!(q.args[1], "8,sockets=2,dies=1,cores=2,threads=2");
    assert_eq!(q.args[3], "2560M");
    assert!(q.args.contains(&"dist,src=0,dst=1,val=21".to_string()));
    assert!(t.describe().starts_with("sockets 1:1"), "{}", t.describe());
    let v = t.guest_view();
    assert_eq!(v.cpus[5].llc_cpus, "4-7");
    assert_eq!(v.cpus[5].thread_siblings, "4-5");
    assert_eq!(v.cpus[5].package_cpus, "4-7");
    assert_eq!(v.cpus[5].node, 1);
    assert_eq!(v.nodes[1].memory_bytes, 1536 << 20);
    assert_eq!(v.nodes[1].distances, vec![21, 10]);
}

#[test]
fn non_contiguous_node_uses_repeated_cpus() {
    let text = r#"
name = "nc"
[[node]]
cpus = "0-1,4-5"
memory = "1G"
[[node]]
cpus = "2-3,6-7"
memory = "1G"
[[llc]]
cpus = "0-1"
[[llc]]
cpus = "2-3"
[[llc]]
cpus = "4-5"
[[llc]]
cpus = "6-7"
"#;
    let t = parse(text).unwrap();
    let args = t.qemu_args().args;
    assert!(
        args.contains(&"node,nodeid=0,memdev=ram0,cpus=0-1,cpus=4-5".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"dist,src=0,dst=1,val=20".to_string()),
        "default distance: {args:?}"
    );
    let v = t.guest_view();
    assert_eq!(v.nodes[1].cpus, "2-3,6-7");
    assert_eq!(v.cpus[6].llc_cpus, "6-7");
    assert_eq!(v.cpus[6].package_cpus, "6-7");
    assert_eq!(v.cpus[6].node, 1);
}

#[test]
fn guest_view_of_base() {
    let v = parse(BASE).unwrap().guest_view();
    assert_eq!(v.cpus.len(), 8);
    let llcs: Vec<&str> = v.cpus.iter().map(|c| c.llc_cpus.as_str()).collect();
    assert_eq!(
        llcs,
        ["0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"]
    );
    assert!(v
        .cpus
        .iter()
        .all(|c| c.thread_siblings == c.cpu.to_string()));
    assert_eq!(v.nodes[0].cpus, "0-3");
    assert_eq!(v.nodes[0].memory_bytes, 2 << 30);
    assert_eq!(v.nodes[0].distances, vec![10, 20]);
    // Measured: node 0 of 2 GiB reported 2096628 kB present (BIOS holes), node 1 all of it.
    assert!(v.nodes[0].present_matches(2096628 * 1024));
    assert!(v.nodes[1].present_matches(2 << 30));
    assert!(!v.nodes[1].present_matches((2 << 30) - (2 << 20)));
    assert!(!v.nodes[1].present_matches((2 << 30) + 4096));
}

#[test]
fn render_table_shows_the_shape() {
    let table = parse(BASE).unwrap().render_table();
    for needle in [
        "qemu64",
        "4 GiB",
        "0-3",
        "10 20",
        "6-7",
        "none (1 thread per core)",
        "llc-as-socket",
        "-smp",
    ] {
        assert!(table.contains(needle), "{needle:?} missing from:\n{table}");
    }
}

// --- shipped files ----------------------------------------------------------------------------

fn shipped_dir() -> PathBuf {
    crate::repo_path("topologies")
}

#[test]
fn every_shipped_topology_is_valid() {
    let names = Topology::list_in(&shipped_dir()).unwrap();
    for required in [
        "ci-2node-4llc",
        "ci-smt",
        "xeon-gold-6132-2s",
        "xeon-bronze-3204",
        "epyc-7313-nps1",
        "epyc-7313-nps4",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "{required} missing from {names:?}"
        );
    }
    for name in &names {
        let t = Topology::load(shipped_dir().join(format!("{name}.toml")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!t.description().is_empty(), "{name} has no description");
        // The guest's reserved memory must stay within 5% of the node size; a hugepage-backed
        // shape is small, as a host must reserve all of it, and boots the default image only.
        let least = if t.hugepage_bytes().is_some() {
            256 << 20
        } else {
            1 << 30
        };
        assert!(
            t.nodes().iter().all(|n| n.memory_bytes >= least),
            "{name}: node below {}",
            format_size(least)
        );
    }
}

#[test]
fn shipped_shapes() {
    let load = |n: &str| Topology::load(shipped_dir().join(format!("{n}.toml"))).unwrap();
    let ci = load("ci-2node-4llc");
    assert_eq!((ci.nr_cpus(), ci.nodes().len(), ci.llcs().len()), (8, 2, 4));
    assert_eq!(
        ci.qemu_args().args[1],
        "8,sockets=4,dies=1,cores=2,threads=1"
    );

    let nps1 = load("epyc-7313-nps1");
    assert_eq!(
        (nps1.nr_cpus(), nps1.nodes().len(), nps1.llcs().len()),
        (32, 1, 4)
    );
    assert_eq!(
        nps1.qemu_args().args[1],
        "32,sockets=4,dies=1,cores=4,threads=2"
    );
    let nps4 = load("epyc-7313-nps4");
    assert_eq!(
        (nps4.nr_cpus(), nps4.nodes().len(), nps4.llcs().len()),
        (32, 4, 4)
    );
    assert_eq!(
        nps4.qemu_args().args[1],
        "32,sockets=4,dies=1,cores=4,threads=2"
    );

    let gold = load("xeon-gold-6132-2s");
    assert_eq!(gold.mapping(), Mapping::Sockets);
    assert_eq!(
        gold.qemu_args().args[1],
        "56,sockets=2,dies=1,cores=14,threads=2"
    );
    let bronze = load("xeon-bronze-3204");
    assert_eq!(bronze.threads_per_core(), 1);
    assert_eq!(bronze.cpus_per_socket(), 6);
}

#[test]
fn hugepages_are_a_hugepage_size_dividing_every_node() {
    let with = |line: &str| format!("hugepages = {line}\n{BASE}");
    let msg = assert_invalid(&with("\"4M\""), InvalidKind::Hugepages, "hugepages");
    assert!(msg.contains("\"2M\" or \"1G\""), "{msg}");
    assert_invalid(&with("\"two\""), InvalidKind::Hugepages, "hugepages");
    let text = with("\"1G\"").replacen("memory = \"2G\"", "memory = \"1536M\"", 1);
    let msg = assert_invalid(&text, InvalidKind::Hugepages, "node[0].memory");
    assert!(
        msg.contains("1536 MiB is not a whole number of the 1 GiB hugepages"),
        "{msg}"
    );

    let t = parse(&with("\"2M\"")).unwrap();
    assert_eq!(t.hugepage_bytes(), Some(2 << 20));
    assert!(t.needs_host());
    let args = t.qemu_args().args;
    assert_eq!(
        args[5],
        "memory-backend-memfd,id=ram0,size=2048M,share=on,hugetlb=on,hugetlbsize=2097152"
    );
    assert_eq!(parse(BASE).unwrap().hugepage_bytes(), None);
}

#[test]
fn quick_shapes_need_no_file() {
    let t = Topology::quick(4, "1G", 2).unwrap();
    assert_eq!(t.name(), "quick-4cpu-1g-2node");
    assert_eq!(t.nr_cpus(), 4);
    let nodes: Vec<(Vec<u32>, u64)> = t
        .nodes()
        .iter()
        .map(|n| (n.cpus.clone(), n.memory_bytes))
        .collect();
    assert_eq!(
        nodes,
        vec![(vec![0, 1], 512 << 20), (vec![2, 3], 512 << 20)]
    );
    assert_eq!(t.distances().to_vec(), vec![vec![10, 20], vec![20, 10]]);
    // One LLC per node, one node by default.
    assert_eq!(t.llcs().len(), 2);
    let one = Topology::quick(2, "512M", 1).unwrap();
    assert_eq!((one.nr_cpus(), one.nodes().len()), (2, 1));
    // Bad shapes name the flag, before anything boots.
    let err = Topology::quick(3, "1G", 2).unwrap_err().to_string();
    assert!(err.contains("--cpus") && err.contains("3 CPUs"), "{err}");
    let err = Topology::quick(2, "lots", 1).unwrap_err().to_string();
    assert!(err.contains("--memory"), "{err}");
    let err = Topology::quick(2, "1M", 2).unwrap_err().to_string();
    assert!(err.contains("whole MiB"), "{err}");
    assert!(Topology::quick(0, "1G", 1).is_err());
}
