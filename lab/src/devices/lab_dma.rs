//! The lab's emulated DMA engines: a `lab-dma` process per device (built from `lab/dma`),
//! served over vfio-user to QEMU's `vfio-user-pci` client on a socket in the VM's scratch dir.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::process::{spawn_async_in_group, AsyncGroupChild};

/// Which engine a device model emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Intel I/OAT (ioatdma), 1 to 4 channels.
    Ioat { channels: u8 },
    /// AMD PTDMA (ptdma), one queue.
    Ptdma,
}

impl Engine {
    /// The guest driver that binds it.
    pub fn driver(&self) -> &'static str {
        match self {
            Engine::Ioat { .. } => "ioatdma",
            Engine::Ptdma => "ptdma",
        }
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            Engine::Ioat { channels } if !(1..=4).contains(channels) => {
                bail!("ioat channels = {channels}: the model has 1 to 4")
            }
            _ => Ok(()),
        }
    }

    fn args(&self) -> Vec<String> {
        match self {
            Engine::Ioat { channels } => vec![
                "--device".into(),
                "ioat".into(),
                "--channels".into(),
                channels.to_string(),
            ],
            Engine::Ptdma => vec!["--device".into(), "ptdma".into()],
        }
    }

    /// Spawns the device model on a socket in `socket_dir` and waits until it listens; with
    /// `cpus`, the model runs on those host CPUs only (a pinned topology's housekeeping set).
    /// Returns the process (killed with its group on drop), the socket and the model's log.
    pub async fn start(
        &self,
        index: usize,
        socket_dir: &Path,
        log_dir: &Path,
        cpus: Option<&[u32]>,
    ) -> Result<(AsyncGroupChild, PathBuf, PathBuf)> {
        let binary = dma_binary()?;
        let socket = socket_dir.join(format!("dev{index}.sock"));
        let log = log_dir.join(format!("dev{index}-{}.log", self.driver()));
        let mut cmd = Command::new(&binary);
        cmd.arg("--socket")
            .arg(&socket)
            .args(self.args())
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(cpus) = cpus {
            crate::process::restrict_to_cpus(&mut cmd, cpus);
        }
        let mut child = spawn_async_in_group(cmd)?;
        let stdout = child.child.stdout.take().context("no lab-dma stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let wait = async {
            while let Some(line) = lines.next_line().await? {
                if line.starts_with("lab-dma: listening") {
                    return anyhow::Ok(());
                }
            }
            bail!("lab-dma exited before listening (see {})", log.display())
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .context("lab-dma did not listen within 10 s")??;
        // Keep draining stdout so the device never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((child, socket, log))
    }
}

/// QEMU's side: a `vfio-user-pci` client of the model's socket at PCI slot `addr`.
pub fn qemu_args(id: &str, addr: &str, socket: &Path) -> Vec<String> {
    vec![
        "-device".into(),
        serde_json::json!({
            "driver": "vfio-user-pci",
            "id": id,
            "addr": addr,
            "socket": {"type": "unix", "path": socket.display().to_string()},
        })
        .to_string(),
    ]
}

/// The `lab-dma` binary: `LAB_DMA_BIN`, else the one cargo builds beside the running
/// executable (test binaries live in `deps/`, one level further down). In a checkout it is built
/// now if missing or stale; run from a `cargo nextest archive` ([`crate::from_archive`]) it is the
/// archived one, and nothing is built.
pub fn dma_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("LAB_DMA_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let mut profile_dir = exe
        .parent()
        .context("executable has no directory")?
        .to_path_buf();
    if profile_dir.file_name().is_some_and(|n| n == "deps") {
        profile_dir.pop();
    }
    if crate::from_archive() {
        let path = profile_dir.join("lab-dma");
        if !path.is_file() {
            bail!(
                "running from a nextest archive, but it has no lab-dma at {} (`.ci/archive` puts \
                 it there); set LAB_DMA_BIN to a built lab-dma binary",
                path.display()
            );
        }
        return Ok(path);
    }
    build_dma_binary(&profile_dir)
}

fn build_dma_binary(profile_dir: &Path) -> Result<PathBuf> {
    let cache = crate::cache::Cache::from_env()?;
    let _lock = cache.lock("build-lab-dma")?;
    // Always ask cargo: it is a no-op when the binary is fresh and rebuilds it when the device
    // model's sources changed, so a stale device never runs silently.
    let release = profile_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-q", "-p", "lab-dma", "--bin", "lab-dma"])
        .current_dir(crate::repo_path(""));
    if release {
        cmd.arg("--release");
    }
    if let Some(target_dir) = profile_dir.parent() {
        cmd.env("CARGO_TARGET_DIR", target_dir);
    }
    let status = crate::process::status(&mut cmd).context("running cargo to build lab-dma")?;
    if !status.success() {
        bail!("building lab-dma failed; set LAB_DMA_BIN to a built lab-dma binary");
    }
    let path = profile_dir.join("lab-dma");
    if !path.is_file() {
        bail!(
            "cargo built lab-dma but {} does not exist; set LAB_DMA_BIN",
            path.display()
        );
    }
    Ok(path)
}
