//! `lab bench bisect`: how often the bisect names the right changes, measured by the lab on its
//! own search. Each simulated bisect is `bisect::search::search` as `lab bisect` runs it; its
//! steps are comparisons as the real steps make them (the step's own schedule, a
//! [`Comparison`] with its plan, the runner's [`DecisionPoint::after_stage`]), on boots drawn
//! for each point of a series (`shapes`). Only the kernels and the boots are simulated.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;

use super::shapes::{self, Shape, Truth};
use super::HostNote;
use crate::bisect::search::{self, Ask, Limits, Steps};
use crate::bisect::{Answer, OnBootFailure, Step};
use crate::report::{Comparison, DecisionPoint, Direction};
use crate::stats::{Plan, Range};

/// Simulated bisects per series unless told otherwise.
pub const RUNS: usize = 1000;

/// The metric's smallest change that matters, in points (S1's).
const MAGNITUDE: f64 = 20.0;

/// A series of changes: each point's boots.
#[derive(Debug, Clone, Copy)]
struct Series {
    name: &'static str,
    /// Each change's effect in magnitudes (`S1`: the point that brings S1's revert), in order;
    /// point `k` carries changes 1..=k.
    changes: &'static [Effect],
    /// The changes that carry at least the magnitude toward bad: what must be found.
    must: &'static [usize],
    /// Points whose kernels do not boot (a panic in an initcall): each such boot fails.
    no_boot: &'static [usize],
    /// What the bisect is told a boot failure means (`--boot-failure`).
    on_boot_failure: OnBootFailure,
    /// Boots land at 0 or 100 (a share), a change of `k` magnitudes sending `k * 20`% of them
    /// to 100: the typical boot does not move (issue V3). Else S1's shape or normal boots.
    modes: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Effect {
    None,
    Magnitudes(f64),
    /// S1's revert (the S1-like shape's second distribution).
    S1,
}

const SERIES: [Series; 9] = [
    Series {
        name: "S1-like, culprit 4 of 6",
        changes: &[
            Effect::None,
            Effect::None,
            Effect::None,
            Effect::S1,
            Effect::None,
            Effect::None,
        ],
        must: &[4],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    Series {
        name: "two culprits: +1.5m at 2, +1.0m at 4",
        changes: &[
            Effect::None,
            Effect::Magnitudes(1.5),
            Effect::None,
            Effect::Magnitudes(1.0),
            Effect::None,
            Effect::None,
        ],
        must: &[2],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    Series {
        name: "a sub-magnitude neighbour: +0.8m at 2, +1.7m at 4",
        changes: &[
            Effect::None,
            Effect::Magnitudes(0.8),
            Effect::None,
            Effect::Magnitudes(1.7),
            Effect::None,
            Effect::None,
        ],
        must: &[4],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    Series {
        name: "an opposite change: -1.5m at 2, +4m at 4",
        changes: &[
            Effect::None,
            Effect::Magnitudes(-1.5),
            Effect::None,
            Effect::Magnitudes(4.0),
            Effect::None,
            Effect::None,
        ],
        must: &[4],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    // A point that does not boot, fixed by the next change: skipped (the default), and S1's
    // culprit still found beside it.
    Series {
        name: "S1-like, point 2 does not boot (skipped)",
        changes: &[
            Effect::None,
            Effect::None,
            Effect::None,
            Effect::S1,
            Effect::None,
            Effect::None,
        ],
        must: &[4],
        no_boot: &[2],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    // A change that stops the kernel booting, with `--boot-failure bad`: the bisect of booting
    // names it (a bad end that does not boot once had no answer).
    Series {
        name: "patch 3 panics at boot (--boot-failure bad)",
        changes: &[Effect::None; 6],
        must: &[3],
        no_boot: &[3, 4, 5, 6],
        on_boot_failure: OnBootFailure::Bad,
        modes: false,
    },
    // A culprit that sends 30% of the boots to the high mode (1.5 magnitudes of the mean): the
    // typical boot stays at 0, so only the difference of the means is beyond the magnitude.
    Series {
        name: "a mode culprit: 30% of boots to 100 at 4",
        changes: &[
            Effect::None,
            Effect::None,
            Effect::None,
            Effect::Magnitudes(1.5),
            Effect::None,
            Effect::None,
        ],
        must: &[4],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: true,
    },
    // Six changes, none of which moves the metric: "nothing to bisect" (or no culprit) is the
    // answer; any culprit named is wrong.
    Series {
        name: SAME_CODE,
        changes: &[Effect::None; 6],
        must: &[],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
    // A longer series: more probes, each one more chance to go astray.
    Series {
        name: "a longer series: +1.5m at 11 of 16",
        changes: &LONGER,
        must: &[11],
        no_boot: &[],
        on_boot_failure: OnBootFailure::Skip,
        modes: false,
    },
];

/// The same-code series' name.
const SAME_CODE: &str = "same code: six changes, none moves the metric";

/// Sixteen changes, the eleventh +1.5 magnitudes.
const LONGER: [Effect; 16] = {
    let mut changes = [Effect::None; 16];
    changes[10] = Effect::Magnitudes(1.5);
    changes
};

impl Series {
    fn n(&self) -> usize {
        self.changes.len()
    }

    /// Point `k`'s level: S1's revert, or the sum of its changes in magnitudes.
    fn level(&self, k: usize) -> Level {
        if self.changes[..k].contains(&Effect::S1) {
            return Level::Revert;
        }
        Level::Magnitudes(
            self.changes[..k]
                .iter()
                .map(|e| match e {
                    Effect::Magnitudes(m) => *m,
                    _ => 0.0,
                })
                .sum(),
        )
    }

    /// The changes (points) that move the metric toward bad, and with `--boot-failure bad` the
    /// one that stops the kernel booting: a culprit anywhere else is wrong.
    fn toward_bad(&self) -> Vec<usize> {
        let stops_booting = (self.on_boot_failure == OnBootFailure::Bad)
            .then(|| self.first_no_boot())
            .flatten();
        (1..=self.n())
            .filter(|&k| {
                Some(k) == stops_booting
                    || match self.changes[k - 1] {
                        Effect::S1 => true,
                        Effect::Magnitudes(m) => m > 0.0,
                        Effect::None => false,
                    }
            })
            .collect()
    }

    /// The first point that does not boot.
    fn first_no_boot(&self) -> Option<usize> {
        self.no_boot.iter().copied().min()
    }

    /// The true share of the change point `k` carries, in percent.
    fn share(&self, k: usize, host: &SeriesHost) -> f64 {
        let mean = |k: usize| host.mean(self.level(k));
        100.0 * (mean(k) - mean(k - 1)) / (mean(self.n()) - mean(0))
    }

    fn is_s1(&self) -> bool {
        self.changes.contains(&Effect::S1)
    }
}

#[derive(Debug, Clone, Copy)]
enum Level {
    Magnitudes(f64),
    Revert,
}

/// A bisect run's host: S1's shape for S1's series, else normal boots around 50 with S1's
/// spread (10-20 points, drawn per run).
struct SeriesHost {
    s1: Option<shapes::Host>,
    spread: f64,
    modes: bool,
}

impl SeriesHost {
    fn new(series: &Series, rng: &mut shapes::Rng) -> SeriesHost {
        use rand::RngExt;
        SeriesHost {
            s1: series.is_s1().then(|| Shape::S1Like.host(rng)),
            spread: 10.0 + 10.0 * rng.random::<f64>(),
            modes: series.modes,
        }
    }

    fn truth(level: Level) -> Truth {
        match level {
            Level::Revert => Truth::S1,
            Level::Magnitudes(k) => Truth::Magnitudes(k),
        }
    }

    fn draw(&self, level: Level, rng: &mut shapes::Rng) -> f64 {
        match self.s1 {
            Some(host) => Shape::S1Like.draw(rng, host, SeriesHost::truth(level)),
            None => {
                use rand::RngExt;
                let Level::Magnitudes(k) = level else {
                    unreachable!("only S1's series has a revert")
                };
                if !self.modes {
                    50.0 + MAGNITUDE * k + self.spread * shapes::standard_normal(rng)
                } else if rng.random::<f64>() < MAGNITUDE * k / 100.0 {
                    100.0
                } else {
                    0.0
                }
            }
        }
    }

    fn mean(&self, level: Level) -> f64 {
        match (self.s1, level) {
            (Some(host), level) => Shape::S1Like.mean_difference(host, SeriesHost::truth(level)),
            (None, Level::Magnitudes(k)) => MAGNITUDE * k,
            (None, Level::Revert) => unreachable!("only S1's series has a revert"),
        }
    }
}

/// Steps on simulated boots.
struct Simulated<'a> {
    series: &'a Series,
    host: SeriesHost,
    rng: &'a mut shapes::Rng,
    boots: usize,
    /// Points whose kernels do not build.
    broken: Vec<usize>,
}

impl Steps for Simulated<'_> {
    async fn run(&mut self, ask: &Ask) -> Result<Step> {
        let mut step = ask.step();
        let order = step.run_order();
        if let Some(&p) = order.iter().find(|p| self.broken.contains(p)) {
            step.failed = Some(p);
            step.unbuilt = true;
            step.note = "does not build (simulated)".into();
            return Ok(step);
        }
        // As a real step: the points boot in turn until one fails; that ends the step.
        if let Some(i) = order.iter().position(|p| self.series.no_boot.contains(p)) {
            step.failed = Some(order[i]);
            step.note = "does not boot (simulated)".into();
            step.boots = i + 1;
            self.boots += step.boots;
            return Ok(step);
        }
        let names: Vec<String> = order.iter().map(|p| format!("p{p}")).collect();
        let schedule = ask.schedule();
        let mut c = Comparison::new("step", names.iter().cloned())?;
        c.add_metric(
            "x",
            "",
            Direction::Neutral,
            ask.magnitude.unwrap_or(MAGNITUDE),
        )?;
        if self.series.modes {
            c.set_range("x", Range::PERCENT)?;
        }
        c.make_primary("x", None)?;
        c.set_plan(Plan {
            looks: schedule.repetitions.looks(),
            exclusive: schedule.exclusive,
        });
        let mut have = vec![0; order.len()];
        let mut active: Vec<usize> = (0..order.len()).collect();
        let mut target = schedule.repetitions.initial();
        loop {
            for &arm in &active {
                let level = self.series.level(order[arm]);
                while have[arm] < target {
                    let value = self.host.draw(level, self.rng);
                    c.add_sample("x", &names[arm], value)?;
                    have[arm] += 1;
                }
            }
            let (_, next) =
                DecisionPoint::after_stage(&c, schedule.repetitions, schedule.until, &have);
            match next {
                Some((next, n)) => (active, target) = (next, n),
                None => break,
            }
        }
        let verdict = |p: usize| Ok(c.verdict("x", &format!("p{p}"))?);
        step.verdicts = ask.verdicts(verdict)?;
        step.per_variant = have.clone();
        step.boots = have.iter().sum();
        self.boots += step.boots;
        Ok(step)
    }

    fn done(&mut self, _: Step) -> Result<()> {
        Ok(())
    }

    fn built(&self, _: usize) -> bool {
        false
    }
}

/// What a series' bisects came to.
#[derive(Debug, Clone, Default)]
struct Tally {
    runs: usize,
    /// Every change that must be found was named, verified.
    found: usize,
    /// Exit 0 with a culprit that does not move the metric toward bad.
    wrong: usize,
    /// No culprit verified (exit 1).
    no_answer: usize,
    /// Every change toward bad named.
    all_named: usize,
    boots: usize,
    shares_checked: usize,
    shares_covered: usize,
}

fn rate(n: usize, of: usize) -> f64 {
    if of == 0 {
        f64::NAN
    } else {
        n as f64 / of as f64
    }
}

/// The table `lab bench bisect` prints.
#[derive(Debug, Clone)]
pub struct BisectBench {
    rows: Vec<(Series, Tally)>,
    runs: usize,
    seed: u64,
    seconds: f64,
    host: HostNote,
}

/// Simulates `runs` bisects of every series, seeded with `seed`.
pub fn bisects(runs: usize, seed: u64) -> Result<BisectBench> {
    let mut host = HostNote::start();
    let started = Instant::now();
    let rows: Vec<Result<(Series, Tally)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = SERIES
            .iter()
            .enumerate()
            .map(|(i, series)| scope.spawn(move || tally(series, runs, seed, i as u64)))
            .collect();
        workers
            .into_iter()
            .zip(SERIES)
            .map(|(w, s)| Ok((s, w.join().expect("a bench thread panicked")?)))
            .collect()
    });
    host.finish();
    Ok(BisectBench {
        rows: rows.into_iter().collect::<Result<_>>()?,
        runs,
        seed,
        seconds: started.elapsed().as_secs_f64(),
        host,
    })
}

/// One simulated bisect of `series` as `lab bisect` runs it (every step's cap the default):
/// its answer, its boots and the run's host.
fn bisect_once(series: &Series, rng: &mut shapes::Rng) -> Result<(Answer, usize, SeriesHost)> {
    let host = SeriesHost::new(series, rng);
    let mut sim = Simulated {
        series,
        host,
        rng,
        boots: 0,
        broken: Vec::new(),
    };
    let limits = Limits {
        n: series.n(),
        cap: search::DEFAULT_CAP,
        on_boot_failure: series.on_boot_failure,
    };
    let answer = futures::executor::block_on(search::search(&mut sim, &limits))?;
    Ok((answer, sim.boots, sim.host))
}

fn tally(series: &Series, runs: usize, seed: u64, stream: u64) -> Result<Tally> {
    let mut rng = shapes::rng(seed, 1000 + stream);
    let toward = series.toward_bad();
    let mut t = Tally::default();
    for _ in 0..runs {
        let (answer, boots, host) = bisect_once(series, &mut rng)?;
        t.runs += 1;
        t.boots += boots;
        let Answer::Found(found) = answer else {
            t.no_answer += 1;
            continue;
        };
        let named: Vec<usize> = found.culprits.iter().map(|c| c.point).collect();
        if named.is_empty() {
            t.no_answer += 1;
        } else if named.iter().any(|k| !toward.contains(k)) {
            t.wrong += 1;
        }
        t.found += usize::from(series.must.iter().all(|k| named.contains(k)));
        t.all_named += usize::from(toward.iter().all(|k| named.contains(k)));
        for c in &found.culprits {
            // A change that stops booting has no share of a metric's change.
            let truth = series.share(c.point, &host);
            if let Some(interval) = c.share.and_then(|s| s.interval) {
                if toward.contains(&c.point) && truth.is_finite() {
                    t.shares_checked += 1;
                    t.shares_covered += usize::from(interval.contains(truth));
                }
            }
        }
    }
    Ok(t)
}

fn pct(rate: f64) -> String {
    if rate.is_nan() {
        "-".to_string()
    } else {
        format!("{:.1}%", 100.0 * rate)
    }
}

impl BisectBench {
    /// The table, the targets and the summary line (`worst: ...`, the last line).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lab bench bisect: {} simulated bisects a series, seed {}, each the lab's own search \
             and step schedules (every step up to {} boots a side, its error split over its looks \
             from the first boot); m = 20 points; S1-like boots as `lab bench verdicts`' S1-like, \
             the others normal around 50 with S1's spread (10-20 points, per run) but the mode \
             culprit's, at 0 or 100 (a share)\n",
            self.runs,
            self.seed,
            search::DEFAULT_CAP
        );
        let _ = writeln!(
            out,
            "{:<52} {:>7} {:>8} {:>9} {:>9} {:>6} {:>8}",
            "series", "found", "wrong", "no answer", "all named", "boots", "share in"
        );
        for (s, t) in &self.rows {
            let _ = writeln!(
                out,
                "{:<52} {:>7} {:>8} {:>9} {:>9} {:>6.1} {:>8}",
                s.name,
                if s.must.is_empty() {
                    "-".to_string()
                } else {
                    pct(rate(t.found, t.runs))
                },
                pct(rate(t.wrong, t.runs)),
                pct(rate(t.no_answer, t.runs)),
                if s.toward_bad().is_empty() {
                    "-".to_string()
                } else {
                    pct(rate(t.all_named, t.runs))
                },
                rate(t.boots, t.runs),
                pct(rate(t.shares_covered, t.shares_checked)),
            );
        }
        let row = |i: usize| &self.rows[i].1;
        let s1_found = rate(row(0).found, row(0).runs);
        let both = rate(row(1).all_named, row(1).runs);
        let wrong = self
            .rows
            .iter()
            .map(|(_, t)| rate(t.wrong, t.runs))
            .fold(0.0, f64::max);
        let no_answer = self
            .rows
            .iter()
            // A change to find (the mode culprit's target is its own: found >= 80%).
            .filter(|(s, _)| !s.modes && !s.must.is_empty())
            .map(|(_, t)| rate(t.no_answer, t.runs))
            .fold(0.0, f64::max);
        let opposite_named = row(3).wrong;
        let modes_found = self
            .rows
            .iter()
            .find(|(s, _)| s.modes)
            .map_or(f64::NAN, |(_, t)| rate(t.found, t.runs));
        let met = |ok: bool| if ok { "met" } else { "MISSED" };
        let _ = writeln!(
            out,
            "\nfound: every change of the magnitude or more toward bad named and verified; wrong: \
             exit 0 with a culprit that does not move the metric toward bad (the opposite change \
             included); no answer: no culprit verified; all named: every change toward bad named; \
             boots: per bisect; share in: culprits' share intervals holding the true share; same \
             code: no answer is the right one"
        );
        let _ = writeln!(
            out,
            "targets: S1-like found >= 99% ({}); wrong culprit <= 0.5% ({}); both of two culprits \
             >= 80% ({}); no answer where a change must be found <= 5% ({}); the opposite change never a culprit ({} times); \
             the mode culprit found >= 80% ({})",
            met(s1_found >= 0.99),
            met(wrong <= 0.005),
            met(both >= 0.8),
            met(no_answer <= 0.05),
            opposite_named,
            met(modes_found >= 0.8)
        );
        let _ = writeln!(out, "{:.1} s on {}", self.seconds, self.host.text());
        let _ = writeln!(
            out,
            "worst: S1-like found {}, wrong culprit {}, no answer {}, two culprits both named {}, \
             mode culprit found {}",
            pct(s1_found),
            pct(wrong),
            pct(no_answer),
            pct(both),
            pct(modes_found)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_series_carry_what_they_say() {
        let s1 = &SERIES[0];
        assert!(matches!(s1.level(3), Level::Magnitudes(k) if k == 0.0));
        assert!(matches!(s1.level(4), Level::Revert));
        assert_eq!(s1.toward_bad(), vec![4]);
        let two = &SERIES[1];
        assert!(matches!(two.level(6), Level::Magnitudes(k) if (k - 2.5).abs() < 1e-12));
        assert_eq!(two.toward_bad(), vec![2, 4]);
        let opposite = &SERIES[3];
        assert_eq!(opposite.toward_bad(), vec![4]);
        assert_eq!(SERIES[4].toward_bad(), vec![4]);
        assert_eq!(SERIES[5].toward_bad(), vec![3]);
        let mut rng = shapes::rng(1, 1);
        let host = SeriesHost::new(two, &mut rng);
        assert!((two.share(2, &host) - 60.0).abs() < 1e-9);
    }

    #[test]
    fn a_change_that_stops_booting_is_named_and_a_point_that_does_not_boot_is_stepped_around() {
        for (series, named) in [(&SERIES[5], vec![3]), (&SERIES[4], vec![4])] {
            let mut rng = shapes::rng(3, 11);
            let (answer, _, _) = bisect_once(series, &mut rng).unwrap();
            let Answer::Found(found) = answer else {
                panic!("{}: {answer:?}", series.name);
            };
            let points: Vec<usize> = found.culprits.iter().map(|c| c.point).collect();
            assert_eq!(points, named, "{}: {found:?}", series.name);
        }
    }

    #[test]
    fn a_few_bisects_give_a_table_with_the_summary_last() {
        let bench = bisects(3, 5).unwrap();
        let text = bench.render();
        assert!(
            text.lines()
                .last()
                .unwrap()
                .starts_with("worst: S1-like found "),
            "{text}"
        );
        for (s, t) in &bench.rows {
            assert_eq!(t.runs, 3, "{}", s.name);
            assert!(t.boots > 0);
        }
    }
}

/// The bisect's kill, resume and skip logic on simulated boots: what `lab bisect --resume` does
/// with a record, without a kernel build or a boot.
#[cfg(test)]
mod resume_tests {
    use super::*;
    use crate::bisect::search::Replay;
    use crate::bisect::{Class, StepKind};

    /// Simulated steps that stop (as a kill would) once `kill_after` steps are recorded, and
    /// hand back a killed run's steps first.
    struct Interrupted<'a> {
        sim: Simulated<'a>,
        replay: Replay,
        kept: Vec<Step>,
        kill_after: Option<usize>,
        ran: usize,
    }

    impl Steps for Interrupted<'_> {
        async fn run(&mut self, ask: &Ask) -> Result<Step> {
            if let Some(step) = self.replay.take(self.kept.len(), ask) {
                return Ok(step);
            }
            self.ran += 1;
            self.sim.run(ask).await
        }

        fn done(&mut self, step: Step) -> Result<()> {
            self.kept.push(step);
            if Some(self.kept.len()) == self.kill_after {
                anyhow::bail!("killed after step {}", self.kept.len());
            }
            Ok(())
        }

        fn built(&self, _: usize) -> bool {
            false
        }
    }

    fn interrupted<'a>(
        rng: &'a mut shapes::Rng,
        host: SeriesHost,
        replay: Vec<Step>,
        kill_after: Option<usize>,
    ) -> Interrupted<'a> {
        Interrupted {
            sim: Simulated {
                series: &SERIES[0],
                host,
                rng,
                boots: 0,
                // Point 2 does not build.
                broken: vec![2],
            },
            replay: Replay::of(replay),
            kept: Vec::new(),
            kill_after,
            ran: 0,
        }
    }

    #[test]
    fn a_killed_bisect_resumes_from_its_record_and_steps_around_a_broken_build() {
        let limits = Limits {
            n: SERIES[0].n(),
            cap: search::DEFAULT_CAP,
            on_boot_failure: OnBootFailure::Skip,
        };
        for seed in 0..20 {
            let mut rng = shapes::rng(seed, 7);
            let host = SeriesHost::new(&SERIES[0], &mut rng);
            // Killed once its second step is recorded.
            let mut first = interrupted(&mut rng, host, Vec::new(), Some(2));
            let err = futures::executor::block_on(search::search(&mut first, &limits));
            assert!(err.unwrap_err().to_string().contains("killed after step 2"));
            let killed = first.kept;
            assert_eq!(killed.len(), 2);
            // Resumed on other boots: the two recorded steps are read back, not run again.
            let mut rng = shapes::rng(seed, 8);
            let host = SeriesHost::new(&SERIES[0], &mut rng);
            let mut second = interrupted(&mut rng, host, killed.clone(), None);
            let answer = futures::executor::block_on(search::search(&mut second, &limits)).unwrap();
            assert_eq!(second.ran + 2, second.kept.len(), "seed {seed}");
            for (a, b) in killed.iter().zip(&second.kept) {
                assert_eq!(
                    (a.kind, a.point, &a.ends, a.boots),
                    (b.kind, b.point, &b.ends, b.boots)
                );
            }
            // The broken point was probed and skipped, and the culprit still found.
            let skipped = second
                .kept
                .iter()
                .find(|s| s.point == 2 && s.kind == StepKind::Probe);
            if let Some(s) = skipped {
                assert_eq!(s.class, Some(Class::Skipped), "seed {seed}");
            }
            let Answer::Found(found) = answer else {
                panic!("seed {seed}: {answer:?}");
            };
            let named: Vec<usize> = found.culprits.iter().map(|c| c.point).collect();
            assert_eq!(named, vec![4], "seed {seed}: {found:?}");
        }
    }

    #[test]
    fn a_broken_build_next_to_the_culprit_leaves_a_range() {
        // The culprit's parent does not build: the answer is the range around it, no culprit.
        static SERIES_3: Series = Series {
            name: "culprit 3 of 3",
            changes: &[Effect::None, Effect::None, Effect::S1],
            must: &[3],
            no_boot: &[],
            on_boot_failure: OnBootFailure::Skip,
            modes: false,
        };
        let mut rng = shapes::rng(1, 9);
        let host = SeriesHost::new(&SERIES_3, &mut rng);
        let mut sim = Simulated {
            series: &SERIES_3,
            host,
            rng: &mut rng,
            boots: 0,
            broken: vec![2],
        };
        let limits = Limits {
            n: 3,
            cap: search::DEFAULT_CAP,
            on_boot_failure: OnBootFailure::Skip,
        };
        let answer = futures::executor::block_on(search::search(&mut sim, &limits)).unwrap();
        let Answer::Found(found) = answer else {
            panic!("{answer:?}");
        };
        assert_eq!(found.range, Some((1, 3)), "{found:?}");
        assert!(found.culprits.is_empty());
    }
}
