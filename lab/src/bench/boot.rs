//! `lab bench boot`: boot to the first command, the lab against a hand-written QEMU line.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::Spread;
use crate::guest::GuestCommand;
use crate::{BootOptions, Lab};

/// Boot-to-first-command: the lab (QEMU + QMP + agent hello + one `true` round trip) against a
/// hand-written QEMU command line with the same kernel, initramfs and topology that only waits
/// for the agent's ready line on the serial console. Runs alternate (A B A B ...) so drift in
/// the host's load hits both sides alike. With `against`, each run also boots the lab on that
/// topology (another architecture's, say), for the ratio of the two guests' boots.
pub async fn boot(runs: usize, topology: &str, against: Option<&str>) -> Result<BootBench> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let lab = Lab::from_env_async().await?;
    let opts = BootOptions::named("bench-boot").topology(topology);
    // The hand-written side boots what the lab's boot call resolves the same options to.
    let spec = lab.spec(opts.clone()).await?;
    let mut lab_times = Vec::new();
    let mut raw_times = Vec::new();
    let mut against_times = Vec::new();
    let against_opts = against.map(|t| BootOptions::named("bench-boot").topology(t));
    for run in 0..runs {
        lab_times.push(lab_boot(&lab, &opts).await?);
        raw_times.push(raw_boot(&lab, &spec).await?);
        let mut line = format!(
            "run {}/{runs}: lab {:.2}s, hand-written {:.2}s",
            run + 1,
            lab_times[run].as_secs_f64(),
            raw_times[run].as_secs_f64()
        );
        if let (Some(o), Some(name)) = (&against_opts, against) {
            against_times.push(lab_boot(&lab, o).await?);
            line += &format!(", lab on {name} {:.2}s", against_times[run].as_secs_f64());
        }
        crate::progress::step(line);
    }
    Ok(BootBench {
        topology: topology.to_string(),
        accel: lab.accelerator_for(spec.topology.arch()).to_string(),
        lab: lab_times,
        hand_written: raw_times,
        against: against.map(|t| (t.to_string(), against_times)),
    })
}

/// One lab boot to the agent's hello and a `true` round trip.
async fn lab_boot(lab: &Lab, opts: &BootOptions) -> Result<Duration> {
    let start = Instant::now();
    let vm = lab.boot(opts.clone()).await?;
    vm.exec(&GuestCommand::new(["true"])).await?;
    Ok(start.elapsed())
}

/// The timings of [`boot`], alternating runs of each side.
#[derive(Debug, Clone)]
pub struct BootBench {
    pub(crate) topology: String,
    pub(crate) accel: String,
    pub(crate) lab: Vec<Duration>,
    pub(crate) hand_written: Vec<Duration>,
    /// The other topology's lab boots, interleaved with these.
    pub(crate) against: Option<(String, Vec<Duration>)>,
}

impl BootBench {
    /// The table the CLI prints: min/median/max per side and the ratio of medians.
    pub fn render(&self) -> String {
        let (topology, runs) = (&self.topology, self.lab.len());
        let (Some(l), Some(r)) = (
            Spread::of_durations(&self.lab),
            Spread::of_durations(&self.hand_written),
        ) else {
            return format!("boot to first command, {topology}: no runs\n");
        };
        let (lmin, lmed, lmax) = (l.min, l.median, l.max);
        let (rmin, rmed, rmax) = (r.min, r.median, r.max);
        let mut out = format!(
            "boot to first command, {topology}, {} ({runs} runs each, interleaved)\n",
            self.accel
        );
        out += &format!("{:<22} {:>8} {:>8} {:>8}\n", "", "min", "median", "max");
        out += &format!("{:<22} {lmin:>8.2} {lmed:>8.2} {lmax:>8.2}\n", "lab");
        out += &format!(
            "{:<22} {rmin:>8.2} {rmed:>8.2} {rmax:>8.2}\n",
            "hand-written QEMU"
        );
        out += &format!(
            "ratio lab / hand-written (median): {:.3}  (overhead {:+.1}%)\n",
            lmed / rmed,
            (lmed / rmed - 1.0) * 100.0
        );
        if let Some((other, times)) = &self.against {
            if let Some(a) = Spread::of_durations(times) {
                out += &format!(
                    "{:<22} {:>8.2} {:>8.2} {:>8.2}\n",
                    format!("lab on {other}"),
                    a.min,
                    a.median,
                    a.max
                );
                out += &format!(
                    "ratio {topology} / {other} (median, lab): {:.3}\n",
                    lmed / a.median
                );
            }
        }
        out
    }
}

/// One boot with a minimal hand-written command line; returns the time to the agent's ready
/// line on the console.
async fn raw_boot(lab: &Lab, spec: &crate::vm::VmSpec) -> Result<Duration> {
    let mut cmdline = crate::vm::base_cmdline(spec.topology.arch());
    cmdline.extend(spec.cmdline.iter().cloned());
    let mut cmd = super::run::hand_written_qemu(lab, spec, &cmdline.join(" "))?;
    // The agent needs its port to exist; a null backend is the least a hand-written line can do.
    cmd.args([
        "-device",
        "virtio-serial-pci",
        "-chardev",
        "null,id=agent",
        "-device",
        "virtserialport,chardev=agent,name=lab.agent",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    let start = Instant::now();
    let mut child = crate::process::spawn_async_in_group(cmd)?;
    let stdout = child.child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let wait = async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("lab-agent: ready") {
                return anyhow::Ok(start.elapsed());
            }
        }
        bail!("the hand-written QEMU exited before the agent was ready")
    };
    tokio::time::timeout(spec.boot_timeout, wait)
        .await
        .context("hand-written boot timed out")?
}
