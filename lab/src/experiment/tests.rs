use super::*;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Placement {
    CrossLlc,
    SameLlc,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Inner {
    polled: bool,
    channel: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Params {
    placement: Placement,
    start_cpu: u32,
    inner: Inner,
}

fn params() -> Params {
    Params {
        placement: Placement::CrossLlc,
        start_cpu: 0,
        inner: Inner {
            polled: false,
            channel: "dma0chan0".into(),
        },
    }
}

fn set(pairs: &[(&str, &str)]) -> Result<Params> {
    let map = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    apply_overrides(&params(), &map)
}

#[test]
fn overrides_reach_typed_and_nested_fields() {
    let p = set(&[
        ("placement", "same-llc"),
        ("start_cpu", "6"),
        ("inner.polled", "true"),
        // Looks like a number, is a string field: taken as the string.
        ("inner.channel", "7"),
    ])
    .unwrap();
    assert_eq!(p.placement, Placement::SameLlc);
    assert_eq!(p.start_cpu, 6);
    assert!(p.inner.polled);
    assert_eq!(p.inner.channel, "7");
    assert_eq!(set(&[]).unwrap(), params());
}

#[test]
fn bad_overrides_name_the_parameter() {
    let err = |pairs: &[(&str, &str)]| format!("{:#}", set(pairs).unwrap_err());
    let e = err(&[("placment", "same-llc")]);
    assert!(
        e.contains("no parameter \"placment\"") && e.contains("placement, start_cpu"),
        "{e}"
    );
    let e = err(&[("inner.poled", "true")]);
    assert!(e.contains("parameters of inner: channel, polled"), "{e}");
    let e = err(&[("placement", "far-away")]);
    assert!(
        e.contains("placement = \"far-away\"") && e.contains("unknown variant"),
        "{e}"
    );
    let e = err(&[("start_cpu", "-1")]);
    assert!(e.contains("start_cpu"), "{e}");
    let e = err(&[("start_cpu.x", "1")]);
    assert!(e.contains("is a value, not a table"), "{e}");
}
