//! `bisect.html`: the bisect's steps on one page. Each step is a row of dots on one shared
//! axis of the metric (the good end's boots, the bad end's, the probe's), with its verdicts,
//! its class and the probe's kernel identity; the answer on top, the log at the bottom.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{Answer, BisectRecord, StepKind};
use crate::report::html::esc;
use crate::report::RunRecord;

const WIDTH: f64 = 420.0;
const ROW: f64 = 14.0;

/// Writes `dir/bisect.html` and returns its path.
pub fn write(record: &BisectRecord, dir: &Path) -> Result<PathBuf> {
    let path = dir.join("bisect.html");
    std::fs::write(&path, render(record, dir))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The page. A step whose record cannot be read shows its line without dots.
pub(crate) fn render(record: &BisectRecord, dir: &Path) -> String {
    // Per step: (label, point, samples) for each of its variants, base first.
    let mut rows: Vec<Vec<(String, usize, Vec<f64>)>> = Vec::new();
    for step in &record.steps {
        let mut dots = Vec::new();
        if let Some(rel) = &step.record {
            if let Ok(run) = RunRecord::read_json(&dir.join(rel)) {
                let points = step.run_order();
                for p in points {
                    let name = &record.points[p].variant.name;
                    let samples = run
                        .comparison()
                        .samples(&record.metric, name)
                        .map(<[f64]>::to_vec)
                        .unwrap_or_default();
                    dots.push((name.clone(), p, samples));
                }
            }
        }
        rows.push(dots);
    }
    let all: Vec<f64> = rows
        .iter()
        .flatten()
        .flat_map(|(_, _, s)| s.iter().copied())
        .collect();
    let (min, max) = all
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let (min, max) = if min.is_finite() && max > min {
        (min, max)
    } else {
        (0.0, 1.0)
    };
    let x = |v: f64| 10.0 + (v - min) / (max - min) * (WIDTH - 20.0);
    let n = record.points.len() - 1;
    let colour = |p: usize| match p {
        0 => "#2b6cb0",
        p if p == n => "#c53030",
        _ => "#222",
    };

    let mut out = String::new();
    let title = format!("bisect {} on {}", record.request.scenario, record.metric);
    let _ = write!(
        out,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font:14px system-ui,sans-serif;margin:1.5em;max-width:70em}}\
         table{{border-collapse:collapse}}td,th{{padding:.3em .6em;border-bottom:1px solid #ddd;vertical-align:top;text-align:left}}\
         .culprit{{background:#fff5f5}}code{{font-size:12px}}pre{{background:#f7f7f7;padding:1em;overflow-x:auto}}\
         </style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    let answer = match &record.answer {
        Some(Answer::Found(found)) => {
            let mut parts: Vec<String> = found
                .culprits
                .iter()
                .map(|c| format!("culprit {}", record.culprit_text(c)))
                .collect();
            parts.extend(
                found
                    .unverified
                    .iter()
                    .map(|c| format!("point {} not verified ({})", c.point, c.note)),
            );
            if let Some((lo, hi)) = found.range {
                parts.push(format!("the change is in points {}..={hi}", lo + 1));
            }
            if parts.is_empty() {
                parts.push("no culprit verified".into());
            }
            parts.join("; ")
        }
        Some(Answer::NothingToBisect { .. }) => "nothing to bisect".into(),
        None => "no answer yet".into(),
    };
    let _ = write!(
        out,
        "<p><b>{}</b></p><p>Dots: each boot's {} \
         (<span style=\"color:{}\">good</span>, <span style=\"color:{}\">bad</span>, probe in black), \
         axis {min:.1} to {max:.1} {}.</p><table><tr><th>step</th><th>boots</th><th>verdicts</th><th>kernel</th></tr>",
        esc(&answer),
        esc(&record.metric),
        colour(0),
        colour(n),
        esc(&record.unit)
    );
    let culprits: Vec<usize> = match &record.answer {
        Some(Answer::Found(found)) => found.culprits.iter().map(|c| c.point).collect(),
        _ => Vec::new(),
    };
    for (i, (step, dots)) in record.steps.iter().zip(&rows).enumerate() {
        let height = ROW * dots.len().max(1) as f64 + 4.0;
        let mut svg = format!("<svg width=\"{WIDTH}\" height=\"{height}\" role=\"img\">");
        for (row, (name, p, samples)) in dots.iter().enumerate() {
            let y = ROW * row as f64 + ROW / 2.0 + 2.0;
            let _ = write!(
                svg,
                "<line x1=\"10\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#eee\"/>",
                WIDTH - 10.0
            );
            for v in samples {
                let _ = write!(
                    svg,
                    "<circle cx=\"{:.1}\" cy=\"{y}\" r=\"3.5\" fill=\"{}\" fill-opacity=\".7\"><title>{}: {v:.2}</title></circle>",
                    x(*v),
                    colour(*p),
                    esc(name)
                );
            }
        }
        svg.push_str("</svg>");
        let kernel = record.points[step.point]
            .build
            .as_ref()
            .map_or(String::new(), |b| {
                format!(
                    "{}<br><code>{}</code>",
                    esc(&record.points[step.point].variant.name),
                    esc(&b.release)
                )
            });
        let _ = write!(
            out,
            "<tr{}><td>{}</td><td>{svg}</td><td>{}</td><td>{kernel}</td></tr>",
            if culprits.contains(&step.point) && step.kind == StepKind::Verify {
                " class=\"culprit\""
            } else {
                ""
            },
            i + 1,
            esc(&record.step_line(i, step))
        );
    }
    let _ = write!(
        out,
        "</table><h2>Log</h2><pre>{}</pre></body></html>",
        esc(&record.log())
    );
    out
}
