//! Devices given to a guest, all through one shape: a [`DeviceSpec`] says what the device is
//! ([`DeviceKind`]) and which CPUs each of its interrupt vectors should be pinned to in the
//! guest. Starting a spec gives a [`RunningDevice`]: whatever host side it needs (a `lab-dma`
//! process for the lab's own engines, a sparse backing file for an NVMe namespace, nothing for a
//! NIC) and the QEMU arguments that attach it at a fixed PCI slot. After boot,
//! [`bind_and_pin`] waits for each device's guest driver, lists its MSI-X vectors and pins
//! them; vectors the kernel manages are reported as such.
//!
//! - [`lab_dma`]: the emulated Intel I/OAT and AMD PTDMA engines (vfio-user).
//! - [`builtin`]: QEMU's own devices (`nvme`, `virtio-net-pci`).
//! - [`passthrough`]: host devices by PCI address (`vfio-pci`), from the host file
//!   ([`crate::hosts`]), read and written through [`sysfs`].
//! - [`guest`]: the guest side (binding, vectors, pinning).

pub mod builtin;
pub mod guest;
pub mod lab_dma;
pub mod passthrough;
pub mod sysfs;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::process::AsyncGroupChild;
pub use builtin::Nvme;
pub use guest::{bind_and_pin, BoundDevice, Vector};
pub use lab_dma::Engine;
pub use passthrough::Passthrough;

use crate::hosts::StandIn;

/// What a device is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// One of the lab's emulated DMA engines, a `lab-dma` process served over vfio-user.
    LabDma(Engine),
    /// QEMU's emulated NVMe controller.
    Nvme(Nvme),
    /// QEMU's virtio-net-pci on a hub port with no host side: a NIC for its driver and vectors.
    Nic,
    /// A host device from the host file, passed through with `vfio-pci`; in the guest it is
    /// what it stands in for (`ioatdma`, `ptdma`, `nvme`).
    Passthrough(Passthrough),
}

/// A device for a VM, with optional guest IRQ pinning: `irq_cpus[i]` is the CPU list MSI-X
/// vector `i` of the device is pinned to in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub kind: DeviceKind,
    #[serde(default)]
    pub irq_cpus: Vec<Option<Vec<u32>>>,
}

impl DeviceSpec {
    pub fn new(kind: DeviceKind) -> DeviceSpec {
        DeviceSpec {
            kind,
            irq_cpus: vec![],
        }
    }

    /// An emulated Intel I/OAT engine with 1 to 4 channels.
    pub fn ioat(channels: u8) -> DeviceSpec {
        DeviceSpec::new(DeviceKind::LabDma(Engine::Ioat { channels }))
    }

    /// An emulated AMD PTDMA engine (one queue).
    pub fn ptdma() -> DeviceSpec {
        DeviceSpec::new(DeviceKind::LabDma(Engine::Ptdma))
    }

    /// QEMU's NVMe controller with `io_queues` I/O queue pairs and one namespace of `bytes`.
    pub fn nvme(io_queues: u16, bytes: u64) -> DeviceSpec {
        DeviceSpec::new(DeviceKind::Nvme(Nvme {
            io_queues,
            namespaces: vec![bytes],
        }))
    }

    pub fn nic() -> DeviceSpec {
        DeviceSpec::new(DeviceKind::Nic)
    }

    /// The host file's device `name` (resolved before boot by [`passthrough::resolve`]).
    pub fn passthrough(name: &str) -> DeviceSpec {
        DeviceSpec::new(DeviceKind::Passthrough(Passthrough {
            name: name.to_string(),
            host: None,
        }))
    }

    /// What a passed-through device stands in for, once resolved.
    fn stand_in(&self) -> Option<StandIn> {
        match &self.kind {
            DeviceKind::Passthrough(p) => p.host.as_ref().map(|h| h.stands_in),
            _ => None,
        }
    }

    /// What the device is to a scenario, whatever provides it: `dma-engine`, `nvme`, `nic`
    /// (`passthrough` while unresolved). A device may replace a planned one of the same role.
    pub fn role(&self) -> &'static str {
        match (&self.kind, self.stand_in()) {
            (DeviceKind::LabDma(_), _)
            | (_, Some(StandIn::Ioatdma))
            | (_, Some(StandIn::Ptdma)) => "dma-engine",
            (DeviceKind::Nvme(_), _) | (_, Some(StandIn::Nvme)) => "nvme",
            (DeviceKind::Nic, _) => "nic",
            (DeviceKind::Passthrough(_), None) => "passthrough",
        }
    }

    /// `replacement` in this device's place (same role), keeping this device's IRQ masks unless
    /// the replacement names its own: how a scenario runs on a passed-through device.
    pub fn replaced_by(&self, replacement: &DeviceSpec, index: usize) -> Result<DeviceSpec> {
        if replacement.role() != self.role() {
            anyhow::bail!(
                "device {index}: the scenario plans a {} ({}), which {} ({}) cannot replace",
                self.role(),
                self.label(),
                replacement.label(),
                replacement.role()
            );
        }
        let mut spec = replacement.clone();
        if spec.irq_cpus.is_empty() {
            spec.irq_cpus = self.irq_cpus.clone();
        }
        Ok(spec)
    }

    /// Pins vector `vector` of the device to `cpus` in the guest.
    pub fn irq_on_cpus(mut self, vector: usize, cpus: &[u32]) -> DeviceSpec {
        if self.irq_cpus.len() <= vector {
            self.irq_cpus.resize(vector + 1, None);
        }
        self.irq_cpus[vector] = Some(cpus.to_vec());
        self
    }

    /// The guest driver that binds the PCI function.
    pub fn pci_driver(&self) -> &'static str {
        match &self.kind {
            DeviceKind::LabDma(engine) => engine.driver(),
            DeviceKind::Nvme(_) => "nvme",
            // virtio-net binds to the virtio device the PCI transport creates.
            DeviceKind::Nic => "virtio-pci",
            DeviceKind::Passthrough(_) => self.stand_in().map_or("vfio-pci", StandIn::driver),
        }
    }

    /// The module to load before waiting for the driver (None: built into the lab's kernels).
    pub fn module(&self) -> Option<&'static str> {
        match &self.kind {
            DeviceKind::LabDma(engine) => Some(engine.driver()),
            DeviceKind::Nvme(_) | DeviceKind::Nic => None,
            DeviceKind::Passthrough(_) => match self.stand_in() {
                Some(StandIn::Ioatdma) => Some("ioatdma"),
                Some(StandIn::Ptdma) => Some("ptdma"),
                Some(StandIn::Nvme) | None => None,
            },
        }
    }

    /// A shell test (on `$dev`, the device's sysfs directory) that holds once the driver has
    /// finished setting the device up, vectors included: nvme allocates its I/O vectors after
    /// probe returns, before it scans namespaces.
    pub fn ready_test(&self) -> &'static str {
        match &self.kind {
            DeviceKind::LabDma(_) => DMA_READY,
            DeviceKind::Nvme(_) => NVME_READY,
            DeviceKind::Nic => "ls -d $dev/virtio*/net/* > /dev/null 2>&1",
            DeviceKind::Passthrough(_) => match self.stand_in() {
                Some(StandIn::Nvme) => NVME_READY,
                _ => DMA_READY,
            },
        }
    }

    /// A short name for logs and results: `ioatdma`, `ptdma`, `nvme`, `nic`, `passthrough`.
    pub fn label(&self) -> &'static str {
        match &self.kind {
            DeviceKind::LabDma(engine) => engine.driver(),
            DeviceKind::Nvme(_) => "nvme",
            DeviceKind::Nic => "nic",
            DeviceKind::Passthrough(_) => "passthrough",
        }
    }

    /// Checks the spec against the guest before anything starts: every pinned CPU exists.
    pub fn validate(&self, index: usize, nr_cpus: u32) -> Result<()> {
        for (vector, cpus) in self.irq_cpus.iter().enumerate() {
            for cpu in cpus.iter().flatten() {
                if *cpu >= nr_cpus {
                    anyhow::bail!(
                        "device {index} ({}): irq_cpus[{vector}] names CPU {cpu}, but the guest has CPUs 0-{}",
                        self.label(),
                        nr_cpus.saturating_sub(1)
                    );
                }
            }
        }
        match &self.kind {
            DeviceKind::LabDma(engine) => engine.validate(),
            DeviceKind::Nvme(nvme) => nvme.validate(),
            DeviceKind::Nic => Ok(()),
            DeviceKind::Passthrough(p) if p.host.is_none() => Err(anyhow::anyhow!(
                "passthrough:{} was not looked up in a host file (devices::passthrough::resolve)",
                p.name
            )),
            DeviceKind::Passthrough(_) => Ok(()),
        }
        .with_context(|| format!("device {index} ({})", self.label()))
    }

    /// Starts the device's host side; `scratch` is the VM's private directory (sockets, backing
    /// files; removed with the VM), `log_dir` where device logs are kept, `cpus` the host CPUs
    /// a device-model process may run on (a pinned topology's housekeeping set).
    pub async fn start(
        &self,
        index: usize,
        scratch: &Path,
        log_dir: &Path,
        cpus: Option<&[u32]>,
    ) -> Result<RunningDevice> {
        let addr = format!("{:#x}", FIRST_SLOT + index);
        let id = format!("dev{index}");
        let mut running = RunningDevice {
            spec: self.clone(),
            index,
            qemu_args: Vec::new(),
            log: None,
            files: Vec::new(),
            process: None,
            claim: None,
        };
        match &self.kind {
            DeviceKind::LabDma(engine) => {
                let (child, socket, log) = engine.start(index, scratch, log_dir, cpus).await?;
                running.qemu_args = lab_dma::qemu_args(&id, &addr, &socket);
                running.process = Some(child);
                running.log = Some(log);
            }
            DeviceKind::Nvme(nvme) => {
                let files = nvme.create_backing_files(index, scratch)?;
                running.qemu_args = nvme.qemu_args(&id, &addr, &files);
                running.files = files;
            }
            DeviceKind::Nic => running.qemu_args = builtin::nic_args(&id, &addr, index),
            DeviceKind::Passthrough(p) => {
                let host = p.host.as_ref().with_context(|| {
                    format!("passthrough:{} was not looked up in a host file", p.name)
                })?;
                let cache = crate::cache::Cache::from_env()?;
                let sysfs = sysfs::Sysfs::host();
                let journals = passthrough::journal_dir(&cache);
                let host = host.clone();
                let claim = tokio::task::spawn_blocking(move || {
                    passthrough::Claim::take(&sysfs, &journals, &host)
                })
                .await??;
                running.qemu_args = passthrough::qemu_args(&id, &addr, &claim.device.bdf);
                running.claim = Some(claim);
            }
        }
        Ok(running)
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = anyhow::Error;

    /// The command line's device syntax: `KIND[:KEY=VALUE,...]` with `ioat:channels=N`,
    /// `ptdma`, `nic`, `nvme:queues=N,size=SIZE[,namespaces=K]` (K namespaces of SIZE
    /// each) and `passthrough:NAME` (the host file's device NAME), plus `irq<V>=CPULIST` to pin
    /// vector V (`nvme:queues=2,size=1G,irq0=3`, `passthrough:ioat0,irq0=2`).
    fn from_str(text: &str) -> Result<DeviceSpec> {
        let (kind, rest) = text.split_once(':').unwrap_or((text, ""));
        // `passthrough:NAME[,irqV=CPUS]`: the first field is the name, not KEY=VALUE.
        let (passthrough_name, rest) = if kind == "passthrough" {
            let (name, rest) = rest.split_once(',').unwrap_or((rest, ""));
            (Some(name.trim()), rest)
        } else {
            (None, rest)
        };
        let mut fields = std::collections::BTreeMap::new();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("device {text:?}: {pair:?} is not KEY=VALUE"))?;
            fields.insert(key.trim().to_string(), value.trim().to_string());
        }
        let mut take = |key: &str| fields.remove(key);
        let number = |key: &str, value: Option<String>, default: Option<u64>| -> Result<u64> {
            match value {
                Some(v) => v
                    .parse()
                    .with_context(|| format!("device {text:?}: {key}={v} is not a whole number")),
                None => default.with_context(|| format!("device {text:?}: {kind} needs {key}=...")),
            }
        };
        let mut spec = match kind {
            "ioat" => {
                let channels = number("channels", take("channels"), Some(1))?;
                DeviceSpec::ioat(u8::try_from(channels).unwrap_or(u8::MAX))
            }
            "ptdma" => DeviceSpec::ptdma(),
            "nic" => DeviceSpec::nic(),
            "passthrough" => {
                let name = passthrough_name.unwrap_or_default();
                if name.is_empty() || name.contains('=') {
                    anyhow::bail!(
                        "device {text:?}: write passthrough:NAME with NAME a device of the host file"
                    );
                }
                DeviceSpec::passthrough(name)
            }
            "nvme" => {
                let queues = number("queues", take("queues"), None)?;
                let size = take("size")
                    .with_context(|| format!("device {text:?}: nvme needs size=... (e.g. 1G)"))?;
                let bytes = crate::topology::parse_size(&size)
                    .map_err(|e| anyhow::anyhow!("device {text:?}: size: {e}"))?;
                let count = number("namespaces", take("namespaces"), Some(1))?;
                DeviceSpec::new(DeviceKind::Nvme(Nvme {
                    io_queues: u16::try_from(queues).unwrap_or(u16::MAX),
                    namespaces: vec![bytes; count as usize],
                }))
            }
            other => {
                anyhow::bail!(
                    "device {text:?}: unknown kind {other:?} (ioat, ptdma, nvme, nic, passthrough)"
                )
            }
        };
        for (key, value) in std::mem::take(&mut fields) {
            let vector: usize = key
                .strip_prefix("irq")
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("device {text:?}: unknown field {key:?}"))?;
            let cpus = crate::topology::parse_cpulist(&value)
                .with_context(|| format!("device {text:?}: {key}={value} is not a CPU list"))?;
            spec = spec.irq_on_cpus(vector, &cpus);
        }
        Ok(spec)
    }
}

/// A device attached to one VM; its host side (process, files) goes with the VM.
#[derive(Debug)]
pub struct RunningDevice {
    pub spec: DeviceSpec,
    pub index: usize,
    /// The QEMU arguments that attach it.
    pub qemu_args: Vec<String>,
    /// The device model's log, if it has a process.
    pub log: Option<PathBuf>,
    /// Backing files in the VM's scratch dir.
    pub files: Vec<PathBuf>,
    process: Option<AsyncGroupChild>,
    /// A passed-through device's hold on its IOMMU group: dropped after QEMU (the `Vm` drops
    /// QEMU first), which gives the host its drivers back.
    claim: Option<passthrough::Claim>,
}

impl RunningDevice {
    /// The guest's PCI address of this device (slots are assigned in device order).
    pub fn pci_address(&self) -> String {
        pci_address(self.index)
    }

    /// The guest RAM this device model could not map so far (its log's [`MAP_FAILED`] lines):
    /// the device would fault on that memory, so a boot with any fails.
    pub fn map_failures(&self) -> Vec<String> {
        let Some(log) = &self.log else {
            return Vec::new();
        };
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(MAP_FAILED))
            .map(|l| l.trim().to_string())
            .collect()
    }
}

/// What `lab-dma` logs when it cannot map a region of guest RAM the client offered
/// (lab/dma/src/server.rs).
pub const MAP_FAILED: &str = "DMA_MAP failed";

const DMA_READY: &str = "ls -d $dev/dma/dma*chan* > /dev/null 2>&1";
const NVME_READY: &str = "ls -d $dev/nvme/nvme*/nvme*n* > /dev/null 2>&1";

/// Devices sit at fixed slots from here on, so the guest can find device N without guessing.
const FIRST_SLOT: usize = 0x10;

pub fn pci_address(index: usize) -> String {
    format!("0000:00:{:02x}.0", FIRST_SLOT + index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_from_the_command_line_syntax() {
        let nvme: DeviceSpec = "nvme:queues=3,size=1G,namespaces=2,irq0=5".parse().unwrap();
        assert_eq!(
            nvme.kind,
            DeviceKind::Nvme(Nvme {
                io_queues: 3,
                namespaces: vec![1 << 30, 1 << 30],
            })
        );
        assert_eq!(nvme.irq_cpus, [Some(vec![5])]);
        assert_eq!(
            "ioat:channels=2".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::ioat(2)
        );
        assert_eq!("ioat".parse::<DeviceSpec>().unwrap(), DeviceSpec::ioat(1));
        assert_eq!("ptdma".parse::<DeviceSpec>().unwrap(), DeviceSpec::ptdma());
        assert_eq!("nic".parse::<DeviceSpec>().unwrap(), DeviceSpec::nic());
        assert_eq!(
            "passthrough:ioat0,irq0=3".parse::<DeviceSpec>().unwrap(),
            DeviceSpec::passthrough("ioat0").irq_on_cpus(0, &[3])
        );
    }

    #[test]
    fn a_device_is_replaced_only_by_one_of_its_role() {
        let planned = DeviceSpec::ioat(1).irq_on_cpus(0, &[2]);
        let mut pt = DeviceSpec::passthrough("x");
        assert!(planned.replaced_by(&pt, 0).is_err(), "unresolved");
        let host = |stands_in| crate::hosts::HostDevice {
            name: "x".into(),
            bdf: "0000:00:04.0".parse().unwrap(),
            id: "8086:2021".parse().unwrap(),
            stands_in,
            declared_at: "h.toml:1".into(),
        };
        if let DeviceKind::Passthrough(p) = &mut pt.kind {
            p.host = Some(host(StandIn::Ptdma));
        }
        let spec = planned.replaced_by(&pt, 0).unwrap();
        assert_eq!(spec.irq_cpus, [Some(vec![2])], "the plan's mask is kept");
        assert_eq!(spec.pci_driver(), "ptdma");
        if let DeviceKind::Passthrough(p) = &mut pt.kind {
            p.host = Some(host(StandIn::Nvme));
        }
        let err = planned.replaced_by(&pt, 0).unwrap_err().to_string();
        assert!(err.contains("plans a dma-engine"), "{err}");
        assert!(DeviceSpec::nvme(2, 1 << 20).replaced_by(&pt, 0).is_ok());
    }

    #[test]
    fn bad_device_text_names_what_is_wrong() {
        let err = |text: &str| text.parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(
            err("nvme:size=1G").contains("queues="),
            "{}",
            err("nvme:size=1G")
        );
        assert!(err("nvme:queues=2").contains("size="));
        assert!(err("nvme:queues=two,size=1G").contains("queues=two"));
        assert!(err("nvme:queues=2,size=lots").contains("size"));
        assert!(err("nvme:queues=2,size=1G,colour=red").contains("\"colour\""));
        assert!(err("nvme:queues=2,size=1G,irq1=x").contains("irq1=x"));
        assert!(err("floppy").contains("unknown kind \"floppy\""));
        assert!(err("nvme:queues").contains("KEY=VALUE"));
        assert!(err("passthrough").contains("passthrough:NAME"));
        assert!(err("passthrough:a=b").contains("passthrough:NAME"));
        assert!(err("passthrough:x,colour=red").contains("\"colour\""));
    }
}
