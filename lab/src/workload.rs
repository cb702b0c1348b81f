//! Workloads: a guest command plus a parser of its output into typed results. `dmatest` is the
//! one seed S1 needs: every parameter of the seed run, run through the module's sysfs
//! interface, its summary lines parsed per thread, and its failure lines surfaced as errors.

pub mod choreography;
pub(crate) mod fio;
mod hackbench;
mod numa01;

pub use fio::Fio;
pub(crate) use fio::{FioResult, FioTarget};
pub use hackbench::{Hackbench, HackbenchResult};
pub use numa01::{Numa01, Numa01Result};

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::guest::GuestCommand;
use crate::vm::Vm;

/// `dmatest` module parameters (see `drivers/dma/dmatest.c`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dmatest {
    /// Copies per thread.
    pub iterations: u32,
    /// Per-transfer timeout in milliseconds.
    pub timeout_ms: u32,
    /// Bytes of each test buffer.
    pub test_buf_size: u32,
    /// Bytes per transfer.
    pub transfer_size: u32,
    /// Every transfer `transfer_size` bytes (no random sizes).
    pub norandom: bool,
    /// Skip checking the copied data.
    pub noverify: bool,
    /// Poll for completion instead of waiting for the interrupt.
    pub polled: bool,
    /// Threads per channel.
    pub threads_per_chan: u32,
    /// Channel to test (`dma0chan0`); empty means any.
    pub channel: String,
    /// How many channels to use at once (0: all that match).
    pub max_channels: u32,
}

impl Dmatest {
    /// The parameters of the seed S1 report: `iterations=1000 timeout=2000
    /// test_buf_size=0x100000 transfer_size=0x10000 norandom=1` on `dma0chan0`.
    pub fn seed_parameters() -> Dmatest {
        Dmatest {
            iterations: 1000,
            timeout_ms: 2000,
            test_buf_size: 0x100000,
            transfer_size: 0x10000,
            norandom: true,
            noverify: false,
            polled: false,
            threads_per_chan: 1,
            channel: "dma0chan0".into(),
            max_channels: 1,
        }
    }

    /// Skips checking the copied data.
    pub fn noverify(mut self, on: bool) -> Self {
        self.noverify = on;
        self
    }

    /// Polls for completion instead of waiting for the interrupt.
    pub fn polled(mut self, on: bool) -> Self {
        self.polled = on;
        self
    }

    /// `n` threads per channel.
    pub fn threads_per_chan(mut self, n: u32) -> Self {
        self.threads_per_chan = n;
        self
    }

    /// Only channel `name` (`dma0chan0`; empty: any).
    pub fn channel(mut self, name: &str) -> Self {
        self.channel = name.to_string();
        self
    }

    /// At most `n` channels at once (0: every one that matches).
    pub fn max_channels(mut self, n: u32) -> Self {
        self.max_channels = n;
        self
    }

    /// `n` copies per thread.
    pub fn iterations(mut self, n: u32) -> Self {
        self.iterations = n;
        self
    }

    /// The source and destination buffer size; dmatest verifies both whole buffers after each
    /// copy, so this sets the thread's computing time per copy (it must exceed
    /// `transfer_size`, or dmatest refuses to start).
    pub fn test_buf_size(mut self, bytes: u32) -> Self {
        self.test_buf_size = bytes;
        self
    }

    /// Refuses what dmatest would refuse only inside the guest (where a bad value shows up as a
    /// thread that never starts), naming the parameter.
    pub(crate) fn check(&self) -> Result<()> {
        if self.iterations == 0 {
            bail!("iterations is 0: dmatest would run until stopped");
        }
        if self.threads_per_chan == 0 {
            bail!("threads_per_chan is 0: dmatest would start no thread");
        }
        // 0 lets dmatest choose lengths itself.
        if self.transfer_size != 0 && self.transfer_size >= self.test_buf_size {
            bail!(
                "transfer_size {:#x} must be below test_buf_size {:#x} (dmatest refuses it)",
                self.transfer_size,
                self.test_buf_size
            );
        }
        Ok(())
    }

    /// `modprobe dmatest` arguments (everything except `channel` and `run`, which are written
    /// through sysfs after load so the channel can be chosen once the driver has bound).
    pub fn module_args(&self) -> String {
        format!(
            "iterations={} timeout={} test_buf_size={:#x} transfer_size={:#x} norandom={} noverify={} polled={} threads_per_chan={} max_channels={}",
            self.iterations,
            self.timeout_ms,
            self.test_buf_size,
            self.transfer_size,
            u8::from(self.norandom),
            u8::from(self.noverify),
            u8::from(self.polled),
            self.threads_per_chan,
            self.max_channels,
        )
    }

    /// The guest script: load dmatest, choose the channel (which creates the test threads,
    /// asleep), optionally place them on `start_cpu`, start them, and wait until every started
    /// thread has printed its summary. Reading the module's `wait` parameter alone is not
    /// enough: under TCG it can return before the threads are counted.
    ///
    /// Placement pins each sleeping thread to `start_cpu`, wakes it (`run=1`, written from that
    /// CPU), and only then widens its mask back to every online CPU: it starts there and the
    /// scheduler is free to move it afterwards. Widening before the wakeup does nothing: a
    /// sleeping task keeps its `prev_cpu` (where kthreadd created it), and the wakeup chooses
    /// from there (measured: threads created on CPU 7 started on node 1 instead of CPU 0).
    /// Pinning kthreadd instead leaves the threads pinned (Cpus_allowed_list stayed put).
    ///
    /// `control_cpu` pins the script's own shell (and its `dmesg | grep` polling, forked every
    /// 200 ms) away from the CPUs under observation, so a busy poller never stands in for the
    /// scheduler's choice. A precaution: the drift once blamed on it turned out to be the
    /// widen-before-wakeup bug above.
    pub(crate) fn script(&self, start_cpu: Option<u32>, control_cpu: Option<u32>) -> String {
        let control = choreography::control_shell(control_cpu);
        let start = match start_cpu {
            Some(cpu) => format!(
                "pids=''\n\
                 for p in /proc/[0-9]*; do {{ read c < $p/comm; }} 2>/dev/null || c=; case \"$c\" in dma*chan*-*) pids=\"$pids ${{p#/proc/}}\";; esac; done\n\
                 [ -n \"$pids\" ] || {{ echo 'dmatest created no threads' >&2; exit 1; }}\n\
                 for pid in $pids; do taskset -p -c {cpu} $pid > /dev/null; done\n\
                 taskset -c {cpu} sh -c 'echo 1 > /sys/module/dmatest/parameters/run'\n\
                 read online < /sys/devices/system/cpu/online\n\
                 for pid in $pids; do taskset -p -c $online $pid > /dev/null; done"
            ),
            None => "echo 1 > $P/run".to_string(),
        };
        let limit_s = 60 + u64::from(self.iterations) * u64::from(self.timeout_ms.max(1)) / 1000;
        format!(
            "set -e\n\
             {control}\
             P=/sys/module/dmatest/parameters\n\
             [ -d $P ] || modprobe dmatest {args}\n\
             for kv in {args}; do echo ${{kv#*=}} > $P/${{kv%%=*}}; done\n\
             echo '{channel}' > $P/channel\n\
             dmesg -c > /dev/null\n\
             {start}\n\
             started=$(dmesg | sed -n 's/.*dmatest: Started \\([0-9]*\\) threads.*/\\1/p' | awk '{{s += $1}} END {{print s + 0}}')\n\
             [ \"$started\" -gt 0 ] || {{ echo 'dmatest started no threads' >&2; dmesg >&2; exit 1; }}\n\
             echo \"{STARTED_TAG} $started\"\n\
             waited=0\n\
             while [ \"$(dmesg | grep -c ': summary ')\" -lt \"$started\" ]; do\n\
               sleep 0.2; waited=$((waited + 1))\n\
               [ $waited -lt {polls} ] || {{ echo \"dmatest did not finish: $(dmesg | grep -c ': summary ') of $started threads reported after {limit_s} s\" >&2; dmesg | grep dmatest >&2; exit 1; }}\n\
             done\n\
             cat $P/wait > /dev/null\n\
             dmesg | grep dmatest || true\n",
            args = self.module_args(),
            channel = self.channel,
            control = control,
            polls = limit_s * 5,
            limit_s = limit_s,
            STARTED_TAG = STARTED_TAG,
        )
    }

    /// Runs dmatest in `vm` and parses its results.
    pub async fn run(&self, vm: &Vm) -> Result<DmatestResult> {
        self.check()?;
        let limit = Duration::from_millis(
            u64::from(self.iterations) * u64::from(self.timeout_ms.max(1)) + 120_000,
        );
        let out = vm
            .exec(&GuestCommand::shell(self.script(None, None)).timeout(limit))
            .await?;
        let log = out.stdout_str();
        if !out.success() {
            bail!(
                "dmatest did not run in {} ({}):\n{}{}",
                vm.name,
                out.status_text(),
                log,
                out.stderr_str()
            );
        }
        let result = DmatestResult::parse(&log)?;
        result.check_complete(self.iterations)?;
        Ok(result)
    }
}

/// The line the dmatest script prints with the number of threads dmatest started.
const STARTED_TAG: &str = "lab-dmatest-started";

/// One thread's summary line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DmatestThread {
    /// e.g. `dma0chan0-copy0`.
    pub thread: String,
    /// Copies it made.
    pub tests: u64,
    /// Copies that failed.
    pub failures: u64,
    /// Copies per second.
    pub iops: f64,
    /// KB copied per second.
    pub kb_per_s: f64,
}

/// The parsed outcome of one dmatest run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DmatestResult {
    /// One summary per thread.
    pub threads: Vec<DmatestThread>,
    /// Threads dmatest said it started (from the lab's script; None for a bare log).
    #[serde(default)]
    pub started: Option<u64>,
}

impl DmatestResult {
    /// Parses dmesg lines. Any failure line (`result #N: 'test timed out'`, `data error`, ...)
    /// or a thread with failures is an error quoting those lines.
    pub(crate) fn parse(log: &str) -> Result<DmatestResult> {
        let mut threads = Vec::new();
        let mut failures = Vec::new();
        let mut started = None;
        for line in log.lines() {
            if let Some(n) = line.strip_prefix(STARTED_TAG) {
                started = n.trim().parse().ok();
                continue;
            }
            let Some(pos) = line.find("dmatest: ") else {
                continue;
            };
            let rest = &line[pos + "dmatest: ".len()..];
            if let Some((thread, summary)) = rest.split_once(": summary ") {
                threads.push(
                    parse_summary(thread, summary).with_context(|| format!("parsing {line:?}"))?,
                );
            } else if (rest.contains("result #") && !rest.contains("'success'"))
                || rest.contains("error")
                || rest.contains("timed out")
                || rest.contains("failed")
            {
                failures.push(line.trim().to_string());
            }
        }
        if threads.is_empty() {
            bail!("dmatest printed no summary line; its log:\n{log}");
        }
        let failed: Vec<&DmatestThread> = threads.iter().filter(|t| t.failures > 0).collect();
        if !failures.is_empty() || !failed.is_empty() {
            bail!(
                "dmatest reported failures ({}):\n{}",
                failed
                    .iter()
                    .map(|t| format!("{} {}/{} failed", t.thread, t.failures, t.tests))
                    .collect::<Vec<_>>()
                    .join(", "),
                failures.join("\n")
            );
        }
        Ok(DmatestResult { threads, started })
    }

    /// Every started thread reported and ran all `iterations`: a short run (a thread that hit
    /// dmatest's own timeout or stopped early) refuses the boot's sample
    /// ([`crate::sample::reject`]), naming the thread.
    pub(crate) fn check_complete(&self, iterations: u32) -> Result<()> {
        if let Some(started) = self.started {
            if self.threads.len() as u64 != started {
                return Err(crate::sample::reject(format!(
                    "dmatest started {started} threads but {} reported a summary",
                    self.threads.len()
                )));
            }
        }
        let short: Vec<String> = self
            .threads
            .iter()
            .filter(|t| t.tests != u64::from(iterations))
            .map(|t| format!("{} ran {} of {iterations}", t.thread, t.tests))
            .collect();
        if !short.is_empty() {
            return Err(crate::sample::reject(format!(
                "dmatest threads stopped short: {}",
                short.join(", ")
            )));
        }
        Ok(())
    }

    /// Copies of every thread.
    pub fn total_tests(&self) -> u64 {
        self.threads.iter().map(|t| t.tests).sum()
    }

    /// Copies per second of every thread together.
    pub fn total_iops(&self) -> f64 {
        self.threads.iter().map(|t| t.iops).sum()
    }
}

/// "1000 tests, 0 failures 1234.56 iops 78901 KB/s (0)"
fn parse_summary(thread: &str, summary: &str) -> Result<DmatestThread> {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let find = |unit: &str| -> Result<f64> {
        let i = words
            .iter()
            .position(|w| w.trim_end_matches(',') == unit)
            .with_context(|| format!("no {unit:?}"))?;
        let value = words.get(i.wrapping_sub(1)).context("no value")?;
        value
            .parse::<f64>()
            .with_context(|| format!("bad {unit} value {value:?}"))
    };
    Ok(DmatestThread {
        thread: thread.trim().to_string(),
        tests: find("tests")? as u64,
        failures: find("failures")? as u64,
        iops: find("iops")?,
        kb_per_s: find("KB/s")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_or_missing_thread_is_an_error_not_a_sample() {
        let line = |t: &str, n: u32| {
            format!(
                "[ 1.0] dmatest: {t}: summary {n} tests, 0 failures 500.00 iops 32000 KB/s (0)\n"
            )
        };
        let full = format!(
            "{STARTED_TAG} 2\n{}{}",
            line("dma0chan0-copy0", 1000),
            line("dma0chan0-copy1", 1000)
        );
        DmatestResult::parse(&full)
            .unwrap()
            .check_complete(1000)
            .unwrap();
        let short = format!(
            "{STARTED_TAG} 2\n{}{}",
            line("dma0chan0-copy0", 1000),
            line("dma0chan0-copy1", 412)
        );
        let err = DmatestResult::parse(&short)
            .unwrap()
            .check_complete(1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("dma0chan0-copy1 ran 412 of 1000"), "{err}");
        let missing = format!("{STARTED_TAG} 2\n{}", line("dma0chan0-copy0", 1000));
        let err = DmatestResult::parse(&missing)
            .unwrap()
            .check_complete(1000)
            .unwrap_err()
            .to_string();
        assert!(err.contains("started 2 threads but 1 reported"), "{err}");
    }

    #[test]
    fn the_script_fails_when_dmatest_does_not_finish() {
        let script = Dmatest::seed_parameters().script(Some(0), Some(7));
        let give_up = script
            .lines()
            .find(|l| l.contains("did not finish"))
            .expect("the script gives up at some point");
        assert!(give_up.trim_end().ends_with("exit 1; }"), "{give_up}");
        assert!(script.contains(STARTED_TAG), "{script}");
    }

    #[test]
    fn parses_the_seed_summary_line() {
        let log = "[   12.3] dmatest: Added 1 threads using dma0chan0\n\
                   [   12.4] dmatest: Started 1 threads using dma0chan0\n\
                   [   20.1] dmatest: dma0chan0-copy0: summary 1000 tests, 0 failures 98412.55 iops 6298403 KB/s (0)\n";
        let r = DmatestResult::parse(log).unwrap();
        assert_eq!(r.threads.len(), 1);
        let t = &r.threads[0];
        assert_eq!(t.thread, "dma0chan0-copy0");
        assert_eq!((t.tests, t.failures), (1000, 0));
        assert!((t.iops - 98412.55).abs() < 1e-6);
        assert!((t.kb_per_s - 6298403.0).abs() < 1e-6);
    }

    #[test]
    fn failures_are_errors_with_their_lines() {
        let log = "dmatest: dma0chan0-copy0: result #7: 'test timed out' with src_off=0x0 dst_off=0x0 len=0x10000 (0)\n\
                   dmatest: dma0chan0-copy0: summary 7 tests, 1 failures 10.00 iops 640 KB/s (0)\n";
        let err = DmatestResult::parse(log).unwrap_err().to_string();
        assert!(
            err.contains("test timed out") && err.contains("1/7 failed"),
            "{err}"
        );
    }

    #[test]
    fn no_summary_is_an_error() {
        assert!(DmatestResult::parse("nothing here\n").is_err());
    }

    #[test]
    fn script_is_valid_shell_and_waits_for_every_summary() {
        let script = Dmatest::seed_parameters().script(Some(0), Some(7));
        assert!(script.contains("taskset -p -c 7 $$"), "{script}");
        assert!(
            script.contains("taskset -c 0 sh -c 'echo 1 > /sys/module/dmatest/parameters/run'"),
            "{script}"
        );
        assert!(script.contains("grep -c ': summary '"), "{script}");
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "not valid shell:\n{script}");
    }

    #[test]
    fn parameters_dmatest_refuses_are_refused_before_the_guest() {
        assert!(Dmatest::seed_parameters().check().is_ok());
        assert!(Dmatest::seed_parameters()
            .test_buf_size(0x20000)
            .check()
            .is_ok());
        let err = Dmatest::seed_parameters()
            .test_buf_size(0x10000)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("transfer_size 0x10000") && err.contains("test_buf_size"),
            "{err}"
        );
        let err = Dmatest::seed_parameters()
            .iterations(0)
            .check()
            .unwrap_err();
        assert!(err.to_string().contains("iterations"), "{err}");
        assert!(Dmatest::seed_parameters()
            .threads_per_chan(0)
            .check()
            .is_err());
    }

    #[test]
    fn module_args_carry_every_seed_parameter() {
        let args = Dmatest::seed_parameters().module_args();
        for want in [
            "iterations=1000",
            "timeout=2000",
            "test_buf_size=0x100000",
            "transfer_size=0x10000",
            "norandom=1",
            "noverify=0",
            "polled=0",
            "threads_per_chan=1",
        ] {
            assert!(args.contains(want), "{args} lacks {want}");
        }
    }
}
