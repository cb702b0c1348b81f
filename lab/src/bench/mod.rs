//! `lab bench ...`: the lab's speed, measured side by side and returned as tables the CLI prints
//! (never asserted in tests: the machines are shared and noisy). One module per noun:
//!
//! - [`boot`]: boot to the first command, the lab against a hand-written QEMU line;
//! - `run`: `lab run -- true` as a whole process against a hand-written QEMU line that boots
//!   the same kernel and initramfs, runs the same command and powers off;
//! - [`kernel`]: cold and one-patch kernel build times, read from the cache's manifests or
//!   measured by building into a temporary cache;
//! - [`suite`]: the test suite's wall time, per-binary sums and slowest tests, from the JUnit
//!   report of the last nextest run; [`budget`]: that run against its tier's budget;
//! - [`shards`]: CI shards of about equal time from those reports' test times;
//! - [`verdicts`]: how often the verdicts err, on simulated boots (`shapes`) decided by the
//!   lab's own code;
//! - [`bisect`](mod@bisect): how often the bisect names the right changes, its own search on
//!   simulated boots;
//! - [`resample`]: how often a scenario's verdicts come out as they did at a cap, runs drawn
//!   again from its recorded boots.
//!
//! [`Overview`] puts every row of the lab's speed targets into one table (`lab bench`).

pub mod bisect;
pub(crate) mod boot;
pub mod budget;
pub mod kernel;
mod merged;
pub mod resample;
pub(crate) mod run;
pub(crate) mod shapes;
pub mod shards;
pub mod suite;
pub mod verdicts;

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

pub use boot::{boot, BootBench};

/// Min, median and max of a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Spread {
    /// `None` for an empty sample. The median of an even count is the mean of the middle two.
    pub(crate) fn of(samples: &[f64]) -> Option<Spread> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Some(Spread {
            min: s[0],
            median,
            max: s[n - 1],
        })
    }

    pub(crate) fn of_durations(samples: &[Duration]) -> Option<Spread> {
        let secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        Spread::of(&secs)
    }

    /// `median (min-max)` with `digits` decimals.
    pub(crate) fn text(&self, digits: usize) -> String {
        format!(
            "{:.digits$} ({:.digits$}-{:.digits$})",
            self.median, self.min, self.max
        )
    }
}

/// The host's state when a benchmark ran, for reading its figures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HostNote {
    pub cores: usize,
    /// 1-minute load average at the start and at the end.
    pub load_before: Option<f64>,
    pub load_after: Option<f64>,
    /// Which build of the lab ran ("debug" or "release").
    pub build: &'static str,
}

impl HostNote {
    /// The host now; call [`HostNote::finish`] when the measurement is over.
    pub(crate) fn start() -> HostNote {
        HostNote {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load_before: load_average(),
            load_after: None,
            build: build_profile(),
        }
    }

    pub(crate) fn finish(&mut self) {
        self.load_after = load_average();
    }

    pub(crate) fn text(&self) -> String {
        let load = |l: Option<f64>| l.map_or("?".to_string(), |l| format!("{l:.2}"));
        format!(
            "{} cores, load {} at the start, {} at the end; {} build of lab",
            self.cores,
            load(self.load_before),
            load(self.load_after),
            self.build
        )
    }
}

/// The 1-minute load average.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// "debug" or "release": how this lab binary was compiled (what `lab bench run` measures, since
/// it runs this same binary).
pub(crate) fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// `lab bench run`: `run::run` with the host's state around it.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub(crate) host: HostNote,
    pub(crate) bench: run::RunBench,
}

impl RunReport {
    /// The host's line, then the measurement's tables.
    pub fn render(&self) -> String {
        format!(
            "lab bench run: {}\n{}",
            self.host.text(),
            self.bench.render()
        )
    }
}

/// Measures `lab_exe run [--kernel K] -- true` against the hand-written line (`run::run`),
/// noting the host.
pub async fn run_report(
    lab_exe: &Path,
    runs: usize,
    topology: &str,
    kernel: Option<&str>,
) -> Result<RunReport> {
    let mut host = HostNote::start();
    let bench = run::run(lab_exe, runs, topology, kernel).await?;
    host.finish();
    Ok(RunReport { host, bench })
}

/// `lab bench`: `lab run -- true` against the hand-written line, the default kernel's build
/// times ([`kernel::times`]) and the last suite runs, as one [`Overview`].
pub async fn overview(
    cache: &crate::cache::Cache,
    lab_exe: &Path,
    runs: usize,
    topology: &str,
    build_kernels_now: bool,
) -> Result<Overview> {
    let mut host = HostNote::start();
    let run = run::run(lab_exe, runs, topology, None).await?;
    let kernels = kernel::times(
        cache,
        lab_exe,
        build_kernels_now,
        crate::kernel::DEFAULT_RECIPE,
        kernel::DEFAULT_VARIANT,
    )
    .await?;
    let suites = suite::last_runs(cache, &crate::host::results_root())?;
    host.finish();
    Ok(Overview {
        host,
        run,
        kernels,
        suites,
    })
}

/// Every row of the lab's speed targets, from one `lab bench`.
#[derive(Debug, Clone)]
pub struct Overview {
    pub(crate) host: HostNote,
    pub(crate) run: run::RunBench,
    pub(crate) kernels: kernel::KernelTimes,
    /// The last nextest run of each profile that left a JUnit report.
    pub(crate) suites: Vec<suite::SuiteRun>,
}

/// A row of the targets table.
struct Row {
    what: String,
    measured: String,
    target: &'static str,
}

impl Overview {
    /// The targets table, then the detail of each measurement.
    pub fn render(&self) -> String {
        let mut rows = Vec::new();
        let run = &self.run;
        rows.push(Row {
            what: "lab's own overhead around a boot, warm cache (`lab run -- true` minus the guest's boot)".into(),
            measured: match run.overhead() {
                Some(s) => format!("{} s", s.text(2)),
                None => "no run".into(),
            },
            target: "<= 0.5 s",
        });
        rows.push(Row {
            what: "`lab run -- true`, whole process, vs a hand-written QEMU line booting the same kernel and initramfs to the same command".into(),
            measured: match (run.ratio(), run.lab_whole(), run.hand_written_whole()) {
                (Some(r), Some(l), Some(h)) => format!(
                    "{:.3}x ({:.2} s vs {:.2} s, medians of {} interleaved pairs)",
                    r.median,
                    l.median,
                    h.median,
                    run.lab.len()
                ),
                _ => "no run".into(),
            },
            target: "<= 1.15x",
        });
        let k = &self.kernels;
        rows.push(Row {
            what: format!("cold build of the default kernel ({})", k.base_recipe),
            measured: match &k.base {
                Some(b) => b.text(None),
                None => format!("no cached build of {}", k.base_recipe),
            },
            target: "<= 6 min",
        });
        rows.push(Row {
            what: format!(
                "one-patch variant from the base's tree ({})",
                k.variant_recipe
            ),
            measured: match &k.variant {
                Some(v) => v.text(k.variant_from.as_ref()),
                None => format!("no cached build of {}", k.variant_recipe),
            },
            target: "<= 30 s",
        });
        rows.push(Row {
            what: "fresh machine to the first `lab compare` table".into(),
            measured: "not measured by `lab bench`: time `lab compare` with LAB_CACHE_DIR set to an empty directory".into(),
            target: "<= 12 min",
        });
        for (label, cold, target) in [
            ("warm", false, "<= 15 min"),
            ("cold (kernels from nothing)", true, "<= 30 min"),
        ] {
            let newest = self
                .suites
                .iter()
                .filter(|s| s.is_cold() == cold)
                .max_by(|a, b| a.started_unix.total_cmp(&b.started_unix));
            rows.push(Row {
                what: format!("whole suite, {label}"),
                measured: match newest {
                    // A report does not say which filter the run had: the counts tell a
                    // whole-suite run from a partial one.
                    Some(s) => format!(
                        "{:.0} s = {} (last {} run with a report: {} tests in {} binaries, profile {}, {})",
                        s.wall_s,
                        minutes(s.wall_s),
                        if cold { "cold" } else { "warm" },
                        s.tests.len(),
                        s.binaries().len(),
                        s.profile,
                        s.started_text()
                    ),
                    None => format!(
                        "no {} nextest run with a JUnit report",
                        if cold { "cold" } else { "warm" }
                    ),
                },
                target,
            });
        }

        let mut out = String::new();
        let _ = writeln!(out, "lab bench: {}", self.host.text());
        out += &render_rows(&rows);
        out += "\n";
        out += &self.run.render();
        out += "\n";
        out += &self.kernels.render();
        for s in &self.suites {
            out += "\n";
            out += &s.render(suite::SLOWEST);
        }
        out
    }
}

/// `12 min 5 s`.
pub fn minutes(seconds: f64) -> String {
    let s = seconds.round() as u64;
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A markdown table of rows.
fn render_rows(rows: &[Row]) -> String {
    let mut out = String::from("| what | measured | target |\n|---|---|---|\n");
    for r in rows {
        let _ = writeln!(out, "| {} | {} | {} |", r.what, r.measured, r.target);
    }
    out
}

/// Runs the lab binary `lab_exe` with `args` (and `env`) in its own process group, stdout and
/// stderr into a new file at `log`; returns its exit status and wall time. Both the `run` and
/// the `kernel --cold` benches time a whole lab process this way.
pub(crate) async fn run_lab_logged(
    lab_exe: &std::path::Path,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &std::path::Path)],
    log: &std::path::Path,
) -> anyhow::Result<(std::process::ExitStatus, Duration)> {
    let file = std::fs::File::create(log)?;
    let mut cmd = std::process::Command::new(lab_exe);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let start = std::time::Instant::now();
    let mut child = crate::process::spawn_async_in_group(cmd)?;
    let status = child.child.wait().await?;
    Ok((status, start.elapsed()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_middle() {
        assert_eq!(Spread::of(&[]), None);
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.min, s.median, s.max), (1.0, 2.0, 3.0));
        let s = Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.text(1), "2.5 (1.0-4.0)");
    }

    #[test]
    fn overview_has_a_row_per_target() {
        let sample = |whole: f64, boot: f64| run::RunSample {
            whole: Duration::from_secs_f64(whole),
            timings: crate::run::RunTimings {
                boot_s: boot,
                ..crate::run::RunTimings::default()
            },
        };
        let build = kernel::tests::build;
        let base = build("v6.12", "a91fe3ef0841", 918.6, None);
        let overview = Overview {
            host: HostNote {
                cores: 2,
                load_before: Some(1.5),
                load_after: Some(2.0),
                build: "debug",
            },
            run: run::RunBench {
                topology: "ci-2node-4llc".into(),
                accel: "tcg-single".into(),
                kernel: "6.12.117".into(),
                build: "debug",
                lab: vec![sample(7.5, 7.1), sample(7.7, 7.3)],
                hand_written: vec![Duration::from_secs(7), Duration::from_secs(7)],
                hand_written_line: "qemu".into(),
            },
            kernels: kernel::KernelTimes {
                source: "test".into(),
                base_recipe: "v6.12".into(),
                variant_recipe: "v6.12+revert".into(),
                base: Some(base.clone()),
                variant: Some(build(
                    "v6.12+revert",
                    "db1b2a74cd6f",
                    50.6,
                    Some("a91fe3ef0841"),
                )),
                variant_from: Some(base),
            },
            suites: vec![suite::SuiteRun {
                profile: "ci".into(),
                path: "junit.xml".into(),
                started_unix: 0.0,
                wall_s: 1800.0,
                tests: vec![suite::TestTime {
                    binary: "lab-scenarios::vm".into(),
                    name: "boots".into(),
                    seconds: 40.0,
                    outcome: "passed",
                }],
                kernels_built: vec![],
                records: vec![],
            }],
        };
        let text = overview.render();
        let table: Vec<&str> = text.lines().skip(3).take(7).collect();
        assert_eq!(
            table,
            [
                "| lab's own overhead around a boot, warm cache (`lab run -- true` minus the guest's boot) | 0.40 (0.40-0.40) s | <= 0.5 s |",
                "| `lab run -- true`, whole process, vs a hand-written QEMU line booting the same kernel and initramfs to the same command | 1.086x (7.60 s vs 7.00 s, medians of 2 interleaved pairs) | <= 1.15x |",
                "| cold build of the default kernel (v6.12) | 918.6 s = 15 min 19 s (cold, make -j2, entry a91fe3ef08) | <= 6 min |",
                "| one-patch variant from the base's tree (v6.12+revert) | 50.6 s (from the tree of a91fe3ef08, 5.5% of cold, make -j2, entry db1b2a74cd) | <= 30 s |",
                "| fresh machine to the first `lab compare` table | not measured by `lab bench`: time `lab compare` with LAB_CACHE_DIR set to an empty directory | <= 12 min |",
                "| whole suite, warm | 1800 s = 30 min 0 s (last warm run with a report: 1 tests in 1 binaries, profile ci, 1970-01-01 00:00 UTC) | <= 15 min |",
                "| whole suite, cold (kernels from nothing) | no cold nextest run with a JUnit report | <= 30 min |",
            ]
        );
        assert!(text.starts_with(
            "lab bench: 2 cores, load 1.50 at the start, 2.00 at the end; debug build of lab\n"
        ));
    }

    #[test]
    fn minutes_reads_like_the_issue() {
        assert_eq!(minutes(42.4), "42 s");
        assert_eq!(minutes(1673.0), "27 min 53 s");
    }
}
