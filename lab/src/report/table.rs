//! The LKP/mmtests-style text table of a [`Comparison`]: first the primary metrics' verdicts
//! (DIFFERENT, SAME or UNKNOWN and the numbers behind them), then one row per metric with the
//! base's mean and relative stddev and, per other variant, its %change, marker, mean and
//! stddev; then the metric's name, p-values (raw, and Holm-adjusted for secondary metrics),
//! intervals and boot counts.

use super::comparison::{describe, Comparison, MetricRow, MARK_ALPHA, STRONG_MARK_ALPHA};
use super::{change_text, fmt_p, fmt_value};
use crate::stats::{Summary, SAME_CONFIDENCE, TABLE_CONFIDENCE};

/// Renders `rows` of `c`.
pub(super) fn render(c: &Comparison, rows: &[MetricRow<'_>]) -> String {
    Table::of(c, rows).render(c, rows)
}

/// Mean and relative stddev of one variant in one row.
struct Cell {
    mean: String,
    /// "± x%" part; `None` when undefined (fewer than 2 samples, zero mean).
    stddev: Option<String>,
}

impl Cell {
    fn of(summary: Option<&Summary>) -> Cell {
        Cell {
            mean: summary.map_or("-".to_string(), |s| fmt_value(s.mean)),
            stddev: summary
                .and_then(Summary::stddev_pct)
                .map(|p| format!("{p:.0}")),
        }
    }

    fn render(&self, w: &Widths) -> String {
        match &self.stddev {
            Some(sd) => format!(
                "{:>mw$} ± {:>sw$}%",
                self.mean,
                sd,
                mw = w.mean,
                sw = w.stddev
            ),
            None => format!(
                "{:>mw$}{}",
                self.mean,
                " ".repeat(w.stddev + 4),
                mw = w.mean
            ),
        }
    }
}

struct OtherCell {
    pct: String,
    marker: &'static str,
    cell: Cell,
}

struct Row {
    base: Cell,
    others: Vec<OtherCell>,
    label: String,
    notes: String,
}

struct Widths {
    mean: usize,
    stddev: usize,
    pct: usize,
}

const MARKER_WIDTH: usize = 2;

impl Widths {
    fn base_group(&self) -> usize {
        self.mean + 3 + self.stddev + 1
    }

    /// Two spaces keep a long %change off the previous group.
    fn other_group(&self) -> usize {
        2 + self.pct + 1 + MARKER_WIDTH + 2 + self.base_group()
    }
}

struct Table {
    rows: Vec<Row>,
    widths: Widths,
    /// Width of each variant's column group, base first.
    groups: Vec<usize>,
    label_width: usize,
}

impl Table {
    fn of(c: &Comparison, rows: &[MetricRow<'_>]) -> Table {
        let rows: Vec<Row> = rows.iter().map(Table::row).collect();
        let cells = rows
            .iter()
            .flat_map(|r| std::iter::once(&r.base).chain(r.others.iter().map(|o| &o.cell)));
        let mut widths = Widths {
            mean: 10,
            stddev: 2,
            pct: 8,
        };
        for cell in cells {
            widths.mean = widths.mean.max(cell.mean.chars().count());
            let sd = cell.stddev.as_ref().map_or(0, |s| s.chars().count());
            widths.stddev = widths.stddev.max(sd);
        }
        for o in rows.iter().flat_map(|r| &r.others) {
            widths.pct = widths.pct.max(o.pct.chars().count());
        }
        let groups = c
            .variants()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let natural = if i == 0 {
                    widths.base_group()
                } else {
                    widths.other_group()
                };
                natural.max(v.chars().count())
            })
            .collect();
        let label_width = rows
            .iter()
            .map(|r| r.label.chars().count())
            .max()
            .unwrap_or(0);
        Table {
            rows,
            widths,
            groups,
            label_width,
        }
    }

    fn row(r: &MetricRow<'_>) -> Row {
        let m = r.metric;
        let mut others = Vec::new();
        let mut notes = Vec::new();
        for o in &r.others {
            let pct = match &o.change {
                Some(ch) => change_text(m, ch).0,
                None => String::new(),
            };
            notes.push(match &o.change {
                None => "p=n/a".to_string(),
                Some(ch) => {
                    let mut note = match (&o.verdict, o.adjusted_p) {
                        (Some(v), _) => format!("{} p={}", v.decision, fmt_p(v.p)),
                        (None, Some(adj)) => {
                            format!("p={} adj={}", fmt_p(ch.p_value), fmt_p(adj))
                        }
                        (None, None) => format!("p={}", fmt_p(ch.p_value)),
                    };
                    if let Some(ci) = change_text(m, ch).1 {
                        note += &format!(" {ci}");
                    }
                    if let Some(word) = o.judgement {
                        note += " ";
                        note += word;
                    }
                    note
                }
            });
            others.push(OtherCell {
                pct,
                marker: o.marker,
                cell: Cell::of(o.summary.as_ref()),
            });
        }
        let counts: Vec<String> = r.counts.iter().map(usize::to_string).collect();
        notes.push(format!("n={}", counts.join("/")));
        let label = label(m);
        Row {
            base: Cell::of(r.base.as_ref()),
            others,
            label,
            notes: notes.join("  "),
        }
    }

    /// Start column of each group (groups are separated by one space).
    fn starts(&self) -> Vec<usize> {
        let mut at = 0;
        self.groups
            .iter()
            .map(|w| {
                let start = at;
                at += w + 1;
                start
            })
            .collect()
    }

    fn render(&self, c: &Comparison, rows: &[MetricRow<'_>]) -> String {
        let w = &self.widths;
        let starts = self.starts();
        let mut lines = vec![format!("comparison: {}", c.name()), String::new()];
        let verdicts = verdict_lines(rows);
        if !verdicts.is_empty() {
            lines.extend(verdicts);
            lines.push(String::new());
        }

        let names: Vec<String> = c
            .variants()
            .iter()
            .zip(&self.groups)
            .map(|(v, &g)| format!("{v:^g$}"))
            .collect();
        lines.push(names.join(" ").trim_end().to_string());
        let dashes: Vec<String> = self.groups.iter().map(|&g| "-".repeat(g)).collect();
        lines.push(dashes.join(" "));

        // LKP's two caption lines, aligned to the fields they name.
        let mut captions = Vec::new();
        let mut marks = Vec::new();
        for (i, (&start, &g)) in starts.iter().zip(&self.groups).enumerate() {
            let end = start + g;
            place(&mut captions, end, "%stddev");
            place(&mut marks, end - 3, "\\");
            if i > 0 {
                let pct_end = end - w.other_group() + w.pct;
                place(&mut captions, pct_end, "%change");
                place(&mut marks, pct_end - 3, "|");
            }
        }
        lines.push(
            captions
                .into_iter()
                .collect::<String>()
                .trim_end()
                .to_string(),
        );
        lines.push(marks.into_iter().collect::<String>().trim_end().to_string());

        for row in &self.rows {
            let mut groups = vec![format!("{:>g$}", row.base.render(w), g = self.groups[0])];
            for (o, &g) in row.others.iter().zip(&self.groups[1..]) {
                let text = format!(
                    "  {:>pw$} {:<mk$}  {}",
                    o.pct,
                    o.marker,
                    o.cell.render(w),
                    pw = w.pct,
                    mk = MARKER_WIDTH
                );
                groups.push(format!("{text:>g$}"));
            }
            let line = format!(
                "{}  {:<lw$}  {}",
                groups.join(" "),
                row.label,
                row.notes,
                lw = self.label_width
            );
            lines.push(line.trim_end().to_string());
        }
        if self.rows.is_empty() {
            lines.push("(no metrics)".to_string());
        }
        lines.push(String::new());
        let secondary = rows
            .iter()
            .flat_map(|r| &r.others)
            .filter(|o| o.adjusted_p.is_some())
            .count();
        if rows.iter().any(|r| r.metric.primary) {
            lines.push(format!(
                "primary: DIFFERENT when p (the larger of the exact Mann-Whitney's and Welch's, \
                 adjusted for every look and primary decision) <= {} and the shift (or, where only they moved, the means) \
                 exceeds the magnitude; SAME after {} or \
                 more boots a side (more where the magnitude is small against a bounded range: \
                 19 at 10 points of a share, 39 at 5) when the {}% intervals of the shift and \
                 of the means lie inside ±magnitude; otherwise UNKNOWN",
                crate::stats::DIFFERENT_ALPHA,
                crate::stats::SAME_MIN_BOOTS,
                SAME_CONFIDENCE * 100.0
            ));
        }
        lines.push(format!(
            "* p<{MARK_ALPHA}, ** p<{STRONG_MARK_ALPHA} after Holm's adjustment over the {secondary} \
             secondary comparisons (adj), with the shift beyond the metric's magnitude"
        ));
        lines.push(format!(
            "p: Mann-Whitney, exact; [..]: {}% distribution-free \
             interval of the shift (Hodges-Lehmann), in % of the base mean (a share's change \
             and interval in points, pp), inside the metric's range; n: boots per variant, base \
             first",
            TABLE_CONFIDENCE * 100.0
        ));
        let mut text = lines.join("\n");
        text.push('\n');
        text
    }
}

/// Writes `text` into `line` so that it ends just before column `end`, padding with spaces.
fn place(line: &mut Vec<char>, end: usize, text: &str) {
    let len = text.chars().count();
    let start = end.saturating_sub(len);
    if line.len() < start + len {
        line.resize(start + len, ' ');
    }
    for (i, ch) in text.chars().enumerate() {
        line[start + i] = ch;
    }
}

/// The metric's magnitude with its unit ("20.00 %", "50% of the base").
pub(super) fn magnitude_text(m: &super::Metric) -> String {
    match m.magnitude {
        crate::stats::Magnitude::Absolute(_) => {
            format!(
                "{}{}",
                m.magnitude,
                super::unit_suffix(super::comparison::difference_unit(&m.unit))
            )
        }
        crate::stats::Magnitude::Relative { .. } => m.magnitude.to_string(),
    }
}

fn label(m: &super::Metric) -> String {
    if m.unit.is_empty() {
        m.name.clone()
    } else {
        format!("{} ({})", m.name, m.unit)
    }
}

/// One line per primary metric and variant: the decision and its numbers.
fn verdict_lines(rows: &[MetricRow<'_>]) -> Vec<String> {
    let mut lines = Vec::new();
    for row in rows.iter().filter(|r| r.metric.primary) {
        let m = row.metric;
        lines.push(format!(
            "primary: {}, smallest change that matters {}",
            label(m),
            magnitude_text(m)
        ));
        let width = row
            .others
            .iter()
            .map(|o| o.variant.chars().count())
            .max()
            .unwrap_or(0);
        for o in &row.others {
            let text = match &o.verdict {
                Some(v) => format!("{:<9}  {}", v.decision.to_string(), describe(v, &m.unit)),
                None => "no verdict: a side has no samples".to_string(),
            };
            lines.push(format!("  {:<width$}  {text}", o.variant));
        }
    }
    lines
}
