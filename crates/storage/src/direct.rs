//! Direct writes of shard files: whether a drive takes them, and the aligned staging buffer
//! they are written from.
//!
//! A shard put writes a file that is synced at once and, on a storage node, rarely read back
//! soon (the client keeps what it wrote, and readers are other machines). A buffered write
//! copies it into page-cache pages first, newly allocated for every shard: that copy and the
//! allocation were most of a storage node's CPU in a sequential write (on a 2-core virtual
//! machine, 45% of all CPU time of a 6-node cluster, in `copy_folio_from_iter_atomic`), while
//! `O_DIRECT` hands the disk the process's own buffer. So puts write with `O_DIRECT` where the
//! drive's file system takes it (ext4, xfs; not tmpfs, which refuses the flag) and buffered
//! elsewhere; [`probe`] decides once per drive, when the store opens.
//!
//! `O_DIRECT` wants the buffer's address, the file offset and the length aligned to the
//! device's logical block; [`ALIGN_BYTES`] (4096) satisfies every device in use. A shard file
//! (header + data) is staged in an aligned buffer, written padded with zeros to a multiple of
//! the alignment, then cut to its length with `ftruncate` before the file is synced: the file
//! on disk is exactly what a buffered write would have left. The staging buffer is kept per
//! thread (the blocking pool's threads), so its pages are reused instead of newly faulted in.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Alignment of the staging buffer, the write's length and its file offset.
pub const ALIGN_BYTES: usize = 4096;

/// A staging buffer this large or smaller is kept by its thread for the next put; a larger one
/// (a whole unstriped chunk of a very large chunk size) is freed after its write.
const KEPT_BUFFER_BYTES_MAX: usize = 16 << 20;

thread_local! {
    static STAGING: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Options that open a new file for direct writes.
pub fn create_new_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true).custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32);
    options
}

/// Whether files in `dir` can be written with `O_DIRECT`: writes one aligned block to a probe
/// file there and removes it. `EINVAL` (the file system refuses the flag or its alignment) is
/// a plain no; any other failure is returned, as the drive's write probe would fail too.
pub fn probe(dir: &Path) -> io::Result<bool> {
    let path = dir.join(".probe-direct");
    let _ = fs::remove_file(&path);
    let file = match create_new_options().open(&path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => return Ok(false),
        Err(e) => return Err(e),
    };
    let written = write_padded(&file, &[b"trove direct write probe\n"]);
    drop(file);
    fs::remove_file(&path)?;
    match written {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `parts`, one after the other, from offset 0 of `file` (opened with
/// [`create_new_options`]): staged in an aligned buffer, written padded to [`ALIGN_BYTES`], and
/// cut back to their length. The caller syncs.
pub fn write_padded(file: &File, parts: &[&[u8]]) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let padded = len.div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
    STAGING.with(|cell| {
        let mut kept = cell.borrow_mut();
        let mut own;
        let buf: &mut Vec<u8> = if padded <= KEPT_BUFFER_BYTES_MAX {
            &mut kept
        } else {
            own = Vec::new();
            &mut own
        };
        if buf.len() < padded + ALIGN_BYTES {
            buf.resize(padded + ALIGN_BYTES, 0);
        }
        let start = buf.as_ptr().align_offset(ALIGN_BYTES);
        let staged = &mut buf[start..start + padded];
        let mut at = 0;
        for part in parts {
            staged[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        staged[len..].fill(0);
        (&*file).write_all(staged)?;
        if padded != len {
            file.set_len(len as u64)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_leaves_nothing_behind_and_its_answer_holds_at_every_length() {
        for dir in [tempfile::tempdir().unwrap(), tempfile::tempdir_in("/dev/shm").unwrap()] {
            let takes_direct = probe(dir.path()).unwrap();
            assert_eq!(
                fs::read_dir(dir.path()).unwrap().count(),
                0,
                "the probe left a file in {}",
                dir.path().display()
            );
            for len in [0, 1, 4089, 4096, 4097, 8192, (1 << 20) + 3] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let path = dir.path().join(format!("f{len}"));
                let written = create_new_options().open(&path).and_then(|f| {
                    write_padded(&f, &[b"head", &data])?;
                    f.sync_data()
                });
                if !takes_direct {
                    let e = written.expect_err("a file system the probe refused took a direct write");
                    assert_eq!(e.raw_os_error(), Some(rustix::io::Errno::INVAL.raw_os_error()), "{e}");
                    continue;
                }
                written.unwrap();
                let back = fs::read(&path).unwrap();
                assert_eq!(back.len(), 4 + len, "length {len}");
                assert!(back[..4] == *b"head" && back[4..] == data[..], "content of length {len}");
            }
        }
    }
}
