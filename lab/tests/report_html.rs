//! The HTML report and `lab report merge` on stored S1 records (`fixtures/s1-cross-llc-*.json`:
//! two runs of `tests/dma_wakeup.rs`'s cross-LLC comparison on the 2026-12-01 host, the QEMU
//! bundle's package list trimmed). No VM runs here.

use std::path::{Path, PathBuf};

use lab::report::merge::{merge, Field};
use lab::report::{html, RunRecord};
use serde_json::{json, Value};

/// The package's directory as the runner gives it (nextest remaps it when the tests run from an
/// archive on another machine), else where this file was built.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf())
}

/// The `lab` binary: nextest's path for it (remapped in an archive run), else cargo's.
fn lab_binary() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_lab")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lab")))
}

fn fixture(name: &str) -> PathBuf {
    manifest_dir()
        .join("tests/fixtures")
        .join(format!("{name}.record.json"))
}

fn read(name: &str) -> (PathBuf, RunRecord) {
    let path = fixture(name);
    let record = RunRecord::read_json(&path).unwrap();
    (path, record)
}

/// The record with `edit` applied to its JSON.
fn edited(record: &RunRecord, edit: impl FnOnce(&mut Value)) -> RunRecord {
    let mut v = serde_json::to_value(record).unwrap();
    edit(&mut v);
    serde_json::from_value(v).unwrap()
}

/// A change to a record's JSON.
type Edit = Box<dyn Fn(&mut Value)>;

/// What a page must not contain to be self-contained: nothing it would load.
const EXTERNAL: &[&str] = &[
    "http:", "https:", "<script", "<link", "src=", "@import", "url(", "<img", "<iframe", "//fonts",
];

fn check_structure(page: &str, record: &RunRecord) {
    let c = record.comparison();
    let rows = c.rows();
    let table = c.table_of(&rows);
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    assert_eq!(
        page.matches("<figure class=\"heatmap\"").count(),
        c.variants().len(),
        "one heatmap per variant"
    );
    for v in c.variants() {
        let v = html::esc(v);
        assert!(
            page.contains(&format!("<figure class=\"heatmap\" data-variant=\"{v}\">")),
            "{v}"
        );
    }
    for row in &rows {
        let m = html::esc(&row.metric.name);
        assert!(
            page.contains(&format!("<tr class=\"metric\" data-metric=\"{m}\">")),
            "row {m}"
        );
        assert!(
            page.contains(&format!("<svg class=\"dots\" data-metric=\"{m}\"")),
            "dots {m}"
        );
        // The row shows the same %change the text table prints.
        for o in &row.others {
            let ch = o.change.as_ref().expect("every S1 metric has samples");
            let pct = format!("{:+.1}%", ch.pct_change.unwrap_or(0.0));
            if ch.pct_change.is_some() {
                assert!(table.contains(&pct) && page.contains(&pct), "{m}: {pct}");
            }
        }
    }
    assert_eq!(
        page.matches("<circle").count(),
        record
            .boots()
            .iter()
            .map(|b| b.samples.len())
            .sum::<usize>()
    );
    for bad in EXTERNAL {
        assert!(
            !page.contains(bad),
            "external reference {bad:?} in the page"
        );
    }
    assert!(page.contains(">IRQ</text>"), "the IRQ CPU is marked");
    assert!(
        page.contains("node 0") && page.contains("LLC 1"),
        "CPUs grouped on the topology"
    );
    for field in [
        "QEMU",
        "accelerator",
        "kernels",
        "image",
        "topology",
        "host",
    ] {
        assert!(page.contains(&format!("<dt>{field}</dt>")), "{field}");
    }
    assert!(
        page.contains("recipe v6.12 key 0a12d83ed5"),
        "kernel recipe hash"
    );
}

#[test]
fn stored_s1_record_renders_with_a_heatmap_per_variant_and_every_metric() {
    let (path, record) = read("s1-cross-llc-a");
    assert!(
        record.manifest.picture.is_none(),
        "stored before pictures: the registry's is used"
    );
    let picture = lab::scenarios::picture("dma-wakeup");
    let page = html::render(&record, &path, picture.as_ref()).unwrap();
    check_structure(&page, &record);
    // Without a picture, no heatmap and everything else.
    let plain = html::render(&record, &path, None).unwrap();
    assert_eq!(plain.matches("<figure class=\"heatmap\"").count(), 0);
    assert!(plain.contains("data-metric=\"share_on_irq_cpu\""));
}

/// The one-run table of `records`' boots, recorded in order through the ordinary path.
fn one_run(records: &[&RunRecord]) -> RunRecord {
    let first = records[0].comparison();
    let mut definition =
        lab::report::Comparison::new(first.name(), first.variants().to_vec()).unwrap();
    for m in first.metrics() {
        definition
            .add_metric(&m.name, &m.unit, m.direction, m.magnitude)
            .unwrap();
    }
    let mut run = RunRecord::new(definition, records[0].manifest.clone()).unwrap();
    for r in records {
        for b in r.boots() {
            run.record_boot(&b.variant, b.samples.clone(), Value::Null)
                .unwrap();
        }
    }
    run
}

#[test]
fn merging_two_runs_gives_the_table_of_one_run_with_both_sets_of_boots() {
    let (pa, a) = read("s1-cross-llc-a");
    let (pb, b) = read("s1-cross-llc-b");
    let merged = merge(&[(pa.clone(), a.clone()), (pb, b.clone())], &[]).unwrap();
    assert_eq!(merged.boots().len(), 20);
    let want = one_run(&[&a, &b]);
    assert_eq!(merged.comparison(), want.comparison());
    let table = merged.comparison().table();
    assert_eq!(table, want.comparison().table());
    assert!(table.contains("n=10/10"));

    // One run cut in two and merged again is that run, table and all.
    let half = |keep_first: bool| {
        let c = a.comparison();
        let mut d = lab::report::Comparison::new(c.name(), c.variants().to_vec()).unwrap();
        for m in c.metrics() {
            d.add_metric(&m.name, &m.unit, m.direction, m.magnitude)
                .unwrap();
        }
        let mut r = RunRecord::new(d, a.manifest.clone()).unwrap();
        for b in a.boots().iter().filter(|b| (b.sequence < 5) == keep_first) {
            r.record_boot(&b.variant, b.samples.clone(), b.details.clone())
                .unwrap();
        }
        r
    };
    let rejoined = merge(&[(pa.clone(), half(true)), (pa, half(false))], &[]).unwrap();
    assert_eq!(rejoined.comparison(), a.comparison());
    assert_eq!(rejoined.comparison().table(), a.comparison().table());

    // The merged record renders, its boots still finding their source record.
    let page = html::render(
        &merged,
        Path::new("/tmp/merged/record.json"),
        lab::scenarios::picture("dma-wakeup").as_ref(),
    )
    .unwrap();
    check_structure(&page, &merged);
}

#[test]
fn merge_refuses_records_that_differ_in_what_changes_the_result() {
    let (pa, a) = read("s1-cross-llc-a");
    let (pb, b) = read("s1-cross-llc-b");
    let cases: [(Field, Edit); 4] = [
        (
            Field::Kernel,
            Box::new(|v| {
                v["manifest"]["kernel"][1]["identity"] =
                    json!("recipe v6.12+wake-affine-idle-revert key ffff")
            }),
        ),
        (
            Field::Topology,
            Box::new(|v| {
                let t = v["manifest"]["topology"]["file"].as_str().unwrap().replace(
                    "distances = [[10, 20], [20, 10]]",
                    "distances = [[10, 30], [30, 10]]",
                );
                v["manifest"]["topology"]["file"] = json!(t);
            }),
        ),
        (
            Field::Accelerator,
            Box::new(|v| v["manifest"]["accelerator"]["name"] = json!("kvm")),
        ),
        (
            Field::Parameters,
            Box::new(|v| {
                v["manifest"]["parameters"]["variants"][0]["params"]["dmatest"]["polled"] =
                    json!(true)
            }),
        ),
    ];
    for (field, edit) in cases {
        let other = edited(&b, edit);
        let records = [(pa.clone(), a.clone()), (pb.clone(), other)];
        let err = format!("{:#}", merge(&records, &[]).unwrap_err());
        assert!(
            err.contains(&format!("manifest field {field}")) && err.contains("s1-cross-llc-b"),
            "{err}"
        );
        // Grouped by it, each value gets its own columns, the first record's base first.
        let grouped = merge(&records, &[field]).unwrap();
        let variants = grouped.comparison().variants();
        assert!(
            variants.iter().all(|v| v.contains(&format!("[{field}="))),
            "{variants:?}"
        );
        assert!(variants[0].starts_with("v6.12 ["), "{variants:?}");
        let want = if field == Field::Kernel || field == Field::Parameters {
            3
        } else {
            4
        };
        assert_eq!(variants.len(), want, "{field}: {variants:?}");
        assert_eq!(grouped.boots().len(), 20);
    }
    // Hosts and QEMU builds may differ: that is what merging is for.
    let other = edited(&b, |v| v["manifest"]["host"]["cpu"] = json!("Intel Xeon"));
    let merged = merge(&[(pa.clone(), a.clone()), (pb.clone(), other)], &[]).unwrap();
    assert!(merged.manifest.host["merged"].is_object());
    // A different comparison is refused, naming the field.
    let other = edited(&b, |v| {
        v["comparison"]["metrics"][0]["magnitude"] = json!(9.0)
    });
    let err = format!("{:#}", merge(&[(pa, a), (pb, other)], &[]).unwrap_err());
    assert!(
        err.contains("comparison.metrics[share_on_irq_cpu]"),
        "{err}"
    );
}

#[test]
fn cli_writes_pages_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("run/record.json");
    std::fs::create_dir_all(record.parent().unwrap()).unwrap();
    std::fs::copy(fixture("s1-cross-llc-a"), &record).unwrap();
    let lab = lab_binary();
    let out = std::process::Command::new(&lab)
        .args(["report", "--html"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = dir.path().join("run/record.html");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        page.display().to_string()
    );
    let (_, a) = read("s1-cross-llc-a");
    check_structure(&std::fs::read_to_string(&page).unwrap(), &a);

    let merged_dir = dir.path().join("merged");
    let out = std::process::Command::new(&lab)
        .args(["report", "merge"])
        .arg(fixture("s1-cross-llc-a"))
        .arg(fixture("s1-cross-llc-b"))
        .arg("--out")
        .arg(&merged_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, b) = read("s1-cross-llc-b");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        one_run(&[&a, &b]).comparison().table()
    );
    assert!(merged_dir.join("record.html").is_file() && merged_dir.join("table.txt").is_file());
    let back = RunRecord::read_json(&merged_dir.join("record.json")).unwrap();
    assert_eq!(back.boots().len(), 20);

    // A bad group-by field and a bad record are refused with their names.
    let out = std::process::Command::new(&lab)
        .args(["report", "merge", "--group-by", "host"])
        .arg(&merged_dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a field to group by"));
    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"schema_version\": 2}").unwrap();
    let out = std::process::Command::new(&lab)
        .args(["report", "--html"])
        .arg(&broken)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("broken.json") && err.contains("comparison"),
        "{err}"
    );
}
