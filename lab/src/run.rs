//! `lab run`: boot a guest, bind and pin its devices as an experiment does, run one command in
//! it, shut it down, and say where the time went. The outcome holds the command's exit code and
//! output for the CLI to pass on; the boot itself is reported through [`crate::progress`].

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::devices::DeviceSpec;
use crate::guest::GuestCommand;
use crate::topology::Topology;
use crate::{BootOptions, Lab};

/// One `lab run`; unset fields take the lab's defaults.
#[derive(Debug, Clone)]
pub struct Request {
    /// When the process started: the timings count from it, start-up included.
    pub started: Instant,
    /// A topology file's name; replaced by a quick shape when `cpus` is given.
    pub topology: String,
    /// A quick shape instead of a file: `cpus` vCPUs and `memory` over `nodes` NUMA nodes.
    pub cpus: Option<u32>,
    /// Memory of the quick shape (`1G`).
    pub memory: Option<String>,
    /// NUMA nodes of the quick shape.
    pub nodes: u32,
    /// A kernel recipe (booted with its `[boot]` settings) or `debian`.
    pub kernel: Option<String>,
    /// More kernel command-line arguments.
    pub cmdline: Vec<String>,
    /// The guest image recipe (default `default`).
    pub image: Option<String>,
    /// Devices in slot order; `passthrough:NAME` ones are looked up in `host`'s file.
    pub devices: Vec<DeviceSpec>,
    /// The host file passthrough devices are looked up in.
    pub host: Option<String>,
    /// The command and its arguments, run in the guest.
    pub command: Vec<String>,
    /// How long the command may run.
    pub timeout: Duration,
}

/// What [`run`] gives back.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The command's exit code (128 + the signal when a signal ended it).
    pub exit_code: i32,
    /// What the command wrote to stdout.
    pub stdout: Vec<u8>,
    /// What the command wrote to stderr.
    pub stderr: Vec<u8>,
    /// Bytes of its output past the bound the lab keeps (`guest::OUTPUT_KEPT` a stream).
    pub dropped: u64,
    /// Each device as bound in the guest and each of its vectors, a line each.
    pub devices: Vec<String>,
    /// Where the run's time went.
    pub timings: RunTimings,
}

/// What `lab run --timings FILE` writes: the phases of one run as the process saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTimings {
    /// Process start to the lab being ready (QEMU, default kernel, accelerator found).
    pub ready_s: f64,
    /// Ready to QEMU's start (kernel choice, guest image, VM spec, a CPU slot).
    pub to_qemu_s: f64,
    /// QEMU's start to the agent's hello: the guest's boot.
    pub boot_s: f64,
    /// The command's round trip through the agent.
    pub command_s: f64,
    /// The command's own run time, measured in the guest.
    pub command_in_guest_s: f64,
    /// QMP `quit` until QEMU has exited.
    pub shutdown_s: f64,
    /// Process start to the end of the run.
    pub total_s: f64,
}

impl RunTimings {
    /// Writes them to `path` as JSON (`lab bench run` reads them back).
    pub fn write_json(&self, path: &Path) -> Result<()> {
        std::fs::write(path, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// Boots the guest `request` describes, runs its command and shuts it down. A bad passthrough
/// name or quick shape fails before QEMU or a kernel is prepared.
pub async fn run(request: Request) -> Result<Outcome> {
    let Request {
        started,
        topology,
        cpus,
        memory,
        nodes,
        kernel,
        cmdline,
        image,
        mut devices,
        host,
        command,
        timeout,
    } = request;
    crate::devices::resolve(&mut devices, host.as_deref())?;
    let shape = match (cpus, &memory) {
        (Some(cpus), Some(memory)) => Some(Topology::quick(cpus, memory, nodes)?),
        _ => None,
    };
    let topology = shape.as_ref().map_or(topology, |t| t.name().to_string());
    let mut phases = RunTimings::default();
    let lab = Lab::ready().await?;
    phases.ready_s = started.elapsed().as_secs_f64();
    let booting = Instant::now();
    let mut opts = BootOptions::named("lab-run").topology(&topology);
    opts.shape = shape;
    opts.cmdline = cmdline;
    opts.image = image;
    opts.devices = devices;
    if let Some(name) = kernel {
        // The recipe's [boot] settings too, as a comparison boots it.
        let ready = lab.prepare(&crate::variant::Variant::kernel(&name)).await?;
        opts = opts.ready_kernel(ready);
    }
    // The guest's own accelerator: another architecture's guest runs under TCG.
    let arch = match &opts.shape {
        Some(shape) => shape.arch(),
        None => crate::topology::Topology::by_name(&topology)
            .map(|t| t.arch())
            .unwrap_or_else(|_| crate::arch::Arch::host()),
    };
    let task = crate::progress::Task::start(
        format!("booting {topology} ({})", lab.accelerator_for(arch)),
        None,
    );
    let vm = lab.boot(opts).await;
    drop(task);
    let vm = vm?;
    phases.boot_s = vm.boot_time.as_secs_f64();
    phases.to_qemu_s = booting.elapsed().as_secs_f64() - phases.boot_s;
    crate::progress::step(format!(
        "{topology} booted in {:.1?} ({}, kernel {})",
        vm.boot_time,
        lab.accelerator_for(arch),
        vm.hello.kernel_release
    ));
    // Devices are bound and pinned as an experiment does, and their vectors shown.
    let bound = crate::devices::bind_and_pin(&vm, vm.devices()).await?;
    let devices = bound.iter().flat_map(|d| d.describe()).collect();
    let mut cmd = GuestCommand::new(command);
    cmd.timeout = timeout;
    let exec_started = Instant::now();
    let out = vm.exec(&cmd).await?;
    phases.command_s = exec_started.elapsed().as_secs_f64();
    phases.command_in_guest_s = out.duration.as_secs_f64();
    let stopping = Instant::now();
    vm.shutdown().await?;
    phases.shutdown_s = stopping.elapsed().as_secs_f64();
    phases.total_s = started.elapsed().as_secs_f64();
    tracing::debug!(?phases, "lab run");
    Ok(Outcome {
        exit_code: out.exit_code(),
        stdout: out.stdout,
        stderr: out.stderr,
        dropped: out.dropped,
        devices,
        timings: phases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_are_written_as_the_json_bench_reads() {
        let timings = RunTimings {
            ready_s: 0.1,
            boot_s: 2.5,
            total_s: 3.0,
            ..RunTimings::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timings.json");
        timings.write_json(&path).unwrap();
        let back: RunTimings =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, timings);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"boot_s\": 2.5"), "{text}");
    }

    #[test]
    fn a_bad_quick_shape_fails_before_anything_is_prepared() {
        let request = Request {
            started: Instant::now(),
            topology: crate::host::DEFAULT_TOPOLOGY.into(),
            cpus: Some(0),
            memory: Some("1G".into()),
            nodes: 1,
            kernel: None,
            cmdline: Vec::new(),
            image: None,
            devices: Vec::new(),
            host: None,
            command: vec!["true".into()],
            timeout: Duration::from_secs(1),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let err = runtime.block_on(run(request)).unwrap_err();
        assert!(format!("{err:#}").contains("the command line"), "{err:#}");
    }
}
