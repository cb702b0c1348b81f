//! A crate's own `lab`: the lab's command line with a scenario of the crate's added
//! (`lab::cli::main_with`). `cargo run --example own_lab -- scenarios` lists it beside the
//! shipped ones; `cargo run --example own_lab -- compare feature-probe` boots it, and `bisect`,
//! `prepare` and `report` take its name as they take a shipped one's.
//!
//! The scenario reads back whether the guest kernel runs with `RUN_TO_PARITY`, so its default
//! comparison (v6.12 against v6.12 with the feature turned off) is DIFFERENT at the first look.

use anyhow::Result;
use lab::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use lab::report::Direction;
use lab::scenarios::Extra;
use lab::topology::Topology;
use lab::variant::Variant;
use serde::{Deserialize, Serialize};

/// What a user may set with `--set`: nothing here but a label kept in the record.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Params {
    label: String,
}

#[derive(Clone)]
struct FeatureProbe {
    params: Params,
}

impl Scenario for FeatureProbe {
    type Params = Params;

    fn name(&self) -> &str {
        "feature-probe"
    }

    fn description(&self) -> &str {
        "reads back the scheduler's RUN_TO_PARITY feature (a crate's own scenario)"
    }

    fn params(&self) -> &Params {
        &self.params
    }

    fn default_variants(&self) -> Vec<Variant> {
        vec![
            Variant::kernel("v6.12"),
            Variant::kernel("v6.12").with_sched_feature("NO_RUN_TO_PARITY"),
        ]
    }

    fn metrics(&self) -> Vec<MetricDef> {
        vec![MetricDef::new("run_to_parity", "", Direction::Neutral, 0.5).primary()]
    }

    fn plan(&self, _params: &Params, _topology: &Topology) -> Result<BootPlan> {
        Ok(BootPlan::default())
    }

    async fn measure(&self, _params: &Params, boot: &Boot<'_>) -> Result<Measurement> {
        let features = boot.vm.sh("cat /sys/kernel/debug/sched/features").await?;
        let on = features.split_whitespace().any(|f| f == "RUN_TO_PARITY");
        let mut m = Measurement::default();
        m.metrics
            .insert("run_to_parity".into(), f64::from(u8::from(on)));
        Ok(m)
    }
}

fn main() {
    let probe = FeatureProbe {
        params: Params {
            label: "example".into(),
        },
    };
    lab::cli::main_with(vec![Extra::new(probe)]);
}
