//! Seed S5 (`docs/SCENARIOS.md`, thread `004_915e87c4f6fb8ab6.txt`), on x86: are a
//! multi-queue device's interrupts spread over the CPUs? The seed is arm64's GICv3 ITS, which
//! put every LPI on the first CPU of its mask until it learnt to pick the least-loaded CPU; x86
//! picks each vector's target CPU in its vector matrix allocator, and the kernel spreads
//! managed queue vectors over nodes and CPUs (`irq_create_affinity_masks()`). This scenario
//! checks the result where it counts: which CPUs the vectors target (`effective_affinity`) and
//! where completions land while every CPU submits I/O.
//!
//! Per boot: an NVMe controller with `io_queues` queue pairs on a raw namespace, fio random
//! reads with one job per CPU, `/proc/interrupts` before and after; then the admin queue's
//! vector (not managed) is moved to the last CPU and admin commands are issued, to record
//! whether its interrupts follow.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::devices::DeviceSpec;
use crate::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use crate::observe::{per_cpu_map, InterruptSpread, Interrupts, VectorTargets};
use crate::report::{Direction, Mark, Picture};
use crate::storage::StorageStack;
use crate::topology::{format_cpulist, parse_cpulist, parse_size, Topology};
use crate::variant::Variant;
use crate::workload::{Fio, FioResult};

/// The kernel every column boots.
pub const KERNEL: &str = "v6.12";
/// As many queues as the CI topology's CPUs: the kernel's default spreading.
pub const MANY_QUEUES: &str = "many-queues";
/// 4 queues on the CI topology's 8 CPUs: two-CPU masks, so the kernel picks the target CPU.
pub const FOUR_QUEUES: &str = "four-queues";
/// One I/O queue: every completion forced through one vector and one CPU.
pub const ONE_QUEUE: &str = "one-queue";

/// Everything a run of S5 can change (`lab compare irq-spread --set io_queues=4`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrqSpreadParams {
    /// NVMe I/O queue pairs.
    pub io_queues: u16,
    /// Namespace size (sparse on the host).
    pub namespace: String,
    /// With `numjobs` 0 and `cpus_allowed` unset: one job per guest CPU, each on its own CPU.
    pub fio: Fio,
    /// Move the admin queue's vector to the last CPU after the run and record where its
    /// interrupts go.
    pub move_admin_vector: bool,
}

/// Seed S5 as a scenario.
#[derive(Debug, Clone)]
pub struct IrqSpread {
    params: IrqSpreadParams,
}

impl IrqSpread {
    /// Default masks from 8 queues on the 8-vCPU, two-node CI topology; 4 KiB random reads at
    /// queue depth 8, one job per CPU, 3 s.
    pub fn seed() -> IrqSpread {
        IrqSpread {
            params: IrqSpreadParams {
                io_queues: 8,
                namespace: "256M".into(),
                fio: Fio {
                    rw: "randread".into(),
                    bs: "4k".into(),
                    iodepth: 8,
                    direct: true,
                    ioengine: "libaio".into(),
                    numjobs: 0,
                    runtime_s: 3,
                    size: "256M".into(),
                    cpus_allowed: None,
                    cpus_allowed_policy: "split".into(),
                },
                move_admin_vector: true,
            },
        }
    }
}

impl IrqSpreadParams {
    fn fio_for(&self, topology: &Topology) -> Fio {
        self.fio.one_job_per_cpu_unless_set(topology.nr_cpus())
    }
}

/// The default comparison: many queues (the scenario's), four, and one.
pub fn spread_variants() -> [Variant; 3] {
    [
        Variant::kernel(KERNEL).named(MANY_QUEUES),
        Variant::kernel(KERNEL)
            .with_param("io_queues", "4")
            .named(FOUR_QUEUES),
        Variant::kernel(KERNEL)
            .with_param("io_queues", "1")
            .named(ONE_QUEUE),
    ]
}

impl Scenario for IrqSpread {
    type Params = IrqSpreadParams;

    fn name(&self) -> &str {
        "irq-spread"
    }

    fn description(&self) -> &str {
        "S5 on x86: where a multi-queue NVMe controller's vectors target and its completions land, with 8, 4 and 1 queues"
    }

    fn params(&self) -> &IrqSpreadParams {
        &self.params
    }

    fn default_variants(&self) -> Vec<Variant> {
        spread_variants().to_vec()
    }

    fn metrics(&self) -> Vec<MetricDef> {
        let count = |name, unit| MetricDef::new(name, unit, Direction::Neutral, 0.5).non_negative();
        vec![
            // The decision: how much of the I/O one CPU completes. With the kernel's default
            // masks 8 queues leave each CPU about its eighth (13-15%), 4 queues a quarter and
            // one queue everything; 5 points is a third of a CPU's fair share of 8.
            MetricDef::share("busiest_cpu", 5.0).primary(),
            count("effective_cpus", "CPUs"),
            count("effective_nodes", "nodes"),
            count("vectors_per_target_cpu_max", "vectors"),
            count("completion_cpus", "CPUs"),
            count("completion_nodes", "nodes"),
            MetricDef::new("completion_max_over_mean", "x", Direction::Neutral, 0.1).non_negative(),
            // Absent when the run leaves the admin vector alone.
            MetricDef::share("moved_vector_on_target", 2.0).optional(),
            MetricDef::new("iops", "iops", Direction::HigherIsBetter, 0.0).non_negative(),
        ]
    }

    fn picture(&self) -> Option<Picture> {
        Some(Picture {
            task: "the NVMe I/O queues' interrupts".into(),
            quantity: "completion interrupts (/proc/interrupts)".into(),
            per_cpu: "/completions_per_cpu".into(),
            marks: vec![Mark {
                label: "moved".into(),
                cpu: "/moved_admin_vector/to_cpu".into(),
            }],
        })
    }

    fn plan(&self, params: &IrqSpreadParams, topology: &Topology) -> Result<BootPlan> {
        params.fio_for(topology).check()?;
        let bytes = parse_size(&params.namespace).map_err(|e| anyhow::anyhow!("namespace: {e}"))?;
        Ok(BootPlan {
            devices: vec![DeviceSpec::nvme(params.io_queues, bytes)],
            image: Some("storage".into()),
            ..BootPlan::default()
        })
    }

    async fn measure(&self, params: &IrqSpreadParams, boot: &Boot<'_>) -> Result<Measurement> {
        let (vm, topology) = (boot.vm, boot.topology);
        let nvme = boot.devices.first().context("no NVMe controller")?;
        // Vector 0 is the admin queue's (not managed); the rest complete the I/O queues.
        let (admin, io) = nvme
            .vectors
            .split_first()
            .context("the NVMe controller has no vectors")?;
        if io.is_empty() {
            bail!("the NVMe controller has no I/O queue vectors");
        }
        let target = StorageStack::parse_target(
            &vm.sh(&StorageStack::Raw.setup_script("/dev/nvme0n1"))
                .await?,
        )?;
        let fio = params.fio_for(topology);
        let before = Interrupts::read(vm).await?;
        let run = vm.exec(&fio.command(&target)).await?;
        let after = Interrupts::read(vm).await?;
        boot.keep("fio.json", &run.stdout).await?;
        run.require_success("fio", &vm.name)?;
        let result =
            FioResult::parse(&run.stdout_str()).with_context(|| format!("fio in {}", vm.name))?;
        result
            .check_complete(fio.runtime_s)
            .with_context(|| format!("fio in {}", vm.name))?;
        // Effective targets after the run: x86 moves a vector when it next fires.
        let effective = VectorTargets::read(vm, io.iter().map(|v| v.irq)).await?;
        let per_cpu = after.delta_summed(
            &before,
            io.iter().map(|v| v.irq),
            topology.nr_cpus() as usize,
        );
        let moved = if params.move_admin_vector {
            Some(move_vector(vm, admin.irq, topology.nr_cpus() - 1, "nvme0", 4).await?)
        } else {
            None
        };
        let mut metrics = metrics(topology, &effective, &per_cpu)?;
        metrics.insert("iops".into(), result.total_iops());
        if let Some(m) = &moved {
            if let Some(share) = m.on_target_pct() {
                metrics.insert("moved_vector_on_target".into(), share);
            }
        }
        let masks: BTreeMap<u32, String> = io
            .iter()
            .map(|v| (v.irq, format_cpulist(&v.affinity)))
            .collect();
        Ok(Measurement {
            metrics,
            details: json!({
                "masks": masks,
                "effective": effective,
                "completions_per_cpu": per_cpu_map(&per_cpu),
                "admin_vector": admin,
                "moved_admin_vector": moved,
                "fio": result,
            }),
        })
    }
}

/// What moving a vector that is not managed did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MovedVector {
    pub irq: u32,
    pub to_cpu: u32,
    /// `smp_affinity_list` and `effective_affinity_list` read after the interrupts that
    /// followed the move.
    pub affinity: Vec<u32>,
    pub effective: Vec<u32>,
    /// The vector's interrupts per CPU after the move.
    pub after_move: Vec<u64>,
}

impl MovedVector {
    /// The share of its interrupts after the move on the new CPU; `None` when it fired none.
    pub(crate) fn on_target_pct(&self) -> Option<f64> {
        let total: u64 = self.after_move.iter().sum();
        if total == 0 {
            return None;
        }
        let on = self
            .after_move
            .get(self.to_cpu as usize)
            .copied()
            .unwrap_or(0);
        Some(100.0 * on as f64 / total as f64)
    }
}

/// Moves `irq` (the admin queue's of `controller`, `nvme0`) to `cpu` and makes the controller
/// raise it `rescans` times: a namespace rescan sends Identify commands on the admin queue.
pub(crate) async fn move_vector(
    vm: &crate::vm::Vm,
    irq: u32,
    cpu: u32,
    controller: &str,
    rescans: u32,
) -> Result<MovedVector> {
    vm.sh(&format!("echo {cpu} > /proc/irq/{irq}/smp_affinity_list"))
        .await
        .with_context(|| format!("moving IRQ {irq} to CPU {cpu}"))?;
    let before = Interrupts::read(vm).await?;
    vm.sh(&format!(
        "for i in $(seq {rescans}); do echo 1 > /sys/class/nvme/{controller}/rescan_controller; sleep 0.2; done"
    ))
        .await
        .context("making the admin queue raise interrupts")?;
    let after = Interrupts::read(vm).await?;
    let read = vm
        .sh(&format!(
            "cat /proc/irq/{irq}/smp_affinity_list /proc/irq/{irq}/effective_affinity_list"
        ))
        .await?;
    let mut lines = read.lines();
    let mut next = |what: &str| -> Result<Vec<u32>> {
        let line = lines
            .next()
            .with_context(|| format!("no {what} line for IRQ {irq}"))?;
        parse_cpulist(line.trim()).with_context(|| format!("bad {what} {line:?}"))
    };
    Ok(MovedVector {
        irq,
        to_cpu: cpu,
        affinity: next("smp_affinity_list")?,
        effective: next("effective_affinity_list")?,
        after_move: after.delta(&before, &irq.to_string()),
    })
}

/// The per-boot spread metrics from the I/O vectors' effective targets and their completions
/// per CPU.
pub(crate) fn metrics(
    topology: &Topology,
    effective: &BTreeMap<u32, Vec<u32>>,
    per_cpu: &[u64],
) -> Result<BTreeMap<String, f64>> {
    let Some(spread) = InterruptSpread::of(per_cpu, topology) else {
        bail!("the I/O queues raised no interrupt during the run");
    };
    let targets = VectorTargets::of(effective, topology);
    let mut m = BTreeMap::new();
    m.insert("effective_cpus".into(), targets.cpus as f64);
    m.insert("effective_nodes".into(), targets.nodes as f64);
    m.insert(
        "vectors_per_target_cpu_max".into(),
        targets.max_per_cpu as f64,
    );
    m.insert("completion_cpus".into(), spread.cpus as f64);
    m.insert("completion_nodes".into(), spread.nodes as f64);
    m.insert("completion_max_over_mean".into(), spread.max_over_mean);
    m.insert("busiest_cpu".into(), spread.busiest_share);
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci() -> Topology {
        Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
    }

    #[test]
    fn spread_and_concentration_read_as_such() {
        let t = ci();
        let spread: BTreeMap<u32, Vec<u32>> = (0..8).map(|i| (30 + i, vec![i])).collect();
        let m = metrics(&t, &spread, &[100, 110, 90, 100, 105, 95, 100, 100]).unwrap();
        assert_eq!(m["effective_cpus"], 8.0);
        assert_eq!(m["effective_nodes"], 2.0);
        assert_eq!(m["vectors_per_target_cpu_max"], 1.0);
        assert_eq!(m["completion_cpus"], 8.0);
        assert_eq!(m["completion_nodes"], 2.0);
        assert!((m["completion_max_over_mean"] - 1.1).abs() < 1e-9);
        let one = BTreeMap::from([(30, vec![3])]);
        let m = metrics(&t, &one, &[0, 0, 0, 800, 0, 0, 0, 0]).unwrap();
        assert_eq!(m["effective_cpus"], 1.0);
        assert_eq!(m["completion_nodes"], 1.0);
        assert_eq!(m["completion_max_over_mean"], 8.0);
        assert_eq!(m["busiest_cpu"], 100.0);
        assert!(metrics(&t, &one, &[0; 8]).is_err());
    }

    #[test]
    fn one_job_per_cpu_unless_told() {
        let t = ci();
        let fio = IrqSpread::seed().params.fio_for(&t);
        assert_eq!(fio.numjobs, 8);
        assert_eq!(fio.cpus_allowed.as_deref(), Some("0-7"));
        assert_eq!(fio.cpus_allowed_policy, "split");
        fio.check().unwrap();
        let moved = MovedVector {
            irq: 26,
            to_cpu: 7,
            affinity: vec![7],
            effective: vec![7],
            after_move: vec![1, 0, 0, 0, 0, 0, 0, 3],
        };
        assert_eq!(moved.on_target_pct(), Some(75.0));
    }
}
