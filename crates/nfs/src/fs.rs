//! The NFSv3 file system: nfsserve's `NFSFileSystem` over the client library, with a table of
//! open file handles (for read-ahead and write ordering), directory cookies and the error
//! mapping. The consistency rules are in the crate documentation.

use async_trait::async_trait;
use client::{Attr, Client, ErrorCode, FileHandle, FileKind, Ino, SetAttr, WireError};
use nfsserve::nfs::{
    fattr3, fileid3, filename3, fsinfo3, ftype3, nfs_fh3, nfspath3, nfsstat3, nfstime3, sattr3, set_atime, set_gid3,
    set_mode3, set_mtime, set_size3, set_uid3, specdata3,
};
use nfsserve::vfs::{DirEntry, NFSFileSystem, ReadDirResult, VFSCapabilities};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::Timestamp;

/// How long a cached open file is trusted before its `data_version` is checked again, in
/// milliseconds: the most a read can lag behind a change made elsewhere.
pub const REVALIDATE_MS: u64 = 1000;
/// Most files kept open for reading and writing; idle clean ones are closed beyond this.
const OPEN_FILES_MAX: usize = 256;
/// Most directory cookies (entry inode → name) remembered for paged READDIR.
const COOKIES_MAX: usize = 1 << 16;
/// Most directory parent links remembered for `..` lookups.
const PARENTS_MAX: usize = 1 << 16;
/// Largest READ or WRITE transfer advertised, in bytes.
pub(crate) const TRANSFER_BYTES_MAX: u32 = 1 << 20;
/// Directory entries fetched per READDIR at most.
const READDIR_ENTRIES_MAX: usize = 1024;
/// How often the write-back flusher looks for idle files, in milliseconds.
const FLUSH_TICK_MS: u64 = 100;

/// An exported directory.
#[derive(Clone, Debug)]
pub struct Export {
    pub path: String,
    pub read_only: bool,
}

struct FileState {
    handle: Option<FileHandle>,
    validated: Instant,
    /// Buffered writes not yet flushed (write-back mode only).
    dirty: bool,
    last_write: Instant,
}

struct OpenFile {
    state: tokio::sync::Mutex<FileState>,
    last_used: parking_lot::Mutex<Instant>,
}

type Files = Arc<parking_lot::Mutex<HashMap<Ino, Arc<OpenFile>>>>;

/// The file system one export serves.
pub struct TroveNfs {
    client: Client,
    root: Ino,
    /// Makes and checks this export's file handles (`handles.rs`).
    handles: crate::handles::Handles,
    read_only: bool,
    write_back: Option<Duration>,
    files: Files,
    cookies: parking_lot::Mutex<HashMap<(Ino, Ino), String>>,
    parents: parking_lot::Mutex<HashMap<Ino, Ino>>,
}

/// The one mapping from Trove error codes to NFS status codes.
pub fn nfs_error(e: &WireError) -> nfsstat3 {
    match e.code {
        ErrorCode::NotFound => nfsstat3::NFS3ERR_NOENT,
        ErrorCode::Exists => nfsstat3::NFS3ERR_EXIST,
        ErrorCode::NotDir => nfsstat3::NFS3ERR_NOTDIR,
        ErrorCode::IsDir => nfsstat3::NFS3ERR_ISDIR,
        ErrorCode::NotEmpty => nfsstat3::NFS3ERR_NOTEMPTY,
        ErrorCode::Invalid => nfsstat3::NFS3ERR_INVAL,
        ErrorCode::NoSpace => nfsstat3::NFS3ERR_NOSPC,
        ErrorCode::PermissionDenied => nfsstat3::NFS3ERR_ACCES,
        ErrorCode::NameTooLong => nfsstat3::NFS3ERR_NAMETOOLONG,
        ErrorCode::TooLarge => nfsstat3::NFS3ERR_FBIG,
        ErrorCode::NotSupported => nfsstat3::NFS3ERR_NOTSUPP,
        ErrorCode::QuotaExceeded => nfsstat3::NFS3ERR_DQUOT,
        ErrorCode::CrossDevice => nfsstat3::NFS3ERR_XDEV,
        ErrorCode::ReadOnly => nfsstat3::NFS3ERR_ROFS,
        // The client retries JUKEBOX later: right for a cluster that is briefly unreachable.
        ErrorCode::Unavailable | ErrorCode::Conflict => nfsstat3::NFS3ERR_JUKEBOX,
        _ => {
            tracing::warn!("NFS request failed: {:?}: {}", e.code, e.message);
            nfsstat3::NFS3ERR_IO
        }
    }
}

/// Like [`nfs_error`], for calls naming an inode directly: a missing one is a stale handle.
fn by_ino(e: WireError) -> nfsstat3 {
    if e.code == ErrorCode::NotFound {
        nfsstat3::NFS3ERR_STALE
    } else {
        nfs_error(&e)
    }
}

fn by_name(e: WireError) -> nfsstat3 {
    nfs_error(&e)
}

fn name_str(name: &filename3) -> Result<&str, nfsstat3> {
    std::str::from_utf8(&name.0).map_err(|_| nfsstat3::NFS3ERR_INVAL)
}

fn nfs_time(t: Timestamp) -> nfstime3 {
    nfstime3 { seconds: t.secs.clamp(0, i64::from(u32::MAX)) as u32, nseconds: t.nanos }
}

fn wire_time(t: nfstime3) -> Timestamp {
    Timestamp { secs: i64::from(t.seconds), nanos: t.nseconds.min(999_999_999) }
}

/// The SETATTR changes `s` asks for.
fn set_attr(s: &sattr3) -> SetAttr {
    let now = Timestamp::now();
    SetAttr {
        mode: match s.mode {
            set_mode3::mode(m) => Some(m & 0o7777),
            set_mode3::Void => None,
        },
        uid: match s.uid {
            set_uid3::uid(u) => Some(u),
            set_uid3::Void => None,
        },
        gid: match s.gid {
            set_gid3::gid(g) => Some(g),
            set_gid3::Void => None,
        },
        size: match s.size {
            set_size3::size(n) => Some(n),
            set_size3::Void => None,
        },
        atime: match s.atime {
            set_atime::DONT_CHANGE => None,
            set_atime::SET_TO_SERVER_TIME => Some(now),
            set_atime::SET_TO_CLIENT_TIME(t) => Some(wire_time(t)),
        },
        mtime: match s.mtime {
            set_mtime::DONT_CHANGE => None,
            set_mtime::SET_TO_SERVER_TIME => Some(now),
            set_mtime::SET_TO_CLIENT_TIME(t) => Some(wire_time(t)),
        },
        ctime: None,
    }
}

fn is_empty(s: &SetAttr) -> bool {
    s == &SetAttr::default()
}

impl TroveNfs {
    /// The file system of `export`; `write_back_ms` > 0 buffers writes (see the crate doc).
    pub async fn new(client: Client, export: Export, write_back_ms: u64) -> Result<TroveNfs, String> {
        let root = client.resolve(&export.path).await.map_err(|e| format!("export {}: {e}", export.path))?;
        if root.kind != FileKind::Dir {
            return Err(format!("export {} is not a directory", export.path));
        }
        let key = crate::handles::cluster_key(&client).await?;
        let files: Files = Arc::default();
        let write_back = (write_back_ms > 0).then(|| Duration::from_millis(write_back_ms));
        if let Some(idle) = write_back {
            tokio::spawn(flusher(files.clone(), idle));
        }
        Ok(TroveNfs {
            client,
            root: root.ino,
            handles: crate::handles::Handles::new(&key, root.ino),
            read_only: export.read_only,
            write_back,
            files,
            cookies: parking_lot::Mutex::default(),
            parents: parking_lot::Mutex::default(),
        })
    }

    fn fattr(&self, a: &Attr) -> fattr3 {
        fattr3 {
            ftype: match a.kind {
                FileKind::File => ftype3::NF3REG,
                FileKind::Dir => ftype3::NF3DIR,
                FileKind::Symlink => ftype3::NF3LNK,
                FileKind::Fifo => ftype3::NF3FIFO,
                FileKind::Socket => ftype3::NF3SOCK,
                FileKind::CharDevice => ftype3::NF3CHR,
                FileKind::BlockDevice => ftype3::NF3BLK,
            },
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            used: a.blocks() * 512,
            rdev: specdata3 { specdata1: a.rdev >> 8, specdata2: a.rdev & 0xff },
            fsid: 0x7472_6f76,
            fileid: a.ino,
            atime: nfs_time(a.atime),
            mtime: nfs_time(a.mtime),
            ctime: nfs_time(a.ctime),
        }
    }

    fn writable(&self) -> Result<(), nfsstat3> {
        if self.read_only {
            Err(nfsstat3::NFS3ERR_ROFS)
        } else {
            Ok(())
        }
    }

    /// The open-file entry of `ino`, created if needed; closes idle clean files beyond the
    /// table's limit.
    fn file(&self, ino: Ino) -> Arc<OpenFile> {
        let mut files = self.files.lock();
        let now = Instant::now();
        if let Some(f) = files.get(&ino) {
            *f.last_used.lock() = now;
            return f.clone();
        }
        if files.len() >= OPEN_FILES_MAX {
            let mut idle: Vec<(Instant, Ino)> = files
                .iter()
                .filter(|(_, f)| Arc::strong_count(f) == 1 && f.state.try_lock().is_ok_and(|s| !s.dirty))
                .map(|(i, f)| (*f.last_used.lock(), *i))
                .collect();
            idle.sort();
            for (_, i) in idle.iter().take(files.len() + 1 - OPEN_FILES_MAX) {
                files.remove(i);
            }
        }
        let f = Arc::new(OpenFile {
            state: tokio::sync::Mutex::new(FileState { handle: None, validated: now, dirty: false, last_write: now }),
            last_used: parking_lot::Mutex::new(now),
        });
        files.insert(ino, f.clone());
        f
    }

    /// Makes sure `st` holds a handle whose view of the file is at most [`REVALIDATE_MS`] old
    /// (a handle with buffered writes is this gateway's newest view and is kept).
    async fn ready(&self, ino: Ino, st: &mut FileState) -> Result<(), nfsstat3> {
        let stale = st.validated.elapsed() > Duration::from_millis(REVALIDATE_MS);
        if st.handle.is_some() && (st.dirty || !stale) {
            return Ok(());
        }
        let attr = self.client.getattr(ino).await.map_err(by_ino)?;
        match attr.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(nfsstat3::NFS3ERR_ISDIR),
            _ => return Err(nfsstat3::NFS3ERR_INVAL),
        }
        let same =
            st.handle.as_ref().is_some_and(|h| h.attr().data_version == attr.data_version && h.size() == attr.size);
        if !same {
            st.handle = Some(self.client.open_with_attr(attr).map_err(by_ino)?);
        }
        st.validated = Instant::now();
        Ok(())
    }

    /// Flushes buffered writes of `ino`, if any, and forgets its handle (before a change of
    /// the file made by other means: truncation, removal).
    async fn settle(&self, ino: Ino, forget: bool) -> Result<(), nfsstat3> {
        let Some(f) = self.files.lock().get(&ino).cloned() else { return Ok(()) };
        let mut st = f.state.lock().await;
        if st.dirty {
            if let Some(h) = st.handle.as_mut() {
                h.flush().await.map_err(by_ino)?;
            }
            st.dirty = false;
        }
        if forget {
            st.handle = None;
        }
        Ok(())
    }

    fn remember_parent(&self, child: Ino, parent: Ino) {
        let mut p = self.parents.lock();
        if p.len() >= PARENTS_MAX {
            p.clear();
        }
        p.insert(child, parent);
    }

    /// The name after which a READDIR continues, from its cookie (the last entry's inode).
    async fn cookie_name(&self, dir: Ino, cookie: u64) -> Result<String, nfsstat3> {
        if cookie == 0 {
            return Ok(String::new());
        }
        if let Some(n) = self.cookies.lock().get(&(dir, cookie)) {
            return Ok(n.clone());
        }
        // Forgotten (table reset or another gateway): find the entry by scanning.
        let entries = self.client.readdir(dir).await.map_err(by_ino)?;
        entries.into_iter().find(|e| e.attr.ino == cookie).map(|e| e.name).ok_or(nfsstat3::NFS3ERR_BAD_COOKIE)
    }
}

/// Flushes files whose buffered writes have been idle for `idle` (write-back mode).
async fn flusher(files: Files, idle: Duration) {
    let mut tick = tokio::time::interval(Duration::from_millis(FLUSH_TICK_MS));
    loop {
        tick.tick().await;
        let candidates: Vec<(Ino, Arc<OpenFile>)> = files.lock().iter().map(|(i, f)| (*i, f.clone())).collect();
        for (ino, f) in candidates {
            let Ok(mut st) = f.state.try_lock() else { continue };
            if st.dirty && st.last_write.elapsed() >= idle {
                if let Some(h) = st.handle.as_mut() {
                    if let Err(e) = h.flush().await {
                        tracing::error!("flushing buffered NFS writes of inode {ino} failed: {e}");
                        continue;
                    }
                }
                st.dirty = false;
            }
        }
    }
}

#[async_trait]
impl NFSFileSystem for TroveNfs {
    fn capabilities(&self) -> VFSCapabilities {
        if self.read_only {
            VFSCapabilities::ReadOnly
        } else {
            VFSCapabilities::ReadWrite
        }
    }

    fn root_dir(&self) -> fileid3 {
        self.root
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        let name = std::str::from_utf8(&filename.0).map_err(|_| nfsstat3::NFS3ERR_NOENT)?;
        match name {
            "." => return Ok(dirid),
            ".." => {
                if dirid == self.root {
                    return Ok(self.root);
                }
                return self.parents.lock().get(&dirid).copied().ok_or(nfsstat3::NFS3ERR_NOENT);
            }
            _ => {}
        }
        let attr = self.client.lookup(dirid, name).await.map_err(by_name)?;
        if attr.kind == FileKind::Dir {
            self.remember_parent(attr.ino, dirid);
        }
        Ok(attr.ino)
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        let mut attr = self.client.getattr(id).await.map_err(by_ino)?;
        // Buffered writes of this gateway count (write-back mode).
        let open = self.files.lock().get(&id).cloned();
        if let Some(f) = open {
            if let Ok(st) = f.state.try_lock() {
                if let (true, Some(h)) = (st.dirty, st.handle.as_ref()) {
                    attr.size = h.size();
                }
            }
        }
        Ok(self.fattr(&attr))
    }

    async fn setattr(&self, id: fileid3, setattr: sattr3) -> Result<fattr3, nfsstat3> {
        self.writable()?;
        let set = set_attr(&setattr);
        self.settle(id, set.size.is_some()).await?;
        if is_empty(&set) {
            return self.getattr(id).await;
        }
        let attr = self.client.setattr(id, set).await.map_err(by_ino)?;
        Ok(self.fattr(&attr))
    }

    async fn read(&self, id: fileid3, offset: u64, count: u32) -> Result<(Vec<u8>, bool), nfsstat3> {
        let f = self.file(id);
        let mut st = f.state.lock().await;
        self.ready(id, &mut st).await?;
        let Some(h) = st.handle.as_mut() else { return Err(nfsstat3::NFS3ERR_IO) };
        let data = h.read_at(offset, count.min(TRANSFER_BYTES_MAX) as usize).await.map_err(by_ino)?;
        let eof = offset + data.len() as u64 >= h.size();
        Ok((data.to_vec(), eof))
    }

    async fn write(&self, id: fileid3, offset: u64, data: &[u8]) -> Result<fattr3, nfsstat3> {
        self.writable()?;
        let f = self.file(id);
        let mut st = f.state.lock().await;
        self.ready(id, &mut st).await?;
        let write_back = self.write_back.is_some();
        let Some(h) = st.handle.as_mut() else { return Err(nfsstat3::NFS3ERR_IO) };
        h.write_at(offset, data).await.map_err(by_ino)?;
        if !write_back {
            // FILE_SYNC: durable before the reply.
            h.flush().await.map_err(by_ino)?;
        }
        let mut attr = h.attr().clone();
        attr.size = h.size();
        if write_back {
            attr.mtime = Timestamp::now();
            st.dirty = true;
            st.last_write = Instant::now();
        }
        st.validated = Instant::now();
        Ok(self.fattr(&attr))
    }

    async fn create(&self, dirid: fileid3, filename: &filename3, attr: sattr3) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let name = name_str(filename)?;
        let mut set = set_attr(&attr);
        let mode = set.mode.take().unwrap_or(0o644);
        let created = self.client.create(dirid, name, mode, false).await.map_err(by_name)?;
        if created.kind != FileKind::File {
            return Err(nfsstat3::NFS3ERR_EXIST);
        }
        // A new empty file already is what "create with size 0" asks for.
        let only_empty = set == SetAttr { size: Some(0), ..Default::default() } && created.size == 0;
        let created = if is_empty(&set) || only_empty {
            created
        } else {
            self.settle(created.ino, set.size.is_some()).await?;
            self.client.setattr(created.ino, set).await.map_err(by_ino)?
        };
        Ok((created.ino, self.fattr(&created)))
    }

    async fn create_exclusive(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        self.writable()?;
        let name = name_str(filename)?;
        let created = self.client.create(dirid, name, 0o644, true).await.map_err(by_name)?;
        Ok(created.ino)
    }

    async fn mkdir(&self, dirid: fileid3, dirname: &filename3) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let name = name_str(dirname)?;
        let attr = self.client.mkdir(dirid, name, 0o755).await.map_err(by_name)?;
        self.remember_parent(attr.ino, dirid);
        Ok((attr.ino, self.fattr(&attr)))
    }

    async fn remove(&self, dirid: fileid3, filename: &filename3) -> Result<(), nfsstat3> {
        self.writable()?;
        let name = name_str(filename)?;
        let attr = self.client.lookup(dirid, name).await.map_err(by_name)?;
        if attr.kind == FileKind::Dir {
            self.client.rmdir(dirid, name).await.map_err(by_name)?;
            self.parents.lock().remove(&attr.ino);
        } else {
            // Buffered writes of a removed file have nowhere to go.
            if let Some(f) = self.files.lock().remove(&attr.ino) {
                if let Ok(mut st) = f.state.try_lock() {
                    st.dirty = false;
                    st.handle = None;
                }
            }
            self.client.unlink(dirid, name).await.map_err(by_name)?;
        }
        Ok(())
    }

    async fn rename(
        &self,
        from_dirid: fileid3,
        from_filename: &filename3,
        to_dirid: fileid3,
        to_filename: &filename3,
    ) -> Result<(), nfsstat3> {
        self.writable()?;
        let from = name_str(from_filename)?;
        let to = name_str(to_filename)?;
        self.client.rename(from_dirid, from, to_dirid, to).await.map_err(by_name)?;
        if let Ok(a) = self.client.lookup(to_dirid, to).await {
            if a.kind == FileKind::Dir {
                self.remember_parent(a.ino, to_dirid);
            }
        }
        Ok(())
    }

    async fn readdir(
        &self,
        dirid: fileid3,
        start_after: fileid3,
        max_entries: usize,
    ) -> Result<ReadDirResult, nfsstat3> {
        let after = self.cookie_name(dirid, start_after).await?;
        let limit = max_entries.clamp(1, READDIR_ENTRIES_MAX) as u32;
        let (entries, more) = self.client.readdir_page(dirid, &after, limit).await.map_err(by_ino)?;
        {
            let mut cookies = self.cookies.lock();
            if cookies.len() + entries.len() > COOKIES_MAX {
                cookies.clear();
            }
            for e in &entries {
                cookies.insert((dirid, e.attr.ino), e.name.clone());
            }
        }
        let out = entries
            .iter()
            .map(|e| {
                if e.attr.kind == FileKind::Dir {
                    self.remember_parent(e.attr.ino, dirid);
                }
                DirEntry { fileid: e.attr.ino, name: e.name.as_bytes().into(), attr: self.fattr(&e.attr) }
            })
            .collect();
        Ok(ReadDirResult { entries: out, end: !more })
    }

    async fn symlink(
        &self,
        dirid: fileid3,
        linkname: &filename3,
        symlink: &nfspath3,
        _attr: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        self.writable()?;
        let name = name_str(linkname)?;
        let target = std::str::from_utf8(&symlink.0).map_err(|_| nfsstat3::NFS3ERR_INVAL)?;
        let attr = self.client.symlink(dirid, name, target).await.map_err(by_name)?;
        Ok((attr.ino, self.fattr(&attr)))
    }

    async fn readlink(&self, id: fileid3) -> Result<nfspath3, nfsstat3> {
        let target = self.client.readlink(id).await.map_err(by_ino)?;
        Ok(target.into_bytes().into())
    }

    async fn fsinfo(&self, root_fileid: fileid3) -> Result<fsinfo3, nfsstat3> {
        let attr = self.getattr(root_fileid).await?;
        Ok(fsinfo3 {
            obj_attributes: nfsserve::nfs::post_op_attr::attributes(attr),
            rtmax: TRANSFER_BYTES_MAX,
            rtpref: TRANSFER_BYTES_MAX,
            rtmult: 4096,
            wtmax: TRANSFER_BYTES_MAX,
            wtpref: TRANSFER_BYTES_MAX,
            wtmult: 4096,
            dtpref: 64 << 10,
            maxfilesize: u64::MAX >> 1,
            time_delta: nfstime3 { seconds: 0, nseconds: 1 },
            properties: nfsserve::nfs::FSF_SYMLINK | nfsserve::nfs::FSF_HOMOGENEOUS | nfsserve::nfs::FSF_CANSETTIME,
        })
    }

    fn id_to_fh(&self, id: fileid3) -> nfs_fh3 {
        self.handles.handle(id)
    }

    fn fh_to_id(&self, fh: &nfs_fh3) -> Result<fileid3, nfsstat3> {
        self.handles.inode(fh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_nfs_status() {
        let e = |c| WireError::new(c, "x");
        assert!(matches!(nfs_error(&e(ErrorCode::NotFound)), nfsstat3::NFS3ERR_NOENT));
        assert!(matches!(by_ino(e(ErrorCode::NotFound)), nfsstat3::NFS3ERR_STALE));
        assert!(matches!(nfs_error(&e(ErrorCode::NotEmpty)), nfsstat3::NFS3ERR_NOTEMPTY));
        assert!(matches!(nfs_error(&e(ErrorCode::Unavailable)), nfsstat3::NFS3ERR_JUKEBOX));
        assert!(matches!(nfs_error(&e(ErrorCode::Corrupt)), nfsstat3::NFS3ERR_IO));
    }

    #[test]
    fn setattr_requests_translate() {
        let s = sattr3 {
            mode: set_mode3::mode(0o100640),
            size: set_size3::size(0),
            mtime: set_mtime::SET_TO_CLIENT_TIME(nfstime3 { seconds: 5, nseconds: 6 }),
            ..Default::default()
        };
        let set = set_attr(&s);
        assert_eq!((set.mode, set.size, set.uid), (Some(0o640), Some(0), None));
        assert_eq!(set.mtime, Some(Timestamp { secs: 5, nanos: 6 }));
    }
}
