//! Small-sample statistics for side-by-side runs: one boot is one sample, so a comparison
//! usually has 3 to 10 samples per variant and nothing here may assume normality or large n.
//!
//! - [`Summary`]: n, mean, sample stddev, min, max, median.
//! - [`Change`]: variant B against base A: difference and %change of the means, a 95% Welch-t
//!   confidence interval, and a two-sided permutation test on the difference of means (exact when
//!   there are at most [`EXACT_LIMIT`] arrangements, else Monte Carlo with a fixed seed), with
//!   Mann-Whitney (the same permutation test on midranks) as a second opinion.
//! - [`Verdict`]: a change is called only when p < alpha AND |difference| > the caller's noise
//!   floor, so a statistically clear but practically irrelevant shift reads as no change.
//! - [`interleaved_order`]: the boot order of a run (A B B A ...), so slow drift on the host
//!   (thermal, other tenants) spreads over all variants instead of landing on one.
//!
//! Everything is deterministic and total: the same input gives the same output, and empty or
//! non-finite input gives an error or a `None` field, never a panic.
//!
//! Resolution of the exact test: the smallest two-sided p with n samples per side is
//! 2 / C(2n, n): 0.1 for 3/3, 0.029 for 4/4, 0.0079 for 5/5. So `P05` needs at least 4 boots
//! per variant and `P01` at least 5.

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Above this many arrangements C(nA+nB, nA) the permutation test samples instead of enumerating.
pub const EXACT_LIMIT: u64 = 100_000;
/// Random arrangements drawn by the Monte Carlo permutation test.
pub const MONTE_CARLO_DRAWS: u64 = 100_000;
/// Fixed seed of the Monte Carlo permutation test: results must not change between runs.
pub const MONTE_CARLO_SEED: u64 = 0x1AB5_EED0_5EED_0001;

/// Why a statistic could not be computed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum StatsError {
    #[error("no samples")]
    Empty,
    #[error("sample #{index} is {value}, not a finite number")]
    NonFinite { index: usize, value: f64 },
    #[error("base samples: {0}")]
    Base(Box<StatsError>),
    #[error("variant samples: {0}")]
    Variant(Box<StatsError>),
}

/// Descriptive statistics of one variant's samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n-1 denominator); `None` for a single sample.
    pub stddev: Option<f64>,
    pub min: f64,
    pub max: f64,
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
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// How a permutation p-value was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PermutationTest {
    /// Every one of the `arrangements` = C(nA+nB, nA) splits was enumerated.
    Exact { arrangements: u64 },
    /// `draws` random splits from a PRNG seeded with `seed`; p = (hits + 1) / (draws + 1).
    MonteCarlo { draws: u64, seed: u64 },
}

/// Variant against base: how much the mean moved, how sure we can be, and a verdict helper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub base: Summary,
    pub variant: Summary,
    /// variant mean - base mean, in the metric's unit.
    pub difference: f64,
    /// difference / |base mean| * 100 (so its sign is always the difference's); `None` when
    /// the base mean is 0.
    pub pct_change: Option<f64>,
    /// 95% Welch-t interval of the difference; `None` unless both sides have 2+ samples.
    pub difference_ci95: Option<Interval>,
    /// `difference_ci95` divided by |base mean|, in percent. The base mean is taken as exact,
    /// which understates the width when the base is noisy; it is there to read the table, the
    /// verdict uses the permutation test.
    pub pct_change_ci95: Option<Interval>,
    /// Two-sided permutation test on the difference of means (the verdict's p).
    pub p_value: f64,
    /// Two-sided Mann-Whitney test (permutation of midranks, so ties are exact): a second
    /// opinion that one outlying boot cannot sway.
    pub mann_whitney_p: f64,
    /// How both p-values were computed (same arrangements for both).
    pub test: PermutationTest,
}

impl Change {
    /// Compares `variant` against `base`. Errors when either side is empty or has a
    /// non-finite sample; one sample per side is allowed (p = 1, no interval).
    pub fn between(base: &[f64], variant: &[f64]) -> Result<Change, StatsError> {
        let base_summary = Summary::of(base).map_err(|e| StatsError::Base(Box::new(e)))?;
        let variant_summary = Summary::of(variant).map_err(|e| StatsError::Variant(Box::new(e)))?;
        let difference = variant_summary.mean - base_summary.mean;
        let pct = |x: f64| x / base_summary.mean.abs() * 100.0;
        let base_nonzero = base_summary.mean != 0.0;
        let pct_change = base_nonzero.then(|| pct(difference));
        let difference_ci95 = welch_interval(&base_summary, &variant_summary, 0.05);
        let pct_change_ci95 = difference_ci95.filter(|_| base_nonzero).map(|ci| Interval {
            low: pct(ci.low),
            high: pct(ci.high),
        });

        let pooled: Vec<f64> = base.iter().chain(variant).copied().collect();
        let (p_value, test) = permutation_p(&pooled, base.len());
        let (mann_whitney_p, _) = permutation_p(&midranks(&pooled), base.len());
        Ok(Change {
            base: base_summary,
            variant: variant_summary,
            difference,
            pct_change,
            difference_ci95,
            pct_change_ci95,
            p_value,
            mann_whitney_p,
            test,
        })
    }

    /// The Welch-t interval of the difference at `confidence` (0.90 for a two one-sided tests
    /// equivalence check at 5%); `None` unless both sides have 2+ samples.
    pub fn difference_interval(&self, confidence: f64) -> Option<Interval> {
        welch_interval(&self.base, &self.variant, 1.0 - confidence)
    }

    /// `Higher`/`Lower` only when `p_value < alpha` and |difference| > `noise_floor` (in the
    /// metric's unit, e.g. 2.0 for two percentage points of a share). A NaN floor calls nothing.
    pub fn verdict(&self, significance: Significance, noise_floor: f64) -> Verdict {
        let significant = self.p_value < significance.alpha();
        let material = self.difference.abs() > noise_floor.abs();
        match (significant && material, self.difference > 0.0) {
            (false, _) => Verdict::NoChange,
            (true, true) => Verdict::Higher,
            (true, false) => Verdict::Lower,
        }
    }

    /// variant mean / base mean; `None` when the base mean is 0.
    pub fn ratio(&self) -> Option<f64> {
        (self.base.mean != 0.0).then(|| self.variant.mean / self.base.mean)
    }
}

/// Significance level asked of a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Significance {
    /// p < 0.05
    P05,
    /// p < 0.01
    P01,
}

impl Significance {
    pub fn alpha(self) -> f64 {
        match self {
            Significance::P05 => 0.05,
            Significance::P01 => 0.01,
        }
    }

    /// Table marker, as in LKP/mmtests tables: `*` for p<0.05, `**` for p<0.01.
    pub fn marker(self) -> &'static str {
        match self {
            Significance::P05 => "*",
            Significance::P01 => "**",
        }
    }
}

impl fmt::Display for Significance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p<{}", self.alpha())
    }
}

/// Direction of a called change of the variant against the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verdict {
    Higher,
    Lower,
    NoChange,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Higher => "higher",
            Verdict::Lower => "lower",
            Verdict::NoChange => "no change",
        })
    }
}

/// Boot order for `repetitions` rounds of `variants` variants, as variant indices: every round
/// runs each variant once, rounds follow a Williams design (a Latin square whose rounds are
/// rotations of 0, 1, k-1, 2, k-2, ..., mirrored for odd k) so each variant takes each position
/// equally often and follows each other variant equally often over a full cycle.
/// For 2 variants this is A B B A A B B A ...
pub fn interleaved_order(variants: usize, repetitions: usize) -> Vec<usize> {
    if variants == 0 {
        return Vec::new();
    }
    let first: Vec<usize> = (0..variants)
        .map(|j| match j {
            0 => 0,
            j if j % 2 == 1 => j.div_ceil(2),
            j => variants - j / 2,
        })
        .collect();
    let rotated = |r: usize| first.iter().map(move |&v| (v + r) % variants);
    // An odd-sized Williams design needs the square and its mirror image.
    let cycle = if variants.is_multiple_of(2) {
        variants
    } else {
        2 * variants
    };
    let mut order = Vec::with_capacity(variants * repetitions);
    for round in 0..repetitions {
        let r = round % cycle;
        if r < variants {
            order.extend(rotated(r));
        } else {
            let row: Vec<usize> = rotated(r - variants).collect();
            order.extend(row.into_iter().rev());
        }
    }
    order
}

/// Number of arrangements C(n, k) if it is at most [`EXACT_LIMIT`].
fn exact_arrangements(n: usize, k: usize) -> Option<u64> {
    let k = k.min(n - k) as u128;
    let n = n as u128;
    let mut c: u128 = 1;
    for i in 1..=k {
        // Exact at every step: C(n-k+i, i) = C(n-k+i-1, i-1) * (n-k+i) / i.
        c = c * (n - k + i) / i;
        if c > EXACT_LIMIT as u128 {
            return None;
        }
    }
    Some(c as u64)
}

/// Two-sided permutation p-value for the first `n_a` of `pooled` against the rest. The
/// difference of means, and the Mann-Whitney U on ranks, are both affine in the sum of the
/// first group, so a split is at least as extreme as the observed one when its sum deviates at
/// least as much from its expectation.
fn permutation_p(pooled: &[f64], n_a: usize) -> (f64, PermutationTest) {
    let n = pooled.len();
    let center = pooled.iter().sum::<f64>() * n_a as f64 / n as f64;
    // Splits with equal sums computed in another order must count as ties.
    let tolerance = pooled.iter().map(|x| x.abs()).sum::<f64>() * 1e-11;
    let observed = (pooled[..n_a].iter().sum::<f64>() - center).abs();
    let extreme = |sum: f64| (sum - center).abs() >= observed - tolerance;

    if let Some(arrangements) = exact_arrangements(n, n_a) {
        let mut idx: Vec<usize> = (0..n_a).collect();
        let mut hits: u64 = 0;
        loop {
            if extreme(idx.iter().map(|&i| pooled[i]).sum()) {
                hits += 1;
            }
            // Next k-combination in lexicographic order.
            let Some(i) = (0..n_a).rev().find(|&i| idx[i] < n - n_a + i) else {
                break;
            };
            idx[i] += 1;
            for j in i + 1..n_a {
                idx[j] = idx[j - 1] + 1;
            }
        }
        let p = hits as f64 / arrangements as f64;
        (p.min(1.0), PermutationTest::Exact { arrangements })
    } else {
        let mut rng = SplitMix64(MONTE_CARLO_SEED);
        let mut idx: Vec<usize> = (0..n).collect();
        let mut hits: u64 = 0;
        for _ in 0..MONTE_CARLO_DRAWS {
            // Partial Fisher-Yates: the first n_a slots become a uniform random subset.
            for i in 0..n_a {
                let j = i + rng.below((n - i) as u64) as usize;
                idx.swap(i, j);
            }
            if extreme(idx[..n_a].iter().map(|&i| pooled[i]).sum()) {
                hits += 1;
            }
        }
        // Counting the observed split keeps the estimate valid (never 0).
        let p = (hits + 1) as f64 / (MONTE_CARLO_DRAWS + 1) as f64;
        (
            p,
            PermutationTest::MonteCarlo {
                draws: MONTE_CARLO_DRAWS,
                seed: MONTE_CARLO_SEED,
            },
        )
    }
}

/// Ranks 1..=n of the values, ties getting the mean of the ranks they span.
fn midranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        // Ranks start+1..=end share their mean.
        let rank = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = rank;
        }
        start = end;
    }
    ranks
}

/// Welch's two-sided (1 - alpha) interval for variant mean - base mean.
fn welch_interval(base: &Summary, variant: &Summary, alpha: f64) -> Option<Interval> {
    let (sa, sb) = (base.stddev?, variant.stddev?);
    let va = sa * sa / base.n as f64;
    let vb = sb * sb / variant.n as f64;
    let d = variant.mean - base.mean;
    let se2 = va + vb;
    if se2 == 0.0 {
        return Some(Interval { low: d, high: d });
    }
    let df = se2 * se2 / (va * va / (base.n - 1) as f64 + vb * vb / (variant.n - 1) as f64);
    let half = student_t_quantile(1.0 - alpha / 2.0, df)? * se2.sqrt();
    Some(Interval {
        low: d - half,
        high: d + half,
    })
}

/// Quantile of Student's t distribution with `df` (possibly fractional) degrees of freedom,
/// for `p` in (0.5, 1), by bisection on the CDF.
fn student_t_quantile(p: f64, df: f64) -> Option<f64> {
    if !(p > 0.5 && p < 1.0 && df.is_finite() && df > 0.0) {
        return None;
    }
    let two_sided = 2.0 * (1.0 - p);
    // P(|T| > t) = I_{df/(df+t^2)}(df/2, 1/2), decreasing in t.
    let tail = |t: f64| regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while tail(hi) > two_sided {
        hi *= 2.0;
        if hi > 1e12 {
            return None;
        }
    }
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if tail(mid) > two_sided {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some((lo + hi) / 2.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    #[allow(clippy::excessive_precision)] // the published coefficients, kept verbatim
    const C: [f64; 9] = [
        0.999_999_999_999_809_93,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_13,
        -176.615_029_162_140_59,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_571_6e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection keeps the series in its accurate range.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let series = C[1..]
        .iter()
        .enumerate()
        .fold(C[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + series.ln()
}

/// I_x(a, b), the regularized incomplete beta function (continued fraction, modified Lentz).
fn regularized_incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    // The fraction converges fast only below the mean; use the symmetry above it.
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(a, b, x) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(b, a, 1.0 - x) / b
    }
}

fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let clamp = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / clamp(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let even = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / clamp(1.0 + even * d);
        c = clamp(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / clamp(1.0 + odd * d);
        c = clamp(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, statistically sound for shuffling, and fixed
/// forever, unlike a library PRNG whose stream may change between versions.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (multiply-shift; the bias, below 2^-40 here, is irrelevant).
    fn below(&mut self, bound: u64) -> u64 {
        ((self.next_u64() as u128 * bound as u128) >> 64) as u64
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
    fn exact_permutation_p_hand_checked() {
        // {1,2,3} vs {4,5,6}: only the observed split and its mirror are as extreme: 2/20.
        let c = Change::between(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert_eq!(c.p_value, 0.1);
        assert_eq!(c.mann_whitney_p, 0.1);
        assert_eq!(c.test, PermutationTest::Exact { arrangements: 20 });
        // {1,2} vs {3,5}: pair sums 3,4,6,5,7,8 around 5.5; |3-5.5| = 2.5 reached twice of 6.
        let c = Change::between(&[1.0, 2.0], &[3.0, 5.0]).unwrap();
        assert!(close(c.p_value, 2.0 / 6.0, 1e-15));
        // 5 vs 5 fully separated: 2 / C(10,5) = 2/252, below 0.01.
        let c = Change::between(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert!(close(c.p_value, 2.0 / 252.0, 1e-15));
        assert_eq!(c.test, PermutationTest::Exact { arrangements: 252 });
    }

    #[test]
    fn mean_and_rank_tests_differ_on_an_outlier() {
        // One wild boot in the variant: the means test loses the shift, the rank test keeps it.
        let base = [10.0, 11.0, 12.0, 13.0];
        let variant = [14.0, 15.0, 16.0, -100.0];
        let c = Change::between(&base, &variant).unwrap();
        // Ranks: base {2,3,4,5} = 14 against 18 expected; of the 70 four-subsets of 1..=8,
        // 12 sum to <= 14 and 12 to >= 22.
        assert!(
            close(c.mann_whitney_p, 24.0 / 70.0, 1e-12),
            "{}",
            c.mann_whitney_p
        );
        // Means: center -4.5, observed 46 deviates by 50.5; every split with -100 on a side
        // sums to <= -55 there, every other to >= 46: all 70 are as extreme.
        assert_eq!(c.p_value, 1.0);
    }

    #[test]
    fn ties_and_identical_samples() {
        let c = Change::between(&[3.0; 4], &[3.0; 4]).unwrap();
        assert_eq!(c.p_value, 1.0);
        assert_eq!(c.mann_whitney_p, 1.0);
        assert_eq!(c.difference, 0.0);
        assert_eq!(c.pct_change, Some(0.0));
        assert_eq!(
            c.difference_ci95,
            Some(Interval {
                low: 0.0,
                high: 0.0
            })
        );
        assert_eq!(c.verdict(Significance::P05, 0.0), Verdict::NoChange);
        // Every split of {0,0,0,0,0,1} puts the 1 on one side: all equally extreme.
        let c = Change::between(&[0.0, 0.0, 0.0], &[0.0, 0.0, 1.0]).unwrap();
        assert_eq!(c.p_value, 1.0);
        assert_eq!(c.pct_change, None);
        assert_eq!(c.pct_change_ci95, None);
        assert_eq!(c.ratio(), None);
        // Values whose sums round differently in another order still tie.
        let c = Change::between(&[0.1, 0.2, 0.3], &[0.3, 0.2, 0.1]).unwrap();
        assert_eq!(c.p_value, 1.0);
    }

    #[test]
    fn degenerate_change_inputs() {
        assert_eq!(
            Change::between(&[], &[1.0]),
            Err(StatsError::Base(Box::new(StatsError::Empty)))
        );
        assert_eq!(
            Change::between(&[1.0], &[]),
            Err(StatsError::Variant(Box::new(StatsError::Empty)))
        );
        assert!(matches!(
            Change::between(&[1.0], &[2.0, f64::NAN]),
            Err(StatsError::Variant(e)) if matches!(*e, StatsError::NonFinite { index: 1, .. })
        ));
        let c = Change::between(&[1.0], &[2.0]).unwrap();
        assert_eq!(c.p_value, 1.0);
        assert_eq!(c.difference_ci95, None);
        assert_eq!(c.pct_change, Some(100.0));
        assert_eq!(c.ratio(), Some(2.0));
        let msg = Change::between(&[1.0], &[f64::NAN])
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "variant samples: sample #0 is NaN, not a finite number"
        );
    }

    #[test]
    fn welch_interval_hand_checked() {
        // Means 2 and 5, variances 1 and 1: se = sqrt(2/3), df = 4, t(0.975, 4) = 2.776445.
        let c = Change::between(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert_eq!(c.difference, 3.0);
        assert_eq!(c.pct_change, Some(150.0));
        let half = 2.776_445_105 * (2.0_f64 / 3.0).sqrt();
        let ci = c.difference_ci95.unwrap();
        assert!(close(ci.low, 3.0 - half, 1e-6) && close(ci.high, 3.0 + half, 1e-6));
        let pct = c.pct_change_ci95.unwrap();
        assert!(close(pct.low, (3.0 - half) * 50.0, 1e-4));
        assert!(close(pct.high, (3.0 + half) * 50.0, 1e-4));
        // Negative base: %change keeps the sign of the difference.
        let c = Change::between(&[-2.0, -2.0], &[-1.0, -1.0]).unwrap();
        assert_eq!(c.pct_change, Some(50.0));
    }

    #[test]
    fn student_t_quantiles() {
        for (df, t) in [
            (1.0, 12.706_204_736),
            (2.0, 4.302_652_730),
            (4.0, 2.776_445_105),
            (30.0, 2.042_272_456),
            (1e9, 1.959_963_985),
        ] {
            let got = student_t_quantile(0.975, df).unwrap();
            assert!(close(got, t, 1e-6), "df {df}: {got} != {t}");
        }
        assert!(close(
            student_t_quantile(0.995, 4.0).unwrap(),
            4.604_094_871,
            1e-6
        ));
        assert_eq!(student_t_quantile(0.975, 0.0), None);
        assert_eq!(student_t_quantile(0.975, f64::NAN), None);
        assert_eq!(student_t_quantile(1.0, 4.0), None);
    }

    #[test]
    fn monte_carlo_when_too_many_arrangements() {
        let low: Vec<f64> = (1..=10).map(f64::from).collect();
        let high: Vec<f64> = (11..=20).map(f64::from).collect();
        let c = Change::between(&low, &high).unwrap();
        assert_eq!(
            c.test,
            PermutationTest::MonteCarlo {
                draws: MONTE_CARLO_DRAWS,
                seed: MONTE_CARLO_SEED
            }
        );
        // Exact value 2/184756; the estimate is (hits+1)/(draws+1).
        assert!(c.p_value < 1e-3, "{}", c.p_value);
        assert_eq!(
            Change::between(&low, &high).unwrap(),
            c,
            "not deterministic"
        );
        let odd: Vec<f64> = (0..10).map(|i| f64::from(2 * i + 1)).collect();
        let even: Vec<f64> = (0..10).map(|i| f64::from(2 * i + 2)).collect();
        let c = Change::between(&odd, &even).unwrap();
        // Exact two-sided p for a mean shift of 1 among 1..=20 is about 0.68.
        assert!(c.p_value > 0.5 && c.p_value < 0.85, "{}", c.p_value);
        assert!(exact_arrangements(20, 10).is_none());
        assert_eq!(exact_arrangements(18, 9), Some(48_620));
    }

    #[test]
    fn verdict_needs_significance_and_noise_floor() {
        let base = [4.0, 5.0, 3.0, 4.5, 4.5];
        let patched = [91.0, 92.0, 90.5, 93.0, 92.0];
        let c = Change::between(&base, &patched).unwrap();
        assert!(c.p_value < 0.01);
        assert_eq!(c.verdict(Significance::P01, 2.0), Verdict::Higher);
        assert_eq!(c.verdict(Significance::P01, 100.0), Verdict::NoChange);
        assert_eq!(c.verdict(Significance::P01, f64::NAN), Verdict::NoChange);
        let back = Change::between(&patched, &base).unwrap();
        assert_eq!(back.verdict(Significance::P05, 2.0), Verdict::Lower);
        // Significant but inside the floor: no change.
        let tight = [4.0, 4.1, 3.9, 4.05, 3.95];
        let small = Change::between(&tight, &tight.map(|x| x + 1.0)).unwrap();
        assert!(small.p_value < 0.05);
        assert_eq!(small.verdict(Significance::P05, 2.0), Verdict::NoChange);
        assert_eq!(small.verdict(Significance::P05, 0.5), Verdict::Higher);
        // 4/4 separated reaches p<0.05 but not p<0.01.
        let c = Change::between(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0, 7.0, 8.0]).unwrap();
        assert_eq!(c.verdict(Significance::P05, 0.0), Verdict::Higher);
        assert_eq!(c.verdict(Significance::P01, 0.0), Verdict::NoChange);
    }

    #[test]
    fn midranks_share_ties() {
        assert_eq!(
            midranks(&[10.0, 20.0, 10.0, 30.0]),
            vec![1.5, 3.0, 1.5, 4.0]
        );
        assert_eq!(midranks(&[5.0, 5.0, 5.0]), vec![2.0, 2.0, 2.0]);
    }

    #[test]
    fn abba_for_two_variants() {
        assert_eq!(interleaved_order(2, 4), vec![0, 1, 1, 0, 0, 1, 1, 0]);
        assert_eq!(interleaved_order(2, 3), vec![0, 1, 1, 0, 0, 1]);
        assert_eq!(interleaved_order(1, 3), vec![0, 0, 0]);
        assert!(interleaved_order(0, 5).is_empty());
        assert!(interleaved_order(3, 0).is_empty());
    }

    #[test]
    fn williams_order_is_balanced() {
        assert_eq!(
            interleaved_order(3, 2),
            vec![0, 1, 2, 1, 2, 0],
            "first rounds of the 3-variant design"
        );
        for k in 2..=6_usize {
            let cycle = if k.is_multiple_of(2) { k } else { 2 * k };
            let order = interleaved_order(k, cycle);
            let rounds: Vec<&[usize]> = order.chunks(k).collect();
            let mut position = vec![vec![0; k]; k];
            let mut follows = vec![vec![0; k]; k];
            for round in &rounds {
                let mut seen = round.to_vec();
                seen.sort_unstable();
                assert_eq!(seen, (0..k).collect::<Vec<_>>(), "k={k}: round {round:?}");
                for (pos, &v) in round.iter().enumerate() {
                    position[v][pos] += 1;
                }
                for pair in round.windows(2) {
                    follows[pair[0]][pair[1]] += 1;
                }
            }
            let per = cycle / k;
            assert!(position.iter().flatten().all(|&c| c == per), "k={k}");
            for (a, row) in follows.iter().enumerate() {
                for (b, &count) in row.iter().enumerate() {
                    let want = if a == b { 0 } else { per };
                    assert_eq!(count, want, "k={k}: {a} before {b}");
                }
            }
        }
        let counts = interleaved_order(5, 7)
            .iter()
            .fold(vec![0; 5], |mut c, &v| {
                c[v] += 1;
                c
            });
        assert_eq!(counts, vec![7; 5]);
    }
}
