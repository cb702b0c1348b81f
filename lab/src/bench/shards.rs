//! `lab bench shards`: splits the test suite into CI shards of about equal time, from the test
//! times of earlier runs' JUnit reports (one per shard of the last CI run, or one local run).
//!
//! nextest's own `--partition count:K/N` deals tests out by count, so one shard got every
//! single-test VM binary; `hash:` is no better. Neither knows durations, so the shards here
//! are nextest filtersets: each shard runs the tests it was given, and the last also runs every
//! test no report has seen (a new test), so nothing is left out. Longest first onto the
//! lightest shard (LPT), which puts the slowest shard within 4/3 of the best possible split.
//!
//! A binary whose tests together take under a twentieth of a shard's share stays whole (the
//! unit-test binary's hundreds of tests would make a filterset of hundreds of names); the
//! others are split into single tests.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::suite::TestTime;
use crate::cache::Cache;

/// A binary smaller than this share of a shard stays whole.
const WHOLE_BINARY_SHARE: f64 = 0.05;

/// What a shard runs: whole binaries and single tests of others.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shard {
    /// Binaries run whole (nextest binary ids, `lab`, `lab-scenarios::vm`).
    pub binaries: Vec<String>,
    /// Single tests: (binary id, test name).
    pub tests: Vec<(String, String)>,
    /// The reports' time for all of it, seconds.
    pub seconds: f64,
    /// How many test cases the reports had for it.
    pub cases: usize,
}

/// The suite split into shards.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPlan {
    /// The shards, in order: shard K of the CI matrix is `shards[K - 1]`.
    pub shards: Vec<Shard>,
}

/// One unit of work the planner places: a whole binary or one test.
struct Unit {
    binary: String,
    test: Option<String>,
    seconds: f64,
    cases: usize,
}

/// Splits `tests` (several reports' cases; a test seen twice counts with its longest time) into
/// `count` shards.
pub(crate) fn plan(tests: &[TestTime], count: usize) -> Result<ShardPlan> {
    if count == 0 {
        bail!("--shards must be at least 1");
    }
    if tests.is_empty() {
        bail!("the JUnit reports name no test");
    }
    // Longest time per (binary, test): a report of a failed or retried run still counts.
    // Setup scripts (`@setup-script:prepare`) are in the reports too; every shard runs them.
    let mut longest: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for t in tests.iter().filter(|t| !t.binary.starts_with('@')) {
        let e = longest
            .entry((t.binary.as_str(), t.name.as_str()))
            .or_default();
        *e = e.max(t.seconds);
    }
    let total: f64 = longest.values().sum();
    let share = total / count as f64;
    let mut per_binary: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
    for ((binary, name), seconds) in &longest {
        per_binary.entry(binary).or_default().push((name, *seconds));
    }
    let mut units = Vec::new();
    for (binary, cases) in per_binary {
        let sum: f64 = cases.iter().map(|(_, s)| s).sum();
        if sum < share * WHOLE_BINARY_SHARE {
            units.push(Unit {
                binary: binary.to_string(),
                test: None,
                seconds: sum,
                cases: cases.len(),
            });
        } else {
            units.extend(cases.into_iter().map(|(name, seconds)| Unit {
                binary: binary.to_string(),
                test: Some(name.to_string()),
                seconds,
                cases: 1,
            }));
        }
    }
    // Longest first, ties by name so the plan is the same on every machine.
    units.sort_by(|a, b| {
        b.seconds
            .total_cmp(&a.seconds)
            .then_with(|| a.binary.cmp(&b.binary))
            .then_with(|| a.test.cmp(&b.test))
    });
    let mut shards = vec![Shard::default(); count];
    for unit in units {
        let lightest = (0..count)
            .min_by(|a, b| shards[*a].seconds.total_cmp(&shards[*b].seconds))
            .unwrap_or(0);
        let shard = &mut shards[lightest];
        shard.seconds += unit.seconds;
        shard.cases += unit.cases;
        match unit.test {
            Some(test) => shard.tests.push((unit.binary, test)),
            None => shard.binaries.push(unit.binary),
        }
    }
    for shard in &mut shards {
        shard.binaries.sort();
        shard.tests.sort();
    }
    Ok(ShardPlan { shards })
}

/// `lab bench shards`: the plan from `junit` (default: the last local runs' reports), only for
/// the binaries `binaries` lists when given (`cargo nextest list --list-type binaries-only
/// --message-format oneline`), written as `shard-K.filterset` into `out` when given; the plan's
/// table.
pub fn plan_from_reports(
    cache: &Cache,
    junit: &[PathBuf],
    binaries: Option<&Path>,
    count: usize,
    out: Option<&Path>,
) -> Result<String> {
    let mut tests = Vec::new();
    let mut sources = Vec::new();
    if junit.is_empty() {
        for run in super::suite::reports(cache, None)? {
            sources.push(run.path.display().to_string());
            tests.extend(run.tests);
        }
    } else {
        for path in junit {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let run = super::suite::parse_junit(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            sources.push(path.display().to_string());
            tests.extend(run.tests);
        }
    }
    let mut dropped = 0;
    if let Some(path) = binaries {
        // nextest refuses a filterset naming a binary it does not have (one renamed or removed
        // since the reports): only the binaries the suite has now are named.
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let known: std::collections::BTreeSet<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if known.is_empty() {
            bail!("{}: lists no test binary", path.display());
        }
        let before = tests.len();
        tests.retain(|t| known.contains(t.binary.as_str()) || t.binary.starts_with('@'));
        dropped = before - tests.len();
    }
    let plan = plan(&tests, count)?;
    let mut text = format!("test times from {}\n", sources.join(", "));
    if dropped > 0 {
        let _ = writeln!(
            text,
            "{dropped} test cases of binaries the suite no longer has left out (the last shard runs whatever is new)"
        );
    }
    text.push_str(&plan.render());
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for i in 0..count {
            let path = dir.join(format!("shard-{}.filterset", i + 1));
            std::fs::write(&path, plan.filterset(i) + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        let _ = writeln!(text, "wrote {count} filtersets to {}", dir.display());
    }
    Ok(text)
}

impl Shard {
    /// The nextest filterset of what this shard was given (`none()` when nothing).
    fn own_filterset(&self) -> String {
        let mut parts: Vec<String> = self
            .binaries
            .iter()
            .map(|b| format!("binary_id(={b})"))
            .collect();
        let mut by_binary: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (binary, test) in &self.tests {
            by_binary.entry(binary).or_default().push(test);
        }
        for (binary, tests) in by_binary {
            let names: Vec<String> = tests.iter().map(|t| format!("test(={t})")).collect();
            parts.push(format!("(binary_id(={binary}) & ({}))", names.join(" | ")));
        }
        if parts.is_empty() {
            "none()".to_string()
        } else {
            parts.join(" | ")
        }
    }
}

impl ShardPlan {
    /// Shard `index`'s filterset (0-based); the last one also takes every test no other shard
    /// names, so a test the reports never saw still runs.
    pub fn filterset(&self, index: usize) -> String {
        let last = self.shards.len() - 1;
        if index < last {
            return self.shards[index].own_filterset();
        }
        let others: Vec<String> = self.shards[..last]
            .iter()
            .map(Shard::own_filterset)
            .filter(|f| f != "none()")
            .collect();
        if others.is_empty() {
            return "all()".to_string();
        }
        format!("not ({})", others.join(" | "))
    }

    /// The mean shard time, seconds.
    pub fn mean_seconds(&self) -> f64 {
        self.shards.iter().map(|s| s.seconds).sum::<f64>() / self.shards.len() as f64
    }

    /// The slowest shard's time over the mean (1.0: perfectly even).
    pub fn imbalance(&self) -> f64 {
        let max = self.shards.iter().map(|s| s.seconds).fold(0.0, f64::max);
        let mean = self.mean_seconds();
        if mean > 0.0 {
            max / mean
        } else {
            1.0
        }
    }

    /// A table of the shards: time, share of the mean, what each runs.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{} shards from the reports' test times (sum of test times per shard; tests run \
             side by side, so a shard's wall time is less):\n",
            self.shards.len()
        );
        for (i, s) in self.shards.iter().enumerate() {
            let _ = writeln!(
                out,
                "  shard {}: {:7.1} s  {:4.2}x mean  {} whole binaries, {} single tests, {} cases",
                i + 1,
                s.seconds,
                if self.mean_seconds() > 0.0 {
                    s.seconds / self.mean_seconds()
                } else {
                    1.0
                },
                s.binaries.len(),
                s.tests.len(),
                s.cases
            );
        }
        let _ = writeln!(
            out,
            "slowest shard {:.2}x the mean ({:.1} s); the last shard also runs tests no report names",
            self.imbalance(),
            self.mean_seconds()
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(binary: &str, name: &str, seconds: f64) -> TestTime {
        TestTime {
            binary: binary.into(),
            name: name.into(),
            seconds,
            outcome: "passed",
        }
    }

    /// A suite shaped like the lab's: a unit-test binary of many quick tests and VM binaries
    /// of one to a few slow tests each.
    fn suite() -> Vec<TestTime> {
        let mut tests: Vec<TestTime> = (0..300)
            .map(|i| t("lab", &format!("unit::t{i}"), 0.05))
            .collect();
        for (binary, times) in [
            ("lab-scenarios::dma_wakeup", &[600.0, 300.0, 200.0][..]),
            ("lab-scenarios::its_balance", &[130.0][..]),
            ("lab-scenarios::irq_spread", &[200.0][..]),
            ("lab-scenarios::numa_scan", &[400.0][..]),
            (
                "lab-scenarios::vm",
                &[20.0, 25.0, 56.0, 17.0, 11.0, 25.0][..],
            ),
            ("lab-scenarios::topology", &[90.0, 60.0, 45.0][..]),
            ("lab-scenarios::kernels", &[150.0, 40.0][..]),
        ] {
            for (i, s) in times.iter().enumerate() {
                tests.push(t(binary, &format!("case{i}"), *s));
            }
        }
        tests
    }

    #[test]
    fn longest_first_onto_the_lightest_shard_balances_the_lab_suite() {
        let plan = plan(&suite(), 4).unwrap();
        assert_eq!(plan.shards.len(), 4);
        // 2384 s in all, 596 a shard; the 600 s test alone is its shard's 1.01x.
        assert!(plan.imbalance() <= 1.3, "{}", plan.render());
        let total: f64 = plan.shards.iter().map(|s| s.seconds).sum();
        assert!((total - 2384.0).abs() < 1e-6, "{total}");
        // The unit-test binary (15 s, under a twentieth of a shard) stays whole.
        assert!(plan.shards.iter().any(|s| s.binaries == ["lab"]));
        assert_eq!(plan.shards.iter().map(|s| s.cases).sum::<usize>(), 317);
    }

    #[test]
    fn every_test_is_in_exactly_one_shard_and_the_last_takes_the_unknown() {
        let plan = plan(&suite(), 3).unwrap();
        let mut seen = 0;
        for s in &plan.shards {
            seen += s.tests.len();
        }
        assert_eq!(seen, 17);
        let first = plan.filterset(0);
        assert!(!first.starts_with("not"), "{first}");
        let last = plan.filterset(2);
        assert!(last.starts_with("not ("), "{last}");
        // The last shard's filter excludes exactly the other shards' own parts.
        assert!(last.contains(&plan.shards[0].own_filterset()));
        assert!(last.contains(&plan.shards[1].own_filterset()));
    }

    #[test]
    fn filtersets_name_binaries_and_tests_exactly() {
        let plan = plan(
            &[
                t("lab-scenarios::vm", "slow_one", 100.0),
                t("lab-scenarios::vm", "slow_two", 90.0),
                t("lab", "quick", 0.1),
            ],
            2,
        )
        .unwrap();
        assert_eq!(
            plan.filterset(0),
            "(binary_id(=lab-scenarios::vm) & (test(=slow_one)))"
        );
        assert_eq!(
            plan.filterset(1),
            "not ((binary_id(=lab-scenarios::vm) & (test(=slow_one))))"
        );
        assert_eq!(plan.shards[1].binaries, ["lab"]);
    }

    #[test]
    fn one_shard_runs_everything_and_nonsense_is_refused() {
        let plan = plan(&[t("lab", "a", 1.0)], 1).unwrap();
        assert_eq!(plan.filterset(0), "all()");
        assert!(super::plan(&[t("lab", "a", 1.0)], 0).is_err());
        assert!(super::plan(&[], 2).is_err());
    }

    #[test]
    fn a_test_in_two_reports_counts_once_with_its_longest_time() {
        let plan = plan(
            &[
                t("b", "x", 10.0),
                t("b", "x", 30.0),
                t("b", "y", 20.0),
                t("@setup-script:prepare", "prepare", 300.0),
            ],
            2,
        )
        .unwrap();
        let total: f64 = plan.shards.iter().map(|s| s.seconds).sum();
        assert_eq!(total, 50.0);
    }

    #[test]
    fn binaries_the_suite_no_longer_has_are_left_out_of_the_filtersets() {
        let dir = tempfile::tempdir().unwrap();
        let junit = dir.path().join("junit.xml");
        std::fs::write(
            &junit,
            r#"<testsuites name="x" tests="3" failures="0" errors="0" time="10.0" timestamp="2026-12-03T10:00:00.000+00:00">
<testsuite name="lab-scenarios::vm" tests="1" time="5.0"><testcase name="a" time="5.0"/></testsuite>
<testsuite name="lab-scenarios::gone" tests="1" time="4.0"><testcase name="b" time="4.0"/></testsuite>
<testsuite name="@setup-script:prepare" tests="1" time="1.0"><testcase name="prepare" time="1.0"/></testsuite>
</testsuites>"#,
        )
        .unwrap();
        let binaries = dir.path().join("binaries.txt");
        std::fs::write(&binaries, "lab\nlab-scenarios::vm\n").unwrap();
        let cache = Cache::at(dir.path().join("cache")).unwrap();
        let out = dir.path().join("shards");
        let text = plan_from_reports(&cache, &[junit], Some(&binaries), 2, Some(&out)).unwrap();
        assert!(
            text.contains("1 test cases of binaries the suite no longer has"),
            "{text}"
        );
        let first = std::fs::read_to_string(out.join("shard-1.filterset")).unwrap();
        assert_eq!(first.trim(), "(binary_id(=lab-scenarios::vm) & (test(=a)))");
        let last = std::fs::read_to_string(out.join("shard-2.filterset")).unwrap();
        assert!(!last.contains("gone") && !last.contains('@'), "{last}");
    }
}
