//! One boot of a scenario file: set-up, the trace (a watched task, counted events or who woke
//! whom), the workload, the metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::cpus::Names;
use super::json_output;
use super::metrics::{self, Observed, Source};
use super::vectors::{self, Vectors, Window};
use super::{Expr, ScenarioFile, Then, Workload};
use crate::devices::nic;
use crate::experiment::{Boot, Measurement};
use crate::guest::GuestCommand;
use crate::observe::{
    allowed_cpus, parse_trace_off_thread, per_cpu_map, task_wakeups, Attribution, CrossLlcWakeups,
    EventCount, Interrupts, TaskPlacement, TaskTrace, VmStat, WakeupTrace, Wakeups,
};
use crate::topology::Topology;
use crate::vm::Vm;
use crate::workload::{choreography, DmatestResult};

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
            | Source::IrqsOn(s)
            | Source::VectorsOn { set: s, .. } => vec![s],
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
            .map(|(k, _)| (k.clone(), super::cpus::word(k, names.params)));
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

/// What one boot observed beside the workload's output.
#[derive(Default)]
struct Seen {
    placement: Option<TaskPlacement>,
    attribution: Option<Attribution>,
    crossings: Option<CrossLlcWakeups>,
    counts: BTreeMap<String, u64>,
    wakeups: Option<Wakeups>,
    /// pid -> allowed CPUs of the tasks woken in hard-interrupt context.
    allowed: BTreeMap<u32, Vec<u32>>,
}

/// The guest's one trace: the watched task, or the `[[count]]` events, or `[wakeups]`, or none.
enum Tracing {
    Watch(TaskTrace),
    Counts(EventCount),
    Wakeups(WakeupTrace),
    None,
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
    let mut vars = file.shell_variables(&names);
    vars.extend(vector_variables(boot));
    let interfaces = bring_up_nics(file, &names, boot).await?;
    set_up(file, vm, &vars).await?;
    if let Some((stack, device)) = &file.storage {
        let built = vm
            .sh(&stack.setup_script(device))
            .await
            .with_context(|| format!("building [storage] of {}", file.path.display()))?;
        vars.push(("storage".into(), stack_target(&built)?));
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
    let irq = watched_irq(file, boot)?;
    let warm_up_pokes = match irq {
        Some(irq) => warm_up(file, irq, vm).await?,
        None => None,
    };
    let tracing = file.tracing(irq);
    match &tracing {
        Tracing::Watch(t) => t.start(vm).await?,
        Tracing::Counts(c) => c.start(vm).await?,
        Tracing::Wakeups(w) => w.start(vm).await?,
        Tracing::None => {}
    }
    if let Some(settle) = file.settle {
        vm.wait_for_uptime(settle).await;
    }
    let (counters, from) = file.vmstat_wanted(names.params)?;
    let irqs_before = Interrupts::read(vm).await?;
    let vmstat_before = VmStat::read(vm).await?;
    let (run, snapshots, sent) = tokio::join!(
        run_workload(file, &cpus, dmatest.as_ref(), &vars, vm),
        snapshots_at(vm, &from),
        send_traffic(file, cpus.control, vm)
    );
    let run = run?;
    let sent = sent?;
    let vmstat_after = VmStat::read(vm).await?;
    let spreads = vectors::wanted(&file.metrics, true, Window::Workload);
    let irqs_after = match irq.is_some() || !spreads.is_empty() {
        true => Some(Interrupts::read(vm).await?),
        false => None,
    };
    let irq_delta = match (irq, &irqs_after) {
        (Some(i), Some(after)) => after.delta(&irqs_before, &i.to_string()),
        _ => Vec::new(),
    };
    let mut vector_counts = match &irqs_after {
        Some(after) => vectors::counted(&spreads, boot, &irqs_before, after, &file.path)?,
        None => BTreeMap::new(),
    };
    let targeted = vectors::wanted(&file.metrics, false, Window::Workload);
    let mut vector_targets = vectors::targets(&targeted, boot, &file.path).await?;
    boot.keep("workload.out", &run.output).await?;
    if let Some(then) = &file.then {
        let (counts, targets) = run_then(file, then, &vars, boot).await?;
        vector_counts.extend(counts);
        vector_targets.extend(targets);
    }
    let vmstat = vmstat_after.delta(&vmstat_before, &counters)?;
    let mut vmstat_from = Vec::new();
    for (at, snapshot) in from.iter().zip(snapshots?) {
        vmstat_from.push((*at, vmstat_after.delta(&snapshot, &counters)?));
    }
    let mut details = json!({
        "cpus": found,
        "irq": irq,
        "irq_delta": irq_delta,
        "vector_interrupts": vector_counts
            .iter()
            .map(|(v, per_cpu)| (v.key(), per_cpu_map(per_cpu)))
            .collect::<BTreeMap<_, _>>(),
        "vector_targets": vector_targets
            .iter()
            .map(|(v, effective)| (v.key(), effective))
            .collect::<BTreeMap<_, _>>(),
        "warm_up_pokes": warm_up_pokes,
        "workload": run.dmatest,
        "usage": run.usage,
        "vmstat_delta": vmstat,
        "interfaces": interfaces,
        "traffic": sent.map(|s| json!({
            "frames": s.frames,
            "dropped": s.dropped,
            "elapsed_s": s.elapsed.as_secs_f64(),
            "rate": s.rate(),
        })),
    });
    let seen = stop_tracing(file, tracing, &cpus, boot, &mut details).await?;
    let reads_json = file
        .metrics
        .iter()
        .any(|m| matches!(m.source, Source::Json(_)));
    let output_json = reads_json
        .then(|| json_output::document(&run.output))
        .flatten();
    let observed = Observed {
        placement: seen.placement.as_ref(),
        attribution: seen.attribution.as_ref(),
        crossings: seen.crossings.as_ref(),
        usage: run.usage.as_ref(),
        vmstat: &vmstat,
        vmstat_from: &vmstat_from,
        counts: &seen.counts,
        irq_delta: &irq_delta,
        vector_counts: &vector_counts,
        vector_targets: &vector_targets,
        dmatest: run.dmatest.as_ref(),
        output: &run.output,
        output_json: output_json.as_ref(),
        wakeups: seen.wakeups.as_ref(),
        allowed: &seen.allowed,
    };
    let path = file.path.display().to_string();
    let metrics = metrics::values(&file.metrics, &observed, &names, topology, &path)?;
    Ok(Measurement { metrics, details })
}

/// Every bound device's vectors as shell variables: `irq_D_V`, the Linux IRQ number of device
/// D's vector V (`/proc/irq/$irq_0_0` is an NVMe's admin vector).
fn vector_variables(boot: &Boot<'_>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (d, device) in boot.devices.iter().enumerate() {
        for (v, vector) in device.vectors.iter().enumerate() {
            out.push((format!("irq_{d}_{v}"), vector.irq.to_string()));
        }
    }
    out
}

/// Counts and targets of one window, by the vectors read.
type WindowReads = (
    BTreeMap<Vectors, Vec<u64>>,
    BTreeMap<Vectors, BTreeMap<u32, Vec<u32>>>,
);

/// `[then]`: its script, run after the workload with the same variables, between two reads of
/// `/proc/interrupts`; the counts and targets its `window = "then"` metrics read. Its output is
/// kept as `then.out`; a script that fails fails the boot.
async fn run_then(
    file: &ScenarioFile,
    then: &Then,
    vars: &[(String, String)],
    boot: &Boot<'_>,
) -> Result<WindowReads> {
    let vm = boot.vm;
    let before = Interrupts::read(vm).await?;
    let command = with_variables(GuestCommand::shell(then.run.clone()), vars);
    let out = vm.exec(&command.timeout(then.timeout)).await?;
    let after = Interrupts::read(vm).await?;
    boot.keep("then.out", &out.stdout).await?;
    out.require_success(&format!("then.run of {}", file.path.display()), &vm.name)?;
    let counted = vectors::wanted(&file.metrics, true, Window::Then);
    let counts = vectors::counted(&counted, boot, &before, &after, &file.path)?;
    let targeted = vectors::wanted(&file.metrics, false, Window::Then);
    let targets = vectors::targets(&targeted, boot, &file.path).await?;
    Ok((counts, targets))
}

/// Brings every `nic` device's interface up with its address; their names, by device index.
async fn bring_up_nics(
    file: &ScenarioFile,
    names: &Names<'_>,
    boot: &Boot<'_>,
) -> Result<BTreeMap<usize, String>> {
    let mut out = BTreeMap::new();
    for (index, d) in file.devices.iter().enumerate() {
        if super::cpus::word(&d.kind.text, names.params) != "nic" {
            continue;
        }
        let bound = boot
            .devices
            .get(index)
            .context("a planned device is not bound")?;
        let ifc = boot
            .vm
            .sh(&nic::guest_setup(&bound.pci_address, index))
            .await
            .with_context(|| format!("bringing up device {index}'s interface"))?;
        out.insert(index, ifc.trim().to_string());
    }
    Ok(out)
}

/// The lab's end of `[traffic]`'s NIC's wire.
fn wire(vm: &Vm, device: usize) -> Result<&nic::Traffic> {
    vm.devices()
        .get(device)
        .and_then(|d| d.host_part::<nic::Traffic>())
        .with_context(|| format!("traffic.device {device}: not a NIC with a host side"))
}

/// `[traffic]`'s flow, once its `after` file exists in the guest; `None` without one.
async fn send_traffic(
    file: &ScenarioFile,
    control: Option<u32>,
    vm: &Vm,
) -> Result<Option<nic::Sent>> {
    let Some(t) = &file.traffic else {
        return Ok(None);
    };
    let host = wire(vm, t.device)?;
    if let Some(after) = &t.after {
        // On the control CPU where the file names one: the polling stays off the watched CPUs.
        vm.sh(&choreography::wait_for_file(after, control))
            .await
            .with_context(|| format!("waiting for {after} before the traffic"))?;
    }
    Ok(Some(host.send_udp(&t.flow).await?))
}

/// `[traffic] warm_up`: single datagrams into the NIC, to a port nothing listens on, until the
/// watched interrupt has landed on its pinned CPU (x86 moves a vector at its next interrupt).
/// The pokes it took, kept in the boot's details.
async fn warm_up(file: &ScenarioFile, irq: u32, vm: &Vm) -> Result<Option<u32>> {
    let Some(t) = file.traffic.as_ref().filter(|t| t.warm_up) else {
        return Ok(None);
    };
    let host = wire(vm, t.device)?;
    let poke = nic::UdpFlow {
        port: if t.flow.port == 9 { 10 } else { 9 },
        payload: 1,
        rate: 100.0,
        count: 1,
    };
    let path = file.path.display();
    let pokes = crate::observe::warm_up_irq(vm, irq, WARM_UP_TRIES, || async {
        host.send_udp(&poke).await.map(drop)
    })
    .await
    .with_context(|| format!("{path}: traffic.warm_up"))?;
    Ok(Some(pokes))
}

/// Pokes before a warm-up gives up: 2 do it on x86 (the first lands on the old CPU).
const WARM_UP_TRIES: u32 = 10;

/// Runs `[guest] setup`'s commands in order; the first that fails fails the boot.
async fn set_up(file: &ScenarioFile, vm: &Vm, vars: &[(String, String)]) -> Result<()> {
    for (i, step) in file.setup.iter().enumerate() {
        let command = with_variables(GuestCommand::shell(step.clone()), vars);
        let out = vm.exec(&command.timeout(Duration::from_secs(120))).await?;
        out.require_success(
            &format!("guest.setup[{i}] of {}", file.path.display()),
            &vm.name,
        )?;
    }
    Ok(())
}

/// What a built storage stack gives the workload: its mount point, or the device itself.
fn stack_target(setup_output: &str) -> Result<String> {
    Ok(
        match crate::storage::StorageStack::parse_target(setup_output)? {
            crate::workload::FioTarget::Directory(path)
            | crate::workload::FioTarget::Device(path) => path,
        },
    )
}

/// The interrupt number `[watch] irq` names on this boot's bound devices.
fn watched_irq(file: &ScenarioFile, boot: &Boot<'_>) -> Result<Option<u32>> {
    let Some((device, vector)) = file.watch.as_ref().and_then(|w| w.irq) else {
        return Ok(None);
    };
    let irq = boot
        .devices
        .get(device)
        .and_then(|d| d.irqs.get(vector))
        .with_context(|| {
            format!(
                "{}: watch.irq: device {device} has no vector {vector}",
                file.path.display()
            )
        })?;
    Ok(Some(*irq))
}

/// `/proc/vmstat` read `at` seconds after the start, each.
async fn snapshots_at(vm: &Vm, at: &[f64]) -> Result<Vec<VmStat>> {
    let start = tokio::time::Instant::now();
    let mut out = Vec::new();
    for s in at {
        tokio::time::sleep_until(start + Duration::from_secs_f64(*s)).await;
        out.push(VmStat::read(vm).await?);
    }
    Ok(out)
}

/// Stops the guest's trace and folds it: the watched task's placement (its details kept), the
/// counted events, or who woke whom.
async fn stop_tracing(
    file: &ScenarioFile,
    tracing: Tracing,
    cpus: &WorkloadCpus,
    boot: &Boot<'_>,
    details: &mut Value,
) -> Result<Seen> {
    let (vm, topology) = (boot.vm, boot.topology);
    let mut seen = Seen::default();
    match (tracing, &file.watch) {
        (Tracing::Watch(t), Some(w)) => {
            let raw = t.stop(vm).await?;
            let trace_file = boot.keep("sched.trace", &raw).await?;
            let (_, events) = parse_trace_off_thread(raw).await?;
            let placement = TaskPlacement::from_events(&w.task, &events, topology);
            check_watched(&placement, &w.task, cpus.started_on, &vm.name, &trace_file)?;
            let wakeups = task_wakeups(&w.task, &events);
            let attribution = Attribution::of(&wakeups, topology);
            let crossings = CrossLlcWakeups::fold(&wakeups, topology);
            details["trace"] = json!(trace_file);
            details["placement"] = serde_json::to_value(&placement)?;
            details["attribution"] = serde_json::to_value(&attribution)?;
            details["cross_llc_wakeups"] = serde_json::to_value(&crossings)?;
            seen.placement = Some(placement);
            seen.attribution = Some(attribution);
            seen.crossings = Some(crossings);
        }
        (Tracing::Counts(c), _) => {
            let (raw, events) = c.stop(vm).await?;
            details["trace"] = json!(boot.keep("events.trace", &raw).await?);
            let mut per_cpu: BTreeMap<&str, BTreeMap<u32, u64>> = BTreeMap::new();
            for count in &file.counts {
                let event = count.event.rsplit('/').next().unwrap_or_default();
                let cpus = per_cpu.entry(&count.name).or_default();
                for e in events.iter().filter(|e| e.name == event) {
                    *cpus.entry(e.cpu).or_default() += 1;
                }
                seen.counts.insert(count.name.clone(), cpus.values().sum());
            }
            details["counts"] = json!(seen.counts);
            // The page's picture: the first count's events per CPU (`ScenarioFile::picture`).
            details["counts_per_cpu"] = json!(per_cpu);
        }
        (Tracing::Wakeups(t), _) => {
            let (raw, wakeups) = t.stop(vm).await?;
            details["trace"] = json!(boot.keep("wakeups.trace", &raw).await?);
            let wants_allowed = file
                .metrics
                .iter()
                .any(|m| matches!(&m.source, Source::Wakeups(w) if w.needs_allowed_cpus()));
            if wants_allowed {
                let pids: BTreeSet<u32> = wakeups.hard_irq_wakees.keys().copied().collect();
                seen.allowed = allowed_cpus(vm, &pids).await?;
                details["hard_irq_wakee_cpus"] = json!(seen.allowed);
            }
            details["wakeups"] = serde_json::to_value(&wakeups)?;
            seen.wakeups = Some(wakeups);
        }
        _ => {}
    }
    Ok(seen)
}

impl ScenarioFile {
    /// The trace this file's boots record.
    fn tracing(&self, irq: Option<u32>) -> Tracing {
        let kb = self.trace_buffer_kb;
        if let Some(w) = &self.watch {
            let mut t = TaskTrace::of(&w.task);
            if let Some(irq) = irq {
                t = t.with_irq_number(irq);
            }
            if let Some(kb) = kb {
                t = t.buffer_kb(kb);
            }
            return Tracing::Watch(t);
        }
        if !self.wakeup_tasks.is_empty() {
            let tasks: Vec<&str> = self.wakeup_tasks.iter().map(String::as_str).collect();
            let trace = WakeupTrace::of(&tasks);
            return Tracing::Wakeups(match kb {
                Some(kb) => trace.buffer_kb(kb),
                None => trace,
            });
        }
        if self.counts.is_empty() {
            return Tracing::None;
        }
        let count = self.counts.iter().fold(
            EventCount::new(kb.unwrap_or(DEFAULT_COUNT_BUFFER_KB)),
            |c, k| c.event(&k.event, &k.filter),
        );
        Tracing::Counts(count)
    }

    /// The `/proc/vmstat` counters the metrics read, and the times into the workload their
    /// `from_s` windows start with the run's `params`, sorted.
    pub(super) fn vmstat_wanted(
        &self,
        params: &serde_json::Map<String, Value>,
    ) -> Result<(Vec<&str>, Vec<f64>)> {
        let mut counters = Vec::new();
        let mut from: Vec<f64> = Vec::new();
        for m in &self.metrics {
            if let Source::Vmstat { counter, from_s } = &m.source {
                if !counters.contains(&counter.as_str()) {
                    counters.push(counter.as_str());
                }
                if let Some(amount) = from_s {
                    let s = amount.value(params).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: line {}: metric {:?}: from_s: {e}",
                            self.path.display(),
                            m.line,
                            m.def.name
                        )
                    })?;
                    if !(s.is_finite() && s > 0.0) {
                        bail!(
                            "{}: line {}: metric {:?}: from_s is {s}, not a time above 0",
                            self.path.display(),
                            m.line,
                            m.def.name
                        );
                    }
                    if !from.contains(&s) {
                        from.push(s);
                    }
                }
            }
        }
        from.sort_by(f64::total_cmp);
        Ok((counters, from))
    }
}

/// The ring per CPU of a `[[count]]` trace unless the file says: S2's 16 MiB, which held
/// hackbench's switch-outs at the seed's size.
const DEFAULT_COUNT_BUFFER_KB: u32 = 16384;

/// What the workload gave.
struct Run {
    output: String,
    dmatest: Option<DmatestResult>,
    usage: Option<crate::guest::ResourceUse>,
}

/// Runs the workload; its standard output, dmatest's parsed result, its resource use.
async fn run_workload(
    file: &ScenarioFile,
    cpus: &WorkloadCpus,
    dmatest: Option<&crate::workload::Dmatest>,
    vars: &[(String, String)],
    vm: &Vm,
) -> Result<Run> {
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
            Ok(Run {
                output,
                dmatest: Some(result),
                usage: run.usage,
            })
        }
        (Workload::Command { run, timeout, .. }, _) => {
            let script = command_script(run, cpus);
            let out = vm
                .exec(&with_variables(GuestCommand::shell(script), vars).timeout(*timeout))
                .await?;
            out.require_success(
                &format!("the [command] of {}", file.path.display()),
                &vm.name,
            )?;
            Ok(Run {
                output: out.stdout_str(),
                dmatest: None,
                usage: out.usage,
            })
        }
        (Workload::Dmatest { .. }, None) => bail!("dmatest's parameters are missing"),
    }
}

/// `run` with its shell kept on the control CPU and itself pinned, as the file says.
fn command_script(run: &str, cpus: &WorkloadCpus) -> String {
    let mut script = choreography::control_shell(cpus.control);
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
    script
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_that_never_ran_refuses_the_sample_and_one_that_started_elsewhere_fails() {
        let t = Topology::by_name(crate::host::DEFAULT_TOPOLOGY).unwrap();
        let trace = std::path::Path::new("/r/sched.trace");
        let events = crate::observe::parse_trace(crate::observe::tests::TRACE);
        let none = TaskPlacement::from_events("lab-udp-sink", &events, &t);
        let err = check_watched(&none, "lab-udp-sink", None, "vm-1", trace).unwrap_err();
        let rejected = crate::sample::rejection(&err).expect("refused, booted again");
        assert!(
            rejected.cause.contains("no switch-in of lab-udp-sink*")
                && rejected.cause.contains("/r/sched.trace"),
            "{}",
            rejected.cause
        );
        let copy = TaskPlacement::from_events("dma0chan0-copy", &events, &t);
        assert!(check_watched(&copy, "dma0chan0-copy", copy.started_on, "vm-1", trace).is_ok());
        let err = check_watched(&copy, "dma0chan0-copy", Some(7), "vm-1", trace).unwrap_err();
        assert!(
            crate::sample::rejection(&err).is_none(),
            "a set-up error, not a refused sample"
        );
        assert!(
            format!("{err}").contains("not on watch.started_on's CPU 7"),
            "{err}"
        );
    }

    #[test]
    fn a_pinned_command_keeps_its_shell_on_the_control_cpu() {
        let cpus = WorkloadCpus {
            control: Some(7),
            pin: Some(vec![0, 1]),
            ..WorkloadCpus::default()
        };
        let script = command_script("echo 'hi' $x", &cpus);
        assert_eq!(
            script,
            "taskset -p -c 7 $$ > /dev/null\ntaskset -c 0,1 sh -c 'echo '\\''hi'\\'' $x'\n"
        );
        let status = std::process::Command::new("sh")
            .args(["-n", "-c", &script])
            .status()
            .unwrap();
        assert!(status.success(), "not valid shell:\n{script}");
    }
}
