//! Side-by-side results: a [`Comparison`] of variants (the first is the base) holding, per
//! metric, one sample per boot for each variant; an LKP/mmtests-style table of it; assertions
//! that fail with the whole table in the error; and a [`RunRecord`] that stores a run as JSON
//! with its manifest (QEMU, accelerator, kernels, image, topology, host, parameters) and the raw
//! per-boot samples in boot order.
//!
//! The statistics live in [`crate::stats`]; this module only names and arranges them.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::stats::{Change, Significance, StatsError, Summary, Verdict};

pub mod html;
pub mod junit;
pub mod merge;

/// Which way a metric should move for a variant to count as better. Only used to word the
/// table; verdicts and assertions are about higher/lower.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    HigherIsBetter,
    LowerIsBetter,
    Neutral,
}

impl Direction {
    /// "better"/"worse" for a called change; `None` for no change or a neutral metric.
    pub fn judge(self, verdict: Verdict) -> Option<&'static str> {
        match (self, verdict) {
            (_, Verdict::NoChange) | (Direction::Neutral, _) => None,
            (Direction::HigherIsBetter, Verdict::Higher)
            | (Direction::LowerIsBetter, Verdict::Lower) => Some("better"),
            _ => Some("worse"),
        }
    }
}

/// One metric of a comparison: its definition and the samples of every variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub name: String,
    /// Shown after the name in the table, e.g. "%" or "per 100 completions"; may be empty.
    #[serde(default)]
    pub unit: String,
    pub direction: Direction,
    /// Smallest |difference of means|, in `unit`, that counts as a change at all.
    pub noise_floor: f64,
    /// Variant name -> one sample per boot, in boot order.
    #[serde(default)]
    pub samples: BTreeMap<String, Vec<f64>>,
}

/// Invalid definitions or look-ups; each names the comparison and the culprit.
#[derive(Debug, Error)]
pub enum ReportError {
    #[error("comparison name is empty")]
    EmptyName,
    #[error("comparison {comparison:?}: no variants given (the first one is the base)")]
    NoVariants { comparison: String },
    #[error("comparison {comparison:?}: variant name #{index} is empty")]
    EmptyVariant { comparison: String, index: usize },
    #[error("comparison {comparison:?}: variant {variant:?} listed twice")]
    DuplicateVariant { comparison: String, variant: String },
    #[error("comparison {comparison:?}: unknown variant {variant:?} (variants: {known})")]
    UnknownVariant {
        comparison: String,
        variant: String,
        known: String,
    },
    #[error("comparison {comparison:?}: metric name is empty")]
    EmptyMetric { comparison: String },
    #[error("comparison {comparison:?}: metric {metric:?} declared twice")]
    DuplicateMetric { comparison: String, metric: String },
    #[error(
        "comparison {comparison:?}: unknown metric {metric:?} (declared: {known}; declare it with add_metric first)"
    )]
    UnknownMetric {
        comparison: String,
        metric: String,
        known: String,
    },
    #[error(
        "comparison {comparison:?}, metric {metric:?}: noise floor {value} is not a finite number >= 0"
    )]
    BadNoiseFloor {
        comparison: String,
        metric: String,
        value: f64,
    },
    #[error(
        "comparison {comparison:?}, metric {metric:?}, variant {variant:?}: sample {value} is not a finite number"
    )]
    NonFiniteSample {
        comparison: String,
        metric: String,
        variant: String,
        value: f64,
    },
    #[error(
        "comparison {comparison:?}: a run record starts from a definition without samples \
         ({samples} given); samples enter only through its boots"
    )]
    DefinitionHasSamples { comparison: String, samples: usize },
    #[error(
        "comparison {comparison:?}, metric {metric:?}, variant {variant:?}: the stored table holds \
         {table} samples but the boots give {boots}; the record is inconsistent"
    )]
    RecordMismatch {
        comparison: String,
        metric: String,
        variant: String,
        table: usize,
        boots: usize,
    },
    #[error("comparison {comparison:?}: boot of {variant:?} gives metric {metric:?} twice")]
    DuplicateBootSample {
        comparison: String,
        variant: String,
        metric: String,
    },
    #[error("comparison {comparison:?}, metric {metric:?}, variant {variant:?}: {source}")]
    Stats {
        comparison: String,
        metric: String,
        variant: String,
        #[source]
        source: StatsError,
    },
    #[error(
        "comparison {comparison:?}, metric {metric:?}: base {base:?} has mean 0, so no ratio to it"
    )]
    ZeroBaseMean {
        comparison: String,
        metric: String,
        base: String,
    },
}

/// Variants side by side over repeated boots. Fields are private so that every sample is
/// finite and belongs to a declared metric and variant; JSON input is checked the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ComparisonData")]
pub struct Comparison {
    name: String,
    variants: Vec<String>,
    metrics: Vec<Metric>,
}

/// The unchecked JSON shape of a [`Comparison`].
#[derive(Deserialize)]
struct ComparisonData {
    name: String,
    variants: Vec<String>,
    #[serde(default)]
    metrics: Vec<Metric>,
}

impl TryFrom<ComparisonData> for Comparison {
    type Error = ReportError;

    fn try_from(data: ComparisonData) -> Result<Self, ReportError> {
        let mut c = Comparison::new(data.name, data.variants)?;
        for m in data.metrics {
            c.add_metric(&m.name, &m.unit, m.direction, m.noise_floor)?;
            for (variant, values) in &m.samples {
                for &value in values {
                    c.add_sample(&m.name, variant, value)?;
                }
            }
        }
        Ok(c)
    }
}

impl Comparison {
    /// A comparison named `name` (also its JSON file name) of `variants`, the first being the
    /// base every other variant is compared with.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        variants: impl IntoIterator<Item = S>,
    ) -> Result<Comparison, ReportError> {
        let name = name.into();
        if name.trim().is_empty() {
            return Err(ReportError::EmptyName);
        }
        let variants: Vec<String> = variants.into_iter().map(Into::into).collect();
        if variants.is_empty() {
            return Err(ReportError::NoVariants { comparison: name });
        }
        for (index, v) in variants.iter().enumerate() {
            if v.trim().is_empty() {
                return Err(ReportError::EmptyVariant {
                    comparison: name,
                    index,
                });
            }
            if variants[..index].contains(v) {
                return Err(ReportError::DuplicateVariant {
                    comparison: name,
                    variant: v.clone(),
                });
            }
        }
        Ok(Comparison {
            name,
            variants,
            metrics: Vec::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// All variants, base first.
    pub fn variants(&self) -> &[String] {
        &self.variants
    }

    pub fn base(&self) -> &str {
        &self.variants[0]
    }

    /// Metrics in the order they were declared (the table's row order).
    pub fn metrics(&self) -> &[Metric] {
        &self.metrics
    }

    /// Declares a metric; `noise_floor` is in `unit` (e.g. 2.0 for two percentage points).
    pub fn add_metric(
        &mut self,
        name: &str,
        unit: &str,
        direction: Direction,
        noise_floor: f64,
    ) -> Result<&mut Comparison, ReportError> {
        if name.trim().is_empty() {
            return Err(ReportError::EmptyMetric {
                comparison: self.name.clone(),
            });
        }
        if self.metrics.iter().any(|m| m.name == name) {
            return Err(ReportError::DuplicateMetric {
                comparison: self.name.clone(),
                metric: name.to_string(),
            });
        }
        if !(noise_floor.is_finite() && noise_floor >= 0.0) {
            return Err(ReportError::BadNoiseFloor {
                comparison: self.name.clone(),
                metric: name.to_string(),
                value: noise_floor,
            });
        }
        let samples = self
            .variants
            .iter()
            .map(|v| (v.clone(), Vec::new()))
            .collect();
        self.metrics.push(Metric {
            name: name.to_string(),
            unit: unit.to_string(),
            direction,
            noise_floor,
            samples,
        });
        Ok(self)
    }

    pub fn metric(&self, name: &str) -> Result<&Metric, ReportError> {
        Ok(&self.metrics[self.metric_index(name)?])
    }

    fn metric_index(&self, name: &str) -> Result<usize, ReportError> {
        self.metrics
            .iter()
            .position(|m| m.name == name)
            .ok_or_else(|| ReportError::UnknownMetric {
                comparison: self.name.clone(),
                metric: name.to_string(),
                known: join_or_none(self.metrics.iter().map(|m| m.name.as_str())),
            })
    }

    fn check_variant(&self, variant: &str) -> Result<(), ReportError> {
        if self.variants.iter().any(|v| v == variant) {
            Ok(())
        } else {
            Err(ReportError::UnknownVariant {
                comparison: self.name.clone(),
                variant: variant.to_string(),
                known: join_or_none(self.variants.iter().map(String::as_str)),
            })
        }
    }

    /// Records one boot's value of `metric` for `variant`.
    pub fn add_sample(
        &mut self,
        metric: &str,
        variant: &str,
        value: f64,
    ) -> Result<(), ReportError> {
        self.check_variant(variant)?;
        let index = self.metric_index(metric)?;
        if !value.is_finite() {
            return Err(ReportError::NonFiniteSample {
                comparison: self.name.clone(),
                metric: metric.to_string(),
                variant: variant.to_string(),
                value,
            });
        }
        self.metrics[index]
            .samples
            .entry(variant.to_string())
            .or_default()
            .push(value);
        Ok(())
    }

    /// The samples of `variant` for `metric`, in boot order (empty if none yet).
    pub fn samples(&self, metric: &str, variant: &str) -> Result<&[f64], ReportError> {
        self.check_variant(variant)?;
        let m = self.metric(metric)?;
        Ok(m.samples.get(variant).map(Vec::as_slice).unwrap_or(&[]))
    }

    pub fn summary(&self, metric: &str, variant: &str) -> Result<Summary, ReportError> {
        Summary::of(self.samples(metric, variant)?).map_err(|source| ReportError::Stats {
            comparison: self.name.clone(),
            metric: metric.to_string(),
            variant: variant.to_string(),
            source,
        })
    }

    /// `variant` against the base for `metric`.
    pub fn change(&self, metric: &str, variant: &str) -> Result<Change, ReportError> {
        let base = self.samples(metric, self.base())?;
        let other = self.samples(metric, variant)?;
        Change::between(base, other).map_err(|source| ReportError::Stats {
            comparison: self.name.clone(),
            metric: metric.to_string(),
            variant: variant.to_string(),
            source,
        })
    }

    /// The verdict for `variant` against the base, with the metric's noise floor.
    pub fn verdict(
        &self,
        metric: &str,
        variant: &str,
        significance: Significance,
    ) -> Result<Verdict, ReportError> {
        let floor = self.metric(metric)?.noise_floor;
        Ok(self.change(metric, variant)?.verdict(significance, floor))
    }

    /// Mean of `variant` / mean of the base.
    pub fn ratio(&self, metric: &str, variant: &str) -> Result<f64, ReportError> {
        self.change(metric, variant)?
            .ratio()
            .ok_or_else(|| ReportError::ZeroBaseMean {
                comparison: self.name.clone(),
                metric: metric.to_string(),
                base: self.base().to_string(),
            })
    }

    /// Ok when `variant` is significantly higher than the base (and beyond the noise floor);
    /// otherwise an error that carries the reason and the whole table.
    pub fn assert_higher(
        &self,
        metric: &str,
        variant: &str,
        significance: Significance,
    ) -> anyhow::Result<()> {
        self.assert_verdict(metric, variant, significance, Verdict::Higher)
    }

    /// Like [`Comparison::assert_higher`], for a significant decrease.
    pub fn assert_lower(
        &self,
        metric: &str,
        variant: &str,
        significance: Significance,
    ) -> anyhow::Result<()> {
        self.assert_verdict(metric, variant, significance, Verdict::Lower)
    }

    /// Ok when no change is called at `significance` (p too large, or the difference inside
    /// the noise floor).
    pub fn assert_no_change(
        &self,
        metric: &str,
        variant: &str,
        significance: Significance,
    ) -> anyhow::Result<()> {
        self.assert_verdict(metric, variant, significance, Verdict::NoChange)
    }

    /// Ok when the variant is equivalent to the base within `margin` (in the metric's unit):
    /// the 90% Welch interval of the difference of means lies inside [-margin, +margin], the
    /// two one-sided tests at 5%. Unlike [`Comparison::assert_no_change`], too few or too
    /// scattered boots fail it: a wide interval cannot show equivalence.
    pub fn assert_equivalent(
        &self,
        metric: &str,
        variant: &str,
        margin: f64,
    ) -> anyhow::Result<()> {
        let (m, change) = self
            .metric(metric)
            .and_then(|m| Ok((m, self.change(metric, variant)?)))
            .map_err(|e| self.failure(e.to_string()))?;
        let unit = unit_suffix(&m.unit);
        let Some(ci) = change.difference_interval(0.90) else {
            return Err(self.failure(format!(
                "{metric}: equivalence within {margin}{unit} needs 2+ boots per variant (n={}/{})",
                change.base.n, change.variant.n
            )));
        };
        if ci.low >= -margin && ci.high <= margin {
            return Ok(());
        }
        Err(self.failure(format!(
            "{metric}: {variant:?} not shown equivalent to {base:?} within {margin}{unit}: the 90% \
             interval of the difference is [{lo}, {hi}]{unit} (means {b} -> {v}, n={nb}/{nv}); \
             either they differ or the boots are too few or too scattered to tell",
            base = self.base(),
            lo = fmt_value(ci.low),
            hi = fmt_value(ci.high),
            b = fmt_value(change.base.mean),
            v = fmt_value(change.variant.mean),
            nb = change.base.n,
            nv = change.variant.n,
        )))
    }

    fn assert_verdict(
        &self,
        metric: &str,
        variant: &str,
        significance: Significance,
        want: Verdict,
    ) -> anyhow::Result<()> {
        let (m, change) = self
            .metric(metric)
            .and_then(|m| Ok((m, self.change(metric, variant)?)))
            .map_err(|e| self.failure(e.to_string()))?;
        let got = change.verdict(significance, m.noise_floor);
        if got == want {
            return Ok(());
        }
        let expected = match want {
            Verdict::Higher => "higher than",
            Verdict::Lower => "lower than",
            Verdict::NoChange => "no change against",
        };
        Err(self.failure(format!(
            "{metric}: expected {variant:?} {expected} {base:?} at {significance} beyond the noise \
             floor {floor}{unit}, got {got}: means {b} -> {v} ({pct}), p={p} (Mann-Whitney p={mw}), \
             n={nb}/{nv}",
            base = self.base(),
            floor = m.noise_floor,
            unit = unit_suffix(&m.unit),
            b = fmt_value(change.base.mean),
            v = fmt_value(change.variant.mean),
            pct = change
                .pct_change
                .map_or("base mean 0".to_string(), |p| format!("{p:+.1}%")),
            p = fmt_p(change.p_value),
            mw = fmt_p(change.mann_whitney_p),
            nb = change.base.n,
            nv = change.variant.n,
        )))
    }

    /// Ok when mean(variant) / mean(base) `op` `value` holds, `op` being one of `>=`, `>`,
    /// `<=`, `<`. A plain ratio of means with no significance test: for throughput
    /// properties ("patched at least 3x base") where the effect dwarfs the noise.
    pub fn assert_ratio(
        &self,
        metric: &str,
        variant: &str,
        op: &str,
        value: f64,
    ) -> anyhow::Result<()> {
        let compare: fn(f64, f64) -> bool = match op {
            ">=" => |a, b| a >= b,
            ">" => |a, b| a > b,
            "<=" => |a, b| a <= b,
            "<" => |a, b| a < b,
            _ => {
                return Err(self.failure(format!(
                    "{metric}: unknown ratio operator {op:?} (use >=, >, <= or <)"
                )))
            }
        };
        let ratio = self
            .ratio(metric, variant)
            .map_err(|e| self.failure(e.to_string()))?;
        if compare(ratio, value) {
            Ok(())
        } else {
            Err(self.failure(format!(
                "{metric}: expected mean({variant}) / mean({base}) {op} {value}, got {ratio:.3}",
                base = self.base()
            )))
        }
    }

    /// Every metric's numbers, in table order: what the text table and the HTML report show,
    /// computed once here so both always agree.
    pub fn rows(&self) -> Vec<MetricRow<'_>> {
        self.metrics.iter().map(|m| self.metric_row(m)).collect()
    }

    fn metric_row<'a>(&'a self, m: &'a Metric) -> MetricRow<'a> {
        let others = self.variants[1..]
            .iter()
            .map(|v| {
                let change = self.change(&m.name, v).ok();
                let called = |s| {
                    change
                        .as_ref()
                        .map_or(Verdict::NoChange, |ch| ch.verdict(s, m.noise_floor))
                };
                let (at01, at05) = (called(Significance::P01), called(Significance::P05));
                let marker = if at01 != Verdict::NoChange {
                    Significance::P01.marker()
                } else if at05 != Verdict::NoChange {
                    Significance::P05.marker()
                } else {
                    ""
                };
                VariantChange {
                    variant: v,
                    summary: self.summary(&m.name, v).ok(),
                    judgement: change.as_ref().and_then(|_| m.direction.judge(at05)),
                    change,
                    marker,
                }
            })
            .collect();
        MetricRow {
            metric: m,
            base: self.summary(&m.name, self.base()).ok(),
            others,
            counts: self
                .variants
                .iter()
                .map(|v| m.samples.get(v).map_or(0, Vec::len))
                .collect(),
        }
    }

    fn failure(&self, reason: String) -> anyhow::Error {
        anyhow!("{reason}\n\n{}", self.table())
    }

    /// The comparison as an LKP-style table: one metric per row; the base's mean and relative
    /// stddev, then for each other variant its %change, significance marker, mean and stddev;
    /// then the metric, and per variant the p-value and the 95% interval of the %change.
    pub fn table(&self) -> String {
        self.table_of(&self.rows())
    }

    /// [`Comparison::table`] from rows already computed (the permutation tests of ten boots a
    /// side take seconds in a debug build; the HTML page shows the rows and this table).
    pub fn table_of(&self, rows: &[MetricRow<'_>]) -> String {
        Table::of(self, rows).render(self)
    }

    /// Writes `<dir>/<name>.json` (name made file-safe) atomically: a reader never sees a
    /// half-written file.
    pub fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        write_json_atomic(dir, &self.name, self)
    }

    pub fn read_json(path: &Path) -> anyhow::Result<Comparison> {
        read_json(path)
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}

/// One metric's row: the base's summary and every other variant against it.
#[derive(Debug, Clone)]
pub struct MetricRow<'a> {
    pub metric: &'a Metric,
    /// `None` without samples.
    pub base: Option<Summary>,
    /// Every variant but the base, in column order.
    pub others: Vec<VariantChange<'a>>,
    /// Samples per variant, base first.
    pub counts: Vec<usize>,
}

/// One variant against the base in a [`MetricRow`].
#[derive(Debug, Clone)]
pub struct VariantChange<'a> {
    pub variant: &'a str,
    pub summary: Option<Summary>,
    /// `None` when either side has no samples.
    pub change: Option<Change>,
    /// `**` (p<0.01), `*` (p<0.05) beyond the noise floor, or empty.
    pub marker: &'static str,
    /// "better"/"worse" at p<0.05, by the metric's direction.
    pub judgement: Option<&'static str>,
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
}

/// One boot's raw result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootRecord {
    /// Position in the run's (interleaved) boot order, from 0.
    pub sequence: usize,
    pub variant: String,
    /// Metric -> this boot's value.
    pub samples: BTreeMap<String, f64>,
    /// What the scenario kept besides its metrics: observation details, artefact paths.
    #[serde(default, alias = "extra", skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// A stored run: manifest, comparison, and the boots in the order they ran. The record is the
/// one owner of samples: they enter only through [`RunRecord::record_boot`], and a stored
/// record whose table disagrees with its boots is refused when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RunRecordData")]
pub struct RunRecord {
    pub schema_version: u32,
    pub manifest: Manifest,
    comparison: Comparison,
    boots: Vec<BootRecord>,
    /// Why the run stopped early, if it did (the boots before it are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// The unchecked JSON shape of a [`RunRecord`].
#[derive(Deserialize)]
struct RunRecordData {
    schema_version: u32,
    #[serde(default)]
    manifest: Manifest,
    comparison: Comparison,
    #[serde(default)]
    boots: Vec<BootRecord>,
    #[serde(default)]
    failure: Option<String>,
}

impl TryFrom<RunRecordData> for RunRecord {
    type Error = ReportError;

    fn try_from(data: RunRecordData) -> Result<Self, ReportError> {
        let record = RunRecord {
            schema_version: data.schema_version,
            manifest: data.manifest,
            comparison: data.comparison,
            boots: data.boots,
            failure: data.failure,
        };
        record.check_consistent()?;
        Ok(record)
    }
}

impl RunRecord {
    pub const SCHEMA_VERSION: u32 = 2;

    /// A record of `definition`: variants and metrics, no samples yet (those come from
    /// [`RunRecord::record_boot`]).
    pub fn new(definition: Comparison, manifest: Manifest) -> Result<RunRecord, ReportError> {
        let samples: usize = definition
            .metrics
            .iter()
            .flat_map(|m| m.samples.values())
            .map(Vec::len)
            .sum();
        if samples > 0 {
            return Err(ReportError::DefinitionHasSamples {
                comparison: definition.name,
                samples,
            });
        }
        Ok(RunRecord {
            schema_version: Self::SCHEMA_VERSION,
            manifest,
            comparison: definition,
            boots: Vec::new(),
            failure: None,
        })
    }

    /// The comparison of every boot recorded so far: what tables, reports and assertions read.
    pub fn comparison(&self) -> &Comparison {
        &self.comparison
    }

    /// The boots in the order they ran.
    pub fn boots(&self) -> &[BootRecord] {
        &self.boots
    }

    /// Adds one boot of `variant`: its metric values go into the comparison and the raw boot
    /// list alike. All values are checked first, so a bad one adds nothing.
    pub fn record_boot<K: AsRef<str>>(
        &mut self,
        variant: &str,
        samples: impl IntoIterator<Item = (K, f64)>,
        details: Value,
    ) -> Result<(), ReportError> {
        let c = &self.comparison;
        c.check_variant(variant)?;
        let mut values = BTreeMap::new();
        for (metric, value) in samples {
            let metric = metric.as_ref();
            c.metric(metric)?;
            if !value.is_finite() {
                return Err(ReportError::NonFiniteSample {
                    comparison: c.name.clone(),
                    metric: metric.to_string(),
                    variant: variant.to_string(),
                    value,
                });
            }
            if values.insert(metric.to_string(), value).is_some() {
                return Err(ReportError::DuplicateBootSample {
                    comparison: c.name.clone(),
                    variant: variant.to_string(),
                    metric: metric.to_string(),
                });
            }
        }
        for (metric, &value) in &values {
            self.comparison.add_sample(metric, variant, value)?;
        }
        self.boots.push(BootRecord {
            sequence: self.boots.len(),
            variant: variant.to_string(),
            samples: values,
            details,
        });
        Ok(())
    }

    /// The table's samples are exactly the boots' samples, in boot order.
    fn check_consistent(&self) -> Result<(), ReportError> {
        for m in &self.comparison.metrics {
            for variant in &self.comparison.variants {
                let from_boots: Vec<f64> = self
                    .boots
                    .iter()
                    .filter(|b| &b.variant == variant)
                    .filter_map(|b| b.samples.get(&m.name).copied())
                    .collect();
                let table = m.samples.get(variant).map(Vec::as_slice).unwrap_or(&[]);
                if table != from_boots.as_slice() {
                    return Err(ReportError::RecordMismatch {
                        comparison: self.comparison.name.clone(),
                        metric: m.name.clone(),
                        variant: variant.clone(),
                        table: table.len(),
                        boots: from_boots.len(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes `<dir>/<comparison name>.json` atomically (the same file name as
    /// [`Comparison::write_json`]: store one or the other per directory).
    pub fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        write_json_atomic(dir, &self.comparison.name, self)
    }

    /// Writes `path` atomically.
    pub fn write_json_to(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().context("record path has no directory")?;
        let name = path.file_stem().context("record path has no file name")?;
        let written = write_json_atomic(dir, &name.to_string_lossy(), self)?;
        debug_assert_eq!(written, path);
        Ok(())
    }

    pub fn read_json(path: &Path) -> anyhow::Result<RunRecord> {
        read_json(path)
    }
}

/// `name` with anything but ASCII letters, digits, `.`, `_`, `+`, `-` replaced by `_`, and no
/// leading dot, so a comparison name cannot escape `dir` or hide its file.
fn file_stem(name: &str) -> String {
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

fn write_json_atomic<T: Serialize>(dir: &Path, name: &str, value: &T) -> anyhow::Result<PathBuf> {
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

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn join_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
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

/// A value with about four significant digits, in at most ~10 characters.
pub(crate) fn fmt_value(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e7).contains(&a) {
        format!("{x:.3e}")
    } else if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

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

/// Mean and relative stddev of one variant in one row.
struct Cell {
    mean: String,
    /// "± x%" part; `None` when undefined (fewer than 2 samples, zero mean).
    stddev: Option<String>,
}

impl Cell {
    fn of(summary: Option<&Summary>) -> Cell {
        Cell {
            mean: summary.map_or("-".to_string(), |s| fmt_value(s.mean)),
            stddev: summary
                .and_then(Summary::stddev_pct)
                .map(|p| format!("{p:.0}")),
        }
    }

    fn render(&self, w: &Widths) -> String {
        match &self.stddev {
            Some(sd) => format!(
                "{:>mw$} ± {:>sw$}%",
                self.mean,
                sd,
                mw = w.mean,
                sw = w.stddev
            ),
            None => format!(
                "{:>mw$}{}",
                self.mean,
                " ".repeat(w.stddev + 4),
                mw = w.mean
            ),
        }
    }
}

struct OtherCell {
    pct: String,
    marker: &'static str,
    cell: Cell,
}

struct Row {
    base: Cell,
    others: Vec<OtherCell>,
    label: String,
    notes: String,
}

struct Widths {
    mean: usize,
    stddev: usize,
    pct: usize,
}

const MARKER_WIDTH: usize = 2;

impl Widths {
    fn base_group(&self) -> usize {
        self.mean + 3 + self.stddev + 1
    }

    /// Two spaces keep a long %change off the previous group.
    fn other_group(&self) -> usize {
        2 + self.pct + 1 + MARKER_WIDTH + 2 + self.base_group()
    }
}

struct Table {
    rows: Vec<Row>,
    widths: Widths,
    /// Width of each variant's column group, base first.
    groups: Vec<usize>,
    label_width: usize,
}

impl Table {
    fn of(c: &Comparison, rows: &[MetricRow<'_>]) -> Table {
        let rows: Vec<Row> = rows.iter().map(Table::row).collect();
        let cells = rows
            .iter()
            .flat_map(|r| std::iter::once(&r.base).chain(r.others.iter().map(|o| &o.cell)));
        let mut widths = Widths {
            mean: 10,
            stddev: 2,
            pct: 8,
        };
        for cell in cells {
            widths.mean = widths.mean.max(cell.mean.chars().count());
            let sd = cell.stddev.as_ref().map_or(0, |s| s.chars().count());
            widths.stddev = widths.stddev.max(sd);
        }
        for o in rows.iter().flat_map(|r| &r.others) {
            widths.pct = widths.pct.max(o.pct.chars().count());
        }
        let groups = c
            .variants
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let natural = if i == 0 {
                    widths.base_group()
                } else {
                    widths.other_group()
                };
                natural.max(v.chars().count())
            })
            .collect();
        let label_width = rows
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(0);
        Table {
            rows,
            widths,
            groups,
            label_width,
        }
    }

    fn row(r: &MetricRow<'_>) -> Row {
        let m = r.metric;
        let mut others = Vec::new();
        let mut notes = Vec::new();
        for o in &r.others {
            let pct = match &o.change {
                Some(ch) => ch.pct_change.map_or("n/a".to_string(), fmt_pct),
                None => String::new(),
            };
            notes.push(match &o.change {
                None => "p=n/a".to_string(),
                Some(ch) => {
                    let mut note = format!("p={}", fmt_p(ch.p_value));
                    if let Some(ci) = ch.pct_change_ci95 {
                        note += &format!(" [{}, {}]", fmt_pct(ci.low), fmt_pct(ci.high));
                    }
                    if let Some(word) = o.judgement {
                        note += " ";
                        note += word;
                    }
                    note
                }
            });
            others.push(OtherCell {
                pct,
                marker: o.marker,
                cell: Cell::of(o.summary.as_ref()),
            });
        }
        let counts: Vec<String> = r.counts.iter().map(usize::to_string).collect();
        notes.push(format!("n={}", counts.join("/")));
        let label = if m.unit.is_empty() {
            m.name.clone()
        } else {
            format!("{} ({})", m.name, m.unit)
        };
        Row {
            base: Cell::of(r.base.as_ref()),
            others,
            label,
            notes: notes.join("  "),
        }
    }

    /// Start column of each group (groups are separated by one space).
    fn starts(&self) -> Vec<usize> {
        let mut at = 0;
        self.groups
            .iter()
            .map(|w| {
                let start = at;
                at += w + 1;
                start
            })
            .collect()
    }

    fn render(&self, c: &Comparison) -> String {
        let w = &self.widths;
        let starts = self.starts();
        let mut lines = vec![format!("comparison: {}", c.name), String::new()];

        let names: Vec<String> = c
            .variants
            .iter()
            .zip(&self.groups)
            .map(|(v, &g)| format!("{v:^g$}"))
            .collect();
        lines.push(names.join(" ").trim_end().to_string());
        let dashes: Vec<String> = self.groups.iter().map(|&g| "-".repeat(g)).collect();
        lines.push(dashes.join(" "));

        // LKP's two caption lines, aligned to the fields they name.
        let mut captions = Vec::new();
        let mut marks = Vec::new();
        for (i, (&start, &g)) in starts.iter().zip(&self.groups).enumerate() {
            let end = start + g;
            place(&mut captions, end, "%stddev");
            place(&mut marks, end - 3, "\\");
            if i > 0 {
                let pct_end = end - w.other_group() + w.pct;
                place(&mut captions, pct_end, "%change");
                place(&mut marks, pct_end - 3, "|");
            }
        }
        lines.push(
            captions
                .into_iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        lines.push(marks.into_iter().collect::<String>().trim_end().to_string());

        for row in &self.rows {
            let mut groups = vec![format!("{:>g$}", row.base.render(w), g = self.groups[0])];
            for (o, &g) in row.others.iter().zip(&self.groups[1..]) {
                let text = format!(
                    "  {:>pw$} {:<mk$}  {}",
                    o.pct,
                    o.marker,
                    o.cell.render(w),
                    pw = w.pct,
                    mk = MARKER_WIDTH
                );
                groups.push(format!("{text:>g$}"));
            }
            let line = format!(
                "{}  {:<lw$}  {}",
                groups.join(" "),
                row.label,
                row.notes,
                lw = self.label_width
            );
            lines.push(line.trim_end().to_string());
        }
        if self.rows.is_empty() {
            lines.push("(no metrics)".to_string());
        }
        lines.push(String::new());
        lines.push(
            "* p<0.05, ** p<0.01 (two-sided permutation test on the means) and |difference| above \
             the metric's noise floor"
                .to_string(),
        );
        lines.push(
            "p: that test's p-value; [..]: 95% Welch-t interval of the %change; n: boots per \
             variant, base first"
                .to_string(),
        );
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

/// Writes `text` into `line` so that it ends just before column `end`, padding with spaces.
fn place(line: &mut Vec<char>, end: usize, text: &str) {
    let len = text.chars().count();
    let start = end.saturating_sub(len);
    if line.len() < start + len {
        line.resize(start + len, ' ');
    }
    for (i, ch) in text.chars().enumerate() {
        line[start + i] = ch;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BASE: &str = "v6.12";
    const REVERT: &str = "v6.12+wake-affine-idle-revert";

    fn seed_like() -> Comparison {
        let mut c = Comparison::new("dmatest-cross-llc", [BASE, REVERT]).unwrap();
        c.add_metric("share_on_irq_cpu", "%", Direction::Neutral, 2.0)
            .unwrap()
            .add_metric(
                "cross_llc_migrations",
                "per 100",
                Direction::LowerIsBetter,
                1.0,
            )
            .unwrap();
        for (b, r) in [
            (4.0, 91.0),
            (0.5, 92.0),
            (10.0, 88.5),
            (5.5, 90.0),
            (1.0, 97.0),
        ] {
            c.add_sample("share_on_irq_cpu", BASE, b).unwrap();
            c.add_sample("share_on_irq_cpu", REVERT, r).unwrap();
        }
        for (b, r) in [
            (12.0, 11.0),
            (14.0, 15.5),
            (13.0, 12.0),
            (11.5, 13.0),
            (12.5, 12.5),
        ] {
            c.add_sample("cross_llc_migrations", BASE, b).unwrap();
            c.add_sample("cross_llc_migrations", REVERT, r).unwrap();
        }
        c
    }

    /// The flow the S1 scenario used before the experiment runner: samples added to the
    /// comparison per boot, then the record built from that comparison and every boot recorded
    /// again, so the stored record held each sample twice. Now a record starts empty, and a
    /// stored record whose table disagrees with its boots is refused.
    #[test]
    fn record_holds_exactly_one_sample_per_boot() {
        let definition = || {
            let mut c = Comparison::new("c", ["a", "b"]).unwrap();
            c.add_metric("m", "", Direction::Neutral, 0.0).unwrap();
            c
        };
        let boots = [("a", 1.0), ("b", 2.0), ("b", 3.0), ("a", 4.0)];
        let mut filled = definition();
        for (variant, value) in boots {
            filled.add_sample("m", variant, value).unwrap();
        }
        assert!(RunRecord::new(filled, Manifest::default()).is_err());
        let mut record = RunRecord::new(definition(), Manifest::default()).unwrap();
        for (variant, value) in boots {
            record
                .record_boot(variant, [("m", value)], Value::Null)
                .unwrap();
        }
        let text = serde_json::to_string(&record).unwrap();
        let stored: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(stored.comparison().samples("m", "a").unwrap(), &[1.0, 4.0]);
        assert_eq!(stored.comparison().samples("m", "b").unwrap(), &[2.0, 3.0]);
        // A record written by the old flow (each sample twice in the table) is refused on read.
        let mut doubled: Value = serde_json::from_str(&text).unwrap();
        let samples = &mut doubled["comparison"]["metrics"][0]["samples"]["a"];
        *samples = json!([1.0, 4.0, 1.0, 4.0]);
        let err = serde_json::from_value::<RunRecord>(doubled)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("holds 4 samples but the boots give 2"),
            "{err}"
        );
    }

    #[test]
    fn table_golden() {
        let table = seed_like().table();
        let want = "\
comparison: dmatest-cross-llc

     v6.12        v6.12+wake-affine-idle-revert
---------------- -------------------------------
         %stddev  %change                %stddev
            \\        |                      \\
      4.20 ± 92%   +2083.3% **       91.70 ±  4%  share_on_irq_cpu (%)            p=0.008 [+1959.2%, +2207.4%]  n=5/5
     12.60 ±  8%      +1.6%          12.80 ± 13%  cross_llc_migrations (per 100)  p=0.921 [-15.0%, +18.2%]  n=5/5

* p<0.05, ** p<0.01 (two-sided permutation test on the means) and |difference| above the metric's noise floor
p: that test's p-value; [..]: 95% Welch-t interval of the %change; n: boots per variant, base first
";
        assert_eq!(table, want, "got:\n{table}");
    }

    fn label_column(line: &str, label: &str) -> usize {
        line.split(label).next().unwrap().chars().count()
    }

    #[test]
    fn alignment_holds_with_long_variant_names() {
        let long = "v6.12+wake-affine-idle-revert+and-a-rather-long-suffix-for-testing";
        let mut c = Comparison::new("wide", [BASE, long, "x"]).unwrap();
        c.add_metric("share", "%", Direction::HigherIsBetter, 2.0)
            .unwrap();
        c.add_metric("iops", "", Direction::HigherIsBetter, 0.0)
            .unwrap();
        c.add_metric("empty", "ms", Direction::Neutral, 0.0)
            .unwrap();
        for i in 0..5 {
            let i = f64::from(i);
            c.add_sample("share", BASE, 4.0 + i).unwrap();
            c.add_sample("share", long, 90.0 + i).unwrap();
            c.add_sample("share", "x", 5.0 + i).unwrap();
            c.add_sample("iops", BASE, 1.0e6 + i).unwrap();
            c.add_sample("iops", long, 123_456_789.0 * (1.0 + i))
                .unwrap();
        }
        c.add_sample("iops", "x", 7.0).unwrap();
        let table = c.table();
        let lines: Vec<&str> = table.lines().collect();
        let header = lines[2];
        let dashes = lines[3];
        let groups: Vec<usize> = dashes.split(' ').map(str::len).collect();
        assert_eq!(groups.len(), 3, "{table}");
        assert_eq!(
            groups[1],
            long.len(),
            "the long name sets its column's width:\n{table}"
        );
        assert!(header.contains(long) && header.contains(BASE));
        let dash_width = dashes.chars().count();
        for (row, label) in lines[6..9].iter().zip(["share (%)", "iops", "empty (ms)"]) {
            assert_eq!(
                label_column(row, label),
                dash_width + 2,
                "{label}:\n{table}"
            );
        }
        // Each group's last "%" column of the rows with a stddev sits at its group's end.
        let ends: Vec<usize> = groups
            .iter()
            .scan(0, |at, g| {
                *at += g + 1;
                Some(*at - 2)
            })
            .collect();
        let share: Vec<char> = lines[6].chars().collect();
        assert_eq!(share[ends[0]], '%', "{table}");
        assert_eq!(share[ends[1]], '%', "{table}");
        assert_eq!(share[ends[2]], '%', "{table}");
        assert!(lines[6].contains("+1433.3% **"), "{table}");
        assert!(lines[6].contains("better"), "{table}");
        assert!(lines[6].ends_with("n=5/5/5"), "{table}");
        assert!(lines[7].ends_with("n=5/5/1"), "{table}");
        assert!(lines[7].contains("3.704e8"), "{table}");
        assert!(lines[8].ends_with("p=n/a  p=n/a  n=0/0/0"), "{table}");
    }

    #[test]
    fn json_round_trip_and_atomic_write() {
        let c = seed_like();
        let dir = tempfile::tempdir().unwrap();
        let path = c.write_json(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("dmatest-cross-llc.json"));
        assert_eq!(Comparison::read_json(&path).unwrap(), c);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary file left behind");

        let mut fresh = Comparison::new("a/../b c", [BASE, REVERT]).unwrap();
        fresh
            .add_metric("share_on_irq_cpu", "%", Direction::Neutral, 2.0)
            .unwrap();
        let manifest = Manifest {
            host: json!({"cpu": "Intel(R) Xeon(R)", "cores": 2}),
            accelerator: json!("tcg"),
            kernel: json!({BASE: "sha256:aa", REVERT: "sha256:bb"}),
            ..Manifest::default()
        };
        let mut run = RunRecord::new(fresh, manifest).unwrap();
        run.record_boot(BASE, [("share_on_irq_cpu", 4.5)], Value::Null)
            .unwrap();
        run.record_boot(
            REVERT,
            [("share_on_irq_cpu", 91.0)],
            json!({"trace": "boot1.txt"}),
        )
        .unwrap();
        let path = run.write_json(dir.path()).unwrap();
        assert_eq!(path, dir.path().join("a_.._b_c.json"));
        let back = RunRecord::read_json(&path).unwrap();
        assert_eq!(back, run);
        assert_eq!(back.boots[1].sequence, 1);
        assert_eq!(
            back.comparison.samples("share_on_irq_cpu", REVERT).unwrap(),
            [91.0]
        );
        // Overwriting replaces the file in one step.
        run.record_boot(BASE, [("share_on_irq_cpu", 5.0)], Value::Null)
            .unwrap();
        run.write_json(dir.path()).unwrap();
        assert_eq!(RunRecord::read_json(&path).unwrap().boots.len(), 3);
        assert_eq!(file_stem(".hidden"), "_.hidden");
        assert_eq!(file_stem(""), "_");
    }

    #[test]
    fn json_input_is_validated() {
        let bad_variant = json!({
            "name": "x", "variants": ["a", "b"],
            "metrics": [{"name": "m", "direction": "neutral", "noise_floor": 0.0,
                         "samples": {"c": [1.0]}}]
        });
        let err = serde_json::from_value::<Comparison>(bad_variant).unwrap_err();
        assert!(err.to_string().contains("unknown variant \"c\""), "{err}");
        let bad_floor = json!({
            "name": "x", "variants": ["a"],
            "metrics": [{"name": "m", "direction": "neutral", "noise_floor": -1.0}]
        });
        let err = serde_json::from_value::<Comparison>(bad_floor).unwrap_err();
        assert!(err.to_string().contains("noise floor -1"), "{err}");
        let no_variants = json!({"name": "x", "variants": []});
        assert!(serde_json::from_value::<Comparison>(no_variants).is_err());
        let dir = tempfile::tempdir().unwrap();
        let err = Comparison::read_json(&dir.path().join("missing.json")).unwrap_err();
        assert!(format!("{err:#}").contains("missing.json"), "{err:#}");
    }

    #[test]
    fn assertions_carry_the_table() {
        let c = seed_like();
        c.assert_higher("share_on_irq_cpu", REVERT, Significance::P01)
            .unwrap();
        c.assert_no_change("cross_llc_migrations", REVERT, Significance::P05)
            .unwrap();
        let err = c
            .assert_lower("share_on_irq_cpu", REVERT, Significance::P05)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&c.table()), "{err}");
        assert!(err.starts_with("share_on_irq_cpu: expected"), "{err}");
        assert!(
            err.contains("got higher") && err.contains("p=0.008"),
            "{err}"
        );
        let err = c
            .assert_higher("cross_llc_migrations", REVERT, Significance::P05)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("got no change") && err.contains(&c.table()),
            "{err}"
        );
        let err = c
            .assert_higher("nope", REVERT, Significance::P05)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown metric \"nope\"") && err.contains(&c.table()),
            "{err}"
        );

        c.assert_ratio("share_on_irq_cpu", REVERT, ">=", 3.0)
            .unwrap();
        c.assert_ratio("share_on_irq_cpu", REVERT, ">", 21.0)
            .unwrap();
        let err = c
            .assert_ratio("share_on_irq_cpu", REVERT, "<=", 1.0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("got 21.833") && err.contains(&c.table()),
            "{err}"
        );
        assert!(c
            .assert_ratio("share_on_irq_cpu", REVERT, "=>", 1.0)
            .is_err());
    }

    #[test]
    fn equivalence_needs_a_narrow_interval_not_just_a_large_p() {
        let mut c = Comparison::new("equivalence", [BASE, REVERT]).unwrap();
        c.add_metric("tight", "%", Direction::Neutral, 5.0).unwrap();
        c.add_metric("scattered", "%", Direction::Neutral, 5.0)
            .unwrap();
        c.add_metric("shifted", "%", Direction::Neutral, 5.0)
            .unwrap();
        for (b, r) in [
            (10.0, 11.0),
            (12.0, 10.5),
            (11.0, 12.0),
            (10.5, 11.5),
            (11.5, 10.0),
        ] {
            c.add_sample("tight", BASE, b).unwrap();
            c.add_sample("tight", REVERT, r).unwrap();
            c.add_sample("shifted", BASE, b).unwrap();
            c.add_sample("shifted", REVERT, r + 40.0).unwrap();
        }
        // Two boots each that disagree wildly: "no change" at P05, but nothing is shown.
        for (b, r) in [(0.0, 90.0), (90.0, 0.0)] {
            c.add_sample("scattered", BASE, b).unwrap();
            c.add_sample("scattered", REVERT, r).unwrap();
        }
        c.assert_equivalent("tight", REVERT, 5.0).unwrap();
        c.assert_no_change("scattered", REVERT, Significance::P05)
            .unwrap();
        let err = c
            .assert_equivalent("scattered", REVERT, 30.0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("too few or too scattered"), "{err}");
        assert!(c.assert_equivalent("shifted", REVERT, 30.0).is_err());
        c.add_metric("one", "", Direction::Neutral, 0.0).unwrap();
        c.add_sample("one", BASE, 1.0).unwrap();
        c.add_sample("one", REVERT, 1.0).unwrap();
        assert!(c.assert_equivalent("one", REVERT, 1.0).is_err());
    }

    #[test]
    fn degenerate_samples_never_panic() {
        let mut c = Comparison::new("degenerate", [BASE, REVERT]).unwrap();
        c.add_metric("flat", "", Direction::Neutral, 0.0).unwrap();
        c.add_metric("zero", "", Direction::HigherIsBetter, 0.0)
            .unwrap();
        c.add_metric("single", "", Direction::Neutral, 0.0).unwrap();
        c.add_metric("none", "", Direction::Neutral, 0.0).unwrap();
        for _ in 0..3 {
            c.add_sample("flat", BASE, 7.0).unwrap();
            c.add_sample("flat", REVERT, 7.0).unwrap();
            c.add_sample("zero", BASE, 0.0).unwrap();
            c.add_sample("zero", REVERT, 1.0).unwrap();
        }
        c.add_sample("single", BASE, 1.0).unwrap();
        c.add_sample("single", REVERT, 2.0).unwrap();
        let table = c.table();
        assert!(table.contains("flat"), "{table}");
        assert_eq!(
            c.verdict("flat", REVERT, Significance::P05).unwrap(),
            Verdict::NoChange
        );
        c.assert_no_change("flat", REVERT, Significance::P05)
            .unwrap();
        // Base mean 0: no %change, no ratio, but the verdict still works on the difference.
        assert!(table.contains("n/a"), "{table}");
        assert!(matches!(
            c.ratio("zero", REVERT),
            Err(ReportError::ZeroBaseMean { .. })
        ));
        assert!(c.assert_ratio("zero", REVERT, ">=", 1.0).is_err());
        assert_eq!(c.summary("single", BASE).unwrap().stddev, None);
        assert!(matches!(
            c.summary("none", BASE),
            Err(ReportError::Stats {
                source: StatsError::Empty,
                ..
            })
        ));
        let err = c
            .assert_higher("none", REVERT, Significance::P05)
            .unwrap_err();
        assert!(err.to_string().contains("no samples"), "{err}");

        assert!(matches!(
            c.add_sample("flat", BASE, f64::NAN),
            Err(ReportError::NonFiniteSample { .. })
        ));
        assert!(matches!(
            c.add_sample("flat", "v7", 1.0),
            Err(ReportError::UnknownVariant { .. })
        ));
        assert!(matches!(
            c.add_metric("flat", "", Direction::Neutral, 0.0),
            Err(ReportError::DuplicateMetric { .. })
        ));
        assert!(matches!(
            c.add_metric("inf", "", Direction::Neutral, f64::INFINITY),
            Err(ReportError::BadNoiseFloor { .. })
        ));
        assert_eq!(c.samples("flat", BASE).unwrap().len(), 3);

        assert!(matches!(
            Comparison::new("x", Vec::<String>::new()),
            Err(ReportError::NoVariants { .. })
        ));
        assert!(matches!(
            Comparison::new("x", ["a", "a"]),
            Err(ReportError::DuplicateVariant { .. })
        ));
        assert!(matches!(
            Comparison::new(" ", ["a"]),
            Err(ReportError::EmptyName)
        ));
        let lonely = Comparison::new("lonely", ["only"]).unwrap();
        assert!(lonely.table().contains("(no metrics)"));

        let run = RunRecord::new(c.clone(), Manifest::default());
        assert!(
            matches!(run, Err(ReportError::DefinitionHasSamples { .. })),
            "{run:?}"
        );
        let mut definition = Comparison::new(c.name(), c.variants().to_vec()).unwrap();
        for m in c.metrics() {
            definition
                .add_metric(&m.name, &m.unit, m.direction, m.noise_floor)
                .unwrap();
        }
        let mut run = RunRecord::new(definition, Manifest::default()).unwrap();
        let err = run
            .record_boot(BASE, [("flat", 1.0), ("zero", f64::NAN)], Value::Null)
            .unwrap_err();
        assert!(matches!(err, ReportError::NonFiniteSample { .. }));
        assert!(
            run.comparison().samples("flat", BASE).unwrap().is_empty(),
            "partial add"
        );
        assert!(run.boots.is_empty());
        assert!(matches!(
            run.record_boot(BASE, [("flat", 1.0), ("flat", 2.0)], Value::Null),
            Err(ReportError::DuplicateBootSample { .. })
        ));
    }

    #[test]
    fn direction_words() {
        assert_eq!(
            Direction::HigherIsBetter.judge(Verdict::Higher),
            Some("better")
        );
        assert_eq!(
            Direction::HigherIsBetter.judge(Verdict::Lower),
            Some("worse")
        );
        assert_eq!(
            Direction::LowerIsBetter.judge(Verdict::Lower),
            Some("better")
        );
        assert_eq!(Direction::Neutral.judge(Verdict::Higher), None);
        assert_eq!(Direction::LowerIsBetter.judge(Verdict::NoChange), None);
    }
}
