//! One stage of boots: as many side by side as the run allows, each recorded in its order, a
//! boot whose sample is refused booted again at the end of the stage; and the context a failed
//! boot's error carries.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Result;
use futures::StreamExt;

use super::{Arm, Experiment, Scenario};
use crate::report::{RejectedBoot, RunRecord};
use crate::topology::Topology;
use crate::Lab;

/// Seconds spent in each step, in order: of one boot (`boot` includes waiting for a CPU slot,
/// starting QEMU and applying the variant's settings; the guest's own boot is `boot_seconds`),
/// or of a scenario's measuring.
#[derive(Default)]
pub(crate) struct Phases(pub(crate) Vec<(&'static str, f64)>);

impl Phases {
    /// Records `name` as the time since the previous lap (or since `started`).
    pub(crate) fn lap(&mut self, name: &'static str, started: &Instant) {
        let so_far: f64 = self.0.iter().map(|(_, s)| s).sum();
        let now = started.elapsed().as_secs_f64();
        self.0.push((name, now - so_far));
    }
}

/// What a stage of boots needs of its run.
pub(super) struct Boots<'a, S: Scenario> {
    pub(super) experiment: &'a Experiment<S>,
    pub(super) lab: &'a Lab,
    pub(super) topology: &'a Topology,
    pub(super) arms: &'a [Arm<S::Params>],
    pub(super) dir: &'a Path,
    pub(super) at_once: usize,
}

impl<S: Scenario> Boots<'_, S> {
    /// Boots `stage` (arm indices) as far side by side as allowed, started and recorded in its
    /// order. A boot whose sample is refused is recorded as rejected and booted again at the
    /// end of the stage, until its variant has had more than `max_rejected` refused.
    pub(super) async fn stage(
        &self,
        stage: &[usize],
        record: &mut RunRecord,
        attempts: &mut usize,
    ) -> Result<()> {
        let e = self.experiment;
        let mut queue: std::collections::VecDeque<usize> = stage.iter().copied().collect();
        let mut in_flight = futures::stream::FuturesOrdered::new();
        let total = stage.len();
        let mut done = 0;
        loop {
            while in_flight.len() < self.at_once {
                let Some(index) = queue.pop_front() else {
                    break;
                };
                let attempt = *attempts;
                *attempts += 1;
                let arm = &self.arms[index];
                let boot_dir = self.dir.join("boots").join(format!(
                    "{attempt:02}-{}",
                    crate::host::sanitize(&arm.variant.name)
                ));
                crate::progress::step(format!(
                    "{}: boot {} ({} of {total} in this stage): {}",
                    e.name,
                    attempt + 1,
                    done + in_flight.len() + 1,
                    arm.variant.name
                ));
                let (lab, topology) = (self.lab, self.topology);
                in_flight.push_back(async move {
                    let result = e.one_boot(lab, topology, arm, attempt, &boot_dir).await;
                    (index, attempt, boot_dir, result)
                });
            }
            let Some((index, attempt, boot_dir, result)) = in_flight.next().await else {
                return Ok(());
            };
            let arm = &self.arms[index];
            let failed = |error: anyhow::Error| {
                error.context(BootFailure {
                    comparison: e.name.clone(),
                    boot: attempt + 1,
                    variant: arm.variant.name.clone(),
                    logs: boot_dir.clone(),
                })
            };
            match result {
                Ok((metrics, details)) => {
                    record
                        .record_boot(&arm.variant.name, metrics, details)
                        .map_err(|err| failed(err.into()))?;
                    done += 1;
                }
                Err(error) => {
                    let Some(rejected) = crate::sample::rejection(&error) else {
                        return Err(failed(error));
                    };
                    crate::progress::warn(format!(
                        "{}: boot {} ({}) gave no sample and is booted again: {}",
                        e.name,
                        attempt + 1,
                        arm.variant.name,
                        rejected.cause
                    ));
                    record.rejected.push(RejectedBoot {
                        variant: arm.variant.name.clone(),
                        cause: rejected.cause.clone(),
                        dir: boot_dir.clone(),
                    });
                    let causes: Vec<&str> = record
                        .rejected
                        .iter()
                        .filter(|r| r.variant == arm.variant.name)
                        .map(|r| r.cause.as_str())
                        .collect();
                    if causes.len() > e.max_rejected {
                        return Err(failed(anyhow::anyhow!(
                            "{} boots of {} gave no valid sample, more than the {} a run \
                             allows:\n  {}",
                            causes.len(),
                            arm.variant.name,
                            e.max_rejected,
                            causes.join("\n  ")
                        )));
                    }
                    queue.push_back(index);
                }
            }
        }
    }
}

/// The context of a boot that failed (it did not boot, panicked, hung, or gave no valid sample
/// too often): which variant, so a caller (a bisect) can tell a probe's failure from an
/// endpoint's by downcasting instead of matching the message.
#[derive(Debug, Clone)]
pub(crate) struct BootFailure {
    pub comparison: String,
    /// From 1, in the run's boot order.
    pub boot: usize,
    pub variant: String,
    pub logs: PathBuf,
}

impl std::fmt::Display for BootFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: boot {} ({}); its logs are in {}",
            self.comparison,
            self.boot,
            self.variant,
            self.logs.display()
        )
    }
}

/// The variants at `indices`, for messages.
pub(super) fn names<P>(arms: &[Arm<P>], indices: &[usize]) -> String {
    indices
        .iter()
        .map(|&i| arms[i].variant.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
