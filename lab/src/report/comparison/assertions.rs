//! A comparison's verdicts as exit codes and test assertions: `lab compare --exit-code` and
//! `assert_different`, `assert_higher`, `assert_lower`, `assert_same` (primary metrics only; a
//! failure carries the verdict's numbers and the whole table).

use anyhow::anyhow;

use super::*;

impl Comparison {
    /// `lab compare --exit-code`, `git bisect run`'s codes with the base as good: 1 when a
    /// primary verdict is DIFFERENT, else [`BISECT_SKIP`] when one is UNKNOWN or cannot be made
    /// (or there is none), else 0 (every one SAME).
    pub fn bisect_exit_code(&self) -> i32 {
        let decisions: Vec<Option<Decision>> = self
            .verdicts()
            .into_iter()
            .map(|(_, _, v)| v.ok().map(|v| v.decision))
            .collect();
        if decisions.contains(&Some(Decision::Different)) {
            1
        } else if decisions.is_empty() || decisions.iter().any(|d| d != &Some(Decision::Same)) {
            BISECT_SKIP
        } else {
            0
        }
    }

    /// Ok when `variant` is DIFFERENT from the base on the primary `metric`; otherwise an error
    /// with the verdict's numbers and the whole table.
    pub fn assert_different(&self, metric: &str, variant: &str) -> anyhow::Result<Verdict> {
        self.assert_decision(metric, variant, Decision::Different, None)
    }

    /// Ok when `variant` is DIFFERENT from the base and higher.
    pub fn assert_higher(&self, metric: &str, variant: &str) -> anyhow::Result<Verdict> {
        self.assert_decision(metric, variant, Decision::Different, Some(true))
    }

    /// Ok when `variant` is DIFFERENT from the base and lower.
    pub fn assert_lower(&self, metric: &str, variant: &str) -> anyhow::Result<Verdict> {
        self.assert_decision(metric, variant, Decision::Different, Some(false))
    }

    /// Ok when `variant` is the SAME as the base on the primary `metric`: the interval of the
    /// shift lies inside ±magnitude. Too few or too scattered boots fail it.
    pub fn assert_same(&self, metric: &str, variant: &str) -> anyhow::Result<Verdict> {
        self.assert_decision(metric, variant, Decision::Same, None)
    }

    fn assert_decision(
        &self,
        metric: &str,
        variant: &str,
        want: Decision,
        higher: Option<bool>,
    ) -> anyhow::Result<Verdict> {
        let m = self
            .metric(metric)
            .map_err(|e| self.failure(e.to_string()))?;
        if !m.primary {
            let primaries: Vec<&str> = self.primaries().map(|m| m.name.as_str()).collect();
            return Err(self.failure(format!(
                "{metric}: not a primary metric of {} (primaries: {}); a secondary metric is \
                 shown, with p adjusted for the number of comparisons, not asserted",
                self.name,
                join_or_none(primaries.into_iter())
            )));
        }
        let verdict = self
            .verdict(metric, variant)
            .map_err(|e| self.failure(e.to_string()))?;
        let direction_ok = match higher {
            None => true,
            Some(up) => (verdict.change() > 0.0) == up,
        };
        if verdict.decision == want && direction_ok {
            return Ok(verdict);
        }
        let expected = match (want, higher) {
            (Decision::Different, Some(true)) => "DIFFERENT and higher".to_string(),
            (Decision::Different, Some(false)) => "DIFFERENT and lower".to_string(),
            (d, _) => d.to_string(),
        };
        let got = if verdict.decision == Decision::Unknown {
            format!(
                "UNKNOWN after {} boots ({}/{})",
                verdict.n_base + verdict.n_variant,
                verdict.n_base,
                verdict.n_variant
            )
        } else {
            verdict.decision.to_string()
        };
        let hint = match (
            self.summary(metric, self.base_of(variant)),
            self.summary(metric, variant),
        ) {
            (Ok(b), Ok(v)) => verdict
                .boots_needed(&b, &v)
                .map(|n| format!("; at this spread about {n} boots per variant might decide it"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        Err(self.failure(format!(
            "{metric}: expected {variant:?} {expected} against {base:?}, got {got}: {numbers}{hint}",
            base = self.base_of(variant),
            numbers = describe(&verdict, &m.unit),
        )))
    }

    fn failure(&self, reason: String) -> anyhow::Error {
        anyhow!("{reason}\n\n{}", self.table())
    }
}
