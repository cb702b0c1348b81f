//! The bisect log: one line per step, then the answer, then boots and builds.

use std::fmt::Write as _;

use super::{Answer, BisectRecord, Culprit, Findings, Step, StepKind};
use crate::stats::Verdict;

impl BisectRecord {
    /// The bisect log: one line per step, then the answer, then boots and builds.
    pub fn log(&self) -> String {
        let mut out = String::new();
        let n = self.points.len() - 1;
        // The magnitude in the metric's unit, as the endpoints' verdict used it.
        let magnitude = match self.steps.first().and_then(|s| s.verdicts.first()) {
            Some(v) => format!(
                "{:.1}{}",
                v.verdict.magnitude,
                crate::report::comparison::difference_unit(&self.unit)
            ),
            None => self
                .magnitude
                .map_or_else(|| "the metric's own".to_string(), |m| m.to_string()),
        };
        let _ = writeln!(
            out,
            "bisect {} on {} (smallest change that matters: {magnitude}): {} (good) .. {} (bad), {n} change{}",
            self.request.scenario,
            self.metric,
            self.point_name(0),
            self.point_name(n),
            if n == 1 { "" } else { "s" }
        );
        for (i, s) in self.steps.iter().enumerate() {
            let _ = writeln!(out, "  {}", self.step_line(i, s));
        }
        match &self.answer {
            None => {
                let _ = writeln!(
                    out,
                    "no answer yet{}",
                    self.failure
                        .as_ref()
                        .map_or(String::new(), |f| format!(": {f}"))
                );
            }
            Some(Answer::NothingToBisect { verdict }) => {
                let _ = writeln!(
                    out,
                    "nothing to bisect: good and bad are {} on {} ({})",
                    verdict.decision,
                    self.metric,
                    short_verdict(verdict, &self.unit)
                );
            }
            Some(Answer::Found(found)) => self.write_findings(&mut out, found),
        }
        let builds: Vec<String> = self
            .points
            .iter()
            .filter_map(|p| {
                p.build
                    .as_ref()
                    .filter(|b| b.seconds > 0.0)
                    .map(|b| format!("{} {:.0} s", p.variant.name, b.seconds))
            })
            .collect();
        let fixed = self.fixed_boots(10);
        let _ =
            writeln!(
            out,
            "boots: {} ({}% of the {fixed} a fixed 10 per variant would boot); builds: {}; {:.0} s",
            self.boots(),
            (self.boots() * 100).checked_div(fixed).unwrap_or(0),
            if builds.is_empty() { "none".to_string() } else { builds.join(", ") },
            self.seconds
        );
        out
    }

    /// One step's line of the log: what it probed, its verdicts, the class, boots and time.
    pub(crate) fn step_line(&self, i: usize, s: &Step) -> String {
        let n = self.points.len() - 1;
        let what = match s.kind {
            StepKind::Endpoints => "endpoints".to_string(),
            StepKind::Probe => format!("probe {}", self.change_label(s.point)),
            StepKind::Verify => format!("verify {}", self.change_label(s.point)),
            StepKind::Rest => "what is left".to_string(),
        };
        let end = |k: usize| match k {
            0 => "good".to_string(),
            k if k == n => "bad".to_string(),
            k => format!("point {k}"),
        };
        let verdicts: Vec<String> = s
            .verdicts
            .iter()
            .map(|v| {
                format!(
                    "vs {} {}",
                    end(v.base),
                    short_verdict(&v.verdict, &self.unit)
                )
            })
            .collect();
        let class = s
            .class
            .map_or(String::new(), |c| format!(" -> {}", c.label()));
        let boots = s
            .per_variant
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>();
        format!(
            "step {:>2}  {what}: {}{class}{}  [{} boots, {:.0} s]",
            i + 1,
            verdicts.join(", "),
            if s.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", s.note)
            },
            if boots.is_empty() {
                "0".to_string()
            } else {
                boots.join("+")
            },
            s.seconds
        )
    }

    fn write_findings(&self, out: &mut String, found: &Findings) {
        for c in &found.culprits {
            let _ = writeln!(out, "culprit: {}", self.culprit_text(c));
        }
        for c in &found.unverified {
            let verdict = c.verdict.as_ref().map_or(String::new(), |v| {
                format!(": parent vs it {}", short_verdict(v, &self.unit))
            });
            let _ = writeln!(
                out,
                "not verified: {} ({}){verdict}",
                self.change_label(c.point),
                c.note
            );
        }
        if let Some((lo, hi)) = found.range {
            let between: Vec<String> = (lo + 1..=hi).map(|k| self.change_label(k)).collect();
            let _ = writeln!(
                out,
                "the change is in one of {} (points between were skipped or unclassified):\n    {}",
                hi - lo,
                between.join("\n    ")
            );
        }
        if !found.opposite.is_empty() {
            let points: Vec<String> = found
                .opposite
                .iter()
                .map(|&k| self.change_label(k))
                .collect();
            let _ = writeln!(
                out,
                "moved away from bad (an opposite change before them, not a culprit): {}",
                points.join(", ")
            );
        }
        if found.culprits.is_empty() {
            let _ = writeln!(out, "no culprit verified");
        }
    }

    /// A culprit in one line: the change, its point, its share and the verification.
    pub(crate) fn culprit_text(&self, c: &Culprit) -> String {
        let share = match &c.share {
            Some(s) => match s.interval {
                Some(i) => format!(
                    "{:.0}% of the change (95% intervals: {:.0}% to {:.0}%)",
                    s.percent, i.low, i.high
                ),
                None => format!("{:.0}% of the change", s.percent),
            },
            None => "the change".to_string(),
        };
        let how = match &c.verdict {
            Some(v) => format!("parent vs culprit {}", short_verdict(v, &self.unit)),
            None => c.note.clone(),
        };
        format!(
            "{} ({}): accounts for {share}; {how}",
            self.change_label(c.point),
            self.point_name(c.point)
        )
    }
}

pub(crate) fn short_verdict(v: &Verdict, unit: &str) -> String {
    let shown = if v.significant && v.decision == crate::stats::Decision::Unknown {
        " (a change shown)"
    } else {
        ""
    };
    format!(
        "{}{shown} {:+.1}{} p={:.3} ({}v{})",
        v.decision,
        v.shift,
        crate::report::comparison::difference_unit(unit),
        v.p,
        v.n_base,
        v.n_variant
    )
}
