//! The scenarios the lab ships, one file each, and the registry `lab scenarios` lists and
//! `lab compare SCENARIO` runs. A scenario may also be a file (`lab compare --scenario FILE`,
//! [`file`]), or a test's own Rust handed to [`crate::experiment::Experiment`] directly.

pub mod file;
pub mod its_balance;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::Value;

use crate::experiment::{Experiment, Materials, MetricDef, Outcome, Scenario};
use crate::variant::Variant;
use crate::Lab;

pub(crate) use its_balance::ItsBalance;

/// One shipped scenario, type-erased: what `lab scenarios`, `lab compare`, `lab prepare` and the
/// report ask of it. Every `Scenario` is one ([`Registered`] is implemented for all of them).
pub(crate) trait Registered {
    fn listing(&self) -> Result<Listing>;
    fn picture(&self) -> Option<crate::report::Picture>;
    /// Runs it as `request` asks.
    fn compare<'a>(
        &'a self,
        lab: &'a Lab,
        request: &'a Request,
    ) -> futures::future::LocalBoxFuture<'a, Result<Outcome>>;
    /// Every variant of `request`'s comparison planned (parameters, topology, devices): what
    /// fails there fails before anything is built.
    fn plan(&self, request: &Request) -> Result<()>;
    /// The kernels and images `request`'s comparison boots, found or built; nothing booted.
    fn materials<'a>(
        &'a self,
        lab: &'a Lab,
        request: &'a Request,
    ) -> futures::future::LocalBoxFuture<'a, Result<Materials>>;
}

impl<S: Scenario + Clone + 'static> Registered for S {
    fn listing(&self) -> Result<Listing> {
        listing(self)
    }

    fn picture(&self) -> Option<crate::report::Picture> {
        Scenario::picture(self)
    }

    fn compare<'a>(
        &'a self,
        lab: &'a Lab,
        request: &'a Request,
    ) -> futures::future::LocalBoxFuture<'a, Result<Outcome>> {
        Box::pin(async move { experiment(self.clone(), request).run(lab).await })
    }

    fn plan(&self, request: &Request) -> Result<()> {
        experiment(self.clone(), request).plan().map(drop)
    }

    fn materials<'a>(
        &'a self,
        lab: &'a Lab,
        request: &'a Request,
    ) -> futures::future::LocalBoxFuture<'a, Result<Materials>> {
        Box::pin(async move { experiment(self.clone(), request).materials(lab).await })
    }
}

/// Makes a shipped scenario with its seed parameters.
pub(crate) type Constructor = fn() -> Box<dyn Registered>;

/// The shipped scenarios, in `lab scenarios` order: the one table every look-up by name reads.
pub(crate) const REGISTRY: &[(&str, Constructor)] = &[
    ("dma-wakeup", || {
        Box::new(file::ScenarioFile::shipped("dma-wakeup").expect("the shipped S1 file parses"))
    }),
    ("eevdf-parity", || {
        Box::new(file::ScenarioFile::shipped("eevdf-parity").expect("the shipped S2 file parses"))
    }),
    ("numa-scan", || {
        Box::new(file::ScenarioFile::shipped("numa-scan").expect("the shipped S4 file parses"))
    }),
    ("delay-dequeue", || {
        Box::new(file::ScenarioFile::shipped("delay-dequeue").expect("the shipped S3 file parses"))
    }),
    ("irq-spread", || {
        Box::new(file::ScenarioFile::shipped("irq-spread").expect("the shipped S5 file parses"))
    }),
    ("its-balance", || Box::new(ItsBalance::seed())),
];

/// A scenario a crate's own `lab` binary runs beside the shipped ones
/// ([`crate::cli::main_with`]): every verb that takes a scenario's name (`compare`, `bisect`,
/// `scenarios`, `prepare`, `report`) finds it by its [`Scenario::name`].
pub struct Extra {
    name: String,
    make: Box<dyn Fn() -> Box<dyn Registered> + Send + Sync>,
}

impl Extra {
    /// `scenario`, as it is now, under its own name.
    pub fn new<S: Scenario + Clone + Send + Sync + 'static>(scenario: S) -> Extra {
        Extra {
            name: scenario.name().to_string(),
            make: Box::new(move || Box::new(scenario.clone())),
        }
    }

    /// The name the verbs find it by.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The process's extra scenarios, set once before any verb runs.
static EXTRA: std::sync::OnceLock<Vec<Extra>> = std::sync::OnceLock::new();

/// Makes `extra` findable by name for the rest of the process: refused when a name is a
/// shipped scenario's or given twice, or when extras were added already.
pub(crate) fn add_extra(extra: Vec<Extra>) -> Result<()> {
    check_extra(&extra)?;
    EXTRA
        .set(extra)
        .map_err(|_| anyhow::anyhow!("extra scenarios can be added once per process"))
}

/// Each extra scenario's name is its own: not a shipped one's, not another extra's.
fn check_extra(extra: &[Extra]) -> Result<()> {
    let mut seen: Vec<&str> = REGISTRY.iter().map(|(n, _)| *n).collect();
    for e in extra {
        if seen.contains(&e.name.as_str()) {
            bail!(
                "scenario {:?} is named twice: rename it (the shipped ones: {})",
                e.name,
                REGISTRY
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        seen.push(&e.name);
    }
    Ok(())
}

fn extras() -> &'static [Extra] {
    EXTRA.get().map_or(&[], Vec::as_slice)
}

/// The scenario names, in `lab scenarios` order: the shipped ones, then a crate's own.
pub(crate) fn names() -> Vec<&'static str> {
    REGISTRY
        .iter()
        .map(|(name, _)| *name)
        .chain(extras().iter().map(|e| e.name.as_str()))
        .collect()
}

/// The scenario `name`: a shipped one, or a crate's own.
pub(crate) fn find(name: &str) -> Result<Box<dyn Registered>> {
    let shipped = REGISTRY.iter().find(|(n, _)| *n == name).map(|(_, m)| m());
    let own = || extras().iter().find(|e| e.name == name).map(|e| (e.make)());
    match shipped.or_else(own) {
        Some(scenario) => Ok(scenario),
        None => bail!(
            "no scenario {name:?} (scenarios: {}; `lab scenarios` lists them)",
            names().join(", ")
        ),
    }
}

/// The scenario `request` names: its file (`--scenario FILE`), else the shipped one.
fn requested(request: &Request) -> Result<Box<dyn Registered>> {
    named_or_file(&request.scenario, request.file.as_deref())
}

/// The scenario in `file` when there is one, else the shipped scenario `name`.
pub(crate) fn named_or_file(
    name: &str,
    file: Option<&std::path::Path>,
) -> Result<Box<dyn Registered>> {
    match file {
        Some(path) => Ok(Box::new(file::ScenarioFile::read(path)?)),
        None => find(name),
    }
}

/// What `lab scenarios --scenario FILE` prints: the file's scenario as `lab scenarios` lists
/// the shipped ones.
pub fn file_text(path: &std::path::Path) -> Result<String> {
    Ok(listing(&file::ScenarioFile::read(path)?)?.to_string())
}

/// What `lab scenarios` shows of one scenario.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub name: String,
    pub description: String,
    pub topology: String,
    pub variants: Vec<Variant>,
    /// Default parameters, as `set=` names them.
    pub params: Value,
    pub metrics: Vec<MetricDef>,
}

fn listing<S: Scenario>(s: &S) -> Result<Listing> {
    Ok(Listing {
        name: s.name().to_string(),
        description: s.description().to_string(),
        topology: s.topology().to_string(),
        variants: s.default_variants(),
        params: serde_json::to_value(s.params())?,
        metrics: s.metrics(),
    })
}

/// `lab scenarios`' block of one scenario: name and description, then its topology, default
/// variants, parameters, primary metrics with their magnitudes, and every metric.
impl std::fmt::Display for Listing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}  {}", self.name, self.description)?;
        writeln!(f, "  topology   {}", self.topology)?;
        let variants: Vec<String> = self.variants.iter().map(|v| v.to_string()).collect();
        writeln!(f, "  variants   {}", variants.join("  "))?;
        writeln!(f, "  parameters {}", self.params)?;
        for m in self.metrics.iter().filter(|m| m.primary) {
            let unit = if m.unit.is_empty() {
                String::new()
            } else {
                format!(" ({})", m.unit)
            };
            writeln!(
                f,
                "  primary    {}{unit}, smallest change that matters {}",
                m.name, m.magnitude
            )?;
        }
        let metrics: Vec<&str> = self.metrics.iter().map(|m| m.name.as_str()).collect();
        writeln!(f, "  metrics    {}", metrics.join(", "))
    }
}

/// Every scenario with its defaults: the shipped ones, then a crate's own.
pub(crate) fn list() -> Result<Vec<Listing>> {
    REGISTRY
        .iter()
        .map(|(_, make)| make())
        .chain(extras().iter().map(|e| (e.make)()))
        .map(|s| s.listing())
        .collect()
}

/// What `lab scenarios` prints: every shipped scenario's `Listing`, in registry order, then the
/// scenario files in the repository's `scenarios/` (a line each: `lab compare --scenario FILE`
/// runs them), a file that does not read saying why.
pub fn list_text() -> Result<String> {
    let mut text: String = list()?.iter().map(Listing::to_string).collect();
    let files = example_files()?;
    if !files.is_empty() {
        text.push_str(
            "\nscenario files (lab compare --scenario FILE; lab scenarios --scenario FILE):\n",
        );
    }
    for path in files {
        let shown = path
            .strip_prefix(crate::repo_path(""))
            .unwrap_or(&path)
            .display()
            .to_string();
        match file::ScenarioFile::read(&path) {
            Ok(f) => text.push_str(&format!(
                "  {shown}  {}: {}\n",
                f.name(),
                Scenario::description(&f)
            )),
            Err(e) => text.push_str(&format!("  {shown}  does not read: {e:#}\n")),
        }
    }
    Ok(text)
}

/// The `*.toml` files of the repository's `scenarios/`, sorted.
fn example_files() -> Result<Vec<PathBuf>> {
    let dir = crate::repo_path("scenarios");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
}

/// One shipped scenario's defaults.
#[cfg(test)]
pub(crate) fn describe(name: &str) -> Result<Listing> {
    find(name)?.listing()
}

/// The picture a shipped scenario's report draws, for records written before records kept it.
pub(crate) fn picture(name: &str) -> Option<crate::report::Picture> {
    find(name).ok()?.picture()
}

/// The picture of the scenario a record ran, for records written before manifests kept their
/// picture (`lab report --html`, `lab report merge`): the one its scenario drew then.
pub fn picture_of(record: &crate::report::RunRecord) -> Option<crate::report::Picture> {
    let scenario = record.manifest.parameters.get("scenario")?.as_str()?;
    rust_picture(scenario).or_else(|| picture(scenario))
}

/// The picture a shipped scenario drew when it was Rust, before manifests kept their picture:
/// its boots' details are laid out as that code wrote them, not as its file does now.
fn rust_picture(scenario: &str) -> Option<crate::report::Picture> {
    use crate::report::{Mark, Picture};
    let mark = |label: &str, cpu: &str| Mark {
        label: label.into(),
        cpu: cpu.into(),
    };
    match scenario {
        "dma-wakeup" => Some(Picture {
            task: "dmatest's copy thread".into(),
            quantity: "time on CPU (trace)".into(),
            per_cpu: "/placement/runtime_us".into(),
            marks: vec![
                mark("IRQ", "/irq_cpu"),
                mark("start", "/placement/started_on"),
            ],
        }),
        "irq-spread" => Some(Picture {
            task: "the NVMe I/O queues' interrupts".into(),
            quantity: "completion interrupts (/proc/interrupts)".into(),
            per_cpu: "/completions_per_cpu".into(),
            marks: vec![mark("moved", "/moved_admin_vector/to_cpu")],
        }),
        "delay-dequeue" => Some(Picture {
            task: "the NVMe I/O queues' interrupts".into(),
            quantity: "completion interrupts (/proc/interrupts)".into(),
            per_cpu: "/irq_per_cpu".into(),
            marks: Vec::new(),
        }),
        _ => None,
    }
}

/// The kernels the shipped scenarios' default comparisons boot, each once, in registry order
/// (what `lab prepare` builds unless told otherwise; `debian`, a download, is left out).
pub(crate) fn default_kernels() -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for l in list()? {
        for v in l.variants {
            if v.kernel != crate::kernel::DEBIAN && !out.contains(&v.kernel) {
                out.push(v.kernel);
            }
        }
    }
    Ok(out)
}

/// A comparison asked for by name, as `lab compare` takes it; empty fields take the scenario's
/// defaults.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// The registered scenario (`lab scenarios` lists them).
    pub scenario: String,
    /// A scenario file to run instead (`--scenario FILE`, [`file::ScenarioFile`]).
    pub file: Option<PathBuf>,
    /// The variants, base first (empty: the scenario's).
    pub variants: Vec<Variant>,
    /// Exactly this many boots per variant (default: adaptive on the primary verdicts).
    pub repetitions: Option<usize>,
    /// The most boots per variant an adaptive run may take.
    pub max_repetitions: Option<usize>,
    /// Boots per variant of an adaptive run's first stage (default 5).
    pub initial_repetitions: Option<usize>,
    /// At most one primary decision can be a true "no change" (a bisect probe against two
    /// differing ends): see [`Experiment::exclusive_decisions`].
    pub exclusive_decisions: bool,
    /// When a variant needs no more boots (default: its verdicts DIFFERENT or SAME).
    pub until: crate::stats::Until,
    /// Primary metrics with their magnitudes (`None`: the metric's own); empty: the
    /// scenario's.
    pub primaries: Vec<(String, Option<crate::stats::Magnitude>)>,
    /// The boot order's seed (default: a fresh one, recorded).
    pub seed: Option<u64>,
    /// The topology (default: the scenario's).
    pub topology: Option<String>,
    /// Parameter overrides for every variant.
    pub set: BTreeMap<String, String>,
    /// Comparison name (default: the scenario's).
    pub name: Option<String>,
    /// Where results go (default [`crate::results_root`]).
    pub results_root: Option<PathBuf>,
    /// Replace the scenario's devices in order (`--device passthrough:NAME`).
    pub devices: Vec<crate::devices::DeviceSpec>,
    /// The host file for passthrough devices (`--host`).
    pub host: Option<String>,
}

impl Request {
    /// What fails before QEMU or a kernel is prepared: a single variant (a comparison needs two
    /// or more, or none for the scenario's defaults), an unknown passthrough device name or
    /// host file (the devices are resolved here), an unknown scenario, a scenario file's
    /// mistakes, a variant that cannot be planned.
    pub fn check(&mut self) -> Result<()> {
        if self.variants.len() == 1 {
            bail!(
                "one --variant given: a comparison needs two or more (base first), or none for the scenario's defaults"
            );
        }
        crate::devices::resolve(&mut self.devices, self.host.as_deref())?;
        requested(self)?.plan(self)
    }
}

/// Runs a shipped scenario.
pub async fn compare(lab: &Lab, request: &Request) -> Result<Outcome> {
    requested(request)?.compare(lab, request).await
}

/// The kernels and images a shipped scenario's comparison boots (what `lab compare` with the
/// same request would prepare), found or built.
pub async fn materials(lab: &Lab, request: &Request) -> Result<Materials> {
    requested(request)?.materials(lab, request).await
}

/// The experiment `request` asks for.
fn experiment<S: Scenario>(scenario: S, request: &Request) -> Experiment<S> {
    let mut experiment = Experiment::new(scenario);
    if !request.variants.is_empty() {
        experiment = experiment.variants(request.variants.clone());
    }
    if let Some(n) = request.repetitions {
        experiment = experiment.repetitions(n);
    } else if request.max_repetitions.is_some() || request.initial_repetitions.is_some() {
        let cap = request
            .max_repetitions
            .unwrap_or(experiment.repetitions.cap());
        let initial = request
            .initial_repetitions
            .unwrap_or(experiment.repetitions.initial())
            .min(cap);
        experiment = experiment.adaptive(initial, cap);
        // Only a start asked for: the cap stays the default's, raised where SAME needs more.
        experiment.repetitions_chosen = request.max_repetitions.is_some();
    }
    for (metric, magnitude) in &request.primaries {
        experiment.primaries.push((metric.clone(), *magnitude));
    }
    if request.exclusive_decisions {
        experiment = experiment.exclusive_decisions();
    }
    experiment = experiment.until(request.until);
    if let Some(seed) = request.seed {
        experiment = experiment.seed(seed);
    }
    if let Some(t) = &request.topology {
        experiment = experiment.topology(t);
    }
    if let Some(name) = &request.name {
        experiment = experiment.named(name);
    }
    if let Some(root) = &request.results_root {
        experiment = experiment.results_root(root);
    }
    for (k, v) in &request.set {
        experiment = experiment.set(k, v);
    }
    for (index, device) in request.devices.iter().enumerate() {
        experiment = experiment.device(index, device.clone());
    }
    if let Some(host) = &request.host {
        experiment = experiment.host(host);
    }
    experiment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extra_scenario_may_not_take_a_name_already_given() {
        let file =
            |path: &str| Extra::new(file::ScenarioFile::read(&crate::repo_path(path)).unwrap());
        // The NIC walkthrough is not shipped under its name: it may be a crate's own.
        check_extra(&[file("scenarios/nic-wakeup.toml")]).unwrap();
        let err = check_extra(&[file("scenarios/dma-wakeup.toml")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"dma-wakeup\" is named twice"), "{err}");
        let twice = [
            file("scenarios/nic-wakeup.toml"),
            file("scenarios/nic-wakeup.toml"),
        ];
        let err = check_extra(&twice).unwrap_err().to_string();
        assert!(err.contains("\"nic-wakeup\" is named twice"), "{err}");
    }

    #[test]
    fn every_shipped_scenario_lists_its_defaults() {
        let all = list().unwrap();
        assert_eq!(all.len(), REGISTRY.len());
        for (l, name) in all.iter().zip(names()) {
            assert_eq!(l.name, name, "the registry's name is the scenario's");
            assert!(l.variants.len() >= 2, "{}", l.name);
            assert!(!l.metrics.is_empty(), "{}", l.name);
            assert!(l.params.is_object(), "{}", l.name);
            crate::topology::Topology::by_name(&l.topology).unwrap();
        }
        let err = describe("no-such").unwrap_err().to_string();
        assert!(err.contains("dma-wakeup"), "{err}");
        assert!(picture("dma-wakeup").is_some());
        assert!(picture("no-such").is_none());
    }

    #[test]
    fn the_listing_shows_every_registered_scenario_with_its_primaries() {
        let text = list_text().unwrap();
        for (name, make) in REGISTRY {
            let l = make().listing().unwrap();
            assert!(
                text.contains(&format!(
                    "{name}  {}\n  topology   {}\n",
                    l.description, l.topology
                )),
                "{name} missing:\n{text}"
            );
            for m in l.metrics.iter().filter(|m| m.primary) {
                assert!(text.contains(&format!("  primary    {}", m.name)), "{text}");
            }
        }
        assert_eq!(text.matches("\n  metrics    ").count(), REGISTRY.len());
        let one = describe("dma-wakeup").unwrap().to_string();
        assert!(one.starts_with("dma-wakeup  "), "{one}");
        assert!(one.contains("\n  variants   v6.12  "), "{one}");
    }

    #[test]
    fn a_request_is_checked_before_anything_is_built() {
        let mut one_variant = Request {
            scenario: "dma-wakeup".into(),
            variants: vec!["v6.12".parse().unwrap()],
            ..Request::default()
        };
        let err = one_variant.check().unwrap_err().to_string();
        assert!(err.contains("one --variant given"), "{err}");
        let mut unknown = Request {
            scenario: "no-such".into(),
            ..Request::default()
        };
        let err = unknown.check().unwrap_err().to_string();
        assert!(err.contains("no scenario \"no-such\""), "{err}");
        let mut defaults = Request {
            scenario: "dma-wakeup".into(),
            ..Request::default()
        };
        defaults.check().unwrap();
    }

    #[test]
    fn a_record_gets_its_scenarios_picture() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/s1-cross-llc-a.record.json");
        let mut record = crate::report::RunRecord::read_json(&path).unwrap();
        record.manifest.parameters = serde_json::json!({"scenario": "dma-wakeup"});
        let stored = picture_of(&record).unwrap();
        // Written by S1's Rust definition: its marks where that code put the CPUs.
        let marks: Vec<&str> = stored.marks.iter().map(|m| m.cpu.as_str()).collect();
        assert_eq!(marks, ["/irq_cpu", "/placement/started_on"]);
        let boot = &record.boots()[0].details["scenario"];
        for pointer in marks.iter().chain([&stored.per_cpu.as_str()]) {
            assert!(boot.pointer(pointer).is_some(), "{pointer}");
        }
        record.manifest.parameters = serde_json::json!({"scenario": "eevdf-parity"});
        assert_eq!(picture_of(&record), picture("eevdf-parity"));
        // S5's Rust definition kept the completions per CPU and the moved vector's CPU; its file
        // keeps them under the vectors' key.
        record.manifest.parameters = serde_json::json!({"scenario": "irq-spread"});
        let old = picture_of(&record).unwrap();
        assert_eq!(old.per_cpu, "/completions_per_cpu");
        assert_ne!(picture("irq-spread").unwrap().per_cpu, old.per_cpu);
        // So did S3's: each CPU's completions of the I/O queues, under its own key.
        record.manifest.parameters = serde_json::json!({"scenario": "delay-dequeue"});
        assert_eq!(picture_of(&record).unwrap().per_cpu, "/irq_per_cpu");
        assert_ne!(picture("delay-dequeue").unwrap().per_cpu, "/irq_per_cpu");
        record.manifest.parameters = serde_json::json!({});
        assert_eq!(picture_of(&record), None);
    }

    #[test]
    fn the_listing_names_every_example_file_and_each_reads() {
        let text = list_text().unwrap();
        for name in [
            "dma-wakeup",
            "eevdf-parity",
            "numa-scan",
            "nic-wakeup",
            "irq-spread",
            "delay-dequeue",
        ] {
            assert!(
                text.contains(&format!("  scenarios/{name}.toml  ")),
                "{name} missing:\n{text}"
            );
        }
        assert!(!text.contains("does not read"), "{text}");
    }

    #[test]
    fn prepare_builds_the_kernels_of_the_default_comparisons() {
        let kernels = default_kernels().unwrap();
        assert_eq!(
            kernels,
            [
                "v6.12",
                "v6.12+wake-affine-idle-revert",
                "v6.12+numa-scan-revert",
                "v6.12+numa-scan-pid-only",
                "v6.12-arm64",
                "v6.12-arm64+its-first-cpu",
            ]
        );
    }
}
