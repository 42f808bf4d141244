//! The lease holder's watch over the cluster: every second it compares what it sees (each
//! storage node's state, each drive's health, how full the cluster is) with what the event log
//! last said about it, appends an event for every change, and publishes the cluster's figures
//! as metrics (`trove_cluster_*`, see `metrics::names`).
//!
//! The log itself is the memory: on taking the lease, the watcher reads the latest events and
//! takes the last one about each subject as its state, so a change that happened while another
//! server led, or while none did, is still reported once, and nothing is reported twice when
//! the lease moves. Liveness is judged only once this server has had time to hear every live
//! node's heartbeat (`down_after_ms` and a margin after its start): before that, every node
//! would look down.

use crate::events::NewEvent;
use crate::MetaService;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;
use wire::events::kind;
use wire::{ClusterStatus, MetaCall, MetaOp, MetaReply, NodeState, Severity, WireError};

/// Pause between two looks.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Pause between walks over every chunk record for the degraded, misplaced and narrow counts
/// while they can change: the last walk found chunks to repair, or the repair job's work queue
/// holds entries. A walk also follows at once a node's state change or a new placement map,
/// and happens once on taking the lease; a healthy, idle cluster is never walked.
pub const CHUNK_SCAN_INTERVAL: Duration = Duration::from_secs(60);
/// Events read back on taking the lease to learn the last state of every subject.
pub const RECONCILE_EVENTS: u32 = 1000;
/// Used share of raw capacity from which the cluster is reported nearly full, and full.
pub const CAPACITY_WARNING_PERCENT: f64 = 85.0;
pub const CAPACITY_CRITICAL_PERCENT: f64 = 95.0;
/// How far below a threshold usage must fall before it is reported back under it (so usage
/// hovering at a threshold is not reported at every wobble).
pub const CAPACITY_HYSTERESIS_PERCENT: f64 = 2.0;
/// Added to `down_after_ms` before liveness is trusted after this server starts.
const HEARTBEAT_MARGIN: Duration = Duration::from_secs(2);

/// The state an event says its subject is in (what the watcher compares with).
pub fn state_of(kind: &str) -> Option<&'static str> {
    Some(match kind {
        kind::NODE_JOINED | kind::NODE_UP => "up",
        kind::NODE_DOWN => "down",
        kind::NODE_DRAINING => "draining",
        kind::NODE_OUT => "out",
        kind::DRIVE_ERROR => "error",
        kind::DRIVE_OK => "ok",
        kind::CAPACITY_WARNING => "warning",
        kind::CAPACITY_CRITICAL => "critical",
        kind::CAPACITY_OK => "ok",
        _ => return None,
    })
}

/// What one look found, per subject: its state and the event to record if that is news.
struct Seen {
    state: String,
    /// The event for a subject that had no history (a node's first appearance); `None`: such a
    /// subject's state is taken silently (a healthy drive is not news).
    first: Option<NewEvent>,
    change: NewEvent,
}

fn capacity_state(used_percent: f64, previous: Option<&str>) -> &'static str {
    let at_least = |threshold: f64, was_there: bool| {
        used_percent >= threshold || (was_there && used_percent >= threshold - CAPACITY_HYSTERESIS_PERCENT)
    };
    if at_least(CAPACITY_CRITICAL_PERCENT, previous == Some("critical")) {
        "critical"
    } else if at_least(CAPACITY_WARNING_PERCENT, matches!(previous, Some("warning") | Some("critical"))) {
        "warning"
    } else {
        "ok"
    }
}

/// Every subject of `status` with its state and the events that would report it.
fn look(status: &ClusterStatus, known: &HashMap<String, String>) -> Vec<(String, Seen)> {
    let mut out = Vec::new();
    for n in &status.nodes {
        let subject = format!("node {}", n.id);
        let (state, severity, what, message) = match n.state {
            NodeState::Up => ("up", Severity::Info, kind::NODE_UP, format!("storage node {} ({}) is up", n.id, n.addr)),
            NodeState::Down => (
                "down",
                Severity::Warning,
                kind::NODE_DOWN,
                format!(
                    "storage node {} ({}) is down: no heartbeat for {:.1} s; reads rebuild its shards from parity",
                    n.id,
                    n.addr,
                    n.heartbeat_age_ms as f64 / 1000.0
                ),
            ),
            NodeState::Draining => (
                "draining",
                Severity::Info,
                kind::NODE_DRAINING,
                format!("storage node {} ({}) is draining: its data is moved to the other nodes", n.id, n.addr),
            ),
            NodeState::Out => (
                "out",
                Severity::Warning,
                kind::NODE_OUT,
                format!(
                    "storage node {} ({}) is out of the cluster: its shards are rebuilt on the other nodes",
                    n.id, n.addr
                ),
            ),
        };
        let change = NewEvent { severity, kind: what, node: Some(n.id), subject: subject.clone(), message };
        let first = match n.state {
            NodeState::Up => Some(NewEvent {
                severity: Severity::Info,
                kind: kind::NODE_JOINED,
                node: Some(n.id),
                subject: subject.clone(),
                message: format!("storage node {} ({}) joined the cluster", n.id, n.addr),
            }),
            _ => Some(change.clone()),
        };
        out.push((subject, Seen { state: state.into(), first, change }));
        for d in &n.drives {
            let subject = format!("drive {}:{}", n.id, d.path);
            let (state, change) = if d.error.is_empty() {
                let message = format!("drive {} of storage node {} works again", d.path, n.id);
                (
                    "ok",
                    NewEvent {
                        severity: Severity::Info,
                        kind: kind::DRIVE_OK,
                        node: Some(n.id),
                        subject: subject.clone(),
                        message,
                    },
                )
            } else {
                let message = format!("drive {} of storage node {} reports an error: {}", d.path, n.id, d.error);
                (
                    "error",
                    NewEvent {
                        severity: Severity::Critical,
                        kind: kind::DRIVE_ERROR,
                        node: Some(n.id),
                        subject: subject.clone(),
                        message,
                    },
                )
            };
            let first = (state == "error").then(|| change.clone());
            out.push((subject, Seen { state: state.into(), first, change }));
        }
    }
    let drives: Vec<wire::DriveInfo> = status
        .nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
        .flat_map(|n| n.drives.iter().cloned())
        .collect();
    let (total, free) = wire::capacity_once_per_device(&drives);
    if total > 0 {
        let used = 100.0 * (total.saturating_sub(free)) as f64 / total as f64;
        let state = capacity_state(used, known.get("capacity").map(String::as_str));
        let figures = format!("{used:.1}% of the raw capacity used ({} of {} bytes free)", free, total);
        let (severity, what, message) = match state {
            "critical" => {
                (Severity::Critical, kind::CAPACITY_CRITICAL, format!("the cluster is nearly full: {figures}"))
            }
            "warning" => (Severity::Warning, kind::CAPACITY_WARNING, format!("the cluster is filling up: {figures}")),
            _ => (Severity::Info, kind::CAPACITY_OK, format!("the cluster has room again: {figures}")),
        };
        let change = NewEvent { severity, kind: what, node: None, subject: "capacity".into(), message };
        let first = (state != "ok").then(|| change.clone());
        out.push(("capacity".into(), Seen { state: state.into(), first, change }));
    }
    out
}

/// The events for what changed since `known`, which is updated.
fn changes(status: &ClusterStatus, known: &mut HashMap<String, String>) -> Vec<NewEvent> {
    let mut new = Vec::new();
    for (subject, seen) in look(status, known) {
        match known.get(&subject) {
            Some(state) if *state == seen.state => {}
            Some(_) => new.push(seen.change),
            None => new.extend(seen.first),
        }
        known.insert(subject, seen.state);
    }
    new
}

/// The state of every subject as the latest events say.
async fn reconcile(service: &MetaService) -> Result<HashMap<String, String>, WireError> {
    let (events, _) = crate::events::read(service.engine().as_ref(), 0, RECONCILE_EVENTS, true).await?;
    let mut known = HashMap::new();
    for e in events {
        if let Some(state) = state_of(&e.kind) {
            known.insert(e.subject, state.to_string());
        }
    }
    Ok(known)
}

fn publish(status: &ClusterStatus) {
    use metrics::gauges::set;
    use metrics::names as n;
    for state in [NodeState::Up, NodeState::Down, NodeState::Draining, NodeState::Out] {
        let count = status.nodes.iter().filter(|x| x.state == state).count();
        set(n::CLUSTER_NODES, &[("state", &state.to_string())], count as f64);
    }
    let drives: Vec<wire::DriveInfo> = status
        .nodes
        .iter()
        .filter(|x| matches!(x.state, NodeState::Up | NodeState::Draining))
        .flat_map(|x| x.drives.iter().cloned())
        .collect();
    let (total, free) = wire::capacity_once_per_device(&drives);
    set(n::CLUSTER_CAPACITY, &[("kind", "total")], total as f64);
    set(n::CLUSTER_CAPACITY, &[("kind", "free")], free as f64);
    set(n::CLUSTER_CAPACITY, &[("kind", "pending_delete")], status.bytes_pending_delete as f64);
    set(n::CLUSTER_FILES, &[], status.files as f64);
    set(n::CLUSTER_CHUNKS, &[("state", "all")], status.chunks as f64);
    set(n::CLUSTER_MAP_VERSION, &[], f64::from(status.map_version));
}

fn publish_chunk_health(status: &ClusterStatus) {
    use metrics::gauges::set;
    use metrics::names as n;
    set(n::CLUSTER_CHUNKS, &[("state", "degraded")], status.chunks_degraded as f64);
    set(n::CLUSTER_CHUNKS, &[("state", "unavailable")], status.chunks_unavailable as f64);
    set(n::CLUSTER_CHUNKS, &[("state", "misplaced")], status.chunks_misplaced as f64);
    set(n::CLUSTER_CHUNKS, &[("state", "narrow")], status.chunks_narrow as f64);
}

fn unpublish() {
    use metrics::names as n;
    for name in [n::CLUSTER_NODES, n::CLUSTER_CAPACITY, n::CLUSTER_FILES, n::CLUSTER_CHUNKS, n::CLUSTER_MAP_VERSION] {
        metrics::gauges::clear(name);
    }
}

async fn status_of(service: &MetaService, scan_chunks: bool) -> Result<ClusterStatus, WireError> {
    match service.call(MetaCall { request_id: 0, op: MetaOp::Status { scan_chunks } }).await? {
        MetaReply::Status(s) => Ok(s),
        other => Err(wire::werr!(Internal, "status answered {other:?}")),
    }
}

/// Watches while the service exists.
pub async fn run(service: Weak<MetaService>) {
    let started = Instant::now();
    // What the log says of each subject; `None` until read on taking the lease.
    let mut known: Option<HashMap<String, String>> = None;
    let mut last_scan: Option<LastScan> = None;
    let mut leading = false;
    let mut term = 0u64;
    loop {
        tokio::time::sleep(WATCH_INTERVAL).await;
        let Some(service) = service.upgrade() else {
            return;
        };
        let leader = service.is_leader();
        metrics::gauges::set(metrics::names::META_LEADER, &[], if leader { 1.0 } else { 0.0 });
        metrics::gauges::set(metrics::names::META_PROCESSES, &[], service.processes().list().len() as f64);
        if !leader {
            if leading {
                unpublish();
                leading = false;
            }
            continue;
        }
        // What was learnt holds while no other server led (a lapse of this server's lease
        // within one term); after another led, the log and the chunks are read afresh.
        if term != service.lease_term() {
            term = service.lease_term();
            known = None;
            last_scan = None;
        }
        leading = true;
        if let Err(e) = watch_once(&service, started, &mut known, &mut last_scan).await {
            tracing::debug!("watching the cluster failed: {e}");
        }
    }
}

/// The last walk over the chunk records: when, on which placement map, and whether it found
/// every chunk healthy.
#[derive(Clone, Copy, Debug)]
pub struct LastScan {
    at: Instant,
    map_version: u32,
    healthy: bool,
}

/// Whether the chunk records must be walked again (see [`CHUNK_SCAN_INTERVAL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ScanDue {
    Now,
    No,
    /// Only if the repair job's work queue holds entries.
    IfQueued,
}

fn scan_due(last: Option<LastScan>, map_version: u32) -> ScanDue {
    match last {
        None => ScanDue::Now,
        Some(last) if last.map_version != map_version => ScanDue::Now,
        Some(last) if last.at.elapsed() < CHUNK_SCAN_INTERVAL => ScanDue::No,
        Some(last) if !last.healthy => ScanDue::Now,
        Some(_) => ScanDue::IfQueued,
    }
}

fn healthy(status: &ClusterStatus) -> bool {
    status.chunks_degraded == 0
        && status.chunks_misplaced == 0
        && status.chunks_narrow == 0
        && status.chunks_unavailable == 0
}

/// Whether the repair job's work queue holds entries (a page of one; an empty page with more
/// behind it met an entry settled meanwhile).
async fn queue_holds_entries(service: &MetaService) -> bool {
    let call = MetaCall { request_id: 0, op: MetaOp::ScanQueue { after: None, limit: 1 } };
    matches!(service.call(call).await, Ok(MetaReply::ChunkPage { chunks, more }) if !chunks.is_empty() || more)
}

async fn watch_once(
    service: &Arc<MetaService>,
    started: Instant,
    known: &mut Option<HashMap<String, String>>,
    last_scan: &mut Option<LastScan>,
) -> Result<(), WireError> {
    let status = status_of(service, false).await?;
    publish(&status);
    let due = match scan_due(*last_scan, status.map_version) {
        ScanDue::Now => true,
        ScanDue::No => false,
        ScanDue::IfQueued => queue_holds_entries(service).await,
    };
    if due {
        let counted = status_of(service, true).await?;
        *last_scan =
            Some(LastScan { at: Instant::now(), map_version: counted.map_version, healthy: healthy(&counted) });
        publish_chunk_health(&counted);
    }
    let trusted = Duration::from_millis(service.options().down_after_ms) + HEARTBEAT_MARGIN;
    if started.elapsed() < trusted {
        return Ok(());
    }
    if known.is_none() {
        *known = Some(reconcile(service).await?);
    }
    let Some(known) = known.as_mut() else {
        return Ok(());
    };
    let mut trial = known.clone();
    let new = changes(&status, &mut trial);
    if !new.is_empty() {
        // A node that went down or came back changes which chunks are degraded: count them
        // again at the next look rather than up to a minute later.
        if new.iter().any(|e| e.node.is_some()) {
            *last_scan = None;
        }
        service.record_events(new).await?;
    }
    // Only once recorded: a failed append is tried again at the next look.
    *known = trial;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_healthy_idle_cluster_is_walked_once_and_then_only_on_a_change() {
        let long_ago = Instant::now().checked_sub(CHUNK_SCAN_INTERVAL * 2).unwrap_or_else(Instant::now);
        let scan = |at, healthy| Some(LastScan { at, map_version: 7, healthy });
        assert_eq!(scan_due(None, 7), ScanDue::Now, "on taking the lease");
        assert_eq!(scan_due(scan(Instant::now(), false), 7), ScanDue::No, "not within the interval");
        assert_eq!(scan_due(scan(Instant::now(), true), 8), ScanDue::Now, "a new placement map");
        assert_eq!(scan_due(scan(long_ago, false), 7), ScanDue::Now, "chunks left to repair");
        assert_eq!(scan_due(scan(long_ago, true), 7), ScanDue::IfQueued, "healthy: only if work is queued");
    }
    use wire::{DriveInfo, EcScheme, NodeInfo};

    fn status(nodes: Vec<(u32, NodeState, &str, u64)>) -> ClusterStatus {
        ClusterStatus {
            nodes: nodes
                .into_iter()
                .map(|(id, state, error, free)| NodeInfo {
                    id,
                    uuid: u128::from(id),
                    addr: format!("127.0.0.1:{}", 7000 + id),
                    state,
                    drives: vec![DriveInfo {
                        path: "/d".into(),
                        bytes_total: 100,
                        bytes_free: free,
                        shards: 0,
                        error: error.into(),
                        device: u64::from(id),
                    }],
                    heartbeat_age_ms: 5000,
                    pool: wire::DEFAULT_POOL,
                })
                .collect(),
            map_version: 1,
            default_ec: EcScheme { k: 1, m: 1 },
            chunk_bytes: 1 << 20,
            files: 0,
            chunks: 0,
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

    fn kinds(events: &[NewEvent]) -> Vec<String> {
        events.iter().map(|e| format!("{} {}", e.kind, e.subject)).collect()
    }

    #[test]
    fn changes_are_reported_once_and_healthy_news_is_not_news() {
        let mut known = HashMap::new();
        let up = status(vec![(1, NodeState::Up, "", 90), (2, NodeState::Up, "", 90)]);
        assert_eq!(kinds(&changes(&up, &mut known)), ["node_joined node 1", "node_joined node 2"]);
        assert!(changes(&up, &mut known).is_empty(), "nothing changed");
        let down = status(vec![(1, NodeState::Up, "", 90), (2, NodeState::Down, "", 90)]);
        let e = changes(&down, &mut known);
        assert_eq!(kinds(&e), ["node_down node 2"]);
        assert_eq!(e[0].severity, Severity::Warning);
        assert!(e[0].message.contains("no heartbeat for 5.0 s"), "{}", e[0].message);
        let broken = status(vec![(1, NodeState::Up, "read-only file system", 90), (2, NodeState::Up, "", 90)]);
        assert_eq!(kinds(&changes(&broken, &mut known)), ["drive_error drive 1:/d", "node_up node 2"]);
        assert_eq!(kinds(&changes(&up, &mut known)), ["drive_ok drive 1:/d"]);
        let out = status(vec![(1, NodeState::Up, "", 90), (2, NodeState::Out, "", 90)]);
        assert_eq!(kinds(&changes(&out, &mut known)), ["node_out node 2"]);
    }

    #[test]
    fn capacity_thresholds_are_crossed_with_hysteresis() {
        let mut known = HashMap::new();
        let used = |free| status(vec![(1, NodeState::Up, "", free)]);
        assert!(kinds(&changes(&used(50), &mut known)).iter().all(|k| k.starts_with("node_joined")));
        assert_eq!(kinds(&changes(&used(14), &mut known)), ["capacity_warning capacity"]);
        assert!(changes(&used(16), &mut known).is_empty(), "84% is within the hysteresis");
        assert_eq!(kinds(&changes(&used(4), &mut known)), ["capacity_critical capacity"]);
        assert_eq!(kinds(&changes(&used(20), &mut known)), ["capacity_ok capacity"]);
    }

    #[test]
    fn events_say_the_state_the_watcher_compares_with() {
        for k in [
            kind::NODE_JOINED,
            kind::NODE_UP,
            kind::NODE_DOWN,
            kind::NODE_DRAINING,
            kind::NODE_OUT,
            kind::DRIVE_ERROR,
            kind::DRIVE_OK,
            kind::CAPACITY_OK,
        ] {
            assert!(state_of(k).is_some(), "{k}");
        }
        assert_eq!(state_of(kind::JOB_STARTED), None);
    }
}
