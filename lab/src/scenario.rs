//! Scenarios: the regressions of `SCENARIOS.md` as reusable experiments that tests and the CLI
//! both run. A scenario boots each variant N times, interleaved (A B B A ...), one boot being one
//! sample, and returns a [`Comparison`] plus the raw per-boot records.
//!
//! S1 (`DmaWakeup`): a dmatest thread started in one LLC, its DMA engine's completion interrupt
//! pinned to a CPU elsewhere; where does the scheduler put the thread when the interrupt wakes
//! it?

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::devices::DeviceSpec;
use crate::kernel::Variant;
use crate::observe::{parse_trace, Interrupts, TaskPlacement, TaskTrace};
use crate::report::{Comparison, Direction, Manifest, RunRecord};
use crate::stats::interleaved_order;
use crate::topology::Topology;
use crate::vm::Vm;
use crate::workload::{Dmatest, DmatestResult};
use crate::{BootOptions, Lab};

/// Where the completion interrupt goes relative to the thread's start CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IrqPlacement {
    /// Another LLC of the same node.
    CrossLlc,
    /// The thread's own LLC.
    SameLlc,
    /// Another NUMA node.
    RemoteNode,
}

/// Seed S1 as an experiment.
#[derive(Debug, Clone)]
pub struct DmaWakeup {
    pub name: String,
    pub topology: String,
    /// Base first.
    pub variants: Vec<Variant>,
    pub placement: IrqPlacement,
    /// The CPU the dmatest thread is created on (its kthread is forked there).
    pub start_cpu: u32,
    pub dmatest: Dmatest,
    pub repetitions: usize,
    /// Where records, traces and logs go.
    pub results_dir: PathBuf,
}

/// The metrics a boot yields, with unit, direction and noise floor (absolute).
pub const METRICS: &[(&str, &str, Direction, f64)] = &[
    ("share_on_irq_cpu", "%", Direction::Neutral, 5.0),
    ("share_in_irq_llc", "%", Direction::Neutral, 5.0),
    ("share_in_start_llc", "%", Direction::Neutral, 5.0),
    ("share_on_irq_node", "%", Direction::Neutral, 5.0),
    ("max_cpu_share", "%", Direction::Neutral, 5.0),
    (
        "cross_llc_migrations",
        "per 100 completions",
        Direction::LowerIsBetter,
        2.0,
    ),
    // Who moved the thread: wakeup placement (what the S1 patch changes) or the load balancer's
    // active balancing (the stopper moving it while it runs; under TCG the verify loop keeps the
    // thread busy for ~20 ms per copy, and a CPU whose capacity is eaten by interrupt time sheds
    // it).
    (
        "balancer_migrations",
        "per 100 completions",
        Direction::Neutral,
        2.0,
    ),
    ("wakeups_on_irq_cpu", "%", Direction::Neutral, 5.0),
    ("irq_on_pinned_cpu", "%", Direction::Neutral, 1.0),
    ("iops", "iops", Direction::HigherIsBetter, 0.0),
];

/// One boot's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BootSample {
    pub variant: String,
    pub metrics: BTreeMap<String, f64>,
    pub placement: TaskPlacement,
    pub dmatest: DmatestResult,
    pub irq: String,
    pub irq_cpu: u32,
    pub irq_delta: Vec<u64>,
    pub trace_file: PathBuf,
    pub boot_seconds: f64,
}

/// A finished experiment.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub comparison: Comparison,
    pub record: RunRecord,
    pub samples: Vec<BootSample>,
    pub record_path: PathBuf,
}

impl DmaWakeup {
    /// The seed run: `ci-2node-4llc`, v6.12 vs the wake_affine_idle revert, the thread started
    /// on CPU 0, seed dmatest parameters, 5 boots per kernel.
    pub fn seed(placement: IrqPlacement) -> DmaWakeup {
        let name = match placement {
            IrqPlacement::CrossLlc => "dmatest-cross-llc",
            IrqPlacement::SameLlc => "dmatest-same-llc",
            IrqPlacement::RemoteNode => "dmatest-remote-node",
        };
        DmaWakeup {
            name: name.to_string(),
            topology: crate::host::DEFAULT_TOPOLOGY.to_string(),
            variants: vec![
                Variant::kernel("v6.12"),
                Variant::kernel("v6.12+wake-affine-idle-revert"),
            ],
            placement,
            start_cpu: 0,
            dmatest: Dmatest::seed_parameters(),
            repetitions: 5,
            results_dir: crate::host::results_root().join(name),
        }
    }

    pub fn named(mut self, name: &str) -> Self {
        self.results_dir = crate::host::results_root().join(name);
        self.name = name.to_string();
        self
    }

    pub fn repetitions(mut self, n: usize) -> Self {
        self.repetitions = n;
        self
    }

    pub fn dmatest(mut self, dmatest: Dmatest) -> Self {
        self.dmatest = dmatest;
        self
    }

    pub fn topology(mut self, name: &str) -> Self {
        self.topology = name.to_string();
        self
    }

    /// The interrupt's CPU for this placement: the first CPU of the next LLC in the start
    /// CPU's node (cross-LLC), the start LLC's next CPU (same LLC), or the first CPU of the next
    /// node (remote node).
    pub fn irq_cpu(&self, topology: &Topology) -> Result<u32> {
        let start_llc = topology
            .llc_of(self.start_cpu)
            .context("start CPU has no LLC")?;
        let start_node = topology
            .node_of(self.start_cpu)
            .context("start CPU has no node")?;
        let cpu = match self.placement {
            IrqPlacement::SameLlc => start_llc
                .cpus
                .iter()
                .copied()
                .find(|c| *c != self.start_cpu),
            IrqPlacement::CrossLlc => topology
                .llcs()
                .iter()
                .find(|l| l.node == start_node.id && l.id != start_llc.id)
                .map(|l| l.cpus[0]),
            IrqPlacement::RemoteNode => topology
                .nodes()
                .iter()
                .find(|n| n.id != start_node.id)
                .map(|n| n.cpus[0]),
        };
        cpu.with_context(|| {
            format!(
                "topology {} has no CPU for placement {:?} from CPU {}",
                topology.name(),
                self.placement,
                self.start_cpu
            )
        })
    }

    /// The CPU the guest script's own shell runs on: the last CPU outside the start CPU's and
    /// the interrupt's LLCs, so the script's polling does not disturb the CPUs being watched.
    /// None when the topology has no such CPU (then the shell is left where the kernel puts it).
    pub fn control_cpu(&self, topology: &Topology, irq_cpu: u32) -> Option<u32> {
        let watched: Vec<u32> = [self.start_cpu, irq_cpu]
            .iter()
            .filter_map(|c| topology.llc_of(*c))
            .flat_map(|l| l.cpus.iter().copied())
            .collect();
        (0..topology.nr_cpus()).rev().find(|c| !watched.contains(c))
    }

    /// Runs every variant `repetitions` times, interleaved, and compares them.
    pub async fn run(&self, lab: &Lab) -> Result<Outcome> {
        if self.variants.len() < 2 {
            bail!("a comparison needs at least two variants");
        }
        let topology = Topology::by_name(&self.topology)?;
        let irq_cpu = self.irq_cpu(&topology)?;
        let control_cpu = self.control_cpu(&topology, irq_cpu);
        std::fs::create_dir_all(&self.results_dir)?;
        let names: Vec<String> = self.variants.iter().map(|v| v.name.clone()).collect();
        let mut comparison = Comparison::new(self.name.clone(), names.clone())?;
        for (metric, unit, direction, floor) in METRICS {
            comparison.add_metric(metric, unit, *direction, *floor)?;
        }
        // Kernels first (built or found in the cache), so boots are not interleaved with builds.
        let mut kernels = Vec::new();
        for variant in &self.variants {
            kernels.push(lab.variant_kernel(variant).await?);
        }
        let mut samples = Vec::new();
        let mut boots = Vec::new();
        for (sequence, index) in interleaved_order(self.variants.len(), self.repetitions)
            .into_iter()
            .enumerate()
        {
            let variant = &self.variants[index];
            let (kernel, settings) = &kernels[index];
            eprintln!(
                "lab: {} boot {}/{}: {}",
                self.name,
                sequence + 1,
                self.variants.len() * self.repetitions,
                variant.name
            );
            let mut opts =
                BootOptions::named(&format!("{}-{sequence:02}-{}", self.name, variant.name))
                    .topology(&self.topology)
                    .kernel(kernel.clone())
                    .device(DeviceSpec::ioat(1).irq_on_cpus(0, &[irq_cpu]));
            opts.cmdline = settings.cmdline.clone();
            opts.log_dir = Some(self.results_dir.join("boots"));
            let vm = lab.boot(opts).await?;
            crate::host::apply_boot_settings(&vm, settings).await?;
            let sample = self
                .one_boot(
                    &vm,
                    &topology,
                    irq_cpu,
                    control_cpu,
                    &variant.name,
                    sequence,
                )
                .await;
            vm.shutdown().await?;
            let sample = sample?;
            for (metric, value) in &sample.metrics {
                comparison.add_sample(metric, &variant.name, *value)?;
            }
            boots.push((variant.name.clone(), sample.clone()));
            samples.push(sample);
        }
        let mut manifest = lab.manifest();
        manifest.topology = serde_json::json!({
            "name": topology.name(),
            "mapping": topology.describe(),
            "file": topology.source_text(),
        });
        manifest.kernel = serde_json::to_value(
            kernels
                .iter()
                .zip(&self.variants)
                .map(|((k, s), v)| serde_json::json!({"variant": v, "identity": k.identity, "release": k.release, "settings": s}))
                .collect::<Vec<_>>(),
        )?;
        manifest.parameters = serde_json::json!({
            "placement": self.placement,
            "start_cpu": self.start_cpu,
            "irq_cpu": irq_cpu,
            "control_cpu": control_cpu,
            "dmatest": self.dmatest,
            "repetitions": self.repetitions,
            "order": "interleaved (Williams design)",
        });
        let mut record = RunRecord::new(comparison.clone(), manifest);
        for (variant, sample) in &boots {
            record.record_boot(
                variant,
                sample.metrics.iter().map(|(k, v)| (k.clone(), *v)),
                serde_json::to_value(sample)?,
            )?;
        }
        let record_path = record.write_json(&self.results_dir)?;
        Ok(Outcome {
            comparison,
            record,
            samples,
            record_path,
        })
    }

    async fn one_boot(
        &self,
        vm: &Vm,
        topology: &Topology,
        irq_cpu: u32,
        control_cpu: Option<u32>,
        variant: &str,
        sequence: usize,
    ) -> Result<BootSample> {
        let bound = crate::devices::bind_and_pin(vm).await?;
        let irq = bound
            .first()
            .and_then(|d| d.irqs.first())
            .context("the DMA engine has no interrupt")?
            .to_string();
        let trace = TaskTrace::of("dma0chan0-copy").with_irq("ioat");
        let dmatest = &self.dmatest;
        let start = self.start_cpu;
        vm.sh(&format!(
            "modprobe dmatest {args}",
            args = dmatest.module_args()
        ))
        .await
        .context("loading dmatest")?;
        trace.start(vm).await?;
        let before = Interrupts::read(vm).await?;
        let run = vm
            .exec(
                &crate::guest::GuestCommand::shell(dmatest.script(Some(start), control_cpu))
                    .timeout(std::time::Duration::from_secs(
                        120 + u64::from(dmatest.iterations) * u64::from(dmatest.timeout_ms) / 1000,
                    )),
            )
            .await?;
        if !run.success() {
            bail!(
                "dmatest failed in {} ({}):\n{}{}",
                vm.name,
                run.status_text(),
                run.stdout_str(),
                run.stderr_str()
            );
        }
        let after = Interrupts::read(vm).await?;
        let raw_trace = trace.stop(vm).await?;
        let trace_file = self
            .results_dir
            .join("traces")
            .join(format!("{sequence:02}-{variant}.trace"));
        std::fs::create_dir_all(trace_file.parent().unwrap())?;
        std::fs::write(&trace_file, &raw_trace)?;
        let result = DmatestResult::parse(&run.stdout_str())
            .with_context(|| format!("dmatest in {}", vm.name))?;
        let placement =
            TaskPlacement::from_events("dma0chan0-copy", &parse_trace(&raw_trace), topology);
        if placement.total_switch_ins() == 0 {
            bail!(
                "the trace of {} has no switch-in of dma0chan0-copy* (trace kept at {})",
                vm.name,
                trace_file.display()
            );
        }
        // The lab checks its own set-up: a thread that did not start where the scenario says
        // makes every share below meaningless.
        if placement.started_on != Some(self.start_cpu) {
            bail!(
                "dmatest's thread started on CPU {:?} in {}, not on the scenario's start CPU {} \
                 (trace kept at {})",
                placement.started_on,
                vm.name,
                self.start_cpu,
                trace_file.display()
            );
        }
        let irq_delta = after.delta(&before, &irq);
        let metrics = metrics(
            &placement,
            topology,
            self.start_cpu,
            irq_cpu,
            &irq_delta,
            &result,
        );
        Ok(BootSample {
            variant: variant.to_string(),
            metrics,
            placement,
            dmatest: result,
            irq,
            irq_cpu,
            irq_delta,
            trace_file,
            boot_seconds: vm.boot_time.as_secs_f64(),
        })
    }
}

/// The per-boot metrics of S1.
pub fn metrics(
    placement: &TaskPlacement,
    topology: &Topology,
    start_cpu: u32,
    irq_cpu: u32,
    irq_delta: &[u64],
    result: &DmatestResult,
) -> BTreeMap<String, f64> {
    let llc_cpus = |cpu: u32| {
        topology
            .llc_of(cpu)
            .map(|l| l.cpus.clone())
            .unwrap_or_default()
    };
    let node_cpus = |cpu: u32| {
        topology
            .node_of(cpu)
            .map(|n| n.cpus.clone())
            .unwrap_or_default()
    };
    let completions = result.total_tests().max(1) as f64;
    let irq_total: u64 = irq_delta.iter().sum();
    let on_pinned = irq_delta.get(irq_cpu as usize).copied().unwrap_or(0);
    let mut m = BTreeMap::new();
    m.insert("share_on_irq_cpu".into(), placement.share_on(&[irq_cpu]));
    m.insert(
        "share_in_irq_llc".into(),
        placement.share_on(&llc_cpus(irq_cpu)),
    );
    m.insert(
        "share_in_start_llc".into(),
        placement.share_on(&llc_cpus(start_cpu)),
    );
    m.insert(
        "share_on_irq_node".into(),
        placement.share_on(&node_cpus(irq_cpu)),
    );
    m.insert("max_cpu_share".into(), placement.max_cpu_share().1);
    m.insert(
        "cross_llc_migrations".into(),
        100.0 * placement.cross_llc_migrations as f64 / completions,
    );
    m.insert(
        "balancer_migrations".into(),
        100.0 * placement.balancer_migrations as f64 / completions,
    );
    m.insert(
        "wakeups_on_irq_cpu".into(),
        if placement.wakeups == 0 {
            0.0
        } else {
            100.0 * placement.wakeup_targets.get(&irq_cpu).copied().unwrap_or(0) as f64
                / placement.wakeups as f64
        },
    );
    m.insert(
        "irq_on_pinned_cpu".into(),
        if irq_total == 0 {
            0.0
        } else {
            100.0 * on_pinned as f64 / irq_total as f64
        },
    );
    m.insert("iops".into(), result.total_iops());
    m
}

/// Shorthand used by the CLI and the report: the base variant's name.
pub fn base_name(variants: &[Variant]) -> &str {
    variants.first().map(|v| v.name.as_str()).unwrap_or("")
}

/// Writes the comparison table next to the record.
pub fn write_table(outcome: &Outcome) -> Result<PathBuf> {
    let path = outcome.record_path.with_extension("txt");
    std::fs::write(&path, outcome.comparison.table())?;
    Ok(path)
}

/// A manifest builder shared by scenarios.
impl Lab {
    pub fn manifest(&self) -> Manifest {
        Manifest {
            host: serde_json::json!({
                "cpu": crate::toolchain::host_cpu_model(),
                "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            }),
            qemu: serde_json::to_value(self.host_manifest()).unwrap_or_default(),
            accelerator: serde_json::json!({"name": self.accel.name(), "reason": self.accel_probe.reason}),
            ..Manifest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ci() -> Topology {
        Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap()
    }

    #[test]
    fn irq_cpu_follows_the_placement_on_the_ci_topology() {
        // ci-2node-4llc: LLCs {0,1} {2,3} on node 0, {4,5} {6,7} on node 1.
        let t = ci();
        let cpu = |p| DmaWakeup::seed(p).irq_cpu(&t).unwrap();
        assert_eq!(cpu(IrqPlacement::SameLlc), 1);
        assert_eq!(cpu(IrqPlacement::CrossLlc), 2);
        assert_eq!(cpu(IrqPlacement::RemoteNode), 4);
    }

    #[test]
    fn control_cpu_avoids_the_start_and_irq_llcs() {
        let t = ci();
        for placement in [
            IrqPlacement::SameLlc,
            IrqPlacement::CrossLlc,
            IrqPlacement::RemoteNode,
        ] {
            let s = DmaWakeup::seed(placement);
            let irq = s.irq_cpu(&t).unwrap();
            let control = s.control_cpu(&t, irq).unwrap();
            assert_eq!(control, 7, "{placement:?}");
            let mut start_cpu_remote = DmaWakeup::seed(placement);
            start_cpu_remote.start_cpu = 6;
            let irq = start_cpu_remote.irq_cpu(&t).unwrap();
            let control = start_cpu_remote.control_cpu(&t, irq).unwrap();
            for watched in [6, irq] {
                assert_ne!(
                    t.llc_of(control).unwrap().id,
                    t.llc_of(watched).unwrap().id,
                    "{placement:?}: control CPU {control} shares an LLC with CPU {watched}"
                );
            }
        }
    }

    #[test]
    fn control_cpu_is_none_when_every_cpu_is_watched() {
        let text = "name = \"one-llc\"\ndescription = \"x\"\ncpu_model = \"qemu64\"\n\
                    sockets = 1\nthreads_per_core = 1\n[[node]]\ncpus = \"0-1\"\nmemory = \"1G\"\n";
        let t = Topology::from_toml_str(text, "one-llc.toml").unwrap();
        let s = DmaWakeup::seed(IrqPlacement::SameLlc);
        let irq = s.irq_cpu(&t).unwrap();
        assert_eq!(irq, 1);
        assert_eq!(s.control_cpu(&t, irq), None);
    }
}
