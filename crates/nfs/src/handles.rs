//! NFS file handles: what a handle holds, and why a client cannot make one up.
//!
//! A handle names an inode to the gateway on every call (nfsserve turns it into an inode number
//! with `fh_to_id`, before the file system sees the call), so a handle that a client could
//! forge would reach any inode of the cluster from any export: another tenant's files
//! included, whatever the export's directory. Handles are therefore bound to their export by a
//! MAC under a key of the cluster's, as knfsd binds its handles to an export.
//!
//! Format version 2, 48 bytes (NFSv3 allows 64):
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | `TROVNFS2` |
//! | 8..16 | the inode number, little-endian |
//! | 16..48 | HMAC-SHA256 under the handle key of the export's root inode and the inode number (both little-endian), whole, so ring's `hmac::verify` checks it in constant time |
//!
//! The handle key is 32 random bytes kept as the xattr [`XATTR_HANDLE_KEY`] of the cluster's
//! root directory, made by the first gateway that needs it: the same on every gateway and after
//! every restart, so handles stay valid across both. The `trove.` namespace is not served by the
//! mount (which answers only `user.`, `trusted.` and `security.` names) or by NFS, so only
//! holders of a cluster credential can read the key; NFS client hosts never can.
//!
//! Invariants: a handle whose MAC does not verify for this export is refused as BADHANDLE, so
//! the only handles an export accepts are those it handed out (the root's at MOUNT, the rest
//! from LOOKUP, READDIRPLUS and CREATE below that root, and `..` of the root is the root).
//!
//! Version history: 1 (`TROVNFS1` and the inode number, 16 bytes, no MAC: forgeable) is
//! answered STALE, so a client that held one before an upgrade remounts.

use client::{Client, ErrorCode, ROOT_INO};
use nfsserve::nfs::{fileid3, nfs_fh3, nfsstat3};
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The xattr of the cluster's root directory that holds the handle key.
pub const XATTR_HANDLE_KEY: &str = "trove.nfs.handle_key";
/// Bytes of the handle key.
const KEY_BYTES: usize = 32;
/// The tag of format version 2.
const TAG: [u8; 8] = *b"TROVNFS2";
/// The tag of format version 1.
const TAG_V1: [u8; 8] = *b"TROVNFS1";
/// Bytes of the MAC a handle carries (HMAC-SHA256's whole tag).
const MAC_BYTES: usize = 32;
/// Bytes of a handle.
const HANDLE_BYTES: usize = 8 + 8 + MAC_BYTES;

/// Makes and checks the handles of one export.
pub(crate) struct Handles {
    key: hmac::Key,
    root: fileid3,
}

impl Handles {
    /// The handles of the export whose root directory is inode `root`, under `key`.
    pub(crate) fn new(key: &[u8; KEY_BYTES], root: fileid3) -> Handles {
        Handles { key: hmac::Key::new(hmac::HMAC_SHA256, key), root }
    }

    /// What the MAC of inode `id`'s handle covers.
    fn signed(&self, id: fileid3) -> [u8; 16] {
        let mut input = [0u8; 16];
        input[..8].copy_from_slice(&self.root.to_le_bytes());
        input[8..].copy_from_slice(&id.to_le_bytes());
        input
    }

    /// The handle of inode `id`.
    pub(crate) fn handle(&self, id: fileid3) -> nfs_fh3 {
        let mut data = Vec::with_capacity(HANDLE_BYTES);
        data.extend_from_slice(&TAG);
        data.extend_from_slice(&id.to_le_bytes());
        data.extend_from_slice(hmac::sign(&self.key, &self.signed(id)).as_ref());
        nfs_fh3 { data }
    }

    /// The inode a handle of this export names.
    pub(crate) fn inode(&self, fh: &nfs_fh3) -> Result<fileid3, nfsstat3> {
        let data = &fh.data;
        if data.len() == 16 && data[..8] == TAG_V1 {
            return Err(nfsstat3::NFS3ERR_STALE);
        }
        if data.len() != HANDLE_BYTES || data[..8] != TAG {
            return Err(nfsstat3::NFS3ERR_BADHANDLE);
        }
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&data[8..16]);
        let id = u64::from_le_bytes(ino);
        hmac::verify(&self.key, &self.signed(id), &data[16..]).map_err(|_| nfsstat3::NFS3ERR_BADHANDLE)?;
        Ok(id)
    }
}

/// The cluster's handle key: read from the root directory, or made and kept there by the first
/// gateway (of several starting at once, the first to create it wins and the others read it).
pub(crate) async fn cluster_key(client: &Client) -> Result<[u8; KEY_BYTES], String> {
    let cannot =
        |e: &dyn std::fmt::Display| format!("cannot read or keep the NFS handle key ({XATTR_HANDLE_KEY} of /): {e}");
    for _ in 0..2 {
        match client.getxattr(ROOT_INO, XATTR_HANDLE_KEY).await {
            Ok(v) => {
                return v
                    .as_slice()
                    .try_into()
                    .map_err(|_| format!("{XATTR_HANDLE_KEY} of / holds {} bytes, not a key of {KEY_BYTES}", v.len()))
            }
            Err(e) if e.code == ErrorCode::NoAttr => {}
            Err(e) => return Err(cannot(&e)),
        }
        let mut key = [0u8; KEY_BYTES];
        SystemRandom::new().fill(&mut key).map_err(|_| "the system's random source failed".to_string())?;
        match client.setxattr(ROOT_INO, XATTR_HANDLE_KEY, &key, wire::XattrMode::Create).await {
            Ok(()) => return Ok(key),
            Err(e) if e.code == ErrorCode::Exists => continue, // another gateway's came first
            Err(e) => return Err(cannot(&e)),
        }
    }
    Err(cannot(&"it was made and removed while this gateway started"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_forged_ones_are_refused() {
        let export = Handles::new(&[7; KEY_BYTES], 10);
        for id in [10, 11, u64::MAX] {
            assert!(matches!(export.inode(&export.handle(id)), Ok(v) if v == id));
        }
        let mut forged = export.handle(11);
        forged.data[8..16].copy_from_slice(&12u64.to_le_bytes());
        assert!(matches!(export.inode(&forged), Err(nfsstat3::NFS3ERR_BADHANDLE)), "another inode, same MAC");
        let mut flipped = export.handle(11);
        flipped.data[HANDLE_BYTES - 1] ^= 1;
        assert!(matches!(export.inode(&flipped), Err(nfsstat3::NFS3ERR_BADHANDLE)));
        let short = nfs_fh3 { data: export.handle(11).data[..HANDLE_BYTES - 1].to_vec() };
        assert!(matches!(export.inode(&short), Err(nfsstat3::NFS3ERR_BADHANDLE)));
        let mut v1 = TAG_V1.to_vec();
        v1.extend_from_slice(&11u64.to_le_bytes());
        assert!(matches!(export.inode(&nfs_fh3 { data: v1 }), Err(nfsstat3::NFS3ERR_STALE)), "format 1: remount");
    }

    #[test]
    fn a_handle_is_good_only_for_its_export_and_key() {
        let (a, b) = (Handles::new(&[7; KEY_BYTES], 10), Handles::new(&[7; KEY_BYTES], 20));
        assert!(matches!(b.inode(&a.handle(30)), Err(nfsstat3::NFS3ERR_BADHANDLE)), "another export's handle");
        let other_cluster = Handles::new(&[8; KEY_BYTES], 10);
        assert!(matches!(other_cluster.inode(&a.handle(30)), Err(nfsstat3::NFS3ERR_BADHANDLE)));
        let restarted = Handles::new(&[7; KEY_BYTES], 10);
        assert!(matches!(restarted.inode(&a.handle(30)), Ok(v) if v == 30), "the same key and export after a restart");
    }
}
