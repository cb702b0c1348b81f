//! `lab bench verdicts`' merged rows: a comparison run again because a verdict was UNKNOWN, and
//! its two records merged (`lab report merge`), decided as the merge decides them: each run's
//! looks, then one more at all the boots (`report::merge::stacked`). A false DIFFERENT counts
//! when the first run or the merge says DIFFERENT: what a user who merges on UNKNOWN sees.

use anyhow::Result;

use super::shapes::{Shape, Truth};
use super::verdicts::{arm_name, definition, run_once, Cell};
use crate::report::merge::stacked;
use crate::stats::{Decision, Repetitions};

/// The shapes the merged rows cover: a normal spread, S1's, two modes, and a change of spread.
pub(super) const SHAPES: [Shape; 4] = [
    Shape::Normal { spread: 1.0 },
    Shape::S1Like,
    Shape::Modes,
    Shape::Spread { factor: 10.0 },
];

/// No change, and 1.5 magnitudes.
pub(super) const TRUTHS: [Truth; 2] = [Truth::Magnitudes(0.0), Truth::Magnitudes(1.5)];

/// What a cell's merged runs came to.
#[derive(Debug, Clone, Default)]
pub(super) struct MergedTally {
    pub(super) runs: usize,
    /// Runs with a verdict UNKNOWN after the first run: run again and merged.
    pub(super) merged: usize,
    /// The first run or the merge said DIFFERENT (with no change: a false DIFFERENT).
    pub(super) any_different: usize,
    /// Of the merges' decisions.
    pub(super) decisions: usize,
    pub(super) different: usize,
    pub(super) same: usize,
}

/// One first run of `cell` and, when it leaves a verdict UNKNOWN, a second on the same host
/// and the merge of both, added to `tally`.
pub(super) fn simulate(
    cell: &Cell,
    repetitions: Repetitions,
    rng: &mut super::shapes::Rng,
    tally: &mut MergedTally,
) -> Result<()> {
    let host = cell.shape.host(rng);
    let (first, have) = run_once(cell, repetitions, host, rng)?;
    let decisions: Vec<Decision> = first
        .verdicts()
        .into_iter()
        .map(|(_, _, v)| v.map(|v| v.decision))
        .collect::<Result<_, _>>()?;
    tally.runs += 1;
    let mut any = decisions.contains(&Decision::Different);
    if decisions.contains(&Decision::Unknown) {
        tally.merged += 1;
        let (second, have_second) = run_once(cell, repetitions, host, rng)?;
        let mut merged = definition(cell)?;
        for arm in (0..cell.arms).map(arm_name) {
            for run in [&first, &second] {
                for &x in run.samples(super::verdicts::METRIC, &arm)? {
                    merged.add_sample(super::verdicts::METRIC, &arm, x)?;
                }
            }
        }
        let reached = |have: &[usize]| have.iter().copied().min().unwrap_or(0);
        merged.set_plan(stacked(&[
            (first.plan().looks.clone(), reached(&have)),
            (second.plan().looks.clone(), reached(&have_second)),
        ]));
        for (_, _, verdict) in merged.verdicts() {
            let decision = verdict?.decision;
            tally.decisions += 1;
            tally.different += usize::from(decision == Decision::Different);
            tally.same += usize::from(decision == Decision::Same);
            any |= decision == Decision::Different;
        }
    }
    tally.any_different += usize::from(any);
    Ok(())
}
