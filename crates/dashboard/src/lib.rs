//! Trove's web dashboard: what an operator watches (cluster health, storage nodes and their
//! capacity, live throughput, IOPS and latency per protocol and per process, degraded chunks,
//! running jobs with their progress, recent events), served by the metadata role on its
//! metrics port.
//!
//! The page (`assets/`: HTML, CSS and JavaScript drawing its own SVG charts) is built into the
//! binary with `include_str!`; nothing is fetched from elsewhere at run time. Its data comes
//! from this server as JSON (`/api/overview`, `/api/history`, `/api/events`), which a sampler
//! task gathers every [`SAMPLE_INTERVAL`]: the cluster's status and latest events from the
//! metadata service, and every announced process's `/metrics`, turned into rates with the
//! same arithmetic as `trove stats` (`metrics::scrape`). The last [`HISTORY_SAMPLES_MAX`]
//! samples are kept for the charts (ten minutes), in memory.
//!
//! The dashboard is a client of the cluster like any other (through the client library, to
//! the metadata server it runs in): it only reads. With `dashboard_auth` configured it asks
//! for that user and password (HTTP basic authentication) on every route of its own.

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::scrape::{self, Metrics, Rates};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use wire::{ClusterStatus, Event, MetaOp, MetaReply, NodeState, ProcessInfo};

/// Pause between two samples.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Samples kept for the charts.
pub const HISTORY_SAMPLES_MAX: usize = 300;
/// Events the overview carries.
pub const OVERVIEW_EVENTS: u32 = 40;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const DASHBOARD_JS: &str = include_str!("../assets/dashboard.js");
const DASHBOARD_CSS: &str = include_str!("../assets/dashboard.css");

/// How the dashboard is set up.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// "USER:PASSWORD" asked for with HTTP basic authentication; `None`: open.
    pub auth: Option<String>,
}

/// One process as the dashboard shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessView {
    #[serde(flatten)]
    pub info: ProcessInfo,
    /// Whether its exporter answered the last scrape.
    pub reachable: bool,
    pub error: Option<String>,
    /// What it did since the scrape before (none after its first).
    pub rates: Option<Rates>,
}

/// One point of the charts.
#[derive(Clone, Debug, Serialize)]
pub struct HistoryPoint {
    pub t_ms: u64,
    /// Per process (by exporter address): what it did in the interval before `t_ms`.
    pub processes: BTreeMap<String, PointRates>,
}

/// The figures a chart needs of one process at one point.
#[derive(Clone, Debug, Serialize)]
pub struct PointRates {
    pub role: String,
    pub id: String,
    /// Operations per second by protocol served (the embedded client library's left out
    /// where the process serves another protocol: they are counted where they are served).
    pub ops: BTreeMap<String, f64>,
    /// Data bytes per second read and written, by protocol served (as `ops`).
    pub read: BTreeMap<String, f64>,
    pub write: BTreeMap<String, f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub cpu_percent: f64,
}

/// A background job as the metadata leader's metrics describe it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct JobView {
    pub job: String,
    pub running: bool,
    pub passes: f64,
    pub chunks_seen: f64,
    pub chunks_left: f64,
    pub chunks_moved: f64,
    pub bytes_written: f64,
    pub shards_repaired: f64,
    pub last_pass_s: f64,
}

/// The health verdict: `healthy`, `degraded` or `critical`, with the reasons.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    pub state: &'static str,
    pub reasons: Vec<String>,
}

#[derive(Default)]
struct Latest {
    status: Option<ClusterStatus>,
    status_error: Option<String>,
    events: Vec<Event>,
    processes: Vec<ProcessView>,
    /// Chunk health and job figures from the lease holder's metrics.
    leader: Option<Metrics>,
    updated_ms: u64,
}

struct Dash {
    meta_addr: String,
    auth: Option<String>,
    client: tokio::sync::Mutex<Option<client::Client>>,
    latest: Mutex<Latest>,
    history: Mutex<VecDeque<HistoryPoint>>,
    /// The previous scrape of each exporter, for rates.
    previous: Mutex<HashMap<String, (Instant, Metrics)>>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The dashboard's routes, reading the cluster through the metadata service at `meta_addr`;
/// starts its sampler (on the current runtime).
pub fn router(meta_addr: &str, options: Options) -> Router {
    let auth = options.auth.map(|pair| {
        use base64::Engine;
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
    });
    let dash = Arc::new(Dash {
        meta_addr: meta_addr.to_string(),
        auth,
        client: tokio::sync::Mutex::new(None),
        latest: Mutex::new(Latest::default()),
        history: Mutex::new(VecDeque::new()),
        previous: Mutex::new(HashMap::new()),
    });
    tokio::spawn(sample_forever(Arc::downgrade(&dash)));
    Router::new()
        .route("/", get(|| async { page(INDEX_HTML, "text/html; charset=utf-8") }))
        .route("/dashboard.js", get(|| async { page(DASHBOARD_JS, "text/javascript; charset=utf-8") }))
        .route("/dashboard.css", get(|| async { page(DASHBOARD_CSS, "text/css; charset=utf-8") }))
        .route("/api/overview", get(overview))
        .route("/api/history", get(history))
        .route("/api/events", get(events))
        .layer(axum::middleware::from_fn_with_state(dash.clone(), authenticate))
        .with_state(dash)
}

fn page(body: &'static str, content_type: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
}

/// Asks for the configured user and password, compared in time independent of where they
/// differ.
async fn authenticate(State(dash): State<Arc<Dash>>, headers: HeaderMap, request: Request, next: Next) -> Response {
    if let Some(want) = &dash.auth {
        let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
        let same =
            given.len() == want.len() && given.iter().zip(want.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if !same {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"Trove\"")],
                "authentication needed\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

async fn sample_forever(dash: Weak<Dash>) {
    loop {
        let Some(d) = dash.upgrade() else { return };
        d.sample().await;
        drop(d);
        tokio::time::sleep(SAMPLE_INTERVAL).await;
    }
}

impl Dash {
    async fn client(&self) -> Result<client::Client, String> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let options = client::ClientOptions { meta_deadline: Duration::from_secs(2), ..Default::default() };
        let c = client::Client::connect_with(&self.meta_addr, options).await.map_err(|e| e.to_string())?;
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Takes one sample: status, events, and every exporter's metrics.
    async fn sample(&self) {
        let client = match self.client().await {
            Ok(c) => c,
            Err(e) => {
                self.latest.lock().status_error = Some(e);
                return;
            }
        };
        let status = client.status(false).await;
        let events = match client.meta(MetaOp::Events { after: 0, limit: OVERVIEW_EVENTS, newest: true }).await {
            Ok(MetaReply::Events { events, .. }) => events,
            _ => Vec::new(),
        };
        let processes = match client.meta(MetaOp::Processes).await {
            Ok(MetaReply::Processes(p)) => p,
            _ => Vec::new(),
        };
        let scrapes = futures::future::join_all(processes.iter().map(|p| async move {
            let text = scrape::get(&p.metrics, "/metrics").await;
            (Instant::now(), text)
        }))
        .await;
        let mut views = Vec::new();
        let mut point = HistoryPoint { t_ms: now_ms(), processes: BTreeMap::new() };
        let mut leader = None;
        {
            let mut previous = self.previous.lock();
            for (info, (at, text)) in processes.into_iter().zip(scrapes) {
                let (reachable, error, rates) = match text {
                    Ok(text) => {
                        let m = scrape::parse(&text);
                        let rates = previous
                            .get(&info.metrics)
                            .map(|(was_at, was)| scrape::rates(was, &m, at.duration_since(*was_at).as_secs_f64()));
                        if info.role == "meta" && m.value(metrics::names::META_LEADER, &[]) == Some(1.0) {
                            leader = Some(m.clone());
                        }
                        previous.insert(info.metrics.clone(), (at, m));
                        (true, None, rates)
                    }
                    Err(e) => (false, Some(e.to_string()), None),
                };
                if let Some(r) = &rates {
                    point.processes.insert(
                        info.metrics.clone(),
                        PointRates {
                            role: info.role.clone(),
                            id: info.id.clone(),
                            ops: served(&r.ops),
                            read: served(&r.read_bytes),
                            write: served(&r.write_bytes),
                            p50_ms: r.latency_p50_s.map(|s| s * 1e3),
                            p99_ms: r.latency_p99_s.map(|s| s * 1e3),
                            cpu_percent: r.cpu_percent,
                        },
                    );
                }
                views.push(ProcessView { info, reachable, error, rates });
            }
            let keep: std::collections::HashSet<&str> = views.iter().map(|v| v.info.metrics.as_str()).collect();
            previous.retain(|k, _| keep.contains(k.as_str()));
        }
        {
            let mut history = self.history.lock();
            history.push_back(point);
            while history.len() > HISTORY_SAMPLES_MAX {
                history.pop_front();
            }
        }
        let mut latest = self.latest.lock();
        match status {
            Ok(s) => {
                latest.status = Some(s);
                latest.status_error = None;
            }
            Err(e) => latest.status_error = Some(e.to_string()),
        }
        latest.events = events;
        latest.processes = views;
        if leader.is_some() {
            latest.leader = leader;
        }
        latest.updated_ms = now_ms();
    }
}

/// `by_protocol` without the client library's entry, unless it is the only one.
fn served(by_protocol: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    if by_protocol.keys().any(|p| p != "client") {
        by_protocol.iter().filter(|(p, _)| *p != "client").map(|(p, v)| (p.clone(), *v)).collect()
    } else {
        by_protocol.clone()
    }
}

/// The capacity of the nodes that hold data, each file system once.
fn capacity(status: &ClusterStatus) -> (u64, u64) {
    let drives: Vec<wire::DriveInfo> = status
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
        .flat_map(|n| n.drives.iter().cloned())
        .collect();
    wire::capacity_once_per_device(&drives)
}

fn jobs(leader: Option<&Metrics>) -> Vec<JobView> {
    let Some(m) = leader else { return Vec::new() };
    let mut names: Vec<String> =
        m.series(metrics::names::JOB_RUNNING, &[]).filter_map(|s| s.label("job")).map(String::from).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|job| {
            let j = [("job", job.as_str())];
            JobView {
                running: m.value(metrics::names::JOB_RUNNING, &j) == Some(1.0),
                passes: m.sum("trove_job_passes_total", &j),
                chunks_seen: m.sum(metrics::names::JOB_CHUNKS_SEEN, &j),
                chunks_left: m.sum(metrics::names::JOB_CHUNKS_LEFT, &j),
                chunks_moved: m.sum("trove_job_chunks_total", &[("job", job.as_str()), ("result", "moved")])
                    + m.sum("trove_job_chunks_total", &[("job", job.as_str()), ("result", "recoded")]),
                bytes_written: m.sum("trove_job_bytes_total", &j),
                shards_repaired: m.sum("trove_job_shards_repaired_total", &j),
                last_pass_s: m.sum(metrics::names::JOB_PASS_SECONDS, &j),
                job,
            }
        })
        .collect()
}

/// The health verdict and its reasons.
pub fn health(status: Option<&ClusterStatus>, chunks: &BTreeMap<String, f64>) -> Health {
    let mut critical = Vec::new();
    let mut degraded = Vec::new();
    let Some(status) = status else {
        return Health { state: "critical", reasons: vec!["the metadata service does not answer".into()] };
    };
    let down: Vec<String> =
        status.nodes.iter().filter(|n| n.state == NodeState::Down).map(|n| n.id.to_string()).collect();
    if !down.is_empty() {
        degraded.push(format!("{} storage node(s) down: {}", down.len(), down.join(", ")));
    }
    for n in &status.nodes {
        for d in n.drives.iter().filter(|d| !d.error.is_empty()) {
            critical.push(format!("drive {} of node {}: {}", d.path, n.id, d.error));
        }
    }
    let get = |k: &str| chunks.get(k).copied().unwrap_or(0.0);
    if get("unavailable") > 0.0 {
        critical.push(format!("{} chunk(s) unavailable until nodes return", get("unavailable")));
    }
    if get("degraded") > 0.0 {
        degraded.push(format!("{} chunk(s) degraded (rebuilt from parity on read; repair follows)", get("degraded")));
    }
    let (total, free) = capacity(status);
    if total > 0 {
        let used = 100.0 * total.saturating_sub(free) as f64 / total as f64;
        if used >= 95.0 {
            critical.push(format!("{used:.0}% of the raw capacity used"));
        } else if used >= 85.0 {
            degraded.push(format!("{used:.0}% of the raw capacity used"));
        }
    }
    let state = if !critical.is_empty() {
        "critical"
    } else if !degraded.is_empty() {
        "degraded"
    } else {
        "healthy"
    };
    critical.extend(degraded);
    Health { state, reasons: critical }
}

/// Chunk counts by state: the lease holder's (a minute old at most), else the status's.
fn chunk_counts(status: Option<&ClusterStatus>, leader: Option<&Metrics>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if let Some(s) = status {
        out.insert("all".to_string(), s.chunks as f64);
    }
    if let Some(m) = leader {
        for s in m.series(metrics::names::CLUSTER_CHUNKS, &[]) {
            if let Some(state) = s.label("state") {
                out.insert(state.to_string(), s.value);
            }
        }
    }
    out
}

/// What `/api/overview` answers.
#[derive(Serialize)]
struct Overview<'a> {
    generated_ms: u64,
    updated_ms: u64,
    sample_interval_s: u64,
    health: Health,
    status: Option<&'a ClusterStatus>,
    status_error: Option<&'a String>,
    capacity: Capacity,
    chunks: BTreeMap<String, f64>,
    jobs: Vec<JobView>,
    processes: &'a [ProcessView],
    totals: Totals,
    events: Vec<&'a Event>,
}

#[derive(Serialize)]
struct Capacity {
    total: u64,
    free: u64,
    pending_delete: u64,
}

#[derive(Serialize)]
struct Totals {
    ops: BTreeMap<String, f64>,
    read_bytes: f64,
    write_bytes: f64,
}

async fn overview(State(dash): State<Arc<Dash>>) -> Response {
    let latest = dash.latest.lock();
    let chunks = chunk_counts(latest.status.as_ref(), latest.leader.as_ref());
    let health = health(latest.status.as_ref(), &chunks);
    let (total, free) = latest.status.as_ref().map(capacity).unwrap_or((0, 0));
    let mut totals = Totals { ops: BTreeMap::new(), read_bytes: 0.0, write_bytes: 0.0 };
    for p in &latest.processes {
        if let Some(r) = &p.rates {
            // Served operations and bytes: what front ends and services answered, not the
            // client library's calls inside them (counted once, where they are served).
            for (proto, v) in served(&r.ops) {
                *totals.ops.entry(proto).or_default() += v;
            }
            if matches!(p.info.role.as_str(), "mount" | "s3" | "nfs") {
                totals.read_bytes += served(&r.read_bytes).values().sum::<f64>();
                totals.write_bytes += served(&r.write_bytes).values().sum::<f64>();
            }
        }
    }
    let overview = Overview {
        generated_ms: now_ms(),
        updated_ms: latest.updated_ms,
        sample_interval_s: SAMPLE_INTERVAL.as_secs(),
        health,
        status: latest.status.as_ref(),
        status_error: latest.status_error.as_ref(),
        capacity: Capacity {
            total,
            free,
            pending_delete: latest.status.as_ref().map_or(0, |s| s.bytes_pending_delete),
        },
        chunks,
        jobs: jobs(latest.leader.as_ref()),
        processes: &latest.processes,
        totals,
        events: latest.events.iter().rev().collect(),
    };
    json(&overview)
}

/// A JSON answer (serde_json writes the 128-bit node uuids as numbers, which `Json` would too;
/// written here so that a failure is an error answer, not a dropped connection).
fn json<T: Serialize>(value: &T) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => {
            ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-cache")], text).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode the answer: {e}")).into_response(),
    }
}

#[derive(Serialize)]
struct History<'a> {
    interval_s: u64,
    points: Vec<&'a HistoryPoint>,
}

async fn history(State(dash): State<Arc<Dash>>) -> Response {
    let history = dash.history.lock();
    json(&History { interval_s: SAMPLE_INTERVAL.as_secs(), points: history.iter().collect() })
}

#[derive(Serialize)]
struct EventsAnswer {
    events: Vec<Event>,
    next: u64,
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<u64>,
    limit: Option<u32>,
}

async fn events(State(dash): State<Arc<Dash>>, Query(q): Query<EventsQuery>) -> Response {
    let client = match dash.client().await {
        Ok(c) => c,
        Err(e) => return (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    };
    let op = MetaOp::Events { after: q.after.unwrap_or(0), limit: q.limit.unwrap_or(100), newest: q.after.is_none() };
    match client.meta(op).await {
        Ok(MetaReply::Events { events, next }) => json(&EventsAnswer { events, next }),
        Ok(other) => (StatusCode::BAD_GATEWAY, format!("unexpected answer {other:?}")).into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{DriveInfo, EcScheme, NodeInfo};

    fn status(states: &[NodeState], free: u64) -> ClusterStatus {
        ClusterStatus {
            nodes: states
                .iter()
                .enumerate()
                .map(|(i, &state)| NodeInfo {
                    id: i as u32 + 1,
                    uuid: i as u128,
                    addr: String::new(),
                    state,
                    drives: vec![DriveInfo {
                        path: "/d".into(),
                        bytes_total: 100,
                        bytes_free: free,
                        shards: 0,
                        error: String::new(),
                        device: i as u64 + 1,
                    }],
                    heartbeat_age_ms: 0,
                    pool: wire::DEFAULT_POOL,
                })
                .collect(),
            map_version: 1,
            default_ec: EcScheme { k: 1, m: 1 },
            chunk_bytes: 1,
            files: 0,
            chunks: 10,
            chunks_degraded: 0,
            chunks_unavailable: 0,
            chunks_misplaced: 0,
            leader: None,
            ec_schemes: vec![],
            engine: String::new(),
            chunks_narrow: 0,
            dirs_too_wide: vec![],
            dirs_too_wide_count: 0,
            bytes_pending_delete: 0,
            pending_delete_within_ms: 0,
            pools: vec![],
        }
    }

    #[test]
    fn health_names_what_is_wrong() {
        let none = BTreeMap::new();
        assert_eq!(health(Some(&status(&[NodeState::Up, NodeState::Up], 50)), &none).state, "healthy");
        let h = health(Some(&status(&[NodeState::Up, NodeState::Down], 50)), &none);
        assert_eq!(h.state, "degraded");
        assert_eq!(h.reasons, ["1 storage node(s) down: 2"]);
        let unavailable = BTreeMap::from([("unavailable".to_string(), 3.0)]);
        assert_eq!(health(Some(&status(&[NodeState::Up], 50)), &unavailable).state, "critical");
        assert_eq!(health(Some(&status(&[NodeState::Up], 2)), &none).state, "critical", "98% full");
        assert_eq!(health(None, &none).state, "critical");
    }

    /// The status line of a GET of `path` from `addr`, with `authorization` if given.
    async fn status_of(addr: &str, path: &str, authorization: Option<&str>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connects");
        let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.expect("writes");
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.expect("reads");
        answer.lines().next().unwrap_or_default().to_string()
    }

    #[tokio::test]
    async fn with_a_password_configured_every_route_asks_for_it() {
        use base64::Engine;
        // No metadata service behind it: the pages and the authentication need none.
        let routes = router("127.0.0.1:1", Options { auth: Some("admin:s3cret".into()) });
        let exporter = metrics::http::serve("127.0.0.1:0", Some(routes)).await.expect("serves");
        let addr = exporter.addr.to_string();
        let good = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("admin:s3cret"));
        let bad = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("admin:guess"));
        for path in ["/", "/dashboard.js", "/api/overview", "/api/history"] {
            assert!(status_of(&addr, path, None).await.contains("401"), "{path} without a password");
            assert!(status_of(&addr, path, Some(&bad)).await.contains("401"), "{path} with a wrong one");
            assert!(status_of(&addr, path, Some(&good)).await.contains("200"), "{path} with the password");
        }
        // The metrics themselves stay open to scrapers.
        assert!(status_of(&addr, "/metrics", None).await.contains("200"));
        let open = router("127.0.0.1:1", Options::default());
        let exporter = metrics::http::serve("127.0.0.1:0", Some(open)).await.expect("serves");
        assert!(status_of(&exporter.addr.to_string(), "/", None).await.contains("200"));
    }

    #[test]
    fn the_assets_are_built_in_and_self_contained() {
        assert!(INDEX_HTML.contains("dashboard.js") && INDEX_HTML.contains("dashboard.css"));
        for asset in [INDEX_HTML, DASHBOARD_JS, DASHBOARD_CSS] {
            for fetch in ["src=\"http", "href=\"http", "url(http", "fetch(\"http", "import "] {
                assert!(!asset.contains(fetch), "an asset loads something from elsewhere: {fetch}");
            }
        }
    }
}
