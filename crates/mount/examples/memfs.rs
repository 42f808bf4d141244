//! `memfs`: a FUSE file system that keeps names and attributes in memory and stores nothing.
//!
//! It measures the ceiling of any FUSE file system on a machine: every request is answered on
//! the thread that read it, with no network, no storage and no durability, under the same mount
//! configuration as `trove mount` (fuser threads, cloned device descriptors, default
//! permissions, parallel directory operations, 1 s entry and attribute timeouts). What the
//! kernel's FUSE round trips cost a create, stat or remove shows here; `bench/fuse-ceiling.sh`
//! runs `trove bench meta` on it beside the Trove mount and a local directory.
//!
//! File contents are not kept: writes extend a file's size and reads return zeros. Hard links,
//! symlinks, xattrs and locks are refused (ENOSYS / EPERM), which the metadata benchmark never
//! asks for.
//!
//! Usage (as root): `cargo run --release -p mount --example memfs -- MOUNTPOINT [THREADS]`;
//! unmount with `umount MOUNTPOINT`.

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

struct Node {
    attr: FileAttr,
    /// Entries of a directory, by name.
    entries: BTreeMap<OsString, u64>,
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next_ino: u64,
}

struct MemFs {
    tree: Mutex<Tree>,
}

fn new_attr(ino: u64, kind: FileType, perm: u16, uid: u32, gid: u32) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Tree {
    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        self.nodes.get(&ino).map(|n| n.attr).ok_or(Errno::ENOENT)
    }

    fn dir(&mut self, ino: u64) -> Result<&mut Node, Errno> {
        match self.nodes.get_mut(&ino) {
            Some(n) if n.attr.kind == FileType::Directory => Ok(n),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn add(&mut self, parent: u64, name: &OsStr, kind: FileType, perm: u16, req: &Request) -> Result<FileAttr, Errno> {
        let ino = self.next_ino;
        let dir = self.dir(parent)?;
        if dir.entries.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        dir.entries.insert(name.to_owned(), ino);
        let now = SystemTime::now();
        dir.attr.mtime = now;
        dir.attr.ctime = now;
        if kind == FileType::Directory {
            dir.attr.nlink += 1;
        }
        self.next_ino += 1;
        let attr = new_attr(ino, kind, perm, req.uid(), req.gid());
        self.nodes.insert(ino, Node { attr, entries: BTreeMap::new() });
        Ok(attr)
    }

    fn remove(&mut self, parent: u64, name: &OsStr, dir_wanted: bool) -> Result<(), Errno> {
        let ino = *self.dir(parent)?.entries.get(name).ok_or(Errno::ENOENT)?;
        let node = self.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        match (node.attr.kind == FileType::Directory, dir_wanted) {
            (true, false) => return Err(Errno::EISDIR),
            (false, true) => return Err(Errno::ENOTDIR),
            (true, true) if !node.entries.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        self.nodes.remove(&ino);
        let dir = self.dir(parent)?;
        dir.entries.remove(name);
        let now = SystemTime::now();
        dir.attr.mtime = now;
        dir.attr.ctime = now;
        if dir_wanted {
            dir.attr.nlink -= 1;
        }
        Ok(())
    }
}

impl MemFs {
    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        for cap in [InitFlags::FUSE_PARALLEL_DIROPS, InitFlags::FUSE_MAX_PAGES, InitFlags::FUSE_BIG_WRITES] {
            let _ = config.add_capabilities(cap);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut tree = self.tree();
        let found = tree.dir(parent.0).and_then(|d| d.entries.get(name).copied().ok_or(Errno::ENOENT));
        match found.and_then(|ino| tree.attr(ino)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree().attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut tree = self.tree();
        let Some(node) = tree.nodes.get_mut(&ino.0) else { return reply.error(Errno::ENOENT) };
        let a = &mut node.attr;
        let time = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        };
        if let Some(m) = mode {
            a.perm = (m & 0o7777) as u16;
        }
        a.uid = uid.unwrap_or(a.uid);
        a.gid = gid.unwrap_or(a.gid);
        if let Some(s) = size {
            a.size = s;
        }
        if let Some(t) = atime {
            a.atime = time(t);
        }
        if let Some(t) = mtime {
            a.mtime = time(t);
        }
        a.ctime = SystemTime::now();
        reply.attr(&TTL, a);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match self.tree().add(parent.0, name, FileType::Directory, (mode & !umask & 0o7777) as u16, req) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.tree().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.tree().add(parent.0, name, FileType::RegularFile, (mode & !umask & 0o7777) as u16, req) {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.tree().attr(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.tree().attr(ino.0) {
            Ok(a) => reply.data(&vec![0; a.size.saturating_sub(offset).min(u64::from(size)) as usize]),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut tree = self.tree();
        let Some(node) = tree.nodes.get_mut(&ino.0) else { return reply.error(Errno::ENOENT) };
        node.attr.size = node.attr.size.max(offset + data.len() as u64);
        node.attr.mtime = SystemTime::now();
        reply.written(data.len() as u32);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.tree().dir(ino.0) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let mut tree = self.tree();
        let entries: Vec<(OsString, u64)> = match tree.dir(ino.0) {
            Ok(d) => d.entries.iter().map(|(n, i)| (n.clone(), *i)).collect(),
            Err(e) => return reply.error(e),
        };
        // Offsets: 1 after ".", 2 after "..", 3 + i after entry i.
        let dots = [(OsString::from("."), ino.0), (OsString::from(".."), ino.0)];
        for (i, (name, child)) in dots.into_iter().chain(entries).enumerate().skip(offset as usize) {
            let kind = tree.nodes.get(&child).map_or(FileType::RegularFile, |n| n.attr.kind);
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let files = self.tree().nodes.len() as u64;
        reply.statfs(1 << 30, 1 << 30, 1 << 30, files, 1 << 30, 4096, 255, 4096);
    }
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(mount_point) = args.next() else {
        eprintln!("usage: memfs MOUNTPOINT [THREADS]");
        std::process::exit(2);
    };
    let threads = args.next().and_then(|t| t.to_str()?.parse().ok()).unwrap_or(2);
    let mut root = new_attr(ROOT, FileType::Directory, 0o777, 0, 0);
    root.perm = 0o1777;
    let fs = MemFs {
        tree: Mutex::new(Tree {
            nodes: HashMap::from([(ROOT, Node { attr: root, entries: BTreeMap::new() })]),
            next_ino: ROOT + 1,
        }),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("memfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::RW,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(threads);
    config.clone_fd = true;
    if let Err(e) = fuser::mount(fs, &mount_point, &config) {
        eprintln!("memfs: cannot mount {}: {e}", mount_point.to_string_lossy());
        std::process::exit(1);
    }
}
