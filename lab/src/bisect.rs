//! `lab bisect`: find the change that moves a scenario's primary metric, on the lab's verdicts.
//!
//! Good and bad are two kernels that differ by an ordered list of changes (`series`): a
//! posted patch series on the good kernel's recipe, the patches a bad recipe adds to the good
//! one, or the first-parent commits of a git range. Point `k` is the good kernel with the first
//! `k` changes; each is an ordinary recipe in the bisect's own copy of the recipe directory,
//! built from the nearest cached point's object tree (the good kernel's, or an earlier
//! point's), so no probe is built cold.
//!
//! 1. The endpoints: good against bad must be DIFFERENT, or there is nothing to bisect (with
//!    `--boot-failure bad`, a bad end that does not boot makes it a bisect of booting).
//! 2. Each probe boots interleaved with both ends of its search (drift on the host moves all
//!    three) until a change is shown against each or SAME, and is classified by the direction
//!    of its verdicts (`search::classify`); the next probe is chosen by `search::next`. A probe
//!    that does not build (or boot, unless `--boot-failure bad`) is skipped, its log kept, and
//!    the answer may become a range, as does one that shows nothing either way at the cap.
//!    Every step is planned to the cap (`--max-repetitions`, default 60 a side) from its first
//!    boot and asked once: it stops as soon as its verdicts settle.
//! 3. The found point against its parent, from 7 boots a side, must show a change toward
//!    bad: then it is a culprit, with its share of the good-to-bad shift and that share's
//!    interval; else an unverified candidate, and the culprits already found are kept.
//! 4. While a change toward bad is left after the last point found (its probe against bad, or a
//!    look with more boots), the search goes on from it to bad.
//!
//! The search itself (`search::search`) runs against `search::Steps`: here each step is an
//! ordinary comparison run (`steps`: record, table and page under `steps/`), the one owner of
//! its samples; `lab bench bisect` runs the same search on simulated boots. `bisect.json` holds
//! the steps' verdicts, classes, build keys and the answer, and is written after every step, so
//! `lab bisect --resume DIR` continues after a kill without repeating a finished step.

mod log;
pub mod page;
pub(crate) mod search;
pub(crate) mod series;
mod steps;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::scenarios::Registered;
use crate::stats::{Interval, Magnitude, Verdict};
use crate::variant::Variant;
use crate::Lab;

pub use search::Class;
pub use series::Change;

/// The version of `bisect.json`'s layout.
pub(crate) const RECORD_VERSION: u32 = 2;

/// Where the changes between good and bad come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Changes {
    /// The patches the bad variant's recipe adds to the good variant's.
    Recipes,
    /// A posted series on the good variant's kernel: an mbox or a directory of patch files.
    Series {
        /// The mbox, or the directory of patch files in `git format-patch` order.
        path: PathBuf,
    },
    /// The first-parent commits after `good` up to `bad` in the git tree of `recipe` (a recipe
    /// with a `git` source; its `ref` is replaced).
    Git {
        /// The recipe whose `git` source holds the commits.
        recipe: String,
        /// The good commit (any git revision).
        good: String,
        /// The bad commit, a first-parent descendant of `good`.
        bad: String,
    },
}

/// What a probe's boot failure (a panic, a WARNING in every boot, a hang) means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OnBootFailure {
    /// The probe is skipped, like one that does not build (`git bisect`'s 125).
    #[default]
    Skip,
    /// The probe is bad-like: for functional bisects, where the failure is what is looked for.
    Bad,
}

/// One `lab bisect`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The registered scenario the steps run (`dma-wakeup`), or the name of `file`'s.
    pub scenario: String,
    /// A scenario file the steps run instead (`lab bisect --scenario FILE`); read again by
    /// `--resume`.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// The good end: its kernel, settings and parameters (the kernel is unused for a git
    /// range, whose good end is the `good` commit).
    pub good: Variant,
    /// The bad end (only its kernel is used, with [`Changes::Recipes`]).
    pub bad: Variant,
    /// Where the changes between the ends come from.
    pub changes: Changes,
    /// The metric decided on, with its smallest change that matters (default: the scenario's
    /// first primary metric with its own).
    pub metric: Option<(String, Option<Magnitude>)>,
    /// Scenario parameters for every step (`lab bisect --set NAME=VALUE`).
    pub set: BTreeMap<String, String>,
    /// The topology (default: the scenario's).
    pub topology: Option<String>,
    /// What a probe that does not boot counts as.
    pub on_boot_failure: OnBootFailure,
    /// The most boots per variant of one step (default 10; the verification takes 2 more).
    pub max_repetitions: Option<usize>,
    /// Step `i` runs with seed `seed + i` (default: a fresh seed, recorded).
    pub seed: Option<u64>,
    /// The bisect's name: results go to `results/bisect-<name>/` (default: the scenario's).
    pub name: Option<String>,
    /// Default: the lab's results directory.
    pub results_root: Option<PathBuf>,
}

impl Request {
    /// A request from `lab bisect`'s arguments: `good` and `bad` are variants, or git refs
    /// with `git_recipe`; with `series`, `bad` may be left out. Everything else at its default.
    pub fn from_arguments(
        scenario: String,
        good: String,
        bad: Option<String>,
        series: Option<PathBuf>,
        git_recipe: Option<String>,
    ) -> Result<Request> {
        let (good_variant, bad_variant, changes) = match (git_recipe, series, bad) {
            (Some(recipe), _, Some(bad)) => (
                Variant::kernel(&recipe),
                Variant::kernel(&recipe),
                Changes::Git { recipe, good, bad },
            ),
            (Some(_), _, None) => bail!("--git-recipe needs --bad REF as well as --good REF"),
            (None, Some(path), bad) => {
                let good: Variant = good.parse().with_context(|| "--good")?;
                let bad: Variant = match bad {
                    Some(b) => b.parse().with_context(|| "--bad")?,
                    None => good.clone(),
                };
                (good, bad, Changes::Series { path })
            }
            (None, None, Some(bad)) => (
                good.parse().with_context(|| "--good")?,
                bad.parse().with_context(|| "--bad")?,
                Changes::Recipes,
            ),
            (None, None, None) => {
                bail!("give --bad VARIANT, --series FILE, or --git-recipe R with --bad REF")
            }
        };
        Ok(Request {
            scenario,
            file: None,
            good: good_variant,
            bad: bad_variant,
            changes,
            metric: None,
            set: BTreeMap::new(),
            topology: None,
            on_boot_failure: OnBootFailure::default(),
            max_repetitions: None,
            seed: None,
            name: None,
            results_root: None,
        })
    }
}

impl Outcome {
    /// `lab bisect`'s exit code: 0 when one or more culprits were verified (the answer may also
    /// hold unverified candidates or a range after them), 1 when none was.
    pub fn exit_code(&self) -> i32 {
        match &self.record.answer {
            Some(Answer::Found(f)) if !f.culprits.is_empty() => 0,
            _ => 1,
        }
    }
}

/// One point between good and bad.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Point {
    pub index: usize,
    pub variant: Variant,
    /// The change that makes this point from the one before (None for the good end).
    pub change: Option<Change>,
    /// Its kernel, once built.
    pub build: Option<BuildNote>,
}

/// How a point's kernel was had.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BuildNote {
    pub key: String,
    pub release: String,
    /// The entry whose object tree it was built from (None: a cold build, or found cached).
    pub from: Option<String>,
    /// Seconds this bisect spent building it (0 when it was in the cache already).
    pub seconds: f64,
    pub log: PathBuf,
}

/// What a step was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// Good against bad.
    Endpoints,
    /// A point against the search's two ends.
    Probe,
    /// The culprit's parent against the culprit.
    Verify,
    /// Bad against the last point found: is a change toward bad left?
    Rest,
}

/// A primary verdict of a step: `variant` against `base` (a point index each).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StepVerdict {
    pub base: usize,
    pub variant: usize,
    pub verdict: Verdict,
}

/// One step: a comparison run, or a probe skipped before it booted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// What the step was for.
    pub kind: StepKind,
    /// The point probed or verified (the bad end for the endpoints).
    pub point: usize,
    /// The ends it was compared with (search's good and bad; the parent for a verification).
    pub ends: Vec<usize>,
    /// The step's run record, relative to the bisect's directory.
    pub record: Option<PathBuf>,
    pub(crate) verdicts: Vec<StepVerdict>,
    /// What the probe was found to be (`None` for the endpoints and verifications).
    pub class: Option<Class>,
    /// Why it was skipped, or what else the log should say.
    pub note: String,
    /// The point that did not build or boot (no verdicts then).
    #[serde(default)]
    pub failed: Option<usize>,
    /// The failed point did not build (else it did not boot).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unbuilt: bool,
    /// The most boots per variant it was allowed.
    #[serde(default)]
    pub cap: usize,
    /// Valid boots of the step, all variants.
    pub boots: usize,
    /// Boots per variant, base first.
    pub per_variant: Vec<usize>,
    /// Wall seconds the step took.
    pub seconds: f64,
}

impl Step {
    /// The points of the step's comparison run, its base first: a probe is the base of its step
    /// (both its verdicts come from one run), an end is the base of the others.
    pub(crate) fn run_order(&self) -> Vec<usize> {
        match self.kind {
            StepKind::Probe => std::iter::once(self.point)
                .chain(self.ends.iter().copied())
                .collect(),
            _ => self
                .ends
                .iter()
                .copied()
                .chain(std::iter::once(self.point))
                .collect(),
        }
    }
}

/// A change the bisect found and verified against its parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Culprit {
    /// The point it makes (1 is the first change after good).
    pub point: usize,
    /// The parent against the culprit, from the verification step (`None`: verified by not
    /// booting where its parent boots, `--boot-failure bad`).
    pub verdict: Option<Verdict>,
    /// Its share of the good-to-bad change (none for a boot failure).
    pub share: Option<Share>,
    /// How it was verified, when not by its metric.
    pub note: String,
}

/// A culprit's share of the whole change: its verification's shift over the endpoints' shift,
/// in percent, and an interval from the two shifts' 95% intervals (the ratio's extremes over
/// both: it holds the true share whenever both intervals hold theirs, so at least 90%).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// The estimate.
    pub percent: f64,
    /// The interval, in percent.
    pub interval: Option<Interval>,
}

impl Share {
    /// `culprit`'s change over `total`'s ([`Verdict::change`]: the shifts, or the differences
    /// of the means where only they moved); `None` when the total change is 0. The interval
    /// comes from the shifts' intervals, where both changes are shifts.
    pub(crate) fn of(culprit: &Verdict, total: &Verdict) -> Option<Share> {
        if total.change() == 0.0 {
            return None;
        }
        let shifts = culprit.change() == culprit.shift && total.change() == total.shift;
        let interval = match (culprit.interval, total.interval) {
            (Some(c), Some(t)) if shifts && t.low * t.high > 0.0 => {
                let ratios = [
                    c.low / t.low,
                    c.low / t.high,
                    c.high / t.low,
                    c.high / t.high,
                ];
                let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
                let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                Some(Interval {
                    low: 100.0 * low,
                    high: 100.0 * high,
                })
            }
            _ => None,
        };
        Some(Share {
            percent: 100.0 * culprit.change() / total.change(),
            interval,
        })
    }
}

/// A point a search ended on that its verification did not confirm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Candidate {
    /// The point.
    pub point: usize,
    /// Its parent against it (`None` when it could not be compared).
    pub verdict: Option<Verdict>,
    /// Why it is not a culprit.
    pub note: String,
}

/// What the searches found: every verified culprit, in order, and what else they met.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Findings {
    /// The culprits, each verified against its parent.
    pub culprits: Vec<Culprit>,
    /// Points a search ended on that their verification did not confirm.
    pub unverified: Vec<Candidate>,
    /// The last search ended in a range: the change is in points `lo + 1 ..= hi`, the points
    /// between skipped or unclassified.
    pub range: Option<(usize, usize)>,
    /// Probed points that had moved away from bad (an opposite change before them).
    pub opposite: Vec<usize>,
}

/// What the bisect concluded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    /// Good and bad were not DIFFERENT: the endpoints' verdict.
    NothingToBisect {
        /// Bad against good.
        verdict: Verdict,
    },
    /// What the searches found (no culprit at all is a failed bisect).
    Found(Findings),
}

/// `bisect.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BisectRecord {
    /// The layout's version.
    pub version: u32,
    /// What was asked for.
    pub request: Request,
    /// The seed step 0 ran with (step `i`: `seed + i`).
    pub seed: u64,
    /// The metric decided on and its smallest change that matters, in its unit.
    pub metric: String,
    /// The metric's unit.
    pub unit: String,
    /// The smallest change that matters (`None`: the metric's own).
    pub magnitude: Option<Magnitude>,
    pub(crate) points: Vec<Point>,
    /// The steps in the order they ran.
    pub steps: Vec<Step>,
    /// The conclusion, once there is one.
    pub answer: Option<Answer>,
    /// Why the bisect stopped early (it can be resumed).
    pub failure: Option<String>,
    /// Wall seconds, summed over every start of it.
    pub seconds: f64,
}

/// A finished bisect.
#[derive(Debug)]
pub struct Outcome {
    /// The bisect's record, as written.
    pub record: BisectRecord,
    /// The bisect's directory (`bisect.json`, the steps' runs, `bisect.html`).
    pub dir: PathBuf,
    /// The bisect log ([`BisectRecord::log`]).
    pub log: String,
    /// The page (`bisect.html`).
    pub html: PathBuf,
}

/// The verdict of `base` against `variant` as the verdict of `variant` against `base`: the
/// rank tests are symmetric, the shift and its interval change sign.
pub(crate) fn flip(v: Verdict) -> Verdict {
    let turn = |i: Interval| Interval {
        low: -i.high,
        high: -i.low,
    };
    Verdict {
        shift: -v.shift,
        interval: v.interval.map(turn),
        mean_interval: v.mean_interval.map(turn),
        n_base: v.n_variant,
        n_variant: v.n_base,
        mean_difference: -v.mean_difference,
        ..v
    }
}

/// Runs a new bisect in a fresh directory under `results/bisect-<name>/`.
pub async fn run(lab: &Lab, mut request: Request) -> Result<Outcome> {
    let scenario = crate::scenarios::named_or_file(&request.scenario, request.file.as_deref())?;
    if request.file.is_some() {
        request.scenario = scenario.listing()?.name;
    }
    run_with(lab, scenario.as_ref(), request).await
}

/// [`run`] with a scenario of the caller's (a test's own).
pub(crate) async fn run_with(
    lab: &Lab,
    scenario: &dyn Registered,
    request: Request,
) -> Result<Outcome> {
    let root = request
        .results_root
        .clone()
        .unwrap_or_else(crate::host::results_root);
    let name = request
        .name
        .clone()
        .unwrap_or_else(|| request.scenario.clone());
    let dir =
        crate::report::run_dir(&root.join(format!("bisect-{}", crate::host::sanitize(&name))))?;
    let bisect = steps::Bisect::start(lab, scenario, request, dir)?;
    bisect.go().await
}

/// Continues the bisect in `dir` (its `bisect.json`): finished steps are read back, not run.
pub async fn resume(lab: &Lab, dir: &Path) -> Result<Outcome> {
    let record = BisectRecord::read(dir)?;
    let request = &record.request;
    let scenario = crate::scenarios::named_or_file(&request.scenario, request.file.as_deref())?;
    resume_with(lab, scenario.as_ref(), dir).await
}

/// [`resume`] with a scenario of the caller's.
pub(crate) async fn resume_with(
    lab: &Lab,
    scenario: &dyn Registered,
    dir: &Path,
) -> Result<Outcome> {
    let record = BisectRecord::read(dir)?;
    let bisect = steps::Bisect::reopen(lab, scenario, record, dir.to_path_buf())?;
    bisect.go().await
}

impl BisectRecord {
    /// Where a bisect's directory keeps its record (`bisect.json`).
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("bisect.json")
    }

    /// The record of the bisect in `dir`.
    pub fn read(dir: &Path) -> Result<BisectRecord> {
        let path = Self::path(dir);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (is {} a bisect's directory?)",
                path.display(),
                dir.display()
            )
        })?;
        let record: BisectRecord = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a bisect record", path.display()))?;
        if record.version != RECORD_VERSION {
            bail!(
                "{}: layout version {} (this lab reads {RECORD_VERSION})",
                path.display(),
                record.version
            );
        }
        Ok(record)
    }

    fn write(&self, dir: &Path) -> Result<()> {
        let path = Self::path(dir);
        let tmp = dir.join(".bisect.json.tmp");
        std::fs::write(&tmp, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))
    }

    /// The change that makes point `point` from the one before (none for good, or past bad).
    pub fn change(&self, point: usize) -> Option<&Change> {
        self.points.get(point)?.change.as_ref()
    }

    /// A point's name in the log: its variant, and which change it ends with.
    fn point_name(&self, k: usize) -> String {
        self.points
            .get(k)
            .map_or_else(|| format!("point {k}"), |p| p.variant.name.clone())
    }

    fn change_label(&self, k: usize) -> String {
        let n = self.points.len() - 1;
        match self.points.get(k).and_then(|p| p.change.as_ref()) {
            Some(c) => match &c.commit {
                Some(commit) => format!(
                    "{k}/{n} {} \"{}\"",
                    &commit[..12.min(commit.len())],
                    c.subject
                ),
                None => format!("{k}/{n} \"{}\"", c.subject),
            },
            None => "good".to_string(),
        }
    }

    /// Total valid boots over every step.
    pub fn boots(&self) -> usize {
        self.steps.iter().map(|s| s.boots).sum()
    }

    /// What a fixed schedule of `per_variant` boots per variant and step would have booted for
    /// the same steps (the endpoints and verification two variants, a probe three).
    pub(crate) fn fixed_boots(&self, per_variant: usize) -> usize {
        self.steps
            .iter()
            .filter(|s| s.record.is_some())
            .map(|s| per_variant * (1 + s.ends.len()))
            .sum()
    }

    /// The smallest change that matters for the step about to run. The endpoints' step decides
    /// it from good (its base); every later step uses that same value in the metric's unit. A
    /// relative magnitude ("40% of the base's mean") would otherwise be taken of each step's
    /// base, the probe: a probe at a tenth of good's level would be held to a tenth of the
    /// change, and could never be SAME as bad (seen on S4: UNKNOWN at the cap, 10 v 10, with a
    /// shift of +593 PTE updates against good's 550000).
    pub fn step_magnitude(&self) -> Option<Magnitude> {
        match self.steps.first().and_then(|s| s.verdicts.first()) {
            Some(endpoints) => Some(Magnitude::Absolute(endpoints.verdict.magnitude)),
            None => self.magnitude,
        }
    }
}

/// The bisect directories among `paths` (a directory holding `bisect.json`, or the file).
pub fn find_records(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter_map(|p| {
            if p.file_name().is_some_and(|n| n == "bisect.json") {
                p.parent().map(Path::to_path_buf)
            } else {
                BisectRecord::path(p).is_file().then(|| p.clone())
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
