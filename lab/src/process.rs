//! Child processes that never outlive the lab. Every child runs in its own process group, which
//! is killed when its handle drops, and dies with the lab:
//!
//! - QEMU, the device models and the KVM probe (`spawn_in_group`, `spawn_async_in_group`)
//!   get SIGKILL from the kernel when the lab dies (`PR_SET_PDEATHSIG`); they are single
//!   processes whose pid the lab uses, so they are started directly.
//! - Tools that start children of their own (`make` and its compilers, `apt-get` and its
//!   download methods, `tar` and its decompressor, ...) go through `output`, [`status`] or
//!   `spawn_tree`: a watcher process leads the group, runs the tool as its child and kills the
//!   whole group when the lab dies. `PR_SET_PDEATHSIG` alone would kill only the tool and leave
//!   its children (a compiler writing into a dead staging dir) running.
//!
//! [`watch_parent`] makes a test process die with the test runner that started it.
//! Its own module because the VM, the devices, the toolchain, kernel builds and apt all start
//! children this way.
//!
//! Public: [`watch_parent`], which a test process or the CLI calls once so it dies with its
//! runner, [`status`], a command run to completion under a watcher, and [`spawn_in_group`],
//! a test's helper process that dies with it.

/// Host CPUs a pin may name: the size of the affinity set (`cpu_set_t`) the lab passes to
/// `sched_setaffinity`.
pub(crate) const MAX_HOST_CPUS: usize = 1024;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output};
use std::time::Duration;

use anyhow::{Context, Result};

mod owned_dir;
#[cfg(test)]
pub(crate) use owned_dir::OWNER;
pub(crate) use owned_dir::{owned_dir, OwnedDir};

/// Makes `cmd` start a new process group and die with its parent.
fn isolate(cmd: &mut Command) {
    // SAFETY: only async-signal-safe calls (setpgid, prctl, getppid, kill) run between fork and
    // exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then we were reparented.
            if libc::getppid() == 1 {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// How often a watcher (and [`watch_parent`]) looks whether its parent is still there.
const WATCH_PERIOD: Duration = Duration::from_millis(50);

/// Makes `cmd` run under a watcher that leads a new process group: the watcher forks, the child
/// goes on to exec the program, and the watcher waits for it, exits as it did, and kills the
/// whole group if the lab disappears first. Polling `getppid` rather than a parent-death signal
/// because that signal fires when the spawning *thread* exits (tokio's blocking threads come and
/// go), while reparenting happens only when the whole lab process is gone.
fn supervise(cmd: &mut Command) {
    // SAFETY: between fork and exec only async-signal-safe calls run (getpid, getppid, setpgid,
    // sigprocmask, fork, prctl, syscall(close_range), close, waitpid, killpg, kill, signal,
    // sigtimedwait, _exit); nothing allocates or takes a lock.
    unsafe {
        cmd.pre_exec(|| {
            let lab = libc::getppid();
            if libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let watcher = libc::getpid();
            // SIGCHLD blocked before the fork, so the watcher wakes the moment the tool exits.
            let mut chld: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut chld);
            libc::sigaddset(&mut chld, libc::SIGCHLD);
            libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
            let tool = libc::fork();
            if tool < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if tool == 0 {
                // The tool: dies with its watcher; returning lets std exec the program.
                libc::sigprocmask(libc::SIG_UNBLOCK, &chld, std::ptr::null_mut());
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != watcher {
                    libc::_exit(127);
                }
                return Ok(());
            }
            // The watcher holds no descriptor: the lab sees EOF on the tool's pipes and on std's
            // exec-error pipe exactly as if the tool were its own child.
            if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) != 0 {
                for fd in 0..4096 {
                    libc::close(fd);
                }
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: WATCH_PERIOD.as_nanos() as libc::c_long,
            };
            loop {
                let mut wstatus = 0;
                if libc::waitpid(tool, &mut wstatus, libc::WNOHANG) == tool {
                    if libc::WIFSIGNALED(wstatus) {
                        let signal = libc::WTERMSIG(wstatus);
                        libc::signal(signal, libc::SIG_DFL);
                        libc::kill(libc::getpid(), signal);
                        libc::_exit(128 + signal);
                    }
                    libc::_exit(libc::WEXITSTATUS(wstatus));
                }
                if libc::getppid() != lab {
                    libc::killpg(0, libc::SIGKILL);
                    libc::_exit(137);
                }
                libc::sigtimedwait(&chld, std::ptr::null_mut(), &pause);
            }
        });
    }
}

/// Runs `cmd` to completion under a watcher (see [`supervise`]), collecting stdout and stderr.
/// Errors only when it cannot start; the caller judges its exit status.
pub(crate) fn output(cmd: &mut Command) -> Result<Output> {
    supervise(cmd);
    cmd.output()
        .with_context(|| format!("running {:?}", cmd.get_program()))
}

/// Runs `cmd` to completion under a watcher, with inherited stdio; returns its exit status.
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    supervise(cmd);
    cmd.status()
        .with_context(|| format!("running {:?}", cmd.get_program()))
}

/// Starts `cmd` under a watcher; the whole group is killed when the handle drops.
pub(crate) fn spawn_tree(cmd: &mut Command) -> Result<GroupChild> {
    supervise(cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    Ok(GroupChild { child })
}

/// Makes this process kill itself when the process that started it exits, if it was started by
/// a test runner (`cargo nextest` sets `NEXTEST_RUN_ID`) or `LAB_DIE_WITH_PARENT=1` asks for it.
/// A cancelled CI job SIGKILLs the runner, which cannot pass that on; without this its test
/// processes, and through them QEMU and the device models, ran on until the test ended by
/// itself. A thread polling `getppid` and not `PR_SET_PDEATHSIG`: the runner's thread that
/// spawned this process may exit long before the runner does. Not for a plain `lab` run, which
/// a user may detach from its shell on purpose. Idempotent.
pub fn watch_parent() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let wanted = std::env::var_os("NEXTEST_RUN_ID").is_some()
        || std::env::var_os("LAB_DIE_WITH_PARENT").is_some_and(|v| v == "1");
    if !wanted {
        return;
    }
    ONCE.call_once(|| {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        if parent == 1 {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("lab-watch-parent".into())
            .spawn(move || loop {
                std::thread::sleep(WATCH_PERIOD);
                // SAFETY: plain syscalls. SIGKILL: no destructor of this process may run, but its
                // children's parent-death signals and watchers then clean up behind it.
                unsafe {
                    if libc::getppid() != parent {
                        libc::kill(libc::getpid(), libc::SIGKILL);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("not watching the test runner: {e}");
        }
    });
}

/// Makes `cmd` start on `cpus` only (`sched_setaffinity` before exec), so every thread it
/// creates inherits that set: QEMU's I/O, RCU and worker threads and the device models run on
/// the housekeeping CPUs of a pinned topology. QEMU's vCPU threads are then moved one by one.
/// CPUs at or above [`MAX_HOST_CPUS`] are left out of the set.
pub(crate) fn restrict_to_cpus(cmd: &mut Command, cpus: &[u32]) {
    // SAFETY: a zeroed cpu_set_t is valid and CPU_SET stays within it (ids are bounded above).
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            if (cpu as usize) < MAX_HOST_CPUS {
                libc::CPU_SET(cpu as usize, &mut set);
            }
        }
        set
    };
    // SAFETY: sched_setaffinity is a plain syscall, async-signal-safe between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The CPUs a thread or process may run on (`sched_getaffinity`).
#[cfg(test)]
pub(crate) fn affinity_of(tid: u32) -> std::io::Result<Vec<u32>> {
    // SAFETY: a zeroed cpu_set_t is valid; the kernel fills it; CPU_ISSET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..MAX_HOST_CPUS)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c as u32)
            .collect())
    }
}

/// A synchronous child in its own process group, killed (the whole group) when this drops and
/// by the kernel when the lab dies. Public for tests that run a helper beside the lab (the
/// remote-cache test's registry).
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
}

/// Spawns `cmd` isolated as above: its own process group, `PR_SET_PDEATHSIG` (so spawn it from
/// a thread that lives as long as the child should).
pub fn spawn_in_group(cmd: &mut Command) -> Result<GroupChild> {
    isolate(cmd);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    Ok(GroupChild { child })
}

impl GroupChild {
    /// The child's pid (its process group's id).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    pub(crate) fn inner(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        kill_group(self.child.id());
        // SIGKILL takes effect within milliseconds; reap it, but never wait without bound (a
        // process stuck in the kernel would hang whoever dropped this).
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        tracing::warn!(
            pid = self.child.id(),
            "a killed child was not reaped within 2 s"
        );
    }
}

/// Kills a whole process group led by `pid`.
pub(crate) fn kill_group(pid: u32) {
    // SAFETY: plain syscall; a stale pgid only yields ESRCH.
    unsafe {
        libc::killpg(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// An async child in its own process group; the group is killed on drop.
#[derive(Debug)]
pub(crate) struct AsyncGroupChild {
    pub child: tokio::process::Child,
    pgid: u32,
}

/// Spawns an async `cmd` isolated as above.
pub(crate) fn spawn_async_in_group(mut cmd: Command) -> Result<AsyncGroupChild> {
    isolate(&mut cmd);
    let program = cmd.get_program().to_owned();
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {program:?}"))?;
    let pgid = child.id().context("child exited at once")?;
    Ok(AsyncGroupChild { child, pgid })
}

impl AsyncGroupChild {
    pub(crate) fn pid(&self) -> u32 {
        self.pgid
    }
}

impl Drop for AsyncGroupChild {
    fn drop(&mut self) {
        kill_group(self.pgid);
        // Reap it now so no zombie lingers in the test's process table.
        let _ = self.child.start_kill();
        // SIGKILL takes effect within milliseconds; wait (bounded) so no zombie lingers.
        for _ in 0..200 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// The variables a tool the lab starts ([`command`]) keeps from the lab's environment: where
/// programs are, who and where the user is, language and time zone, a temporary directory, and
/// the proxy and CA settings a download needs. Everything else stays with the lab: a registry's
/// settings, `GIT_DIR` or `KBUILD_OUTPUT` that would redirect a tool, variables a hostile kernel
/// tree's Kbuild or a patched QEMU could read (issue W2).
const KEPT_VARIABLES: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "TERM",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "RUST_LOG",
    "RUST_BACKTRACE",
    // The device model's log filter (lab-dma).
    "LAB_DMA_LOG",
];

/// Whether a tool the lab starts keeps the variable `name`: [`KEPT_VARIABLES`], `LC_*`, and the
/// test suite's hooks (`LAB_TEST_*`, `*_TEST_MARK`: the kill tests find what outlived a lab by
/// the marker in each process's environment; they carry nothing secret).
fn kept_variable(name: &std::ffi::OsStr) -> bool {
    name.to_str().is_some_and(|n| {
        KEPT_VARIABLES.contains(&n)
            || n.starts_with("LC_")
            || n.starts_with("LAB_TEST_")
            || n.ends_with("_TEST_MARK")
    })
}

/// A `Command` for `program` with only the allow-listed part of the lab's environment
/// ([`KEPT_VARIABLES`]); what the caller adds with `env` afterwards is kept. For QEMU, the
/// device models, make, git, patch, tar, apt and dpkg: tools that run what the lab took from
/// outside. Cargo and the lab itself keep the whole environment (toolchains, registries and
/// the user's cargo settings are read from it); the registry password is never in it
/// (`cache::remote::keep_password_from_children`).
pub(crate) fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .envs(std::env::vars_os().filter(|(name, _)| kept_variable(name)));
    cmd
}

/// The variables `cargo run` sets for the program it starts (`CARGO_MANIFEST_DIR`,
/// `CARGO_PKG_*`, the lab's build-script `OUT_DIR`, ...), found among `names`. Left in the
/// environment of the cargo that `lab test` starts, they change how some dependencies' build
/// scripts are fingerprinted (ring's: "EnvVarChanged OUT_DIR", "CARGO_MANIFEST_DIR"), so every
/// `lab test` after a plain `cargo build` rebuilt ring, rustls, reqwest, oci-client and the lab
/// (about a minute on two cores), and every plain build after it the same again; a cold run
/// built them twice. `CARGO` itself stays: it names the cargo to run.
fn cargo_run_vars(names: impl Iterator<Item = OsString>) -> Vec<OsString> {
    const EXACT: &[&str] = &[
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "OUT_DIR",
    ];
    names
        .filter(|n| {
            n.to_str()
                .is_some_and(|n| EXACT.contains(&n) || n.starts_with("CARGO_PKG_"))
        })
        .collect()
}

/// `cmd` (a cargo the lab starts) without the variables `cargo run` set for the lab
/// ([`cargo_run_vars`]), so its builds are the ones a plain `cargo build` makes.
pub fn without_cargo_run_env(cmd: &mut Command) -> &mut Command {
    for name in cargo_run_vars(std::env::vars_os().map(|(k, _)| k)) {
        cmd.env_remove(name);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool started through [`command`] sees the allow-listed variables and what the caller
    /// set, nothing else of the lab's environment (cargo and nextest give a test process
    /// `CARGO_MANIFEST_DIR` and more: they must not reach the child).
    #[test]
    fn a_tool_gets_only_the_allow_listed_environment() {
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let out = output(command("env").arg("-0").env("LAB_SET_BY_CALLER", "1")).unwrap();
        assert!(out.status.success());
        let names: Vec<String> = out
            .stdout
            .split(|&b| b == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let entry = String::from_utf8_lossy(entry);
                entry.split('=').next().unwrap_or_default().to_string()
            })
            .collect();
        assert!(names.iter().any(|n| n == "PATH"), "{names:?}");
        assert!(names.iter().any(|n| n == "LAB_SET_BY_CALLER"), "{names:?}");
        for name in &names {
            assert!(
                name == "LAB_SET_BY_CALLER" || kept_variable(std::ffi::OsStr::new(name)),
                "{name} reached the child: {names:?}"
            );
        }
    }

    #[test]
    fn the_variables_cargo_run_sets_for_the_lab_do_not_reach_its_cargo() {
        let names = [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_VERSION",
            "CARGO_PKG_NAME",
            "CARGO_CRATE_NAME",
            "CARGO_PRIMARY_PACKAGE",
            "OUT_DIR",
            "PATH",
        ]
        .map(OsString::from);
        let dropped = cargo_run_vars(names.into_iter());
        assert_eq!(
            dropped,
            [
                "CARGO_MANIFEST_DIR",
                "CARGO_PKG_VERSION",
                "CARGO_PKG_NAME",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR"
            ]
            .map(OsString::from)
        );
    }
    use std::time::Instant;

    fn alive(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !matches!(
                stat.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next()),
                Some("Z" | "X")
            ),
            Err(_) => false,
        }
    }

    fn all_gone(pids: &[u32], limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if !pids.iter().any(|&p| alive(p)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        !pids.iter().any(|&p| alive(p))
    }

    #[test]
    fn a_watched_tool_reports_as_if_run_directly() {
        let out =
            output(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"])).unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
        let killed = status(Command::new("sh").args(["-c", "kill -TERM $$"])).unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(killed.signal(), Some(libc::SIGTERM));
        let err = output(&mut Command::new("/nonexistent/tool")).unwrap_err();
        assert!(format!("{err:#}").contains("No such file"), "{err:#}");
        // The watcher wakes on the tool's exit, it does not wait out a poll period.
        let start = Instant::now();
        for _ in 0..20 {
            assert!(status(&mut Command::new("true")).unwrap().success());
        }
        println!("20 watched runs of `true`: {:?}", start.elapsed());
    }

    /// Run by `a_killed_lab_leaves_no_tool_or_grandchild` in a child process: runs a tool that
    /// starts a child of its own, both printing their pids, the way `make` starts compilers.
    #[test]
    #[ignore = "helper for a_killed_lab_leaves_no_tool_or_grandchild"]
    fn helper_runs_a_tool_with_a_child() {
        let Some(mode) = std::env::var_os("LAB_PROCESS_HELPER") else {
            return;
        };
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 300 & echo PID=$!; echo PID=$$; wait"]);
        if mode == "plain" {
            cmd.status().unwrap();
        } else {
            status(&mut cmd).unwrap();
        }
    }

    /// Starts the helper, waits for the tool and its child to run, SIGKILLs the helper and
    /// returns the tool's and the child's pids.
    fn kill_helper_mid_run(mode: &str) -> Vec<u32> {
        use std::io::BufRead;
        let mut helper = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "process::tests::helper_runs_a_tool_with_a_child",
                "--ignored",
                "--nocapture",
            ])
            .env("LAB_PROCESS_HELPER", mode)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut pids = Vec::new();
        let mut lines = std::io::BufReader::new(helper.stdout.take().unwrap()).lines();
        while pids.len() < 2 {
            let line = lines.next().expect("helper ended early").unwrap();
            if let Some(pid) = line.strip_prefix("PID=") {
                pids.push(pid.parse().unwrap());
            }
        }
        helper.kill().unwrap();
        helper.wait().unwrap();
        pids
    }

    /// Run by `a_test_process_dies_with_its_killed_runner` under a stand-in runner: watches its
    /// parent as the test helper does, starts a tool with a child and waits.
    #[test]
    #[ignore = "helper for a_test_process_dies_with_its_killed_runner"]
    fn helper_watches_its_runner() {
        if std::env::var_os("LAB_PROCESS_HELPER").is_none() {
            return;
        }
        watch_parent();
        println!("PID={}", std::process::id());
        status(Command::new("sh").args(["-c", "sleep 300 & echo PID=$!; echo PID=$$; wait"]))
            .unwrap();
    }

    #[test]
    fn a_test_process_dies_with_its_killed_runner() {
        use std::io::BufRead;
        // A stand-in for `cargo nextest`: a shell that starts the test process and waits.
        let exe = std::env::current_exe().unwrap();
        let mut runner = Command::new("sh")
            .arg("-c")
            .arg(
                "\"$0\" --exact process::tests::helper_watches_its_runner --ignored --nocapture; :",
            )
            .arg(&exe)
            .env("NEXTEST_RUN_ID", "stand-in")
            .env("LAB_PROCESS_HELPER", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut pids = Vec::new();
        let mut lines = std::io::BufReader::new(runner.stdout.take().unwrap()).lines();
        while pids.len() < 3 {
            let line = lines.next().expect("helper ended early").unwrap();
            if let Some(pid) = line.strip_prefix("PID=") {
                pids.push(pid.parse().unwrap());
            }
        }
        runner.kill().unwrap();
        runner.wait().unwrap();
        let gone = all_gone(&pids, Duration::from_secs(5));
        for &pid in &pids {
            // SAFETY: plain syscall on pids this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        assert!(
            gone,
            "test process, tool or child outlived the runner: {pids:?}"
        );
    }

    #[test]
    fn a_killed_lab_leaves_no_tool_or_grandchild() {
        // What plain children did: both outlive their killed parent (cleaned up here).
        let plain = kill_helper_mid_run("plain");
        assert!(!all_gone(&plain, Duration::from_secs(1)), "{plain:?}");
        for pid in plain {
            // SAFETY: plain syscall on pids this test started.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        let start = Instant::now();
        let watched = kill_helper_mid_run("watched");
        assert!(
            all_gone(&watched, Duration::from_secs(5)),
            "tool or its child outlived the killed lab: {watched:?}"
        );
        println!("gone {:?} after the kill", start.elapsed());
    }

    /// A child restricted to one CPU (one this process may use) runs there, and so does every
    /// thread it starts: its affinity is set before exec.
    #[test]
    fn restrict_to_cpus_sets_the_childs_affinity_before_exec() {
        let own = affinity_of(0).unwrap();
        let cpu = *own.last().unwrap();
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        restrict_to_cpus(&mut cmd, &[cpu]);
        let child = spawn_in_group(&mut cmd).unwrap();
        assert_eq!(affinity_of(child.id()).unwrap(), vec![cpu]);
        drop(child);
        // Our own affinity is untouched.
        assert_eq!(affinity_of(0).unwrap(), own);
    }
}
