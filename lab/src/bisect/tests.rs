use super::steps::probe_name;
use super::*;
use crate::stats::Decision;

fn verdict(decision: Decision, shift: f64) -> Verdict {
    Verdict {
        decision,
        magnitude: 20.0,
        shift,
        interval: None,
        mean_interval: None,
        p: 0.008,
        significant: decision == Decision::Different,
        mann_whitney_p: 0.008,
        ks_p: 0.008,
        n_base: 5,
        n_variant: 5,
        mean_difference: shift,
        same_min_boots: crate::stats::SAME_MIN_BOOTS,
    }
}

fn record(answer: Answer) -> BisectRecord {
    let request = Request::from_arguments(
        "dma-wakeup".into(),
        "v6.12".into(),
        None,
        Some("s".into()),
        None,
    )
    .unwrap();
    let points = (0..=3)
        .map(|k| Point {
            index: k,
            variant: Variant::kernel(&if k == 0 {
                "v6.12".to_string()
            } else {
                probe_name("v6.12", k, 3)
            }),
            change: (k > 0).then(|| Change {
                subject: format!("patch {k}"),
                patch: format!("bisect/0{k}.patch"),
                commit: None,
            }),
            build: None,
        })
        .collect();
    let step = |kind, point, ends: Vec<usize>, class, verdicts: Vec<StepVerdict>| Step {
        kind,
        point,
        ends,
        record: Some(PathBuf::from("steps/x/record.json")),
        verdicts,
        class,
        note: String::new(),
        failed: None,
        unbuilt: false,
        cap: 10,
        boots: 10,
        per_variant: vec![5, 5],
        seconds: 100.0,
    };
    BisectRecord {
        version: RECORD_VERSION,
        request,
        seed: 1,
        metric: "share_on_irq_cpu".into(),
        unit: "%".into(),
        magnitude: None,
        points,
        steps: vec![
            step(
                StepKind::Endpoints,
                3,
                vec![0],
                None,
                vec![StepVerdict {
                    base: 0,
                    variant: 3,
                    verdict: verdict(Decision::Different, 60.0),
                }],
            ),
            step(
                StepKind::Probe,
                2,
                vec![0, 3],
                Some(Class::BadLike),
                vec![
                    StepVerdict {
                        base: 0,
                        variant: 2,
                        verdict: verdict(Decision::Different, 59.0),
                    },
                    StepVerdict {
                        base: 3,
                        variant: 2,
                        verdict: verdict(Decision::Same, -1.0),
                    },
                ],
            ),
        ],
        answer: Some(answer),
        failure: None,
        seconds: 300.0,
    }
}

#[test]
fn steps_after_the_endpoints_keep_their_magnitude_in_units() {
    let mut r = record(Answer::Found(Findings::default()));
    // 40% of each step's base would follow the probe; the endpoints' 20.0 (of good) stays.
    r.magnitude = Some(Magnitude::relative(0.4));
    assert_eq!(r.step_magnitude(), Some(Magnitude::Absolute(20.0)));
    // Before the endpoints ran: the request's (or the scenario's) own.
    r.steps.clear();
    assert_eq!(r.step_magnitude(), Some(Magnitude::relative(0.4)));
    r.magnitude = None;
    assert_eq!(r.step_magnitude(), None);
}

#[test]
fn the_log_says_each_step_and_the_answer() {
    let culprit = Culprit {
        point: 2,
        verdict: Some(verdict(Decision::Different, 57.0)),
        share: Share::of(
            &verdict(Decision::Different, 57.0),
            &verdict(Decision::Different, 60.0),
        ),
        note: String::new(),
    };
    let log = record(Answer::Found(Findings {
        culprits: vec![culprit],
        ..Findings::default()
    }))
    .log();
    assert!(
        log.contains("v6.12 (good) .. v6.12+3of3 (bad), 3 changes"),
        "{log}"
    );
    assert!(
        log.contains("step  1  endpoints: vs good DIFFERENT +60.0pp p=0.008 (5v5)"),
        "{log}"
    );
    assert!(
        log.contains(
            "probe 2/3 \"patch 2\": vs good DIFFERENT +59.0pp p=0.008 (5v5), vs bad SAME -1.0pp"
        ),
        "{log}"
    );
    assert!(log.contains("-> bad-like  [5+5 boots, 100 s]"), "{log}");
    assert!(
        log.contains("culprit: 2/3 \"patch 2\" (v6.12+2of3): accounts for 95% of the change"),
        "{log}"
    );
    // Two steps of two and three variants at a fixed 10: 20 + 30.
    assert!(
        log.contains("boots: 20 (40% of the 50 a fixed 10 per variant would boot)"),
        "{log}"
    );
    let nothing = record(Answer::NothingToBisect {
        verdict: verdict(Decision::Same, 1.0),
    })
    .log();
    assert!(
        nothing.contains("nothing to bisect: good and bad are SAME on share_on_irq_cpu"),
        "{nothing}"
    );
    let range = record(Answer::Found(Findings {
        range: Some((0, 2)),
        ..Findings::default()
    }))
    .log();
    assert!(range.contains("the change is in one of 2"), "{range}");
    assert!(
        range.contains("1/3 \"patch 1\"\n    2/3 \"patch 2\""),
        "{range}"
    );
}

#[test]
fn a_record_reads_back_and_the_page_shows_each_step() {
    let dir = tempfile::tempdir().unwrap();
    let r = record(Answer::Found(Findings {
        range: Some((0, 2)),
        ..Findings::default()
    }));
    r.write(dir.path()).unwrap();
    let back = BisectRecord::read(dir.path()).unwrap();
    assert_eq!(back.log(), r.log());
    assert_eq!(
        find_records(&[dir.path().to_path_buf()]),
        vec![dir.path().to_path_buf()]
    );
    // The steps' own records are missing here: the rows stand without their dots.
    let page = page::render(&r, dir.path());
    assert_eq!(page.matches("<svg").count(), 2);
    assert!(page.contains("the change is in points 1..=2"), "{page}");
    let err = BisectRecord::read(&dir.path().join("none")).unwrap_err();
    assert!(format!("{err:#}").contains("is "), "{err:#}");
}

#[test]
fn arguments_name_what_is_missing() {
    let err = Request::from_arguments("s".into(), "v6.12".into(), None, None, None).unwrap_err();
    assert!(
        err.to_string()
            .contains("give --bad VARIANT, --series FILE"),
        "{err}"
    );
    let err =
        Request::from_arguments("s".into(), "a".into(), None, None, Some("r".into())).unwrap_err();
    assert!(
        err.to_string().contains("--git-recipe needs --bad REF"),
        "{err}"
    );
    let git = Request::from_arguments(
        "s".into(),
        "v1".into(),
        Some("v2".into()),
        None,
        Some("linux".into()),
    )
    .unwrap();
    assert_eq!(
        git.changes,
        Changes::Git {
            recipe: "linux".into(),
            good: "v1".into(),
            bad: "v2".into()
        }
    );
    assert_eq!(probe_name(&"x".repeat(70), 3, 12).len(), 64);
}
