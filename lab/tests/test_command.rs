//! `lab test`, the README's test command, with a stand-in cargo (`CARGO` names the cargo the lab
//! runs): cargo-nextest is installed only where it is missing or too old, the arguments and the
//! exit status pass through, the run's JUnit report gets its skipped parts marked, and a
//! killed lab takes its nextest down. No real nextest, build or VM runs here.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `lab` binary: nextest's path for it (remapped in an archive run), else cargo's.
fn lab_binary() -> PathBuf {
    std::env::var_os("NEXTEST_BIN_EXE_lab")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lab")))
}

/// The version `.config/nextest.toml` asks for: its `nextest-version`, `"X.Y.Z"` or
/// `{ required = "X.Y.Z", ... }`.
fn required() -> String {
    let text = std::fs::read_to_string(lab::repo_path(".config/nextest.toml")).unwrap();
    let table: toml::Table = toml::from_str(&text).unwrap();
    let version = match &table["nextest-version"] {
        toml::Value::Table(t) => t["required"].clone(),
        other => other.clone(),
    };
    let version = version.as_str().expect("nextest-version \"X.Y.Z\"");
    semver::Version::parse(version).unwrap().to_string()
}

/// A cargo that answers `nextest --version` with the version in `state/installed` (none: "no
/// such command"), "installs" by writing that file (or fails when `state/install-fails`
/// exists), answers `nextest list` with `state/list.json` (else one test to run), and for
/// `nextest run` records its directory and pid, writes `state/junit.xml` as
/// the profile's report under `CARGO_TARGET_DIR`, and exits with `state/exit` (or, with
/// `state/hang`, waits for a signal and records it). Every call is appended to `state/calls`.
const FAKE_CARGO: &str = r#"#!/bin/bash
state="$FAKE_STATE"
echo "$*" >> "$state/calls"
if [ "$1" = install ]; then
  [ -f "$state/install-fails" ] && { echo "error: could not compile" >&2; exit 101; }
  echo "$FAKE_INSTALLS" > "$state/installed"
  exit 0
fi
if [ "$1 $2" = "nextest --version" ]; then
  [ -f "$state/installed" ] || { echo 'error: no such command: `nextest`' >&2; exit 101; }
  echo "cargo-nextest $(cat "$state/installed") (fake 2026-12-01)"
  exit 0
fi
if [ "$1 $2" = "nextest list" ]; then
  if [ -f "$state/list.json" ]; then cat "$state/list.json"; else echo "$ONE_TO_RUN"; fi
  exit 0
fi
if [ "$1 $2" = "nextest run" ]; then
  pwd > "$state/cwd"
  # The trap before the pid: the test kills the lab as soon as it sees the pid, and a TERM
  # that came before the trap would end this script unrecorded (seen on a loaded host).
  [ -f "$state/hang" ] && trap 'echo TERM > "$state/signal"; exit 143' TERM
  echo $$ > "$state/nextest.pid"
  if [ -f "$state/hang" ]; then
    while :; do sleep 0.05; done
  fi
  mkdir -p "$CARGO_TARGET_DIR/nextest/$FAKE_PROFILE"
  cp "$state/junit.xml" "$CARGO_TARGET_DIR/nextest/$FAKE_PROFILE/junit.xml"
  exit "$(cat "$state/exit")"
fi
echo "fake cargo: unexpected call: $*" >&2
exit 99
"#;

/// `nextest list --message-format json` with one test to run.
const ONE_TO_RUN: &str = r#"{"test-count":1,"rust-suites":{"lab-scenarios::vm":{"testcases":{"boots":{"ignored":false,"filter-match":{"status":"matches"}}}}}}"#;

const JUNIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="2" skipped="0" failures="0" errors="0" time="2.0">
    <testsuite name="lab-scenarios::eevdf_parity" tests="2" skipped="0" errors="0" failures="0">
        <testcase name="parity" classname="lab-scenarios::eevdf_parity" time="1.5">
            <system-out>LAB-SKIP parity: time part: the accelerator is tcg-single. It runs where KVM boots guests.
</system-out>
        </testcase>
        <testcase name="plain" classname="lab-scenarios::eevdf_parity" time="0.1"/>
    </testsuite>
</testsuites>
"#;

/// A scratch state and target dir with the fake cargo in it.
struct Fake {
    dir: tempfile::TempDir,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let cargo = dir.path().join("cargo");
        std::fs::write(&cargo, FAKE_CARGO).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("junit.xml"), JUNIT).unwrap();
        std::fs::write(dir.path().join("exit"), "0").unwrap();
        Fake { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn set(&self, name: &str, content: &str) {
        std::fs::write(self.path(name), content).unwrap();
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn calls(&self) -> Vec<String> {
        self.read("calls").lines().map(str::to_string).collect()
    }

    fn junit(&self, profile: &str) -> PathBuf {
        self.path("target")
            .join("nextest")
            .join(profile)
            .join("junit.xml")
    }

    /// `lab test ARGS` run with this cargo, `profile` being where the fake writes its report.
    fn command(&self, profile: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(lab_binary());
        cmd.arg("test")
            .args(args)
            .env("CARGO", self.path("cargo"))
            .env("CARGO_TARGET_DIR", self.path("target"))
            .env("FAKE_STATE", self.dir.path())
            .env("FAKE_PROFILE", profile)
            .env("FAKE_INSTALLS", required())
            .env("ONE_TO_RUN", ONE_TO_RUN)
            .env_remove("NEXTEST_PROFILE")
            .env_remove("LAB_NO_INSTALL");
        cmd
    }

    fn run(&self, profile: &str, args: &[&str]) -> Output {
        self.command(profile, args).output().unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_machine_without_nextest_gets_it_installed_and_the_run_passes_through() {
    let fake = Fake::new();
    fake.set("exit", "3");
    let out = fake.run("ci", &["--profile", "ci", "-E", "binary(vm)"]);
    let version = required();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(
        fake.calls(),
        [
            "nextest --version".to_string(),
            format!("install --locked cargo-nextest@{version}"),
            "nextest --version".to_string(),
            "nextest list --workspace --message-format json --profile ci -E binary(vm)".to_string(),
            "nextest run --workspace --profile ci -E binary(vm)".to_string(),
        ],
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cargo-nextest is not installed"),
        "{}",
        text(&out)
    );
    // nextest runs in the checkout, whatever the caller's directory.
    assert_eq!(
        Path::new(fake.read("cwd").trim()).canonicalize().unwrap(),
        lab::repo_path("").canonicalize().unwrap()
    );
    // The report nextest wrote in this run has its skipped part marked, and the list printed.
    let junit = std::fs::read_to_string(fake.junit("ci")).unwrap();
    assert!(
        junit.contains(r#"<skipped message="passed what ran; skipped here:"#),
        "{junit}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 test(s) with skipped parts marked"),
        "{}",
        text(&out)
    );

    // Installed now: the next run goes straight to nextest, in the default profile.
    std::fs::remove_file(fake.path("calls")).unwrap();
    fake.set("exit", "0");
    let out = fake.run("default", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        fake.calls(),
        [
            "nextest --version",
            "nextest list --workspace --message-format json",
            "nextest run --workspace"
        ],
        "{}",
        text(&out)
    );
    assert!(fake.junit("default").is_file());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("lab test: 1 test(s) to run; 1 of them after"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_filter_that_leaves_nothing_to_run_says_why_at_once_and_runs_nothing() {
    let fake = Fake::new();
    fake.set("installed", &required());
    // What nextest lists for `--profile quick -E 'binary(remote_cache)'`: the binary's tests,
    // every one outside the quick profile's default filter.
    fake.set(
        "list.json",
        r#"{"rust-suites":{"lab-scenarios::remote_cache":{"testcases":{
            "a_pushed_kernel_boots":{"ignored":false,"filter-match":{"status":"mismatch","reason":"default-filter"}}}},
          "lab":{"testcases":{"cache::tests::x":{"ignored":false,"filter-match":{"status":"mismatch","reason":"expression"}}}}}}"#,
    );
    let out = fake.run(
        "quick",
        &["--profile", "quick", "-E", "binary(remote_cache)"],
    );
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    for said in [
        "lab test: no test to run with these arguments",
        "the `quick` profile's default-filter (.config/nextest.toml) leaves out 1 test(s)",
        "lab-scenarios::remote_cache a_pushed_kernel_boots",
    ] {
        assert!(stderr.contains(said), "{said:?} not in {}", text(&out));
    }
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("nextest run")),
        "{:?}",
        fake.calls()
    );
}

#[test]
fn an_old_or_missing_nextest_without_permission_to_install_is_an_error_with_the_command() {
    let version = required();
    let fake = Fake::new();
    fake.set("installed", "0.9.1");
    let out = fake
        .command("default", &[])
        .env("LAB_NO_INSTALL", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cargo-nextest 0.9.1 is older than the {version} the suite needs; run: cargo install --locked cargo-nextest@{version}"
        )),
        "{}",
        text(&out)
    );
    assert_eq!(fake.calls(), ["nextest --version"]);

    // An install that fails says so and runs nothing.
    let fake = Fake::new();
    fake.set("install-fails", "");
    let out = fake.run("default", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("installing cargo-nextest failed"),
        "{}",
        text(&out)
    );
    assert!(
        !fake.calls().iter().any(|c| c.starts_with("nextest run")),
        "{:?}",
        fake.calls()
    );
}

/// Kills a stand-in nextest left running by a failed assertion.
struct KillOnDrop(i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: plain syscall; a pid that is gone yields ESRCH.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

#[test]
fn a_killed_lab_tells_its_nextest_to_stop() {
    let fake = Fake::new();
    fake.set("installed", &required());
    fake.set("hang", "");
    let mut lab = fake
        .command("default", &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while fake.read("nextest.pid").trim().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "nextest never started: {:?}",
            fake.calls()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let nextest: i32 = fake.read("nextest.pid").trim().parse().unwrap();
    let _cleanup = KillOnDrop(nextest);
    lab.kill().unwrap();
    lab.wait().unwrap();
    let killed = Instant::now();
    // SAFETY: signal 0 only asks whether the process exists.
    while unsafe { libc::kill(nextest, 0) } == 0 && fake.read("signal").is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "nextest (pid {nextest}) still running 5 s after the lab was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.read("signal").is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fake.read("signal").trim(), "TERM");
}
