//! Simulated boots for `lab bench verdicts` and `lab bench bisect`: the shapes a primary
//! metric's per-boot values take, each with its smallest change that matters, and a true change
//! in magnitudes. The decisions made on them are the lab's own (`stats`, the runner's
//! `DecisionPoint::after_stage`); only the boots are simulated.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Binomial, Distribution, Normal, StudentT};
use statrs::distribution::{Continuous, ContinuousCDF};

use crate::stats::{Magnitude, Range};

/// A seeded generator: the same seed gives the same boots in every release (Xoshiro256++ is
/// specified, not an implementation detail).
pub(crate) type Rng = Xoshiro256PlusPlus;

/// The generator of stream `stream` of a bench seeded with `seed` (one per table cell, so a
/// cell's figures do not depend on how many threads ran the others).
pub(crate) fn rng(seed: u64, stream: u64) -> Rng {
    Rng::seed_from_u64(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// S1's change (the revert's share on the IRQ CPU, about 85%, against v6.12's 12-30%), about
/// 3.25 of its 20-point magnitude.
pub(crate) const S1_SIZE: f64 = 3.25;

/// How a variant's boots differ from the base's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Truth {
    /// The shape's own change of this many magnitudes (0: none).
    Magnitudes(f64),
    /// S1's change: for the S1-like shape its revert's boots, elsewhere `S1_SIZE` magnitudes.
    S1,
}

impl Truth {
    /// In magnitudes.
    pub(crate) fn size(self) -> f64 {
        match self {
            Truth::Magnitudes(k) => k,
            Truth::S1 => S1_SIZE,
        }
    }

    /// The column's label: `0`, `0.8x`, `S1`.
    pub(crate) fn label(self) -> String {
        match self {
            Truth::Magnitudes(0.0) => "0".to_string(),
            Truth::Magnitudes(k) => format!("{k}x"),
            Truth::S1 => "S1".to_string(),
        }
    }
}

/// A shape of per-boot values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shape {
    /// Normal boots `spread` magnitudes wide (standard deviation); a change shifts them.
    Normal { spread: f64 },
    /// Student's t with 2 degrees of freedom (no variance), half a magnitude wide; a change
    /// shifts them.
    HeavyTailed,
    /// A share at 0 in 60% of boots and 60-90% in the rest (mean 30); a change moves boots
    /// from the cluster to 0 (1.5x: all at 0). Point masses hide it from the typical boot.
    ZerosAndACluster,
    /// A share near 0 (0 in 70% of boots, else up to 10%) with a smallest change of
    /// `magnitude` points; a change puts a share of the boots at 100 (1.5x: 30% of them at 20
    /// points, 15% at S3's 10, 7.6% at S5's 5). The typical boot does not move at all.
    RareJumps { magnitude: f64 },
    /// A share that lands in one of two modes, 0 or 100, 30% of boots in the high one; a change
    /// sends more boots there (1.5x: 60%). The typical boot moves only once half of them do.
    Modes,
    /// S3's primary (one-CPU wakees): a share near 90% (N(90, 3)), magnitude 10 points; a change
    /// sends a share of the boots to 0 (1.5x: 16.7% of them).
    S3Like,
    /// S5's busiest CPU with 4 queues: a share near 30% (N(30, 3)), magnitude 5 points; a change
    /// sends a share of the boots to 100 (1.5x: 10.7% of them).
    S5Like,
    /// S2's times: lognormal (median 100, sigma 0.1), magnitude half the base's mean, no upper
    /// bound; a change multiplies a share of the boots by `factor` (1.5x: 5% of them by 16, or
    /// 10% by 8.5). No boot count bounds SAME's error here: the lab's stated limit.
    LognormalJumps { factor: f64 },
    /// A share counted in sixths (6 events a boot, each 30% likely): many ties; a change makes
    /// each event more likely.
    Sixths,
    /// S1's primary metric: the base's share around 12-30% (drawn per run) with a standard
    /// deviation of 10-20 points, clipped to 0-100; a change shifts it; S1's change is the
    /// revert's boots, around 85% (standard deviation 10).
    S1Like,
    /// S1-like with a share `moved` of the boots that are not the revert's landing where the
    /// revert's do (the balancer moves the thread now and then, in either kernel).
    S1Moved { moved: f64 },
    /// Normal boots half a magnitude wide in the base; a variant's are `factor` times as wide
    /// around the same centre (shifted by its change): a change of spread alone, no direction.
    Spread { factor: f64 },
}

/// Per-run parameters of a shape (the host a run lands on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Host {
    base_mean: f64,
    spread: f64,
}

/// S3-like and S5-like boots' level (points) before a change moves some of them.
const S3_LEVEL: f64 = 90.0;
const S5_LEVEL: f64 = 30.0;

/// The lognormal times: log-scale spread and the magnitude relative to the base's mean.
const LOGNORMAL_SIGMA: f64 = 0.1;
const LOGNORMAL_RELATIVE: f64 = 0.5;

/// The lognormal times' mean: median 100 times exp(sigma^2 / 2).
fn lognormal_mean() -> f64 {
    100.0 * (LOGNORMAL_SIGMA * LOGNORMAL_SIGMA / 2.0).exp()
}

/// The S1-like revert's boots.
const REVERT_MEAN: f64 = 85.0;
const REVERT_SPREAD: f64 = 10.0;

impl Shape {
    /// Every shape the verdicts' table covers.
    pub(crate) const ALL: [Shape; 20] = [
        Shape::Normal { spread: 0.5 },
        Shape::Normal { spread: 1.0 },
        Shape::Normal { spread: 2.0 },
        Shape::HeavyTailed,
        Shape::ZerosAndACluster,
        Shape::RareJumps { magnitude: 20.0 },
        Shape::RareJumps { magnitude: 10.0 },
        Shape::RareJumps { magnitude: 5.0 },
        Shape::Sixths,
        Shape::Modes,
        Shape::S1Like,
        Shape::S1Moved { moved: 0.05 },
        Shape::S1Moved { moved: 0.14 },
        Shape::S3Like,
        Shape::S5Like,
        Shape::LognormalJumps { factor: 16.0 },
        Shape::LognormalJumps { factor: 8.5 },
        Shape::Spread { factor: 3.0 },
        Shape::Spread { factor: 5.0 },
        Shape::Spread { factor: 10.0 },
    ];

    /// Whether the verdicts' targets hold on this shape: every shape but the unbounded times
    /// whose change a few boots carry, where no boot count bounds SAME's error (the lab's
    /// stated limit, measured beside the targets).
    pub(crate) fn held_to_targets(self) -> bool {
        !matches!(self, Shape::LognormalJumps { .. })
    }

    pub(crate) fn name(self) -> String {
        match self {
            Shape::Normal { spread } => format!("normal sd {spread}m"),
            Shape::HeavyTailed => "t(2) 0.5m".to_string(),
            Shape::ZerosAndACluster => "0s + cluster".to_string(),
            Shape::RareJumps { magnitude: 20.0 } => "rare jumps".to_string(),
            Shape::RareJumps { magnitude } => format!("rare jumps {magnitude}"),
            Shape::Modes => "two modes".to_string(),
            Shape::S3Like => "S3-like".to_string(),
            Shape::S5Like => "S5-like".to_string(),
            Shape::LognormalJumps { factor } => format!("lognormal x{factor}"),
            Shape::Sixths => "sixths".to_string(),
            Shape::S1Like => "S1-like".to_string(),
            Shape::S1Moved { moved } => format!("S1, {:.0}% moved", 100.0 * moved),
            Shape::Spread { factor } => format!("spread x{factor}"),
        }
    }

    /// The smallest change that matters, in the metric's unit: 1 for the unitless shapes, 20
    /// points for shares (S3's 10, S5's 5), half the base's mean for the lognormal times.
    pub(crate) fn magnitude(self) -> f64 {
        match self {
            Shape::Normal { .. } | Shape::HeavyTailed | Shape::Spread { .. } => 1.0,
            Shape::RareJumps { magnitude } => magnitude,
            Shape::S3Like => 10.0,
            Shape::S5Like => 5.0,
            Shape::LognormalJumps { .. } => LOGNORMAL_RELATIVE * lognormal_mean(),
            _ => 20.0,
        }
    }

    /// The magnitude as the comparison declares it (relative for the lognormal times).
    pub(crate) fn declared_magnitude(self) -> Magnitude {
        match self {
            Shape::LognormalJumps { .. } => Magnitude::relative(LOGNORMAL_RELATIVE),
            _ => Magnitude::Absolute(self.magnitude()),
        }
    }

    /// The values the metric can take: shares 0-100, times from 0, the rest any.
    pub(crate) fn range(self) -> Range {
        match self {
            Shape::Normal { .. } | Shape::HeavyTailed | Shape::Spread { .. } => Range::ANY,
            Shape::LognormalJumps { .. } => Range::NON_NEGATIVE,
            _ => Range::PERCENT,
        }
    }

    /// Whether the shape can carry `truth` (the cluster's mean of 30 cannot fall by S1's 65).
    pub(crate) fn carries(self, truth: Truth) -> bool {
        !(self == Shape::ZerosAndACluster && truth.size() * self.magnitude() > 30.0)
    }

    /// Whether a change is a pure shift of the whole distribution (so the interval of the shift
    /// has a true value to cover at every size, not only at 0).
    /// A wider symmetric spread keeps the shift's estimand (the median of variant - base) at the
    /// change.
    pub(crate) fn shifts(self) -> bool {
        matches!(
            self,
            Shape::Normal { .. } | Shape::HeavyTailed | Shape::Spread { .. }
        )
    }

    /// A run's host.
    pub(crate) fn host(self, rng: &mut Rng) -> Host {
        match self {
            Shape::S1Like | Shape::S1Moved { .. } => Host {
                base_mean: 12.0 + 18.0 * rng.random::<f64>(),
                spread: 10.0 + 10.0 * rng.random::<f64>(),
            },
            _ => Host {
                base_mean: 0.0,
                spread: 0.0,
            },
        }
    }

    /// One boot of a variant with `truth` against the base: as a base boot with that change,
    /// but for a change of spread, where a variant's boots are wider whatever the change.
    pub(crate) fn draw_variant(self, rng: &mut Rng, host: Host, truth: Truth) -> f64 {
        match self {
            Shape::Spread { factor } => {
                truth.size() * self.magnitude() + 0.5 * factor * standard_normal(rng)
            }
            _ => self.draw(rng, host, truth),
        }
    }

    /// One boot's value with `truth` against the base (`Truth::Magnitudes(0.0)`: a base boot).
    pub(crate) fn draw(self, rng: &mut Rng, host: Host, truth: Truth) -> f64 {
        let change = truth.size() * self.magnitude();
        match self {
            Shape::Spread { .. } => change + 0.5 * standard_normal(rng),
            Shape::S1Moved { moved } => {
                let revert = Truth::S1 == truth || rng.random::<f64>() < moved;
                let (mean, spread) = if revert {
                    (REVERT_MEAN, REVERT_SPREAD)
                } else {
                    (host.base_mean + change, host.spread)
                };
                (mean + spread * standard_normal(rng)).clamp(0.0, 100.0)
            }
            Shape::Normal { spread } => change + spread * standard_normal(rng),
            Shape::HeavyTailed => {
                let t = StudentT::new(2.0).expect("2 degrees of freedom");
                change + 0.5 * t.sample(rng)
            }
            Shape::ZerosAndACluster => {
                let cluster = (30.0 - change) / 75.0;
                if rng.random::<f64>() < cluster {
                    60.0 + 30.0 * rng.random::<f64>()
                } else {
                    0.0
                }
            }
            Shape::RareJumps { .. } => {
                if rng.random::<f64>() < change / 98.5 {
                    100.0
                } else if rng.random::<f64>() < 0.7 {
                    0.0
                } else {
                    10.0 * rng.random::<f64>()
                }
            }
            Shape::Modes => {
                if rng.random::<f64>() < 0.3 + change / 100.0 {
                    100.0
                } else {
                    0.0
                }
            }
            Shape::S3Like => {
                if rng.random::<f64>() < change / S3_LEVEL {
                    0.0
                } else {
                    (S3_LEVEL + 3.0 * standard_normal(rng)).clamp(0.0, 100.0)
                }
            }
            Shape::S5Like => {
                if rng.random::<f64>() < change / (100.0 - S5_LEVEL) {
                    100.0
                } else {
                    (S5_LEVEL + 3.0 * standard_normal(rng)).clamp(0.0, 100.0)
                }
            }
            Shape::LognormalJumps { factor } => {
                let boot = 100.0 * (LOGNORMAL_SIGMA * standard_normal(rng)).exp();
                let moved = truth.size() * LOGNORMAL_RELATIVE / (factor - 1.0);
                if rng.random::<f64>() < moved {
                    boot * factor
                } else {
                    boot
                }
            }
            Shape::Sixths => {
                let p = (0.3 + change / 100.0).clamp(0.0, 1.0);
                let events = Binomial::new(6, p).expect("a probability").sample(rng);
                events as f64 * 100.0 / 6.0
            }
            Shape::S1Like => {
                let (mean, spread) = match truth {
                    Truth::S1 => (REVERT_MEAN, REVERT_SPREAD),
                    Truth::Magnitudes(_) => (host.base_mean + change, host.spread),
                };
                (mean + spread * standard_normal(rng)).clamp(0.0, 100.0)
            }
        }
    }

    /// The true difference of the means, variant minus base, on `host`.
    pub(crate) fn mean_difference(self, host: Host, truth: Truth) -> f64 {
        let change = truth.size() * self.magnitude();
        match self {
            Shape::Normal { .. }
            | Shape::HeavyTailed
            | Shape::RareJumps { .. }
            | Shape::Sixths
            | Shape::Modes
            | Shape::LognormalJumps { .. }
            | Shape::Spread { .. } => change,
            Shape::ZerosAndACluster => -change,
            // The moved boots leave the clipped normal's mean for 0 or 100.
            Shape::S3Like => -change / S3_LEVEL * clipped_mean(S3_LEVEL, 3.0),
            Shape::S5Like => change / (100.0 - S5_LEVEL) * (100.0 - clipped_mean(S5_LEVEL, 3.0)),
            Shape::S1Like => {
                let base = clipped_mean(host.base_mean, host.spread);
                let variant = match truth {
                    Truth::S1 => clipped_mean(REVERT_MEAN, REVERT_SPREAD),
                    Truth::Magnitudes(_) => clipped_mean(host.base_mean + change, host.spread),
                };
                variant - base
            }
            Shape::S1Moved { moved } => {
                let revert = clipped_mean(REVERT_MEAN, REVERT_SPREAD);
                let typical = |change: f64| {
                    (1.0 - moved) * clipped_mean(host.base_mean + change, host.spread)
                        + moved * revert
                };
                match truth {
                    Truth::S1 => revert - typical(0.0),
                    Truth::Magnitudes(_) => typical(change) - typical(0.0),
                }
            }
        }
    }
}

/// One draw of the standard normal.
pub(crate) fn standard_normal(rng: &mut Rng) -> f64 {
    Normal::new(0.0, 1.0).expect("a normal").sample(rng)
}

/// The mean of a normal(`mean`, `sd`) clipped to 0..100.
fn clipped_mean(mean: f64, sd: f64) -> f64 {
    let unit = statrs::distribution::Normal::standard();
    let (a, b) = ((0.0 - mean) / sd, (100.0 - mean) / sd);
    let inside = unit.cdf(b) - unit.cdf(a);
    100.0 * (1.0 - unit.cdf(b)) + mean * inside + sd * (unit.pdf(a) - unit.pdf(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape's drawn means differ by what `mean_difference` says.
    #[test]
    fn the_drawn_means_differ_by_the_stated_change() {
        let mut r = rng(1, 2);
        for shape in Shape::ALL {
            for truth in [Truth::Magnitudes(0.0), Truth::Magnitudes(1.5), Truth::S1] {
                if !shape.carries(truth) || shape == Shape::HeavyTailed {
                    continue;
                }
                let host = shape.host(&mut r);
                let n = 40_000;
                let variant = (0..n)
                    .map(|_| shape.draw_variant(&mut r, host, truth))
                    .sum::<f64>();
                let base = (0..n)
                    .map(|_| shape.draw(&mut r, host, Truth::Magnitudes(0.0)))
                    .sum::<f64>();
                let got = (variant - base) / n as f64;
                let want = shape.mean_difference(host, truth);
                // The lognormal jumps' few boots at 8.5-16 times the rest spread the means most.
                // A point for the shares whose change is a few boots at 0 or 100.
                let tolerance = match shape {
                    Shape::LognormalJumps { .. } => 0.2 * shape.magnitude(),
                    Shape::RareJumps { .. } | Shape::S3Like | Shape::S5Like => 1.0,
                    // Five standard errors of the widest variant's mean (sd 0.5 x factor).
                    Shape::Spread { factor } => 0.0125 * factor,
                    _ => 0.05 * shape.magnitude(),
                };
                assert!(
                    (got - want).abs() < tolerance,
                    "{} {truth:?}: drawn {got}, stated {want}",
                    shape.name()
                );
            }
        }
    }

    #[test]
    fn a_clipped_normal_keeps_its_mean_far_from_the_ends() {
        assert!((clipped_mean(50.0, 5.0) - 50.0).abs() < 1e-9);
        // Half the mass at 0: the mean rises from 0 to sd * phi(0) = 0.3989 sd.
        assert!((clipped_mean(0.0, 10.0) - 3.989_422_8).abs() < 1e-6);
    }
}
