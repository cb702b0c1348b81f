//! Records of one comparison from several machines or CI shards as one record: the boots of all,
//! in input order, through `RunRecord::record_boot` like any run's, so the merged table is the
//! table of one run with every boot. Records whose manifests differ in something that changes
//! the result are refused, naming the field, unless the caller groups by it: then each of that
//! field's values gets its own columns (`v6.12 [accelerator=kvm]`), led by a base column of its
//! own, so no group is compared with another's base (a KVM run with a TCG one, say).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{Comparison, Manifest, Outputs, Picture, RunRecord};
use crate::stats::Plan;

/// The key a merged boot's details get: the record it came from (to find its raw files).
pub(crate) const SOURCE_KEY: &str = "merged_from";

/// A manifest field that changes a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// Each variant's kernel: recipe hash and boot-time settings.
    Kernel,
    /// The topology's file.
    Topology,
    /// The accelerator and its mode.
    Accelerator,
    /// The scenario and each variant's parameters, devices and command line.
    Parameters,
}

impl Field {
    pub(crate) const ALL: [Field; 4] = [
        Field::Kernel,
        Field::Topology,
        Field::Accelerator,
        Field::Parameters,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Kernel => "kernel",
            Field::Topology => "topology",
            Field::Accelerator => "accelerator",
            Field::Parameters => "parameters",
        }
    }

    /// What the field holds for `variant` in `m`; `Null` when the record does not say.
    fn value(self, m: &Manifest, variant: &str) -> Value {
        let of_variant = |list: &Value| {
            list.as_array()
                .and_then(|l| {
                    l.iter().find(|e| {
                        let v = &e["variant"];
                        v.as_str() == Some(variant) || v["name"].as_str() == Some(variant)
                    })
                })
                .cloned()
                .unwrap_or(Value::Null)
        };
        match self {
            Field::Kernel => {
                let k = of_variant(&m.kernel);
                json!({"identity": k["identity"], "settings": k["settings"]})
            }
            Field::Topology => match m.topology.get("file") {
                Some(file) => file.clone(),
                None => m.topology.clone(),
            },
            Field::Accelerator => match m.accelerator.get("name") {
                Some(name) => name.clone(),
                None => m.accelerator.clone(),
            },
            Field::Parameters => {
                let p = of_variant(&m.parameters["variants"]);
                json!({
                    "scenario": m.parameters["scenario"],
                    "params": p["params"],
                    "devices": p["devices"],
                    "cmdline": p["cmdline"],
                })
            }
        }
    }

    /// A short name for one value, for column names.
    fn label(self, m: &Manifest, variant: &str) -> String {
        let text = match self {
            Field::Kernel => {
                let identity = &self.value(m, variant)["identity"];
                let key = identity.as_str().and_then(|s| s.rsplit(' ').next());
                key.map_or_else(|| identity.to_string(), |k| k.chars().take(10).collect())
            }
            // Two files may share a name: the digest tells them apart.
            Field::Topology => format!(
                "{}@{}",
                m.topology["name"].as_str().unwrap_or("?"),
                digest(&self.value(m, variant))
            ),
            Field::Accelerator => match self.value(m, variant) {
                Value::String(s) => s,
                other => digest(&other),
            },
            Field::Parameters => digest(&self.value(m, variant)),
        };
        format!("{}={text}", self.name())
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Field {
    type Err = String;

    fn from_str(s: &str) -> Result<Field, String> {
        Field::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                format!("{s:?} is not a field to group by ({})", names.join(", "))
            })
    }
}

fn digest(v: &Value) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(v.to_string().as_bytes());
    hex::encode(&hash[..4])
}

/// Every record file under `paths`: a file is taken as it is, a directory is searched for
/// `record.json` files (sorted).
pub(crate) fn record_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_file() {
            out.push(path.clone());
        } else if path.is_dir() {
            let found = super::stored::files_under(path, |p| {
                p.file_name().is_some_and(|n| n == "record.json")
            })?;
            if found.is_empty() {
                bail!("{}: no record.json under it", path.display());
            }
            out.extend(found);
        } else {
            bail!("{}: no such file or directory", path.display());
        }
    }
    Ok(out)
}

/// What `lab report merge` made: the merged record and where its files went.
#[derive(Debug)]
pub struct Merged {
    /// The merged record.
    pub record: RunRecord,
    /// How many records went into it.
    pub(crate) sources: usize,
    pub(crate) outputs: Outputs,
    /// Records of retried tests' earlier attempts, left out.
    pub superseded: Vec<super::attempt::Superseded>,
}

impl Merged {
    /// What was merged and where it went, a line each: `merged N records (B boots)`, then the
    /// record, table and page (the page only when it was drawn).
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            format!(
                "merged {} records ({} boots)",
                self.sources,
                self.record.boots().len()
            ),
            format!("record {}", self.outputs.record.display()),
            format!("table {}", self.outputs.table.display()),
        ];
        if let Some(html) = &self.outputs.html {
            lines.push(format!("report {}", html.display()));
        }
        lines.extend(self.superseded.iter().map(|s| s.to_string()));
        lines
    }
}

/// `lab report merge`: the records under `paths` (`record_files`) merged (`merge`) and
/// written (`RunRecord::write_outputs`) to `out`, or to a new run directory under
/// `results_root/<comparison>/`. `picture_of` finds a record's scenario picture when its
/// manifest has none (the scenario registry is above this module).
pub fn merge_and_write(
    paths: &[PathBuf],
    group_by: &[Field],
    out: Option<&Path>,
    results_root: &Path,
    picture_of: &dyn Fn(&RunRecord) -> Option<Picture>,
) -> Result<Merged> {
    let records = record_files(paths)?
        .into_iter()
        .map(|f| RunRecord::read_json(&f).map(|r| (f, r)))
        .collect::<Result<Vec<_>>>()?;
    let (records, superseded) =
        super::attempt::latest_attempts(records, |r: &RunRecord| r.manifest.test.as_ref());
    let record = merge(&records, group_by)?;
    let dir = match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            dir.to_path_buf()
        }
        None => {
            super::run_dir(&results_root.join(crate::names::sanitize(record.comparison().name())))?
        }
    };
    // The records agree on the scenario (a compared field), so the first one's picture fits.
    let picture = picture_of(&record).or_else(|| picture_of(&records[0].1));
    let outputs = record.write_outputs(&dir, picture.as_ref())?;
    Ok(Merged {
        record,
        sources: records.len(),
        outputs,
        superseded,
    })
}

/// Merges `records` (path, record), in order, into one record named after the first. Fields in
/// `group_by` may differ between records: their values split the variants into columns.
pub(crate) fn merge(records: &[(PathBuf, RunRecord)], group_by: &[Field]) -> Result<RunRecord> {
    let Some((first_path, first)) = records.first() else {
        bail!("no records to merge");
    };
    let base = first.comparison();
    for (path, r) in &records[1..] {
        same_definition(first_path, base, path, r.comparison())?;
    }
    // Which fields differ somewhere: grouped ones rename columns, the others refuse the merge.
    let mut splitting = Vec::new();
    let mut refused = Vec::new();
    for field in Field::ALL {
        let differs = base.variants().iter().find_map(|variant| {
            let want = field.value(&first.manifest, variant);
            records[1..]
                .iter()
                .find(|(_, r)| field.value(&r.manifest, variant) != want)
                .map(|(path, _)| (variant, path))
        });
        match differs {
            Some(_) if group_by.contains(&field) => splitting.push(field),
            Some((variant, path)) => {
                refused.push(format!("{field} (variant {variant}, {})", path.display()))
            }
            None => {}
        }
    }
    if !refused.is_empty() {
        bail!(
            "records differ from {} in manifest field {}, which changes the result; merge records \
             that agree, or group by the field (`--group-by FIELD`)",
            first_path.display(),
            refused.join("; manifest field ")
        );
    }
    // Column name of (record, variant).
    let column = |r: &RunRecord, variant: &str| {
        if splitting.is_empty() {
            return variant.to_string();
        }
        let labels: Vec<String> = splitting
            .iter()
            .map(|f| f.label(&r.manifest, variant))
            .collect();
        format!("{variant} [{}]", labels.join(" "))
    };
    // A group per base column, in order of first appearance: its base, then the other columns
    // of the records whose base column it is.
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (_, r) in records {
        let names: Vec<String> = base.variants().iter().map(|v| column(r, v)).collect();
        match groups.iter_mut().find(|g| g[0] == names[0]) {
            Some(group) => {
                for name in &names[1..] {
                    if !group.contains(name) {
                        group.push(name.clone());
                    }
                }
            }
            None => groups.push(names),
        }
    }
    // Each column must hold one value of every split field, or its boots would mix them.
    let mut values: BTreeMap<String, (Vec<Value>, &Path)> = BTreeMap::new();
    for name in groups.iter().flatten() {
        for (path, r) in records {
            let Some(variant) = base.variants().iter().find(|v| &column(r, v) == name) else {
                continue;
            };
            let these: Vec<Value> = splitting
                .iter()
                .map(|f| f.value(&r.manifest, variant))
                .collect();
            match values.get(name) {
                Some((seen, other)) if seen != &these => bail!(
                    "{} and {}: column {name:?} would hold different values of a grouped field",
                    other.display(),
                    path.display()
                ),
                Some(_) => {}
                None => {
                    values.insert(name.clone(), (these, path));
                }
            }
        }
    }
    // A column in two groups (its records agree on it but not on their base column) would be
    // compared with two bases: refused, naming it.
    for (i, group) in groups.iter().enumerate() {
        if let Some(name) = group
            .iter()
            .find(|n| groups[i + 1..].iter().any(|g| g.contains(n)))
        {
            bail!(
                "column {name:?} would be compared with two base columns ({} and a later one): \
                 its records agree on the grouped fields for it but not for the base",
                group[0]
            );
        }
    }
    let columns: Vec<String> = groups.iter().flatten().cloned().collect();
    let mut definition = Comparison::new(base.name(), columns)?;
    let bases: Vec<String> = groups.iter().map(|g| g[0].clone()).collect();
    definition.set_bases(&bases)?;
    for m in base.metrics() {
        definition.add_metric(&m.name, &m.unit, m.direction, m.magnitude)?;
        definition.set_range(&m.name, m.range)?;
        if m.primary {
            definition.make_primary(&m.name, None)?;
        }
    }
    if splitting.is_empty() {
        definition.set_plan(further_look(records));
    }
    let mut merged = RunRecord::new(definition, merged_manifest(records))?;
    let mut failures = Vec::new();
    for (path, r) in records {
        let source = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        for boot in r.boots() {
            let mut details = boot.details.clone();
            if let Value::Object(map) = &mut details {
                map.insert(SOURCE_KEY.into(), json!(source));
            } else if details.is_null() {
                details = json!({ SOURCE_KEY: source });
            }
            merged
                .record_boot(&column(r, &boot.variant), boot.samples.clone(), details)
                .with_context(|| format!("{}: boots[{}]", path.display(), boot.sequence))?;
        }
        for rejected in &r.rejected {
            let mut rejected = rejected.clone();
            rejected.variant = column(r, &rejected.variant);
            merged.rejected.push(rejected);
        }
        if let Some(f) = &r.failure {
            failures.push(format!("{}: {f}", path.display()));
        }
    }
    if !failures.is_empty() {
        merged.failure = Some(failures.join("; "));
    }
    Ok(merged)
}

/// The plan of records merged one after the other: each record's looks (or, for a fixed count,
/// its one look at all its boots) in the merged order, then one more at all the boots. Each
/// record spent its 1% at its own looks; deciding the merge on the whole 1% at one look again
/// let a comparison re-run while UNKNOWN and merged err in 2.5% of runs (issue V3). Counted
/// as one sequential run's looks, the merge's own look gets its share of one 1%, as a run
/// planned that long from its first boot would have.
fn further_look(records: &[(PathBuf, RunRecord)]) -> Plan {
    let parts: Vec<(Vec<usize>, usize)> = records
        .iter()
        .map(|(_, r)| {
            let per_variant = r
                .comparison()
                .variants()
                .iter()
                .map(|v| r.boots().iter().filter(|b| &b.variant == v).count())
                .filter(|&n| n > 0);
            let n = per_variant.min().unwrap_or(0);
            (r.comparison().plan().looks.clone(), n)
        })
        .collect();
    stacked(&parts)
}

/// The plan of runs stacked in order, each given as (its plan's looks, the boots a side all of
/// its variants reached): [`further_look`]'s, and `lab bench verdicts`' merged rows'.
pub(crate) fn stacked(parts: &[(Vec<usize>, usize)]) -> Plan {
    let mut looks = Vec::new();
    let mut offset = 0;
    for (own, n) in parts {
        let own: Vec<usize> = if own.is_empty() {
            vec![*n]
        } else {
            own.iter().copied().filter(|&t| t <= *n).collect()
        };
        looks.extend(own.into_iter().filter(|&t| t > 0).map(|t| offset + t));
        offset += n;
    }
    if looks.last() != Some(&offset) && offset > 0 {
        looks.push(offset);
    }
    Plan::looks(looks)
}

/// Variants, metric names, units, directions, magnitudes, ranges and primaries must agree.
fn same_definition(a_path: &Path, a: &Comparison, b_path: &Path, b: &Comparison) -> Result<()> {
    let refuse = |field: &str, a_val: String, b_val: String| {
        anyhow::anyhow!(
            "{} and {} differ in comparison.{field} ({a_val} vs {b_val}): not the same comparison",
            a_path.display(),
            b_path.display()
        )
    };
    if a.variants() != b.variants() {
        return Err(refuse(
            "variants",
            a.variants().join(", "),
            b.variants().join(", "),
        ));
    }
    let names =
        |c: &Comparison| -> Vec<String> { c.metrics().iter().map(|m| m.name.clone()).collect() };
    if names(a) != names(b) {
        return Err(refuse("metrics", names(a).join(", "), names(b).join(", ")));
    }
    for (ma, mb) in a.metrics().iter().zip(b.metrics()) {
        let (x, y) = (
            (
                ma.unit.as_str(),
                ma.direction,
                ma.magnitude,
                ma.range,
                ma.primary,
            ),
            (
                mb.unit.as_str(),
                mb.direction,
                mb.magnitude,
                mb.range,
                mb.primary,
            ),
        );
        if x != y {
            return Err(refuse(
                &format!(
                    "metrics[{}] (unit, direction, magnitude, range, primary)",
                    ma.name
                ),
                format!("{x:?}"),
                format!("{y:?}"),
            ));
        }
    }
    Ok(())
}

/// Each manifest field as the records agree on it, or, where they differ (hosts, QEMU builds,
/// repetitions, grouped fields), every record's value with its path.
fn merged_manifest(records: &[(PathBuf, RunRecord)]) -> Manifest {
    let pick = |get: fn(&Manifest) -> &Value| {
        let first = get(&records[0].1.manifest);
        if records.iter().all(|(_, r)| get(&r.manifest) == first) {
            first.clone()
        } else {
            let per: BTreeMap<String, Value> = records
                .iter()
                .map(|(p, r)| (p.display().to_string(), get(&r.manifest).clone()))
                .collect();
            json!({ "merged": per })
        }
    };
    let first_picture = records[0].1.manifest.picture.clone();
    Manifest {
        host: pick(|m| &m.host),
        qemu: pick(|m| &m.qemu),
        accelerator: pick(|m| &m.accelerator),
        kernel: pick(|m| &m.kernel),
        image: pick(|m| &m.image),
        topology: pick(|m| &m.topology),
        parameters: pick(|m| &m.parameters),
        picture: records
            .iter()
            .all(|(_, r)| r.manifest.picture == first_picture)
            .then_some(first_picture)
            .flatten(),
        // A merge is no test attempt.
        test: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(format!("{name}.record.json"))
    }

    #[test]
    fn merged_outputs_go_to_the_directory_given_or_a_new_run_under_the_comparison() {
        let inputs = [fixture("s1-cross-llc-a"), fixture("s1-cross-llc-b")];
        let no_picture = |_: &RunRecord| None;
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("merged");
        let merged = merge_and_write(&inputs, &[], Some(&out), tmp.path(), &no_picture).unwrap();
        assert_eq!(merged.sources, 2);
        assert_eq!(merged.outputs.record, out.join("record.json"));
        assert_eq!(merged.outputs.table, out.join("table.txt"));
        assert_eq!(merged.outputs.html, Some(out.join("record.html")));
        let back = RunRecord::read_json(&merged.outputs.record).unwrap();
        assert_eq!(back, merged.record);
        assert_eq!(
            std::fs::read_to_string(&merged.outputs.table).unwrap(),
            back.comparison().table()
        );
        assert_eq!(
            merged.lines(),
            [
                format!("merged 2 records ({} boots)", back.boots().len()),
                format!("record {}", out.join("record.json").display()),
                format!("table {}", out.join("table.txt").display()),
                format!("report {}", out.join("record.html").display()),
            ]
        );

        // Without --out: a run directory of its own under results/<comparison>/.
        let results = tmp.path().join("results");
        let merged = merge_and_write(&inputs, &[], None, &results, &no_picture).unwrap();
        let dir = merged.outputs.record.parent().unwrap();
        assert_eq!(
            dir.parent().unwrap(),
            results.join(crate::names::sanitize(merged.record.comparison().name()))
        );
        assert!(merged.outputs.table.is_file());
    }

    #[test]
    fn a_merge_is_a_further_look_of_its_records() {
        // Each record's looks in the merged order, then one at all the boots: adaptive runs
        // (5, 7, 9, 10) stack; a fixed count is one look at its boots.
        let adaptive = vec![5, 7, 9, 10];
        assert_eq!(
            stacked(&[(adaptive.clone(), 10), (adaptive.clone(), 10)]).looks,
            [5, 7, 9, 10, 15, 17, 19, 20]
        );
        assert_eq!(stacked(&[(vec![], 20), (vec![], 20)]).looks, [20, 40]);
        // A run stopped before its cap left its later looks unspent.
        assert_eq!(stacked(&[(adaptive, 7), (vec![], 6)]).looks, [5, 7, 13]);
        // The record: 40 boots a side from two fixed runs of 20, 30% of the base's
        // boots and 70% of the variant's at 100, the rest at 0: DIFFERENT on the merge's look.
        let mut c = Comparison::new("modes", ["base", "v"]).unwrap();
        c.add_metric("x", "%", crate::report::Direction::Neutral, 20.0)
            .unwrap();
        c.set_range("x", crate::stats::Range::PERCENT).unwrap();
        c.make_primary("x", None).unwrap();
        for i in 0..40 {
            let high = |share: usize| if i % 10 < share { 100.0 } else { 0.0 };
            c.add_sample("x", "base", high(3)).unwrap();
            c.add_sample("x", "v", high(7)).unwrap();
        }
        c.set_plan(stacked(&[(vec![], 20), (vec![], 20)]));
        let v = c.verdict("x", "v").unwrap();
        assert_eq!(v.decision, crate::stats::Decision::Different, "{v:?}");
        // Merged from two adaptive runs that each reached 20, the merge's look has less of the
        // 1%: the same boots are not enough.
        c.set_plan(stacked(&[
            (vec![5, 7, 9, 14, 19, 20], 20),
            (vec![5, 7, 9, 14, 19, 20], 20),
        ]));
        let v = c.verdict("x", "v").unwrap();
        assert_ne!(v.decision, crate::stats::Decision::Different, "{v:?}");
    }

    #[test]
    fn a_retried_tests_earlier_attempt_is_left_out_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let attempt = |n: u32| crate::report::attempt::TestAttempt {
            run_id: "run-1".into(),
            binary_id: "lab-scenarios::dma_wakeup".into(),
            test: "cross_llc".into(),
            attempt: n,
            total_attempts: 2,
        };
        let mut inputs = Vec::new();
        for (name, n) in [("s1-cross-llc-a", 1), ("s1-cross-llc-b", 2)] {
            let mut record = RunRecord::read_json(&fixture(name)).unwrap();
            record.manifest.test = Some(attempt(n));
            let path = tmp.path().join(format!("{name}.json"));
            std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
            inputs.push(path);
        }
        let only_b = RunRecord::read_json(&inputs[1]).unwrap();
        let out = tmp.path().join("merged");
        let merged = merge_and_write(&inputs, &[], Some(&out), tmp.path(), &|_| None).unwrap();
        assert_eq!(merged.sources, 1);
        assert_eq!(merged.record.boots().len(), only_b.boots().len());
        assert_eq!(merged.superseded.len(), 1);
        assert_eq!(merged.superseded[0].path, inputs[0]);
        assert!(merged
            .lines()
            .last()
            .unwrap()
            .starts_with("RETRIED lab-scenarios::dma_wakeup cross_llc: attempt 1 of 2 left out"));
    }

    /// A fixture's record as if run under `accel`, at a CI shard's path.
    fn under(name: &str, accel: &str) -> (PathBuf, RunRecord) {
        let mut r = RunRecord::read_json(&fixture(name)).unwrap();
        r.manifest.accelerator = json!({ "name": accel });
        (PathBuf::from(format!("results-{accel}/{name}.json")), r)
    }

    #[test]
    fn grouped_by_accelerator_each_group_is_compared_with_its_own_base() {
        // The KVM job's record first, as a sorted list of the jobs' results puts it; its boots
        // differ from the TCG record's, so a TCG column against the KVM base shows other numbers.
        let kvm = under("s1-cross-llc-a", "kvm");
        let tcg = under("s1-cross-llc-b", "tcg-single");
        let base = "v6.12";
        let revert = "v6.12+wake-affine-idle-revert";
        let col = |v: &str, accel: &str| format!("{v} [accelerator={accel}]");
        for (records, first, second) in [
            ([kvm.clone(), tcg.clone()], "kvm", "tcg-single"),
            ([tcg.clone(), kvm.clone()], "tcg-single", "kvm"),
        ] {
            let merged = merge(&records, &[Field::Accelerator]).unwrap();
            let c = merged.comparison();
            assert_eq!(
                c.variants(),
                [
                    col(base, first),
                    col(revert, first),
                    col(base, second),
                    col(revert, second)
                ]
            );
            assert_eq!(c.bases(), [col(base, first), col(base, second)]);
            assert_eq!(c.base_of(&col(revert, second)), col(base, second));
            // Every number of a group's column is that of its own record alone.
            for ((_, alone), accel) in [(&kvm, "kvm"), (&tcg, "tcg-single")] {
                for m in alone.comparison().metrics() {
                    assert_eq!(
                        c.change(&m.name, &col(revert, accel)).ok(),
                        alone.comparison().change(&m.name, revert).ok(),
                        "{} of {accel}",
                        m.name
                    );
                }
            }
            let table = c.table();
            assert!(
                table.contains(&format!("group 1/2: base {}", col(base, first)))
                    && table.contains(&format!("group 2/2: base {}", col(base, second))),
                "{table}"
            );
            // The groups survive the record's JSON.
            let dir = tempfile::tempdir().unwrap();
            let back = RunRecord::read_json(&merged.write_json(dir.path()).unwrap()).unwrap();
            assert_eq!(back.comparison().bases(), c.bases());
        }
        // Without grouping they are refused, naming the field.
        let err = merge(&[kvm, tcg], &[]).unwrap_err().to_string();
        assert!(err.contains("manifest field accelerator"), "{err}");
    }
}
