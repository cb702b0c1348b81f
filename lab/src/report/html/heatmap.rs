//! Each variant's per-CPU picture: one row of cells per boot, laid out by the topology's nodes
//! and LLCs, with the CPUs the scenario marks outlined and a mean row below.

use super::*;

/// One boot's row of a picture: its per-CPU values and marked CPUs.
struct PictureRow {
    sequence: usize,
    values: BTreeMap<u32, f64>,
    marks: Vec<(String, u32)>,
}

impl PictureRow {
    fn of(boot: &BootRecord, picture: &Picture, record_path: &Path) -> Result<Option<PictureRow>> {
        let field = |pointer: &str| format!("boots[{}].details.scenario{pointer}", boot.sequence);
        let Some(details) = boot.details.get("scenario") else {
            return Ok(None);
        };
        let Some(map) = details.pointer(&picture.per_cpu) else {
            return Ok(None);
        };
        let map = map.as_object().with_context(|| {
            format!(
                "{}: {}: expected a map of CPU to value",
                record_path.display(),
                field(&picture.per_cpu)
            )
        })?;
        let mut values = BTreeMap::new();
        for (cpu, value) in map {
            let (Ok(cpu), Some(value)) = (cpu.parse::<u32>(), value.as_f64()) else {
                anyhow::bail!(
                    "{}: {}: entry {cpu:?}: {value} is not a CPU number with a numeric value",
                    record_path.display(),
                    field(&picture.per_cpu)
                );
            };
            values.insert(cpu, value);
        }
        let mut marks = Vec::new();
        for mark in &picture.marks {
            if let Some(cpu) = details.pointer(&mark.cpu) {
                let cpu = cpu.as_u64().and_then(|c| u32::try_from(c).ok());
                let cpu = cpu.with_context(|| {
                    format!(
                        "{}: {}: not a CPU number",
                        record_path.display(),
                        field(&mark.cpu)
                    )
                })?;
                marks.push((mark.label.clone(), cpu));
            }
        }
        Ok(Some(PictureRow {
            sequence: boot.sequence,
            values,
            marks,
        }))
    }

    /// Each CPU's share of the boot's total, 0..=1.
    fn shares(&self) -> BTreeMap<u32, f64> {
        let total: f64 = self.values.values().sum();
        self.values
            .iter()
            .map(|(&cpu, &v)| (cpu, if total > 0.0 { v / total } else { 0.0 }))
            .collect()
    }
}

/// CPUs in drawing order, grouped by node and then LLC: `(node label, [(llc label, cpus)])`.
type Groups = Vec<(String, Vec<(String, Vec<u32>)>)>;

fn groups(topology: Option<&Topology>, seen: &BTreeSet<u32>) -> Groups {
    let mut out: Groups = Vec::new();
    let mut placed = BTreeSet::new();
    if let Some(t) = topology {
        for node in t.nodes() {
            let llcs: Vec<(String, Vec<u32>)> = t
                .llcs()
                .iter()
                .filter(|l| l.node == node.id)
                .map(|l| (format!("LLC {}", l.id), l.cpus.clone()))
                .collect();
            placed.extend(llcs.iter().flat_map(|(_, c)| c.iter().copied()));
            out.push((format!("node {}", node.id), llcs));
        }
    }
    let rest: Vec<u32> = seen.difference(&placed).copied().collect();
    if !rest.is_empty() {
        let label = if topology.is_some() {
            "not in topology"
        } else {
            "CPUs"
        };
        out.push((label.to_string(), vec![(String::new(), rest)]));
    }
    out
}

const CELL_W: f64 = 34.0;
const CELL_H: f64 = 22.0;
const LLC_GAP: f64 = 6.0;
const NODE_GAP: f64 = 16.0;
const ROW_LABEL_W: f64 = 64.0;

/// Per variant, one heatmap: a row per boot (and the mean of their shares), a column per CPU,
/// grouped by node and LLC, marked CPUs labelled and outlined.
pub(super) fn heatmaps(
    record: &RunRecord,
    record_path: &Path,
    picture: Option<&Picture>,
    topology: Option<&Topology>,
) -> Result<String> {
    let Some(picture) = picture else {
        return Ok(String::new());
    };
    let c = record.comparison();
    let mut rows: BTreeMap<&str, Vec<PictureRow>> = BTreeMap::new();
    for boot in record.boots() {
        if let Some(row) = PictureRow::of(boot, picture, record_path)? {
            rows.entry(boot.variant.as_str()).or_default().push(row);
        }
    }
    let seen: BTreeSet<u32> = rows
        .values()
        .flatten()
        .flat_map(|r| r.values.keys().copied())
        .collect();
    let groups = groups(topology, &seen);
    let mut out = format!(
        "<h2>Where {} ran</h2>\n<p class=\"note\">Each row is one boot (#: its place in the run's \
         order); a cell is that CPU's share of the boot's {}. CPUs are grouped by NUMA node and \
         LLC{}; marked CPUs are outlined.</p>\n<div class=\"maps\">\n",
        esc(&picture.task),
        esc(&picture.quantity),
        topology.map_or(String::new(), |t| format!(" of {}", esc(t.name())))
    );
    for (i, variant) in c.variants().iter().enumerate() {
        let variant_rows = rows.get(variant.as_str()).map_or(&[][..], Vec::as_slice);
        let _ = write!(
            out,
            "<figure class=\"heatmap\" data-variant=\"{}\"><figcaption><span class=\"swatch\" \
             style=\"background:{}\"></span>{}</figcaption>",
            esc(variant),
            colour(i),
            esc(variant)
        );
        out += &heatmap_svg(variant_rows, &groups, colour(i));
        out += "</figure>\n";
    }
    out += "</div>\n";
    Ok(out)
}

fn heatmap_svg(rows: &[PictureRow], groups: &Groups, colour: &str) -> String {
    // Column x positions.
    let mut columns: Vec<(u32, f64)> = Vec::new();
    let mut x = ROW_LABEL_W;
    let mut heads = String::new();
    for (n, (node, llcs)) in groups.iter().enumerate() {
        if n > 0 {
            x += NODE_GAP;
        }
        let node_start = x;
        for (l, (llc, cpus)) in llcs.iter().enumerate() {
            if l > 0 {
                x += LLC_GAP;
            }
            let llc_start = x;
            for &cpu in cpus {
                columns.push((cpu, x));
                x += CELL_W;
            }
            let _ = write!(
                heads,
                "<line x1=\"{llc_start}\" x2=\"{x}\" y1=\"33\" y2=\"33\" stroke=\"#999\"/>\
                 <text x=\"{}\" y=\"30\" font-size=\"10\" text-anchor=\"middle\" fill=\"#555\">{}</text>",
                (llc_start + x) / 2.0,
                esc(llc)
            );
        }
        let _ = write!(
            heads,
            "<line x1=\"{node_start}\" x2=\"{x}\" y1=\"17\" y2=\"17\" stroke=\"#333\"/>\
             <text x=\"{}\" y=\"13\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            (node_start + x) / 2.0,
            esc(node)
        );
    }
    let width = x + 8.0;
    let x_of = |cpu: u32| columns.iter().find(|(c, _)| *c == cpu).map(|(_, x)| *x);
    for &(cpu, cx) in &columns {
        let _ = write!(
            heads,
            "<text x=\"{}\" y=\"48\" font-size=\"11\" text-anchor=\"middle\">{cpu}</text>",
            cx + CELL_W / 2.0
        );
    }
    // Mark labels under the CPU numbers: every label some boot of this variant has there.
    let mut marked: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for r in rows {
        for (label, cpu) in &r.marks {
            marked.entry(*cpu).or_default().insert(label);
        }
    }
    for (cpu, labels) in &marked {
        if let Some(cx) = x_of(*cpu) {
            let text: Vec<&str> = labels.iter().copied().collect();
            let _ = write!(
                heads,
                "<text x=\"{}\" y=\"61\" font-size=\"10\" font-weight=\"bold\" text-anchor=\"middle\" \
                 fill=\"#b00\" class=\"mark\">{}</text>",
                cx + CELL_W / 2.0,
                esc(&text.join(","))
            );
        }
    }
    let top = 66.0;
    let mut body = String::new();
    let mut mean: BTreeMap<u32, f64> = BTreeMap::new();
    let draw_row = |body: &mut String,
                    y: f64,
                    label: &str,
                    shares: &BTreeMap<u32, f64>,
                    marks: &[u32]| {
        let _ = write!(
            body,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">{}</text>",
            ROW_LABEL_W - 6.0,
            y + 15.0,
            esc(label)
        );
        for &(cpu, cx) in &columns {
            let share = shares.get(&cpu).copied().unwrap_or(0.0);
            let _ = write!(
                body,
                "<rect x=\"{cx}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#ddd\"/>",
                CELL_W - 1.0,
                CELL_H - 1.0
            );
            if share > 0.0 {
                let _ = write!(
                    body,
                    "<rect x=\"{cx}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{colour}\" \
                     fill-opacity=\"{:.3}\"><title>CPU {cpu}: {:.1}%</title></rect>",
                    CELL_W - 1.0,
                    CELL_H - 1.0,
                    share.clamp(0.0, 1.0) * 0.95 + 0.05,
                    share * 100.0
                );
            }
            if share >= 0.005 {
                let fill = if share > 0.5 { "#fff" } else { "#222" };
                let _ = write!(
                    body,
                    "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\" fill=\"{fill}\">{:.0}</text>",
                    cx + CELL_W / 2.0,
                    y + 15.0,
                    share * 100.0
                );
            }
            if marks.contains(&cpu) {
                let _ = write!(
                    body,
                    "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#b00\" stroke-width=\"2\"/>",
                    cx + 0.5,
                    y + 0.5,
                    CELL_W - 2.0,
                    CELL_H - 2.0
                );
            }
        }
    };
    let mut y = top;
    for r in rows {
        let shares = r.shares();
        for (&cpu, &s) in &shares {
            *mean.entry(cpu).or_default() += s / rows.len() as f64;
        }
        let marks: Vec<u32> = r.marks.iter().map(|(_, c)| *c).collect();
        draw_row(&mut body, y, &format!("#{}", r.sequence), &shares, &marks);
        y += CELL_H;
    }
    if rows.is_empty() {
        let _ = write!(
            body,
            "<text x=\"{ROW_LABEL_W}\" y=\"{}\" font-size=\"11\" fill=\"#555\">no boot of this \
             variant has this picture's data</text>",
            y + 15.0
        );
        y += CELL_H;
    } else {
        y += 4.0;
        let common: Vec<u32> = marked.keys().copied().collect();
        draw_row(&mut body, y, "mean", &mean, &common);
        y += CELL_H;
    }
    let height = y + 6.0;
    format!(
        "<svg viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" role=\"img\">{heads}{body}</svg>"
    )
}
