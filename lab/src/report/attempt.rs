//! Which test attempt wrote a record. nextest retries a failed test (`retries` in
//! `.config/nextest.toml`) in a fresh process; every attempt that runs a comparison writes a
//! record of its own, in a run directory of its own. Merging CI's results must take only the
//! last attempt of each test: the earlier ones failed, and their boots merged beside the
//! retry's would count one test's samples twice. The merge names every record it left out
//! (RETRIED); whether the retry passed (FLAKY) is nextest's report's to say (`lab bench suite`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The nextest test attempt a record was written in (from the variables nextest sets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestAttempt {
    /// `NEXTEST_RUN_ID`: one `cargo nextest run`.
    pub run_id: String,
    /// `NEXTEST_BINARY_ID` (`lab-scenarios::dma_wakeup`).
    pub binary_id: String,
    /// `NEXTEST_TEST_NAME`.
    pub test: String,
    /// `NEXTEST_ATTEMPT`, from 1.
    pub attempt: u32,
    /// `NEXTEST_TOTAL_ATTEMPTS`: 1 plus the retries allowed.
    pub total_attempts: u32,
}

impl TestAttempt {
    /// The attempt this process runs in, when nextest started it.
    pub fn from_env() -> Option<TestAttempt> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(TestAttempt {
            run_id: var("NEXTEST_RUN_ID")?,
            binary_id: var("NEXTEST_BINARY_ID")?,
            test: var("NEXTEST_TEST_NAME")?,
            attempt: var("NEXTEST_ATTEMPT")?.parse().ok()?,
            total_attempts: var("NEXTEST_TOTAL_ATTEMPTS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
        })
    }

    /// A retry (attempt 2 or later).
    pub fn is_retry(&self) -> bool {
        self.attempt > 1
    }
}

/// A record left out of a merge because a later attempt of its test wrote one too.
#[derive(Debug, Clone, PartialEq)]
pub struct Superseded {
    /// The record left out.
    pub path: PathBuf,
    /// The attempt that wrote it.
    pub attempt: TestAttempt,
    /// The attempt whose record was merged instead.
    pub by: u32,
}

impl std::fmt::Display for Superseded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RETRIED {} {}: attempt {} of {} left out ({}); attempt {}'s record merged",
            self.attempt.binary_id,
            self.attempt.test,
            self.attempt.attempt,
            self.attempt.total_attempts,
            self.path.display(),
            self.by
        )
    }
}

/// Splits `records` into those to merge and those a later attempt of the same test (same
/// nextest run) supersedes. Records without an attempt (`lab compare` by hand) are all kept.
pub(crate) fn latest_attempts<T>(
    records: Vec<(PathBuf, T)>,
    attempt_of: impl Fn(&T) -> Option<&TestAttempt>,
) -> (Vec<(PathBuf, T)>, Vec<Superseded>) {
    let mut latest: BTreeMap<(String, String, String), u32> = BTreeMap::new();
    for (_, r) in &records {
        if let Some(a) = attempt_of(r) {
            let e = latest
                .entry((a.run_id.clone(), a.binary_id.clone(), a.test.clone()))
                .or_default();
            *e = (*e).max(a.attempt);
        }
    }
    let mut kept = Vec::new();
    let mut left_out = Vec::new();
    for (path, r) in records {
        let superseded = attempt_of(&r).and_then(|a| {
            let by = latest[&(a.run_id.clone(), a.binary_id.clone(), a.test.clone())];
            (a.attempt < by).then(|| Superseded {
                path: path.clone(),
                attempt: a.clone(),
                by,
            })
        });
        match superseded {
            Some(s) => left_out.push(s),
            None => kept.push((path, r)),
        }
    }
    (kept, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(run: &str, test: &str, n: u32) -> Option<TestAttempt> {
        Some(TestAttempt {
            run_id: run.into(),
            binary_id: "lab-scenarios::dma_wakeup".into(),
            test: test.into(),
            attempt: n,
            total_attempts: 3,
        })
    }

    #[test]
    fn only_the_last_attempt_of_a_test_in_a_run_is_merged() {
        let records = vec![
            (PathBuf::from("a1"), attempt("r1", "a", 1)),
            (PathBuf::from("a2"), attempt("r1", "a", 2)),
            (PathBuf::from("b1"), attempt("r1", "b", 1)),
            // Another run's first attempt of the same test: another test run, kept.
            (PathBuf::from("a1-other-run"), attempt("r2", "a", 1)),
            (PathBuf::from("by-hand"), None),
        ];
        let (kept, left_out) = latest_attempts(records, |a| a.as_ref());
        let kept: Vec<_> = kept.iter().map(|(p, _)| p.display().to_string()).collect();
        assert_eq!(kept, ["a2", "b1", "a1-other-run", "by-hand"]);
        assert_eq!(left_out.len(), 1);
        assert_eq!(left_out[0].path, PathBuf::from("a1"));
        assert_eq!(left_out[0].by, 2);
        let line = left_out[0].to_string();
        assert!(
            line.starts_with("RETRIED lab-scenarios::dma_wakeup a: attempt 1 of 3 left out"),
            "{line}"
        );
    }
}
