//! The scenarios the lab ships, one file each, and the registry `lab scenarios` lists and
//! `lab compare SCENARIO` runs. A test may also define its own scenario and hand it to
//! [`crate::experiment::Experiment`] directly.

pub mod delay_dequeue;
pub mod dma_wakeup;
pub mod eevdf_parity;
pub mod irq_spread;
pub mod numa_scan;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Result};
use serde_json::Value;

use crate::experiment::{Experiment, MetricDef, Outcome, Scenario};
use crate::variant::Variant;
use crate::Lab;

pub use delay_dequeue::DelayDequeue;
pub use dma_wakeup::DmaWakeup;
pub use eevdf_parity::EevdfParity;
pub use irq_spread::IrqSpread;
pub use numa_scan::NumaScan;

/// The shipped scenario names, in `lab scenarios` order.
pub const NAMES: &[&str] = &[
    "dma-wakeup",
    "eevdf-parity",
    "numa-scan",
    "delay-dequeue",
    "irq-spread",
];

/// What `lab scenarios` shows of one scenario.
#[derive(Debug, Clone)]
pub struct Listing {
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

/// Every shipped scenario with its defaults.
pub fn list() -> Result<Vec<Listing>> {
    NAMES.iter().map(|n| describe(n)).collect()
}

/// One shipped scenario's defaults.
pub fn describe(name: &str) -> Result<Listing> {
    match name {
        "dma-wakeup" => listing(&DmaWakeup::seed()),
        "eevdf-parity" => listing(&EevdfParity::seed()),
        "numa-scan" => listing(&NumaScan::seed()),
        "delay-dequeue" => listing(&DelayDequeue::seed()),
        "irq-spread" => listing(&IrqSpread::seed()),
        other => unknown(other),
    }
}

fn unknown<T>(name: &str) -> Result<T> {
    bail!(
        "no scenario {name:?} (scenarios: {}; `lab scenarios` lists them)",
        NAMES.join(", ")
    )
}

/// The picture a shipped scenario's report draws, for records written before records kept it.
pub fn picture(name: &str) -> Option<crate::report::Picture> {
    match name {
        "dma-wakeup" => DmaWakeup::seed().picture(),
        "eevdf-parity" => EevdfParity::seed().picture(),
        "numa-scan" => NumaScan::seed().picture(),
        "delay-dequeue" => DelayDequeue::seed().picture(),
        "irq-spread" => IrqSpread::seed().picture(),
        _ => None,
    }
}

/// A comparison asked for by name, as `lab compare` takes it; empty fields take the scenario's
/// defaults.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub scenario: String,
    pub variants: Vec<Variant>,
    /// Exactly this many boots per variant (default: adaptive on the primary verdicts).
    pub repetitions: Option<usize>,
    /// The most boots per variant an adaptive run may take.
    pub max_repetitions: Option<usize>,
    /// Primary metrics with their magnitudes (`None`: the metric's own); empty: the
    /// scenario's.
    pub primaries: Vec<(String, Option<crate::stats::Magnitude>)>,
    /// The boot order's seed (default: a fresh one, recorded).
    pub seed: Option<u64>,
    pub topology: Option<String>,
    /// Parameter overrides for every variant.
    pub set: BTreeMap<String, String>,
    /// Comparison name (default: the scenario's).
    pub name: Option<String>,
    pub results_root: Option<PathBuf>,
    /// Replace the scenario's devices in order (`--device passthrough:NAME`).
    pub devices: Vec<crate::devices::DeviceSpec>,
    /// The host file for passthrough devices (`--host`).
    pub host: Option<String>,
}

/// Runs a shipped scenario.
pub async fn compare(lab: &Lab, request: &Request) -> Result<Outcome> {
    match request.scenario.as_str() {
        "dma-wakeup" => run(lab, DmaWakeup::seed(), request).await,
        "eevdf-parity" => run(lab, EevdfParity::seed(), request).await,
        "numa-scan" => run(lab, NumaScan::seed(), request).await,
        "delay-dequeue" => run(lab, DelayDequeue::seed(), request).await,
        "irq-spread" => run(lab, IrqSpread::seed(), request).await,
        other => unknown(other),
    }
}

async fn run<S: Scenario>(lab: &Lab, scenario: S, request: &Request) -> Result<Outcome> {
    let mut experiment = Experiment::new(scenario);
    if !request.variants.is_empty() {
        experiment = experiment.variants(request.variants.clone());
    }
    if let Some(n) = request.repetitions {
        experiment = experiment.repetitions(n);
    } else if let Some(cap) = request.max_repetitions {
        let initial = experiment.repetitions.initial().min(cap);
        experiment = experiment.adaptive(initial, cap);
    }
    for (metric, magnitude) in &request.primaries {
        experiment.primaries.push((metric.clone(), *magnitude));
    }
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
    experiment.run(lab).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scenario_lists_its_defaults() {
        let all = list().unwrap();
        assert_eq!(all.len(), NAMES.len());
        for l in &all {
            assert!(l.variants.len() >= 2, "{}", l.name);
            assert!(!l.metrics.is_empty(), "{}", l.name);
            assert!(l.params.is_object(), "{}", l.name);
            crate::topology::Topology::by_name(&l.topology).unwrap();
        }
        let err = describe("no-such").unwrap_err().to_string();
        assert!(err.contains("dma-wakeup"), "{err}");
    }
}
