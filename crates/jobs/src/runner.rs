//! The job runner of a metadata server: while this server holds the cluster manager's lease,
//! it runs the jobs (see the crate's text) and keeps their records.
//!
//! Repair: a pass over every chunk record runs when the placement map changed since the last
//! one, when scrub is due, or when an operator starts the repair job; anything else the repair
//! job needs is in the work queue (`meta::jobs`), which a queue pass reads when a chunk was
//! written degraded through this server, when a node came (back) up, when this server took the
//! lease, and every [`QUEUE_RETRY`] while the queue holds entries (chunks written degraded
//! through another metadata server; chunks that could not be repaired yet). The queue is
//! probed (one key) every [`QUEUE_PROBE`]; an idle, healthy cluster costs nothing else.
//!
//! Tier: started by its schedule or by an operator; one run at a time, in its own task (so
//! repair is never held up by it), taken up again from its record's cursor by whichever
//! server leads.

use crate::ingest;
use crate::repair::{MoveReport, Mover};
use crate::schedule::{Schedule, Window};
use crate::tier::{self, Impact};
use crate::tracker::JobTracker;
use crate::Throttle;
use client::Client;
use meta::store::now_ms;
use meta::MetaService;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wire::jobs::{INGEST, REPAIR, SCRUB, TIER};
use wire::{JobInfo, JobState, MetaOp, MetaReply, NodeState, WireError};

/// Pause between checks of whether a pass is needed.
pub const TICK: Duration = Duration::from_millis(500);
/// Pause before another pass when the last one left work and nothing changed since (nodes
/// still down).
pub const RETRY_AFTER: Duration = Duration::from_secs(3);
/// How often the work queue is probed for entries.
pub const QUEUE_PROBE: Duration = Duration::from_secs(2);
/// Longest time a queued chunk waits for a queue pass when nothing else triggers one.
pub const QUEUE_RETRY: Duration = Duration::from_secs(5);
/// How often the same kinds of failure are logged again while they last (a cause that keeps
/// every chunk from moving would otherwise fill the log, pass after pass).
pub const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the jobs take from the metadata server's configuration.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub bytes_per_s: u64,
    /// `None`: scrub disabled.
    pub scrub_interval: Option<Duration>,
    /// How long shards stay at their old place after a move.
    pub grace: Duration,
    pub tier_schedule: Schedule,
    pub tier_impact: Impact,
    /// Pause between ingest passes; `None`: only by hand.
    pub ingest_interval: Option<Duration>,
}

impl Settings {
    /// The settings `config` asks for; an error names a schedule or window that does not parse.
    pub fn of(config: &meta::MetaConfig) -> Result<Settings, String> {
        let tier_schedule = Schedule::parse(&config.tier_schedule).map_err(|e| format!("tier_schedule: {e}"))?;
        let window = match &config.impact_window {
            Some(text) => Some(Window::parse(text).map_err(|e| format!("impact_window: {e}"))?),
            None => None,
        };
        if config.tier_chunks_max == 0 {
            return Err("tier_chunks_max must be at least 1".into());
        }
        Ok(Settings {
            bytes_per_s: config.move_bytes_per_s,
            scrub_interval: (config.scrub_interval_ms > 0).then(|| Duration::from_millis(config.scrub_interval_ms)),
            grace: Duration::from_millis(config.gc_grace_ms),
            tier_schedule,
            tier_impact: Impact {
                bytes_per_s: config.tier_bytes_per_s,
                window_bytes_per_s: config.window_bytes_per_s,
                window,
                chunks_max: config.tier_chunks_max as usize,
            },
            ingest_interval: (config.ingest_interval_ms > 0).then(|| Duration::from_millis(config.ingest_interval_ms)),
        })
    }
}

/// Stops the runner (and the job runs it started) when dropped.
pub struct Guard(JoinHandle<()>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the runner for the metadata server `service`, reached at `addr`.
pub fn spawn(service: Arc<MetaService>, addr: String, settings: Settings) -> Guard {
    spawn_with(service, addr, settings, client::ClientOptions::default())
}

/// As [`spawn`], its client made with `options` (the simulator's network, for one).
pub fn spawn_with(
    service: Arc<MetaService>,
    addr: String,
    settings: Settings,
    options: client::ClientOptions,
) -> Guard {
    Guard(wire::world::spawn(run(service, addr, settings, options)))
}

/// Job records through this server's own service (no network round trip).
struct ServiceRecords(Arc<MetaService>);

impl tier::Records for ServiceRecords {
    fn report(
        &self,
        info: JobInfo,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<JobInfo, WireError>> + Send + '_>> {
        Box::pin(async move { report(&self.0, info).await })
    }
}

async fn call(service: &MetaService, op: MetaOp) -> Result<MetaReply, WireError> {
    service.call(wire::MetaCall { request_id: 0, op }).await
}

async fn report(service: &MetaService, info: JobInfo) -> Result<JobInfo, WireError> {
    match call(service, MetaOp::ReportJob { info }).await? {
        MetaReply::Jobs(mut jobs) if !jobs.is_empty() => Ok(jobs.swap_remove(0)),
        other => Err(client::unexpected(&other)),
    }
}

async fn list_jobs(service: &MetaService) -> Result<HashMap<String, JobInfo>, WireError> {
    match call(service, MetaOp::ListJobs).await? {
        MetaReply::Jobs(jobs) => Ok(jobs.into_iter().map(|j| (j.name.clone(), j)).collect()),
        other => Err(client::unexpected(&other)),
    }
}

/// Whether the work queue holds entries, read from its first key. A page of one that comes
/// back empty with more behind it met an entry settled meanwhile (a chunk rewritten whole,
/// dropped by the read): the entries after it still count. Taking that page for an empty queue
/// left chunks written narrow waiting for the next map change.
async fn queue_holds_entries(service: &MetaService) -> bool {
    matches!(
        call(service, MetaOp::ScanQueue { after: None, limit: 1 }).await,
        Ok(MetaReply::ChunkPage { chunks, more }) if !chunks.is_empty() || more
    )
}

/// What the runner keeps while this server leads.
struct Leading {
    /// The leadership term it belongs to (`MetaService::lease_term`).
    term: u64,
    client: Client,
    mover: Mover,
    /// Map version of the last pass that left nothing to do.
    clean_version: Option<u32>,
    /// Map version of the last full pass, clean or not.
    pass_version: Option<u32>,
    last_pass: Option<Instant>,
    last_scrub: Instant,
    last_up: Vec<wire::NodeId>,
    /// A queue pass is wanted (lease taken, degraded writes, a node up).
    queue_wanted: bool,
    last_queue_pass: Option<Instant>,
    last_probe: Option<Instant>,
    /// Whether the queue held entries at the last probe.
    queue_nonempty: bool,
    /// Draining nodes with nothing referenced left on them, to mark out once their old copies
    /// are deleted.
    drained: Vec<wire::NodeId>,
    /// The kinds of failure logged last, and when.
    failures_logged: Option<(Vec<wire::ErrorCode>, Instant)>,
    tracker: JobTracker,
    /// The operator runs of repair and scrub already served.
    served: HashMap<&'static str, u64>,
    /// The tiering run in progress here: its number and task.
    tier: Option<(u64, JoinHandle<()>)>,
    /// The ingest pass in progress here; it hands back the sources known not to derive.
    ingest: Option<JoinHandle<ingest::Failures>>,
    ingest_failures: ingest::Failures,
    last_ingest: Option<Instant>,
    /// The last ingest run a pass here served.
    ingest_served: Option<u64>,
}

impl Leading {
    fn stop_tasks(&mut self) {
        if let Some((_, task)) = self.tier.take() {
            task.abort();
        }
        if let Some(task) = self.ingest.take() {
            task.abort();
        }
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

async fn run(service: Arc<MetaService>, addr: String, settings: Settings, options: client::ClientOptions) {
    let mut leading: Option<Leading> = None;
    let mut paused = false;
    loop {
        tokio::time::sleep(TICK).await;
        if !service.is_leader() {
            // Only the lease holder runs jobs: the tiering run stops at once. What the runner
            // knows (which map its last pass covered) is kept in case the lease comes back
            // within the same term, so a lapse under load does not cost a pass over every chunk.
            if let Some(lead) = leading.as_mut() {
                lead.stop_tasks();
                if !paused {
                    tracing::info!("mover: paused (this metadata server's lease lapsed); jobs paused");
                    paused = true;
                }
            }
            continue;
        }
        if let Some(lead) = &leading {
            if lead.term != service.lease_term() {
                tracing::info!("mover: stopped (another metadata server led meanwhile); jobs start afresh");
                leading = None;
            } else if paused {
                tracing::info!("mover: resumed (the lease came back before any other server took it)");
            }
        }
        paused = false;
        if leading.is_none() {
            match Client::connect_with(&addr, options.clone()).await {
                Ok(client) => {
                    tracing::info!("mover: started (this metadata server leads); jobs started");
                    leading = Some(Leading {
                        term: service.lease_term(),
                        mover: Mover::new(client.clone(), settings.grace),
                        client,
                        clean_version: None,
                        pass_version: None,
                        last_pass: None,
                        last_scrub: Instant::now(),
                        last_up: Vec::new(),
                        queue_wanted: true,
                        last_queue_pass: None,
                        last_probe: None,
                        queue_nonempty: false,
                        drained: Vec::new(),
                        failures_logged: None,
                        tracker: JobTracker::default(),
                        served: HashMap::new(),
                        tier: None,
                        ingest: None,
                        ingest_failures: ingest::Failures::default(),
                        last_ingest: None,
                        ingest_served: None,
                    });
                }
                Err(e) => {
                    tracing::warn!("mover: cannot connect to {addr}: {e}");
                    continue;
                }
            }
        }
        let Some(lead) = leading.as_mut() else {
            continue;
        };
        lead.tick(&service, &settings).await;
    }
}

impl Leading {
    async fn tick(&mut self, service: &Arc<MetaService>, settings: &Settings) {
        let (version, up, nodes) = match call(service, MetaOp::Status { scan_chunks: false }).await {
            Ok(MetaReply::Status(s)) => {
                let up: Vec<wire::NodeId> = s.nodes.iter().filter(|n| n.state == NodeState::Up).map(|n| n.id).collect();
                let nodes: Vec<(wire::NodeId, NodeState)> = s.nodes.iter().map(|n| (n.id, n.state)).collect();
                (s.map_version, up, nodes)
            }
            Ok(_) | Err(_) => return,
        };
        let jobs = match list_jobs(service).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::debug!("jobs: cannot read the job records: {e}");
                return;
            }
        };
        self.tier_tick(service, settings, jobs.get(TIER)).await;
        self.ingest_tick(service, settings, jobs.get(INGEST)).await;

        // A node coming back up is the moment to repair what was written while it was away.
        if up.iter().any(|n| !self.last_up.contains(n)) {
            self.queue_wanted = true;
        }
        self.last_up = up;
        if service.take_degraded_written() {
            self.queue_wanted = true;
        }
        let repair = jobs.get(REPAIR).cloned().unwrap_or_default();
        let scrub_job = jobs.get(SCRUB).cloned().unwrap_or_default();
        if repair.state == JobState::Paused {
            return;
        }
        let asked = |job: &JobInfo, served: &HashMap<&'static str, u64>, name: &'static str| {
            job.state == JobState::Running && job.trigger == "operator" && served.get(name) != Some(&job.run)
        };
        let repair_asked = asked(&repair, &self.served, REPAIR);
        let scrub_asked = asked(&scrub_job, &self.served, SCRUB) && scrub_job.state != JobState::Paused;
        let scrub = scrub_asked || settings.scrub_interval.is_some_and(|every| self.last_scrub.elapsed() >= every);
        let since_pass = self.last_pass.map_or(Duration::MAX, |t| t.elapsed());
        let full = self.pass_version != Some(version) || repair_asked;
        let scrub = scrub && !full;
        if !full && self.last_probe.is_none_or(|t| t.elapsed() >= QUEUE_PROBE) {
            self.last_probe = Some(Instant::now());
            self.queue_nonempty = queue_holds_entries(service).await;
        }
        let since_queue = self.last_queue_pass.map_or(Duration::MAX, |t| t.elapsed());
        let queue = !full
            && (self.queue_wanted
                || (self.queue_nonempty && since_queue >= QUEUE_RETRY)
                || (self.clean_version != Some(version)
                    && self.queue_nonempty
                    && since_pass.min(since_queue) >= RETRY_AFTER));
        let queue = queue && !scrub;
        if !full && !queue && !scrub {
            // A run the runner started (a queue pass that left work) ends once nothing is
            // queued any more: the entries it left were settled or dropped meanwhile.
            if repair.state == JobState::Running && repair.trigger != "operator" && !self.queue_nonempty {
                let info = JobInfo { state: JobState::Done, finished_ms: now_ms(), ..repair.clone() };
                if let Err(e) = report_job(service, info).await {
                    tracing::debug!("jobs: cannot record the end of the repair run: {e}");
                }
            }
            self.idle(service, &nodes).await;
            return;
        }
        let started = Instant::now();
        let mut throttle = Throttle::new(settings.bytes_per_s);
        self.tracker.pass_starting();
        let result = if full {
            self.mover.pass(&mut throttle).await
        } else if scrub {
            self.mover.scrub(&mut throttle).await
        } else {
            self.mover.queue_pass(&mut throttle).await
        };
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                tracing::warn!("mover: pass failed: {e}");
                self.tracker.pass_failed();
                return;
            }
        };
        self.queue_wanted = false;
        self.tracker.pass_done(service, &report, started.elapsed(), scrub).await;
        if full {
            self.last_pass = Some(Instant::now());
            self.pass_version = Some(report.map_version);
        } else if !scrub {
            self.last_queue_pass = Some(Instant::now());
        }
        if scrub {
            self.last_scrub = Instant::now();
        }
        self.log_pass(&report, started.elapsed(), scrub, full);
        let left = report.chunks_left + report.chunks_failed > 0;
        if scrub {
            let reason = if scrub_asked { "operator" } else { "schedule" };
            self.record_pass(service, SCRUB, &scrub_job, &report, started.elapsed(), reason, false, scrub_asked).await;
            if left {
                self.queue_nonempty = true;
            }
            return;
        }
        self.queue_nonempty = left;
        if !left && self.pass_version == Some(report.map_version) {
            self.clean_version = Some(report.map_version);
            // Every chunk is on a map that leaves the draining nodes out: nothing the
            // namespace references is left on them (their old copies go after the grace).
            for node in &report.draining {
                if !self.drained.contains(node) {
                    self.drained.push(*node);
                }
            }
        } else if left {
            self.clean_version = None;
        }
        let reason = if repair_asked {
            "operator"
        } else if !full {
            "work queue"
        } else {
            "placement map change"
        };
        self.record_pass(service, REPAIR, &repair, &report, started.elapsed(), reason, left, repair_asked).await;
    }

    /// Records a pass in job `name`'s record: a run of its own when it did or left work (or an
    /// operator asked for it), running while work is left, done when none is.
    #[allow(clippy::too_many_arguments)]
    async fn record_pass(
        &mut self,
        service: &MetaService,
        name: &'static str,
        job: &JobInfo,
        report: &MoveReport,
        took: Duration,
        trigger: &str,
        left: bool,
        asked: bool,
    ) {
        let worked = report.chunks_moved + report.chunks_relabelled + report.chunks_recoded + report.shards_bad > 0;
        if !worked && !left && !asked && !job.state.active() {
            return;
        }
        let continuing = job.state.active();
        let mut info = if continuing {
            job.clone()
        } else {
            JobInfo {
                name: name.to_string(),
                run: job.run + 1,
                trigger: trigger.to_string(),
                started_ms: now_ms().saturating_sub(took.as_millis() as u64),
                schedule: job.schedule.clone(),
                last_scheduled_ms: job.last_scheduled_ms,
                ..JobInfo::default()
            }
        };
        let p = &mut info.progress;
        p.items_seen += if name == SCRUB { report.shards_checked } else { report.chunks_seen };
        p.problems_found += report.shards_bad;
        p.items_total = p.items_total.max(p.items_seen);
        p.chunks_moved += report.chunks_moved + report.chunks_recoded;
        p.bytes_moved += report.bytes_written;
        p.chunks_failed = report.chunks_failed;
        p.busy_ms += took.as_millis() as u64;
        info.state = if left { JobState::Running } else { JobState::Done };
        if !left {
            info.finished_ms = now_ms();
        }
        info.message = format!(
            "last pass: {} shards verified where they lie ({} bytes), {} chunks seen, {} moved, {} relabelled, {} re-encoded, {} bad shards rewritten, {} failed, {} left",
            report.shards_checked,
            report.bytes_checked,
            report.chunks_seen,
            report.chunks_moved,
            report.chunks_relabelled,
            report.chunks_recoded,
            report.shards_bad,
            report.chunks_failed,
            report.chunks_left
        );
        if asked {
            self.served.insert(name, job.run);
        }
        if let Err(e) = report_job(service, info).await {
            tracing::debug!("jobs: cannot record job {name}: {e}");
        }
    }

    fn log_pass(&mut self, report: &MoveReport, took: Duration, scrub: bool, full: bool) {
        let progress = report.chunks_moved + report.chunks_relabelled + report.chunks_recoded + report.shards_bad > 0;
        if progress || scrub {
            tracing::info!(
                "mover: {} to map {} in {:.1}s{}: {} chunks seen, {} moved ({} shards, {} bytes), {} relabelled, {} re-encoded, {} bad shards, {} failed, {} left",
                if full {
                    "pass"
                } else if scrub {
                    "scrub"
                } else {
                    "queue pass"
                },
                report.map_version,
                took.as_secs_f64(),
                if scrub { format!(" ({} shards verified where they lie)", report.shards_checked) } else { String::new() },
                report.chunks_seen,
                report.chunks_moved,
                report.shards_written,
                report.bytes_written,
                report.chunks_relabelled,
                report.chunks_recoded,
                report.shards_bad,
                report.chunks_failed,
                report.chunks_left
            );
        }
        let kinds: Vec<wire::ErrorCode> = report.failures.iter().map(|(code, _, _)| *code).collect();
        let repeat = self
            .failures_logged
            .as_ref()
            .is_some_and(|(logged, at)| *logged == kinds && at.elapsed() < FAILURE_LOG_INTERVAL);
        if !report.failures.is_empty() && !repeat {
            let summary: Vec<String> = report
                .failures
                .iter()
                .map(|(code, count, example)| format!("{count} chunk(s) {code:?}, e.g. {example}"))
                .collect();
            tracing::warn!(
                "mover: {} chunk(s) could not be moved in the pass to map {} (retried; this is logged again in {} s if it lasts): {}",
                report.chunks_failed,
                report.map_version,
                FAILURE_LOG_INTERVAL.as_secs(),
                summary.join("; ")
            );
            self.failures_logged = Some((kinds, Instant::now()));
        } else if report.failures.is_empty() {
            self.failures_logged = None;
        }
    }

    /// Between passes: old copies whose grace ended are deleted, and drained nodes go out.
    async fn idle(&mut self, service: &MetaService, nodes: &[(wire::NodeId, NodeState)]) {
        self.mover.delete_stale(false, nodes).await;
        // A drained node goes out once its old copies are deleted too (while it still serves),
        // and only if it was not undrained meanwhile.
        let mut still = Vec::new();
        for node in std::mem::take(&mut self.drained) {
            if !nodes.contains(&(node, NodeState::Draining)) {
                continue;
            }
            if self.mover.stale_on(node) > 0 {
                still.push(node);
                continue;
            }
            let op = MetaOp::SetNodeState { node, state: NodeState::Out, force: true };
            match call(service, op).await {
                Ok(_) => tracing::info!("mover: node {node} is drained; marked out"),
                Err(e) => {
                    tracing::warn!("mover: cannot mark drained node {node} out: {e}");
                    still.push(node);
                }
            }
        }
        self.drained = still;
    }

    /// The tiering job: its schedule, and its run (started here when the record says one is
    /// under way and no task of this server runs it).
    async fn tier_tick(&mut self, service: &Arc<MetaService>, settings: &Settings, job: Option<&JobInfo>) {
        let job = job.cloned().unwrap_or_else(|| JobInfo { name: TIER.into(), ..JobInfo::default() });
        let now = now_ms();
        let schedule = settings.tier_schedule;
        let (due, next) = schedule.due(job.last_scheduled_ms, now);
        let described = schedule.describe();
        if due && !job.state.active() {
            let info = JobInfo {
                name: TIER.into(),
                state: JobState::Running,
                run: job.run + 1,
                trigger: "schedule".into(),
                started_ms: now,
                schedule: described,
                next_run_ms: next,
                last_scheduled_ms: now,
                ..JobInfo::default()
            };
            tracing::info!("job tier: run {} started by its schedule ({})", info.run, schedule.describe());
            if let Err(e) = report_job(service, info).await {
                tracing::warn!("job tier: cannot start the scheduled run: {e}");
            }
            return;
        }
        if job.schedule != described
            || job.next_run_ms != next
            || (job.last_scheduled_ms == 0 && schedule != Schedule::Off)
        {
            // The schedule as configured here, and when it runs next; a schedule seen for the
            // first time counts from now.
            let mut info = job.clone();
            info.schedule = described;
            info.next_run_ms = next;
            if info.last_scheduled_ms == 0 {
                info.last_scheduled_ms = now;
            }
            if let Err(e) = report_job(service, info).await {
                tracing::debug!("job tier: cannot record its schedule: {e}");
            }
        }
        let running_here = self.tier.as_ref().filter(|(_, task)| !task.is_finished()).map(|(run, _)| *run);
        if job.state.active() && running_here != Some(job.run) {
            if let Some((_, task)) = self.tier.take() {
                task.abort();
            }
            tracing::info!(
                "job tier: run {} ({}) {} here{}",
                job.run,
                job.trigger,
                if job.progress.cursor.is_empty() { "starts" } else { "goes on" },
                if job.progress.cursor.is_empty() {
                    String::new()
                } else {
                    format!(" after {:?}", job.progress.cursor)
                }
            );
            let run = tier::Run::new(
                self.client.clone(),
                Arc::new(ServiceRecords(service.clone())),
                job.clone(),
                settings.tier_impact,
            );
            self.tier = Some((job.run, wire::world::spawn(run.run())));
        }
    }
}

impl Leading {
    /// Starts an ingest pass when one is due (its interval, with rules to serve) or asked
    /// for (an operator's start, or a run left running by a server that led before), unless
    /// one is under way here or the job is paused.
    async fn ingest_tick(&mut self, service: &Arc<MetaService>, settings: &Settings, job: Option<&JobInfo>) {
        if let Some(task) = self.ingest.take() {
            if !task.is_finished() {
                self.ingest = Some(task);
                return;
            }
            if let Ok(failures) = task.await {
                self.ingest_failures = failures;
            }
        }
        let job = job.cloned().unwrap_or_else(|| JobInfo { name: INGEST.into(), ..JobInfo::default() });
        if job.state == JobState::Paused {
            return;
        }
        // A run not served here: an operator's start, or a run a server that led before left.
        let asked = job.state == JobState::Running && self.ingest_served != Some(job.run);
        let due = settings.ingest_interval.is_some_and(|every| self.last_ingest.is_none_or(|t| t.elapsed() >= every));
        if !asked && !due {
            return;
        }
        self.last_ingest = Some(Instant::now());
        let rules = match ingest::rules_of(call(service, MetaOp::ListIngestRules).await) {
            Ok(rules) => rules,
            Err(e) => {
                tracing::debug!("job ingest: cannot read the ingest rules: {e}");
                return;
            }
        };
        if rules.is_empty() && !asked {
            return;
        }
        let schedule = settings
            .ingest_interval
            .map_or_else(|| "on demand".to_string(), |every| format!("every {}s", every.as_secs_f64()));
        let info = if asked {
            JobInfo { schedule, ..job }
        } else {
            JobInfo {
                name: INGEST.into(),
                run: job.run + 1,
                trigger: "new files".into(),
                schedule,
                last_scheduled_ms: job.last_scheduled_ms,
                ..JobInfo::default()
            }
        };
        self.ingest_served = Some(info.run);
        let pass = ingest::Pass::new(self.client.clone(), Arc::new(ServiceRecords(service.clone())), info, asked);
        let mut failures = std::mem::take(&mut self.ingest_failures);
        self.ingest = Some(wire::world::spawn(async move {
            pass.run(rules, &mut failures).await;
            failures
        }));
    }
}

async fn report_job(service: &MetaService, info: JobInfo) -> Result<JobInfo, WireError> {
    report(service, info).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{ChunkRecord, EcScheme, Placement, Timestamp, ROOT_INO};

    async fn service(dir: &tempfile::TempDir) -> Arc<MetaService> {
        let engine =
            kv_redb::RedbEngine::open(dir.path().join("meta.redb")).unwrap_or_else(|e| panic!("open redb: {e}"));
        MetaService::new(Arc::new(engine), meta::MetaOptions::default())
            .await
            .unwrap_or_else(|e| panic!("MetaService::new: {e}"))
    }

    async fn ok(service: &MetaService, op: MetaOp) -> MetaReply {
        call(service, op).await.unwrap_or_else(|e| panic!("call: {e}"))
    }

    async fn create(service: &MetaService, name: &str) -> wire::Ino {
        let op = MetaOp::Create { parent: ROOT_INO, name: name.into(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
        match ok(service, op).await {
            MetaReply::Entry { attr, .. } => attr.ino,
            other => panic!("Create: {other:?}"),
        }
    }

    async fn commit(service: &MetaService, ino: wire::Ino, id: u64, ec: EcScheme) {
        let len = 1 << 20;
        let rec = ChunkRecord {
            index: 0,
            id,
            len,
            ec,
            shard_len: ec.shard_len(len),
            placement: Placement { map_version: 1, pg: 0 },
            table_crcs: vec![0; ec.width()],
            missing: 0,
        };
        let op = MetaOp::CommitChunks {
            ino,
            chunks: vec![rec],
            size: u64::from(len),
            set_size: false,
            mtime: Timestamp::now(),
        };
        ok(service, op).await;
    }

    #[tokio::test]
    async fn a_settled_entry_at_the_head_of_the_queue_does_not_hide_the_rest() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let service = service(&dir).await;
        let (whole, narrow) = (EcScheme { k: 4, m: 2 }, EcScheme { k: 3, m: 2 });
        assert!(!queue_holds_entries(&service).await, "a new cluster's queue is empty");
        // File a is written narrow and then whole again: its entry is stale (first in the queue).
        // File b is written narrow: its entry is the one that counts.
        let (a, b) = (create(&service, "a").await, create(&service, "b").await);
        commit(&service, a, 1, narrow).await;
        commit(&service, b, 2, narrow).await;
        commit(&service, a, 3, whole).await;
        assert!(queue_holds_entries(&service).await, "b's narrow chunk is queued behind a's settled entry");
        assert!(queue_holds_entries(&service).await, "and still is once that entry is dropped");
        ok(&service, MetaOp::Dequeue { chunks: vec![(b, 0, 2)] }).await;
        assert!(!queue_holds_entries(&service).await, "nothing is left");
    }
}
