//! What a suite run cost against what it may: the summary `.ci/run` prints at its end (`lab
//! bench suite --tier ci --started UNIX`). A report,
//! never a timed assertion: it names the phases (cargo and setup before nextest started, the
//! setup script `prepare`, the tests), the slowest tests with the boots they took, the share of
//! CI's limit used, every test over [`TEST_BUDGET_S`] and a tier over its budget.

use std::fmt::Write as _;

use super::suite::SuiteRun;

/// No test should take longer than this on the slower 2-core host.
pub const TEST_BUDGET_S: f64 = 5.0 * 60.0;
/// CI drops a submission whose `.ci/run` takes longer than this.
pub const CI_LIMIT_S: f64 = 90.0 * 60.0;

/// Which run of the suite: what it holds and what it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tier {
    /// `lab test --quick`: the unit tests and the machine's own VM tests, the base kernel
    /// cached, compile included.
    Quick,
    /// `.ci/run`: everything, cold (no `~/.cache/lab`, no `target/`).
    Ci,
}

impl Tier {
    /// The most the tier may take on the slower 2-core host, in seconds.
    pub fn budget_s(self) -> f64 {
        match self {
            Tier::Quick => 5.0 * 60.0,
            Tier::Ci => 45.0 * 60.0,
        }
    }

    /// The nextest profile the tier runs.
    pub fn profile(self) -> &'static str {
        match self {
            Tier::Quick => super::suite::QUICK_PROFILE,
            Tier::Ci => "ci",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tier::Quick => "quick tier",
            Tier::Ci => "CI",
        }
    }
}

/// The machine a run's summary is written on: the kind of host decides what a run may take
/// (the goals are for 2 cores; the AMD EPYC hosts compile about 2x slower than the Intel Xeon
/// ones), so a job's own summary names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The CPUs this process may run on.
    pub cpus: usize,
    /// `/proc/cpuinfo`'s model name ("unknown" where it has none).
    pub model: String,
}

impl Host {
    /// This machine: its CPUs and `/proc/cpuinfo`'s model name.
    pub fn this() -> Host {
        Host {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            model: crate::toolchain::host_cpu_model(),
        }
    }
}

/// The setup script's test case in nextest's report.
const PREPARE: &str = "@setup-script:prepare";

/// The summary of `run` as `tier`, the whole job having started at `started` (Unix seconds) and
/// ended at `ended`; with `started` `None`, the nextest run alone. `host`: the machine it ran
/// on, where the caller knows it (the job's own summary, written on its host at its end).
pub fn summary(
    run: &SuiteRun,
    tier: Tier,
    started: Option<f64>,
    ended: f64,
    slowest: usize,
    host: Option<&Host>,
) -> String {
    let mut out = String::new();
    // Without the job's start (a developer asking later), the run alone: nothing before or after.
    let (started, ended) = match started {
        Some(s) => (s, ended),
        None => (run.started_unix, run.started_unix + run.wall_s),
    };
    let total = (ended - started).max(run.wall_s);
    let before = (run.started_unix - started).max(0.0);
    let prepare: f64 = run
        .tests
        .iter()
        .filter(|t| t.binary == PREPARE)
        .map(|t| t.seconds)
        .sum();
    let tests = (run.wall_s - prepare).max(0.0);
    let after = (total - before - run.wall_s).max(0.0);
    let _ = writeln!(
        out,
        "suite cost, {} ({}): {} in all, {:.0}% of CI's {} limit",
        tier.name(),
        if run.is_cold() { "cold" } else { "warm" },
        super::minutes(total),
        100.0 * total / CI_LIMIT_S,
        super::minutes(CI_LIMIT_S)
    );
    if let Some(host) = host {
        let _ = writeln!(out, "  host: {} CPUs, {}", host.cpus, host.model);
    }
    let _ = writeln!(
        out,
        "  phases: cargo and set-up {}, prepare (kernels, images, QEMU) {}, tests {}, after {}",
        super::minutes(before),
        super::minutes(prepare),
        super::minutes(tests),
        super::minutes(after)
    );
    let _ = writeln!(
        out,
        "  the {slowest} slowest tests, with the boots they took:"
    );
    for t in run
        .slowest(slowest + 1)
        .iter()
        .filter(|t| t.binary != PREPARE)
        .take(slowest)
    {
        let boots = run.boots_of(&t.binary, &t.name);
        let _ = writeln!(
            out,
            "    {:>7.1} s  {:>4}  {} {}{}",
            t.seconds,
            if boots > 0 {
                format!("{boots}b")
            } else {
                "-".to_string()
            },
            t.binary,
            t.name,
            if t.outcome == "passed" {
                String::new()
            } else {
                format!(" ({})", t.outcome)
            }
        );
    }
    let over: Vec<String> = run
        .tests
        .iter()
        .filter(|t| t.binary != PREPARE && t.seconds > TEST_BUDGET_S)
        .map(|t| format!("{} {} ({})", t.binary, t.name, super::minutes(t.seconds)))
        .collect();
    if over.is_empty() {
        let _ = writeln!(
            out,
            "  no test over {} (the most one may take)",
            super::minutes(TEST_BUDGET_S)
        );
    } else {
        let _ = writeln!(
            out,
            "  OVER {} a test: {}",
            super::minutes(TEST_BUDGET_S),
            over.join("; ")
        );
    }
    let budget = tier.budget_s();
    let _ = writeln!(
        out,
        "  {} the {}'s budget of {} ({:.0}% of it)",
        if total <= budget { "within" } else { "OVER" },
        tier.name(),
        super::minutes(budget),
        100.0 * total / budget
    );
    out
}

#[cfg(test)]
mod tests {
    use super::super::suite::{SuiteRun, TestTime};
    use super::*;

    fn test(binary: &str, name: &str, seconds: f64) -> TestTime {
        TestTime {
            binary: binary.into(),
            name: name.into(),
            seconds,
            outcome: "passed",
        }
    }

    #[test]
    fn the_summary_names_the_phases_the_slow_tests_and_the_budgets() {
        let run = SuiteRun::for_tests(
            1000.0,
            1800.0,
            vec![
                test(PREPARE, "prepare", 600.0),
                test("lab-scenarios::bisect", "long", 400.0),
                test("lab", "quick", 1.0),
            ],
        );
        let host = Host {
            cpus: 2,
            model: "Intel(R) Xeon(R) Processor".into(),
        };
        let text = summary(&run, Tier::Ci, Some(700.0), 2900.0, 2, Some(&host));
        assert!(
            text.contains("36 min 40 s in all, 41% of CI's 90 min 0 s limit"),
            "{text}"
        );
        assert!(
            text.contains("\n  host: 2 CPUs, Intel(R) Xeon(R) Processor\n"),
            "{text}"
        );
        assert!(
            text.contains("cargo and set-up 5 min 0 s, prepare (kernels, images, QEMU) 10 min 0 s, tests 20 min 0 s, after 1 min 40 s"),
            "{text}"
        );
        assert!(
            text.contains("OVER 5 min 0 s a test: lab-scenarios::bisect long (6 min 40 s)"),
            "{text}"
        );
        assert!(
            text.contains("within the CI's budget of 45 min 0 s (81% of it)"),
            "{text}"
        );
        // The setup script is a phase, not a test.
        assert!(!text.contains("  600.0 s"), "{text}");
        // Without the job's start, the nextest run's own start; over the budget, said so.
        let long = SuiteRun::for_tests(1000.0, 3000.0, vec![test("lab", "quick", 1.0)]);
        let text = summary(&long, Tier::Ci, None, 4000.0, 2, None);
        assert!(text.contains("50 min 0 s in all"), "{text}");
        assert!(!text.contains("host:"), "{text}");
        assert!(text.contains("cargo and set-up 0 s"), "{text}");
        assert!(
            text.contains("OVER the CI's budget of 45 min 0 s"),
            "{text}"
        );
        assert!(text.contains("no test over 5 min 0 s"), "{text}");
        let quick = summary(&long, Tier::Quick, None, 4000.0, 2, None);
        assert!(
            quick.contains("OVER the quick tier's budget of 5 min 0 s"),
            "{quick}"
        );
    }
}
