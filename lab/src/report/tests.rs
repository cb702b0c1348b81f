use super::*;
use crate::stats::{Decision, Magnitude, Range};
use serde_json::json;

const BASE: &str = "v6.12";
const REVERT: &str = "v6.12+wake-affine-idle-revert";

/// S1's shape: the share decided, the migrations shown.
fn seed_like() -> Comparison {
    let mut c = Comparison::new("dmatest-cross-llc", [BASE, REVERT]).unwrap();
    c.add_metric(
        "cross_llc_migrations",
        "per 100",
        Direction::LowerIsBetter,
        1.0,
    )
    .unwrap()
    .add_metric("share_on_irq_cpu", "%", Direction::Neutral, 20.0)
    .unwrap();
    c.set_range("share_on_irq_cpu", Range::PERCENT).unwrap();
    c.make_primary("share_on_irq_cpu", None).unwrap();
    for (b, r) in [
        (4.0, 91.0),
        (0.5, 92.0),
        (10.0, 88.5),
        (5.5, 90.0),
        (1.0, 97.0),
    ] {
        c.add_sample("share_on_irq_cpu", BASE, b).unwrap();
        c.add_sample("share_on_irq_cpu", REVERT, r).unwrap();
    }
    for (b, r) in [
        (12.0, 11.0),
        (14.0, 15.5),
        (13.0, 12.0),
        (11.5, 13.0),
        (12.5, 12.5),
    ] {
        c.add_sample("cross_llc_migrations", BASE, b).unwrap();
        c.add_sample("cross_llc_migrations", REVERT, r).unwrap();
    }
    c
}

/// The flow the S1 scenario used before the experiment runner: samples added to the
/// comparison per boot, then the record built from that comparison and every boot recorded
/// again, so the stored record held each sample twice. Now a record starts empty, and a
/// stored record whose table disagrees with its boots is refused.
#[test]
fn record_holds_exactly_one_sample_per_boot() {
    let definition = || {
        let mut c = Comparison::new("c", ["a", "b"]).unwrap();
        c.add_metric("m", "", Direction::Neutral, 0.0).unwrap();
        c
    };
    let boots = [("a", 1.0), ("b", 2.0), ("b", 3.0), ("a", 4.0)];
    let mut filled = definition();
    for (variant, value) in boots {
        filled.add_sample("m", variant, value).unwrap();
    }
    assert!(RunRecord::new(filled, Manifest::default()).is_err());
    let mut record = RunRecord::new(definition(), Manifest::default()).unwrap();
    for (variant, value) in boots {
        record
            .record_boot(variant, [("m", value)], Value::Null)
            .unwrap();
    }
    let text = serde_json::to_string(&record).unwrap();
    let stored: RunRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(stored.comparison().samples("m", "a").unwrap(), &[1.0, 4.0]);
    assert_eq!(stored.comparison().samples("m", "b").unwrap(), &[2.0, 3.0]);
    // A record written by the old flow (each sample twice in the table) is refused on read.
    let mut doubled: Value = serde_json::from_str(&text).unwrap();
    let samples = &mut doubled["comparison"]["metrics"][0]["samples"]["a"];
    *samples = json!([1.0, 4.0, 1.0, 4.0]);
    let err = serde_json::from_value::<RunRecord>(doubled)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("holds 4 samples but the boots give 2"),
        "{err}"
    );
}

/// Checked by hand: the 25 differences revert - base sorted run 78.5, 80, 81, 82, 83, ...,
/// 91.5, 93, 96, 96.5; the shift is the 13th (87.5); the 95% interval takes the 3rd and 23rd
/// (81, 93; a share's, so shown in points, not as 1928.6% and 2214.3% of the base mean 4.2;
/// P(U <= 2) = 4/252 <= 0.025). The
/// means: 4.2 and 91.7, variances 14.825 and 10.45, Welch's se 2.248 with 7.77 degrees of
/// freedom, t = 2.316: 87.5 +- 5.21. The migrations' rank sums are exactly the expected
/// 27.5: p = 1.
#[test]
fn table_golden() {
    let table = seed_like().table();
    let want = "\
comparison: dmatest-cross-llc

primary: share_on_irq_cpu (%), smallest change that matters 20.00 pp
  v6.12+wake-affine-idle-revert  DIFFERENT  shift +87.50 pp, 95% interval [+81.00, +93.00] pp, means differ by +87.50 [+81.97, +93.03] pp, magnitude 20.00 pp, p=0.008 (looks and decisions counted; Mann-Whitney 0.008, KS 0.008), n=5/5

     v6.12        v6.12+wake-affine-idle-revert
---------------- -------------------------------
         %stddev  %change                %stddev
            \\        |                      \\
      4.20 ± 92%    +87.5pp          91.70 ±  4%  share_on_irq_cpu (%)            DIFFERENT p=0.008 [+81.0pp, +93.0pp]  n=5/5
     12.60 ±  8%      +1.6%          12.80 ± 13%  cross_llc_migrations (per 100)  p=1.000 adj=1.000 [-15.9%, +23.8%]  n=5/5

primary: DIFFERENT when p (the larger of the exact Mann-Whitney's and Welch's, adjusted for every look and primary decision) <= 0.01 and the shift (or, where only they moved, the means) exceeds the magnitude; SAME after 9 or more boots a side (more where the magnitude is small against a bounded range: 19 at 10 points of a share, 39 at 5) when the 95% intervals of the shift and of the means lie inside ±magnitude; otherwise UNKNOWN
* p<0.05, ** p<0.01 after Holm's adjustment over the 1 secondary comparisons (adj), with the shift beyond the metric's magnitude
p: Mann-Whitney, exact; [..]: 95% distribution-free interval of the shift (Hodges-Lehmann), in % of the base mean (a share's change and interval in points, pp), inside the metric's range; n: boots per variant, base first
";
    assert_eq!(table, want, "got:\n{table}");
}

fn label_column(line: &str, label: &str) -> usize {
    line.split(label).next().unwrap().chars().count()
}

#[test]
fn alignment_holds_with_long_variant_names() {
    let long = "v6.12+wake-affine-idle-revert+and-a-rather-long-suffix-for-testing";
    let mut c = Comparison::new("wide", [BASE, long, "x"]).unwrap();
    c.add_metric("share", "%", Direction::HigherIsBetter, 2.0)
        .unwrap();
    c.add_metric("iops", "", Direction::HigherIsBetter, 0.0)
        .unwrap();
    c.add_metric("empty", "ms", Direction::Neutral, 0.0)
        .unwrap();
    for i in 0..5 {
        let i = f64::from(i);
        c.add_sample("share", BASE, 4.0 + i).unwrap();
        c.add_sample("share", long, 90.0 + i).unwrap();
        c.add_sample("share", "x", 5.0 + i).unwrap();
        c.add_sample("iops", BASE, 1.0e6 + i).unwrap();
        c.add_sample("iops", long, 123_456_789.0 * (1.0 + i))
            .unwrap();
    }
    c.add_sample("iops", "x", 7.0).unwrap();
    let table = c.table();
    let lines: Vec<&str> = table.lines().collect();
    let header = lines[2];
    let dashes = lines[3];
    let groups: Vec<usize> = dashes.split(' ').map(str::len).collect();
    assert_eq!(groups.len(), 3, "{table}");
    assert_eq!(
        groups[1],
        long.len(),
        "the long name sets its column's width:\n{table}"
    );
    assert!(header.contains(long) && header.contains(BASE));
    let dash_width = dashes.chars().count();
    for (row, label) in lines[6..9].iter().zip(["share (%)", "iops", "empty (ms)"]) {
        assert_eq!(
            label_column(row, label),
            dash_width + 2,
            "{label}:\n{table}"
        );
    }
    // Each group's last "%" column of the rows with a stddev sits at its group's end.
    let ends: Vec<usize> = groups
        .iter()
        .scan(0, |at, g| {
            *at += g + 1;
            Some(*at - 2)
        })
        .collect();
    let share: Vec<char> = lines[6].chars().collect();
    assert_eq!(share[ends[0]], '%', "{table}");
    assert_eq!(share[ends[1]], '%', "{table}");
    assert_eq!(share[ends[2]], '%', "{table}");
    // Apart at 5 vs 5 (p=0.008); four secondary comparisons with a p: Holm multiplies the
    // smallest by 4, so nothing reaches 0.01 and the mark is a single star.
    assert!(lines[6].contains("+1433.3% *"), "{table}");
    assert!(lines[6].contains("adj=0.032"), "{table}");
    assert!(lines[6].contains("better"), "{table}");
    assert!(lines[6].ends_with("n=5/5/5"), "{table}");
    assert!(lines[7].ends_with("n=5/5/1"), "{table}");
    assert!(lines[7].contains("3.704e8"), "{table}");
    assert!(lines[8].ends_with("p=n/a  p=n/a  n=0/0/0"), "{table}");
}

#[test]
fn secondary_marks_come_from_adjusted_p_values() {
    // Two variants, four metrics, every one apart at 5 vs 5 (raw p = 2/252 = 0.0079).
    let mut c = Comparison::new("many", ["a", "b", "c"]).unwrap();
    for name in ["m1", "m2"] {
        c.add_metric(name, "", Direction::Neutral, 0.0).unwrap();
        for i in 0..5 {
            let i = f64::from(i);
            c.add_sample(name, "a", i).unwrap();
            c.add_sample(name, "b", 10.0 + i).unwrap();
            c.add_sample(name, "c", 20.0 + i).unwrap();
        }
    }
    let rows = c.rows();
    let adjusted: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.others.iter().map(|o| o.adjusted_p.unwrap()))
        .collect();
    // Holm by hand: four equal p of 2/252: 4p, then max(4p, 3p), ...: all 4p = 0.0317.
    for a in &adjusted {
        assert!((a - 8.0 / 252.0).abs() < 1e-12, "{adjusted:?}");
    }
    assert!(rows.iter().flat_map(|r| &r.others).all(|o| o.marker == "*"));
    // A primary is not in the family: making m1 primary leaves two secondary p-values.
    c.make_primary("m1", Some(Magnitude::Absolute(1.0)))
        .unwrap();
    let rows = c.rows();
    assert!(rows[0].metric.primary);
    assert!(rows[0].others.iter().all(|o| o.adjusted_p.is_none()));
    for o in &rows[1].others {
        assert!((o.adjusted_p.unwrap() - 4.0 / 252.0).abs() < 1e-12);
    }
}

#[test]
fn json_round_trip_and_atomic_write() {
    let c = seed_like();
    let dir = tempfile::tempdir().unwrap();
    let path = c.write_json(dir.path()).unwrap();
    assert_eq!(path, dir.path().join("dmatest-cross-llc.json"));
    assert_eq!(Comparison::read_json(&path).unwrap(), c);
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "temporary file left behind");

    let mut fresh = Comparison::new("a/../b c", [BASE, REVERT]).unwrap();
    fresh
        .add_metric("share_on_irq_cpu", "%", Direction::Neutral, 2.0)
        .unwrap();
    let manifest = Manifest {
        host: json!({"cpu": "Intel(R) Xeon(R)", "cores": 2}),
        accelerator: json!("tcg"),
        kernel: json!({BASE: "sha256:aa", REVERT: "sha256:bb"}),
        ..Manifest::default()
    };
    let mut run = RunRecord::new(fresh, manifest).unwrap();
    run.record_boot(BASE, [("share_on_irq_cpu", 4.5)], Value::Null)
        .unwrap();
    run.record_boot(
        REVERT,
        [("share_on_irq_cpu", 91.0)],
        json!({"trace": "boot1.txt"}),
    )
    .unwrap();
    run.rejected.push(RejectedBoot {
        variant: BASE.into(),
        cause: "kernel log: WARNING: CPU: 1 PID: 7 at kernel/sched/fair.c:1".into(),
        dir: "boots/02-v6.12".into(),
    });
    let path = run.write_json(dir.path()).unwrap();
    assert_eq!(path, dir.path().join("a_.._b_c.json"));
    let back = RunRecord::read_json(&path).unwrap();
    assert_eq!(back, run);
    assert_eq!(back.boots()[1].sequence, 1);
    assert_eq!(
        back.comparison()
            .samples("share_on_irq_cpu", REVERT)
            .unwrap(),
        [91.0]
    );
    // Overwriting replaces the file in one step.
    run.record_boot(BASE, [("share_on_irq_cpu", 5.0)], Value::Null)
        .unwrap();
    run.write_json(dir.path()).unwrap();
    assert_eq!(RunRecord::read_json(&path).unwrap().boots().len(), 3);
    assert_eq!(file_stem(".hidden"), "_.hidden");
    assert_eq!(file_stem(""), "_");
}

#[test]
fn json_input_is_validated() {
    let bad_variant = json!({
        "name": "x", "variants": ["a", "b"],
        "metrics": [{"name": "m", "direction": "neutral", "magnitude": 0.0,
                     "samples": {"c": [1.0]}}]
    });
    let err = serde_json::from_value::<Comparison>(bad_variant).unwrap_err();
    assert!(err.to_string().contains("unknown variant \"c\""), "{err}");
    let bad_magnitude = json!({
        "name": "x", "variants": ["a"],
        "metrics": [{"name": "m", "direction": "neutral", "magnitude": -1.0}]
    });
    let err = serde_json::from_value::<Comparison>(bad_magnitude).unwrap_err();
    assert!(err.to_string().contains("magnitude -1"), "{err}");
    let no_variants = json!({"name": "x", "variants": []});
    assert!(serde_json::from_value::<Comparison>(no_variants).is_err());
    let dir = tempfile::tempdir().unwrap();
    let err = Comparison::read_json(&dir.path().join("missing.json")).unwrap_err();
    assert!(format!("{err:#}").contains("missing.json"), "{err:#}");
}

#[test]
fn records_from_before_verdicts_still_read() {
    // Schema 2 called the magnitude the noise floor and had no ranges or primaries.
    let old = json!({
        "name": "x", "variants": ["a", "b"],
        "metrics": [{"name": "m", "unit": "%", "direction": "neutral", "noise_floor": 5.0,
                     "samples": {"a": [1.0], "b": [2.0]}}]
    });
    let c: Comparison = serde_json::from_value(old).unwrap();
    let m = c.metric("m").unwrap();
    assert_eq!(m.magnitude, Magnitude::Absolute(5.0));
    assert!(!m.primary);
    assert!(m.range.is_any());
    // A relative magnitude and a range are kept.
    let mut c = Comparison::new("y", ["a", "b"]).unwrap();
    c.add_metric("m", "", Direction::Neutral, Magnitude::relative(0.25))
        .unwrap();
    c.set_range("m", Range::NON_NEGATIVE).unwrap();
    c.make_primary("m", None).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains(r#""magnitude":{"relative":0.25}"#), "{text}");
    assert_eq!(serde_json::from_str::<Comparison>(&text).unwrap(), c);
}

#[test]
fn assertions_decide_on_primaries_and_carry_the_table() {
    let c = seed_like();
    let v = c.assert_different("share_on_irq_cpu", REVERT).unwrap();
    assert_eq!(v.decision, Decision::Different);
    c.assert_higher("share_on_irq_cpu", REVERT).unwrap();
    let err = c
        .assert_lower("share_on_irq_cpu", REVERT)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&c.table()), "{err}");
    assert!(err.starts_with("share_on_irq_cpu: expected"), "{err}");
    assert!(
        err.contains("DIFFERENT and lower") && err.contains("got DIFFERENT"),
        "{err}"
    );
    let err = c
        .assert_same("share_on_irq_cpu", REVERT)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected") && err.contains("SAME"), "{err}");
    // A secondary metric is shown, not asserted.
    let err = c
        .assert_same("cross_llc_migrations", REVERT)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a primary metric"), "{err}");
    let err = c.assert_different("nope", REVERT).unwrap_err().to_string();
    assert!(
        err.contains("unknown metric \"nope\"") && err.contains(&c.table()),
        "{err}"
    );
}

#[test]
fn bisect_exit_codes_follow_the_primary_verdicts() {
    // DIFFERENT: 1.
    assert_eq!(seed_like().bisect_exit_code(), 1);
    let two = |base: &[f64], variant: &[f64]| {
        let mut c = Comparison::new("codes", [BASE, REVERT]).unwrap();
        c.add_metric("share", "%", Direction::Neutral, 20.0)
            .unwrap();
        c.make_primary("share", None).unwrap();
        for (&b, &r) in base.iter().zip(variant) {
            c.add_sample("share", BASE, b).unwrap();
            c.add_sample("share", REVERT, r).unwrap();
        }
        c
    };
    // SAME (9 boots a side, the fewest SAME takes): 0.
    let same = two(
        &[50.0, 51.0, 49.0, 50.5, 49.5, 50.1, 49.9, 50.3, 49.6],
        &[50.2, 50.8, 49.1, 50.4, 49.7, 50.0, 49.8, 50.6, 49.4],
    );
    assert_eq!(
        same.verdict("share", REVERT).unwrap().decision,
        Decision::Same
    );
    assert_eq!(same.bisect_exit_code(), 0);
    // UNKNOWN (four boots a side cannot be DIFFERENT): 125.
    let unknown = two(&[1.0, 2.0, 3.0, 4.0], &[90.0, 91.0, 92.0, 93.0]);
    assert_eq!(unknown.bisect_exit_code(), BISECT_SKIP);
    // No samples, so no verdict: 125; no primary metric at all: 125.
    assert_eq!(two(&[], &[]).bisect_exit_code(), BISECT_SKIP);
    let mut none = Comparison::new("none", [BASE, REVERT]).unwrap();
    none.add_metric("share", "%", Direction::Neutral, 20.0)
        .unwrap();
    assert_eq!(none.bisect_exit_code(), BISECT_SKIP);
}

#[test]
fn unknown_at_the_cap_fails_with_its_numbers() {
    // Four boots a side cannot reach p <= 0.01: a test that expects DIFFERENT fails with
    // "UNKNOWN after 8 boots" and the numbers, never passes.
    let mut c = Comparison::new("few", [BASE, REVERT]).unwrap();
    c.add_metric("share", "%", Direction::Neutral, 20.0)
        .unwrap();
    c.make_primary("share", None).unwrap();
    for (b, r) in [(1.0, 90.0), (2.0, 91.0), (3.0, 92.0), (4.0, 93.0)] {
        c.add_sample("share", BASE, b).unwrap();
        c.add_sample("share", REVERT, r).unwrap();
    }
    let err = c.assert_higher("share", REVERT).unwrap_err().to_string();
    assert!(err.contains("got UNKNOWN after 8 boots (4/4)"), "{err}");
    assert!(err.contains("p=0.029"), "{err}");
    assert!(err.contains("magnitude 20.00 pp"), "{err}");
    // A scattered pair cannot be SAME either.
    let mut c = Comparison::new("scattered", [BASE, REVERT]).unwrap();
    c.add_metric("share", "%", Direction::Neutral, 10.0)
        .unwrap();
    c.make_primary("share", None).unwrap();
    for (b, r) in [(0.0, 90.0), (90.0, 0.0), (45.0, 40.0), (10.0, 60.0)] {
        c.add_sample("share", BASE, b).unwrap();
        c.add_sample("share", REVERT, r).unwrap();
    }
    let err = c.assert_same("share", REVERT).unwrap_err().to_string();
    assert!(err.contains("got UNKNOWN after 8 boots (4/4)"), "{err}");
}

#[test]
fn degenerate_samples_never_panic() {
    let mut c = Comparison::new("degenerate", [BASE, REVERT]).unwrap();
    c.add_metric("flat", "", Direction::Neutral, 0.5).unwrap();
    c.add_metric("zero", "", Direction::HigherIsBetter, 0.0)
        .unwrap();
    c.add_metric("single", "", Direction::Neutral, 0.0).unwrap();
    c.add_metric("none", "", Direction::Neutral, 0.0).unwrap();
    for name in ["flat", "none"] {
        c.make_primary(name, None).unwrap();
    }
    for _ in 0..crate::stats::SAME_MIN_BOOTS {
        c.add_sample("flat", BASE, 7.0).unwrap();
        c.add_sample("flat", REVERT, 7.0).unwrap();
        c.add_sample("zero", BASE, 0.0).unwrap();
        c.add_sample("zero", REVERT, 1.0).unwrap();
    }
    c.add_sample("single", BASE, 1.0).unwrap();
    c.add_sample("single", REVERT, 2.0).unwrap();
    let table = c.table();
    assert!(table.contains("flat"), "{table}");
    assert_eq!(c.verdict("flat", REVERT).unwrap().decision, Decision::Same);
    c.assert_same("flat", REVERT).unwrap();
    // Base mean 0: no %change, but the verdict still works on the shift.
    assert!(table.contains("n/a"), "{table}");
    assert!(
        table.contains("no verdict: a side has no samples"),
        "{table}"
    );
    assert_eq!(c.summary("single", BASE).unwrap().stddev, None);
    assert!(matches!(
        c.summary("none", BASE),
        Err(ReportError::Stats {
            source: StatsError::Empty,
            ..
        })
    ));
    let err = c.assert_higher("none", REVERT).unwrap_err();
    assert!(err.to_string().contains("no samples"), "{err}");

    assert!(matches!(
        c.add_sample("flat", BASE, f64::NAN),
        Err(ReportError::NonFiniteSample { .. })
    ));
    assert!(matches!(
        c.add_sample("flat", "v7", 1.0),
        Err(ReportError::UnknownVariant { .. })
    ));
    assert!(matches!(
        c.add_metric("flat", "", Direction::Neutral, 0.0),
        Err(ReportError::DuplicateMetric { .. })
    ));
    assert!(matches!(
        c.add_metric("inf", "", Direction::Neutral, f64::INFINITY),
        Err(ReportError::BadMagnitude { .. })
    ));
    assert_eq!(
        c.samples("flat", BASE).unwrap().len(),
        crate::stats::SAME_MIN_BOOTS
    );

    assert!(matches!(
        Comparison::new("x", Vec::<String>::new()),
        Err(ReportError::NoVariants { .. })
    ));
    assert!(matches!(
        Comparison::new("x", ["a", "a"]),
        Err(ReportError::DuplicateVariant { .. })
    ));
    assert!(matches!(
        Comparison::new(" ", ["a"]),
        Err(ReportError::EmptyName)
    ));
    let lonely = Comparison::new("lonely", ["only"]).unwrap();
    assert!(lonely.table().contains("(no metrics)"));

    let run = RunRecord::new(c.clone(), Manifest::default());
    assert!(
        matches!(run, Err(ReportError::DefinitionHasSamples { .. })),
        "{run:?}"
    );
    let mut definition = Comparison::new(c.name(), c.variants().to_vec()).unwrap();
    for m in c.metrics() {
        definition
            .add_metric(&m.name, &m.unit, m.direction, m.magnitude)
            .unwrap();
    }
    let mut run = RunRecord::new(definition, Manifest::default()).unwrap();
    let err = run
        .record_boot(BASE, [("flat", 1.0), ("zero", f64::NAN)], Value::Null)
        .unwrap_err();
    assert!(matches!(err, ReportError::NonFiniteSample { .. }));
    assert!(
        run.comparison().samples("flat", BASE).unwrap().is_empty(),
        "partial add"
    );
    assert!(run.boots().is_empty());
    assert!(matches!(
        run.record_boot(BASE, [("flat", 1.0), ("flat", 2.0)], Value::Null),
        Err(ReportError::DuplicateBootSample { .. })
    ));
}

#[test]
fn direction_words() {
    assert_eq!(Direction::HigherIsBetter.judge(3.0), Some("better"));
    assert_eq!(Direction::HigherIsBetter.judge(-3.0), Some("worse"));
    assert_eq!(Direction::LowerIsBetter.judge(-1.0), Some("better"));
    assert_eq!(Direction::Neutral.judge(2.0), None);
    assert_eq!(Direction::LowerIsBetter.judge(0.0), None);
}
