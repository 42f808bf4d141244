//! Namespace cases that run on every engine: each test file calls them with its own
//! environment (`env()` on redb in `namespace.rs`, `env_postgres()` in `postgres.rs`). Most rest
//! on the engine's conflict detection.

use super::*;
use meta::keys::prefix;
use std::collections::HashSet;
use std::sync::Arc;
use wire::{Attr, ErrorCode, FileKind, MetaCall, MetaOp, MetaReply, RenameMode, ROOT_INO};

fn rename(parent: u64, name: &str, new_parent: u64, new_name: &str, mode: RenameMode) -> MetaOp {
    MetaOp::Rename { parent, name: name.into(), new_parent, new_name: new_name.into(), mode }
}

fn entries(reply: MetaReply) -> (Vec<wire::DirEntry>, bool) {
    match reply {
        MetaReply::Entries { entries, more } => (entries, more),
        other => panic!("expected entries, got {other:?}"),
    }
}

pub async fn retried_request_ids_apply_once(env: &Env) {
    let svc = &env.svc;
    let id = rid();
    let op = MetaOp::Create { parent: ROOT_INO, name: "once".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
    let first = svc.call(MetaCall { request_id: id, op: op.clone() }).await;
    let second = svc.call(MetaCall { request_id: id, op: op.clone() }).await;
    assert!(first.is_ok());
    assert_eq!(first, second, "the retry gets the first reply, not Exists");
    assert_eq!(list(svc, ROOT_INO).await, vec!["once".to_string()]);
    // A different request id is a new request.
    let refused = MetaCall { request_id: rid(), op };
    assert_eq!(svc.call(refused.clone()).await.err().map(|e| e.code), Some(ErrorCode::Exists));
    // Unlink retried: the same answer twice, not NotFound.
    let unlink = MetaCall { request_id: rid(), op: MetaOp::Unlink { parent: ROOT_INO, name: "once".into() } };
    let first = svc.call(unlink.clone()).await;
    assert!(matches!(first, Ok(MetaReply::Removed { .. })), "{first:?}");
    assert_eq!(svc.call(unlink.clone()).await, first);
    // A failure is an answer too: the refused create, arriving again now that the name is free,
    // is not applied late.
    assert_eq!(svc.call(refused).await.err().map(|e| e.code), Some(ErrorCode::Exists));
    assert!(list(svc, ROOT_INO).await.is_empty());
    // Request id 0 is not tracked.
    let untracked = MetaCall {
        request_id: 0,
        op: MetaOp::Mkdir { parent: ROOT_INO, name: "m".into(), mode: 0o755, uid: 0, gid: 0 },
    };
    assert!(svc.call(untracked.clone()).await.is_ok());
    assert_eq!(svc.call(untracked).await.err().map(|e| e.code), Some(ErrorCode::Exists));
    // Reads record nothing.
    let records = count_keys(svc, prefix::REQUEST).await;
    ok(svc, MetaOp::GetAttr { ino: ROOT_INO }).await;
    assert_eq!(count_keys(svc, prefix::REQUEST).await, records);
    assert_eq!(records, 3, "the first Create, the refused one and the Unlink");
}

pub async fn concurrent_exclusive_creates_have_one_winner(env: &Env) {
    let svc = env.svc.clone();
    let d = mkdir(&svc, ROOT_INO, "d").await;
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let op = MetaOp::Create {
                parent: d.ino,
                name: "contended".into(),
                mode: 0o644,
                uid: task,
                gid: 0,
                exclusive: true,
            };
            call(&svc, op).await
        }));
    }
    let mut wins = 0;
    for task in tasks {
        match task.await.unwrap_or_else(|e| panic!("{e}")) {
            Ok(_) => wins += 1,
            Err(e) => assert_eq!(e.code, ErrorCode::Exists, "{}", e.message),
        }
    }
    assert_eq!(wins, 1);
    assert_eq!(list(&svc, d.ino).await, vec!["contended".to_string()]);
    assert_eq!(count_keys(&svc, prefix::INODE).await, 3, "root, d and one file");
}

pub async fn renames_are_atomic_to_readers(env: &Env) {
    let svc = env.svc.clone();
    let d = mkdir(&svc, ROOT_INO, "d").await;
    let f = create(&svc, d.ino, "a").await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (svc, done) = (svc.clone(), done.clone());
        tokio::spawn(async move {
            for i in 0..60 {
                let (from, to) = if i % 2 == 0 { ("a", "b") } else { ("b", "a") };
                ok(&svc, rename(d.ino, from, d.ino, to, RenameMode::Replace)).await;
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (svc, done) = (svc.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) || reads < 5 {
                // One ReadDir is one snapshot: exactly one of the two names.
                let MetaReply::Entries { entries, .. } =
                    ok(&svc, MetaOp::ReadDir { ino: d.ino, after: String::new(), limit: 10 }).await
                else {
                    panic!("entries")
                };
                assert_eq!(entries.len(), 1, "saw {:?}", entries.iter().map(|e| &e.name).collect::<Vec<_>>());
                assert_eq!(entries[0].attr.ino, f.ino);
                // Lookups see the file or nothing, never something else.
                for name in ["a", "b"] {
                    match lookup(&svc, d.ino, name).await {
                        Ok(reply) => assert_eq!(attr_of(reply).ino, f.ino),
                        Err(e) => assert_eq!(e.code, ErrorCode::NotFound, "{}", e.message),
                    }
                }
                reads += 1;
            }
        }));
    }
    renamer.await.unwrap_or_else(|e| panic!("{e}"));
    for reader in readers {
        reader.await.unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(list(&svc, d.ino).await, vec!["a".to_string()]);
}

pub async fn concurrent_crossing_moves_never_make_a_cycle(env: &Env) {
    let svc = env.svc.clone();
    for round in 0..8 {
        let x = mkdir(&svc, ROOT_INO, &format!("x{round}")).await;
        let y = mkdir(&svc, ROOT_INO, &format!("y{round}")).await;
        // Move x into y and y into x at the same time: at most one may succeed.
        let a = {
            let svc = svc.clone();
            let name = format!("x{round}");
            tokio::spawn(async move { call(&svc, rename(ROOT_INO, &name, y.ino, "x", RenameMode::Replace)).await })
        };
        let b = {
            let svc = svc.clone();
            let name = format!("y{round}");
            tokio::spawn(async move { call(&svc, rename(ROOT_INO, &name, x.ino, "y", RenameMode::Replace)).await })
        };
        let results = [a.await.unwrap_or_else(|e| panic!("{e}")), b.await.unwrap_or_else(|e| panic!("{e}"))];
        let wins = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(wins, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e.code, ErrorCode::Invalid | ErrorCode::NotFound), "{e:?}");
            }
        }
    }
    // Every directory is listed exactly once somewhere under the root: a cycle would cut some
    // of them off.
    let mut seen = HashSet::new();
    let mut stack = vec![ROOT_INO];
    while let Some(dir) = stack.pop() {
        let MetaReply::Entries { entries, .. } =
            ok(&svc, MetaOp::ReadDir { ino: dir, after: String::new(), limit: 100 }).await
        else {
            panic!("entries")
        };
        for e in entries {
            assert!(seen.insert(e.attr.ino), "inode {} reachable twice", e.attr.ino);
            stack.push(e.attr.ino);
        }
    }
    assert_eq!(seen.len(), 16);
}

/// Creates `entries` files in one directory (in batches of `per_batch` calls, names in another
/// byte order than creation order) and lists them back through paged ReadDir: every name
/// exactly once, in order. Returns the directory.
pub async fn readdir_pages_through_entries(env: &Env, entries: usize, per_batch: usize) -> Attr {
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "big").await;
    let started = std::time::Instant::now();
    for batch in 0..entries / per_batch {
        let calls = (0..per_batch)
            .map(|i| {
                let n = batch * per_batch + i;
                let name = format!("{:05}-f", (n * 7919) % entries);
                MetaCall {
                    request_id: 0,
                    op: MetaOp::Create { parent: d.ino, name, mode: 0o644, uid: 0, gid: 0, exclusive: true },
                }
            })
            .collect();
        let replies = svc.call_batch(calls).await.unwrap_or_else(|e| panic!("batch {batch}: {e}"));
        assert_eq!(replies.len(), per_batch);
    }
    let created = started.elapsed();
    let started = std::time::Instant::now();
    let names = list(svc, d.ino).await;
    eprintln!("{entries} entries: created in {created:?}, listed in {:?}", started.elapsed());
    let expected: Vec<String> = (0..entries).map(|n| format!("{n:05}-f")).collect();
    assert_eq!(names, expected, "every name exactly once, in order");
    d
}

/// Creates in many directories at once, from several tasks: all succeed (conflicts, including
/// PostgreSQL's false ones between neighbouring keys, are retried inside the service).
pub async fn concurrent_creates_in_many_directories_all_succeed(env: &Env) {
    let svc = env.svc.clone();
    const DIRS: usize = 4;
    const TASKS: usize = 8;
    const FILES: usize = 20;
    let mut dirs = Vec::new();
    for i in 0..DIRS {
        dirs.push(mkdir(&svc, ROOT_INO, &format!("d{i}")).await.ino);
    }
    let dirs = Arc::new(dirs);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (svc, dirs) = (svc.clone(), dirs.clone());
        tasks.push(tokio::spawn(async move {
            for file in 0..FILES {
                create(&svc, dirs[(task + file) % DIRS], &format!("t{task}-f{file}")).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("{e}"));
    }
    let mut total = 0;
    for &dir in dirs.iter() {
        total += list(&svc, dir).await.len();
    }
    assert_eq!(total, TASKS * FILES);
    assert_eq!(count_keys(&svc, prefix::INODE).await, 1 + DIRS + TASKS * FILES);
}

/// rmdir checks emptiness with a scan; a create racing it must either land before (rmdir then
/// fails NotEmpty) or fail because the directory is gone, never leave an entry in a removed
/// directory. This is the phantom case PostgreSQL's serializable mode alone does not catch.
pub async fn rmdir_racing_a_create_never_orphans_an_entry(env: &Env) {
    let svc = env.svc.clone();
    for round in 0..12 {
        let name = format!("r{round}");
        let dir = mkdir(&svc, ROOT_INO, &name).await;
        let remover = {
            let svc = svc.clone();
            let name = name.clone();
            tokio::spawn(async move { call(&svc, MetaOp::Rmdir { parent: ROOT_INO, name }).await })
        };
        let creator = {
            let svc = svc.clone();
            tokio::spawn(async move {
                let op = MetaOp::Create {
                    parent: dir.ino,
                    name: "child".into(),
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                    exclusive: true,
                };
                call(&svc, op).await
            })
        };
        let removed = remover.await.unwrap_or_else(|e| panic!("{e}"));
        let created = creator.await.unwrap_or_else(|e| panic!("{e}"));
        match (&removed, &created) {
            (Ok(_), Err(e)) => assert_eq!(e.code, ErrorCode::NotFound, "round {round}: {e:?}"),
            (Err(e), Ok(_)) => assert_eq!(e.code, ErrorCode::NotEmpty, "round {round}: {e:?}"),
            other => panic!("round {round}: rmdir and create both {other:?}"),
        }
    }
    // Every inode is reachable from the root: nothing was created in a removed directory.
    let mut reachable = HashSet::from([ROOT_INO]);
    let mut stack = vec![ROOT_INO];
    while let Some(dir) = stack.pop() {
        let (page, _) = entries(ok(&svc, MetaOp::ReadDir { ino: dir, after: String::new(), limit: 100 }).await);
        for entry in page {
            reachable.insert(entry.attr.ino);
            if entry.attr.kind == FileKind::Dir {
                stack.push(entry.attr.ino);
            }
        }
    }
    assert_eq!(count_keys(&svc, prefix::INODE).await, reachable.len(), "orphaned inodes");
}

pub async fn create_lookup_getattr_and_inheritance(env: &Env) {
    let svc = &env.svc;
    let dir = mkdir(svc, ROOT_INO, "d").await;
    let layout = MetaOp::SetLayout {
        ino: dir.ino,
        ec: EcScheme { k: 8, m: 3 },
        chunk_bytes: 1 << 20,
        // Namespace semantics only: no storage nodes here to check the scheme against.
        check: wire::LayoutCheck::Copied,
    };
    attr_of(ok(svc, layout).await);
    let file = create(svc, dir.ino, "f").await;
    assert_eq!((file.kind, file.mode, file.uid, file.gid, file.nlink, file.size), (FileKind::File, 0o644, 1, 2, 1, 0));
    assert_eq!((file.ec, file.chunk_bytes), (EcScheme { k: 8, m: 3 }, 1 << 20));
    let sub = mkdir(svc, dir.ino, "sub").await;
    assert_eq!(sub.ec, EcScheme { k: 8, m: 3 }, "directories inherit the layout too");
    let found = attr_of(lookup(svc, dir.ino, "f").await.unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(found, getattr(svc, file.ino).await);
    err(svc, MetaOp::Lookup { parent: dir.ino, name: "nope".into() }, ErrorCode::NotFound).await;
    err(svc, MetaOp::Lookup { parent: file.ino, name: "x".into() }, ErrorCode::NotDir).await;
    err(svc, MetaOp::Lookup { parent: 999_999, name: "x".into() }, ErrorCode::NotFound).await;
    err(svc, MetaOp::GetAttr { ino: 999_999 }, ErrorCode::NotFound).await;
    let mode = MetaOp::Create { parent: file.ino, name: "x".into(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
    err(svc, mode, ErrorCode::NotDir).await;
    let in_missing =
        MetaOp::Create { parent: 424_242, name: "x".into(), mode: 0o644, uid: 0, gid: 0, exclusive: false };
    err(svc, in_missing, ErrorCode::NotFound).await;
}

pub async fn rename_within_and_across_directories(env: &Env) {
    let svc = &env.svc;
    let a = mkdir(svc, ROOT_INO, "a").await;
    let b = mkdir(svc, ROOT_INO, "b").await;
    let f = create(svc, a.ino, "f").await;
    ok(svc, rename(a.ino, "f", a.ino, "g", RenameMode::Replace)).await;
    assert!(lookup(svc, a.ino, "f").await.is_err());
    assert_eq!(attr_of(lookup(svc, a.ino, "g").await.unwrap_or_else(|e| panic!("{e}"))).ino, f.ino);
    ok(svc, rename(a.ino, "g", b.ino, "f", RenameMode::NoReplace)).await;
    assert_eq!(list(svc, a.ino).await, Vec::<String>::new());
    assert_eq!(list(svc, b.ino).await, vec!["f".to_string()]);
    // Moving a directory moves its ".." link: the link counts follow.
    let sub = mkdir(svc, a.ino, "sub").await;
    assert_eq!(getattr(svc, a.ino).await.nlink, 3);
    ok(svc, rename(a.ino, "sub", b.ino, "sub", RenameMode::Replace)).await;
    assert_eq!((getattr(svc, a.ino).await.nlink, getattr(svc, b.ino).await.nlink), (2, 3));
    let up = attr_of(ok(svc, MetaOp::Resolve { path: "/b/sub/..".into() }).await);
    assert_eq!(up.ino, b.ino, "the moved directory's parent pointer follows it");
    assert!(getattr(svc, sub.ino).await.ctime >= sub.ctime);
    err(svc, rename(a.ino, "missing", b.ino, "x", RenameMode::Replace), ErrorCode::NotFound).await;
    err(svc, rename(a.ino, "x", 55_555, "x", RenameMode::Replace), ErrorCode::NotFound).await;
    err(svc, rename(b.ino, "f", f.ino, "x", RenameMode::Replace), ErrorCode::NotDir).await;
    err(svc, rename(b.ino, "f", b.ino, "..", RenameMode::Replace), ErrorCode::Invalid).await;
}
