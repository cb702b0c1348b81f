//! The HTML page's tests, and those of pages of stored records and their merges.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;
use crate::report::merge::{merge, Field};
use crate::report::{Direction, Manifest, Mark};

fn record(variant_name: &str) -> RunRecord {
    let mut c = Comparison::new("c<1>", ["base", variant_name]).unwrap();
    c.add_metric("share", "%", Direction::Neutral, 1.0).unwrap();
    let manifest = Manifest {
        topology: json!({"name": "t", "file": "name = \"t\"\n[[node]]\ncpus = \"0-3\"\nmemory = \"1G\"\n[[llc]]\ncpus = \"0-1\"\n[[llc]]\ncpus = \"2-3\"\n"}),
        picture: Some(Picture {
            task: "worker <a>".into(),
            quantity: "switch-ins".into(),
            per_cpu: "/map".into(),
            marks: vec![Mark {
                label: "IRQ".into(),
                cpu: "/irq".into(),
            }],
        }),
        ..Manifest::default()
    };
    let mut r = RunRecord::new(c, manifest).unwrap();
    for (v, x, map) in [
        ("base", 1.0, json!({"0": 9, "1": 1})),
        (variant_name, 90.0, json!({"2": 9, "0": 1})),
        ("base", 2.0, json!({"0": 1})),
        (variant_name, 95.0, json!({"2": 1})),
    ] {
        r.record_boot(
            v,
            [("share", x)],
            json!({"scenario": {"map": map, "irq": 2}}),
        )
        .unwrap();
    }
    r
}

#[test]
fn text_is_escaped_everywhere() {
    let page = render(
        &record("<script>alert(1)</script>"),
        Path::new("/x/r.json"),
        None,
    )
    .unwrap();
    assert!(!page.contains("<script"), "{page}");
    assert!(page.contains("&lt;script&gt;"));
    assert!(page.contains("c&lt;1&gt;") && page.contains("worker &lt;a&gt;"));
    assert_eq!(page.matches("<figure class=\"heatmap\"").count(), 2);
    assert!(page.contains(">IRQ</text>"));
}

#[test]
fn bad_picture_data_names_the_file_and_field() {
    let mut r = record("v");
    r.boots[1].details = json!({"scenario": {"map": [1, 2], "irq": 2}});
    let err = render(&r, Path::new("/x/r.json"), None).unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("/x/r.json") && err.contains("boots[1].details.scenario/map"),
        "{err}"
    );
    let mut r = record("v");
    r.manifest.topology = json!({"name": "t", "file": "name = 1"});
    let err = format!(
        "{:#}",
        render(&r, Path::new("/x/r.json"), None).unwrap_err()
    );
    assert!(err.contains("/x/r.json: manifest.topology.file"), "{err}");
}

#[test]
fn links_are_relative_under_the_page_and_encoded() {
    let dir = Path::new("/r/run");
    assert_eq!(
        href(Path::new("/r/run/boots/00-a b/t"), dir),
        "boots/00-a%20b/t"
    );
    assert_eq!(
        href(Path::new("/elsewhere/x\"y"), dir),
        "file:///elsewhere/x%22y"
    );
}

// Stored S1 records (`lab/tests/fixtures/s1-cross-llc-*.json`: two runs of
// `tests/dma_wakeup.rs`'s cross-LLC comparison on the 2026-12-01 host, the QEMU bundle's package
// list trimmed) rendered and merged; `lab/tests/report_html.rs` runs the same through the CLI.

fn fixture(name: &str) -> PathBuf {
    crate::repo_path("lab/tests/fixtures").join(format!("{name}.record.json"))
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
        let v = esc(v);
        assert!(
            page.contains(&format!("<figure class=\"heatmap\" data-variant=\"{v}\">")),
            "{v}"
        );
    }
    for row in &rows {
        let m = esc(&row.metric.name);
        assert!(
            page.contains(&format!("<tr class=\"metric\" data-metric=\"{m}\">")),
            "row {m}"
        );
        assert!(
            page.contains(&format!("<svg class=\"dots\" data-metric=\"{m}\"")),
            "dots {m}"
        );
        // The row shows the same change the text table prints (a share's in points).
        for o in &row.others {
            let ch = o.change.as_ref().expect("every S1 metric has samples");
            let (change, _) = crate::report::change_text(row.metric, ch);
            if change != "n/a" {
                assert!(
                    table.contains(&change) && page.contains(&change),
                    "{m}: {change}"
                );
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
    let picture = crate::scenarios::picture_of(&record);
    let page = render(&record, &path, picture.as_ref()).unwrap();
    check_structure(&page, &record);
    // Without a picture, no heatmap and everything else.
    let plain = render(&record, &path, None).unwrap();
    assert_eq!(plain.matches("<figure class=\"heatmap\"").count(), 0);
    assert!(plain.contains("data-metric=\"share_on_irq_cpu\""));
}

/// The one-run table of `records`' boots, recorded in order through the ordinary path.
fn one_run(records: &[&RunRecord]) -> RunRecord {
    let first = records[0].comparison();
    let mut definition =
        crate::report::Comparison::new(first.name(), first.variants().to_vec()).unwrap();
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
    // The merge is a further look of its records (their single looks at 5 a side, then 10):
    // its primaries are decided with the 1% split over those looks, as one run of 10 planned
    // with them would be.
    assert_eq!(merged.comparison().plan().looks, [5, 10]);
    let mut want = want.comparison().clone();
    want.set_plan(merged.comparison().plan().clone());
    assert_eq!(merged.comparison(), &want);
    let table = merged.comparison().table();
    assert_eq!(table, want.table());
    assert!(table.contains("n=10/10"));

    // One run cut in two and merged again is that run, table and all.
    let half = |keep_first: bool| {
        let c = a.comparison();
        let mut d = crate::report::Comparison::new(c.name(), c.variants().to_vec()).unwrap();
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
    // (Its halves' looks, 2 then 4 boots a side, count as looks of the rejoined run; the
    // fixture decides no primary, so the table is the same.)
    let rejoined = merge(&[(pa.clone(), half(true)), (pa, half(false))], &[]).unwrap();
    assert_eq!(rejoined.comparison().plan().looks, [2, 4]);
    let mut whole = a.comparison().clone();
    whole.set_plan(rejoined.comparison().plan().clone());
    assert_eq!(rejoined.comparison(), &whole);
    assert_eq!(rejoined.comparison().table(), a.comparison().table());

    // The merged record renders, its boots still finding their source record.
    let page = render(
        &merged,
        Path::new("/tmp/merged/record.json"),
        crate::scenarios::picture_of(&merged).as_ref(),
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
                for variant in [0, 1] {
                    v["manifest"]["parameters"]["variants"][variant]["params"]["dmatest"]
                        ["polled"] = json!(true)
                }
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
        // Grouped by it, each value gets its own columns, the first record's base first; a
        // group is a base column and the columns compared with it.
        let grouped = merge(&records, &[field]).unwrap();
        let variants = grouped.comparison().variants();
        assert!(
            variants.iter().all(|v| v.contains(&format!("[{field}="))),
            "{variants:?}"
        );
        assert!(variants[0].starts_with("v6.12 ["), "{variants:?}");
        // The revert's kernel differs, not the base's: one base for both revert columns.
        let (want, groups) = if field == Field::Kernel {
            (3, 1)
        } else {
            (4, 2)
        };
        assert_eq!(variants.len(), want, "{field}: {variants:?}");
        assert_eq!(grouped.comparison().bases().len(), groups, "{field}");
        assert_eq!(grouped.boots().len(), 20);
    }
    // Only the base's parameters differ: the revert's one column would have two bases.
    let other = edited(&b, |v| {
        v["manifest"]["parameters"]["variants"][0]["params"]["dmatest"]["polled"] = json!(true)
    });
    let records = [(pa.clone(), a.clone()), (pb.clone(), other)];
    let err = format!("{:#}", merge(&records, &[Field::Parameters]).unwrap_err());
    assert!(
        err.contains("v6.12+wake-affine-idle-revert [parameters=")
            && err.contains("two base columns"),
        "{err}"
    );
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
fn the_page_shows_which_wakeups_moved_the_task_where_boots_kept_them() {
    let (path, record) = read("s1-cross-llc-a");
    // Stored before attribution: no section.
    let page = render(&record, &path, None).unwrap();
    assert!(!page.contains("Which wakeups moved the task"));
    // Each boot given an attribution folded from a recorded S1 trace: the base's boots the
    // v6.12 trace, the revert's the revert's.
    let topology = crate::topology::Topology::by_name("ci-2node-4llc").unwrap();
    let attributed = |trace: &str| {
        let events = crate::observe::parse_trace(trace);
        let wakeups = crate::observe::task_wakeups("dma0chan0-copy", &events);
        serde_json::to_value(crate::observe::Attribution::of(&wakeups, &topology)).unwrap()
    };
    let base = attributed(include_str!("../../observe/fixtures/s1-v6.12.trace"));
    let revert = attributed(include_str!("../../observe/fixtures/s1-revert.trace"));
    let with = edited(&record, |v| {
        for boot in v["boots"].as_array_mut().unwrap() {
            let a = if boot["variant"] == "v6.12" {
                &base
            } else {
                &revert
            };
            boot["details"]["scenario"]["attribution"] = a.clone();
        }
    });
    let picture = crate::scenarios::picture_of(&record);
    let page = render(&with, &path, picture.as_ref()).unwrap();
    check_structure(&page, &with);
    assert!(
        page.contains("<h2>Which wakeups moved the task</h2>"),
        "{page}"
    );
    assert!(
        page.contains("softirq on &lt;idle&gt;"),
        "the wakers are named"
    );
    let rows = page.matches("<tr><td><span class=\"swatch\"").count();
    assert!(rows >= 2, "a row per waker and variant: {rows}");
}
