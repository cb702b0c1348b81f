//! What a `lab test` will run, asked of nextest before it runs (`cargo nextest list`, which
//! builds the same test binaries and lists them in seconds): how many tests, whether the setup
//! script runs first, and, when nothing would run, why each test the arguments name is left out
//! (the profile's default filter, `#[ignore]`, the filter itself). Without it a filter that
//! selects nothing, or a test the profile leaves out, is a run that says only "skipped".

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The package whose tests the setup script (`.config/prepare.sh`) runs before
/// (`.config/nextest.toml`'s `[[profile.default.scripts]]`).
const SETUP_PACKAGE: &str = "lab-scenarios";

/// Options of `cargo nextest run` that `cargo nextest list` does not take, and which of them
/// take a value (`--test-threads 2`): left out of the listing's arguments.
const RUN_ONLY_WITH_VALUE: &[&str] = &[
    "--test-threads",
    "-j",
    "--retries",
    "--max-fail",
    "--no-tests",
    "--status-level",
    "--final-status-level",
    "--failure-output",
    "--success-output",
    "--stress-count",
    "--stress-duration",
    "--debugger",
    "--tracer",
    "--reporter-format",
];
const RUN_ONLY_FLAGS: &[&str] = &[
    "--no-capture",
    "--nocapture",
    "--fail-fast",
    "--no-fail-fast",
    "--hide-progress-bar",
    "--no-output-indent",
    "--no-run",
];

/// Why nextest leaves a test out (its list's `filter-match` `reason`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LeftOut {
    /// The profile's `default-filter`.
    DefaultFilter,
    /// `#[ignore]` (run with `--run-ignored`).
    Ignored,
    /// The filterset (`-E`) or a name filter.
    Filter,
    /// Another reason nextest names (`partition`, ...).
    Other(String),
}

/// The tests nextest would run with some arguments, and those it would leave out, by reason.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// The nextest profile the run uses.
    profile: String,
    /// `binary-id test-name` of each test to run.
    to_run: Vec<String>,
    /// Of those, how many are in [`SETUP_PACKAGE`] (the setup script runs before them).
    after_setup: usize,
    left_out: BTreeMap<LeftOut, Vec<String>>,
}

impl Selection {
    /// The selection in `cargo nextest list --message-format json`'s output; `None` if it is
    /// not such a list.
    pub(crate) fn from_list(list: &serde_json::Value, profile: &str) -> Option<Selection> {
        let mut selection = Selection {
            profile: profile.to_string(),
            ..Selection::default()
        };
        for (binary_id, suite) in list.get("rust-suites")?.as_object()? {
            for (name, case) in suite.get("testcases")?.as_object()? {
                let test = format!("{binary_id} {name}");
                let filter_match = case.get("filter-match")?;
                match filter_match.get("status")?.as_str()? {
                    "matches" => {
                        if binary_id.starts_with(&format!("{SETUP_PACKAGE}::"))
                            || binary_id == SETUP_PACKAGE
                        {
                            selection.after_setup += 1;
                        }
                        selection.to_run.push(test);
                    }
                    _ => {
                        let reason = match filter_match.get("reason").and_then(|r| r.as_str()) {
                            Some("default-filter") => LeftOut::DefaultFilter,
                            Some("ignored") => LeftOut::Ignored,
                            Some("expression") | Some("string") => LeftOut::Filter,
                            other => LeftOut::Other(other.unwrap_or("unknown").to_string()),
                        };
                        selection.left_out.entry(reason).or_default().push(test);
                    }
                }
            }
        }
        Some(selection)
    }

    /// What to say before the run: the count and the setup script; `None` when nothing runs
    /// (then [`Selection::why_none`]).
    pub fn before_run(&self) -> Option<String> {
        if self.to_run.is_empty() {
            return None;
        }
        let mut line = format!("lab test: {} test(s) to run", self.to_run.len());
        if self.after_setup > 0 {
            line.push_str(&format!(
                "; {} of them after nextest's setup script .config/prepare.sh (`lab prepare`: \
                 QEMU, kernels and images into the cache, minutes when they are not there yet; \
                 nextest shows its output only if it fails)",
                self.after_setup
            ));
        }
        Some(line)
    }

    /// Why nothing would run: each reason with the tests it leaves out that a user could have
    /// meant (not the filter's own misses, unless nothing else is left out).
    pub fn why_none(&self) -> WhyNone<'_> {
        WhyNone { selection: self }
    }
}

/// [`Selection::why_none`]'s text.
pub struct WhyNone<'a> {
    selection: &'a Selection,
}

/// At most this many tests are named per reason.
const NAMED: usize = 8;

impl fmt::Display for WhyNone<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let left_out = &self.selection.left_out;
        writeln!(f, "lab test: no test to run with these arguments")?;
        let mut said = false;
        for (reason, tests) in left_out {
            let why = match reason {
                LeftOut::DefaultFilter => format!(
                    "the `{}` profile's default-filter (.config/nextest.toml) leaves out {} \
                     test(s) the arguments select; run them under another profile (`lab test` \
                     without --quick) or add --ignore-default-filter",
                    self.selection.profile,
                    tests.len()
                ),
                LeftOut::Ignored => format!(
                    "{} test(s) the arguments select are #[ignore]d; add --run-ignored only \
                     (their reasons: `cargo nextest list --run-ignored only`)",
                    tests.len()
                ),
                LeftOut::Other(r) => format!("{} test(s) left out by nextest ({r})", tests.len()),
                LeftOut::Filter => continue,
            };
            writeln!(f, "  {why}:")?;
            name_some(f, tests)?;
            said = true;
        }
        if !said {
            let total = left_out.get(&LeftOut::Filter).map_or(0, Vec::len);
            writeln!(
                f,
                "  the filter matches none of the {total} tests built; a test is named \
                 `test(NAME)` within `binary(FILE)` (`-E 'binary(provisioning) & \
                 test(/a_locked/)'`), and `cargo nextest list` lists them all"
            )?;
            if self.selection.profile == super::QUICK_PROFILE {
                writeln!(
                    f,
                    "  `lab test --quick` builds only the tier's own scenario binaries (the \
                     `binary(NAME)`s of the quick profile's default-filter): run another with \
                     `lab test -E ...`"
                )?;
            }
        }
        Ok(())
    }
}

fn name_some(f: &mut fmt::Formatter<'_>, tests: &[String]) -> fmt::Result {
    for test in tests.iter().take(NAMED) {
        writeln!(f, "    {test}")?;
    }
    if tests.len() > NAMED {
        writeln!(f, "    ... and {} more", tests.len() - NAMED)?;
    }
    Ok(())
}

/// Of `lab test`'s arguments, those `cargo nextest list` takes: the run-only options (and
/// their values) left out.
pub(crate) fn list_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            out.push(arg.clone());
            out.extend(args.by_ref().cloned());
            break;
        }
        let option = arg.split('=').next().unwrap_or(arg);
        if RUN_ONLY_WITH_VALUE.contains(&option) {
            if !arg.contains('=') {
                args.next();
            }
        } else if !RUN_ONLY_FLAGS.contains(&option) {
            out.push(arg.clone());
        }
    }
    out
}

/// Asks nextest what `cargo nextest run --workspace ARGS` would run, in the workspace `root`;
/// `None` when the listing fails (a build error, say: the run then reports it itself).
pub(crate) fn ask(
    cargo: &OsString,
    root: &Path,
    args: &[String],
    profile: &str,
) -> Option<Selection> {
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["nextest", "list", "--workspace", "--message-format", "json"])
        .args(list_args(args))
        .stdin(Stdio::null())
        // cargo's build output shows as it would for the run.
        .stderr(Stdio::inherit());
    crate::process::without_cargo_run_env(&mut cmd);
    let out = crate::process::output(&mut cmd).ok()?;
    if !out.status.success() {
        return None;
    }
    // The JSON is all of stdout, or its last line if something printed before it.
    let text = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(&text).ok().or_else(|| {
        let last = text.lines().rev().find(|l| l.starts_with('{'))?;
        serde_json::from_str(last).ok()
    })?;
    Selection::from_list(&json, profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_listing_keeps_what_selects_tests_and_drops_run_only_options() {
        let given = args(&[
            "--profile",
            "quick",
            "--no-fail-fast",
            "--test-threads",
            "2",
            "-E",
            "binary(vm)",
            "--retries=1",
            "name",
            "--",
            "--exact",
        ]);
        assert_eq!(
            list_args(&given),
            args(&[
                "--profile",
                "quick",
                "-E",
                "binary(vm)",
                "name",
                "--",
                "--exact"
            ])
        );
    }

    fn list() -> serde_json::Value {
        serde_json::json!({
            "test-count": 4,
            "rust-suites": {
                "lab-scenarios::provisioning": {"testcases": {
                    "a_locked": {"ignored": false, "filter-match": {"status": "matches"}},
                    "on_real_hardware": {"ignored": false,
                        "filter-match": {"status": "mismatch", "reason": "default-filter"}},
                }},
                "lab": {"testcases": {
                    "cache::tests::x": {"ignored": false,
                        "filter-match": {"status": "mismatch", "reason": "expression"}},
                    "kernel::tests::real": {"ignored": true,
                        "filter-match": {"status": "mismatch", "reason": "ignored"}},
                }},
            }
        })
    }

    #[test]
    fn a_selection_counts_what_runs_and_what_waits_for_the_setup_script() {
        let s = Selection::from_list(&list(), "quick").unwrap();
        assert_eq!(s.to_run, ["lab-scenarios::provisioning a_locked"]);
        assert_eq!(s.after_setup, 1);
        let said = s.before_run().unwrap();
        assert!(said.contains("1 test(s) to run; 1 of them after"), "{said}");
        assert!(Selection::from_list(&serde_json::json!({"x": 1}), "quick").is_none());
    }

    #[test]
    fn nothing_to_run_says_which_tests_the_profile_or_ignore_left_out() {
        let mut s = Selection::from_list(&list(), "quick").unwrap();
        s.to_run.clear();
        assert_eq!(s.before_run(), None);
        let why = s.why_none().to_string();
        assert!(
            why.contains("the `quick` profile's default-filter"),
            "{why}"
        );
        assert!(
            why.contains("lab-scenarios::provisioning on_real_hardware"),
            "{why}"
        );
        assert!(why.contains("--run-ignored only"), "{why}");
        assert!(!why.contains("cache::tests::x"), "{why}");
        // Only the filter's misses: the filter is what to fix.
        s.left_out.retain(|r, _| *r == LeftOut::Filter);
        let why = s.why_none().to_string();
        assert!(
            why.contains("the filter matches none of the 1 tests"),
            "{why}"
        );
    }
}
