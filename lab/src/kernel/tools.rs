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
pub fn missing_packages() -> Vec<&'static str> {
    let mut out: Vec<&str> = NEEDS
        .iter()
        .filter(|(need, _)| !present(need))
        .map(|(_, pkg)| *pkg)
        .collect();
    out.dedup();
    out
}

/// Makes sure the kernel build tools are there, installing them when allowed.
pub fn ensure_build_tools() -> Result<()> {
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
    crate::progress::step(format!(
        "installing kernel build tools: {}",
        missing.join(" ")
    ));
    let install = |update: bool| -> Result<bool> {
        if update {
            crate::process::status(Command::new("apt-get").args(["update", "-q"]))
                .context("apt-get update")?;
        }
        Ok(crate::process::status(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .context("apt-get install")?
        .success())
    };
    if !install(false)? && !install(true)? {
        bail!("installing the kernel build tools failed; run: {command}");
    }
    let still = missing_packages();
    if !still.is_empty() {
        bail!("still missing after install: {}", still.join(" "));
    }
    Ok(())
}
