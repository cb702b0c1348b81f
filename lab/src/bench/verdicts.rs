//! `lab bench verdicts`: how often the lab's verdicts err, measured by the lab on its own
//! decision code. Every run of a cell is a comparison as `lab compare` makes it: a
//! [`Comparison`] with the schedule's [`Plan`], boots added stage by stage and the next stage
//! chosen by the runner's own [`DecisionPoint::after_stage`]; only the boots are simulated
//! (`shapes`). A cell is a shape, a true change and 2 or 3 variants (the base and one or two
//! variants with that change); its figures: a false DIFFERENT anywhere in the comparison (no
//! change), the share of decisions DIFFERENT and SAME, the boots per variant, and how often the
//! intervals of the last look held the true shift and the true difference of the means.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;

use super::shapes::{self, Shape, Truth};
use super::{merged, HostNote};
use crate::report::{Comparison, DecisionPoint, Direction};
use crate::stats::{Decision, Plan, Repetitions, Until};

/// The simulated metric's name.
pub(super) const METRIC: &str = "x";

/// Runs per cell unless told otherwise.
pub const RUNS: usize = 10_000;

/// The true changes of every shape, in magnitudes, and S1's.
const TRUTHS: [Truth; 5] = [
    Truth::Magnitudes(0.0),
    Truth::Magnitudes(0.8),
    Truth::Magnitudes(1.0),
    Truth::Magnitudes(1.5),
    Truth::S1,
];

/// The targets the table is held to (docs/VERDICTS.md).
const MOST_FALSE_DIFFERENT: f64 = 0.01;
const MOST_FALSE_SAME: f64 = 0.05;
const LEAST_S1_DIFFERENT: f64 = 0.99;
const MOST_S1_BOOTS: f64 = 6.0;
/// S1 with 5% of the other boots moved where the revert's land: DIFFERENT within this many
/// boots a side in at least this share of runs (issue V3).
const QUICK_BOOTS: usize = 8;
const LEAST_S1_MOVED_QUICK: f64 = 0.95;

/// One cell of the table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cell {
    pub(super) shape: Shape,
    pub(super) truth: Truth,
    /// Variants, the base included.
    pub(super) arms: usize,
}

/// What a cell's runs came to.
#[derive(Debug, Clone, Default)]
struct Tally {
    runs: usize,
    /// Runs with any DIFFERENT (with no change: the family-wise false DIFFERENT).
    any_different: usize,
    decisions: usize,
    different: usize,
    same: usize,
    boots: usize,
    arms: usize,
    /// Runs with every decision DIFFERENT within `QUICK_BOOTS` boots a side.
    quick: usize,
    shift_checked: usize,
    shift_covered: usize,
    mean_checked: usize,
    mean_covered: usize,
}

impl Tally {
    fn rate(n: usize, of: usize) -> f64 {
        if of == 0 {
            f64::NAN
        } else {
            n as f64 / of as f64
        }
    }

    fn false_different(&self) -> f64 {
        Tally::rate(self.any_different, self.runs)
    }

    fn different(&self) -> f64 {
        Tally::rate(self.different, self.decisions)
    }

    fn same(&self) -> f64 {
        Tally::rate(self.same, self.decisions)
    }

    fn boots_per_variant(&self) -> f64 {
        Tally::rate(self.boots, self.arms)
    }
}

/// The table `lab bench verdicts` prints.
#[derive(Debug, Clone)]
pub struct VerdictsBench {
    rows: Vec<(Cell, Tally)>,
    /// Re-run while UNKNOWN and merged ([`merged`]).
    merged: Vec<(Cell, merged::MergedTally)>,
    runs: usize,
    seed: u64,
    repetitions: Repetitions,
    seconds: f64,
    host: HostNote,
}

/// Simulates `runs` comparisons per cell, seeded with `seed`, on the default schedule.
pub fn verdicts(runs: usize, seed: u64) -> Result<VerdictsBench> {
    let repetitions = Repetitions::default();
    let mut cells = Vec::new();
    for shape in Shape::ALL {
        for arms in [2, 3] {
            for truth in TRUTHS.into_iter().filter(|t| shape.carries(*t)) {
                cells.push(Cell { shape, truth, arms });
            }
        }
    }
    let merged_cells: Vec<Cell> = merged::SHAPES
        .into_iter()
        .flat_map(|shape| {
            merged::TRUTHS.map(|truth| Cell {
                shape,
                truth,
                arms: 2,
            })
        })
        .collect();
    let mut host = HostNote::start();
    let started = Instant::now();
    let threads = host.cores.max(1);
    let tallies = on_threads(threads, cells.len(), |i| {
        let mut rng = shapes::rng(seed, i as u64);
        let mut tally = Tally::default();
        for _ in 0..runs {
            simulate(&cells[i], repetitions, &mut rng, &mut tally)?;
        }
        Ok(tally)
    })?;
    let merged_tallies = on_threads(threads, merged_cells.len(), |i| {
        let mut rng = shapes::rng(seed, MERGED_STREAMS + i as u64);
        let mut tally = merged::MergedTally::default();
        for _ in 0..runs {
            merged::simulate(&merged_cells[i], repetitions, &mut rng, &mut tally)?;
        }
        Ok(tally)
    })?;
    host.finish();
    Ok(VerdictsBench {
        rows: cells.into_iter().zip(tallies).collect(),
        merged: merged_cells.into_iter().zip(merged_tallies).collect(),
        runs,
        seed,
        repetitions,
        seconds: started.elapsed().as_secs_f64(),
        host,
    })
}

/// The merged rows' random streams start here, past every cell's.
const MERGED_STREAMS: u64 = 100_000;

/// `work(i)` for every `i` below `n`, spread over `threads` threads; the results in order.
fn on_threads<T: Send>(
    threads: usize,
    n: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let done: Vec<Result<Vec<(usize, T)>>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|worker| {
                let work = &work;
                scope.spawn(move || {
                    (worker..n)
                        .step_by(threads)
                        .map(|i| Ok((i, work(i)?)))
                        .collect()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .collect()
    });
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for worker in done {
        for (i, t) in worker? {
            out[i] = Some(t);
        }
    }
    Ok(out
        .into_iter()
        .map(|t| t.expect("every cell ran"))
        .collect())
}

/// One comparison of `cell`, as the runner makes it, added to `tally`.
fn simulate(
    cell: &Cell,
    repetitions: Repetitions,
    rng: &mut shapes::Rng,
    tally: &mut Tally,
) -> Result<()> {
    let host = cell.shape.host(rng);
    let (c, have) = run_once(cell, repetitions, host, rng)?;
    let true_mean = cell.shape.mean_difference(host, cell.truth);
    let true_shift = (cell.shape.shifts() || cell.truth.size() == 0.0)
        .then(|| cell.truth.size() * cell.shape.magnitude());
    let mut any = false;
    let mut all_different = true;
    for (_, _, verdict) in c.verdicts() {
        let v = verdict?;
        all_different &= v.decision == Decision::Different;
        tally.decisions += 1;
        match v.decision {
            Decision::Different => {
                tally.different += 1;
                any = true;
            }
            Decision::Same => tally.same += 1,
            Decision::Unknown => {}
        }
        if let (Some(shift), Some(ci)) = (true_shift, v.interval) {
            tally.shift_checked += 1;
            tally.shift_covered += usize::from(ci.contains(shift));
        }
        if let Some(ci) = v.mean_interval {
            tally.mean_checked += 1;
            tally.mean_covered += usize::from(ci.contains(true_mean));
        }
    }
    tally.runs += 1;
    tally.any_different += usize::from(any);
    tally.quick += usize::from(all_different && have.iter().all(|&n| n <= QUICK_BOOTS));
    tally.boots += have.iter().sum::<usize>();
    tally.arms += cell.arms;
    Ok(())
}

/// The simulated comparison's empty definition: `cell`'s arms and primary metric.
pub(super) fn definition(cell: &Cell) -> Result<Comparison> {
    let names = (0..cell.arms).map(arm_name);
    let mut c = Comparison::new("bench", names)?;
    c.add_metric(
        METRIC,
        "",
        Direction::Neutral,
        cell.shape.declared_magnitude(),
    )?;
    c.set_range(METRIC, cell.shape.range())?;
    c.make_primary(METRIC, None)?;
    Ok(c)
}

/// Arm `i`'s column: the base, then `v1`, `v2`.
pub(super) fn arm_name(i: usize) -> String {
    if i == 0 {
        "base".to_string()
    } else {
        format!("v{i}")
    }
}

/// One comparison of `cell` on `host`, staged and decided as the runner does: the comparison
/// and the boots each arm took.
pub(super) fn run_once(
    cell: &Cell,
    repetitions: Repetitions,
    host: shapes::Host,
    rng: &mut shapes::Rng,
) -> Result<(Comparison, Vec<usize>)> {
    let mut c = definition(cell)?;
    // As the runner does: the default cap raised to the boots SAME needs on the metric.
    let repetitions = repetitions.reaching(c.same_min_boots());
    c.set_plan(Plan::looks(repetitions.looks()));
    let mut have = vec![0; cell.arms];
    let mut active: Vec<usize> = (0..cell.arms).collect();
    let mut target = repetitions.initial();
    loop {
        for &arm in &active {
            while have[arm] < target {
                let value = if arm == 0 {
                    cell.shape.draw(rng, host, Truth::Magnitudes(0.0))
                } else {
                    cell.shape.draw_variant(rng, host, cell.truth)
                };
                c.add_sample(METRIC, &arm_name(arm), value)?;
                have[arm] += 1;
            }
        }
        match DecisionPoint::after_stage(&c, repetitions, Until::Verdict, &have).1 {
            Some((next, n)) => (active, target) = (next, n),
            None => break,
        }
    }
    Ok((c, have))
}

/// A rate as a percentage with `digits` decimals, `-` for none.
fn pct(rate: f64, digits: usize) -> String {
    if rate.is_nan() {
        "-".to_string()
    } else {
        format!("{:.digits$}%", 100.0 * rate)
    }
}

impl VerdictsBench {
    /// The worst false DIFFERENT with no change, the worst SAME at 1.5 magnitudes (over the
    /// shapes held to the targets), and the S1-like two-variant cell's DIFFERENT rate and
    /// boots.
    fn worst(&self) -> (f64, f64, f64, f64) {
        let at = |k: f64| {
            self.rows
                .iter()
                .filter(move |(c, _)| c.truth == Truth::Magnitudes(k) && c.shape.held_to_targets())
        };
        let merged_at = |k: f64| {
            self.merged
                .iter()
                .filter(move |(c, _)| c.truth == Truth::Magnitudes(k) && c.shape.held_to_targets())
        };
        let false_different = at(0.0)
            .map(|(_, t)| t.false_different())
            .chain(merged_at(0.0).map(|(_, t)| Tally::rate(t.any_different, t.runs)))
            .fold(0.0, f64::max);
        let false_same = at(1.5)
            .map(|(_, t)| t.same())
            .chain(merged_at(1.5).map(|(_, t)| Tally::rate(t.same, t.decisions)))
            .filter(|r| !r.is_nan())
            .fold(0.0, f64::max);
        let s1 = self
            .rows
            .iter()
            .find(|(c, _)| c.shape == Shape::S1Like && c.truth == Truth::S1 && c.arms == 2)
            .map(|(_, t)| t.clone())
            .unwrap_or_default();
        (
            false_different,
            false_same,
            s1.different(),
            s1.boots_per_variant(),
        )
    }

    /// The merged rows: a run again on UNKNOWN, and the merge of both records.
    fn render_merged(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nre-run while a verdict is UNKNOWN and the two records merged (`lab report merge`: \
             each run's looks, then one more at all the boots), one variant"
        );
        let _ = writeln!(
            out,
            "{:<16} {:>6} {:>7} {:>10} {:>9} {:>7}",
            "shape", "change", "merged", "false DIFF", "DIFFERENT", "SAME"
        );
        for (cell, t) in &self.merged {
            let false_different = if cell.truth == Truth::Magnitudes(0.0) {
                pct(Tally::rate(t.any_different, t.runs), 2)
            } else {
                "-".to_string()
            };
            let _ = writeln!(
                out,
                "{:<16} {:>6} {:>7} {:>10} {:>9} {:>7}",
                cell.shape.name(),
                cell.truth.label(),
                pct(Tally::rate(t.merged, t.runs), 1),
                false_different,
                pct(Tally::rate(t.different, t.decisions), 1),
                pct(Tally::rate(t.same, t.decisions), 1),
            );
        }
        let _ = writeln!(
            out,
            "merged: runs run again; false DIFF: the first run or the merge DIFFERENT, no \
             change; DIFFERENT, SAME: of the merges' decisions"
        );
    }

    /// How often S1 with 5% of the other boots moved was DIFFERENT within `QUICK_BOOTS` boots
    /// a side (one variant).
    fn s1_moved_quick(&self) -> f64 {
        self.rows
            .iter()
            .find(|(c, _)| {
                c.shape == Shape::S1Moved { moved: 0.05 } && c.truth == Truth::S1 && c.arms == 2
            })
            .map_or(f64::NAN, |(_, t)| Tally::rate(t.quick, t.runs))
    }

    /// The table, the targets and the summary line (`worst: ...`, the last line).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let looks: Vec<String> = self
            .repetitions
            .looks()
            .iter()
            .map(usize::to_string)
            .collect();
        let _ = writeln!(
            out,
            "lab bench verdicts: {} simulated comparisons a cell, seed {}, decided by the lab's own \
             code at the default schedule's looks ({} boots a side; on to 19 or 39 where \
             SAME needs that many, as the runner does)",
            self.runs,
            self.seed,
            looks.join(", ")
        );
        let _ = writeln!(
            out,
            "m: the magnitude (1, or 20 points for shares); arms: variants with the base; change: \
             the variants' true change in m (S1: S1's revert, 3.25m elsewhere)\n"
        );
        let _ = writeln!(
            out,
            "{:<16} {:>4} {:>6} {:>10} {:>9} {:>7} {:>6} {:>11} {:>11}",
            "shape",
            "arms",
            "change",
            "false DIFF",
            "DIFFERENT",
            "SAME",
            "boots",
            "cover shift",
            "cover means"
        );
        for (cell, t) in &self.rows {
            let false_different = if cell.truth == Truth::Magnitudes(0.0) {
                pct(t.false_different(), 2)
            } else {
                "-".to_string()
            };
            let _ = writeln!(
                out,
                "{:<16} {:>4} {:>6} {:>10} {:>9} {:>7} {:>6.1} {:>11} {:>11}",
                cell.shape.name(),
                cell.arms,
                cell.truth.label(),
                false_different,
                pct(t.different(), 1),
                pct(t.same(), 1),
                t.boots_per_variant(),
                pct(Tally::rate(t.shift_covered, t.shift_checked), 1),
                pct(Tally::rate(t.mean_covered, t.mean_checked), 1),
            );
        }
        self.render_merged(&mut out);
        let (false_different, false_same, s1_different, s1_boots) = self.worst();
        let unbounded_same = self
            .rows
            .iter()
            .filter(|(c, _)| !c.shape.held_to_targets() && c.truth == Truth::Magnitudes(1.5))
            .map(|(_, t)| t.same())
            .fold(0.0, f64::max);
        let s1_moved_quick = self.s1_moved_quick();
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        let _ = writeln!(
            out,
            "\nfalse DIFF: runs with any DIFFERENT, no change (all variants' decisions, all \
             looks); DIFFERENT, SAME: of all decisions; boots: per variant, base included; \
             cover: the last look's 95% intervals holding the true shift (where the change is a \
             shift) and the true difference of the means"
        );
        let _ = writeln!(
            out,
            "targets: false DIFFERENT <= {} ({}); false SAME at 1.5m <= {} ({}); S1-like with one \
             variant DIFFERENT >= {} with <= {MOST_S1_BOOTS} boots per variant ({}); S1 with 5% \
             of the boots moved DIFFERENT within {QUICK_BOOTS} boots a side >= {} ({})",
            pct(MOST_FALSE_DIFFERENT, 0),
            met(false_different <= MOST_FALSE_DIFFERENT),
            pct(MOST_FALSE_SAME, 0),
            met(false_same <= MOST_FALSE_SAME),
            pct(LEAST_S1_DIFFERENT, 0),
            met(s1_different >= LEAST_S1_DIFFERENT && s1_boots <= MOST_S1_BOOTS),
            pct(LEAST_S1_MOVED_QUICK, 0),
            met(s1_moved_quick >= LEAST_S1_MOVED_QUICK),
        );
        let _ = writeln!(
            out,
            "limit: on an unbounded metric a change carried by few boots passes as SAME at 1.5m \
             in up to {} (the lognormal rows: no boot count bounds it; SAME needs 9 boots a \
             side there). On a bounded one SAME needs the boots that see a change carried by \
             1.5 m / range of them in 95% of runs: 9 a side at 20 points of a share, 19 at 10, \
             39 at 5, and the schedule's cap is raised to reach them",
            pct(unbounded_same, 1)
        );
        let _ = writeln!(out, "{:.1} s on {}", self.seconds, self.host.text());
        let _ = writeln!(
            out,
            "worst: false DIFFERENT {}, false SAME at 1.5x {}, S1-like DIFFERENT {} at {:.1} boots \
             per variant, S1 with 5% moved DIFFERENT within {QUICK_BOOTS} {}",
            pct(false_different, 2),
            pct(false_same, 1),
            pct(s1_different, 1),
            s1_boots,
            pct(s1_moved_quick, 1)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_table_names_every_cell_and_ends_with_the_summary() {
        let bench = verdicts(20, 7).unwrap();
        let text = bench.render();
        let last = text.lines().last().unwrap();
        assert!(last.starts_with("worst: false DIFFERENT "), "{last}");
        assert!(last.contains("boots per variant"), "{last}");
        for shape in Shape::ALL {
            assert!(text.contains(&shape.name()), "{}\n{text}", shape.name());
        }
        // The cluster cannot lose S1's 65 points: no such row.
        assert_eq!(bench.rows.len(), 2 * (Shape::ALL.len() * 5 - 1));
        for (cell, t) in &bench.rows {
            assert_eq!(t.runs, 20);
            // The cap: 10, or what SAME needs at S3's 10 points (19) and S5's 5 (39).
            let cap = match cell.shape.magnitude() {
                10.0 => 19.0,
                5.0 => 39.0,
                _ => 10.0,
            };
            let boots = t.boots_per_variant();
            assert!(
                (5.0..=cap).contains(&boots),
                "{}: {boots}",
                cell.shape.name()
            );
        }
        assert!(text.contains("limit: on an unbounded metric"), "{text}");
        // Seeded: the same seed, the same table.
        let again = verdicts(20, 7).unwrap();
        for ((_, a), (_, b)) in bench.rows.iter().zip(&again.rows) {
            assert_eq!(
                (a.different, a.same, a.boots),
                (b.different, b.same, b.boots)
            );
        }
    }
}
