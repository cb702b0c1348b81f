//! One guest: a QEMU process with its QMP channel, serial console and agent connection.
//!
//! Sockets live in a per-VM temp dir; the lab listens and QEMU connects, so there is no race on
//! socket creation. Boot is "ready" when the guest agent says hello; a panic on the console, an
//! early QEMU exit or the boot timeout become errors that quote the console's last lines, and the
//! QEMU process group is killed whenever the `Vm` is dropped.

pub(crate) mod delay;
pub mod dtb;
pub(crate) mod health;
mod scratch;
pub(crate) mod serial;
pub(crate) mod settings;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use qapi::futures::{QapiService, QmpStreamTokio};
use tokio::net::{UnixListener, UnixStream};

use crate::arch::Arch;
use crate::devices::{DeviceSpec, RunningDevice};
use crate::guest::{Guest, GuestCommand, GuestOutput, Hello, Shell};
use crate::kernel::BootKernel;
use crate::process::{self, AsyncGroupChild};
use crate::toolchain::{Accel, Qemu};
use crate::topology::Topology;
use serial::{Console, ConsoleState};

/// Everything needed to start one guest.
#[derive(Debug, Clone)]
pub(crate) struct VmSpec {
    pub name: String,
    pub topology: Topology,
    pub kernel: BootKernel,
    pub initramfs: PathBuf,
    pub accel: Accel,
    /// Extra kernel command-line arguments.
    pub cmdline: Vec<String>,
    pub devices: Vec<DeviceSpec>,
    pub boot_timeout: Duration,
    /// Where the serial log and device logs are kept (created if missing).
    pub log_dir: PathBuf,
    /// A device tree to boot with instead of the one QEMU generates (aarch64 `virt`; see
    /// `vm::dtb`).
    pub dtb: Option<PathBuf>,
}

/// A running guest. Dropping it kills QEMU and its device models.
pub struct Vm {
    /// The guest's name (its log directory's).
    pub name: String,
    guest: Guest,
    qmp: QapiService<QmpStreamTokio<tokio::io::WriteHalf<UnixStream>>>,
    console: Console,
    pub(crate) hello: Hello,
    /// When the agent's hello arrived: with the uptime it reported, the guest's clock.
    hello_at: Instant,
    /// Boot time from QEMU start to the agent's hello.
    pub boot_time: Duration,
    /// QEMU's process id.
    pub qemu_pid: u32,
    // Dropped in this order: QEMU first, then devices, then the socket dir.
    qemu: Option<AsyncGroupChild>,
    devices: Vec<RunningDevice>,
    _dir: Scratch,
    /// The host CPU slots this guest holds, released after everything above is gone.
    host_slot: Option<crate::slots::SlotGuard>,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("name", &self.name)
            .field("qemu_pid", &self.qemu_pid)
            .finish()
    }
}

/// How long QMP `quit` may go unanswered before the shutdown stops asking.
const QUIT_ANSWER: Duration = Duration::from_secs(5);

/// The kernel command line every lab guest of `arch` gets: its console, panics that end the
/// VM, and what the architecture needs under QEMU (`Arch::cmdline`).
pub(crate) fn base_cmdline(arch: Arch) -> Vec<String> {
    let mut args = vec![format!("console={}", arch.console())];
    args.extend(
        ["panic=-1", "oops=panic", "loglevel=4", "rdinit=/init"]
            .iter()
            .chain(arch.cmdline())
            .chain(&["random.trust_cpu=on"])
            .map(|s| s.to_string()),
    );
    args
}

/// The whole kernel command line of `spec`: [`base_cmdline`], the delay loop's calibration
/// where the lab knows it ([`delay`]), then the spec's own arguments.
pub(crate) fn spec_cmdline(spec: &VmSpec) -> Vec<String> {
    let arch = spec.topology.arch();
    let mut cmdline = base_cmdline(arch);
    cmdline.extend(delay::lpj_arg(
        spec.accel,
        arch,
        spec.kernel.hz,
        delay::host_tsc_hz(),
    ));
    cmdline.extend(spec.cmdline.iter().cloned());
    cmdline
}

/// The full QEMU argument list for a spec (without the binary and `-L` paths). Public so that
/// `lab bench boot` can compare against a hand-written command line.
/// The machine a spec boots, without kernel, console or devices: `-machine`, the accelerator
/// and the topology (what the device tree QEMU generates depends on).
pub(crate) fn machine_args(spec: &VmSpec) -> Vec<String> {
    let arch = spec.topology.arch();
    let topology = spec.topology.qemu_args();
    let mut args: Vec<String> = vec![
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-machine".into(),
        topology.machine_arg(arch),
    ];
    args.extend(spec.accel.qemu_args());
    args.extend(topology.args);
    args
}

pub(crate) fn qemu_args(spec: &VmSpec, dir: &Path) -> Vec<String> {
    let mut args = machine_args(spec);
    if let Some(dtb) = &spec.dtb {
        args.extend(["-dtb".into(), dtb.display().to_string()]);
    }
    let cmdline = spec_cmdline(spec);
    args.extend([
        "-kernel".into(),
        spec.kernel.image.display().to_string(),
        "-initrd".into(),
        spec.initramfs.display().to_string(),
        "-append".into(),
        cmdline.join(" "),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-chardev".into(),
        "stdio,id=console,signal=off".into(),
        "-serial".into(),
        "chardev:console".into(),
        "-chardev".into(),
        format!(
            "socket,id=qmp,path={}",
            crate::qemu_opt_path(&dir.join("qmp.sock"))
        ),
        "-mon".into(),
        "chardev=qmp,mode=control".into(),
        "-device".into(),
        "virtio-serial-pci,id=agentbus".into(),
        "-chardev".into(),
        format!(
            "socket,id=agent,path={}",
            crate::qemu_opt_path(&dir.join("agent.sock"))
        ),
        "-device".into(),
        "virtserialport,bus=agentbus.0,chardev=agent,name=lab.agent".into(),
    ]);
    args
}

/// What a guest's QEMU is started with besides its spec: its private directory (sockets,
/// device files) and its devices' host sides, started by the caller ([`crate::Lab::boot`]);
/// the VM holds them until QEMU is gone.
pub(crate) struct Attachments {
    pub dir: Scratch,
    /// In spec order.
    pub devices: Vec<RunningDevice>,
    /// The host CPUs QEMU's threads start on (a pinned topology's housekeeping set).
    pub housekeeping: Option<Vec<u32>>,
}

/// Checks the spec's pins and node bindings against this host before anything starts, and
/// gives the housekeeping CPUs (online, pinned to no vCPU) that QEMU's other threads and device
/// processes run on, when the topology pins.
pub(crate) fn housekeeping_cpus(spec: &VmSpec) -> Result<Option<Vec<u32>>> {
    let host = spec.topology.check_on_host().map_err(anyhow::Error::msg)?;
    let housekeeping = host
        .as_ref()
        .and_then(|h| spec.topology.housekeeping_cpus(h.online()));
    if !spec.topology.pinning().is_empty() && housekeeping.is_none() {
        tracing::warn!(
            vm = %spec.name,
            "{}: the [[pin]] map takes every online host CPU, so QEMU's other threads and the device models run unpinned",
            spec.topology.file().display()
        );
    }
    Ok(housekeeping)
}

pub(crate) use scratch::{scratch_dir, Scratch};

impl Vm {
    /// Starts QEMU with the devices attached and waits until the guest agent is ready. The VM
    /// starts no device: their host sides come in `attached`, and go when the VM goes (after
    /// QEMU).
    pub(crate) async fn boot(qemu: &Qemu, spec: VmSpec, attached: Attachments) -> Result<Vm> {
        std::fs::create_dir_all(&spec.log_dir)
            .with_context(|| format!("creating {}", spec.log_dir.display()))?;
        let Attachments {
            dir,
            devices,
            housekeeping,
        } = attached;
        let qmp_listener = UnixListener::bind(dir.path().join("qmp.sock"))?;
        let agent_listener = UnixListener::bind(dir.path().join("agent.sock"))?;
        let device_args: Vec<String> = devices
            .iter()
            .flat_map(|d| d.qemu_args.iter().cloned())
            .collect();

        let mut cmd = qemu.command();
        cmd.args(qemu_args(&spec, dir.path()))
            .args(&device_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Every QEMU thread starts on the housekeeping CPUs; pin_vcpus then moves the vCPUs.
        if let Some(cpus) = &housekeeping {
            process::restrict_to_cpus(&mut cmd, cpus);
        }
        tracing::info!(vm = %spec.name, accel = spec.accel.name(), "starting QEMU");
        let started = Instant::now();
        let mut child = process::spawn_async_in_group(cmd)?;
        let qemu_pid = child.pid();
        let console = Console::spawn(
            child.child.stdout.take().context("no QEMU stdout")?,
            spec.log_dir.join(format!("{}.serial.log", spec.name)),
        );
        let stderr_log = spec.log_dir.join(format!("{}.qemu.log", spec.name));
        let stderr = child.child.stderr.take().context("no QEMU stderr")?;
        let stderr_task = tokio::spawn(copy_stderr(stderr, stderr_log.clone()));

        let name = spec.name.clone();
        let connect = async {
            let (qmp_stream, _) = qmp_listener.accept().await?;
            let (agent_stream, _) = agent_listener.accept().await?;
            let qmp = QmpStreamTokio::open(qmp_stream).await?.negotiate().await?;
            let (qmp, _events) = qmp.spawn_tokio();
            let guest = Guest::new(agent_stream);
            let hello = guest.wait_ready(spec.boot_timeout).await?;
            anyhow::Ok((qmp, guest, hello))
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout(spec.boot_timeout, connect) => match r {
                Ok(Ok(ready)) => Ok(ready),
                Ok(Err(e)) => {
                    // A guest that dies drops the agent's connection, and the socket can say so
                    // before the console has read the panic or QEMU has been reaped: a death
                    // within the next moment is the cause to name, not the lost connection (a
                    // console that merely closed waits for QEMU's exit and its own words).
                    tokio::select! {
                        state @ ConsoleState::Panicked(_) = console.dead() => Err(panicked(&name, &console, state).await),
                        status = child.child.wait() => Err(exited(&name, &console, status, stderr_task, &stderr_log).await),
                        _ = tokio::time::sleep(DEATH_GRACE) => Err(e.context(format!("connecting to guest {name}"))),
                    }
                }
                Err(_) => Err(crate::Error::GuestHang {
                    vm: name.clone(),
                    timeout: spec.boot_timeout,
                    log: console.log_path.display().to_string(),
                    tail: console.tail_text(),
                }.into()),
            },
            // A console that merely closed waits for QEMU's exit, whose error quotes QEMU's own
            // words (a command line QEMU refused read "console closed" alone).
            state @ ConsoleState::Panicked(_) = console.dead() => Err(panicked(&name, &console, state).await),
            status = child.child.wait() => Err(exited(&name, &console, status, stderr_task, &stderr_log).await),
        };
        let (qmp, guest, hello) = outcome?;
        let hello_at = Instant::now();
        tracing::debug!(
            vm = %name,
            elapsed = ?started.elapsed(),
            agent_started_ms = hello.started_ms,
            guest_uptime_ms = hello.uptime_ms,
            "agent said hello"
        );
        pin_vcpus(&qmp, &spec.topology).await?;
        // QEMU has offered the device models all of guest RAM by now: one that could not map
        // a part of it would fault there, and an experiment would measure a broken device.
        for device in &devices {
            if let Some(first) = device.problems().first() {
                anyhow::bail!(
                    "guest {name}: device {} ({}): {first}",
                    device.index,
                    device.spec.label()
                );
            }
        }
        let boot_time = started.elapsed();
        tracing::info!(vm = %name, ?boot_time, kernel = %hello.kernel_release, "guest ready");
        Ok(Vm {
            name,
            guest,
            qmp,
            console,
            hello,
            hello_at,
            boot_time,
            qemu_pid,
            qemu: Some(child),
            devices,
            _dir: dir,
            host_slot: None,
        })
    }

    /// Keeps `slot` until the guest is gone (see [`crate::slots`]).
    pub(crate) fn hold_slot(&mut self, slot: crate::slots::SlotGuard) {
        self.host_slot = Some(slot);
    }

    /// The guest's agent: commands, files.
    pub fn guest(&self) -> &Guest {
        &self.guest
    }

    /// Runs a command in the guest. A command that times out is an error; a guest that dies
    /// meanwhile is an error quoting the console.
    pub async fn exec(&self, cmd: &GuestCommand) -> Result<GuestOutput> {
        tokio::select! {
            r = self.guest.exec(cmd) => r.map_err(|e| anyhow::Error::from(e).context(format!(
                "in guest {}; last console lines:\n{}", self.name, self.console.tail_text()))),
            state = self.console.dead() => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Err(anyhow::anyhow!("guest {} died while running {:?} ({state:?})\nlast lines of {}:\n{}",
                    self.name, cmd.argv, self.console.log_path.display(), self.console.tail_text()))
            }
        }
    }

    /// Waits until the guest has been up for `uptime` (at once when it has), reckoned from the
    /// uptime its agent reported in its hello and the host's clock since, which a TCG or KVM
    /// guest's follows: nothing runs in the guest meanwhile.
    pub async fn wait_for_uptime(&self, uptime: Duration) {
        let now =
            Duration::from_millis(self.hello.uptime_ms).saturating_add(self.hello_at.elapsed());
        tokio::time::sleep(uptime.saturating_sub(now)).await;
    }

    /// Runs a shell command line (`sh -c`) and fails unless it exits 0.
    pub async fn sh(&self, script: &str) -> Result<String> {
        let out = self.exec(&GuestCommand::shell(script)).await?;
        if !out.success() {
            anyhow::bail!(
                "guest {}: `{script}` failed ({}):\n{}{}",
                self.name,
                out.status_text(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The devices, in slot order, with their host sides.
    pub fn devices(&self) -> &[RunningDevice] {
        &self.devices
    }

    /// Stops the guest through QMP (`quit`) and waits for QEMU to exit.
    pub async fn shutdown(mut self) -> Result<()> {
        let started = Instant::now();
        // A QEMU that stopped reading its monitor must not hold the shutdown: give `quit` a few
        // seconds, then the wait below, then the process group is killed when `self` drops.
        match tokio::time::timeout(QUIT_ANSWER, self.qmp.execute(qapi::qmp::quit {})).await {
            Ok(_) => {
                tracing::debug!(vm = %self.name, elapsed = ?started.elapsed(), "QMP quit answered")
            }
            Err(_) => tracing::warn!(vm = %self.name, "QMP quit unanswered after {QUIT_ANSWER:?}"),
        }
        if let Some(mut child) = self.qemu.take() {
            match tokio::time::timeout(Duration::from_secs(10), child.child.wait()).await {
                Ok(_) => {}
                Err(_) => tracing::warn!(vm = %self.name, "QEMU ignored quit; killing it"),
            }
        }
        tracing::debug!(vm = %self.name, elapsed = ?started.elapsed(), "QEMU quit");
        Ok(())
    }
}

/// Applies the topology's vCPU -> host CPU pinning map to QEMU's vCPU threads (for KVM runs
/// whose throughput must not depend on where the host scheduler puts vCPUs). Single-threaded
/// TCG runs every vCPU on one thread, so there the last pin wins; it matters for KVM and MTTCG.
async fn pin_vcpus(
    qmp: &QapiService<QmpStreamTokio<tokio::io::WriteHalf<UnixStream>>>,
    topology: &Topology,
) -> Result<()> {
    let pins = topology.pinning();
    if pins.is_empty() {
        return Ok(());
    }
    let cpus = qmp
        .execute(qapi::qmp::query_cpus_fast {})
        .await
        .context("query-cpus-fast")?;
    for cpu in cpus {
        let qapi::qmp::CpuInfoFast::x86_64(base) = cpu else {
            continue;
        };
        let Some(host) = pins.get(&(base.cpu_index as u32)) else {
            continue;
        };
        // Topology validation keeps pins below the set's size; a bad one must not panic here.
        if *host as usize >= crate::process::MAX_HOST_CPUS {
            anyhow::bail!(
                "vCPU {} is pinned to host CPU {host}, beyond the affinity set",
                base.cpu_index
            );
        }
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it for host < CPU_SETSIZE.
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(*host as usize, &mut set);
            libc::sched_setaffinity(
                base.thread_id as libc::pid_t,
                std::mem::size_of::<libc::cpu_set_t>(),
                &set,
            )
        };
        if rc != 0 {
            anyhow::bail!(
                "pinning vCPU {} (thread {}) to host CPU {host}: {}",
                base.cpu_index,
                base.thread_id,
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(())
}

async fn copy_stderr(mut stderr: tokio::process::ChildStderr, path: PathBuf) {
    if let Ok(mut file) = tokio::fs::File::create(&path).await {
        let _ = tokio::io::copy(&mut stderr, &mut file).await;
    }
}

impl Shell for Vm {
    async fn sh(&self, script: &str) -> Result<String> {
        Vm::sh(self, script).await
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // QEMU first (AsyncGroupChild kills its group), then the devices' host sides.
        self.qemu.take();
        for device in &mut self.devices {
            device.stop();
        }
        self.devices.clear();
    }
}

/// How long a boot whose agent connection dropped waits for the console or QEMU to show that the
/// guest died (both follow the socket within milliseconds; the console reader is a task of its
/// own).
const DEATH_GRACE: Duration = Duration::from_secs(2);

/// The error for a guest whose console stopped booting: the panic's line, or the console closed.
async fn panicked(name: &str, console: &Console, state: ConsoleState) -> anyhow::Error {
    let line = match state {
        ConsoleState::Panicked(l) => l,
        _ => "console closed".into(),
    };
    // Give the console a moment to collect the panic's backtrace.
    tokio::time::sleep(Duration::from_millis(300)).await;
    crate::Error::GuestPanic {
        vm: name.to_string(),
        line,
        log: console.log_path.display().to_string(),
        tail: console.tail_text(),
    }
    .into()
}

/// The error for a QEMU that exited during boot: the guest's panic where the console has one,
/// otherwise QEMU's status and its own words on stderr.
async fn exited(
    name: &str,
    console: &Console,
    status: std::io::Result<std::process::ExitStatus>,
    stderr_task: tokio::task::JoinHandle<()>,
    stderr_log: &Path,
) -> anyhow::Error {
    let status = status
        .map(|s| s.to_string())
        .unwrap_or_else(|e| e.to_string());
    // Let the stderr copy finish so the error can quote QEMU's own words, and the console
    // reader reach the end of QEMU's output, where a panic's line would be.
    let _ = tokio::time::timeout(Duration::from_secs(1), stderr_task).await;
    let _ = tokio::time::timeout(Duration::from_secs(1), console.dead()).await;
    let text = std::fs::read_to_string(stderr_log).unwrap_or_default();
    let log = console.log_path.display().to_string();
    let tail = console.tail_text();
    match console
        .tail()
        .into_iter()
        .find(|l| l.contains("Kernel panic"))
    {
        Some(line) => crate::Error::GuestPanic {
            vm: name.to_string(),
            line,
            log,
            tail,
        },
        None => crate::Error::QemuExited {
            vm: name.to_string(),
            status,
            stderr: text.trim().to_string(),
            log,
            tail,
        },
    }
    .into()
}
