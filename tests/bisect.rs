//! `lab bisect` on seed S1, end to end, as a user runs it: a four-patch series on v6.12 whose
//! last patch is the wake_affine_idle() change (`images/kernels/patches/s1-wake-affine/0004`),
//! after a documentation patch and a pair whose first patch breaks the build and whose second
//! repairs it (`lab/tests/fixtures/bisect/`). The broken patch is the series' middle, so the
//! first probe is always it, whatever the cache holds (a built point is preferred only within a
//! sixth of the span of the middle, and nothing else is that close). The bisect is killed
//! (SIGKILL) once its first step is recorded and resumed from its directory: the resumed run
//! reads the finished step back instead of booting it again, skips the broken patch and names
//! it, classifies the doc patch and the repair good-like, and verifies patch 4 against its
//! parent. The six-patch demonstration (`just bisect-s1`) and its figures are in
//! docs/SCENARIOS.md.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab::bisect::{Answer, BisectRecord, Class, StepKind};

/// The suite's series: doc, break, repair, the culprit.
fn series(dir: &Path) -> PathBuf {
    let repo = lab::repo_path("");
    let s1 = repo.join("images/kernels/patches/s1-wake-affine");
    let fixtures = repo.join("lab/tests/fixtures/bisect");
    let series = dir.join("series");
    std::fs::create_dir_all(&series).unwrap();
    for (from, to) in [
        (s1.join("0001-sched-doc-eevdf.patch"), "0001-doc.patch"),
        (fixtures.join("break-build.patch"), "0002-break.patch"),
        (fixtures.join("fix-build.patch"), "0003-repair.patch"),
        (
            s1.join("0004-sched-fair-wake-affine-idle.patch"),
            "0004-wake-affine-idle.patch",
        ),
    ] {
        std::fs::copy(&from, series.join(to)).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    series
}

/// The one bisect directory under `root`, once it has a record.
fn bisect_dir(root: &Path) -> Option<PathBuf> {
    std::fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|d| BisectRecord::path(d).is_file())
}

#[test]
fn bisect_finds_the_s1_change_past_a_broken_build_and_after_a_kill() {
    let Some(lab_bin) = common::lab_binary("lab bisect") else {
        return;
    };
    let scratch = tempfile::tempdir().unwrap();
    let series = series(scratch.path());
    let name = format!("suite-{}", std::process::id());
    let results = lab::results_root();
    let root = results.join(format!("bisect-{name}"));
    let started = Instant::now();
    let mut first = Command::new(&lab_bin)
        .args([
            "bisect",
            "dma-wakeup",
            "--good",
            "v6.12",
            "--seed",
            "7",
            "--name",
            &name,
        ])
        // 128 KiB buffers, as S1's tests run dmatest under TCG (tests/dma_wakeup.rs says why).
        .args(["--set", "dmatest.test_buf_size=131072"])
        .arg("--series")
        .arg(&series)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once the endpoints' step is in the record (the second step has begun).
    let dir = loop {
        if let Some(status) = first.try_wait().unwrap() {
            panic!("lab bisect ended before it was killed: {status}");
        }
        let dir = bisect_dir(&root);
        if let Some(d) = &dir {
            if BisectRecord::read(d).is_ok_and(|r| !r.steps.is_empty()) {
                break dir.unwrap();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(1500),
            "no step recorded in 25 min"
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    first.kill().unwrap();
    first.wait().unwrap();
    let before = BisectRecord::read(&dir).unwrap();
    assert_eq!(before.steps.len(), 1, "{}", before.log());
    assert_eq!(before.steps[0].kind, StepKind::Endpoints);
    println!(
        "killed after step 1 ({:.0} s):\n{}",
        started.elapsed().as_secs_f64(),
        before.log()
    );

    let resumed = Command::new(&lab_bin)
        .arg("bisect")
        .arg("--resume")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    println!("{stdout}");
    assert!(
        resumed.status.success(),
        "lab bisect --resume failed: {}\n{stderr}",
        resumed.status
    );
    assert!(stderr.contains("bisect: step 1 read back"), "{stderr}");

    let record = BisectRecord::read(&dir).unwrap();
    // The endpoints' step is the one that ran before the kill, not a second run of it.
    assert_eq!(record.steps[0].record, before.steps[0].record);
    let Some(Answer::Culprits { culprits }) = &record.answer else {
        panic!("no culprit:\n{}", record.log());
    };
    assert_eq!(culprits.len(), 1, "{}", record.log());
    let culprit = &culprits[0];
    assert_eq!(culprit.point, 4, "{}", record.log());
    assert!(
        culprit.change.subject.contains("wake_affine_idle")
            || culprit.change.subject.contains("interrupt wakeups")
    );
    // Measured (AMD EPYC 2-core host, TCG): the endpoints +60 pp apart; the culprit's own step
    // accounts for all of it within the boots' spread. The bound: most of the change.
    assert!(culprit.share_percent > 50.0, "{}", record.log());
    // The broken patch was probed, did not build, and is named as skipped.
    let broken = record
        .steps
        .iter()
        .find(|s| s.point == 2)
        .unwrap_or_else(|| panic!("patch 2 was never probed:\n{}", record.log()));
    assert_eq!(broken.class, Some(Class::Skipped), "{}", record.log());
    assert!(broken.note.contains("does not build"), "{}", broken.note);
    assert!(stdout.contains("-> skipped (does not build"), "{stdout}");
    assert!(stdout.contains("culprit: 4/4"), "{stdout}");
    // The broken patch was the first probe; the doc patch and the repair were good-like.
    let probes: Vec<(usize, Option<Class>)> = record
        .steps
        .iter()
        .filter(|s| s.kind == StepKind::Probe)
        .map(|s| (s.point, s.class))
        .collect();
    assert_eq!(
        probes,
        [
            (2, Some(Class::Skipped)),
            (1, Some(Class::GoodLike)),
            (3, Some(Class::GoodLike))
        ],
        "{}",
        record.log()
    );
    // The page shows every step.
    let page = std::fs::read_to_string(dir.join("bisect.html")).unwrap();
    assert_eq!(page.matches("<svg").count(), record.steps.len());
    println!(
        "bisect: {} boots, {:.0} s in all",
        record.boots(),
        record.seconds
    );
}
