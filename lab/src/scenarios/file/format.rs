//! The scenario file as TOML says it: every table and field, unknown ones refused, the fields
//! whose meaning is checked after parsing kept with their place in the file so an error can
//! name its line. [`super::ScenarioFile::parse`] turns this into a checked scenario.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::workload::Dmatest;

/// A whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    pub name: Spanned<String>,
    pub description: String,
    #[serde(default)]
    pub topology: Option<Spanned<String>>,
    /// Base first.
    pub variants: Spanned<Vec<String>>,
    /// The most boots per variant an adaptive run takes (default 10; raised, never lowered).
    #[serde(default)]
    pub max_repetitions: Option<Spanned<usize>>,
    /// What `--set NAME=VALUE` changes; a value is a string, number or boolean.
    #[serde(default)]
    pub params: BTreeMap<String, Spanned<toml::Value>>,
    /// Named CPUs ([`super::cpus`]): each an expression over parameters and other CPUs.
    #[serde(default)]
    pub cpus: BTreeMap<String, Spanned<String>>,
    #[serde(default, rename = "device")]
    pub devices: Vec<RawDevice>,
    #[serde(default)]
    pub guest: RawGuest,
    /// A storage stack built on a block device each boot, after `[guest] setup`.
    #[serde(default)]
    pub storage: Option<RawStorage>,
    /// The lab's dmatest workload (its parameters; missing ones are the seed report's).
    #[serde(default)]
    pub dmatest: Option<RawDmatest>,
    /// A shell script as the workload.
    #[serde(default)]
    pub command: Option<RawCommand>,
    #[serde(default)]
    pub watch: Option<RawWatch>,
    /// UDP datagrams the lab sends into a NIC while the workload runs.
    #[serde(default)]
    pub traffic: Option<RawTraffic>,
    /// A shell step after the workload, with a window of counts of its own.
    #[serde(default)]
    pub then: Option<RawThen>,
    /// Trace events counted over the workload (not beside a `[watch]`: one trace at a time).
    #[serde(default, rename = "count")]
    pub counts: Vec<RawCount>,
    /// Who woke whom over the workload (one trace at a time: not beside a `[watch]` or a
    /// `[[count]]`).
    #[serde(default)]
    pub wakeups: Option<Spanned<RawWakeups>>,
    /// The trace ring per CPU in KiB, for the watch or the counts (default: the lab's).
    #[serde(default)]
    pub trace_buffer_kb: Option<u32>,
    /// `[[metric]]` tables, each with its `name`.
    #[serde(default, rename = "metric")]
    pub metric_tables: Vec<Spanned<RawMetric>>,
    /// `[metrics]`: a line a metric, named by its key (`share = { switch_ins_on = "irq" }`).
    #[serde(default, rename = "metrics")]
    pub metric_lines: Option<Spanned<MetricLines>>,
}

impl RawFile {
    /// The metrics in the file's order, each named, from whichever of the two forms it uses;
    /// else the place and the reason.
    pub(super) fn metrics(&self) -> Result<Vec<&RawMetric>, (Range<usize>, &'static str)> {
        match (&self.metric_lines, self.metric_tables.first()) {
            (Some(lines), Some(_)) => Err((
                lines.span(),
                "a file lists its metrics in [metrics] or as [[metric]] tables, not both",
            )),
            (Some(lines), None) => Ok(lines.get_ref().0.iter().collect()),
            (None, _) => self
                .metric_tables
                .iter()
                .map(|m| match m.get_ref().name {
                    Some(_) => Ok(m.get_ref()),
                    None => Err((m.span(), "a [[metric]] needs a name")),
                })
                .collect(),
        }
    }
}

/// `[metrics]`: the metrics in the file's order, each named by its key.
#[derive(Debug)]
pub(super) struct MetricLines(Vec<RawMetric>);

impl<'de> Deserialize<'de> for MetricLines {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Lines;
        impl<'de> serde::de::Visitor<'de> for Lines {
            type Value = MetricLines;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a metric's name = { its source and fields }")
            }
            // A map, not a BTreeMap: the order is the file's (a metric may read those above).
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<MetricLines, A::Error> {
                let mut out = Vec::new();
                while let Some(name) = map.next_key::<Spanned<String>>()? {
                    let mut metric: RawMetric = map.next_value()?;
                    if metric.name.is_some() {
                        return Err(serde::de::Error::custom(
                            "a metric in [metrics] is named by its key, not by `name`",
                        ));
                    }
                    metric.name = Some(name);
                    out.push(metric);
                }
                Ok(MetricLines(out))
            }
        }
        d.deserialize_map(Lines)
    }
}

/// `[traffic]`: a UDP flow from the lab's end of a `nic` device's wire into the guest.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTraffic {
    /// The `[[device]]` (index, a `nic`).
    #[serde(default)]
    pub device: usize,
    /// The guest's UDP port.
    pub port: u16,
    /// Payload bytes per datagram (at most 1472).
    pub payload: usize,
    /// Datagrams per second.
    pub rate: f64,
    /// Datagrams in all.
    pub count: u64,
    /// A guest file whose appearance starts the flow (a receiver's "ready" file); default: at
    /// once.
    #[serde(default)]
    pub after: Option<String>,
    /// Before the workload, single datagrams to a port nothing listens on until `[watch] irq`
    /// has landed on its pinned CPU (`observe::warm_up_irq`).
    #[serde(default)]
    pub warm_up: bool,
}

/// One `[[count]]`: a trace event counted over the workload.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCount {
    /// What metrics call it.
    pub name: Spanned<String>,
    /// `subsystem/event` (`sched/sched_switch`).
    pub event: Spanned<String>,
    /// A tracefs filter (`prev_comm ~ "hackbench*"`), default none.
    #[serde(default)]
    pub filter: String,
}

/// `[storage]`: what sits between the workload and a block device, built each boot.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStorage {
    /// `raw`, `ext4` or `ext4-on-thin` (`storage::StorageStack`).
    pub stack: Spanned<String>,
    /// The guest's block device (`/dev/nvme0n1`).
    pub device: Spanned<String>,
}

/// `[wakeups]`: the tasks whose wakeups are traced, with who woke them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWakeups {
    /// Command-name prefixes (`["fio", "kworker"]`).
    pub tasks: Vec<String>,
}

/// One `[[device]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDevice {
    /// `ioat`, `ptdma`, `nvme` or `nic`, or a parameter naming one.
    pub kind: Spanned<String>,
    /// I/OAT channels (default 1).
    #[serde(default)]
    pub channels: Option<u8>,
    /// NVMe I/O queues (default 2): a number, or a numeric parameter naming it.
    #[serde(default)]
    pub queues: Option<Spanned<toml::Value>>,
    /// NVMe namespace size (`"2G"`, default 1 GiB; sparse on the host).
    #[serde(default)]
    pub size: Option<Spanned<String>>,
    /// Vector index -> a CPU set ([`super::cpus`]) its interrupt is pinned to.
    #[serde(default)]
    pub pin: BTreeMap<String, Spanned<String>>,
}

/// `[guest]`: what the guest gets besides the workload.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGuest {
    /// Guest image recipe (default: the lab's).
    #[serde(default)]
    pub image: Option<String>,
    /// Kernel command-line arguments.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// Shell commands run in order before the watch starts.
    #[serde(default)]
    pub setup: Vec<String>,
    /// Guest uptime in seconds before the workload starts (after the watch started).
    #[serde(default)]
    pub settle_s: Option<f64>,
}

/// `[dmatest]`: the lab's `Dmatest` parameters plus where its threads start.
// No `deny_unknown_fields`: serde cannot have it with `flatten`; `parameters` refuses a name
// dmatest does not have.
#[derive(Debug, Deserialize)]
pub(super) struct RawDmatest {
    /// The CPU its threads start their work on (a CPU expression).
    #[serde(default)]
    pub start_cpu: Option<Spanned<String>>,
    /// The CPU the guest script's own shell is kept on (a CPU expression; `outside A B` finds
    /// none on a small topology, and then the shell is left where the kernel puts it).
    #[serde(default)]
    pub control_cpu: Option<Spanned<String>>,
    #[serde(flatten)]
    pub params: BTreeMap<String, toml::Value>,
}

impl RawDmatest {
    /// The parameters, missing ones the seed report's.
    pub(super) fn parameters(&self) -> Result<Dmatest, String> {
        let mut value =
            serde_json::to_value(Dmatest::seed_parameters()).map_err(|e| e.to_string())?;
        let table = value.as_object_mut().expect("Dmatest is a table");
        for (name, given) in &self.params {
            if !table.contains_key(name) {
                let known: Vec<&String> = table.keys().collect();
                return Err(format!(
                    "dmatest has no parameter {name:?} (parameters: start_cpu, control_cpu, {})",
                    known
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let json = serde_json::to_value(given).map_err(|e| e.to_string())?;
            table.insert(name.clone(), json);
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

/// `[command]`: a shell script as the workload.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommand {
    /// The script (parameters and CPUs are its shell variables).
    pub run: String,
    /// Runs it pinned to this CPU set (a CPU set expression).
    #[serde(default)]
    pub pin: Option<Spanned<String>>,
    /// Keeps the script's own shell on this CPU (see [`RawDmatest::control_cpu`]).
    #[serde(default)]
    pub control_cpu: Option<Spanned<String>>,
    /// Seconds it may take (default 600).
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

/// `[then]`: a shell script run after the workload and its counts (move an interrupt, then
/// make it fire); metrics with `window = "then"` count over it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawThen {
    pub run: Spanned<String>,
    /// Seconds it may take (default 120).
    #[serde(default)]
    pub timeout_s: Option<Spanned<u64>>,
}

/// `[watch]`: the task whose placement is traced.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatch {
    /// The task's command-name prefix (`dma0chan0-copy`).
    pub task: String,
    /// The interrupt traced beside it: `device N` (its first vector) or `device N vector V`.
    #[serde(default)]
    pub irq: Option<Spanned<String>>,
    /// The CPU the task must start its work on, or the boot fails (a CPU expression).
    #[serde(default)]
    pub started_on: Option<Spanned<String>>,
    /// Named CPUs the page marks on the task's picture.
    #[serde(default)]
    pub marks: Vec<String>,
}

/// One metric (a `[[metric]]` or a line of `[metrics]`): its name, exactly one source, and how
/// it is decided.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetric {
    /// Given in a `[[metric]]`; a line of `[metrics]` is named by its key.
    #[serde(default)]
    pub name: Option<Spanned<String>>,
    /// Share of the task's switch-ins on a CPU set.
    #[serde(default)]
    pub switch_ins_on: Option<Spanned<String>>,
    /// Share of the task's time on CPU on a CPU set.
    #[serde(default)]
    pub runtime_on: Option<Spanned<String>>,
    /// Share of the task's wakeups that targeted a CPU set.
    #[serde(default)]
    pub wakeups_on: Option<Spanned<String>>,
    /// Share of the watched interrupt's handler runs on a CPU set.
    #[serde(default)]
    pub irqs_on: Option<Spanned<String>>,
    /// A count of the task's placement (`migrations`, `cross_llc_migrations`, ...).
    #[serde(default)]
    pub placement: Option<Spanned<String>>,
    /// Share of the task's attributed wakeups that landed so (`same_cpu`, `smt_sibling`,
    /// `same_llc`, `other_llc`, `other_node`), seen from the task's CPU.
    #[serde(default)]
    pub landed: Option<Spanned<String>>,
    /// A figure of the workload's result (`iops`, `completions`).
    #[serde(default)]
    pub workload: Option<Spanned<String>>,
    /// A figure of the workload's resource use (`system_s`, `involuntary_switches`, ...).
    #[serde(default)]
    pub usage: Option<Spanned<String>>,
    /// A `/proc/vmstat` counter's change over the workload.
    #[serde(default)]
    pub vmstat: Option<Spanned<String>>,
    /// With `vmstat`: the change from this many seconds into the workload to its end (a number
    /// or an expression of numeric parameters).
    #[serde(default)]
    pub from_s: Option<toml::Value>,
    /// A `[[count]]`'s events over the workload, all CPUs.
    #[serde(default)]
    pub count: Option<Spanned<String>>,
    /// How a device's interrupts spread over the CPUs: `busiest_share`, `cpus`, `nodes`,
    /// `max_over_mean` or `total`, of the vectors `vectors` names.
    #[serde(default)]
    pub spread: Option<Spanned<String>>,
    /// Where a device's vectors target (`effective_affinity_list` after the workload): `cpus`,
    /// `nodes` or `max_per_cpu`, of the vectors `vectors` names.
    #[serde(default)]
    pub targets: Option<Spanned<String>>,
    /// With `spread`, `targets` or `irqs_on`: `device N` (all its vectors), `device N from V`
    /// (vector V onward) or `device N vector V`.
    #[serde(default)]
    pub vectors: Option<Spanned<String>>,
    /// With `vectors`: `workload` (the default) or `then`, the `[then]` step after it.
    #[serde(default)]
    pub window: Option<Spanned<String>>,
    /// A regular expression over the workload's output; its first group is the value.
    #[serde(default)]
    pub output: Option<Spanned<String>>,
    /// A JSONPath query (`"$.jobs[*].write.iops"`) over the JSON document the workload prints.
    #[serde(default)]
    pub json: Option<Spanned<String>>,
    /// With `json`: how several matched values make one (`sum`, `max`, `min`, `mean`).
    #[serde(default)]
    pub combine: Option<Spanned<String>>,
    /// A figure of `[wakeups]`: `count`, `share`, `moved`, `migrations`, `single_cpu_wakees`.
    #[serde(default)]
    pub wakeups: Option<Spanned<String>>,
    /// With `wakeups`: the wakee classes (`"fio"`, `"kworker/N:N|kworker/N:NH"`, `"kworker*"`).
    #[serde(default)]
    pub of: Option<Spanned<String>>,
    /// With `wakeups`: the waker classes, or `hardirq` / `softirq`.
    #[serde(default)]
    pub by: Option<Spanned<String>>,
    /// An expression of earlier metrics' values and numeric parameters (`"gib / elapsed_s"`).
    #[serde(default)]
    pub compute: Option<Spanned<String>>,
    /// Comparisons are decided on it.
    #[serde(default)]
    pub primary: bool,
    /// The smallest change that matters: a number in the metric's unit, or `"N%"` of the
    /// base's mean.
    #[serde(default)]
    pub magnitude: Option<Spanned<toml::Value>>,
    /// `higher`, `lower` or `neutral` (default neutral).
    #[serde(default)]
    pub better: Option<Spanned<String>>,
    /// Shown after the name (shares: `%`).
    #[serde(default)]
    pub unit: Option<String>,
    /// A boot may lack it.
    #[serde(default)]
    pub optional: bool,
    /// The value is multiplied by this: a number or an expression of numeric parameters
    /// (`"1000 / (groups * fds * fds * loops)"`: per 1000 messages).
    #[serde(default)]
    pub scale: Option<toml::Value>,
    /// A boot whose value (scaled) is below this is not a sample: it is recorded and booted
    /// again (a time-based run that ended early, say). A number or an expression of numeric
    /// parameters (`"seconds - 1.5"`).
    #[serde(default)]
    pub refuse_below: Option<toml::Value>,
    /// Likewise above.
    #[serde(default)]
    pub refuse_above: Option<toml::Value>,
}

impl RawMetric {
    /// Its name ([`RawFile::metrics`] gives only named ones).
    pub(super) fn name(&self) -> &Spanned<String> {
        self.name
            .as_ref()
            .expect("RawFile::metrics names every metric")
    }
}

/// The 1-based line of byte `offset` in `text`.
pub(super) fn line_of(text: &str, span: Range<usize>) -> usize {
    text[..span.start.min(text.len())].matches('\n').count() + 1
}
