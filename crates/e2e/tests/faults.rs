//! The fault-and-bad-input suite: each defect found by trying Trove as a careless or hostile
//! user would, reproduced against real processes (the `trove` binary's clusters, gateways and
//! mounts, and real clients) and checked to fail cleanly: a clear error naming the cause, and
//! nothing already stored lost or replaced by something that only looks like success.
//!
//! - `writes`: failed writes and copies (full cluster, nodes dying mid-write), drains and node
//!   loss, erasure schemes the cluster cannot store;
//! - `gateways`: slow, oversized and malformed requests to the S3 and NFS gateways;
//! - `output`: what a person reads: error texts, listings, help, `df`.

mod common;
mod gw;
mod mnt;

#[path = "faults/gateways.rs"]
mod gateways;
#[path = "faults/output.rs"]
mod output;
#[path = "faults/writes.rs"]
mod writes;
