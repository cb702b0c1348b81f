//! Skipped parts in nextest's JUnit report. A test that could not run one of its parts here
//! (no KVM, a missing host tool: [`crate::skip`]) passes with a `MARKER` line in its output;
//! nextest has no way for a running test to call itself skipped, so its JUnit report would
//! count it as a plain pass. `mark_skips` rewrites the report so each such test carries a
//! `<skipped>` element naming what did not run, and the suites' `skipped` counts include it:
//! CI's test views then show it as skipped. A test that failed keeps its failure.
//!
//! The rewrite inserts text at positions roxmltree reports instead of re-serialising the
//! document, so everything else in the report stays byte for byte as nextest wrote it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// How a skipped part's line starts (`LAB-SKIP <test>: <part>: <why>`), as
/// [`crate::skip`] prints it.
pub(crate) const MARKER: &str = "LAB-SKIP";

/// One test with skipped parts: its suite (binary), name and the marker lines it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkippedTest {
    pub suite: String,
    pub name: String,
    pub lines: Vec<String>,
}

/// A JUnit file with its skipped parts marked, and the tests marked in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkedFile {
    pub(crate) path: PathBuf,
    pub(crate) tests: Vec<SkippedTest>,
}

/// What `lab report junit-skips` and `lab test` print: the count, then each test's marker lines
/// under its suite.
impl std::fmt::Display for MarkedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {} test(s) with skipped parts marked skipped",
            self.path.display(),
            self.tests.len()
        )?;
        for test in &self.tests {
            for line in &test.lines {
                writeln!(f, "  {}: {line}", test.suite)?;
            }
        }
        Ok(())
    }
}

/// Rewrites the JUnit file at `path` in place (see the module doc) and returns the tests it
/// marked. A report already marked is left as it is.
pub fn mark_skips_in_file(path: &Path) -> Result<MarkedFile> {
    let xml =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (rewritten, skipped) =
        mark_skips(&xml).with_context(|| format!("{}: not a JUnit report", path.display()))?;
    if rewritten != xml {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::io::Write::write_all(&mut tmp, rewritten.as_bytes())?;
        // The report keeps its mode (a temporary file is created 0600).
        tmp.as_file()
            .set_permissions(std::fs::metadata(path)?.permissions())?;
        tmp.persist(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(MarkedFile {
        path: path.to_path_buf(),
        tests: skipped,
    })
}

/// The report with a `<skipped message="...">` element in every passed test whose output has
/// [`MARKER`] lines, and the `skipped` counts of its suites and of the whole run raised.
pub(crate) fn mark_skips(xml: &str) -> Result<(String, Vec<SkippedTest>)> {
    let doc = parse(xml)?;
    let root = doc.root_element();
    // (byte range, replacement): insertions are empty ranges; applied back to front.
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let mut skipped = Vec::new();
    for suite in root.children().filter(|n| n.has_tag_name("testsuite")) {
        let mut marked_here = 0;
        for case in suite.children().filter(|n| n.has_tag_name("testcase")) {
            let elements: Vec<_> = case.children().filter(|n| n.is_element()).collect();
            let judged = elements.iter().any(|n| {
                matches!(
                    n.tag_name().name(),
                    "skipped" | "failure" | "error" | "flakyFailure" | "rerunFailure"
                )
            });
            if judged {
                continue;
            }
            let lines: Vec<String> = elements
                .iter()
                .filter(|n| n.has_tag_name("system-out") || n.has_tag_name("system-err"))
                .filter_map(|n| n.text())
                .flat_map(|text| text.lines())
                .filter_map(|line| line.find(MARKER).map(|at| line[at..].trim().to_string()))
                .fold(Vec::new(), |mut seen, line| {
                    // The same line is printed on stdout and stderr.
                    if !seen.contains(&line) {
                        seen.push(line);
                    }
                    seen
                });
            let Some(first_child) = elements.first() else {
                continue;
            };
            if lines.is_empty() {
                continue;
            }
            let message = format!(
                "passed what ran; skipped here: {}",
                lines
                    .iter()
                    .map(|l| l.trim_start_matches(MARKER).trim())
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            let at = first_child.range().start;
            edits.push((
                at..at,
                format!("<skipped message=\"{}\"/>\n            ", escape(&message)),
            ));
            marked_here += 1;
            skipped.push(SkippedTest {
                suite: suite.attribute("name").unwrap_or("").to_string(),
                name: case.attribute("name").unwrap_or("").to_string(),
                lines,
            });
        }
        if marked_here > 0 {
            edits.push(raise_count(suite, marked_here)?);
        }
    }
    if !skipped.is_empty() {
        edits.push(raise_count(root, skipped.len())?);
    }
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = xml.to_string();
    for (range, text) in edits {
        out.replace_range(range, &text);
    }
    Ok((out, skipped))
}

/// A nextest JUnit report: an XML document whose root is `<testsuites>`.
pub(crate) fn parse(xml: &str) -> Result<roxmltree::Document<'_>> {
    let doc = roxmltree::Document::parse(xml).context("not an XML document")?;
    let root = doc.root_element().tag_name().name();
    if root != "testsuites" {
        anyhow::bail!("the root element is <{root}>, not <testsuites>");
    }
    Ok(doc)
}

/// The edit that adds `by` to an element's `skipped` attribute.
fn raise_count(node: roxmltree::Node, by: usize) -> Result<(std::ops::Range<usize>, String)> {
    let attr = node
        .attributes()
        .find(|a| a.name() == "skipped")
        .with_context(|| format!("<{}> has no skipped count", node.tag_name().name()))?;
    let old: usize = attr
        .value()
        .parse()
        .with_context(|| format!("skipped=\"{}\" is not a count", attr.value()))?;
    Ok((attr.range_value(), (old + by).to_string()))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4" skipped="1" failures="1" errors="0" time="2.0">
    <testsuite name="lab-scenarios::eevdf_parity" tests="2" skipped="0" errors="0" failures="0">
        <testcase name="parity" classname="lab-scenarios::eevdf_parity" time="1.5">
            <system-out>table
LAB-SKIP parity: time part: the accelerator is tcg-single (no KVM). It runs where KVM boots guests &amp; more.
</system-out>
            <system-err>boot 1
LAB-SKIP parity: time part: the accelerator is tcg-single (no KVM). It runs where KVM boots guests &amp; more.
</system-err>
        </testcase>
        <testcase name="plain" classname="lab-scenarios::eevdf_parity" time="0.1"/>
    </testsuite>
    <testsuite name="lab-scenarios::vm" tests="2" skipped="1" errors="0" failures="1">
        <testcase name="broken" classname="lab-scenarios::vm" time="0.2">
            <failure type="test failure">boom</failure>
            <system-out>LAB-SKIP broken: offline run: no unshare. Run as root.</system-out>
        </testcase>
        <testcase name="quiet" classname="lab-scenarios::vm" time="0.2">
            <system-out>nothing skipped</system-out>
        </testcase>
    </testsuite>
</testsuites>
"#;

    #[test]
    fn a_passed_test_with_skipped_parts_is_marked_and_counted() {
        let (out, skipped) = mark_skips(REPORT).unwrap();
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert_eq!(skipped[0].suite, "lab-scenarios::eevdf_parity");
        assert_eq!(skipped[0].name, "parity");
        assert_eq!(
            skipped[0].lines.len(),
            1,
            "stdout and stderr carry the same line once"
        );
        let doc = roxmltree::Document::parse(&out).unwrap();
        let root = doc.root_element();
        assert_eq!(root.attribute("skipped"), Some("2"));
        let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
        assert_eq!(suites[0].attribute("skipped"), Some("1"));
        assert_eq!(
            suites[1].attribute("skipped"),
            Some("1"),
            "the failed test is not marked"
        );
        let parity = suites[0]
            .children()
            .find(|n| n.has_tag_name("testcase"))
            .unwrap();
        let mark = parity
            .children()
            .find(|n| n.has_tag_name("skipped"))
            .unwrap();
        assert_eq!(
            mark.attribute("message"),
            Some(
                "passed what ran; skipped here: parity: time part: the accelerator is \
                 tcg-single (no KVM). It runs where KVM boots guests & more."
            )
        );
        // Everything else is as nextest wrote it.
        assert_eq!(
            out.replace(
                &out[out.find("<skipped message").unwrap()..out.find("<system-out>table").unwrap()],
                ""
            )
            .replace("skipped=\"2\"", "skipped=\"1\"")
            .replace(
                "eevdf_parity\" tests=\"2\" skipped=\"1\"",
                "eevdf_parity\" tests=\"2\" skipped=\"0\""
            ),
            REPORT
        );
    }

    #[test]
    fn a_report_file_is_rewritten_in_place_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junit.xml");
        std::fs::write(&path, REPORT).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let marked = mark_skips_in_file(&path).unwrap();
        assert_eq!(marked.tests.len(), 1);
        let lines = &marked.tests[0].lines;
        assert_eq!(
            marked.to_string(),
            format!(
                "{}: 1 test(s) with skipped parts marked skipped\n  {}: {}\n",
                path.display(),
                marked.tests[0].suite,
                lines[0]
            )
        );
        assert_eq!(lines.len(), 1);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("<skipped message"));
        let entries = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(entries, 1, "no temporary file left");
    }

    #[test]
    fn marking_twice_changes_nothing_and_bad_reports_are_named() {
        let (once, _) = mark_skips(REPORT).unwrap();
        let (twice, again) = mark_skips(&once).unwrap();
        assert_eq!(twice, once);
        assert!(again.is_empty());
        let err = mark_skips("<html/>").unwrap_err().to_string();
        assert!(err.contains("<html>"), "{err}");
        assert!(mark_skips("<testsuites").is_err());
    }
}
