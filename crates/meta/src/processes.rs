//! The processes that export metrics, as they announce themselves (`MetaOp::Announce`, every
//! few seconds): where `trove stats` and the dashboard find every exporter of the cluster.
//!
//! Kept in memory only, like heartbeat times: a restarted server has the list back within one
//! announce interval, and a process that stops announcing is dropped after
//! [`PROCESS_TTL`]. Bounded by [`PROCESSES_MAX`] entries.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;
use wire::{ProcessInfo, WireError};

/// A process not heard from for this long is forgotten.
pub const PROCESS_TTL: Duration = Duration::from_secs(60);
/// Most processes kept; announcements beyond are refused.
pub const PROCESSES_MAX: usize = 4096;
/// Longest text field of an announcement.
pub const FIELD_BYTES_MAX: usize = 256;

type Key = (String, String, String);

/// The announced processes.
#[derive(Default)]
pub struct Processes {
    /// This server itself, once it exports.
    me: Mutex<Option<ProcessInfo>>,
    others: Mutex<HashMap<Key, (ProcessInfo, Instant)>>,
}

impl Processes {
    /// Sets this server's own entry.
    pub fn set_self(&self, info: ProcessInfo) {
        *self.me.lock() = Some(info);
    }

    /// Records an announcement.
    pub fn announce(&self, info: ProcessInfo) -> Result<(), WireError> {
        for (field, value) in [
            ("role", &info.role),
            ("id", &info.id),
            ("addr", &info.addr),
            ("metrics", &info.metrics),
            ("host", &info.host),
            ("version", &info.version),
        ] {
            if value.len() > FIELD_BYTES_MAX {
                return Err(wire::werr!(
                    TooLarge,
                    "announced {field} is {} bytes, longer than {FIELD_BYTES_MAX}",
                    value.len()
                ));
            }
        }
        if info.role.is_empty() || info.metrics.is_empty() {
            return Err(wire::werr!(Invalid, "an announcement needs a role and a metrics address"));
        }
        let now = Instant::now();
        let mut others = self.others.lock();
        others.retain(|_, (_, seen)| now.duration_since(*seen) < PROCESS_TTL);
        let key = (info.role.clone(), info.id.clone(), info.metrics.clone());
        if !others.contains_key(&key) && others.len() >= PROCESSES_MAX {
            return Err(wire::werr!(TooLarge, "{PROCESSES_MAX} processes already announced; not keeping more"));
        }
        // A process restarted on the same metrics address replaces its old entry.
        others.retain(|k, _| !(k.2 == info.metrics && k != &key));
        others.insert(key, (info, now));
        Ok(())
    }

    /// Every process heard from lately and this server, with how long ago each was heard.
    pub fn list(&self) -> Vec<ProcessInfo> {
        let now = Instant::now();
        let mut out: Vec<ProcessInfo> = self.me.lock().iter().cloned().collect();
        let others = self.others.lock();
        for (info, seen) in others.values() {
            if now.duration_since(*seen) < PROCESS_TTL {
                let mut info = info.clone();
                info.seen_ms_ago = now.duration_since(*seen).as_millis() as u64;
                out.push(info);
            }
        }
        out.sort_by(|a, b| {
            (role_rank(&a.role), &a.role, natural(&a.id)).cmp(&(role_rank(&b.role), &b.role, natural(&b.id)))
        });
        out
    }
}

/// Roles in the order people read them: services first.
fn role_rank(role: &str) -> u8 {
    match role {
        "meta" => 0,
        "storage" => 1,
        "mount" => 2,
        "s3" => 3,
        "nfs" => 4,
        _ => 5,
    }
}

/// Sorts "10" after "9".
fn natural(id: &str) -> (u64, String) {
    (id.parse().unwrap_or(u64::MAX), id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(role: &str, id: &str, metrics: &str) -> ProcessInfo {
        ProcessInfo { role: role.into(), id: id.into(), metrics: metrics.into(), ..ProcessInfo::default() }
    }

    #[test]
    fn announcements_are_kept_sorted_replaced_and_checked() {
        let p = Processes::default();
        p.set_self(info("meta", "a", "h:1"));
        p.announce(info("storage", "10", "h:3")).expect("kept");
        p.announce(info("storage", "9", "h:2")).expect("kept");
        p.announce(info("mount", "/mnt", "h:4")).expect("kept");
        let ids: Vec<String> = p.list().iter().map(|i| format!("{}:{}", i.role, i.id)).collect();
        assert_eq!(ids, ["meta:a", "storage:9", "storage:10", "mount:/mnt"]);
        // A new process on the same exporter address replaces the old one.
        p.announce(info("mount", "/mnt2", "h:4")).expect("kept");
        assert_eq!(p.list().len(), 4);
        assert!(p.list().iter().any(|i| i.id == "/mnt2"));
        assert!(p.announce(info("", "x", "h:5")).is_err());
        assert!(p.announce(info("s3", &"x".repeat(300), "h:5")).is_err());
    }
}
