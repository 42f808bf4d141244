//! `trove stats` and `trove events`: the operator's live view of a cluster, in the manner of
//! PowerScale's `isi statistics`.
//!
//! `trove stats` asks the metadata service which processes export metrics (their
//! announcements; for a local cluster also `cluster.toml`), scrapes every `/metrics` twice an
//! interval apart and shows per process what it did per second in between: CPU, operations per
//! protocol, network and disk bytes, latency p50 and p99 of the operations it served, and a
//! total row. The arithmetic is `metrics::scrape`'s, shared with the dashboard. `--top` adds
//! the busiest files and clients (from `/top`), `--json` prints one JSON object per refresh,
//! `--once` measures one interval and exits. `trove events` prints the event log.

use crate::cmds::ClusterOpt;
use anyhow::{bail, Result};
use clap::Args;
use metrics::scrape::{self, Metrics, Rates};
use metrics::top::{self, TopEntry, TopReport};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};
use wire::{MetaOp, MetaReply, ProcessInfo};

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub cluster: ClusterOpt,
    /// Seconds between refreshes (each table shows what happened in the last one).
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
    /// Measure one interval, print it and exit.
    #[arg(long)]
    pub once: bool,
    /// Print JSON, one object per refresh (with --once exactly one).
    #[arg(long)]
    pub json: bool,
    /// Also show the busiest files and clients of the interval.
    #[arg(long)]
    pub top: bool,
    /// Rows of each --top table.
    #[arg(long, default_value_t = 10)]
    pub top_rows: usize,
    /// Stop after this many refreshes (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    pub count: u64,
}

#[derive(Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub cluster: ClusterOpt,
    /// How many of the latest events to show.
    #[arg(long, short = 'n', default_value_t = 50)]
    pub limit: u32,
    /// Only events after this sequence number.
    #[arg(long)]
    pub after: Option<u64>,
    /// Keep printing new events as they are recorded.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print JSON lines, one event each.
    #[arg(long)]
    pub json: bool,
}

/// One process of a refresh.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub role: String,
    pub id: String,
    pub host: String,
    pub metrics: String,
    pub reachable: bool,
    pub error: Option<String>,
    pub rates: Option<Rates>,
}

/// One refresh, as `--json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Refresh {
    pub time_ms: u64,
    pub interval_s: f64,
    pub processes: Vec<Row>,
    pub total: Rates,
    pub top: Option<TopView>,
}

/// The busiest files and clients of an interval, per second.
#[derive(Clone, Debug, Serialize)]
pub struct TopView {
    pub files: Vec<TopRow>,
    pub clients: Vec<TopRow>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TopRow {
    pub key: String,
    /// The process that saw it ("mount /mnt").
    pub via: String,
    pub ops: f64,
    pub read_bytes: f64,
    pub write_bytes: f64,
}

/// Every process that exports: announced to the metadata servers, and (for a local cluster)
/// recorded in its state file.
async fn discover(cluster: &str) -> Result<Vec<ProcessInfo>> {
    let addr = crate::cluster::meta_addr_of(cluster)?;
    let mut found: Vec<ProcessInfo> = Vec::new();
    let mut errors = Vec::new();
    for meta in addr.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let options = client::ClientOptions { meta_deadline: Duration::from_secs(2), ..Default::default() };
        match client::Client::connect_with(meta, options).await {
            Ok(c) => match c.meta(MetaOp::Processes).await {
                Ok(MetaReply::Processes(list)) => found.extend(list),
                Ok(other) => errors.push(format!("{meta} answered {other:?}")),
                Err(e) => errors.push(format!("{meta}: {e}")),
            },
            Err(e) => errors.push(format!("{meta}: {e}")),
        }
    }
    let dir = std::path::Path::new(cluster);
    if dir.join(crate::cluster::STATE_FILE).exists() {
        let state = crate::cluster::State::load(dir)?;
        let mut local = Vec::new();
        if let Some(m) = &state.meta.metrics {
            local.push(ProcessInfo {
                role: "meta".into(),
                id: state.meta.addr.clone(),
                addr: state.meta.addr.clone(),
                metrics: m.clone(),
                ..Default::default()
            });
        }
        for (i, n) in state.nodes.iter().enumerate() {
            if let Some(m) = &n.metrics {
                local.push(ProcessInfo {
                    role: "storage".into(),
                    id: (i + 1).to_string(),
                    addr: n.addr.clone(),
                    metrics: m.clone(),
                    ..Default::default()
                });
            }
        }
        for p in local {
            if !found.iter().any(|f| f.metrics == p.metrics) {
                found.push(p);
            }
        }
    }
    let mut seen = HashSet::new();
    found.retain(|p| seen.insert(p.metrics.clone()));
    if found.is_empty() {
        if errors.is_empty() {
            bail!("no process of the cluster at {addr} exports metrics: start the roles with --metrics-listen (or metrics_listen in their configs); `trove cluster start` does so unless --no-metrics");
        }
        bail!("cannot list the cluster's processes: {}", errors.join("; "));
    }
    Ok(found)
}

/// How often `trove stats` asks again which processes export (a gateway started, a node added).
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(4);

type Scraped = HashMap<String, (Instant, Result<Metrics, String>, Option<TopReport>)>;

async fn scrape_all(processes: &[ProcessInfo], with_top: bool) -> Scraped {
    let fetched = futures::future::join_all(processes.iter().map(|p| async move {
        let text = scrape::get(&p.metrics, "/metrics").await;
        let at = Instant::now();
        let top = if with_top && p.role != "storage" && p.role != "meta" {
            scrape::get(&p.metrics, &format!("/top?n={}", metrics::http::TOP_ROWS_MAX))
                .await
                .ok()
                .and_then(|t| serde_json::from_str::<TopReport>(&t).ok())
        } else {
            None
        };
        (p.metrics.clone(), (at, text.map(|t| scrape::parse(&t)).map_err(|e| e.to_string()), top))
    }))
    .await;
    fetched.into_iter().collect()
}

fn refresh(processes: &[ProcessInfo], before: &Scraped, after: &Scraped, args: &StatsArgs) -> Refresh {
    let mut rows = Vec::new();
    let mut merged_before = Metrics::default();
    let mut merged_after = Metrics::default();
    let mut seconds: f64 = 0.0;
    let mut top_files: Vec<TopRow> = Vec::new();
    let mut top_clients: Vec<TopRow> = Vec::new();
    for p in processes {
        let (Some(b), Some(a)) = (before.get(&p.metrics), after.get(&p.metrics)) else {
            continue;
        };
        let (rates, error) = match (&b.1, &a.1) {
            (Ok(mb), Ok(ma)) => {
                let s = a.0.duration_since(b.0).as_secs_f64();
                seconds = seconds.max(s);
                merged_before.samples.extend(mb.samples.iter().cloned());
                merged_after.samples.extend(ma.samples.iter().cloned());
                (Some(scrape::rates(mb, ma, s)), None)
            }
            (_, Err(e)) | (Err(e), _) => (None, Some(e.clone())),
        };
        if let (Some(tb), Some(ta)) = (&b.2, &a.2) {
            let s = a.0.duration_since(b.0).as_secs_f64().max(1e-3);
            let via = format!("{} {}", p.role, p.id);
            let per_s = |e: TopEntry| TopRow {
                key: e.key,
                via: via.clone(),
                ops: e.activity.ops as f64 / s,
                read_bytes: e.activity.bytes_read as f64 / s,
                write_bytes: e.activity.bytes_written as f64 / s,
            };
            top_files.extend(top::between(&tb.files, &ta.files).into_iter().map(per_s));
            top_clients.extend(top::between(&tb.clients, &ta.clients).into_iter().map(per_s));
        }
        rows.push(Row {
            role: p.role.clone(),
            id: p.id.clone(),
            host: p.host.clone(),
            metrics: p.metrics.clone(),
            reachable: error.is_none(),
            error,
            rates,
        });
    }
    let rank = |rows: &mut Vec<TopRow>| {
        rows.sort_by(|a, b| (b.read_bytes + b.write_bytes + b.ops).total_cmp(&(a.read_bytes + a.write_bytes + a.ops)));
        rows.truncate(args.top_rows);
    };
    rank(&mut top_files);
    rank(&mut top_clients);
    let seconds = if seconds > 0.0 { seconds } else { args.interval };
    Refresh {
        time_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        interval_s: seconds,
        total: scrape::rates(&merged_before, &merged_after, seconds),
        processes: rows,
        top: args.top.then_some(TopView { files: top_files, clients: top_clients }),
    }
}

fn human(bytes_per_s: f64) -> String {
    const UNITS: [&str; 5] = ["B", "K", "M", "G", "T"];
    let mut v = bytes_per_s;
    let mut i = 0;
    while v >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

fn ops(v: f64) -> String {
    if v >= 100_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn latency(s: Option<f64>) -> String {
    match s {
        None => "-".into(),
        Some(s) if s < 0.001 => format!("{:.3}", s * 1e3),
        Some(s) => format!("{:.2}", s * 1e3),
    }
}

/// The protocols shown as columns, in a fixed order, those that served anything.
fn protocol_columns(rows: &[Row]) -> Vec<String> {
    let order = ["meta", "storage", "fuse", "s3", "nfs", "client"];
    let mut present: Vec<String> = Vec::new();
    for r in rows {
        if let Some(rates) = &r.rates {
            for p in rates.ops.keys() {
                if !present.contains(p) {
                    present.push(p.clone());
                }
            }
        }
    }
    present.sort_by_key(|p| order.iter().position(|o| o == p).unwrap_or(order.len()));
    present
}

/// The table `trove stats` prints.
pub fn render(r: &Refresh) -> String {
    let protocols = protocol_columns(&r.processes);
    let mut header: Vec<String> = ["ROLE", "ID", "CPU%", "MEM"].iter().map(|s| s.to_string()).collect();
    header.extend(protocols.iter().map(|p| p.to_uppercase()));
    header.extend(["NET IN", "NET OUT", "DISK RD", "DISK WR", "P50 ms", "P99 ms"].iter().map(|s| s.to_string()));
    let mut lines: Vec<Vec<String>> = vec![header];
    let cells = |role: &str, id: &str, rates: Option<&Rates>, reachable: bool| -> Vec<String> {
        let mut c = vec![role.to_string(), id.to_string()];
        match rates {
            Some(x) => {
                c.push(format!("{:.1}", x.cpu_percent));
                c.push(if x.memory_bytes > 0.0 { human(x.memory_bytes) } else { "-".into() });
                for p in &protocols {
                    c.push(x.ops.get(p).map_or("-".into(), |v| ops(*v)));
                }
                for v in [x.net_in_bytes, x.net_out_bytes, x.disk_read_bytes, x.disk_write_bytes] {
                    c.push(human(v));
                }
                c.push(latency(x.latency_p50_s));
                c.push(latency(x.latency_p99_s));
            }
            None => {
                c.push(if reachable { "-".into() } else { "unreachable".into() });
                c.extend(std::iter::repeat_n(String::new(), protocols.len() + 7));
            }
        }
        c
    };
    for p in &r.processes {
        let id = if p.id.chars().count() > 24 {
            format!("…{}", p.id.chars().rev().take(23).collect::<Vec<_>>().into_iter().rev().collect::<String>())
        } else {
            p.id.clone()
        };
        lines.push(cells(&p.role, &id, p.rates.as_ref(), p.reachable));
    }
    lines.push(cells("total", "", Some(&r.total), true));
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| lines.iter().map(|l| l.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    let shown = r.time_ms / 1000;
    let date = crate::cmds::date(wire::Timestamp { secs: shown as i64, nanos: 0 }, true);
    out.push_str(&format!(
        "Trove statistics at {} UTC over the last {:.1} s: operations, network and disk per second, latency of operations served\n\n",
        &date[..19],
        r.interval_s
    ));
    for (n, l) in lines.iter().enumerate() {
        let row: Vec<String> = l
            .iter()
            .enumerate()
            .map(|(i, c)| if i < 2 { format!("{c:<w$}", w = widths[i]) } else { format!("{c:>w$}", w = widths[i]) })
            .collect();
        if n == lines.len() - 1 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * (widths.len() - 1)));
            out.push('\n');
        }
        out.push_str(row.join("  ").trim_end());
        out.push('\n');
    }
    if let Some(top) = &r.top {
        for (title, rows) in [("Busiest files", &top.files), ("Busiest clients", &top.clients)] {
            out.push_str(&format!("\n{title} (per second)\n"));
            if rows.is_empty() {
                out.push_str("  (none in this interval)\n");
                continue;
            }
            let kw = rows.iter().map(|t| t.key.chars().count()).max().unwrap_or(3).clamp(3, 60);
            let vw = rows.iter().map(|t| t.via.chars().count()).max().unwrap_or(3).max(3);
            out.push_str(&format!("  {:<kw$}  {:<vw$}  {:>8}  {:>8}  {:>8}\n", "KEY", "VIA", "OPS", "READ", "WRITE"));
            for t in rows {
                let key: String = t.key.chars().take(60).collect();
                out.push_str(&format!(
                    "  {key:<kw$}  {:<vw$}  {:>8}  {:>8}  {:>8}\n",
                    t.via,
                    ops(t.ops),
                    human(t.read_bytes),
                    human(t.write_bytes)
                ));
            }
        }
    }
    out
}

pub async fn stats(args: StatsArgs, cluster: Option<String>) -> Result<()> {
    let Some(cluster) = cluster else {
        bail!("no cluster given: pass --cluster HOST:PORT (or a local cluster directory), or set TROVE_CLUSTER");
    };
    if !(args.interval > 0.0 && args.interval <= 3600.0) {
        bail!("--interval must be between 0 and 3600 seconds; it is {}", args.interval);
    }
    let interval = Duration::from_secs_f64(args.interval);
    let tty = std::io::stdout().is_terminal() && !args.json && !args.once;
    let mut processes = discover(&cluster).await?;
    let mut before = scrape_all(&processes, args.top).await;
    let mut shown = 0u64;
    let mut last_discovery = Instant::now();
    loop {
        tokio::time::sleep(interval).await;
        let after = scrape_all(&processes, args.top).await;
        let r = refresh(&processes, &before, &after, &args);
        let mut out = std::io::stdout().lock();
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&r)?)?;
        } else {
            if tty {
                // Clear the screen and home the cursor: a refreshing view, as top does.
                write!(out, "\x1b[2J\x1b[H")?;
            }
            write!(out, "{}", render(&r))?;
            if !tty && !args.once {
                writeln!(out)?;
            }
        }
        out.flush()?;
        drop(out);
        shown += 1;
        if args.once || (args.count > 0 && shown >= args.count) {
            return Ok(());
        }
        before = after;
        // Processes come and go (a gateway started, a node added): look again now and then.
        if last_discovery.elapsed() >= DISCOVERY_INTERVAL {
            if let Ok(found) = discover(&cluster).await {
                let known: HashSet<String> = processes.iter().map(|p| p.metrics.clone()).collect();
                let new: Vec<ProcessInfo> = found.iter().filter(|p| !known.contains(&p.metrics)).cloned().collect();
                let fresh = scrape_all(&new, args.top).await;
                before.extend(fresh);
                processes = found;
            }
            last_discovery = Instant::now();
        }
    }
}

/// "2026-11-26 02:33:10 UTC"
fn event_time(ms: u64) -> String {
    let date = crate::cmds::date(wire::Timestamp { secs: (ms / 1000) as i64, nanos: 0 }, true);
    format!("{} UTC", &date[..19])
}

fn print_event(e: &wire::Event, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
    } else {
        writeln!(
            out,
            "{:>6}  {}  {:<8}  {:<18}  {}",
            e.seq,
            event_time(e.time_ms),
            e.severity.name(),
            e.kind,
            e.message
        )?;
    }
    out.flush()?;
    Ok(())
}

pub async fn events(args: EventsArgs, cluster: Option<String>) -> Result<()> {
    let client = crate::cmds::connect(cluster).await?;
    let op = MetaOp::Events { after: args.after.unwrap_or(0), limit: args.limit, newest: args.after.is_none() };
    let (events, mut next) = match client.meta(op).await? {
        MetaReply::Events { events, next } => (events, next),
        other => bail!("unexpected answer to Events: {other:?}"),
    };
    if events.is_empty() && !args.follow && !args.json {
        println!("no events recorded");
    }
    for e in &events {
        print_event(e, args.json)?;
    }
    while args.follow {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let op = MetaOp::Events { after: next.saturating_sub(1), limit: meta::events::EVENTS_PAGE_MAX, newest: false };
        if let MetaReply::Events { events, next: n } = client.meta(op).await? {
            for e in &events {
                print_event(e, args.json)?;
            }
            next = n;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_process_and_a_total() {
        let mut rates = Rates { seconds: 2.0, cpu_percent: 12.5, memory_bytes: 50e6, ..Rates::default() };
        rates.ops.insert("storage".into(), 1500.0);
        rates.net_out_bytes = 300.0 * 1024.0 * 1024.0;
        rates.latency_p50_s = Some(0.0004);
        rates.latency_p99_s = Some(0.012);
        let row = |id: &str| Row {
            role: "storage".into(),
            id: id.into(),
            host: "h".into(),
            metrics: format!("h:{id}"),
            reachable: true,
            error: None,
            rates: Some(rates.clone()),
        };
        let dead = Row {
            role: "storage".into(),
            id: "3".into(),
            host: "h".into(),
            metrics: "h:3".into(),
            reachable: false,
            error: Some("refused".into()),
            rates: None,
        };
        let r = Refresh {
            time_ms: 1_764_000_000_000,
            interval_s: 2.0,
            processes: vec![row("1"), row("2"), dead],
            total: rates.clone(),
            top: None,
        };
        let text = render(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[2].starts_with("ROLE") && lines[2].contains("STORAGE") && lines[2].contains("P99 ms"), "{text}");
        assert!(!lines[2].contains("FUSE"), "only protocols that served anything: {text}");
        assert!(
            lines[3].contains("1500")
                && lines[3].contains("300.0M")
                && lines[3].contains("0.400")
                && lines[3].contains("12.00"),
            "{text}"
        );
        assert!(lines[5].contains("unreachable"), "{text}");
        assert!(lines.last().is_some_and(|l| l.starts_with("total")), "{text}");
    }
}
