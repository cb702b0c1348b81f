//! `json = "$.jobs[*].write.iops"`: a metric read from the JSON document a workload prints
//! (fio's `--output-format=json`, `lab-udp-sink`'s line), by a JSONPath query (RFC 9535,
//! `serde_json_path`). A query that can match several values says how they combine: fio's
//! IOPS over its jobs are a `sum`, its worst job's 99th percentile a `max`.

use serde_json::Value;
use serde_json_path::JsonPath;

/// How several matched values make one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Combine {
    Sum,
    Max,
    Min,
    Mean,
}

const COMBINES: [(&str, Combine); 4] = [
    ("sum", Combine::Sum),
    ("max", Combine::Max),
    ("min", Combine::Min),
    ("mean", Combine::Mean),
];

/// A checked `json` source.
#[derive(Debug, Clone)]
pub(super) struct JsonQuery {
    text: String,
    path: JsonPath,
    combine: Option<Combine>,
}

impl PartialEq for JsonQuery {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text && self.combine == other.combine
    }
}

impl JsonQuery {
    /// `query` and `combine` as the file gives them. Errors are `(field, message)`.
    pub(super) fn parse(query: &str, combine: Option<&str>) -> Result<JsonQuery, (String, String)> {
        let path = JsonPath::parse(query).map_err(|e| {
            (
                "json".to_string(),
                format!("{query:?} is not a JSONPath query ($.jobs[0].write.iops): {e}"),
            )
        })?;
        let combine = combine
            .map(|c| super::metrics::lookup(&COMBINES, c))
            .transpose()
            .map_err(|e| ("combine".to_string(), e))?;
        // Wildcards, descendants, slices and filters can match several values.
        let many = query.contains(['*', '?', ':']) || query.contains("..");
        if many && combine.is_none() {
            return Err((
                "combine".into(),
                format!("{query:?} can match several values: say how they make one (combine = \"sum\", \"max\", \"min\" or \"mean\")"),
            ));
        }
        Ok(JsonQuery {
            text: query.to_string(),
            path,
            combine,
        })
    }

    /// Its value in `document`: `Ok(None)` when nothing matched; an error for a match that is
    /// not a number, or several without `combine`.
    pub(super) fn value(&self, document: &Value) -> Result<Option<f64>, String> {
        let nodes = self.path.query(document).all();
        let mut numbers = Vec::with_capacity(nodes.len());
        for node in &nodes {
            let x = node
                .as_f64()
                .ok_or_else(|| format!("{}: the output's {node} is not a number", self.text))?;
            numbers.push(x);
        }
        if numbers.is_empty() {
            return Ok(None);
        }
        Ok(Some(match self.combine {
            None if numbers.len() > 1 => {
                return Err(format!(
                    "{} matched {} values: say how they make one with combine",
                    self.text,
                    numbers.len()
                ))
            }
            None => numbers[0],
            Some(Combine::Sum) => numbers.iter().sum(),
            Some(Combine::Max) => numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Some(Combine::Min) => numbers.iter().copied().fold(f64::INFINITY, f64::min),
            Some(Combine::Mean) => numbers.iter().sum::<f64>() / numbers.len() as f64,
        }))
    }
}

/// Lines that start a JSON document and do not parse, at most, before [`document`] gives up:
/// each attempt may read the rest of the output (up to the guest's 16 MiB), so a guest printing
/// line after line of broken JSON costs the host a bounded time.
const MAX_ATTEMPTS: usize = 32;

/// The first JSON document (an object or array) in a workload's output: from the first line
/// that starts one and parses, whatever the program printed before it or after it.
pub(super) fn document(output: &str) -> Option<Value> {
    let mut offset = 0;
    let mut attempts = 0;
    for line in output.split_inclusive('\n') {
        let start = offset + (line.len() - line.trim_start().len());
        offset += line.len();
        if !line.trim_start().starts_with(['{', '[']) {
            continue;
        }
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return None;
        }
        let mut values = serde_json::Deserializer::from_str(&output[start..]).into_iter::<Value>();
        if let Some(Ok(value)) = values.next() {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIO: &str = r#"fio: note: both iodepth >= 1 and synchronous I/O engine
{
  "fio version" : "fio-3.33",
  "jobs" : [
    { "jobname" : "lab", "write" : { "iops" : 100.5, "total_ios" : 500,
        "clat_ns" : { "percentile" : { "99.000000" : 2000 } } } },
    { "jobname" : "lab", "write" : { "iops" : 99.5, "total_ios" : 498,
        "clat_ns" : { "percentile" : { "99.000000" : 3000 } } } }
  ]
}
"#;

    #[test]
    fn a_query_reads_the_document_after_any_noise_and_combines_its_matches() {
        let doc = document(FIO).unwrap();
        let q = |text: &str, combine: Option<&str>| JsonQuery::parse(text, combine).unwrap();
        let sum = q("$.jobs[*].write.iops", Some("sum"));
        assert_eq!(sum.value(&doc).unwrap(), Some(200.0));
        let worst = q(
            "$.jobs[*].write.clat_ns.percentile['99.000000']",
            Some("max"),
        );
        assert_eq!(worst.value(&doc).unwrap(), Some(3000.0));
        assert_eq!(
            q("$.jobs[1].write.total_ios", None).value(&doc).unwrap(),
            Some(498.0)
        );
        assert_eq!(
            q("$.jobs[*].read.iops", Some("mean")).value(&doc).unwrap(),
            None
        );
        let name = q("$.jobs[0].jobname", None).value(&doc).unwrap_err();
        assert!(name.contains("\"lab\" is not a number"), "{name}");
        let udp = "bound\n{\"received\":1000,\"seconds\":1.5}\n";
        let doc = document(udp).unwrap();
        assert_eq!(q("$.received", None).value(&doc).unwrap(), Some(1000.0));
        assert!(document("no json here\n{ broken").is_none());
        let flood = "{ broken\n".repeat(MAX_ATTEMPTS) + "{\"late\": 1}\n";
        assert!(
            document(&flood).is_none(),
            "gives up after MAX_ATTEMPTS broken starts"
        );
    }

    #[test]
    fn a_query_that_can_match_several_needs_a_combine_and_a_bad_one_is_named() {
        let (field, e) = JsonQuery::parse("$.jobs[*].write.iops", None).unwrap_err();
        assert_eq!(field, "combine");
        assert!(e.contains("can match several values"), "{e}");
        let (field, e) = JsonQuery::parse("jobs.write", None).unwrap_err();
        assert_eq!(field, "json");
        assert!(e.contains("not a JSONPath query"), "{e}");
        let (field, e) = JsonQuery::parse("$.a[*]", Some("total")).unwrap_err();
        assert_eq!(field, "combine");
        assert!(
            e.contains("\"total\" is not one of sum, max, min, mean"),
            "{e}"
        );
    }
}
