//! Directory tree quotas and the trash from the command line: `trove quota set|get|list|rm`
//! and `trove trash list|restore|purge`. The figures shown are the metadata service's own,
//! kept exactly by every namespace transaction (no tree is walked to answer).

use crate::cmds::{human_bytes, ClusterOpt};
use anyhow::{anyhow, bail, Context, Result};
use client::Client;
use wire::{QuotaInfo, QuotaLimits};

#[derive(clap::Subcommand)]
pub enum QuotaCmd {
    /// Sets (or changes) the quota of a directory tree. Sizes take K, M, G, T (powers of 1024);
    /// 0 or absent means no limit of that kind. A directory with content is counted once, now.
    Set {
        /// The directory, e.g. /projects/a.
        remote: String,
        /// Hard limit of logical bytes (the sizes of the files below): never exceeded.
        #[arg(long, value_parser = parse_size)]
        bytes: Option<u64>,
        /// Soft limit of bytes: may be exceeded for the grace period, then enforced as hard.
        #[arg(long, value_parser = parse_size)]
        bytes_soft: Option<u64>,
        /// Hard limit of inodes (files, directories, links below the directory).
        #[arg(long, value_parser = parse_size)]
        inodes: Option<u64>,
        /// Soft limit of inodes.
        #[arg(long, value_parser = parse_size)]
        inodes_soft: Option<u64>,
        /// How long soft limits may stay exceeded: e.g. 30s, 10m, 24h, 7d (default 7d).
        #[arg(long, value_parser = parse_duration_ms)]
        grace: Option<u64>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Shows a directory's quota and its usage.
    Get {
        /// The directory.
        remote: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists every quota with its usage.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes a directory's quota (its tree's usage stays counted by the quotas above it).
    Rm {
        /// The directory.
        remote: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

#[derive(clap::Subcommand)]
pub enum TrashCmd {
    /// Lists the deleted files kept in the trash (`trash_days` in the metadata configuration).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Puts a deleted file back where it was, or at --to.
    Restore {
        /// The id `trove trash list` shows.
        id: String,
        /// Restore to this path instead.
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Deletes files in the trash for good: one by id, or all of them.
    Purge {
        /// The id `trove trash list` shows.
        id: Option<String>,
        /// Every file in the trash.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl QuotaCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            QuotaCmd::Set { cluster, .. }
            | QuotaCmd::Get { cluster, .. }
            | QuotaCmd::List { cluster, .. }
            | QuotaCmd::Rm { cluster, .. } => cluster,
        }
    }
}

impl TrashCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            TrashCmd::List { cluster, .. } | TrashCmd::Restore { cluster, .. } | TrashCmd::Purge { cluster, .. } => {
                cluster
            }
        }
    }
}

/// The grace period of soft limits when none is given: a week, as Linux quotas default to.
pub const GRACE_MS_DEFAULT: u64 = 7 * 24 * 3600 * 1000;

/// Parses a count or a size: digits, optionally followed by K, M, G or T (powers of 1024, an
/// optional "i" and "B" accepted: 10G, 10GiB).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a size (e.g. 100, 10M, 2G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().trim_end_matches('B').trim_end_matches('I') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (K, M, G or T)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{text:?} is too large"))
}

/// Parses a duration into milliseconds: digits followed by ms, s, m, h or d (seconds if none).
pub fn parse_duration_ms(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 10m, 7d)"))?;
    let ms = match unit {
        "ms" => 1,
        "" | "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m, h or d)")),
    };
    n.checked_mul(ms).ok_or_else(|| format!("{text:?} is too long"))
}

fn limit(n: u64, bytes: bool) -> String {
    match (n, bytes) {
        (0, _) => "-".into(),
        (n, true) => human_bytes(n),
        (n, false) => n.to_string(),
    }
}

fn describe(q: &QuotaInfo) -> String {
    let l = q.limits;
    let mut text = format!(
        "{}: bytes {} ({}) of hard {} soft {}; inodes {} of hard {} soft {}; grace {} s",
        q.path,
        q.bytes_used,
        human_bytes(q.bytes_used),
        limit(l.bytes_hard, true),
        limit(l.bytes_soft, true),
        q.inodes_used,
        limit(l.inodes_hard, false),
        limit(l.inodes_soft, false),
        l.grace_ms / 1000
    );
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    for (what, since) in [("bytes", q.bytes_over_soft_since_ms), ("inodes", q.inodes_over_soft_since_ms)] {
        if since != 0 {
            let left = (since + l.grace_ms).saturating_sub(now) / 1000;
            text.push_str(&format!("; {what} over the soft limit, grace left {left} s"));
        }
    }
    text
}

fn json(q: &QuotaInfo) -> serde_json::Value {
    let l = q.limits;
    serde_json::json!({
        "path": q.path, "ino": q.ino,
        "bytes_used": q.bytes_used, "inodes_used": q.inodes_used,
        "bytes_hard": l.bytes_hard, "bytes_soft": l.bytes_soft,
        "inodes_hard": l.inodes_hard, "inodes_soft": l.inodes_soft, "grace_ms": l.grace_ms,
        "bytes_over_soft_since_ms": q.bytes_over_soft_since_ms,
        "inodes_over_soft_since_ms": q.inodes_over_soft_since_ms,
    })
}

pub async fn run(cmd: QuotaCmd, client: &Client) -> Result<()> {
    match cmd {
        QuotaCmd::Set { remote, bytes, bytes_soft, inodes, inodes_soft, grace, .. } => {
            let dir = client.resolve(&remote).await.map_err(|e| anyhow!("{remote}: {e}"))?;
            let limits = QuotaLimits {
                bytes_hard: bytes.unwrap_or(0),
                bytes_soft: bytes_soft.unwrap_or(0),
                inodes_hard: inodes.unwrap_or(0),
                inodes_soft: inodes_soft.unwrap_or(0),
                grace_ms: grace.unwrap_or(GRACE_MS_DEFAULT),
            };
            match client.set_quota(dir.ino, Some(limits)).await {
                Ok(Some(q)) => {
                    println!("{}", describe(&q));
                    Ok(())
                }
                Ok(None) => bail!("the metadata service answered no quota for {remote}"),
                Err(e) => bail!("cannot set the quota of {remote}: {e}"),
            }
        }
        QuotaCmd::Get { remote, json: as_json, .. } => {
            let dir = client.resolve(&remote).await.map_err(|e| anyhow!("{remote}: {e}"))?;
            match client.quota(dir.ino, false).await? {
                Some(q) if as_json => println!("{}", serde_json::to_string_pretty(&json(&q))?),
                Some(q) => println!("{}", describe(&q)),
                None => bail!("{remote} has no quota (trove quota list shows those there are)"),
            }
            Ok(())
        }
        QuotaCmd::List { json: as_json, .. } => {
            let all = client.quotas().await?;
            if as_json {
                let list: Vec<_> = all.iter().map(json).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if all.is_empty() {
                println!("no quotas");
            } else {
                for q in &all {
                    println!("{}", describe(q));
                }
            }
            Ok(())
        }
        QuotaCmd::Rm { remote, .. } => {
            let dir = client.resolve(&remote).await.map_err(|e| anyhow!("{remote}: {e}"))?;
            client.set_quota(dir.ino, None).await.with_context(|| format!("cannot remove the quota of {remote}"))?;
            println!("{remote}: quota removed");
            Ok(())
        }
    }
}

pub async fn run_trash(cmd: TrashCmd, client: &Client) -> Result<()> {
    match cmd {
        TrashCmd::List { json: as_json, .. } => {
            let all = client.trash().await?;
            if as_json {
                let list: Vec<_> = all
                    .iter()
                    .map(|t| serde_json::json!({"id": t.id, "path": t.path, "deleted_ms": t.deleted_ms, "size": t.size, "ino": t.ino}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if all.is_empty() {
                println!("the trash is empty");
            } else {
                println!("{:<40} {:>12}  {:<24} PATH", "ID", "SIZE", "DELETED");
                for t in &all {
                    let when = chrono_like(t.deleted_ms);
                    println!("{:<40} {:>12}  {:<24} {}", t.id, t.size, when, t.path);
                }
            }
            Ok(())
        }
        TrashCmd::Restore { id, to, .. } => {
            let attr =
                client.restore_trash(&id, to.as_deref()).await.with_context(|| format!("cannot restore {id}"))?;
            println!("restored {id} ({} bytes)", attr.size);
            Ok(())
        }
        TrashCmd::Purge { id, all, .. } => {
            let (id, before_ms) = match (id, all) {
                (Some(id), false) => (id, 0),
                (None, true) => (String::new(), u64::MAX),
                _ => bail!("name one id to purge, or --all"),
            };
            let mut purged = 0usize;
            loop {
                let gone = client.purge_trash(&id, before_ms).await.context("cannot purge the trash")?;
                purged += gone.len();
                if !id.is_empty() || gone.is_empty() {
                    break;
                }
            }
            println!("purged {purged} files from the trash");
            Ok(())
        }
    }
}

/// A wall-clock time in ms as UTC "YYYY-MM-DD HH:MM:SS".
pub fn chrono_like(ms: u64) -> String {
    wire::utc_text(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse() {
        assert_eq!(parse_size("100"), Ok(100));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("1X").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(parse_duration_ms("30s"), Ok(30_000));
        assert_eq!(parse_duration_ms("7d"), Ok(7 * 86_400_000));
        assert_eq!(parse_duration_ms("2"), Ok(2000));
        assert!(parse_duration_ms("3w").is_err());
        assert_eq!(chrono_like(0), "1970-01-01 00:00:00");
        assert_eq!(chrono_like(1_764_147_600_000), "2025-11-26 09:00:00");
    }
}
