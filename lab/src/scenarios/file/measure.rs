//! One boot of a scenario file: set-up, the watch, the workload, the metrics.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::cpus::Names;
use super::metrics::{self, Observed, Source};
use super::{Expr, ScenarioFile, Workload};
use crate::experiment::{Boot, Measurement};
use crate::guest::GuestCommand;
use crate::observe::{
    parse_trace_off_thread, task_wakeups, Attribution, Interrupts, TaskPlacement, TaskTrace,
};
use crate::topology::Topology;
use crate::workload::DmatestResult;

/// The CPUs the workload and the watch name, found on a topology.
#[derive(Debug, Default)]
pub(super) struct WorkloadCpus {
    start: Option<u32>,
    control: Option<u32>,
    pin: Option<Vec<u32>>,
    started_on: Option<u32>,
}

impl super::metrics::FileMetric {
    /// The CPU set expressions it reads.
    pub(super) fn sets(&self) -> Vec<&str> {
        match &self.source {
            Source::SwitchInsOn(s)
            | Source::RuntimeOn(s)
            | Source::WakeupsOn(s)
            | Source::IrqsOn(s) => vec![s],
            _ => vec![],
        }
    }
}

impl ScenarioFile {
    pub(super) fn measure_cpus(&self, names: &Names, topology: &Topology) -> Result<WorkloadCpus> {
        let cpu = |e: &Option<Expr>, field: &str| -> Result<Option<u32>> {
            match e {
                Some(e) => self.cpu_of(e, field, names, topology),
                None => Ok(None),
            }
        };
        let mut out = WorkloadCpus::default();
        match &self.workload {
            Workload::Dmatest {
                start_cpu,
                control_cpu,
            } => {
                out.start = cpu(start_cpu, "dmatest.start_cpu")?;
                out.control = cpu(control_cpu, "dmatest.control_cpu")?;
            }
            Workload::Command {
                pin, control_cpu, ..
            } => {
                out.control = cpu(control_cpu, "command.control_cpu")?;
                if let Some(pin) = pin {
                    out.pin = Some(self.set_of(pin, "command.pin", names, topology)?);
                }
            }
        }
        if let Some(w) = &self.watch {
            out.started_on = cpu(&w.started_on, "watch.started_on")?;
        }
        Ok(out)
    }

    /// The parameters and named CPUs as the workload's shell variables (a CPU that is none is
    /// empty).
    pub(super) fn shell_variables(&self, names: &Names) -> Vec<(String, String)> {
        let params = names
            .params
            .iter()
            .filter(|(_, v)| !v.is_object())
            .map(|(k, _)| (k.clone(), super::cpus_word(k, names.params)));
        let cpus = names
            .cpus
            .iter()
            .map(|(k, c)| (k.clone(), c.map(|c| c.to_string()).unwrap_or_default()));
        params
            .chain(cpus)
            .filter(|(k, _)| is_shell_name(k))
            .collect()
    }
}

fn is_shell_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `command` with every variable set.
fn with_variables(command: GuestCommand, vars: &[(String, String)]) -> GuestCommand {
    vars.iter()
        .fold(command, |c, (k, v)| c.env(k.clone(), v.clone()))
}

/// Runs one boot of `file` with `params`.
pub(super) async fn measure(
    file: &ScenarioFile,
    params: &Value,
    boot: &Boot<'_>,
) -> Result<Measurement> {
    let (vm, topology) = (boot.vm, boot.topology);
    let found = file.named_cpus(params, topology)?;
    let names = Names {
        params: params.as_object().context("parameters")?,
        cpus: &found,
    };
    let cpus = file.measure_cpus(&names, topology)?;
    let vars = file.shell_variables(&names);
    for (i, step) in file.setup.iter().enumerate() {
        let out = vm
            .exec(
                &with_variables(GuestCommand::shell(step.clone()), &vars)
                    .timeout(Duration::from_secs(120)),
            )
            .await?;
        out.require_success(
            &format!("guest.setup[{i}] of {}", file.path.display()),
            &vm.name,
        )?;
    }
    let dmatest = match &file.workload {
        Workload::Dmatest { .. } => {
            let d = file.dmatest(params)?;
            vm.sh(&format!("modprobe dmatest {}", d.module_args()))
                .await
                .context("loading dmatest")?;
            Some(d)
        }
        Workload::Command { .. } => None,
    };
    let irq = match file.watch.as_ref().and_then(|w| w.irq) {
        Some((device, vector)) => Some(
            *boot
                .devices
                .get(device)
                .and_then(|d| d.irqs.get(vector))
                .with_context(|| {
                    format!(
                        "{}: watch.irq: device {device} has no vector {vector}",
                        file.path.display()
                    )
                })?,
        ),
        None => None,
    };
    let trace = file.watch.as_ref().map(|w| {
        let mut t = TaskTrace::of(&w.task);
        if let Some(irq) = irq {
            t = t.with_irq_number(irq);
        }
        if let Some(kb) = w.buffer_kb {
            t = t.buffer_kb(kb);
        }
        t
    });
    if let Some(t) = &trace {
        t.start(vm).await?;
    }
    if let Some(settle) = file.settle {
        vm.wait_for_uptime(settle).await;
    }
    let before = Interrupts::read(vm).await?;
    let (output, result) = run_workload(file, &cpus, dmatest.as_ref(), &vars, vm).await?;
    let after = Interrupts::read(vm).await?;
    let irq_delta = irq
        .map(|i| after.delta(&before, &i.to_string()))
        .unwrap_or_default();
    boot.keep("workload.out", &output).await?;
    let mut details = json!({
        "cpus": found,
        "irq": irq,
        "irq_delta": irq_delta,
        "workload": result,
    });
    let (placement, attribution) = match (&trace, &file.watch) {
        (Some(t), Some(w)) => {
            let raw = t.stop(vm).await?;
            let trace_file = boot.keep("sched.trace", &raw).await?;
            let (_, events) = parse_trace_off_thread(raw).await?;
            let placement = TaskPlacement::from_events(&w.task, &events, topology);
            let attribution = Attribution::of(&task_wakeups(&w.task, &events), topology);
            check_watched(&placement, &w.task, cpus.started_on, &vm.name, &trace_file)?;
            details["trace"] = json!(trace_file);
            details["placement"] = serde_json::to_value(&placement)?;
            details["attribution"] = serde_json::to_value(&attribution)?;
            (Some(placement), Some(attribution))
        }
        _ => (None, None),
    };
    let seen = Observed {
        placement: placement.as_ref(),
        attribution: attribution.as_ref(),
        irq_delta: &irq_delta,
        dmatest: result.as_ref(),
        output: &output,
    };
    let path = file.path.display().to_string();
    let metrics = metrics::values(&file.metrics, &seen, &names, topology, &path)?;
    Ok(Measurement { metrics, details })
}

/// Runs the workload; its standard output, and dmatest's parsed result.
async fn run_workload(
    file: &ScenarioFile,
    cpus: &WorkloadCpus,
    dmatest: Option<&crate::workload::Dmatest>,
    vars: &[(String, String)],
    vm: &crate::vm::Vm,
) -> Result<(String, Option<DmatestResult>)> {
    match (&file.workload, dmatest) {
        (Workload::Dmatest { .. }, Some(d)) => {
            let limit =
                Duration::from_secs(120 + u64::from(d.iterations) * u64::from(d.timeout_ms) / 1000);
            let run = vm
                .exec(&GuestCommand::shell(d.script(cpus.start, cpus.control)).timeout(limit))
                .await?;
            run.require_success("dmatest", &vm.name)?;
            let output = run.stdout_str();
            let result =
                DmatestResult::parse(&output).with_context(|| format!("dmatest in {}", vm.name))?;
            result
                .check_complete(d.iterations)
                .with_context(|| format!("dmatest in {}", vm.name))?;
            Ok((output, Some(result)))
        }
        (Workload::Command { run, timeout, .. }, _) => {
            let mut script = String::new();
            if let Some(c) = cpus.control {
                script.push_str(&format!("taskset -p -c {c} $$ > /dev/null\n"));
            }
            match &cpus.pin {
                Some(pin) => {
                    let list: Vec<String> = pin.iter().map(u32::to_string).collect();
                    script.push_str(&format!(
                        "taskset -c {} sh -c {}\n",
                        list.join(","),
                        shell_quote(run)
                    ));
                }
                None => script.push_str(run),
            }
            let out = vm
                .exec(&with_variables(GuestCommand::shell(script), vars).timeout(*timeout))
                .await?;
            out.require_success(
                &format!("the [command] of {}", file.path.display()),
                &vm.name,
            )?;
            Ok((out.stdout_str(), None))
        }
        (Workload::Dmatest { .. }, None) => bail!("dmatest's parameters are missing"),
    }
}

/// The lab checks its own set-up: a task that never ran, or did not start where the file says,
/// makes every share meaningless.
fn check_watched(
    placement: &TaskPlacement,
    task: &str,
    started_on: Option<u32>,
    vm: &str,
    trace: &std::path::Path,
) -> Result<()> {
    if placement.total_switch_ins() == 0 {
        return Err(crate::sample::reject(format!(
            "the trace of {vm} has no switch-in of {task}* (trace kept at {})",
            trace.display()
        )));
    }
    if let Some(cpu) = started_on {
        if placement.started_on != Some(cpu) {
            bail!(
                "{task}* started on CPU {:?} in {vm}, not on watch.started_on's CPU {cpu} (trace kept at {})",
                placement.started_on,
                trace.display()
            );
        }
    }
    Ok(())
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
