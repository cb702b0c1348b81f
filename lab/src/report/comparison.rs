//! A [`Comparison`]: variants (the first is the base) and, per metric, one sample per boot of
//! each. Its primary metrics are where it is decided (DIFFERENT, SAME or UNKNOWN, see
//! [`crate::stats::decision`]), all together under its [`Plan`] (the looks of the adaptive
//! run that made it, [`crate::stats::sequential`]); the others are shown with p-values
//! adjusted for their number. A merged comparison may hold groups (one per accelerator, say):
//! runs of variants each led by a base of its own, and each variant is compared with its
//! group's base only (a group's primary decisions are one family).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod assertions;

use super::{fmt_p, fmt_signed, fmt_value, join_or_none, unit_suffix, Direction, ReportError};
use crate::stats::{
    decide, decide_all, holm, Change, Decision, Magnitude, Pair, Plan, Range, Summary, Verdict,
};

/// `git bisect run`'s "cannot test this commit": `lab compare --exit-code` when a verdict is
/// UNKNOWN or the comparison could not be made.
pub const BISECT_SKIP: i32 = 125;

/// A secondary metric is marked when its Holm-adjusted p is below this (`*`)...
pub(crate) const MARK_ALPHA: f64 = 0.05;
/// ... or this (`**`), and its shift exceeds its magnitude.
pub(crate) const STRONG_MARK_ALPHA: f64 = 0.01;

/// One metric of a comparison: its definition and the samples of every variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// The metric's name.
    pub name: String,
    /// Shown after the name in the table, e.g. "%" or "per 100 completions"; may be empty.
    #[serde(default)]
    pub unit: String,
    /// Which way is better, for the table's wording.
    pub direction: Direction,
    /// The smallest change that matters, in `unit` or relative to the base (records written
    /// before verdicts called it the noise floor).
    #[serde(alias = "noise_floor")]
    pub magnitude: Magnitude,
    /// The values the metric can take (a share: 0-100); intervals stay inside it.
    #[serde(default, skip_serializing_if = "Range::is_any")]
    pub range: Range,
    /// Whether the comparison is decided on this metric.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub primary: bool,
    /// Variant name -> one sample per boot, in boot order.
    #[serde(default)]
    pub samples: BTreeMap<String, Vec<f64>>,
}

/// Variants side by side over repeated boots. Fields are private so that every sample is
/// finite and belongs to a declared metric and variant; JSON input is checked the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ComparisonData")]
pub struct Comparison {
    name: String,
    variants: Vec<String>,
    metrics: Vec<Metric>,
    /// The base of each group, in variant order, when there is more than one group: a group is
    /// its base and the variants after it up to the next base. Empty: one group, base first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    bases: Vec<String>,
    /// The looks its primary decisions were made at (an adaptive run's stage targets); a
    /// record without one (a fixed count, a merge, a record written before plans) is decided at
    /// one look on all its samples.
    #[serde(default, skip_serializing_if = "is_single")]
    plan: Plan,
}

/// `variant`'s samples of `m` (none yet: empty).
fn samples_of<'a>(m: &'a Metric, variant: &str) -> &'a [f64] {
    m.samples.get(variant).map_or(&[], Vec::as_slice)
}

fn is_single(plan: &Plan) -> bool {
    *plan == Plan::single()
}

/// The unchecked JSON shape of a [`Comparison`].
#[derive(Deserialize)]
struct ComparisonData {
    name: String,
    variants: Vec<String>,
    #[serde(default)]
    metrics: Vec<Metric>,
    #[serde(default)]
    bases: Vec<String>,
    #[serde(default)]
    plan: Plan,
}

impl TryFrom<ComparisonData> for Comparison {
    type Error = ReportError;

    fn try_from(data: ComparisonData) -> Result<Self, ReportError> {
        let mut c = Comparison::new(data.name, data.variants)?;
        c.set_bases(&data.bases)?;
        c.plan = data.plan;
        for m in data.metrics {
            c.add_metric(&m.name, &m.unit, m.direction, m.magnitude)?;
            c.set_range(&m.name, m.range)?;
            if m.primary {
                c.make_primary(&m.name, None)?;
            }
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
    pub(crate) fn new<S: Into<String>>(
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
            bases: Vec::new(),
            plan: Plan::single(),
        })
    }

    /// Decides the primary metrics at `plan`'s looks (set by the runner from its schedule).
    pub(crate) fn set_plan(&mut self, plan: Plan) {
        self.plan = plan;
    }

    /// The looks its primary decisions are made at.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Splits the variants into groups, each led by one of `bases` (the first variant always
    /// leads one): a group's variants are compared with its base only. Bases must be variants.
    pub(crate) fn set_bases(&mut self, bases: &[String]) -> Result<(), ReportError> {
        for b in bases {
            self.check_variant(b)?;
        }
        let mut leads: Vec<String> = self
            .variants
            .iter()
            .enumerate()
            .filter(|(i, v)| *i == 0 || bases.contains(v))
            .map(|(_, v)| v.clone())
            .collect();
        if leads.len() == 1 {
            leads.clear();
        }
        self.bases = leads;
        Ok(())
    }

    /// Each group's base, in variant order (the base alone when there is one group).
    pub fn bases(&self) -> Vec<&str> {
        if self.bases.is_empty() {
            vec![self.base()]
        } else {
            self.bases.iter().map(String::as_str).collect()
        }
    }

    /// Whether `variant` leads a group (is compared with nothing).
    pub fn is_base(&self, variant: &str) -> bool {
        self.bases().contains(&variant)
    }

    /// The base `variant` is compared with: its group's.
    pub fn base_of(&self, variant: &str) -> &str {
        let Some(at) = self.variants.iter().position(|v| v == variant) else {
            return self.base();
        };
        self.variants[..=at]
            .iter()
            .rev()
            .find(|v| self.is_base(v))
            .map_or(self.base(), String::as_str)
    }

    /// Each group as a comparison of its own (its variants, base first, and their samples);
    /// one group: the comparison itself.
    pub fn groups(&self) -> Vec<Comparison> {
        if self.bases.is_empty() {
            return vec![self.clone()];
        }
        let bases = self.bases();
        let mut groups: Vec<Vec<String>> = Vec::new();
        for v in &self.variants {
            if bases.contains(&v.as_str()) {
                groups.push(Vec::new());
            }
            groups
                .last_mut()
                .expect("the first variant is a base")
                .push(v.clone());
        }
        groups
            .into_iter()
            .map(|variants| {
                let metrics = self
                    .metrics
                    .iter()
                    .map(|m| Metric {
                        samples: m
                            .samples
                            .iter()
                            .filter(|(v, _)| variants.contains(v))
                            .map(|(v, s)| (v.clone(), s.clone()))
                            .collect(),
                        ..m.clone()
                    })
                    .collect();
                Comparison {
                    name: self.name.clone(),
                    variants,
                    metrics,
                    bases: Vec::new(),
                    plan: self.plan.clone(),
                }
            })
            .collect()
    }

    /// The comparison's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All variants, base first.
    pub fn variants(&self) -> &[String] {
        &self.variants
    }

    /// The base variant (the first).
    pub fn base(&self) -> &str {
        &self.variants[0]
    }

    /// Metrics in the order they were declared (the table's row order, primaries first).
    pub fn metrics(&self) -> &[Metric] {
        &self.metrics
    }

    /// The metrics the comparison is decided on.
    pub fn primaries(&self) -> impl Iterator<Item = &Metric> {
        self.metrics.iter().filter(|m| m.primary)
    }

    /// The boots a side SAME needs on every primary metric ([`crate::stats::same_min_boots`]:
    /// more than the usual 9 where an absolute magnitude is small against a bounded range); a
    /// relative magnitude, whose size in units comes with the base's boots, counts as 9.
    pub fn same_min_boots(&self) -> usize {
        self.primaries()
            .map(|m| match m.magnitude {
                Magnitude::Absolute(x) => crate::stats::same_min_boots(x, m.range),
                Magnitude::Relative { .. } => crate::stats::SAME_MIN_BOOTS,
            })
            .max()
            .unwrap_or(crate::stats::SAME_MIN_BOOTS)
    }

    /// Declares a metric with the smallest change that matters for it (in `unit`, e.g. 2.0 for
    /// two percentage points, or [`Magnitude::relative`]).
    pub(crate) fn add_metric(
        &mut self,
        name: &str,
        unit: &str,
        direction: Direction,
        magnitude: impl Into<Magnitude>,
    ) -> Result<&mut Comparison, ReportError> {
        let magnitude = magnitude.into();
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
        self.check_magnitude(name, magnitude)?;
        let samples = self
            .variants
            .iter()
            .map(|v| (v.clone(), Vec::new()))
            .collect();
        self.metrics.push(Metric {
            name: name.to_string(),
            unit: unit.to_string(),
            direction,
            magnitude,
            range: Range::ANY,
            primary: false,
            samples,
        });
        Ok(self)
    }

    fn check_magnitude(&self, metric: &str, magnitude: Magnitude) -> Result<(), ReportError> {
        if magnitude.is_valid() {
            Ok(())
        } else {
            Err(ReportError::BadMagnitude {
                comparison: self.name.clone(),
                metric: metric.to_string(),
                value: magnitude.to_string(),
            })
        }
    }

    /// The values `metric` can take; the table's %-of-base intervals are cut to them.
    pub(crate) fn set_range(&mut self, metric: &str, range: Range) -> Result<(), ReportError> {
        let index = self.metric_index(metric)?;
        self.metrics[index].range = range;
        Ok(())
    }

    /// Decides the comparison on `metric` too, with `magnitude` as the smallest change that
    /// matters (`None`: the metric's own). Primaries move to the front of the table.
    pub(crate) fn make_primary(
        &mut self,
        metric: &str,
        magnitude: Option<Magnitude>,
    ) -> Result<(), ReportError> {
        let index = self.metric_index(metric)?;
        if let Some(magnitude) = magnitude {
            self.check_magnitude(metric, magnitude)?;
            self.metrics[index].magnitude = magnitude;
        }
        self.metrics[index].primary = true;
        // Stable: primaries first, each group in declaration order.
        self.metrics.sort_by_key(|m| !m.primary);
        Ok(())
    }

    /// The metric called `name`.
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

    pub(crate) fn check_variant(&self, variant: &str) -> Result<(), ReportError> {
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
    pub(crate) fn add_sample(
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

    /// Whether any sample was recorded.
    pub(crate) fn sample_count(&self) -> usize {
        self.metrics
            .iter()
            .flat_map(|m| m.samples.values())
            .map(Vec::len)
            .sum()
    }

    /// The summary (n, mean, spread, median) of `variant`'s samples of `metric`.
    pub fn summary(&self, metric: &str, variant: &str) -> Result<Summary, ReportError> {
        Summary::of(self.samples(metric, variant)?)
            .map_err(|source| self.stats(metric, variant, source))
    }

    fn stats(&self, metric: &str, variant: &str, source: crate::stats::StatsError) -> ReportError {
        ReportError::Stats {
            comparison: self.name.clone(),
            metric: metric.to_string(),
            variant: variant.to_string(),
            source,
        }
    }

    /// `variant` against its base for `metric`: what a table row shows.
    pub(crate) fn change(&self, metric: &str, variant: &str) -> Result<Change, ReportError> {
        let range = self.metric(metric)?.range;
        let base = self.samples(metric, self.base_of(variant))?;
        let other = self.samples(metric, variant)?;
        Change::between(base, other, range).map_err(|source| self.stats(metric, variant, source))
    }

    /// The decision for `variant` against its base on `metric`, with its magnitude: a primary
    /// metric's as made with all the others of its group ([`Comparison::verdicts`]); any
    /// other's as if it were decided alone, at one look.
    pub fn verdict(&self, metric: &str, variant: &str) -> Result<Verdict, ReportError> {
        let m = self.metric(metric)?;
        self.check_variant(variant)?;
        if m.primary && !self.is_base(variant) {
            return self
                .verdicts()
                .into_iter()
                .find(|(m, v, _)| *m == metric && *v == variant)
                .map(|(_, _, verdict)| verdict)
                .expect("every primary metric of every variant but the bases is decided");
        }
        let base = self.samples(metric, self.base_of(variant))?;
        let other = self.samples(metric, variant)?;
        decide(base, other, m.magnitude, m.range)
            .map_err(|source| self.stats(metric, variant, source))
    }

    /// Every primary metric's verdict for every variant but the bases, in table order: each
    /// group's decisions made together under the comparison's plan (`stats::decide_all`).
    pub fn verdicts(&self) -> Vec<(&str, &str, Result<Verdict, ReportError>)> {
        let pairs: Vec<(&Metric, &str)> = self
            .primaries()
            .flat_map(|m| {
                self.variants
                    .iter()
                    .filter(|v| !self.is_base(v))
                    .map(move |v| (m, v.as_str()))
            })
            .collect();
        let mut verdicts: Vec<Option<Result<Verdict, ReportError>>> =
            (0..pairs.len()).map(|_| None).collect();
        for base in self.bases() {
            let members: Vec<usize> = (0..pairs.len())
                .filter(|&i| self.base_of(pairs[i].1) == base)
                .collect();
            let family: Vec<Pair<'_>> = members
                .iter()
                .map(|&i| {
                    let (m, v) = pairs[i];
                    Pair {
                        base: samples_of(m, base),
                        variant: samples_of(m, v),
                        magnitude: m.magnitude,
                        range: m.range,
                    }
                })
                .collect();
            for (&i, decided) in members.iter().zip(decide_all(&family, &self.plan)) {
                let (m, v) = pairs[i];
                verdicts[i] = Some(decided.map_err(|source| self.stats(&m.name, v, source)));
            }
        }
        pairs
            .into_iter()
            .zip(verdicts)
            .map(|((m, v), verdict)| {
                (
                    m.name.as_str(),
                    v,
                    verdict.expect("every pair belongs to its base's group"),
                )
            })
            .collect()
    }

    /// Every metric's numbers, in table order: what the text table and the HTML report show,
    /// computed once here so both always agree. For one group: a grouped comparison's table
    /// and page show each of [`Comparison::groups`] this way. Secondary metrics' p-values are adjusted by
    /// Holm over all of them (every secondary metric against every variant).
    pub(crate) fn rows(&self) -> Vec<MetricRow<'_>> {
        let mut rows: Vec<MetricRow<'_>> =
            self.metrics.iter().map(|m| self.metric_row(m)).collect();
        let mut family: Vec<(usize, usize, f64)> = Vec::new();
        for (r, row) in rows.iter().enumerate() {
            if row.metric.primary {
                continue;
            }
            for (o, other) in row.others.iter().enumerate() {
                if let Some(ch) = &other.change {
                    family.push((r, o, ch.p_value));
                }
            }
        }
        let adjusted = holm(&family.iter().map(|f| f.2).collect::<Vec<_>>());
        for (&(r, o, _), adj) in family.iter().zip(adjusted) {
            let metric = rows[r].metric;
            let other = &mut rows[r].others[o];
            other.adjusted_p = Some(adj);
            let ch = other.change.as_ref().expect("in the family");
            let material = ch.shift.abs() > metric.magnitude.in_units(ch.base.mean);
            other.marker = match adj {
                p if material && p < STRONG_MARK_ALPHA => "**",
                p if material && p < MARK_ALPHA => "*",
                _ => "",
            };
            if !other.marker.is_empty() {
                other.judgement = metric.direction.judge(ch.shift);
            }
        }
        rows
    }

    fn metric_row<'a>(&'a self, m: &'a Metric) -> MetricRow<'a> {
        let others = self.variants[1..]
            .iter()
            .map(|v| {
                let change = self.change(&m.name, v).ok();
                let verdict = m.primary.then(|| self.verdict(&m.name, v).ok()).flatten();
                let judgement = verdict
                    .as_ref()
                    .filter(|v| v.decision == Decision::Different)
                    .and_then(|v| m.direction.judge(v.change()));
                VariantChange {
                    variant: v,
                    summary: self.summary(&m.name, v).ok(),
                    change,
                    verdict,
                    adjusted_p: None,
                    marker: "",
                    judgement,
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

    /// The comparison as an LKP-style table, the primary verdicts first (see `super::table`);
    /// grouped, one such table per group, each against its own base.
    pub fn table(&self) -> String {
        let groups = self.groups();
        if groups.len() == 1 {
            return self.table_of(&self.rows());
        }
        let tables: Vec<String> = groups
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let head = format!("group {}/{}: base {}", i + 1, groups.len(), g.base());
                format!("{head}\n{}", g.table())
            })
            .collect();
        tables.join("\n")
    }

    /// [`Comparison::table`] from rows already computed.
    pub(crate) fn table_of(&self, rows: &[MetricRow<'_>]) -> String {
        super::table::render(self, rows)
    }

    /// Writes `<dir>/<name>.json` (name made file-safe) atomically: a reader never sees a
    /// half-written file.
    #[cfg(test)]
    pub(crate) fn write_json(&self, dir: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
        super::write_json_atomic(dir, &self.name, self)
    }

    /// Reads a comparison stored as JSON.
    pub fn read_json(path: &std::path::Path) -> anyhow::Result<Comparison> {
        super::read_json(path)
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.table())
    }
}

/// A verdict's numbers in one line: shift, interval, p-values, n.
pub(crate) fn describe(v: &Verdict, unit: &str) -> String {
    // A change of a percentage is in points, not percent.
    let unit = unit_suffix(difference_unit(unit));
    let interval = match v.interval {
        Some(ci) => format!(
            "{}% interval [{}, {}]{unit}",
            crate::stats::SAME_CONFIDENCE * 100.0,
            fmt_signed(ci.low),
            fmt_signed(ci.high)
        ),
        None => "no interval yet (fewer than 4 boots a side)".to_string(),
    };
    let means = match v.mean_interval {
        Some(ci) => format!(" [{}, {}]", fmt_signed(ci.low), fmt_signed(ci.high)),
        None => String::new(),
    };
    format!(
        "shift {}{unit}, {interval}, means differ by {}{means}{unit}, magnitude {}{unit}, p={} \
         (looks and decisions counted; Mann-Whitney {}, KS {}), n={}/{}",
        fmt_signed(v.shift),
        fmt_signed(v.mean_difference),
        fmt_value(v.magnitude),
        fmt_p(v.p),
        fmt_p(v.mann_whitney_p),
        fmt_p(v.ks_p),
        v.n_base,
        v.n_variant
    )
}

/// The unit of a difference of a metric in `unit`: percentage points for a percentage.
pub(crate) fn difference_unit(unit: &str) -> &str {
    if unit == "%" {
        "pp"
    } else {
        unit
    }
}

/// One metric's row: the base's summary and every other variant against it.
#[derive(Debug, Clone)]
pub(crate) struct MetricRow<'a> {
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
pub(crate) struct VariantChange<'a> {
    pub variant: &'a str,
    pub summary: Option<Summary>,
    /// `None` when either side has no samples.
    pub change: Option<Change>,
    /// A primary metric's decision.
    pub verdict: Option<Verdict>,
    /// A secondary metric's p after Holm's adjustment over all secondary comparisons.
    pub adjusted_p: Option<f64>,
    /// Secondary metrics: `**` (adjusted p<0.01), `*` (adjusted p<0.05) with the shift beyond
    /// the magnitude, or empty.
    pub marker: &'static str,
    /// "better"/"worse" for a marked or DIFFERENT change, by the metric's direction.
    pub judgement: Option<&'static str>,
}
