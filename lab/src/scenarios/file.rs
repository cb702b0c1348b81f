//! A scenario written as a TOML file instead of Rust (`lab compare --scenario FILE`): the
//! topology, devices with their IRQ pins, the guest's set-up and workload, the task to watch and
//! metrics from the observation toolkit or the workload's output. The format is in
//! `docs/SCENARIO-FILES.md`; `scenarios/*.toml` are examples.
//!
//! Everything a file says is checked when it is read (fields, metric sources, names) or when a
//! variant is planned on its topology (CPUs, parameters after `--set`), before anything is built
//! or booted; an error names the file, the line and the field.

mod cpus;
mod format;
mod measure;
mod metrics;

use std::collections::BTreeMap;
use std::ops::Range;
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
    queues: u16,
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
    settle: Option<Duration>,
    workload: Workload,
    watch: Option<Watch>,
    counts: Vec<Count>,
    trace_buffer_kb: Option<u32>,
    traffic: Option<Traffic>,
    max_repetitions: Option<usize>,
    metrics: Vec<FileMetric>,
}

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
        let kind = cpus_word(&d.kind.text, names.params);
        let mut spec = match kind.as_str() {
            "ioat" => DeviceSpec::ioat(d.channels),
            "ptdma" => DeviceSpec::ptdma(),
            "nvme" => DeviceSpec::nvme(d.queues, 1 << 30),
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

/// A word that names a parameter stands for its value.
fn cpus_word(word: &str, params: &serde_json::Map<String, Value>) -> String {
    match params.get(word) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => word.to_string(),
    }
}

/// Turns a parsed file into a checked scenario.
struct Checker<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Checker<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        line_of(self.text, span)
    }

    fn err(&self, span: Range<usize>, field: &str, message: impl Into<String>) -> anyhow::Error {
        bad_input(
            self.path,
            format!("line {}: {field}", self.line(span)),
            message,
        )
    }

    fn expr(&self, s: &toml::Spanned<String>) -> Expr {
        Expr {
            text: s.get_ref().clone(),
            line: self.line(s.span()),
        }
    }

    fn file(&self, raw: RawFile) -> Result<ScenarioFile> {
        let name = raw.name.get_ref().clone();
        crate::names::check_name("the name", &name)
            .map_err(|e| self.err(raw.name.span(), "name", format!("{e:#}")))?;
        let topology = match &raw.topology {
            Some(t) => {
                Topology::by_name(t.get_ref())
                    .map_err(|e| self.err(t.span(), "topology", e.to_string()))?;
                t.get_ref().clone()
            }
            None => crate::host::DEFAULT_TOPOLOGY.to_string(),
        };
        let mut variants = Vec::new();
        for v in raw.variants.get_ref() {
            variants.push(
                v.parse::<Variant>().map_err(|e| {
                    self.err(raw.variants.span(), "variants", format!("{v:?}: {e:#}"))
                })?,
            );
        }
        if variants.len() < 2 {
            return Err(self.err(
                raw.variants.span(),
                "variants",
                "a comparison needs two or more, base first",
            ));
        }
        let mut params = serde_json::Map::new();
        for (k, v) in &raw.params {
            if !matches!(
                v.get_ref(),
                toml::Value::String(_)
                    | toml::Value::Integer(_)
                    | toml::Value::Float(_)
                    | toml::Value::Boolean(_)
            ) {
                return Err(self.err(
                    v.span(),
                    &format!("params.{k}"),
                    "a string, number or boolean",
                ));
            }
            params.insert(k.clone(), serde_json::to_value(v.get_ref())?);
        }
        let cpus: BTreeMap<String, Expr> = raw
            .cpus
            .iter()
            .map(|(k, v)| (k.clone(), self.expr(v)))
            .collect();
        for (k, v) in &raw.cpus {
            if params.contains_key(k) {
                return Err(self.err(
                    v.span(),
                    &format!("cpus.{k}"),
                    "a parameter has this name too",
                ));
            }
            self.references(v, &format!("cpus.{k}"), &params, &cpus)?;
        }
        let (workload, dmatest) = self.workload(&raw, &params, &cpus)?;
        if let Some(d) = dmatest {
            params.insert("dmatest".into(), serde_json::to_value(d)?);
        }
        let devices = self.devices(&raw, &params, &cpus)?;
        let watch = self.watch(&raw, &params, &cpus, devices.len())?;
        let counts = self.counts(&raw, watch.is_some())?;
        let traffic = self.traffic(&raw, devices.len())?;
        let max_repetitions = self.max_repetitions(&raw)?;
        let metrics = self.metrics(&raw, &params, &cpus, &watch, &workload)?;
        for m in &raw.metrics {
            if let Some(c) = &m.count {
                if !counts.iter().any(|k| &k.name == c.get_ref()) {
                    let field = format!("metric {:?}: count", m.name.get_ref());
                    return Err(self.err(
                        c.span(),
                        &field,
                        format!("no [[count]] is named {:?}", c.get_ref()),
                    ));
                }
            }
        }
        if let Some(kb) = raw.trace_buffer_kb {
            if !(64..=1 << 20).contains(&kb) {
                return Err(bad_input(
                    self.path,
                    "trace_buffer_kb",
                    format!("{kb}: 64 to 1048576 KiB"),
                ));
            }
        }
        Ok(ScenarioFile {
            path: self.path.to_path_buf(),
            name,
            description: raw.description,
            topology,
            variants,
            params: Value::Object(params),
            cpus,
            devices,
            image: raw.guest.image,
            cmdline: raw.guest.cmdline,
            setup: raw.guest.setup,
            settle: raw.guest.settle_s.map(Duration::from_secs_f64),
            workload,
            watch,
            counts,
            trace_buffer_kb: raw.trace_buffer_kb,
            traffic,
            max_repetitions,
            metrics,
        })
    }

    fn max_repetitions(&self, raw: &RawFile) -> Result<Option<usize>> {
        let Some(n) = &raw.max_repetitions else {
            return Ok(None);
        };
        if !(5..=200).contains(n.get_ref()) {
            return Err(self.err(
                n.span(),
                "max_repetitions",
                format!("{}: 5 to 200 boots per variant", n.get_ref()),
            ));
        }
        Ok(Some(*n.get_ref()))
    }

    fn traffic(&self, raw: &RawFile, devices: usize) -> Result<Option<Traffic>> {
        let Some(t) = &raw.traffic else {
            return Ok(None);
        };
        let bad = |field: &str, m: String| bad_input(self.path, format!("traffic.{field}"), m);
        if t.device >= devices {
            return Err(bad(
                "device",
                format!(
                    "device {}: the file has {devices} [[device]] tables",
                    t.device
                ),
            ));
        }
        if t.payload == 0 || t.payload > 1472 {
            return Err(bad(
                "payload",
                format!("{} bytes: 1 to 1472 fit one frame", t.payload),
            ));
        }
        if !(t.rate.is_finite() && t.rate > 0.0 && t.rate <= 1e6) {
            return Err(bad(
                "rate",
                format!("{}: datagrams per second, above 0 and at most 1e6", t.rate),
            ));
        }
        if t.count == 0 {
            return Err(bad("count", "at least 1 datagram".into()));
        }
        if let Some(after) = &t.after {
            if !after.starts_with('/') || after.contains(['\'', '\n']) {
                return Err(bad(
                    "after",
                    format!("{after:?}: an absolute guest path without quotes"),
                ));
            }
        }
        Ok(Some(Traffic {
            device: t.device,
            flow: crate::devices::nic::UdpFlow {
                port: t.port,
                payload: t.payload,
                rate: t.rate,
                count: t.count,
            },
            after: t.after.clone(),
        }))
    }

    fn counts(&self, raw: &RawFile, watching: bool) -> Result<Vec<Count>> {
        let mut out: Vec<Count> = Vec::new();
        for c in &raw.counts {
            let field = format!("count {:?}", c.name.get_ref());
            if watching {
                return Err(self.err(
                    c.name.span(),
                    &field,
                    "a [[count]] beside a [watch]: the guest has one trace, give one or the other",
                ));
            }
            let event = c.event.get_ref();
            let well_formed = event.split_once('/').is_some_and(|(sub, name)| {
                let word = |w: &str| {
                    !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                };
                word(sub) && word(name)
            });
            if !well_formed {
                return Err(self.err(
                    c.event.span(),
                    &format!("{field}: event"),
                    format!("{event:?}: subsystem/event, as sched/sched_switch"),
                ));
            }
            if out
                .iter()
                .any(|o| o.name == *c.name.get_ref() || o.event == *event)
            {
                return Err(self.err(
                    c.name.span(),
                    &field,
                    "a second [[count]] of this name or event (tracefs has one filter per event)",
                ));
            }
            if c.filter.contains(['\n', '\'']) {
                return Err(self.err(
                    c.name.span(),
                    &format!("{field}: filter"),
                    "a filter is one line without single quotes",
                ));
            }
            out.push(Count {
                name: c.name.get_ref().clone(),
                event: event.clone(),
                filter: c.filter.clone(),
            });
        }
        Ok(out)
    }

    /// Every CPU name `s` refers to is defined.
    fn references(
        &self,
        s: &toml::Spanned<String>,
        field: &str,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
    ) -> Result<()> {
        for name in cpus::referenced_cpus(s.get_ref(), params) {
            if !cpus.contains_key(&name) {
                let known: Vec<&String> = cpus.keys().chain(params.keys()).collect();
                return Err(self.err(
                    s.span(),
                    field,
                    format!("{name:?} is neither a named CPU nor a parameter (names: {known:?})"),
                ));
            }
        }
        Ok(())
    }

    fn workload(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
    ) -> Result<(Workload, Option<crate::workload::Dmatest>)> {
        let optional = |s: &Option<toml::Spanned<String>>, field: &str| -> Result<Option<Expr>> {
            match s {
                Some(s) => {
                    self.references(s, field, params, cpus)?;
                    Ok(Some(self.expr(s)))
                }
                None => Ok(None),
            }
        };
        match (&raw.dmatest, &raw.command) {
            (Some(d), None) => {
                let parameters = d
                    .parameters()
                    .map_err(|e| bad_input(self.path, "dmatest", e))?;
                let workload = Workload::Dmatest {
                    start_cpu: optional(&d.start_cpu, "dmatest.start_cpu")?,
                    control_cpu: optional(&d.control_cpu, "dmatest.control_cpu")?,
                };
                Ok((workload, Some(parameters)))
            }
            (None, Some(c)) => Ok((
                Workload::Command {
                    run: c.run.clone(),
                    pin: optional(&c.pin, "command.pin")?,
                    control_cpu: optional(&c.control_cpu, "command.control_cpu")?,
                    timeout: Duration::from_secs(c.timeout_s.unwrap_or(600)),
                },
                None,
            )),
            (None, None) => Err(bad_input(
                self.path,
                "workload",
                "no workload: give a [command] or a [dmatest] table",
            )),
            (Some(_), Some(_)) => Err(bad_input(
                self.path,
                "workload",
                "one workload: [command] or [dmatest], not both",
            )),
        }
    }

    fn devices(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
    ) -> Result<Vec<FileDevice>> {
        let mut out = Vec::new();
        for (index, d) in raw.devices.iter().enumerate() {
            let mut pins = Vec::new();
            for (vector, set) in &d.pin {
                let field = format!("device[{index}].pin.{vector}");
                let v: usize = vector.parse().map_err(|_| {
                    self.err(
                        set.span(),
                        &field,
                        format!("{vector:?} is not a vector index (0, 1, ...)"),
                    )
                })?;
                self.references(set, &field, params, cpus)?;
                pins.push((v, self.expr(set)));
            }
            out.push(FileDevice {
                kind: self.expr(&d.kind),
                channels: d.channels.unwrap_or(1),
                queues: d.queues.unwrap_or(2),
                pins,
            });
        }
        Ok(out)
    }

    fn watch(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
        devices: usize,
    ) -> Result<Option<Watch>> {
        let Some(w) = &raw.watch else {
            return Ok(None);
        };
        if w.task.is_empty() || w.task.contains(['"', '\\', '\n']) {
            return Err(bad_input(
                self.path,
                "watch.task",
                format!("{:?} is not a command-name prefix", w.task),
            ));
        }
        let irq = match &w.irq {
            Some(s) => Some(self.irq(s, devices)?),
            None => None,
        };
        let started_on = match &w.started_on {
            Some(s) => {
                self.references(s, "watch.started_on", params, cpus)?;
                Some(self.expr(s))
            }
            None => None,
        };
        for mark in &w.marks {
            if !cpus.contains_key(mark) {
                return Err(bad_input(
                    self.path,
                    "watch.marks",
                    format!("{mark:?} is not a named CPU"),
                ));
            }
        }
        Ok(Some(Watch {
            task: w.task.clone(),
            irq,
            started_on,
            marks: w.marks.clone(),
        }))
    }

    /// `device N` or `device N vector V`.
    fn irq(&self, s: &toml::Spanned<String>, devices: usize) -> Result<(usize, usize)> {
        let words: Vec<&str> = s.get_ref().split_whitespace().collect();
        let bad = |m: String| self.err(s.span(), "watch.irq", m);
        let (device, vector) = match words.as_slice() {
            ["device", d] => (d.parse().ok(), Some(0)),
            ["device", d, "vector", v] => (d.parse().ok(), v.parse().ok()),
            _ => (None, None),
        };
        match (device, vector) {
            (Some(d), Some(v)) if d < devices => Ok((d, v)),
            (Some(d), Some(_)) => Err(bad(format!(
                "device {d}: the file has {devices} [[device]] tables"
            ))),
            _ => Err(bad(format!(
                "{:?}: `device N` or `device N vector V`",
                s.get_ref()
            ))),
        }
    }

    fn metrics(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
        watch: &Option<Watch>,
        workload: &Workload,
    ) -> Result<Vec<FileMetric>> {
        let mut out: Vec<FileMetric> = Vec::new();
        for m in &raw.metrics {
            let line = self.line(m.name.span());
            let mut metric = metrics::check(m)
                .map_err(|(field, e)| bad_input(self.path, format!("line {line}: {field}"), e))?;
            metric.line = line;
            let field = format!("metric {:?}", m.name.get_ref());
            if out.iter().any(|o| o.def.name == metric.def.name) {
                return Err(self.err(m.name.span(), &field, "a second metric of this name"));
            }
            for set in [&m.switch_ins_on, &m.runtime_on, &m.wakeups_on, &m.irqs_on]
                .into_iter()
                .flatten()
            {
                self.references(set, &field, params, cpus)?;
            }
            let needs_watch = m.switch_ins_on.is_some()
                || m.runtime_on.is_some()
                || m.wakeups_on.is_some()
                || m.placement.is_some()
                || m.landed.is_some();
            if needs_watch && watch.is_none() {
                return Err(self.err(
                    m.name.span(),
                    &field,
                    "a placement metric needs a [watch] table naming the task",
                ));
            }
            if m.irqs_on.is_some() && watch.as_ref().and_then(|w| w.irq).is_none() {
                return Err(self.err(
                    m.name.span(),
                    &field,
                    "irqs_on needs [watch] irq = \"device N\"",
                ));
            }
            if m.workload.is_some() && !matches!(workload, Workload::Dmatest { .. }) {
                return Err(self.err(
                    m.name.span(),
                    &field,
                    "workload figures come from a [dmatest] workload",
                ));
            }
            out.push(metric);
        }
        if !out.iter().any(|m| m.def.primary) {
            return Err(bad_input(
                self.path,
                "metric",
                "no metric is `primary = true`: a comparison is decided on one",
            ));
        }
        Ok(out)
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
            let kind = cpus_word(&self.devices[t.device].kind.text, names.params);
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

    /// The watched task's time on CPU, the `marks` CPUs marked.
    fn picture(&self) -> Option<Picture> {
        let watch = self.watch.as_ref()?;
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
