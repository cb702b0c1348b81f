//! `fio` from Debian's package: one job section run `numjobs` times, reported per job as JSON
//! (`--output-format=json`), parsed into typed results: bandwidth, IOPS, completion-latency
//! percentiles and each job's CPU time and context switches.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::guest::GuestCommand;

/// One fio job, the seed S3 shape by default (`--rw randwrite --bs 4k --iodepth 32 --direct 1
/// --ioengine libaio --time_based`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fio {
    /// `read`, `write`, `randread`, `randwrite`, `randrw`.
    pub rw: String,
    /// Block size (`4k`).
    pub bs: String,
    /// `--iodepth`.
    pub iodepth: u32,
    /// `--direct` (no page cache).
    pub direct: bool,
    /// `--ioengine` (`libaio`).
    pub ioengine: String,
    /// Jobs (`--numjobs`; 0: one per guest CPU where the scenario says so).
    pub numjobs: u32,
    /// Seconds each job runs (`--runtime`, `--time_based`).
    pub runtime_s: u32,
    /// Bytes each job's file covers (`--size`, e.g. `256M`).
    pub size: String,
    /// `--cpus_allowed` (a CPU list); None: no restriction.
    pub cpus_allowed: Option<String>,
    /// `--cpus_allowed_policy`: `shared` (every job may use every allowed CPU, the seed's) or
    /// `split` (one CPU each).
    pub cpus_allowed_policy: String,
}

/// Where the jobs do their I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FioTarget {
    /// A directory on a mounted file system: one file per job.
    Directory(String),
    /// A block device, shared by every job.
    Device(String),
}

impl Fio {
    /// The seed's job (`../shared/seeds/002_*`): 4 KiB random writes, queue depth 32, direct
    /// libaio, time-based; `numjobs`, `size` and `cpus_allowed` are for the caller to scale to
    /// its guest (the seed ran 8 jobs on CPUs 1-8, 30 GiB each, 8 s).
    pub fn seed() -> Fio {
        Fio {
            rw: "randwrite".into(),
            bs: "4k".into(),
            iodepth: 32,
            direct: true,
            ioengine: "libaio".into(),
            numjobs: 8,
            runtime_s: 8,
            size: "30g".into(),
            cpus_allowed: Some("1-8".into()),
            cpus_allowed_policy: "shared".into(),
        }
    }

    /// This job with `numjobs` 0 made one per CPU of an `nr_cpus` guest and an unset
    /// `cpus_allowed` made every CPU (with `split`, each job on its own CPU).
    pub(crate) fn one_job_per_cpu_unless_set(&self, nr_cpus: u32) -> Fio {
        let mut fio = self.clone();
        if fio.numjobs == 0 {
            fio.numjobs = nr_cpus;
        }
        if fio.cpus_allowed.is_none() {
            fio.cpus_allowed = Some(format!("0-{}", nr_cpus.saturating_sub(1)));
        }
        fio
    }

    /// Rejects jobs fio would refuse or that measure nothing, naming the field.
    pub(crate) fn check(&self) -> Result<()> {
        const RW: &[&str] = &[
            "read",
            "write",
            "randread",
            "randwrite",
            "randrw",
            "rw",
            "readwrite",
        ];
        if !RW.contains(&self.rw.as_str()) {
            bail!("fio.rw = {:?}: one of {}", self.rw, RW.join(", "));
        }
        for (name, value) in [
            ("iodepth", self.iodepth),
            ("numjobs", self.numjobs),
            ("runtime_s", self.runtime_s),
        ] {
            if value == 0 {
                bail!("fio.{name} must be at least 1");
            }
        }
        for (name, value) in [("bs", &self.bs), ("size", &self.size)] {
            crate::topology::parse_size(value).map_err(|e| anyhow::anyhow!("fio.{name}: {e}"))?;
        }
        if let Some(cpus) = &self.cpus_allowed {
            crate::topology::parse_cpulist(cpus)
                .with_context(|| format!("fio.cpus_allowed = {cpus:?}"))?;
        }
        if !["shared", "split"].contains(&self.cpus_allowed_policy.as_str()) {
            bail!(
                "fio.cpus_allowed_policy = {:?}: shared or split",
                self.cpus_allowed_policy
            );
        }
        Ok(())
    }

    pub(crate) fn argv(&self, target: &FioTarget) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "fio".into(),
            "--name=lab".into(),
            format!("--rw={}", self.rw),
            format!("--bs={}", self.bs),
            format!("--iodepth={}", self.iodepth),
            format!("--direct={}", u8::from(self.direct)),
            format!("--ioengine={}", self.ioengine),
            format!("--numjobs={}", self.numjobs),
            format!("--runtime={}", self.runtime_s),
            "--time_based".into(),
            format!("--size={}", self.size),
            "--output-format=json".into(),
        ];
        if let Some(cpus) = &self.cpus_allowed {
            argv.push(format!("--cpus_allowed={cpus}"));
            argv.push(format!(
                "--cpus_allowed_policy={}",
                self.cpus_allowed_policy
            ));
        }
        argv.push(match target {
            FioTarget::Directory(dir) => format!("--directory={dir}"),
            FioTarget::Device(dev) => format!("--filename={dev}"),
        });
        argv
    }

    /// The guest command, with a limit of the run time plus fio's set-up (laying out files
    /// under TCG takes a while) and a margin.
    pub(crate) fn command(&self, target: &FioTarget) -> GuestCommand {
        GuestCommand::new(self.argv(target))
            .timeout(Duration::from_secs(u64::from(self.runtime_s) + 300))
    }
}

/// One direction (read or write) of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct FioDirection {
    pub io_kib: u64,
    /// KiB/s.
    pub bw_kib_s: f64,
    pub iops: f64,
    pub total_ios: u64,
    /// Completion latency in microseconds: mean and percentiles (`"50"`, `"99"`, `"99.9"`).
    pub clat_mean_us: f64,
    pub clat_percentile_us: BTreeMap<String, f64>,
}

/// One job's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FioJob {
    pub name: String,
    pub read: FioDirection,
    pub write: FioDirection,
    /// CPU use of the job in percent of its run time (fio's `usr_cpu`, `sys_cpu`).
    pub usr_cpu_pct: f64,
    pub sys_cpu_pct: f64,
    /// Context switches of the job's thread.
    pub context_switches: u64,
    pub runtime_ms: u64,
}

/// What one fio run reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FioResult {
    pub jobs: Vec<FioJob>,
    /// Device utilisation in percent, by block device.
    pub disk_util: BTreeMap<String, f64>,
}

// fio's JSON, the fields the lab reads (serde ignores the rest).
#[derive(Deserialize)]
struct RawOutput {
    jobs: Vec<RawJob>,
    #[serde(default)]
    disk_util: Vec<RawDiskUtil>,
}

#[derive(Deserialize)]
struct RawJob {
    jobname: String,
    error: i64,
    read: RawDirection,
    write: RawDirection,
    usr_cpu: f64,
    sys_cpu: f64,
    ctx: u64,
    job_runtime: u64,
}

#[derive(Deserialize)]
struct RawDirection {
    io_kbytes: u64,
    bw: f64,
    iops: f64,
    total_ios: u64,
    clat_ns: RawLatency,
}

#[derive(Deserialize)]
struct RawLatency {
    mean: f64,
    #[serde(default)]
    percentile: BTreeMap<String, f64>,
}

#[derive(Deserialize)]
struct RawDiskUtil {
    name: String,
    util: f64,
}

impl FioDirection {
    fn from_raw(raw: RawDirection) -> FioDirection {
        // "99.900000" -> "99.9": keys people can type.
        let percentile = raw
            .clat_ns
            .percentile
            .into_iter()
            .filter_map(|(k, v)| {
                let p: f64 = k.parse().ok()?;
                Some((format!("{p}"), v / 1000.0))
            })
            .collect();
        FioDirection {
            io_kib: raw.io_kbytes,
            bw_kib_s: raw.bw,
            iops: raw.iops,
            total_ios: raw.total_ios,
            clat_mean_us: raw.clat_ns.mean / 1000.0,
            clat_percentile_us: percentile,
        }
    }
}

impl FioResult {
    /// Parses `--output-format=json`; anything fio printed before the JSON object (warnings)
    /// is skipped. A job that reports an error fails the parse with its error number.
    pub(crate) fn parse(stdout: &str) -> Result<FioResult> {
        let start = stdout
            .find("\n{")
            .map(|i| i + 1)
            .or_else(|| stdout.starts_with('{').then_some(0))
            .with_context(|| format!("fio printed no JSON object:\n{stdout}"))?;
        let raw: RawOutput = serde_json::from_str(&stdout[start..])
            .with_context(|| "fio's JSON output does not have the fields the lab reads")?;
        if raw.jobs.is_empty() {
            bail!("fio reported no jobs");
        }
        let mut jobs = Vec::new();
        for (i, job) in raw.jobs.into_iter().enumerate() {
            if job.error != 0 {
                bail!(
                    "fio job {i} ({}) failed with error {} ({})",
                    job.jobname,
                    job.error,
                    std::io::Error::from_raw_os_error(job.error as i32)
                );
            }
            jobs.push(FioJob {
                name: job.jobname,
                read: FioDirection::from_raw(job.read),
                write: FioDirection::from_raw(job.write),
                usr_cpu_pct: job.usr_cpu,
                sys_cpu_pct: job.sys_cpu,
                context_switches: job.ctx,
                runtime_ms: job.job_runtime,
            });
        }
        Ok(FioResult {
            jobs,
            disk_util: raw
                .disk_util
                .into_iter()
                .map(|d| (d.name, d.util))
                .collect(),
        })
    }

    /// Every job ran for at least nine tenths of `runtime_s` (fio's `--time_based` runs them
    /// the whole time): a job that stopped early refuses the boot's sample
    /// ([`crate::sample::reject`]), naming it.
    pub(crate) fn check_complete(&self, runtime_s: u32) -> Result<()> {
        let want_ms = u64::from(runtime_s) * 1000;
        let short: Vec<String> = self
            .jobs
            .iter()
            .filter(|j| j.runtime_ms * 10 < want_ms * 9)
            .map(|j| format!("{} ran {} ms of {want_ms}", j.name, j.runtime_ms))
            .collect();
        if short.is_empty() {
            Ok(())
        } else {
            Err(crate::sample::reject(format!(
                "fio jobs stopped short: {}",
                short.join(", ")
            )))
        }
    }

    /// IOPS of every job together, reads and writes.
    pub(crate) fn total_iops(&self) -> f64 {
        self.jobs.iter().map(|j| j.read.iops + j.write.iops).sum()
    }

    /// I/Os completed by every job together (what a scenario file's `json` queries are
    /// checked against).
    #[cfg(test)]
    pub(crate) fn total_ios(&self) -> u64 {
        self.jobs
            .iter()
            .map(|j| j.read.total_ios + j.write.total_ios)
            .sum()
    }

    /// The largest of the jobs' `percentile` (`"99"`) completion latencies, in microseconds,
    /// over whichever direction did I/O.
    #[cfg(test)]
    pub(crate) fn worst_clat_us(&self, percentile: &str) -> Option<f64> {
        self.jobs
            .iter()
            .flat_map(|j| [&j.read, &j.write])
            .filter(|d| d.total_ios > 0)
            .filter_map(|d| d.clat_percentile_us.get(percentile).copied())
            .reduce(f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real run: Debian trixie's fio 3.39 in the lab's `storage` image, 2 jobs of 4 KiB random
    /// writes on a raw QEMU NVMe namespace under TCG (trimmed to one job's fields and the disk).
    const SAMPLE: &str = include_str!("fio_sample.json");

    #[test]
    fn parses_a_real_run() {
        let noisy = format!("fio: some warning\n{SAMPLE}");
        let r = FioResult::parse(&noisy).unwrap();
        assert_eq!(r.jobs.len(), 2);
        let w = &r.jobs[0].write;
        assert_eq!(w.total_ios, 6065);
        assert!((w.iops - 2020.993002).abs() < 1e-6);
        assert_eq!(w.bw_kib_s, 8083.0);
        assert!((w.clat_percentile_us["99"] - 53215.232).abs() < 1e-6);
        assert!((w.clat_percentile_us["99.9"] - 61603.84).abs() < 1e-6);
        assert_eq!(r.jobs[0].read.total_ios, 0);
        assert_eq!(r.jobs[0].context_switches, 64);
        assert!(r.total_iops() > 2020.0);
        assert_eq!(r.disk_util["nvme0n1"], 76.551724);
        assert!(r.worst_clat_us("99").unwrap() >= 53215.232);
    }

    #[test]
    fn errors_and_garbage_are_refused() {
        let failed = SAMPLE.replacen("\"error\" : 0", "\"error\" : 28", 1);
        let err = FioResult::parse(&failed).unwrap_err().to_string();
        assert!(err.contains("error 28"), "{err}");
        let err = FioResult::parse("fio: failed to open /dev/nvme9n1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no JSON"), "{err}");
        assert!(FioResult::parse("{\"jobs\": []}").is_err());
    }

    #[test]
    fn the_seed_job_is_valid_and_bad_fields_are_named() {
        let seed = Fio::seed();
        seed.check().unwrap();
        let argv = seed
            .argv(&FioTarget::Directory("/mnt/lab".into()))
            .join(" ");
        for want in [
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=32",
            "--direct=1",
            "--ioengine=libaio",
            "--numjobs=8",
            "--time_based",
            "--cpus_allowed=1-8",
            "--cpus_allowed_policy=shared",
            "--directory=/mnt/lab",
            "--output-format=json",
        ] {
            assert!(argv.contains(want), "{want} missing: {argv}");
        }
        let bad = |f: fn(&mut Fio)| {
            let mut fio = Fio::seed();
            f(&mut fio);
            fio.check().unwrap_err().to_string()
        };
        assert!(bad(|f| f.rw = "scribble".into()).contains("fio.rw"));
        assert!(bad(|f| f.iodepth = 0).contains("fio.iodepth"));
        assert!(bad(|f| f.size = "huge".into()).contains("fio.size"));
        assert!(bad(|f| f.cpus_allowed = Some("1-x".into())).contains("fio.cpus_allowed"));
        assert!(bad(|f| f.cpus_allowed_policy = "any".into()).contains("policy"));
    }
}
