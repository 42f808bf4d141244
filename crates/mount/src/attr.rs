//! Translations between Trove's wire types and the kernel's FUSE vocabulary: attributes, file
//! kinds, times, errno values and the flag words of open, rename, mknod and setxattr.
//!
//! Kept pure (no I/O, no state) so every mapping is unit-tested in one place; the file system
//! in `fs.rs` only calls these.

use fuser::{Errno, FileAttr, FileType, INodeNo, RenameFlags};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use wire::{Attr, FileKind, RenameMode, Timestamp, WireError, XattrMode};

/// `st_blksize` reported for regular files: the FUSE request size, so that `cp`, stdio and
/// Python size their buffers to whole requests.
pub const FILE_BLKSIZE_BYTES: u32 = 1 << 20;
/// `st_blksize` for everything else.
pub const OTHER_BLKSIZE_BYTES: u32 = 4096;

/// The kernel's file type of a Trove inode kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// A wire timestamp as a `SystemTime` (times before 1970 included).
pub fn system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nanos.min(999_999_999)));
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs()) + nanos
    }
}

/// A `SystemTime` as a wire timestamp.
pub fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { secs: d.as_secs() as i64, nanos: d.subsec_nanos() },
        Err(before) => {
            let d = before.duration();
            // -1.25 s is secs = -2, nanos = 0.75e9: nanos always count forward.
            if d.subsec_nanos() == 0 {
                Timestamp { secs: -(d.as_secs() as i64), nanos: 0 }
            } else {
                Timestamp { secs: -(d.as_secs() as i64) - 1, nanos: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

/// The kernel's view of a Trove inode.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks(),
        atime: system_time(a.atime),
        mtime: system_time(a.mtime),
        ctime: system_time(a.ctime),
        crtime: system_time(a.crtime),
        kind: file_type(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: if a.kind == FileKind::File { FILE_BLKSIZE_BYTES } else { OTHER_BLKSIZE_BYTES },
        flags: 0,
    }
}

/// The errno a client error becomes at the system call.
pub fn errno(e: &WireError) -> Errno {
    Errno::from_i32(e.code.errno())
}

/// A file name from the kernel as UTF-8: Trove stores names as strings, so other byte
/// sequences are refused with EILSEQ rather than mangled.
pub fn name_str(name: &OsStr) -> Result<&str, Errno> {
    name.to_str().ok_or(Errno::EILSEQ)
}

/// The rename mode of renameat2(2)'s flags. RENAME_WHITEOUT (overlayfs) is not supported.
pub fn rename_mode(flags: RenameFlags) -> Result<RenameMode, Errno> {
    let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
    let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
    let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE;
    if !(flags - known).is_empty() || (noreplace && exchange) {
        return Err(Errno::EINVAL);
    }
    Ok(if exchange {
        RenameMode::Exchange
    } else if noreplace {
        RenameMode::NoReplace
    } else {
        RenameMode::Replace
    })
}

/// What mknod(2)'s mode asks to create; `None` for a regular file (created like O_CREAT|O_EXCL).
pub fn mknod_kind(mode: u32) -> Result<Option<FileKind>, Errno> {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => Ok(Some(FileKind::Fifo)),
        libc::S_IFSOCK => Ok(Some(FileKind::Socket)),
        libc::S_IFCHR => Ok(Some(FileKind::CharDevice)),
        libc::S_IFBLK => Ok(Some(FileKind::BlockDevice)),
        libc::S_IFREG | 0 => Ok(None),
        _ => Err(Errno::EINVAL),
    }
}

/// The mode of setxattr(2)'s flags.
pub fn xattr_mode(flags: i32) -> Result<XattrMode, Errno> {
    match flags {
        0 => Ok(XattrMode::Upsert),
        libc::XATTR_CREATE => Ok(XattrMode::Create),
        libc::XATTR_REPLACE => Ok(XattrMode::Replace),
        _ => Err(Errno::EINVAL),
    }
}

/// Extended attribute namespaces Trove stores. `system.*` names (POSIX ACLs, capabilities
/// handled by the kernel) would be stored but never enforced, so they are refused instead.
pub fn xattr_name_supported(name: &str) -> bool {
    ["user.", "trusted.", "security."].iter().any(|p| name.starts_with(p))
}

/// The permission bits a new inode gets: the requested mode without the umask's bits.
pub fn creation_mode(mode: u32, umask: u32) -> u32 {
    mode & !umask & 0o7777
}

/// The value of a getxattr/listxattr reply for a buffer of `size` bytes: the size alone when
/// the caller asks (size 0), the data when it fits, ERANGE otherwise.
pub enum XattrAnswer<'a> {
    Size(u32),
    Data(&'a [u8]),
}

pub fn xattr_answer(value: &[u8], size: u32) -> Result<XattrAnswer<'_>, Errno> {
    let len = u32::try_from(value.len()).map_err(|_| Errno::E2BIG)?;
    if size == 0 {
        Ok(XattrAnswer::Size(len))
    } else if len <= size {
        Ok(XattrAnswer::Data(value))
    } else {
        Err(Errno::ERANGE)
    }
}

/// The listxattr(2) format: each name followed by a NUL byte. Only names of the namespaces the
/// mount serves are listed: the cluster's own (`trove.`, e.g. the NFS handle key on `/`) would
/// be listed and then refused, which makes `cp -a` and `rsync -X` fail on them.
pub fn xattr_list(names: &[String]) -> Vec<u8> {
    let names: Vec<&String> = names.iter().filter(|n| xattr_name_supported(n)).collect();
    let mut out = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
    for n in names {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
    }
    out
}

/// An inode's attributes for tests: inode 42 of `kind`, mode 04755, owner 1000:100.
#[cfg(test)]
pub(crate) fn test_attr(kind: FileKind) -> Attr {
    let t = Timestamp { secs: 1_700_000_000, nanos: 5 };
    Attr {
        ino: 42,
        kind,
        mode: 0o4755,
        uid: 1000,
        gid: 100,
        size: 5000,
        nlink: 1,
        rdev: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        data_version: 3,
        ec: wire::EcScheme::DEFAULT,
        chunk_bytes: 4 << 20,
        pool: wire::DEFAULT_POOL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ErrorCode;

    fn attr(kind: FileKind) -> Attr {
        test_attr(kind)
    }

    #[test]
    fn attributes_keep_mode_owner_size_and_blocks() {
        let a = file_attr(&attr(FileKind::File));
        assert_eq!(a.ino, INodeNo(42));
        assert_eq!(a.perm, 0o4755);
        assert_eq!((a.uid, a.gid), (1000, 100));
        assert_eq!(a.blocks, 10);
        assert_eq!(a.kind, FileType::RegularFile);
        assert_eq!(a.blksize, FILE_BLKSIZE_BYTES);
        assert_eq!(file_attr(&attr(FileKind::Fifo)).kind, FileType::NamedPipe);
        assert_eq!(file_attr(&attr(FileKind::Dir)).blksize, OTHER_BLKSIZE_BYTES);
    }

    #[test]
    fn times_round_trip_including_before_1970() {
        for t in [
            Timestamp { secs: 0, nanos: 0 },
            Timestamp { secs: 1_700_000_000, nanos: 123_456_789 },
            Timestamp { secs: -2, nanos: 750_000_000 },
            Timestamp { secs: -100, nanos: 0 },
        ] {
            assert_eq!(timestamp(system_time(t)), t, "{t:?}");
        }
    }

    #[test]
    fn error_codes_become_errno() {
        assert_eq!(errno(&WireError::new(ErrorCode::NotFound, "x")), Errno::ENOENT);
        assert_eq!(errno(&WireError::new(ErrorCode::NotEmpty, "x")), Errno::from_i32(libc::ENOTEMPTY));
        assert_eq!(errno(&WireError::new(ErrorCode::NoAttr, "x")), Errno::ENODATA);
        assert_eq!(errno(&WireError::new(ErrorCode::Unavailable, "x")), Errno::EIO);
    }

    #[test]
    fn rename_flags_map_to_modes() {
        assert_eq!(rename_mode(RenameFlags::empty()), Ok(RenameMode::Replace));
        assert_eq!(rename_mode(RenameFlags::RENAME_NOREPLACE), Ok(RenameMode::NoReplace));
        assert_eq!(rename_mode(RenameFlags::RENAME_EXCHANGE), Ok(RenameMode::Exchange));
        assert_eq!(rename_mode(RenameFlags::RENAME_WHITEOUT), Err(Errno::EINVAL));
        assert_eq!(rename_mode(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_NOREPLACE), Err(Errno::EINVAL));
    }

    #[test]
    fn mknod_and_xattr_flags() {
        assert_eq!(mknod_kind(libc::S_IFIFO | 0o644), Ok(Some(FileKind::Fifo)));
        assert_eq!(mknod_kind(libc::S_IFREG | 0o644), Ok(None));
        assert_eq!(mknod_kind(libc::S_IFDIR | 0o755), Err(Errno::EINVAL));
        assert_eq!(xattr_mode(0), Ok(XattrMode::Upsert));
        assert_eq!(xattr_mode(libc::XATTR_CREATE), Ok(XattrMode::Create));
        assert_eq!(xattr_mode(libc::XATTR_REPLACE), Ok(XattrMode::Replace));
        assert_eq!(xattr_mode(3), Err(Errno::EINVAL));
        assert!(xattr_name_supported("user.trove"));
        assert!(!xattr_name_supported("system.posix_acl_access"));
        assert_eq!(creation_mode(0o100666, 0o022), 0o644);
    }

    #[test]
    fn xattr_buffers_follow_the_size_protocol() {
        assert!(matches!(xattr_answer(b"abc", 0), Ok(XattrAnswer::Size(3))));
        assert!(matches!(xattr_answer(b"abc", 3), Ok(XattrAnswer::Data(b"abc"))));
        assert!(matches!(xattr_answer(b"abc", 2), Err(e) if e == Errno::ERANGE));
        assert_eq!(xattr_list(&["user.a".into(), "user.bc".into()]), b"user.a\0user.bc\0");
        assert_eq!(
            xattr_list(&["trove.nfs.handle_key".into(), "user.a".into()]),
            b"user.a\0",
            "not served, not listed"
        );
    }
}
