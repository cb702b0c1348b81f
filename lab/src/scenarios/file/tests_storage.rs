//! The S3 file's parts: a storage stack, who woke whom, fio's JSON, and their mistakes.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::experiment::Experiment;
use crate::observe::{parse_trace, Wakeups};

fn s3_text() -> String {
    std::fs::read_to_string(crate::repo_path("scenarios/delay-dequeue.toml")).unwrap()
}

fn s3_error(old: &str, new: &str) -> String {
    let text = s3_text();
    assert!(text.contains(old), "{old:?} is not in the S3 file");
    let text = text.replacen(old, new, 1);
    format!(
        "{:#}",
        ScenarioFile::parse(&text, Path::new("s3.toml")).unwrap_err()
    )
}

/// fio's JSON as the storage image's fio 3.39 prints it, cut to what the S3 file reads: two
/// jobs of 4 KiB random writes.
const FIO: &str = r#"{
  "fio version" : "fio-3.39",
  "jobs" : [
    { "jobname" : "lab", "job_runtime" : 5001,
      "read" : { "iops" : 0.0, "total_ios" : 0 },
      "write" : { "iops" : 300.0, "total_ios" : 1500,
        "clat_ns" : { "percentile" : { "99.000000" : 2000000 } } } },
    { "jobname" : "lab", "job_runtime" : 4990,
      "read" : { "iops" : 0.0, "total_ios" : 0 },
      "write" : { "iops" : 100.0, "total_ios" : 500,
        "clat_ns" : { "percentile" : { "99.000000" : 5000000 } } } }
  ]
}
"#;

/// S3 ships as its file: `lab compare delay-dequeue` runs the text built into the lab, the
/// repository's file.
#[test]
fn the_s3_file_plans_its_stack_and_reads_wakers_and_fio() {
    let file = ScenarioFile::read(&crate::repo_path("scenarios/delay-dequeue.toml")).unwrap();
    let built_in = ScenarioFile::shipped("delay-dequeue").unwrap();
    let debug = |f: &ScenarioFile| format!("{:?}{:?}", f.metrics(), f.default_variants());
    assert_eq!(debug(&built_in), debug(&file));
    let plans = Experiment::new(file.clone()).plan().unwrap();
    assert_eq!(plans.len(), 4);
    let devices: Vec<String> = plans
        .iter()
        .map(|(_, _, p)| format!("{:?}", p.devices[0]))
        .collect();
    assert!(devices[0].contains("io_queues: 8") && devices[2].contains("io_queues: 3"));
    assert!(
        devices[0].contains(&(2u64 << 30).to_string()),
        "{}",
        devices[0]
    );
    assert_eq!(file.storage.as_ref().unwrap().1, "/dev/nvme0n1");
    assert_eq!(file.wakeup_tasks, ["fio", "kworker"]);
    let trace = "\
  <idle>-0 [005] d.h4. 1.000100: sched_waking: comm=kworker/5:1H pid=76 prio=100 target_cpu=005
  kworker/5:1H-76 [005] d..2. 1.000200: sched_waking: comm=fio pid=300 prio=120 target_cpu=002
  kworker/5:1H-76 [005] d..3. 1.000220: sched_wakeup: comm=fio pid=300 prio=120 target_cpu=005
  <idle>-0 [002] d.h2. 1.000300: sched_waking: comm=fio pid=301 prio=120 target_cpu=002
  <idle>-0 [002] d.h2. 1.000310: sched_wakeup: comm=fio pid=301 prio=120 target_cpu=002
  fio-301 [002] d..2. 1.000400: sched_migrate_task: comm=fio pid=300 prio=120 orig_cpu=5 dest_cpu=2
";
    let wakeups = Wakeups::from_events(&parse_trace(trace));
    let allowed = BTreeMap::from([(76, vec![5]), (301, vec![1, 2, 3])]);
    let v = metrics::Vectors::parse("device 0 from 1", metrics::Window::Workload).unwrap();
    let counts = BTreeMap::from([(v, vec![0, 10, 10, 10, 10, 10, 10, 40])]);
    let doc = json_output::document(FIO).unwrap();
    let seen = metrics::Observed {
        vector_counts: &counts,
        output: FIO,
        output_json: Some(&doc),
        wakeups: Some(&wakeups),
        allowed: &allowed,
        ..super::tests::nothing_seen()
    };
    let names = Names {
        params: file.params().as_object().unwrap(),
        cpus: &BTreeMap::new(),
    };
    let t = Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap();
    let m = metrics::values(&file.metrics, &seen, &names, &t, "s3.toml").unwrap();
    assert_eq!(m["hardirq_wakees_single_cpu"], 50.0);
    assert_eq!(m["irq_cpus"], 7.0);
    assert_eq!(m["irq_busiest_cpu"], 40.0);
    assert_eq!(m["fio_woken_in_hardirq"], 50.0);
    assert_eq!(m["fio_woken_by_percpu_kworker"], 50.0);
    assert_eq!(m["fio_woken_by_unbound_kworker"], 0.0);
    assert_eq!(m["fio_moved_at_wakeup"], 50.0);
    assert_eq!(m["ios"], 2000.0);
    assert_eq!(m["shortest_job_s"], 4.99);
    assert_eq!(m["fio_migrations"], 0.5);
    assert_eq!(m["fio_wakeups"], 1.0);
    assert_eq!(m["kworker_wakeups"], 0.5);
    assert_eq!(m["iops"], 400.0);
    assert_eq!(m["clat_p99"], 5000.0);
    // A job that stopped short (under 90% of runtime_s) is not a sample: booted again.
    let short = FIO.replace("4990", "4000");
    let doc = json_output::document(&short).unwrap();
    let seen = metrics::Observed {
        output_json: Some(&doc),
        ..seen
    };
    let err = metrics::values(&file.metrics, &seen, &names, &t, "s3.toml").unwrap_err();
    assert!(crate::sample::rejection(&err).is_some(), "{err:#}");
    assert!(format!("{err:#}").contains("shortest_job_s"), "{err:#}");
}

/// The file's queries over a real fio run (the storage image's fio 3.39, 2 jobs of 4 KiB random
/// writes) give what the lab's own fio parser reads from it.
#[test]
fn the_s3_files_queries_read_a_real_fio_run_as_the_fio_parser_does() {
    let file = ScenarioFile::shipped("delay-dequeue").unwrap();
    let real = include_str!("../../workload/fio_sample.json");
    let parsed = crate::workload::FioResult::parse(real).unwrap();
    let doc = json_output::document(real).unwrap();
    let query = |name: &str| match &file
        .metrics
        .iter()
        .find(|m| m.def.name == name)
        .unwrap()
        .source
    {
        metrics::Source::Json(q) => q.value(&doc).unwrap().unwrap(),
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(query("ios"), parsed.total_ios() as f64);
    assert!((query("iops") - parsed.total_iops()).abs() < 1e-6);
    let worst_us = parsed.worst_clat_us("99").unwrap();
    assert!(
        (query("clat_p99") / 1000.0 - worst_us).abs() < 1e-6,
        "{worst_us}"
    );
    let shortest_ms = parsed.jobs.iter().map(|j| j.runtime_ms).min().unwrap();
    assert_eq!(query("shortest_job_s"), shortest_ms as f64);
}

#[test]
fn a_storage_stack_a_wakeup_trace_and_a_json_query_name_their_mistakes() {
    let cases = [
        (
            "stack = \"ext4-on-thin\"",
            "stack = \"xfs\"",
            "storage.stack: \"xfs\": raw, ext4 or ext4-on-thin",
        ),
        (
            "device = \"/dev/nvme0n1\"",
            "device = \"/dev/../etc\"",
            "storage.device: \"/dev/../etc\": a block device under /dev",
        ),
        ("size = \"2G\"", "size = \"lots\"", "device[0].size: \"lots\": a size"),
        (
            "tasks = [\"fio\", \"kworker\"]",
            "tasks = [\"fio\"]",
            "metric \"kworker_wakeups\": of: \"kworker/N:N\" is not among the tasks [wakeups] traces (fio)",
        ),
        (
            "tasks = [\"fio\", \"kworker\"]",
            "tasks = [\"fio\\\"\"]",
            "is not a command-name prefix",
        ),
        (
            "[wakeups]",
            "[[count]]\nname = \"s\"\nevent = \"sched/sched_switch\"\n[wakeups]",
            "[wakeups] beside a [watch] or a [[count]]",
        ),
        (
            "combine = \"sum\", better = \"higher\"",
            "better = \"higher\"",
            "metric \"iops\": combine: \"$.jobs[*].write.iops\" can match several values",
        ),
        (
            "wakeups = \"moved\", of = \"fio\"",
            "wakeups = \"moved\", of = \"fio\", by = \"hardirq\"",
            "metric \"fio_moved_at_wakeup\": by: wakeups = \"moved\" takes no by",
        ),
        (
            "ios = { json",
            "ios = { by = \"fio\", json",
            "metric \"ios\": by: by goes with a wakeups figure",
        ),
    ];
    for (old, new, want) in cases {
        let err = s3_error(old, new);
        assert!(err.starts_with("s3.toml: line "), "{err}");
        assert!(err.contains(want), "{new}: {err}");
    }
    let text = s3_text().replace("[wakeups]\ntasks = [\"fio\", \"kworker\"]\n", "");
    let err = format!(
        "{:#}",
        ScenarioFile::parse(&text, Path::new("s3.toml")).unwrap_err()
    );
    assert!(
        err.contains("a wakeups metric needs a [wakeups] table naming the tasks to trace"),
        "{err}"
    );
}
