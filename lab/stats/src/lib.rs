//! Small-sample statistics for side-by-side runs: one boot is one sample, so a comparison has
//! 3 to about 30 samples per variant and nothing here may assume normality or large n.
//!
//! - [`Summary`]: n, mean, sample stddev, min, max, median.
//! - `rank`: the exact Mann-Whitney and Kolmogorov-Smirnov tests and the Hodges-Lehmann shift
//!   with its distribution-free interval, ties included, at any sample size.
//! - `decision`: the verdict types (DIFFERENT, SAME or UNKNOWN, with the numbers behind it) and
//!   Holm's adjustment for the metrics only shown.
//! - `sequential`: the decisions of a comparison, all its primary metrics and variants at
//!   once, over the looks of its adaptive schedule, with the error of a false DIFFERENT split
//!   over the looks and the decisions so that it stays at most 1% in all.
//! - `schedule`: fixed or adaptive boot counts, and the seeded, balanced boot order.
//! - `Change`: the numbers a table row shows for a variant against the base.
//!
//! A crate of its own, below everything else in the lab, and compiled optimised in debug
//! builds too (the workspace's `profile.dev.package`): `lab bench verdicts` runs its decisions
//! hundreds of thousands of times.
//!
//! Everything is deterministic and total: the same input gives the same output, and empty or
//! non-finite input gives an error or a `None` field, never a panic.
//!
//! The lab re-exports it as `lab::stats`.
#![deny(missing_docs)]

pub mod decision;
pub mod rank;
pub mod schedule;
pub mod sequential;

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use decision::{holm, Decision, Magnitude, Verdict};
pub use decision::{same_min_boots, DIFFERENT_ALPHA, SAME_CONFIDENCE, SAME_MIN_BOOTS};
pub use schedule::{next_stage, BootOrder, Repetitions, Until};
pub use sequential::{decide, decide_all, Pair, Plan};

/// A value with about four significant digits, in at most ~10 characters.
pub fn fmt_value(x: f64) -> String {
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

/// Confidence of the intervals tables show.
pub const TABLE_CONFIDENCE: f64 = 0.95;

/// Why a statistic could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StatsError {
    /// There are no samples.
    #[error("no samples")]
    Empty,
    /// A sample is NaN or infinite.
    #[error("sample #{index} is {value}, not a finite number")]
    NonFinite {
        /// Its position.
        index: usize,
        /// Its value.
        value: f64,
    },
    /// The base's samples are the problem.
    #[error("base samples: {0}")]
    Base(Box<StatsError>),
    /// The variant's samples are the problem.
    #[error("variant samples: {0}")]
    Variant(Box<StatsError>),
}

/// Descriptive statistics of one variant's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Their mean.
    pub mean: f64,
    /// Sample standard deviation (n-1 denominator); `None` for a single sample.
    pub stddev: Option<f64>,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// The median.
    pub median: f64,
}

impl Summary {
    /// Summarises `samples`; errors on an empty slice or a NaN/infinite sample.
    pub fn of(samples: &[f64]) -> Result<Summary, StatsError> {
        check(samples)?;
        let n = samples.len();
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let min = sorted[0];
        let max = sorted[n - 1];
        let mean = mean_of(samples, min);
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            // Halves first: no overflow for values near f64::MAX.
            sorted[n / 2 - 1] / 2.0 + sorted[n / 2] / 2.0
        };
        let stddev = (n > 1).then(|| {
            let ss: f64 = samples.iter().map(|x| (x - mean).powi(2)).sum();
            (ss / (n - 1) as f64).sqrt()
        });
        Ok(Summary {
            n,
            mean,
            stddev,
            min,
            max,
            median,
        })
    }

    /// Relative standard deviation in percent of |mean| (LKP's "± x%"); `None` without a
    /// stddev or with a zero mean.
    pub fn stddev_pct(&self) -> Option<f64> {
        let sd = self.stddev?;
        (self.mean != 0.0).then(|| sd / self.mean.abs() * 100.0)
    }
}

/// Mean computed as an offset from the minimum: all-equal samples give exactly that value, and
/// large values with small spread lose less precision.
fn mean_of(samples: &[f64], min: f64) -> f64 {
    let offset: f64 = samples.iter().map(|x| x - min).sum();
    min + offset / samples.len() as f64
}

fn check(samples: &[f64]) -> Result<(), StatsError> {
    if samples.is_empty() {
        return Err(StatsError::Empty);
    }
    match samples.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(StatsError::NonFinite {
            index,
            value: samples[index],
        }),
        None => Ok(()),
    }
}

/// A closed interval `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower end.
    pub low: f64,
    /// The upper end.
    pub high: f64,
}

impl Interval {
    /// Whether `x` is inside, ends included.
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// The values a metric can take (a share: 0 to 100). Intervals of a change are clipped to what
/// the range allows: a share of 6% cannot fall by more than 6 points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Range {
    #[serde(
        serialize_with = "bound::finite_or_null",
        deserialize_with = "bound::low"
    )]
    /// The lowest value (`-inf`: none).
    pub low: f64,
    #[serde(
        serialize_with = "bound::finite_or_null",
        deserialize_with = "bound::high"
    )]
    /// The highest value (`inf`: none).
    pub high: f64,
}

impl Default for Range {
    fn default() -> Range {
        Range::ANY
    }
}

impl Range {
    /// Any real number.
    pub const ANY: Range = Range {
        low: f64::NEG_INFINITY,
        high: f64::INFINITY,
    };
    /// Counts, times, rates: never below 0.
    pub const NON_NEGATIVE: Range = Range {
        low: 0.0,
        high: f64::INFINITY,
    };
    /// A percentage share.
    pub const PERCENT: Range = Range {
        low: 0.0,
        high: 100.0,
    };

    /// Values from `low` to `high`.
    pub fn new(low: f64, high: f64) -> Range {
        Range { low, high }
    }

    /// Whether it is [`Range::ANY`].
    pub fn is_any(&self) -> bool {
        *self == Range::ANY
    }

    /// An interval of a change in percent of a base whose mean is `base_mean`, cut to the
    /// changes that keep that mean inside the range (a share of 6% cannot fall by more than
    /// 100%). For display only: decisions use the exact interval in the metric's unit.
    pub fn clip_pct(&self, pct: Interval, base_mean: f64) -> Interval {
        let scale = 100.0 / base_mean.abs();
        let (floor, ceiling) = (
            (self.low - base_mean) * scale,
            (self.high - base_mean) * scale,
        );
        let (floor, ceiling) = (floor.min(ceiling), floor.max(ceiling));
        let low = pct.low.max(floor).min(ceiling);
        let high = pct.high.min(ceiling).max(low);
        Interval { low, high }
    }
}

/// Open bounds as `null` in JSON (which has no infinity).
mod bound {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn finite_or_null<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_finite() {
            s.serialize_f64(*x)
        } else {
            s.serialize_none()
        }
    }

    pub(super) fn low<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NEG_INFINITY))
    }

    pub(super) fn high<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
    }
}

/// What a table row shows of a variant against the base.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The base's samples, summarised.
    pub base: Summary,
    /// The variant's samples, summarised.
    pub variant: Summary,
    /// variant mean - base mean, in the metric's unit.
    pub difference: f64,
    /// difference / |base mean| * 100 (so its sign is always the difference's); `None` when
    /// the base mean is 0.
    pub pct_change: Option<f64>,
    /// Hodges-Lehmann shift, in the metric's unit.
    pub shift: f64,
    /// The exact [`TABLE_CONFIDENCE`] distribution-free interval of the shift; `None` with too
    /// few samples (4 a side give 95%).
    pub shift_ci95: Option<Interval>,
    /// `shift_ci95` in percent of |base mean|, cut to what the metric's range allows (the base
    /// mean taken as exact: it is there to read the table; decisions use the shift in the
    /// metric's unit).
    pub pct_change_ci95: Option<Interval>,
    /// The exact two-sided Mann-Whitney p (what Holm's adjustment of the secondary metrics
    /// takes; a primary metric's verdict has its own, adjusted for looks and decisions).
    pub p_value: f64,
    /// The same Mann-Whitney p, by name.
    pub mann_whitney_p: f64,
    /// The exact two-sided Kolmogorov-Smirnov p, shown for the shape of a change (not a
    /// decision: the smaller of two tests' p is not a p-value, it errs more often than it says).
    pub ks_p: f64,
}

impl Change {
    /// Compares `variant` against `base`, whose values lie in `range`. Errors when either side
    /// is empty or has a non-finite sample; one sample per side is allowed (p = 1, no interval).
    pub fn between(base: &[f64], variant: &[f64], range: Range) -> Result<Change, StatsError> {
        let base_summary = Summary::of(base).map_err(|e| StatsError::Base(Box::new(e)))?;
        let variant_summary = Summary::of(variant).map_err(|e| StatsError::Variant(Box::new(e)))?;
        let difference = variant_summary.mean - base_summary.mean;
        let base_nonzero = base_summary.mean != 0.0;
        let pct = |x: f64| x / base_summary.mean.abs() * 100.0;
        let shift_ci95 = rank::shift_interval(base, variant, TABLE_CONFIDENCE).map(|ci| Interval {
            low: ci.low,
            high: ci.high,
        });
        let mann_whitney_p = rank::mann_whitney_p(base, variant);
        let ks_p = rank::kolmogorov_smirnov_p(base, variant);
        Ok(Change {
            pct_change: base_nonzero.then(|| pct(difference)),
            pct_change_ci95: shift_ci95.filter(|_| base_nonzero).map(|ci| {
                range.clip_pct(
                    Interval {
                        low: pct(ci.low),
                        high: pct(ci.high),
                    },
                    base_summary.mean,
                )
            }),
            shift: rank::shift_estimate(base, variant).unwrap_or(0.0),
            shift_ci95,
            p_value: mann_whitney_p,
            mann_whitney_p,
            ks_p,
            base: base_summary,
            variant: variant_summary,
            difference,
        })
    }

    /// variant mean / base mean; `None` when the base mean is 0.
    #[cfg(test)]
    pub fn ratio(&self) -> Option<f64> {
        (self.base.mean != 0.0).then(|| self.variant.mean / self.base.mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn summary_hand_checked() {
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert_eq!(s.mean, 5.0);
        // Sum of squared deviations 32, over n-1 = 7.
        assert!(close(s.stddev.unwrap(), (32.0_f64 / 7.0).sqrt(), 1e-12));
        assert_eq!((s.min, s.max, s.median), (2.0, 9.0, 4.5));
        let odd = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!(odd.median, 2.0);
        assert_eq!(odd.stddev, Some(1.0));
        assert!(close(odd.stddev_pct().unwrap(), 50.0, 1e-12));
    }

    #[test]
    fn summary_degenerate() {
        assert_eq!(Summary::of(&[]), Err(StatsError::Empty));
        let one = Summary::of(&[4.2]).unwrap();
        assert_eq!(
            (one.n, one.mean, one.median, one.stddev),
            (1, 4.2, 4.2, None)
        );
        assert_eq!(one.stddev_pct(), None);
        let flat = Summary::of(&[0.1; 7]).unwrap();
        assert_eq!(flat.mean, 0.1);
        assert_eq!(flat.stddev, Some(0.0));
        assert_eq!(flat.stddev_pct(), Some(0.0));
        let zero = Summary::of(&[0.0, 0.0]).unwrap();
        assert_eq!(zero.stddev_pct(), None);
        match Summary::of(&[1.0, f64::NAN]) {
            Err(StatsError::NonFinite { index: 1, value }) => assert!(value.is_nan()),
            other => panic!("expected NonFinite at 1, got {other:?}"),
        }
        assert!(matches!(
            Summary::of(&[f64::INFINITY]),
            Err(StatsError::NonFinite { index: 0, .. })
        ));
        let huge = Summary::of(&[f64::MAX, f64::MAX]).unwrap();
        assert_eq!(huge.median, f64::MAX);
    }

    #[test]
    fn change_hand_checked() {
        let c = Change::between(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0], Range::ANY).unwrap();
        assert_eq!(c.difference, 4.0);
        assert_eq!(c.pct_change, Some(160.0));
        assert_eq!(c.shift, 4.0);
        // 4 vs 4 apart: 2/70 for both tests.
        assert!(close(c.p_value, 2.0 / 70.0, 1e-12));
        assert!(close(c.ks_p, 2.0 / 70.0, 1e-12));
        // 95% at 4 vs 4: P(U = 0) = 1/70 <= 0.025, P(U <= 1) = 2/70 > 0.025: k = 1, the
        // smallest and largest of the 16 differences.
        let ci = c.shift_ci95.unwrap();
        assert_eq!((ci.low, ci.high), (1.0, 7.0));
        let pct = c.pct_change_ci95.unwrap();
        assert!(close(pct.low, 40.0, 1e-12) && close(pct.high, 280.0, 1e-12));
        // Negative base: %change keeps the sign of the difference.
        let c = Change::between(&[-2.0, -2.0], &[-1.0, -1.0], Range::ANY).unwrap();
        assert_eq!(c.pct_change, Some(50.0));
        assert_eq!(c.ratio(), Some(0.5));
    }

    #[test]
    fn a_share_cannot_fall_below_zero() {
        // Base mean 20%, the variant at 0: the interval's floor is -20 points, -100%.
        let base = [10.0, 20.0, 30.0, 15.0, 25.0, 20.0];
        let variant = [0.0; 6];
        let c = Change::between(&base, &variant, Range::PERCENT).unwrap();
        let pct = c.pct_change_ci95.unwrap();
        assert!(pct.low >= -100.0 - 1e-9, "{pct:?}");
        // The interval in points is the exact one, not cut.
        let ci = c.shift_ci95.unwrap();
        assert_eq!(ci.low, -30.0, "{ci:?}");
        let open = Change::between(&base, &variant, Range::ANY).unwrap();
        assert!(open.pct_change_ci95.unwrap().low < pct.low);
    }

    #[test]
    fn degenerate_change_inputs() {
        assert_eq!(
            Change::between(&[], &[1.0], Range::ANY),
            Err(StatsError::Base(Box::new(StatsError::Empty)))
        );
        assert_eq!(
            Change::between(&[1.0], &[], Range::ANY),
            Err(StatsError::Variant(Box::new(StatsError::Empty)))
        );
        let c = Change::between(&[1.0], &[2.0], Range::ANY).unwrap();
        assert_eq!(c.p_value, 1.0);
        assert_eq!(c.shift_ci95, None);
        assert_eq!(c.pct_change, Some(100.0));
        let c = Change::between(&[0.0, 0.0, 0.0], &[0.0, 0.0, 1.0], Range::ANY).unwrap();
        assert_eq!(c.pct_change, None);
        assert_eq!(c.pct_change_ci95, None);
        assert_eq!(c.ratio(), None);
        let msg = Change::between(&[1.0], &[f64::NAN], Range::ANY)
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "variant samples: sample #0 is NaN, not a finite number"
        );
    }

    #[test]
    fn ranges_round_trip_through_json() {
        for r in [Range::ANY, Range::PERCENT, Range::NON_NEGATIVE] {
            let text = serde_json::to_string(&r).unwrap();
            let back: Range = serde_json::from_str(&text).unwrap();
            assert_eq!(back, r, "{text}");
        }
        assert_eq!(
            serde_json::to_string(&Range::NON_NEGATIVE).unwrap(),
            r#"{"low":0.0,"high":null}"#
        );
    }
}
