//! The NFSv3 gateway: a real NFS client (libnfs-utils: `nfs-ls`, `nfs-cat`, `nfs-cp`) against
//! `trove nfs` started from the real binary, read-only exports, and the file system operations
//! the tools do not reach (mkdir, rename, remove, symlinks, SETATTR, paged READDIR, stale
//! handles) called on the gateway's file system directly over a real cluster.
//!
//! libnfs-utils is required (scripts/deps.sh installs it); a missing tool fails the test.

mod common;
mod gw;

use common::{content, TestCluster};
use gw::{need, run, run_ok, Gateway};
use nfsserve::nfs::{filename3, nfsstat3, sattr3, set_mode3, set_size3};
use nfsserve::vfs::NFSFileSystem;
use std::process::Command;

fn url(gw: &Gateway, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}&version=3", gw.port())
}

#[test]
fn libnfs_clients_list_read_and_write() {
    need("nfs-ls");
    need("nfs-cat");
    need("nfs-cp");
    let cluster = TestCluster::start(6, "4+2");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());
    let small = b"written by the native client\n".to_vec();
    let big = content(1, (9 << 20) + 123);
    rt.block_on(async {
        client.mkdir_p("/data/sub").await.expect("mkdir");
        client.write_file("/data/small.txt", &small).await.expect("write");
        client.write_file("/data/sub/big.bin", &big).await.expect("write");
    });
    let gw = Gateway::nfs(&cluster, "nfs-rw", "/", &[]);

    let ls = run_ok(Command::new("nfs-ls").arg(url(&gw, "/data")));
    assert!(ls.contains("small.txt") && ls.contains("sub"), "{ls}");
    assert!(ls.lines().any(|l| l.starts_with('d') && l.ends_with(" sub")), "sub is a directory: {ls}");
    let out = run(Command::new("nfs-cat").arg(url(&gw, "/data/small.txt")));
    assert_eq!(out.stdout, small, "nfs-cat: {}", String::from_utf8_lossy(&out.stderr));

    let dir = tempfile::tempdir().expect("dir");
    let got = dir.path().join("big.bin");
    run_ok(Command::new("nfs-cp").arg(url(&gw, "/data/sub/big.bin")).arg(&got));
    assert!(std::fs::read(&got).expect("read") == big, "NFS read of 9 MiB differs");

    // Write a new file (nfs-cp creates GUARDED, so it never overwrites: an existing name is
    // refused with NFS3ERR_EXIST).
    let upload = content(2, (6 << 20) + 77);
    let src = dir.path().join("up.bin");
    std::fs::write(&src, &upload).expect("write");
    run_ok(Command::new("nfs-cp").arg(&src).arg(url(&gw, "/data/sub/up.bin")));
    rt.block_on(async {
        assert!(
            client.read_file("/data/sub/up.bin").await.expect("read") == upload,
            "native read of an NFS write differs"
        );
    });
    let again = run(Command::new("nfs-cp").arg(&src).arg(url(&gw, "/data/sub/big.bin")));
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("EXIST"),
        "guarded create over an existing file"
    );
    let out = run(Command::new("nfs-cat").arg(url(&gw, "/data/missing")));
    assert!(!out.status.success(), "reading a missing file succeeded");
}

#[test]
fn read_only_exports_serve_a_subtree_and_refuse_writes() {
    need("nfs-ls");
    need("nfs-cp");
    let cluster = TestCluster::start(6, "4+2");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());
    rt.block_on(async {
        client.mkdir_p("/datasets/imagenet").await.expect("mkdir");
        client.write_file("/datasets/imagenet/0.jpg", b"jpeg").await.expect("write");
        client.write_file("/secret.txt", b"not exported").await.expect("write");
    });
    let gw = Gateway::nfs(&cluster, "nfs-ro", "/datasets", &["--read-only"]);
    let ls = run_ok(Command::new("nfs-ls").arg(url(&gw, "/")));
    assert!(ls.contains("imagenet") && !ls.contains("secret.txt"), "the export's root is /datasets: {ls}");
    let out = run(Command::new("nfs-cat").arg(url(&gw, "/imagenet/0.jpg")));
    assert_eq!(out.stdout, b"jpeg");

    // A host that may mount the export cannot forge handles to reach what lies outside it.
    let secret = rt.block_on(client.resolve("/secret.txt")).expect("resolve").ino;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nfs_rpc/forged_handles.py");
    let out = run(Command::new("python3")
        .args([script, gw.port(), "/imagenet/0.jpg", "jpeg"])
        .arg(secret.to_string())
        .arg("not exported"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("ok"),
        "forged_handles.py: {text}{}\ngateway log: {}",
        String::from_utf8_lossy(&out.stderr),
        gw.log_text()
    );
    let dir = tempfile::tempdir().expect("dir");
    let src = dir.path().join("x");
    std::fs::write(&src, b"x").expect("write");
    let out = run(Command::new("nfs-cp").arg(&src).arg(url(&gw, "/imagenet/new.jpg")));
    assert!(!out.status.success(), "a write to a read-only export succeeded");
    rt.block_on(async {
        assert!(client.resolve("/datasets/imagenet/new.jpg").await.is_err(), "the read-only export created a file");
    });
}

#[test]
fn exports_admit_only_the_clients_they_list() {
    need("nfs-ls");
    let cluster = TestCluster::start(4, "2+1");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(cluster.client());
    rt.block_on(async { client.write_file("/shared.txt", b"for listed clients").await.expect("write") });
    // The test's client connects from 127.0.0.1, which this export does not list.
    let closed = Gateway::nfs(&cluster, "nfs-closed", "/", &["--clients", "127.0.0.2,10.0.0.0/8"]);
    let out = run(Command::new("nfs-ls").arg(url(&closed, "/")));
    assert!(!out.status.success(), "an unlisted client listed the export: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("shared.txt"));
    let log = closed.log_text();
    assert!(log.contains("127.0.0.1 is not in the export's clients (127.0.0.2/32, 10.0.0.0/8)"), "{log}");
    // Listed by its network, it gets in.
    let open = Gateway::nfs(&cluster, "nfs-open", "/", &["--clients", "127.0.0.0/8"]);
    let ls = run_ok(Command::new("nfs-ls").arg(url(&open, "/")));
    assert!(ls.contains("shared.txt"), "{ls}");
    // An export with a list is not warned about; one without is, at start, since NFS callers
    // are not authenticated.
    assert!(!open.log_text().contains("warning"), "{}", open.log_text());
    let everyone = Gateway::nfs(&cluster, "nfs-everyone", "/", &[]);
    let log = everyone.log_text();
    assert!(
        log.contains("warning: export / admits every host that reaches 127.0.0.1:")
            && log.contains("NFS callers are not authenticated"),
        "{log}"
    );
    // A list entry that is not an address stops the gateway before it serves, naming it.
    let bad = common::run(&[
        "nfs",
        "--cluster",
        &cluster.dir_str(),
        "--listen",
        "127.0.0.1:0",
        "--clients",
        "10.0.0.0/8,lab-hosts",
    ]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && stderr.contains("\"lab-hosts\" is neither an IP address nor a network"),
        "{stderr}"
    );
}

fn name(s: &str) -> filename3 {
    s.as_bytes().into()
}

#[test]
fn file_system_operations_on_a_real_cluster() {
    let cluster = TestCluster::start(6, "4+2");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = cluster.client().await;
        client.mkdir_p("/export").await.expect("mkdir");
        let fs = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/export".into(), read_only: false }, 0)
            .await
            .expect("file system");
        let root = fs.root_dir();
        let (dir, _) = fs.mkdir(root, &name("dir")).await.expect("mkdir");
        assert_eq!(fs.lookup(dir, &name("..")).await.expect(".."), root);
        assert_eq!(fs.lookup(root, &name("..")).await.expect(".. of the root"), root, "no escape above the export");
        // The handle key is the cluster's: a gateway started again (or another one) takes the
        // handles this one handed out, and one of another export refuses them.
        let again = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/export".into(), read_only: false }, 0)
            .await
            .expect("file system again");
        assert_eq!(again.fh_to_id(&fs.id_to_fh(dir)).expect("a handle of the first gateway"), dir);
        client.mkdir_p("/other").await.expect("mkdir");
        let other = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/other".into(), read_only: false }, 0)
            .await
            .expect("other export");
        assert!(
            matches!(other.fh_to_id(&fs.id_to_fh(dir)), Err(nfsstat3::NFS3ERR_BADHANDLE)),
            "another export's handle"
        );
        let key = client.getxattr(client::ROOT_INO, nfsgw::XATTR_HANDLE_KEY).await.expect("the key is kept on /");
        assert_eq!(key.len(), 32);

        // Writes are durable when WRITE returns: another client reads them at once.
        let (f, _) = fs.create(dir, &name("f.bin"), sattr3::default()).await.expect("create");
        let data = content(3, (4 << 20) + 1000);
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            fs.write(f, (i as u64) << 20, piece).await.expect("write");
        }
        assert!(
            client.read_file("/export/dir/f.bin").await.expect("read") == data,
            "a WRITE was not durable at its reply"
        );
        let (back, eof) = fs.read(f, 0, 1 << 20).await.expect("read");
        assert!(back == data[..1 << 20] && !eof);
        let (tail, eof) = fs.read(f, (4 << 20) + 900, 1 << 20).await.expect("read");
        assert!(tail == data[(4 << 20) + 900..] && eof);

        // Another client's change is seen within the revalidation time.
        client.write_file("/export/dir/f.bin", b"replaced").await.expect("overwrite");
        std::thread::sleep(std::time::Duration::from_millis(nfsgw::REVALIDATE_MS + 100));
        let (now, _) = fs.read(f, 0, 100).await.expect("read");
        assert_eq!(now, b"replaced");

        // SETATTR: truncate and mode.
        let set = sattr3 { size: set_size3::size(3), mode: set_mode3::mode(0o600), ..Default::default() };
        let attr = fs.setattr(f, set).await.expect("setattr");
        assert_eq!((attr.size, attr.mode), (3, 0o600));
        assert_eq!(&client.read_file("/export/dir/f.bin").await.expect("read")[..], b"rep");

        // Rename, symlink, readlink.
        fs.rename(dir, &name("f.bin"), root, &name("g.bin")).await.expect("rename");
        assert!(fs.lookup(dir, &name("f.bin")).await.is_err());
        assert_eq!(fs.lookup(root, &name("g.bin")).await.expect("renamed"), f);
        let (l, _) =
            fs.symlink(root, &name("link"), &"g.bin".as_bytes().into(), &sattr3::default()).await.expect("symlink");
        assert_eq!(fs.readlink(l).await.expect("readlink").0, b"g.bin");

        // CREATE (unchecked) of an existing name with size 0 truncates it.
        let (again, attr) = fs
            .create(root, &name("g.bin"), sattr3 { size: set_size3::size(0), ..Default::default() })
            .await
            .expect("create");
        assert_eq!((again, attr.size), (f, 0));
        assert!(client.read_file("/export/g.bin").await.expect("read").is_empty());

        // Paged READDIR with cookies.
        for i in 0..40 {
            fs.create(dir, &name(&format!("e{i:02}")), sattr3::default()).await.expect("create");
        }
        let mut names = Vec::new();
        let mut cookie = 0;
        loop {
            let page = fs.readdir(dir, cookie, 7).await.expect("readdir");
            names.extend(page.entries.iter().map(|e| String::from_utf8_lossy(&e.name.0).into_owned()));
            match page.entries.last() {
                Some(last) if !page.end => cookie = last.fileid,
                _ => break,
            }
        }
        assert_eq!(names, (0..40).map(|i| format!("e{i:02}")).collect::<Vec<_>>());

        // Remove: non-empty directories are refused; a removed file's handle is stale.
        assert!(matches!(fs.remove(root, &name("dir")).await, Err(nfsstat3::NFS3ERR_NOTEMPTY)));
        assert!(matches!(fs.create_exclusive(dir, &name("e00")).await, Err(nfsstat3::NFS3ERR_EXIST)));
        fs.remove(root, &name("g.bin")).await.expect("remove");
        assert!(matches!(fs.getattr(f).await, Err(nfsstat3::NFS3ERR_STALE)));
        assert!(matches!(fs.fh_to_id(&nfsserve::nfs::nfs_fh3 { data: vec![1; 16] }), Err(nfsstat3::NFS3ERR_BADHANDLE)));
        assert_eq!(fs.fh_to_id(&fs.id_to_fh(dir)).expect("round trip"), dir);

        // Write-back: buffered until the file is idle, but this gateway shows the new size.
        let wb = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/export".into(), read_only: false }, 300)
            .await
            .expect("fs");
        let (w, _) = wb.create(root, &name("wb.bin"), sattr3::default()).await.expect("create");
        wb.write(w, 0, b"buffered").await.expect("write");
        assert_eq!(wb.getattr(w).await.expect("getattr").size, 8);
        assert!(client.read_file("/export/wb.bin").await.expect("read").is_empty(), "write-back flushed at once");
        std::thread::sleep(std::time::Duration::from_millis(1000));
        assert_eq!(&client.read_file("/export/wb.bin").await.expect("read")[..], b"buffered", "not flushed when idle");

        // A read-only view of the same export refuses changes itself.
        let ro = nfsgw::TroveNfs::new(client.clone(), nfsgw::Export { path: "/export".into(), read_only: true }, 0)
            .await
            .expect("fs");
        assert!(matches!(ro.mkdir(root, &name("nope")).await, Err(nfsstat3::NFS3ERR_ROFS)));
        assert!(matches!(ro.write(dir, 0, b"x").await, Err(nfsstat3::NFS3ERR_ROFS)));
    });
}
