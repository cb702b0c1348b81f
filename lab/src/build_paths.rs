//! Rust flags that keep the guest programs' bytes free of the build machine's paths. Shared by
//! `lab/build.rs` (the host-architecture agent, through `#[path]`) and `cross` (other
//! architectures).
//!
//! A panic location names its source file, and a dependency's lies under `CARGO_HOME`: without
//! these, the agent built in a fresh clone (another `CARGO_HOME`, another target dir) had other
//! bytes than this host's, so the guest images whose keys hash it were never found on a remote
//! cache and were built again on every fresh machine (measured 2026-12-04 with
//! `.ci/first-table-remote`).

use std::path::{Path, PathBuf};

/// `CARGO_HOME` as cargo finds it: the variable, else `~/.cargo`.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
}

/// `--remap-path-prefix` flags for the workspace, the target dir and `CARGO_HOME` (the last
/// matching one wins: the target dir may lie inside the workspace).
pub(crate) fn remap_flags(workspace: &Path, target_dir: &Path) -> Vec<String> {
    let mut flags = vec![format!("--remap-path-prefix={}=/lab", workspace.display())];
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags.push(format!(
        "--remap-path-prefix={}=/lab-target",
        target_dir.display()
    ));
    flags
}
