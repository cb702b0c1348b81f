//! Builds the lab's guest programs (the agent crate's binaries: the agent, `lab-numa01` and
//! `lab-udp-sink`) as
//! static x86_64 binaries and leaves each at `$OUT_DIR/<name>` with its sha256 beside it
//! (`<name>.sha256`), where `lab::agent::LAB_PROGRAMS` embeds them. The guest initramfs has no
//! libc, hence `+crt-static`.
//!
//! A nested cargo with its own target dir (`<target>/agent`) avoids waiting on the outer build's
//! lock; the explicit `--target` keeps the static flag off the nested build scripts and
//! proc-macros.

#[path = "src/build_paths.rs"]
mod build_paths;

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";

/// The static guest binaries of the agent crate: the agent itself and the lab's own workloads,
/// each with its line in `lab::agent::LAB_PROGRAMS`.
const GUEST_BINARIES: &[&str] = &["lab-agent", "lab-numa01", "lab-udp-sink"];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .parent()
        .expect("lab/ lives inside the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());

    for p in ["agent/src", "agent/Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", manifest_dir.join(p).display());
    }
    // Dependency versions and profiles of the nested build.
    for p in ["Cargo.lock", "Cargo.toml"] {
        println!("cargo:rerun-if-changed={}", workspace.join(p).display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    println!("cargo:rerun-if-env-changed=CARGO_HOME");

    let target_dir = match env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d).join("agent"),
        None => workspace.join("target").join("agent"),
    };

    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--release")
        .args(["-p", "lab-agent"])
        .args(GUEST_BINARIES.iter().flat_map(|b| ["--bin", b]))
        .args(["--target", GUEST_TARGET])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    scrub_env(&mut cmd);
    let mut rustflags = vec!["-Ctarget-feature=+crt-static".to_string()];
    rustflags.extend(build_paths::remap_flags(&workspace, &target_dir));
    cmd.env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        // Small binary in the initramfs: no debuginfo (the workspace release profile has some).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");

    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {:?} to build the guest agent: {e}", cargo));
    if !status.success() {
        panic!(
            "building the static guest agent failed ({status}); the command was {cmd:?}. \
             A static glibc build needs the C library's static archives (Debian: libc6-dev)."
        );
    }
    for name in GUEST_BINARIES {
        let built = target_dir.join(GUEST_TARGET).join("release").join(name);
        let dest = out_dir.join(name);
        copy(&built, &dest);
        // Its sha256, for the guest image's cache key: computed here once per build instead
        // of on every run of the lab.
        let bytes =
            std::fs::read(&dest).unwrap_or_else(|e| panic!("cannot read {}: {e}", dest.display()));
        use sha2::Digest as _;
        let digest: String = sha2::Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::write(out_dir.join(format!("{name}.sha256")), digest)
            .unwrap_or_else(|e| panic!("cannot write the digest of {name}: {e}"));
    }
}

/// Removes what the outer cargo set for this build script and would otherwise leak into the
/// nested build (its own flags, profile, clippy wrapper, target cfgs), keeping user settings
/// such as CARGO_HOME, registry/network configuration and the jobserver.
fn scrub_env(cmd: &mut Command) {
    const KEEP_PREFIXES: &[&str] = &[
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_SOURCE_",
        "CARGO_TERM_",
        // The outer build's jobserver, so both builds together respect -j.
        "CARGO_MAKEFLAGS",
    ];
    const DROP: &[&str] = &[
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CLIPPY_CONF_DIR",
        "OUT_DIR",
        "TARGET",
        "HOST",
        "NUM_JOBS",
        "OPT_LEVEL",
        "DEBUG",
        "PROFILE",
        "RUSTC_LINKER",
    ];
    for (k, _) in env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let cargo_var = k.starts_with("CARGO_") && !KEEP_PREFIXES.iter().any(|p| k.starts_with(p));
        if cargo_var || DROP.contains(&k) || k.starts_with("DEP_") {
            cmd.env_remove(k);
        }
    }
}

fn copy(from: &Path, to: &Path) {
    // Copy to a temporary name first so a concurrent reader never sees half a binary.
    let tmp = to.with_extension("tmp");
    std::fs::copy(from, &tmp)
        .and_then(|_| std::fs::rename(&tmp, to))
        .unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
}
