//! A parsed scenario file checked into a [`ScenarioFile`]: every name it refers to defined,
//! every metric's one source known, tables that go together together; an error names the
//! file, the line and the field.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;

use super::format::{line_of, RawFile, RawMetric};
use super::metrics::{self, FileMetric};
use super::{cpus, Expr, FileDevice, ScenarioFile, Traffic, Watch, Workload};
use crate::error::bad_input;
use crate::storage::StorageStack;
use crate::topology::Topology;
use crate::variant::Variant;

mod trace;

/// Turns a parsed file into a checked scenario.
pub(super) struct Checker<'a> {
    pub text: &'a str,
    pub path: &'a Path,
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

    pub(super) fn file(&self, raw: RawFile) -> Result<ScenarioFile> {
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
        let wakeup_tasks = self.wakeup_tasks(&raw, watch.is_some() || !counts.is_empty())?;
        let traffic = self.traffic(&raw, devices.len(), watch.as_ref())?;
        let max_repetitions = self.max_repetitions(&raw)?;
        let then = self.then(&raw)?;
        let storage = self.storage(&raw, &params, &cpus)?;
        let metrics = self.metrics(&raw, &params, &cpus, &watch, &workload, devices.len())?;
        self.wakeup_metrics(&raw, &metrics, &wakeup_tasks)?;
        for m in self.metric_list(&raw)? {
            if let Some(c) = &m.count {
                if !counts.iter().any(|k| &k.name == c.get_ref()) {
                    let field = format!("metric {:?}: count", m.name().get_ref());
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
            storage,
            settle: raw.guest.settle_s.map(Duration::from_secs_f64),
            workload,
            watch,
            counts,
            wakeup_tasks,
            trace_buffer_kb: raw.trace_buffer_kb,
            traffic,
            then,
            max_repetitions,
            metrics,
        })
    }

    /// `[then]`: its script and time limit (1 s to an hour).
    fn then(&self, raw: &RawFile) -> Result<Option<super::Then>> {
        let Some(t) = &raw.then else {
            return Ok(None);
        };
        if t.run.get_ref().trim().is_empty() {
            return Err(self.err(t.run.span(), "then.run", "an empty script"));
        }
        let timeout = match &t.timeout_s {
            Some(s) if !(1..=3600).contains(s.get_ref()) => {
                return Err(self.err(s.span(), "then.timeout_s", "1 to 3600 seconds"))
            }
            Some(s) => *s.get_ref(),
            None => 120,
        };
        Ok(Some(super::Then {
            run: t.run.get_ref().clone(),
            timeout: Duration::from_secs(timeout),
        }))
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

    fn traffic(
        &self,
        raw: &RawFile,
        devices: usize,
        watch: Option<&Watch>,
    ) -> Result<Option<Traffic>> {
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
        let watched = watch.and_then(|w| w.irq).map(|(device, _)| device);
        if t.warm_up && watched != Some(t.device) {
            return Err(bad(
                "warm_up",
                format!(
                    "warms [watch] irq up: name one of device {}'s vectors there \
                     (irq = \"device {} vector 1\": a NIC's receive queue)",
                    t.device, t.device
                ),
            ));
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
            warm_up: t.warm_up,
        }))
    }

    /// `[storage]`: a stack the lab builds and a guest block device's path.
    fn storage(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
    ) -> Result<Option<(StorageStack, String)>> {
        let Some(s) = &raw.storage else {
            return Ok(None);
        };
        if params.contains_key("storage") || cpus.contains_key("storage") {
            return Err(self.err(
                s.stack.span(),
                "storage",
                "$storage is the stack's mount point (or device): no parameter or CPU may be named storage",
            ));
        }
        let stack = match s.stack.get_ref().as_str() {
            "raw" => StorageStack::Raw,
            "ext4" => StorageStack::Ext4,
            "ext4-on-thin" => StorageStack::Ext4OnThin,
            other => {
                return Err(self.err(
                    s.stack.span(),
                    "storage.stack",
                    format!("{other:?}: raw, ext4 or ext4-on-thin"),
                ))
            }
        };
        let device = s.device.get_ref();
        let plain = device.strip_prefix("/dev/").is_some_and(|rest| {
            !rest.is_empty()
                && !rest.contains("..")
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-/".contains(c))
        });
        if !plain {
            return Err(self.err(
                s.device.span(),
                "storage.device",
                format!("{device:?}: a block device under /dev (\"/dev/nvme0n1\")"),
            ));
        }
        Ok(Some((stack, device.clone())))
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
            let size = match &d.size {
                None => 1 << 30,
                Some(text) => crate::topology::parse_size(text.get_ref())
                    .ok()
                    .filter(|bytes| *bytes >= 1 << 20)
                    .ok_or_else(|| {
                        self.err(
                            text.span(),
                            &format!("device[{index}].size"),
                            format!("{:?}: a size of 1M or more (\"2G\")", text.get_ref()),
                        )
                    })?,
            };
            // A kind a parameter names is known only when planned: a size there is the nvme's.
            if let (Some(text), "ioat" | "ptdma" | "nic") = (&d.size, d.kind.get_ref().as_str()) {
                return Err(self.err(
                    text.span(),
                    &format!("device[{index}].size"),
                    "a namespace size belongs to an nvme device",
                ));
            }
            out.push(FileDevice {
                kind: self.expr(&d.kind),
                channels: d.channels.unwrap_or(1),
                queues: self.queues(d, index, params)?,
                size,
                pins,
            });
        }
        Ok(out)
    }

    /// A device's `queues`: a number (default 2), or a numeric parameter's name (`--set` and
    /// a variant's `@set=` change it), kept as an expression the plan resolves.
    fn queues(
        &self,
        d: &super::format::RawDevice,
        index: usize,
        params: &serde_json::Map<String, Value>,
    ) -> Result<Expr> {
        let Some(q) = &d.queues else {
            return Ok(Expr {
                text: "2".into(),
                line: self.line(d.kind.span()),
            });
        };
        let text = match q.get_ref() {
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::String(name) if params.get(name).is_some_and(Value::is_u64) => {
                name.clone()
            }
            other => {
                return Err(self.err(
                    q.span(),
                    &format!("device[{index}].queues"),
                    format!("{other}: a number, or the name of a numeric parameter"),
                ))
            }
        };
        Ok(Expr {
            text,
            line: self.line(q.span()),
        })
    }

    /// A metric's computed amounts name numeric parameters and (but for `from_s`) the metrics
    /// above it, and give a number with the file's own values (a `--set` value of another kind
    /// is refused where it is set).
    fn amounts(
        &self,
        metric: &metrics::FileMetric,
        params: &serde_json::Map<String, Value>,
        earlier: &[&str],
    ) -> std::result::Result<(), (&'static str, String)> {
        let from_s = match &metric.source {
            metrics::Source::Vmstat { from_s, .. } => from_s,
            _ => &None,
        };
        if let metrics::Source::Compute(text) = &metric.source {
            for name in super::arith::variables(text).unwrap_or_default() {
                let numeric = params.get(&name).is_some_and(Value::is_number);
                if !numeric && !earlier.contains(&name.as_str()) {
                    let msg = format!(
                        "{text:?}: {name:?} is neither a numeric parameter nor a metric above \
                         this one (above: {})",
                        earlier.join(", ")
                    );
                    return Err(("compute", msg));
                }
            }
        }
        // `from_s` is read before any metric is: parameters only.
        let named = [
            ("scale", &metric.scale, true),
            ("refuse_below", &metric.refuse_below, true),
            ("refuse_above", &metric.refuse_above, true),
            ("from_s", from_s, false),
        ];
        for (field, amount, reads_metrics) in named {
            let Some(amount) = amount else { continue };
            if let metrics::Amount::Expr(text) = amount {
                for name in super::arith::variables(text).unwrap_or_default() {
                    if reads_metrics && earlier.contains(&name.as_str()) {
                        continue;
                    }
                    if !params.get(&name).is_some_and(Value::is_number) {
                        let known: Vec<&str> = params
                            .iter()
                            .filter(|(_, v)| v.is_number())
                            .map(|(k, _)| k.as_str())
                            .collect();
                        let or_metric = if reads_metrics {
                            " nor a metric above this one"
                        } else {
                            ""
                        };
                        let msg = format!(
                            "{text:?}: {name:?} is not a numeric parameter{or_metric} (numeric: {})",
                            known.join(", ")
                        );
                        return Err((field, msg));
                    }
                }
            }
            // With the file's own parameters (a metric above stands in as 1: its value is the
            // boot's).
            let mut lookup = |name: &str| {
                let above = reads_metrics && earlier.contains(&name);
                params
                    .get(name)
                    .and_then(Value::as_f64)
                    .or(above.then_some(1.0))
            };
            amount.value_with(&mut lookup).map_err(|e| (field, e))?;
        }
        Ok(())
    }

    /// The file's metrics, named, in order (either form, [`RawFile::metrics`]).
    fn metric_list<'r>(&self, raw: &'r RawFile) -> Result<Vec<&'r RawMetric>> {
        raw.metrics()
            .map_err(|(span, e)| self.err(span, "metrics", e))
    }

    fn metrics(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
        watch: &Option<Watch>,
        workload: &Workload,
        devices: usize,
    ) -> Result<Vec<FileMetric>> {
        let mut out: Vec<FileMetric> = Vec::new();
        for m in self.metric_list(raw)? {
            let line = self.line(m.name().span());
            let mut metric = metrics::check(m)
                .map_err(|(field, e)| bad_input(self.path, format!("line {line}: {field}"), e))?;
            metric.line = line;
            let field = format!("metric {:?}", m.name().get_ref());
            let earlier: Vec<&str> = out.iter().map(|o| o.def.name.as_str()).collect();
            self.amounts(&metric, params, &earlier)
                .map_err(|(f, e)| bad_input(self.path, format!("line {line}: {field}: {f}"), e))?;
            if out.iter().any(|o| o.def.name == metric.def.name) {
                return Err(self.err(m.name().span(), &field, "a second metric of this name"));
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
                    m.name().span(),
                    &field,
                    "a placement metric needs a [watch] table naming the task",
                ));
            }
            if m.irqs_on.is_some()
                && m.vectors.is_none()
                && watch.as_ref().and_then(|w| w.irq).is_none()
            {
                return Err(self.err(
                    m.name().span(),
                    &field,
                    "irqs_on needs [watch] irq = \"device N\", or vectors = \"device N ...\"",
                ));
            }
            let read = match &metric.source {
                metrics::Source::Spread { vectors, .. }
                | metrics::Source::VectorsOn { vectors, .. }
                | metrics::Source::Targets { vectors, .. } => Some(vectors),
                _ => None,
            };
            if let (Some(w), None) = (&m.window, &raw.then) {
                if read.is_some_and(|v| v.window == metrics::Window::Then) {
                    return Err(self.err(
                        w.span(),
                        &format!("{field}: window"),
                        "window = \"then\" needs a [then] step after the workload",
                    ));
                }
            }
            if let (Some(vectors), Some(text)) = (read, &m.vectors) {
                if vectors.device >= devices {
                    return Err(self.err(
                        text.span(),
                        &format!("{field}: vectors"),
                        format!(
                            "device {}: the file has {devices} [[device]] tables",
                            vectors.device
                        ),
                    ));
                }
            }
            if m.workload.is_some() && !matches!(workload, Workload::Dmatest { .. }) {
                return Err(self.err(
                    m.name().span(),
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
