//! Data movement and checking jobs as the cluster describes them: their names, states, the
//! actions an operator takes on them (`trove job start|pause|resume|cancel`) and the progress
//! the runner reports. The job engine (crate `jobs`) runs them in the metadata server that
//! holds the cluster manager's lease; the metadata service keeps each job's record, so that a
//! job survives a failover and resumes where it was.

use serde::{Deserialize, Serialize};

/// The jobs there are, by name.
pub const JOB_NAMES: [&str; 4] = [TIER, REPAIR, SCRUB, INGEST];
/// Moves files to the pool (and scheme) the file pool policies give them.
pub const TIER: &str = "tier";
/// Brings chunks to the newest placement map and to full redundancy: rebuild, drain,
/// rebalance, widening chunks written narrow, repairing shards written missing.
pub const REPAIR: &str = "repair";
/// Reads every shard of every chunk, verifies its checksums and rewrites damaged ones.
pub const SCRUB: &str = "scrub";
/// Derives the variants the ingest rules ask for (`wire::ingest`) of images that landed or
/// changed in their source trees.
pub const INGEST: &str = "ingest";

/// What an operator asks of a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobAction {
    /// Runs the job now (restarting it if it had finished or was cancelled), over `path`
    /// (a directory tree; `None`: everything).
    Start { path: Option<String> },
    /// Stops at the next file or chunk, keeping its place.
    Pause,
    /// Goes on from where a pause stopped it.
    Resume,
    /// Ends the run; its progress stays on record.
    Cancel,
}

/// Where a job's run stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Never run.
    #[default]
    Idle,
    Running,
    Paused,
    Cancelled,
    /// The run went through everything.
    Done,
    /// The run ended with an error (in `message`).
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Idle => "idle",
            JobState::Running => "running",
            JobState::Paused => "paused",
            JobState::Cancelled => "cancelled",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    /// Whether a run is under way (running or paused).
    pub fn active(self) -> bool {
        matches!(self, JobState::Running | JobState::Paused)
    }
}

/// What a run has done so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobProgress {
    /// Files (tier, ingest) or chunks (repair, scrub) looked at.
    pub items_seen: u64,
    /// An estimate of how many there are in all (0: unknown), for the ETA.
    pub items_total: u64,
    /// Files moved to another pool or scheme (tier); variants written (ingest).
    pub files_moved: u64,
    pub chunks_moved: u64,
    pub bytes_moved: u64,
    /// Chunks that could not be moved (retried by a later run).
    pub chunks_failed: u64,
    /// Damaged shards found (scrub) and rewritten; images that could not be derived (ingest).
    pub problems_found: u64,
    /// Where the run is: the last path it finished (tier), so that a run taken over by another
    /// metadata server, or resumed, goes on after it.
    pub cursor: String,
    /// Milliseconds the run has been running (not counting pauses).
    pub busy_ms: u64,
}

/// One job's record, as `MetaOp::ListJobs` answers it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    pub name: String,
    pub state: JobState,
    /// Number of the current (or last) run; every start makes a new one.
    pub run: u64,
    /// How the run was started: "schedule", "operator", or what triggered it ("map change",
    /// "degraded writes", ...).
    pub trigger: String,
    /// The tree the run covers (`None`: everything).
    pub path: Option<String>,
    pub started_ms: u64,
    /// When the run ended (0: it has not).
    pub finished_ms: u64,
    pub progress: JobProgress,
    /// The last error, or the run's summary once it ended.
    pub message: String,
    /// When it runs by itself ("daily 22:00", "every 60s", "off", "on demand"), and the
    /// next such time (0: none).
    pub schedule: String,
    pub next_run_ms: u64,
    /// When the last run by schedule started (so that a new lease holder does not run it again).
    pub last_scheduled_ms: u64,
}

impl JobInfo {
    /// Items per second over the run's busy time.
    pub fn rate(&self) -> f64 {
        if self.progress.busy_ms == 0 {
            return 0.0;
        }
        self.progress.items_seen as f64 * 1000.0 / self.progress.busy_ms as f64
    }

    /// Seconds left at the current rate, when the total is known.
    pub fn eta_s(&self) -> Option<u64> {
        let left = self.progress.items_total.checked_sub(self.progress.items_seen)?;
        let rate = self.rate();
        (self.state == JobState::Running && rate > 0.0 && self.progress.items_total > 0)
            .then(|| (left as f64 / rate).ceil() as u64)
    }
}

/// Checks a job name, naming the jobs there are.
pub fn check_job_name(name: &str) -> Result<(), String> {
    if JOB_NAMES.contains(&name) {
        return Ok(());
    }
    Err(format!("no job named {name:?}; the jobs are {}", JOB_NAMES.join(", ")))
}
