//! Ingest rules from the command line: `trove ingest add|list|rm`. A rule has the job engine's
//! ingest job derive, for every JPEG image that lands or changes below a source tree, a
//! variant resized to a short side (e.g. 224 or 512 pixels) at the same relative path below a
//! target tree (vScaler's "images resized as they are ingested"). The rules are stored by the
//! metadata service; their meaning is `wire::ingest`'s and the work `jobs::ingest`'s.

use crate::cmds::{shown, ClusterOpt};
use anyhow::{anyhow, bail, Result};
use client::Client;
use std::io::Write;
use wire::ingest::normalize_path;
use wire::{IngestRule, MetaOp, MetaReply};

#[derive(clap::Subcommand)]
pub enum IngestCmd {
    /// Adds a rule: every JPEG below --from gets a variant below --into, resized so that its
    /// short side is --size pixels (smaller images are copied as they are), written as images
    /// land or change (every `ingest_interval_ms`, or now with `trove job start ingest`).
    Add {
        /// The rule's name: ASCII letters, digits, '.', '_' and '-'.
        name: String,
        /// The source tree (absolute; it need not exist yet).
        #[arg(long)]
        from: String,
        /// The target tree, beside the source (absolute; made as needed).
        #[arg(long)]
        into: String,
        /// The short side of the variants in pixels.
        #[arg(long)]
        size: u32,
        /// JPEG quality of the variants, 1 to 100.
        #[arg(long, default_value_t = 90)]
        quality: u8,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the rules.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes a rule; the variants it wrote stay.
    Rm {
        /// The rule's name, as `trove ingest list` shows it.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl IngestCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            IngestCmd::Add { cluster, .. } | IngestCmd::List { cluster, .. } | IngestCmd::Rm { cluster, .. } => cluster,
        }
    }
}

fn describe(r: &IngestRule) -> String {
    format!("{} -> {}, short side {} px, quality {}", shown(&r.from), shown(&r.into), r.size_px, r.quality)
}

async fn rules(client: &Client, op: MetaOp) -> Result<Vec<IngestRule>, wire::WireError> {
    match client.meta(op).await? {
        MetaReply::IngestRules(rules) => Ok(rules),
        other => Err(client::unexpected(&other)),
    }
}

pub async fn run(cmd: IngestCmd, client: &Client) -> Result<()> {
    match cmd {
        IngestCmd::Add { name, from, into, size, quality, .. } => {
            let path = |what: &str, p: &str| {
                normalize_path(p).ok_or_else(|| anyhow!("--{what} {p:?}: give an absolute path without '.' or '..'"))
            };
            let rule = IngestRule {
                name: name.clone(),
                from: path("from", &from)?,
                into: path("into", &into)?,
                size_px: size,
                quality,
            };
            let summary = describe(&rule);
            match rules(client, MetaOp::AddIngestRule { rule }).await {
                Ok(_) => {
                    println!("ingest rule {name} added: {summary}");
                    Ok(())
                }
                Err(e) => bail!("cannot add ingest rule {name}: {e}"),
            }
        }
        IngestCmd::List { json, .. } => {
            let list = rules(client, MetaOp::ListIngestRules)
                .await
                .map_err(|e| anyhow!("cannot read the ingest rules: {e}"))?;
            if json {
                let list: Vec<serde_json::Value> = list
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "name": r.name, "from": r.from, "into": r.into, "size_px": r.size_px, "quality": r.quality,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            if list.is_empty() {
                println!("no ingest rules (add one with `trove ingest add`)");
                return Ok(());
            }
            let mut out = std::io::stdout().lock();
            for r in &list {
                writeln!(out, "{:<16} {}", shown(&r.name), describe(r))?;
            }
            Ok(())
        }
        IngestCmd::Rm { name, .. } => match rules(client, MetaOp::RemoveIngestRule { name: name.clone() }).await {
            Ok(_) => {
                println!("ingest rule {name} removed (the variants it wrote stay)");
                Ok(())
            }
            Err(e) => bail!("cannot remove ingest rule {name}: {e}"),
        },
    }
}
