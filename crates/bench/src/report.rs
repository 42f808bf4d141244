//! Output of the suite: human tables for the terminal, and report directories (Markdown plus
//! SVG charts drawn by hand, like the reference architectures' figures: throughput vs
//! accelerators or readers, epoch 0 vs overall, AU per configuration). SVG is text, so charts
//! need no plotting dependency and diff well when committed with the runs.

use crate::io::{IoResult, TfLikeReport};
use crate::meta::MetaReport;
use crate::scan::ScanReport;
use crate::size::Sizing;
use crate::train::{CheckpointReport, TrainReport};
use crate::world::HostInfo;
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// Chart size in pixels and margins.
const CHART_WIDTH_PX: f64 = 640.0;
const CHART_HEIGHT_PX: f64 = 360.0;
const MARGIN_PX: f64 = 56.0;
const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// A text table with aligned columns (numbers right-aligned).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let numeric = c.chars().next().is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '.');
                if numeric && i > 0 {
                    format!("{c:>w$}", w = widths[i])
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", parts.join("  ").trim_end());
    };
    line(headers.to_vec(), &mut out);
    let _ = writeln!(out, "{}", widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

/// The same table in Markdown.
pub fn markdown_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n|{}\n", headers.join(" | "), headers.iter().map(|_| "---|").collect::<String>());
    for r in rows {
        let _ = writeln!(out, "| {} |", r.join(" | "));
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" axis maximum: 1, 2 or 5 times a power of ten, at least `v`.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v {
            return m * p;
        }
    }
    10.0 * p
}

fn chart_frame(title: &str, x_label: &str, y_label: &str, y_max: f64, out: &mut String) {
    let (w, h, m) = (CHART_WIDTH_PX, CHART_HEIGHT_PX, MARGIN_PX);
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="15">{}</text>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text x="14" y="{}" text-anchor="middle" transform="rotate(-90 14 {})">{}</text>
<line x1="{m}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{m}" y1="{m}" x2="{m}" y2="{}" stroke="black"/>
"#,
        w / 2.0,
        esc(title),
        w / 2.0,
        h - 12.0,
        esc(x_label),
        h / 2.0,
        h / 2.0,
        esc(y_label),
        h - m,
        w - m / 2.0,
        h - m,
        h - m
    );
    for i in 0..=5 {
        let v = y_max * i as f64 / 5.0;
        let y = h - m - (h - 2.0 * m) * i as f64 / 5.0;
        let _ = writeln!(
            out,
            r##"<line x1="{m}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - m / 2.0,
            m - 4.0,
            y + 4.0,
            short_num(v)
        );
    }
}

fn short_num(v: f64) -> String {
    if v >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A line chart of named series of (x, y) points, with an optional horizontal reference line.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
    hline: Option<(f64, &str)>,
) -> String {
    let (w, h, m) = (CHART_WIDTH_PX, CHART_HEIGHT_PX, MARGIN_PX);
    let x_max = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(1.0, f64::max);
    let y_top = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).chain(hline.map(|l| l.0)).fold(0.0, f64::max);
    let x_max = nice_max(x_max);
    let y_max = nice_max(y_top * 1.05);
    let mut out = String::new();
    chart_frame(title, x_label, y_label, y_max, &mut out);
    let px = |x: f64| m + (w - 1.5 * m) * x / x_max;
    let py = |y: f64| h - m - (h - 2.0 * m) * y / y_max;
    for i in 0..=5 {
        let v = x_max * i as f64 / 5.0;
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(v),
            h - m + 16.0,
            short_num(v)
        );
    }
    if let Some((y, label)) = hline {
        let _ = writeln!(
            out,
            r##"<line x1="{m}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            py(y),
            w - m / 2.0,
            py(y),
            w - m / 2.0,
            py(y) - 4.0,
            esc(label)
        );
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let _ =
            writeln!(out, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, path.join(" "));
        for (x, y) in &pts {
            let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"/>"#, px(*x), py(*y));
        }
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            m + 10.0,
            m + 4.0 + 18.0 * i as f64,
            m + 28.0,
            m + 14.0 + 18.0 * i as f64,
            esc(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// A grouped bar chart: for each group label, one bar per series.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    series_names: &[&str],
    groups: &[(String, Vec<f64>)],
    hline: Option<(f64, &str)>,
) -> String {
    let (w, h, m) = (CHART_WIDTH_PX, CHART_HEIGHT_PX, MARGIN_PX);
    let y_top = groups.iter().flat_map(|(_, v)| v.iter().copied()).chain(hline.map(|l| l.0)).fold(0.0, f64::max);
    let y_max = nice_max(y_top * 1.05);
    let mut out = String::new();
    chart_frame(title, "", y_label, y_max, &mut out);
    let py = |y: f64| h - m - (h - 2.0 * m) * y / y_max;
    let n = groups.len().max(1) as f64;
    let group_w = (w - 1.5 * m) / n;
    let bars = series_names.len().max(1) as f64;
    let bar_w = group_w * 0.8 / bars;
    for (g, (label, values)) in groups.iter().enumerate() {
        let x0 = m + group_w * g as f64 + group_w * 0.1;
        for (s, v) in values.iter().enumerate() {
            let color = COLORS[s % COLORS.len()];
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
                x0 + bar_w * s as f64,
                py(*v),
                bar_w.max(1.0),
                (h - m - py(*v)).max(0.0)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{}</text>"#,
            x0 + group_w * 0.4,
            h - m + 14.0,
            esc(label)
        );
    }
    if let Some((y, label)) = hline {
        let _ = writeln!(
            out,
            r##"<line x1="{m}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#888" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            py(y),
            w - m / 2.0,
            py(y),
            w - m / 2.0,
            py(y) - 4.0,
            esc(label)
        );
    }
    for (s, name) in series_names.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            m + 10.0,
            m + 4.0 + 18.0 * s as f64,
            COLORS[s % COLORS.len()],
            m + 28.0,
            m + 14.0 + 18.0 * s as f64,
            esc(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn mb(bytes_per_s: f64) -> String {
    format!("{:.1}", bytes_per_s / 1e6)
}

/// A report directory in the making: Markdown sections and charts.
pub struct Report {
    pub title: String,
    pub command: String,
    pub host: HostInfo,
    pub sections: Vec<String>,
    pub charts: Vec<(String, String)>,
}

impl Report {
    /// A report about a run on `host` (collected when the run started: the load average then
    /// is what the run competed with).
    pub fn new(title: &str, command: &str, host: HostInfo) -> Report {
        Report {
            title: title.to_string(),
            command: command.to_string(),
            host,
            sections: Vec::new(),
            charts: Vec::new(),
        }
    }

    /// Adds a chart file and a reference to it in the Markdown.
    pub fn chart(&mut self, file: &str, caption: &str, svg: String) {
        self.sections.push(format!("![{caption}]({file})\n"));
        self.charts.push((file.to_string(), svg));
    }

    /// Writes `report.md` and the charts into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let h = &self.host;
        let mut md = format!(
            "# {}\n\nCommand: `{}`\n\nHost: {} — {} cores, kernel {}, {:.1} GiB RAM ({:.1} GiB available), load average {} at the start.\n\n",
            self.title,
            self.command,
            h.hostname,
            h.nproc,
            h.kernel,
            h.mem_total_bytes as f64 / (1u64 << 30) as f64,
            h.mem_available_bytes as f64 / (1u64 << 30) as f64,
            h.loadavg
        );
        for s in &self.sections {
            md.push_str(s);
            md.push('\n');
        }
        std::fs::write(dir.join("report.md"), md)
            .with_context(|| format!("cannot write {}/report.md", dir.display()))?;
        for (name, svg) in &self.charts {
            std::fs::write(dir.join(name), svg).with_context(|| format!("cannot write {}/{name}", dir.display()))?;
        }
        Ok(())
    }
}

fn train_rows(reports: &[TrainReport]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for rep in reports {
        for r in &rep.runs {
            rows.push(vec![
                rep.target.clone(),
                format!("{} {}", r.accelerator, r.workload),
                r.accelerators.to_string(),
                r.steps_per_epoch.to_string(),
                format!("{:.1}", r.au * 100.0),
                if r.pass { "pass".into() } else { "FAIL".into() },
                format!("{:.0}", r.epoch0_samples_per_s),
                format!("{:.0}", r.overall_samples_per_s),
                mb(r.epoch0_bytes_per_s),
                mb(r.overall_bytes_per_s),
            ]);
        }
    }
    rows
}

const TRAIN_HEADERS: [&str; 10] = [
    "target",
    "workload",
    "accelerators",
    "steps/epoch",
    "AU %",
    "result",
    "epoch0 samples/s",
    "overall samples/s",
    "epoch0 MB/s",
    "overall MB/s",
];

/// The terminal summary of `bench train`.
pub fn train_text(reports: &[TrainReport]) -> String {
    let mut out = table(&TRAIN_HEADERS, &train_rows(reports));
    for rep in reports {
        if let Some(ds) = &rep.dataset {
            let _ = writeln!(
                out,
                "{}: dataset {} files, {:.2} GB{}; {}{}",
                rep.target,
                ds.files,
                ds.total_bytes as f64 / 1e9,
                if rep.dataset_exceeds_ram {
                    ""
                } else {
                    " (smaller than RAM: later epochs may be served from the page cache)"
                },
                rep.caches_note,
                if rep.generated { "; generated" } else { "" }
            );
        }
        if let Some(best) = rep.sweep_best {
            let _ = writeln!(
                out,
                "{}: most accelerators passing: {best}{}",
                rep.target,
                if rep.sweep_capped { " (sweep cap reached)" } else { "" }
            );
        } else if !rep.runs.is_empty() && rep.runs.len() > 1 {
            let _ = writeln!(out, "{}: no configuration passed", rep.target);
        }
    }
    out
}

/// Adds `bench train` results and their charts to a report.
pub fn train_report(report: &mut Report, reports: &[TrainReport]) {
    report.sections.push(format!("## Results\n\n{}", markdown_table(&TRAIN_HEADERS, &train_rows(reports))));
    let mut notes = String::from("## Conditions\n\n");
    for rep in reports {
        if let Some(ds) = &rep.dataset {
            let _ = writeln!(
                notes,
                "- {}: {} files of {} ({} samples each), {:.2} GB in all, {}; {}.{}",
                rep.target,
                ds.files,
                ds.format.extension(),
                ds.samples_per_file,
                ds.total_bytes as f64 / 1e9,
                if rep.dataset_exceeds_ram {
                    "larger than client RAM"
                } else {
                    "**smaller than client RAM** (epochs after the first can be served from the page cache; epoch 0 is the honest figure)"
                },
                rep.caches_note,
                rep.sweep_best
                    .map(|b| format!(
                        " Most accelerators passing: **{b}**{}.",
                        if rep.sweep_capped { " (cap reached)" } else { "" }
                    ))
                    .unwrap_or_default()
            );
        }
    }
    report.sections.push(notes);
    let series = |f: &dyn Fn(&crate::train::TrainResult) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        reports
            .iter()
            .map(|rep| (rep.target.clone(), rep.runs.iter().map(|r| (r.accelerators as f64, f(r))).collect()))
            .collect()
    };
    let threshold = reports.iter().flat_map(|r| r.runs.first()).map(|r| r.au_min).next().unwrap_or(0.9);
    report.chart(
        "throughput_vs_accelerators.svg",
        "Throughput vs accelerators",
        line_chart(
            "Throughput vs emulated accelerators",
            "accelerators",
            "samples/s (overall)",
            &series(&|r| r.overall_samples_per_s),
            None,
        ),
    );
    report.chart(
        "au_per_configuration.svg",
        "AU per configuration",
        line_chart(
            "Accelerator utilisation per configuration",
            "accelerators",
            "AU %",
            &series(&|r| r.au * 100.0),
            Some((threshold * 100.0, &format!("pass at {:.0}%", threshold * 100.0))),
        ),
    );
    let groups: Vec<(String, Vec<f64>)> = reports
        .iter()
        .flat_map(|rep| {
            let mut runs: Vec<&crate::train::TrainResult> = rep.runs.iter().collect();
            runs.sort_by_key(|r| r.accelerators);
            runs.into_iter().map(move |r| {
                (
                    format!("{} {}", rep_short(&rep.target), r.accelerators),
                    vec![r.epoch0_samples_per_s, r.overall_samples_per_s],
                )
            })
        })
        .collect();
    report.chart(
        "epoch0_vs_overall.svg",
        "Epoch 0 vs overall throughput",
        bar_chart("Epoch 0 vs overall (samples/s)", "samples/s", &["epoch 0", "overall"], &groups, None),
    );
}

fn rep_short(target: &str) -> String {
    target.split_whitespace().next().unwrap_or(target).to_string()
}

/// The terminal summary of one or more `bench io` runs.
pub fn io_text(results: &[IoResult]) -> String {
    let mut notes: Vec<String> =
        results.iter().flat_map(|r| std::iter::once(r.caches_note.clone()).chain(r.notes.iter().cloned())).collect();
    notes.dedup();
    notes.sort();
    notes.dedup();
    let mut out = table(&IO_HEADERS, &io_rows(results)) + &notes.iter().map(|n| format!("{n}\n")).collect::<String>();
    for r in results {
        if let Some(b) = &r.breakdown {
            out.push_str(&breakdown_text(r, b));
        }
    }
    out
}

/// The latency breakdown of one io run as a table.
pub fn breakdown_text(r: &IoResult, b: &crate::io::Breakdown) -> String {
    let mut out = format!(
        "\nlatency breakdown: {} {} {} x{} jobs, {} requests, {:.1} µs mean per request as the benchmark saw it{}\n",
        r.target,
        r.pattern,
        human_bytes(r.block_bytes as u64),
        r.jobs,
        b.requests,
        b.request_mean_us,
        b.syscall_mean_us.map(|s| format!(", {s:.1} µs inside the read system call")).unwrap_or_default(),
    );
    let rows: Vec<Vec<String>> = b
        .stages
        .iter()
        .map(|s| {
            vec![
                s.side.clone(),
                s.stage.clone(),
                format!("{:.3}", s.per_request),
                format!("{:.1}", s.mean_us),
                format!("{:.1}", s.us_per_request),
            ]
        })
        .collect();
    out.push_str(&table(&["where", "stage", "per request", "mean µs", "µs per request"], &rows));
    if b.nodes_unreached > 0 {
        let _ = writeln!(out, "({} storage nodes did not report their stages)", b.nodes_unreached);
    }
    out.push_str(
        "stages nest: mount.read holds mount.lock_wait and client.read; client.read holds client.record and \
client.storage_call (calls of one read may overlap); a storage call holds the wire, rpc.server.* and storage.handle, \
which holds storage.queue, .open, .disk and .verify. fuse.kernel = read system call - (fuse.handoff + mount.read + fuse.reply); \
wire = client.storage_call - (rpc.server.handoff + storage.handle + rpc.server.reply), both transports' own work included.\n",
    );
    out
}

const IO_HEADERS: [&str; 12] =
    ["target", "pattern", "bs", "jobs", "qd", "MB/s", "IOPS", "lat mean µs", "p50 µs", "p99 µs", "p99.9 µs", "max µs"];

fn io_rows(results: &[IoResult]) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|r| {
            vec![
                r.target.clone(),
                r.pattern.clone(),
                human_bytes(r.block_bytes as u64),
                r.jobs.to_string(),
                r.queue_depth.to_string(),
                mb(r.bytes_per_s),
                format!("{:.0}", r.iops),
                format!("{:.0}", r.lat_mean_us),
                format!("{:.0}", r.lat_p50_us),
                format!("{:.0}", r.lat_p99_us),
                format!("{:.0}", r.lat_p999_us),
                format!("{:.0}", r.lat_max_us),
            ]
        })
        .collect()
}

/// Adds io results to a report.
pub fn io_report(report: &mut Report, results: &[IoResult]) {
    report.sections.push(format!("## Results\n\n{}", markdown_table(&IO_HEADERS, &io_rows(results))));
    let notes: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "- {} {}: {}{}",
                r.target,
                r.pattern,
                r.caches_note,
                r.notes.iter().map(|n| format!("; {n}")).collect::<String>()
            )
        })
        .collect();
    report.sections.push(format!("## Conditions\n\n{}\n", notes.join("\n")));
}

/// The terminal summary of the tf-like preset.
pub fn tf_like_text(r: &TfLikeReport) -> String {
    let rows: Vec<Vec<String>> = r
        .trials
        .iter()
        .map(|(n, kept, io)| {
            let worst = io.job_iops.iter().cloned().fold(f64::MAX, f64::min);
            vec![
                n.to_string(),
                mb(io.bytes_per_s),
                format!("{:.1}", worst),
                format!("{:.0}", io.lat_p99_us),
                if *kept { "kept".into() } else { "MISSED".into() },
            ]
        })
        .collect();
    let mut out = table(&["GPUs", "MB/s", "slowest GPU IOPS", "p99 µs", "83 IOPS per GPU"], &rows);
    let _ = writeln!(
        out,
        "{}: serves {} GPUs at {:.0} IOPS each (1 MiB sequential reads, 30 files per GPU){}",
        r.target,
        r.gpus_served.map(|g| g.to_string()).unwrap_or_else(|| "no".into()),
        r.rate_iops_per_gpu,
        if r.capped { " — sweep cap reached, may serve more" } else { "" }
    );
    out
}

/// Adds the tf-like sweep to a report.
pub fn tf_like_report(report: &mut Report, r: &TfLikeReport) {
    report.sections.push(format!("## tf-like (Isilon paper's fio job)\n\n```\n{}```\n", tf_like_text(r)));
    let pts: Vec<(f64, f64)> = r.trials.iter().map(|(n, _, io)| (*n as f64, io.bytes_per_s / 1e6)).collect();
    let demand: Vec<(f64, f64)> =
        r.trials.iter().map(|(n, _, _)| (*n as f64, *n as f64 * r.rate_iops_per_gpu * 1.048576)).collect();
    report.chart(
        "tf_like_throughput_vs_gpus.svg",
        "tf-like throughput vs GPUs",
        line_chart(
            "tf-like: throughput vs GPUs",
            "GPUs",
            "MB/s",
            &[("delivered".into(), pts), ("demanded (83 IOPS × 1 MiB)".into(), demand)],
            None,
        ),
    );
}

fn human_bytes(b: u64) -> String {
    if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
        format!("{}G", b >> 30)
    } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}k", b >> 10)
    } else {
        b.to_string()
    }
}

const META_HEADERS: [&str; 5] = ["operation", "max ops/s", "min ops/s", "mean ops/s", "stddev"];

fn meta_rows(r: &MetaReport) -> Vec<Vec<String>> {
    r.phases
        .iter()
        .map(|p| {
            vec![
                p.phase.clone(),
                format!("{:.1}", p.summary.max),
                format!("{:.1}", p.summary.min),
                format!("{:.1}", p.summary.mean),
                format!("{:.1}", p.summary.stddev),
            ]
        })
        .collect()
}

/// The terminal summary of `bench meta`, mdtest style.
pub fn meta_text(r: &MetaReport) -> String {
    format!(
        "{}: {} ranks × {} tasks × {} items, {} iterations, {} directory, {} bytes per file\n{}",
        r.target,
        r.ranks,
        r.tasks_per_rank,
        r.items_per_task,
        r.iterations,
        if r.unique_dir { "unique" } else { "shared" },
        r.file_bytes,
        table(&META_HEADERS, &meta_rows(r))
    )
}

pub fn meta_report(report: &mut Report, r: &MetaReport) {
    report.sections.push(format!("## Results\n\n{}", markdown_table(&META_HEADERS, &meta_rows(r))));
    let groups: Vec<(String, Vec<f64>)> = r.phases.iter().map(|p| (p.phase.clone(), vec![p.summary.mean])).collect();
    report.chart(
        "meta_ops.svg",
        "Metadata rates",
        bar_chart("Metadata operations (mean ops/s)", "ops/s", &["mean"], &groups, None),
    );
}

const SCAN_HEADERS: [&str; 4] = ["readers", "MB/s", "records/s", "files read"];

fn scan_rows(r: &ScanReport) -> Vec<Vec<String>> {
    r.levels
        .iter()
        .map(|l| {
            vec![
                l.readers.to_string(),
                mb(l.bytes_per_s),
                format!("{:.0}", l.records_per_s),
                l.files_completed.to_string(),
            ]
        })
        .collect()
}

pub fn scan_text(r: &ScanReport) -> String {
    format!(
        "{}: {} shards\n{}peak {} MB/s with {} readers; {}\n",
        r.target,
        r.files,
        table(&SCAN_HEADERS, &scan_rows(r)),
        mb(r.peak_bytes_per_s),
        r.peak_readers,
        r.caches_note
    )
}

pub fn scan_report(report: &mut Report, r: &ScanReport) {
    report.sections.push(format!(
        "## Results\n\n{}\n{}\n",
        markdown_table(&SCAN_HEADERS, &scan_rows(r)),
        r.caches_note
    ));
    let pts: Vec<(f64, f64)> = r.levels.iter().map(|l| (l.readers as f64, l.bytes_per_s / 1e6)).collect();
    report.chart(
        "scan_throughput_vs_readers.svg",
        "Scan throughput vs readers",
        line_chart("TFRecord scan: throughput vs readers", "readers", "MB/s", &[(r.target.clone(), pts)], None),
    );
}

/// The terminal summary of the checkpoint workload.
pub fn checkpoint_text(r: &CheckpointReport) -> String {
    let rows: Vec<Vec<String>> = r
        .write_s
        .iter()
        .zip(&r.read_s)
        .enumerate()
        .map(|(i, (w, rd))| {
            vec![
                i.to_string(),
                format!("{w:.2}"),
                mb(r.checkpoint_bytes as f64 / w),
                format!("{rd:.2}"),
                mb(r.checkpoint_bytes as f64 / rd),
            ]
        })
        .collect();
    format!(
        "{}: {} checkpoints of {} ({} / {}), {} files each\n{}write {} MB/s, read {} MB/s; {}\n",
        r.target,
        r.checkpoints,
        human_bytes(r.checkpoint_bytes),
        r.model,
        r.scale,
        r.files,
        table(&["checkpoint", "write s", "write MB/s", "read s", "read MB/s"], &rows),
        mb(r.write_bytes_per_s),
        mb(r.read_bytes_per_s),
        r.caches_note
    )
}

pub fn size_text(s: &Sizing) -> String {
    let rows = vec![
        vec!["workload".to_string(), s.workload.clone()],
        vec!["GPUs".into(), s.gpus.to_string()],
        vec!["demand per GPU MB/s".into(), mb(s.bytes_per_s_per_gpu)],
        vec!["total demand MB/s".into(), mb(s.total_bytes_per_s)],
        vec!["cache hit (cache/dataset)".into(), format!("{:.1}%", s.cache_hit * 100.0)],
        vec!["storage must serve MB/s".into(), mb(s.storage_bytes_per_s)],
        vec![format!("per node MB/s ({})", s.node_source), mb(s.node_bytes_per_s)],
        vec!["GPUs per node".into(), format!("{:.1}", s.gpus_per_node)],
        vec!["nodes (exact)".into(), format!("{:.2}", s.nodes_exact)],
        vec!["storage nodes needed".into(), s.nodes.to_string()],
    ];
    table(&["", "value"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let t = table(&["a", "number"], &[vec!["x".into(), "1".into()], vec!["longer".into(), "22.5".into()]]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].ends_with("     1"), "{t}");
        assert!(markdown_table(&["a"], &[vec!["1".into()]]).contains("| 1 |"));
    }

    #[test]
    fn charts_are_well_formed_svg() {
        let svg = line_chart("t", "x", "y", &[("s<1>".into(), vec![(1.0, 2.0), (2.0, 3.5)])], Some((3.0, "limit")));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("s&lt;1&gt;"));
        assert!(svg.contains("<polyline"));
        let bars = bar_chart("t", "y", &["a", "b"], &[("g".into(), vec![1.0, 2.0])], None);
        assert_eq!(bars.matches("<rect").count(), 1 + 2 + 2);
        assert_eq!(nice_max(3.2), 4.0);
        assert_eq!(nice_max(105.0), 120.0);
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(100.0), 100.0);
    }
}
