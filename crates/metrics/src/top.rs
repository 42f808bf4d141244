//! The busiest files and clients of a process, for `trove stats --top` and the dashboard.
//!
//! Front ends count each read and write against the file (its inode, with a name where the
//! front end knows one) and the client that made it (an S3 access key, a process reading
//! through the mount). Keys are many and unbounded, so they are not metric labels: each process
//! keeps a bounded table per kind ([`ENTRIES_MAX`] keys; when full, a new key replaces the one
//! with the least traffic) and publishes the busiest on `/top` as JSON. A scraper takes two
//! snapshots and ranks keys by what they did in between.
//!
//! Recording never waits: the table is split in shards, and a shard busy with another thread
//! is skipped (the figures are approximate by design; a skipped count is one of thousands).

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Keys kept per kind.
pub const ENTRIES_MAX: usize = 4096;
const SHARDS: usize = 16;
/// Names of inodes kept (see [`name_file`]).
pub const NAMES_MAX: usize = 65_536;

/// What one key did so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    pub ops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Activity {
    fn weight(&self) -> u64 {
        self.bytes_read.saturating_add(self.bytes_written).saturating_add(self.ops.saturating_mul(4096))
    }
}

/// One row of `/top`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopEntry {
    /// The file (`ino 1234` or its path) or the client.
    pub key: String,
    #[serde(flatten)]
    pub activity: Activity,
}

/// What `/top` answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopReport {
    pub files: Vec<TopEntry>,
    pub clients: Vec<TopEntry>,
}

struct Table<K> {
    shards: Vec<Mutex<HashMap<K, Activity>>>,
}

impl<K: Hash + Eq + Clone> Table<K> {
    fn new() -> Table<K> {
        Table { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn record(&self, key: &K, ops: u64, read: u64, written: u64) {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        let shard = &self.shards[(h.finish() as usize) % SHARDS];
        let Some(mut map) = shard.try_lock() else {
            return;
        };
        if !map.contains_key(key) && map.len() >= ENTRIES_MAX / SHARDS {
            // Replace the least busy key of the shard.
            if let Some(victim) = map.iter().min_by_key(|(_, a)| a.weight()).map(|(k, _)| k.clone()) {
                map.remove(&victim);
            }
        }
        let a = map.entry(key.clone()).or_default();
        a.ops = a.ops.saturating_add(ops);
        a.bytes_read = a.bytes_read.saturating_add(read);
        a.bytes_written = a.bytes_written.saturating_add(written);
    }

    fn busiest(&self, n: usize) -> Vec<(K, Activity)> {
        let mut all: Vec<(K, Activity)> = Vec::new();
        for s in &self.shards {
            all.extend(s.lock().iter().map(|(k, a)| (k.clone(), a.clone())));
        }
        all.sort_by_key(|(_, a)| std::cmp::Reverse(a.weight()));
        all.truncate(n);
        all
    }
}

/// A file as a front end knows it: by inode (the mount, NFS) or by path (S3 keys).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    Ino(u64),
    Path(Arc<str>),
}

struct Tops {
    files: Table<FileKey>,
    clients: Table<Arc<str>>,
    names: Mutex<HashMap<u64, Arc<str>>>,
}

fn tops() -> &'static Tops {
    static TOPS: std::sync::OnceLock<Tops> = std::sync::OnceLock::new();
    TOPS.get_or_init(|| Tops { files: Table::new(), clients: Table::new(), names: Mutex::new(HashMap::new()) })
}

/// Counts an operation on file `ino` that read or wrote bytes.
#[inline]
pub fn file(ino: u64, read: u64, written: u64) {
    if crate::enabled() {
        tops().files.record(&FileKey::Ino(ino), 1, read, written);
    }
}

/// Counts an operation on the file at `path` (a front end that names files by path).
#[inline]
pub fn file_path(path: &str, read: u64, written: u64) {
    if crate::enabled() {
        tops().files.record(&FileKey::Path(Arc::from(path)), 1, read, written);
    }
}

/// Remembers a name of inode `ino` (where a front end learns one: a lookup, a create), shown
/// for it in `/top`. Bounded: when full, names are forgotten and learnt again.
pub fn name_file(ino: u64, name: &str) {
    if !crate::enabled() {
        return;
    }
    let Some(mut names) = tops().names.try_lock() else {
        return;
    };
    if names.len() >= NAMES_MAX && !names.contains_key(&ino) {
        names.clear();
    }
    if names.get(&ino).is_none_or(|n| **n != *name) {
        names.insert(ino, Arc::from(name));
    }
}

/// Counts an operation by `client` that read or wrote bytes.
#[inline]
pub fn client(client: &str, read: u64, written: u64) {
    if crate::enabled() {
        tops().clients.record(&Arc::from(client), 1, read, written);
    }
}

/// The busiest `n` files and clients so far.
pub fn report(n: usize) -> TopReport {
    let t = tops();
    let names = t.names.lock().clone();
    let files = t
        .files
        .busiest(n)
        .into_iter()
        .map(|(file, activity)| {
            let key = match file {
                FileKey::Path(path) => path.to_string(),
                FileKey::Ino(ino) => match names.get(&ino) {
                    Some(name) => format!("{name} (ino {ino})"),
                    None => format!("ino {ino}"),
                },
            };
            TopEntry { key, activity }
        })
        .collect();
    let clients =
        t.clients.busiest(n).into_iter().map(|(k, activity)| TopEntry { key: k.to_string(), activity }).collect();
    TopReport { files, clients }
}

/// What each key did between two reports (`before` may be from another process lifetime: keys
/// whose figures went down count from zero), busiest first.
pub fn between(before: &[TopEntry], after: &[TopEntry]) -> Vec<TopEntry> {
    let old: HashMap<&str, &Activity> = before.iter().map(|e| (e.key.as_str(), &e.activity)).collect();
    let mut out: Vec<TopEntry> = after
        .iter()
        .map(|e| {
            let a = &e.activity;
            let d = match old.get(e.key.as_str()) {
                Some(o) if o.ops <= a.ops => Activity {
                    ops: a.ops - o.ops,
                    bytes_read: a.bytes_read.saturating_sub(o.bytes_read),
                    bytes_written: a.bytes_written.saturating_sub(o.bytes_written),
                },
                _ => a.clone(),
            };
            TopEntry { key: e.key.clone(), activity: d }
        })
        .filter(|e| e.activity.ops > 0)
        .collect();
    out.sort_by_key(|e| std::cmp::Reverse(e.activity.weight()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_stays_bounded_and_keeps_the_busy_keys() {
        let t: Table<u64> = Table::new();
        t.record(&1, 1, 1 << 30, 0);
        for k in 2..100_000u64 {
            t.record(&k, 1, 10, 0);
        }
        let all = t.busiest(usize::MAX);
        assert!(all.len() <= ENTRIES_MAX, "{}", all.len());
        assert_eq!(all[0].0, 1, "the busy key survives the churn");
    }

    #[test]
    fn files_and_clients_are_ranked_by_what_they_did_between_reports() {
        crate::enable();
        name_file(777_001, "/data/a.bin");
        file(777_001, 100, 0);
        file(777_002, 0, 50);
        client("top-test-key", 100, 0);
        let before = report(1000);
        file(777_002, 0, 5000);
        file(777_002, 0, 5000);
        let after = report(1000);
        let d = between(&before.files, &after.files);
        let first = d.iter().find(|e| e.key.contains("777_002") || e.key == "ino 777002").expect("777002 moved");
        assert_eq!(first.activity, Activity { ops: 2, bytes_read: 0, bytes_written: 10_000 });
        assert!(!d.iter().any(|e| e.key.contains("a.bin")), "a.bin did nothing in between");
        assert!(after.files.iter().any(|e| e.key == "/data/a.bin (ino 777001)"));
        assert!(after.clients.iter().any(|e| e.key == "top-test-key" && e.activity.bytes_read >= 100));
    }
}
