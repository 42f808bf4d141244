//! POSIX-flavoured client calls used by the FUSE mount (uid/gid-aware creation, mknod, rename modes).
//!
//! The plain calls in the crate root create everything as root, which suits the CLI and the
//! gateways; a POSIX front end must stamp new inodes with the caller's credentials and needs the
//! rename variants of renameat2(2). They live here so the general API stays small.

use crate::{Client, FileHandle, Result};
use wire::{Attr, FileKind, Ino, LockRange, MetaOp, MetaReply, RenameMode, WireError};

impl Client {
    /// Creates a regular file owned by `uid`:`gid`. With `exclusive == false` an existing file of
    /// that name is returned instead (O_CREAT without O_EXCL).
    pub async fn create_as(
        &self,
        parent: Ino,
        name: &str,
        mode: u32,
        uid: u32,
        gid: u32,
        exclusive: bool,
    ) -> Result<Attr> {
        self.meta_attr(MetaOp::Create { parent, name: name.to_string(), mode, uid, gid, exclusive }).await
    }

    /// Creates a directory owned by `uid`:`gid`.
    pub async fn mkdir_as(&self, parent: Ino, name: &str, mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.meta_attr(MetaOp::Mkdir { parent, name: name.to_string(), mode, uid, gid }).await
    }

    #[allow(clippy::too_many_arguments)]
    /// Creates a special file (FIFO, socket, device node) owned by `uid`:`gid`.
    pub async fn mknod_as(
        &self,
        parent: Ino,
        name: &str,
        kind: FileKind,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        self.meta_attr(MetaOp::Mknod { parent, name: name.to_string(), kind, mode, rdev, uid, gid }).await
    }

    /// Creates a symbolic link owned by `uid`:`gid`.
    pub async fn symlink_as(&self, parent: Ino, name: &str, target: &str, uid: u32, gid: u32) -> Result<Attr> {
        self.meta_attr(MetaOp::Symlink { parent, name: name.to_string(), target: target.to_string(), uid, gid }).await
    }

    /// Renames with an explicit treatment of an existing destination (renameat2's
    /// RENAME_NOREPLACE and RENAME_EXCHANGE).
    pub async fn rename_mode(
        &self,
        parent: Ino,
        name: &str,
        new_parent: Ino,
        new_name: &str,
        mode: RenameMode,
    ) -> Result<()> {
        self.meta_ok(MetaOp::Rename {
            parent,
            name: name.to_string(),
            new_parent,
            new_name: new_name.to_string(),
            mode,
        })
        .await
    }

    /// Opens a file whose fresh attributes the caller already holds (from a create, lookup or
    /// getattr it just made), saving a metadata round trip per open.
    pub fn open_with_attr(&self, attr: Attr) -> Result<FileHandle> {
        FileHandle::with_attr(self.clone(), attr)
    }

    /// Takes, changes or releases a byte-range lock for lock owner `owner` of client session
    /// `session`, renewing the session's lease for `lease_ms`. Never waits: returns `None` when
    /// granted, or a conflicting lock of another owner.
    pub async fn lock(
        &self,
        ino: Ino,
        session: u64,
        owner: u64,
        range: LockRange,
        lease_ms: u64,
    ) -> Result<Option<LockRange>> {
        lock_answer(self.meta(MetaOp::Lock { ino, session, owner, range, lease_ms }).await?)
    }

    /// Which lock of another owner would conflict with `range` (F_GETLK); `None` if none.
    pub async fn test_lock(&self, ino: Ino, session: u64, owner: u64, range: LockRange) -> Result<Option<LockRange>> {
        lock_answer(self.meta(MetaOp::TestLock { ino, session, owner, range }).await?)
    }

    /// Extends the lease on `session`'s locks by `lease_ms`; 0 releases them all at once.
    pub async fn renew_lease(&self, session: u64, lease_ms: u64) -> Result<()> {
        self.meta_ok(MetaOp::RenewLease { session, lease_ms }).await
    }
}

fn lock_answer(reply: MetaReply) -> Result<Option<LockRange>> {
    match reply {
        MetaReply::Lock { granted: true, .. } => Ok(None),
        MetaReply::Lock { granted: false, conflict: Some(c) } => Ok(Some(c)),
        other => {
            Err(WireError::new(wire::ErrorCode::Internal, format!("unexpected reply to a lock request: {other:?}")))
        }
    }
}
