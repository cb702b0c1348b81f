//! The host tools a kernel build needs. A fresh machine often lacks some (flex, bison, the libelf
//! and OpenSSL headers); the README's first command must still work there, so as root on a
//! Debian-like host the lab installs them with apt (saying so), and otherwise names the exact
//! command to run. `LAB_NO_INSTALL=1` turns the install off.
//!
//! Installs never race: parallel tests on a fresh host all find the tools missing at once, and
//! dpkg fails a second apt at once ("Could not get lock /var/lib/dpkg/lock-frontend"). So the
//! lab's installs take turns on a host-wide lock ([`INSTALL_LOCK`]) and look again once they
//! hold it (what the one before installed is not installed twice), and apt itself waits for
//! dpkg's lock held by anything else (unattended-upgrades, a user's apt) instead of failing.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// (what is checked, the Debian package that provides it)
const NEEDS: &[(Need, &str)] = &[
    (Need::Command("make"), "make"),
    (Need::Command("gcc"), "gcc"),
    (Need::Command("flex"), "flex"),
    (Need::Command("bison"), "bison"),
    (Need::Command("bc"), "bc"),
    (Need::Command("perl"), "perl"),
    (Need::Command("depmod"), "kmod"),
    (Need::Command("patch"), "patch"),
    (Need::Header("gelf.h"), "libelf-dev"),
    (Need::Header("openssl/ssl.h"), "libssl-dev"),
];

/// The lab's host package installs take turns here: one file per host, not per cache, since
/// dpkg's lock is the host's. Only root installs, and only root writes `/run` (cleared at boot);
/// not `/run/lock`, where any user may create the file first and hold it.
const INSTALL_LOCK: &str = "/run/lab-host-install.lock";

/// How long apt waits for dpkg's lock held by another program before it fails (seconds): a
/// fresh host's unattended-upgrades can hold it for minutes.
const DPKG_LOCK_WAIT_S: u32 = 600;

enum Need {
    Command(&'static str),
    Header(&'static str),
}

fn present(need: &Need) -> bool {
    match need {
        Need::Command(name) => std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file())),
        Need::Header(name) => ["/usr/include", "/usr/local/include"]
            .iter()
            .any(|dir| Path::new(dir).join(name).is_file()),
    }
}

/// The Debian packages whose tools or headers are missing.
pub(crate) fn missing_packages() -> Vec<&'static str> {
    let mut out: Vec<&str> = NEEDS
        .iter()
        .filter(|(need, _)| !present(need))
        .map(|(_, pkg)| *pkg)
        .collect();
    out.dedup();
    out
}

/// Makes sure the kernel build tools are there, installing them when allowed. apt's own output
/// goes to a log under `logs` (named in the progress line and in any error), not to the
/// terminal: the lab's stdout is for its results.
pub(crate) fn ensure_build_tools(logs: &Path) -> Result<()> {
    let missing = missing_packages();
    if missing.is_empty() {
        return Ok(());
    }
    let command = format!(
        "apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    );
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let apt = Path::new("/usr/bin/apt-get").exists();
    if !root || !apt || std::env::var_os("LAB_NO_INSTALL").is_some() {
        bail!(
            "building a kernel needs packages that are missing: {}; run: {command}",
            missing.join(" ")
        );
    }
    install_once(
        Path::new("apt-get"),
        Path::new(INSTALL_LOCK),
        missing_packages,
        logs,
    )
    .with_context(|| format!("run: {command}"))?;
    let still = missing_packages();
    if !still.is_empty() {
        bail!("still missing after install: {}", still.join(" "));
    }
    Ok(())
}

/// Installs what `still_missing` names once this process holds the host-wide `lock`: a lab
/// that waited there for another's install looks again and installs only what is still
/// missing, usually nothing.
fn install_once(
    apt: &Path,
    lock: &Path,
    still_missing: impl Fn() -> Vec<&'static str>,
    logs: &Path,
) -> Result<()> {
    let file = crate::cache::open_lock_file(lock)?;
    crate::cache::lock::wait_for(&file, lock, "another lab's package install")?;
    let missing = still_missing();
    if missing.is_empty() {
        return Ok(());
    }
    install_with(apt, &missing, logs)
}

/// Installs `missing` with `apt` (`apt-get`), updating the lists once if the first try fails;
/// apt's output goes to a log in `logs`, not to the terminal.
fn install_with(apt: &Path, missing: &[&str], logs: &Path) -> Result<()> {
    std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
    let log = logs.join(format!("apt-install-{}.log", std::process::id()));
    crate::progress::step(format!(
        "installing kernel build tools: {} (apt's log: {})",
        missing.join(" "),
        log.display()
    ));
    let mut text = Vec::new();
    let mut run = |args: &[&str]| -> Result<bool> {
        let out = crate::process::output(
            crate::process::command(apt)
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .with_context(|| format!("apt-get {}", args.join(" ")))?;
        text.extend_from_slice(format!("$ apt-get {}\n", args.join(" ")).as_bytes());
        text.extend_from_slice(&out.stdout);
        text.extend_from_slice(&out.stderr);
        Ok(out.status.success())
    };
    let wait = format!("DPkg::Lock::Timeout={DPKG_LOCK_WAIT_S}");
    let mut install: Vec<&str> = vec!["-o", &wait, "install", "-y", "-q"];
    install.push("--no-install-recommends");
    install.extend(missing);
    let ok = run(&install)? || (run(&["-o", &wait, "update", "-q"])? && run(&install)?);
    std::fs::write(&log, &text).with_context(|| format!("writing {}", log.display()))?;
    if !ok {
        let tail: Vec<String> = String::from_utf8_lossy(&text)
            .lines()
            .rev()
            .take(10)
            .map(str::to_string)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        bail!(
            "installing {} failed (log {}):\n{}",
            missing.join(" "),
            log.display(),
            tail.join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
mod install_tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in apt-get: prints like apt, records its arguments, fails `install` until an
    /// `update` ran when `fail_first` is set.
    fn fake_apt(dir: &Path, fail_first: bool) -> std::path::PathBuf {
        let path = dir.join("apt-get");
        let script = format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\necho 'Reading package lists...'\n\
             case \"$3\" in update) touch {updated} ;; install) [ {fail} = 0 ] || [ -e {updated} ] || {{ echo 'E: Unable to locate package' >&2; exit 100; }} ;; esac\n",
            calls = dir.join("calls").display(),
            updated = dir.join("updated").display(),
            fail = u8::from(fail_first)
        );
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn apt_output_goes_to_the_log_not_the_terminal() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        install_with(&fake_apt(dir.path(), false), &["flex", "bison"], &logs).unwrap();
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls,
            "-o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends flex bison\n"
        );
        let log = std::fs::read_dir(&logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(log).unwrap();
        assert!(
            text.contains("$ apt-get -o DPkg::Lock::Timeout=600 install")
                && text.contains("Reading package lists")
        );
    }

    /// Two labs that find the same tools missing at once: both succeed, and apt installs once.
    /// The stand-in apt fails as dpkg does when another apt holds its lock (`busy`), so without
    /// the host-wide lock the second install fails; without the second look it installs twice.
    #[test]
    fn two_installs_started_together_both_succeed_and_install_once() {
        let dir = tempfile::tempdir().unwrap();
        let apt = dir.path().join("apt-get");
        let script = format!(
            "#!/bin/sh\necho \"$@\" >> {calls}\n\
             if ! mkdir {busy} 2>/dev/null; then echo 'E: Could not get lock /var/lib/dpkg/lock-frontend' >&2; exit 100; fi\n\
             sleep 0.5; touch {installed}; rmdir {busy}\n",
            calls = dir.path().join("calls").display(),
            busy = dir.path().join("busy").display(),
            installed = dir.path().join("installed").display(),
        );
        std::fs::write(&apt, script).unwrap();
        std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let lock = dir.path().join("install.lock");
        let installed = dir.path().join("installed");
        let logs = dir.path().join("logs");
        let barrier = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            let runs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let missing = || {
                            if installed.exists() {
                                Vec::new()
                            } else {
                                vec!["flex"]
                            }
                        };
                        install_once(&apt, &lock, missing, &logs)
                    })
                })
                .collect();
            for run in runs {
                run.join().unwrap().unwrap();
            }
        });
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(calls.matches(" install ").count(), 1, "{calls}");
        assert!(installed.exists());
    }

    #[test]
    fn a_failed_install_updates_once_then_names_the_log_and_quotes_it() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        install_with(&fake_apt(dir.path(), true), &["flex"], &logs).unwrap();
        let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
        assert_eq!(
            calls.lines().count(),
            3,
            "install, update, install: {calls}"
        );
        let broken = tempfile::tempdir().unwrap();
        let apt = broken.path().join("apt-get");
        std::fs::write(&apt, "#!/bin/sh\necho 'E: no such package' >&2\nexit 100\n").unwrap();
        std::fs::set_permissions(&apt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = format!("{:#}", install_with(&apt, &["nope"], &logs).unwrap_err());
        assert!(
            err.contains("installing nope failed") && err.contains("E: no such package"),
            "{err}"
        );
        assert!(err.contains(&logs.display().to_string()), "{err}");
    }
}
