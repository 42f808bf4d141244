//! What a person reads, against real processes: error texts name paths (not inode numbers),
//! listings show dates and escape names that hold control bytes, a refused connection says how
//! to start the cluster and a peer that is not Trove is named by what it is, `trove mount`
//! takes `--cluster`, `df` counts a disk shared by several nodes once and counts what pending
//! deletions free, a full cluster tells the writer when deletions free space, `trove bench
//! train` refuses up front a dataset that does not fit (and shares one dataset between a
//! cluster and its mount), and the README's first walk through runs as written.
//!
//! See the suite's root, `faults.rs`.

use crate::common::{run, run_ok, trove, TestCluster};
use crate::gw::{need, Gateway};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a mount may take to appear, and to go after SIGTERM.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// `trove` with `args`: exit status, stdout, stderr.
fn trove_out(args: &[&str]) -> (bool, String, String) {
    let out = run(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The stderr of a `trove` command that must fail.
fn trove_err(args: &[&str]) -> String {
    let (ok, out, err) = trove_out(args);
    assert!(!ok, "trove {args:?} succeeded: {out}");
    err
}

/// Today's date in UTC as `trove ls -l` prints it (YYYY-MM-DD).
fn utc_today() -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0) as i64;
    // Howard Hinnant's civil_from_days.
    let z = secs.div_euclid(86_400) + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{:04}-{month:02}-{day:02}", yoe + era * 400 + i64::from(month <= 2))
}

fn mounted_at(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| t.lines().any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap_or_default())))
        .unwrap_or(false)
}

/// A `trove mount --cluster DIR MOUNTPOINT` process, unmounted on drop.
struct Mount {
    child: Option<Child>,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Mount {
    fn start(cluster: &TestCluster) -> Mount {
        assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is needed by this test (load the fuse module)");
        let dir = tempfile::Builder::new().prefix("trove-mnt-").tempdir().expect("mount point");
        let log = cluster.path().join("mount-output.log");
        let mut child = trove()
            .args(["mount", "--cluster", &cluster.dir_str()])
            .arg(dir.path())
            .env_remove("TROVE_CLUSTER")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("trove mount starts");
        let started = Instant::now();
        while !mounted_at(dir.path()) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "trove mount --cluster exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < MOUNT_TIMEOUT,
                "mount did not appear: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Mount { child: Some(child), dir, log }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let started = Instant::now();
        while started.elapsed() < MOUNT_TIMEOUT {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = trove().args(["umount", "--lazy"]).arg(self.dir.path()).output();
        let _ = child.kill();
        let _ = child.wait();
        eprintln!("mount log: {}", std::fs::read_to_string(&self.log).unwrap_or_default());
    }
}

/// A tmpfs of `size` mounted on a new temporary directory, unmounted on drop. The suite runs
/// as root (it mounts FUSE file systems and network namespaces too); a machine where it cannot
/// mount fails the test rather than skipping it.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new().prefix("trove-tmpfs-").tempdir().expect("temp dir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs (this suite runs as root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Errors name paths: a missing name in a nested directory, a directory moved under itself, a
/// non-empty directory removed, an existing name created again; through the CLI and through
/// the client library (what the mount and the gateways log).
#[test]
fn error_texts_name_paths_not_inode_numbers() {
    let cluster = TestCluster::start(3, "2+1");
    let c = cluster.dir_str();
    run_ok(&["--cluster", &c, "mkdir", "/a/b/c"]);

    let err = trove_err(&["--cluster", &c, "ls", "/a/b/x"]);
    assert!(err.contains(r#"cannot list /a/b/x: no entry "x" in directory "/a/b""#), "{err}");
    let err = trove_err(&["--cluster", &c, "rm", "/a/b/x"]);
    assert!(err.contains(r#"cannot remove /a/b/x: no entry "x" in directory "/a/b""#), "{err}");
    let err = trove_err(&["--cluster", &c, "stat", "/a/nope/x"]);
    assert!(err.contains(r#"no entry "nope" in directory "/a""#), "{err}");
    let err = trove_err(&["--cluster", &c, "mv", "/a", "/a/b/c"]);
    assert!(err.contains(r#"mv /a /a/b/c/a: cannot move directory "/a" under itself (into "/a/b/c")"#), "{err}");
    let err = trove_err(&["--cluster", &c, "rm", "/a/b"]);
    assert!(err.contains("cannot remove /a/b: it is a directory (use -r)"), "{err}");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = cluster.client().await;
        client.write_file("/a/b/c/f", b"x").await.expect("write");
        let b = client.resolve("/a/b").await.expect("resolve");
        let e = client.rmdir(b.ino, "c").await.err().expect("rmdir of a non-empty directory fails");
        assert_eq!(e.message, r#"directory "/a/b/c" is not empty"#);
        let e = client.mkdir(b.ino, "c", 0o755).await.err().expect("mkdir of an existing name fails");
        assert_eq!(e.message, r#""/a/b/c" already exists"#);
        let c_dir = client.resolve("/a/b/c").await.expect("resolve");
        let e = client.lookup(c_dir.ino, "g").await.err().expect("lookup of a missing name fails");
        assert_eq!(e.message, r#"no entry "g" in directory "/a/b/c""#);
    });
    // An erasure scheme over the limit says the limit.
    let err = trove_err(&["--cluster", &c, "mkdir", "/q", "--ec", "300+2"]);
    assert!(
        err.contains("300+2 has 302 shards") && err.contains("K + M <= 32") && !err.contains("not a number"),
        "{err}"
    );
}

/// `ls -l` and `stat` print dates, and quote a name holding a newline and control bytes instead
/// of printing it raw (which would split a listing's line or drive the terminal).
#[test]
fn listings_show_dates_and_escape_control_bytes() {
    let cluster = TestCluster::start(3, "2+1");
    let c = cluster.dir_str();
    let odd = "new\nline\u{1b}[31m";
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let client = cluster.client().await;
        client.mkdir_p("/d").await.expect("mkdir");
        client.write_file(&format!("/d/{odd}"), b"odd").await.expect("write");
        client.write_file("/d/plain", b"plain").await.expect("write");
    });
    let today = utc_today();
    let listing = run_ok(&["--cluster", &c, "ls", "-l", "/d"]);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 2, "one line per entry: {listing:?}");
    assert!(lines[0].ends_with(r#" "new\nline\u{1b}[31m""#) && !listing.contains('\u{1b}'), "{listing:?}");
    assert!(lines[1].ends_with(" plain"), "{listing:?}");
    for line in &lines {
        assert!(line.contains(&format!(" {today} ")) && line.contains(" UTC "), "no date in {line:?}");
    }
    let short = run_ok(&["--cluster", &c, "ls", "/d"]);
    assert_eq!(short, "\"new\\nline\\u{1b}[31m\"\nplain\n");
    let stat = run_ok(&["--cluster", &c, "stat", &format!("/d/{odd}")]);
    assert!(stat.contains(r#"path: "/d/new\nline\u{1b}[31m""#) && !stat.contains('\u{1b}'), "{stat}");
    for field in ["access", "modify", "change", "birth"] {
        let line = stat.lines().find(|l| l.trim_start().starts_with(field)).unwrap_or_default();
        assert!(line.contains(&today) && line.ends_with(" UTC"), "{field}: {stat}");
    }
    assert!(stat.contains("kind: regular file"), "{stat}");
}

/// Connection errors say what is wrong: nothing listening (and how to start the cluster), a
/// local cluster that is stopped (and how to start it again), and a peer that is something
/// else, named by what it looks like: here the S3 gateway, an HTTP server.
#[test]
fn refused_connections_and_foreign_peers_are_explained() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let err = trove_err(&["--cluster", &addr, "ls", "/"]);
    assert!(err.contains(&format!("no Trove metadata service at {addr}: connection refused")), "{err}");
    assert!(err.contains("is the cluster running?") && err.contains("trove cluster start --dir"), "{err}");

    let cluster = TestCluster::start(3, "2+1");
    let s3 = Gateway::s3(&cluster, "s3-peer", &[]);
    let err = trove_err(&["--cluster", &s3.addr, "status"]);
    assert!(
        err.contains(&format!("{} is not a Trove metadata service: it answers like an HTTP server", s3.addr)),
        "{err}"
    );
    drop(s3);

    let c = cluster.dir_str();
    run_ok(&["cluster", "stop", "--dir", &c]);
    let err = trove_err(&["--cluster", &c, "ls", "/"]);
    assert!(
        err.contains("connection refused")
            && err.contains(&format!(
                "the local cluster in {c} is not running: start it again with `trove cluster start --dir {c}`"
            )),
        "{err}"
    );
}

/// `--cluster` is an option of the commands that talk to a cluster, and only of them; roles
/// refuse it rather than ignore it; every argument has help text.
#[test]
fn help_offers_only_the_options_a_command_uses() {
    for (cmd, offers) in [
        (&["meta", "--help"][..], false),
        (&["storage", "--help"], false),
        (&["cluster", "start", "--help"], false),
        (&["demo", "--help"], false),
        (&["umount", "--help"], false),
        (&["mount", "--help"], true),
        (&["ls", "--help"], true),
        (&["s3", "--help"], true),
        (&["bench", "train", "--help"], true),
    ] {
        let help = run_ok(cmd);
        assert_eq!(help.contains("--cluster"), offers, "trove {cmd:?}:\n{help}");
    }
    let err = trove_err(&["--cluster", "127.0.0.1:1", "meta", "--config", "/nonexistent.toml"]);
    assert!(err.contains("`trove meta` talks to no cluster; --cluster is not one of its options"), "{err}");
    // Positional arguments have help text too (they had none).
    let put = run_ok(&["put", "--help"]);
    assert!(put.contains("The local file to copy") && put.contains("Where to put it in the cluster"), "{put}");
}

/// `trove mount --cluster` mounts; `df` on it counts the one disk six nodes share once (it
/// showed six times the disk); deletions show as pending in `trove status` and count as free.
#[test]
fn mount_takes_cluster_and_df_counts_a_shared_disk_once() {
    let cluster = TestCluster::start(6, "4+2");
    let c = cluster.dir_str();
    let mount = Mount::start(&cluster);
    std::fs::write(mount.path().join("hello"), b"through the mount").expect("write through the mount");
    assert_eq!(run_ok(&["--cluster", &c, "cat", "/hello"]), "through the mount");

    // The disk the cluster directory is on, as statvfs sees it; the cluster stores 4+2, so its
    // usable size is 4/6 of the disk.
    let disk = rustix::fs::statvfs(cluster.path()).expect("statvfs");
    let disk_bytes = disk.f_blocks * disk.f_frsize;
    let df = Command::new("df").args(["-B1", "--output=size,avail"]).arg(mount.path()).output().expect("df runs");
    let text = String::from_utf8_lossy(&df.stdout);
    let figures: Vec<u64> =
        text.lines().nth(1).unwrap_or_default().split_whitespace().filter_map(|f| f.parse().ok()).collect();
    let (size, avail) = (figures.first().copied().unwrap_or(0), figures.get(1).copied().unwrap_or(0));
    let usable = disk_bytes * 4 / 6;
    assert!(
        size <= usable && usable - size < 4096,
        "df size {size}, disk {disk_bytes} (usable {usable}): the disk must count once\n{text}"
    );
    assert!(avail <= size, "{text}");
    let status = cluster.status();
    assert_eq!(status["bytes_total"].as_u64(), Some(disk_bytes), "{status:#}");
    assert_eq!(status["devices"].as_u64(), Some(1), "{status:#}");

    // 10 MB written and deleted: its shards wait for the GC's grace period, counted meanwhile.
    let file = cluster.path().join("ten-mb");
    std::fs::write(&file, crate::common::content(7, 10_000_000)).expect("local file");
    run_ok(&["--cluster", &c, "put", file.to_str().expect("utf-8"), "/ten-mb"]);
    run_ok(&["--cluster", &c, "rm", "/ten-mb"]);
    let status = cluster.status();
    let pending = status["bytes_pending_delete"].as_u64().unwrap_or(0);
    // Three chunks (4, 4 and 1.5 MiB of data... 10 MB) in 4+2: 1.5 times the data, in shards.
    assert!((15_000_000..15_100_000).contains(&pending), "pending {pending}: {status:#}");
    let text = run_ok(&["--cluster", &c, "status"]);
    assert!(text.contains("pending deletion: 14.3 MiB") && text.contains("freed within 31 s"), "{text}");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let statfs = rt.block_on(async { cluster.client().await.statfs().await.expect("statfs") });
    assert_eq!(statfs.bytes_pending_delete, pending * 4 / 6);
    assert!(statfs.bytes_free >= statfs.bytes_pending_delete);

    // A dataset for the cluster and a directory on its mount is generated once: the mount reads
    // the cluster's.
    let elsewhere = mount.path().join("elsewhere");
    let out = run_ok(&[
        "bench",
        "train",
        "--cluster",
        &c,
        "--dir",
        elsewhere.to_str().expect("utf-8"),
        "--workload",
        "cosmoflow",
        "--files",
        "2",
        "--generate-only",
        "-q",
    ]);
    assert!(out.contains("/bench: 2 files") && out.contains("generated") && out.contains("already there"), "{out}");
    assert!(!elsewhere.join("train-cosmoflow").exists(), "a second copy was generated through the mount");
    assert!(mount.path().join("bench/train-cosmoflow/train").is_dir());
    drop(mount);
}

/// A writer that finds the drives full while deletions wait for the GC's grace period is told
/// how much they hold and when it frees.
#[test]
fn a_full_cluster_says_when_deletions_free_space() {
    let tmpfs = Tmpfs::mount("96m");
    let dir = tmpfs.path().join("cluster");
    let d = dir.to_str().expect("utf-8").to_string();
    run_ok(&["cluster", "start", "--dir", &d, "--nodes", "3", "--ec", "2+1"]);
    let stop = scopeguard(&d);
    let file = std::env::temp_dir().join(format!("trove-output-{}", std::process::id()));
    std::fs::write(&file, crate::common::content(3, 10_000_000)).expect("local file");
    let f = file.to_str().expect("utf-8");
    let mut stored = Vec::new();
    for i in 0..16 {
        let (ok, _, err) = trove_out(&["--cluster", &d, "put", f, &format!("/f{i}")]);
        if !ok {
            assert!(err.contains("is full"), "{err}");
            break;
        }
        stored.push(i);
    }
    assert!(!stored.is_empty() && stored.len() < 16, "the 96 MiB cluster took {} files of 10 MB", stored.len());
    for i in 0..16 {
        let _ = trove_out(&["--cluster", &d, "rm", &format!("/f{i}")]);
    }
    let err = trove_err(&["--cluster", &d, "put", f, "/again"]);
    assert!(
        err.contains("is full")
            && err.contains("deleted files still hold")
            && err.contains("on the cluster's drives, freed within 31 s"),
        "{err}"
    );
    let _ = std::fs::remove_file(&file);
    drop(stop);
}

/// Stops the cluster in `dir` when dropped.
struct StopCluster(String);

fn scopeguard(dir: &str) -> StopCluster {
    StopCluster(dir.to_string())
}

impl Drop for StopCluster {
    fn drop(&mut self) {
        let _ = run(&["cluster", "stop", "--dir", &self.0]);
    }
}

/// `trove bench train` checks the space its dataset needs before generating it, and says what
/// is needed: it used to generate until the disk was full.
#[test]
fn bench_train_refuses_a_dataset_that_does_not_fit() {
    let dir = tempfile::Builder::new().prefix("trove-bench-space-").tempdir().expect("temp dir");
    let d = dir.path().to_str().expect("utf-8");
    let started = Instant::now();
    let (ok, out, err) =
        trove_out(&["bench", "train", "--dir", d, "--workload", "unet3d", "--dataset-gib", "100000", "-q"]);
    assert!(!ok, "{out}");
    assert!(err.contains("not enough space for the unet3d dataset") && err.contains("nothing was written"), "{err}");
    assert!(
        err.contains(&format!("dir {d}: 107374.")) && err.contains("GB needed") && err.contains("--dataset-gib"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "refused only after {:?}", started.elapsed());
    assert!(std::fs::read_dir(dir.path()).expect("read dir").next().is_none(), "something was written");
}

/// The README's first section: its commands run as written (the cluster directory, mount
/// point, local paths and ports replaced by this test's own, so that it runs beside other
/// tests; the cargo build is the suite's own), so the README cannot drift from what Trove does.
#[test]
fn readme_first_screen_runs_as_written() {
    need("aws");
    need("nfs-ls");
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root");
    let readme = std::fs::read_to_string(repo.join("README.md")).expect("README.md");
    let first = readme.split("\n## ").next().unwrap_or_default();
    let blocks: Vec<&str> = first.split("```sh\n").skip(1).filter_map(|b| b.split("\n```").next()).collect();
    assert_eq!(blocks.len(), 2, "the README's first section has the fresh-machine commands and the walk through");
    let commands = |block: &str| -> Vec<String> {
        block
            .lines()
            .map(|l| l.split("   #").next().unwrap_or(l).trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    // The fresh-machine commands. test.sh is what CI runs (.ci/run), so it ran if this runs.
    // demo.sh installs what is missing, builds with cargo and execs `trove demo`: the build is
    // not run again here (the suite's own build made the binary, and a nested cargo build
    // would relink it under the tests running beside this one), the demo is, on a small
    // dataset (the script passes its arguments on).
    assert_eq!(commands(blocks[0]), ["./scripts/demo.sh", "./scripts/test.sh"]);
    let ci = std::fs::read_to_string(repo.join(".ci/run")).expect(".ci/run");
    assert!(ci.contains("./scripts/test.sh"), "CI no longer runs scripts/test.sh: {ci}");
    let demo_sh = std::fs::read_to_string(repo.join("scripts/demo.sh")).expect("scripts/demo.sh");
    assert!(
        demo_sh.trim_end().ends_with("exec ./target/release/trove demo \"$@\""),
        "scripts/demo.sh no longer runs `trove demo`: {demo_sh}"
    );
    let demo = trove().args(["demo", "--size-mib", "32", "--json"]).output().expect("trove demo runs");
    assert!(demo.status.success(), "trove demo failed: {}", String::from_utf8_lossy(&demo.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&demo.stdout).expect("demo prints JSON");
    assert_eq!(summary["files_verified"], summary["files_total"], "{summary:#}");

    // The walk through, as one shell script in its own process group (killed at the end
    // whatever happens).
    let work = tempfile::Builder::new().prefix("trove-readme-").tempdir().expect("temp dir");
    let w = work.path().to_str().expect("utf-8").to_string();
    let (s3_port, nfs_port) = (free_port(), free_port());
    // Its first line builds the binary this suite was built with (see above): it is taken as
    // built.
    let build = "cargo build --release && T=$PWD/target/release/trove";
    assert_eq!(blocks[1].lines().next(), Some(build), "the walk through starts by building trove");
    let script = blocks[1]
        .replacen(build, &format!("T={}", e2e::trove()), 1)
        .replace("/tmp/tc", &format!("{w}/tc"))
        .replace("/tmp/mnt", &format!("{w}/mnt"))
        .replace("/tmp/README.copy", &format!("{w}/README.copy"))
        .replace("/tmp/local", &format!("{w}/local"))
        .replace("127.0.0.1:9000", &format!("127.0.0.1:{s3_port}"))
        .replace("2049", &nfs_port.to_string());
    assert!(
        !script.replace(&w, "").contains("/tmp/"),
        "a path of the walk through is not replaced by this test:\n{script}"
    );
    let mut shell = Command::new("bash");
    shell
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&repo)
        .env_remove("TROVE_CLUSTER")
        .env("HOME", work.path())
        .env("AWS_CONFIG_FILE", work.path().join("aws-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", work.path().join("aws-credentials"))
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut shell, 0);
    let child = shell.spawn().expect("bash runs");
    let pgid = child.id() as i32;
    let out = child.wait_with_output().expect("bash ends");
    // Whatever is left (a gateway or mount of a failed run), and the cluster.
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let mnt = work.path().join("mnt");
    if mounted_at(&mnt) {
        let _ = trove().args(["umount", "--lazy"]).arg(&mnt).output();
    }
    let _ = run(&["cluster", "stop", "--dir", &format!("{w}/tc")]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the README's walk through failed:\n{script}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    // What each step shows.
    assert!(stdout.contains("Trove cluster") && stdout.contains("capacity:"), "cluster start, status: {stdout}");
    assert!(stdout.contains(&format!(" {} ", utc_today())) && stdout.contains(" README.md"), "ls -l: {stdout}");
    assert_eq!(std::fs::read(work.path().join("README.copy")).expect("get wrote the copy"), readme.as_bytes());
    assert!(stdout.contains(&format!("trove:127.0.0.1:")), "df of the mount: {stdout}");
    assert!(stdout.contains("README.md") && stdout.matches("README.md").count() >= 3, "aws s3 ls, nfs-ls: {stdout}");
    assert!(stdout.contains("cosmoflow") && stdout.contains("AU"), "bench train: {stdout}");
    assert!(stdout.contains("stopped the cluster"), "{stdout}");
}
