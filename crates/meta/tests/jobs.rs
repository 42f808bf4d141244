//! The job engine's records in the metadata service: operator actions and the runner's reports
//! never undo each other (a seeded random interleaving checked against a model of the rules),
//! the work queue filled by the transactions that leave a chunk needing repair and emptied
//! only for the chunk it names, and access times kept the relatime way.

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use wire::{EcScheme, ErrorCode, JobAction, JobInfo, JobState, MetaOp, MetaReply, Placement, ROOT_INO};

async fn jobs(svc: &meta::MetaService) -> Vec<JobInfo> {
    match ok(svc, MetaOp::ListJobs).await {
        MetaReply::Jobs(jobs) => jobs,
        other => panic!("ListJobs: {other:?}"),
    }
}

async fn tier(svc: &meta::MetaService) -> JobInfo {
    jobs(svc).await.into_iter().find(|j| j.name == "tier").expect("tier")
}

#[tokio::test]
async fn operator_actions_and_runner_reports_follow_the_rules_in_any_order() {
    let env = env().await;
    let svc = &env.svc;
    assert_eq!(
        jobs(svc).await.iter().map(|j| j.name.as_str()).collect::<Vec<_>>(),
        ["tier", "repair", "scrub", "ingest"]
    );
    let e = err(svc, MetaOp::ControlJob { name: "nosuch".into(), action: JobAction::Pause }, ErrorCode::NotFound).await;
    assert!(e.contains("the jobs are tier, repair, scrub, ingest"), "{e}");

    // A model: (state, run). Random actions and reports, each checked against it.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let (mut state, mut run) = (JobState::Idle, 0u64);
    for step in 0..400 {
        let choice = rng.gen_range(0..6);
        if choice < 4 {
            let action = match choice {
                0 => JobAction::Start { path: None },
                1 => JobAction::Pause,
                2 => JobAction::Resume,
                _ => JobAction::Cancel,
            };
            let allowed = match &action {
                JobAction::Start { .. } => !state.active(),
                JobAction::Pause => state == JobState::Running,
                JobAction::Resume => state == JobState::Paused,
                JobAction::Cancel => state.active(),
            };
            let result = call(svc, MetaOp::ControlJob { name: "tier".into(), action: action.clone() }).await;
            assert_eq!(result.is_ok(), allowed, "step {step}: {action:?} in {state:?}: {result:?}");
            if allowed {
                (state, run) = match action {
                    JobAction::Start { .. } => (JobState::Running, run + 1),
                    JobAction::Pause => (JobState::Paused, run),
                    JobAction::Resume => (JobState::Running, run),
                    JobAction::Cancel => (JobState::Cancelled, run),
                };
            }
        } else {
            // The runner reports progress or the end of some run (often a stale one).
            let reported_run = run.saturating_sub(rng.gen_range(0..2)) + rng.gen_range(0..2);
            let end = choice == 5;
            let info = JobInfo {
                name: "tier".into(),
                run: reported_run,
                state: if end { JobState::Done } else { JobState::Running },
                ..JobInfo::default()
            };
            ok(svc, MetaOp::ReportJob { info }).await;
            if reported_run == run && state.active() && end {
                state = JobState::Done;
            } else if reported_run > run && !state.active() {
                (state, run) = (if end { JobState::Done } else { JobState::Running }, reported_run);
            }
        }
        let t = tier(svc).await;
        assert_eq!((t.state, t.run), (state, run), "step {step}");
    }
}

async fn queued(svc: &meta::MetaService) -> Vec<(u64, u64, u64)> {
    match ok(svc, MetaOp::ScanQueue { after: None, limit: 100 }).await {
        MetaReply::ChunkPage { chunks, .. } => chunks.into_iter().map(|c| (c.ino, c.rec.index, c.rec.id)).collect(),
        other => panic!("ScanQueue: {other:?}"),
    }
}

#[tokio::test]
async fn the_work_queue_holds_what_needs_repair_until_that_chunk_is_settled() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let placement = Placement { map_version: 1, pg: 0 };
    let ec = EcScheme { k: 4, m: 2 };
    // A whole chunk: not queued. One with a shard missing, one narrower: queued.
    let whole = chunk(0, 11, 4 << 20, ec, placement);
    let mut missing = chunk(1, 12, 4 << 20, ec, placement);
    missing.missing = 1 << 5;
    let narrow = chunk(2, 13, 4 << 20, EcScheme { k: 2, m: 2 }, placement);
    ok(svc, commit(f.ino, vec![whole, missing, narrow], 12 << 20)).await;
    assert_eq!(queued(svc).await, vec![(f.ino, 1, 12), (f.ino, 2, 13)]);
    // Dequeue names a chunk id: an entry for another id stays.
    ok(svc, MetaOp::Dequeue { chunks: vec![(f.ino, 1, 99), (f.ino, 2, 13)] }).await;
    assert_eq!(queued(svc).await, vec![(f.ino, 1, 12)]);
    // The chunk rewritten whole: its entry is dropped at the next read of the queue.
    ok(svc, commit(f.ino, vec![chunk(1, 14, 4 << 20, ec, placement)], 12 << 20)).await;
    assert_eq!(queued(svc).await, vec![]);
    // Queued by hand (what a repair pass left), for a chunk that exists.
    ok(svc, MetaOp::QueueChunks { chunks: vec![(f.ino, 0, 11)] }).await;
    assert_eq!(queued(svc).await, vec![(f.ino, 0, 11)]);
    ok(svc, MetaOp::Dequeue { chunks: vec![(f.ino, 0, 11)] }).await;

    // A whole chunk placed by an older map than the newest (allocated before nodes joined or
    // left, committed after): queued, so the repair job need not wait for the next map change.
    register(svc, 1, "127.0.0.1:1").await;
    register(svc, 2, "127.0.0.1:2").await;
    let newest = Placement { map_version: 2, pg: 0 };
    ok(svc, commit(f.ino, vec![chunk(3, 15, 4 << 20, ec, newest)], 16 << 20)).await;
    assert_eq!(queued(svc).await, vec![], "a chunk on the newest map is not queued");
    ok(svc, commit(f.ino, vec![chunk(4, 16, 4 << 20, ec, placement)], 20 << 20)).await;
    assert_eq!(queued(svc).await, vec![(f.ino, 4, 16)]);
}

#[tokio::test]
async fn reads_move_atimes_the_relatime_way() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let t0 = getattr(svc, f.ino).await;
    // Created: atime == mtime, so a read moves it.
    let later = wire::Timestamp { secs: t0.mtime.secs + 10, nanos: 0 };
    ok(svc, MetaOp::TouchAtimes { inos: vec![f.ino, 999_999], atime: later }).await;
    assert_eq!(getattr(svc, f.ino).await.atime, later);
    // Now later than mtime and ctime and less than a day old: a read leaves it.
    let again = wire::Timestamp { secs: later.secs + 60, nanos: 0 };
    ok(svc, MetaOp::TouchAtimes { inos: vec![f.ino], atime: again }).await;
    assert_eq!(getattr(svc, f.ino).await.atime, later);
    // A day later it moves again.
    let next_day = wire::Timestamp { secs: later.secs + 24 * 3600, nanos: 0 };
    ok(svc, MetaOp::TouchAtimes { inos: vec![f.ino], atime: next_day }).await;
    assert_eq!(getattr(svc, f.ino).await.atime, next_day);
}
