//! Seed S5 on its own code (`docs/SCENARIOS.md`, thread `004_915e87c4f6fb8ab6.txt`): the
//! arm64 GICv3 ITS driver's choice of target CPU for each LPI. Since 5.8 (`2f13ff1d1d5c`,
//! `c5d6082d35e0`) `its_select_cpu()` picks the least-loaded CPU of a vector's mask, managed
//! and unmanaged vectors counted apart, and prefers the ITS's NUMA node for unmanaged ones;
//! before, every LPI went to the first CPU of its mask. This scenario boots an aarch64 guest
//! with several multi-queue NVMe controllers and records, per boot, which CPUs the managed
//! (queue) and unmanaged (admin) vectors target and where the completions land while every
//! CPU submits reads; then it moves one admin vector to a CPU the user chooses (outside the
//! ITS's node when it has one), records whether its interrupts follow, and widens its mask to
//! every CPU to see which node the ITS then picks (its own, when the device tree gives it one).
//!
//! The vectors must be the architecture's PCI MSI-X interrupts (on aarch64 the ITS's LPIs):
//! a boot whose vectors went through another chip measured something else and is refused.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::devices::{BoundDevice, DeviceSpec};
use crate::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use crate::observe::{per_cpu_map, Interrupts};
use crate::report::{Direction, Mark, Picture};
use crate::topology::{format_cpulist, parse_cpulist, parse_size, Topology};
use crate::variant::Variant;
use crate::vm::dtb::DtProperty;
use crate::workload::{Fio, FioResult, FioTarget};

/// The arm64 kernel the base column boots.
pub const KERNEL: &str = "v6.12-arm64";
/// The same kernel with the pre-5.8 rule restored (`images/kernels/patches/its-first-cpu.patch`).
pub const FIRST_CPU_KERNEL: &str = "v6.12-arm64+its-first-cpu";
/// The base column: 6.12 as it is.
pub const BASE: &str = "v6.12";
/// The column with the first-CPU rule restored.
pub const FIRST_CPU: &str = "first-cpu";
/// The column of 6.12 with the device tree giving the ITS NUMA node 1.
pub const ITS_NODE: &str = "its-node-1";
/// The aarch64 CI topology it runs on.
pub const TOPOLOGY: &str = "ci-arm64-2node";
/// The device tree nodes of a GICv3 ITS.
const ITS_COMPATIBLE: &str = "arm,gic-v3-its";

/// Everything a run can change (`lab compare its-balance --set controllers=2`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItsBalanceParams {
    /// NVMe controllers, each with its own vectors.
    pub controllers: u16,
    /// I/O queue pairs per controller.
    pub io_queues: u16,
    /// Namespace size (sparse on the host).
    pub namespace: String,
    /// With `numjobs` 0 and `cpus_allowed` unset: one job per guest CPU, each on its own CPU;
    /// every job reads every controller's namespace in turn.
    pub fio: Fio,
    /// The NUMA node the device tree gives the ITS (`numa-node-id`); QEMU gives it none.
    pub its_node: Option<u32>,
    /// Where the first controller's admin vector is moved after the run; None: the first CPU
    /// outside the ITS's node (the last CPU when it has none).
    pub move_admin_vector_to: Option<u32>,
}

/// Seed S5 on the GICv3 ITS as a scenario.
#[derive(Debug, Clone)]
pub struct ItsBalance {
    params: ItsBalanceParams,
}

impl ItsBalance {
    /// 3 controllers × 4 queues on the 8-vCPU aarch64 CI topology (two-CPU masks, 12 managed
    /// vectors on 8 CPUs: the least-loaded rule has a choice to make in every mask); 4 KiB
    /// random reads at queue depth 4, one job per CPU, 1 s (placement needs no longer run: the
    /// completions of 1 s already sit on the vectors' targets; the test's 14 boots fit in 3 min).
    pub fn seed() -> ItsBalance {
        ItsBalance {
            params: ItsBalanceParams {
                controllers: 3,
                io_queues: 4,
                namespace: "64M".into(),
                fio: Fio {
                    rw: "randread".into(),
                    bs: "4k".into(),
                    iodepth: 4,
                    direct: true,
                    ioengine: "libaio".into(),
                    numjobs: 0,
                    runtime_s: 1,
                    size: "48M".into(),
                    cpus_allowed: None,
                    cpus_allowed_policy: "split".into(),
                },
                its_node: None,
                move_admin_vector_to: None,
            },
        }
    }
}

impl ItsBalanceParams {
    fn fio_for(&self, topology: &Topology) -> Fio {
        self.fio.one_job_per_cpu_unless_set(topology.nr_cpus())
    }

    /// The CPU the admin vector is moved to.
    fn move_target(&self, topology: &Topology) -> Result<u32> {
        if let Some(cpu) = self.move_admin_vector_to {
            if cpu >= topology.nr_cpus() {
                bail!(
                    "move_admin_vector_to = {cpu}: the topology {} has CPUs 0-{}",
                    topology.name(),
                    topology.nr_cpus() - 1
                );
            }
            return Ok(cpu);
        }
        let last = topology.nr_cpus() - 1;
        Ok(match self.its_node {
            Some(node) => (0..topology.nr_cpus())
                .find(|c| topology.node_of(*c).map(|n| n.id) != Some(node))
                .unwrap_or(last),
            None => last,
        })
    }
}

/// The default comparison: 6.12, the first-CPU rule, and 6.12 with the ITS in node 1.
pub fn balance_variants() -> [Variant; 3] {
    [
        Variant::kernel(KERNEL).named(BASE),
        Variant::kernel(FIRST_CPU_KERNEL).named(FIRST_CPU),
        Variant::kernel(KERNEL)
            .with_param("its_node", "1")
            .named(ITS_NODE),
    ]
}

impl Scenario for ItsBalance {
    type Params = ItsBalanceParams;

    fn name(&self) -> &str {
        "its-balance"
    }

    fn description(&self) -> &str {
        "S5 on arm64: which CPUs the GICv3 ITS targets with 3 NVMe controllers' LPIs, 6.12's least-loaded rule against the first-CPU rule, and with the ITS in a NUMA node"
    }

    fn params(&self) -> &ItsBalanceParams {
        &self.params
    }

    fn topology(&self) -> &str {
        TOPOLOGY
    }

    fn default_variants(&self) -> Vec<Variant> {
        balance_variants().to_vec()
    }

    fn metrics(&self) -> Vec<MetricDef> {
        let count = |name, unit| MetricDef::new(name, unit, Direction::Neutral, 0.5).non_negative();
        vec![
            // The decision: over how many CPUs the managed queue vectors are spread. 6.12 puts
            // the 12 of the seed shape on all 8 CPUs, the first-CPU rule on the 4 first CPUs of
            // the 4 masks; one CPU more or less is one CPU's completions moved elsewhere.
            MetricDef::new("managed_cpus", "CPUs", Direction::HigherIsBetter, 1.0)
                .non_negative()
                .primary(),
            count("managed_per_cpu_max", "vectors"),
            count("unmanaged_cpus", "CPUs"),
            // Unmanaged vectors whose target is a CPU of their own mask: all of them in 6.12,
            // with the ITS in a node their masks do not meet too (it falls back to the mask).
            MetricDef::share("unmanaged_in_mask", 10.0),
            // The node of the moved admin vector's target once its mask is widened to every
            // CPU: the ITS's node when it has one (the node path), else the least-loaded CPU's.
            count("widened_target_node", "node"),
            count("completion_cpus", "CPUs"),
            MetricDef::share("busiest_cpu", 5.0),
            // Absent when the moved vector raised no interrupt.
            MetricDef::share("moved_vector_on_target", 2.0).optional(),
            MetricDef::new("iops", "iops", Direction::HigherIsBetter, 0.0).non_negative(),
        ]
    }

    fn picture(&self) -> Option<Picture> {
        Some(Picture {
            task: "the NVMe controllers' I/O queue LPIs".into(),
            quantity: "completion interrupts (/proc/interrupts)".into(),
            per_cpu: "/completions_per_cpu".into(),
            marks: vec![Mark {
                label: "moved".into(),
                cpu: "/moved_admin_vector/to_cpu".into(),
            }],
        })
    }

    fn plan(&self, params: &ItsBalanceParams, topology: &Topology) -> Result<BootPlan> {
        params.fio_for(topology).check()?;
        if params.controllers == 0 {
            bail!("controllers must be at least 1");
        }
        if params.io_queues == 0 {
            bail!("io_queues must be at least 1");
        }
        let bytes = parse_size(&params.namespace).map_err(|e| anyhow::anyhow!("namespace: {e}"))?;
        params.move_target(topology)?;
        let mut device_tree = Vec::new();
        if let Some(node) = params.its_node {
            if topology.nodes().iter().all(|n| n.id != node) {
                bail!(
                    "its_node = {node}: the topology {} has nodes 0-{}",
                    topology.name(),
                    topology.nodes().len().saturating_sub(1)
                );
            }
            device_tree.push(DtProperty::u32(ITS_COMPATIBLE, "numa-node-id", node));
        }
        Ok(BootPlan {
            devices: (0..params.controllers)
                .map(|_| DeviceSpec::nvme(params.io_queues, bytes))
                .collect(),
            image: Some("storage".into()),
            device_tree,
            // The guest's vCPUs mostly wait for their NVMe queues: one guest alone kept 57% of
            // a 2-core host busy under multi-threaded TCG (2026-12-06, 2-core Intel Xeon), two
            // side by side 86-89%, and the test took 104-120 s instead of 145 s, deciding the
            // same.
            host_threads: Some(1),
            ..BootPlan::default()
        })
    }

    async fn measure(&self, params: &ItsBalanceParams, boot: &Boot<'_>) -> Result<Measurement> {
        let (vm, topology) = (boot.vm, boot.topology);
        if boot.devices.len() != usize::from(params.controllers) {
            bail!(
                "{} NVMe controllers bound, {} planned",
                boot.devices.len(),
                params.controllers
            );
        }
        let before = Interrupts::read(vm).await?;
        check_chip(&before, boot.devices, topology.arch().msix_chip())?;
        let namespaces = namespaces(vm, boot.devices).await?;
        // Every job reads every controller's namespace in turn (fio's `a:b:c` file list).
        let target = FioTarget::Device(namespaces.join(":"));
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
        let (managed, unmanaged) = split_vectors(boot.devices)?;
        let effective =
            crate::observe::VectorTargets::read(vm, managed.iter().chain(&unmanaged).copied())
                .await?;
        let per_cpu = after.delta_summed(
            &before,
            managed.iter().copied(),
            topology.nr_cpus() as usize,
        );
        let admin = *unmanaged.first().context("no admin vector")?;
        let moved = move_vector(
            vm,
            admin,
            params.move_target(topology)?,
            controller_of(&namespaces[0]),
            2,
        )
        .await?;
        let widened = widen(vm, admin, topology.nr_cpus()).await?;
        let targets = Targets::new(&effective, &managed, &unmanaged);
        let unmanaged_masks: Vec<Vec<u32>> = boot
            .devices
            .iter()
            .flat_map(|d| &d.vectors)
            .filter(|v| !v.managed)
            .map(|v| v.affinity.clone())
            .collect();
        let mut metrics = metrics(topology, &targets, &unmanaged_masks, &per_cpu)?;
        let node = topology
            .node_of(widened)
            .with_context(|| format!("CPU {widened} is in no node"))?;
        metrics.insert("widened_target_node".into(), f64::from(node.id));
        metrics.insert("iops".into(), result.total_iops());
        if let Some(share) = moved.on_target_pct() {
            metrics.insert("moved_vector_on_target".into(), share);
        }
        Ok(Measurement {
            metrics,
            details: json!({
                "managed_per_cpu": per_cpu_map(&targets.managed_per_cpu(topology.nr_cpus())),
                "unmanaged_targets": targets.unmanaged,
                "effective": effective,
                "masks": masks(boot.devices),
                "completions_per_cpu": per_cpu_map(&per_cpu),
                "namespaces": namespaces,
                "moved_admin_vector": moved,
                "widened_admin_vector_target": widened,
                "its_node": params.its_node,
                "fio": result,
            }),
        })
    }
}

/// Widens `irq`'s mask to every CPU and returns the CPU the ITS then targets (it picks at once;
/// no interrupt is needed).
async fn widen(vm: &crate::vm::Vm, irq: u32, nr_cpus: u32) -> Result<u32> {
    let out = vm
        .sh(&format!(
            "echo 0-{} > /proc/irq/{irq}/smp_affinity_list && cat /proc/irq/{irq}/effective_affinity_list",
            nr_cpus - 1
        ))
        .await
        .with_context(|| format!("widening IRQ {irq}'s mask"))?;
    let cpus = crate::topology::parse_cpulist(out.trim())
        .with_context(|| format!("IRQ {irq}'s effective affinity {out:?}"))?;
    match cpus.as_slice() {
        [cpu] => Ok(*cpu),
        _ => bail!("IRQ {irq} targets {out:?} after widening, not one CPU"),
    }
}

/// Refuses a boot whose controllers' vectors are not on the architecture's MSI-X chip (on
/// aarch64 the ITS): a GICv2m or INTx fallback would measure another driver.
fn check_chip(interrupts: &Interrupts, devices: &[BoundDevice], chip: &str) -> Result<()> {
    for d in devices {
        let expected = format!("{chip}{}", d.pci_address);
        for v in &d.vectors {
            let line = interrupts.lines.get(&v.irq.to_string()).with_context(|| {
                format!(
                    "IRQ {} of {} is not in /proc/interrupts",
                    v.irq, d.pci_address
                )
            })?;
            if !line.description.contains(&expected) {
                bail!(
                    "IRQ {} of {} is not an {expected} interrupt: {:?}",
                    v.irq,
                    d.pci_address,
                    line.description
                );
            }
        }
    }
    Ok(())
}

/// Each controller's namespace block device (`/dev/nvme1n1`), found from its PCI address:
/// controllers are not numbered in PCI order.
async fn namespaces(vm: &crate::vm::Vm, devices: &[BoundDevice]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for d in devices {
        let listing = vm
            .sh(&format!("ls /sys/bus/pci/devices/{}/nvme", d.pci_address))
            .await
            .with_context(|| format!("the NVMe controller at {}", d.pci_address))?;
        let name = listing
            .split_whitespace()
            .find(|n| n.starts_with("nvme"))
            .with_context(|| format!("no nvme controller under {}: {listing:?}", d.pci_address))?;
        let dev = format!("/dev/{name}n1");
        vm.sh(&format!(
            "[ -b {dev} ] || {{ echo '{dev} is not a block device' >&2; exit 1; }}"
        ))
        .await?;
        out.push(dev);
    }
    Ok(out)
}

/// The controller of a namespace device (`nvme1` of `/dev/nvme1n1`).
fn controller_of(namespace: &str) -> &str {
    let name = namespace.trim_start_matches("/dev/");
    name.rsplit_once('n').map_or(name, |(c, _)| c)
}

/// The IRQs of every managed vector and of every unmanaged one (the admin queues, the first
/// controller's first).
fn split_vectors(devices: &[BoundDevice]) -> Result<(Vec<u32>, Vec<u32>)> {
    let (mut managed, mut unmanaged) = (Vec::new(), Vec::new());
    for d in devices {
        for v in &d.vectors {
            if v.managed {
                managed.push(v.irq);
            } else {
                unmanaged.push(v.irq);
            }
        }
    }
    if managed.is_empty() {
        bail!("the controllers have no managed (I/O queue) vectors");
    }
    Ok((managed, unmanaged))
}

fn masks(devices: &[BoundDevice]) -> BTreeMap<u32, String> {
    devices
        .iter()
        .flat_map(|d| &d.vectors)
        .map(|v| (v.irq, format_cpulist(&v.affinity)))
        .collect()
}

/// The target CPU of every managed and unmanaged vector (an LPI has exactly one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Targets {
    pub managed: Vec<u32>,
    pub unmanaged: Vec<u32>,
}

impl Targets {
    fn new(effective: &BTreeMap<u32, Vec<u32>>, managed: &[u32], unmanaged: &[u32]) -> Targets {
        let first = |irqs: &[u32]| -> Vec<u32> {
            irqs.iter()
                .filter_map(|irq| effective.get(irq).and_then(|c| c.first().copied()))
                .collect()
        };
        Targets {
            managed: first(managed),
            unmanaged: first(unmanaged),
        }
    }

    pub(crate) fn managed_per_cpu(&self, nr_cpus: u32) -> Vec<u64> {
        let mut per_cpu = vec![0u64; nr_cpus as usize];
        for cpu in &self.managed {
            if let Some(slot) = per_cpu.get_mut(*cpu as usize) {
                *slot += 1;
            }
        }
        per_cpu
    }
}

/// The per-boot metrics from the vectors' targets and the completions per CPU.
pub(crate) fn metrics(
    topology: &Topology,
    targets: &Targets,
    unmanaged_masks: &[Vec<u32>],
    per_cpu: &[u64],
) -> Result<BTreeMap<String, f64>> {
    let total: u64 = per_cpu.iter().sum();
    if total == 0 {
        bail!("the I/O queues raised no interrupt during the run");
    }
    if targets.managed.is_empty() {
        bail!("no managed vector has an effective target");
    }
    let managed_per_cpu = targets.managed_per_cpu(topology.nr_cpus());
    let distinct = |cpus: &[u32]| cpus.iter().collect::<BTreeSet<_>>().len() as f64;
    let mut m = BTreeMap::new();
    m.insert("managed_cpus".into(), distinct(&targets.managed));
    m.insert(
        "managed_per_cpu_max".into(),
        managed_per_cpu.iter().copied().max().unwrap_or(0) as f64,
    );
    m.insert("unmanaged_cpus".into(), distinct(&targets.unmanaged));
    if !targets.unmanaged.is_empty() {
        let inside = targets
            .unmanaged
            .iter()
            .zip(unmanaged_masks)
            .filter(|(cpu, mask)| mask.contains(cpu))
            .count();
        m.insert(
            "unmanaged_in_mask".into(),
            100.0 * inside as f64 / targets.unmanaged.len() as f64,
        );
    }
    m.insert(
        "completion_cpus".into(),
        per_cpu
            .iter()
            .filter(|n| **n as f64 >= 0.01 * total as f64)
            .count() as f64,
    );
    let max = *per_cpu.iter().max().unwrap_or(&0);
    m.insert("busiest_cpu".into(), 100.0 * max as f64 / total as f64);
    Ok(m)
}

/// What moving a vector that is not managed did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct MovedVector {
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
    fn on_target_pct(&self) -> Option<f64> {
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
async fn move_vector(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_vector_follows_when_most_of_its_interrupts_land_on_the_new_cpu() {
        let moved = MovedVector {
            irq: 26,
            to_cpu: 7,
            affinity: vec![7],
            effective: vec![7],
            after_move: vec![1, 0, 0, 0, 0, 0, 0, 3],
        };
        assert_eq!(moved.on_target_pct(), Some(75.0));
        let silent = MovedVector {
            after_move: vec![0; 8],
            ..moved
        };
        assert_eq!(silent.on_target_pct(), None);
    }

    fn ci() -> Topology {
        Topology::by_name(TOPOLOGY).unwrap()
    }

    #[test]
    fn least_loaded_and_first_cpu_placements_read_as_such() {
        let t = ci();
        // 6.12 on the seed shape: 2,1,2,1,2,1,2,1 managed, admin vectors on 0, 1, 2.
        let spread = Targets {
            managed: vec![0, 2, 4, 6, 1, 3, 5, 7, 0, 2, 4, 6],
            unmanaged: vec![0, 1, 2],
        };
        let masks = vec![vec![0, 1, 2, 3]; 3];
        let m = metrics(&t, &spread, &masks, &[100; 8]).unwrap();
        assert_eq!(m["managed_cpus"], 8.0);
        assert_eq!(m["managed_per_cpu_max"], 2.0);
        assert_eq!(m["unmanaged_cpus"], 3.0);
        assert_eq!(m["completion_cpus"], 8.0);
        assert_eq!(m["busiest_cpu"], 12.5);
        assert_eq!(m["unmanaged_in_mask"], 100.0);
        assert_eq!(spread.managed_per_cpu(8), vec![2, 1, 2, 1, 2, 1, 2, 1]);
        // The first-CPU rule: 3,0,3,0,3,0,3,0, admin vectors all on CPU 0.
        let first = Targets {
            managed: vec![0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6],
            unmanaged: vec![0, 0, 0],
        };
        let outside = vec![vec![4, 5, 6, 7], vec![0, 1], vec![0]];
        let m = metrics(&t, &first, &outside, &[300, 0, 300, 0, 300, 0, 300, 0]).unwrap();
        assert_eq!(m["managed_cpus"], 4.0);
        assert_eq!(m["managed_per_cpu_max"], 3.0);
        assert_eq!(m["unmanaged_cpus"], 1.0);
        assert!((m["unmanaged_in_mask"] - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!(m["completion_cpus"], 4.0);
        assert!(metrics(&t, &first, &outside, &[0; 8]).is_err());
    }

    #[test]
    fn the_moved_vector_goes_outside_the_its_node_and_bad_parameters_are_named() {
        let t = ci();
        let mut p = ItsBalance::seed().params;
        assert_eq!(p.move_target(&t).unwrap(), 7, "no ITS node: the last CPU");
        p.its_node = Some(1);
        assert_eq!(p.move_target(&t).unwrap(), 0, "outside node 1 (CPUs 4-7)");
        p.its_node = Some(0);
        assert_eq!(p.move_target(&t).unwrap(), 4);
        let plan = ItsBalance::seed().plan(&p, &t).unwrap();
        assert_eq!(plan.devices.len(), 3);
        assert_eq!(
            plan.device_tree,
            vec![DtProperty::u32(ITS_COMPATIBLE, "numa-node-id", 0)]
        );
        p.its_node = Some(2);
        let e = ItsBalance::seed().plan(&p, &t).unwrap_err().to_string();
        assert!(e.contains("its_node = 2"), "{e}");
        p.its_node = None;
        p.move_admin_vector_to = Some(8);
        let e = ItsBalance::seed().plan(&p, &t).unwrap_err().to_string();
        assert!(e.contains("move_admin_vector_to = 8"), "{e}");
        let fio = ItsBalance::seed().params.fio_for(&t);
        assert_eq!((fio.numjobs, fio.cpus_allowed.as_deref()), (8, Some("0-7")));
        assert_eq!(controller_of("/dev/nvme12n1"), "nvme12");
    }

    #[test]
    fn vectors_on_another_chip_are_refused() {
        let interrupts = Interrupts::parse(
            "           CPU0       CPU1\n 18:  1  0  ITS-PCI-MSIX-0000:00:10.0 0 Edge nvme0q0\n 19:  1  0  GICv2m-PCI-MSIX-0000:00:11.0 0 Edge nvme1q0\n",
        )
        .unwrap();
        let device = |addr: &str, irq: u32| BoundDevice {
            index: 0,
            pci_address: addr.into(),
            driver: "nvme".into(),
            irqs: vec![irq],
            vectors: vec![crate::devices::Vector {
                vector: 0,
                irq,
                managed: false,
                affinity: vec![0, 1],
                effective: vec![0],
            }],
        };
        check_chip(&interrupts, &[device("0000:00:10.0", 18)], "ITS-PCI-MSIX-").unwrap();
        let e = check_chip(&interrupts, &[device("0000:00:11.0", 19)], "ITS-PCI-MSIX-")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not an ITS-PCI-MSIX-0000:00:11.0 interrupt"),
            "{e}"
        );
    }
}
