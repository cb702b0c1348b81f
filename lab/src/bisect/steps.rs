//! The real bisect: its directory and recipes, the points' kernels built from the nearest
//! built point's tree, and each step a comparison run of the scenario (`search::Steps`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::log::short_verdict;
use super::search::{self, Ask, Limits, Replay};
use super::{
    page, series, Answer, BisectRecord, BuildNote, Changes, Outcome, Point, Request, Step,
    StepKind, RECORD_VERSION,
};
use crate::kernel::{BuiltKernel, RecipeDirs};
use crate::scenarios::Registered;
use crate::stats::{Repetitions, Verdict};
use crate::variant::Variant;
use crate::Lab;

/// A running bisect.
pub(super) struct Bisect<'a> {
    /// The lab, with the bisect's own recipe directory.
    lab: Lab,
    scenario: &'a dyn Registered,
    record: BisectRecord,
    dir: PathBuf,
    /// Steps of the record already finished when this start began: read back, not run.
    done: Replay,
    started: Instant,
    seconds_before: f64,
}

impl<'a> Bisect<'a> {
    /// Sets up a new bisect in `dir`: the recipe copy, the changes, the points.
    pub(super) fn start(
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
            done: Replay::default(),
            started: Instant::now(),
            seconds_before: 0.0,
        };
        bisect.write_probe_recipes()?;
        bisect.record.write(&bisect.dir)?;
        Ok(bisect)
    }

    pub(super) fn reopen(
        lab: &Lab,
        scenario: &'a dyn Registered,
        mut record: BisectRecord,
        dir: PathBuf,
    ) -> Result<Self> {
        let dirs = RecipeDirs::at(dir.join("kernels"));
        let done = Replay::of(std::mem::take(&mut record.steps));
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

    pub(super) async fn go(mut self) -> Result<Outcome> {
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
        let limits = Limits {
            n: self.n(),
            cap: self
                .record
                .request
                .max_repetitions
                .unwrap_or(search::DEFAULT_CAP),
            on_boot_failure: self.record.request.on_boot_failure,
        };
        let answer = search::search(self, &limits).await?;
        self.record.answer = Some(answer);
        Ok(())
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

    /// Runs one step: builds its points' kernels and compares them (a point that does not
    /// build or boot is the step's `failed`).
    async fn run_step(&mut self, ask: &Ask) -> Result<Step> {
        let started = Instant::now();
        let mut step = ask.step();
        for p in step.run_order() {
            if let Err(e) = self.build(p).await {
                // A probe that does not build is skipped; an end or a culprit that built before
                // and does not now is an error (the search decides).
                if ask.kind == StepKind::Probe && p == ask.point {
                    step.failed = Some(p);
                    step.unbuilt = true;
                    step.note = format!("does not build: {}", first_line(&format!("{e:#}")));
                    step.seconds = started.elapsed().as_secs_f64();
                    return Ok(step);
                }
                return Err(e.context(format!("building {}", self.record.point_name(p))));
            }
        }
        self.compare(&mut step, ask).await?;
        step.seconds = started.elapsed().as_secs_f64();
        Ok(step)
    }

    /// The step's comparison: its points interleaved, adaptive until each verdict shows a
    /// change or is SAME (the endpoints: until DIFFERENT or SAME); its verdicts, each the
    /// step's point against an end.
    async fn compare(&mut self, step: &mut Step, ask: &Ask) -> Result<()> {
        let number = self.record.steps.len();
        let points = step.run_order();
        let schedule = ask.schedule();
        let (repetitions, initial, cap) = match schedule.repetitions {
            Repetitions::Fixed(n) => (Some(n), None, None),
            Repetitions::Adaptive { initial, cap } => (None, Some(initial), Some(cap)),
        };
        let request = crate::scenarios::Request {
            scenario: self.record.request.scenario.clone(),
            variants: points
                .iter()
                .map(|&p| self.record.points[p].variant.clone())
                .collect(),
            repetitions,
            initial_repetitions: initial,
            max_repetitions: cap,
            primaries: vec![(
                self.record.metric.clone(),
                match ask.magnitude {
                    Some(m) => Some(crate::stats::Magnitude::Absolute(m)),
                    None => self.record.step_magnitude(),
                },
            )],
            exclusive_decisions: schedule.exclusive,
            until: schedule.until,
            seed: Some(self.record.seed.wrapping_add(number as u64)),
            topology: self.record.request.topology.clone(),
            set: self.record.request.set.clone(),
            name: Some(format!(
                "step-{:02}-{}",
                number + 1,
                match ask.kind {
                    StepKind::Endpoints => "endpoints".to_string(),
                    StepKind::Probe => format!("probe-{}", ask.point),
                    StepKind::Verify => format!("verify-{}", ask.point),
                    StepKind::Rest => format!("rest-after-{}", ask.ends[0]),
                }
            )),
            results_root: Some(self.dir.join("steps")),
            ..crate::scenarios::Request::default()
        };
        let outcome = match self.scenario.compare(&self.lab, &request).await {
            Ok(o) => o,
            Err(e) => {
                let failed = e
                    .downcast_ref::<crate::experiment::BootFailure>()
                    .and_then(|f| {
                        points
                            .iter()
                            .copied()
                            .find(|&p| self.record.points[p].variant.name == f.variant)
                    });
                match failed {
                    Some(p) => {
                        step.failed = Some(p);
                        step.note = format!(
                            "{} does not boot: {}",
                            self.record.point_name(p),
                            first_line(&format!("{e:#}"))
                        );
                        return Ok(());
                    }
                    None => return Err(e),
                }
            }
        };
        let comparison = outcome.comparison();
        let verdict_of = |p: usize| -> Result<Verdict> {
            let name = &self.record.points[p].variant.name;
            Ok(comparison.verdict(&self.record.metric, name)?)
        };
        step.verdicts = ask.verdicts(verdict_of)?;
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

impl search::Steps for Bisect<'_> {
    async fn run(&mut self, ask: &Ask) -> Result<Step> {
        let number = self.record.steps.len();
        if let Some(done) = self.done.take(number, ask) {
            crate::progress::step(format!(
                "bisect: step {} read back from {}",
                number + 1,
                self.dir.display()
            ));
            return Ok(done);
        }
        self.run_step(ask).await
    }

    fn done(&mut self, step: Step) -> Result<()> {
        let number = self.record.steps.len();
        crate::progress::step(format!("bisect: {}", self.record.step_line(number, &step)));
        self.record.steps.push(step);
        self.record.seconds = self.seconds_before + self.started.elapsed().as_secs_f64();
        self.record.write(&self.dir)
    }

    fn built(&self, k: usize) -> bool {
        self.is_built(k)
    }
}

/// The head of an error for the log's one line (the build log it names has the rest).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let line = line.split("; last lines:").next().unwrap_or(line);
    line.trim_end_matches(':').to_string()
}

/// `<good>+<k>of<n>`, cut to fit a recipe name.
pub(super) fn probe_name(good: &str, k: usize, n: usize) -> String {
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
