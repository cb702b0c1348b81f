use super::*;
use crate::bisect::StepVerdict;

/// A verdict of a point at `a` against one at `b` (levels in magnitudes, noise-free): a change
/// is shown from half a magnitude, DIFFERENT beyond one, SAME under a quarter.
fn verdict(a: f64, b: f64) -> Verdict {
    let shift = a - b;
    let significant = shift.abs() >= 0.5;
    Verdict {
        decision: if significant && shift.abs() > 1.0 {
            Decision::Different
        } else if shift.abs() < 0.25 {
            Decision::Same
        } else {
            Decision::Unknown
        },
        magnitude: 1.0,
        shift,
        interval: Some(crate::stats::Interval {
            low: shift - 0.2,
            high: shift + 0.2,
        }),
        mean_interval: None,
        p: if significant { 0.001 } else { 0.5 },
        significant,
        mann_whitney_p: 0.001,
        ks_p: 0.001,
        n_base: 5,
        n_variant: 5,
        mean_difference: shift,
        same_min_boots: crate::stats::SAME_MIN_BOOTS,
    }
}

/// Steps on points whose metric is `levels[k]`; `broken` points do not boot; a probe of a
/// `faint` point shows nothing, however many boots.
struct Fake {
    levels: Vec<f64>,
    broken: Vec<usize>,
    faint: Vec<usize>,
    asked: Vec<Ask>,
    kept: Vec<Step>,
}

impl Fake {
    fn new(levels: &[f64]) -> Fake {
        Fake {
            levels: levels.to_vec(),
            broken: Vec::new(),
            faint: Vec::new(),
            asked: Vec::new(),
            kept: Vec::new(),
        }
    }
}

impl Steps for Fake {
    async fn run(&mut self, ask: &Ask) -> Result<Step> {
        self.asked.push(ask.clone());
        let mut step = ask.step();
        let points = step.run_order();
        if let Some(&b) = points.iter().find(|p| self.broken.contains(p)) {
            step.failed = Some(b);
            return Ok(step);
        }
        let faint = self.faint.contains(&ask.point);
        step.verdicts = ask
            .ends
            .iter()
            .map(|&end| {
                let mut verdict = verdict(self.levels[ask.point], self.levels[end]);
                if faint {
                    verdict.significant = false;
                    verdict.decision = Decision::Unknown;
                }
                StepVerdict {
                    base: end,
                    variant: ask.point,
                    verdict,
                }
            })
            .collect();
        Ok(step)
    }

    fn done(&mut self, step: Step) -> Result<()> {
        self.kept.push(step);
        Ok(())
    }

    fn built(&self, _: usize) -> bool {
        false
    }
}

fn bisect(fake: &mut Fake, on_boot_failure: OnBootFailure) -> Findings {
    let limits = Limits {
        n: fake.levels.len() - 1,
        cap: 10,
        on_boot_failure,
    };
    match futures::executor::block_on(search(fake, &limits)).unwrap() {
        Answer::Found(f) => f,
        other => panic!("{other:?}"),
    }
}

fn points(culprits: &[Culprit]) -> Vec<usize> {
    culprits.iter().map(|c| c.point).collect()
}

#[test]
fn the_direction_of_the_verdicts_classifies_a_probe() {
    let up = 1.0;
    // probe - lo, probe - hi.
    assert_eq!(
        classify(&verdict(0.0, 0.0), &verdict(0.0, 3.0), up),
        Class::GoodLike
    );
    assert_eq!(
        classify(&verdict(3.0, 0.0), &verdict(3.0, 3.0), up),
        Class::BadLike
    );
    assert_eq!(
        classify(&verdict(1.5, 0.0), &verdict(1.5, 3.0), up),
        Class::Between
    );
    // Below good, further from bad: an opposite change, not part of this one.
    assert_eq!(
        classify(&verdict(-1.5, 0.0), &verdict(-1.5, 3.0), up),
        Class::Opposite
    );
    assert_eq!(
        classify(&verdict(0.3, 0.0), &verdict(0.3, 0.6), up),
        Class::Unclassified
    );
    // The same against a change downwards.
    assert_eq!(
        classify(&verdict(-3.0, 0.0), &verdict(-3.0, -3.0), -up),
        Class::BadLike
    );
    assert_eq!(
        classify(&verdict(1.5, 0.0), &verdict(1.5, -3.0), -up),
        Class::Opposite
    );
}

#[test]
fn one_culprit_is_found_verified_with_its_share() {
    // S1's shape: six changes, the fourth carries it all.
    let mut fake = Fake::new(&[0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0]);
    let found = bisect(&mut fake, OnBootFailure::Skip);
    assert_eq!(points(&found.culprits), vec![4]);
    let share = found.culprits[0].share.unwrap();
    assert!((share.percent - 100.0).abs() < 1e-9, "{share:?}");
    let i = share.interval.unwrap();
    assert!(i.low < 100.0 && i.high > 100.0, "{i:?}");
    assert!(found.unverified.is_empty() && found.range.is_none());
    // The endpoints, probes, one verification; bad is SAME as the culprit: nothing left.
    let kinds: Vec<StepKind> = fake.kept.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == StepKind::Verify).count(), 1);
    assert!(!kinds.contains(&StepKind::Rest), "{kinds:?}");
}

#[test]
fn two_culprits_are_both_found() {
    // +1.5 at 2, +1.0 at 4.
    let mut fake = Fake::new(&[0.0, 0.0, 1.5, 1.5, 2.5, 2.5, 2.5]);
    let found = bisect(&mut fake, OnBootFailure::Skip);
    assert_eq!(points(&found.culprits), vec![2, 4], "{found:?}");
    let shares: Vec<f64> = found
        .culprits
        .iter()
        .map(|c| c.share.unwrap().percent)
        .collect();
    assert!((shares[0] - 60.0).abs() < 1e-9 && (shares[1] - 40.0).abs() < 1e-9);
}

#[test]
fn an_opposite_change_is_never_a_culprit() {
    // -1.5 at 2 and +4 at 4: bad is +2.5 over good.
    let mut fake = Fake::new(&[0.0, 0.0, -1.5, -1.5, 2.5, 2.5, 2.5]);
    let found = bisect(&mut fake, OnBootFailure::Skip);
    assert_eq!(points(&found.culprits), vec![4], "{found:?}");
    assert!(!found.opposite.is_empty(), "{found:?}");
    assert!(found.unverified.iter().all(|c| c.point != 2), "{found:?}");
}

#[test]
fn a_failed_verification_keeps_the_culprits_found_and_goes_on() {
    // 1 carries a change; 3 and 4 two slivers, each too small to show against its parent but
    // 4 shows against 1 (so a probe finds it); 6 the rest.
    let mut fake = Fake::new(&[0.0, 2.0, 2.0, 2.3, 2.6, 2.6, 5.0]);
    let found = bisect(&mut fake, OnBootFailure::Skip);
    assert_eq!(points(&found.culprits), vec![1, 6], "{found:?}");
    assert_eq!(found.unverified.len(), 1, "{found:?}");
    assert_eq!(found.unverified[0].point, 4);
    assert_eq!(
        found.unverified[0].note,
        "no change shown against its parent"
    );
}

#[test]
fn a_probe_that_shows_nothing_at_the_cap_leaves_a_range_each_step_asked_once() {
    // Every step is planned to the cap from its first boot and asked once: a probe asked again
    // with fresh boots was a second chance at a wrong class (docs/BISECT.md).
    let mut fake = Fake::new(&[0.0, 0.0, 3.0]);
    fake.faint = vec![1];
    let found = bisect(&mut fake, OnBootFailure::Skip);
    assert!(found.culprits.is_empty(), "{found:?}");
    assert_eq!(found.range, Some((0, 2)));
    let asked: Vec<(StepKind, usize)> = fake.asked.iter().map(|a| (a.kind, a.cap)).collect();
    assert_eq!(
        asked,
        vec![(StepKind::Endpoints, 10), (StepKind::Probe, 10)],
        "{:?}",
        fake.asked
    );
    assert_eq!(fake.kept[1].class, Some(Class::Unclassified));
}

#[test]
fn a_series_whose_bad_end_does_not_boot_ends_with_the_change_that_stops_it() {
    // Bad (3) and point 2 do not boot: --boot-failure bad finds 2 and verifies it by booting
    // its parent.
    let mut fake = Fake::new(&[0.0, 0.0, 0.0, 0.0]);
    fake.broken = vec![2, 3];
    let found = bisect(&mut fake, OnBootFailure::Bad);
    assert_eq!(points(&found.culprits), vec![2], "{found:?}");
    assert_eq!(found.culprits[0].note, "does not boot, its parent does");
    assert!(fake
        .asked
        .iter()
        .all(|a| a.kind == StepKind::Endpoints || a.functional));
    // With --boot-failure skip a bad end that does not boot is an error, not a bisect.
    let mut fake = Fake::new(&[0.0, 0.0, 0.0, 0.0]);
    fake.broken = vec![3];
    let limits = Limits {
        n: 3,
        cap: 10,
        on_boot_failure: OnBootFailure::Skip,
    };
    let err = futures::executor::block_on(search(&mut fake, &limits)).unwrap_err();
    assert!(
        err.to_string()
            .contains("the bad end does not build or boot"),
        "{err}"
    );
}

#[test]
fn a_probe_that_panics_in_a_metric_bisect_is_bad_like_and_verified_by_its_failure() {
    // Bad boots; point 3 does not (a panic a later change fixes).
    let mut fake = Fake::new(&[0.0, 0.0, 0.0, 3.0, 3.0, 3.0]);
    fake.broken = vec![3];
    let found = bisect(&mut fake, OnBootFailure::Bad);
    assert_eq!(points(&found.culprits), vec![3], "{found:?}");
    assert!(found.culprits[0].verdict.is_none());
}

#[test]
fn every_culprit_of_a_series_is_found_in_log2_probes() {
    for n in 1..=12 {
        for culprit in 1..=n {
            let levels: Vec<f64> = (0..=n)
                .map(|k| if k >= culprit { 3.0 } else { 0.0 })
                .collect();
            let mut fake = Fake::new(&levels);
            let found = bisect(&mut fake, OnBootFailure::Skip);
            assert_eq!(points(&found.culprits), vec![culprit], "n={n}");
            let probes = fake
                .asked
                .iter()
                .filter(|a| a.kind == StepKind::Probe)
                .count();
            let most = (n as f64).log2().ceil() as usize;
            assert!(probes <= most, "n={n} culprit={culprit}: {probes} probes");
        }
    }
}

/// Runs `next` to its end with a point's class given by `truth`.
fn walk(n: usize, truth: impl Fn(usize) -> Class) -> (Next, Vec<usize>) {
    let mut classes = BTreeMap::new();
    let mut probed = Vec::new();
    loop {
        match next(0, n, &classes, &|_| false) {
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
fn a_skipped_probe_is_stepped_around_and_can_leave_a_range() {
    let truth = |k: usize| match k {
        3 => Class::Skipped,
        k if k >= 4 => Class::BadLike,
        _ => Class::GoodLike,
    };
    assert_eq!(walk(6, truth).0, Next::Found { lo: 2, hi: 4 });
    let truth = |k: usize| match k {
        3 => Class::Skipped,
        k if k >= 5 => Class::BadLike,
        _ => Class::GoodLike,
    };
    assert_eq!(walk(6, truth).0, Next::Found { lo: 4, hi: 5 });
}

#[test]
fn a_built_point_near_the_middle_is_preferred() {
    let classes = BTreeMap::new();
    assert_eq!(next(0, 12, &classes, &|_| false), Next::Probe(6));
    assert_eq!(next(0, 12, &classes, &|k| k == 7), Next::Probe(7));
    // Too far from the middle to be worth it.
    assert_eq!(next(0, 12, &classes, &|k| k == 10), Next::Probe(6));
}

#[test]
fn an_opposite_probe_counts_as_before_the_change() {
    let truth = |k: usize| match k {
        0..=1 => Class::GoodLike,
        2..=3 => Class::Opposite,
        _ => Class::BadLike,
    };
    assert_eq!(walk(6, truth).0, Next::Found { lo: 3, hi: 4 });
}
