//! `lab bench resample RECORD...`: how often a scenario's own runs would decide as they did at
//! a schedule (initial boots, cap), measured on its recorded boots. Each simulated run picks one
//! of the records (so one run's boots share one host's day, as a real run's do), then boots its
//! variants stage by stage as the runner does: every boot drawn with replacement from that
//! record's boots of the variant, all its metrics together, and the next stage chosen by the
//! runner's own [`DecisionPoint::after_stage`]. What it answers: at which cap a test's verdict
//! stops being a coin toss, from boots the scenario really gave, not a shape.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use rand::RngExt;

use super::shapes;
use crate::report::{Comparison, DecisionPoint, RunRecord};
use crate::stats::{Decision, Plan, Repetitions, Until};

/// Simulated runs unless told otherwise.
pub const RUNS: usize = 2_000;

/// A primary verdict's figures over the simulated runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The primary metric.
    pub metric: String,
    /// The variant, against its base.
    pub variant: String,
    /// Runs ending DIFFERENT.
    pub different: usize,
    /// Runs ending SAME.
    pub same: usize,
    /// Runs ending UNKNOWN.
    pub unknown: usize,
    /// The variant's boots, summed over the runs.
    pub boots: usize,
    /// The records' own verdicts: DIFFERENT, SAME, UNKNOWN.
    pub recorded: [usize; 3],
}

/// What `lab bench resample` measured.
#[derive(Debug, Clone)]
pub struct ResampleBench {
    /// The records drawn from.
    pub records: Vec<PathBuf>,
    /// The schedule simulated.
    pub repetitions: Repetitions,
    /// Simulated runs.
    pub runs: usize,
    /// The draws' seed.
    pub seed: u64,
    /// A row per primary verdict.
    pub rows: Vec<Row>,
    /// Runs in which every primary verdict came out as most of the records decided it (what
    /// a test asserting the records' verdicts would pass).
    pub as_recorded: usize,
}

/// `runs` runs drawn from the boots of `records` (one comparison, every variant with boots in
/// each), seeded with `seed`, on the first record's own schedule with `initial` and `cap` where
/// given.
pub fn resample(
    records: &[PathBuf],
    initial: Option<usize>,
    cap: Option<usize>,
    runs: usize,
    seed: u64,
) -> Result<ResampleBench> {
    let files = crate::report::merge::record_files(records)?;
    let loaded = load(&files)?;
    let definition = primaries_of(&loaded[0].0, loaded[0].1.comparison())?;
    let own = schedule_of(&loaded[0].1);
    // As given, never raised: the manifest holds the schedule the run followed, and a run
    // keeps a schedule chosen for it (`Experiment::schedule`).
    let repetitions = Repetitions::Adaptive {
        initial: initial.unwrap_or(own.initial()),
        cap: cap.unwrap_or(own.cap()),
    };
    let mut rows = rows_of(&definition, &loaded)?;
    let mut rng = shapes::rng(seed, 0);
    let mut as_recorded = 0;
    for _ in 0..runs {
        let (_, record) = &loaded[rng.random_range(0..loaded.len())];
        let (c, have) = run_once(&definition, record, repetitions, &mut rng)?;
        let mut all = true;
        for row in &mut rows {
            let decision = c.verdict(&row.metric, &row.variant)?.decision;
            all &= slot(decision) == row.most_recorded();
            match decision {
                Decision::Different => row.different += 1,
                Decision::Same => row.same += 1,
                Decision::Unknown => row.unknown += 1,
            }
            let at = c.variants().iter().position(|v| *v == row.variant);
            row.boots += at.map_or(0, |i| have[i]);
        }
        as_recorded += usize::from(all);
    }
    Ok(ResampleBench {
        records: files,
        repetitions,
        runs,
        seed,
        rows,
        as_recorded,
    })
}

/// The schedule `record`'s run followed (its manifest's `repetitions`, the cap already raised
/// where the run raised it), else the default; a fixed count is drawn as adaptive from 5 to
/// that count.
fn schedule_of(record: &RunRecord) -> Repetitions {
    let own = serde_json::from_value(record.manifest.parameters["repetitions"].clone());
    match own.unwrap_or_default() {
        Repetitions::Fixed(n) => Repetitions::Adaptive {
            initial: Repetitions::default().initial().min(n),
            cap: n,
        },
        adaptive => adaptive,
    }
}

/// The records at `files`, refused unless they are one comparison with boots of every variant.
fn load(files: &[PathBuf]) -> Result<Vec<(PathBuf, RunRecord)>> {
    let mut loaded: Vec<(PathBuf, RunRecord)> = Vec::new();
    for file in files {
        let record = RunRecord::read_json(file)?;
        if let Some((first, r)) = loaded.first() {
            let (a, b) = (
                primaries_of(first, r.comparison())?,
                primaries_of(file, record.comparison())?,
            );
            if a.variants() != b.variants() || a.metrics() != b.metrics() {
                bail!(
                    "{} and {} differ in their variants or primary metrics: not the same comparison",
                    first.display(),
                    file.display()
                );
            }
        }
        for v in record.comparison().variants() {
            if !record.boots().iter().any(|b| &b.variant == v) {
                bail!("{}: variant {v} has no boots to draw from", file.display());
            }
        }
        loaded.push((file.clone(), record));
    }
    if loaded.is_empty() {
        bail!("no records to resample");
    }
    Ok(loaded)
}

/// `c`'s variants and primary metrics (name, unit, direction, magnitude, range), without a
/// sample: what every drawn run starts from. Only the primaries decide a run; the records may
/// differ in the rest (a scenario that gained a metric).
fn primaries_of(file: &Path, c: &Comparison) -> Result<Comparison> {
    let mut out = Comparison::new(c.name(), c.variants())?;
    let bases: Vec<String> = c.bases().into_iter().map(String::from).collect();
    out.set_bases(&bases)?;
    for m in c.primaries() {
        out.add_metric(&m.name, &m.unit, m.direction, m.magnitude)?;
        out.set_range(&m.name, m.range)?;
        out.make_primary(&m.name, None)?;
    }
    if out.metrics().is_empty() {
        bail!("{}: no primary metric to decide on", file.display());
    }
    Ok(out)
}

/// A row per primary verdict, each with the records' own decisions counted.
fn rows_of(definition: &Comparison, loaded: &[(PathBuf, RunRecord)]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (metric, variant, _) in definition.verdicts() {
        let mut recorded = [0; 3];
        for (_, r) in loaded {
            recorded[slot(r.comparison().verdict(metric, variant)?.decision)] += 1;
        }
        rows.push(Row {
            metric: metric.to_string(),
            variant: variant.to_string(),
            different: 0,
            same: 0,
            unknown: 0,
            boots: 0,
            recorded,
        });
    }
    Ok(rows)
}

impl Row {
    /// The decision most of the records took (DIFFERENT, SAME, UNKNOWN: 0, 1, 2; a tie to the
    /// first).
    fn most_recorded(&self) -> usize {
        (0..3).rev().max_by_key(|&i| self.recorded[i]).unwrap_or(2)
    }
}

/// A decision's place in [`Row::recorded`].
fn slot(d: Decision) -> usize {
    match d {
        Decision::Different => 0,
        Decision::Same => 1,
        Decision::Unknown => 2,
    }
}

/// One run of `definition` staged as the runner stages it, its boots drawn from `record`'s:
/// the comparison and the boots each variant took.
fn run_once(
    definition: &Comparison,
    record: &RunRecord,
    repetitions: Repetitions,
    rng: &mut shapes::Rng,
) -> Result<(Comparison, Vec<usize>)> {
    let mut c = definition.clone();
    c.set_plan(Plan::looks(repetitions.looks()));
    let pools: Vec<Vec<&crate::report::BootRecord>> = c
        .variants()
        .iter()
        .map(|v| record.boots().iter().filter(|b| &b.variant == v).collect())
        .collect();
    let variants = c.variants().to_vec();
    let mut have = vec![0; variants.len()];
    let mut active: Vec<usize> = (0..variants.len()).collect();
    let mut target = repetitions.initial();
    loop {
        for &i in &active {
            while have[i] < target {
                let boot = pools[i][rng.random_range(0..pools[i].len())];
                for (metric, &value) in &boot.samples {
                    if c.metric(metric).is_ok() {
                        c.add_sample(metric, &variants[i], value)?;
                    }
                }
                have[i] += 1;
            }
        }
        match DecisionPoint::after_stage(&c, repetitions, Until::Verdict, &have).1 {
            Some((next, n)) => (active, target) = (next, n),
            None => break,
        }
    }
    Ok((c, have))
}

impl ResampleBench {
    /// The table: per primary verdict the share of runs ending each way, the boots the variant
    /// took, and how the records themselves decided.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let (initial, cap) = (self.repetitions.initial(), self.repetitions.cap());
        let _ = writeln!(
            out,
            "lab bench resample: {} runs of {initial} to {cap} boots per variant, drawn from the \
             boots of {} record(s), seed {}",
            self.runs,
            self.records.len(),
            self.seed
        );
        for r in &self.records {
            let _ = writeln!(out, "  {}", r.display());
        }
        let name = self.rows.iter().map(|r| r.variant.len()).max().unwrap_or(7);
        let _ = writeln!(
            out,
            "\n  {:<24} {:<name$}  DIFFERENT      SAME   UNKNOWN  boots  recorded (D/S/U)",
            "metric", "variant"
        );
        let pct = |n: usize| format!("{:.1}%", 100.0 * n as f64 / self.runs.max(1) as f64);
        for row in &self.rows {
            let _ = writeln!(
                out,
                "  {:<24} {:<name$}  {:>9} {:>9} {:>9}  {:>5.1}  {}/{}/{}",
                row.metric,
                row.variant,
                pct(row.different),
                pct(row.same),
                pct(row.unknown),
                row.boots as f64 / self.runs.max(1) as f64,
                row.recorded[0],
                row.recorded[1],
                row.recorded[2],
            );
        }
        let _ = writeln!(
            out,
            "\nevery verdict as most of the records decided it: {} of runs",
            pct(self.as_recorded)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{Direction, Manifest};
    use crate::stats::Magnitude;

    /// A record of 10 boots a side: the base at 100..=109, `moved` at 10..=19 (far below 20%
    /// of the base), `kept` at the base's values shuffled.
    fn record(dir: &Path) -> PathBuf {
        let mut c = Comparison::new("c", ["base", "moved", "kept"]).unwrap();
        c.add_metric("x", "", Direction::Neutral, Magnitude::relative(0.2))
            .unwrap();
        c.add_metric("y", "", Direction::Neutral, 0.0).unwrap();
        c.make_primary("x", None).unwrap();
        let mut r = RunRecord::new(c, Manifest::default()).unwrap();
        for i in 0..10 {
            let v = f64::from(i);
            for (variant, x) in [
                ("base", 100.0 + v),
                ("moved", 10.0 + v),
                ("kept", 109.0 - v),
            ] {
                r.record_boot(variant, [("x", x), ("y", v)], serde_json::Value::Null)
                    .unwrap();
            }
        }
        let file = dir.join("record.json");
        r.write_json_to(&file).unwrap();
        file
    }

    #[test]
    fn runs_drawn_from_a_record_decide_as_its_boots_do_and_the_same_seed_draws_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let file = record(dir.path());
        let bench = resample(&[dir.path().to_path_buf()], Some(5), Some(10), 200, 3).unwrap();
        assert_eq!(bench.records, vec![file.clone()]);
        let row = |v: &str| bench.rows.iter().find(|r| r.variant == v).unwrap();
        // Nothing overlaps: every drawn run DIFFERENT, at the first look that can decide.
        let moved = row("moved");
        assert_eq!((moved.different, moved.recorded), (200, [1, 0, 0]));
        assert!(moved.boots <= 200 * 7, "{}", moved.boots);
        // The same boots: never DIFFERENT, and SAME is the record's own verdict.
        let kept = row("kept");
        assert_eq!(kept.different, 0);
        assert!(kept.same > 150, "{kept:?}");
        assert_eq!(kept.recorded, [0, 1, 0]);
        assert_eq!(bench.rows.len(), 2, "only the primary is decided");
        // A run is as recorded when both are: the moved one always is.
        assert_eq!(bench.as_recorded, kept.same);
        let text = bench.render();
        assert!(
            text.contains("200 runs of 5 to 10 boots per variant"),
            "{text}"
        );
        assert!(text.contains(&file.display().to_string()), "{text}");
        assert!(text.ends_with("of runs\n"), "{text}");
        // Without a schedule, the record's own: none in its manifest, so the default's.
        let again = resample(&[file], None, None, 200, 3).unwrap();
        assert_eq!(again.rows, bench.rows);
    }

    #[test]
    fn records_of_another_comparison_are_refused_by_name() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = record(a.path());
        let mut c = Comparison::new("c", ["base", "moved"]).unwrap();
        c.add_metric("x", "", Direction::Neutral, 0.0).unwrap();
        c.make_primary("x", None).unwrap();
        let mut r = RunRecord::new(c, Manifest::default()).unwrap();
        r.record_boot("base", [("x", 1.0)], serde_json::Value::Null)
            .unwrap();
        let other = b.path().join("record.json");
        r.write_json_to(&other).unwrap();
        let err = resample(&[first, other.clone()], None, None, 1, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&other.display().to_string()), "{err}");
        assert!(err.contains("not the same comparison"), "{err}");
    }
}
