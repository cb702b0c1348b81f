//! Simulated boots for `lab bench verdicts` and `lab bench bisect`: the shapes a primary
//! metric's per-boot values take, each with its smallest change that matters, and a true change
//! in magnitudes. The decisions made on them are the lab's own (`stats`, the runner's
//! `DecisionPoint::after_stage`); only the boots are simulated.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Binomial, Distribution, Normal, StudentT};
use statrs::distribution::{Continuous, ContinuousCDF};

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
    /// A share near 0 (0 in 70% of boots, else up to 10%); a change puts a share of the boots at
    /// 100 (1.5x: 30% of them). The typical boot does not move at all.
    RareJumps,
    /// A share counted in sixths (6 events a boot, each 30% likely): many ties; a change makes
    /// each event more likely.
    Sixths,
    /// S1's primary metric: the base's share around 12-30% (drawn per run) with a standard
    /// deviation of 10-20 points, clipped to 0-100; a change shifts it; S1's change is the
    /// revert's boots, around 85% (standard deviation 10).
    S1Like,
}

/// Per-run parameters of a shape (the host a run lands on).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Host {
    base_mean: f64,
    spread: f64,
}

/// The S1-like revert's boots.
const REVERT_MEAN: f64 = 85.0;
const REVERT_SPREAD: f64 = 10.0;

impl Shape {
    /// Every shape the verdicts' table covers.
    pub(crate) const ALL: [Shape; 8] = [
        Shape::Normal { spread: 0.5 },
        Shape::Normal { spread: 1.0 },
        Shape::Normal { spread: 2.0 },
        Shape::HeavyTailed,
        Shape::ZerosAndACluster,
        Shape::RareJumps,
        Shape::Sixths,
        Shape::S1Like,
    ];

    pub(crate) fn name(self) -> String {
        match self {
            Shape::Normal { spread } => format!("normal sd {spread}m"),
            Shape::HeavyTailed => "t(2) 0.5m".to_string(),
            Shape::ZerosAndACluster => "0s + cluster".to_string(),
            Shape::RareJumps => "rare jumps".to_string(),
            Shape::Sixths => "sixths".to_string(),
            Shape::S1Like => "S1-like".to_string(),
        }
    }

    /// The smallest change that matters: 1 for the unitless shapes, 20 points for shares.
    pub(crate) fn magnitude(self) -> f64 {
        match self {
            Shape::Normal { .. } | Shape::HeavyTailed => 1.0,
            _ => 20.0,
        }
    }

    /// Whether the shape can carry `truth` (the cluster's mean of 30 cannot fall by S1's 65).
    pub(crate) fn carries(self, truth: Truth) -> bool {
        !(self == Shape::ZerosAndACluster && truth.size() * self.magnitude() > 30.0)
    }

    /// Whether a change is a pure shift of the whole distribution (so the interval of the shift
    /// has a true value to cover at every size, not only at 0).
    pub(crate) fn shifts(self) -> bool {
        matches!(self, Shape::Normal { .. } | Shape::HeavyTailed)
    }

    /// A run's host.
    pub(crate) fn host(self, rng: &mut Rng) -> Host {
        match self {
            Shape::S1Like => Host {
                base_mean: 12.0 + 18.0 * rng.random::<f64>(),
                spread: 10.0 + 10.0 * rng.random::<f64>(),
            },
            _ => Host {
                base_mean: 0.0,
                spread: 0.0,
            },
        }
    }

    /// One boot's value with `truth` against the base (`Truth::Magnitudes(0.0)`: a base boot).
    pub(crate) fn draw(self, rng: &mut Rng, host: Host, truth: Truth) -> f64 {
        let change = truth.size() * self.magnitude();
        match self {
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
            Shape::RareJumps => {
                if rng.random::<f64>() < change / 98.5 {
                    100.0
                } else if rng.random::<f64>() < 0.7 {
                    0.0
                } else {
                    10.0 * rng.random::<f64>()
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
            Shape::Normal { .. } | Shape::HeavyTailed | Shape::RareJumps | Shape::Sixths => change,
            Shape::ZerosAndACluster => -change,
            Shape::S1Like => {
                let base = clipped_mean(host.base_mean, host.spread);
                let variant = match truth {
                    Truth::S1 => clipped_mean(REVERT_MEAN, REVERT_SPREAD),
                    Truth::Magnitudes(_) => clipped_mean(host.base_mean + change, host.spread),
                };
                variant - base
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
                let mean = |r: &mut Rng, t: Truth| {
                    (0..n).map(|_| shape.draw(r, host, t)).sum::<f64>() / n as f64
                };
                let got = mean(&mut r, truth) - mean(&mut r, Truth::Magnitudes(0.0));
                let want = shape.mean_difference(host, truth);
                let tolerance = 0.05 * shape.magnitude();
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
