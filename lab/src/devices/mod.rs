//! Devices given to a guest, all through one trait: a [`Device`] says what the device is
//! (label, role, what the manifest records), how QEMU attaches it and what its host side is (a
//! process, files, a claim on a host device, a traffic source), and how the guest finds it ready
//! (driver, module, ready test). A [`DeviceSpec`] is a device plus the CPUs each of its
//! interrupt vectors should be pinned to in the guest. `attach` starts a spec's host side and
//! gives a [`RunningDevice`]: the QEMU arguments and whatever must live as long as the guest.
//! After boot, [`bind_and_pin`] waits for each device's guest driver, lists its MSI-X vectors
//! and pins them; vectors the kernel manages are reported as such.
//!
//! The lab's own devices implement the trait like any other; a test file can define its own:
//! - `lab_dma`: the emulated Intel I/OAT and AMD PTDMA engines (a `lab-dma` process served
//!   over vfio-user).
//! - `builtin`: QEMU's own NVMe controller.
//! - [`nic`]: QEMU's `virtio-net-pci` on a datagram socket the lab holds, so a scenario can send
//!   traffic into the guest at a set rate ([`nic::Traffic`]).
//! - [`passthrough`]: host devices by PCI address (`vfio-pci`), from the host file
//!   (`crate::hosts`), read and written through `sysfs`.
//! - `guest`: the guest side (binding, vectors, pinning).

pub(crate) mod builtin;
pub(crate) mod guest;
pub(crate) mod lab_dma;
pub mod nic;
pub mod passthrough;
pub(crate) mod sysfs;

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::cache::Cache;
/// The attribute a [`Device`] implementation needs (`#[lab::devices::async_trait]`), so a test
/// file defining its own device needs no dependency of its own for it.
pub use async_trait::async_trait;
pub(crate) use builtin::Nvme;
pub use guest::{bind_and_pin, BoundDevice, Vector};
pub(crate) use lab_dma::Engine;
pub(crate) use nic::Nic;
pub(crate) use passthrough::Passthrough;

/// A device a guest can be given. Implemented by the lab's devices and by any test that needs
/// one of its own; the lab calls it in this order: [`Device::resolve`] and [`Device::validate`]
/// before anything starts, [`Device::attach`] before QEMU starts, then the guest side
/// ([`Device::guest_driver`]) once the guest is up.
#[async_trait::async_trait]
pub trait Device: std::fmt::Debug + Send + Sync + 'static {
    /// A short name for logs and results: `ioatdma`, `nvme`, `nic`.
    fn label(&self) -> String;

    /// What the device is to a scenario, whatever provides it (`dma-engine`, `nvme`, `nic`): a
    /// device may replace a planned one of the same role (a passed-through engine for the
    /// emulated one).
    fn role(&self) -> String {
        self.label()
    }

    /// What the run's manifest records of it: kind and settings, enough to tell two runs apart.
    fn describe(&self) -> serde_json::Value;

    /// Checks its settings before anything starts.
    fn validate(&self) -> Result<()> {
        Ok(())
    }

    /// A device that must be looked up on the host before boot (a passthrough name in the host
    /// file) returns its resolved self; others `None`.
    fn resolve(&self, _hosts: &mut HostLookup) -> Result<Option<Arc<dyn Device>>> {
        Ok(None)
    }

    /// Whether the device is a host resource one guest holds at a time (a passed-through
    /// function): a run boots one guest at a time then.
    fn exclusive(&self) -> bool {
        false
    }

    /// Starts the host side and says how QEMU attaches the device at `at.slot`.
    async fn attach(&self, at: &Attachment<'_>) -> Result<Attached>;

    /// How the guest binds and readies it.
    fn guest_driver(&self) -> GuestDriver;

    /// The device as `Any`, for a test or scenario that needs its own type back.
    fn as_any(&self) -> &dyn Any;
}

/// The guest side of a device: the driver that binds the PCI function, the module to load first
/// (None: built into the lab's kernels) and a shell test on `$dev` (the device's sysfs
/// directory) that holds once the driver has finished setting it up, vectors included. The test
/// runs in a poll loop: `exists GLOB` tests a glob without forking (a fork costs ~20 ms under TCG).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestDriver {
    /// The driver that binds the PCI function (`ioatdma`, `nvme`, `virtio-pci`).
    pub driver: String,
    /// The module to load first, if the driver is one.
    pub module: Option<String>,
    /// A shell test on `$dev` that holds once the device is set up.
    pub ready_test: String,
}

impl GuestDriver {
    /// A guest side from its three parts.
    pub fn new(driver: &str, module: Option<&str>, ready_test: &str) -> GuestDriver {
        GuestDriver {
            driver: driver.to_string(),
            module: module.map(str::to_string),
            ready_test: ready_test.to_string(),
        }
    }
}

/// What the lab gives a device being attached.
#[derive(Debug)]
pub struct Attachment<'a> {
    /// Position in the VM's device list.
    pub index: usize,
    /// The QEMU id to use (`dev<index>`).
    pub id: String,
    /// The PCI slot QEMU must put it at (`0x10` + index), so the guest finds it by index.
    pub slot: String,
    /// The VM's private directory (sockets, backing files), removed with the VM.
    pub scratch: &'a Path,
    /// Where device logs are kept.
    pub log_dir: &'a Path,
    /// The host CPUs a device process may run on (a pinned topology's housekeeping set).
    pub cpus: Option<&'a [u32]>,
    /// The host's parts the lab hands to devices.
    pub(crate) host: &'a DeviceHost,
}

/// What a device's host side needs from the lab on this host: passed in, never looked up from
/// the environment by a device.
#[derive(Debug, Clone)]
pub(crate) struct DeviceHost {
    /// The lab's cache (passthrough journals and group locks live there).
    pub cache: Cache,
    /// The host's sysfs (a test's fake tree elsewhere).
    pub sysfs: sysfs::Sysfs,
    /// The `lab-dma` device-model binary, where one was found ([`lab_dma::locate`]); the error
    /// says how to get one.
    pub lab_dma: std::result::Result<PathBuf, String>,
}

impl DeviceHost {
    /// This host: `/sys`, and `lab-dma` beside the running executable (or `LAB_DMA_BIN`).
    pub(crate) fn this_host(cache: Cache) -> DeviceHost {
        DeviceHost {
            cache,
            sysfs: sysfs::Sysfs::host(),
            lab_dma: lab_dma::locate().map_err(|e| format!("{e:#}")),
        }
    }
}

/// A started device's host side: QEMU's arguments and what lives as long as the guest.
#[derive(Default)]
pub struct Attached {
    /// What QEMU is given for the device (`-device ...` and what it needs).
    pub qemu_args: Vec<String>,
    /// The device model's log, if it has a process.
    pub log: Option<PathBuf>,
    /// Backing files in the VM's scratch dir.
    pub files: Vec<PathBuf>,
    /// The host side kept alive with the guest (a process, a claim, a socket), dropped after
    /// QEMU; a scenario reaches it with [`RunningDevice::host_part`].
    pub host_part: Option<Box<dyn HostPart>>,
}

/// A device's host side that lives as long as the guest. Dropping it stops it.
pub trait HostPart: Send + Sync + 'static {
    /// What went wrong on the host side so far (a device model that could not map guest RAM):
    /// checked once the guest is up; any line fails the boot.
    fn problems(&self) -> Vec<String> {
        Vec::new()
    }

    /// The host side as `Any`, for [`RunningDevice::host_part`].
    fn as_any(&self) -> &dyn Any;
}

/// A device for a VM, with optional guest IRQ pinning: `irq_cpus[i]` is the CPU list MSI-X
/// vector `i` of the device is pinned to in the guest.
#[derive(Debug, Clone)]
pub struct DeviceSpec {
    pub(crate) device: Arc<dyn Device>,
    pub(crate) irq_cpus: Vec<Option<Vec<u32>>>,
}

/// Two specs are the same device when they describe alike and pin alike.
impl PartialEq for DeviceSpec {
    fn eq(&self, other: &DeviceSpec) -> bool {
        self.device.describe() == other.device.describe() && self.irq_cpus == other.irq_cpus
    }
}

/// The manifest's form: `{"kind": <describe>, "irq_cpus": [...]}`.
impl Serialize for DeviceSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Form<'a> {
            kind: serde_json::Value,
            irq_cpus: &'a [Option<Vec<u32>>],
        }
        Form {
            kind: self.device.describe(),
            irq_cpus: &self.irq_cpus,
        }
        .serialize(s)
    }
}

impl DeviceSpec {
    /// A device of any type, its vectors not pinned.
    pub fn new(device: impl Device) -> DeviceSpec {
        DeviceSpec {
            device: Arc::new(device),
            irq_cpus: vec![],
        }
    }

    /// An emulated Intel I/OAT engine with 1 to 4 channels.
    pub fn ioat(channels: u8) -> DeviceSpec {
        DeviceSpec::new(Engine::Ioat { channels })
    }

    /// An emulated AMD PTDMA engine (one queue).
    pub fn ptdma() -> DeviceSpec {
        DeviceSpec::new(Engine::Ptdma)
    }

    /// QEMU's NVMe controller with `io_queues` I/O queue pairs and one namespace of `bytes`.
    pub fn nvme(io_queues: u16, bytes: u64) -> DeviceSpec {
        DeviceSpec::new(Nvme {
            io_queues,
            namespaces: vec![bytes],
        })
    }

    /// QEMU's virtio-net NIC on a socket the lab holds ([`nic`]).
    pub fn nic() -> DeviceSpec {
        DeviceSpec::new(Nic)
    }

    /// The host file's device `name` (resolved before boot by [`resolve`]).
    pub fn passthrough(name: &str) -> DeviceSpec {
        DeviceSpec::new(Passthrough {
            name: name.to_string(),
            host: None,
            listed: Vec::new(),
        })
    }

    /// The device as its own type, if it is one.
    pub fn as_device<T: Device>(&self) -> Option<&T> {
        self.device.as_any().downcast_ref()
    }

    /// See [`Device::role`].
    pub fn role(&self) -> String {
        self.device.role()
    }

    /// See [`Device::label`].
    pub fn label(&self) -> String {
        self.device.label()
    }

    /// See [`Device::guest_driver`].
    pub fn guest_driver(&self) -> GuestDriver {
        self.device.guest_driver()
    }

    /// `replacement` in this device's place (same role), keeping this device's IRQ masks unless
    /// the replacement names its own: how a scenario runs on a passed-through device.
    pub(crate) fn replaced_by(&self, replacement: &DeviceSpec, index: usize) -> Result<DeviceSpec> {
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

    /// Checks the spec against the guest before anything starts: every pinned CPU exists, and
    /// the device's own settings.
    pub(crate) fn validate(&self, index: usize, nr_cpus: u32) -> Result<()> {
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
        self.device
            .validate()
            .with_context(|| format!("device {index} ({})", self.label()))
    }
}

/// Looks devices up on the host before boot: the host file passthrough names come from, read
/// once when the first device asks.
#[derive(Debug)]
pub struct HostLookup {
    /// `--host` (None: `LAB_HOST`, else `hosts/<hostname>.toml`).
    name: Option<String>,
    file: Option<crate::hosts::HostFile>,
}

impl HostLookup {
    pub(crate) fn new(host: Option<&str>) -> HostLookup {
        HostLookup {
            name: host.map(str::to_string),
            file: None,
        }
    }

    /// The host file, read on first use.
    pub(crate) fn host_file(&mut self) -> Result<&crate::hosts::HostFile> {
        if self.file.is_none() {
            self.file = Some(crate::hosts::HostFile::select(self.name.as_deref())?);
        }
        Ok(self.file.as_ref().expect("just read"))
    }
}

/// Resolves every device that needs the host ([`Device::resolve`]; the host file read once),
/// in place. Bad names fail here, before anything boots, naming the file and the device.
pub fn resolve(devices: &mut [DeviceSpec], host: Option<&str>) -> Result<()> {
    let mut lookup = HostLookup::new(host);
    for (index, spec) in devices.iter_mut().enumerate() {
        let resolved = spec
            .device
            .resolve(&mut lookup)
            .with_context(|| format!("device {index} ({})", spec.label()))?;
        if let Some(device) = resolved {
            spec.device = device;
        }
    }
    Ok(())
}

/// Starts the host side of device `index` of a VM.
pub(crate) async fn attach(
    spec: &DeviceSpec,
    index: usize,
    scratch: &Path,
    log_dir: &Path,
    cpus: Option<&[u32]>,
    host: &DeviceHost,
) -> Result<RunningDevice> {
    let at = Attachment {
        index,
        id: format!("dev{index}"),
        slot: format!("{:#x}", FIRST_SLOT + index),
        scratch,
        log_dir,
        cpus,
        host,
    };
    let attached = spec
        .device
        .attach(&at)
        .await
        .with_context(|| format!("starting device {index} ({})", spec.label()))?;
    Ok(RunningDevice {
        spec: spec.clone(),
        index,
        qemu_args: attached.qemu_args,
        log: attached.log,
        files: attached.files,
        host_part: attached.host_part,
    })
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
                DeviceSpec::new(Nvme {
                    io_queues: u16::try_from(queues).unwrap_or(u16::MAX),
                    namespaces: vec![bytes; count as usize],
                })
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

/// A device attached to one VM; its host side (process, files, socket) goes with the VM.
pub struct RunningDevice {
    pub(crate) spec: DeviceSpec,
    pub(crate) index: usize,
    /// The QEMU arguments that attach it.
    pub(crate) qemu_args: Vec<String>,
    /// The device model's log, if it has a process.
    pub(crate) log: Option<PathBuf>,
    /// Backing files in the VM's scratch dir.
    pub files: Vec<PathBuf>,
    host_part: Option<Box<dyn HostPart>>,
}

impl std::fmt::Debug for RunningDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningDevice")
            .field("index", &self.index)
            .field("device", &self.spec.device)
            .field("log", &self.log)
            .finish()
    }
}

impl RunningDevice {
    /// The guest's PCI address of this device (slots are assigned in device order).
    pub(crate) fn pci_address(&self) -> String {
        pci_address(self.index)
    }

    /// The device's host side as its own type (a NIC's [`nic::Traffic`]), if it has one.
    pub fn host_part<T: 'static>(&self) -> Option<&T> {
        self.host_part.as_ref()?.as_any().downcast_ref()
    }

    /// What went wrong on the host side so far ([`HostPart::problems`]).
    pub(crate) fn problems(&self) -> Vec<String> {
        self.host_part
            .as_ref()
            .map(|p| p.problems())
            .unwrap_or_default()
    }

    /// Stops the host side now (it also stops when the device is dropped).
    pub(crate) fn stop(&mut self) {
        self.host_part.take();
    }
}

/// Devices sit at fixed slots from here on, so the guest can find device N without guessing.
const FIRST_SLOT: usize = 0x10;

pub(crate) fn pci_address(index: usize) -> String {
    format!("0000:00:{:02x}.0", FIRST_SLOT + index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_from_the_command_line_syntax() {
        let nvme: DeviceSpec = "nvme:queues=3,size=1G,namespaces=2,irq0=5".parse().unwrap();
        assert_eq!(
            nvme.as_device::<Nvme>(),
            Some(&Nvme {
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
        let host = |stands_in| {
            DeviceSpec::new(Passthrough {
                name: "x".into(),
                host: Some(crate::hosts::HostDevice {
                    name: "x".into(),
                    bdf: "0000:00:04.0".parse().unwrap(),
                    id: "8086:2021".parse().unwrap(),
                    stands_in,
                    declared_at: "h.toml:1".into(),
                }),
                listed: Vec::new(),
            })
        };
        pt = host(crate::hosts::StandIn::Ptdma);
        let spec = planned.replaced_by(&pt, 0).unwrap();
        assert_eq!(spec.irq_cpus, [Some(vec![2])], "the plan's mask is kept");
        assert_eq!(spec.guest_driver().driver, "ptdma");
        pt = host(crate::hosts::StandIn::Nvme);
        let err = planned.replaced_by(&pt, 0).unwrap_err().to_string();
        assert!(err.contains("plans a dma-engine"), "{err}");
        assert!(DeviceSpec::nvme(2, 1 << 20).replaced_by(&pt, 0).is_ok());
    }

    #[test]
    fn the_manifest_form_is_what_records_have_always_held() {
        let json = |spec: &DeviceSpec| serde_json::to_value(spec).unwrap();
        assert_eq!(
            json(&DeviceSpec::ioat(1).irq_on_cpus(0, &[2])),
            serde_json::json!({"kind": {"lab-dma": {"ioat": {"channels": 1}}}, "irq_cpus": [[2]]})
        );
        assert_eq!(
            json(&DeviceSpec::ptdma()),
            serde_json::json!({"kind": {"lab-dma": "ptdma"}, "irq_cpus": []})
        );
        assert_eq!(
            json(&DeviceSpec::nvme(2, 1 << 20))["kind"],
            serde_json::json!({"nvme": {"io_queues": 2, "namespaces": [1048576]}})
        );
        assert_eq!(json(&DeviceSpec::nic())["kind"], serde_json::json!("nic"));
        assert_eq!(
            json(&DeviceSpec::passthrough("ioat0"))["kind"],
            serde_json::json!({"passthrough": {"name": "ioat0"}})
        );
        assert_eq!(DeviceSpec::ioat(2), DeviceSpec::ioat(2));
        assert_ne!(DeviceSpec::ioat(2), DeviceSpec::ioat(1));
        assert_ne!(
            DeviceSpec::ioat(2),
            DeviceSpec::ioat(2).irq_on_cpus(0, &[1])
        );
    }

    /// A device of a type the lab does not know goes through every generic path.
    #[derive(Debug)]
    struct Rng;

    #[async_trait::async_trait]
    impl Device for Rng {
        fn label(&self) -> String {
            "rng".into()
        }
        fn describe(&self) -> serde_json::Value {
            serde_json::json!({"virtio-rng": {}})
        }
        async fn attach(&self, at: &Attachment<'_>) -> Result<Attached> {
            Ok(Attached {
                qemu_args: vec![
                    "-device".into(),
                    format!("virtio-rng-pci,id={},addr={}", at.id, at.slot),
                ],
                ..Attached::default()
            })
        }
        fn guest_driver(&self) -> GuestDriver {
            GuestDriver::new("virtio-pci", None, "true")
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[tokio::test]
    async fn a_device_of_its_own_attaches_at_its_slot() {
        let dir = tempfile::tempdir().unwrap();
        let host = DeviceHost {
            cache: Cache::at(dir.path().join("cache")).unwrap(),
            sysfs: sysfs::Sysfs::at(dir.path().join("sys"), dir.path().join("mounts")),
            lab_dma: Err("none here".into()),
        };
        let spec = DeviceSpec::new(Rng).irq_on_cpus(1, &[0]);
        assert_eq!(spec.role(), "rng");
        spec.validate(3, 2).unwrap();
        assert!(DeviceSpec::new(Rng)
            .irq_on_cpus(0, &[2])
            .validate(3, 2)
            .is_err());
        let running = attach(&spec, 3, dir.path(), dir.path(), None, &host)
            .await
            .unwrap();
        assert_eq!(running.pci_address(), "0000:00:13.0");
        assert_eq!(running.qemu_args[1], "virtio-rng-pci,id=dev3,addr=0x13");
        assert!(running.problems().is_empty());
        assert!(running.spec.as_device::<Rng>().is_some());
        assert!(running.spec.as_device::<Nic>().is_none());
        // An emulated engine without a lab-dma binary says how to get one.
        let err = format!(
            "{:#}",
            attach(&DeviceSpec::ioat(1), 0, dir.path(), dir.path(), None, &host)
                .await
                .unwrap_err()
        );
        assert!(
            err.contains("starting device 0 (ioatdma): none here"),
            "{err}"
        );
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
