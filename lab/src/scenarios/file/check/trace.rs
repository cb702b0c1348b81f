//! The guest's one trace, checked: `[watch]` (the task and the interrupt traced beside it),
//! `[[count]]` events and `[wakeups]`, which exclude each other, and the metrics that read
//! `[wakeups]`.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::Value;

use super::Checker;
use crate::error::bad_input;
use crate::scenarios::file::format::RawFile;
use crate::scenarios::file::metrics::{self, FileMetric};
use crate::scenarios::file::{Count, Expr, Watch};

impl Checker<'_> {
    /// `[wakeups] tasks`: command-name prefixes for a tracefs filter, the file's one trace.
    pub(super) fn wakeup_tasks(&self, raw: &RawFile, other_trace: bool) -> Result<Vec<String>> {
        let Some(w) = &raw.wakeups else {
            return Ok(Vec::new());
        };
        let bad = |message: String| self.err(w.span(), "wakeups", message);
        if other_trace {
            return Err(bad(
                "[wakeups] beside a [watch] or a [[count]]: the guest has one trace, give one"
                    .into(),
            ));
        }
        let tasks = &w.get_ref().tasks;
        if tasks.is_empty() {
            return Err(bad(
                "tasks: name the command-name prefixes to trace (\"fio\")".into(),
            ));
        }
        let word = |t: &String| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-./:".contains(c))
        };
        if let Some(t) = tasks.iter().find(|t| !word(t)) {
            return Err(bad(format!(
                "tasks: {t:?} is not a command-name prefix (letters, digits, _ - . / :)"
            )));
        }
        Ok(tasks.clone())
    }

    /// Every `wakeups = ...` metric has `[wakeups]`, and its `of` classes are traced.
    pub(super) fn wakeup_metrics(
        &self,
        raw: &RawFile,
        metrics: &[FileMetric],
        tasks: &[String],
    ) -> Result<()> {
        for (m, metric) in self.metric_list(raw)?.into_iter().zip(metrics) {
            let metrics::Source::Wakeups(w) = &metric.source else {
                continue;
            };
            let field = format!("metric {:?}", m.name().get_ref());
            if tasks.is_empty() {
                return Err(self.err(
                    m.name().span(),
                    &field,
                    "a wakeups metric needs a [wakeups] table naming the tasks to trace",
                ));
            }
            if let (Some(of), Some(text)) = (&w.of, &m.of) {
                of.traced_by(tasks)
                    .map_err(|e| self.err(text.span(), &format!("{field}: of"), e))?;
            }
        }
        Ok(())
    }

    pub(super) fn counts(&self, raw: &RawFile, watching: bool) -> Result<Vec<Count>> {
        let mut out: Vec<Count> = Vec::new();
        for c in &raw.counts {
            let field = format!("count {:?}", c.name.get_ref());
            if watching {
                return Err(self.err(
                    c.name.span(),
                    &field,
                    "a [[count]] beside a [watch]: the guest has one trace, give one or the other",
                ));
            }
            let event = c.event.get_ref();
            let well_formed = event.split_once('/').is_some_and(|(sub, name)| {
                let word = |w: &str| {
                    !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                };
                word(sub) && word(name)
            });
            if !well_formed {
                return Err(self.err(
                    c.event.span(),
                    &format!("{field}: event"),
                    format!("{event:?}: subsystem/event, as sched/sched_switch"),
                ));
            }
            if out
                .iter()
                .any(|o| o.name == *c.name.get_ref() || o.event == *event)
            {
                return Err(self.err(
                    c.name.span(),
                    &field,
                    "a second [[count]] of this name or event (tracefs has one filter per event)",
                ));
            }
            if c.filter.contains(['\n', '\'']) {
                return Err(self.err(
                    c.name.span(),
                    &format!("{field}: filter"),
                    "a filter is one line without single quotes",
                ));
            }
            out.push(Count {
                name: c.name.get_ref().clone(),
                event: event.clone(),
                filter: c.filter.clone(),
            });
        }
        Ok(out)
    }

    pub(super) fn watch(
        &self,
        raw: &RawFile,
        params: &serde_json::Map<String, Value>,
        cpus: &BTreeMap<String, Expr>,
        devices: usize,
    ) -> Result<Option<Watch>> {
        let Some(w) = &raw.watch else {
            return Ok(None);
        };
        if w.task.is_empty() || w.task.contains(['"', '\\', '\n']) {
            return Err(bad_input(
                self.path,
                "watch.task",
                format!("{:?} is not a command-name prefix", w.task),
            ));
        }
        let irq = match &w.irq {
            Some(s) => Some(self.irq(s, devices)?),
            None => None,
        };
        let started_on = match &w.started_on {
            Some(s) => {
                self.references(s, "watch.started_on", params, cpus)?;
                Some(self.expr(s))
            }
            None => None,
        };
        for mark in &w.marks {
            if !cpus.contains_key(mark) {
                return Err(bad_input(
                    self.path,
                    "watch.marks",
                    format!("{mark:?} is not a named CPU"),
                ));
            }
        }
        Ok(Some(Watch {
            task: w.task.clone(),
            irq,
            started_on,
            marks: w.marks.clone(),
        }))
    }

    /// `device N` or `device N vector V`.
    fn irq(&self, s: &toml::Spanned<String>, devices: usize) -> Result<(usize, usize)> {
        let words: Vec<&str> = s.get_ref().split_whitespace().collect();
        let bad = |m: String| self.err(s.span(), "watch.irq", m);
        let (device, vector) = match words.as_slice() {
            ["device", d] => (d.parse().ok(), Some(0)),
            ["device", d, "vector", v] => (d.parse().ok(), v.parse().ok()),
            _ => (None, None),
        };
        match (device, vector) {
            (Some(d), Some(v)) if d < devices => Ok((d, v)),
            (Some(d), Some(_)) => Err(bad(format!(
                "device {d}: the file has {devices} [[device]] tables"
            ))),
            _ => Err(bad(format!(
                "{:?}: `device N` or `device N vector V`",
                s.get_ref()
            ))),
        }
    }
}
