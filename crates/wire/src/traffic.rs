//! Bytes this process's RPC transport received and sent: frame headers, bodies and data
//! sections, counted where frames are read off and handed to the socket. Plain atomics, always
//! on (one relaxed addition per frame), like [`crate::stages`]; a role's metrics exporter
//! publishes them as `trove_net_bytes_total`.

use std::sync::atomic::{AtomicU64, Ordering};

static RECEIVED: AtomicU64 = AtomicU64::new(0);
static SENT: AtomicU64 = AtomicU64::new(0);

/// Counts a frame of `bytes` read off a connection.
#[inline]
pub fn received(bytes: usize) {
    RECEIVED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Counts a frame of `bytes` handed to a connection.
#[inline]
pub fn sent(bytes: usize) {
    SENT.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// (received, sent) so far.
pub fn totals() -> (u64, u64) {
    (RECEIVED.load(Ordering::Relaxed), SENT.load(Ordering::Relaxed))
}
