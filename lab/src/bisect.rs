//! `lab bisect`: find the change that moves a scenario's primary metric, on the lab's verdicts.
//!
//! Good and bad are two kernels that differ by an ordered list of changes (`series`): a
//! posted patch series on the good kernel's recipe, the patches a bad recipe adds to the good
//! one, or the first-parent commits of a git range. Point `k` is the good kernel with the first
//! `k` changes; each is an ordinary recipe in the bisect's own copy of the recipe directory,
//! built from the nearest cached point's object tree (the good kernel's, or an earlier
//! point's), so no probe is built cold.
//!
//! 1. The endpoints: good against bad must be DIFFERENT, or there is nothing to bisect.
//! 2. Each probe boots interleaved with both endpoints (drift on the host moves all three) and
//!    is classified by its verdicts against them (`search::classify`); the next probe is
//!    chosen by `search::next`. A probe that does not build (or boot, unless
//!    `--boot-failure bad`) is skipped, its log kept, and the answer may become a range.
//! 3. The culprit's parent against the culprit, with more boots, must be DIFFERENT; the culprit's
//!    share of the good-to-bad shift is reported. When the culprit is only part of the change
//!    (DIFFERENT from bad too), the search goes on from it to bad for the next one.
//!
//! Each step is an ordinary comparison run (record, table and page under `steps/`), the one
//! owner of its samples; `bisect.json` holds the steps' verdicts, classes, build keys and the
//! answer, and is written after every step, so `lab bisect --resume DIR` continues after a kill
//! without repeating a finished step.

pub mod page;
pub(crate) mod search;
pub(crate) mod series;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::kernel::{BuiltKernel, RecipeDirs};
use crate::scenarios::Registered;
use crate::stats::{Decision, Magnitude, Verdict};
use crate::variant::Variant;
use crate::Lab;

pub use search::Class;
pub use series::Change;

/// The version of `bisect.json`'s layout.
pub(crate) const RECORD_VERSION: u32 = 1;

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
    /// The registered scenario the steps run (`dma-wakeup`).
    pub scenario: String,
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
    /// `lab bisect`'s exit code: 0 for one or more verified culprits, 1 for a range (skips or
    /// unclassified probes left more than one candidate) or an unverified culprit.
    pub fn exit_code(&self) -> i32 {
        match self.record.answer {
            Some(Answer::Culprits { .. }) => 0,
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

/// A change the bisect found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Culprit {
    /// The point it makes (1 is the first change after good).
    pub point: usize,
    /// The change itself.
    pub change: Change,
    /// The parent against the culprit, from the verification step.
    pub verdict: Verdict,
    /// The verification's shift over the endpoints' shift, in percent.
    pub share_percent: f64,
}

/// What the bisect concluded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Answer {
    /// Good and bad were not DIFFERENT: the endpoints' verdict.
    NothingToBisect {
        /// Bad against good.
        verdict: Verdict,
    },
    /// One or more culprits, in order.
    Culprits {
        /// The culprits, each verified against its parent.
        culprits: Vec<Culprit>,
    },
    /// The change is in the points `lo + 1 ..= hi`; those between were skipped or unclassified.
    /// Culprits found before it (in an earlier search) are kept.
    Range {
        /// The last point found good-like.
        lo: usize,
        /// The first point found bad-like.
        hi: usize,
        /// Culprits found before the range.
        culprits: Vec<Culprit>,
    },
    /// The parent and the culprit were not DIFFERENT with more boots.
    Unverified {
        /// The point the search ended on.
        point: usize,
        /// Its parent against it, with the verification's boots.
        verdict: Verdict,
    },
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

/// Runs a new bisect in a fresh directory under `results/bisect-<name>/`.
pub async fn run(lab: &Lab, request: Request) -> Result<Outcome> {
    let scenario = crate::scenarios::find(&request.scenario)?;
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
    let bisect = Bisect::start(lab, scenario, request, dir)?;
    bisect.go().await
}

/// Continues the bisect in `dir` (its `bisect.json`): finished steps are read back, not run.
pub async fn resume(lab: &Lab, dir: &Path) -> Result<Outcome> {
    let record = BisectRecord::read(dir)?;
    let scenario = crate::scenarios::find(&record.request.scenario)?;
    resume_with(lab, scenario.as_ref(), dir).await
}

/// [`resume`] with a scenario of the caller's.
pub(crate) async fn resume_with(
    lab: &Lab,
    scenario: &dyn Registered,
    dir: &Path,
) -> Result<Outcome> {
    let record = BisectRecord::read(dir)?;
    let bisect = Bisect::reopen(lab, scenario, record, dir.to_path_buf())?;
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

    /// The bisect log: one line per step, then the answer, then boots and builds.
    pub fn log(&self) -> String {
        let mut out = String::new();
        let n = self.points.len() - 1;
        // The magnitude in the metric's unit, as the endpoints' verdict used it.
        let magnitude = match self.steps.first().and_then(|s| s.verdicts.first()) {
            Some(v) => format!(
                "{:.1}{}",
                v.verdict.magnitude,
                crate::report::comparison::difference_unit(&self.unit)
            ),
            None => self
                .magnitude
                .map_or_else(|| "the metric's own".to_string(), |m| m.to_string()),
        };
        let _ = writeln!(
            out,
            "bisect {} on {} (smallest change that matters: {magnitude}): {} (good) .. {} (bad), {n} change{}",
            self.request.scenario,
            self.metric,
            self.point_name(0),
            self.point_name(n),
            if n == 1 { "" } else { "s" }
        );
        for (i, s) in self.steps.iter().enumerate() {
            let _ = writeln!(out, "  {}", self.step_line(i, s));
        }
        match &self.answer {
            None => {
                let _ = writeln!(
                    out,
                    "no answer yet{}",
                    self.failure
                        .as_ref()
                        .map_or(String::new(), |f| format!(": {f}"))
                );
            }
            Some(Answer::NothingToBisect { verdict }) => {
                let _ = writeln!(
                    out,
                    "nothing to bisect: good and bad are {} on {} ({})",
                    verdict.decision,
                    self.metric,
                    short_verdict(verdict, &self.unit)
                );
            }
            Some(Answer::Culprits { culprits }) => self.write_culprits(&mut out, culprits),
            Some(Answer::Range { lo, hi, culprits }) => {
                self.write_culprits(&mut out, culprits);
                let between: Vec<String> = (lo + 1..=*hi).map(|k| self.change_label(k)).collect();
                let _ = writeln!(
                    out,
                    "the change is in one of {} (points between were skipped or unclassified):\n    {}",
                    hi - lo,
                    between.join("\n    ")
                );
            }
            Some(Answer::Unverified { point, verdict }) => {
                let _ = writeln!(
                    out,
                    "not verified: {} against its parent is {} ({}): the bisect's classes disagree with more boots",
                    self.change_label(*point),
                    verdict.decision,
                    short_verdict(verdict, &self.unit)
                );
            }
        }
        let builds: Vec<String> = self
            .points
            .iter()
            .filter_map(|p| {
                p.build
                    .as_ref()
                    .filter(|b| b.seconds > 0.0)
                    .map(|b| format!("{} {:.0} s", p.variant.name, b.seconds))
            })
            .collect();
        let fixed = self.fixed_boots(10);
        let _ =
            writeln!(
            out,
            "boots: {} ({}% of the {fixed} a fixed 10 per variant would boot); builds: {}; {:.0} s",
            self.boots(),
            (self.boots() * 100).checked_div(fixed).unwrap_or(0),
            if builds.is_empty() { "none".to_string() } else { builds.join(", ") },
            self.seconds
        );
        out
    }

    /// One step's line of the log: what it probed, its verdicts, the class, boots and time.
    pub(crate) fn step_line(&self, i: usize, s: &Step) -> String {
        let n = self.points.len() - 1;
        let what = match s.kind {
            StepKind::Endpoints => "endpoints".to_string(),
            StepKind::Probe => format!("probe {}", self.change_label(s.point)),
            StepKind::Verify => format!("verify {}", self.change_label(s.point)),
        };
        let end = |k: usize| match k {
            0 => "good".to_string(),
            k if k == n => "bad".to_string(),
            k => format!("point {k}"),
        };
        let verdicts: Vec<String> = s
            .verdicts
            .iter()
            .map(|v| {
                format!(
                    "vs {} {}",
                    end(v.base),
                    short_verdict(&v.verdict, &self.unit)
                )
            })
            .collect();
        let class = s
            .class
            .map_or(String::new(), |c| format!(" -> {}", c.label()));
        let boots = s
            .per_variant
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>();
        format!(
            "step {:>2}  {what}: {}{class}{}  [{} boots, {:.0} s]",
            i + 1,
            verdicts.join(", "),
            if s.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", s.note)
            },
            if boots.is_empty() {
                "0".to_string()
            } else {
                boots.join("+")
            },
            s.seconds
        )
    }

    fn write_culprits(&self, out: &mut String, culprits: &[Culprit]) {
        for c in culprits {
            let _ = writeln!(
                out,
                "culprit: {} ({}): accounts for {:.0}% of the change; parent vs culprit {}",
                self.change_label(c.point),
                self.point_name(c.point),
                c.share_percent,
                short_verdict(&c.verdict, &self.unit)
            );
        }
    }
}

fn short_verdict(v: &Verdict, unit: &str) -> String {
    format!(
        "{} {:+.1}{} p={:.3} ({}v{})",
        v.decision,
        v.shift,
        crate::report::comparison::difference_unit(unit),
        v.p,
        v.n_base,
        v.n_variant
    )
}

/// A running bisect.
struct Bisect<'a> {
    /// The lab, with the bisect's own recipe directory.
    lab: Lab,
    scenario: &'a dyn Registered,
    record: BisectRecord,
    dir: PathBuf,
    /// Steps of the record already finished when this start began: read back, not run.
    done: Vec<Step>,
    started: Instant,
    seconds_before: f64,
}

impl<'a> Bisect<'a> {
    /// Sets up a new bisect in `dir`: the recipe copy, the changes, the points.
    fn start(
        lab: &Lab,
        scenario: &'a dyn Registered,
        request: Request,
        dir: PathBuf,
    ) -> Result<Self> {
        let listing = scenario.listing()?;
        let (metric, magnitude) = match &request.metric {
            Some((m, g)) => (m.clone(), *g),
            None => (
                listing
                    .metrics
                    .iter()
                    .find(|m| m.primary)
                    .map(|m| m.name.clone())
                    .context("the scenario declares no primary metric: give --metric")?,
                None,
            ),
        };
        let Some(def) = listing.metrics.iter().find(|m| m.name == metric) else {
            bail!(
                "scenario {} has no metric {metric:?} (metrics: {})",
                listing.name,
                listing
                    .metrics
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        if request.good.params != request.bad.params
            || request.good.settings != request.bad.settings
        {
            bail!(
                "good ({}) and bad ({}) differ in settings or parameters besides the kernel: a bisect \
                 walks kernel changes, so give both the same settings",
                request.good,
                request.bad
            );
        }
        let dirs = RecipeDirs::at(dir.join("kernels"));
        copy_recipes(&lab.kernel_recipes, &dirs)?;
        let (good_recipe, changes, bad_name) = match &request.changes {
            Changes::Recipes => {
                let good = crate::kernel::load_recipe(&dirs, &request.good.kernel)?;
                let bad = crate::kernel::load_recipe(&dirs, &request.bad.kernel)?;
                (
                    good.name.clone(),
                    series::from_recipes(&good, &bad)?,
                    Some(bad.name.clone()),
                )
            }
            Changes::Series { path } => {
                crate::kernel::load_recipe(&dirs, &request.good.kernel)?;
                (
                    request.good.kernel.clone(),
                    series::from_series(path, &dirs)?,
                    None,
                )
            }
            Changes::Git { recipe, good, bad } => {
                let repo = git_repo(&dirs, recipe)?;
                let (good_id, changes) = series::from_git(&repo, good, bad, &dirs)?;
                (
                    write_git_good(&dirs, recipe, &repo, &good_id)?,
                    changes,
                    None,
                )
            }
        };
        let n = changes.len();
        let mut points = vec![Point {
            index: 0,
            variant: Variant {
                kernel: good_recipe.clone(),
                name: good_recipe.clone(),
                ..request.good.clone()
            },
            change: None,
            build: None,
        }];
        let git_recipe = match &request.changes {
            Changes::Git { recipe, .. } => Some(recipe.clone()),
            _ => None,
        };
        for (i, change) in changes.into_iter().enumerate() {
            let k = i + 1;
            let name = match (&bad_name, k == n, &git_recipe, &change.commit) {
                (Some(bad), true, _, _) => bad.clone(),
                (_, _, Some(recipe), Some(commit)) => format!("{recipe}.{}", &commit[..12]),
                _ => probe_name(&good_recipe, k, n),
            };
            points.push(Point {
                index: k,
                variant: Variant {
                    kernel: name.clone(),
                    name,
                    ..request.good.clone()
                },
                change: Some(change),
                build: None,
            });
        }
        let record = BisectRecord {
            version: RECORD_VERSION,
            seed: request
                .seed
                .unwrap_or_else(crate::stats::BootOrder::fresh_seed),
            metric,
            unit: def.unit.clone(),
            magnitude,
            points,
            steps: Vec::new(),
            answer: None,
            failure: None,
            seconds: 0.0,
            request,
        };
        let bisect = Bisect {
            lab: lab.with_recipes(dirs),
            scenario,
            record,
            dir,
            done: Vec::new(),
            started: Instant::now(),
            seconds_before: 0.0,
        };
        bisect.write_probe_recipes()?;
        bisect.record.write(&bisect.dir)?;
        Ok(bisect)
    }

    fn reopen(
        lab: &Lab,
        scenario: &'a dyn Registered,
        mut record: BisectRecord,
        dir: PathBuf,
    ) -> Result<Self> {
        let dirs = RecipeDirs::at(dir.join("kernels"));
        let done = std::mem::take(&mut record.steps);
        record.answer = None;
        record.failure = None;
        Ok(Bisect {
            lab: lab.with_recipes(dirs),
            scenario,
            seconds_before: record.seconds,
            record,
            dir,
            done,
            started: Instant::now(),
        })
    }

    /// The recipe of every point that has none yet (the bad end of a `Recipes` bisect has its
    /// own): the good recipe and the first `k` changes.
    fn write_probe_recipes(&self) -> Result<()> {
        let good = self.record.points[0].variant.kernel.clone();
        for p in &self.record.points[1..] {
            let file = self
                .lab
                .kernel_recipes
                .recipes
                .join(format!("{}.toml", p.variant.kernel));
            if !file.exists() && self.owns_recipe(p.index) {
                self.write_recipe(p.index, &good, 0)?;
            }
        }
        Ok(())
    }

    /// Writes point `k`'s recipe as `base` (point `from`'s recipe) plus changes `from+1..=k`. The
    /// cache key hashes the whole patch list, not the base's name, so the same point has the
    /// same key whichever neighbour it is built from.
    fn write_recipe(&self, k: usize, base: &str, from: usize) -> Result<()> {
        #[derive(Serialize)]
        struct ProbeRecipe {
            description: String,
            base: String,
            patches: Vec<String>,
        }
        let n = self.record.points.len() - 1;
        let patches: Vec<String> = self.record.points[from + 1..=k]
            .iter()
            .filter_map(|p| p.change.as_ref().map(|c| c.patch.clone()))
            .collect();
        let recipe = ProbeRecipe {
            description: format!(
                "bisect point {k}/{n} of {}: changes 1-{k} ({})",
                self.record.points[0].variant.kernel,
                self.record.points[k]
                    .change
                    .as_ref()
                    .map_or("", |c| c.subject.as_str())
            ),
            base: base.to_string(),
            patches,
        };
        let file = self
            .lab
            .kernel_recipes
            .recipes
            .join(format!("{}.toml", self.record.points[k].variant.kernel));
        let text = format!(
            "# Written by lab bisect: point {k} is built from point {from}'s object tree.\n{}",
            toml::to_string(&recipe)?
        );
        std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))
    }

    fn n(&self) -> usize {
        self.record.points.len() - 1
    }

    async fn go(mut self) -> Result<Outcome> {
        let result = self.search_all().await;
        self.record.seconds = self.seconds_before + self.started.elapsed().as_secs_f64();
        if let Err(e) = &result {
            self.record.failure = Some(format!("{e:#}"));
        }
        self.record.write(&self.dir)?;
        let html = page::write(&self.record, &self.dir)?;
        let log = self.record.log();
        crate::progress::step(format!(
            "bisect: {}",
            log.lines().rev().nth(0).unwrap_or_default()
        ));
        result.with_context(|| {
            format!(
                "bisect record in {} (`lab bisect --resume {0}` continues it)",
                self.dir.display()
            )
        })?;
        if let Some(Answer::NothingToBisect { verdict }) = &self.record.answer {
            bail!(
                "nothing to bisect: {} and {} are {} on {} ({}); record in {}",
                self.record.point_name(0),
                self.record.point_name(self.n()),
                verdict.decision,
                self.record.metric,
                short_verdict(verdict, &self.record.unit),
                self.dir.display()
            );
        }
        Ok(Outcome {
            log,
            html,
            dir: self.dir,
            record: self.record,
        })
    }

    async fn search_all(&mut self) -> Result<()> {
        let n = self.n();
        let ends = self.step(StepKind::Endpoints, n, &[0]).await?;
        let total = ends.verdicts[0].verdict.clone();
        if total.decision != Decision::Different {
            self.record.answer = Some(Answer::NothingToBisect { verdict: total });
            return Ok(());
        }
        let mut culprits: Vec<Culprit> = Vec::new();
        let mut lo_end = 0;
        loop {
            let mut classes: BTreeMap<usize, Class> = BTreeMap::new();
            let (lo, hi) = loop {
                let built = |k: usize| self.is_built(k);
                match search::next(lo_end, n, &classes, &built) {
                    search::Next::Found { lo, hi } => break (lo, hi),
                    search::Next::Probe(k) => {
                        let step = self.step(StepKind::Probe, k, &[lo_end, n]).await?;
                        classes.insert(k, step.class.unwrap_or(Class::Unclassified));
                    }
                }
            };
            if hi > lo + 1 {
                self.record.answer = Some(Answer::Range { lo, hi, culprits });
                return Ok(());
            }
            let verify = self.step(StepKind::Verify, hi, &[lo]).await?;
            let verdict = verify.verdicts[0].verdict.clone();
            if verdict.decision != Decision::Different {
                self.record.answer = Some(Answer::Unverified { point: hi, verdict });
                return Ok(());
            }
            let share_percent = 100.0 * verdict.shift / total.shift;
            culprits.push(Culprit {
                point: hi,
                change: self.record.points[hi]
                    .change
                    .clone()
                    .expect("a point after good"),
                verdict,
                share_percent,
            });
            // Part of the change only: look for the rest between the culprit and bad.
            let partial = classes.get(&hi) == Some(&Class::Between);
            if !partial || hi == n || culprits.len() >= 3 {
                self.record.answer = Some(Answer::Culprits { culprits });
                return Ok(());
            }
            lo_end = hi;
        }
    }

    /// Whether point `k`'s recipe is one the bisect writes (all but the good end, and the bad
    /// end when it is the user's recipe).
    fn owns_recipe(&self, k: usize) -> bool {
        k > 0 && !(self.record.request.changes == Changes::Recipes && k == self.n())
    }

    fn is_built(&self, k: usize) -> bool {
        let Ok(recipe) = crate::kernel::load_recipe(
            &self.lab.kernel_recipes,
            &self.record.points[k].variant.kernel,
        ) else {
            return false;
        };
        matches!(
            crate::kernel::cached(&self.lab.cache, &recipe, &self.lab.build_options()),
            Ok(Some(_))
        )
    }

    /// Builds point `k`'s kernel from the nearest earlier point already built (its tree kept).
    async fn build(&mut self, k: usize) -> Result<BuiltKernel> {
        let started = Instant::now();
        let was_built = self.is_built(k);
        let mut from = 0;
        if !was_built && self.owns_recipe(k) {
            from = (1..k).rev().find(|&j| self.is_built(j)).unwrap_or(0);
            let base = self.record.points[from].variant.kernel.clone();
            self.write_recipe(k, &base, from)?;
        }
        let name = self.record.points[k].variant.kernel.clone();
        crate::progress::step(format!(
            "bisect: kernel {name}{}",
            if was_built {
                " (cached)".to_string()
            } else {
                format!(" (from {}'s tree)", self.record.points[from].variant.kernel)
            }
        ));
        let cache = self.lab.cache.clone();
        let opts = self.lab.build_options();
        let built = tokio::task::spawn_blocking(move || crate::kernel::build(&cache, &name, &opts))
            .await??;
        // Built by an earlier start of this bisect: keep what that build cost.
        let earlier = self.record.points[k].build.as_ref();
        if was_built && earlier.is_some_and(|b| b.key == built.manifest.key) {
            return Ok(built);
        }
        self.record.points[k].build = Some(BuildNote {
            key: built.manifest.key.clone(),
            release: built.manifest.release.clone(),
            from: built.manifest.build.incremental_from.clone(),
            seconds: if was_built {
                0.0
            } else {
                started.elapsed().as_secs_f64()
            },
            log: built.build_log(),
        });
        Ok(built)
    }

    /// Runs (or reads back, on resume) one step: point `k` against the points `ends`.
    async fn step(&mut self, kind: StepKind, k: usize, ends: &[usize]) -> Result<Step> {
        let number = self.record.steps.len();
        if let Some(done) = self
            .done
            .get(number)
            .filter(|s| s.kind == kind && s.point == k && s.ends == ends)
        {
            // A step is in the record only once it finished.
            let done = done.clone();
            crate::progress::step(format!(
                "bisect: step {} read back from {}",
                number + 1,
                self.dir.display()
            ));
            self.record.steps.push(done.clone());
            return Ok(done);
        }
        // The step a kill interrupted, and every step after it, run again.
        self.done.clear();
        let started = Instant::now();
        let mut step = Step {
            kind,
            point: k,
            ends: ends.to_vec(),
            record: None,
            verdicts: Vec::new(),
            class: None,
            note: String::new(),
            boots: 0,
            per_variant: Vec::new(),
            seconds: 0.0,
        };
        let mut kernels_ok = true;
        for &p in std::iter::once(&k).chain(ends) {
            if let Err(e) = self.build(p).await {
                if kind == StepKind::Probe && p == k {
                    step.class = Some(Class::Skipped);
                    step.note = format!("does not build: {}", first_line(&format!("{e:#}")));
                    kernels_ok = false;
                    break;
                }
                return Err(e.context(format!("building {}", self.record.point_name(p))));
            }
        }
        if kernels_ok {
            self.compare(&mut step).await?;
        }
        step.seconds = started.elapsed().as_secs_f64();
        crate::progress::step(format!("bisect: {}", self.record.step_line(number, &step)));
        self.record.steps.push(step.clone());
        self.record.seconds = self.seconds_before + self.started.elapsed().as_secs_f64();
        self.record.write(&self.dir)?;
        Ok(step)
    }

    /// The step's comparison: the probe (the base) with its ends, interleaved, adaptive on the
    /// metric; its verdicts and class.
    async fn compare(&mut self, step: &mut Step) -> Result<()> {
        let number = self.record.steps.len();
        let points = step.run_order();
        let cap = self.record.request.max_repetitions.unwrap_or(10);
        let (initial, cap) = match step.kind {
            // More boots to confirm: the first stage is already past the probes' first two.
            StepKind::Verify => (7.min(cap + 2), cap + 2),
            _ => (4.min(cap), cap),
        };
        let request = crate::scenarios::Request {
            scenario: self.record.request.scenario.clone(),
            variants: points
                .iter()
                .map(|&p| self.record.points[p].variant.clone())
                .collect(),
            initial_repetitions: Some(initial),
            max_repetitions: Some(cap),
            primaries: vec![(self.record.metric.clone(), self.record.step_magnitude())],
            seed: Some(self.record.seed.wrapping_add(number as u64)),
            topology: self.record.request.topology.clone(),
            set: self.record.request.set.clone(),
            name: Some(format!(
                "step-{:02}-{}",
                number + 1,
                match step.kind {
                    StepKind::Endpoints => "endpoints".to_string(),
                    StepKind::Probe => format!("probe-{}", step.point),
                    StepKind::Verify => format!("verify-{}", step.point),
                }
            )),
            results_root: Some(self.dir.join("steps")),
            ..crate::scenarios::Request::default()
        };
        let outcome = match self.scenario.compare(&self.lab, &request).await {
            Ok(o) => o,
            Err(e) => {
                let probe = &self.record.points[step.point].variant.name;
                let failed = e.downcast_ref::<crate::experiment::BootFailure>();
                match failed {
                    Some(f) if step.kind == StepKind::Probe && &f.variant == probe => {
                        step.note = format!("does not boot: {}", first_line(&format!("{e:#}")));
                        step.class = Some(match self.record.request.on_boot_failure {
                            OnBootFailure::Skip => Class::Skipped,
                            OnBootFailure::Bad => Class::BadLike,
                        });
                        return Ok(());
                    }
                    _ => return Err(e),
                }
            }
        };
        let comparison = outcome.comparison();
        // Every verdict a step needs is against its run's base (`Step::run_order`).
        let verdict = |base: usize, variant: usize| -> Result<Verdict> {
            debug_assert_eq!(base, points[0]);
            let name = &self.record.points[variant].variant.name;
            Ok(comparison.verdict(&self.record.metric, name)?)
        };
        match step.kind {
            StepKind::Probe => {
                let (lo, hi) = (step.ends[0], step.ends[1]);
                // Against the ends, as the ends' verdicts of the probe: the probe is the base.
                let vs_lo = flip(verdict(step.point, lo)?);
                let vs_hi = flip(verdict(step.point, hi)?);
                step.class = Some(search::classify(vs_lo.decision, vs_hi.decision));
                step.verdicts = vec![
                    StepVerdict {
                        base: lo,
                        variant: step.point,
                        verdict: vs_lo,
                    },
                    StepVerdict {
                        base: hi,
                        variant: step.point,
                        verdict: vs_hi,
                    },
                ];
            }
            _ => {
                let base = step.ends[0];
                step.verdicts = vec![StepVerdict {
                    base,
                    variant: step.point,
                    verdict: verdict(base, step.point)?,
                }];
            }
        }
        step.per_variant = points
            .iter()
            .map(|&p| {
                outcome
                    .record
                    .boots()
                    .iter()
                    .filter(|b| b.variant == self.record.points[p].variant.name)
                    .count()
            })
            .collect();
        step.boots = outcome.record.boots().len();
        step.record = Some(
            outcome
                .record_path
                .strip_prefix(&self.dir)
                .unwrap_or(&outcome.record_path)
                .to_path_buf(),
        );
        Ok(())
    }
}

/// The verdict of `base` against `variant` as the verdict of `variant` against `base`: the
/// rank tests are symmetric, the shift and its interval change sign.
fn flip(v: Verdict) -> Verdict {
    Verdict {
        shift: -v.shift,
        interval: v.interval.map(|i| crate::stats::Interval {
            low: -i.high,
            high: -i.low,
        }),
        n_base: v.n_variant,
        n_variant: v.n_base,
        mean_difference: -v.mean_difference,
        ..v
    }
}

/// The head of an error for the log's one line (the build log it names has the rest).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let line = line.split("; last lines:").next().unwrap_or(line);
    line.trim_end_matches(':').to_string()
}

/// `<good>+<k>of<n>`, cut to fit a recipe name.
fn probe_name(good: &str, k: usize, n: usize) -> String {
    let tail = format!("+{k}of{n}");
    let room = 64 - tail.len();
    let head: String = good.chars().take(room).collect();
    format!("{head}{tail}")
}

/// Copies the recipes, patches and config fragments of `from` into `to` (a bisect's own
/// directory: its probes' recipes go beside them, and it keeps what it ran with).
fn copy_recipes(from: &RecipeDirs, to: &RecipeDirs) -> Result<()> {
    fn copy_dir(from: &Path, to: &Path) -> Result<()> {
        std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
        let Ok(entries) = std::fs::read_dir(from) else {
            return Ok(());
        };
        for e in entries.flatten() {
            let path = e.path();
            let dest = to.join(e.file_name());
            if path.is_dir() {
                copy_dir(&path, &dest)?;
            } else if path.is_file() {
                std::fs::copy(&path, &dest)
                    .with_context(|| format!("copying {} to {}", path.display(), dest.display()))?;
            }
        }
        Ok(())
    }
    std::fs::create_dir_all(&to.recipes)?;
    for e in std::fs::read_dir(&from.recipes)
        .with_context(|| format!("reading {}", from.recipes.display()))?
        .flatten()
    {
        let path = e.path();
        if path.extension().is_some_and(|x| x == "toml") {
            std::fs::copy(&path, to.recipes.join(e.file_name()))?;
        }
    }
    copy_dir(&from.patches, &to.patches)?;
    copy_dir(&from.config, &to.config)
}

/// For a git range: the repository of `recipe`, which must have a `git` source of its own.
fn git_repo(dirs: &RecipeDirs, recipe: &str) -> Result<PathBuf> {
    let loaded = crate::kernel::load_recipe(dirs, recipe)?;
    let crate::kernel::Source::Git { repo, .. } = &loaded.source else {
        bail!("kernel recipe {recipe}: a git range needs a recipe with a `git` source");
    };
    if loaded.base.is_some() {
        bail!(
            "kernel recipe {recipe}: a git range needs a recipe with its own [source], not a base"
        );
    }
    Ok(repo.clone())
}

/// Writes `<recipe>.<good12>`, `recipe` at the range's good commit `id`, and returns its name.
fn write_git_good(dirs: &RecipeDirs, recipe: &str, repo: &Path, id: &str) -> Result<String> {
    let file = dirs.recipes.join(format!("{recipe}.toml"));
    let text = std::fs::read_to_string(&file)?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{}", file.display()))?;
    let source = table
        .get_mut("source")
        .and_then(|s| s.as_table_mut())
        .context("recipe without a [source] table")?;
    source.insert(
        "git".into(),
        toml::Value::String(repo.display().to_string()),
    );
    source.insert("ref".into(), toml::Value::String(id.to_string()));
    let name = format!("{recipe}.{}", &id[..12]);
    std::fs::write(
        dirs.recipes.join(format!("{name}.toml")),
        format!(
            "# Written by lab bisect: {recipe} at the range's good commit.\n{}",
            toml::to_string(&table)?
        ),
    )?;
    Ok(name)
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
mod tests {
    use super::*;

    fn verdict(decision: Decision, shift: f64) -> Verdict {
        Verdict {
            decision,
            magnitude: 20.0,
            shift,
            interval: None,
            p: 0.008,
            mann_whitney_p: 0.008,
            ks_p: 0.008,
            n_base: 5,
            n_variant: 5,
            mean_difference: shift,
        }
    }

    fn record(answer: Answer) -> BisectRecord {
        let request = Request::from_arguments(
            "dma-wakeup".into(),
            "v6.12".into(),
            None,
            Some("s".into()),
            None,
        )
        .unwrap();
        let points = (0..=3)
            .map(|k| Point {
                index: k,
                variant: Variant::kernel(&if k == 0 {
                    "v6.12".to_string()
                } else {
                    probe_name("v6.12", k, 3)
                }),
                change: (k > 0).then(|| Change {
                    subject: format!("patch {k}"),
                    patch: format!("bisect/0{k}.patch"),
                    commit: None,
                }),
                build: None,
            })
            .collect();
        let step = |kind, point, ends: Vec<usize>, class, verdicts: Vec<StepVerdict>| Step {
            kind,
            point,
            ends,
            record: Some(PathBuf::from("steps/x/record.json")),
            verdicts,
            class,
            note: String::new(),
            boots: 10,
            per_variant: vec![5, 5],
            seconds: 100.0,
        };
        BisectRecord {
            version: RECORD_VERSION,
            request,
            seed: 1,
            metric: "share_on_irq_cpu".into(),
            unit: "%".into(),
            magnitude: None,
            points,
            steps: vec![
                step(
                    StepKind::Endpoints,
                    3,
                    vec![0],
                    None,
                    vec![StepVerdict {
                        base: 0,
                        variant: 3,
                        verdict: verdict(Decision::Different, 60.0),
                    }],
                ),
                step(
                    StepKind::Probe,
                    2,
                    vec![0, 3],
                    Some(Class::BadLike),
                    vec![
                        StepVerdict {
                            base: 0,
                            variant: 2,
                            verdict: verdict(Decision::Different, 59.0),
                        },
                        StepVerdict {
                            base: 3,
                            variant: 2,
                            verdict: verdict(Decision::Same, -1.0),
                        },
                    ],
                ),
            ],
            answer: Some(answer),
            failure: None,
            seconds: 300.0,
        }
    }

    #[test]
    fn steps_after_the_endpoints_keep_their_magnitude_in_units() {
        let mut r = record(Answer::Culprits { culprits: vec![] });
        // 40% of each step's base would follow the probe; the endpoints' 20.0 (of good) stays.
        r.magnitude = Some(Magnitude::relative(0.4));
        assert_eq!(r.step_magnitude(), Some(Magnitude::Absolute(20.0)));
        // Before the endpoints ran: the request's (or the scenario's) own.
        r.steps.clear();
        assert_eq!(r.step_magnitude(), Some(Magnitude::relative(0.4)));
        r.magnitude = None;
        assert_eq!(r.step_magnitude(), None);
    }

    #[test]
    fn the_log_says_each_step_and_the_answer() {
        let culprit = Culprit {
            point: 2,
            change: Change {
                subject: "patch 2".into(),
                patch: "bisect/02.patch".into(),
                commit: None,
            },
            verdict: verdict(Decision::Different, 57.0),
            share_percent: 95.0,
        };
        let log = record(Answer::Culprits {
            culprits: vec![culprit],
        })
        .log();
        assert!(
            log.contains("v6.12 (good) .. v6.12+3of3 (bad), 3 changes"),
            "{log}"
        );
        assert!(
            log.contains("step  1  endpoints: vs good DIFFERENT +60.0pp p=0.008 (5v5)"),
            "{log}"
        );
        assert!(log.contains("probe 2/3 \"patch 2\": vs good DIFFERENT +59.0pp p=0.008 (5v5), vs bad SAME -1.0pp"), "{log}");
        assert!(log.contains("-> bad-like  [5+5 boots, 100 s]"), "{log}");
        assert!(
            log.contains("culprit: 2/3 \"patch 2\" (v6.12+2of3): accounts for 95% of the change"),
            "{log}"
        );
        // Two steps of two and three variants at a fixed 10: 20 + 30.
        assert!(
            log.contains("boots: 20 (40% of the 50 a fixed 10 per variant would boot)"),
            "{log}"
        );
        let nothing = record(Answer::NothingToBisect {
            verdict: verdict(Decision::Same, 1.0),
        })
        .log();
        assert!(
            nothing.contains("nothing to bisect: good and bad are SAME on share_on_irq_cpu"),
            "{nothing}"
        );
        let range = record(Answer::Range {
            lo: 0,
            hi: 2,
            culprits: Vec::new(),
        })
        .log();
        assert!(range.contains("the change is in one of 2"), "{range}");
        assert!(
            range.contains("1/3 \"patch 1\"\n    2/3 \"patch 2\""),
            "{range}"
        );
    }

    #[test]
    fn a_record_reads_back_and_the_page_shows_each_step() {
        let dir = tempfile::tempdir().unwrap();
        let r = record(Answer::Range {
            lo: 0,
            hi: 2,
            culprits: Vec::new(),
        });
        r.write(dir.path()).unwrap();
        let back = BisectRecord::read(dir.path()).unwrap();
        assert_eq!(back.log(), r.log());
        assert_eq!(
            find_records(&[dir.path().to_path_buf()]),
            vec![dir.path().to_path_buf()]
        );
        // The steps' own records are missing here: the rows stand without their dots.
        let page = page::render(&r, dir.path());
        assert_eq!(page.matches("<svg").count(), 2);
        assert!(page.contains("the change is in points 1..=2"), "{page}");
        let err = BisectRecord::read(&dir.path().join("none")).unwrap_err();
        assert!(format!("{err:#}").contains("is "), "{err:#}");
    }

    #[test]
    fn arguments_name_what_is_missing() {
        let err =
            Request::from_arguments("s".into(), "v6.12".into(), None, None, None).unwrap_err();
        assert!(
            err.to_string()
                .contains("give --bad VARIANT, --series FILE"),
            "{err}"
        );
        let err = Request::from_arguments("s".into(), "a".into(), None, None, Some("r".into()))
            .unwrap_err();
        assert!(
            err.to_string().contains("--git-recipe needs --bad REF"),
            "{err}"
        );
        let git = Request::from_arguments(
            "s".into(),
            "v1".into(),
            Some("v2".into()),
            None,
            Some("linux".into()),
        )
        .unwrap();
        assert_eq!(
            git.changes,
            Changes::Git {
                recipe: "linux".into(),
                good: "v1".into(),
                bad: "v2".into()
            }
        );
        assert_eq!(probe_name(&"x".repeat(70), 3, 12).len(), 64);
    }
}
