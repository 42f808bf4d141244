//! The host side of mounting: checks before mounting (is FUSE there, is the mount point a usable
//! directory), the kernel's mount table (`/proc/self/mountinfo`), the read-ahead window of a
//! mounted file system, and unmounting.
//!
//! These exist so that the common failures get a sentence that says what to do, instead of the
//! bare errno the mount(2) system call or the FUSE library would report.

use crate::MountError;
use std::io;
use std::path::{Path, PathBuf};

/// The FUSE device every FUSE mount needs.
pub const FUSE_DEVICE: &str = "/dev/fuse";
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of the kernel's mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// "major:minor" of the mounted file system (names its `/sys/class/bdi` entry).
    pub device: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

/// Undoes the octal escapes (`\040` for a space, ...) of mountinfo fields.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let v = (bytes[i + 1] - b'0') as u32 * 64 + (bytes[i + 2] - b'0') as u32 * 8 + (bytes[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses the text of `/proc/<pid>/mountinfo`; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        // id parent major:minor root mount_point options [optional...] - fs_type source super_options
        let Some(dash) = fields.iter().position(|f| *f == "-") else { continue };
        if dash < 6 || fields.len() < dash + 3 {
            continue;
        }
        out.push(MountEntry {
            device: fields[2].to_string(),
            mount_point: PathBuf::from(unescape(fields[4])),
            fs_type: fields[dash + 1].to_string(),
            source: unescape(fields[dash + 2]),
        });
    }
    out
}

/// The kernel's mount table as this process sees it.
pub fn mounts() -> io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(MOUNTINFO)?))
}

/// The topmost mount at `path` (already canonical), if any.
pub fn mount_at(path: &Path) -> Option<MountEntry> {
    mounts().ok()?.into_iter().rev().find(|m| m.mount_point == path)
}

/// Whether the error is "Transport endpoint is not connected": a FUSE mount whose daemon died.
fn is_dead_fuse(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTCONN)
}

/// Checks that FUSE is available and that `path` is a directory nothing is mounted on yet;
/// returns its canonical path.
pub fn check_mount_point(path: &Path) -> Result<PathBuf, MountError> {
    if !Path::new(FUSE_DEVICE).exists() {
        return Err(MountError::FuseUnavailable {
            reason: format!(
                "{FUSE_DEVICE} does not exist: load the FUSE kernel module (modprobe fuse), or run the container \
                 with --device /dev/fuse --cap-add SYS_ADMIN"
            ),
        });
    }
    let bad = |reason: String| MountError::MountPoint { path: path.to_path_buf(), reason };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if is_dead_fuse(&e) => {
            return Err(bad(format!(
                "a FUSE file system mounted there lost its process ({e}); clean it up with `trove umount {}`",
                path.display()
            )))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(bad("does not exist; create the directory first".into()))
        }
        Err(e) => return Err(bad(format!("cannot be examined: {e}"))),
    };
    if !meta.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| bad(format!("cannot be resolved: {e}")))?;
    if let Some(m) = mount_at(&canonical) {
        if m.fs_type == "fuse" || m.fs_type.starts_with("fuse.") {
            return Err(MountError::Busy {
                path: canonical,
                reason: format!("{} is already mounted there; unmount it first (trove umount)", m.source),
            });
        }
    }
    let mut entries = std::fs::read_dir(&canonical).map_err(|e| bad(format!("cannot be listed: {e}")))?;
    if let Some(entry) = entries.next() {
        let name = entry.map(|e| e.file_name().to_string_lossy().into_owned()).unwrap_or_default();
        return Err(bad(format!(
            "is not empty (it holds {name:?} among others); mounting would hide its files, so use an empty directory"
        )));
    }
    Ok(canonical)
}

/// Sets the kernel's read-ahead window of the file system mounted at `path` (root only; the
/// FUSE default of 128 KiB caps sequential reads at one small request at a time).
pub fn set_read_ahead(path: &Path, read_ahead_kb: u32) -> io::Result<()> {
    let m = mount_at(path)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "mount not found in /proc/self/mountinfo"))?;
    std::fs::write(format!("/sys/class/bdi/{}/read_ahead_kb", m.device), read_ahead_kb.to_string())
}

/// Unmounts the FUSE file system at `path`. `lazy` detaches it even while files are open
/// (MNT_DETACH): it goes away from the namespace now and from the kernel at the last close.
pub fn unmount(path: &Path, lazy: bool) -> Result<(), MountError> {
    let bad = |reason: String| MountError::MountPoint { path: path.to_path_buf(), reason };
    // A dead mount cannot be canonicalized (stat fails); its path is used as given.
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match mount_at(&canonical) {
        Some(m) if m.fs_type == "fuse" || m.fs_type.starts_with("fuse.") => {}
        Some(m) => return Err(bad(format!("is a {} mount, not a Trove (FUSE) mount", m.fs_type))),
        None => return Err(bad("is not mounted".into())),
    }
    let flags = if lazy { rustix::mount::UnmountFlags::DETACH } else { rustix::mount::UnmountFlags::empty() };
    match rustix::mount::unmount(&canonical, flags) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) => Err(MountError::Busy {
            path: canonical,
            reason: "files are open or a process works in it; close them, or unmount with --lazy".into(),
        }),
        // Only root may call umount2; other users go through the setuid helper, as fusermount3
        // checks that they mounted it.
        Err(rustix::io::Errno::PERM) => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg("-u");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd
                .arg(&canonical)
                .output()
                .map_err(|e| bad(format!("cannot run fusermount3 to unmount as a user: {e}")))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(bad(format!("fusermount3 -u failed: {}", String::from_utf8_lossy(&out.stderr).trim())))
            }
        }
        Err(e) => Err(bad(format!("unmount failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes_and_optional_fields() {
        let text = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue
90 36 0:53 / /tmp/t/mnt rw,nosuid,nodev - fuse trove:127.0.0.1:7000 rw,user_id=0
garbage line
";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].mount_point, PathBuf::from("/mnt two"));
        assert_eq!(m[1].fs_type, "ext3");
        assert_eq!(m[1].device, "98:0");
        assert_eq!(m[2].source, "trove:127.0.0.1:7000");
        assert_eq!(m[2].fs_type, "fuse");
    }

    #[test]
    fn mount_point_checks_say_what_is_wrong() {
        let dir = std::env::temp_dir().join(format!("trove-mount-check-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join("f");
        std::fs::write(&file, b"x").expect("write temp file");
        if Path::new(FUSE_DEVICE).exists() {
            let e = check_mount_point(&file).expect_err("a file is no mount point");
            assert!(e.to_string().contains("not a directory"), "{e}");
            let e = check_mount_point(&dir.join("missing")).expect_err("missing");
            assert!(e.to_string().contains("does not exist"), "{e}");
            let e = check_mount_point(&dir).expect_err("a directory with files");
            assert!(e.to_string().contains("is not empty"), "{e}");
            let empty = dir.join("empty");
            std::fs::create_dir_all(&empty).expect("mkdir");
            assert!(check_mount_point(&empty).is_ok());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
