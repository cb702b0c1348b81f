//! Seed S3 (`docs/SCENARIOS.md`, thread `002_b16d65084fa4a5c4.txt`): v6.12's `DELAY_DEQUEUE`
//! under fio random writes to ext4 on a thin volume on NVMe. The regression showed on some
//! machines and not on one whose NVMe interrupts had 3-CPU masks; Dietmar Eggemann's reading:
//! with those masks the delayed tasks woken on the completion path were per-CPU kworkers
//! (`nr_cpus_allowed == 1`), which the feature's wakeup shortcut cannot move anyway. What
//! differs between mask shapes under each feature setting?
//!
//! Per boot: an NVMe controller with `io_queues` queue pairs (as many as CPUs: one-CPU masks;
//! fewer: multi-CPU masks), the storage stack built on its namespace, then fio's seed job while
//! tracing who wakes fio's threads and the kernel workers, and counting each queue's interrupts
//! per CPU. After the run: the allowed CPUs of every task woken from hard-interrupt context.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::devices::DeviceSpec;
use crate::experiment::{Boot, BootPlan, Measurement, MetricDef, Phases, Scenario};
use crate::observe::{allowed_cpus, per_cpu_map, Interrupts, WakeupTrace, Wakeups, HARD_IRQ};
use crate::report::{Direction, Picture};
pub use crate::storage::StorageStack;
use crate::topology::{format_cpulist, parse_size, Topology};
use crate::variant::Variant;
use crate::workload::{Fio, FioResult};

/// The kernel every column boots.
pub const KERNEL: &str = "v6.12";
/// The scheduler feature as the kernel has it.
pub const WITH_DELAY: &str = "DELAY_DEQUEUE";
/// The feature turned off.
pub const WITHOUT_DELAY: &str = "NO_DELAY_DEQUEUE";

/// fio's threads (the job is named `lab`, but its threads keep the program's name).
const FIO: &str = "fio";
/// Per-CPU kernel workers (`kworker/3:1`, `kworker/3:1H`) and unbound ones (`kworker/u33:0`),
/// as [`crate::observe::task_class`] writes them.
const PER_CPU_KWORKER: &str = "kworker/N:N";
const PER_CPU_KWORKER_HIGHPRI: &str = "kworker/N:NH";
const UNBOUND_KWORKER: &str = "kworker/uN:N";

/// I/O queues of the multi-CPU-mask columns: on the 8-vCPU CI topology the kernel gives 3
/// queues masks of 4, 2 and 2 CPUs (the seed's machine had 3-CPU masks).
pub const FEW_QUEUES: u16 = 3;

/// The four default columns: the same kernel with the feature on and off (both written after
/// boot and read back), each with the scenario's queues (one-CPU masks on the CI topology) and
/// with [`FEW_QUEUES`] (multi-CPU masks), named `DELAY_DEQUEUE`, `NO_DELAY_DEQUEUE`,
/// `DELAY_DEQUEUE-3q`, `NO_DELAY_DEQUEUE-3q`.
pub fn feature_and_mask_variants() -> Vec<Variant> {
    let column = |feature: &str, queues: Option<u16>| {
        let v = Variant::kernel(KERNEL).with_sched_feature(feature);
        match queues {
            None => v.named(feature),
            Some(q) => v
                .with_param("io_queues", &q.to_string())
                .named(&format!("{feature}-{q}q")),
        }
    };
    vec![
        column(WITH_DELAY, None),
        column(WITHOUT_DELAY, None),
        column(WITH_DELAY, Some(FEW_QUEUES)),
        column(WITHOUT_DELAY, Some(FEW_QUEUES)),
    ]
}

/// Everything a run of S3 can change (`lab compare delay-dequeue --set io_queues=2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelayDequeueParams {
    /// NVMe I/O queue pairs: as many as the guest's CPUs gives every queue's interrupt a
    /// one-CPU mask; fewer spread each mask over several CPUs.
    pub io_queues: u16,
    /// Namespace size (sparse on the host).
    pub namespace: String,
    /// The storage under fio's files.
    pub stack: StorageStack,
    /// The job; with `cpus_allowed` unset it runs on every CPU but CPU 0, as the seed's ran on
    /// CPUs 1-8.
    pub fio: Fio,
    /// Per-CPU trace ring in KiB; the boot fails rather than count from a ring that overflowed.
    pub trace_buffer_kb: u32,
}

/// Seed S3 as a scenario.
#[derive(Debug, Clone)]
pub struct DelayDequeue {
    params: DelayDequeueParams,
}

impl DelayDequeue {
    /// The seed's job scaled to the CI topology (8 vCPUs): 7 jobs on CPUs 1-7, 5 s, 64 MiB
    /// files, on ext4 on a thin volume of a 2 GiB namespace, one-CPU interrupt masks.
    pub fn seed() -> DelayDequeue {
        let mut fio = Fio::seed();
        fio.numjobs = 7;
        fio.runtime_s = 5;
        fio.size = "64M".into();
        fio.cpus_allowed = None;
        DelayDequeue {
            params: DelayDequeueParams {
                io_queues: 8,
                namespace: "2G".into(),
                stack: StorageStack::Ext4OnThin,
                fio,
                trace_buffer_kb: 16384,
            },
        }
    }

    /// With `queues` NVMe I/O queue pairs.
    pub fn io_queues(mut self, queues: u16) -> Self {
        self.params.io_queues = queues;
        self
    }
}

impl DelayDequeueParams {
    fn fio_for(&self, topology: &Topology) -> Fio {
        let mut fio = self.fio.clone();
        if fio.cpus_allowed.is_none() && topology.nr_cpus() > 1 {
            fio.cpus_allowed = Some(format!("1-{}", topology.nr_cpus() - 1));
        }
        fio
    }
}

impl Scenario for DelayDequeue {
    type Params = DelayDequeueParams;

    fn name(&self) -> &str {
        "delay-dequeue"
    }

    fn description(&self) -> &str {
        "S3: DELAY_DEQUEUE vs NO_DELAY_DEQUEUE under fio randwrite on ext4 on dm-thin on NVMe; who wakes fio and the kworkers, per IRQ-mask shape"
    }

    fn params(&self) -> &DelayDequeueParams {
        &self.params
    }

    fn default_variants(&self) -> Vec<Variant> {
        feature_and_mask_variants()
    }

    fn metrics(&self) -> Vec<MetricDef> {
        let pct = |name| MetricDef::share(name, 2.0);
        let count = |name, unit, magnitude| {
            MetricDef::new(name, unit, Direction::Neutral, magnitude).non_negative()
        };
        vec![
            // The decision (Dietmar Eggemann's reading of the seed): who the completion path
            // wakes, whatever the feature and the mask shape. A fall of 10 points (measured
            // 85-99% in every column) would mean the wakeup shortcut had tasks to move.
            MetricDef::share("hardirq_wakees_single_cpu", 10.0)
                .primary()
                .optional(),
            count("irq_cpus", "CPUs", 0.5),
            pct("irq_busiest_cpu"),
            pct("fio_woken_in_hardirq"),
            pct("fio_woken_by_percpu_kworker"),
            pct("fio_woken_by_unbound_kworker"),
            pct("fio_woken_by_fio"),
            pct("fio_moved_at_wakeup"),
            count("fio_migrations", "per 1000 I/Os", 1.0),
            count("fio_wakeups", "per 1000 I/Os", 5.0),
            count("kworker_wakeups", "per 1000 I/Os", 5.0),
            MetricDef::new("iops", "iops", Direction::HigherIsBetter, 0.0).non_negative(),
            MetricDef::new("clat_p99", "us", Direction::LowerIsBetter, 0.0).non_negative(),
        ]
    }

    fn picture(&self) -> Option<Picture> {
        Some(Picture {
            task: "the NVMe I/O queues' interrupts".into(),
            quantity: "completion interrupts (/proc/interrupts)".into(),
            per_cpu: "/irq_per_cpu".into(),
            marks: Vec::new(),
        })
    }

    fn plan(&self, params: &DelayDequeueParams, topology: &Topology) -> Result<BootPlan> {
        params.fio_for(topology).check()?;
        let bytes = parse_size(&params.namespace).map_err(|e| anyhow::anyhow!("namespace: {e}"))?;
        let files = parse_size(&params.fio.size).unwrap_or(0) * u64::from(params.fio.numjobs);
        // The thin pool's metadata and ext4's own take some; the jobs' files must fit the rest.
        if params.stack != StorageStack::Raw && files + (bytes / 8) > bytes {
            bail!(
                "fio.size x fio.numjobs = {} MiB does not fit namespace = {} with the file \
                 system's own space: make the namespace larger or the files smaller",
                files >> 20,
                params.namespace
            );
        }
        if params.trace_buffer_kb == 0 {
            bail!("trace_buffer_kb must be at least 1");
        }
        Ok(BootPlan {
            devices: vec![DeviceSpec::nvme(params.io_queues, bytes)],
            image: Some("storage".into()),
            ..BootPlan::default()
        })
    }

    async fn measure(&self, params: &DelayDequeueParams, boot: &Boot<'_>) -> Result<Measurement> {
        let vm = boot.vm;
        let nvme = boot.devices.first().context("no NVMe controller")?;
        // Vector 0 is the admin queue's; the others complete the I/O queues.
        let io_irqs: Vec<u32> = nvme.vectors.iter().skip(1).map(|v| v.irq).collect();
        // Where the measure step's time goes, in the details: fio's runtime is a part of it.
        let mut steps = Phases::default();
        let started = std::time::Instant::now();
        let setup = vm
            .sh(&params.stack.setup_script("/dev/nvme0n1"))
            .await
            .context("building the storage stack")?;
        steps.lap("storage_stack", &started);
        let target = StorageStack::parse_target(&setup)?;
        let fio = params.fio_for(boot.topology);
        let trace = WakeupTrace {
            buffer_kb: params.trace_buffer_kb,
            ..WakeupTrace::of(&[FIO, "kworker"])
        };
        trace.start(vm).await?;
        steps.lap("trace_start", &started);
        let before = Interrupts::read(vm).await?;
        let run = vm.exec(&fio.command(&target)).await?;
        let after = Interrupts::read(vm).await?;
        steps.lap("fio", &started);
        let (raw, wakeups) = trace.stop(vm).await?;
        steps.lap("trace_read", &started);
        let trace_file = boot.keep("wakeups.trace", &raw).await?;
        boot.keep("fio.json", &run.stdout).await?;
        steps.lap("keep", &started);
        run.require_success("fio", &vm.name)?;
        let result =
            FioResult::parse(&run.stdout_str()).with_context(|| format!("fio in {}", vm.name))?;
        result
            .check_complete(fio.runtime_s)
            .with_context(|| format!("fio in {}", vm.name))?;
        let irq_per_cpu = after.delta_summed(
            &before,
            io_irqs.iter().copied(),
            boot.topology.nr_cpus() as usize,
        );
        let hard_irq_pids: BTreeSet<u32> = wakeups.hard_irq_wakees.keys().copied().collect();
        let allowed = allowed_cpus(vm, &hard_irq_pids).await?;
        steps.lap("allowed_cpus", &started);
        let metrics = metrics(&wakeups, &allowed, &irq_per_cpu, &result)?;
        let masks: Vec<String> = nvme
            .vectors
            .iter()
            .map(|v| format!("{}:{}", v.irq, format_cpulist(&v.affinity)))
            .collect();
        Ok(Measurement {
            metrics,
            details: json!({
                "masks": masks,
                "irq_per_cpu": per_cpu_map(&irq_per_cpu),
                "fio": result,
                "wakeups": wakeups,
                "hard_irq_wakee_cpus": allowed,
                "trace": trace_file,
                "step_seconds": steps.0,
            }),
        })
    }
}

/// The per-boot metrics of S3.
pub(crate) fn metrics(
    wakeups: &Wakeups,
    allowed: &BTreeMap<u32, Vec<u32>>,
    irq_per_cpu: &[u64],
    result: &FioResult,
) -> Result<BTreeMap<String, f64>> {
    let ios = result.total_ios();
    if ios == 0 {
        bail!("fio completed no I/O");
    }
    let irqs: u64 = irq_per_cpu.iter().sum();
    if irqs == 0 {
        bail!("the NVMe I/O queues raised no interrupt during the run");
    }
    // Every whole below is known to be above 0 but the resolved hard-IRQ wakees'.
    let pct = |part: u64, whole: u64| 100.0 * part as f64 / whole.max(1) as f64;
    let per_1k = |n: u64| 1000.0 * n as f64 / ios as f64;
    let fio_wakeups = wakeups.wakeups_of(FIO);
    if fio_wakeups == 0 {
        bail!("the trace shows no wakeup of fio's threads");
    }
    // Of the wakeups from hard-interrupt context, those of tasks allowed on one CPU only;
    // tasks that exited before the lookup count as neither.
    let (mut single, mut known) = (0u64, 0u64);
    for (pid, n) in &wakeups.hard_irq_wakees {
        if let Some(cpus) = allowed.get(pid) {
            known += n;
            if cpus.len() == 1 {
                single += n;
            }
        }
    }
    let kworker_wakeups = wakeups.wakeups_of(PER_CPU_KWORKER)
        + wakeups.wakeups_of(PER_CPU_KWORKER_HIGHPRI)
        + wakeups.wakeups_of(UNBOUND_KWORKER);
    let mut m = BTreeMap::new();
    m.insert(
        "irq_cpus".into(),
        irq_per_cpu
            .iter()
            .filter(|n| **n as f64 >= 0.01 * irqs as f64)
            .count() as f64,
    );
    m.insert(
        "irq_busiest_cpu".into(),
        pct(*irq_per_cpu.iter().max().unwrap_or(&0), irqs),
    );
    // Absent, not 0, when no hard-IRQ wakee was still there to look up.
    if known > 0 {
        m.insert("hardirq_wakees_single_cpu".into(), pct(single, known));
    }
    m.insert(
        "fio_woken_in_hardirq".into(),
        pct(wakeups.woken_by(FIO, HARD_IRQ), fio_wakeups),
    );
    m.insert(
        "fio_woken_by_percpu_kworker".into(),
        pct(
            wakeups.woken_by(FIO, PER_CPU_KWORKER) + wakeups.woken_by(FIO, PER_CPU_KWORKER_HIGHPRI),
            fio_wakeups,
        ),
    );
    m.insert(
        "fio_woken_by_unbound_kworker".into(),
        pct(wakeups.woken_by(FIO, UNBOUND_KWORKER), fio_wakeups),
    );
    m.insert(
        "fio_woken_by_fio".into(),
        pct(wakeups.woken_by(FIO, FIO), fio_wakeups),
    );
    m.insert(
        "fio_moved_at_wakeup".into(),
        pct(
            wakeups.moved_at_wakeup.get(FIO).copied().unwrap_or(0),
            wakeups.placed.get(FIO).copied().unwrap_or(0),
        ),
    );
    m.insert(
        "fio_migrations".into(),
        per_1k(wakeups.migrations.get(FIO).copied().unwrap_or(0)),
    );
    m.insert("fio_wakeups".into(), per_1k(fio_wakeups));
    m.insert("kworker_wakeups".into(), per_1k(kworker_wakeups));
    m.insert("iops".into(), result.total_iops());
    m.insert(
        "clat_p99".into(),
        result.worst_clat_us("99").unwrap_or(f64::NAN),
    );
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::fio::{FioDirection, FioJob};

    fn ci() -> Topology {
        Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
    }

    #[test]
    fn metrics_split_wakers_and_single_cpu_wakees() {
        let trace = "\
  <idle>-0 [005] d.h4. 1.000100: sched_waking: comm=kworker/5:1 pid=76 prio=120 target_cpu=005
  <idle>-0 [003] d.h4. 1.000150: sched_waking: comm=kworker/u33:0 pid=56 prio=120 target_cpu=001
  kworker/5:1-76 [005] d..2. 1.000200: sched_waking: comm=fio pid=300 prio=120 target_cpu=002
  kworker/5:1-76 [005] d..3. 1.000220: sched_wakeup: comm=fio pid=300 prio=120 target_cpu=005
  <idle>-0 [002] d.h2. 1.000300: sched_waking: comm=fio pid=301 prio=120 target_cpu=002
  <idle>-0 [002] d.h2. 1.000310: sched_wakeup: comm=fio pid=301 prio=120 target_cpu=002
";
        let wakeups = Wakeups::from_events(&crate::observe::parse_trace(trace));
        let allowed = BTreeMap::from([(76, vec![5]), (56, vec![0, 1, 2, 3]), (301, vec![1, 2])]);
        let job = FioJob {
            name: "lab".into(),
            read: FioDirection::default(),
            write: FioDirection {
                total_ios: 1000,
                iops: 200.0,
                ..FioDirection::default()
            },
            usr_cpu_pct: 1.0,
            sys_cpu_pct: 2.0,
            context_switches: 10,
            runtime_ms: 5000,
        };
        let result = FioResult {
            jobs: vec![job],
            disk_util: BTreeMap::new(),
        };
        let m = metrics(&wakeups, &allowed, &[0, 0, 10, 0, 0, 30, 0, 0], &result).unwrap();
        // Three hard-IRQ wakeups: kworker/5:1 (one CPU), the unbound worker and fio (several).
        assert!((m["hardirq_wakees_single_cpu"] - 100.0 / 3.0).abs() < 1e-9);
        assert_eq!(m["fio_woken_in_hardirq"], 50.0);
        assert_eq!(m["fio_woken_by_percpu_kworker"], 50.0);
        assert_eq!(m["fio_moved_at_wakeup"], 50.0);
        assert_eq!(m["fio_wakeups"], 2.0);
        assert_eq!(m["irq_cpus"], 2.0);
        assert_eq!(m["irq_busiest_cpu"], 75.0);
        assert!(metrics(&wakeups, &allowed, &[0; 8], &result).is_err());
    }

    #[test]
    fn files_larger_than_the_namespace_are_refused_before_boot() {
        let s = DelayDequeue::seed();
        let plan = s.plan(s.params(), &ci()).unwrap();
        assert_eq!(plan.image.as_deref(), Some("storage"));
        let fio = s.params().fio_for(&ci());
        assert_eq!(fio.cpus_allowed.as_deref(), Some("1-7"));
        let mut p = s.params().clone();
        p.namespace = "256M".into();
        let err = s.plan(&p, &ci()).unwrap_err().to_string();
        assert!(err.contains("namespace = 256M"), "{err}");
        p.namespace = "lots".into();
        assert!(s
            .plan(&p, &ci())
            .unwrap_err()
            .to_string()
            .contains("namespace"));
        assert_eq!(feature_and_mask_variants().len(), 4);
    }
}
