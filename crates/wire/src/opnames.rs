//! Stable names of the service operations, for metrics labels and logs: an operation's name
//! is its variant's name, and its index the position in the list, so that a recorder can keep
//! one slot per operation without looking names up.

use crate::msg::{MetaOp, StorageOp};

impl MetaOp {
    /// Every operation's name, in declaration order.
    pub const NAMES: [&'static str; 81] = [
        "Lookup",
        "Resolve",
        "GetAttr",
        "SetAttr",
        "Create",
        "Mkdir",
        "Mknod",
        "Symlink",
        "ReadLink",
        "Link",
        "Unlink",
        "Rmdir",
        "Rename",
        "ReadDir",
        "SetXattr",
        "GetXattr",
        "ListXattr",
        "RemoveXattr",
        "StatFs",
        "SetLayout",
        "GetChunks",
        "AllocChunks",
        "AbandonChunks",
        "CommitChunks",
        "GetMap",
        "RegisterNode",
        "Heartbeat",
        "Status",
        "Lock",
        "TestLock",
        "RenewLease",
        "AppendFile",
        "ScanChunks",
        "MoveChunk",
        "ReplaceChunk",
        "SetNodeState",
        "NodeStates",
        "Announce",
        "Processes",
        "Events",
        "ListPools",
        "CreatePool",
        "SetPoolOptions",
        "SetPool",
        "ListPolicies",
        "AddPolicy",
        "RemovePolicy",
        "AllocChunksIn",
        "SetFilePool",
        "TouchAtimes",
        "ListJobs",
        "ControlJob",
        "ReportJob",
        "QueueChunks",
        "ScanQueue",
        "Dequeue",
        "SetQuota",
        "GetQuota",
        "ListQuotas",
        "ListTrash",
        "RestoreTrash",
        "PurgeTrash",
        "SnapshotCreate",
        "SnapshotList",
        "SnapshotDelete",
        "SnapshotDiff",
        "SnapshotRestore",
        "ScanHeldChunks",
        "HeldChunk",
        "CloneFile",
        "SnapshotRetain",
        "ListIngestRules",
        "AddIngestRule",
        "RemoveIngestRule",
        "RetainTree",
        "ReportAuthFailures",
        "ChangeIdentity",
        "ListIdentities",
        "LookupS3Key",
        "ResolveAs",
        "LookupChunks",
    ];

    /// The operation's position in [`MetaOp::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            MetaOp::Lookup { .. } => 0,
            MetaOp::Resolve { .. } => 1,
            MetaOp::GetAttr { .. } => 2,
            MetaOp::SetAttr { .. } => 3,
            MetaOp::Create { .. } => 4,
            MetaOp::Mkdir { .. } => 5,
            MetaOp::Mknod { .. } => 6,
            MetaOp::Symlink { .. } => 7,
            MetaOp::ReadLink { .. } => 8,
            MetaOp::Link { .. } => 9,
            MetaOp::Unlink { .. } => 10,
            MetaOp::Rmdir { .. } => 11,
            MetaOp::Rename { .. } => 12,
            MetaOp::ReadDir { .. } => 13,
            MetaOp::SetXattr { .. } => 14,
            MetaOp::GetXattr { .. } => 15,
            MetaOp::ListXattr { .. } => 16,
            MetaOp::RemoveXattr { .. } => 17,
            MetaOp::StatFs => 18,
            MetaOp::SetLayout { .. } => 19,
            MetaOp::GetChunks { .. } => 20,
            MetaOp::AllocChunks { .. } => 21,
            MetaOp::AbandonChunks { .. } => 22,
            MetaOp::CommitChunks { .. } => 23,
            MetaOp::GetMap { .. } => 24,
            MetaOp::RegisterNode { .. } => 25,
            MetaOp::Heartbeat { .. } => 26,
            MetaOp::Status { .. } => 27,
            MetaOp::Lock { .. } => 28,
            MetaOp::TestLock { .. } => 29,
            MetaOp::RenewLease { .. } => 30,
            MetaOp::AppendFile { .. } => 31,
            MetaOp::ScanChunks { .. } => 32,
            MetaOp::MoveChunk { .. } => 33,
            MetaOp::ReplaceChunk { .. } => 34,
            MetaOp::SetNodeState { .. } => 35,
            MetaOp::NodeStates { .. } => 36,
            MetaOp::Announce { .. } => 37,
            MetaOp::Processes => 38,
            MetaOp::Events { .. } => 39,
            MetaOp::ListPools => 40,
            MetaOp::CreatePool { .. } => 41,
            MetaOp::SetPoolOptions { .. } => 42,
            MetaOp::SetPool { .. } => 43,
            MetaOp::ListPolicies => 44,
            MetaOp::AddPolicy { .. } => 45,
            MetaOp::RemovePolicy { .. } => 46,
            MetaOp::AllocChunksIn { .. } => 47,
            MetaOp::SetFilePool { .. } => 48,
            MetaOp::TouchAtimes { .. } => 49,
            MetaOp::ListJobs => 50,
            MetaOp::ControlJob { .. } => 51,
            MetaOp::ReportJob { .. } => 52,
            MetaOp::QueueChunks { .. } => 53,
            MetaOp::ScanQueue { .. } => 54,
            MetaOp::Dequeue { .. } => 55,
            MetaOp::SetQuota { .. } => 56,
            MetaOp::GetQuota { .. } => 57,
            MetaOp::ListQuotas => 58,
            MetaOp::ListTrash => 59,
            MetaOp::RestoreTrash { .. } => 60,
            MetaOp::PurgeTrash { .. } => 61,
            MetaOp::SnapshotCreate { .. } => 62,
            MetaOp::SnapshotList { .. } => 63,
            MetaOp::SnapshotDelete { .. } => 64,
            MetaOp::SnapshotDiff { .. } => 65,
            MetaOp::SnapshotRestore { .. } => 66,
            MetaOp::ScanHeldChunks { .. } => 67,
            MetaOp::HeldChunk { .. } => 68,
            MetaOp::CloneFile { .. } => 69,
            MetaOp::SnapshotRetain { .. } => 70,
            MetaOp::ListIngestRules => 71,
            MetaOp::AddIngestRule { .. } => 72,
            MetaOp::RemoveIngestRule { .. } => 73,
            MetaOp::RetainTree { .. } => 74,
            MetaOp::ReportAuthFailures { .. } => 75,
            MetaOp::ChangeIdentity { .. } => 76,
            MetaOp::ListIdentities => 77,
            MetaOp::LookupS3Key { .. } => 78,
            MetaOp::ResolveAs { .. } => 79,
            MetaOp::LookupChunks { .. } => 80,
        }
    }

    /// The operation's name (`Lookup`, `CommitChunks`, ...).
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

impl StorageOp {
    /// Every operation's name, in declaration order.
    pub const NAMES: [&'static str; 8] =
        ["PutShard", "GetShard", "DeleteShards", "ListShards", "Stat", "Stages", "ReadRange", "Scrub"];

    /// The operation's position in [`StorageOp::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            StorageOp::PutShard { .. } => 0,
            StorageOp::GetShard { .. } => 1,
            StorageOp::DeleteShards { .. } => 2,
            StorageOp::ListShards { .. } => 3,
            StorageOp::Stat => 4,
            StorageOp::Stages => 5,
            StorageOp::ReadRange { .. } => 6,
            StorageOp::Scrub { .. } => 7,
        }
    }

    /// The operation's name (`PutShard`, `GetShard`, ...).
    pub fn name(&self) -> &'static str {
        Self::NAMES[self.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name is what `Debug` prints before the fields, so it matches the variant.
    fn debug_name<T: std::fmt::Debug>(v: &T) -> String {
        let text = format!("{v:?}");
        let end = text.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(text.len());
        text[..end].to_string()
    }

    #[test]
    fn names_match_the_variants() {
        let key = crate::ShardKey { chunk: 1, index: 0 };
        let storage = [
            StorageOp::DeleteShards { keys: vec![] },
            StorageOp::Stat,
            StorageOp::Stages,
            StorageOp::GetShard { key, offset: 0, len: 0 },
            StorageOp::ReadRange { key, offset: 0, len: 0 },
            StorageOp::ListShards { after: None, limit: 1 },
        ];
        for op in &storage {
            assert_eq!(op.name(), debug_name(op));
        }
        let meta = [
            MetaOp::Lookup { parent: 1, name: "a".into() },
            MetaOp::StatFs,
            MetaOp::Processes,
            MetaOp::Heartbeat { node: 1, drives: vec![] },
            MetaOp::NodeStates { known: 0 },
            MetaOp::Events { after: 0, limit: 1, newest: false },
            MetaOp::GetMap { version: 1 },
            MetaOp::ListPools,
            MetaOp::ListPolicies,
            MetaOp::ListQuotas,
            MetaOp::ListTrash,
            MetaOp::SnapshotList { root: None },
            MetaOp::SnapshotRestore { root: 1, name: "s".into(), path: String::new() },
            MetaOp::ScanHeldChunks { after: None, limit: 1 },
            MetaOp::HeldChunk { ino: 1, index: 0, id: 1 },
            MetaOp::GetQuota { ino: 1, nearest: true },
            MetaOp::RemovePolicy { name: "p".into() },
            MetaOp::ListIngestRules,
            MetaOp::RemoveIngestRule { name: "r".into() },
            MetaOp::RetainTree { ino: 1, until_ms: 1 },
            MetaOp::SetPool { ino: 1, pool: "flash".into() },
            MetaOp::RenewLease { session: 1, lease_ms: 1 },
            MetaOp::ChangeIdentity { change: crate::identity::IdentityChange::RemoveUser { name: "u".into() } },
            MetaOp::ListIdentities,
            MetaOp::LookupS3Key { access_key: "K".into() },
            MetaOp::LookupChunks { parent: 1, name: "a".into(), count: 1 },
            MetaOp::ResolveAs {
                path: "/".into(),
                caller: crate::identity::Caller { uid: 1, gid: 1, groups: vec![] },
                want: 4,
            },
        ];
        for op in &meta {
            assert_eq!(op.name(), debug_name(op));
        }
        let mut names: Vec<&str> = MetaOp::NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), MetaOp::NAMES.len());
    }
}
