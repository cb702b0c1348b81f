//! A scenario written as a TOML file instead of Rust (`lab compare --scenario FILE`): the
//! topology, devices with their IRQ pins, the guest's set-up and workload, the task to watch and
//! metrics from the observation toolkit or the workload's output. The format is in
//! `docs/SCENARIO-FILES.md`; `scenarios/*.toml` are examples.
//!
//! Everything a file says is checked when it is read (fields, metric sources, names) or when a
//! variant is planned on its topology (CPUs, parameters after `--set`), before anything is built
//! or booted; an error names the file, the line and the field.

mod arith;
mod check;
mod cpus;
mod format;
mod json_output;
mod measure;
mod metrics;
mod vectors;
mod wakeups;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::devices::DeviceSpec;
use crate::error::bad_input;
use crate::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use crate::report::{Mark, Picture};
use crate::topology::Topology;
use crate::variant::Variant;

use check::Checker;
use cpus::Names;
use format::{line_of, RawFile};
use metrics::FileMetric;

/// An expression of the file with its line.
#[derive(Debug, Clone)]
struct Expr {
    text: String,
    line: usize,
}

/// One `[[device]]`, checked.
#[derive(Debug, Clone)]
struct FileDevice {
    kind: Expr,
    channels: u8,
    /// A number, or a numeric parameter's name.
    queues: Expr,
    /// An NVMe namespace's bytes.
    size: u64,
    /// Vector -> CPU set.
    pins: Vec<(usize, Expr)>,
}

/// What the guest runs to be measured.
#[derive(Debug, Clone)]
enum Workload {
    /// The lab's dmatest (its parameters are the `dmatest` table of the parameters).
    Dmatest {
        start_cpu: Option<Expr>,
        control_cpu: Option<Expr>,
    },
    /// A shell script.
    Command {
        run: String,
        pin: Option<Expr>,
        control_cpu: Option<Expr>,
        timeout: Duration,
    },
}

/// `[watch]`, checked.
#[derive(Debug, Clone)]
struct Watch {
    task: String,
    /// Device index, vector index.
    irq: Option<(usize, usize)>,
    started_on: Option<Expr>,
    marks: Vec<String>,
}

/// `[traffic]`, checked.
#[derive(Debug, Clone)]
struct Traffic {
    device: usize,
    flow: crate::devices::nic::UdpFlow,
    after: Option<String>,
    warm_up: bool,
}

/// `[then]`, checked: a script after the workload.
#[derive(Debug, Clone)]
struct Then {
    run: String,
    timeout: Duration,
}

/// One `[[count]]`, checked.
#[derive(Debug, Clone)]
struct Count {
    name: String,
    event: String,
    filter: String,
}

/// A scenario read from a file; a [`Scenario`] like the shipped ones.
#[derive(Debug, Clone)]
pub struct ScenarioFile {
    path: PathBuf,
    name: String,
    description: String,
    topology: String,
    variants: Vec<Variant>,
    /// The `[params]` table, plus `dmatest` with its parameters when that is the workload.
    params: Value,
    cpus: BTreeMap<String, Expr>,
    devices: Vec<FileDevice>,
    image: Option<String>,
    cmdline: Vec<String>,
    setup: Vec<String>,
    /// The storage stack and its block device.
    storage: Option<(crate::storage::StorageStack, String)>,
    settle: Option<Duration>,
    workload: Workload,
    watch: Option<Watch>,
    counts: Vec<Count>,
    /// `[wakeups] tasks`: command-name prefixes whose wakeups are traced.
    wakeup_tasks: Vec<String>,
    trace_buffer_kb: Option<u32>,
    traffic: Option<Traffic>,
    then: Option<Then>,
    max_repetitions: Option<usize>,
    metrics: Vec<FileMetric>,
}

/// The shipped scenarios written as files: name and text (`scenarios/NAME.toml`). One way to
/// write a scenario: where a file says all a Rust definition said, the file is the definition.
pub(crate) const SHIPPED: &[(&str, &str)] = &[
    (
        "dma-wakeup",
        include_str!("../../../scenarios/dma-wakeup.toml"),
    ),
    (
        "eevdf-parity",
        include_str!("../../../scenarios/eevdf-parity.toml"),
    ),
    (
        "numa-scan",
        include_str!("../../../scenarios/numa-scan.toml"),
    ),
    (
        "irq-spread",
        include_str!("../../../scenarios/irq-spread.toml"),
    ),
    (
        "delay-dequeue",
        include_str!("../../../scenarios/delay-dequeue.toml"),
    ),
];

impl ScenarioFile {
    /// Reads and checks `path`. A relative path the current directory does not have is looked
    /// up in the lab's repository too (`scenarios/dma-wakeup.toml` from anywhere, and in a
    /// bundle's unpacked lab).
    pub fn read(path: &Path) -> Result<ScenarioFile> {
        let in_repo = crate::repo_path("").join(path);
        let path = if path.is_relative() && !path.exists() && in_repo.exists() {
            in_repo.as_path()
        } else {
            path
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading scenario file {}", path.display()))?;
        ScenarioFile::parse(&text, path)
    }

    /// Checks `text`, the contents of `path`.
    pub fn parse(text: &str, path: &Path) -> Result<ScenarioFile> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s)).unwrap_or(0);
            bad_input(path, format!("line {line}"), e.message().to_string())
        })?;
        Checker { text, path }.file(raw)
    }

    /// A scenario the lab ships as a file (`lab compare eevdf-parity`), from the text built into
    /// the lab ([`SHIPPED`]), so an installed or bundled lab runs it without the repository.
    pub fn shipped(name: &str) -> Result<ScenarioFile> {
        let (_, text) = SHIPPED
            .iter()
            .find(|(n, _)| *n == name)
            .with_context(|| format!("no shipped scenario file {name:?}"))?;
        ScenarioFile::parse(text, &PathBuf::from(format!("scenarios/{name}.toml")))
    }

    /// Its name (the default comparison name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn at(&self, line: usize, field: &str, message: impl Into<String>) -> anyhow::Error {
        bad_input(&self.path, format!("line {line}: {field}"), message)
    }

    /// Every parameter of `params` has the kind of the file's own value (`--set` may change a
    /// value, not make a number a word).
    fn check_params(&self, params: &Value) -> Result<()> {
        let (Some(given), Some(default)) = (params.as_object(), self.params.as_object()) else {
            anyhow::bail!("parameters are not a table");
        };
        for (name, value) in given {
            let Some(own) = default.get(name) else {
                continue;
            };
            let kind = |v: &Value| match v {
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Bool(_) => "a boolean",
                _ => "a table",
            };
            if kind(value) != kind(own) {
                return Err(bad_input(
                    &self.path,
                    format!("params.{name}"),
                    format!("{value} is not {} like the file's {own}", kind(own)),
                ));
            }
        }
        Ok(())
    }

    /// The named CPUs on `topology` for `params`.
    fn named_cpus(
        &self,
        params: &Value,
        topology: &Topology,
    ) -> Result<BTreeMap<String, Option<u32>>> {
        let exprs = self
            .cpus
            .iter()
            .map(|(k, e)| (k.clone(), e.text.clone()))
            .collect();
        let params = params.as_object().context("parameters are not a table")?;
        cpus::resolve_all(&exprs, params, topology)
            .map_err(|(name, e)| self.at(self.cpus[&name].line, &format!("cpus.{name}"), e))
    }

    /// One CPU of an expression of the file, or none (`outside` on a small shape).
    fn cpu_of(
        &self,
        expr: &Expr,
        field: &str,
        names: &Names,
        topology: &Topology,
    ) -> Result<Option<u32>> {
        cpus::cpu(&expr.text, names, topology).map_err(|e| self.at(expr.line, field, e))
    }

    fn set_of(
        &self,
        expr: &Expr,
        field: &str,
        names: &Names,
        topology: &Topology,
    ) -> Result<Vec<u32>> {
        cpus::set(&expr.text, names, topology).map_err(|e| self.at(expr.line, field, e))
    }

    /// The dmatest parameters of `params` (dmatest's own check included).
    fn dmatest(&self, params: &Value) -> Result<crate::workload::Dmatest> {
        let d: crate::workload::Dmatest = serde_json::from_value(params["dmatest"].clone())
            .map_err(|e| bad_input(&self.path, "dmatest", e.to_string()))?;
        d.check()
            .map_err(|e| bad_input(&self.path, "dmatest", format!("{e:#}")))?;
        Ok(d)
    }

    fn device(
        &self,
        d: &FileDevice,
        names: &Names,
        topology: &Topology,
        index: usize,
    ) -> Result<DeviceSpec> {
        let kind = cpus::word(&d.kind.text, names.params);
        let mut spec = match kind.as_str() {
            "ioat" => DeviceSpec::ioat(d.channels),
            "ptdma" => DeviceSpec::ptdma(),
            "nvme" => {
                let queues = cpus::word(&d.queues.text, names.params);
                let queues = queues
                    .parse::<u16>()
                    .ok()
                    .filter(|q| *q > 0)
                    .ok_or_else(|| {
                        self.at(
                            d.queues.line,
                            &format!("device[{index}].queues"),
                            format!("{queues:?} is not a number of queues (1 or more)"),
                        )
                    })?;
                DeviceSpec::nvme(queues, d.size)
            }
            "nic" => DeviceSpec::nic(),
            other => {
                return Err(self.at(
                    d.kind.line,
                    &format!("device[{index}].kind"),
                    format!("{other:?} is not a device the lab has (ioat, ptdma, nvme, nic)"),
                ))
            }
        };
        for (vector, expr) in &d.pins {
            let field = format!("device[{index}].pin.{vector}");
            spec = spec.irq_on_cpus(*vector, &self.set_of(expr, &field, names, topology)?);
        }
        Ok(spec)
    }
}

impl Scenario for ScenarioFile {
    type Params = Value;

    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn params(&self) -> &Value {
        &self.params
    }

    fn topology(&self) -> &str {
        &self.topology
    }

    fn default_variants(&self) -> Vec<Variant> {
        self.variants.clone()
    }

    fn max_repetitions(&self) -> Option<usize> {
        self.max_repetitions
    }

    fn metrics(&self) -> Vec<MetricDef> {
        self.metrics.iter().map(|m| m.def.clone()).collect()
    }

    fn plan(&self, params: &Value, topology: &Topology) -> Result<BootPlan> {
        self.check_params(params)?;
        let found = self.named_cpus(params, topology)?;
        let names = Names {
            params: params.as_object().context("parameters")?,
            cpus: &found,
        };
        if params.get("dmatest").is_some() {
            self.dmatest(params)?;
        }
        // Every expression is found on this topology now, not in the middle of a boot.
        self.measure_cpus(&names, topology)?;
        for m in &self.metrics {
            for set in m.sets() {
                self.set_of(
                    &Expr {
                        text: set.into(),
                        line: m.line,
                    },
                    &format!("metric {:?}", m.def.name),
                    &names,
                    topology,
                )?;
            }
        }
        let mut devices = Vec::new();
        for (index, d) in self.devices.iter().enumerate() {
            devices.push(self.device(d, &names, topology, index)?);
        }
        if let Some(t) = &self.traffic {
            let kind = cpus::word(&self.devices[t.device].kind.text, names.params);
            if kind != "nic" {
                return Err(bad_input(
                    &self.path,
                    "traffic.device",
                    format!("device {} is {kind:?}: traffic goes into a nic", t.device),
                ));
            }
        }
        Ok(BootPlan {
            devices,
            cmdline: self.cmdline.clone(),
            image: self.image.clone(),
            ..BootPlan::default()
        })
    }

    async fn measure(&self, params: &Value, boot: &Boot<'_>) -> Result<Measurement> {
        measure::measure(self, params, boot).await
    }

    /// The watched task's time on CPU, the `marks` CPUs marked; without a watch, the first
    /// `[[count]]`'s events per CPU.
    fn picture(&self) -> Option<Picture> {
        let Some(watch) = self.watch.as_ref() else {
            if let Some(count) = self.counts.first() {
                return Some(Picture {
                    task: format!("[[count]] {} ({})", count.name, count.filter),
                    quantity: format!("{} events (trace)", count.event),
                    per_cpu: format!("/counts_per_cpu/{}", count.name),
                    marks: Vec::new(),
                });
            }
            // Else where the first spread's interrupts landed.
            let vectors = vectors::wanted(&self.metrics, true, vectors::Window::Workload)
                .into_iter()
                .next()?;
            return Some(Picture {
                task: format!("the vectors of {}", vectors.key()),
                quantity: "interrupts (/proc/interrupts)".into(),
                per_cpu: format!("/vector_interrupts/{}", vectors.key()),
                marks: Vec::new(),
            });
        };
        Some(Picture {
            task: watch.task.clone(),
            quantity: "time on CPU (trace)".into(),
            per_cpu: "/placement/runtime_us".into(),
            marks: watch
                .marks
                .iter()
                .map(|m| Mark {
                    label: m.clone(),
                    cpu: format!("/cpus/{m}"),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_storage;
