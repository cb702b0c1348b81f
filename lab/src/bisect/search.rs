//! The bisect's decisions, apart from how probes are built and booted: which step to run next,
//! how a probe's verdicts against the two ends classify it, when a candidate is a culprit, and
//! when to look for another. [`search`] runs a whole bisect against [`Steps`], which the real
//! bisect implements by building and booting (`super::steps`) and `lab bench bisect` by
//! simulating boots, so the search is measured as it runs.
//!
//! A bisect looks for the changes that move the metric from good toward bad. A change shown
//! (significant at 1%, whatever its size) counts, not only one beyond the magnitude: the
//! magnitude decides whether there is anything to bisect (the endpoints must be DIFFERENT),
//! and a change carrying a part of it is a culprit of its own. A point that moved away from bad
//! is an opposite change, never a culprit of this one.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::{
    Answer, Candidate, Culprit, Findings, OnBootFailure, Share, Step, StepKind, StepVerdict,
};
use crate::stats::{Decision, Repetitions, Until, Verdict};

/// What a probed point turned out to be, against the ends of its search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// No change toward bad shown against the good end, and short of the bad end.
    GoodLike,
    /// A change toward bad shown against the good end, and none left against the bad end.
    BadLike,
    /// A change toward bad shown against both ends: part of it is in, part still to come.
    Between,
    /// Moved away from the bad end (a change the other way): the change looked for is not in.
    Opposite,
    /// Neither: no change shown against either end, nor SAME, at the cap.
    Unclassified,
    /// It did not build, or did not boot (`--boot-failure skip`): `git bisect`'s exit 125.
    Skipped,
}

impl Class {
    /// Whether the change the search looks for is in this point already.
    pub(crate) fn changed(self) -> bool {
        matches!(self, Class::BadLike | Class::Between)
    }

    /// Whether the point is on the good side of the change.
    fn before(self) -> bool {
        matches!(self, Class::GoodLike | Class::Opposite)
    }

    /// How the bisect log says it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Class::GoodLike => "good-like",
            Class::BadLike => "bad-like",
            Class::Between => "part of the change",
            Class::Opposite => "moved away from bad",
            Class::Unclassified => "unclassified",
            Class::Skipped => "skipped",
        }
    }
}

/// Whether `v` shows a change in the direction of `toward` (+1 or -1): the shift's, or the
/// means' where the typical boot did not move (a change in how often boots land in a mode).
fn shown(v: &Verdict, toward: f64) -> bool {
    v.significant && v.direction() * toward > 0.0
}

/// A probe's class from its verdicts against the search's good end (`vs_lo`: probe - lo) and
/// bad end (`vs_hi`: probe - hi), the change going `toward` (the sign of bad - good).
pub(crate) fn classify(vs_lo: &Verdict, vs_hi: &Verdict, toward: f64) -> Class {
    let moved = shown(vs_lo, toward);
    let short = shown(vs_hi, -toward);
    match (moved, short) {
        (true, true) => Class::Between,
        (true, false) => Class::BadLike,
        (false, _) if shown(vs_lo, -toward) => Class::Opposite,
        (false, true) => Class::GoodLike,
        (false, false) => Class::Unclassified,
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
/// its `lo` the last point before it known not to. The probe is the untested point nearest the
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
        .filter(|(k, c)| *k > &lo && *k < &hi && c.before())
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

/// One step the search asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ask {
    pub kind: StepKind,
    /// The point probed, verified, or compared with what is left.
    pub point: usize,
    /// What it is compared with: a probe's two ends, a verification's parent, the rest's
    /// culprit and bad.
    pub ends: Vec<usize>,
    /// Boots per variant of the first stage, and the most.
    pub initial: usize,
    pub cap: usize,
    /// The smallest change that matters to this step, in the metric's unit (`None`: the
    /// request's, for the endpoints): what its SAME is held to (see `Search::step_magnitude`).
    pub magnitude: Option<f64>,
    /// Bad does not boot (`--boot-failure bad`): one boot of each point, booting or not is the
    /// answer.
    pub functional: bool,
}

/// How a step's comparison is run: its boots, when a variant needs no more, and whether its
/// decisions are exclusive. The real bisect and `lab bench bisect` both take it from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub repetitions: Repetitions,
    pub until: Until,
    /// A probe's two verdicts: its ends differ, so at most one can be "no change".
    pub exclusive: bool,
}

impl Ask {
    /// The step asked for, not yet run.
    pub(crate) fn step(&self) -> Step {
        Step {
            kind: self.kind,
            point: self.point,
            ends: self.ends.clone(),
            record: None,
            verdicts: Vec::new(),
            class: None,
            note: String::new(),
            failed: None,
            unbuilt: false,
            cap: self.cap,
            boots: 0,
            per_variant: Vec::new(),
            seconds: 0.0,
        }
    }

    /// The step's verdicts, each its point against an end, from its comparison run's verdict
    /// of each variant against the run's base (`Step::run_order`): a probe is its run's base,
    /// so its verdicts are the ends' turned round.
    pub(crate) fn verdicts(
        &self,
        verdict_of: impl Fn(usize) -> Result<Verdict>,
    ) -> Result<Vec<StepVerdict>> {
        match self.kind {
            StepKind::Probe => self
                .ends
                .iter()
                .map(|&end| {
                    Ok(StepVerdict {
                        base: end,
                        variant: self.point,
                        verdict: super::flip(verdict_of(end)?),
                    })
                })
                .collect(),
            _ => Ok(vec![StepVerdict {
                base: self.ends[0],
                variant: self.point,
                verdict: verdict_of(self.point)?,
            }]),
        }
    }

    /// The schedule of this step's comparison: a functional step boots each point once; the
    /// endpoints run until DIFFERENT or SAME, every other step until a change is shown or SAME.
    pub(crate) fn schedule(&self) -> Schedule {
        let repetitions = if self.functional {
            Repetitions::Fixed(1)
        } else {
            Repetitions::Adaptive {
                initial: self.initial.min(self.cap),
                cap: self.cap,
            }
        };
        Schedule {
            repetitions,
            until: match self.kind {
                StepKind::Endpoints => Until::Verdict,
                _ => Until::Shown,
            },
            exclusive: self.kind == StepKind::Probe,
        }
    }
}

/// Runs the steps a search asks for: the real bisect builds and boots, `lab bench bisect`
/// simulates. A step's verdicts are its point against each of its ends (point - end); a point
/// that did not build or boot is the step's `failed`, with no verdicts.
pub(crate) trait Steps {
    /// Runs one step (or reads it back, on resume).
    async fn run(&mut self, ask: &Ask) -> Result<Step>;
    /// Keeps a step once the search has classified it.
    fn done(&mut self, step: Step) -> Result<()>;
    /// Whether point `k`'s kernel is built already.
    fn built(&self, k: usize) -> bool;
}

/// The steps a killed bisect had finished, handed back in order on `--resume` instead of run
/// again. A step is in a record only once it finished; the step a kill interrupted, and every
/// step after it, run again (the search asks the same steps of the same answers, so the first
/// that differs ends the replay).
#[derive(Debug, Clone, Default)]
pub(crate) struct Replay {
    done: Vec<Step>,
}

impl Replay {
    /// Replays `done`, the record's steps in the order they ran.
    pub(crate) fn of(done: Vec<Step>) -> Replay {
        Replay { done }
    }

    /// Finished step `number`, if it is the one `ask` asks for; else `None` from here on.
    pub(crate) fn take(&mut self, number: usize, ask: &Ask) -> Option<Step> {
        let same = |s: &&Step| {
            s.kind == ask.kind && s.point == ask.point && s.ends == ask.ends && s.cap == ask.cap
        };
        let step = self.done.get(number).filter(same).cloned();
        if step.is_none() {
            self.done.clear();
        }
        step
    }
}

/// What bounds a search.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The number of changes (bad is point `n`).
    pub n: usize,
    /// The most boots per variant of any step (`--max-repetitions`, default [`DEFAULT_CAP`]).
    pub cap: usize,
    pub on_boot_failure: OnBootFailure,
}

/// A search finds at most this many changes, culprits and unverified candidates together.
pub(crate) const MOST_CHANGES: usize = 4;

/// Boots per variant of a step's first stage: 5, the fewest at which a change can show, for the
/// endpoints and a probe; 7 for the steps that look for changes under the magnitude too (a
/// verification, a look at what is left, a probe in a search for less than twice the
/// magnitude). Starting at 5 would give that first look most of the 1% (what a complete
/// separation of 5 boots costs) and leave the later ones, where such a change shows, little
/// (`stats::Plan::shares`).
const FIRST: usize = 5;
const FIRST_LONG: usize = 7;

/// The most boots per variant of a step unless `--max-repetitions` says otherwise. Every step's
/// plan reaches it from the first boot (its error split over all its looks, 1% in all) and the
/// step stops as soon as its verdicts settle, so it is reached only where a change shows
/// slowly: a change in how often boots land in a mode. A culprit that sends 30% of boots from
/// 0 to 100 (1.5 magnitudes of 20 points) shows at 1% in some 98.6% of 60-boot steps, in 69%
/// of 40-boot ones (a two-sided exact test at the last look's share); `lab bench bisect`
/// measures the whole search (docs/BISECT.md).
pub(crate) const DEFAULT_CAP: usize = 60;

/// Runs a bisect: the endpoints, then first-change searches, each found point verified against
/// its parent, until no change toward bad is left unexplained.
pub(crate) async fn search(steps: &mut impl Steps, limits: &Limits) -> Result<Answer> {
    let n = limits.n;
    let bad_mode = limits.on_boot_failure == OnBootFailure::Bad;
    let ask = Ask {
        kind: StepKind::Endpoints,
        point: n,
        ends: vec![0],
        initial: FIRST,
        cap: limits.cap,
        magnitude: None,
        functional: false,
    };
    let mut ends = steps.run(&ask).await?;
    let functional = match ends.failed {
        Some(f) if f == n && bad_mode && !ends.unbuilt => {
            ends.note = "bad does not boot: the bisect looks for the change that stops it".into();
            true
        }
        Some(f) => bail!(
            "the {} end does not build or boot: {}",
            if f == 0 { "good" } else { "bad" },
            ends.note
        ),
        None => false,
    };
    let total = ends.verdicts.first().map(|v| v.verdict.clone());
    steps.done(ends)?;
    let toward = match (&total, functional) {
        (_, true) => 1.0,
        (Some(t), false) if t.decision == Decision::Different => t.change().signum(),
        (Some(t), false) => return Ok(Answer::NothingToBisect { verdict: t.clone() }),
        (None, false) => bail!("the endpoints' step gave no verdict"),
    };
    let searching = total.as_ref().map_or(0.0, |t| t.change().abs());
    let mut search = Search {
        steps,
        limits,
        toward,
        functional,
        total,
        searching,
        findings: Findings::default(),
    };
    search.go().await?;
    Ok(Answer::Found(search.findings))
}

/// A search under way.
struct Search<'a, S: Steps> {
    steps: &'a mut S,
    limits: &'a Limits,
    toward: f64,
    functional: bool,
    /// Bad against good (none when bad does not boot).
    total: Option<Verdict>,
    /// The size of the change the current search looks for: the whole change, then what is
    /// left after the last point found.
    searching: f64,
    findings: Findings,
}

impl<S: Steps> Search<'_, S> {
    /// The magnitude a probe or verification holds SAME to: the endpoints', or half the change
    /// searched for when that is smaller. A point SAME as an end within a magnitude as large as
    /// the change looked for says nothing about which side of it the point is on (a change
    /// right at the magnitude passes as SAME in some 5% of comparisons by design); within half
    /// of it, it does.
    fn step_magnitude(&self) -> Option<f64> {
        let m = self.total.as_ref()?.magnitude;
        Some(m.min(self.searching / 2.0))
    }

    async fn go(&mut self) -> Result<()> {
        let n = self.limits.n;
        let mut lo_end = 0;
        loop {
            let (lo, hi, hi_step) = self.first_change(lo_end).await?;
            if hi > lo + 1 {
                self.findings.range = Some((lo, hi));
                return Ok(());
            }
            let failed_to_boot = self.verify(lo, hi).await?;
            let found = self.findings.culprits.len() + self.findings.unverified.len();
            if hi == n || found >= MOST_CHANGES || self.functional || failed_to_boot {
                return Ok(());
            }
            match self.more_left(hi, hi_step.as_ref()).await? {
                Some(left) => self.searching = left,
                None => return Ok(()),
            }
            lo_end = hi;
        }
    }

    /// A first-change search over `lo_end..=n`: the last point before the change, the first
    /// with it, and that point's probe step (none when it is bad).
    async fn first_change(&mut self, lo_end: usize) -> Result<(usize, usize, Option<Step>)> {
        let n = self.limits.n;
        let mut classes: BTreeMap<usize, Class> = BTreeMap::new();
        let mut probes: BTreeMap<usize, Step> = BTreeMap::new();
        loop {
            let steps = &*self.steps;
            match next(lo_end, n, &classes, &|k| steps.built(k)) {
                Next::Found { lo, hi } => return Ok((lo, hi, probes.remove(&hi))),
                Next::Probe(k) => {
                    let step = self.probe(k, lo_end).await?;
                    let class = step.class.unwrap_or(Class::Unclassified);
                    if class == Class::Opposite && !self.findings.opposite.contains(&k) {
                        self.findings.opposite.push(k);
                    }
                    classes.insert(k, class);
                    probes.insert(k, step);
                }
            }
        }
    }

    /// Probes point `k` against `lo_end` and bad.
    async fn probe(&mut self, k: usize, lo_end: usize) -> Result<Step> {
        let n = self.limits.n;
        // A change of less than twice the magnitude (what a later search looks for, mostly)
        // seldom shows in a probe's first boots: such a probe starts with more.
        let small = self
            .total
            .as_ref()
            .is_some_and(|t| self.searching < 2.0 * t.magnitude);
        let ask = Ask {
            kind: StepKind::Probe,
            point: k,
            ends: if self.functional {
                vec![lo_end]
            } else {
                vec![lo_end, n]
            },
            initial: if small { FIRST_LONG } else { FIRST },
            cap: self.limits.cap,
            magnitude: self.step_magnitude(),
            functional: self.functional,
        };
        let mut step = self.steps.run(&ask).await?;
        let class = match step.failed {
            Some(f) if f == k && step.unbuilt => Class::Skipped,
            Some(f) if f == k => match self.limits.on_boot_failure {
                OnBootFailure::Skip => Class::Skipped,
                OnBootFailure::Bad => Class::BadLike,
            },
            Some(f) => bail!(
                "{f}, an end of a probe, did not build or boot: {}",
                step.note
            ),
            None if self.functional => Class::GoodLike,
            None => match step.verdicts.as_slice() {
                [lo, hi] => classify(&lo.verdict, &hi.verdict, self.toward),
                other => bail!("a probe gave {} verdicts, not 2", other.len()),
            },
        };
        step.class = Some(class);
        self.steps.done(step.clone())?;
        Ok(step)
    }

    /// Verifies `hi` against its parent `lo`; it becomes a culprit, or an unverified candidate.
    /// Returns whether `hi` failed to boot (what `--boot-failure bad` looks for).
    async fn verify(&mut self, lo: usize, hi: usize) -> Result<bool> {
        let ask = Ask {
            kind: StepKind::Verify,
            point: hi,
            ends: vec![lo],
            initial: FIRST_LONG,
            cap: self.limits.cap,
            magnitude: self.step_magnitude(),
            functional: self.functional,
        };
        let mut step = self.steps.run(&ask).await?;
        let bad_mode = self.limits.on_boot_failure == OnBootFailure::Bad;
        let verdict = step.verdicts.first().map(|v| v.verdict.clone());
        let mut failed_to_boot = false;
        match (step.failed, verdict) {
            (Some(f), _) if f == hi && bad_mode && !step.unbuilt => {
                step.note = "does not boot, its parent does".into();
                failed_to_boot = true;
                self.findings.culprits.push(Culprit {
                    point: hi,
                    verdict: None,
                    share: None,
                    note: step.note.clone(),
                });
            }
            (Some(f), _) => bail!("{f} did not build or boot in a verification: {}", step.note),
            (None, _) if self.functional => {
                step.note = "boots: the failure is not this change's alone".into();
                self.findings.unverified.push(Candidate {
                    point: hi,
                    verdict: None,
                    note: step.note.clone(),
                });
            }
            (None, Some(v)) if shown(&v, self.toward) => {
                let share = self.total.as_ref().and_then(|t| Share::of(&v, t));
                self.findings.culprits.push(Culprit {
                    point: hi,
                    verdict: Some(v),
                    share,
                    note: String::new(),
                });
            }
            (None, v) => {
                step.note = match &v {
                    Some(v) if shown(v, -self.toward) => "moved away from bad: not a culprit",
                    Some(v) if v.decision == Decision::Same => "SAME as its parent",
                    _ => "no change shown against its parent",
                }
                .into();
                self.findings.unverified.push(Candidate {
                    point: hi,
                    verdict: v,
                    note: step.note.clone(),
                });
            }
        }
        self.steps.done(step)?;
        Ok(failed_to_boot)
    }

    /// The change toward bad left after `hi`, if one shows: its probe showed one against bad,
    /// or, when that probe settled nothing against bad, a look at bad against `hi` with more
    /// boots does (held to SAME within half the magnitude: "nothing left" must mean little).
    async fn more_left(&mut self, hi: usize, probe: Option<&Step>) -> Result<Option<f64>> {
        let n = self.limits.n;
        if let Some(against_bad) = probe.and_then(|s| s.verdicts.get(1)) {
            if shown(&against_bad.verdict, -self.toward) {
                return Ok(Some(against_bad.verdict.change().abs()));
            }
            if against_bad.verdict.decision == Decision::Same {
                return Ok(None);
            }
        }
        let ask = Ask {
            kind: StepKind::Rest,
            point: n,
            ends: vec![hi],
            initial: FIRST_LONG,
            cap: self.limits.cap,
            magnitude: self.total.as_ref().map(|t| t.magnitude / 2.0),
            functional: false,
        };
        let mut step = self.steps.run(&ask).await?;
        if let Some(f) = step.failed {
            bail!(
                "{f} did not build or boot looking at what is left: {}",
                step.note
            );
        }
        let left = step
            .verdicts
            .first()
            .filter(|v| shown(&v.verdict, self.toward))
            .map(|v| v.verdict.change().abs());
        step.note = if left.is_some() {
            "a change toward bad is left: searched on".into()
        } else {
            "nothing more toward bad shown".into()
        };
        self.steps.done(step)?;
        Ok(left)
    }
}

#[cfg(test)]
mod tests;
