//! The vectors of a device that the file's `spread` and `targets` metrics read: their
//! interrupts counted per CPU over the workload (from `/proc/interrupts` before and after it),
//! and where each targets after it (`effective_affinity_list`: x86 moves a vector when it next
//! fires).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::metrics::{FileMetric, Source, Vectors};
use crate::experiment::Boot;
use crate::observe::{Interrupts, VectorTargets};

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
