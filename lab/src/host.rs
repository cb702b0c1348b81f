//! The lab on this host: cache, pinned QEMU, probed accelerator and the defaults (kernel, guest
//! image, topology) that tests and the CLI compose VMs from.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::cache::Cache;
use crate::devices::{DeviceHost, DeviceSpec};
use crate::image::{build_image, GuestImage, ImageRecipe};
use crate::kernel::{BootKernel, BootSettings, ReadyKernel};
use crate::slots::{guest_cost, CpuSlots};
use crate::toolchain::{Accel, AccelChoice, AccelProbe, Qemu};
use crate::topology::Topology;
use crate::vm::{Vm, VmSpec};

/// The topology (a file in `topologies/`) tests and `lab run` use unless told otherwise.
pub const DEFAULT_TOPOLOGY: &str = "ci-2node-4llc";
/// The guest image recipe used unless told otherwise.
pub(crate) const DEFAULT_IMAGE: &str = "default";

/// The lab on this host: its cache, QEMU, accelerator and default kernel. Made once per process
/// ([`Lab::ready`] in the CLI, [`Lab::from_env`] or [`Lab::from_env_async`] in a test), then
/// shared: [`Lab::boot`] boots a guest, [`crate::experiment::Experiment::run`] runs a comparison.
#[derive(Debug, Clone)]
pub struct Lab {
    pub(crate) cache: Cache,
    pub(crate) qemu: Qemu,
    /// The host's accelerator: probed beside the rest of a first start-up, read through
    /// [`Lab::host_accel`].
    accel: std::sync::Arc<AccelChoice>,
    /// The host CPUs guests may keep busy, shared with every other lab process here.
    pub(crate) slots: CpuSlots,
    /// What devices' host sides get from this host (cache, sysfs, the `lab-dma` binary).
    pub(crate) devices: DeviceHost,
    /// Where [`Lab::prepare`] finds kernel recipes (`images/kernels`, or `LAB_KERNEL_RECIPES`);
    /// a bisect points its own copy here, with its probes' recipes beside the originals.
    pub(crate) kernel_recipes: crate::kernel::RecipeDirs,
    default_kernel: BootKernel,
    /// QEMU and the default kernel of guests of other architectures, found on first use (an
    /// x86-only user never provisions them).
    foreign: std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<Arch, ForeignArch>>>,
}

/// What a lab keeps for one foreign guest architecture.
#[derive(Debug, Clone, Default)]
struct ForeignArch {
    qemu: Option<Qemu>,
    default_kernel: Option<BootKernel>,
}

/// What one boot is made of, for [`Lab::boot`]: a name, then what differs from the lab's
/// defaults (topology [`DEFAULT_TOPOLOGY`], the default kernel and guest image, no devices).
///
/// ```no_run
/// # async fn demo(lab: &lab::Lab) -> anyhow::Result<()> {
/// use lab::devices::DeviceSpec;
/// let vm = lab
///     .boot(lab::BootOptions::named("demo").topology("ci-smt").device(DeviceSpec::nic()))
///     .await?;
/// println!("{}", vm.sh("uname -r").await?);
/// vm.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct BootOptions {
    pub(crate) name: String,
    pub(crate) topology: Option<String>,
    /// A topology given as a value (`Topology::quick`), instead of a file's name.
    pub(crate) shape: Option<Topology>,
    pub(crate) kernel: Option<BootKernel>,
    /// The kernel's boot settings (its recipe's `[boot]` merged with a variant's): command-line
    /// arguments go onto the kernel's command line, scheduler features and sysctls are written
    /// and read back once the guest is up, before [`Lab::boot`] returns.
    pub(crate) settings: BootSettings,
    pub(crate) image: Option<String>,
    pub(crate) cmdline: Vec<String>,
    pub(crate) devices: Vec<DeviceSpec>,
    pub(crate) accel: Option<Accel>,
    pub(crate) boot_timeout: Option<Duration>,
    /// Where logs go; default `results/<name>/` in the checkout (`LAB_RESULTS_DIR` overrides).
    pub(crate) log_dir: Option<PathBuf>,
    /// The host file `passthrough:NAME` devices are looked up in (None: `LAB_HOST`, else
    /// `hosts/<hostname>.toml`).
    pub(crate) host: Option<String>,
    /// Properties added to the device tree QEMU generates (aarch64 only).
    pub(crate) device_tree: Vec<crate::vm::dtb::DtProperty>,
    /// Host threads the guest keeps busy under multi-threaded TCG, when fewer than its vCPUs (a
    /// scenario's measured figure; see [`crate::experiment::BootPlan`]).
    pub(crate) host_threads: Option<usize>,
}

impl BootOptions {
    /// Options for a guest called `name` (its log directory and QEMU's process name), all
    /// else the lab's defaults.
    pub fn named(name: &str) -> BootOptions {
        BootOptions {
            name: name.to_string(),
            ..BootOptions::default()
        }
    }

    /// The topology file `topologies/<name>.toml` (or `LAB_TOPOLOGIES_DIR`).
    pub fn topology(mut self, name: &str) -> Self {
        self.topology = Some(name.to_string());
        self
    }

    /// A kernel other than the default, without boot settings ([`Lab::prepare`] gives one).
    pub fn kernel(mut self, kernel: BootKernel) -> Self {
        self.kernel = Some(kernel);
        self
    }

    /// A prepared kernel and its boot settings (a recipe's `[boot]`, a variant's features and
    /// sysctls): what `lab run --kernel`, the runner and the tests boot alike.
    pub fn ready_kernel(mut self, ready: ReadyKernel) -> Self {
        self.kernel = Some(ready.kernel);
        self.settings = ready.settings;
        self
    }

    /// One more argument on the kernel command line.
    pub fn cmdline(mut self, arg: &str) -> Self {
        self.cmdline.push(arg.to_string());
        self
    }

    /// One more device; devices sit at PCI slots in the order given.
    pub fn device(mut self, device: DeviceSpec) -> Self {
        self.devices.push(device);
        self
    }

    /// How long the guest may take to become ready (default: scaled to the guest and the
    /// accelerator).
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = Some(timeout);
        self
    }

    /// A topology given as a value ([`Topology::quick`]) instead of a file's name.
    pub fn shape(mut self, topology: Topology) -> Self {
        self.shape = Some(topology);
        self
    }

    /// The guest image recipe `images/guest/<recipe>.toml` (default `default`).
    pub fn image(mut self, recipe: &str) -> Self {
        self.image = Some(recipe.to_string());
        self
    }

    /// The host file `passthrough:NAME` devices are looked up in (default: `LAB_HOST`, else
    /// `hosts/<hostname>.toml`).
    pub fn host(mut self, name: &str) -> Self {
        self.host = Some(name.to_string());
        self
    }

    /// One more property for the guest's device tree (an aarch64 topology's; x86 guests have
    /// none), on the nodes compatible with its `compatible`.
    pub fn device_tree(mut self, property: crate::vm::dtb::DtProperty) -> Self {
        self.device_tree.push(property);
        self
    }
}

/// Where results and logs of runs are kept: `LAB_RESULTS_DIR`, else `results/` in the checkout.
pub fn results_root() -> PathBuf {
    std::env::var_os("LAB_RESULTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_path("results"))
}

impl Lab {
    /// [`Lab::new`] on the cache `LAB_CACHE_DIR` names (default `~/.cache/lab`).
    pub fn from_env() -> Result<Lab> {
        Lab::new(Cache::from_env()?)
    }

    /// Finds or provisions QEMU and the default kernel in `cache`, and probes the accelerator
    /// (cached). Nothing else: watching the parent process and replaying a killed lab's
    /// passthrough journals are the caller's explicit steps ([`crate::process::watch_parent`],
    /// [`Lab::restore_passthrough`]).
    pub fn new(cache: Cache) -> Result<Lab> {
        let _span = tracing::debug_span!("lab_ready").entered();
        let qemu = {
            let _span = tracing::debug_span!("locate_qemu").entered();
            Qemu::locate(&cache).context("locating QEMU")?
        };
        let default_kernel = {
            let _span = tracing::debug_span!("default_kernel").entered();
            crate::kernel::default_kernel(&cache, Arch::host())?
        };
        let accel = {
            let _span = tracing::debug_span!("choose_accel").entered();
            AccelChoice::start(&cache, &qemu, &default_kernel.image)?
        };
        let slots = CpuSlots::for_host(cache.root())?;
        tracing::info!(qemu = %qemu.version, "lab ready");
        Ok(Lab {
            devices: DeviceHost::this_host(cache.clone()),
            cache,
            qemu,
            accel: std::sync::Arc::new(accel),
            slots,
            kernel_recipes: crate::kernel::RecipeDirs::default_dirs(),
            default_kernel,
            foreign: Default::default(),
        })
    }

    /// The QEMU that boots `arch`'s guests (the host architecture's is found at start; another
    /// is looked up on first use, beside it). Blocking.
    pub(crate) fn qemu_for(&self, arch: Arch) -> Result<Qemu> {
        if arch == Arch::host() {
            return Ok(self.qemu.clone());
        }
        if let Some(q) = self.foreign_part(arch, |f| f.qemu.clone()) {
            return Ok(q);
        }
        let qemu = self
            .qemu
            .for_arch(&self.cache, arch)
            .with_context(|| format!("locating QEMU for {arch} guests"))?;
        self.foreign_set(arch, |f| f.qemu = Some(qemu.clone()));
        Ok(qemu)
    }

    /// The kernel an `arch` guest boots unless told otherwise (`v6.12-arm64` for aarch64), built
    /// on first use. Blocking.
    pub(crate) fn default_kernel_for(&self, arch: Arch) -> Result<BootKernel> {
        if arch == Arch::host() {
            return Ok(self.default_kernel.clone());
        }
        if let Some(k) = self.foreign_part(arch, |f| f.default_kernel.clone()) {
            return Ok(k);
        }
        let kernel = crate::kernel::default_kernel(&self.cache, arch)?;
        self.foreign_set(arch, |f| f.default_kernel = Some(kernel.clone()));
        Ok(kernel)
    }

    fn foreign_part<T>(
        &self,
        arch: Arch,
        get: impl FnOnce(&ForeignArch) -> Option<T>,
    ) -> Option<T> {
        let map = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&arch).and_then(get)
    }

    fn foreign_set(&self, arch: Arch, set: impl FnOnce(&mut ForeignArch)) {
        let mut map = self.foreign.lock().unwrap_or_else(|p| p.into_inner());
        set(map.entry(arch).or_default());
    }

    /// The accelerator `arch`'s guests run under here, and why: the probed one for the host's
    /// architecture, TCG for another.
    pub(crate) fn accel_for(&self, arch: Arch) -> (Accel, AccelProbe) {
        let (accel, probe) = self.host_accel();
        crate::toolchain::accel_for_guest((*accel, probe), arch).unwrap_or_else(|e| {
            (
                Accel::TcgSingle,
                AccelProbe {
                    kvm_works: false,
                    reason: format!("{e:#}"),
                },
            )
        })
    }

    /// Gives the host back the devices a killed lab left on `vfio-pci` (its journals in the
    /// cache), warning on what fails. The CLI and the test helper call it once at start.
    pub fn restore_passthrough(&self) {
        crate::devices::passthrough::restore_at_start(&self.cache, &self.devices.sysfs);
    }

    /// [`Lab::from_env`] off the async executor (it downloads and may build).
    pub async fn from_env_async() -> Result<Lab> {
        tokio::task::spawn_blocking(Lab::from_env).await?
    }

    /// [`Lab::from_env_async`] under a progress task: what `lab doctor`, `prepare`, `run` and
    /// `compare` wait on first (minutes on a fresh host).
    /// Devices a killed lab left on vfio-pci go back to the host first
    /// ([`Lab::restore_passthrough`]).
    pub async fn ready() -> Result<Lab> {
        let _task = crate::progress::Task::start("preparing QEMU, kernel and accelerator", None);
        let lab = Lab::from_env_async().await?;
        lab.restore_passthrough();
        Ok(lab)
    }

    /// The kernel a boot on the host's architecture gets unless its options name another
    /// (`v6.12`, lab-minimal).
    pub fn default_kernel(&self) -> &BootKernel {
        &self.default_kernel
    }

    /// The accelerator `arch`'s guests run under (`kvm`, or a TCG mode), as records name it.
    pub fn accelerator_for(&self, arch: Arch) -> &'static str {
        self.accel_for(arch).0.name()
    }

    /// Whether throughput figures of `arch`'s guests mean anything here.
    pub fn on_kvm_for(&self, arch: Arch) -> bool {
        self.accel_for(arch).0.is_kvm()
    }

    /// Whether throughput figures mean anything here (KVM, not TCG).
    pub fn on_kvm(&self) -> bool {
        self.host_accel().0.is_kvm()
    }

    /// What a reader of a comparison's table should know of this accelerator: under TCG, that
    /// its throughput rows mean nothing; `None` under KVM.
    pub fn accelerator_note(&self) -> Option<String> {
        (!self.on_kvm()).then(|| {
            format!(
                "throughput metrics are not meaningful under {}; placement and counters are",
                self.accelerator()
            )
        })
    }

    /// The accelerator guests run under (`kvm`, or a TCG mode), as records name it.
    pub fn accelerator(&self) -> &'static str {
        self.host_accel().0.name()
    }

    /// The accelerator of the host architecture's guests and why (waits for the KVM probe of
    /// a first start-up if it still runs).
    pub(crate) fn host_accel(&self) -> &(Accel, AccelProbe) {
        self.accel.get()
    }

    /// Ok under KVM; otherwise [`crate::Error::NoKvm`] for `what`, with the accelerator and the
    /// probe's reason.
    pub fn require_kvm(&self, what: &str) -> Result<(), crate::Error> {
        if self.on_kvm() {
            return Ok(());
        }
        Err(crate::Error::NoKvm {
            what: what.to_string(),
            reason: format!(
                "the accelerator is {} ({})",
                self.host_accel().0.name(),
                self.host_accel().1.reason
            ),
        })
    }

    /// The guest image for `kernel` (built on first use).
    pub(crate) fn image(&self, recipe: &str, kernel: &BootKernel) -> Result<GuestImage> {
        let _span = tracing::debug_span!("guest_image", recipe).entered();
        let recipe = ImageRecipe::by_name(recipe)?;
        build_image(&self.cache, &recipe, kernel)
    }

    /// A boot time limit scaled to the guest: TCG boots grow with the vCPU count and with the
    /// initramfs the kernel unpacks before `/init` (the 62 MiB `storage` image booted in 5-19 s
    /// where the 6 MiB default one took 3-7 s, and timed out at 46 s on a host at load 15).
    pub(crate) fn boot_timeout(&self, topology: &Topology, initramfs_bytes: u64) -> Duration {
        let cpus = topology.nr_cpus() as u64;
        if self.accel_for(topology.arch()).0.is_kvm() {
            Duration::from_secs(30)
        } else {
            Duration::from_secs(30 + 2 * cpus + initramfs_bytes / (1 << 20))
        }
    }

    /// The spec a [`BootOptions`] resolves to.
    pub(crate) async fn spec(&self, mut opts: BootOptions) -> Result<VmSpec> {
        crate::devices::resolve(&mut opts.devices, opts.host.as_deref())?;
        let topology = match opts.shape {
            Some(t) => t,
            None => Topology::by_name(opts.topology.as_deref().unwrap_or(DEFAULT_TOPOLOGY))?,
        };
        let arch = topology.arch();
        let kernel = match opts.kernel {
            Some(k) => k,
            None => {
                let lab = self.clone();
                tokio::task::spawn_blocking(move || lab.default_kernel_for(arch)).await??
            }
        };
        if !opts.device_tree.is_empty() && arch == Arch::X86_64 {
            return Err(crate::error::bad_input(
                topology.file(),
                "arch",
                format!(
                    "device-tree properties ({}) need a device tree, which x86_64 guests do not have: use an aarch64 topology",
                    opts.device_tree.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if kernel.arch != arch {
            return Err(crate::error::bad_input(
                topology.file(),
                "arch",
                format!(
                    "the topology {} is {arch}, but kernel {} is for {}: boot a {arch} kernel on it",
                    topology.name(),
                    kernel.name,
                    kernel.arch
                ),
            ));
        }
        let image_name = opts.image.unwrap_or_else(|| DEFAULT_IMAGE.to_string());
        let image = self.image_for(&image_name, &kernel).await?;
        let log_dir = opts
            .log_dir
            .unwrap_or_else(|| results_root().join(sanitize(&opts.name)));
        Ok(VmSpec {
            name: sanitize(&opts.name),
            boot_timeout: opts.boot_timeout.unwrap_or_else(|| {
                let bytes = std::fs::metadata(&image.path).map_or(0, |m| m.len());
                self.boot_timeout(&topology, bytes)
            }),
            topology,
            kernel,
            initramfs: image.path,
            accel: opts.accel.unwrap_or(self.accel_for(arch).0),
            cmdline: opts
                .cmdline
                .into_iter()
                .chain(opts.settings.cmdline.iter().cloned())
                .collect(),
            devices: opts.devices,
            log_dir,
            dtb: None,
        })
    }

    /// How many guests on `topology` this host runs side by side (see [`CpuSlots`]).
    pub(crate) fn guests_at_once(&self, topology: &Topology, host_threads: Option<usize>) -> usize {
        let accel = self.accel_for(topology.arch()).0;
        self.slots
            .guests_at_once(slot_cost(accel, topology, host_threads))
    }

    /// Boots a guest, waits until its agent is ready and applies the options' scheduler
    /// features and sysctls (read back): the one way every caller boots, so a recipe's or a
    /// variant's settings are in effect whoever asked for the boot. The guest holds its share
    /// of the host's CPU slots until it is gone, waiting for them first if other guests hold
    /// them.
    pub async fn boot(&self, opts: BootOptions) -> Result<Vm> {
        let settings = opts.settings.clone();
        let device_tree = opts.device_tree.clone();
        let host_threads = opts.host_threads;
        let spec = self.spec(opts).await?;
        let slot = self
            .slots
            .acquire(slot_cost(spec.accel, &spec.topology, host_threads))
            .await?;
        let qemu = {
            let lab = self.clone();
            let arch = spec.topology.arch();
            tokio::task::spawn_blocking(move || lab.qemu_for(arch)).await??
        };
        let attached = self.attach_devices(&spec).await?;
        let mut spec = spec;
        if !device_tree.is_empty() {
            // QEMU's own tree for this machine, with the properties added, in the guest's dir.
            let dtb = attached.dir.path().join("guest.dtb");
            let args = crate::vm::machine_args(&spec);
            let (q, out) = (qemu.clone(), dtb.clone());
            tokio::task::spawn_blocking(move || {
                crate::vm::dtb::write_patched(&q, &args, &device_tree, &out)
            })
            .await?
            .with_context(|| format!("guest {}: its device tree", spec.name))?;
            spec.dtb = Some(dtb);
        }
        let mut vm = Vm::boot(&qemu, spec, attached).await?;
        vm.hold_slot(slot);
        // The VM is killed when dropped, also when the settings do not take.
        crate::vm::settings::apply_settings(&vm, &settings)
            .await
            .with_context(|| format!("guest {}", vm.name))?;
        Ok(vm)
    }
}

impl Lab {
    /// Checks a spec's devices and its placement on this host, then starts each device's host
    /// side in the guest's new scratch dir: everything QEMU needs before it starts. A device
    /// that fails stops the ones started before it (they drop).
    async fn attach_devices(&self, spec: &VmSpec) -> Result<crate::vm::Attachments> {
        for (index, device) in spec.devices.iter().enumerate() {
            device.validate(index, spec.topology.nr_cpus())?;
        }
        let housekeeping = crate::vm::housekeeping_cpus(spec)?;
        std::fs::create_dir_all(&spec.log_dir)
            .with_context(|| format!("creating {}", spec.log_dir.display()))?;
        let dir = crate::vm::scratch_dir()?;
        let mut devices = Vec::new();
        for (index, device) in spec.devices.iter().enumerate() {
            let running = crate::devices::attach(
                device,
                index,
                dir.path(),
                &spec.log_dir,
                housekeeping.as_deref(),
                &self.devices,
            )
            .await
            .with_context(|| format!("guest {}", spec.name))?;
            devices.push(running);
        }
        Ok(crate::vm::Attachments {
            dir,
            devices,
            housekeeping,
        })
    }
}

/// The CPU slots a guest on `topology` takes: its host threads (`host_threads` where its
/// scenario measured fewer than its vCPUs), or the whole host when the topology pins vCPUs to
/// host CPUs (two pinned guests would share those CPUs).
fn slot_cost(accel: Accel, topology: &Topology, host_threads: Option<usize>) -> usize {
    if topology.pinning().is_empty() {
        guest_cost(accel, topology.nr_cpus() as usize, host_threads)
    } else {
        usize::MAX
    }
}

pub(crate) use crate::names::{check_name, sanitize};

/// The facts a result manifest records about the host side of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostManifest {
    pub qemu_version: String,
    pub qemu_sha256: String,
    pub qemu_origin: crate::toolchain::QemuOrigin,
    pub accel: Accel,
    pub accel_reason: String,
    pub host_cpu: String,
    pub host_cores: usize,
}

impl Lab {
    /// The host, QEMU and accelerator parts of a result manifest for `arch`'s guests.
    pub(crate) fn manifest(&self, arch: Arch) -> Result<crate::report::Manifest> {
        let (accel, probe) = self.accel_for(arch);
        let mut host = serde_json::json!({
            "cpu": crate::toolchain::host_cpu_model(),
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        });
        // Host-architecture records keep the shape they had before other architectures.
        if arch != Arch::host() {
            host["guest_arch"] = serde_json::json!(arch.name());
        }
        Ok(crate::report::Manifest {
            host,
            qemu: serde_json::to_value(self.host_manifest(arch)?).unwrap_or_default(),
            accelerator: serde_json::json!({"name": accel.name(), "reason": probe.reason}),
            test: crate::report::attempt::TestAttempt::from_env(),
            ..crate::report::Manifest::default()
        })
    }

    pub(crate) fn host_manifest(&self, arch: Arch) -> Result<HostManifest> {
        let qemu = self.qemu_for(arch)?;
        let (accel, probe) = self.accel_for(arch);
        Ok(HostManifest {
            qemu_version: qemu.version.clone(),
            qemu_sha256: qemu.sha256.clone(),
            qemu_origin: qemu.origin.clone(),
            accel,
            accel_reason: probe.reason.clone(),
            host_cpu: crate::toolchain::host_cpu_model(),
            host_cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        })
    }
}

impl Lab {
    /// Finds or builds a variant's kernel and merges its boot settings, off the executor (a
    /// cold build takes minutes): a recipe for the architecture it names, `debian` for the
    /// host's. See `crate::kernel::prepare`.
    pub async fn prepare(&self, variant: &crate::variant::Variant) -> Result<ReadyKernel> {
        self.prepare_kernel(variant, None).await
    }

    /// [`Lab::prepare`] for `arch`'s guests: a recipe for another architecture is refused
    /// ([`crate::Error::BadInput`]) before anything is built, and `debian` is that
    /// architecture's kernel package.
    pub async fn prepare_for(
        &self,
        variant: &crate::variant::Variant,
        arch: Arch,
    ) -> Result<ReadyKernel> {
        self.prepare_kernel(variant, Some(arch)).await
    }

    async fn prepare_kernel(
        &self,
        variant: &crate::variant::Variant,
        arch: Option<Arch>,
    ) -> Result<ReadyKernel> {
        let cache = self.cache.clone();
        let variant = variant.clone();
        let opts = self.build_options();
        tokio::task::spawn_blocking(move || {
            let _span = tracing::debug_span!("prepare_kernel", kernel = variant.kernel).entered();
            variant.prepare(&cache, &opts, arch)
        })
        .await?
    }

    /// Refuses, before anything is built, a variant whose kernel recipe is for another
    /// architecture than `arch` (the topology's).
    pub(crate) fn check_variant_arch(
        &self,
        variant: &crate::variant::Variant,
        arch: Arch,
    ) -> Result<()> {
        if crate::kernel::arch_of(&variant.kernel, &self.kernel_recipes)?.is_some() {
            let recipe = crate::kernel::load_recipe(&self.kernel_recipes, &variant.kernel)?;
            crate::kernel::check_arch(&recipe, &self.kernel_recipes, arch)
                .with_context(|| format!("variant {}", variant.name))?;
        }
        Ok(())
    }

    /// This lab, finding kernel recipes in `dirs` instead.
    pub(crate) fn with_recipes(&self, dirs: crate::kernel::RecipeDirs) -> Lab {
        Lab {
            kernel_recipes: dirs,
            ..self.clone()
        }
    }

    /// The default build options, with this lab's recipe directories.
    pub(crate) fn build_options(&self) -> crate::kernel::BuildOptions {
        crate::kernel::BuildOptions {
            dirs: self.kernel_recipes.clone(),
            ..crate::kernel::BuildOptions::default()
        }
    }

    /// The guest image `recipe` for `kernel`, off the executor.
    pub async fn image_for(&self, recipe: &str, kernel: &BootKernel) -> Result<GuestImage> {
        let lab = self.clone();
        let recipe = recipe.to_string();
        let kernel = kernel.clone();
        tokio::task::spawn_blocking(move || lab.image(&recipe, &kernel)).await?
    }
}
