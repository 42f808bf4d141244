//! Where a target keeps its bytes, and whether the targets of one run can hold the data it is
//! about to generate: checked before anything is written. A run over a cluster, a mount of it
//! and a local directory once generated a dataset per target and failed with ENOSPC tens of GB
//! later, having filled the disk the cluster's nodes and the directory shared.
//!
//! Two questions are answered up front:
//! - which targets share storage ([`Storage::store`]): a cluster and a mount of it, or two
//!   directories of one file system, read one dataset instead of writing it twice;
//! - which file systems the bytes land on ([`DeviceShare`]): a cluster writes `(k + m) / k`
//!   bytes per byte, spread over its nodes' drives; a directory writes to its own file system.
//!   File systems are identified as the storage nodes report them ([`device_id`]), so a local
//!   directory on the disk that also holds a local cluster's nodes is counted with them.

use anyhow::{bail, Result};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// What a target stores into.
#[derive(Clone, Debug)]
pub struct Storage {
    /// The storage behind the target, equal for targets that share it: `trove:ADDR` for a
    /// cluster (through the client or a mount of it), `fs:ID` for any other file system.
    pub store: String,
    /// The target's root as the store names it: a cluster path, or an absolute local path.
    pub root: String,
    /// Bytes that can be written through the target now.
    pub bytes_free: u64,
    /// The file systems written bytes land on.
    pub devices: Vec<DeviceShare>,
}

/// One file system a target writes to.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceShare {
    /// [`device_id`] of the file system, or a name of its own when unknown (then it is never
    /// taken for another).
    pub device: String,
    /// What the file system is, for messages ("/data", "drives of nodes 1-6").
    pub what: String,
    pub bytes_free: u64,
    pub bytes_total: u64,
    /// Bytes landing on this file system per byte written through the target.
    pub per_byte: f64,
}

/// The identity of a file system, as storage nodes report it for their drives
/// (`wire::device_id`: FNV-1a of the host's identity, a NUL, `st_dev` and `f_fsid`, both
/// little-endian; never 0). Kept identical to it, which a test checks: this crate depends on
/// the client library only.
pub fn device_id(host: &str, st_dev: u64, fsid: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes().chain([0]).chain(st_dev.to_le_bytes()).chain(fsid.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h.max(1)
}

/// This host's identity, as storage nodes read it: its machine id, else its host name.
pub fn host_id() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        ["/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/hostname"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .map(|s| s.trim().to_string())
            .find(|s| !s.is_empty())
            .unwrap_or_default()
    })
}

/// A local file system's identity, free bytes and size, from `stat` and `statvfs` of `path`.
pub fn local_fs(path: &Path) -> Result<(u64, u64, u64)> {
    let st = rustix::fs::stat(path).map_err(|e| anyhow::anyhow!("stat {}: {e}", path.display()))?;
    let vfs = rustix::fs::statvfs(path).map_err(|e| anyhow::anyhow!("statvfs {}: {e}", path.display()))?;
    Ok((
        device_id(host_id(), st.st_dev, vfs.f_fsid),
        vfs.f_bavail.saturating_mul(vfs.f_frsize),
        vfs.f_blocks.saturating_mul(vfs.f_frsize),
    ))
}

/// The mount a local path is on: its mount point, the path within the mounted file system of
/// that mount point (the `root` field), the file system type and the source, from
/// `/proc/self/mountinfo` (the longest mount point that contains `path`).
pub fn mount_of(path: &Path) -> Option<(PathBuf, String, String, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut best: Option<(PathBuf, String, String, String)> = None;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(root), Some(point), Some(fstype), Some(source)) =
            (fields.get(3), fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        let point = PathBuf::from(unescape_mountinfo(point));
        if path.starts_with(&point) && best.as_ref().is_none_or(|b| point.as_os_str().len() >= b.0.as_os_str().len()) {
            best = Some((point, unescape_mountinfo(root), fstype.to_string(), unescape_mountinfo(source)));
        }
    }
    best
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let n = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The file systems a Trove cluster writes to, from its status: each member node takes an
/// equal part of `(k + m) / k` bytes per byte written (placement spreads shards evenly), split
/// evenly over its drives. Drives on one file system (nodes sharing a disk) are one share.
pub fn trove_devices(status: &client_status::Status, k: u8, m: u8) -> Vec<DeviceShare> {
    let members: Vec<&client_status::Node> = status.nodes.iter().filter(|n| n.member).collect();
    if members.is_empty() || k == 0 {
        return Vec::new();
    }
    let per_node = (f64::from(k) + f64::from(m)) / f64::from(k) / members.len() as f64;
    let mut shares: BTreeMap<String, DeviceShare> = BTreeMap::new();
    let mut nodes_on: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for node in members {
        let drives = node.drives.len().max(1) as f64;
        for (i, d) in node.drives.iter().enumerate() {
            let key = if d.device == 0 { format!("node {} drive {i}", node.id) } else { format!("{:016x}", d.device) };
            let share = shares.entry(key.clone()).or_insert(DeviceShare {
                device: key.clone(),
                what: String::new(),
                bytes_free: d.bytes_free,
                bytes_total: d.bytes_total,
                per_byte: 0.0,
            });
            share.bytes_free = share.bytes_free.min(d.bytes_free);
            share.bytes_total = share.bytes_total.max(d.bytes_total);
            share.per_byte += per_node / drives;
            let on = nodes_on.entry(key).or_default();
            if !on.contains(&node.id) {
                on.push(node.id);
            }
        }
    }
    shares
        .into_values()
        .map(|mut s| {
            let ids = nodes_on.get(&s.device).cloned().unwrap_or_default();
            let list: Vec<String> = ids.iter().map(u32::to_string).collect();
            s.what = match ids.len() {
                1 => format!("the drives of node {}", list[0]),
                _ => format!("the drives of nodes {}", list.join(", ")),
            };
            s
        })
        .collect()
}

/// What the space check needs of a cluster's status, independent of the wire types (this crate
/// sees them only through the client library).
pub mod client_status {
    /// A cluster's status as the space check reads it.
    #[derive(Clone, Debug, Default)]
    pub struct Status {
        pub nodes: Vec<Node>,
    }

    #[derive(Clone, Debug, Default)]
    pub struct Node {
        pub id: u32,
        /// Whether new data is placed on it (up or down, not draining or out).
        pub member: bool,
        pub drives: Vec<Drive>,
    }

    #[derive(Clone, Debug, Default)]
    pub struct Drive {
        pub device: u64,
        pub bytes_free: u64,
        pub bytes_total: u64,
    }
}

/// Bytes kept free on every file system: a run must not fill a disk others depend on. 2% of
/// the file system, at most 1 GiB.
pub fn headroom(bytes_total: u64) -> u64 {
    (bytes_total / 50).min(1 << 30)
}

/// One target's part in a run's writes: what it will write, and where that lands.
#[derive(Clone, Debug)]
pub struct Need {
    /// The target, as reports name it.
    pub target: String,
    pub bytes: u64,
    pub storage: Storage,
}

/// Checks that every target and every file system can take what the run writes (with
/// [`headroom`] left on each file system), counting file systems shared between targets once
/// with the sum of what lands there. The error names each shortfall and what was asked for.
pub fn check(what: &str, needs: &[Need]) -> Result<()> {
    let mut short = Vec::new();
    for n in needs.iter().filter(|n| n.bytes > 0) {
        if n.bytes > n.storage.bytes_free {
            short.push(format!("{}: {} needed, {} free", n.target, gb(n.bytes), gb(n.storage.bytes_free)));
        }
    }
    // Per file system: what every target puts there.
    let mut per_device: HashMap<&str, (DeviceShare, f64, Vec<String>)> = HashMap::new();
    for n in needs.iter().filter(|n| n.bytes > 0) {
        for d in &n.storage.devices {
            let landing = n.bytes as f64 * d.per_byte;
            let entry = per_device.entry(d.device.as_str()).or_insert_with(|| (d.clone(), 0.0, Vec::new()));
            entry.0.bytes_free = entry.0.bytes_free.min(d.bytes_free);
            if !entry.0.what.split(" and ").any(|w| w == d.what) {
                entry.0.what = format!("{} and {}", entry.0.what, d.what);
            }
            entry.1 += landing;
            entry.2.push(format!("{} for {}", gb(landing as u64), n.target));
        }
    }
    let mut devices: Vec<_> = per_device.into_values().collect();
    devices.sort_by(|a, b| a.0.device.cmp(&b.0.device));
    for (d, landing, parts) in devices {
        let keep = headroom(d.bytes_total);
        let usable = d.bytes_free.saturating_sub(keep);
        if landing > usable as f64 {
            short.push(format!(
                "the file system holding {} (device {}): {} needed ({}), {} free of which {} is kept free",
                d.what,
                d.device,
                gb(landing as u64),
                parts.join(", "),
                gb(d.bytes_free),
                gb(keep)
            ));
        }
    }
    if short.is_empty() {
        return Ok(());
    }
    bail!(
        "not enough space for {what}; nothing was written:\n  {}\nmake it smaller (--dataset-gib, --files) or free space",
        short.join("\n  ")
    )
}

/// Bytes in decimal gigabytes, as dataset sizes are given: "93.5 GB" (megabytes below 1 GB).
pub fn gb(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.1} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(device: &str, free: u64, total: u64, per_byte: f64) -> DeviceShare {
        DeviceShare { device: device.into(), what: device.into(), bytes_free: free, bytes_total: total, per_byte }
    }

    fn need(target: &str, bytes: u64, free: u64, devices: Vec<DeviceShare>) -> Need {
        Need {
            target: target.into(),
            bytes,
            storage: Storage { store: target.into(), root: "/".into(), bytes_free: free, devices },
        }
    }

    const G: u64 = 1_000_000_000;

    #[test]
    fn a_shared_disk_is_checked_against_the_sum_of_what_lands_there() {
        // A 90 GB disk with 60 GB free holds a local directory and a 4+2 cluster's six nodes: a
        // 30 GB dataset fits in either alone (30 GB; 45 GB of shards) but not in both (75 GB).
        let disk = |per_byte| share("aa", 60 * G, 90 * G, per_byte);
        let dir = need("dir /data", 30 * G, 60 * G, vec![disk(1.0)]);
        let cluster = need("trove c:/bench", 30 * G, 40 * G, vec![disk(1.5)]);
        assert!(check("x", std::slice::from_ref(&dir)).is_ok());
        assert!(check("x", std::slice::from_ref(&cluster)).is_ok());
        let e = check("the unet3d dataset", &[dir.clone(), cluster.clone()])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("not enough space for the unet3d dataset")
                && e.contains("device aa")
                && e.contains("75.0 GB needed (30.0 GB for dir /data, 45.0 GB for trove c:/bench)")
                && e.contains("60.0 GB free"),
            "{e}"
        );
        // A target that reads another's dataset writes nothing.
        let reader = need("dir /mnt/trove", 0, 0, vec![disk(1.5)]);
        assert!(check("x", &[cluster, reader]).is_ok());
    }

    #[test]
    fn a_target_short_of_space_is_named_with_the_figures() {
        let e = check("the dataset", &[need("dir /small", 5 * G, 2 * G, vec![share("bb", 2 * G, 10 * G, 1.0)])])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("dir /small: 5.0 GB needed, 2.0 GB free") && e.contains("--dataset-gib"), "{e}");
        // The headroom is kept: 9.9 of 10 GB free is not enough for 9.9 GB.
        assert!(check("x", &[need("d", 9_900_000_000, 10 * G, vec![share("cc", 9_900_000_000, 10 * G, 1.0)])]).is_err());
        assert_eq!(headroom(10 * G), 200_000_000);
        assert_eq!(headroom(1 << 50), 1 << 30);
    }

    #[test]
    fn cluster_writes_spread_over_the_nodes_drives() {
        let drive = |device, free| client_status::Drive { device, bytes_free: free, bytes_total: 100 };
        let node = |id, member, drives| client_status::Node { id, member, drives };
        // Four nodes on one disk, two with their own; a draining node takes no new data.
        let status = client_status::Status {
            nodes: vec![
                node(1, true, vec![drive(7, 50)]),
                node(2, true, vec![drive(7, 40)]),
                node(3, true, vec![drive(7, 50)]),
                node(4, true, vec![drive(7, 50)]),
                node(5, true, vec![drive(8, 90)]),
                node(6, true, vec![drive(0, 90), drive(0, 80)]),
                node(7, false, vec![drive(9, 10)]),
            ],
        };
        let shares = trove_devices(&status, 4, 2);
        let by: HashMap<&str, &DeviceShare> = shares.iter().map(|s| (s.device.as_str(), s)).collect();
        let shared = by[format!("{:016x}", 7).as_str()];
        assert!((shared.per_byte - 4.0 * 1.5 / 6.0).abs() < 1e-9 && shared.bytes_free == 40, "{shared:?}");
        assert_eq!(shared.what, "the drives of nodes 1, 2, 3, 4");
        assert_eq!(by[format!("{:016x}", 8).as_str()].what, "the drives of node 5");
        assert!((by["node 6 drive 0"].per_byte - 1.5 / 6.0 / 2.0).abs() < 1e-9);
        assert!(!shares.iter().any(|s| s.device == format!("{:016x}", 9)));
        let total: f64 = shares.iter().map(|s| s.per_byte).sum();
        assert!((total - 1.5).abs() < 1e-9);
    }

    #[test]
    fn device_ids_match_what_storage_nodes_report() {
        for (host, dev, fsid) in [("", 0, 0), ("4c4c4544004e", 0xfd01, 0x1234_5678_9abc_def0), ("host", u64::MAX, 1)] {
            assert_eq!(device_id(host, dev, fsid), wire::device_id(host, dev, fsid));
        }
    }

    #[test]
    fn mountinfo_escapes_and_the_root_mount_are_read() {
        assert_eq!(unescape_mountinfo(r"/mnt/with\040space"), "/mnt/with space");
        assert_eq!(unescape_mountinfo(r"plain\\"), r"plain\\");
        let (point, _, _, _) = mount_of(Path::new("/proc/self")).unwrap_or_default();
        assert_eq!(point, PathBuf::from("/proc"));
        let (_, free, total) = local_fs(Path::new("/")).unwrap_or_default();
        assert!(total > 0 && free <= total);
    }
}
