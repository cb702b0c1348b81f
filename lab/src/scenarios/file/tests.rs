use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::experiment::{apply_overrides, Experiment};
use crate::observe::TaskPlacement;
use crate::report::Direction;
use crate::stats::Magnitude;

fn s1_path() -> std::path::PathBuf {
    crate::repo_path("scenarios/dma-wakeup.toml")
}

fn s1() -> ScenarioFile {
    ScenarioFile::read(&s1_path()).unwrap()
}

fn ci() -> Topology {
    Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
}

/// A boot that observed nothing; a test sets what its metrics read (`..nothing_seen()`).
pub(super) fn nothing_seen() -> metrics::Observed<'static> {
    static VMSTAT: BTreeMap<String, i64> = BTreeMap::new();
    static COUNTS: BTreeMap<String, u64> = BTreeMap::new();
    static VECTOR_COUNTS: BTreeMap<metrics::Vectors, Vec<u64>> = BTreeMap::new();
    static VECTOR_TARGETS: BTreeMap<metrics::Vectors, BTreeMap<u32, Vec<u32>>> = BTreeMap::new();
    static ALLOWED: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    metrics::Observed {
        placement: None,
        attribution: None,
        crossings: None,
        usage: None,
        vmstat: &VMSTAT,
        vmstat_from: &[],
        counts: &COUNTS,
        irq_delta: &[],
        vector_counts: &VECTOR_COUNTS,
        vector_targets: &VECTOR_TARGETS,
        dmatest: None,
        output: "",
        output_json: None,
        wakeups: None,
        allowed: &ALLOWED,
    }
}

/// The S1 file with `old` replaced by `new`, parsed: the error's text.
fn error_of(old: &str, new: &str) -> String {
    let text = std::fs::read_to_string(s1_path()).unwrap();
    assert!(text.contains(old), "{old:?} is not in the S1 file");
    let text = text.replacen(old, new, 1);
    format!(
        "{:#}",
        ScenarioFile::parse(&text, Path::new("s1.toml")).unwrap_err()
    )
}

/// The line of the S1 file holding `needle`, after replacing `old` with `new`.
fn line_with(old: &str, new: &str, needle: &str) -> usize {
    let text = std::fs::read_to_string(s1_path())
        .unwrap()
        .replacen(old, new, 1);
    text.lines().position(|l| l.contains(needle)).unwrap() + 1
}

/// What S1's Rust definition recorded and planned before the file replaced it (2026-12-08): every
/// figure with its unit, direction and magnitude, the decision, the engine's pinning and the
/// seed's dmatest run.
fn s1_as_it_was_in_rust() -> Vec<MetricDef> {
    let pct = |name| MetricDef::share(name, 5.0);
    let per_100 = |name, direction| {
        MetricDef::new(name, "per 100 completions", direction, 2.0).non_negative()
    };
    vec![
        MetricDef::share("share_on_irq_cpu", 20.0).primary(),
        MetricDef::share("runtime_on_irq_cpu", 20.0).optional(),
        pct("share_in_irq_llc"),
        pct("share_in_start_llc"),
        pct("share_on_irq_node"),
        pct("max_cpu_share"),
        per_100("cross_llc_migrations", Direction::LowerIsBetter),
        per_100("balancer_migrations", Direction::Neutral),
        pct("wakeups_on_irq_cpu").optional(),
        pct("pulled_across_llc").optional(),
        MetricDef::share("irq_on_pinned_cpu", 1.0).optional(),
        MetricDef::new("iops", "iops", Direction::HigherIsBetter, 0.0).non_negative(),
    ]
}

#[test]
fn the_s1_file_plans_what_its_rust_definition_planned() {
    let file = ScenarioFile::shipped("dma-wakeup").unwrap();
    let revert = "v6.12+wake-affine-idle-revert";
    assert_eq!(
        file.default_variants(),
        [Variant::kernel("v6.12"), Variant::kernel(revert)]
    );
    assert_eq!(Scenario::topology(&file), "ci-2node-4llc");
    let file_metrics = file.metrics();
    let primaries: Vec<&MetricDef> = file_metrics.iter().filter(|m| m.primary).collect();
    let rust = s1_as_it_was_in_rust();
    assert_eq!(
        primaries,
        [&rust[0]],
        "the same decision, magnitude and range"
    );
    for m in &rust {
        let f = file_metrics
            .iter()
            .find(|f| f.name == m.name)
            .unwrap_or_else(|| panic!("the S1 file lacks {}", m.name));
        assert_eq!(
            (&f.unit, f.direction, f.magnitude, f.optional),
            (&m.unit, m.direction, m.magnitude, m.optional),
            "{}",
            m.name
        );
    }
    let t = ci();
    assert_eq!(
        file.plan(file.params(), &t).unwrap().devices,
        [DeviceSpec::ioat(1).irq_on_cpus(0, &[2])]
    );
    assert_eq!(
        file.params()["dmatest"],
        serde_json::to_value(crate::workload::Dmatest::seed_parameters()).unwrap()
    );
    // Every variant of the experiment planned, as `lab compare` does before building.
    assert_eq!(Experiment::new(file).plan().unwrap().len(), 2);
}

/// A host's passthrough engine stands in for the emulated one: everything but the device is
/// the file's, and a device of another kind, index or name is refused.
#[test]
fn a_passthrough_device_stands_in_for_the_s1_files_engine() {
    use crate::devices::Passthrough;
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("xeon.toml");
    std::fs::write(
        &host,
        "[devices.ioat0]\nbdf = \"0000:00:04.0\"\nid = \"8086:2021\"\nstands_in = \"ioatdma\"\n\n\
         [devices.disk]\nbdf = \"0000:41:00.0\"\nid = \"144d:a808\"\nstands_in = \"nvme\"\n",
    )
    .unwrap();
    let host = host.to_str().unwrap();
    let emulated = Experiment::new(s1()).plan().unwrap();
    let passed = Experiment::new(s1())
        .device(0, "passthrough:ioat0".parse().unwrap())
        .host(host)
        .plan()
        .unwrap();
    assert_eq!(passed.len(), 2);
    for ((variant, params, plan), (v0, p0, plan0)) in passed.iter().zip(&emulated) {
        assert_eq!((variant, params), (v0, p0));
        assert_eq!(plan.cmdline, plan0.cmdline);
        let device = &plan.devices[0];
        let p = device
            .as_device::<Passthrough>()
            .unwrap_or_else(|| panic!("{device:?}"));
        assert_eq!(p.host.as_ref().unwrap().bdf.as_str(), "0000:00:04.0");
        assert_eq!(
            device.irq_cpus, plan0.devices[0].irq_cpus,
            "the IRQ stays on CPU 2"
        );
        assert_eq!(device.guest_driver().driver, "ioatdma");
    }
    let err = |device: usize, name: &str| {
        let e =
            Experiment::new(s1()).device(device, format!("passthrough:{name}").parse().unwrap());
        format!("{:#}", e.host(host).plan().unwrap_err())
    };
    let e = err(0, "disk");
    assert!(e.contains("plans a dma-engine"), "{e}");
    let e = err(1, "ioat0");
    assert!(e.contains("device 1 replaces nothing"), "{e}");
    let e = err(0, "ioat9");
    assert!(e.contains("xeon.toml has no device \"ioat9\""), "{e}");
}

#[test]
fn set_moves_the_interrupt_and_changes_engine_and_dmatest() {
    let file = s1();
    let t = ci();
    for (placement, cpu) in [("same-llc", 1), ("cross-llc", 2), ("remote-node", 4)] {
        let set = BTreeMap::from([("placement".to_string(), placement.to_string())]);
        let params = apply_overrides(file.params(), &set).unwrap();
        let plan = file.plan(&params, &t).unwrap();
        assert_eq!(plan.devices[0].irq_cpus, [Some(vec![cpu])], "{placement}");
    }
    let set = BTreeMap::from([("engine".to_string(), "ptdma".to_string())]);
    let plan = file
        .plan(&apply_overrides(file.params(), &set).unwrap(), &t)
        .unwrap();
    assert_eq!(plan.devices, [DeviceSpec::ptdma().irq_on_cpus(0, &[2])]);
    let set = BTreeMap::from([("dmatest.polled".to_string(), "true".to_string())]);
    let params = apply_overrides(file.params(), &set).unwrap();
    assert!(file.dmatest(&params).unwrap().polled);
}

#[test]
fn the_shell_sees_parameters_and_cpus_as_variables() {
    let file = s1();
    let found = file.named_cpus(file.params(), &ci()).unwrap();
    let names = Names {
        params: file.params().as_object().unwrap(),
        cpus: &found,
    };
    let vars: BTreeMap<String, String> = file.shell_variables(&names).into_iter().collect();
    assert_eq!(vars["irq"], "2");
    assert_eq!(vars["control"], "7");
    assert_eq!(vars["placement"], "cross-llc");
    assert!(!vars.contains_key("dmatest"), "a table is not a variable");
}

#[test]
fn metrics_read_a_recorded_s1_boot_as_the_toolkit_does() {
    let file = s1();
    let t = ci();
    let events = crate::observe::parse_trace(include_str!("../../observe/fixtures/s1-v6.12.trace"));
    let placement = TaskPlacement::from_events("dma0chan0-copy", &events, &t);
    let attribution = crate::observe::Attribution::of(
        &crate::observe::task_wakeups("dma0chan0-copy", &events),
        &t,
    );
    let found = file.named_cpus(file.params(), &t).unwrap();
    let names = Names {
        params: file.params().as_object().unwrap(),
        cpus: &found,
    };
    let irq_delta = [0, 0, 30, 0, 0, 0, 0, 0];
    let crossings = crate::observe::CrossLlcWakeups::fold(
        &crate::observe::task_wakeups("dma0chan0-copy", &events),
        &t,
    );
    let seen = metrics::Observed {
        placement: Some(&placement),
        attribution: Some(&attribution),
        crossings: Some(&crossings),
        irq_delta: &irq_delta,
        ..nothing_seen()
    };
    let value = |name: &str| {
        let m = file.metrics.iter().find(|m| m.def.name == name).unwrap();
        m.value(&seen, &names, &t).unwrap()
    };
    assert_eq!(value("share_on_irq_cpu"), placement.share_on(&[2]));
    assert_eq!(value("share_in_irq_llc"), placement.share_on(&[2, 3]));
    assert_eq!(
        value("runtime_on_irq_cpu"),
        placement.runtime_share_on(&[2])
    );
    assert_eq!(value("irq_on_pinned_cpu"), Some(100.0));
    assert_eq!(
        value("cross_llc_migrations"),
        Some(placement.cross_llc_migrations as f64)
    );
    let other = attribution.landed_anywhere(crate::observe::Landing::OtherLlc);
    assert_eq!(
        value("woken_into_other_llc"),
        Some(100.0 * other as f64 / attribution.total() as f64)
    );
    let err = file
        .metrics
        .iter()
        .find(|m| m.def.name == "iops")
        .unwrap()
        .value(&seen, &names, &t);
    assert!(err.unwrap_err().contains("not dmatest"));
}

#[test]
fn an_output_metric_takes_its_first_group() {
    let text = "name = \"x\"\ndescription = \"d\"\nvariants = [\"v6.12\", \"v6.12+wake-affine-idle-revert\"]\n\
                [command]\nrun = \"echo took 12.5 ms\"\n\
                [[metric]]\nname = \"took\"\noutput = 'took ([0-9.]+) ms'\nprimary = true\nmagnitude = \"20%\"\n";
    let file = ScenarioFile::parse(text, Path::new("x.toml")).unwrap();
    let m = &file.metrics[0];
    assert_eq!(m.def.magnitude, crate::stats::Magnitude::relative(0.2));
    let names = Names {
        params: &serde_json::Map::new(),
        cpus: &BTreeMap::new(),
    };
    let seen = |output| metrics::Observed {
        output,
        ..nothing_seen()
    };
    assert_eq!(
        m.value(&seen("took 12.5 ms\n"), &names, &ci()),
        Ok(Some(12.5))
    );
    assert_eq!(m.value(&seen("nothing"), &names, &ci()), Ok(None));
}

#[test]
fn a_wrong_field_names_its_line() {
    let line = line_with("settle_s = 3", "settle = 3", "settle = 3");
    let err = error_of("settle_s = 3", "settle = 3");
    assert!(
        err.starts_with(&format!("s1.toml: line {line}: unknown field `settle`")),
        "{err}"
    );
    assert!(err.contains("settle_s"), "the fields it could be: {err}");
}

#[test]
fn an_unknown_metric_source_or_figure_is_refused_with_its_line() {
    let old = "placement = \"cross_llc_migrations\"";
    let err = error_of(old, "placement = \"jumps\"");
    let line = line_with(old, old, "cross_llc_migrations = {");
    assert!(
        err.contains(&format!(
            "line {line}: metric \"cross_llc_migrations\": placement: \"jumps\" is not one of"
        )),
        "{err}"
    );
    let err = error_of("workload = \"iops\", ", "");
    assert!(err.contains("metric \"iops\": source: no source"), "{err}");
    let err = error_of(
        "workload = \"iops\"",
        "workload = \"iops\", runtime_on = \"irq\"",
    );
    assert!(
        err.contains("one source, not runtime_on and workload"),
        "{err}"
    );
    let err = error_of("workload = \"iops\"", "output = 'iops ('");
    assert!(
        err.contains("metric \"iops\": output: regex parse error"),
        "{err}"
    );
    let err = error_of("workload = \"iops\"", "output = 'iops [0-9]+'");
    assert!(err.contains("no group"), "{err}");
}

#[test]
fn a_cpu_outside_the_topology_fails_the_plan_with_the_line() {
    let text =
        std::fs::read_to_string(s1_path())
            .unwrap()
            .replacen("start_cpu = 0", "start_cpu = 12", 1);
    let file = ScenarioFile::parse(&text, Path::new("s1.toml")).unwrap();
    let err = format!("{:#}", file.plan(file.params(), &ci()).unwrap_err());
    let line = text
        .lines()
        .position(|l| l.starts_with("start = "))
        .unwrap()
        + 1;
    assert!(
        err.contains(&format!(
            "s1.toml: line {line}: cpus.start: CPU 12 is outside topology ci-2node-4llc"
        )),
        "{err}"
    );
    let set = BTreeMap::from([("start_cpu".to_string(), "first".to_string())]);
    let params = apply_overrides(s1().params(), &set).unwrap();
    let err = format!("{:#}", s1().plan(&params, &ci()).unwrap_err());
    assert!(
        err.contains("params.start_cpu: \"first\" is not a number"),
        "{err}"
    );
}

#[test]
fn names_that_are_not_defined_are_refused_before_any_topology() {
    let err = error_of("irq = \"placement start\"", "irq = \"placement begin\"");
    assert!(
        err.contains("cpus.irq: \"begin\" is neither a named CPU nor a parameter"),
        "{err}"
    );
    let err = error_of("pin = { 0 = \"irq\" }", "pin = { 0 = \"llc irk\" }");
    assert!(err.contains("device[0].pin.0: \"irk\" is neither"), "{err}");
    let err = error_of("irq = \"device 0\"", "irq = \"device 1\"");
    assert!(
        err.contains("watch.irq: device 1: the file has 1 [[device]] tables"),
        "{err}"
    );
    let err = error_of(
        "marks = [\"irq\", \"start\"]",
        "marks = [\"irq\", \"begin\"]",
    );
    assert!(
        err.contains("watch.marks: \"begin\" is not a named CPU"),
        "{err}"
    );
    let err = error_of("[dmatest]", "[dmatest]\nchanels = 2");
    assert!(
        err.contains("dmatest has no parameter \"chanels\""),
        "{err}"
    );
    let err = error_of("primary = true, ", "");
    assert!(err.contains("no metric is `primary = true`"), "{err}");
    let err = error_of("topology = \"ci-2node-4llc\"", "topology = \"ci-9node\"");
    assert!(err.contains("topology"), "{err}");
    let err = error_of(
        "variants = [\"v6.12\", \"v6.12+wake-affine-idle-revert\"]",
        "variants = [\"v6.12\"]",
    );
    assert!(
        err.contains("variants: a comparison needs two or more"),
        "{err}"
    );
}

fn shipped(name: &str) -> ScenarioFile {
    ScenarioFile::read(&crate::repo_path(&format!("scenarios/{name}.toml"))).unwrap()
}

/// S2 and S4 are shipped as their files: `lab compare eevdf-parity` and `lab compare numa-scan`
/// run the text built into the lab, the repository's `scenarios/NAME.toml`, with the metrics,
/// units and magnitudes their Rust definitions had.
#[test]
fn s2_and_s4_are_shipped_as_their_files() {
    for name in ["eevdf-parity", "numa-scan"] {
        let built_in = ScenarioFile::shipped(name).unwrap();
        let in_repo = shipped(name);
        assert_eq!(built_in.name(), name);
        let debug = |f: &ScenarioFile| format!("{:?}{:?}", f.metrics(), f.default_variants());
        assert_eq!(debug(&built_in), debug(&in_repo), "{name}");
    }
    let primary = |m: Vec<MetricDef>| m.into_iter().find(|m| m.primary).unwrap();
    let s2 = shipped("eevdf-parity");
    let names: Vec<String> = s2.default_variants().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["RUN_TO_PARITY", "NO_RUN_TO_PARITY"]);
    let p = primary(s2.metrics());
    assert_eq!(
        (p.name.as_str(), p.unit.as_str(), p.magnitude, p.direction),
        (
            "involuntary_switches",
            "per 1000 messages",
            Magnitude::relative(0.5),
            Direction::LowerIsBetter
        )
    );
    let plan = s2.plan(s2.params(), &ci()).unwrap();
    assert_eq!(plan.image.as_deref(), Some("sched"));
    let picture = s2.picture().unwrap();
    assert_eq!(picture.per_cpu, "/counts_per_cpu/preempted");
    let s4 = shipped("numa-scan");
    let names: Vec<String> = s4.default_variants().into_iter().map(|v| v.name).collect();
    assert_eq!(
        names,
        [
            "v6.12",
            "v6.12+numa-scan-revert",
            "v6.12+numa-scan-pid-only"
        ]
    );
    let p = primary(s4.metrics());
    assert_eq!(
        (p.name.as_str(), p.magnitude),
        ("numa_pte_updates", Magnitude::relative(0.4))
    );
    let metric = |name: &str| s4.metrics().into_iter().find(|m| m.name == name).unwrap();
    assert_eq!(metric("gib_per_s").unit, "GiB/s");
    assert_eq!(metric("gib_per_s").direction, Direction::HigherIsBetter);
    assert_eq!(
        metric("late_numa_pages_migrated").magnitude,
        Magnitude::Absolute(100.0)
    );
    // The late window follows late_after_s.
    let mut half = s4.params().as_object().unwrap().clone();
    half.insert("late_after_s".into(), serde_json::json!(7.5));
    assert_eq!(s4.vmstat_wanted(&half).unwrap().1, vec![7.5]);
    assert_eq!(
        s4.vmstat_wanted(s4.params().as_object().unwrap()).unwrap(),
        (
            vec![
                "numa_pte_updates",
                "numa_hint_faults",
                "numa_hint_faults_local",
                "numa_pages_migrated"
            ],
            vec![15.0]
        )
    );
}

#[test]
fn vmstat_usage_and_count_metrics_read_their_observations() {
    let s4 = shipped("numa-scan");
    let s2 = shipped("eevdf-parity");
    let vmstat = BTreeMap::from([("numa_pte_updates".to_string(), 1200)]);
    let late = [(
        15.0,
        BTreeMap::from([("numa_pte_updates".to_string(), 300)]),
    )];
    let counts = BTreeMap::from([("preempted".to_string(), 42), ("migrations".to_string(), 6)]);
    let usage = crate::guest::ResourceUse {
        user_us: 1_500_000,
        system_us: 500_000,
        max_rss_kib: 0,
        minor_faults: 0,
        major_faults: 0,
        voluntary_switches: 10,
        involuntary_switches: 7,
    };
    let seen = metrics::Observed {
        usage: Some(&usage),
        vmstat: &vmstat,
        vmstat_from: &late,
        counts: &counts,
        output: "Time: 3.25\n{\"elapsed_s\": 3.25}\n",
        ..nothing_seen()
    };
    let names = Names {
        params: &serde_json::Map::new(),
        cpus: &BTreeMap::new(),
    };
    let s4_names = Names {
        params: s4.params().as_object().unwrap(),
        cpus: &BTreeMap::new(),
    };
    let value = |file: &ScenarioFile, name: &str| {
        let m = file.metrics.iter().find(|m| m.def.name == name).unwrap();
        let names = if file.name() == "numa-scan" {
            &s4_names
        } else {
            &names
        };
        m.value(&seen, names, &ci()).unwrap()
    };
    assert_eq!(value(&s4, "numa_pte_updates"), Some(1200.0));
    assert_eq!(value(&s4, "late_numa_pte_updates"), Some(300.0));
    assert_eq!(value(&s4, "system_s"), Some(0.5));
    assert_eq!(value(&s2, "involuntary_switches"), Some(7.0));
    assert_eq!(value(&s2, "cpu_seconds"), Some(2.0));
    assert_eq!(value(&s2, "preemptions"), Some(42.0));
    assert_eq!(value(&s2, "seconds"), Some(3.25));
    // Scaled with the run's parameters: per 1000 of hackbench's 4 x 10 x 10 x 1500 messages.
    let s2_names = Names {
        params: s2.params().as_object().unwrap(),
        cpus: &BTreeMap::new(),
    };
    let scaled = metrics::values(&s2.metrics, &seen, &s2_names, &ci(), "s2.toml").unwrap();
    assert_eq!(scaled["involuntary_switches"], 7.0 * 1000.0 / 600_000.0);
    assert_eq!(scaled["preemptions"], 42.0 * 1000.0 / 600_000.0);
    assert_eq!(scaled["seconds"], 3.25);
    // A 30 s run that ended at 3.25 s is refused (booted again), not counted.
    let elapsed = s4
        .metrics
        .iter()
        .position(|m| m.def.name == "elapsed_s")
        .unwrap();
    let err = metrics::values(
        &s4.metrics[elapsed..=elapsed],
        &seen,
        &s4_names,
        &ci(),
        "s4.toml",
    )
    .unwrap_err();
    let rejected = crate::sample::rejection(&err).expect("a refused sample");
    assert!(
        rejected
            .cause
            .contains("metric \"elapsed_s\": 3.25 is below refuse_below = 28.5"),
        "{}",
        rejected.cause
    );
    // A whole run: its GiB from the output's bytes, GiB/s computed from the metrics above it.
    let whole = metrics::Observed {
        output: "{\"bytes\":32212254720,\"elapsed_s\":30.0,\"per_process\":[{\"bytes\":1}]}",
        ..seen
    };
    let three = &s4.metrics[elapsed..elapsed + 3];
    let got = metrics::values(three, &whole, &s4_names, &ci(), "s4.toml").unwrap();
    assert_eq!(
        (got["gib"], got["elapsed_s"], got["gib_per_s"]),
        (30.0, 30.0, 1.0)
    );
    let m = s4
        .metrics
        .iter()
        .find(|m| m.def.name == "numa_hint_faults")
        .unwrap();
    let err = m.value(&seen, &names, &ci()).unwrap_err();
    assert!(
        err.contains("no /proc/vmstat change of \"numa_hint_faults\""),
        "{err}"
    );
}

/// The S2 file with `old` replaced by `new`, parsed: the error's text.
fn s2_error(old: &str, new: &str) -> String {
    let text = std::fs::read_to_string(crate::repo_path("scenarios/eevdf-parity.toml")).unwrap();
    assert!(text.contains(old), "{old:?} is not in the S2 file");
    let text = text.replacen(old, new, 1);
    format!(
        "{:#}",
        ScenarioFile::parse(&text, Path::new("s2.toml")).unwrap_err()
    )
}

#[test]
fn counts_and_vmstat_windows_are_checked() {
    let err = s2_error("count = \"preempted\"", "count = \"preemted\"");
    assert!(
        err.contains("metric \"preemptions\": count: no [[count]] is named \"preemted\""),
        "{err}"
    );
    let err = s2_error("event = \"sched/sched_switch\"", "event = \"sched_switch\"");
    assert!(
        err.contains("count \"preempted\": event: \"sched_switch\": subsystem/event"),
        "{err}"
    );
    let err = s2_error(
        "event = \"sched/sched_migrate_task\"",
        "event = \"sched/sched_switch\"",
    );
    assert!(err.contains("a second [[count]]"), "{err}");
    let err = s2_error("usage = \"voluntary_switches\"", "usage = \"voluntary\"");
    assert!(
        err.contains("usage: \"voluntary\" is not one of user_s"),
        "{err}"
    );
    let err = s2_error(
        "usage = \"voluntary_switches\"",
        "usage = \"voluntary_switches\", from_s = 3",
    );
    assert!(err.contains("from_s belongs to a vmstat metric"), "{err}");
    let err = s2_error(
        "trace_buffer_kb = 16384",
        "trace_buffer_kb = 16384\n[watch]\ntask = \"hackbench\"",
    );
    assert!(err.contains("beside a [watch]"), "{err}");
}

#[test]
fn the_nic_walkthrough_file_plans_its_nic_and_traffic() {
    let file = shipped("nic-wakeup");
    assert_eq!(
        Experiment::new(file.clone()).repetitions.cap(),
        30,
        "the file's cap"
    );
    assert_eq!(Experiment::new(shipped("dma-wakeup")).repetitions.cap(), 10);
    let plan = file.plan(file.params(), &ci()).unwrap();
    assert_eq!(plan.devices, [DeviceSpec::nic().irq_on_cpus(1, &[2])]);
    let t = file.traffic.as_ref().unwrap();
    assert_eq!((t.device, t.flow.port, t.flow.count), (0, 9000, 4000));
    assert_eq!(t.after.as_deref(), Some("/tmp/ready"));
    assert!(t.warm_up, "the receive interrupt warmed up before the flow");
    let text = std::fs::read_to_string(crate::repo_path("scenarios/nic-wakeup.toml")).unwrap();
    let err = |old: &str, new: &str| {
        let text = text.replacen(old, new, 1);
        match ScenarioFile::parse(&text, Path::new("nic.toml")) {
            Ok(file) => format!("{:#}", file.plan(file.params(), &ci()).unwrap_err()),
            Err(e) => format!("{e:#}"),
        }
    };
    let e = err("payload = 64", "payload = 9000");
    assert!(e.contains("traffic.payload: 9000 bytes: 1 to 1472"), "{e}");
    let e = err("after = \"/tmp/ready\"", "after = \"tmp/ready\"");
    assert!(e.contains("traffic.after"), "{e}");
    let e = err("kind = \"nic\"", "kind = \"ioat\"");
    assert!(
        e.contains("traffic.device: device 0 is \"ioat\": traffic goes into a nic"),
        "{e}"
    );
    let e = err("[traffic]", "[traffic]\ndevice = 3");
    assert!(
        e.contains("traffic.device: device 3: the file has 1"),
        "{e}"
    );
    // A warm-up needs the interrupt it warms: the watched one, of the traffic's device.
    let e = err("irq = \"device 0 vector 1\"\n", "");
    assert!(
        e.contains("traffic.warm_up: warms [watch] irq up: name one of device 0's vectors"),
        "{e}"
    );
}

/// A metric's `scale` and `refuse_*` amounts: numeric parameters only, syntax checked, each
/// error with the file's line and the field.
#[test]
fn a_computed_amount_names_numeric_parameters_only() {
    let with = |amount: &str| {
        error_of(
            "share_on_irq_cpu = { ",
            &format!("share_on_irq_cpu = {{ {amount}, "),
        )
    };
    let e = with("scale = \"placement * 2\"");
    assert!(
        e.contains("metric \"share_on_irq_cpu\": scale: \"placement * 2\": \"placement\" is not a numeric parameter nor a metric above this one (numeric: start_cpu"),
        "{e}"
    );
    assert!(e.contains("line "), "{e}");
    let e = with("refuse_below = \"2 ^ 3\"");
    assert!(
        e.contains("refuse_below: \"2 ^ 3\": '^' at character 3"),
        "{e}"
    );
    let e = with("scale = true");
    assert!(
        e.contains("scale: true: a number or an expression of numeric parameters"),
        "{e}"
    );
    let e = with("scale = \"1 / (start_cpu - start_cpu)\"");
    assert!(e.contains("divides by zero"), "{e}");
    // A computed metric reads the metrics above it, not below.
    let e = error_of(
        "share_on_irq_cpu = { switch_ins_on = \"irq\"",
        "share_on_irq_cpu = { compute = \"iops / 2\"",
    );
    assert!(
        e.contains("metric \"share_on_irq_cpu\": compute: \"iops / 2\": \"iops\" is neither a numeric parameter nor a metric above this one"),
        "{e}"
    );
}

/// `[metrics]` (a line a metric, named by its key, in the file's order) and `[[metric]]` tables
/// say the same; a file uses one of them, and each mistake names its line.
#[test]
fn metrics_are_lines_of_one_table_or_tables_of_their_own_not_both() {
    let text = std::fs::read_to_string(s1_path()).unwrap();
    let file = s1();
    let names: Vec<String> = file.metrics().into_iter().map(|m| m.name).collect();
    assert_eq!(
        names[..3],
        ["share_on_irq_cpu", "runtime_on_irq_cpu", "share_in_irq_llc"]
    );
    // The same metrics as [[metric]] tables: the same scenario.
    let (head, lines) = text.split_once("[metrics]\n").unwrap();
    let mut tables = head.to_string();
    for line in lines.lines().filter(|l| !l.starts_with('#')) {
        let (name, fields) = line.split_once(" = { ").unwrap();
        let fields = fields.trim_end_matches(" }").replace(", ", "\n");
        tables += &format!("[[metric]]\nname = \"{name}\"\n{fields}\n");
    }
    let as_tables = ScenarioFile::parse(&tables, Path::new("t.toml")).unwrap();
    assert_eq!(as_tables.metrics(), file.metrics());
    // Both forms in one file.
    let both = format!("{text}\n[[metric]]\nname = \"x\"\nworkload = \"iops\"\n");
    let err = format!(
        "{:#}",
        ScenarioFile::parse(&both, Path::new("b.toml")).unwrap_err()
    );
    let line = text.lines().position(|l| l == "[metrics]").unwrap() + 1;
    assert!(
        err.contains(&format!("b.toml: line {line}: metrics: a file lists its metrics in [metrics] or as [[metric]] tables, not both")),
        "{err}"
    );
    // A line given a name besides its key; a table without one.
    let err = error_of("iops = { ", "iops = { name = \"iops\", ");
    assert!(err.contains("named by its key, not by `name`"), "{err}");
    let unnamed = tables.replacen("name = \"iops\"\n", "", 1);
    let err = format!(
        "{:#}",
        ScenarioFile::parse(&unnamed, Path::new("u.toml")).unwrap_err()
    );
    assert!(err.contains("metrics: a [[metric]] needs a name"), "{err}");
}

/// A device's interrupt spread (`spread` over `vectors`): read from the vectors' counts per CPU,
/// checked before any boot, with the line; `queues` may name a numeric parameter, which a
/// variant's `@set=` changes.
#[test]
fn a_spread_reads_a_devices_vectors_and_queues_follow_a_parameter() {
    let file = shipped("irq-spread");
    let t = ci();
    let plans = Experiment::new(file.clone()).plan().unwrap();
    let queues: Vec<String> = plans
        .iter()
        .map(|(_, _, plan)| format!("{:?}", plan.devices[0]))
        .collect();
    assert_eq!(plans.len(), 3);
    assert!(
        queues[0] != queues[1] && queues[1] != queues[2],
        "{queues:?}"
    );
    let v = metrics::Vectors::parse("device 0 from 1", metrics::Window::Workload).unwrap();
    // The admin vector over [then]: 3 of its 4 interrupts on the last CPU, where it was moved.
    let moved = metrics::Vectors::parse("device 0 vector 0", metrics::Window::Then).unwrap();
    assert_eq!(moved.key(), "device 0 vector 0 in then");
    let counts = BTreeMap::from([
        (v.clone(), vec![0, 0, 0, 0, 0, 0, 0, 500]),
        (moved, vec![1, 0, 0, 0, 0, 0, 0, 3]),
    ]);
    // The seed's ITS: every vector on the first CPU of its mask.
    let first: BTreeMap<u32, Vec<u32>> = (0..8).map(|i| (30 + i, vec![0])).collect();
    let targets = BTreeMap::from([(v, first)]);
    let seen = metrics::Observed {
        vector_counts: &counts,
        vector_targets: &targets,
        output: "{\"jobs\": [{\"read\": {\"iops\" : 1234.5, \"iops_min\": 3}}]}",
        ..nothing_seen()
    };
    let found = file.named_cpus(file.params(), &t).unwrap();
    assert_eq!(found["moved_to"], Some(7), "`last` on 8 CPUs");
    let names = Names {
        params: file.params().as_object().unwrap(),
        cpus: &found,
    };
    let values = metrics::values(&file.metrics, &seen, &names, &t, "s5.toml").unwrap();
    assert_eq!(values["moved_vector_on_target"], 75.0);
    assert_eq!(values["busiest_cpu"], 100.0);
    assert_eq!(values["completion_cpus"], 1.0);
    assert_eq!(values["completion_max_over_mean"], 8.0);
    assert_eq!(values["iops"], 1234.5);
    assert_eq!(values["effective_cpus"], 1.0);
    assert_eq!(values["vectors_per_target_cpu_max"], 8.0);
    let picture = file.picture().unwrap();
    assert_eq!(picture.per_cpu, "/vector_interrupts/device 0 from 1");
    // Mistakes, each with its line.
    let text = std::fs::read_to_string(crate::repo_path("scenarios/irq-spread.toml")).unwrap();
    let err = |old: &str, new: &str| {
        assert!(text.contains(old), "{old}");
        let changed = text.replacen(old, new, 1);
        let e = ScenarioFile::parse(&changed, Path::new("s5.toml")).unwrap_err();
        format!("{e:#}")
    };
    let line = text
        .lines()
        .position(|l| l.starts_with("completion_cpus"))
        .unwrap()
        + 1;
    let e = err(
        "spread = \"cpus\", vectors = \"device 0 from 1\"",
        "spread = \"cpus\"",
    );
    assert!(
        e.contains(&format!(
            "line {line}: metric \"completion_cpus\": vectors: a spread or targets needs vectors"
        )),
        "{e}"
    );
    let e = err("spread = \"cpus\", ", "");
    assert!(
        e.contains("vectors go with a spread, targets or irqs_on"),
        "{e}"
    );
    // A window of counts after the workload needs the step that makes it.
    let then = text.find("[then]").unwrap();
    let end = text[then..].find("[metrics]").unwrap();
    let no_then = format!("{}{}", &text[..then], &text[then + end..]);
    let e = format!(
        "{:#}",
        ScenarioFile::parse(&no_then, Path::new("s5.toml")).unwrap_err()
    );
    assert!(
        e.contains(
            "metric \"moved_vector_on_target\": window: window = \"then\" needs a [then] step"
        ),
        "{e}"
    );
    let e = err("window = \"then\"", "window = \"after\"");
    assert!(
        e.contains("window: \"after\": \"workload\" or \"then\""),
        "{e}"
    );
    let e = err("vectors = \"device 0 vector 0\", window = \"then\", ", "");
    assert!(e.contains("irqs_on needs [watch] irq"), "{e}");
    let e = err("[then]\n", "[then]\ntimeout_s = 0\n");
    assert!(e.contains("then.timeout_s: 1 to 3600 seconds"), "{e}");
    let e = err("spread = \"cpus\"", "spread = \"cpu\"");
    assert!(e.contains("spread: \"cpu\" is not one of"), "{e}");
    let e = err("targets = \"nodes\"", "targets = \"node\"");
    assert!(
        e.contains("metric \"effective_nodes\": targets: \"node\" is not one of"),
        "{e}"
    );
    let e = err(
        "spread = \"cpus\", vectors = \"device 0 from 1\"",
        "spread = \"cpus\", vectors = \"dev 0\"",
    );
    assert!(
        e.contains("\"dev 0\": \"device N\", \"device N from V\" or \"device N vector V\""),
        "{e}"
    );
    let e = err(
        "spread = \"cpus\", vectors = \"device 0 from 1\"",
        "spread = \"cpus\", vectors = \"device 1\"",
    );
    assert!(e.contains(&format!("line {line}: metric \"completion_cpus\": vectors: device 1: the file has 1 [[device]] tables")), "{e}");
    let e = err("queues = \"io_queues\"", "queues = \"io_queue\"");
    assert!(
        e.contains("device[0].queues: \"io_queue\": a number, or the name of a numeric parameter"),
        "{e}"
    );
    let zero = text.replacen("io_queues = 8", "io_queues = 0", 1);
    let zero = ScenarioFile::parse(&zero, Path::new("s5.toml")).unwrap();
    let e = format!("{:#}", zero.plan(zero.params(), &t).unwrap_err());
    assert!(
        e.contains("device[0].queues: \"0\" is not a number of queues"),
        "{e}"
    );
}
