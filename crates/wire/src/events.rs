//! What the metadata service tells operators about the cluster, beside its status: the event
//! log's records (node down/up/out, drive errors, checksum failures repaired, capacity
//! thresholds, background jobs starting and finishing), and the processes that export metrics.
//!
//! Kinds are strings (`node_down`, `job_finished`, ...), not an enum, so that a server and a
//! reader of different versions still show each other's events; `crate::events::kind` lists
//! the ones this build writes.

use crate::types::NodeId;
use serde::{Deserialize, Serialize};

/// How much an event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// One record of the event log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log, from 1, without gaps.
    pub seq: u64,
    /// When it was recorded (wall clock, ms since the Unix epoch).
    pub time_ms: u64,
    pub severity: Severity,
    /// What happened, one of [`kind`] (or a newer build's).
    pub kind: String,
    /// The storage node concerned, if any.
    pub node: Option<NodeId>,
    /// What the event is about ("node 3", "drive 3:/data/d1", "capacity", "job mover"): the
    /// latest event of a subject says its state.
    pub subject: String,
    /// A sentence for people.
    pub message: String,
}

/// The kinds of event this build records.
pub mod kind {
    pub const NODE_JOINED: &str = "node_joined";
    pub const NODE_UP: &str = "node_up";
    pub const NODE_DOWN: &str = "node_down";
    pub const NODE_DRAINING: &str = "node_draining";
    pub const NODE_OUT: &str = "node_out";
    pub const DRIVE_ERROR: &str = "drive_error";
    pub const DRIVE_OK: &str = "drive_ok";
    pub const CAPACITY_WARNING: &str = "capacity_warning";
    pub const CAPACITY_CRITICAL: &str = "capacity_critical";
    pub const CAPACITY_OK: &str = "capacity_ok";
    pub const CHECKSUM_REPAIRED: &str = "checksum_repaired";
    pub const JOB_STARTED: &str = "job_started";
    pub const JOB_FINISHED: &str = "job_finished";
    pub const LEADER: &str = "leader";
    /// An administrative operation asked over the network, done or refused (`meta::audit`).
    pub const ADMIN: &str = "admin";
    /// Requests a front end refused for failed authentication (`ReportAuthFailures`).
    pub const AUTH_FAILURE: &str = "auth_failure";
}

/// A process that exports metrics, as it announced itself to the metadata service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// `meta`, `storage`, `mount`, `s3`, `nfs`, or `client`.
    pub role: String,
    /// The instance within its role: a storage node's id, a mount point, a listen address.
    pub id: String,
    /// Where its service listens, if it has one ("10.0.0.5:7101"); empty for a mount.
    pub addr: String,
    /// Where its exporter listens ("10.0.0.5:9101"): `http://<metrics>/metrics`.
    pub metrics: String,
    /// The host it runs on.
    pub host: String,
    pub pid: u32,
    /// When it started (wall clock, ms since the Unix epoch).
    pub started_ms: u64,
    /// Its Trove version.
    pub version: String,
    /// How long ago the answering server last heard from it (set by the server).
    pub seen_ms_ago: u64,
}
