//! A scenario file's metrics: where each value comes from (the watched task's placement, the
//! attribution of its wakeups, the watched interrupt, a device's vectors, who woke whom, the
//! workload's result or output) and how it is declared to the runner.

use std::collections::BTreeMap;

use crate::experiment::MetricDef;
use crate::guest::ResourceUse;
use crate::observe::{
    Attribution, CrossLlcWakeups, InterruptSpread, Landing, TaskPlacement, VectorTargets, Wakeups,
};
use crate::report::Direction;
use crate::stats::Magnitude;
use crate::topology::Topology;
use crate::workload::DmatestResult;

use super::cpus::{self, Names};
use super::format::RawMetric;
use super::json_output::JsonQuery;
pub(super) use super::vectors::{Vectors, Window};
pub(super) use super::wakeups::WakeupMetric;

/// Where a metric's value comes from.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// Share of the task's switch-ins on a CPU set.
    SwitchInsOn(String),
    /// Share of its time on CPU on a CPU set.
    RuntimeOn(String),
    /// Share of its wakeups that targeted a CPU set.
    WakeupsOn(String),
    /// Share of the watched interrupt on a CPU set (from `/proc/interrupts`).
    IrqsOn(String),
    /// Share of a device's vectors' interrupts on a CPU set (`irqs_on` with `vectors`).
    VectorsOn { set: String, vectors: Vectors },
    /// A figure of the placement.
    Placement(PlacementFigure),
    /// Share of the attributed wakeups that landed so, from the task's CPU.
    Landed(Landing),
    /// A figure of dmatest's result.
    Workload(WorkloadFigure),
    /// A figure of the workload's resource use.
    Usage(UsageFigure),
    /// A `/proc/vmstat` counter's change over the workload, or from `from_s` into it.
    Vmstat {
        counter: String,
        from_s: Option<Amount>,
    },
    /// A `[[count]]`'s events, all CPUs.
    Count(String),
    /// How a device's interrupts spread over the CPUs.
    Spread {
        figure: SpreadFigure,
        vectors: Vectors,
    },
    /// Where a device's vectors target.
    Targets {
        figure: TargetFigure,
        vectors: Vectors,
    },
    /// The first group of a regular expression over the workload's output.
    Output(regex::Regex),
    /// A JSONPath query over the JSON document in the workload's output.
    Json(JsonQuery),
    /// A figure of `[wakeups]`.
    Wakeups(WakeupMetric),
    /// An expression of earlier metrics' values and numeric parameters.
    Compute(String),
}

/// The placement's figures a metric can be.
#[derive(Debug, Clone, Copy)]
pub(super) enum PlacementFigure {
    SwitchIns,
    Wakeups,
    Migrations,
    CrossLlcMigrations,
    CrossNodeMigrations,
    BalancerMigrations,
    MaxCpuShare,
    PulledAcrossLlc,
}

const PLACEMENT_FIGURES: [(&str, PlacementFigure); 8] = [
    ("switch_ins", PlacementFigure::SwitchIns),
    ("wakeups", PlacementFigure::Wakeups),
    ("migrations", PlacementFigure::Migrations),
    ("cross_llc_migrations", PlacementFigure::CrossLlcMigrations),
    (
        "cross_node_migrations",
        PlacementFigure::CrossNodeMigrations,
    ),
    ("balancer_migrations", PlacementFigure::BalancerMigrations),
    ("max_cpu_share", PlacementFigure::MaxCpuShare),
    ("pulled_across_llc", PlacementFigure::PulledAcrossLlc),
];

/// The resource use's figures a metric can be (the workload's processes, from the agent).
#[derive(Debug, Clone, Copy)]
pub(super) enum UsageFigure {
    UserS,
    SystemS,
    CpuS,
    MaxRssKib,
    MinorFaults,
    MajorFaults,
    VoluntarySwitches,
    InvoluntarySwitches,
}

const USAGE_FIGURES: [(&str, UsageFigure); 8] = [
    ("user_s", UsageFigure::UserS),
    ("system_s", UsageFigure::SystemS),
    ("cpu_s", UsageFigure::CpuS),
    ("max_rss_kib", UsageFigure::MaxRssKib),
    ("minor_faults", UsageFigure::MinorFaults),
    ("major_faults", UsageFigure::MajorFaults),
    ("voluntary_switches", UsageFigure::VoluntarySwitches),
    ("involuntary_switches", UsageFigure::InvoluntarySwitches),
];

const LANDINGS: [(&str, Landing); 5] = [
    ("same_cpu", Landing::SameCpu),
    ("smt_sibling", Landing::SmtSibling),
    ("same_llc", Landing::SameLlc),
    ("other_llc", Landing::OtherLlc),
    ("other_node", Landing::OtherNode),
];

/// The figures of an interrupt spread (`observe::InterruptSpread`) a metric can be.
#[derive(Debug, Clone, Copy)]
pub(super) enum SpreadFigure {
    BusiestShare,
    Cpus,
    Nodes,
    MaxOverMean,
    Total,
}

const SPREAD_FIGURES: [(&str, SpreadFigure); 5] = [
    ("busiest_share", SpreadFigure::BusiestShare),
    ("cpus", SpreadFigure::Cpus),
    ("nodes", SpreadFigure::Nodes),
    ("max_over_mean", SpreadFigure::MaxOverMean),
    ("total", SpreadFigure::Total),
];

/// The figures of vectors' targets (`observe::VectorTargets`) a metric can be.
#[derive(Debug, Clone, Copy)]
pub(super) enum TargetFigure {
    Cpus,
    Nodes,
    MaxPerCpu,
}

const TARGET_FIGURES: [(&str, TargetFigure); 3] = [
    ("cpus", TargetFigure::Cpus),
    ("nodes", TargetFigure::Nodes),
    ("max_per_cpu", TargetFigure::MaxPerCpu),
];

/// dmatest's figures a metric can be.
#[derive(Debug, Clone, Copy)]
pub(super) enum WorkloadFigure {
    Iops,
    Completions,
}

/// One declared metric: its definition for the runner and its source.
#[derive(Debug, Clone)]
pub(super) struct FileMetric {
    pub def: MetricDef,
    pub source: Source,
    /// The source's value times this.
    pub scale: Option<Amount>,
    /// Values outside these refuse the boot's sample.
    pub refuse_below: Option<Amount>,
    pub refuse_above: Option<Amount>,
    /// The `[[metric]]`'s line, for errors found while running.
    pub line: usize,
}

/// What a metric reads: everything one boot observed.
pub(super) struct Observed<'a> {
    pub placement: Option<&'a TaskPlacement>,
    pub attribution: Option<&'a Attribution>,
    pub crossings: Option<&'a CrossLlcWakeups>,
    /// The workload's resource use.
    pub usage: Option<&'a ResourceUse>,
    /// `/proc/vmstat` changes over the workload, and from each `from_s` into it.
    pub vmstat: &'a BTreeMap<String, i64>,
    pub vmstat_from: &'a [(f64, BTreeMap<String, i64>)],
    /// `[[count]]` name -> events.
    pub counts: &'a BTreeMap<String, u64>,
    /// The watched interrupt's count per CPU over the workload.
    pub irq_delta: &'a [u64],
    /// The interrupts per CPU over the workload of each device's vectors a spread reads.
    pub vector_counts: &'a BTreeMap<Vectors, Vec<u64>>,
    /// Each targets metric's vectors: IRQ -> its effective CPUs after the workload.
    pub vector_targets: &'a BTreeMap<Vectors, BTreeMap<u32, Vec<u32>>>,
    pub dmatest: Option<&'a DmatestResult>,
    pub output: &'a str,
    /// The JSON document in the output, where a metric reads one.
    pub output_json: Option<&'a serde_json::Value>,
    /// What `[wakeups]` saw, and the allowed CPUs of its hard-interrupt wakees.
    pub wakeups: Option<&'a Wakeups>,
    pub allowed: &'a BTreeMap<u32, Vec<u32>>,
}

/// `raw` checked: exactly one source, a known figure, a magnitude where it decides. Errors are
/// `(field, message)`.
pub(super) fn check(raw: &RawMetric) -> Result<FileMetric, (String, String)> {
    let name = raw.name().get_ref().clone();
    let field = |f: &str| format!("metric {name:?}: {f}");
    let source = source(raw)?;
    let is_share = matches!(
        source,
        Source::SwitchInsOn(_)
            | Source::RuntimeOn(_)
            | Source::WakeupsOn(_)
            | Source::IrqsOn(_)
            | Source::VectorsOn { .. }
            | Source::Landed(_)
            | Source::Placement(PlacementFigure::MaxCpuShare)
            | Source::Placement(PlacementFigure::PulledAcrossLlc)
            | Source::Spread {
                figure: SpreadFigure::BusiestShare,
                ..
            }
    ) || matches!(&source, Source::Wakeups(w) if w.is_share());
    let magnitude = match &raw.magnitude {
        Some(m) => magnitude(m.get_ref()).map_err(|e| (field("magnitude"), e))?,
        None if raw.primary => {
            return Err((
                field("magnitude"),
                "a primary metric needs the smallest change that matters".into(),
            ))
        }
        None => Magnitude::Absolute(if is_share { 5.0 } else { 0.0 }),
    };
    let direction = match raw.better.as_ref().map(|b| b.get_ref().as_str()) {
        None | Some("neutral") => Direction::Neutral,
        Some("higher") => Direction::HigherIsBetter,
        Some("lower") => Direction::LowerIsBetter,
        Some(other) => {
            return Err((
                field("better"),
                format!("{other:?}: higher, lower or neutral"),
            ))
        }
    };
    let mut def = if is_share {
        let mut d = MetricDef::share(&name, 0.0);
        d.magnitude = magnitude;
        d
    } else {
        let unit = match source {
            Source::Placement(_) | Source::Count(_) | Source::Wakeups(_) => "per boot",
            Source::Usage(UsageFigure::UserS | UsageFigure::SystemS | UsageFigure::CpuS) => "s",
            Source::Usage(UsageFigure::MaxRssKib) => "KiB",
            Source::Spread { figure, .. } => match figure {
                SpreadFigure::Cpus => "CPUs",
                SpreadFigure::Nodes => "nodes",
                SpreadFigure::MaxOverMean => "x",
                _ => "per boot",
            },
            Source::Targets { figure, .. } => match figure {
                TargetFigure::Cpus => "CPUs",
                TargetFigure::Nodes => "nodes",
                TargetFigure::MaxPerCpu => "vectors",
            },
            _ => "",
        };
        let d = MetricDef::new(&name, unit, direction, magnitude);
        match source {
            // A gauge in vmstat can fall; an output is whatever the program prints, a computed
            // value whatever its expression gives.
            Source::Output(_) | Source::Json(_) | Source::Vmstat { .. } | Source::Compute(_) => d,
            _ => d.non_negative(),
        }
    };
    def.direction = direction;
    if let Some(unit) = &raw.unit {
        def.unit = unit.clone();
    }
    def.primary = raw.primary;
    def.optional = raw.optional;
    let amount = |value: &Option<toml::Value>, name: &str| {
        value
            .as_ref()
            .map(Amount::from_toml)
            .transpose()
            .map_err(|e| (field(name), e))
    };
    Ok(FileMetric {
        def,
        source,
        scale: amount(&raw.scale, "scale")?,
        refuse_below: amount(&raw.refuse_below, "refuse_below")?,
        refuse_above: amount(&raw.refuse_above, "refuse_above")?,
        line: 0,
    })
}

/// A number a metric computes with: written, or an expression of the run's numeric parameters
/// (`arith`), whose names the file's check has found among them.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Amount {
    Number(f64),
    Expr(String),
}

impl Amount {
    fn from_toml(value: &toml::Value) -> Result<Amount, String> {
        match value {
            toml::Value::Integer(n) => Ok(Amount::Number(*n as f64)),
            toml::Value::Float(x) if x.is_finite() => Ok(Amount::Number(*x)),
            toml::Value::String(text) => {
                super::arith::variables(text).map_err(|e| format!("{text:?}: {e}"))?;
                Ok(Amount::Expr(text.clone()))
            }
            other => Err(format!(
                "{other}: a number or an expression of numeric parameters (\"seconds - 1.5\")"
            )),
        }
    }

    /// Its value with the run's parameters.
    pub(super) fn value(
        &self,
        params: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<f64, String> {
        self.value_with(&mut |name: &str| params.get(name)?.as_f64())
    }

    /// Its value, each name looked up with `lookup`.
    pub(super) fn value_with(
        &self,
        lookup: &mut dyn FnMut(&str) -> Option<f64>,
    ) -> Result<f64, String> {
        match self {
            Amount::Number(x) => Ok(*x),
            Amount::Expr(text) => {
                super::arith::eval(text, lookup).map_err(|e| format!("{text:?}: {e}"))
            }
        }
    }
}

/// A name in a metric's expression: a metric above it in this boot, else a numeric parameter.
fn known<'a>(
    above: &'a BTreeMap<String, f64>,
    params: &'a serde_json::Map<String, serde_json::Value>,
) -> impl FnMut(&str) -> Option<f64> + 'a {
    move |name| {
        above
            .get(name)
            .copied()
            .or_else(|| params.get(name)?.as_f64())
    }
}

/// The sources of a device's vectors `raw` names (`spread`, `targets`, `irqs_on` with
/// `vectors`), in its `window`, added to `sources`; `vectors` or `window` without one refused.
fn vector_sources(
    raw: &RawMetric,
    sources: &mut Vec<(&'static str, Source)>,
) -> Result<(), (String, String)> {
    let name = raw.name().get_ref();
    let field = |f: &str| format!("metric {name:?}: {f}");
    let window = match &raw.window {
        Some(w) => Window::parse(w.get_ref()).map_err(|e| (field("window"), e))?,
        None => Window::Workload,
    };
    let vectors = || {
        let text = raw.vectors.as_ref().ok_or_else(|| {
            let needs = "needs vectors = \"device N\" (or \"device N from V\")";
            (field("vectors"), format!("a spread or targets {needs}"))
        })?;
        Vectors::parse(text.get_ref(), window).map_err(|e| (field("vectors"), e))
    };
    if let (Some(set), Some(_)) = (&raw.irqs_on, &raw.vectors) {
        let set = set.get_ref().clone();
        let vectors = vectors()?;
        sources.push(("irqs_on", Source::VectorsOn { set, vectors }));
    }
    if let Some(figure) = &raw.spread {
        let figure = lookup(&SPREAD_FIGURES, figure.get_ref()).map_err(|e| (field("spread"), e))?;
        let vectors = vectors()?;
        sources.push(("spread", Source::Spread { figure, vectors }));
    }
    if let Some(figure) = &raw.targets {
        let figure =
            lookup(&TARGET_FIGURES, figure.get_ref()).map_err(|e| (field("targets"), e))?;
        let vectors = vectors()?;
        sources.push(("targets", Source::Targets { figure, vectors }));
    }
    let reads_vectors = raw.spread.is_some() || raw.targets.is_some() || raw.irqs_on.is_some();
    if raw.vectors.is_some() && !reads_vectors {
        return Err((
            field("vectors"),
            "vectors go with a spread, targets or irqs_on".into(),
        ));
    }
    if raw.window.is_some() && raw.vectors.is_none() {
        return Err((
            field("window"),
            "a window belongs to a metric of a device's vectors (spread, targets, irqs_on)".into(),
        ));
    }
    Ok(())
}

/// The one source `raw` names, checked. Errors are `(field, message)`.
fn source(raw: &RawMetric) -> Result<Source, (String, String)> {
    let name = raw.name().get_ref();
    let field = |f: &str| format!("metric {name:?}: {f}");
    let mut sources = Vec::new();
    vector_sources(raw, &mut sources)?;
    // With vectors, `irqs_on` is theirs (above); without, the watched interrupt's.
    let irqs_on = raw.irqs_on.as_ref().filter(|_| raw.vectors.is_none());
    let sets = [
        (
            "switch_ins_on",
            raw.switch_ins_on.as_ref(),
            Source::SwitchInsOn as fn(String) -> Source,
        ),
        ("runtime_on", raw.runtime_on.as_ref(), Source::RuntimeOn),
        ("wakeups_on", raw.wakeups_on.as_ref(), Source::WakeupsOn),
        ("irqs_on", irqs_on, Source::IrqsOn),
    ];
    for (key, value, make) in sets {
        if let Some(v) = value {
            sources.push((key, make(v.get_ref().clone())));
        }
    }
    if let Some(v) = &raw.placement {
        let figure =
            lookup(&PLACEMENT_FIGURES, v.get_ref()).map_err(|e| (field("placement"), e))?;
        sources.push(("placement", Source::Placement(figure)));
    }
    if let Some(v) = &raw.landed {
        let landing = lookup(&LANDINGS, v.get_ref()).map_err(|e| (field("landed"), e))?;
        sources.push(("landed", Source::Landed(landing)));
    }
    if let Some(v) = &raw.workload {
        let figures = [
            ("iops", WorkloadFigure::Iops),
            ("completions", WorkloadFigure::Completions),
        ];
        let figure = lookup(&figures, v.get_ref()).map_err(|e| (field("workload"), e))?;
        sources.push(("workload", Source::Workload(figure)));
    }
    if let Some(v) = &raw.usage {
        let figure = lookup(&USAGE_FIGURES, v.get_ref()).map_err(|e| (field("usage"), e))?;
        sources.push(("usage", Source::Usage(figure)));
    }
    if let Some(v) = &raw.vmstat {
        let from_s = raw
            .from_s
            .as_ref()
            .map(Amount::from_toml)
            .transpose()
            .map_err(|e| (field("from_s"), e))?;
        if let Some(Amount::Number(from)) = from_s {
            if from <= 0.0 {
                return Err((field("from_s"), format!("{from} is not a time above 0")));
            }
        }
        let counter = v.get_ref().clone();
        if counter.is_empty()
            || !counter
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err((
                field("vmstat"),
                format!("{counter:?} is not a /proc/vmstat name"),
            ));
        }
        sources.push(("vmstat", Source::Vmstat { counter, from_s }));
    } else if raw.from_s.is_some() {
        return Err((field("from_s"), "from_s belongs to a vmstat metric".into()));
    }
    if let Some(v) = &raw.count {
        sources.push(("count", Source::Count(v.get_ref().clone())));
    }
    if let Some(v) = &raw.output {
        let re = regex::Regex::new(v.get_ref()).map_err(|e| (field("output"), e.to_string()))?;
        if re.captures_len() < 2 {
            return Err((
                field("output"),
                "the expression has no group ( ) to take the value from".into(),
            ));
        }
        sources.push(("output", Source::Output(re)));
    }
    output_sources(raw, &mut sources)?;
    if let Some(v) = &raw.compute {
        let text = v.get_ref();
        super::arith::variables(text).map_err(|e| (field("compute"), format!("{text:?}: {e}")))?;
        sources.push(("compute", Source::Compute(text.clone())));
    }
    match sources.len() {
        1 => Ok(sources.remove(0).1),
        0 => Err((
            field("source"),
            "no source: give one of switch_ins_on, runtime_on, wakeups_on, irqs_on, placement, \
             landed, workload, usage, vmstat, count, spread, targets, wakeups, output, json, \
             compute"
                .into(),
        )),
        _ => {
            let keys: Vec<&str> = sources.iter().map(|(k, _)| *k).collect();
            Err((
                field("source"),
                format!("one source, not {}", keys.join(" and ")),
            ))
        }
    }
}

/// The sources `raw` reads from the workload's output (`json` with its `combine`) and from
/// `[wakeups]` (with `of` and `by`), added to `sources`; a companion field alone refused.
fn output_sources(
    raw: &RawMetric,
    sources: &mut Vec<(&'static str, Source)>,
) -> Result<(), (String, String)> {
    let name = raw.name().get_ref();
    let field = |f: &str| format!("metric {name:?}: {f}");
    fn text(v: &Option<toml::Spanned<String>>) -> Option<&str> {
        v.as_ref().map(|v| v.get_ref().as_str())
    }
    if let Some(query) = &raw.json {
        let q = JsonQuery::parse(query.get_ref(), text(&raw.combine))
            .map_err(|(f, e)| (field(&f), e))?;
        sources.push(("json", Source::Json(q)));
    } else if raw.combine.is_some() {
        return Err((field("combine"), "combine goes with a json query".into()));
    }
    if let Some(figure) = &raw.wakeups {
        let w = WakeupMetric::parse(figure.get_ref(), text(&raw.of), text(&raw.by))
            .map_err(|(f, e)| (field(&f), e))?;
        sources.push(("wakeups", Source::Wakeups(w)));
    } else if let Some(f) = [("of", &raw.of), ("by", &raw.by)]
        .iter()
        .find(|(_, v)| v.is_some())
    {
        return Err((field(f.0), format!("{} goes with a wakeups figure", f.0)));
    }
    Ok(())
}

/// The value `name` stands for in `table`, or a message listing the names it could be.
pub(super) fn lookup<T: Copy>(table: &[(&str, T)], name: &str) -> Result<T, String> {
    table
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
            format!("{name:?} is not one of {}", names.join(", "))
        })
}

/// `20` (in the metric's unit) or `"50%"` (of the base's mean).
fn magnitude(value: &toml::Value) -> Result<Magnitude, String> {
    let positive = |x: f64| {
        if x > 0.0 && x.is_finite() {
            Ok(x)
        } else {
            Err(format!("{x} is not above 0"))
        }
    };
    match value {
        toml::Value::Integer(n) => Ok(Magnitude::Absolute(positive(*n as f64)?)),
        toml::Value::Float(x) => Ok(Magnitude::Absolute(positive(*x)?)),
        toml::Value::String(s) => match s.strip_suffix('%').map(|n| n.trim().parse::<f64>()) {
            Some(Ok(pct)) => Ok(Magnitude::relative(positive(pct)? / 100.0)),
            _ => Err(format!(
                "{s:?}: a number, or a share of the base's mean such as \"50%\""
            )),
        },
        other => Err(format!(
            "{other}: a number, or a share of the base's mean such as \"50%\""
        )),
    }
}

impl FileMetric {
    /// This boot's value; `Ok(None)` when the boot has nothing to measure it on.
    pub(super) fn value(
        &self,
        seen: &Observed,
        names: &Names,
        topology: &Topology,
    ) -> Result<Option<f64>, String> {
        let set = |text: &str| cpus::set(text, names, topology);
        let share = |part: u64, whole: u64| (whole > 0).then(|| 100.0 * part as f64 / whole as f64);
        let placement = || seen.placement.ok_or("the file watches no task");
        Ok(match &self.source {
            Source::SwitchInsOn(s) => placement()?.share_on(&set(s)?),
            Source::RuntimeOn(s) => placement()?.runtime_share_on(&set(s)?),
            Source::WakeupsOn(s) => {
                let p = placement()?;
                let cpus = set(s)?;
                let on: u64 = cpus.iter().filter_map(|c| p.wakeup_targets.get(c)).sum();
                share(on, p.wakeups)
            }
            Source::IrqsOn(s) => {
                let cpus = set(s)?;
                let on: u64 = cpus
                    .iter()
                    .filter_map(|c| seen.irq_delta.get(*c as usize))
                    .sum();
                share(on, seen.irq_delta.iter().sum())
            }
            Source::VectorsOn { set: s, vectors } => {
                let per_cpu = seen
                    .vector_counts
                    .get(vectors)
                    .ok_or("no interrupt counts of the device were read")?;
                let on: u64 = set(s)?
                    .iter()
                    .filter_map(|c| per_cpu.get(*c as usize))
                    .sum();
                share(on, per_cpu.iter().sum())
            }
            Source::Placement(figure) => placement_figure(seen, *figure)?,
            Source::Usage(figure) => {
                let u = seen.usage.ok_or("the workload reported no resource use")?;
                Some(usage_figure(u, *figure))
            }
            Source::Vmstat { counter, from_s } => {
                let deltas = match from_s {
                    None => Some(seen.vmstat),
                    Some(from) => {
                        let from = from.value(names.params)?;
                        seen.vmstat_from
                            .iter()
                            .find(|(s, _)| *s == from)
                            .map(|(_, d)| d)
                    }
                };
                let delta = deltas
                    .and_then(|d| d.get(counter))
                    .ok_or_else(|| format!("no /proc/vmstat change of {counter:?} was read"))?;
                Some(*delta as f64)
            }
            Source::Count(name) => Some(*seen.counts.get(name).ok_or("no such [[count]]")? as f64),
            Source::Targets { figure, vectors } => {
                let effective = seen
                    .vector_targets
                    .get(vectors)
                    .ok_or("no targets of the device's vectors were read")?;
                let t = VectorTargets::of(effective, topology);
                Some(match figure {
                    TargetFigure::Cpus => t.cpus,
                    TargetFigure::Nodes => t.nodes,
                    TargetFigure::MaxPerCpu => t.max_per_cpu,
                } as f64)
            }
            Source::Spread { figure, vectors } => {
                let per_cpu = seen
                    .vector_counts
                    .get(vectors)
                    .ok_or("no interrupt counts of the device were read")?;
                InterruptSpread::of(per_cpu, topology).map(|s| match figure {
                    SpreadFigure::BusiestShare => s.busiest_share,
                    SpreadFigure::Cpus => s.cpus as f64,
                    SpreadFigure::Nodes => s.nodes as f64,
                    SpreadFigure::MaxOverMean => s.max_over_mean,
                    SpreadFigure::Total => s.total as f64,
                })
            }
            // Computed in `values`, from the metrics before it.
            Source::Compute(_) => None,
            Source::Landed(landing) => {
                let a = seen.attribution.ok_or("the file watches no task")?;
                share(a.landed_anywhere(*landing), a.total())
            }
            Source::Workload(figure) => {
                let d = seen.dmatest.ok_or("the workload is not dmatest")?;
                Some(match figure {
                    WorkloadFigure::Iops => d.total_iops(),
                    WorkloadFigure::Completions => d.total_tests() as f64,
                })
            }
            Source::Output(re) => match re.captures(seen.output).and_then(|c| c.get(1)) {
                Some(m) => Some(m.as_str().trim().parse::<f64>().map_err(|e| {
                    format!(
                        "the output's {:?} for /{re}/ is not a number: {e}",
                        m.as_str()
                    )
                })?),
                None => None,
            },
            Source::Json(q) => q.value(
                seen.output_json
                    .ok_or("the workload printed no JSON document")?,
            )?,
            Source::Wakeups(w) => {
                let wakeups = seen.wakeups.ok_or("the file traces no [wakeups]")?;
                w.value(wakeups, seen.allowed)
            }
        })
    }
}

fn placement_figure(seen: &Observed, figure: PlacementFigure) -> Result<Option<f64>, String> {
    let p = seen.placement.ok_or("the file watches no task")?;
    Ok(Some(match figure {
        PlacementFigure::SwitchIns => p.total_switch_ins() as f64,
        PlacementFigure::Wakeups => p.wakeups as f64,
        PlacementFigure::Migrations => p.migrations as f64,
        PlacementFigure::CrossLlcMigrations => p.cross_llc_migrations as f64,
        PlacementFigure::CrossNodeMigrations => p.cross_node_migrations as f64,
        PlacementFigure::BalancerMigrations => p.balancer_migrations as f64,
        PlacementFigure::MaxCpuShare => p.max_cpu_share().1,
        PlacementFigure::PulledAcrossLlc => {
            return Ok(seen
                .crossings
                .ok_or("the file watches no task")?
                .pulled_share())
        }
    }))
}

fn usage_figure(u: &ResourceUse, figure: UsageFigure) -> f64 {
    let s = |us: u64| us as f64 / 1e6;
    match figure {
        UsageFigure::UserS => s(u.user_us),
        UsageFigure::SystemS => s(u.system_us),
        UsageFigure::CpuS => s(u.user_us + u.system_us),
        UsageFigure::MaxRssKib => u.max_rss_kib as f64,
        UsageFigure::MinorFaults => u.minor_faults as f64,
        UsageFigure::MajorFaults => u.major_faults as f64,
        UsageFigure::VoluntarySwitches => u.voluntary_switches as f64,
        UsageFigure::InvoluntarySwitches => u.involuntary_switches as f64,
    }
}

/// Every metric's value for one boot; a required one missing is an error naming it.
pub(super) fn values(
    metrics: &[FileMetric],
    seen: &Observed,
    names: &Names,
    topology: &Topology,
    file: &str,
) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for m in metrics {
        let at = || format!("{file}: line {}: metric {:?}", m.line, m.def.name);
        let amount = |a: &Option<Amount>| -> anyhow::Result<Option<f64>> {
            a.as_ref()
                .map(|a| a.value_with(&mut known(&out, names.params)))
                .transpose()
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))
        };
        let (scale, low, high) = (
            amount(&m.scale)?,
            amount(&m.refuse_below)?,
            amount(&m.refuse_above)?,
        );
        let value = match &m.source {
            Source::Compute(text) => {
                let v = super::arith::eval(text, &mut known(&out, names.params))
                    .map_err(|e| anyhow::anyhow!("{}: compute {text:?}: {e}", at()))?;
                Some(v)
            }
            _ => m
                .value(seen, names, topology)
                .map_err(|e| anyhow::anyhow!("{}: {e}", at()))?,
        };
        match value.map(|v| v * scale.unwrap_or(1.0)) {
            Some(v) => {
                let below = low.filter(|b| v < *b).map(|b| ("below", b));
                if let Some((side, bound)) = below.or(high.filter(|a| v > *a).map(|a| ("above", a))) {
                    return Err(crate::sample::reject(format!(
                        "{}: {v} is {side} refuse_{side} = {bound}",
                        at()
                    )));
                }
                out.insert(m.def.name.clone(), v);
            }
            None if m.def.optional => {}
            None => anyhow::bail!(
                "{}: this boot has nothing to measure it on (mark it `optional = true` if a boot may lack it)",
                at()
            ),
        }
    }
    Ok(out)
}
