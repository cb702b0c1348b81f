//! `[wakeups]` and the metrics that read it: who woke whom over the workload, by task class
//! (`observe::WakeupTrace`, `observe::Wakeups`). A class is a command name with every run of
//! digits written `N` (`kworker/3:1H` is `kworker/N:NH`); a metric names classes as
//! `of = "fio"`, `by = "kworker/N:N|kworker/N:NH"` (alternatives) or `by = "kworker*"` (a
//! prefix), and the wakers `hardirq` and `softirq` (wakeups issued in interrupt context).

use std::collections::BTreeMap;

use crate::observe::{task_class, Wakeups};

/// What a `wakeups = FIGURE` metric is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum WakeupFigure {
    /// Wakeups of `of` (by `by`, if given), per boot.
    Count,
    /// Share of `of`'s wakeups that `by` issued.
    Share,
    /// Share of `of`'s wakeups that put it on another CPU than the one it last ran on.
    Moved,
    /// `of`'s migrations (`sched_migrate_task`: at wakeup and by the balancer), per boot.
    Migrations,
    /// Of every wakeup issued in hard-interrupt context, the share whose wakee may run on one
    /// CPU only (a per-CPU worker: no wakeup shortcut can move it).
    SingleCpuWakees,
}

const FIGURES: [(&str, WakeupFigure); 5] = [
    ("count", WakeupFigure::Count),
    ("share", WakeupFigure::Share),
    ("moved", WakeupFigure::Moved),
    ("migrations", WakeupFigure::Migrations),
    ("single_cpu_wakees", WakeupFigure::SingleCpuWakees),
];

/// Task classes a metric names: alternatives split at `|`, each a class or a prefix (`kworker*`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Classes(Vec<String>);

impl Classes {
    fn parse(text: &str) -> Result<Classes, String> {
        let alternatives: Vec<String> = text.split('|').map(|a| a.trim().to_string()).collect();
        let well_formed = |a: &String| {
            let body = a.strip_suffix('*').unwrap_or(a);
            !body.is_empty() && !body.contains(['*', '"', '\'', ' ', '\\'])
        };
        if let Some(bad) = alternatives.iter().find(|a| !well_formed(a)) {
            return Err(format!(
                "{bad:?} is not a task class (a command name with digits as N, \"kworker/N:N\"; \
                 \"kworker*\" for a prefix; alternatives joined by |)"
            ));
        }
        Ok(Classes(alternatives))
    }

    fn matches(&self, class: &str) -> bool {
        self.0.iter().any(|a| match a.strip_suffix('*') {
            Some(prefix) => class.starts_with(prefix),
            None => class == a,
        })
    }

    /// Whether a trace of command names starting with `prefixes` records these classes' wakeups
    /// (`hardirq` and `softirq` are wakers, never traced tasks).
    pub(super) fn traced_by(&self, prefixes: &[String]) -> Result<(), String> {
        for a in &self.0 {
            let body = a.strip_suffix('*').unwrap_or(a);
            let traced = prefixes.iter().any(|p| {
                let p = task_class(p);
                body.starts_with(&p) || (a.ends_with('*') && p.starts_with(body))
            });
            if !traced {
                return Err(format!(
                    "{a:?} is not among the tasks [wakeups] traces ({}): its wakeups are not recorded",
                    prefixes.join(", ")
                ));
            }
        }
        Ok(())
    }

    fn sum(&self, counts: &BTreeMap<String, u64>) -> u64 {
        counts
            .iter()
            .filter(|(class, _)| self.matches(class))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A checked `wakeups = FIGURE` source with its classes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WakeupMetric {
    pub figure: WakeupFigure,
    /// The wakees.
    pub of: Option<Classes>,
    /// The wakers (classes, `hardirq`, `softirq`).
    pub by: Option<Classes>,
}

impl WakeupMetric {
    /// `wakeups`, `of` and `by` as the file gives them. Errors are `(field, message)`.
    pub(super) fn parse(
        figure: &str,
        of: Option<&str>,
        by: Option<&str>,
    ) -> Result<WakeupMetric, (String, String)> {
        let name = figure;
        let figure =
            super::metrics::lookup(&FIGURES, name).map_err(|e| ("wakeups".to_string(), e))?;
        let classes = |field: &str, text: Option<&str>| {
            text.map(Classes::parse)
                .transpose()
                .map_err(|e| (field.to_string(), e))
        };
        let (of, by) = (classes("of", of)?, classes("by", by)?);
        use WakeupFigure as F;
        let (needs_of, takes_by, needs_by) = match figure {
            F::Count => (true, true, false),
            F::Share => (true, true, true),
            F::Moved | F::Migrations => (true, false, false),
            F::SingleCpuWakees => (false, false, false),
        };
        if needs_of != of.is_some() {
            let says = match needs_of {
                true => format!("wakeups = {name:?} needs of = \"CLASS\": whose wakeups"),
                false => format!("wakeups = {name:?} takes no of: it counts every wakee"),
            };
            return Err(("of".into(), says));
        }
        if by.is_some() && !takes_by {
            return Err(("by".into(), format!("wakeups = {name:?} takes no by")));
        }
        if needs_by && by.is_none() {
            return Err((
                "by".into(),
                format!(
                    "wakeups = {name:?} needs by = \"CLASS\" (or \"hardirq\"): which wakers' share"
                ),
            ));
        }
        Ok(WakeupMetric { figure, of, by })
    }

    /// Whether it needs the allowed CPUs of the tasks woken in hard-interrupt context.
    pub(super) fn needs_allowed_cpus(&self) -> bool {
        self.figure == WakeupFigure::SingleCpuWakees
    }

    /// Its value over `w`; `allowed`: pid -> CPUs it may run on, for the hard-interrupt wakees
    /// still there after the workload. `None` where its whole is zero.
    pub(super) fn value(&self, w: &Wakeups, allowed: &BTreeMap<u32, Vec<u32>>) -> Option<f64> {
        let share = |part: u64, whole: u64| (whole > 0).then(|| 100.0 * part as f64 / whole as f64);
        let of = |counts: &BTreeMap<String, u64>| self.of.as_ref().map_or(0, |c| c.sum(counts));
        // Wakee class -> its wakeups by `by` (all wakers without one).
        let woken = |by: Option<&Classes>| -> u64 {
            w.woken_by
                .iter()
                .filter(|(wakee, _)| self.of.as_ref().is_some_and(|c| c.matches(wakee)))
                .map(|(_, wakers)| by.map_or_else(|| wakers.values().sum(), |b| b.sum(wakers)))
                .sum()
        };
        match self.figure {
            WakeupFigure::Count => Some(woken(self.by.as_ref()) as f64),
            WakeupFigure::Share => share(woken(self.by.as_ref()), woken(None)),
            WakeupFigure::Moved => share(of(&w.moved_at_wakeup), of(&w.placed)),
            WakeupFigure::Migrations => Some(of(&w.migrations) as f64),
            WakeupFigure::SingleCpuWakees => {
                // Tasks that exited before the lookup count as neither.
                let (mut single, mut known) = (0, 0);
                for (pid, n) in &w.hard_irq_wakees {
                    if let Some(cpus) = allowed.get(pid) {
                        known += n;
                        single += if cpus.len() == 1 { *n } else { 0 };
                    }
                }
                share(single, known)
            }
        }
    }

    /// Whether it is a share (in %).
    pub(super) fn is_share(&self) -> bool {
        matches!(
            self.figure,
            WakeupFigure::Share | WakeupFigure::Moved | WakeupFigure::SingleCpuWakees
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::HARD_IRQ;

    #[test]
    fn figures_count_and_share_by_class_alternative_and_prefix() {
        let trace = "\
  <idle>-0 [005] d.h4. 1.000100: sched_waking: comm=kworker/5:1 pid=76 prio=120 target_cpu=005
  <idle>-0 [003] d.h4. 1.000150: sched_waking: comm=kworker/u33:0 pid=56 prio=120 target_cpu=001
  kworker/5:1-76 [005] d..2. 1.000200: sched_waking: comm=fio pid=300 prio=120 target_cpu=002
  kworker/5:1-76 [005] d..3. 1.000220: sched_wakeup: comm=fio pid=300 prio=120 target_cpu=005
  <idle>-0 [002] d.h2. 1.000300: sched_waking: comm=fio pid=301 prio=120 target_cpu=002
  <idle>-0 [002] d.h2. 1.000310: sched_wakeup: comm=fio pid=301 prio=120 target_cpu=002
";
        let w = Wakeups::from_events(&crate::observe::parse_trace(trace));
        let allowed = BTreeMap::from([(76, vec![5]), (56, vec![0, 1, 2, 3]), (301, vec![1, 2])]);
        let m = |figure, of, by| {
            WakeupMetric::parse(figure, of, by)
                .unwrap()
                .value(&w, &allowed)
        };
        assert_eq!(m("count", Some("fio"), None), Some(2.0));
        assert_eq!(m("count", Some("kworker*"), Some(HARD_IRQ)), Some(2.0));
        assert_eq!(m("share", Some("fio"), Some("hardirq")), Some(50.0));
        assert_eq!(
            m("share", Some("fio"), Some("kworker/N:N|kworker/N:NH")),
            Some(50.0)
        );
        assert_eq!(m("share", Some("fio"), Some("kworker/uN:N")), Some(0.0));
        assert_eq!(m("moved", Some("fio"), None), Some(50.0));
        assert_eq!(m("moved", Some("kworker*"), None), None);
        assert_eq!(m("migrations", Some("fio"), None), Some(0.0));
        let single = m("single_cpu_wakees", None, None).unwrap();
        assert!((single - 100.0 / 3.0).abs() < 1e-9, "{single}");
    }

    #[test]
    fn a_figure_without_its_classes_or_an_untraced_class_is_named() {
        let err = |figure, of, by| WakeupMetric::parse(figure, of, by).unwrap_err();
        assert_eq!(err("often", Some("fio"), None).0, "wakeups");
        let (field, e) = err("share", Some("fio"), None);
        assert_eq!(field, "by");
        assert!(e.contains("which wakers' share"), "{e}");
        assert_eq!(err("count", None, None).0, "of");
        assert_eq!(err("single_cpu_wakees", Some("fio"), None).0, "of");
        assert_eq!(err("moved", Some("fio"), Some("hardirq")).0, "by");
        assert!(err("count", Some("fio|"), None)
            .1
            .contains("not a task class"));
        let traced = ["fio".to_string(), "kworker".to_string()];
        let classes = |t| Classes::parse(t).unwrap();
        assert!(classes("kworker/N:NH|fio").traced_by(&traced).is_ok());
        assert!(classes("kw*").traced_by(&traced).is_ok());
        let e = classes("jbd2/nvmeNnN-N").traced_by(&traced).unwrap_err();
        assert!(
            e.contains("not among the tasks [wakeups] traces (fio, kworker)"),
            "{e}"
        );
    }
}
