//! The experiment runner every scenario shares. A [`Scenario`] says only what is its own (name,
//! typed parameters, metric definitions, the devices and command line a boot needs, and one
//! `measure` step); the [`Experiment`] owns the loop:
//!
//! 1. check every variant, apply its parameter overrides and plan its boot (bad input fails
//!    here, before anything is built or started);
//! 2. build (or find) every variant's kernel and guest image;
//! 3. boot in stages, each in a seeded, balanced order (one boot = one sample), as many side by
//!    side as the host's CPU slots allow (`crate::slots`): boot with the variant's scheduler
//!    features and sysctls applied ([`Lab::boot`], the one boot path `lab run` takes too), bind
//!    devices and pin their IRQs, measure, check the guest kernel's log and taint mask, shut
//!    down; a boot whose sample is invalid (`crate::sample`) is kept
//!    aside with its cause and booted again;
//! 4. after each stage, decide every primary metric for every variant against the base
//!    (DIFFERENT, SAME or UNKNOWN, all together over the looks of the schedule,
//!    `crate::stats::sequential`); while one is UNKNOWN and the cap allows, the next stage boots
//!    the variants it involves again (`DecisionPoint::after_stage`);
//! 5. record each boot in the run record, the one owner of samples, with every decision point,
//!    and write the record, its table and each boot's artefacts into a directory of its own.
//!
//! Nothing here knows a scenario's devices, tasks or metrics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::devices::{bind_and_pin, BoundDevice, DeviceSpec};
use crate::kernel::ReadyKernel;
use crate::report::{Comparison, DecisionPoint, Manifest, Picture, RunRecord};
use crate::stats::{BootOrder, Magnitude, Repetitions, Until};
use crate::topology::Topology;
use crate::variant::Variant;
use crate::vm::Vm;
use crate::{BootOptions, Lab};

mod boots;
mod metric;
mod overrides;

pub use crate::sample::reject as reject_sample;
pub(crate) use boots::BootFailure;
pub(crate) use boots::Phases;
use boots::{names, Boots};
pub use metric::MetricDef;
pub(crate) use overrides::apply_overrides;

/// What one boot of a variant needs beyond the variant's kernel.
#[derive(Debug, Clone, Default)]
pub struct BootPlan {
    /// Devices, with the IRQ masks their vectors get in the guest.
    pub devices: Vec<DeviceSpec>,
    /// Kernel command-line arguments the scenario itself needs (the variant's come on top).
    pub cmdline: Vec<String>,
    /// Guest image recipe (default: the lab's default image).
    pub image: Option<String>,
    /// Boot time limit (default: the lab's, scaled to the topology).
    pub boot_timeout: Option<Duration>,
    /// Properties added to the guest's device tree (aarch64 topologies; see `vm::dtb`).
    pub device_tree: Vec<crate::vm::dtb::DtProperty>,
    /// Host threads a boot keeps busy under multi-threaded TCG (a thread per vCPU), when the
    /// scenario measured fewer than its vCPUs there: the boot then takes that many of the
    /// host's CPU slots, and more boots run side by side. Default (`None`): one per vCPU.
    /// Single-threaded TCG guests take one slot and KVM guests one per vCPU either way.
    pub host_threads: Option<usize>,
}

/// A booted guest as `measure` sees it.
pub struct Boot<'a> {
    /// The guest.
    pub vm: &'a Vm,
    /// Its topology.
    pub topology: &'a Topology,
    /// The variant it boots.
    pub variant: &'a Variant,
    /// The plan's devices, bound, in plan order.
    pub devices: &'a [BoundDevice],
    /// Position in the run's boot order, from 0.
    pub sequence: usize,
    /// This boot's artefact directory (serial and QEMU logs are there too).
    pub dir: &'a Path,
}

impl Boot<'_> {
    /// Keeps a raw artefact of this boot (a trace, a tool's output) and returns its path. The
    /// write runs on a blocking thread: a 100 MB trace must not stall the run's other boots.
    pub async fn keep(&self, name: &str, contents: impl AsRef<[u8]>) -> Result<PathBuf> {
        let path = self.dir.join(crate::host::sanitize(name));
        tokio::fs::write(&path, contents)
            .await
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}

/// One boot's result: a value for every declared metric, and details worth keeping.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    /// A value for each declared metric (an optional one may be missing).
    pub metrics: BTreeMap<String, f64>,
    /// Anything else worth keeping in the record (per-CPU maps the page draws, paths).
    pub details: Value,
}

/// A regression as an experiment: only what is its own.
// Static dispatch only: the runner is generic over the scenario and the CLI's registry matches
// names to types, so `async fn` in the trait needs no boxing.
#[allow(async_fn_in_trait)]
pub trait Scenario {
    /// Everything a user may set: serialised into the manifest, and the target of `set=`
    /// overrides (fields by name, nested ones with dots).
    type Params: Serialize + DeserializeOwned + Clone + std::fmt::Debug;

    /// The scenario's name (`dma-wakeup`); the default comparison name.
    fn name(&self) -> &str;
    /// One line for `lab scenarios`.
    fn description(&self) -> &str;
    /// The parameters every variant starts from.
    fn params(&self) -> &Self::Params;
    /// The topology it runs on unless told otherwise.
    fn topology(&self) -> &str {
        crate::host::DEFAULT_TOPOLOGY
    }
    /// The comparison it makes unless told otherwise (base first).
    fn default_variants(&self) -> Vec<Variant>;
    /// Every metric `measure` reports.
    fn metrics(&self) -> Vec<MetricDef>;
    /// The boot a variant with these parameters needs on `topology`; checks the parameters.
    fn plan(&self, params: &Self::Params, topology: &Topology) -> Result<BootPlan>;
    /// Measures one booted guest.
    async fn measure(&self, params: &Self::Params, boot: &Boot<'_>) -> Result<Measurement>;
    /// The most boots per variant its adaptive runs take unless told, where the lab's 10 are too
    /// few for its spread (None: 10); raised, never lowered, and still raised to SAME's need.
    fn max_repetitions(&self) -> Option<usize> {
        None
    }
    /// Which per-CPU map of its details (`Measurement::details`) the HTML report draws on the
    /// topology, for which task, with which CPUs marked. None: the report has no heatmap.
    fn picture(&self) -> Option<Picture> {
        None
    }
}

/// A scenario run as a comparison of variants.
pub struct Experiment<S: Scenario> {
    pub(crate) scenario: S,
    /// The comparison's name: results go to `results/<name>/`.
    pub(crate) name: String,
    /// Base first; at least two.
    pub(crate) variants: Vec<Variant>,
    /// Boots per variant: fixed, or adaptive on the primary verdicts (the default).
    pub(crate) repetitions: Repetitions,
    /// Whether the caller chose `repetitions`: the default's cap is raised to what SAME needs
    /// on the primaries ([`Experiment::schedule`]), a chosen one is kept.
    pub(crate) repetitions_chosen: bool,
    /// The metrics the comparison is decided on, with the smallest change that matters (`None`:
    /// the metric's own); empty: the scenario's primaries.
    pub(crate) primaries: Vec<(String, Option<Magnitude>)>,
    /// Metrics decided on besides the primaries above (or the scenario's).
    pub(crate) extra_primaries: Vec<(String, Magnitude)>,
    /// The seed of the boot order; `None`: a fresh one, recorded in the manifest.
    pub(crate) seed: Option<u64>,
    /// At most one primary decision can be a true "no change" (`stats::Plan::exclusive`).
    pub(crate) exclusive: bool,
    /// When a variant needs no more boots (default: its verdicts DIFFERENT or SAME).
    pub(crate) until: Until,
    /// Boots of one variant whose samples may be refused before the run gives up.
    pub(crate) max_rejected: usize,
    pub(crate) topology: String,
    /// Parameter overrides for every variant (a variant's own `set=` wins).
    pub(crate) overrides: BTreeMap<String, String>,
    pub(crate) results_root: PathBuf,
    /// Boots at once; `None`: as many as the host's CPU slots fit ([`Lab::guests_at_once`]).
    pub(crate) parallel: Option<usize>,
    /// Devices that replace the scenario's planned device at their index in every variant's
    /// plan (same role; the plan's IRQ masks kept): a passed-through engine for the emulated
    /// one, everything else unchanged.
    pub(crate) devices: BTreeMap<usize, DeviceSpec>,
    /// The host file passthrough devices are looked up in (`--host`; None: `LAB_HOST`, else
    /// `hosts/<hostname>.toml`).
    pub(crate) host: Option<String>,
}

/// A finished run.
#[derive(Debug)]
pub struct Outcome {
    /// The run's record: manifest, comparison and every boot. The one owner of samples.
    pub record: RunRecord,
    /// `<dir>/record.json`.
    pub record_path: PathBuf,
    /// `<dir>/table.txt`.
    pub table_path: PathBuf,
    /// `<dir>/record.html`: the table, the per-boot values and the pictures; `None` when it
    /// could not be drawn (a warning says why: the record and table stand without it).
    pub html_path: Option<PathBuf>,
    /// This run's directory.
    pub dir: PathBuf,
}

impl Outcome {
    /// The run's comparison: verdicts, assertions and the table.
    pub fn comparison(&self) -> &Comparison {
        self.record.comparison()
    }

    /// Where the run's files went, a line each (`record PATH`, `table PATH`, `report PATH`).
    pub fn written(&self) -> Vec<String> {
        let mut lines = vec![
            format!("record {}", self.record_path.display()),
            format!("table {}", self.table_path.display()),
        ];
        if let Some(html) = &self.html_path {
            lines.push(format!("report {}", html.display()));
        }
        lines
    }
}

/// What a comparison's boots are made of ([`Experiment::materials`]).
#[derive(Debug, Clone)]
pub struct Materials {
    /// The topology's name.
    pub topology: String,
    /// Its guests' architecture.
    pub arch: crate::arch::Arch,
    /// Each variant's name, kernel and guest image, base first.
    pub variants: Vec<(String, crate::kernel::BootKernel, crate::image::GuestImage)>,
}

/// A variant ready to boot, with its parameters (the scenario's type).
struct Arm<P> {
    variant: Variant,
    params: P,
    plan: BootPlan,
    kernel: ReadyKernel,
    image: crate::image::GuestImage,
}

/// One variant of an [`Experiment`], planned: the variant, its parameters and its boot plan.
pub type PlannedVariant<S> = (Variant, <S as Scenario>::Params, BootPlan);

impl<S: Scenario> Experiment<S> {
    /// The scenario's default comparison: its variants, its topology, its primary metrics,
    /// boots added while a primary verdict is UNKNOWN (`Repetitions::default`).
    pub fn new(scenario: S) -> Experiment<S> {
        Experiment {
            name: scenario.name().to_string(),
            variants: scenario.default_variants(),
            repetitions: Repetitions::default().reaching(scenario.max_repetitions().unwrap_or(0)),
            repetitions_chosen: false,
            primaries: Vec::new(),
            extra_primaries: Vec::new(),
            seed: None,
            exclusive: false,
            until: Until::Verdict,
            max_rejected: 2,
            topology: scenario.topology().to_string(),
            overrides: BTreeMap::new(),
            results_root: crate::host::results_root(),
            parallel: None,
            devices: BTreeMap::new(),
            host: None,
            scenario,
        }
    }

    /// The comparison's name (default: the scenario's): results go to `results/<name>/`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// The variants, base first (default: the scenario's).
    pub fn variants(mut self, variants: impl IntoIterator<Item = Variant>) -> Self {
        self.variants = variants.into_iter().collect();
        self
    }

    /// Exactly `n` boots per variant, whatever the verdicts.
    pub fn repetitions(mut self, n: usize) -> Self {
        self.repetitions = Repetitions::Fixed(n);
        self.repetitions_chosen = true;
        self
    }

    /// `initial` boots per variant, then more while a primary verdict is UNKNOWN, at most
    /// `cap` per variant.
    pub fn adaptive(mut self, initial: usize, cap: usize) -> Self {
        self.repetitions = Repetitions::Adaptive { initial, cap };
        self.repetitions_chosen = true;
        self
    }

    /// The schedule the run follows on `definition` (the comparison without samples): the one
    /// chosen, else the default with its cap raised to the boots SAME needs on the primaries
    /// (19 a side at 10 points of a share, 39 at 5), so every verdict stays within reach.
    pub(crate) fn schedule(&self, definition: &Comparison) -> Repetitions {
        if self.repetitions_chosen {
            self.repetitions
        } else {
            self.repetitions.reaching(definition.same_min_boots())
        }
    }

    /// Decides the comparison on `metric` with `magnitude` as the smallest change that
    /// matters, in the metric's unit or relative to the base. The first call replaces the
    /// scenario's primaries; more calls add metrics.
    pub fn primary(mut self, metric: &str, magnitude: impl Into<Magnitude>) -> Self {
        self.primaries
            .push((metric.to_string(), Some(magnitude.into())));
        self
    }

    /// Decides the comparison on `metric` too, besides the scenario's primaries (a time or
    /// throughput metric that only KVM can measure, say).
    pub fn also_primary(mut self, metric: &str, magnitude: impl Into<Magnitude>) -> Self {
        self.extra_primaries
            .push((metric.to_string(), magnitude.into()));
        self
    }

    /// Declares that at most one of the primary decisions can be a true "no change" (a bisect
    /// probe against two ends known to differ), so each is made at the whole 1% instead of a
    /// Holm share of it (`stats::Plan::exclusive`). Wrong when two variants could both equal
    /// the base: then the chance of a false DIFFERENT is no longer held to 1%.
    pub fn exclusive_decisions(mut self) -> Self {
        self.exclusive = true;
        self
    }

    /// Boots a variant until `until` settles its primary verdicts (default [`Until::Verdict`]:
    /// DIFFERENT or SAME; a bisect's steps stop once a change is shown, [`Until::Shown`]).
    pub fn until(mut self, until: Until) -> Self {
        self.until = until;
        self
    }

    /// The seed of the boot order (recorded in every run; the same seed gives the same order).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The topology file (default: the scenario's).
    pub fn topology(mut self, name: &str) -> Self {
        self.topology = name.to_string();
        self
    }

    /// Sets a scenario parameter for every variant (`placement`, `dmatest.polled`).
    pub fn set(mut self, param: &str, value: &str) -> Self {
        self.overrides.insert(param.to_string(), value.to_string());
        self
    }

    /// Runs at most `n` boots at once (1: one after another). Without it, as many as fit.
    pub fn parallel(mut self, n: usize) -> Self {
        self.parallel = Some(n);
        self
    }

    /// Replaces the scenario's device `index` with `device` in every variant (see
    /// `DeviceSpec::replaced_by`): `.device(0, DeviceSpec::passthrough("ioat0"))` runs S1 on
    /// the host file's I/OAT function instead of the emulated one.
    pub fn device(mut self, index: usize, device: DeviceSpec) -> Self {
        self.devices.insert(index, device);
        self
    }

    /// The host file passthrough devices come from (`hosts/NAME.toml` or a path).
    pub fn host(mut self, name: &str) -> Self {
        self.host = Some(name.to_string());
        self
    }

    /// Where results go (default [`crate::results_root`]).
    pub fn results_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.results_root = dir.into();
        self
    }

    /// How many boots of one variant may have their samples refused (a guest kernel WARNING,
    /// say) before the run gives up (default 2).
    pub fn max_rejected(mut self, boots: usize) -> Self {
        self.max_rejected = boots;
        self
    }

    /// The parameters `variant` runs with: the scenario's, then the experiment's overrides,
    /// then the variant's own.
    pub(crate) fn params_for(&self, variant: &Variant) -> Result<S::Params> {
        let mut overrides = self.overrides.clone();
        overrides.extend(variant.params.clone());
        apply_overrides(self.scenario.params(), &overrides).with_context(|| {
            format!(
                "variant {}: scenario {}",
                variant.name,
                self.scenario.name()
            )
        })
    }

    fn check(&self) -> Result<()> {
        crate::host::check_name("comparison name", &self.name)?;
        if self.parallel == Some(0) {
            bail!("{}: parallel boots must be at least 1", self.name);
        }
        if self.variants.len() < 2 {
            bail!(
                "{}: a comparison needs at least two variants (base first), got {}",
                self.name,
                self.variants.len()
            );
        }
        if let Err(e) = self.repetitions.check() {
            bail!("{}: {e}", self.name);
        }
        self.definition()?;
        for (i, v) in self.variants.iter().enumerate() {
            v.validate()?;
            if self.variants[..i].iter().any(|o| o.name == v.name) {
                bail!("{}: variant {} is listed twice", self.name, v.name);
            }
        }
        Ok(())
    }

    /// Checks the experiment and plans every variant's boot: parameters, the scenario's plan,
    /// device replacements ([`Experiment::device`]) and passthrough devices looked up in the
    /// host file, every device validated. Everything here fails before anything is built.
    pub fn plan(&self) -> Result<Vec<PlannedVariant<S>>> {
        Ok(self.plan_with_topology()?.1)
    }

    /// [`Experiment::plan`], with the topology it planned on (loaded once; a topology that does
    /// not load is [`crate::Error::BadInput`]).
    fn plan_with_topology(&self) -> Result<(Topology, Vec<PlannedVariant<S>>)> {
        self.check()?;
        let topology = Topology::by_name(&self.topology)?;
        let mut replacements: Vec<(usize, DeviceSpec)> = self.devices.clone().into_iter().collect();
        for (index, device) in &mut replacements {
            crate::devices::resolve(std::slice::from_mut(device), self.host.as_deref())
                .with_context(|| format!("{}: device {index}", self.name))?;
        }
        let mut planned = Vec::new();
        for variant in &self.variants {
            let params = self.params_for(variant)?;
            let mut plan = self
                .scenario
                .plan(&params, &topology)
                .with_context(|| format!("variant {}", variant.name))?;
            for (index, device) in &replacements {
                let count = plan.devices.len();
                let planned = plan.devices.get_mut(*index).with_context(|| {
                    format!(
                        "variant {}: device {index} replaces nothing: the scenario plans {count} device(s)",
                        variant.name
                    )
                })?;
                *planned = planned
                    .replaced_by(device, *index)
                    .with_context(|| format!("variant {}", variant.name))?;
            }
            crate::devices::resolve(&mut plan.devices, self.host.as_deref())
                .with_context(|| format!("variant {}", variant.name))?;
            for (index, device) in plan.devices.iter().enumerate() {
                device
                    .validate(index, topology.nr_cpus())
                    .with_context(|| format!("variant {}", variant.name))?;
            }
            planned.push((variant.clone(), params, plan));
        }
        Ok((topology, planned))
    }

    /// Plans every variant and finds or builds its kernel and guest image: what a run boots,
    /// and what a bundle of the comparison carries (`lab bundle create`). Boots nothing.
    pub async fn materials(&self, lab: &Lab) -> Result<Materials> {
        let (topology, arms) = self.arms(lab).await?;
        Ok(Materials {
            topology: topology.name().to_string(),
            arch: topology.arch(),
            variants: arms
                .into_iter()
                .map(|a| (a.variant.name, a.kernel.kernel, a.image))
                .collect(),
        })
    }

    /// The planned variants with their kernels and images, built first so boots are not
    /// interleaved with builds; a kernel for another architecture than the topology's fails
    /// before any is built.
    async fn arms(&self, lab: &Lab) -> Result<(Topology, Vec<Arm<S::Params>>)> {
        let (topology, planned) = self.plan_with_topology()?;
        for (variant, _, _) in &planned {
            lab.check_variant_arch(variant, topology.arch())
                .with_context(|| format!("{}: topology {}", self.name, topology.name()))?;
        }
        let mut arms = Vec::new();
        for (variant, params, plan) in planned {
            crate::progress::step(format!("{}: kernel for {}", self.name, variant.name));
            let kernel = lab.prepare_for(&variant, topology.arch()).await?;
            let image_name = plan
                .image
                .clone()
                .unwrap_or_else(|| crate::host::DEFAULT_IMAGE.to_string());
            let image = lab.image_for(&image_name, &kernel.kernel).await?;
            arms.push(Arm {
                params,
                variant,
                plan,
                kernel,
                image,
            });
        }
        Ok((topology, arms))
    }

    /// Runs the comparison in stages until every primary verdict is decided, or the cap is
    /// reached (or exactly `repetitions` per variant when fixed), and returns the record.
    pub async fn run(&self, lab: &Lab) -> Result<Outcome> {
        let (topology, arms) = self.arms(lab).await?;
        let dir =
            crate::report::run_dir(&self.results_root.join(crate::host::sanitize(&self.name)))?;
        let seed = self.seed.unwrap_or_else(BootOrder::fresh_seed);
        let mut record = RunRecord::new(
            self.definition()?,
            self.manifest(lab, &topology, &arms, seed)?,
        )?;
        let record_path = dir.join("record.json");
        // Boots run side by side as far as the host's CPU slots allow.
        let at_once = self.parallel.unwrap_or_else(|| {
            // The costliest arm's boots decide: any arm without a measured figure takes one
            // slot per vCPU.
            let declared = arms
                .iter()
                .map(|a| a.plan.host_threads)
                .try_fold(0, |most, t| t.map(|t| most.max(t)));
            lab.guests_at_once(&topology, declared)
        });
        // A host device is in one guest at a time.
        let exclusive = arms
            .iter()
            .any(|a| a.plan.devices.iter().any(|d| d.device.exclusive()));
        let boots = Boots {
            experiment: self,
            lab,
            topology: &topology,
            arms: &arms,
            dir: &dir,
            at_once: if exclusive { 1 } else { at_once },
        };
        let mut order = BootOrder::new(seed);
        let mut attempts = 0;
        let mut active: Vec<usize> = (0..arms.len()).collect();
        let mut target = self.repetitions.initial();
        loop {
            let have = self.valid_boots(&record, &arms);
            let stage = order.stage(&active, &have, target);
            crate::progress::step(format!(
                "{}: {} boots: {} to {target} each",
                self.name,
                stage.len(),
                names(&arms, &active)
            ));
            if let Err(e) = boots.stage(&stage, &mut record, &mut attempts).await {
                // Keep what ran: the boots before the failure and why it stopped. Boots still
                // running are killed when their futures are dropped.
                record.failure = Some(format!("{e:#}"));
                let kept = record.write_json_to(&record_path);
                return Err(match kept {
                    Ok(()) => e.context(format!("partial record in {}", record_path.display())),
                    Err(_) => e,
                });
            }
            let (point, next) = self.decision_point(&record, &arms);
            record.decisions.push(point);
            // Written after every stage: a killed run keeps its boots and decisions.
            record.write_json_to(&record_path)?;
            match next {
                Some((variants, n)) => {
                    active = variants;
                    target = n;
                }
                None => break,
            }
        }
        let last = record.decisions.last().map(|d| d.next.clone());
        if let Some(next) = last {
            crate::progress::step(format!("{}: {next}", self.name));
        }
        let outputs = record.write_outputs(&dir, None)?;
        Ok(Outcome {
            record,
            record_path: outputs.record,
            table_path: outputs.table,
            html_path: outputs.html,
            dir,
        })
    }

    /// Valid boots so far per arm.
    fn valid_boots(&self, record: &RunRecord, arms: &[Arm<S::Params>]) -> Vec<usize> {
        arms.iter()
            .map(|a| {
                record
                    .boots()
                    .iter()
                    .filter(|b| b.variant == a.variant.name)
                    .count()
            })
            .collect()
    }

    /// The primary verdicts now, and what to boot next ([`DecisionPoint::after_stage`]).
    fn decision_point(
        &self,
        record: &RunRecord,
        arms: &[Arm<S::Params>],
    ) -> (DecisionPoint, Option<(Vec<usize>, usize)>) {
        let have = self.valid_boots(record, arms);
        let schedule = self.schedule(record.comparison());
        DecisionPoint::after_stage(record.comparison(), schedule, self.until, &have)
    }

    /// The comparison's variants and metrics, without samples; the experiment's primaries (or
    /// else the scenario's) marked.
    fn definition(&self) -> Result<Comparison> {
        let mut c = Comparison::new(
            self.name.clone(),
            self.variants.iter().map(|v| v.name.clone()),
        )?;
        let metrics = self.scenario.metrics();
        for m in &metrics {
            c.add_metric(&m.name, &m.unit, m.direction, m.magnitude)?;
            c.set_range(&m.name, m.range)?;
        }
        if self.primaries.is_empty() {
            for m in metrics.iter().filter(|m| m.primary) {
                c.make_primary(&m.name, None)?;
            }
        }
        let extra = self
            .extra_primaries
            .iter()
            .map(|(metric, magnitude)| (metric, Some(*magnitude)));
        for (metric, magnitude) in self.primaries.iter().map(|(m, g)| (m, *g)).chain(extra) {
            c.make_primary(metric, magnitude).with_context(|| {
                format!(
                    "{}: primary metric {metric:?} of scenario {}",
                    self.name,
                    self.scenario.name()
                )
            })?;
        }
        c.set_plan(crate::stats::Plan {
            looks: self.schedule(&c).looks(),
            exclusive: self.exclusive,
        });
        Ok(c)
    }

    fn manifest(
        &self,
        lab: &Lab,
        topology: &Topology,
        arms: &[Arm<S::Params>],
        seed: u64,
    ) -> Result<Manifest> {
        let mut manifest = lab.manifest(topology.arch())?;
        manifest.topology = json!({
            "name": topology.name(),
            "mapping": topology.describe(),
            "file": topology.source_text(),
        });
        manifest.kernel = arms
            .iter()
            .map(|a| {
                json!({
                    "variant": a.variant,
                    "release": a.kernel.kernel.release,
                    "identity": a.kernel.kernel.identity,
                    "settings": a.kernel.settings,
                })
            })
            .collect();
        manifest.image = arms
            .iter()
            .map(|a| json!({"variant": a.variant.name, "recipe": a.image.recipe, "hash": a.image.hash}))
            .collect();
        manifest.picture = self.scenario.picture();
        manifest.parameters = json!({
            "scenario": self.scenario.name(),
            // The schedule followed: the default's cap raised where SAME needs more boots.
            "repetitions": self.schedule(&self.definition()?),
            "until": self.until,
            "seed": seed,
            "order": format!("stages of randomized Williams rounds, seed {seed}"),
            "max_rejected_per_variant": self.max_rejected,
            "variants": arms.iter().map(|a| json!({
                "variant": a.variant.name,
                "params": a.params,
                "devices": a.plan.devices,
                "cmdline": a.plan.cmdline,
                "device_tree": a.plan.device_tree,
            })).collect::<Vec<_>>(),
        });
        Ok(manifest)
    }

    async fn one_boot(
        &self,
        lab: &Lab,
        topology: &Topology,
        arm: &Arm<S::Params>,
        sequence: usize,
        dir: &Path,
    ) -> Result<(BTreeMap<String, f64>, Value)> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut opts =
            BootOptions::named(&format!("{}-{sequence:02}-{}", self.name, arm.variant.name))
                .topology(&self.topology)
                .ready_kernel(arm.kernel.clone());
        opts.image = Some(arm.image.recipe.clone());
        opts.cmdline = arm.plan.cmdline.clone();
        opts.devices = arm.plan.devices.clone();
        opts.boot_timeout = arm.plan.boot_timeout;
        opts.device_tree = arm.plan.device_tree.clone();
        opts.host_threads = arm.plan.host_threads;
        opts.log_dir = Some(dir.to_path_buf());
        // Where each boot's time goes, kept in its details (issue: what a boot costs).
        let mut phases = Phases::default();
        let started = Instant::now();
        // The variant's scheduler features and sysctls are applied (and read back) by the boot.
        let vm = lab
            .boot(opts)
            .await
            .with_context(|| format!("variant {}", arm.variant.name))?;
        phases.lap("boot", &started);
        // The VM is killed when dropped, also when a step below fails.
        let measured = async {
            let devices = bind_and_pin(&vm, vm.devices()).await?;
            phases.lap("devices", &started);
            let boot = Boot {
                vm: &vm,
                topology,
                variant: &arm.variant,
                devices: &devices,
                sequence,
                dir,
            };
            let m = self.scenario.measure(&arm.params, &boot).await?;
            phases.lap("measure", &started);
            // A WARNING, a stall or a taint during the boot makes its sample no sample.
            crate::vm::health::check(&vm).await?;
            phases.lap("kernel log", &started);
            anyhow::Ok((m, devices))
        }
        .await;
        let boot_seconds = vm.boot_time.as_secs_f64();
        vm.shutdown().await?;
        phases.lap("shutdown", &started);
        let (m, devices) = measured?;
        let declared = self.scenario.metrics();
        for d in declared.iter().filter(|d| !d.optional) {
            if !m.metrics.contains_key(&d.name) {
                bail!(
                    "scenario {} measured no value of its metric {:?}",
                    self.scenario.name(),
                    d.name
                );
            }
        }
        if let Some(extra) = m
            .metrics
            .keys()
            .find(|k| !declared.iter().any(|d| &d.name == *k))
        {
            bail!(
                "scenario {} measured {extra:?}, which it does not declare",
                self.scenario.name()
            );
        }
        let details = json!({
            "boot_seconds": boot_seconds,
            "phase_seconds": phases.0,
            "dir": dir,
            "devices": devices,
            "scenario": m.details,
        });
        Ok((m.metrics, details))
    }
}

#[cfg(test)]
mod tests;
