//! The hermetic toolchain: which QEMU runs the guests, and with which accelerator.
//!
//! Results are only comparable when the VMM is pinned, so the lab uses a QEMU >= 10.1 with
//! `vfio-user-pci` and otherwise provisions one from Debian packages (trixie-backports) into its
//! cache, run through the bundle's own dynamic loader so no host library is replaced. The
//! bundle has both system emulators the lab boots, `qemu-system-x86_64` and
//! `qemu-system-aarch64` (one more 10 MB package beside the 89 they share); a guest of another
//! architecture runs under TCG. The accelerator is probed by booting, since some hosts expose
//! a `/dev/kvm` that hangs guests.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::arch::Arch;
use crate::cache::{hash_parts, Cache};
use crate::debian::{self, Archive, ResolvedBundle, Substitution};

/// The lock file's bundle of the pinned QEMU.
pub(crate) const QEMU_BUNDLE: &str = "qemu";

/// The oldest QEMU with a `vfio-user-pci` client.
pub(crate) const MIN_QEMU: (u32, u32) = (10, 1);

/// A runnable QEMU and how it was obtained.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Qemu {
    pub binary: PathBuf,
    /// The bundle's dynamic loader and library path, when running a provisioned bundle.
    pub loader: Option<Loader>,
    /// Firmware/data directories passed as `-L`.
    pub data_dirs: Vec<PathBuf>,
    pub module_dir: Option<PathBuf>,
    pub version: String,
    pub has_vfio_user: bool,
    pub origin: QemuOrigin,
    /// sha256 of the QEMU binary, for result manifests.
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Loader {
    pub ld_so: PathBuf,
    pub library_path: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum QemuOrigin {
    /// `LAB_QEMU` or the host's PATH.
    Host,
    /// Provisioned from Debian packages into the cache.
    Bundle {
        packages: Vec<String>,
        substitutions: Vec<Substitution>,
    },
}

impl Qemu {
    /// A `Command` for this QEMU with the loader, module dir and data dirs in place; callers add
    /// the machine's arguments.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = match &self.loader {
            Some(loader) => {
                let mut c = crate::process::command(&loader.ld_so);
                c.arg("--library-path")
                    .arg(&loader.library_path)
                    .arg(&self.binary);
                c
            }
            None => crate::process::command(&self.binary),
        };
        if let Some(dir) = &self.module_dir {
            cmd.env("QEMU_MODULE_DIR", dir);
        }
        for dir in &self.data_dirs {
            cmd.arg("-L").arg(dir);
        }
        cmd
    }

    /// Finds a usable QEMU: `LAB_QEMU`, then the host's `qemu-system-x86_64` if new enough and
    /// with `vfio-user-pci`, else the pinned Debian bundle (provisioned on first use).
    pub(crate) fn locate(cache: &Cache) -> Result<Qemu> {
        if let Some(path) = std::env::var_os("LAB_QEMU") {
            let qemu = Qemu::host(cache, PathBuf::from(path))?;
            qemu.check_usable().context("LAB_QEMU")?;
            return Ok(qemu);
        }
        if let Some(path) = which("qemu-system-x86_64") {
            if let Ok(qemu) = Qemu::host(cache, path) {
                if qemu.check_usable().is_ok() {
                    return Ok(qemu);
                }
                tracing::info!(
                    "host QEMU {} lacks vfio-user-pci or is older than {}.{}: using the pinned bundle",
                    qemu.version,
                    MIN_QEMU.0,
                    MIN_QEMU.1
                );
            }
        }
        Qemu::bundle(cache)
    }

    fn host(cache: &Cache, binary: PathBuf) -> Result<Qemu> {
        let mut qemu = Qemu {
            sha256: cache.file_sha256(&binary)?,
            binary,
            loader: None,
            data_dirs: vec![],
            module_dir: None,
            version: String::new(),
            has_vfio_user: false,
            origin: QemuOrigin::Host,
        };
        qemu.interrogate(cache)?;
        Ok(qemu)
    }

    /// The pinned QEMU from Debian packages, unpacked into the cache. Warm (the lock entry
    /// resolved before and its bundle unpacked), this asks neither apt nor the network.
    pub(crate) fn bundle(cache: &Cache) -> Result<Qemu> {
        const NAME: &str = QEMU_BUNDLE;
        const ROOTS: &[&str] = &["qemu-system-x86", "qemu-system-arm"];
        const RELEASE: Option<&str> = Some("trixie-backports");
        let lock = debian::LockFile::default_path();
        if let Some(resolved) = debian::recorded_resolution(cache, &lock, NAME, ROOTS, None)? {
            if let Some(entry) = cache.lookup("qemu", &qemu_key(&resolved)) {
                resolved.note_substitutions();
                return Qemu::from_bundle(cache, &entry, &resolved);
            }
        }
        let archive = {
            let _span = tracing::debug_span!("open_archive").entered();
            Archive::open(cache)?
        };
        let resolved = {
            let _span = tracing::debug_span!("resolve_bundle").entered();
            debian::resolve_bundle(&archive, &lock, NAME, ROOTS, RELEASE, None)?
        };
        let key = qemu_key(&resolved);
        let entry = cache.get_or_build("qemu", &key, |dir| {
            crate::progress::step(format!(
                "provisioning QEMU from {} Debian packages",
                resolved.packages.len()
            ));
            debian::unpack_bundle(&archive, &resolved, &dir.join("root"))?;
            // Entries of the old key kept trixie's setuid-root programs: clear them too, once.
            if let Err(e) = crate::cache::drop_special_bits(&cache.dir("qemu")) {
                crate::progress::warn(format!("older QEMU entries keep special bits: {e:#}"));
            }
            Ok(())
        })?;
        Qemu::from_bundle(cache, &entry, &resolved)
    }

    /// The QEMU that boots `arch`'s guests beside this one (the x86_64 QEMU [`Qemu::locate`]
    /// found): the bundle's own `qemu-system-aarch64`, or for a host QEMU `LAB_QEMU_AARCH64`,
    /// else the emulator of that name beside it or on `PATH`. Its devices need no
    /// `vfio-user-pci` (the lab's DMA engines are x86 drivers).
    pub(crate) fn for_arch(&self, cache: &Cache, arch: Arch) -> Result<Qemu> {
        if arch == Arch::X86_64 {
            return Ok(self.clone());
        }
        let name = arch.qemu_binary();
        let binary = match &self.origin {
            QemuOrigin::Bundle { .. } => self.binary.with_file_name(name),
            QemuOrigin::Host => {
                let var = format!("LAB_QEMU_{}", arch.name().to_uppercase());
                match std::env::var_os(&var) {
                    Some(path) => PathBuf::from(path),
                    None => {
                        let beside = self.binary.with_file_name(name);
                        if beside.is_file() {
                            beside
                        } else {
                            which(name).with_context(|| {
                                format!(
                                    "no {name} beside {} or on PATH: install QEMU's {arch}                                      emulator or name it in {var}",
                                    self.binary.display()
                                )
                            })?
                        }
                    }
                }
            }
        };
        if !binary.is_file() {
            bail!("{} does not exist", binary.display());
        }
        let mut qemu = Qemu {
            sha256: cache.file_sha256(&binary)?,
            binary,
            ..self.clone()
        };
        qemu.interrogate(cache)?;
        qemu.check_version()?;
        Ok(qemu)
    }

    /// The QEMU of an unpacked bundle entry.
    fn from_bundle(cache: &Cache, entry: &Path, resolved: &ResolvedBundle) -> Result<Qemu> {
        let root = entry.join("root");
        let lib = format!(
            "{0}/usr/lib/x86_64-linux-gnu:{0}/lib/x86_64-linux-gnu",
            root.display()
        );
        let binary = root.join("usr/bin/qemu-system-x86_64");
        let mut qemu = Qemu {
            sha256: cache.file_sha256(&binary)?,
            binary,
            loader: Some(Loader {
                ld_so: root.join("usr/lib64/ld-linux-x86-64.so.2"),
                library_path: lib,
            }),
            data_dirs: vec![root.join("usr/share/qemu"), root.join("usr/share/seabios")],
            module_dir: Some(root.join("usr/lib/x86_64-linux-gnu/qemu")),
            version: String::new(),
            has_vfio_user: false,
            origin: QemuOrigin::Bundle {
                packages: resolved
                    .packages
                    .iter()
                    .map(|p| format!("{}={}", p.name, p.version))
                    .collect(),
                substitutions: resolved.substitutions.clone(),
            },
        };
        qemu.interrogate(cache)?;
        qemu.check_usable()?;
        Ok(qemu)
    }

    /// Version and `vfio-user-pci` support: asked of QEMU once (two runs of it), then
    /// remembered under the binary's digest and how it is started.
    fn interrogate(&mut self, cache: &Cache) -> Result<()> {
        let _span = tracing::debug_span!("qemu_interrogate").entered();
        let command = format!("{:?}", self.command());
        let key = hash_parts(&[
            ("binary", self.sha256.as_bytes()),
            ("command", command.as_bytes()),
        ])[..24]
            .to_string();
        if let Some(info) = cache.read_memo::<QemuInfo>("qemu-info", &key) {
            self.version = info.version;
            self.has_vfio_user = info.has_vfio_user;
            return Ok(());
        }
        let version = crate::process::output(self.command().arg("--version"))?;
        let text = String::from_utf8_lossy(&version.stdout);
        self.version = text
            .lines()
            .next()
            .and_then(|l| l.split("version ").nth(1))
            .map(|v| v.split_whitespace().next().unwrap_or(v).to_string())
            .with_context(|| format!("{} --version printed {text:?}", self.binary.display()))?;
        let devices =
            crate::process::output(self.command().args(["-machine", "none", "-device", "help"]))?;
        self.has_vfio_user = String::from_utf8_lossy(&devices.stdout).contains("\"vfio-user-pci\"");
        // Only a clean answer is remembered: a QEMU that failed to start may work next time.
        if version.status.success() && devices.status.success() {
            let info = QemuInfo {
                version: self.version.clone(),
                has_vfio_user: self.has_vfio_user,
            };
            if let Err(e) = cache.write_memo("qemu-info", &key, &info) {
                tracing::debug!("not remembering what QEMU said: {e:#}");
            }
        }
        Ok(())
    }

    fn check_usable(&self) -> Result<()> {
        self.check_version()?;
        if !self.has_vfio_user {
            bail!("{} has no vfio-user-pci device", self.binary.display());
        }
        Ok(())
    }

    fn check_version(&self) -> Result<()> {
        let mut nums = self
            .version
            .split('.')
            .map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (nums.next().unwrap_or(0), nums.next().unwrap_or(0));
        if version < MIN_QEMU {
            bail!(
                "{} is QEMU {}; the lab needs >= {}.{}",
                self.binary.display(),
                self.version,
                MIN_QEMU.0,
                MIN_QEMU.1
            );
        }
        Ok(())
    }
}

/// What [`Qemu::interrogate`] learnt.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct QemuInfo {
    version: String,
    has_vfio_user: bool,
}

/// The QEMU entry's key: its bundle's, and how it is unpacked. Entries unpacked before the lab
/// dropped setuid and world-writable bits (issue W2: trixie's `passwd`, `chfn`, `chsh` and
/// `gpasswd` setuid root in the cache) have another key, so no lab uses them again.
fn qemu_key(resolved: &ResolvedBundle) -> String {
    hash_parts(&[
        ("bundle", bundle_key(resolved).as_bytes()),
        ("unpacked", b"without special bits"),
    ])[..16]
        .to_string()
}

/// A bundle's cache key: its name and every package's version and checksum.
pub(crate) fn bundle_key(resolved: &ResolvedBundle) -> String {
    let list: String = resolved
        .packages
        .iter()
        .map(|p| format!("{} {} {}\n", p.name, p.version, p.sha256))
        .collect();
    hash_parts(&[
        ("bundle", resolved.name.as_bytes()),
        ("packages", list.as_bytes()),
    ])[..16]
        .to_string()
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// How guest CPUs are executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Accel {
    Kvm,
    /// Multi-threaded TCG: one host thread per vCPU.
    TcgMulti,
    /// Single-threaded TCG: vCPUs round-robin on one host thread.
    TcgSingle,
    /// Single-threaded TCG with instruction counting (`-icount shift=auto`): deterministic-ish
    /// virtual time, slower.
    TcgIcount,
}

impl Accel {
    pub(crate) fn qemu_args(self) -> Vec<String> {
        let args: &[&str] = match self {
            Accel::Kvm => &["-accel", "kvm"],
            Accel::TcgMulti => &["-accel", "tcg,thread=multi"],
            Accel::TcgSingle => &["-accel", "tcg,thread=single"],
            Accel::TcgIcount => &[
                "-accel",
                "tcg,thread=single",
                "-icount",
                "shift=auto,sleep=on",
            ],
        };
        args.iter().map(|s| s.to_string()).collect()
    }

    pub(crate) fn is_kvm(self) -> bool {
        self == Accel::Kvm
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::TcgMulti => "tcg-multi",
            Accel::TcgSingle => "tcg-single",
            Accel::TcgIcount => "tcg-icount",
        }
    }

    pub(crate) fn parse(text: &str) -> Result<Accel> {
        Ok(match text {
            "kvm" => Accel::Kvm,
            "tcg" | "tcg-multi" => Accel::TcgMulti,
            "tcg-single" => Accel::TcgSingle,
            "tcg-icount" => Accel::TcgIcount,
            other => {
                bail!("unknown accelerator {other:?}: use kvm, tcg-multi, tcg-single or tcg-icount")
            }
        })
    }
}

/// The TCG flavour used when KVM is unavailable (`LAB_TCG` overrides). Measured on a 2-core
/// host (docs/MEASUREMENTS.md): single-threaded TCG boots faster there under load, and S1's placement
/// verdict was soaked with it (10 of 10); multi-threaded separated the kernels as well in one
/// run, `-icount` was three times slower per boot.
pub(crate) fn default_tcg() -> Result<Accel> {
    match std::env::var("LAB_TCG") {
        Ok(v) => Accel::parse(&format!("tcg-{}", v.trim_start_matches("tcg-"))),
        Err(_) => Ok(Accel::TcgSingle),
    }
}

/// The outcome of probing KVM by booting a kernel with it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AccelProbe {
    pub kvm_works: bool,
    pub reason: String,
}

impl AccelProbe {
    /// KVM where it works, else `tcg`.
    fn accel(&self, tcg: Accel) -> Accel {
        if self.kvm_works {
            Accel::Kvm
        } else {
            tcg
        }
    }
}

/// The accelerator of the host's guests: `LAB_ACCEL` if set, else KVM when a probe boot under
/// KVM reaches the kernel's root-mount stage in time, else TCG ([`default_tcg`]). The probe's
/// answer is cached per host kernel, CPU, QEMU and guest kernel, so only the first run on a host
/// pays for it; that run probes on a thread of its own, so the rest of its start-up (variant
/// kernels, images) goes on beside the probe (a KVM that hangs costs the probe's whole 20 s),
/// and the first caller that needs the answer waits for what is left of it.
#[derive(Debug)]
pub(crate) struct AccelChoice {
    decided: OnceLock<(Accel, AccelProbe)>,
    probing: Mutex<Option<JoinHandle<Result<AccelProbe>>>>,
    /// What a host without a working KVM gets.
    tcg: Accel,
}

impl AccelChoice {
    /// Decides at once where it can (`LAB_ACCEL`, a cached probe), else starts the probe.
    pub(crate) fn start(cache: &Cache, qemu: &Qemu, kernel: &Path) -> Result<AccelChoice> {
        let choice = |accel, probe| AccelChoice {
            decided: OnceLock::from((accel, probe)),
            probing: Mutex::new(None),
            tcg: accel,
        };
        if let Ok(v) = std::env::var("LAB_ACCEL") {
            let accel = Accel::parse(&v).context("LAB_ACCEL")?;
            let probe = AccelProbe {
                kvm_works: accel.is_kvm(),
                reason: format!("LAB_ACCEL={v}"),
            };
            return Ok(choice(accel, probe));
        }
        let tcg = default_tcg()?;
        let memo = probe_memo_path(cache, qemu, kernel)?;
        if let Some(probe) = read_probe(&memo) {
            return Ok(choice(probe.accel(tcg), probe));
        }
        let (cache, qemu, kernel) = (cache.clone(), qemu.clone(), kernel.to_path_buf());
        // The probe's QEMU dies with this thread (PR_SET_PDEATHSIG), which outlives it.
        let probing = std::thread::Builder::new()
            .name("kvm-probe".into())
            .spawn(move || probe_kvm_into(&cache, &qemu, &kernel, &memo))?;
        Ok(AccelChoice {
            decided: OnceLock::new(),
            probing: Mutex::new(Some(probing)),
            tcg,
        })
    }

    /// The accelerator and why, waiting for the probe if it still runs. A probe that failed
    /// to run at all (QEMU would not start) means TCG, with its error as the reason.
    pub(crate) fn get(&self) -> &(Accel, AccelProbe) {
        self.decided.get_or_init(|| {
            let probing = self
                .probing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let _waiting = probing
                .as_ref()
                .filter(|p| !p.is_finished())
                .map(|_| crate::progress::Task::start("probing KVM (once per host)", None));
            let probe = match probing.map(JoinHandle::join) {
                Some(Ok(Ok(probe))) => probe,
                Some(Ok(Err(e))) => AccelProbe {
                    kvm_works: false,
                    reason: format!("the KVM probe failed: {e:#}"),
                },
                Some(Err(_)) => AccelProbe {
                    kvm_works: false,
                    reason: "the KVM probe's thread panicked".into(),
                },
                None => AccelProbe {
                    kvm_works: false,
                    reason: "no KVM probe ran".into(),
                },
            };
            let accel = probe.accel(self.tcg);
            tracing::info!(accel = accel.name(), reason = %probe.reason, "accelerator chosen");
            (accel, probe)
        })
    }
}

/// The accelerator of a guest of `arch` on a lab whose host-architecture guests run under
/// `host`: the same for the host's architecture; TCG otherwise (KVM runs guests of the host's
/// own architecture only), the flavour `LAB_ACCEL` names when it names one, else
/// [`default_tcg`].
pub(crate) fn accel_for_guest(
    host: (Accel, &AccelProbe),
    arch: Arch,
) -> Result<(Accel, AccelProbe)> {
    if arch == Arch::host() {
        return Ok((host.0, host.1.clone()));
    }
    let forced = std::env::var("LAB_ACCEL")
        .ok()
        .map(|v| Accel::parse(&v).map(|a| (a, v)))
        .transpose()
        .context("LAB_ACCEL")?;
    let (accel, why) = match forced {
        Some((a, v)) if !a.is_kvm() => (a, format!("LAB_ACCEL={v}")),
        // Multi-threaded unless LAB_TCG says otherwise: measured on the 2-core EPYC host
        // (2026-12-03, its-balance), single-threaded TCG left 2 of 22 aarch64 boots stalled
        // (an RCU stall as fio started, then no progress for 300 s), multi-threaded 0 of 12
        // (and 24 more in the test's soak), each boot about twice as fast. QEMU itself picks
        // MTTCG for aarch64 guests on an x86_64 host.
        _ => match std::env::var("LAB_TCG") {
            Ok(_) => (default_tcg()?, "TCG".to_string()),
            Err(_) => (Accel::TcgMulti, "TCG".to_string()),
        },
    };
    Ok((
        accel,
        AccelProbe {
            kvm_works: false,
            reason: format!(
                "{why}: an {arch} guest on this {} host (KVM runs guests of the host's own architecture only)",
                Arch::host()
            ),
        },
    ))
}

/// Where the probe's answer for this host kernel, CPU, QEMU and guest kernel is kept.
fn probe_memo_path(cache: &Cache, qemu: &Qemu, kernel: &Path) -> Result<PathBuf> {
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpu = host_cpu_model();
    let key = hash_parts(&[
        ("host-kernel", host_kernel.as_bytes()),
        ("cpu", cpu.as_bytes()),
        ("qemu", qemu.sha256.as_bytes()),
        ("kernel", cache.file_sha256(kernel)?.as_bytes()),
    ]);
    Ok(cache.dir("accel").join(format!("{}.json", &key[..16])))
}

/// The probe's answer kept at `memo`, if there is one that parses.
fn read_probe(memo: &Path) -> Option<AccelProbe> {
    let text = std::fs::read_to_string(memo).ok()?;
    serde_json::from_str(&text).ok()
}

/// Probes KVM (one probe per cache at a time: another process's answer is taken) and keeps the
/// answer at `memo`.
fn probe_kvm_into(cache: &Cache, qemu: &Qemu, kernel: &Path, memo: &Path) -> Result<AccelProbe> {
    let _lock = cache.lock("accel-probe")?;
    if let Some(probe) = read_probe(memo) {
        return Ok(probe);
    }
    let probe = probe_kvm(qemu, kernel)?;
    std::fs::create_dir_all(cache.dir("accel"))?;
    std::fs::write(memo, serde_json::to_string_pretty(&probe)?)?;
    Ok(probe)
}

/// Boots `kernel` under KVM with no root file system: a kernel that runs reaches "VFS: Unable to
/// mount root" (and panics, and QEMU exits thanks to `-no-reboot`) within seconds; one that
/// hangs early never prints it.
pub(crate) fn probe_kvm(qemu: &Qemu, kernel: &Path) -> Result<AccelProbe> {
    const LIMIT: Duration = Duration::from_secs(20);
    let kvm = Path::new("/dev/kvm");
    if !kvm.exists() {
        return Ok(AccelProbe {
            kvm_works: false,
            reason: "/dev/kvm does not exist".into(),
        });
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(kvm)
        .is_err()
    {
        return Ok(AccelProbe {
            kvm_works: false,
            reason: "/dev/kvm is not accessible (add the user to the kvm group)".into(),
        });
    }
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("serial.log");
    let mut child = crate::process::spawn_in_group(
        qemu.command()
            .args([
                "-nodefaults",
                "-no-user-config",
                "-machine",
                "q35",
                "-accel",
                "kvm",
                "-cpu",
                "host",
                "-smp",
                "1",
                "-m",
                "256M",
                "-display",
                "none",
                "-no-reboot",
                "-kernel",
            ])
            .arg(kernel)
            .args(["-append", "console=ttyS0 panic=-1 loglevel=4", "-serial"])
            .arg(format!("file:{}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )?;
    let start = Instant::now();
    let reached = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("VFS: Unable to mount root") || text.contains("Kernel panic") {
            break true;
        }
        if start.elapsed() > LIMIT || child.try_wait()?.is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = start.elapsed();
    drop(child);
    Ok(if reached {
        AccelProbe {
            kvm_works: true,
            reason: format!("a KVM probe boot reached the root mount in {elapsed:.1?}"),
        }
    } else {
        AccelProbe {
            kvm_works: false,
            reason: format!(
                "/dev/kvm exists but a probe boot under KVM did not reach the root mount within {LIMIT:?}"
            ),
        }
    })
}

/// The host CPU's model name, for result manifests.
pub(crate) fn host_cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe's answer is waited for where it is needed; a probe that could not run means
    /// TCG, with its error as the reason, and every caller gets the one answer.
    #[test]
    fn a_probe_on_its_thread_is_waited_for_and_a_failed_one_means_tcg() {
        let choice = |probe: Result<AccelProbe>| AccelChoice {
            decided: OnceLock::new(),
            probing: Mutex::new(Some(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                probe
            }))),
            tcg: Accel::TcgMulti,
        };
        let works = choice(Ok(AccelProbe {
            kvm_works: true,
            reason: "reached the root mount".into(),
        }));
        assert_eq!(works.get().0, Accel::Kvm);
        assert_eq!(works.get().1.reason, "reached the root mount");
        let failed = choice(Err(anyhow::anyhow!("QEMU would not start")));
        let (accel, probe) = failed.get();
        assert_eq!(*accel, Accel::TcgMulti);
        assert!(!probe.kvm_works);
        assert_eq!(probe.reason, "the KVM probe failed: QEMU would not start");
    }

    #[test]
    fn accel_names_round_trip() {
        for a in [
            Accel::Kvm,
            Accel::TcgMulti,
            Accel::TcgSingle,
            Accel::TcgIcount,
        ] {
            assert_eq!(Accel::parse(a.name()).unwrap(), a);
        }
        assert!(Accel::parse("hvf").unwrap_err().to_string().contains("hvf"));
    }
}
