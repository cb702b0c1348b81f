//! What a comparison of a variant with the base decides on one metric, and the numbers behind
//! it; how the decisions are made is `sequential`.
//!
//! - DIFFERENT: a change is shown at the 1% level ([`DIFFERENT_ALPHA`], family-wise over every
//!   look of the adaptive schedule and every primary decision of the comparison) and the
//!   Hodges-Lehmann shift is beyond the metric's magnitude, the smallest change that matters, or
//!   the shift is not but the difference of the means is, in the same direction
//!   ([`Verdict::change`]): a change in how often boots land in a mode (30% to 70% of boots in
//!   the high one) moves the mean by twice the magnitude while the typical boot stays put.
//!   It says "significant, and the estimate beyond the magnitude", not "beyond the magnitude
//!   with confidence": a true change a little under the magnitude is sometimes DIFFERENT (how
//!   often is `lab bench verdicts`' 0.8x column).
//! - SAME: after at least [`same_min_boots`] boots a side ([`SAME_MIN_BOOTS`], more for a small
//!   magnitude on a bounded metric), the [`SAME_CONFIDENCE`] intervals of both the shift (the
//!   typical boot) and the difference of the means lie inside ±magnitude.
//! - UNKNOWN: neither; more boots may decide it.

use serde::{Deserialize, Serialize};
use statrs::distribution::{ContinuousCDF, Normal};

use super::{Interval, Summary};

/// The chance of a false DIFFERENT in a whole comparison (all looks, all primary decisions)
/// is at most this.
pub const DIFFERENT_ALPHA: f64 = 0.01;

/// SAME needs the intervals of the shift and of the means at this confidence inside the
/// magnitude (two one-sided tests at 2.5% each: at 5% each, looking after every stage let a
/// change right at the magnitude pass as SAME in 10-12% of simulated runs).
pub const SAME_CONFIDENCE: f64 = 0.95;

/// SAME needs at least this many boots a side, whatever the metric. A change can live in a
/// minority of boots (a thread the balancer moves in some boots, a device that fails now and
/// then) and leave the typical boot and the boots seen so far alike: a change carried by 30%
/// of the boots is missing from all of 8 boots in 5.8% of runs, from all of 9 in 4.0%. A
/// metric with a bounded range needs more where its magnitude is small against that range
/// ([`same_min_boots`]); for an unbounded one this is the limit: a change of 1.5 magnitudes
/// carried by fewer than 30% of the boots can pass as SAME more often than 5% (`lab bench
/// verdicts`' lognormal rows measure how often).
pub const SAME_MIN_BOOTS: usize = 9;

/// The size of change, in magnitudes, that SAME's minimum keeps from passing as SAME in more
/// than [`SAME_MISS`] of runs however few boots carry it (`lab bench verdicts`' 1.5x column).
pub const SAME_GUARDED_SIZE: f64 = 1.5;

/// The chance [`same_min_boots`] allows that no boot of the variant shows such a change.
pub const SAME_MISS: f64 = 0.05;

/// The fewest boots a side SAME needs on a metric with smallest change `magnitude` (in the
/// metric's unit) and values in `range`. A change of the mean by [`SAME_GUARDED_SIZE`]
/// magnitudes carried by a share `q` of the boots moves each of them by at most the range's
/// width `w`, so `q >= 1.5 M / w`; all of `n` boots miss it with chance `(1 - q)^n`, at most
/// [`SAME_MISS`] from `n >= ln 0.05 / ln(1 - 1.5 M / w)`: 9 boots at 20 points of a share, 19
/// at 10, 39 at 5. A boot that does carry it puts the means' interval past the magnitude.
/// Unbounded metrics (and magnitudes of a third of the range or more): [`SAME_MIN_BOOTS`].
pub fn same_min_boots(magnitude: f64, range: super::Range) -> usize {
    let width = range.high - range.low;
    let q = SAME_GUARDED_SIZE * magnitude / width;
    if !(q.is_finite() && q > 0.0 && q < 1.0) {
        return SAME_MIN_BOOTS;
    }
    let n = (SAME_MISS.ln() / (1.0 - q).ln()).ceil();
    // Past a million boots SAME is unreachable in practice; the cap keeps the cast exact.
    (n.min(1e6) as usize).max(SAME_MIN_BOOTS)
}

/// The smallest change of a metric that matters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Magnitude {
    /// In the metric's unit (5.0 for five percentage points of a share).
    Absolute(f64),
    /// A fraction of the base's mean (`{"relative": 0.5}`: half the base), for counts whose
    /// level depends on the host.
    Relative {
        /// The fraction (0.05: 5% of the base's mean).
        relative: f64,
    },
}

impl Magnitude {
    /// A fraction of the base's mean.
    pub fn relative(fraction: f64) -> Magnitude {
        Magnitude::Relative { relative: fraction }
    }

    /// In the metric's unit, for a base whose mean is `base_mean`.
    pub fn in_units(self, base_mean: f64) -> f64 {
        match self {
            Magnitude::Absolute(x) => x.abs(),
            Magnitude::Relative { relative } => (relative * base_mean).abs(),
        }
    }

    /// A finite, non-negative number.
    pub fn is_valid(self) -> bool {
        let x = match self {
            Magnitude::Absolute(x) => x,
            Magnitude::Relative { relative } => relative,
        };
        x.is_finite() && x >= 0.0
    }
}

impl std::str::FromStr for Magnitude {
    type Err = String;

    /// `20` (in the metric's unit) or `50%` (of the base's mean).
    fn from_str(text: &str) -> Result<Magnitude, String> {
        let text = text.trim();
        let (number, relative) = match text.strip_suffix('%') {
            Some(n) => (n, true),
            None => (text, false),
        };
        let value: f64 = number.trim().parse().map_err(|_| {
            format!("magnitude {text:?}: write a number in the metric's unit (20) or a percentage of the base (50%)")
        })?;
        let m = if relative {
            Magnitude::relative(value / 100.0)
        } else {
            Magnitude::Absolute(value)
        };
        if m.is_valid() {
            Ok(m)
        } else {
            Err(format!("magnitude {text:?}: must be a finite number >= 0"))
        }
    }
}

impl From<f64> for Magnitude {
    fn from(x: f64) -> Magnitude {
        Magnitude::Absolute(x)
    }
}

impl std::fmt::Display for Magnitude {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Magnitude::Absolute(x) => write!(f, "{}", super::fmt_value(*x)),
            Magnitude::Relative { relative } => write!(f, "{}% of the base", relative * 100.0),
        }
    }
}

/// What a comparison decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Decision {
    /// A change is shown (1% family-wise) and its estimate (the shift, or the difference of
    /// the means: [`Verdict::change`]) is beyond the magnitude.
    Different,
    /// The typical boot and the mean are within the magnitude of the base's (95%), after at
    /// least [`same_min_boots`] boots a side.
    Same,
    /// Neither yet: more boots may decide it.
    Unknown,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decision::Different => "DIFFERENT",
            Decision::Same => "SAME",
            Decision::Unknown => "UNKNOWN",
        })
    }
}

/// A variant against the base on one metric: the decision and the numbers behind it, all taken
/// at the look the decision was made at (an adaptive run's later boots of the base, booted for
/// other variants, do not change a decision already made).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// What was decided.
    pub decision: Decision,
    /// The smallest change that matters, in the metric's unit.
    pub magnitude: f64,
    /// Hodges-Lehmann shift of the variant from the base, in the metric's unit.
    pub shift: f64,
    /// The exact `SAME_CONFIDENCE` interval of the shift (never clipped: its ends are
    /// differences of real samples, so it stays inside what a difference of the metric can be,
    /// and its coverage holds); `None` while the samples are too few for it (fewer than 4 a
    /// side).
    pub interval: Option<Interval>,
    /// The `SAME_CONFIDENCE` interval of the difference of the means (Welch's t), variant minus
    /// base: SAME needs it inside the magnitude too, so a change the typical boot hides (the
    /// base at 0 in most boots and far off in a few) is not SAME. `None` with fewer than 2
    /// boots a side.
    #[serde(default)]
    pub mean_interval: Option<Interval>,
    /// The p-value DIFFERENT compares with [`DIFFERENT_ALPHA`]: each look's Mann-Whitney p
    /// divided by that look's share of the error, the smallest over the looks so far, and
    /// adjusted by Holm's method over the comparison's primary decisions (`sequential`).
    pub p: f64,
    /// Whether `p` is at most [`DIFFERENT_ALPHA`]: a change is shown, in the direction of
    /// `shift`. DIFFERENT is this and a shift beyond the magnitude; a bisect also acts on a
    /// change under the magnitude.
    #[serde(default)]
    pub significant: bool,
    /// The exact two-sided Mann-Whitney p at the look decided on, unadjusted.
    pub mann_whitney_p: f64,
    /// The exact two-sided Kolmogorov-Smirnov p at that look, shown, not decided on.
    pub ks_p: f64,
    /// Samples of the base the verdict was taken on.
    pub n_base: usize,
    /// Samples of the variant the verdict was taken on.
    pub n_variant: usize,
    /// Difference of the means, for the reader.
    pub mean_difference: f64,
    /// The boots a side SAME needs on this metric ([`same_min_boots`]; records written before
    /// it: [`SAME_MIN_BOOTS`]).
    #[serde(default = "default_same_min_boots")]
    pub same_min_boots: usize,
}

fn default_same_min_boots() -> usize {
    SAME_MIN_BOOTS
}

/// [`Verdict::change`] from its parts: the one rule the decision and the verdict's readers share.
pub(crate) fn standing_change(shift: f64, mean_difference: f64, magnitude: f64) -> f64 {
    if shift.abs() <= magnitude
        && mean_difference.abs() > magnitude
        && shift * mean_difference >= 0.0
    {
        mean_difference
    } else {
        shift
    }
}

impl Verdict {
    /// The change a DIFFERENT stands on: the shift where it is beyond the magnitude, else the
    /// difference of the means where that is beyond it in the same direction (a change in how
    /// often boots land in a mode moves the mean long before the typical boot), else the
    /// shift. Its sign is the change's direction.
    pub fn change(&self) -> f64 {
        standing_change(self.shift, self.mean_difference, self.magnitude)
    }

    /// The direction of the change shown: the shift's sign, or the means' where the typical
    /// boot did not move (+1, -1, or 0 with neither).
    pub fn direction(&self) -> f64 {
        let x = if self.shift != 0.0 {
            self.shift
        } else {
            self.mean_difference
        };
        if x == 0.0 {
            0.0
        } else {
            x.signum()
        }
    }
}

impl Verdict {
    /// Boots per variant that would probably decide an UNKNOWN comparison at this spread: for
    /// SAME when the shift is inside the magnitude (never fewer than its `same_min_boots`), for
    /// DIFFERENT when it is outside. A normal approximation (pooled standard deviation, the
    /// rank tests' efficiency of about 0.95 is ignored, the DIFFERENT level that of one look
    /// with a tenth of the error, about what the last looks of a schedule get), for the message
    /// that says more boots are needed; `None` when it does not apply (decided, no spread, or a
    /// shift right at the magnitude).
    pub fn boots_needed(&self, base: &Summary, variant: &Summary) -> Option<usize> {
        if self.decision != Decision::Unknown {
            return None;
        }
        let pooled = {
            let (sa, sb) = (base.stddev?, variant.stddev?);
            ((sa * sa + sb * sb) / 2.0).sqrt()
        };
        let z = |p: f64| Normal::standard().inverse_cdf(p);
        let gap = (self.magnitude - self.shift.abs()).abs();
        if pooled == 0.0 || gap == 0.0 {
            return None;
        }
        let same = self.shift.abs() < self.magnitude;
        // SAME: the interval's half width must fit the gap (two one-sided tests, 80% power);
        // DIFFERENT: the shift must stand out at a tenth of the 1% level, two-sided.
        let (alpha_z, effect) = if same {
            (z(1.0 - (1.0 - SAME_CONFIDENCE) / 2.0), gap)
        } else {
            (z(1.0 - DIFFERENT_ALPHA / 20.0), self.shift.abs())
        };
        let n = 2.0 * ((alpha_z + z(0.8)) * pooled / effect).powi(2);
        let floor = if same { self.same_min_boots } else { 0 };
        Some(
            (n.ceil() as usize)
                .max(self.n_base.max(self.n_variant) + 1)
                .max(floor),
        )
    }
}

/// Holm's step-down adjustment of `p` (any order; the result is in the same order): the
/// family-wise error rate stays at most alpha when each adjusted value is compared with alpha.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (rank, &i) in order.iter().enumerate() {
        let value = ((m - rank) as f64 * p[i]).min(1.0);
        running = running.max(value);
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_magnitudes_scale_with_the_base() {
        assert_eq!(Magnitude::relative(0.5).in_units(-300.0), 150.0);
        assert_eq!(Magnitude::Absolute(-2.0).in_units(100.0), 2.0);
        assert!(!Magnitude::relative(f64::NAN).is_valid());
        assert_eq!("20".parse::<Magnitude>(), Ok(Magnitude::Absolute(20.0)));
        assert_eq!("50%".parse::<Magnitude>(), Ok(Magnitude::relative(0.5)));
        assert!("-1".parse::<Magnitude>().is_err());
        assert!("much".parse::<Magnitude>().unwrap_err().contains("much"));
        assert!(Magnitude::Absolute(0.0).is_valid());
    }

    #[test]
    fn holm_matches_a_hand_computation() {
        // p sorted: 0.01, 0.02, 0.03, 0.04 with m = 4: 4*0.01 = 0.04; 3*0.02 = 0.06;
        // 2*0.03 = 0.06; 1*0.04 = 0.04 -> 0.06 (never below the one before).
        let adjusted = holm(&[0.03, 0.01, 0.04, 0.02]);
        let want = [0.06, 0.04, 0.06, 0.06];
        for (got, want) in adjusted.iter().zip(want) {
            assert!((got - want).abs() < 1e-12, "{adjusted:?}");
        }
        assert_eq!(holm(&[0.5, 0.9]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
        assert_eq!(holm(&[0.2]), vec![0.2]);
    }

    #[test]
    fn the_same_minimum_misses_a_change_in_30_percent_of_boots_rarely() {
        // What SAME_MIN_BOOTS' comment says: 0.7^8 > 5% > 0.7^9.
        assert!(0.7_f64.powi(SAME_MIN_BOOTS as i32) < 0.05);
        assert!(0.7_f64.powi(SAME_MIN_BOOTS as i32 - 1) > 0.05);
    }

    #[test]
    fn the_same_minimum_grows_as_the_magnitude_shrinks_against_the_range() {
        use crate::Range;
        let share = |m: f64| same_min_boots(m, Range::PERCENT);
        assert_eq!((share(20.0), share(10.0), share(5.0)), (9, 19, 39));
        // Each is the fewest that misses a change carried by 1.5 M / 100 of the boots at most
        // 5% of the time.
        for m in [20.0, 10.0, 5.0, 2.0] {
            let q: f64 = 1.5 * m / 100.0;
            let n = share(m) as i32;
            assert!((1.0 - q).powi(n) <= SAME_MISS, "{m}: {n}");
            assert!(n == 9 || (1.0 - q).powi(n - 1) > SAME_MISS, "{m}: {n}");
        }
        // Unbounded, half-bounded or a magnitude of the whole range: the floor.
        assert_eq!(same_min_boots(1.0, Range::ANY), SAME_MIN_BOOTS);
        assert_eq!(same_min_boots(1.0, Range::NON_NEGATIVE), SAME_MIN_BOOTS);
        assert_eq!(share(80.0), SAME_MIN_BOOTS);
        assert_eq!(share(0.0), SAME_MIN_BOOTS);
    }
}
