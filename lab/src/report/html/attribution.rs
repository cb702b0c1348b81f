//! The page's table of wakeups: for each variant, the watched task's wakeups summed over its
//! boots, by waker and by where each put the task, from the task's CPU and from the waker's
//! (`observe::Attribution`, kept in a boot's details under `attribution`). Which wakeups moved
//! the task, not only that it moved: a verdict's mechanism.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{colour, esc, RunRecord};
use crate::observe::{Attribution, Landing};

/// Wakers shown per variant; the rest are summed into one row.
const WAKERS_SHOWN: usize = 6;

const LANDINGS: [Landing; 5] = [
    Landing::SameCpu,
    Landing::SmtSibling,
    Landing::SameLlc,
    Landing::OtherLlc,
    Landing::OtherNode,
];

/// Each variant's attribution summed over its boots; variants none of whose boots kept one are
/// left out.
fn per_variant(record: &RunRecord) -> Vec<(usize, String, Attribution)> {
    let c = record.comparison();
    let mut out = Vec::new();
    for (i, variant) in c.variants().iter().enumerate() {
        let mut sum = Attribution::default();
        let mut any = false;
        for boot in record.boots().iter().filter(|b| &b.variant == variant) {
            let Some(a) = boot.details["scenario"].get("attribution") else {
                continue;
            };
            let Ok(a) = serde_json::from_value::<Attribution>(a.clone()) else {
                continue;
            };
            any = true;
            add(&mut sum.from_task_cpu, &a.from_task_cpu);
            add(&mut sum.toward_waker, &a.toward_waker);
            sum.unattributed += a.unattributed;
        }
        if any {
            out.push((i, variant.clone(), sum));
        }
    }
    out
}

fn add(
    into: &mut BTreeMap<String, BTreeMap<Landing, u64>>,
    from: &BTreeMap<String, BTreeMap<Landing, u64>>,
) {
    for (waker, landings) in from {
        for (landing, n) in landings {
            *into
                .entry(waker.clone())
                .or_default()
                .entry(*landing)
                .or_default() += n;
        }
    }
}

/// The section; empty when no boot kept an attribution.
pub(super) fn section(record: &RunRecord) -> String {
    let variants = per_variant(record);
    if variants.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Which wakeups moved the task</h2>\n<p class=\"note\">The watched task's wakeups \
         summed over each variant's boots, by waker (the context and the task running on the \
         waker's CPU) and by where the wakeup put the task: seen from the CPU the task was on, \
         then from the waker's CPU. A cell is the share of the variant's attributed wakeups, \
         with their count.</p>\n<table class=\"attribution\">\n<tr><th rowspan=\"2\">variant</th>\
         <th rowspan=\"2\">waker</th><th colspan=\"5\">landed, from the task's CPU</th>\
         <th colspan=\"5\">landed, from the waker's CPU</th></tr>\n<tr>",
    );
    for _side in 0..2 {
        for landing in LANDINGS {
            let _ = write!(out, "<th>{}</th>", esc(landing.label()));
        }
    }
    out += "</tr>\n";
    for (i, variant, a) in &variants {
        let total = a.total().max(1) as f64;
        let mut wakers: Vec<(&String, u64)> = a
            .from_task_cpu
            .iter()
            .map(|(w, l)| (w, l.values().sum()))
            .collect();
        wakers.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
        for (waker, _) in wakers.iter().take(WAKERS_SHOWN) {
            let _ = write!(
                out,
                "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td>",
                colour(*i),
                esc(variant),
                esc(waker)
            );
            for map in [&a.from_task_cpu, &a.toward_waker] {
                for landing in LANDINGS {
                    let n = map
                        .get(*waker)
                        .and_then(|l| l.get(&landing))
                        .copied()
                        .unwrap_or(0);
                    out += &cell(n, total);
                }
            }
            out += "</tr>\n";
        }
        if wakers.len() > WAKERS_SHOWN {
            let rest: u64 = wakers[WAKERS_SHOWN..].iter().map(|(_, n)| n).sum();
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{} other wakers</td><td colspan=\"10\">{}</td></tr>",
                esc(variant),
                wakers.len() - WAKERS_SHOWN,
                cell_text(rest, total)
            );
        }
        if a.unattributed > 0 {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>unattributed</td><td colspan=\"10\">{} wakeups the trace \
                 could not pair with a waker</td></tr>",
                esc(variant),
                a.unattributed
            );
        }
    }
    out += "</table>\n";
    out
}

fn cell(n: u64, total: f64) -> String {
    if n == 0 {
        return "<td class=\"zero\">0</td>".into();
    }
    format!("<td>{}</td>", cell_text(n, total))
}

fn cell_text(n: u64, total: f64) -> String {
    format!("{:.1}% <small>({n})</small>", 100.0 * n as f64 / total)
}
