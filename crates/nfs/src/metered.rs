//! What the NFS gateway records into its process's metrics (protocol `nfs`): every NFSv3 call
//! the file system answers, by procedure, with errors and latency; the bytes read and written;
//! and the busiest files (`/top`). The file system is wrapped, so `fs.rs` stays as it is; the
//! guard counts the bytes of every connection (`trove_net_bytes_total`).

use async_trait::async_trait;
use metrics::ops::OpTable;
use nfsserve::nfs::{cookieverf3, fattr3, fileid3, filename3, fsinfo3, nfs_fh3, nfspath3, nfsstat3, sattr3};
use nfsserve::vfs::{NFSFileSystem, ReadDirResult, ReadDirSimpleResult, VFSCapabilities};
use std::sync::OnceLock;

/// The procedures, in slot order.
pub const NAMES: [&str; 16] = [
    "LOOKUP",
    "GETATTR",
    "SETATTR",
    "READ",
    "WRITE",
    "CREATE",
    "CREATE_EXCLUSIVE",
    "MKDIR",
    "REMOVE",
    "RENAME",
    "READDIR",
    "READDIR_SIMPLE",
    "SYMLINK",
    "READLINK",
    "FSINFO",
    "PATH_TO_ID",
];

/// The `nfs` protocol's operations.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| metrics::ops::table("nfs", &NAMES))
}

/// A file system that records every call it answers.
pub struct Metered<T>(pub T);

async fn timed<R>(op: usize, f: impl std::future::Future<Output = Result<R, nfsstat3>>) -> Result<R, nfsstat3> {
    let t = table();
    let started = t.start();
    let r = f.await;
    t.done(op, started, r.is_ok());
    r
}

#[async_trait]
impl<T: NFSFileSystem + Send + Sync> NFSFileSystem for Metered<T> {
    fn capabilities(&self) -> VFSCapabilities {
        self.0.capabilities()
    }

    fn root_dir(&self) -> fileid3 {
        self.0.root_dir()
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        let r = timed(0, self.0.lookup(dirid, filename)).await;
        if let Ok(ino) = &r {
            if metrics::enabled() {
                metrics::top::name_file(*ino, &String::from_utf8_lossy(filename));
            }
        }
        r
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        timed(1, self.0.getattr(id)).await
    }

    async fn setattr(&self, id: fileid3, setattr: sattr3) -> Result<fattr3, nfsstat3> {
        timed(2, self.0.setattr(id, setattr)).await
    }

    async fn read(&self, id: fileid3, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        let r = timed(3, self.0.read(id, offset, count)).await;
        if let Ok((data, _)) = &r {
            table().read_bytes(data.len() as u64);
            metrics::top::file(id, data.len() as u64, 0);
        }
        r
    }

    async fn write(&self, id: fileid3, offset: u64, data: &[u8]) -> Result<fattr3, nfsstat3> {
        let r = timed(4, self.0.write(id, offset, data)).await;
        if r.is_ok() {
            table().write_bytes(data.len() as u64);
            metrics::top::file(id, 0, data.len() as u64);
        }
        r
    }

    async fn create(&self, dirid: fileid3, filename: &filename3, attr: sattr3) -> Result<(fileid3, fattr3), nfsstat3> {
        timed(5, self.0.create(dirid, filename, attr)).await
    }

    async fn create_exclusive(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        timed(6, self.0.create_exclusive(dirid, filename)).await
    }

    async fn mkdir(&self, dirid: fileid3, dirname: &filename3) -> Result<(fileid3, fattr3), nfsstat3> {
        timed(7, self.0.mkdir(dirid, dirname)).await
    }

    async fn remove(&self, dirid: fileid3, filename: &filename3) -> Result<(), nfsstat3> {
        timed(8, self.0.remove(dirid, filename)).await
    }

    async fn rename(
        &self,
        from_dirid: fileid3,
        from_filename: &filename3,
        to_dirid: fileid3,
        to_filename: &filename3,
    ) -> Result<(), nfsstat3> {
        timed(9, self.0.rename(from_dirid, from_filename, to_dirid, to_filename)).await
    }

    async fn readdir(
        &self,
        dirid: fileid3,
        start_after: fileid3,
        max_entries: usize,
    ) -> Result<ReadDirResult, nfsstat3> {
        timed(10, self.0.readdir(dirid, start_after, max_entries)).await
    }

    async fn readdir_simple(&self, dirid: fileid3, count: usize) -> Result<ReadDirSimpleResult, nfsstat3> {
        timed(11, self.0.readdir_simple(dirid, count)).await
    }

    async fn symlink(
        &self,
        dirid: fileid3,
        linkname: &filename3,
        symlink: &nfspath3,
        attr: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        timed(12, self.0.symlink(dirid, linkname, symlink, attr)).await
    }

    async fn readlink(&self, id: fileid3) -> Result<nfspath3, nfsstat3> {
        timed(13, self.0.readlink(id)).await
    }

    async fn fsinfo(&self, root_fileid: fileid3) -> Result<fsinfo3, nfsstat3> {
        timed(14, self.0.fsinfo(root_fileid)).await
    }

    fn id_to_fh(&self, id: fileid3) -> nfs_fh3 {
        self.0.id_to_fh(id)
    }

    fn fh_to_id(&self, id: &nfs_fh3) -> Result<fileid3, nfsstat3> {
        self.0.fh_to_id(id)
    }

    async fn path_to_id(&self, path: &[u8]) -> Result<fileid3, nfsstat3> {
        timed(15, self.0.path_to_id(path)).await
    }

    fn serverid(&self) -> cookieverf3 {
        self.0.serverid()
    }
}
