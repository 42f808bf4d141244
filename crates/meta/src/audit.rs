//! The audit trail of administration: every operation that changes how the cluster is run
//! (node states, pools and their options, file pool policies, ingest rules, jobs, quotas,
//! snapshots and retention, trash restores and purges, tenants, users and S3 keys) is recorded in the event log as an
//! `admin` event when it is answered over the network: what was asked, from which address, and
//! whether it was done or refused, with the reason. `trove events`, the dashboard and the
//! events API show them with the rest.
//!
//! The caller is named by its address and, on a TLS connection, the role of its credential and
//! the name it was issued under (`trove cluster issue --name`), so that an operator who holds a
//! credential of their own is named in what they did.
//!
//! Deliberately absent: reads and file operations (too many to log as events).

use crate::{events::NewEvent, namespace::path_of, MetaService};
use kv::KvEngine;
use wire::events::kind;
use wire::identity::IdentityChange;
use wire::{JobAction, MetaOp, MetaResult, Severity};

/// What an administrative operation asks, in words; `None` for every other operation.
pub async fn describe(engine: &dyn KvEngine, op: &MetaOp) -> Option<String> {
    let path = |ino| path_of(engine, ino);
    Some(match op {
        MetaOp::SetNodeState { node, state, force } => {
            format!("set storage node {node} {state:?}{}", if *force { " (forced)" } else { "" })
        }
        MetaOp::CreatePool { name, kind, default_ec } => format!("create pool {name} ({kind:?}, {default_ec})"),
        MetaOp::SetPoolOptions { name, default_ec } => match default_ec {
            Some(ec) => format!("set pool {name}'s default scheme to {ec}"),
            None => format!("set options of pool {name}"),
        },
        MetaOp::SetPool { ino, pool } => format!("place {} in pool {pool}", path(*ino).await),
        MetaOp::AddPolicy { policy, .. } => format!("add file pool policy {}", policy.name),
        MetaOp::RemovePolicy { name } => format!("remove file pool policy {name}"),
        MetaOp::AddIngestRule { rule } => format!("add ingest rule {} on {}", rule.name, rule.from),
        MetaOp::RemoveIngestRule { name } => format!("remove ingest rule {name}"),
        MetaOp::ControlJob { name, action } => match action {
            JobAction::Start { path: Some(p) } => format!("start job {name} on {p}"),
            JobAction::Start { path: None } => format!("start job {name}"),
            other => format!("{} job {name}", format!("{other:?}").to_lowercase()),
        },
        MetaOp::SetQuota { ino, limits: Some(l) } => format!(
            "set the quota of {} (bytes hard {} soft {}, inodes hard {})",
            path(*ino).await,
            l.bytes_hard,
            l.bytes_soft,
            l.inodes_hard
        ),
        MetaOp::SetQuota { ino, limits: None } => format!("remove the quota of {}", path(*ino).await),
        MetaOp::RestoreTrash { id, .. } => format!("restore {id} from the trash"),
        MetaOp::PurgeTrash { id, .. } if id.is_empty() => "purge the trash".to_string(),
        MetaOp::PurgeTrash { id, .. } => format!("purge {id} from the trash"),
        MetaOp::SnapshotCreate { root, name, .. } => format!("create snapshot {name} of {}", path(*root).await),
        MetaOp::SnapshotDelete { root, name } => format!("delete snapshot {name} of {}", path(*root).await),
        MetaOp::SnapshotRestore { root, name, path: p } => {
            format!("restore {p} from snapshot {name} of {}", path(*root).await)
        }
        MetaOp::SnapshotRetain { root, name, until_ms } => {
            format!("retain snapshot {name} of {} until {until_ms} ms", path(*root).await)
        }
        MetaOp::RetainTree { ino, until_ms } => format!("retain {} until {until_ms} ms", path(*ino).await),
        MetaOp::ChangeIdentity { change } => describe_identity(change),
        _ => return None,
    })
}

/// An identity change in words (never a secret).
fn describe_identity(change: &IdentityChange) -> String {
    match change {
        IdentityChange::AddTenant { name, gid, path, .. } => format!("add tenant {name} (group {gid}, {path})"),
        IdentityChange::RemoveTenant { name } => format!("remove tenant {name}"),
        IdentityChange::AddUser { name, uid, gid, tenant, .. } => match tenant {
            Some(t) => format!("add user {name} (uid {uid}, gid {gid}) to tenant {t}"),
            None => format!("add user {name} (uid {uid}, gid {gid})"),
        },
        IdentityChange::RemoveUser { name } => format!("remove user {name}"),
        IdentityChange::AddS3Key { user, access_key, .. } => format!("add S3 key {access_key} for user {user}"),
        IdentityChange::RemoveS3Key { access_key } => format!("remove S3 key {access_key}"),
    }
}

/// Records the outcome of the administrative operation `what` asked by `peer`.
pub async fn record(service: &MetaService, what: String, node: Option<wire::NodeId>, result: &MetaResult) {
    let peer = match (wire::rpc::current_peer(), wire::rpc::current_role()) {
        (Some(p), Some(role)) => match wire::rpc::current_credential_name() {
            Some(name) => format!("{p} with the {} credential \"{name}\"", role.name()),
            None => format!("{p} with a {} credential", role.name()),
        },
        (Some(p), None) => format!("{p} (plaintext)"),
        (None, _) => "this process".to_string(),
    };
    let (severity, message) = match result {
        Ok(_) => (Severity::Info, format!("{what}, asked from {peer}: done")),
        Err(e) => (Severity::Warning, format!("{what}, asked from {peer}: refused: {e}")),
    };
    let event = NewEvent { severity, kind: kind::ADMIN, node, subject: "admin".to_string(), message };
    if let Err(e) = service.record_events(vec![event]).await {
        tracing::warn!("cannot record an admin event ({what}): {e}");
    }
}
