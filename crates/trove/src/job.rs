//! The job engine from the command line: `trove job start|pause|resume|cancel|status`. The
//! jobs (tier, repair, scrub, ingest) run in the metadata server holding the cluster manager's lease
//! (crate `jobs`); these commands change and read their records in the metadata service.

use crate::cmds::ClusterOpt;
use anyhow::{anyhow, Result};
use client::Client;
use wire::{JobAction, JobInfo, MetaOp, MetaReply};

#[derive(clap::Subcommand)]
pub enum JobCmd {
    /// Starts a job now: tier (files to the pools their policies name), repair (every chunk
    /// to the newest map and full redundancy), scrub (verify every shard), ingest (variants
    /// the ingest rules ask for).
    Start {
        /// tier, repair, scrub or ingest.
        name: String,
        /// Only the files below this directory (tier).
        #[arg(long)]
        path: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Pauses a running job at its next file or chunk; it keeps its place.
    Pause {
        /// tier, repair, scrub or ingest.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Resumes a paused job where it stopped.
    Resume {
        /// tier, repair, scrub or ingest.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Cancels a running or paused job.
    Cancel {
        /// tier, repair, scrub or ingest.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Every job: state, progress (files or chunks, bytes, rate, ETA), schedule.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl JobCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            JobCmd::Start { cluster, .. }
            | JobCmd::Pause { cluster, .. }
            | JobCmd::Resume { cluster, .. }
            | JobCmd::Cancel { cluster, .. }
            | JobCmd::Status { cluster, .. } => cluster,
        }
    }
}

fn jobs_of(reply: MetaReply) -> Result<Vec<JobInfo>> {
    match reply {
        MetaReply::Jobs(jobs) => Ok(jobs),
        other => Err(anyhow!("unexpected reply from the metadata service: {other:?}")),
    }
}

pub async fn run(cmd: JobCmd, client: &Client) -> Result<()> {
    let (name, action) = match cmd {
        JobCmd::Status { json, .. } => {
            let jobs = jobs_of(client.meta(MetaOp::ListJobs).await?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&jobs.iter().map(to_json).collect::<Vec<_>>())?);
            } else {
                print!("{}", table(&jobs));
            }
            return Ok(());
        }
        JobCmd::Start { name, path, .. } => (name, JobAction::Start { path }),
        JobCmd::Pause { name, .. } => (name, JobAction::Pause),
        JobCmd::Resume { name, .. } => (name, JobAction::Resume),
        JobCmd::Cancel { name, .. } => (name, JobAction::Cancel),
    };
    let jobs = jobs_of(client.meta(MetaOp::ControlJob { name, action }).await?)?;
    for job in &jobs {
        println!("job {}: {} (run {})", job.name, job.state.as_str(), job.run);
    }
    Ok(())
}

fn when(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    format!("{}Z", wire::utc_text(ms))
}

fn table(jobs: &[JobInfo]) -> String {
    let mut out = String::new();
    for j in jobs {
        let p = &j.progress;
        let unit = match j.name.as_str() {
            wire::jobs::TIER => "files",
            wire::jobs::SCRUB => "shards",
            wire::jobs::INGEST => "images",
            _ => "chunks",
        };
        out.push_str(&format!(
            "{}: {} (run {}, by {})\n",
            j.name,
            j.state.as_str(),
            j.run,
            if j.trigger.is_empty() { "-" } else { &j.trigger }
        ));
        if let Some(path) = &j.path {
            out.push_str(&format!("  path      {path}\n"));
        }
        out.push_str(&format!("  started   {}   finished {}\n", when(j.started_ms), when(j.finished_ms)));
        let total = if p.items_total > 0 { format!(" of ~{}", p.items_total) } else { String::new() };
        if j.name == wire::jobs::INGEST {
            out.push_str(&format!(
                "  progress  {} {unit} seen, {} variants written, {} bytes written, {} images could not be derived\n",
                p.items_seen, p.files_moved, p.bytes_moved, p.problems_found
            ));
        } else {
            out.push_str(&format!(
                "  progress  {} {unit} seen{total}, {} files moved, {} chunks moved, {} bytes moved, {} chunks failed, {} damaged shards found\n",
                p.items_seen, p.files_moved, p.chunks_moved, p.bytes_moved, p.chunks_failed, p.problems_found
            ));
        }
        let eta = j.eta_s().map_or("-".to_string(), |s| format!("{s} s"));
        out.push_str(&format!("  rate      {:.1} {unit}/s   ETA {eta}\n", j.rate()));
        if !p.cursor.is_empty() {
            out.push_str(&format!("  at        {}\n", p.cursor));
        }
        if !j.schedule.is_empty() {
            out.push_str(&format!("  schedule  {}   next {}\n", j.schedule, when(j.next_run_ms)));
        }
        if !j.message.is_empty() {
            out.push_str(&format!("  note      {}\n", j.message));
        }
    }
    out
}

fn to_json(j: &JobInfo) -> serde_json::Value {
    let p = &j.progress;
    serde_json::json!({
        "name": j.name,
        "state": j.state.as_str(),
        "run": j.run,
        "trigger": j.trigger,
        "path": j.path,
        "started_ms": j.started_ms,
        "finished_ms": j.finished_ms,
        "items_seen": p.items_seen,
        "items_total": p.items_total,
        "files_moved": p.files_moved,
        "chunks_moved": p.chunks_moved,
        "bytes_moved": p.bytes_moved,
        "chunks_failed": p.chunks_failed,
        "problems_found": p.problems_found,
        "cursor": p.cursor,
        "busy_ms": p.busy_ms,
        "rate_per_s": j.rate(),
        "eta_s": j.eta_s(),
        "schedule": j.schedule,
        "next_run_ms": j.next_run_ms,
        "message": j.message,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_print_as_utc_dates() {
        assert_eq!(super::when(0), "-");
        assert_eq!(super::when(1_790_000_000_000), "2026-09-21 14:13:20Z");
    }
}
