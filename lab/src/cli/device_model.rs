//! The `lab-dma` device model, built beside the `lab` binary when the CLI runs through `cargo
//! run` (the binary's side: the library never runs cargo).

use anyhow::{Context, Result};

/// Builds the `lab-dma` device model beside this binary when the lab runs through `cargo run`
/// (cargo builds only the `lab` package's binaries, and the library never runs cargo: it finds
/// the model, `crate::devices::lab_dma::locate`). A no-op cargo call when it is fresh; nothing
/// outside a checkout, with `LAB_DMA_BIN`, or from a nextest archive.
pub(super) fn build() -> Result<()> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        return Ok(());
    };
    if std::env::var_os("LAB_DMA_BIN").is_some() || crate::from_archive() {
        return Ok(());
    }
    let exe = std::env::current_exe().context("finding the lab binary")?;
    let Some(profile_dir) = exe.parent() else {
        return Ok(());
    };
    let mut cmd = std::process::Command::new(cargo);
    crate::process::without_cargo_run_env(&mut cmd)
        // With `-p lab` too, though only lab-dma's binary is built: cargo resolves the shared
        // dependencies' features over the selected packages, and over these two they come out
        // as for `cargo build -p lab` and the tests' build. Alone, lab-dma resolves serde, clap,
        // tracing and others with fewer features, so a cold `lab test` compiled them twice.
        .args([
            "build", "-q", "-p", "lab", "-p", "lab-dma", "--bin", "lab-dma",
        ])
        .current_dir(crate::repo_path(""));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    let status = crate::process::status(&mut cmd).context("running cargo to build lab-dma")?;
    anyhow::ensure!(
        status.success(),
        "building lab-dma failed ({status}); set LAB_DMA_BIN to a built lab-dma binary"
    );
    Ok(())
}
