//! The bisect's decisions, apart from how probes are built and booted: how a probe's verdicts
//! against the two endpoints classify it, and which point to probe next. Pure functions of
//! what is known, so a resumed bisect makes the same choices and tests can drive them with
//! numbers alone.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::stats::Decision;

/// What a probed point turned out to be, against the endpoints of its search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Not separated from the good end (SAME, or UNKNOWN at the cap) and DIFFERENT from the bad.
    GoodLike,
    /// DIFFERENT from the good end, and not separated from the bad end.
    BadLike,
    /// DIFFERENT from both ends: part of the change is in, part is still to come.
    Between,
    /// Neither: both verdicts stayed UNKNOWN at the cap, or both said SAME.
    Unclassified,
    /// It did not build, or did not boot (`--boot-failure skip`): `git bisect`'s exit 125.
    Skipped,
}

impl Class {
    /// Whether the change the search looks for is in this point already.
    pub(crate) fn changed(self) -> bool {
        matches!(self, Class::BadLike | Class::Between)
    }

    /// How the bisect log says it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Class::GoodLike => "good-like",
            Class::BadLike => "bad-like",
            Class::Between => "part of the change",
            Class::Unclassified => "unclassified",
            Class::Skipped => "skipped",
        }
    }
}

/// A probe's class from its primary verdicts against the search's good end (`vs_good`) and bad
/// end (`vs_bad`). A DIFFERENT against one end with an UNKNOWN against the other leans to the
/// other end: the adaptive boots ran to the cap without separating the probe from it.
pub(crate) fn classify(vs_good: Decision, vs_bad: Decision) -> Class {
    use Decision::{Different, Same, Unknown};
    match (vs_good, vs_bad) {
        (Same | Unknown, Different) => Class::GoodLike,
        (Different, Same | Unknown) => Class::BadLike,
        (Different, Different) => Class::Between,
        (Same | Unknown, Same | Unknown) => Class::Unclassified,
    }
}

/// What to do next in a search between points `lo` (good) and `hi` (bad).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Build and boot this point.
    Probe(usize),
    /// Nothing left to probe: the change is in the points `lo + 1 ..= hi` (one point, a culprit,
    /// when `hi == lo + 1`; more when the points between were skipped or unclassified).
    Found { lo: usize, hi: usize },
}

/// The next step of a first-change search over the points `lo..=hi`, given the classes of the
/// points probed so far in it. The answer's `hi` is the first point known to carry the change,
/// its `lo` the last good-like point before it. The probe is the untested point nearest the
/// middle, or a point already built (`built`) within a sixth of the span of the middle, which
/// saves a kernel build for at most a fraction of a probe's worth of information.
pub(crate) fn next(
    lo: usize,
    hi: usize,
    classes: &BTreeMap<usize, Class>,
    built: &dyn Fn(usize) -> bool,
) -> Next {
    let inside = |k: &usize| *k > lo && *k < hi;
    let hi = classes
        .iter()
        .filter(|(k, c)| inside(k) && c.changed())
        .map(|(k, _)| *k)
        .min()
        .unwrap_or(hi);
    let lo = classes
        .iter()
        .filter(|(k, c)| *k > &lo && *k < &hi && **c == Class::GoodLike)
        .map(|(k, _)| *k)
        .max()
        .unwrap_or(lo);
    let candidates: Vec<usize> = (lo + 1..hi).filter(|k| !classes.contains_key(k)).collect();
    if candidates.is_empty() {
        return Next::Found { lo, hi };
    }
    // Twice the middle, to stay in integers: a span of 2 points has its middle between them.
    let mid2 = lo + hi;
    let distance = |k: usize| (2 * k).abs_diff(mid2);
    let window = (hi - lo) / 3; // a sixth of the span, doubled like the distances
    let cheap = candidates
        .iter()
        .copied()
        .filter(|&k| built(k) && distance(k) <= window)
        .min_by_key(|&k| distance(k));
    let nearest = candidates
        .iter()
        .copied()
        .min_by_key(|&k| distance(k))
        .expect("candidates is not empty");
    Next::Probe(cheap.unwrap_or(nearest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search to its end with a point's class given by `truth`.
    fn search(
        n: usize,
        truth: impl Fn(usize) -> Class,
        built: &dyn Fn(usize) -> bool,
    ) -> (Next, Vec<usize>) {
        let mut classes = BTreeMap::new();
        let mut probed = Vec::new();
        loop {
            match next(0, n, &classes, built) {
                Next::Probe(k) => {
                    assert!(!classes.contains_key(&k), "{k} probed twice");
                    probed.push(k);
                    classes.insert(k, truth(k));
                }
                found => return (found, probed),
            }
        }
    }

    #[test]
    fn the_verdicts_against_both_ends_classify_a_probe() {
        use Decision::*;
        assert_eq!(classify(Same, Different), Class::GoodLike);
        assert_eq!(classify(Unknown, Different), Class::GoodLike);
        assert_eq!(classify(Different, Same), Class::BadLike);
        assert_eq!(classify(Different, Unknown), Class::BadLike);
        assert_eq!(classify(Different, Different), Class::Between);
        assert_eq!(classify(Unknown, Unknown), Class::Unclassified);
        assert_eq!(classify(Same, Same), Class::Unclassified);
    }

    #[test]
    fn every_culprit_of_a_series_is_found_in_log2_probes() {
        for n in 1..=12 {
            for culprit in 1..=n {
                let truth = |k: usize| {
                    if k >= culprit {
                        Class::BadLike
                    } else {
                        Class::GoodLike
                    }
                };
                let (found, probed) = search(n, truth, &|_| false);
                assert_eq!(
                    found,
                    Next::Found {
                        lo: culprit - 1,
                        hi: culprit
                    },
                    "n={n}"
                );
                let most = (n as f64).log2().ceil() as usize;
                assert!(probed.len() <= most, "n={n} culprit={culprit}: {probed:?}");
            }
        }
    }

    #[test]
    fn a_skipped_probe_is_stepped_around_and_can_leave_a_range() {
        // Six changes, the culprit is 4, and 3 does not build: 3 is skipped, 4 is still found
        // when 2 is good-like... unless the skip sits right before the culprit's parent test.
        let truth = |k: usize| match k {
            3 => Class::Skipped,
            k if k >= 4 => Class::BadLike,
            _ => Class::GoodLike,
        };
        let (found, probed) = search(6, truth, &|_| false);
        assert_eq!(found, Next::Found { lo: 2, hi: 4 }, "{probed:?}");
        // The same with the culprit at 5: 3's skip does not matter.
        let truth = |k: usize| match k {
            3 => Class::Skipped,
            k if k >= 5 => Class::BadLike,
            _ => Class::GoodLike,
        };
        assert_eq!(search(6, truth, &|_| false).0, Next::Found { lo: 4, hi: 5 });
    }

    #[test]
    fn a_built_point_near_the_middle_is_preferred() {
        let truth = |k: usize| {
            if k >= 7 {
                Class::BadLike
            } else {
                Class::GoodLike
            }
        };
        let classes = BTreeMap::new();
        assert_eq!(next(0, 12, &classes, &|_| false), Next::Probe(6));
        assert_eq!(next(0, 12, &classes, &|k| k == 7), Next::Probe(7));
        // Too far from the middle to be worth it.
        assert_eq!(next(0, 12, &classes, &|k| k == 10), Next::Probe(6));
        assert_eq!(
            search(12, truth, &|k| k == 5).0,
            Next::Found { lo: 6, hi: 7 }
        );
    }

    #[test]
    fn a_part_of_the_change_counts_as_changed() {
        let truth = |k: usize| match k {
            0..=1 => Class::GoodLike,
            2..=3 => Class::Between,
            _ => Class::BadLike,
        };
        assert_eq!(search(5, truth, &|_| false).0, Next::Found { lo: 1, hi: 2 });
    }
}
