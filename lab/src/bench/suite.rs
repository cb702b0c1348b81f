//! `lab bench suite`: the test suite's speed, from the JUnit report nextest writes after every run
//! (`.config/nextest.toml` asks for `target/nextest/<profile>/junit.xml`): the run's wall time,
//! the sum of test times per test binary, and the slowest tests.
//!
//! A run counts as cold when a kernel in the cache finished building while it ran (its
//! manifest's `finished_at` lies inside the run), which is what the suite's setup script does on
//! a machine without kernels; otherwise warm. A kernel built meanwhile by another process on the
//! host would make a warm run look cold; the report names the kernels it counted.
//!
//! The boots the run's comparisons took are counted from the run records written during it
//! under the results directory (valid and refused boots, per comparison), so an adaptive
//! schedule's cost is measured, not assumed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cache::Cache;

/// Nextest profiles whose reports `lab bench` looks for.
pub(crate) const PROFILES: &[&str] = &[QUICK_PROFILE, "default", "ci"];

/// The nextest profile of the quick tier (`lab test --quick`, .config/nextest.toml).
pub const QUICK_PROFILE: &str = "quick";

/// How many of the slowest tests the report lists.
pub const SLOWEST: usize = 10;

/// One test case of a report.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TestTime {
    /// The test binary (`lab-scenarios::vm`, `lab`).
    pub binary: String,
    pub name: String,
    pub seconds: f64,
    /// "passed", "failed", "skipped" or "flaky".
    pub outcome: &'static str,
}

/// The tests of one binary.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BinarySum {
    pub binary: String,
    pub tests: usize,
    /// Sum of its test times (tests run in parallel, so the sums add up to more than the wall).
    pub seconds: f64,
}

/// What a JUnit report says about one nextest run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JunitRun {
    /// Start of the run, Unix seconds.
    pub started_unix: f64,
    /// The run's wall time, setup scripts included.
    pub wall_s: f64,
    pub tests: Vec<TestTime>,
}

/// A run with where it came from and whether kernels were built during it.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteRun {
    pub(crate) profile: String,
    pub(crate) path: PathBuf,
    pub(crate) started_unix: f64,
    pub(crate) wall_s: f64,
    pub(crate) tests: Vec<TestTime>,
    /// Kernels whose builds finished during the run: (recipe, seconds).
    pub(crate) kernels_built: Vec<(String, f64)>,
    /// The run records written during the run.
    pub(crate) records: Vec<RecordBoots>,
}

/// What one run record written during a suite run cost.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordBoots {
    pub comparison: String,
    pub path: PathBuf,
    /// Boots that gave a sample.
    pub boots: usize,
    /// Boots that ran and gave none.
    pub rejected: usize,
    /// The test that wrote it (nextest's binary id and test name), when nextest ran it.
    pub test: Option<(String, String)>,
}

/// The records under `results` whose files were last written between `start` and `end` (Unix
/// seconds); a directory that does not exist has none.
pub(crate) fn records_between(results: &Path, start: f64, end: f64) -> Result<Vec<RecordBoots>> {
    if !results.is_dir() {
        return Ok(Vec::new());
    }
    let files = match crate::report::merge::record_files(&[results.to_path_buf()]) {
        Ok(files) => files,
        // An empty results directory.
        Err(_) => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for path in files {
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        if !modified.is_some_and(|t| t >= start && t <= end) {
            continue;
        }
        let record = crate::report::RunRecord::read_json(&path)?;
        out.push(RecordBoots {
            comparison: record.comparison().name().to_string(),
            boots: record.boots().len(),
            rejected: record.rejected.len(),
            test: record
                .manifest
                .test
                .as_ref()
                .map(|t| (t.binary_id.clone(), t.test.clone())),
            path,
        });
    }
    out.sort_by(|a, b| a.comparison.cmp(&b.comparison).then(a.path.cmp(&b.path)));
    Ok(out)
}

/// Parses a nextest JUnit report.
pub(crate) fn parse_junit(xml: &str) -> Result<JunitRun> {
    let doc = crate::report::junit::parse(xml)?;
    let root = doc.root_element();
    let wall_s = number(root, "time")?;
    let started_unix = root
        .attribute("timestamp")
        .and_then(parse_rfc3339)
        .context("<testsuites> has no readable timestamp")?;
    let mut tests = Vec::new();
    for suite in root.children().filter(|n| n.has_tag_name("testsuite")) {
        let binary = suite.attribute("name").unwrap_or("?").to_string();
        for case in suite.children().filter(|n| n.has_tag_name("testcase")) {
            let has = |tag: &str| case.children().any(|c| c.has_tag_name(tag));
            let outcome = if has("skipped") {
                "skipped"
            } else if has("failure") || has("error") {
                "failed"
            } else if has("flakyFailure") || has("flakyError") {
                "flaky"
            } else {
                "passed"
            };
            tests.push(TestTime {
                binary: binary.clone(),
                name: case.attribute("name").unwrap_or("?").to_string(),
                seconds: number(case, "time").unwrap_or(0.0),
                outcome,
            });
        }
    }
    Ok(JunitRun {
        started_unix,
        wall_s,
        tests,
    })
}

fn number(node: roxmltree::Node, attribute: &str) -> Result<f64> {
    let text = node
        .attribute(attribute)
        .with_context(|| format!("<{}> has no {attribute} attribute", node.tag_name().name()))?;
    text.parse()
        .with_context(|| format!("<{}> {attribute}={text:?}", node.tag_name().name()))
}

/// Unix seconds of an RFC 3339 time (`2026-12-01T04:09:35.123+01:00`, or with `Z`).
pub(crate) fn parse_rfc3339(text: &str) -> Option<f64> {
    let (date, rest) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (clock, offset_s) = if let Some(c) = rest.strip_suffix('Z') {
        (c, 0)
    } else {
        let at = rest.rfind(['+', '-'])?;
        let (c, off) = rest.split_at(at);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (h, m) = off[1..].split_once(':')?;
        (
            c,
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60),
        )
    };
    let mut c = clock.splitn(3, ':');
    let (h, m, s) = (
        c.next()?.parse::<i64>().ok()?,
        c.next()?.parse::<i64>().ok()?,
        c.next()?.parse::<f64>().ok()?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some((days * 86400 + h * 3600 + m * 60 - offset_s) as f64 + s)
}

/// `YYYY-MM-DD HH:MM UTC` of Unix seconds.
pub(crate) fn utc_text(unix: f64) -> String {
    let secs = unix.floor() as i64;
    let days = secs.div_euclid(86400);
    let tod = secs.rem_euclid(86400);
    // civil_from_days, the inverse of the above.
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        tod / 3600,
        tod % 3600 / 60
    )
}

/// Where nextest writes `profile`'s report: `<target dir>/nextest/<profile>/junit.xml`, the
/// target dir being `CARGO_TARGET_DIR` or that of the workspace this lab was built from (not
/// `LAB_REPO_DIR`'s: that one names where recipes are read, not where tests ran).
pub(crate) fn junit_path(profile: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
            lab.parent().unwrap_or(lab).join("target")
        });
    target.join("nextest").join(profile).join("junit.xml")
}

/// The run a report describes, with the kernels `cache` built and the records written under
/// `results` during it.
pub(crate) fn read(profile: &str, path: &Path, cache: &Cache, results: &Path) -> Result<SuiteRun> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let run = parse_junit(&text).with_context(|| format!("parsing {}", path.display()))?;
    let end = run.started_unix + run.wall_s;
    let kernels_built = crate::kernel::list(cache)?
        .into_iter()
        .filter(|k| {
            let t = k.manifest.build.finished_at as f64;
            t >= run.started_unix && t <= end
        })
        .map(|k| (k.manifest.recipe, k.manifest.build.seconds))
        .collect();
    Ok(SuiteRun {
        profile: profile.to_string(),
        path: path.to_path_buf(),
        started_unix: run.started_unix,
        wall_s: run.wall_s,
        tests: run.tests,
        kernels_built,
        records: records_between(results, run.started_unix, end)?,
    })
}

/// The last run of every profile in [`PROFILES`] that left a report.
pub(crate) fn last_runs(cache: &Cache, results: &Path) -> Result<Vec<SuiteRun>> {
    PROFILES
        .iter()
        .map(|p| (p, junit_path(p)))
        .filter(|(_, path)| path.is_file())
        .map(|(p, path)| read(p, &path, cache, results))
        .collect()
}

/// `lab bench suite`: the run `profile`'s report describes, else the last run of every profile
/// that left one; an error naming where it looked when there is none.
pub fn reports(cache: &Cache, profile: Option<&str>) -> Result<Vec<SuiteRun>> {
    let results = crate::host::results_root();
    let runs = match profile {
        Some(p) => vec![read(p, &junit_path(p), cache, &results)?],
        None => last_runs(cache, &results)?,
    };
    if runs.is_empty() {
        anyhow::bail!(
            "no nextest JUnit report (looked for {}): run `cargo nextest run --workspace` first",
            PROFILES
                .iter()
                .map(|p| junit_path(p).display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(runs)
}

/// Each run's `SuiteRun::render`, a blank line between them.
pub fn render_all(runs: &[SuiteRun], slowest: usize) -> String {
    runs.iter()
        .map(|run| run.render(slowest))
        .collect::<Vec<_>>()
        .join("\n")
}

impl SuiteRun {
    /// Whether kernels were built during the run (see the module's documentation).
    pub(crate) fn is_cold(&self) -> bool {
        !self.kernels_built.is_empty()
    }

    pub(crate) fn started_text(&self) -> String {
        utc_text(self.started_unix)
    }

    /// Test-time sums per binary, largest first.
    pub(crate) fn binaries(&self) -> Vec<BinarySum> {
        let mut sums: Vec<BinarySum> = Vec::new();
        for t in &self.tests {
            match sums.iter_mut().find(|s| s.binary == t.binary) {
                Some(s) => {
                    s.tests += 1;
                    s.seconds += t.seconds;
                }
                None => sums.push(BinarySum {
                    binary: t.binary.clone(),
                    tests: 1,
                    seconds: t.seconds,
                }),
            }
        }
        sums.sort_by(|a, b| {
            b.seconds
                .total_cmp(&a.seconds)
                .then(a.binary.cmp(&b.binary))
        });
        sums
    }

    /// The boots (with a sample or refused) of every record test `name` of `binary` wrote.
    pub(crate) fn boots_of(&self, binary: &str, name: &str) -> usize {
        self.records
            .iter()
            .filter(|r| {
                r.test
                    .as_ref()
                    .is_some_and(|(b, t)| b == binary && t == name)
            })
            .map(|r| r.boots + r.rejected)
            .sum()
    }

    /// A run of `tests` started at `started_unix` that took `wall_s`, no kernel built, no
    /// record written.
    #[cfg(test)]
    pub(crate) fn for_tests(started_unix: f64, wall_s: f64, tests: Vec<TestTime>) -> SuiteRun {
        SuiteRun {
            profile: "ci".into(),
            path: PathBuf::from("junit.xml"),
            started_unix,
            wall_s,
            tests,
            kernels_built: Vec::new(),
            records: Vec::new(),
        }
    }

    /// The `n` slowest tests, slowest first.
    pub(crate) fn slowest(&self, n: usize) -> Vec<&TestTime> {
        let mut tests: Vec<&TestTime> = self.tests.iter().collect();
        tests.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.name.cmp(&b.name)));
        tests.truncate(n);
        tests
    }

    /// The report: wall time, warm or cold, per-binary sums, the `slowest` slowest tests.
    pub(crate) fn render(&self, slowest: usize) -> String {
        let count = |o: &str| self.tests.iter().filter(|t| t.outcome == o).count();
        let mut out = format!(
            "suite run, nextest profile {} ({}), started {}:\n",
            self.profile,
            self.path.display(),
            self.started_text()
        );
        let _ = writeln!(
            out,
            "  wall {:.1} s = {}; {} tests: {} passed, {} failed, {} flaky, {} skipped",
            self.wall_s,
            super::minutes(self.wall_s),
            self.tests.len(),
            count("passed"),
            count("failed"),
            count("flaky"),
            count("skipped")
        );
        if self.is_cold() {
            let built: Vec<String> = self
                .kernels_built
                .iter()
                .map(|(r, s)| format!("{r} {s:.0} s"))
                .collect();
            let _ = writeln!(
                out,
                "  cold: kernels built during the run: {}",
                built.join(", ")
            );
        } else {
            out += "  warm: no kernel was built during the run\n";
        }
        out += "  per binary (sum of test times; tests run side by side):\n";
        for b in self.binaries() {
            let _ = writeln!(
                out,
                "    {:<36} {:>4} tests {:>9.1} s",
                b.binary, b.tests, b.seconds
            );
        }
        if !self.records.is_empty() {
            let boots: usize = self.records.iter().map(|r| r.boots).sum();
            let rejected: usize = self.records.iter().map(|r| r.rejected).sum();
            let _ = writeln!(
                out,
                "  boots of the {} comparisons recorded during the run: {} ({boots} with a \
                 sample, {rejected} refused)",
                self.records.len(),
                boots + rejected
            );
            for r in &self.records {
                let _ = writeln!(
                    out,
                    "    {:<36} {:>3} boots{}",
                    r.comparison,
                    r.boots,
                    if r.rejected > 0 {
                        format!(" (+{} refused)", r.rejected)
                    } else {
                        String::new()
                    }
                );
            }
        }
        let _ = writeln!(out, "  slowest tests:");
        for t in self.slowest(slowest) {
            let mark = if t.outcome == "passed" {
                String::new()
            } else {
                format!(" ({})", t.outcome)
            };
            let _ = writeln!(
                out,
                "    {:>9.1} s  {} {}{mark}",
                t.seconds, t.binary, t.name
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape nextest writes (trimmed from a real report).
    const FIXTURE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="5" skipped="1" failures="1" errors="0" uuid="0e4b7c43-1d7e-4c56-8c9f-3b1f0f0a9e11" timestamp="2026-12-01T04:00:00.500+01:00" time="1803.25">
    <testsuite name="lab-scenarios::vm" tests="3" disabled="0" errors="0" failures="1">
        <testcase name="boots_and_runs" classname="lab-scenarios::vm" timestamp="2026-12-01T04:00:10.000+01:00" time="41.5">
        </testcase>
        <testcase name="no_qemu_survives &lt;drop&gt;" classname="lab-scenarios::vm" timestamp="2026-12-01T04:00:10.000+01:00" time="12.25">
            <failure type="test failure" message="assertion failed">thread panicked</failure>
            <system-out>&lt;testcase name="fake"&gt;</system-out>
        </testcase>
        <testcase name="kvm_only" classname="lab-scenarios::vm" time="0">
            <skipped/>
        </testcase>
    </testsuite>
    <testsuite name="lab-scenarios::dma_wakeup" tests="1" disabled="0" errors="0" failures="0">
        <testcase name="cross_llc" classname="lab-scenarios::dma_wakeup" time="598.0">
        </testcase>
    </testsuite>
    <testsuite name="lab" tests="1" disabled="0" errors="0" failures="0">
        <testcase name="cache::tests::concurrent_requests_build_once" classname="lab" time="0.105">
            <flakyFailure type="test failure" message="x"/>
        </testcase>
    </testsuite>
</testsuites>
"#;

    fn fixture_run() -> SuiteRun {
        let run = parse_junit(FIXTURE).unwrap();
        SuiteRun {
            profile: "default".into(),
            path: PathBuf::from("target/nextest/default/junit.xml"),
            started_unix: run.started_unix,
            wall_s: run.wall_s,
            tests: run.tests,
            kernels_built: vec![],
            records: vec![],
        }
    }

    #[test]
    fn junit_report_gives_wall_time_and_every_test() {
        let run = parse_junit(FIXTURE).unwrap();
        assert_eq!(run.wall_s, 1803.25);
        // 04:00:00.5 at +01:00 is 03:00:00.5 UTC.
        assert_eq!(utc_text(run.started_unix), "2026-12-01 03:00 UTC");
        assert_eq!(run.started_unix.fract(), 0.5);
        assert_eq!(run.tests.len(), 5);
        let outcomes: Vec<&str> = run.tests.iter().map(|t| t.outcome).collect();
        assert_eq!(outcomes, ["passed", "failed", "skipped", "passed", "flaky"]);
        assert_eq!(run.tests[1].name, "no_qemu_survives <drop>");
        assert_eq!(run.tests[3].binary, "lab-scenarios::dma_wakeup");
        assert!(parse_junit("<testsuite/>").is_err());
        assert!(parse_junit("not xml").is_err());
    }

    #[test]
    fn rfc3339_times_agree_with_unix_time() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_rfc3339("2000-03-01T00:00:00Z"), Some(951868800.0));
        assert_eq!(
            parse_rfc3339("2026-12-01T04:09:35-02:30"),
            Some(1796107175.0)
        );
        assert_eq!(parse_rfc3339("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339("yesterday"), None);
        assert_eq!(utc_text(1796107175.0), "2026-12-01 06:39 UTC");
        assert_eq!(utc_text(951868800.0 - 1.0), "2000-02-29 23:59 UTC");
    }

    #[test]
    fn report_sums_per_binary_and_lists_the_slowest() {
        let run = fixture_run();
        let sums = run.binaries();
        assert_eq!(sums[0].binary, "lab-scenarios::dma_wakeup");
        assert_eq!((sums[1].tests, sums[1].seconds), (3, 53.75));
        let slowest: Vec<&str> = run.slowest(2).iter().map(|t| t.name.as_str()).collect();
        assert_eq!(slowest, ["cross_llc", "boots_and_runs"]);
        assert!(!run.is_cold());
        let text = run.render(3);
        let expected = "\
suite run, nextest profile default (target/nextest/default/junit.xml), started 2026-12-01 03:00 UTC:
  wall 1803.2 s = 30 min 3 s; 5 tests: 2 passed, 1 failed, 1 flaky, 1 skipped
  warm: no kernel was built during the run
  per binary (sum of test times; tests run side by side):
    lab-scenarios::dma_wakeup               1 tests     598.0 s
    lab-scenarios::vm                       3 tests      53.8 s
    lab                                     1 tests       0.1 s
  slowest tests:
        598.0 s  lab-scenarios::dma_wakeup cross_llc
         41.5 s  lab-scenarios::vm boots_and_runs
         12.2 s  lab-scenarios::vm no_qemu_survives <drop> (failed)
";
        assert_eq!(text, expected);
    }

    #[test]
    fn several_runs_are_shown_with_a_blank_line_between() {
        let one = fixture_run().render(1);
        let mut ci = fixture_run();
        ci.profile = "ci".into();
        assert_eq!(
            render_all(&[fixture_run(), ci.clone()], 1),
            format!("{one}\n{}", ci.render(1))
        );
        assert_eq!(render_all(&[fixture_run()], 1), one);
    }

    #[test]
    fn boots_are_counted_from_the_records_written_during_the_run() {
        use crate::report::{Comparison, Direction, Manifest, RejectedBoot, RunRecord};
        let results = tempfile::tempdir().unwrap();
        let write = |name: &str, boots: usize, rejected: usize| {
            let mut c = Comparison::new(name, ["a", "b"]).unwrap();
            c.add_metric("m", "", Direction::Neutral, 0.0).unwrap();
            let mut r = RunRecord::new(c, Manifest::default()).unwrap();
            for i in 0..boots {
                let v = if i % 2 == 0 { "a" } else { "b" };
                r.record_boot(v, [("m", i as f64)], serde_json::Value::Null)
                    .unwrap();
            }
            for _ in 0..rejected {
                r.rejected.push(RejectedBoot {
                    variant: "a".into(),
                    cause: "WARNING".into(),
                    dir: "boots/x".into(),
                });
            }
            let dir = results.path().join(name).join("run");
            r.write_json_to(&dir.join("record.json")).unwrap();
        };
        write("s1", 10, 1);
        write("s2", 8, 0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let mut run = fixture_run();
        run.records = records_between(results.path(), now - 60.0, now + 60.0).unwrap();
        assert_eq!(run.records.len(), 2);
        let text = run.render(1);
        assert!(
            text.contains("boots of the 2 comparisons recorded during the run: 19 (18 with a sample, 1 refused)"),
            "{text}"
        );
        assert!(
            text.contains("s1") && text.contains("(+1 refused)"),
            "{text}"
        );
        // Records from before the run are not its boots; no results directory has none.
        assert!(records_between(results.path(), now + 60.0, now + 120.0)
            .unwrap()
            .is_empty());
        assert!(records_between(&results.path().join("none"), 0.0, now)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn kernels_built_during_the_run_make_it_cold() {
        let mut run = fixture_run();
        run.kernels_built = vec![("v6.12".into(), 918.6)];
        assert!(run.is_cold());
        assert!(run
            .render(1)
            .contains("  cold: kernels built during the run: v6.12 919 s\n"));
    }
}
