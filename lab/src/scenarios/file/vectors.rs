//! The interrupts of a device's vectors that the file's `spread` metrics read: counted per CPU
//! over the workload, from `/proc/interrupts` before and after it.

use std::collections::BTreeMap;

use anyhow::{Context, Result};

use super::metrics::{FileMetric, Source, Vectors};
use crate::experiment::Boot;
use crate::observe::Interrupts;

/// Every distinct set of vectors the metrics' spreads read.
pub(super) fn wanted(metrics: &[FileMetric]) -> Vec<Vectors> {
    let mut out: Vec<Vectors> = metrics
        .iter()
        .filter_map(|m| match &m.source {
            Source::Spread { vectors, .. } => Some(vectors.clone()),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Each set's interrupts per CPU between `before` and `after`; the error names the file and
/// what the booted device lacks.
pub(super) fn counted(
    wanted: &[Vectors],
    boot: &Boot<'_>,
    before: &Interrupts,
    after: &Interrupts,
    file: &std::path::Path,
) -> Result<BTreeMap<Vectors, Vec<u64>>> {
    let nr_cpus = boot.topology.nr_cpus() as usize;
    let mut out = BTreeMap::new();
    for v in wanted {
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
        let per_cpu = after.delta_summed(before, irqs.iter().map(|x| x.irq), nr_cpus);
        out.insert(v.clone(), per_cpu);
    }
    Ok(out)
}
