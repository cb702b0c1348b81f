//! A run record as one self-contained HTML page: the comparison table, each metric's per-boot
//! values as dots, each variant's per-CPU picture drawn on the topology, the manifest and links
//! to every boot's raw files. No scripts, stylesheets, fonts or images are fetched.
//!
//! The charts are hand-drawn SVG: a few `rect`, `circle`, `line` and `text` elements, which no
//! plotting crate makes simpler, and which keeps the page free of scripts and the build free of
//! a rendering stack (`plotters` would add a font and image pipeline for the same rectangles).
//!
//! Every number comes from [`Comparison::rows`], the same rows the text table prints; the
//! pictures read the per-CPU map the scenario's [`Picture`] names in each boot's details.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use super::{
    change_text, describe, fmt_p, fmt_value, BootRecord, Comparison, MetricRow, Picture, RunRecord,
};
use crate::topology::Topology;

mod attribution;
mod heatmap;
use heatmap::heatmaps;

/// Colours of the variants, base first: far apart in hue, so base and the others differ at a
/// glance; they repeat after six.
const PALETTE: [&str; 6] = [
    "#2f6db3", "#d9480f", "#2b8a3e", "#862e9c", "#b08800", "#0b7285",
];

/// Where the page of the record at `record_path` goes: next to it, `.html` for `.json`.
pub(crate) fn html_path(record_path: &Path) -> PathBuf {
    record_path.with_extension("html")
}

/// Renders the record read from `record_path` (used to find its boots' files) and writes it to
/// [`html_path`]. `picture` is the record's own, else the one the caller found for its scenario.
pub(crate) fn write(
    record: &RunRecord,
    record_path: &Path,
    picture: Option<&Picture>,
) -> Result<PathBuf> {
    let path = html_path(record_path);
    let page = render(record, record_path, picture)?;
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The page as a string; see [`write`].
pub(crate) fn render(
    record: &RunRecord,
    record_path: &Path,
    picture: Option<&Picture>,
) -> Result<String> {
    let c = record.comparison();
    let picture = record.manifest.picture.as_ref().or(picture);
    let topology = topology_of(record, record_path)?;
    let record_dir = record_path.parent().unwrap_or(Path::new("."));
    let mut page = String::new();
    let title = format!("lab: {}", c.name());
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let _ = write!(page, "<h1>{}</h1>\n<p class=\"legend\">", esc(c.name()));
    for (i, v) in c.variants().iter().enumerate() {
        let role = if c.is_base(v) { "base" } else { "variant" };
        let _ = write!(
            page,
            "<span class=\"swatch\" style=\"background:{}\"></span>{} <small>({role})</small> ",
            colour(i),
            esc(v)
        );
    }
    let _ = writeln!(
        page,
        "</p>\n<p class=\"meta\">{} boots; record <code>{}</code></p>",
        record.boots().len(),
        esc(&record_path.display().to_string())
    );
    if let Some(failure) = &record.failure {
        let _ = writeln!(
            page,
            "<p class=\"failure\">Stopped early: {}</p>",
            esc(failure)
        );
    }
    // A grouped (merged) comparison: each group against its own base.
    let groups = c.groups();
    let rows: Vec<_> = groups.iter().map(Comparison::rows).collect();
    // The decision first, then the pictures: what a reader compares at a glance.
    for (g, rows) in groups.iter().zip(&rows) {
        page += &verdicts(g, rows);
    }
    page += &rejected(record);
    page += &heatmaps(record, record_path, picture, topology.as_ref())?;
    page += &attribution::section(record);
    for (g, rows) in groups.iter().zip(&rows) {
        page += &table(g, rows);
    }
    page += &dots(record);
    page += &manifest(record);
    page += &boots(record, record_dir);
    page += "</body></html>\n";
    Ok(page)
}

/// The record's topology from the TOML kept in its manifest; `None` when it kept none.
fn topology_of(record: &RunRecord, record_path: &Path) -> Result<Option<Topology>> {
    let Some(text) = record.manifest.topology.get("file").and_then(Value::as_str) else {
        return Ok(None);
    };
    let name = record
        .manifest
        .topology
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("topology");
    Topology::from_toml_str(text, format!("{name}.toml"))
        .map(Some)
        .with_context(|| format!("{}: manifest.topology.file", record_path.display()))
}

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em auto;max-width:1200px;\
padding:0 1em;color:#1d1d1f;line-height:1.35}\
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}\
h3{font-size:1em;margin:1em 0 .3em}\
.legend{font-size:1.05em}.swatch{display:inline-block;width:.9em;height:.9em;border-radius:2px;\
vertical-align:-.1em;margin:0 .3em 0 .6em}\
.meta,.note{color:#555;font-size:.9em}.failure{color:#a00;font-weight:bold}\
.scroll{overflow-x:auto}\
table{border-collapse:collapse;font-size:.9em}th,td{border:1px solid #ddd;padding:.25em .5em;\
vertical-align:top}th{background:#f4f4f6;text-align:left}\
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td.hit{background:#fff4d6}.pct{font-weight:bold}.small{color:#555;font-size:.85em}\
td.decision{font-weight:bold}td.different{background:#ffe1d6}td.same{background:#dff3e2}\
td.unknown{background:#f0f0f0}\
svg{max-width:100%;height:auto;display:block}svg text{font-family:system-ui,sans-serif}\
.maps{display:flex;flex-wrap:wrap;gap:1.2em}.maps figure{margin:0}\
figcaption{font-weight:bold;margin-bottom:.2em}\
pre{background:#f6f6f8;padding:.5em;overflow-x:auto;font-size:.85em}\
dl.manifest dt{font-weight:bold;margin-top:.6em}dl.manifest dd{margin-left:1em}";

/// The primary metrics' verdicts: DIFFERENT, SAME or UNKNOWN per variant, with the numbers, and
/// the decision points of an adaptive run.
fn verdicts(c: &Comparison, rows: &[MetricRow<'_>]) -> String {
    let primaries: Vec<&MetricRow<'_>> = rows.iter().filter(|r| r.metric.primary).collect();
    if primaries.is_empty() {
        return String::new();
    }
    let mut out = String::from("<h2>Verdict</h2>\n<table class=\"verdicts\"><tbody>\n");
    for row in primaries {
        let m = row.metric;
        for o in &row.others {
            let (decision, numbers) = match &o.verdict {
                Some(v) => (v.decision.to_string(), describe(v, &m.unit)),
                None => ("none".to_string(), "a side has no samples".to_string()),
            };
            let _ = writeln!(
                out,
                "<tr><th>{}</th><td>{} against {}</td><td class=\"decision {}\">{}</td><td class=\"small\">{}</td></tr>",
                esc(&m.name),
                esc(o.variant),
                esc(c.base()),
                esc(&decision.to_ascii_lowercase()),
                esc(&decision),
                esc(&numbers)
            );
        }
        let _ = writeln!(
            out,
            "<tr><td colspan=\"4\" class=\"small\">{}: smallest change that matters {}</td></tr>",
            esc(&m.name),
            esc(&super::table::magnitude_text(m))
        );
    }
    out += "</tbody></table>\n<p class=\"note\">DIFFERENT: the larger of the exact \
            Mann-Whitney p and Welch's, adjusted for every look of the adaptive run and every \
            primary decision, &le; 0.01 and the Hodges-Lehmann shift (or, where only they moved, \
            the means) beyond the magnitude; SAME: after 9 or more boots a \
            side, the 95% intervals of the shift and of the difference of the means inside \
            &plusmn;magnitude; otherwise UNKNOWN.</p>\n";
    out
}

/// Boots that ran but gave no sample, with why.
fn rejected(record: &RunRecord) -> String {
    let mut out = String::new();
    if !record.decisions.is_empty() {
        out += "<details><summary>Decision points</summary><ol class=\"small\">";
        for d in &record.decisions {
            let counts: Vec<String> = d
                .per_variant
                .iter()
                .map(|(v, n)| format!("{} {n}", esc(v)))
                .collect();
            let verdicts: Vec<String> = d
                .verdicts
                .iter()
                .map(|v| {
                    let word = v
                        .verdict
                        .as_ref()
                        .map_or("no verdict".to_string(), |x| x.decision.to_string());
                    format!("{} {}: {}", esc(&v.metric), esc(&v.variant), word)
                })
                .collect();
            let _ = write!(
                out,
                "<li>after {} boots ({}): {}; {}</li>",
                d.boots,
                counts.join(", "),
                verdicts.join("; "),
                esc(&d.next)
            );
        }
        out += "</ol></details>\n";
    }
    if record.rejected.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "<h3>Boots that gave no sample ({})</h3><ul class=\"small\">",
        record.rejected.len()
    );
    for r in &record.rejected {
        let _ = writeln!(
            out,
            "<li>{}: {} <code>{}</code></li>",
            esc(&r.variant),
            esc(&r.cause),
            esc(&r.dir.display().to_string())
        );
    }
    out += "</ul>\n";
    out
}

/// The comparison: per metric, the base's mean and spread and every variant's %change with its
/// marker, p (and the Holm-adjusted p of a secondary metric) and 95% interval; the text table
/// below it for copying.
fn table(c: &Comparison, rows: &[MetricRow<'_>]) -> String {
    let mut out = String::from("<h2>Comparison</h2>\n<div class=\"scroll\"><table class=\"cmp\">");
    out += "<thead><tr><th>metric</th>";
    for (i, v) in c.variants().iter().enumerate() {
        let _ = write!(
            out,
            "<th><span class=\"swatch\" style=\"background:{}\"></span>{}</th>",
            colour(i),
            esc(v)
        );
    }
    out += "<th>n</th></tr></thead><tbody>\n";
    for row in rows {
        let m = row.metric;
        let unit = if m.unit.is_empty() {
            String::new()
        } else {
            format!(" <span class=\"small\">({})</span>", esc(&m.unit))
        };
        let _ = write!(
            out,
            "<tr class=\"metric\" data-metric=\"{}\"><th>{}{unit}</th>",
            esc(&m.name),
            esc(&m.name)
        );
        let _ = write!(out, "<td class=\"num\">{}</td>", mean_sd(row.base.as_ref()));
        for o in &row.others {
            let hit = if o.marker.is_empty() { "" } else { " hit" };
            let _ = write!(out, "<td class=\"num{hit}\">");
            match &o.change {
                Some(ch) => {
                    let (pct, interval) = change_text(row.metric, ch);
                    let _ = write!(
                        out,
                        "<span class=\"pct\">{} {}</span> {}<br><span class=\"small\">",
                        esc(&pct),
                        esc(o.marker),
                        mean_sd(o.summary.as_ref()),
                    );
                    match (&o.verdict, o.adjusted_p) {
                        (Some(v), _) => {
                            let _ = write!(out, "<b>{}</b> p={}", v.decision, fmt_p(ch.p_value));
                        }
                        (None, Some(adj)) => {
                            let _ = write!(out, "p={} adj={}", fmt_p(ch.p_value), fmt_p(adj));
                        }
                        (None, None) => {
                            let _ = write!(out, "p={}", fmt_p(ch.p_value));
                        }
                    }
                    if let Some(ci) = interval {
                        let _ = write!(out, " {ci}");
                    }
                    if let Some(word) = o.judgement {
                        let _ = write!(out, " {word}");
                    }
                    out += "</span>";
                }
                None => {
                    let _ = write!(
                        out,
                        "{}<br><span class=\"small\">p=n/a</span>",
                        mean_sd(o.summary.as_ref())
                    );
                }
            }
            out += "</td>";
        }
        let counts: Vec<String> = row.counts.iter().map(usize::to_string).collect();
        let _ = writeln!(out, "<td class=\"num\">{}</td></tr>", counts.join("/"));
    }
    out += "</tbody></table></div>\n<p class=\"note\">%change of the mean against the base; \
            p: Mann-Whitney, exact; adj: Holm-adjusted over the \
            secondary metrics' comparisons; * adj&lt;0.05, ** adj&lt;0.01 with the shift beyond \
            the metric's magnitude; [..]: 95% distribution-free interval of the shift \
            (Hodges-Lehmann), in % of the base mean (a share's change and interval in points), inside \
            the metric's range; n: boots per \
            variant, base first.</p>\n";
    let _ = writeln!(
        out,
        "<details><summary>The table as <code>lab compare</code> prints it</summary><pre>{}</pre></details>",
        esc(&c.table_of(rows))
    );
    out
}

fn mean_sd(s: Option<&crate::stats::Summary>) -> String {
    match s {
        None => "-".to_string(),
        Some(s) => match s.stddev_pct() {
            Some(sd) => format!("{} ± {sd:.0}%", fmt_value(s.mean)),
            None => fmt_value(s.mean),
        },
    }
}

/// Per metric, each variant's boots as dots on one shared axis, with the median as a bar.
fn dots(record: &RunRecord) -> String {
    let c = record.comparison();
    let mut out = String::from(
        "<h2>Every boot</h2>\n<p class=\"note\">One dot per boot (hover for its number and \
         value), the bar is the median; the axis is shared by the variants of a metric.</p>\n",
    );
    const LABEL_W: f64 = 200.0;
    const PLOT_W: f64 = 360.0;
    const ROW_H: f64 = 26.0;
    for m in c.metrics() {
        let per_variant: Vec<Vec<(usize, f64)>> = c
            .variants()
            .iter()
            .map(|v| {
                record
                    .boots()
                    .iter()
                    .filter(|b| &b.variant == v)
                    .filter_map(|b| b.samples.get(&m.name).map(|x| (b.sequence, *x)))
                    .collect()
            })
            .collect();
        let all: Vec<f64> = per_variant.iter().flatten().map(|(_, x)| *x).collect();
        let (mut lo, mut hi) = all
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        if all.is_empty() {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = (hi.abs() * 0.1).max(1.0);
            (lo, hi) = (lo - pad, hi + pad);
        }
        let pad = (hi - lo) * 0.04;
        let (lo, hi) = (lo - pad, hi + pad);
        let x_of = |v: f64| LABEL_W + (v - lo) / (hi - lo) * PLOT_W;
        let height = ROW_H * c.variants().len() as f64 + 22.0;
        let width = LABEL_W + PLOT_W + 12.0;
        let unit = if m.unit.is_empty() {
            String::new()
        } else {
            format!(" ({})", m.unit)
        };
        let _ = write!(
            out,
            "<h3>{}{}</h3><svg class=\"dots\" data-metric=\"{}\" viewBox=\"0 0 {width} {height}\" \
             width=\"{width}\" height=\"{height}\" role=\"img\">",
            esc(&m.name),
            esc(&unit),
            esc(&m.name)
        );
        for (i, (v, points)) in c.variants().iter().zip(&per_variant).enumerate() {
            let y = ROW_H * i as f64 + ROW_H / 2.0;
            let _ = write!(
                out,
                "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>\
                 <line x1=\"{LABEL_W}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#eee\"/>",
                LABEL_W - 8.0,
                y + 4.0,
                esc(&shorten(v, 30)),
                LABEL_W + PLOT_W
            );
            for (k, (sequence, value)) in points.iter().enumerate() {
                // A small alternating offset keeps equal values apart.
                let dy = [0.0, -5.0, 5.0][k % 3];
                let _ = write!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{}\" fill-opacity=\"0.75\">\
                     <title>boot #{sequence}: {}</title></circle>",
                    x_of(*value),
                    y + dy,
                    colour(i),
                    esc(&fmt_value(*value))
                );
            }
            if let Ok(s) = c.summary(&m.name, v) {
                let _ = write!(
                    out,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\" stroke-width=\"2\">\
                     <title>median {}</title></line>",
                    y - 10.0,
                    y + 10.0,
                    esc(&fmt_value(s.median)),
                    x = x_of(s.median)
                );
            }
        }
        let axis_y = ROW_H * c.variants().len() as f64 + 4.0;
        let _ = write!(
            out,
            "<line x1=\"{LABEL_W}\" x2=\"{}\" y1=\"{axis_y}\" y2=\"{axis_y}\" stroke=\"#999\"/>",
            LABEL_W + PLOT_W
        );
        for (v, anchor) in [(lo, "start"), ((lo + hi) / 2.0, "middle"), (hi, "end")] {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"{anchor}\" fill=\"#555\">{}</text>",
                x_of(v),
                axis_y + 13.0,
                esc(&fmt_value(v))
            );
        }
        out += "</svg>\n";
    }
    out
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let head: String = text.chars().take(max - 1).collect();
        format!("{head}…")
    }
}

/// The manifest, field by field: QEMU, accelerator, kernels, image, topology, host,
/// parameters. Shown as the record keeps them; the page knows none of their inner names.
fn manifest(record: &RunRecord) -> String {
    let m = &record.manifest;
    let mut out = String::from("<h2>Manifest</h2>\n<dl class=\"manifest\">\n");
    for (name, value) in [
        ("QEMU", &m.qemu),
        ("accelerator", &m.accelerator),
        ("kernels", &m.kernel),
        ("image", &m.image),
        ("topology", &m.topology),
        ("host", &m.host),
        ("parameters", &m.parameters),
    ] {
        let _ = writeln!(out, "<dt>{name}</dt><dd>{}</dd>", value_html(value, 0));
    }
    out += "</dl>\n";
    out
}

/// A JSON value as nested lists and tables; long or deep parts fold away.
fn value_html(v: &Value, depth: usize) -> String {
    match v {
        Value::Null => "-".to_string(),
        Value::Bool(_) | Value::Number(_) => esc(&v.to_string()),
        Value::String(s) if s.contains('\n') || s.chars().count() > 100 => {
            let first = shorten(s.lines().next().unwrap_or(""), 60);
            format!(
                "<details><summary>{}</summary><pre>{}</pre></details>",
                esc(&first),
                esc(s)
            )
        }
        Value::String(s) => esc(s),
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            let parts: Vec<String> = items.iter().map(|i| value_html(i, depth + 1)).collect();
            parts.join(", ")
        }
        _ if depth >= 2 => {
            let text = serde_json::to_string_pretty(v).unwrap_or_default();
            format!(
                "<details><summary>{}</summary><pre>{}</pre></details>",
                esc(&shorten(&v.to_string(), 60)),
                esc(&text)
            )
        }
        Value::Array(items) if items.iter().all(Value::is_object) => {
            let mut keys: Vec<&String> = Vec::new();
            for item in items.iter().filter_map(Value::as_object) {
                for k in item.keys() {
                    if !keys.contains(&k) {
                        keys.push(k);
                    }
                }
            }
            let mut out = String::from("<div class=\"scroll\"><table><tr>");
            for k in &keys {
                let _ = write!(out, "<th>{}</th>", esc(k));
            }
            out += "</tr>";
            for item in items {
                out += "<tr>";
                for k in &keys {
                    let cell = item
                        .get(k.as_str())
                        .map_or("-".to_string(), |x| value_html(x, depth + 1));
                    let _ = write!(out, "<td>{cell}</td>");
                }
                out += "</tr>";
            }
            out += "</table></div>";
            out
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(|i| value_html(i, depth + 1)).collect();
            format!("<ol><li>{}</li></ol>", parts.join("</li><li>"))
        }
        Value::Object(map) => {
            let mut out = String::from("<ul>");
            for (k, x) in map {
                let _ = write!(
                    out,
                    "<li><b>{}</b>: {}</li>",
                    esc(k),
                    value_html(x, depth + 1)
                );
            }
            out += "</ul>";
            out
        }
    }
}

/// Every boot with links to the files it left (logs, raw traces).
fn boots(record: &RunRecord, record_dir: &Path) -> String {
    let mut out = String::from(
        "<h2>Boots and raw traces</h2>\n<div class=\"scroll\"><table><tr><th>#</th>\
         <th>variant</th><th>files</th></tr>\n",
    );
    let html_dir = absolute(record_dir);
    for boot in record.boots() {
        let files = match boot_dir(boot, record_dir) {
            Some(dir) => {
                let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect();
                names.sort();
                let links: Vec<String> = names
                    .iter()
                    .map(|p| {
                        let name = p.file_name().unwrap_or_default().to_string_lossy();
                        format!(
                            "<a href=\"{}\">{}</a>",
                            esc(&href(p, &html_dir)),
                            esc(&name)
                        )
                    })
                    .collect();
                if links.is_empty() {
                    format!("{} (empty)", esc(&dir.display().to_string()))
                } else {
                    links.join(" ")
                }
            }
            None => match boot.details.get("dir").and_then(Value::as_str) {
                Some(d) => format!(
                    "<span class=\"small\">{} (not on this machine)</span>",
                    esc(d)
                ),
                None => "-".to_string(),
            },
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{files}</td></tr>",
            boot.sequence,
            esc(&boot.variant)
        );
    }
    out += "</table></div>\n";
    out
}

/// The boot's directory on this machine: under the record's own `boots/` (a copied or merged
/// record's source directory), else where it was recorded.
fn boot_dir(boot: &BootRecord, record_dir: &Path) -> Option<PathBuf> {
    let recorded = PathBuf::from(boot.details.get("dir")?.as_str()?);
    let source_dir = boot
        .details
        .get(super::merge::SOURCE_KEY)
        .and_then(Value::as_str)
        .and_then(|p| Path::new(p).parent().map(Path::to_path_buf))
        .unwrap_or_else(|| record_dir.to_path_buf());
    let local = source_dir.join("boots").join(recorded.file_name()?);
    if local.is_dir() {
        Some(local)
    } else if recorded.is_dir() {
        Some(recorded)
    } else {
        None
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A link to `file`: relative when it lies under the page's directory, else a `file:` URL.
fn href(file: &Path, html_dir: &Path) -> String {
    let file = absolute(file);
    let (prefix, path) = match file.strip_prefix(html_dir) {
        Ok(rel) => ("", rel.to_path_buf()),
        Err(_) => ("file://", file.clone()),
    };
    let mut out = String::from(prefix);
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~+".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Text made safe for HTML content and attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

#[cfg(test)]
mod tests;
