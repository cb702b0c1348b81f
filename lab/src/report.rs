//! Side-by-side results: a [`Comparison`] of variants (the first is the base) holding, per
//! metric, one sample per boot for each variant, decided on its primary metrics (DIFFERENT,
//! SAME or UNKNOWN); an LKP/mmtests-style table of it; assertions that fail with the whole
//! table in the error; and a [`RunRecord`] that stores a run as JSON with its manifest (QEMU,
//! accelerator, kernels, image, topology, host, parameters), the raw per-boot samples in boot
//! order, the boots whose samples were refused, and every decision point.
//!
//! The statistics live in [`crate::stats`]; this module only names and arranges them.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::stats::StatsError;

pub mod attempt;
pub(crate) mod comparison;
pub(crate) mod html;
pub mod junit;
pub mod merge;
pub(crate) mod record;
pub mod stored;
pub(crate) mod table;

pub(crate) use comparison::{describe, MetricRow};
pub use comparison::{Comparison, Metric, BISECT_SKIP};
pub(crate) use record::{run_dir, Outputs};
pub use record::{BootRecord, DecisionPoint, PairVerdict, RejectedBoot, RunRecord};

/// Which way a metric should move for a variant to count as better. Only used to word the
/// table; verdicts and assertions are about DIFFERENT, SAME and the sign of the shift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// More is better (throughput, a share that should grow).
    HigherIsBetter,
    /// Less is better (time, latency, migrations).
    LowerIsBetter,
    /// Neither: the change is reported, not judged.
    Neutral,
}

impl Direction {
    /// "better"/"worse" for a change called with this `shift`; `None` for a neutral metric or
    /// no shift.
    pub(crate) fn judge(self, shift: f64) -> Option<&'static str> {
        match self {
            _ if shift == 0.0 => None,
            Direction::Neutral => None,
            Direction::HigherIsBetter if shift > 0.0 => Some("better"),
            Direction::LowerIsBetter if shift < 0.0 => Some("better"),
            _ => Some("worse"),
        }
    }
}

/// Invalid definitions or look-ups; each names the comparison and the culprit.
#[derive(Debug, Error)]
pub enum ReportError {
    /// The comparison has no name.
    #[error("comparison name is empty")]
    EmptyName,
    /// No variants were given.
    #[error("comparison {comparison:?}: no variants given (the first one is the base)")]
    NoVariants {
        /// The comparison.
        comparison: String,
    },
    /// A variant has no name.
    #[error("comparison {comparison:?}: variant name #{index} is empty")]
    EmptyVariant {
        /// The comparison.
        comparison: String,
        /// Its position in the list.
        index: usize,
    },
    /// A variant is listed twice.
    #[error("comparison {comparison:?}: variant {variant:?} listed twice")]
    DuplicateVariant {
        /// The comparison.
        comparison: String,
        /// The variant.
        variant: String,
    },
    /// A variant the comparison does not have.
    #[error("comparison {comparison:?}: unknown variant {variant:?} (variants: {known})")]
    UnknownVariant {
        /// The comparison.
        comparison: String,
        /// The variant.
        variant: String,
        /// The names it has.
        known: String,
    },
    /// A metric has no name.
    #[error("comparison {comparison:?}: metric name is empty")]
    EmptyMetric {
        /// The comparison.
        comparison: String,
    },
    /// A metric is declared twice.
    #[error("comparison {comparison:?}: metric {metric:?} declared twice")]
    DuplicateMetric {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
    },
    /// A metric the comparison does not declare.
    #[error(
        "comparison {comparison:?}: unknown metric {metric:?} (declared: {known}; declare it with add_metric first)"
    )]
    UnknownMetric {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
        /// The names it has.
        known: String,
    },
    /// A smallest change that matters that is negative or not a number.
    #[error(
        "comparison {comparison:?}, metric {metric:?}: magnitude {value} is not a finite number >= 0"
    )]
    BadMagnitude {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
        /// The value given.
        value: String,
    },
    /// A sample that is NaN or infinite.
    #[error(
        "comparison {comparison:?}, metric {metric:?}, variant {variant:?}: sample {value} is not a finite number"
    )]
    NonFiniteSample {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
        /// The variant.
        variant: String,
        /// The value given.
        value: f64,
    },
    /// A record was started from a comparison that already holds samples.
    #[error(
        "comparison {comparison:?}: a run record starts from a definition without samples \
         ({samples} given); samples enter only through its boots"
    )]
    DefinitionHasSamples {
        /// The comparison.
        comparison: String,
        /// How many samples it holds.
        samples: usize,
    },
    /// A stored record whose table disagrees with its boots.
    #[error(
        "comparison {comparison:?}, metric {metric:?}, variant {variant:?}: the stored table holds \
         {table} samples but the boots give {boots}; the record is inconsistent"
    )]
    RecordMismatch {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
        /// The variant.
        variant: String,
        /// Samples in the table.
        table: usize,
        /// Samples the boots give.
        boots: usize,
    },
    /// A boot gives one metric twice.
    #[error("comparison {comparison:?}: boot of {variant:?} gives metric {metric:?} twice")]
    DuplicateBootSample {
        /// The comparison.
        comparison: String,
        /// The variant.
        variant: String,
        /// The metric.
        metric: String,
    },
    /// A statistic could not be computed from the samples.
    #[error("comparison {comparison:?}, metric {metric:?}, variant {variant:?}: {source}")]
    Stats {
        /// The comparison.
        comparison: String,
        /// The metric.
        metric: String,
        /// The variant.
        variant: String,
        /// Why.
        #[source]
        source: StatsError,
    },
}

/// How a report draws a scenario's per-CPU picture: which map in each boot's scenario details
/// holds the watched task's per-CPU values, and which CPUs to mark. The scenario names these
/// (`Scenario::picture`); the report knows no scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Picture {
    /// The watched task(s), in the reader's words ("dmatest's copy thread").
    pub task: String,
    /// What a value counts ("time on CPU, us").
    pub quantity: String,
    /// JSON pointer to a `{"cpu": value}` map in a boot's scenario details.
    pub per_cpu: String,
    /// CPUs to mark in every boot's row (the IRQ CPU, the start CPU).
    #[serde(default)]
    pub marks: Vec<Mark>,
}

/// A marked CPU of a [`Picture`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    /// Short, drawn beside the CPU ("IRQ").
    pub label: String,
    /// JSON pointer to the CPU number in a boot's scenario details.
    pub cpu: String,
}

/// Where, on what and with which inputs a run happened. Free-form so each part of the lab
/// records what it knows (versions, hashes, paths) without this module knowing their types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Host CPU model, core count, kernel, ...
    #[serde(default)]
    pub host: Value,
    /// QEMU version, binary hash, machine type.
    #[serde(default)]
    pub qemu: Value,
    /// "kvm" or "tcg" (and TCG mode), which decides the assertions that apply.
    #[serde(default)]
    pub accelerator: Value,
    /// Per variant: kernel recipe and its content hash.
    #[serde(default)]
    pub kernel: Value,
    /// Guest image recipe and hash.
    #[serde(default)]
    pub image: Value,
    /// Topology name and its resolved shape.
    #[serde(default)]
    pub topology: Value,
    /// Workload and device parameters, repetitions, seeds.
    #[serde(default)]
    pub parameters: Value,
    /// How the HTML report draws the scenario's per-CPU data; absent when it has none (and in
    /// records written before pictures existed: the report then asks the scenario registry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub picture: Option<Picture>,
    /// The nextest test attempt that wrote the record (absent outside nextest): a merge takes
    /// only the last attempt of a retried test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<attempt::TestAttempt>,
}

/// `name` with anything but ASCII letters, digits, `.`, `_`, `+`, `-` replaced by `_`, and no
/// leading dot, so a comparison name cannot escape `dir` or hide its file.
pub(crate) fn file_stem(name: &str) -> String {
    let mut stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if stem.is_empty() || stem.starts_with('.') {
        stem.insert(0, '_');
    }
    stem
}

pub(crate) fn write_json_atomic<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating results directory {}", dir.display()))?;
    let path = dir.join(format!("{}.json", file_stem(name)));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .suffix(".json")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let mut text = serde_json::to_vec_pretty(value)
        .with_context(|| format!("serialising {}", path.display()))?;
    text.push(b'\n');
    tmp.write_all(&text)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    tmp.persist(&path)
        .map_err(|e| e.error)
        .with_context(|| format!("renaming the temporary file to {}", path.display()))?;
    Ok(path)
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

pub(crate) fn join_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let list: Vec<String> = names.map(|n| format!("{n:?}")).collect();
    if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    }
}

pub(crate) fn unit_suffix(unit: &str) -> String {
    if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    }
}

pub(crate) use crate::stats::fmt_value;

pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

pub(crate) fn fmt_pct(p: f64) -> String {
    format!("{p:+.1}%")
}

/// A variant's change against the base as the table and the page show it, with its interval:
/// for a share (a metric whose range is 0-100) in points, since a relative change of a share
/// near 0 reads as noise (+40762.9% for 0.2% -> 81.9%); else in % of the base mean.
pub(crate) fn change_text(
    metric: &Metric,
    change: &crate::stats::Change,
) -> (String, Option<String>) {
    if metric.range == crate::stats::Range::PERCENT {
        let pp = |x: f64| format!("{x:+.1}pp");
        let ci = change
            .shift_ci95
            .map(|ci| format!("[{}, {}]", pp(ci.low), pp(ci.high)));
        return (pp(change.difference), ci);
    }
    let pct = change.pct_change.map_or("n/a".to_string(), fmt_pct);
    let ci = change
        .pct_change_ci95
        .map(|ci| format!("[{}, {}]", fmt_pct(ci.low), fmt_pct(ci.high)));
    (pct, ci)
}

/// A value with its sign, as [`fmt_value`] writes it.
pub(crate) fn fmt_signed(x: f64) -> String {
    if x > 0.0 {
        format!("+{}", fmt_value(x))
    } else {
        fmt_value(x)
    }
}

#[cfg(test)]
mod tests;
