//! The lab's emulated DMA engines: a `lab-dma` process per device (built from `lab/dma`),
//! served over vfio-user to QEMU's `vfio-user-pci` client on a socket in the VM's scratch dir.
//! The binary is found, never built here ([`locate`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{Attached, Attachment, Device, GuestDriver, HostPart};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::process::{spawn_async_in_group, AsyncGroupChild};

/// Which engine a device model emulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Engine {
    /// Intel I/OAT (ioatdma), 1 to 4 channels.
    Ioat { channels: u8 },
    /// AMD PTDMA (ptdma), one queue.
    Ptdma,
}

impl Engine {
    /// The guest driver that binds it.
    pub(crate) fn driver(&self) -> &'static str {
        match self {
            Engine::Ioat { .. } => "ioatdma",
            Engine::Ptdma => "ptdma",
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
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

    /// Spawns the device model `binary` on a socket in `socket_dir` and waits until it listens;
    /// with `cpus`, the model runs on those host CPUs only (a pinned topology's housekeeping
    /// set). Its log and its stderr go to files in `log_dir`, never to the lab's terminal.
    /// Returns the process (killed with its group on drop), the socket and the model's log.
    pub(crate) async fn start(
        &self,
        binary: &Path,
        index: usize,
        socket_dir: &Path,
        log_dir: &Path,
        cpus: Option<&[u32]>,
    ) -> Result<(AsyncGroupChild, PathBuf, PathBuf)> {
        let socket = socket_dir.join(format!("dev{index}.sock"));
        let log = log_dir.join(format!("dev{index}-{}.log", self.driver()));
        let stderr_path = log_dir.join(format!("dev{index}-{}.stderr.log", self.driver()));
        let stderr = std::fs::File::create(&stderr_path)
            .with_context(|| format!("creating {}", stderr_path.display()))?;
        let mut cmd = crate::process::command(binary);
        cmd.arg("--socket")
            .arg(&socket)
            .args(self.args())
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(cpus) = cpus {
            crate::process::restrict_to_cpus(&mut cmd, cpus);
        }
        let mut child =
            spawn_async_in_group(cmd).with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.child.stdout.take().context("no lab-dma stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let wait = async {
            while let Some(line) = lines.next_line().await? {
                if line.starts_with("lab-dma: listening") {
                    return anyhow::Ok(());
                }
            }
            bail!(
                "lab-dma exited before listening (see {} and {})",
                log.display(),
                stderr_path.display()
            )
        };
        tokio::time::timeout(Duration::from_secs(10), wait)
            .await
            .context("lab-dma did not listen within 10 s")??;
        // Keep draining stdout so the device never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((child, socket, log))
    }
}

#[async_trait::async_trait]
impl Device for Engine {
    fn label(&self) -> String {
        self.driver().to_string()
    }

    fn role(&self) -> String {
        "dma-engine".to_string()
    }

    fn describe(&self) -> serde_json::Value {
        serde_json::json!({ "lab-dma": self })
    }

    fn validate(&self) -> Result<()> {
        Engine::validate(self)
    }

    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
        let binary = at
            .host
            .lab_dma
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let (child, socket, log) = self
            .start(binary, at.index, at.scratch, at.log_dir, at.cpus)
            .await?;
        Ok(Attached {
            qemu_args: qemu_args(&at.id, &at.slot, &socket),
            log: Some(log.clone()),
            files: Vec::new(),
            host_part: Some(Box::new(DeviceModel {
                _process: child,
                log,
            })),
        })
    }

    fn guest_driver(&self) -> GuestDriver {
        GuestDriver::new(self.driver(), Some(self.driver()), DMA_READY)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// A DMA engine's channels exist once the driver has registered them with dmaengine.
pub(crate) const DMA_READY: &str = "exists $dev/dma/dma*chan*";

/// What `lab-dma` logs when it cannot map a region of guest RAM the client offered
/// (lab/dma/src/server.rs).
pub(crate) const MAP_FAILED: &str = "DMA_MAP failed";

/// A running `lab-dma` process (killed with its group when dropped) and its log.
struct DeviceModel {
    _process: AsyncGroupChild,
    log: PathBuf,
}

impl HostPart for DeviceModel {
    /// The guest RAM the model could not map (its log's [`MAP_FAILED`] lines): the device would
    /// fault on that memory, so a boot with any fails.
    fn problems(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(MAP_FAILED))
            .map(|l| {
                format!(
                    "could not map guest RAM (log {}): {}",
                    self.log.display(),
                    l.trim()
                )
            })
            .collect()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// QEMU's side: a `vfio-user-pci` client of the model's socket at PCI slot `addr`.
pub(crate) fn qemu_args(id: &str, addr: &str, socket: &Path) -> Vec<String> {
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
/// executable (test binaries live in `deps/`, one level further down; `cargo nextest run
/// --workspace` and `lab prepare` build it, and so does the CLI run from a checkout). The
/// library never builds it: a missing binary is an error that says how to get one.
pub(crate) fn locate() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("LAB_DMA_BIN") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("LAB_DMA_BIN={} is not a file", path.display());
        }
        return Ok(path);
    }
    let exe = std::env::current_exe()?;
    let path = beside(&exe).context("executable has no directory")?;
    if !path.is_file() {
        bail!(
            "no lab-dma device model at {}: build it with `cargo build -p lab-dma` (the same \
             profile as the lab), or `lab prepare`, or set LAB_DMA_BIN",
            path.display()
        );
    }
    Ok(path)
}

/// Where cargo puts `lab-dma` for the executable `exe`: its directory, or the one above for a
/// test binary in `deps/` or an example in `examples/` (a crate's own lab, `lab::cli::main_with`).
pub(crate) fn beside(exe: &Path) -> Option<PathBuf> {
    let mut profile_dir = exe.parent()?.to_path_buf();
    if profile_dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        profile_dir.pop();
    }
    Some(profile_dir.join("lab-dma"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lab_dma_is_found_beside_a_binary_a_test_or_an_example() {
        let want = Some(PathBuf::from("/t/debug/lab-dma"));
        assert_eq!(beside(Path::new("/t/debug/lab")), want);
        assert_eq!(beside(Path::new("/t/debug/deps/vm-0123")), want);
        assert_eq!(beside(Path::new("/t/debug/examples/own_lab")), want);
    }
}
