//! File pool policies from the command line: `trove policy add|list|rm|test`. The policies are
//! stored, in order, by the metadata service; `test PATH` judges a file by each of them (as the
//! data movement that applies them does, through `wire::policy`) and says which one decides it
//! and why the ones before it do not.

use crate::cmds::{shown, ClusterOpt};
use anyhow::{anyhow, bail, Result};
use client::{Client, FileKind};
use std::io::Write;
use wire::policy::{first_match, FileFacts};
use wire::{EcScheme, FilePolicy, PolicyAction, PolicyRule, Timestamp};

#[derive(clap::Subcommand)]
pub enum PolicyCmd {
    /// Adds a file pool policy (last, or before another with --before). The first policy whose
    /// every condition holds decides a file's pool; a policy without conditions matches every
    /// file (the default policy, kept last).
    Add {
        /// The policy's name: ASCII letters, digits, '.', '_' and '-'.
        name: String,
        /// The pool the files it matches belong in.
        #[arg(long)]
        pool: String,
        /// The scheme they are coded in there (default: the pool's).
        #[arg(long)]
        ec: Option<EcScheme>,
        /// Matches absolute paths by a glob: '*' and '?' within a component, '**' across them.
        #[arg(long)]
        path: Option<String>,
        /// Matches file names (the last component) by a glob, e.g. '*.tar'.
        #[arg(long)]
        name_glob: Option<String>,
        /// Matches files of at least this size (bytes, or with K, M, G, T: powers of 1024).
        #[arg(long, value_parser = parse_bytes)]
        size_min: Option<u64>,
        /// Matches files of at most this size.
        #[arg(long, value_parser = parse_bytes)]
        size_max: Option<u64>,
        /// Matches files owned by this user id.
        #[arg(long)]
        uid: Option<u32>,
        /// Matches files last read at least this long ago (seconds, or with s, m, h, d).
        #[arg(long, value_parser = parse_age)]
        accessed_before: Option<u64>,
        /// Matches files read within this long (what brings files that are read again back).
        #[arg(long, value_parser = parse_age)]
        accessed_within: Option<u64>,
        /// Matches files last written at least this long ago.
        #[arg(long, value_parser = parse_age)]
        modified_before: Option<u64>,
        /// Matches files whose attributes last changed at least this long ago.
        #[arg(long, value_parser = parse_age)]
        changed_before: Option<u64>,
        /// Insert before the policy of this name instead of last.
        #[arg(long)]
        before: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the policies in the order they are tried.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes a policy.
    Rm {
        /// The policy's name, as `trove policy list` shows it.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Says which policy decides a file and why: each policy's conditions judged in order.
    Test {
        /// The file in the cluster.
        remote: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl PolicyCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            PolicyCmd::Add { cluster, .. }
            | PolicyCmd::List { cluster, .. }
            | PolicyCmd::Rm { cluster, .. }
            | PolicyCmd::Test { cluster, .. } => cluster,
        }
    }
}

/// Parses a size: a number of bytes, or one with K, M, G or T (powers of 1024).
fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => t.split_at(at),
        None => (t, ""),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a size (e.g. 4096, 64K, 10M, 2G)"))?;
    let shift = match unit.trim_end_matches(['B', 'b', 'i']) {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        other => return Err(format!("{text:?}: unknown size unit {other:?} (K, M, G or T)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("{text:?} is too large"))
}

/// Parses an age: seconds, or a number with s, m, h or d.
fn parse_age(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((at, _)) => t.split_at(at),
        None => (t, ""),
    };
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not an age (e.g. 30s, 15m, 2h, 7d)"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => return Err(format!("{text:?}: unknown unit {other:?} (s, m, h or d)")),
    };
    n.checked_mul(scale).ok_or_else(|| format!("{text:?} is too long"))
}

pub async fn run(cmd: PolicyCmd, client: &Client) -> Result<()> {
    match cmd {
        PolicyCmd::Add {
            name,
            pool,
            ec,
            path,
            name_glob,
            size_min,
            size_max,
            uid,
            accessed_before,
            accessed_within,
            modified_before,
            changed_before,
            before,
            ..
        } => {
            let rule = PolicyRule {
                path_glob: path,
                name_glob,
                size_bytes_min: size_min,
                size_bytes_max: size_max,
                uid,
                atime_age_s_min: accessed_before,
                atime_age_s_max: accessed_within,
                mtime_age_s_min: modified_before,
                ctime_age_s_min: changed_before,
            };
            let policy = FilePolicy { name: name.clone(), rule, action: PolicyAction { pool, ec } };
            let summary = describe(&policy);
            match client.meta(wire::MetaOp::AddPolicy { policy, before }).await {
                Ok(_) => {
                    println!("policy {name} added: {summary}");
                    Ok(())
                }
                Err(e) => bail!("cannot add policy {name}: {e}"),
            }
        }
        PolicyCmd::List { json, .. } => {
            let policies = client.policies().await.map_err(|e| anyhow!("cannot read the policies: {e}"))?;
            if json {
                let list: Vec<serde_json::Value> = policies.iter().map(policy_json).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            if policies.is_empty() {
                println!("no policies: files stay in their directory's pool (add one with `trove policy add`)");
                return Ok(());
            }
            let mut out = std::io::stdout().lock();
            for (i, p) in policies.iter().enumerate() {
                writeln!(out, "{:>3}  {:<16} {}", i + 1, shown(&p.name), describe(p))?;
            }
            Ok(())
        }
        PolicyCmd::Rm { name, .. } => match client.meta(wire::MetaOp::RemovePolicy { name: name.clone() }).await {
            Ok(_) => {
                println!("policy {name} removed");
                Ok(())
            }
            Err(e) => bail!("cannot remove policy {name}: {e}"),
        },
        PolicyCmd::Test { remote, json, .. } => test(client, &remote, json).await,
    }
}

/// A policy in words: its conditions and its action.
fn describe(p: &FilePolicy) -> String {
    let r = &p.rule;
    let mut conditions = Vec::new();
    if let Some(g) = &r.path_glob {
        conditions.push(format!("path {g}"));
    }
    if let Some(g) = &r.name_glob {
        conditions.push(format!("name {g}"));
    }
    if let Some(n) = r.size_bytes_min {
        conditions.push(format!("size >= {n}"));
    }
    if let Some(n) = r.size_bytes_max {
        conditions.push(format!("size <= {n}"));
    }
    if let Some(n) = r.uid {
        conditions.push(format!("uid {n}"));
    }
    if let Some(n) = r.atime_age_s_min {
        conditions.push(format!("not read for {n} s"));
    }
    if let Some(n) = r.atime_age_s_max {
        conditions.push(format!("read within {n} s"));
    }
    if let Some(n) = r.mtime_age_s_min {
        conditions.push(format!("not written for {n} s"));
    }
    if let Some(n) = r.ctime_age_s_min {
        conditions.push(format!("not changed for {n} s"));
    }
    let when = if conditions.is_empty() { "every file".to_string() } else { conditions.join(", ") };
    let ec = p.action.ec.map_or_else(|| "the pool's scheme".to_string(), |ec| ec.to_string());
    format!("{when} -> pool {} ({ec})", p.action.pool)
}

fn policy_json(p: &FilePolicy) -> serde_json::Value {
    let r = &p.rule;
    serde_json::json!({
        "name": p.name, "pool": p.action.pool, "ec": p.action.ec.map(|ec| ec.to_string()),
        "path": r.path_glob, "name_glob": r.name_glob, "size_min": r.size_bytes_min, "size_max": r.size_bytes_max,
        "uid": r.uid, "accessed_before_s": r.atime_age_s_min, "accessed_within_s": r.atime_age_s_max,
        "modified_before_s": r.mtime_age_s_min, "changed_before_s": r.ctime_age_s_min,
        "summary": describe(p),
    })
}

/// `trove policy test PATH`: each policy judged in order until one matches.
async fn test(client: &Client, remote: &str, json: bool) -> Result<()> {
    let attr = client.resolve(remote).await.map_err(|e| anyhow!("cannot stat {}: {e}", shown(remote)))?;
    if attr.kind != FileKind::File {
        bail!("{} is not a regular file: policies place files", shown(remote));
    }
    let policies = client.policies().await.map_err(|e| anyhow!("cannot read the policies: {e}"))?;
    let pools = client.pools().await.map_err(|e| anyhow!("cannot read the pools: {e}"))?;
    let pool_now = pools.iter().find(|p| p.id == attr.pool).map_or_else(|| attr.pool.to_string(), |p| p.name.clone());
    let path = if remote.starts_with('/') { remote.to_string() } else { format!("/{remote}") };
    let facts = FileFacts {
        path: &path,
        size: attr.size,
        uid: attr.uid,
        atime: attr.atime,
        mtime: attr.mtime,
        ctime: attr.ctime,
    };
    let now = Timestamp::now();
    let decided = first_match(&policies, &facts, now);
    let tried = decided.map_or(policies.len(), |(at, _)| at + 1);
    let judged: Vec<(&FilePolicy, Vec<wire::policy::Judgement>)> =
        policies[..tried].iter().map(|p| (p, p.judge(&facts, now))).collect();
    if json {
        let out = serde_json::json!({
            "path": path,
            "pool_now": pool_now,
            "policy": decided.map(|(_, p)| p.name.clone()),
            "pool": decided.map(|(_, p)| p.action.pool.clone()),
            "judged": judged.iter().map(|(p, js)| serde_json::json!({
                "policy": p.name,
                "matches": js.iter().all(|j| j.holds),
                "conditions": js.iter().map(|j| serde_json::json!({"holds": j.holds, "why": j.why})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    for (p, js) in &judged {
        let matches = js.iter().all(|j| j.holds);
        writeln!(out, "policy {}: {}", shown(&p.name), if matches { "matches" } else { "does not match" })?;
        if js.is_empty() {
            writeln!(out, "  no conditions: matches every file")?;
        }
        for j in js {
            writeln!(out, "  {} {}", if j.holds { "yes" } else { "no " }, j.why)?;
        }
    }
    match decided {
        Some((_, p)) if p.action.pool == pool_now => {
            writeln!(out, "{} belongs in pool {} by policy {}, and is there", shown(&path), p.action.pool, p.name)?
        }
        Some((_, p)) => writeln!(
            out,
            "{} belongs in pool {} by policy {} (it is in pool {pool_now} now)",
            shown(&path),
            p.action.pool,
            p.name
        )?,
        None => writeln!(out, "{} matches no policy: it stays in pool {pool_now}", shown(&path))?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_parse_with_units_and_refuse_others() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64K"), Ok(64 << 10));
        assert_eq!(parse_bytes("10MiB"), Ok(10 << 20));
        assert!(parse_bytes("10X").unwrap_err().contains("unknown size unit"));
        assert!(parse_bytes("big").unwrap_err().contains("not a size"));
        assert_eq!(parse_age("30"), Ok(30));
        assert_eq!(parse_age("15m"), Ok(900));
        assert_eq!(parse_age("7d"), Ok(7 * 86_400));
        assert!(parse_age("2w").unwrap_err().contains("unknown unit"));
    }
}
