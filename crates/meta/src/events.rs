//! The cluster's event log: what happened to the cluster (nodes going down, up, out; drive
//! errors; checksum failures repaired; capacity crossing thresholds; background jobs starting
//! and finishing), kept in the engine so that every metadata server, `trove events` and the
//! dashboard read the same history.
//!
//! Records are `H` ‖ seq (big-endian) holding a `wire::Event`, numbered from 1 without gaps by
//! the counter `K` ‖ "event". The log is bounded: the transaction that appends event `n`
//! deletes event `n - EVENTS_KEPT`, so at most [`EVENTS_KEPT`] records exist and appending
//! costs the same at any length. Events are appended by the metadata server holding the
//! cluster manager's lease (its watcher, see `watch.rs`, and the data mover), so appends rarely
//! conflict; one that does is retried like any transaction.

use crate::keys;
use crate::store::{self, get, put, transact};
use kv::KvEngine;
use wire::{Event, NodeId, Severity, WireError};

/// Events kept; older ones are deleted as new ones are appended.
pub const EVENTS_KEPT: u64 = 10_000;
/// Most events one `Events` call answers.
pub const EVENTS_PAGE_MAX: u32 = 1000;
/// Longest message stored (longer ones are cut).
pub const MESSAGE_BYTES_MAX: usize = 1024;

/// An event before it has its place in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    pub severity: Severity,
    pub kind: &'static str,
    pub node: Option<NodeId>,
    pub subject: String,
    pub message: String,
}

/// Appends events in one transaction; returns them with their sequence numbers.
pub async fn append(engine: &dyn KvEngine, new: Vec<NewEvent>) -> Result<Vec<Event>, WireError> {
    if new.is_empty() {
        return Ok(Vec::new());
    }
    let time_ms = store::now_ms();
    let new = std::sync::Arc::new(new);
    let events = transact(engine, move |txn| {
        let new = new.clone();
        Box::pin(async move {
            let counter = keys::counter(keys::counter::EVENT);
            let mut next = store::get_u64(txn, &counter, 1).await?;
            let mut out = Vec::with_capacity(new.len());
            for e in new.iter() {
                let mut message = e.message.clone();
                if message.len() > MESSAGE_BYTES_MAX {
                    let mut cut = MESSAGE_BYTES_MAX;
                    while !message.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    message.truncate(cut);
                }
                let event = Event {
                    seq: next,
                    time_ms,
                    severity: e.severity,
                    kind: e.kind.to_string(),
                    node: e.node,
                    subject: e.subject.clone(),
                    message,
                };
                put(txn, &keys::event(next), &event).await?;
                if next > EVENTS_KEPT {
                    txn.delete(&keys::event(next - EVENTS_KEPT)).await?;
                }
                out.push(event);
                next += 1;
            }
            txn.put(&counter, &keys::encode_u64(next)).await?;
            Ok(out)
        })
    })
    .await?;
    for e in &events {
        metrics::gauges::add(metrics::names::EVENTS, &[("kind", &e.kind), ("severity", e.severity.name())], 1.0);
        match e.severity {
            Severity::Info => tracing::info!(target: "trove::event", "{}: {}", e.kind, e.message),
            _ => tracing::warn!(target: "trove::event", "{}: {}", e.kind, e.message),
        }
    }
    Ok(events)
}

/// Events after `after`, oldest first, at most `limit` (capped at [`EVENTS_PAGE_MAX`]); with
/// `newest`, the last `limit` of those. Also returns the number the next event will get.
pub async fn read(engine: &dyn KvEngine, after: u64, limit: u32, newest: bool) -> Result<(Vec<Event>, u64), WireError> {
    let limit = u64::from(limit.min(EVENTS_PAGE_MAX));
    transact(engine, move |txn| {
        Box::pin(async move {
            let next = store::get_u64(txn, &keys::counter(keys::counter::EVENT), 1).await?;
            let oldest_kept = next.saturating_sub(EVENTS_KEPT).max(1);
            let mut first = after.saturating_add(1).max(oldest_kept);
            if newest {
                first = first.max(next.saturating_sub(limit));
            }
            let mut events = Vec::new();
            let mut seq = first;
            while seq < next && (events.len() as u64) < limit {
                // Read one by one: the numbers are known, and a page is at most a thousand.
                if let Some(e) = get::<Event>(txn, &keys::event(seq)).await? {
                    events.push(e);
                }
                seq += 1;
            }
            Ok((events, next))
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u64) -> NewEvent {
        NewEvent {
            severity: Severity::Info,
            kind: wire::events::kind::NODE_UP,
            node: Some(i as NodeId),
            subject: format!("node {i}"),
            message: format!("node {i} is up"),
        }
    }

    #[tokio::test]
    async fn the_log_is_numbered_bounded_and_read_from_either_end() {
        let engine = kv_tests::memory::MemoryEngine::new();
        let (none, next) = read(&engine, 0, 10, false).await.expect("reads an empty log");
        assert!(none.is_empty());
        assert_eq!(next, 1);
        let written = append(&engine, (1..=5).map(ev).collect()).await.expect("appends");
        assert_eq!(written.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        let (first, next) = read(&engine, 0, 2, false).await.expect("reads");
        assert_eq!(first.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(next, 6);
        let (last, _) = read(&engine, 0, 2, true).await.expect("reads");
        assert_eq!(last.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![4, 5]);
        let (after, _) = read(&engine, 4, 10, false).await.expect("reads");
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].message, "node 5 is up");
    }

    #[tokio::test]
    async fn old_events_are_deleted_as_new_ones_come() {
        let engine = kv_tests::memory::MemoryEngine::new();
        let total = EVENTS_KEPT + 25;
        let mut i = 0;
        while i < total {
            let batch: Vec<NewEvent> = (i..(i + 500).min(total)).map(ev).collect();
            i += batch.len() as u64;
            append(&engine, batch).await.expect("appends");
        }
        let (oldest, next) = read(&engine, 0, 3, false).await.expect("reads");
        assert_eq!(next, total + 1);
        assert_eq!(oldest[0].seq, total + 1 - EVENTS_KEPT, "exactly EVENTS_KEPT remain");
        let mut txn = kv::KvEngine::begin(&engine).await.expect("begins");
        let gone = txn.get(&keys::event(25)).await.expect("reads");
        assert!(gone.is_none());
        let kept = txn.scan(&[keys::prefix::EVENT], &[keys::prefix::EVENT + 1], usize::MAX).await.expect("scans");
        assert_eq!(kept.len() as u64, EVENTS_KEPT);
    }
}
