//! The lab's own test suite, as `lab test` runs it (the README's test command, which `.ci/run`
//! calls): cargo-nextest installed where it is missing or older than the repository asks, then
//! `cargo nextest run --workspace` with the caller's arguments, then the run's JUnit report with
//! the tests that skipped a part marked skipped ([`crate::report::junit`]).
//!
//! A fresh machine has Rust and nothing else; `cargo nextest` there is "no such command". The
//! version the repository needs is written once, as nextest's own `nextest-version` in
//! `.config/nextest.toml`, which nextest also enforces.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use semver::Version;

use crate::report::junit::MarkedFile;

mod selection;
pub use selection::Selection;

/// The nextest configuration, relative to the workspace root.
pub(crate) const CONFIG: &str = ".config/nextest.toml";

/// The cargo to run: the one that started this process (`cargo run` sets `CARGO`), else the
/// first on `PATH`.
pub(crate) fn cargo() -> OsString {
    std::env::var_os("CARGO")
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cargo".into())
}

/// The minimum nextest version `config` (the text of `.config/nextest.toml`) requires: its
/// `nextest-version`, written `"X.Y.Z"` or `{ required = "X.Y.Z", recommended = ... }`.
pub(crate) fn required_version(config: &str, file: &Path) -> Result<Version> {
    let table: toml::Table =
        toml::from_str(config).with_context(|| format!("parsing {}", file.display()))?;
    let value = table.get("nextest-version").with_context(|| {
        format!(
            "{}: no `nextest-version` (the nextest version the suite needs)",
            file.display()
        )
    })?;
    let text = match value {
        toml::Value::String(s) => s.as_str(),
        toml::Value::Table(t) => t
            .get("required")
            .and_then(|v| v.as_str())
            .with_context(|| {
                format!(
                    "{}: `nextest-version` has no `required = \"X.Y.Z\"`",
                    file.display()
                )
            })?,
        _ => bail!(
            "{}: `nextest-version` is neither \"X.Y.Z\" nor a table",
            file.display()
        ),
    };
    Version::parse(text).with_context(|| format!("{}: nextest-version {text:?}", file.display()))
}

/// The minimum nextest version this checkout's `.config/nextest.toml` requires.
pub(crate) fn repository_version() -> Result<Version> {
    let config = crate::repo_path(CONFIG);
    let text = std::fs::read_to_string(&config)
        .with_context(|| format!("reading {}", config.display()))?;
    required_version(&text, &config)
}

/// The version in `cargo nextest --version`'s first line (`cargo-nextest 0.9.143 (60fa45f63
/// 2026-08-04)`).
pub(crate) fn parse_version_output(output: &str) -> Option<Version> {
    let line = output.lines().next()?;
    let mut words = line.split_whitespace();
    if words.next()? != "cargo-nextest" {
        return None;
    }
    Version::parse(words.next()?).ok()
}

/// The installed nextest's version; `None` when `cargo nextest` is not a command here.
pub(crate) fn installed_version(cargo: &OsString) -> Option<Version> {
    let out = Command::new(cargo)
        .args(["nextest", "--version"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_version_output(&String::from_utf8_lossy(&out.stdout))
}

/// Installs nextest `version` unless one at least that new is installed. `LAB_NO_INSTALL=1`
/// makes a missing or old one an error that gives the command instead.
pub(crate) fn ensure_installed(cargo: &OsString, version: &Version) -> Result<()> {
    let installed = installed_version(cargo);
    if installed.as_ref().is_some_and(|v| v >= version) {
        return Ok(());
    }
    let command = format!("cargo install --locked cargo-nextest@{version}");
    let what = match &installed {
        Some(old) => format!("cargo-nextest {old} is older than the {version} the suite needs"),
        None => "cargo-nextest is not installed".to_string(),
    };
    if std::env::var_os("LAB_NO_INSTALL").is_some() {
        bail!("{what}; run: {command}");
    }
    // It compiles nextest: 22 min on the 2-core host (at nice 10, beside VM tests).
    crate::progress::step(format!(
        "{what}: running `{command}` (it compiles nextest: minutes, up to ~20 on two cores; once)"
    ));
    // Under a watcher: cargo install starts rustc processes that must die with the lab.
    let status = crate::process::status(Command::new(cargo).args([
        "install",
        "--locked",
        &format!("cargo-nextest@{version}"),
    ]))
    .context("cargo install cargo-nextest")?;
    if !status.success() {
        bail!("installing cargo-nextest failed ({status}); run: {command}");
    }
    match installed_version(cargo) {
        Some(v) if v >= *version => Ok(()),
        Some(v) => bail!("cargo nextest is still {v} after installing {version}: is another cargo-nextest earlier on PATH?"),
        None => bail!("`cargo nextest` is still not a command after `{command}`: is cargo's bin directory (~/.cargo/bin) on PATH?"),
    }
}

/// The nextest profile `args` select (`--profile P`, `--profile=P`, `-P P`), else `from_env`
/// (nextest's `NEXTEST_PROFILE`), else `default`.
pub(crate) fn profile_of(args: &[String], from_env: Option<&str>) -> String {
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        }
        if arg == "--profile" || arg == "-P" {
            if let Some(p) = args.next() {
                return p.clone();
            }
        } else if let Some(p) = arg.strip_prefix("--profile=") {
            return p.to_string();
        }
    }
    from_env
        .filter(|p| !p.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// What one `lab test` did.
#[derive(Debug)]
pub(crate) struct SuiteRun {
    pub status: ExitStatus,
    /// The run's JUnit report, when nextest wrote one during this run.
    pub junit: Option<PathBuf>,
}

/// Runs `cargo nextest run --workspace ARGS` in the workspace `root` with inherited stdio and
/// waits for it. Not under a watcher like other tools ([`crate::process`]): nextest stays in
/// the lab's process group so that a Ctrl-C on the terminal reaches it and it cancels its tests
/// the way it does on its own, while the lab ignores that Ctrl-C and waits for it; if the lab
/// dies first, nextest gets SIGTERM (parent-death signal) and cancels the same way, and its
/// test processes die with it ([`crate::process::watch_parent`]). Call it from the thread that
/// lives as long as the lab (the parent-death signal follows the spawning thread).
pub(crate) fn run(cargo: &OsString, root: &Path, args: &[String]) -> Result<SuiteRun> {
    let started = SystemTime::now();
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["nextest", "run", "--workspace"])
        .args(args);
    crate::process::without_cargo_run_env(&mut cmd);
    // SAFETY: only async-signal-safe calls (signal, prctl, getppid, kill, getpid) between fork
    // and exec.
    unsafe {
        let lab = libc::getpid();
        cmd.pre_exec(move || {
            // An ignored signal stays ignored across exec: nextest gets Ctrl-C back.
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != lab {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
    let status = {
        let _ctrl_c = IgnoreCtrlC::new();
        cmd.status()
            .with_context(|| format!("running {cargo:?} nextest run in {}", root.display()))?
    };
    let profile = profile_of(args, std::env::var("NEXTEST_PROFILE").ok().as_deref());
    let junit = crate::bench::suite::junit_path(&profile);
    let written = std::fs::metadata(&junit)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= started);
    Ok(SuiteRun {
        status,
        junit: written.then_some(junit),
    })
}

/// A whole `lab test`: nextest's exit code and what marking its JUnit report's skips gave.
#[derive(Debug)]
pub struct TestRun {
    /// nextest's exit code (128 + the signal when a signal ended it).
    pub code: i32,
    /// The report's marked skips; `None` when nextest wrote no report in this run.
    pub skips: Option<Result<MarkedFile>>,
}

impl TestRun {
    /// The exit code of `lab test`: nextest's, but a report that could not be marked fails a
    /// run that passed (1).
    pub fn exit_code(&self) -> i32 {
        match self.skips {
            Some(Err(_)) if self.code == 0 => 1,
            _ => self.code,
        }
    }
}

/// `lab test ARGS`' first step: cargo-nextest installed where needed, then what the run would
/// run (see [`selection`]); `None` when nextest could not list it (a build error: the run
/// reports it).
pub fn select(args: &[String]) -> Result<Option<Selection>> {
    let cargo = cargo();
    ensure_installed(&cargo, &repository_version()?)?;
    let profile = profile_of(args, std::env::var("NEXTEST_PROFILE").ok().as_deref());
    Ok(selection::ask(
        &cargo,
        &crate::repo_path(""),
        args,
        &profile,
    ))
}

/// `lab test ARGS` after [`select`]: the suite run in this checkout with ARGS, its report's
/// skipped parts marked. Call it on the main thread (see `run`).
pub fn test_suite(args: &[String]) -> Result<TestRun> {
    let cargo = cargo();
    let run = run(&cargo, &crate::repo_path(""), args)?;
    let code = run.status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + run.status.signal().unwrap_or(0)
    });
    Ok(TestRun {
        code,
        skips: run
            .junit
            .map(|junit| crate::report::junit::mark_skips_in_file(&junit)),
    })
}

pub use crate::bench::suite::QUICK_PROFILE;

/// The exit code of a `lab test` that runs nothing: nextest's own for that (`NO_TESTS_RUN`).
pub const NO_TESTS_RUN: i32 = 4;

/// `lab test --quick ARGS`: ARGS run under the quick tier's profile; an error if ARGS name
/// another profile.
pub fn quick_args(args: &[String]) -> Result<Vec<String>> {
    let named = profile_of(args, None);
    if args
        .iter()
        .any(|a| a == "--profile" || a == "-P" || a.starts_with("--profile="))
        && named != QUICK_PROFILE
    {
        anyhow::bail!(
            "`lab test --quick` runs nextest's `{QUICK_PROFILE}` profile, but the arguments name `{named}`"
        );
    }
    let mut out = vec!["--profile".to_string(), QUICK_PROFILE.to_string()];
    out.extend(args.iter().cloned());
    Ok(out)
}

/// The cargo options that choose packages or targets: with one of them in a `lab test --quick`
/// the caller chose what to build.
const TARGET_OPTIONS: &[&str] = &[
    "-p",
    "--package",
    "--exclude",
    "--lib",
    "--bin",
    "--bins",
    "--test",
    "--tests",
    "--example",
    "--examples",
    "--bench",
    "--benches",
    "--all-targets",
];

/// What the quick tier builds, as cargo options: every library and binary, every test target of
/// the packages other than the workspace root's (unit and device tests), and of the root's
/// scenario tests only the binaries the `quick` profile's filter names (`binary(NAME)`).
/// Without it nextest builds every test binary, the dozen scenario ones the tier never runs
/// included. `None` when the filter names binaries otherwise (a regex) or nothing: then
/// everything is built, as before.
fn quick_targets(metadata: &serde_json::Value, filter: &str) -> Option<Vec<String>> {
    if filter.contains("binary(/") || filter.contains("binary_id(") {
        return None;
    }
    let named: Vec<&str> = filter
        .split("binary(")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .collect();
    if named.is_empty() {
        return None;
    }
    let root = metadata["workspace_root"].as_str()?;
    let root_manifest = Path::new(root).join("Cargo.toml");
    let mut out = vec!["--lib".to_string(), "--bins".to_string()];
    for package in metadata["packages"].as_array()? {
        let is_root = package["manifest_path"].as_str().map(Path::new) == Some(&root_manifest);
        for target in package["targets"].as_array()? {
            let is_test = target["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"));
            let name = target["name"].as_str()?;
            if is_test && (!is_root || named.contains(&name)) {
                out.extend(["--test".to_string(), name.to_string()]);
            }
        }
    }
    Some(out)
}

/// The quick tier's build selection for this checkout ([`quick_targets`]), unless `args` choose
/// packages or targets themselves; `None` (build everything) where cargo metadata or the
/// profile cannot be read.
pub fn quick_build_selection(args: &[String]) -> Option<Vec<String>> {
    let chosen = args.iter().take_while(|a| *a != "--").any(|a| {
        TARGET_OPTIONS
            .iter()
            .any(|o| a == o || a.starts_with(&format!("{o}=")))
    });
    if chosen {
        return None;
    }
    let config: toml::Table =
        toml::from_str(&std::fs::read_to_string(crate::repo_path(CONFIG)).ok()?).ok()?;
    let filter = config
        .get("profile")?
        .get(QUICK_PROFILE)?
        .get("default-filter")?
        .as_str()?
        .to_string();
    let out = Command::new(cargo())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(crate::repo_path(""))
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    quick_targets(&serde_json::from_slice(&out.stdout).ok()?, &filter)
}

/// Ignores SIGINT in this process until dropped (then restores what was there).
struct IgnoreCtrlC {
    previous: libc::sighandler_t,
}

impl IgnoreCtrlC {
    fn new() -> IgnoreCtrlC {
        // SAFETY: installs no handler code, only the ignore disposition.
        let previous = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        IgnoreCtrlC { previous }
    }
}

impl Drop for IgnoreCtrlC {
    fn drop(&mut self) {
        if self.previous != libc::SIG_ERR {
            // SAFETY: puts back the disposition `signal` returned.
            unsafe { libc::signal(libc::SIGINT, self.previous) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_tier_builds_every_other_packages_tests_and_only_its_own_scenario_binaries() {
        let metadata = serde_json::json!({
            "workspace_root": "/w",
            "packages": [
                {"manifest_path": "/w/Cargo.toml", "targets": [
                    {"name": "lab_scenarios", "kind": ["lib"]},
                    {"name": "vm", "kind": ["test"]},
                    {"name": "bisect", "kind": ["test"]},
                    {"name": "kernels", "kind": ["test"]},
                ]},
                {"manifest_path": "/w/lab/Cargo.toml", "targets": [
                    {"name": "lab", "kind": ["lib"]},
                    {"name": "lab", "kind": ["bin"]},
                    {"name": "layers", "kind": ["test"]},
                ]},
            ]
        });
        let filter = "not package(lab-scenarios) | binary(vm) | binary(kernels) \
                      and not (binary(kernels) & test(=x))";
        let args = quick_targets(&metadata, filter).unwrap();
        assert_eq!(
            args.join(" "),
            "--lib --bins --test vm --test kernels --test layers"
        );
        // A filter that names binaries by regex, or none: everything is built.
        assert_eq!(quick_targets(&metadata, "binary(/v.*/)"), None);
        assert_eq!(quick_targets(&metadata, "all()"), None);
    }

    #[test]
    fn the_repositorys_quick_profile_gives_a_build_selection_unless_the_caller_chose() {
        let selection = quick_build_selection(&[]).expect("the quick profile names its binaries");
        for binary in ["vm", "topology", "kernels", "layers", "hostile"] {
            assert!(
                selection
                    .windows(2)
                    .any(|w| w[0] == "--test" && w[1] == binary),
                "{binary}: {selection:?}"
            );
        }
        assert!(!selection.iter().any(|a| a == "bisect" || a == "dma_wakeup"));
        let own = ["-p".to_string(), "lab".to_string()];
        assert_eq!(quick_build_selection(&own), None);
        assert_eq!(quick_build_selection(&["--test=vm".to_string()]), None);
    }

    #[test]
    fn quick_runs_the_quick_profile_and_refuses_another() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let quick = quick_args(&args(&["-E", "binary(vm)"])).unwrap();
        assert_eq!(quick, args(&["--profile", "quick", "-E", "binary(vm)"]));
        assert_eq!(profile_of(&quick, Some("ci")), "quick");
        let other = quick_args(&args(&["--profile", "ci"])).unwrap_err();
        assert!(format!("{other}").contains("name `ci`"), "{other}");
    }

    #[test]
    fn the_required_version_comes_from_nextest_version_in_either_form() {
        let file = Path::new(".config/nextest.toml");
        let plain = required_version("nextest-version = \"0.9.143\"\n", file).unwrap();
        assert_eq!(plain, Version::new(0, 9, 143));
        let table = required_version(
            "nextest-version = { required = \"0.9.100\", recommended = \"0.9.143\" }\n",
            file,
        )
        .unwrap();
        assert_eq!(table, Version::new(0, 9, 100));
        let missing = required_version("[profile.default]\n", file).unwrap_err();
        assert!(
            format!("{missing:#}").contains(".config/nextest.toml: no `nextest-version`"),
            "{missing:#}"
        );
        let bad = required_version("nextest-version = \"0.9\"\n", file).unwrap_err();
        assert!(
            format!("{bad:#}").contains("nextest-version \"0.9\""),
            "{bad:#}"
        );
    }

    #[test]
    fn the_repository_names_the_version_the_workflow_pins() {
        let required = repository_version().unwrap();
        let workflow =
            std::fs::read_to_string(crate::repo_path(".github/workflows/ci.yml")).unwrap();
        assert!(
            workflow.contains(&format!("NEXTEST_VERSION: \"{required}\"")),
            "the workflow installs another nextest than {CONFIG}'s nextest-version {required}"
        );
    }

    #[test]
    fn the_version_is_read_from_nextests_first_line() {
        let out = "cargo-nextest 0.9.143 (60fa45f63 2026-08-04)\nrelease: 0.9.143\n";
        assert_eq!(parse_version_output(out), Some(Version::new(0, 9, 143)));
        assert_eq!(
            parse_version_output("error: no such command: `nextest`"),
            None
        );
        assert_eq!(parse_version_output(""), None);
    }

    #[test]
    fn the_profile_is_found_in_every_spelling() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(profile_of(&args(&["--profile", "ci"]), None), "ci");
        assert_eq!(
            profile_of(&args(&["--profile=kvm", "-E", "all()"]), Some("ci")),
            "kvm"
        );
        assert_eq!(
            profile_of(&args(&["-E", "all()", "-P", "ci-shard"]), None),
            "ci-shard"
        );
        // After `--` the arguments are the tests', not nextest's.
        assert_eq!(
            profile_of(&args(&["--", "--profile", "ci"]), None),
            "default"
        );
        assert_eq!(profile_of(&args(&[]), Some("ci")), "ci");
        assert_eq!(profile_of(&args(&[]), Some("")), "default");
    }

    #[test]
    fn a_report_that_cannot_be_marked_fails_only_a_passing_run() {
        let marked = || MarkedFile {
            path: PathBuf::from("junit.xml"),
            tests: Vec::new(),
        };
        let run = |code, skips| TestRun { code, skips };
        assert_eq!(run(0, None).exit_code(), 0);
        assert_eq!(run(0, Some(Ok(marked()))).exit_code(), 0);
        assert_eq!(run(3, Some(Ok(marked()))).exit_code(), 3);
        assert_eq!(run(0, Some(Err(anyhow::anyhow!("bad xml")))).exit_code(), 1);
        assert_eq!(
            run(101, Some(Err(anyhow::anyhow!("bad xml")))).exit_code(),
            101
        );
    }
}
