//! `lab report --html` and `lab report merge` on stored S1 records (`fixtures/s1-cross-llc-*.json`:
//! two runs of `tests/dma_wakeup.rs`'s cross-LLC comparison on the 2026-12-01 host, the QEMU
//! bundle's package list trimmed), through the binary. No VM runs here. What the page holds and
//! what a merge gives are tested in the library (`lab/src/report/html/tests.rs`); here the page
//! the CLI writes is checked through what the record says of itself.

use std::path::{Path, PathBuf};

use lab::report::RunRecord;

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

/// What a page must not contain to be self-contained: nothing it would load.
const EXTERNAL: &[&str] = &[
    "http:", "https:", "<script", "<link", "src=", "@import", "url(", "<img", "<iframe", "//fonts",
];

/// The page the CLI wrote is this record's: a heatmap per variant, a dot per sample, nothing
/// loaded from elsewhere (the rest of what a page holds: `lab/src/report/html/tests.rs`).
fn check_structure(page: &str, record: &RunRecord) {
    let c = record.comparison();
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
    assert_eq!(
        page.matches("<figure class=\"heatmap\"").count(),
        c.variants().len(),
        "one heatmap per variant"
    );
    for v in c.variants() {
        assert!(
            page.contains(&format!("<figure class=\"heatmap\" data-variant=\"{v}\">")),
            "{v}"
        );
    }
    assert_eq!(
        page.matches("<circle").count(),
        record
            .boots()
            .iter()
            .map(|b| b.samples.len())
            .sum::<usize>(),
        "a dot per sample"
    );
    for bad in EXTERNAL {
        assert!(
            !page.contains(bad),
            "external reference {bad:?} in the page"
        );
    }
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
    // The merged table is the table of one run with both sets of boots (the library's
    // `report::html` tests build that run and compare); here: the one the merge wrote.
    assert!(merged_dir.join("record.html").is_file() && merged_dir.join("table.txt").is_file());
    let back = RunRecord::read_json(&merged_dir.join("record.json")).unwrap();
    assert_eq!(back.boots().len(), 20);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        back.comparison().table()
    );
    assert!(back.comparison().table().contains("n=10/10"));
    assert_eq!(
        std::fs::read_to_string(merged_dir.join("table.txt")).unwrap(),
        back.comparison().table()
    );

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

/// CI's merge step (`.ci/merge-results`) over a KVM job's and a TCG shard's results, laid out
/// as the workflow downloads them (the KVM job's directory sorts first): one merged table with
/// a base column per accelerator, each variant against its own accelerator's base.
#[test]
fn ci_merge_step_gives_each_accelerator_its_own_base() {
    let dir = tempfile::tempdir().unwrap();
    let results = dir.path().join("results");
    for (fixture_name, job, accel) in [
        ("s1-cross-llc-a", "results-kvm-1", "kvm"),
        ("s1-cross-llc-b", "results-tcg-single-1", "tcg-single"),
    ] {
        let mut record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture(fixture_name)).unwrap()).unwrap();
        record["manifest"]["accelerator"] = serde_json::json!({ "name": accel });
        let run = results.join(job).join("dma-wakeup-cross-llc/run-1");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(run.join("record.json"), record.to_string()).unwrap();
    }
    let script = manifest_dir().join("../.ci/merge-results");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&results)
        .arg(dir.path().join("merged"))
        .env("LAB_BIN", lab_binary())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let merged = dir.path().join("merged/dma-wakeup-cross-llc");
    let back = RunRecord::read_json(&merged.join("record.json")).unwrap();
    let c = back.comparison();
    let col = |v: &str, accel: &str| format!("{v} [accelerator={accel}]");
    assert_eq!(c.bases(), [col("v6.12", "kvm"), col("v6.12", "tcg-single")]);
    let revert = "v6.12+wake-affine-idle-revert";
    assert_eq!(
        c.base_of(&col(revert, "tcg-single")),
        col("v6.12", "tcg-single")
    );
    let table = std::fs::read_to_string(merged.join("table.txt")).unwrap();
    assert_eq!(table.matches("group ").count(), 2, "{table}");
    assert!(table.contains("group 2/2: base v6.12 [accelerator=tcg-single]"));
    // The TCG group's table is the TCG record's own, columns renamed: the same n and %change.
    let (_, alone) = read("s1-cross-llc-b");
    let alone_table = alone.comparison().table();
    let tcg_part = table.split("group 2/2").nth(1).unwrap();
    for line in alone_table.lines().filter(|l| l.contains("n=")) {
        let notes = line
            .split("  ")
            .filter(|p| p.contains("p=") || p.contains("n="));
        for note in notes {
            assert!(
                tcg_part.contains(note.trim()),
                "{note:?} not in\n{tcg_part}"
            );
        }
    }
}
