//! Seed S2 (`docs/SCENARIOS.md`): EEVDF's `RUN_TO_PARITY` under hackbench. With the feature a
//! running task keeps the CPU until it has used its slice, so fewer wakeups preempt it; without
//! it (`NO_RUN_TO_PARITY`) every eligible wakee with an earlier deadline may. The seed measured
//! hackbench 118.2 s without it and 100.9 s with it on a 224-CPU machine.
//!
//! Per boot: run hackbench (threads, scaled to the guest), with its context switches from the
//! kernel's rusage of the whole process and its preemptions and migrations from a tracefs count.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::experiment::{Boot, BootPlan, Measurement, MetricDef, Scenario};
use crate::guest::{GuestCommand, ResourceUse};
use crate::observe::{EventCount, EventCounts, TraceEvent};
use crate::report::{Direction, Picture};
use crate::stats::Magnitude;
use crate::topology::Topology;
use crate::variant::Variant;
use crate::workload::{Hackbench, HackbenchResult};

/// Everything a run of S2 can change (`lab compare eevdf-parity --set hackbench.loops=400`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EevdfParityParams {
    /// The hackbench run.
    pub hackbench: Hackbench,
    /// Count hackbench's preemptions and migrations with tracefs (switch-outs of its tasks are
    /// recorded one by one; off leaves only rusage's counts and the time).
    pub trace: bool,
    /// Per-CPU trace ring in KiB; the run fails rather than count from a ring that overflowed.
    pub trace_buffer_kb: u32,
}

/// Seed S2 as a scenario.
#[derive(Debug, Clone)]
pub struct EevdfParity {
    params: EevdfParityParams,
}

/// The kernel both columns boot; they differ in one scheduler feature.
pub const KERNEL: &str = "v6.12";
/// The scheduler feature as the kernel has it.
pub const WITH_PARITY: &str = "RUN_TO_PARITY";
/// The feature turned off.
pub const WITHOUT_PARITY: &str = "NO_RUN_TO_PARITY";

/// The last kernel before EEVDF (CFS), Debian bookworm's 6.1.
pub const PRE_EEVDF: &str = "v6.1";

/// The same kernel with `RUN_TO_PARITY` and with `NO_RUN_TO_PARITY`, both written after boot
/// and read back, so the base does not depend on the kernel's default.
pub fn parity_variants() -> [Variant; 2] {
    [
        Variant::kernel(KERNEL)
            .with_sched_feature(WITH_PARITY)
            .named(WITH_PARITY),
        Variant::kernel(KERNEL)
            .with_sched_feature(WITHOUT_PARITY)
            .named(WITHOUT_PARITY),
    ]
}

/// The image with hackbench (rt-tests).
const IMAGE: &str = "sched";
/// hackbench's task names.
const TASK: &str = "hackbench";

impl EevdfParity {
    /// hackbench's threaded socket mode as in the seed, scaled to the CI topology's 8 vCPUs
    /// under TCG.
    pub fn seed() -> EevdfParity {
        EevdfParity {
            params: EevdfParityParams {
                hackbench: Hackbench {
                    groups: 4,
                    fds: 10,
                    loops: 1500,
                    ..Hackbench::seed()
                },
                trace: true,
                trace_buffer_kb: 16384,
            },
        }
    }

    /// With this hackbench run.
    pub fn hackbench(mut self, hackbench: Hackbench) -> Self {
        self.params.hackbench = hackbench;
        self
    }
}

impl Scenario for EevdfParity {
    type Params = EevdfParityParams;

    fn name(&self) -> &str {
        "eevdf-parity"
    }

    fn description(&self) -> &str {
        "S2: hackbench's context switches, preemptions and time with EEVDF's RUN_TO_PARITY on and off"
    }

    fn params(&self) -> &EevdfParityParams {
        &self.params
    }

    /// The two feature settings on one kernel. The seed's third column, the scheduler before
    /// EEVDF, needs a cold build of its own (`lab prepare` builds the default comparisons'
    /// kernels, and this one would add ten minutes on two cores): `lab compare eevdf-parity
    /// --variant RUN_TO_PARITY=v6.12@feature=RUN_TO_PARITY --variant ... --variant v6.1` adds it
    /// ([`PRE_EEVDF`]).
    fn default_variants(&self) -> Vec<Variant> {
        parity_variants().to_vec()
    }

    fn metrics(&self) -> Vec<MetricDef> {
        let per_k = "per 1000 messages";
        let count = |name, unit, direction, magnitude| {
            MetricDef::new(name, unit, direction, magnitude).non_negative()
        };
        vec![
            // The decision: how often a wakee preempts a running hackbench thread. Half the
            // base's rate is the smallest change that matters: RUN_TO_PARITY exists to let a
            // task finish its slice, and the seed's NO_RUN_TO_PARITY run doubled the switches.
            count(
                "involuntary_switches",
                per_k,
                Direction::LowerIsBetter,
                Magnitude::relative(0.5),
            )
            .primary(),
            count("seconds", "s", Direction::LowerIsBetter, 0.0.into()),
            count("voluntary_switches", per_k, Direction::Neutral, 0.5.into()),
            // From the trace, which `trace = false` switches off.
            count("preemptions", per_k, Direction::LowerIsBetter, 0.5.into()).optional(),
            count("migrations", per_k, Direction::LowerIsBetter, 0.5.into()).optional(),
            count("cpu_seconds", "s", Direction::LowerIsBetter, 0.0.into()),
        ]
    }

    fn plan(&self, params: &EevdfParityParams, _topology: &Topology) -> Result<BootPlan> {
        params.hackbench.check()?;
        if params.trace && params.trace_buffer_kb < 64 {
            bail!("trace_buffer_kb is {}, at least 64", params.trace_buffer_kb);
        }
        Ok(BootPlan {
            image: Some(IMAGE.to_string()),
            ..BootPlan::default()
        })
    }

    /// Where hackbench's tasks left a CPU: the traced switch-outs per CPU (none untraced).
    fn picture(&self) -> Option<Picture> {
        Some(Picture {
            task: "hackbench's tasks".into(),
            quantity: "switch-outs (sched_switch)".into(),
            per_cpu: "/switches/counts/per_cpu/sched_switch".into(),
            marks: Vec::new(),
        })
    }

    async fn measure(&self, params: &EevdfParityParams, boot: &Boot<'_>) -> Result<Measurement> {
        let vm = boot.vm;
        let hackbench = &params.hackbench;
        let count = params.trace.then(|| {
            EventCount::new(params.trace_buffer_kb)
                // Switch-outs of hackbench's tasks: the ones in state R were preempted.
                .event("sched/sched_switch", &format!("prev_comm ~ \"{TASK}*\""))
                .event("sched/sched_migrate_task", &format!("comm ~ \"{TASK}*\""))
        });
        if let Some(count) = &count {
            count.start(vm).await?;
        }
        // Generous: TCG on a loaded host runs several times slower than measured quiet.
        let limit = Duration::from_secs(600);
        let run = vm
            .exec(&GuestCommand::new(hackbench.argv()).timeout(limit))
            .await?;
        run.require_success("hackbench", &vm.name)?;
        let result = HackbenchResult::parse(&run.stdout_str())
            .with_context(|| format!("hackbench in {}", vm.name))?;
        let usage = run
            .usage
            .with_context(|| format!("the agent of {} reported no resource use", vm.name))?;
        let traced = match &count {
            Some(count) => {
                let (raw, events) = count.stop(vm).await?;
                let file = boot.keep("sched.trace", &raw).await?;
                Some((file, Switches::from_events(&events)))
            }
            None => None,
        };
        let metrics = metrics(hackbench, &result, &usage, traced.as_ref().map(|(_, s)| s));
        Ok(Measurement {
            metrics,
            details: json!({
                "hackbench": result,
                "usage": usage,
                "trace": traced.as_ref().map(|(f, _)| f),
                "switches": traced.as_ref().map(|(_, s)| s),
            }),
        })
    }
}

/// What the trace says of hackbench's tasks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Switches {
    /// Switch-outs with the task still runnable (`prev_state=R` or `R+`): preempted.
    pub preempted: u64,
    /// Switch-outs because the task blocked.
    pub blocked: u64,
    pub migrations: u64,
    /// Every counted event per CPU.
    pub counts: EventCounts,
}

impl Switches {
    pub(crate) fn from_events(events: &[TraceEvent]) -> Switches {
        let mut s = Switches {
            counts: EventCounts::from_events(events),
            ..Switches::default()
        };
        for e in events {
            match e.name.as_str() {
                "sched_switch" => {
                    let still_runnable = e
                        .fields
                        .get("prev_state")
                        .is_some_and(|state| state.starts_with('R'));
                    if still_runnable {
                        s.preempted += 1;
                    } else {
                        s.blocked += 1;
                    }
                }
                "sched_migrate_task" => s.migrations += 1,
                _ => {}
            }
        }
        s
    }
}

/// The per-boot metrics of S2.
pub(crate) fn metrics(
    hackbench: &Hackbench,
    result: &HackbenchResult,
    usage: &ResourceUse,
    traced: Option<&Switches>,
) -> BTreeMap<String, f64> {
    let per_k = |n: u64| 1000.0 * n as f64 / hackbench.messages().max(1) as f64;
    let mut m = BTreeMap::new();
    m.insert("seconds".into(), result.seconds);
    m.insert(
        "involuntary_switches".into(),
        per_k(usage.involuntary_switches),
    );
    m.insert("voluntary_switches".into(), per_k(usage.voluntary_switches));
    m.insert(
        "cpu_seconds".into(),
        (usage.user_us + usage.system_us) as f64 / 1e6,
    );
    if let Some(s) = traced {
        m.insert("preemptions".into(), per_k(s.preempted));
        m.insert("migrations".into(), per_k(s.migrations));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::parse_trace;

    const TRACE: &str = "\
 hackbench-90   [001] d..2.    10.000100: sched_switch: prev_comm=hackbench prev_pid=90 prev_prio=120 prev_state=R+ ==> next_comm=hackbench next_pid=91 next_prio=120
 hackbench-91   [001] d..2.    10.000200: sched_switch: prev_comm=hackbench prev_pid=91 prev_prio=120 prev_state=S ==> next_comm=hackbench next_pid=90 next_prio=120
 hackbench-90   [001] d..2.    10.000300: sched_switch: prev_comm=hackbench prev_pid=90 prev_prio=120 prev_state=R ==> next_comm=swapper/1 next_pid=0 next_prio=120
 <idle>-0       [002] d.s2.    10.000450: sched_migrate_task: comm=hackbench pid=91 prio=120 orig_cpu=1 dest_cpu=2
";

    #[test]
    fn runnable_switch_outs_are_preemptions() {
        let s = Switches::from_events(&parse_trace(TRACE));
        assert_eq!((s.preempted, s.blocked, s.migrations), (2, 1, 1));
        assert_eq!(s.counts.total("sched_switch"), 3);
        assert_eq!(
            s.counts.per_cpu["sched_migrate_task"],
            BTreeMap::from([(2, 1)])
        );
    }

    #[test]
    fn metrics_are_per_thousand_messages() {
        let h = Hackbench {
            groups: 1,
            fds: 10,
            loops: 10,
            ..Hackbench::seed()
        };
        let usage = ResourceUse {
            user_us: 1_500_000,
            system_us: 500_000,
            involuntary_switches: 50,
            voluntary_switches: 2000,
            ..ResourceUse::default()
        };
        let switches = Switches {
            preempted: 30,
            migrations: 5,
            ..Switches::default()
        };
        let m = metrics(
            &h,
            &HackbenchResult { seconds: 2.5 },
            &usage,
            Some(&switches),
        );
        // 1 group x 10 senders x 10 receivers x 10 loops = 1000 messages.
        assert_eq!(m["involuntary_switches"], 50.0);
        assert_eq!(m["voluntary_switches"], 2000.0);
        assert_eq!(m["preemptions"], 30.0);
        assert_eq!(m["migrations"], 5.0);
        assert_eq!(m["cpu_seconds"], 2.0);
        assert_eq!(m["seconds"], 2.5);
        let untraced = metrics(&h, &HackbenchResult { seconds: 2.5 }, &usage, None);
        assert!(!untraced.contains_key("preemptions"));
    }

    #[test]
    fn the_default_comparison_flips_one_feature_on_one_kernel() {
        let s = EevdfParity::seed();
        let v = s.default_variants();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, WITH_PARITY);
        assert_eq!(v[1].name, WITHOUT_PARITY);
        assert_eq!(v[0].kernel, v[1].kernel);
        let mut bad = s.params().clone();
        bad.hackbench.groups = 0;
        let topology = Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap();
        let err = s.plan(&bad, &topology).unwrap_err().to_string();
        assert!(err.contains("hackbench.groups"), "{err}");
    }
}
