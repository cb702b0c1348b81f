//! The vectors of a device that the file's `spread`, `targets` and `irqs_on` metrics read:
//! their interrupts counted per CPU over the workload or the `[then]` step (from
//! `/proc/interrupts` before and after it), and where each targets after it
//! (`effective_affinity_list`: x86 moves a vector when it next fires).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::metrics::{FileMetric, Source};
use crate::experiment::Boot;
use crate::observe::{Interrupts, VectorTargets};

/// When a metric reads a device's vectors: over the workload (the default), or over the
/// `[then]` step after it (`window = "then"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Window {
    Workload,
    Then,
}

impl Window {
    pub(super) fn parse(text: &str) -> Result<Window, String> {
        match text {
            "workload" => Ok(Window::Workload),
            "then" => Ok(Window::Then),
            other => Err(format!("{other:?}: \"workload\" or \"then\"")),
        }
    }
}

/// The vectors of a device a `spread`, `targets` or `irqs_on` metric reads: `device N`,
/// `device N from V` (V onward: an NVMe's I/O queues without its admin vector 0) or
/// `device N vector V` (that one), in a window.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Vectors {
    pub device: usize,
    pub from: usize,
    /// The last vector (`vector V`); `None`: every one from `from`.
    pub to: Option<usize>,
    pub window: Window,
}

impl Vectors {
    pub(super) fn parse(text: &str, window: Window) -> Result<Vectors, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |w: &str| w.parse::<usize>().ok();
        let make = |device, from, to| Vectors {
            device,
            from,
            to,
            window,
        };
        match words[..] {
            ["device", n] => number(n).map(|device| make(device, 0, None)),
            ["device", n, "from", v] => number(n)
                .zip(number(v))
                .map(|(device, from)| make(device, from, None)),
            ["device", n, "vector", v] => number(n)
                .zip(number(v))
                .map(|(device, v)| make(device, v, Some(v))),
            _ => None,
        }
        .ok_or_else(|| {
            format!("{text:?}: \"device N\", \"device N from V\" or \"device N vector V\"")
        })
    }

    /// As the details key it: `device 0 from 1`, `device 0 vector 0 in then`.
    pub(super) fn key(&self) -> String {
        let which = match self.to {
            Some(v) => format!("device {} vector {v}", self.device),
            None => format!("device {} from {}", self.device, self.from),
        };
        match self.window {
            Window::Workload => which,
            Window::Then => format!("{which} in then"),
        }
    }
}

/// Every distinct set of vectors the metrics' counts (spreads, `irqs_on`; `counts`) or targets
/// read in `window`.
pub(super) fn wanted(metrics: &[FileMetric], counts: bool, window: Window) -> Vec<Vectors> {
    let mut out: Vec<Vectors> = metrics
        .iter()
        .filter_map(|m| match (&m.source, counts) {
            (Source::Spread { vectors, .. }, true)
            | (Source::VectorsOn { vectors, .. }, true)
            | (Source::Targets { vectors, .. }, false) => Some(vectors.clone()),
            _ => None,
        })
        .filter(|v| v.window == window)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The IRQ numbers of `v` in this boot; the error names the file and what the device lacks.
fn irqs_of(v: &Vectors, boot: &Boot<'_>, file: &Path) -> Result<Vec<u32>> {
    let device = boot.devices.get(v.device).with_context(|| {
        format!(
            "{}: vectors {:?}: no device {}",
            file.display(),
            v.key(),
            v.device
        )
    })?;
    let end = v.to.map_or(device.vectors.len(), |to| to + 1);
    let irqs = device
        .vectors
        .get(v.from..end)
        .filter(|rest| !rest.is_empty());
    let irqs = irqs.with_context(|| {
        format!(
            "{}: vectors {:?}: device {} has {} vectors",
            file.display(),
            v.key(),
            v.device,
            device.vectors.len()
        )
    })?;
    Ok(irqs.iter().map(|x| x.irq).collect())
}

/// Each set's interrupts per CPU between `before` and `after`.
pub(super) fn counted(
    wanted: &[Vectors],
    boot: &Boot<'_>,
    before: &Interrupts,
    after: &Interrupts,
    file: &Path,
) -> Result<BTreeMap<Vectors, Vec<u64>>> {
    let nr_cpus = boot.topology.nr_cpus() as usize;
    let mut out = BTreeMap::new();
    for v in wanted {
        let irqs = irqs_of(v, boot, file)?;
        out.insert(v.clone(), after.delta_summed(before, irqs, nr_cpus));
    }
    Ok(out)
}

/// Each set's vectors' effective CPUs, read now.
pub(super) async fn targets(
    wanted: &[Vectors],
    boot: &Boot<'_>,
    file: &Path,
) -> Result<BTreeMap<Vectors, BTreeMap<u32, Vec<u32>>>> {
    let mut out = BTreeMap::new();
    for v in wanted {
        let irqs = irqs_of(v, boot, file)?;
        out.insert(v.clone(), VectorTargets::read(boot.vm, irqs).await?);
    }
    Ok(out)
}
