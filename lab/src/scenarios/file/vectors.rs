//! The vectors of a device that the file's `spread` and `targets` metrics read: their
//! interrupts counted per CPU over the workload (from `/proc/interrupts` before and after it),
//! and where each targets after it (`effective_affinity_list`: x86 moves a vector when it next
//! fires).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::metrics::{FileMetric, Source};
use crate::experiment::Boot;
use crate::observe::{Interrupts, VectorTargets};

/// The vectors of a device a `spread` or `targets` metric reads: `device N`, or `device N from V` (V onward: an
/// NVMe's I/O queues without its admin vector 0).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Vectors {
    pub device: usize,
    pub from: usize,
}

impl Vectors {
    pub(super) fn parse(text: &str) -> Result<Vectors, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let number = |w: &str| w.parse::<usize>().ok();
        match words[..] {
            ["device", n] => number(n).map(|device| Vectors { device, from: 0 }),
            ["device", n, "from", v] => number(n)
                .zip(number(v))
                .map(|(device, from)| Vectors { device, from }),
            _ => None,
        }
        .ok_or_else(|| format!("{text:?}: \"device N\" or \"device N from V\""))
    }

    /// As the details key it: `device 0 from 1`.
    pub(super) fn key(&self) -> String {
        format!("device {} from {}", self.device, self.from)
    }
}

/// Every distinct set of vectors the metrics' spreads (`counts`) or targets read.
pub(super) fn wanted(metrics: &[FileMetric], counts: bool) -> Vec<Vectors> {
    let mut out: Vec<Vectors> = metrics
        .iter()
        .filter_map(|m| match (&m.source, counts) {
            (Source::Spread { vectors, .. }, true) | (Source::Targets { vectors, .. }, false) => {
                Some(vectors.clone())
            }
            _ => None,
        })
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
    let irqs = device.vectors.get(v.from..).filter(|rest| !rest.is_empty());
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
