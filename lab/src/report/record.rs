//! A stored run: manifest, comparison, the boots in the order they ran, the boots whose
//! samples were refused and why, and every decision point of an adaptive run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{read_json, write_json_atomic, Comparison, Manifest, Picture, ReportError};
use crate::stats::{next_stage, Repetitions, Until, Verdict};

/// One boot's raw result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootRecord {
    /// Position in the run's (interleaved) boot order, from 0.
    pub sequence: usize,
    /// The variant it booted.
    pub variant: String,
    /// Metric -> this boot's value.
    pub samples: BTreeMap<String, f64>,
    /// What the scenario kept besides its metrics: observation details, artefact paths.
    #[serde(default, alias = "extra", skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

/// A stored run: manifest, comparison, and the boots in the order they ran. The record is the
/// one owner of samples: they enter only through `RunRecord::record_boot`, and a stored
/// record whose table disagrees with its boots is refused when read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RunRecordData")]
pub struct RunRecord {
    /// The layout's version.
    pub schema_version: u32,
    /// Where, on what and with which inputs the run happened.
    pub manifest: Manifest,
    pub(super) comparison: Comparison,
    pub(super) boots: Vec<BootRecord>,
    /// Why the run stopped early, if it did (the boots before it are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Boots that ran but gave no sample (a kernel WARNING, a lost trace event, a short
    /// workload), in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<RejectedBoot>,
    /// Where an adaptive run looked at its primary verdicts and what it did next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<DecisionPoint>,
}

/// The unchecked JSON shape of a [`RunRecord`].
#[derive(Deserialize)]
struct RunRecordData {
    schema_version: u32,
    #[serde(default)]
    manifest: Manifest,
    comparison: Comparison,
    #[serde(default)]
    boots: Vec<BootRecord>,
    #[serde(default)]
    failure: Option<String>,
    #[serde(default)]
    rejected: Vec<RejectedBoot>,
    #[serde(default)]
    decisions: Vec<DecisionPoint>,
}

impl TryFrom<RunRecordData> for RunRecord {
    type Error = ReportError;

    fn try_from(data: RunRecordData) -> Result<Self, ReportError> {
        let record = RunRecord {
            schema_version: data.schema_version,
            manifest: data.manifest,
            comparison: data.comparison,
            boots: data.boots,
            failure: data.failure,
            rejected: data.rejected,
            decisions: data.decisions,
        };
        record.check_consistent()?;
        Ok(record)
    }
}

impl RunRecord {
    pub(crate) const SCHEMA_VERSION: u32 = 2;

    /// A record of `definition`: variants and metrics, no samples yet (those come from
    /// [`RunRecord::record_boot`]).
    pub(crate) fn new(
        definition: Comparison,
        manifest: Manifest,
    ) -> Result<RunRecord, ReportError> {
        let samples = definition.sample_count();
        if samples > 0 {
            return Err(ReportError::DefinitionHasSamples {
                comparison: definition.name().to_string(),
                samples,
            });
        }
        Ok(RunRecord {
            schema_version: Self::SCHEMA_VERSION,
            manifest,
            comparison: definition,
            boots: Vec::new(),
            failure: None,
            rejected: Vec::new(),
            decisions: Vec::new(),
        })
    }

    /// The comparison of every boot recorded so far: what tables, reports and assertions read.
    pub fn comparison(&self) -> &Comparison {
        &self.comparison
    }

    /// The boots in the order they ran.
    pub fn boots(&self) -> &[BootRecord] {
        &self.boots
    }

    /// Adds one boot of `variant`: its metric values go into the comparison and the raw boot
    /// list alike. All values are checked first, so a bad one adds nothing.
    pub(crate) fn record_boot<K: AsRef<str>>(
        &mut self,
        variant: &str,
        samples: impl IntoIterator<Item = (K, f64)>,
        details: Value,
    ) -> Result<(), ReportError> {
        let c = &self.comparison;
        c.check_variant(variant)?;
        let mut values = BTreeMap::new();
        for (metric, value) in samples {
            let metric = metric.as_ref();
            c.metric(metric)?;
            if !value.is_finite() {
                return Err(ReportError::NonFiniteSample {
                    comparison: c.name().to_string(),
                    metric: metric.to_string(),
                    variant: variant.to_string(),
                    value,
                });
            }
            if values.insert(metric.to_string(), value).is_some() {
                return Err(ReportError::DuplicateBootSample {
                    comparison: c.name().to_string(),
                    variant: variant.to_string(),
                    metric: metric.to_string(),
                });
            }
        }
        for (metric, &value) in &values {
            self.comparison.add_sample(metric, variant, value)?;
        }
        self.boots.push(BootRecord {
            sequence: self.boots.len(),
            variant: variant.to_string(),
            samples: values,
            details,
        });
        Ok(())
    }

    /// The table's samples are exactly the boots' samples, in boot order.
    fn check_consistent(&self) -> Result<(), ReportError> {
        for m in self.comparison.metrics() {
            for variant in self.comparison.variants() {
                let from_boots: Vec<f64> = self
                    .boots
                    .iter()
                    .filter(|b| &b.variant == variant)
                    .filter_map(|b| b.samples.get(&m.name).copied())
                    .collect();
                let table = m.samples.get(variant).map(Vec::as_slice).unwrap_or(&[]);
                if table != from_boots.as_slice() {
                    return Err(ReportError::RecordMismatch {
                        comparison: self.comparison.name().to_string(),
                        metric: m.name.clone(),
                        variant: variant.clone(),
                        table: table.len(),
                        boots: from_boots.len(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes `<dir>/<comparison name>.json` atomically (the same file name as
    /// [`Comparison::write_json`]: store one or the other per directory).
    #[cfg(test)]
    pub(crate) fn write_json(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        write_json_atomic(dir, self.comparison.name(), self)
    }

    /// Writes `path` atomically.
    pub(crate) fn write_json_to(&self, path: &Path) -> anyhow::Result<()> {
        let dir = path.parent().context("record path has no directory")?;
        let name = path.file_stem().context("record path has no file name")?;
        let written = write_json_atomic(dir, &name.to_string_lossy(), self)?;
        debug_assert_eq!(written, path);
        Ok(())
    }

    /// Reads a stored record (`record.json`), refusing one whose table disagrees with its boots.
    pub fn read_json(path: &Path) -> anyhow::Result<RunRecord> {
        read_json(path)
    }

    /// Writes the record's outputs into `dir`: `record.json`, `table.txt` and the page
    /// `record.html` (`picture`: the scenario's, for a record whose manifest has none). The page
    /// is drawn from the record alone, so a failure to draw it only warns: the record and table
    /// stand without it. The one writer of a run's files, for the runner and `lab report merge`.
    pub(crate) fn write_outputs(
        &self,
        dir: &Path,
        picture: Option<&Picture>,
    ) -> anyhow::Result<Outputs> {
        let record = dir.join("record.json");
        self.write_json_to(&record)?;
        let table = dir.join("table.txt");
        std::fs::write(&table, self.comparison.table())
            .with_context(|| format!("writing {}", table.display()))?;
        let html = match super::html::write(self, &record, picture) {
            Ok(path) => Some(path),
            Err(e) => {
                crate::progress::warn(format!("{}: no HTML report: {e:#}", self.comparison.name()));
                None
            }
        };
        Ok(Outputs {
            record,
            table,
            html,
        })
    }
}

/// Where [`RunRecord::write_outputs`] put a record's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outputs {
    /// `<dir>/record.json`.
    pub record: PathBuf,
    /// `<dir>/table.txt`.
    pub table: PathBuf,
    /// `<dir>/record.html`; `None` when the page could not be drawn (a warning said why).
    pub html: Option<PathBuf>,
}

/// Creates `parent/<UTC time>-<unique>/`: a directory no other run shares (a comparison's run,
/// a merge).
pub(crate) fn run_dir(parent: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let stamp = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs))
        .to_string()
        .replace(':', "");
    // A retried test's attempts each get their own directory anyway; the name says which.
    let attempt = crate::report::attempt::TestAttempt::from_env()
        .filter(|a| a.total_attempts > 1)
        .map(|a| format!("attempt{}-", a.attempt))
        .unwrap_or_default();
    let dir = tempfile::Builder::new()
        .prefix(&format!("{stamp}-{attempt}"))
        .rand_bytes(4)
        .tempdir_in(parent)
        .with_context(|| format!("creating a run directory in {}", parent.display()))?;
    Ok(dir.keep())
}

/// A boot that ran and gave no sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectedBoot {
    /// The variant it booted.
    pub variant: String,
    /// Why its sample is not a sample, quoting the kernel log line or the observer.
    pub cause: String,
    /// Its logs and artefacts.
    pub dir: PathBuf,
}

/// One look at an adaptive run's primary verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionPoint {
    /// Valid boots so far, all variants together.
    pub boots: usize,
    /// Valid boots per variant.
    pub per_variant: BTreeMap<String, usize>,
    /// Each primary metric's verdict for each variant, then.
    pub verdicts: Vec<PairVerdict>,
    /// What the run did next: "stop: every primary verdict decided", "add boots to ...",
    /// "stop: the cap of N boots per variant reached".
    pub next: String,
}

impl DecisionPoint {
    /// The look after a stage of a run of `comparison` with `have[v]` valid boots per variant
    /// (base first): every primary verdict, and what to boot next, the base and every variant
    /// with a verdict `until` does not settle, up to the next step (`None`: stop). The runner
    /// and `lab bench`'s simulated runs both take their decisions here.
    pub(crate) fn after_stage(
        comparison: &Comparison,
        repetitions: Repetitions,
        until: Until,
        have: &[usize],
    ) -> (DecisionPoint, Option<(Vec<usize>, usize)>) {
        let variants = comparison.variants();
        let verdicts: Vec<PairVerdict> = comparison
            .verdicts()
            .into_iter()
            .map(|(metric, variant, verdict)| PairVerdict {
                metric: metric.to_string(),
                variant: variant.to_string(),
                verdict: verdict.ok(),
            })
            .collect();
        let undecided: Vec<usize> = (1..variants.len())
            .filter(|&i| {
                verdicts.iter().any(|v| {
                    v.variant == variants[i]
                        && !v.verdict.as_ref().is_some_and(|v| until.settles(v))
                })
            })
            .collect();
        let names = |indices: &[usize]| {
            indices
                .iter()
                .map(|&i| variants[i].as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (next, plan) = if verdicts.is_empty() {
            ("stop: no primary metric to decide on".to_string(), None)
        } else if let Repetitions::Fixed(n) = repetitions {
            (format!("stop: fixed at {n} boots per variant"), None)
        } else if undecided.is_empty() && until == Until::Shown {
            (
                "stop: every primary verdict decided or a change shown".to_string(),
                None,
            )
        } else if undecided.is_empty() {
            ("stop: every primary verdict decided".to_string(), None)
        } else {
            match next_stage(repetitions, have, &undecided) {
                Some((active, target)) => (
                    format!("add boots: {} to {target} each", names(&active)),
                    Some((active, target)),
                ),
                None => (
                    format!(
                        "stop: UNKNOWN for {} at the cap of {} boots per variant",
                        names(&undecided),
                        repetitions.cap()
                    ),
                    None,
                ),
            }
        };
        let point = DecisionPoint {
            boots: have.iter().sum(),
            per_variant: variants.iter().cloned().zip(have.iter().copied()).collect(),
            verdicts,
            next,
        };
        (point, plan)
    }
}

/// A primary metric's verdict for one variant at a [`DecisionPoint`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairVerdict {
    /// The metric.
    pub metric: String,
    /// The variant, against the base.
    pub variant: String,
    /// `None` when a side had no samples of the metric yet.
    pub verdict: Option<Verdict>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> RunRecord {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(format!("{name}.record.json"));
        RunRecord::read_json(&path).unwrap()
    }

    #[test]
    fn written_outputs_read_back_as_the_same_record_and_table() {
        let record = fixture("s1-cross-llc-a");
        let dir = tempfile::tempdir().unwrap();
        let out = record.write_outputs(dir.path(), None).unwrap();
        assert_eq!(out.record, dir.path().join("record.json"));
        assert_eq!(out.table, dir.path().join("table.txt"));
        assert_eq!(out.html, Some(dir.path().join("record.html")));
        let back = RunRecord::read_json(&out.record).unwrap();
        assert_eq!(back, record);
        assert_eq!(
            std::fs::read_to_string(&out.table).unwrap(),
            back.comparison().table()
        );
        let page = std::fs::read_to_string(out.html.unwrap()).unwrap();
        assert!(page.contains(record.comparison().name()), "{page}");
    }

    #[test]
    fn a_page_that_cannot_be_drawn_leaves_the_record_and_table() {
        let mut record = fixture("s1-cross-llc-a");
        record.manifest.topology = serde_json::json!({"name": "bad", "file": "not [toml"});
        let dir = tempfile::tempdir().unwrap();
        let out = record.write_outputs(dir.path(), None).unwrap();
        assert_eq!(out.html, None);
        assert!(!dir.path().join("record.html").exists());
        assert_eq!(RunRecord::read_json(&out.record).unwrap(), record);
        assert!(out.table.is_file());
    }

    #[test]
    fn run_dirs_are_unique_and_named_by_time() {
        let root = tempfile::tempdir().unwrap();
        let a = run_dir(root.path()).unwrap();
        let b = run_dir(root.path()).unwrap();
        assert_ne!(a, b);
        let name = a.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            name.starts_with("20") && name.contains('T') && !name.contains(':'),
            "{name}"
        );
    }
}
