//! `lab bench run`: `lab run -- true` as a whole process against a hand-written QEMU command line
//! that boots the same kernel and initramfs to the same command and powers off, in alternating
//! runs (A B A B ...) so drift in the host's load hits both sides alike.
//!
//! The lab side is this same `lab` binary run as a child, `lab run --timings FILE -- true`; the
//! file gives the guest's boot (QEMU's start to the agent's hello) and the other phases, so the
//! lab's own overhead is the whole process minus the boot.
//!
//! The hand-written side is what a kernel developer types to do the same without the lab: the
//! lab's QEMU (through the bundle's loader when it runs a provisioned bundle, as the lab does)
//! with the same machine (q35, accelerator, the topology's `-smp`/`-m`/`-numa`/`-cpu`), the same
//! `-kernel` and `-initrd` files and the lab's kernel command line, but busybox's shell from that
//! initramfs as init instead of the lab's agent:
//! `rdinit=/bin/sh -- -c "/bin/true && poweroff -f"`. The kernel hands the words after `--` to
//! init as its arguments (a double-quoted word keeps its spaces); the shell runs the command by
//! path, so it forks and execs it as the agent does rather than using its builtin, and when it
//! succeeds powers the machine off, on which QEMU (`-no-reboot`) exits. The serial console must
//! end in the kernel's "reboot: Power down"; a missing shell or a failed command ends in a panic
//! instead and the run is an error. No QMP, no virtio-serial port, no agent: everything the lab
//! adds is on its side of the ratio.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::Spread;
use crate::run::RunTimings;
use crate::{BootOptions, Lab};

/// The command both sides run.
pub(crate) const COMMAND: &str = "true";

/// One lab-side run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunSample {
    /// Spawn to exit, measured from outside.
    pub whole: Duration,
    pub timings: RunTimings,
}

impl RunSample {
    /// The lab's own overhead: the whole process minus the guest's boot.
    pub(crate) fn overhead_s(&self) -> f64 {
        self.whole.as_secs_f64() - self.timings.boot_s
    }
}

/// The timings of [`run`].
#[derive(Debug, Clone)]
pub(crate) struct RunBench {
    pub topology: String,
    pub accel: String,
    pub kernel: String,
    /// "debug" or "release": the build of the lab binary that ran.
    pub build: &'static str,
    pub lab: Vec<RunSample>,
    pub hand_written: Vec<Duration>,
    /// The hand-written command line, shell-quoted.
    pub hand_written_line: String,
}

/// Runs `lab_exe run [--kernel K] -- true` and the hand-written line `runs` times each,
/// alternating; without `kernel`, the lab's default kernel.
pub(crate) async fn run(
    lab_exe: &Path,
    runs: usize,
    topology: &str,
    kernel: Option<&str>,
) -> Result<RunBench> {
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    // Also warms the cache (QEMU, kernel, image), so every lab-side run is a warm one.
    let lab = Lab::from_env_async().await?;
    let mut opts = BootOptions::named("bench-run").topology(topology);
    if let Some(name) = kernel {
        // As `lab run --kernel` prepares it: the recipe's [boot] settings too.
        opts = opts.ready_kernel(lab.prepare(&crate::variant::Variant::kernel(name)).await?);
    }
    let spec = lab.spec(opts).await?;
    let scratch = tempfile::Builder::new()
        .prefix("lab-bench-run-")
        .tempdir()?;
    let mut bench = RunBench {
        topology: topology.to_string(),
        accel: spec.accel.name().to_string(),
        kernel: spec.kernel.release.clone(),
        build: super::build_profile(),
        lab: Vec::new(),
        hand_written: Vec::new(),
        hand_written_line: shell_line(&hand_written_command(&lab, &spec)?),
    };
    for i in 0..runs {
        let sample = lab_run(lab_exe, topology, kernel, scratch.path(), i).await?;
        let raw = hand_written_run(&lab, &spec).await?;
        crate::progress::step(format!(
            "run {}/{runs}: lab run -- {COMMAND} {:.2} s (boot {:.2} s), hand-written {:.2} s",
            i + 1,
            sample.whole.as_secs_f64(),
            sample.timings.boot_s,
            raw.as_secs_f64()
        ));
        bench.lab.push(sample);
        bench.hand_written.push(raw);
    }
    Ok(bench)
}

/// One `lab run [--kernel K] -- true` as a child process.
async fn lab_run(
    lab_exe: &Path,
    topology: &str,
    kernel: Option<&str>,
    scratch: &Path,
    i: usize,
) -> Result<RunSample> {
    let timings_path = scratch.join(format!("timings-{i}.json"));
    let log_path = scratch.join(format!("lab-run-{i}.log"));
    use std::ffi::OsStr;
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("run"),
        OsStr::new("--topology"),
        OsStr::new(topology),
        OsStr::new("--timings"),
        timings_path.as_os_str(),
    ];
    if let Some(name) = kernel {
        args.extend([OsStr::new("--kernel"), OsStr::new(name)]);
    }
    args.extend([OsStr::new("--"), OsStr::new(COMMAND)]);
    let (status, whole) = super::run_lab_logged(lab_exe, &args, &[], &log_path).await?;
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    if !status.success() {
        bail!(
            "`{} run -- {COMMAND}` failed ({status}):\n{}",
            lab_exe.display(),
            text.trim_end()
        );
    }
    let timings: RunTimings = serde_json::from_slice(
        &std::fs::read(&timings_path)
            .with_context(|| format!("lab run wrote no {}", timings_path.display()))?,
    )
    .with_context(|| format!("parsing {}", timings_path.display()))?;
    Ok(RunSample { whole, timings })
}

/// The kernel command line of the hand-written side: the lab's, with busybox's shell as init
/// running the command and powering off (see the module's documentation).
pub(crate) fn hand_written_cmdline(lab_cmdline: &[String]) -> String {
    let mut words: Vec<String> = lab_cmdline
        .iter()
        .filter(|w| !w.starts_with("rdinit="))
        .cloned()
        .collect();
    words.push("rdinit=/bin/sh".into());
    words.push("--".into());
    words.push("-c".into());
    words.push(format!("\"/bin/{COMMAND} && poweroff -f\""));
    words.join(" ")
}

fn hand_written_command(lab: &Lab, spec: &crate::vm::VmSpec) -> Result<std::process::Command> {
    let cmdline = crate::vm::spec_cmdline(spec);
    hand_written_qemu(lab, spec, &hand_written_cmdline(&cmdline))
}

/// The least QEMU line that boots `spec`'s kernel and initramfs on its machine and topology
/// with `append` as the kernel command line, console on stdout (shared by the `run` and `boot`
/// benches).
pub(super) fn hand_written_qemu(
    lab: &Lab,
    spec: &crate::vm::VmSpec,
    append: &str,
) -> Result<std::process::Command> {
    let arch = spec.topology.arch();
    let topology = spec.topology.qemu_args();
    let mut cmd = lab.qemu_for(arch)?.command();
    cmd.args(["-nodefaults", "-no-user-config", "-machine"])
        .arg(topology.machine_arg(arch))
        .args(spec.accel.qemu_args())
        .args(topology.args)
        .arg("-kernel")
        .arg(&spec.kernel.image)
        .arg("-initrd")
        .arg(&spec.initramfs)
        .arg("-append")
        .arg(append)
        .args(["-display", "none", "-no-reboot", "-serial", "stdio"]);
    Ok(cmd)
}

/// One hand-written boot: spawn to QEMU's exit after the guest powered off.
async fn hand_written_run(lab: &Lab, spec: &crate::vm::VmSpec) -> Result<Duration> {
    let mut cmd = hand_written_command(lab, spec)?;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let start = Instant::now();
    let mut child = crate::process::spawn_async_in_group(cmd)?;
    let stdout = child.child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut tail: Vec<String> = Vec::new();
    let mut powered_off = false;
    let run = async {
        while let Some(line) = lines.next_line().await? {
            powered_off |= line.contains("reboot: Power down");
            if tail.len() == 20 {
                tail.remove(0);
            }
            tail.push(line);
        }
        let status = child.child.wait().await?;
        anyhow::Ok((status, start.elapsed()))
    };
    let (status, elapsed) = tokio::time::timeout(spec.boot_timeout * 2, run)
        .await
        .context("the hand-written QEMU did not exit in time")??;
    if !powered_off || !status.success() {
        bail!(
            "the hand-written QEMU ({status}) did not power off after `{COMMAND}`; its console ended:\n{}",
            tail.join("\n")
        );
    }
    Ok(elapsed)
}

/// A command as one shell-quoted line (for showing the hand-written side).
fn shell_line(cmd: &std::process::Command) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:+@%".contains(c))
        {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let mut words = vec![quote(&cmd.get_program().to_string_lossy())];
    words.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    let env: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| {
            Some(format!(
                "{}={}",
                k.to_string_lossy(),
                quote(&v?.to_string_lossy())
            ))
        })
        .collect();
    if env.is_empty() {
        words.join(" ")
    } else {
        format!("{} {}", env.join(" "), words.join(" "))
    }
}

impl RunBench {
    pub(crate) fn lab_whole(&self) -> Option<Spread> {
        let whole: Vec<Duration> = self.lab.iter().map(|s| s.whole).collect();
        Spread::of_durations(&whole)
    }

    pub(crate) fn hand_written_whole(&self) -> Option<Spread> {
        Spread::of_durations(&self.hand_written)
    }

    /// The lab's own overhead per run: whole process minus the guest's boot.
    pub(crate) fn overhead(&self) -> Option<Spread> {
        let o: Vec<f64> = self.lab.iter().map(RunSample::overhead_s).collect();
        Spread::of(&o)
    }

    /// lab / hand-written, pair by pair (run i of each side ran back to back).
    pub(crate) fn ratio(&self) -> Option<Spread> {
        let r: Vec<f64> = self
            .lab
            .iter()
            .zip(&self.hand_written)
            .map(|(l, h)| l.whole.as_secs_f64() / h.as_secs_f64())
            .collect();
        Spread::of(&r)
    }

    fn phase(&self, f: impl Fn(&RunTimings) -> f64) -> Option<Spread> {
        let v: Vec<f64> = self.lab.iter().map(|s| f(&s.timings)).collect();
        Spread::of(&v)
    }

    /// The table the CLI prints: each side's whole process, the lab's phases, the ratio.
    pub(crate) fn render(&self) -> String {
        let mut out = format!(
            "`lab run -- {COMMAND}` vs hand-written QEMU: {}, {}, kernel {}, {} build of lab, \
             {} runs each, interleaved (seconds)\n",
            self.topology,
            self.accel,
            self.kernel,
            self.build,
            self.lab.len()
        );
        out += &format!("{:<44} {:>7} {:>7} {:>7}\n", "", "min", "median", "max");
        let mut row = |label: &str, s: Option<Spread>| {
            if let Some(s) = s {
                out += &format!(
                    "{label:<44} {:>7.2} {:>7.2} {:>7.2}\n",
                    s.min, s.median, s.max
                );
            }
        };
        row("lab run, whole process", self.lab_whole());
        row(
            "  guest boot (QEMU start to agent hello)",
            self.phase(|t| t.boot_s),
        );
        row("  lab overhead (whole minus boot)", self.overhead());
        row(
            "    on the host before QEMU starts",
            self.phase(|t| t.ready_s + t.to_qemu_s),
        );
        row(
            "      process start to lab ready",
            self.phase(|t| t.ready_s),
        );
        row("      lab ready to QEMU start", self.phase(|t| t.to_qemu_s));
        row("    command round trip", self.phase(|t| t.command_s));
        row(
            "      of which the command in the guest",
            self.phase(|t| t.command_in_guest_s),
        );
        row("    QEMU quit", self.phase(|t| t.shutdown_s));
        row(
            "    the rest (process start-up and exit)",
            self.phase_rest(),
        );
        row(
            "hand-written QEMU, whole process",
            self.hand_written_whole(),
        );
        if let Some(r) = self.ratio() {
            out += &format!(
                "ratio lab / hand-written, pair by pair: median {:.3} (min {:.3}, max {:.3})\n",
                r.median, r.min, r.max
            );
        }
        out += &format!("hand-written line: {}\n", self.hand_written_line);
        out
    }

    /// Whole process minus every phase the process timed itself.
    fn phase_rest(&self) -> Option<Spread> {
        let v: Vec<f64> = self
            .lab
            .iter()
            .map(|s| {
                let t = &s.timings;
                s.whole.as_secs_f64()
                    - (t.ready_s + t.to_qemu_s + t.boot_s + t.command_s + t.shutdown_s)
            })
            .collect();
        Spread::of(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(whole: f64, boot: f64) -> RunSample {
        RunSample {
            whole: Duration::from_secs_f64(whole),
            timings: RunTimings {
                ready_s: 0.05,
                to_qemu_s: 0.01,
                boot_s: boot,
                command_s: 0.2,
                command_in_guest_s: 0.18,
                shutdown_s: 0.08,
                total_s: whole - 0.01,
            },
        }
    }

    #[test]
    fn hand_written_cmdline_runs_the_command_with_the_shell_as_init() {
        let lab: Vec<String> = ["console=ttyS0", "rdinit=/init", "panic=-1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            hand_written_cmdline(&lab),
            "console=ttyS0 panic=-1 rdinit=/bin/sh -- -c \"/bin/true && poweroff -f\""
        );
    }

    #[test]
    fn table_shows_overhead_and_pairwise_ratio() {
        let bench = RunBench {
            topology: "ci-2node-4llc".into(),
            accel: "tcg-single".into(),
            kernel: "6.12.117-labx".into(),
            build: "debug",
            lab: vec![sample(7.0, 6.6), sample(7.4, 7.0), sample(6.9, 6.4)],
            hand_written: vec![
                Duration::from_secs_f64(7.0),
                Duration::from_secs_f64(7.4),
                Duration::from_secs_f64(6.0),
            ],
            hand_written_line: "qemu-system-x86_64 -append 'a b'".into(),
        };
        let o = bench.overhead().unwrap();
        assert!(
            (o.median - 0.4).abs() < 1e-9 && (o.max - 0.5).abs() < 1e-9,
            "{o:?}"
        );
        let r = bench.ratio().unwrap();
        assert!((r.median - 1.0).abs() < 1e-9 && (r.max - 1.15).abs() < 1e-9);
        let text = bench.render();
        assert!(text.contains("3 runs each"), "{text}");
        let row = |label: &str, numbers: &str| format!("{label:<44} {numbers}\n");
        assert!(
            text.contains(&row(
                "  lab overhead (whole minus boot)",
                "   0.40    0.40    0.50"
            )),
            "{text}"
        );
        assert!(
            text.contains(&row(
                "    the rest (process start-up and exit)",
                "   0.06    0.06    0.16"
            )),
            "{text}"
        );
        assert!(
            text.contains("median 1.000 (min 1.000, max 1.150)"),
            "{text}"
        );
        assert!(text.contains("hand-written line: qemu-system-x86_64 -append 'a b'"));
    }

    #[test]
    fn shell_line_quotes_what_needs_it() {
        let mut cmd = std::process::Command::new("/usr/bin/qemu");
        cmd.args(["-append", "a \"b c\"", "-m", "2048M"])
            .env("QEMU_MODULE_DIR", "/x y");
        assert_eq!(
            shell_line(&cmd),
            "QEMU_MODULE_DIR='/x y' /usr/bin/qemu -append 'a \"b c\"' -m 2048M"
        );
    }
}
