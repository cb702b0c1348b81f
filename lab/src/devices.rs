//! Devices given to a guest: the lab's emulated DMA engines (a `lab-dma` process per device,
//! served over vfio-user to QEMU's `vfio-user-pci` client), with the guest IRQ pinning each
//! device's vectors should get before a workload runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::vm::process::{spawn_async_in_group, AsyncGroupChild};

/// Which engine a device model emulates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Intel I/OAT (ioatdma), 1 to 4 channels.
    Ioat { channels: u8 },
    /// AMD PTDMA (ptdma), one queue.
    Ptdma,
}

/// A device for a VM, with optional guest IRQ pinning: `irq_cpus[i]` is the CPU list vector
/// `i` of the device is pinned to in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub engine: Engine,
    #[serde(default)]
    pub irq_cpus: Vec<Option<Vec<u32>>>,
}

impl DeviceSpec {
    pub fn ioat(channels: u8) -> DeviceSpec {
        DeviceSpec {
            engine: Engine::Ioat { channels },
            irq_cpus: vec![],
        }
    }

    pub fn ptdma() -> DeviceSpec {
        DeviceSpec {
            engine: Engine::Ptdma,
            irq_cpus: vec![],
        }
    }

    /// Pins vector `vector` of the device to `cpus` in the guest.
    pub fn irq_on_cpus(mut self, vector: usize, cpus: &[u32]) -> DeviceSpec {
        if self.irq_cpus.len() <= vector {
            self.irq_cpus.resize(vector + 1, None);
        }
        self.irq_cpus[vector] = Some(cpus.to_vec());
        self
    }

    /// The guest driver that binds this device.
    pub fn driver(&self) -> &'static str {
        match self.engine {
            Engine::Ioat { .. } => "ioatdma",
            Engine::Ptdma => "ptdma",
        }
    }

    fn engine_args(&self) -> Vec<String> {
        match &self.engine {
            Engine::Ioat { channels } => vec![
                "--device".into(),
                "ioat".into(),
                "--channels".into(),
                channels.to_string(),
            ],
            Engine::Ptdma => vec!["--device".into(), "ptdma".into()],
        }
    }

    /// Spawns the device model on a socket in `socket_dir` and waits until it listens.
    pub async fn start(
        &self,
        index: usize,
        socket_dir: &Path,
        log_dir: &Path,
    ) -> Result<RunningDevice> {
        let binary = dma_binary()?;
        let socket = socket_dir.join(format!("dev{index}.sock"));
        let log = log_dir.join(format!("dev{index}-{}.log", self.driver()));
        let mut cmd = Command::new(&binary);
        cmd.arg("--socket")
            .arg(&socket)
            .args(self.engine_args())
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
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
        Ok(RunningDevice {
            spec: self.clone(),
            socket,
            log,
            index,
            _child: child,
        })
    }
}

/// A device model process serving one VM; killed with the VM.
#[derive(Debug)]
pub struct RunningDevice {
    pub spec: DeviceSpec,
    pub socket: PathBuf,
    pub log: PathBuf,
    pub index: usize,
    _child: AsyncGroupChild,
}

impl RunningDevice {
    pub fn qemu_args(&self) -> Vec<String> {
        vec![
            "-device".into(),
            format!(
                "{{\"driver\":\"vfio-user-pci\",\"id\":\"dma{}\",\"addr\":\"{:#x}\",\"socket\":{{\"type\":\"unix\",\"path\":\"{}\"}}}}",
                self.index,
                FIRST_SLOT + self.index,
                self.socket.display()
            ),
        ]
    }

    /// The guest's PCI address of this device (slots are assigned in device order).
    pub fn pci_address(&self) -> String {
        pci_address(self.index)
    }
}

/// Devices sit at fixed slots from here on, so the guest can find device N without guessing.
const FIRST_SLOT: usize = 0x10;

pub fn pci_address(index: usize) -> String {
    format!("0000:00:{:02x}.0", FIRST_SLOT + index)
}

/// A bound device in the guest: its driver's IRQ numbers, by MSI-X vector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundDevice {
    pub index: usize,
    pub pci_address: String,
    pub driver: String,
    pub irqs: Vec<u32>,
}

/// Loads each device's driver in the guest, waits until it has bound, and pins every vector
/// the spec names; the effective affinity is read back and must match.
pub async fn bind_and_pin(vm: &crate::vm::Vm) -> Result<Vec<BoundDevice>> {
    let mut bound = Vec::new();
    for device in vm.devices() {
        let addr = device.pci_address();
        let driver = device.spec.driver();
        let dev = format!("/sys/bus/pci/devices/{addr}");
        vm.sh(&format!(
            "modprobe {driver}\n\
             for i in $(seq 100); do [ -e {dev}/driver ] && [ -d {dev}/msi_irqs ] && exit 0; sleep 0.1; done\n\
             echo '{driver} did not bind {addr}' >&2; dmesg | tail -30 >&2; exit 1"
        ))
        .await
        .with_context(|| format!("binding {driver} to device {}", device.index))?;
        let listing = vm.sh(&format!("ls {dev}/msi_irqs")).await?;
        let mut irqs: Vec<u32> = listing
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        irqs.sort_unstable();
        for (vector, cpus) in device.spec.irq_cpus.iter().enumerate() {
            let Some(cpus) = cpus else { continue };
            let irq = irqs.get(vector).with_context(|| {
                format!(
                    "device {} has no MSI-X vector {vector} (irqs {irqs:?})",
                    device.index
                )
            })?;
            let list = crate::topology::format_cpulist(cpus);
            vm.sh(&format!("echo {list} > /proc/irq/{irq}/smp_affinity_list"))
                .await
                .with_context(|| format!("pinning IRQ {irq} to {list}"))?;
            // x86 moves an MSI only when it next fires, so `effective_affinity_list` lags;
            // the requested mask must read back, and workloads check where completions land
            // from /proc/interrupts deltas.
            let requested = vm
                .sh(&format!("cat /proc/irq/{irq}/smp_affinity_list"))
                .await?;
            let requested = crate::topology::parse_cpulist(requested.trim()).unwrap_or_default();
            if requested != *cpus {
                bail!("IRQ {irq} was pinned to {list} but reads back {requested:?}");
            }
        }
        bound.push(BoundDevice {
            index: device.index,
            pci_address: addr,
            driver: driver.to_string(),
            irqs,
        });
    }
    Ok(bound)
}

/// The `lab-dma` binary: `LAB_DMA_BIN`, else the one cargo builds beside the running
/// executable (test binaries live in `deps/`, one level further down), built now if missing or
/// stale.
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
    let status = cmd.status().context("running cargo to build lab-dma")?;
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
