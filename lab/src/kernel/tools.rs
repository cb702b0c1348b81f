//! The host tools a kernel build needs. A fresh machine often lacks some (flex, bison, the libelf
//! and OpenSSL headers); the README's first command must still work there, so as root on a
//! Debian-like host the lab installs them with apt (saying so), and otherwise names the exact
//! command to run. `LAB_NO_INSTALL=1` turns the install off.

use std::path::Path;
use std::process::Command;

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
    install_with(Path::new("apt-get"), &missing, logs)
        .with_context(|| format!("run: {command}"))?;
    let still = missing_packages();
    if !still.is_empty() {
        bail!("still missing after install: {}", still.join(" "));
    }
    Ok(())
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
            Command::new(apt)
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .with_context(|| format!("apt-get {}", args.join(" ")))?;
        text.extend_from_slice(format!("$ apt-get {}\n", args.join(" ")).as_bytes());
        text.extend_from_slice(&out.stdout);
        text.extend_from_slice(&out.stderr);
        Ok(out.status.success())
    };
    let mut install: Vec<&str> = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend(missing);
    let ok = run(&install)? || (run(&["update", "-q"])? && run(&install)?);
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
             case \"$1\" in update) touch {updated} ;; install) [ {fail} = 0 ] || [ -e {updated} ] || {{ echo 'E: Unable to locate package' >&2; exit 100; }} ;; esac\n",
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
        assert_eq!(calls, "install -y -q --no-install-recommends flex bison\n");
        let log = std::fs::read_dir(&logs)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let text = std::fs::read_to_string(log).unwrap();
        assert!(text.contains("$ apt-get install") && text.contains("Reading package lists"));
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
