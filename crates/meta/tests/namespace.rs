//! Namespace operations of the metadata service against the redb engine: every operation with
//! its error cases, rename semantics and atomicity, idempotent retries, concurrency, truncation
//! and chunk GC queueing, and paging through a 100,000-entry directory.

mod common;

use common::*;
use meta::keys::{self, prefix};
use meta::MetaService;
use wire::{
    EcScheme, ErrorCode, FileKind, MetaCall, MetaOp, MetaReply, Placement, RenameMode, SetAttr, Timestamp, XattrMode,
    NAME_BYTES_MAX, ROOT_INO,
};

const P: Placement = Placement { map_version: 1, pg: 0 };

fn rename(parent: u64, name: &str, new_parent: u64, new_name: &str, mode: RenameMode) -> MetaOp {
    MetaOp::Rename { parent, name: name.into(), new_parent, new_name: new_name.into(), mode }
}

#[tokio::test]
async fn root_is_created_once() {
    let env = env().await;
    let root = getattr(&env.svc, ROOT_INO).await;
    assert_eq!((root.kind, root.mode, root.nlink), (FileKind::Dir, 0o755, 2));
    assert_eq!(root.ec, EcScheme::DEFAULT);
    mkdir(&env.svc, ROOT_INO, "kept").await;
    // A second service on the same engine (as another metadata server would) finds the root.
    let again = MetaService::new(env.svc.engine().clone(), test_options()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(getattr(&again, ROOT_INO).await.ino, ROOT_INO);
    assert!(lookup(&again, ROOT_INO, "kept").await.is_ok());
    // Both hand out distinct inode numbers (each reserved its own batch).
    let a = create(&env.svc, ROOT_INO, "from-a").await;
    let b = create(&again, ROOT_INO, "from-b").await;
    assert_ne!(a.ino, b.ino);
}

#[tokio::test]
async fn create_lookup_getattr_and_inheritance() {
    cases::create_lookup_getattr_and_inheritance(&env().await).await;
}

#[tokio::test]
async fn create_exclusive_or_open_existing() {
    let env = env().await;
    let svc = &env.svc;
    let first = create(svc, ROOT_INO, "f").await;
    let excl = MetaOp::Create { parent: ROOT_INO, name: "f".into(), mode: 0o600, uid: 9, gid: 9, exclusive: true };
    err(svc, excl, ErrorCode::Exists).await;
    let open = MetaOp::Create { parent: ROOT_INO, name: "f".into(), mode: 0o600, uid: 9, gid: 9, exclusive: false };
    let opened = attr_of(ok(svc, open).await);
    assert_eq!(opened, first, "opening an existing file returns it unchanged");
    mkdir(svc, ROOT_INO, "d").await;
    let on_dir = MetaOp::Create { parent: ROOT_INO, name: "d".into(), mode: 0o600, uid: 0, gid: 0, exclusive: false };
    err(svc, on_dir, ErrorCode::IsDir).await;
}

#[tokio::test]
async fn names_are_validated() {
    let env = env().await;
    let svc = &env.svc;
    for bad in ["", ".", "..", "a/b", "/", "nul\0byte"] {
        let op = MetaOp::Create { parent: ROOT_INO, name: bad.into(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
        err(svc, op, ErrorCode::Invalid).await;
        err(svc, MetaOp::Mkdir { parent: ROOT_INO, name: bad.into(), mode: 0o755, uid: 0, gid: 0 }, ErrorCode::Invalid)
            .await;
    }
    let longest = "n".repeat(NAME_BYTES_MAX);
    create(svc, ROOT_INO, &longest).await;
    let too_long = "n".repeat(NAME_BYTES_MAX + 1);
    let op = MetaOp::Create { parent: ROOT_INO, name: too_long.clone(), mode: 0o644, uid: 0, gid: 0, exclusive: true };
    err(svc, op, ErrorCode::NameTooLong).await;
    err(svc, MetaOp::Lookup { parent: ROOT_INO, name: too_long }, ErrorCode::NameTooLong).await;
    // Multi-byte UTF-8 counts bytes, not characters.
    let wide = "é".repeat(128);
    let op = MetaOp::Create { parent: ROOT_INO, name: wide, mode: 0o644, uid: 0, gid: 0, exclusive: true };
    err(svc, op, ErrorCode::NameTooLong).await;
}

#[tokio::test]
async fn mkdir_rmdir_keep_nlink_and_times() {
    let env = env().await;
    let svc = &env.svc;
    let before = getattr(svc, ROOT_INO).await;
    let a = mkdir(svc, ROOT_INO, "a").await;
    assert_eq!((a.nlink, a.mode), (2, 0o755));
    let root = getattr(svc, ROOT_INO).await;
    assert_eq!(root.nlink, 3, "a subdirectory adds one link to its parent");
    assert!(root.mtime >= before.mtime && root.ctime >= before.ctime);
    mkdir(svc, a.ino, "b").await;
    create(svc, a.ino, "file").await;
    assert_eq!(getattr(svc, a.ino).await.nlink, 3, "files do not count");
    err(svc, MetaOp::Mkdir { parent: ROOT_INO, name: "a".into(), mode: 0o755, uid: 0, gid: 0 }, ErrorCode::Exists)
        .await;
    err(svc, MetaOp::Rmdir { parent: ROOT_INO, name: "a".into() }, ErrorCode::NotEmpty).await;
    err(svc, MetaOp::Rmdir { parent: a.ino, name: "file".into() }, ErrorCode::NotDir).await;
    err(svc, MetaOp::Rmdir { parent: a.ino, name: "none".into() }, ErrorCode::NotFound).await;
    err(svc, MetaOp::Rmdir { parent: ROOT_INO, name: ".".into() }, ErrorCode::Invalid).await;
    ok(svc, MetaOp::Unlink { parent: a.ino, name: "file".into() }).await;
    ok(svc, MetaOp::Rmdir { parent: a.ino, name: "b".into() }).await;
    assert_eq!(getattr(svc, a.ino).await.nlink, 2);
    ok(svc, MetaOp::Rmdir { parent: ROOT_INO, name: "a".into() }).await;
    assert_eq!(getattr(svc, ROOT_INO).await.nlink, 2);
    err(svc, MetaOp::GetAttr { ino: a.ino }, ErrorCode::NotFound).await;
}

/// Creates, links and removes answer the directory's attributes after the change (clients cache
/// them instead of asking again): exactly what GetAttr returns right after.
#[tokio::test]
async fn changes_answer_the_directory_attributes_after_them() {
    let env = env().await;
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "d").await;
    let entry_dir = |reply: MetaReply| match reply {
        MetaReply::Entry { attr, dir } => (attr, dir),
        other => panic!("expected an Entry reply, got {other:?}"),
    };
    let removed_dir = |reply: MetaReply| match reply {
        MetaReply::Removed { ino, dir } => (ino, dir),
        other => panic!("expected a Removed reply, got {other:?}"),
    };
    let create_op = MetaOp::Create { parent: d.ino, name: "f".into(), mode: 0o644, uid: 1, gid: 2, exclusive: true };
    let (f, dir) = entry_dir(ok(svc, create_op).await);
    assert_eq!(dir, getattr(svc, d.ino).await, "after create");
    assert!(dir.mtime >= f.ctime && dir.ctime >= f.ctime);
    let mkdir_op = MetaOp::Mkdir { parent: d.ino, name: "s".into(), mode: 0o755, uid: 1, gid: 2 };
    let (s, dir) = entry_dir(ok(svc, mkdir_op).await);
    assert_eq!((dir.nlink, dir.clone()), (3, getattr(svc, d.ino).await), "after mkdir");
    let symlink_op = MetaOp::Symlink { parent: d.ino, name: "l".into(), target: "f".into(), uid: 1, gid: 2 };
    let (_, dir) = entry_dir(ok(svc, symlink_op).await);
    assert_eq!(dir, getattr(svc, d.ino).await, "after symlink");
    let link_op = MetaOp::Link { ino: f.ino, new_parent: d.ino, new_name: "g".into() };
    let (linked, dir) = entry_dir(ok(svc, link_op).await);
    assert_eq!((linked.nlink, dir.clone()), (2, getattr(svc, d.ino).await), "after link");
    let (ino, dir) = removed_dir(ok(svc, MetaOp::Unlink { parent: d.ino, name: "g".into() }).await);
    assert_eq!((ino, dir.clone()), (f.ino, getattr(svc, d.ino).await), "after unlink");
    let (ino, dir) = removed_dir(ok(svc, MetaOp::Rmdir { parent: d.ino, name: "s".into() }).await);
    assert_eq!((ino, dir.nlink, dir.clone()), (s.ino, 2, getattr(svc, d.ino).await), "after rmdir");
    // Opening an existing file with a non-exclusive create changes no directory.
    let reopen = MetaOp::Create { parent: d.ino, name: "f".into(), mode: 0o644, uid: 1, gid: 2, exclusive: false };
    assert_eq!(ok(svc, reopen).await, MetaReply::Attr(getattr(svc, f.ino).await));
}

#[tokio::test]
async fn mknod_makes_special_files() {
    let env = env().await;
    let svc = &env.svc;
    for (name, kind, rdev) in [
        ("fifo", FileKind::Fifo, 0),
        ("sock", FileKind::Socket, 0),
        ("tty", FileKind::CharDevice, (4 << 8) | 1),
        ("sda", FileKind::BlockDevice, 8 << 8),
    ] {
        let op = MetaOp::Mknod { parent: ROOT_INO, name: name.into(), kind, mode: 0o10640, rdev, uid: 3, gid: 4 };
        let attr = attr_of(ok(svc, op).await);
        assert_eq!((attr.kind, attr.rdev, attr.mode, attr.nlink), (kind, rdev, 0o640, 1), "{name}");
    }
    for kind in [FileKind::Dir, FileKind::Symlink] {
        let op = MetaOp::Mknod { parent: ROOT_INO, name: "bad".into(), kind, mode: 0o644, rdev: 0, uid: 0, gid: 0 };
        err(svc, op, ErrorCode::Invalid).await;
    }
    let dup = MetaOp::Mknod {
        parent: ROOT_INO,
        name: "fifo".into(),
        kind: FileKind::Fifo,
        mode: 0o644,
        rdev: 0,
        uid: 0,
        gid: 0,
    };
    err(svc, dup, ErrorCode::Exists).await;
}

#[tokio::test]
async fn symlinks() {
    let env = env().await;
    let svc = &env.svc;
    let op = MetaOp::Symlink { parent: ROOT_INO, name: "l".into(), target: "../some/where".into(), uid: 5, gid: 6 };
    let link = attr_of(ok(svc, op).await);
    assert_eq!((link.kind, link.size, link.mode), (FileKind::Symlink, 13, 0o777));
    assert_eq!(ok(svc, MetaOp::ReadLink { ino: link.ino }).await, MetaReply::Target("../some/where".into()));
    let file = create(svc, ROOT_INO, "f").await;
    err(svc, MetaOp::ReadLink { ino: file.ino }, ErrorCode::Invalid).await;
    let empty = MetaOp::Symlink { parent: ROOT_INO, name: "e".into(), target: String::new(), uid: 0, gid: 0 };
    err(svc, empty, ErrorCode::Invalid).await;
    let long = MetaOp::Symlink { parent: ROOT_INO, name: "e".into(), target: "x".repeat(4096), uid: 0, gid: 0 };
    err(svc, long, ErrorCode::NameTooLong).await;
    let taken = MetaOp::Symlink { parent: ROOT_INO, name: "f".into(), target: "x".into(), uid: 0, gid: 0 };
    err(svc, taken, ErrorCode::Exists).await;
    // Resolve does not follow symlinks: a path through one is not a directory path.
    err(svc, MetaOp::Resolve { path: "/l/x".into() }, ErrorCode::NotDir).await;
}

#[tokio::test]
async fn hard_links() {
    let env = env().await;
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "d").await;
    let f = create(svc, ROOT_INO, "f").await;
    let linked = attr_of(ok(svc, MetaOp::Link { ino: f.ino, new_parent: d.ino, new_name: "g".into() }).await);
    assert_eq!((linked.ino, linked.nlink), (f.ino, 2));
    assert_eq!(attr_of(lookup(svc, d.ino, "g").await.unwrap_or_else(|e| panic!("{e}"))).ino, f.ino);
    err(svc, MetaOp::Link { ino: f.ino, new_parent: d.ino, new_name: "g".into() }, ErrorCode::Exists).await;
    err(svc, MetaOp::Link { ino: d.ino, new_parent: ROOT_INO, new_name: "d2".into() }, ErrorCode::IsDir).await;
    err(svc, MetaOp::Link { ino: f.ino, new_parent: f.ino, new_name: "x".into() }, ErrorCode::NotDir).await;
    err(svc, MetaOp::Link { ino: 777_777, new_parent: d.ino, new_name: "x".into() }, ErrorCode::NotFound).await;
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    assert_eq!(getattr(svc, f.ino).await.nlink, 1, "the other link keeps the inode");
    ok(svc, MetaOp::Unlink { parent: d.ino, name: "g".into() }).await;
    err(svc, MetaOp::GetAttr { ino: f.ino }, ErrorCode::NotFound).await;
    err(svc, MetaOp::Unlink { parent: d.ino, name: "g".into() }, ErrorCode::NotFound).await;
    err(svc, MetaOp::Unlink { parent: ROOT_INO, name: "d".into() }, ErrorCode::IsDir).await;
}

#[tokio::test]
async fn resolve_paths() {
    let env = env().await;
    let svc = &env.svc;
    let a = mkdir(svc, ROOT_INO, "a").await;
    let b = mkdir(svc, a.ino, "b").await;
    let c = create(svc, b.ino, "c").await;
    for path in ["/a/b/c", "a/b/c", "//a//b/./c", "/a/b/../b/c", "/../a/b/c"] {
        let found = attr_of(ok(svc, MetaOp::Resolve { path: path.into() }).await);
        assert_eq!(found.ino, c.ino, "{path}");
    }
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: "/".into() }).await).ino, ROOT_INO);
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: "/a/b/..".into() }).await).ino, a.ino);
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: String::new() }).await).ino, ROOT_INO);
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: "a/b".into() }).await).ino, b.ino);
    err(svc, MetaOp::Resolve { path: "/a/x/c".into() }, ErrorCode::NotFound).await;
    err(svc, MetaOp::Resolve { path: "/a/b/c/d".into() }, ErrorCode::NotDir).await;
    err(svc, MetaOp::Resolve { path: format!("/{}", "x".repeat(300)) }, ErrorCode::NameTooLong).await;
    err(svc, MetaOp::Resolve { path: "/a".repeat(3000) }, ErrorCode::NameTooLong).await;
}

#[tokio::test]
async fn set_attr_changes_what_is_asked() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let t = Timestamp { secs: 1_000_000, nanos: 5 };
    let set = SetAttr {
        mode: Some(0o100600),
        uid: Some(7),
        gid: Some(8),
        atime: Some(t),
        mtime: Some(t),
        ..SetAttr::default()
    };
    let a = attr_of(ok(svc, MetaOp::SetAttr { ino: f.ino, set }).await);
    assert_eq!((a.mode, a.uid, a.gid, a.atime, a.mtime), (0o600, 7, 8, t, t));
    assert!(a.ctime >= f.ctime && a.ctime != t, "ctime moves to now unless given");
    assert_eq!(a.size, 0);
    let explicit = SetAttr { ctime: Some(t), ..SetAttr::default() };
    assert_eq!(attr_of(ok(svc, MetaOp::SetAttr { ino: f.ino, set: explicit }).await).ctime, t);
    let grow = SetAttr { size: Some(10_000), ..SetAttr::default() };
    let grown = attr_of(ok(svc, MetaOp::SetAttr { ino: f.ino, set: grow }).await);
    assert_eq!(grown.size, 10_000);
    assert_eq!(grown.data_version, a.data_version + 1);
    let d = mkdir(svc, ROOT_INO, "d").await;
    let size = SetAttr { size: Some(0), ..SetAttr::default() };
    err(svc, MetaOp::SetAttr { ino: d.ino, set: size.clone() }, ErrorCode::IsDir).await;
    let l = attr_of(
        ok(svc, MetaOp::Symlink { parent: ROOT_INO, name: "l".into(), target: "f".into(), uid: 0, gid: 0 }).await,
    );
    err(svc, MetaOp::SetAttr { ino: l.ino, set: size.clone() }, ErrorCode::Invalid).await;
    err(svc, MetaOp::SetAttr { ino: 31_337, set: size }, ErrorCode::NotFound).await;
    // Directories take mode changes.
    let dm = attr_of(
        ok(svc, MetaOp::SetAttr { ino: d.ino, set: SetAttr { mode: Some(0o1777), ..SetAttr::default() } }).await,
    );
    assert_eq!(dm.mode, 0o1777);
}

#[tokio::test]
async fn rename_within_and_across_directories() {
    cases::rename_within_and_across_directories(&env().await).await;
}

#[tokio::test]
async fn rename_replacing_things() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let g = create(svc, ROOT_INO, "g").await;
    let d = mkdir(svc, ROOT_INO, "d").await;
    let e = mkdir(svc, ROOT_INO, "e").await;
    create(svc, e.ino, "inside").await;
    let empty = mkdir(svc, ROOT_INO, "empty").await;
    err(svc, rename(ROOT_INO, "f", ROOT_INO, "g", RenameMode::NoReplace), ErrorCode::Exists).await;
    err(svc, rename(ROOT_INO, "d", ROOT_INO, "f", RenameMode::Replace), ErrorCode::NotDir).await;
    err(svc, rename(ROOT_INO, "f", ROOT_INO, "d", RenameMode::Replace), ErrorCode::IsDir).await;
    err(svc, rename(ROOT_INO, "d", ROOT_INO, "e", RenameMode::Replace), ErrorCode::NotEmpty).await;
    // A file replaces a file: the replaced inode (its only link) is deleted.
    ok(svc, rename(ROOT_INO, "f", ROOT_INO, "g", RenameMode::Replace)).await;
    err(svc, MetaOp::GetAttr { ino: g.ino }, ErrorCode::NotFound).await;
    assert_eq!(attr_of(lookup(svc, ROOT_INO, "g").await.unwrap_or_else(|e| panic!("{e}"))).ino, f.ino);
    // A directory replaces an empty directory: the root loses one subdirectory link.
    let nlink = getattr(svc, ROOT_INO).await.nlink;
    ok(svc, rename(ROOT_INO, "d", ROOT_INO, "empty", RenameMode::Replace)).await;
    err(svc, MetaOp::GetAttr { ino: empty.ino }, ErrorCode::NotFound).await;
    assert_eq!(getattr(svc, ROOT_INO).await.nlink, nlink - 1);
    assert_eq!(attr_of(lookup(svc, ROOT_INO, "empty").await.unwrap_or_else(|e| panic!("{e}"))).ino, d.ino);
    // A replaced file with another link survives with one link less.
    let h = create(svc, ROOT_INO, "h").await;
    ok(svc, MetaOp::Link { ino: h.ino, new_parent: e.ino, new_name: "h2".into() }).await;
    ok(svc, rename(ROOT_INO, "g", ROOT_INO, "h", RenameMode::Replace)).await;
    assert_eq!(getattr(svc, h.ino).await.nlink, 1);
}

#[tokio::test]
async fn rename_onto_itself_is_a_no_op() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    ok(svc, rename(ROOT_INO, "f", ROOT_INO, "f", RenameMode::Replace)).await;
    ok(svc, rename(ROOT_INO, "f", ROOT_INO, "f", RenameMode::Exchange)).await;
    err(svc, rename(ROOT_INO, "f", ROOT_INO, "f", RenameMode::NoReplace), ErrorCode::Exists).await;
    assert_eq!(getattr(svc, f.ino).await.nlink, 1);
    // Two links of one inode: POSIX rename does nothing, both names stay.
    ok(svc, MetaOp::Link { ino: f.ino, new_parent: ROOT_INO, new_name: "f2".into() }).await;
    ok(svc, rename(ROOT_INO, "f", ROOT_INO, "f2", RenameMode::Replace)).await;
    assert!(lookup(svc, ROOT_INO, "f").await.is_ok() && lookup(svc, ROOT_INO, "f2").await.is_ok());
    assert_eq!(getattr(svc, f.ino).await.nlink, 2);
}

#[tokio::test]
async fn rename_exchange() {
    let env = env().await;
    let svc = &env.svc;
    let a = mkdir(svc, ROOT_INO, "a").await;
    let b = mkdir(svc, ROOT_INO, "b").await;
    let file = create(svc, a.ino, "x").await;
    let dir = mkdir(svc, b.ino, "y").await;
    assert_eq!((getattr(svc, a.ino).await.nlink, getattr(svc, b.ino).await.nlink), (2, 3));
    ok(svc, rename(a.ino, "x", b.ino, "y", RenameMode::Exchange)).await;
    assert_eq!(attr_of(lookup(svc, a.ino, "x").await.unwrap_or_else(|e| panic!("{e}"))).ino, dir.ino);
    assert_eq!(attr_of(lookup(svc, b.ino, "y").await.unwrap_or_else(|e| panic!("{e}"))).ino, file.ino);
    assert_eq!((getattr(svc, a.ino).await.nlink, getattr(svc, b.ino).await.nlink), (3, 2));
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: "/a/x/..".into() }).await).ino, a.ino);
    err(svc, rename(a.ino, "x", b.ino, "none", RenameMode::Exchange), ErrorCode::NotFound).await;
    // Exchanging a directory with its own child would put it under itself.
    let inner = mkdir(svc, dir.ino, "inner").await;
    err(svc, rename(a.ino, "x", dir.ino, "inner", RenameMode::Exchange), ErrorCode::Invalid).await;
    assert_eq!(getattr(svc, inner.ino).await.nlink, 2);
}

#[tokio::test]
async fn directory_cannot_move_under_itself() {
    let env = env().await;
    let svc = &env.svc;
    let a = mkdir(svc, ROOT_INO, "a").await;
    let b = mkdir(svc, a.ino, "b").await;
    let c = mkdir(svc, b.ino, "c").await;
    err(svc, rename(ROOT_INO, "a", a.ino, "self", RenameMode::Replace), ErrorCode::Invalid).await;
    err(svc, rename(ROOT_INO, "a", c.ino, "a", RenameMode::Replace), ErrorCode::Invalid).await;
    err(svc, rename(a.ino, "b", c.ino, "b", RenameMode::NoReplace), ErrorCode::Invalid).await;
    // Moving it up or sideways is fine.
    ok(svc, rename(b.ino, "c", ROOT_INO, "c", RenameMode::Replace)).await;
    ok(svc, rename(ROOT_INO, "a", c.ino, "a", RenameMode::Replace)).await;
    assert_eq!(attr_of(ok(svc, MetaOp::Resolve { path: "/c/a/b".into() }).await).ino, b.ino);
}

#[tokio::test]
async fn readdir_pages_with_attrs() {
    let env = env().await;
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "d").await;
    let mut names: Vec<String> = (0..25).map(|i| format!("entry-{i:03}")).collect();
    for name in &names {
        create(svc, d.ino, name).await;
    }
    mkdir(svc, d.ino, "a-subdir").await;
    names.push("a-subdir".into());
    names.sort();
    let MetaReply::Entries { entries, more } =
        ok(svc, MetaOp::ReadDir { ino: d.ino, after: String::new(), limit: 10 }).await
    else {
        panic!("not entries")
    };
    assert!(more);
    assert_eq!(entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>(), names[..10]);
    assert_eq!(entries[0].attr.kind, FileKind::Dir);
    assert_eq!(entries[1].attr.kind, FileKind::File);
    let MetaReply::Entries { entries, more } =
        ok(svc, MetaOp::ReadDir { ino: d.ino, after: names[20].clone(), limit: 10 }).await
    else {
        panic!("not entries")
    };
    assert!(!more);
    assert_eq!(entries.iter().map(|e| e.name.clone()).collect::<Vec<_>>(), names[21..]);
    // `after` need not name an existing entry.
    let MetaReply::Entries { entries, .. } =
        ok(svc, MetaOp::ReadDir { ino: d.ino, after: "entry-0105".into(), limit: 2 }).await
    else {
        panic!("not entries")
    };
    assert_eq!(entries[0].name, "entry-011");
    assert_eq!(list(svc, d.ino).await, names);
    let f = create(svc, ROOT_INO, "f").await;
    err(svc, MetaOp::ReadDir { ino: f.ino, after: String::new(), limit: 10 }, ErrorCode::NotDir).await;
    err(svc, MetaOp::ReadDir { ino: 8_888_888, after: String::new(), limit: 10 }, ErrorCode::NotFound).await;
}

#[tokio::test]
async fn xattrs() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    let set = |name: &str, value: &[u8], mode| MetaOp::SetXattr {
        ino: f.ino,
        name: name.into(),
        value: value.to_vec(),
        mode,
    };
    ok(svc, set("user.a", b"1", XattrMode::Upsert)).await;
    ok(svc, set("user.b", b"", XattrMode::Create)).await;
    err(svc, set("user.a", b"2", XattrMode::Create), ErrorCode::Exists).await;
    err(svc, set("user.c", b"2", XattrMode::Replace), ErrorCode::NoAttr).await;
    ok(svc, set("user.a", b"3", XattrMode::Replace)).await;
    assert_eq!(ok(svc, MetaOp::GetXattr { ino: f.ino, name: "user.a".into() }).await, MetaReply::Value(b"3".to_vec()));
    assert_eq!(ok(svc, MetaOp::GetXattr { ino: f.ino, name: "user.b".into() }).await, MetaReply::Value(Vec::new()));
    err(svc, MetaOp::GetXattr { ino: f.ino, name: "user.zz".into() }, ErrorCode::NoAttr).await;
    assert_eq!(
        ok(svc, MetaOp::ListXattr { ino: f.ino }).await,
        MetaReply::Names(vec!["user.a".into(), "user.b".into()])
    );
    err(svc, set("user.big", &vec![0; wire::XATTR_VALUE_BYTES_MAX + 1], XattrMode::Upsert), ErrorCode::TooLarge).await;
    ok(svc, set("user.max", &vec![7; wire::XATTR_VALUE_BYTES_MAX], XattrMode::Upsert)).await;
    err(svc, set("", b"x", XattrMode::Upsert), ErrorCode::Invalid).await;
    err(svc, set(&"n".repeat(256), b"x", XattrMode::Upsert), ErrorCode::NameTooLong).await;
    ok(svc, MetaOp::RemoveXattr { ino: f.ino, name: "user.a".into() }).await;
    err(svc, MetaOp::RemoveXattr { ino: f.ino, name: "user.a".into() }, ErrorCode::NoAttr).await;
    err(svc, MetaOp::ListXattr { ino: 5_555_555 }, ErrorCode::NotFound).await;
    // Deleting the inode deletes its attributes.
    assert_eq!(count_keys(svc, prefix::XATTR).await, 2);
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    assert_eq!(count_keys(svc, prefix::XATTR).await, 0);
    // Directories have them too; rmdir removes them.
    let d = mkdir(svc, ROOT_INO, "d").await;
    ok(svc, MetaOp::SetXattr { ino: d.ino, name: "user.d".into(), value: b"v".to_vec(), mode: XattrMode::Upsert })
        .await;
    ok(svc, MetaOp::Rmdir { parent: ROOT_INO, name: "d".into() }).await;
    assert_eq!(count_keys(svc, prefix::XATTR).await, 0);
}

#[tokio::test]
async fn set_layout_rules() {
    let env = env().await;
    let svc = &env.svc;
    let d = mkdir(svc, ROOT_INO, "d").await;
    err(
        svc,
        MetaOp::SetLayout {
            ino: d.ino,
            ec: EcScheme { k: 0, m: 1 },
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
    err(
        svc,
        MetaOp::SetLayout {
            ino: d.ino,
            ec: EcScheme { k: 30, m: 3 },
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
    err(
        svc,
        MetaOp::SetLayout {
            ino: d.ino,
            ec: EcScheme::DEFAULT,
            chunk_bytes: 1000,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
    err(
        svc,
        MetaOp::SetLayout {
            ino: d.ino,
            ec: EcScheme::DEFAULT,
            chunk_bytes: 1 << 30,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
    let replicated = EcScheme { k: 1, m: 2 };
    ok(
        svc,
        MetaOp::SetLayout {
            ino: d.ino,
            ec: replicated,
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
    )
    .await;
    let f = create(svc, d.ino, "f").await;
    assert_eq!(f.ec, replicated);
    // An empty file may still change; one with data may not.
    let changed = attr_of(
        ok(
            svc,
            MetaOp::SetLayout {
                ino: f.ino,
                ec: EcScheme::DEFAULT,
                chunk_bytes: 1 << 16,
                // Namespace semantics only: no storage nodes here to check the scheme against.
                check: wire::LayoutCheck::Copied,
            },
        )
        .await,
    );
    assert_eq!((changed.ec, changed.chunk_bytes), (EcScheme::DEFAULT, 1 << 16));
    ok(svc, commit(f.ino, vec![chunk(0, 5, 100, EcScheme::DEFAULT, P)], 100)).await;
    err(
        svc,
        MetaOp::SetLayout {
            ino: f.ino,
            ec: replicated,
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
    let l = attr_of(
        ok(svc, MetaOp::Symlink { parent: ROOT_INO, name: "l".into(), target: "x".into(), uid: 0, gid: 0 }).await,
    );
    err(
        svc,
        MetaOp::SetLayout {
            ino: l.ino,
            ec: replicated,
            chunk_bytes: 1 << 20,
            // Namespace semantics only: no storage nodes here to check the scheme against.
            check: wire::LayoutCheck::Copied,
        },
        ErrorCode::Invalid,
    )
    .await;
}

/// A file with 64 KiB chunks, for chunk tests.
async fn small_chunk_file(svc: &MetaService, name: &str) -> wire::Attr {
    let f = create(svc, ROOT_INO, name).await;
    attr_of(
        ok(
            svc,
            MetaOp::SetLayout {
                ino: f.ino,
                ec: EcScheme::DEFAULT,
                chunk_bytes: 1 << 16,
                // Namespace semantics only: no storage nodes here to check the scheme against.
                check: wire::LayoutCheck::Copied,
            },
        )
        .await,
    )
}

fn chunks_of(reply: MetaReply) -> (wire::Attr, Vec<wire::ChunkRecord>) {
    match reply {
        MetaReply::Chunks { attr, chunks } => (attr, chunks),
        other => panic!("expected chunks, got {other:?}"),
    }
}

#[tokio::test]
async fn commit_and_get_chunks_copy_on_write() {
    let env = env().await;
    let svc = &env.svc;
    let f = small_chunk_file(svc, "f").await;
    let cb = 1u64 << 16;
    let ec = EcScheme::DEFAULT;
    let committed =
        attr_of(ok(svc, commit(f.ino, vec![chunk(0, 100, cb as u32, ec, P), chunk(1, 101, 10, ec, P)], cb + 10)).await);
    assert_eq!((committed.size, committed.data_version), (cb + 10, f.data_version + 1));
    let (attr, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!(attr.size, cb + 10);
    assert_eq!(chunks.iter().map(|c| (c.index, c.id)).collect::<Vec<_>>(), vec![(0, 100), (1, 101)]);
    // Looked up with its first records, in one call: the same attributes and records.
    let looked = chunks_of(ok(svc, MetaOp::LookupChunks { parent: ROOT_INO, name: "f".into(), count: 10 }).await);
    assert_eq!(looked, (attr.clone(), chunks.clone()));
    let (_, first) = chunks_of(ok(svc, MetaOp::LookupChunks { parent: ROOT_INO, name: "f".into(), count: 1 }).await);
    assert_eq!(first.iter().map(|c| c.id).collect::<Vec<_>>(), vec![100]);
    err(svc, MetaOp::LookupChunks { parent: ROOT_INO, name: "nothing".into(), count: 1 }, ErrorCode::NotFound).await;
    let (_, only) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 1, count: 1 }).await);
    assert_eq!(only.len(), 1);
    let (_, none) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: u64::MAX - 1, count: u64::MAX }).await);
    assert!(none.is_empty());
    // Overwrite chunk 0: the old id is queued for GC, size unchanged (max).
    let t = Timestamp { secs: 42, nanos: 0 };
    let op = MetaOp::CommitChunks {
        ino: f.ino,
        chunks: vec![chunk(0, 200, cb as u32, ec, P)],
        size: cb,
        set_size: false,
        mtime: t,
    };
    let after = attr_of(ok(svc, op).await);
    assert_eq!((after.size, after.mtime, after.data_version), (cb + 10, t, committed.data_version + 1));
    assert_eq!(count_keys(svc, prefix::GC).await, 1);
    // Committing the same chunk again (a retry without request id) must not queue it.
    ok(svc, commit(f.ino, vec![chunk(0, 200, cb as u32, ec, P)], cb)).await;
    assert_eq!(count_keys(svc, prefix::GC).await, 1);
    // The replaced id can never come back.
    err(svc, commit(f.ino, vec![chunk(0, 100, cb as u32, ec, P)], cb), ErrorCode::Invalid).await;
    // Validation.
    // A chunk may be coded narrower than its file (written while nodes were down), never
    // wider.
    let mut wrong_ec = chunk(2, 300, 10, EcScheme { k: 5, m: 2 }, P);
    wrong_ec.table_crcs = vec![0; 7];
    err(svc, commit(f.ino, vec![wrong_ec], 3 * cb), ErrorCode::Invalid).await;
    let mut crcs = chunk(2, 300, 10, ec, P);
    crcs.table_crcs.pop();
    err(svc, commit(f.ino, vec![crcs], 3 * cb), ErrorCode::Invalid).await;
    let mut missing = chunk(2, 300, 10, ec, P);
    missing.missing = 0b111;
    err(svc, commit(f.ino, vec![missing], 3 * cb), ErrorCode::Invalid).await;
    err(svc, commit(f.ino, vec![chunk(2, 300, 10, ec, P)], 2 * cb), ErrorCode::Invalid).await;
    err(svc, commit(f.ino, vec![chunk(2, 300, cb as u32 + 1, ec, P)], 4 * cb), ErrorCode::Invalid).await;
    err(svc, commit(f.ino, vec![chunk(2, 0, 10, ec, P)], 3 * cb), ErrorCode::Invalid).await;
    err(svc, commit(f.ino, vec![chunk(2, 300, 10, ec, P), chunk(2, 301, 10, ec, P)], 3 * cb), ErrorCode::Invalid).await;
    let d = mkdir(svc, ROOT_INO, "d").await;
    err(svc, commit(d.ino, vec![], 0), ErrorCode::IsDir).await;
    err(svc, MetaOp::GetChunks { ino: d.ino, first: 0, count: 1 }, ErrorCode::IsDir).await;
    let d_looked = ok(svc, MetaOp::LookupChunks { parent: ROOT_INO, name: "d".into(), count: 1 }).await;
    assert!(matches!(&d_looked, MetaReply::Attr(a) if a.ino == d.ino), "a directory's lookup: {d_looked:?}");
    // Nothing invalid was applied.
    let (attr, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!((attr.size, chunks.len()), (cb + 10, 2));
    // set_size sets the size exactly, truncating what lies past it.
    let op =
        MetaOp::CommitChunks { ino: f.ino, chunks: vec![chunk(0, 400, 50, ec, P)], size: 50, set_size: true, mtime: t };
    assert_eq!(attr_of(ok(svc, op).await).size, 50);
    let (_, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!(chunks.iter().map(|c| (c.index, c.id, c.len)).collect::<Vec<_>>(), vec![(0, 400, 50)]);
    assert_eq!(count_keys(svc, prefix::GC).await, 3, "ids 100, 101 and 200 are queued");
}

#[tokio::test]
async fn truncate_removes_and_clamps_chunk_records() {
    let env = env().await;
    let svc = &env.svc;
    let f = small_chunk_file(svc, "f").await;
    let cb = 1u64 << 16;
    let ec = EcScheme::DEFAULT;
    let full = |i: u64| chunk(i, 1000 + i, cb as u32, ec, P);
    ok(svc, commit(f.ino, (0..4).map(full).collect(), 4 * cb)).await;
    // Shrink into the middle of chunk 1: chunks 2 and 3 go, chunk 1 keeps 100 bytes.
    let set = SetAttr { size: Some(cb + 100), ..SetAttr::default() };
    let shrunk = attr_of(ok(svc, MetaOp::SetAttr { ino: f.ino, set }).await);
    assert_eq!(shrunk.size, cb + 100);
    let (_, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!(
        chunks.iter().map(|c| (c.index, c.id, c.len)).collect::<Vec<_>>(),
        vec![(0, 1000, cb as u32), (1, 1001, 100)]
    );
    assert_eq!(count_keys(svc, prefix::GC).await, 2);
    for id in [1002u64, 1003] {
        let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("{e}"));
        assert!(txn.get(&keys::gc(id)).await.unwrap_or_else(|e| panic!("{e}")).is_some(), "chunk {id} queued");
    }
    // Extending just sets the size; the clamped chunk keeps reading zeros past 100 bytes.
    let set = SetAttr { size: Some(3 * cb), ..SetAttr::default() };
    assert_eq!(attr_of(ok(svc, MetaOp::SetAttr { ino: f.ino, set }).await).size, 3 * cb);
    let (_, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!(chunks.iter().map(|c| c.len).collect::<Vec<_>>(), vec![cb as u32, 100]);
    // Shrinking to a chunk boundary removes the chunk at the boundary entirely.
    let set = SetAttr { size: Some(cb), ..SetAttr::default() };
    ok(svc, MetaOp::SetAttr { ino: f.ino, set }).await;
    let (_, chunks) = chunks_of(ok(svc, MetaOp::GetChunks { ino: f.ino, first: 0, count: 10 }).await);
    assert_eq!(chunks.iter().map(|c| (c.index, c.len)).collect::<Vec<_>>(), vec![(0, cb as u32)]);
    // To zero: nothing left.
    ok(svc, MetaOp::SetAttr { ino: f.ino, set: SetAttr { size: Some(0), ..SetAttr::default() } }).await;
    assert_eq!(count_keys(svc, prefix::CHUNK).await, 0);
    assert_eq!(count_keys(svc, prefix::GC).await, 4);
}

#[tokio::test]
async fn unlink_and_replace_queue_chunks_for_gc() {
    let env = env().await;
    let svc = &env.svc;
    let f = small_chunk_file(svc, "f").await;
    let cb = 1u64 << 16;
    let ec = EcScheme::DEFAULT;
    ok(svc, commit(f.ino, vec![chunk(0, 1, cb as u32, ec, P), chunk(1, 2, 5, ec, P)], cb + 5)).await;
    // A second link keeps the data.
    ok(svc, MetaOp::Link { ino: f.ino, new_parent: ROOT_INO, new_name: "f2".into() }).await;
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f".into() }).await;
    assert_eq!((count_keys(svc, prefix::CHUNK).await, count_keys(svc, prefix::GC).await), (2, 0));
    ok(svc, MetaOp::Unlink { parent: ROOT_INO, name: "f2".into() }).await;
    assert_eq!((count_keys(svc, prefix::CHUNK).await, count_keys(svc, prefix::GC).await), (0, 2));
    assert_eq!(count_keys(svc, prefix::INODE).await, 1, "only the root is left");
    // Being replaced by a rename queues the data of the replaced file too.
    let g = small_chunk_file(svc, "g").await;
    ok(svc, commit(g.ino, vec![chunk(0, 3, 10, ec, P)], 10)).await;
    create(svc, ROOT_INO, "h").await;
    ok(svc, rename(ROOT_INO, "h", ROOT_INO, "g", RenameMode::Replace)).await;
    assert_eq!((count_keys(svc, prefix::CHUNK).await, count_keys(svc, prefix::GC).await), (0, 3));
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    assert_eq!(stat.inodes_used, 2, "root and h");
}

#[tokio::test]
async fn retried_request_ids_apply_once() {
    cases::retried_request_ids_apply_once(&env().await).await;
}

#[tokio::test]
async fn expired_request_records_are_swept() {
    let env = env_with(meta::MetaOptions { request_ttl_ms: 0, ..test_options() }).await;
    let svc = &env.svc;
    let id = rid();
    let op = MetaOp::Mkdir { parent: ROOT_INO, name: "d".into(), mode: 0o755, uid: 0, gid: 0 };
    svc.call(MetaCall { request_id: id, op: op.clone() }).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((count_keys(svc, prefix::REQUEST).await, count_keys(svc, prefix::REQUEST_EXPIRY).await), (1, 1));
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(svc.sweep_requests_once().await.ok(), Some(1));
    assert_eq!((count_keys(svc, prefix::REQUEST).await, count_keys(svc, prefix::REQUEST_EXPIRY).await), (0, 0));
    // After expiry a retry is a new request.
    assert_eq!(svc.call(MetaCall { request_id: id, op }).await.err().map(|e| e.code), Some(ErrorCode::Exists));
    // Records that have not expired stay.
    let fresh = common::env().await;
    ok(&fresh.svc, MetaOp::Mkdir { parent: ROOT_INO, name: "d".into(), mode: 0o755, uid: 0, gid: 0 }).await;
    assert_eq!(fresh.svc.sweep_requests_once().await.ok(), Some(0));
    assert_eq!(count_keys(&fresh.svc, prefix::REQUEST).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_exclusive_creates_have_one_winner() {
    cases::concurrent_exclusive_creates_have_one_winner(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_are_atomic_to_readers() {
    cases::renames_are_atomic_to_readers(&env().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_crossing_moves_never_make_a_cycle() {
    cases::concurrent_crossing_moves_never_make_a_cycle(&env().await).await;
}

#[tokio::test]
async fn readdir_over_100k_entries() {
    let env = env().await;
    let svc = &env.svc;
    const ENTRIES: usize = 100_000;
    let d = cases::readdir_pages_through_entries(&env, ENTRIES, 2_000).await;
    // The page limit is capped.
    let MetaReply::Entries { entries, more } =
        ok(svc, MetaOp::ReadDir { ino: d.ino, after: String::new(), limit: 1_000_000 }).await
    else {
        panic!("entries")
    };
    assert_eq!((entries.len(), more), (meta::namespace::READDIR_ENTRIES_MAX as usize, true));
    let MetaReply::StatFs(stat) = ok(svc, MetaOp::StatFs).await else { panic!("statfs") };
    assert_eq!(stat.inodes_used, ENTRIES as u64 + 2);
}

#[tokio::test]
async fn batches_are_all_or_nothing() {
    let env = env().await;
    let svc = &env.svc;
    let mk = |name: &str| MetaCall {
        request_id: 0,
        op: MetaOp::Mkdir { parent: ROOT_INO, name: name.into(), mode: 0o755, uid: 0, gid: 0 },
    };
    let e = svc.call_batch(vec![mk("a"), mk("b"), mk("a")]).await.err().unwrap_or_else(|| panic!("batch succeeded"));
    assert_eq!(e.code, ErrorCode::Exists);
    assert!(e.message.contains("call 2"), "{}", e.message);
    assert!(list(svc, ROOT_INO).await.is_empty());
    let not_namespace = MetaCall { request_id: 0, op: MetaOp::StatFs };
    assert_eq!(svc.call_batch(vec![not_namespace]).await.err().map(|e| e.code), Some(ErrorCode::Invalid));
}

#[tokio::test]
async fn damaged_values_are_reported_with_their_key() {
    let env = env().await;
    let svc = &env.svc;
    let f = create(svc, ROOT_INO, "f").await;
    put_raw(svc, &keys::inode(f.ino), &[1, 0xff, 0xff, 0xff]).await;
    let message = err(svc, MetaOp::GetAttr { ino: f.ino }, ErrorCode::Internal).await;
    assert!(message.contains(&format!("I/{:016x}", f.ino)), "{message}");
    put_raw(svc, &keys::inode(f.ino), &[9, 0]).await;
    let message = err(svc, MetaOp::Lookup { parent: ROOT_INO, name: "f".into() }, ErrorCode::Internal).await;
    assert!(message.contains("unknown format version 9"), "{message}");
}

/// Entry changes stamp a directory's times through a record written without being read (so
/// concurrent creates in one directory do not conflict on its inode); the directory still
/// shows the latest change, and setting its times explicitly (utimens) wins until the next
/// change of its entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_times_follow_concurrent_entry_changes_and_setattr() {
    let env = env().await;
    let svc = env.svc.clone();
    let d = mkdir(&svc, ROOT_INO, "d").await;
    let mut tasks = Vec::new();
    for task in 0..32u32 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move { create(&svc, d.ino, &format!("f{task}")).await }));
    }
    let mut stamps = Vec::new();
    for task in tasks {
        stamps.push(task.await.unwrap_or_else(|e| panic!("{e}")).ctime);
    }
    assert_eq!(list(&svc, d.ino).await.len(), 32);
    // The directory shows the time of the change committed last, which is one of the creates'
    // times (concurrent changes may commit in another order than their clocks read).
    let now = getattr(&svc, d.ino).await;
    assert!(now.mtime > d.mtime && stamps.contains(&now.mtime), "{now:?} vs {stamps:?}");
    assert_eq!(now.ctime, now.mtime);
    assert_eq!(now.nlink, 2);

    let old = Timestamp { secs: 1_000, nanos: 5 };
    let set = SetAttr { mtime: Some(old), ..SetAttr::default() };
    let reply = attr_of(ok(&svc, MetaOp::SetAttr { ino: d.ino, set }).await);
    assert_eq!(reply.mtime, old, "setattr answers with the time it set");
    assert_eq!(getattr(&svc, d.ino).await.mtime, old, "an explicit mtime in the past sticks");
    let from_parent = lookup(&svc, ROOT_INO, "d").await.map(attr_of).expect("lookup d");
    assert_eq!(from_parent.mtime, old);
    create(&svc, d.ino, "later").await;
    assert!(getattr(&svc, d.ino).await.mtime > old, "the next entry change stamps it again");

    // Removing a directory removes its times record.
    let before = count_keys(&svc, prefix::DIR_TIMES).await;
    let e = mkdir(&svc, ROOT_INO, "e").await;
    create(&svc, e.ino, "x").await;
    ok(&svc, MetaOp::Unlink { parent: e.ino, name: "x".into() }).await;
    assert_eq!(count_keys(&svc, prefix::DIR_TIMES).await, before + 1);
    ok(&svc, MetaOp::Rmdir { parent: ROOT_INO, name: "e".into() }).await;
    assert_eq!(count_keys(&svc, prefix::DIR_TIMES).await, before);
}

// Cases first written for the PostgreSQL engine, run on this one too.

/// Creates in many directories at once, from several tasks: all succeed (conflicts, including
/// PostgreSQL's false ones between neighbouring keys, are retried inside the service).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_in_many_directories_all_succeed() {
    cases::concurrent_creates_in_many_directories_all_succeed(&env().await).await;
}

/// rmdir checks emptiness with a scan; a create racing it must either land before (rmdir then
/// fails NotEmpty) or fail because the directory is gone, never leave an entry in a removed
/// directory. This is the phantom case PostgreSQL's serializable mode alone does not catch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_racing_a_create_never_orphans_an_entry() {
    cases::rmdir_racing_a_create_never_orphans_an_entry(&env().await).await;
}
/// Error messages name directories by their path and entries by their path, never by inode
/// number alone: people read them (the CLI prints them, the mount and gateways log them).
#[tokio::test]
async fn errors_name_paths_not_inode_numbers() {
    let env = env().await;
    let svc = &env.svc;
    let message = |r: wire::MetaResult| r.err().map(|e| e.message).unwrap_or_default();
    let a = mkdir(svc, ROOT_INO, "a").await;
    let b = mkdir(svc, a.ino, "b").await;
    let c = mkdir(svc, b.ino, "c").await;
    create(svc, c.ino, "f").await;

    let missing = message(lookup(svc, b.ino, "x").await);
    assert_eq!(missing, r#"no entry "x" in directory "/a/b""#);
    let at_root = message(lookup(svc, ROOT_INO, "x").await);
    assert_eq!(at_root, r#"no entry "x" in directory "/""#);
    let resolved = err(svc, MetaOp::Resolve { path: "/a/nope/x".into() }, ErrorCode::NotFound).await;
    assert_eq!(resolved, r#"no entry "nope" in directory "/a""#);
    let through_file = err(svc, MetaOp::Resolve { path: "/a/b/c/f/g".into() }, ErrorCode::NotDir).await;
    assert!(through_file.starts_with(r#""/a/b/c/f" is a regular file"#), "{through_file}");

    let under_itself = err(svc, rename(ROOT_INO, "a", c.ino, "a", RenameMode::Replace), ErrorCode::Invalid).await;
    assert_eq!(under_itself, r#"cannot move directory "/a" under itself (into "/a/b/c")"#);
    let not_empty = err(svc, MetaOp::Rmdir { parent: b.ino, name: "c".into() }, ErrorCode::NotEmpty).await;
    assert_eq!(not_empty, r#"directory "/a/b/c" is not empty"#);
    let mkdir_b = MetaOp::Mkdir { parent: a.ino, name: "b".into(), mode: 0o755, uid: 0, gid: 0 };
    assert_eq!(err(svc, mkdir_b, ErrorCode::Exists).await, r#""/a/b" already exists"#);
    let unlink_dir = err(svc, MetaOp::Unlink { parent: a.ino, name: "b".into() }, ErrorCode::IsDir).await;
    assert!(unlink_dir.starts_with(r#""/a/b" is a directory"#), "{unlink_dir}");

    // A renamed directory is named by its new path, and so is everything below it.
    ok(svc, rename(a.ino, "b", ROOT_INO, "moved", RenameMode::Replace)).await;
    assert_eq!(message(lookup(svc, c.ino, "x").await), r#"no entry "x" in directory "/moved/c""#);
    // Exchanged directories swap names too.
    let d = mkdir(svc, ROOT_INO, "d").await;
    ok(svc, rename(ROOT_INO, "moved", ROOT_INO, "d", RenameMode::Exchange)).await;
    assert_eq!(message(lookup(svc, d.ino, "x").await), r#"no entry "x" in directory "/moved""#);

    // Names with control bytes are escaped, not printed raw.
    let odd = mkdir(svc, ROOT_INO, "new\nline\u{1b}").await;
    assert_eq!(message(lookup(svc, odd.ino, "x").await), r#"no entry "x" in directory "/new\nline\u{1b}""#);

    // A directory whose record carries no name (made before names were recorded) is named by
    // finding its entry in its parent.
    let key = keys::inode(c.ino);
    let mut rec: keys::InodeRec = {
        let mut txn = svc.engine().begin().await.unwrap_or_else(|e| panic!("begin: {e}"));
        let value = txn.get(&key).await.unwrap_or_else(|e| panic!("get: {e}")).unwrap_or_default();
        keys::decode(&key, &value).unwrap_or_else(|e| panic!("{e}"))
    };
    rec.target.clear();
    put_raw(svc, &key, &keys::encode(&rec)).await;
    assert_eq!(message(lookup(svc, c.ino, "x").await), r#"no entry "x" in directory "/d/c""#);
}
