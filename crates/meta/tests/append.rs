//! `AppendFile`: moving one file's chunk records to the end of another without copying, as the
//! S3 gateway completes multipart uploads.

mod common;

use common::*;
use meta::keys::prefix;
use wire::{EcScheme, ErrorCode, MetaOp, MetaReply, Placement, Timestamp, ROOT_INO};

const P: Placement = Placement { map_version: 1, pg: 0 };

fn chunks_of(reply: MetaReply) -> (wire::Attr, Vec<wire::ChunkRecord>) {
    match reply {
        MetaReply::Chunks { attr, chunks } => (attr, chunks),
        other => panic!("expected chunks, got {other:?}"),
    }
}

fn append(target: u64, parent: u64, name: &str) -> MetaOp {
    MetaOp::AppendFile { target, parent, name: name.into(), mtime: Timestamp { secs: 7, nanos: 0 } }
}

#[tokio::test]
async fn append_moves_chunk_records_and_removes_the_source() {
    let env = env().await;
    let svc = env.svc.as_ref();
    let dir = mkdir(svc, ROOT_INO, "upload").await;
    let target = create(svc, dir.ino, "assembly").await;
    let cb = u64::from(target.chunk_bytes);
    let ec: EcScheme = target.ec;
    let part1 = create(svc, dir.ino, "1").await;
    ok(svc, commit(part1.ino, vec![chunk(0, 10, cb as u32, ec, P), chunk(1, 11, cb as u32, ec, P)], 2 * cb)).await;
    let part2 = create(svc, dir.ino, "2").await;
    ok(svc, commit(part2.ino, vec![chunk(0, 20, cb as u32, ec, P), chunk(1, 21, 5, ec, P)], cb + 5)).await;
    let inodes_before = count_keys(svc, prefix::INODE).await;

    let a = attr_of(ok(svc, append(target.ino, dir.ino, "1")).await);
    assert_eq!((a.size, a.mtime.secs), (2 * cb, 7));
    let a = attr_of(ok(svc, append(target.ino, dir.ino, "2")).await);
    assert_eq!(a.size, 3 * cb + 5);
    assert!(a.data_version >= target.data_version + 2);

    let (_, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: target.ino, first: 0, count: 10 }).await);
    assert_eq!(
        chunks.iter().map(|c| (c.index, c.id, c.len)).collect::<Vec<_>>(),
        vec![(0, 10, cb as u32), (1, 11, cb as u32), (2, 20, cb as u32), (3, 21, 5)]
    );
    // The sources are gone, their chunks were moved rather than queued for deletion.
    assert_eq!(lookup(svc, dir.ino, "1").await.map_err(|e| e.code), Err(ErrorCode::NotFound));
    assert_eq!(lookup(svc, dir.ino, "2").await.map_err(|e| e.code), Err(ErrorCode::NotFound));
    assert_eq!(count_keys(svc, prefix::GC).await, 0);
    assert_eq!(count_keys(svc, prefix::INODE).await, inodes_before - 2);
    assert_eq!(count_keys(svc, prefix::CHUNK).await, 4);
}

#[tokio::test]
async fn append_refuses_misaligned_or_mismatched_files() {
    let env = env().await;
    let svc = env.svc.as_ref();
    let dir = mkdir(svc, ROOT_INO, "upload").await;
    let target = create(svc, dir.ino, "assembly").await;
    let cb = u64::from(target.chunk_bytes);
    let ec = target.ec;
    let short = create(svc, dir.ino, "short").await;
    ok(svc, commit(short.ino, vec![chunk(0, 30, 100, ec, P)], 100)).await;
    ok(svc, append(target.ino, dir.ino, "short")).await;
    // The target now ends inside a chunk: nothing more can be appended without copying.
    let next = create(svc, dir.ino, "next").await;
    ok(svc, commit(next.ino, vec![chunk(0, 31, 100, ec, P)], 100)).await;
    err(svc, append(target.ino, dir.ino, "next"), ErrorCode::Invalid).await;
    // A file cannot be appended to itself, and directories are refused.
    err(svc, append(next.ino, dir.ino, "next"), ErrorCode::Invalid).await;
    mkdir(svc, dir.ino, "sub").await;
    let empty = create(svc, dir.ino, "empty").await;
    err(svc, append(empty.ino, dir.ino, "sub"), ErrorCode::Invalid).await;
    err(svc, append(empty.ino, dir.ino, "missing"), ErrorCode::NotFound).await;
    // Different chunk sizes cannot be mixed.
    let other = create(svc, dir.ino, "other").await;
    ok(svc, MetaOp::SetLayout { ino: other.ino, ec, chunk_bytes: (cb / 2) as u32, check: wire::LayoutCheck::Copied })
        .await;
    err(svc, append(empty.ino, dir.ino, "other"), ErrorCode::Invalid).await;
}
