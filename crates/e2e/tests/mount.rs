//! `trove mount` on real clusters: the project's POSIX suite compared with a local directory,
//! real programs (tar, git, SQLite, fio) on the mount, two mounts of one cluster (close-to-open
//! data, fcntl/flock locks across mounts, a crashed client's locks released with its lease),
//! and the mount's error messages and clean unmounts.
//!
//! Every test mounts with the real binary, as a separate process, the way users do. They skip
//! (with a printed reason) only when /dev/fuse is absent; missing programs (python3, fio, git,
//! tar) are failures, since scripts/deps.sh installs them.

mod common;
mod mnt;

use common::*;
use mnt::{fuse_missing, wait_timeout, Mount, UNMOUNT_TIMEOUT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Entries of the POSIX suite's big-directory check in the default run: several metadata pages
/// and many kernel readdir calls. The full 100,000 is `readdir_of_100000_entries`.
const BIG_DIR_ENTRIES_DEFAULT: usize = 3000;

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mount")
}

/// Runs `cmd` in its own process group and returns its output; past `timeout` the whole group
/// is killed and the test fails, so a hang on the mount fails the test instead of stalling CI.
fn run_bounded(mut cmd: Command, what: &str, timeout: Duration) -> std::process::Output {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.process_group(0).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let status = match wait_timeout(&mut child, timeout) {
        Some(s) => s,
        None => {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            panic!(
                "{what} did not finish within {timeout:?}; its output so far:\n{}\n{}",
                String::from_utf8_lossy(&out_reader.join().unwrap_or_default()),
                String::from_utf8_lossy(&err_reader.join().unwrap_or_default())
            );
        }
    };
    std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// How long one step (the POSIX suite, one program) may take before the test gives up.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs a shell command line, panicking with its output unless it succeeds.
fn sh(what: &str, script: &str) -> String {
    let started = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", script]);
    let out = run_bounded(cmd, what, STEP_TIMEOUT);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{what}: ok ({:.1} s)", started.elapsed().as_secs_f64());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn need(program: &str) {
    let found = Command::new("bash")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(found, "{program} is not installed; scripts/deps.sh installs what the mount tests need");
}

/// Runs the POSIX suite in `dir`; returns check name -> (ok, observed, error).
fn run_suite(dir: &Path, extra: &[&str]) -> BTreeMap<String, serde_json::Value> {
    let mut cmd = Command::new("python3");
    cmd.arg(suite_dir().join("posix_suite.py")).arg(dir).args(extra);
    let out = run_bounded(cmd, "the POSIX suite", STEP_TIMEOUT);
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "the POSIX suite crashed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the suite prints JSON")
}

/// Asserts every check passed on the mount and observed what it observed on the local disk.
fn compare_suites(mount: &BTreeMap<String, serde_json::Value>, local: &BTreeMap<String, serde_json::Value>) {
    let mut problems = Vec::new();
    for (name, m) in mount {
        if m["ok"] != true {
            problems.push(format!("{name}: fails on the mount: {}", m["error"]));
            continue;
        }
        match local.get(name) {
            Some(l) if l["ok"] == true && l["observed"] != m["observed"] => problems.push(format!(
                "{name}: differs from a local directory\n  local: {}\n  mount: {}",
                l["observed"], m["observed"]
            )),
            Some(l) if l["ok"] != true => {
                problems.push(format!("{name}: fails on the local directory too: {}", l["error"]))
            }
            _ => {}
        }
    }
    assert!(problems.is_empty(), "POSIX suite:\n{}", problems.join("\n"));
}

#[test]
fn posix_suite_on_the_mount_matches_a_local_directory() {
    if fuse_missing() {
        return;
    }
    need("python3");
    let entries = std::env::var("TROVE_MOUNT_BIG_DIR_ENTRIES").unwrap_or_else(|_| BIG_DIR_ENTRIES_DEFAULT.to_string());
    let cluster = TestCluster::start(6, "4+2");
    let mount = Mount::start(&cluster, "posix", &[]);
    let local = tempfile::Builder::new().prefix("trove-posix-local-").tempdir().expect("local dir");
    let started = Instant::now();
    let on_mount = run_suite(mount.path(), &["--big-dir-entries", &entries]);
    eprintln!("POSIX suite on the mount: {:.1} s", started.elapsed().as_secs_f64());
    let on_local = run_suite(local.path(), &["--big-dir-entries", &entries]);
    assert!(on_mount.len() >= 20, "the suite ran only {} checks", on_mount.len());
    compare_suites(&on_mount, &on_local);
    // Files unlinked while open are gone from the hidden directory once closed.
    let orphans = std::fs::read_dir(mount.join(".trove-orphans")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(orphans, 0, "files unlinked while open were not deleted at their last close");
    mount.stop();
}

/// Slow (minutes: creates are bound by the metadata service's commit rate) but part of every
/// run: the 100,000-entry directory through the kernel.
#[test]
fn readdir_of_100000_entries() {
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start(6, "4+2");
    let mount = Mount::start(&cluster, "bigdir", &[]);
    let result = run_suite(mount.path(), &["--only", "big_directory", "--big-dir-entries", "100000"]);
    assert_eq!(result["big_directory"]["ok"], true, "{}", result["big_directory"]);
    mount.stop();
}

#[test]
fn real_programs_on_the_mount() {
    if fuse_missing() {
        return;
    }
    for p in ["tar", "git", "python3", "fio", "sha256sum"] {
        need(p);
    }
    let cluster = TestCluster::start(6, "4+2");
    let mount = Mount::start(&cluster, "programs", &[]);
    let m = mount.path().to_str().expect("utf-8 path").to_string();
    let scratch = tempfile::Builder::new().prefix("trove-programs-").tempdir().expect("scratch dir");
    let s = scratch.path().to_str().expect("utf-8 path").to_string();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root");
    let repo = repo.to_str().expect("utf-8 path");

    // tar a source tree in and out: every file's checksum, and every entry's kind, mode and mtime
    // survive both ways (directory sizes differ between file systems and are left out).
    let listing = "find . -type f -print0 | sort -z | xargs -0 sha256sum; find . -mindepth 1 -printf '%y %m %TY%Tm%Td%TH%TM%TS %p\\n' | sort";
    sh(
        "tar in and out",
        &format!(
            "cd {repo} && tar --exclude=target --exclude=.git -cf {s}/src.tar crates scripts Cargo.toml
             mkdir {s}/orig {m}/tree {s}/back
             tar -C {s}/orig -xpf {s}/src.tar
             tar -C {m}/tree -xpf {s}/src.tar
             tar -C {m}/tree -cf {s}/back.tar .
             tar -C {s}/back -xpf {s}/back.tar
             (cd {s}/orig && {listing}) > {s}/orig.sums
             (cd {m}/tree && {listing}) > {s}/mount.sums
             (cd {s}/back && {listing}) > {s}/back.sums
             test $(wc -l < {s}/orig.sums) -gt 50
             diff {s}/orig.sums {s}/mount.sums
             diff {s}/orig.sums {s}/back.sums"
        ),
    );

    // git clone onto the mount, commit there, fsck.
    sh(
        "git clone and fsck",
        &format!(
            "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t
             git init -q {s}/origin
             cp -r {s}/orig/crates {s}/origin/
             git -C {s}/origin add -A && git -C {s}/origin commit -q -m one
             echo change >> {s}/origin/crates/wire/Cargo.toml && git -C {s}/origin commit -q -am two
             git -C {s}/origin gc -q
             git clone -q {s}/origin {m}/clone
             git -C {m}/clone fsck --full --strict
             test -z \"$(git -C {m}/clone status --porcelain)\"
             echo more >> {m}/clone/crates/wire/Cargo.toml
             git -C {m}/clone commit -q -am three
             git -C {m}/clone gc -q
             git -C {m}/clone fsck --full --strict
             test $(git -C {m}/clone rev-list --count HEAD) = 3"
        ),
    );

    // SQLite written by two processes at once (fcntl locks), then checked.
    let writer = suite_dir().join("sqlite_writer.py");
    let w = writer.to_str().expect("utf-8 path");
    let out = sh(
        "sqlite two writers",
        &format!(
            "python3 {w} {m}/db.sqlite 1 150 & a=$!
             python3 {w} {m}/db.sqlite 2 150 & b=$!
             wait $a; wait $b
             python3 {w} {m}/db.sqlite --check 300"
        ),
    );
    assert!(out.contains("integrity_check=ok rows=300 writers=2"), "{out}");

    // fio: sequential write with verification, sequential read, random read.
    sh(
        "fio",
        &format!(
            "mkdir {m}/fio
             fio --name=seqwrite --directory={m}/fio --rw=write --bs=1M --size=192M --end_fsync=1 --verify=crc32c --do_verify=1 --verify_state_save=0 --output-format=terse >/dev/null
             fio --name=seqread --directory={m}/fio --filename=seqwrite.0.0 --rw=read --bs=1M --size=192M --output-format=terse >/dev/null
             fio --name=randread --directory={m}/fio --filename=seqwrite.0.0 --rw=randread --bs=4k --size=192M --runtime=5 --time_based --iodepth=8 --ioengine=libaio --direct=1 --output-format=terse >/dev/null"
        ),
    );
    mount.stop();
}

#[test]
fn two_mounts_of_one_cluster() {
    if fuse_missing() {
        return;
    }
    need("python3");
    let cluster = TestCluster::start(6, "4+2");
    // A short lease, so the crashed-client part below is quick.
    let a = Mount::start(&cluster, "a", &["--lock-lease-ms", "2000"]);
    let b = Mount::start(&cluster, "b", &["--lock-lease-ms", "2000"]);

    // Written and closed on one mount, read whole on the other.
    let data = content(1, 21 * 1024 * 1024 + 5);
    std::fs::write(a.join("shared.bin"), &data).expect("write on a");
    assert!(std::fs::read(b.join("shared.bin")).expect("read on b") == data, "b read different bytes");

    // b caches the file (pages and size); a then rewrites and extends it: b's next open must
    // see the new content whole (close-to-open), not its cached pages or stale size.
    let newer = content(2, 25 * 1024 * 1024 + 77);
    std::fs::write(a.join("shared.bin"), &newer).expect("rewrite on a");
    assert!(std::fs::read(b.join("shared.bin")).expect("reread on b") == newer, "b served stale data after a rewrite");

    // A file b reads every time stays cached (unchanged version) and correct.
    assert!(std::fs::read(b.join("shared.bin")).expect("third read on b") == newer);

    // Names made on one appear on the other.
    std::fs::create_dir(a.join("dir")).expect("mkdir on a");
    std::fs::write(a.join("dir/x"), b"x").expect("write on a");
    let names: Vec<String> = std::fs::read_dir(b.join("dir"))
        .expect("list on b")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["x".to_string()]);

    // The mount point of a live mount is busy; errors name the problem.
    let out = trove().args(["mount", &cluster.dir_str()]).arg(a.path()).output().expect("trove mount runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("busy"), "mounting on a live mount point: {err}");

    // Locks taken through one mount hold on the other: fcntl and flock (flock is a whole-file
    // lock in the same space, as on NFS), non-blocking attempts fail, a blocked one is granted
    // when the holder goes away.
    std::fs::write(a.join("lockfile"), b"x").expect("lock file");
    let mut holder = lock_probe("hold", &a.join("lockfile"), "fcntl");
    assert_eq!(
        lock_probe_once("try", &b.join("lockfile"), "fcntl"),
        "EAGAIN",
        "fcntl lock not seen by the other mount"
    );
    assert_eq!(
        lock_probe_once("try", &b.join("lockfile"), "flock"),
        "EAGAIN",
        "flock not blocked by the other mount's lock"
    );
    let mut waiter = lock_probe_spawn("wait", &b.join("lockfile"), "fcntl");
    std::thread::sleep(Duration::from_millis(300));
    let _ = holder.kill();
    let _ = holder.wait();
    let granted = wait_timeout(&mut waiter, Duration::from_secs(20));
    if granted.is_none() {
        let _ = waiter.kill();
    }
    let out = waiter.wait_with_output().expect("waiter");
    assert!(granted.is_some(), "a blocked lock was not granted within 20 s of the holder exiting");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "granted", "blocked lock after the holder exited");

    // A client that dies holding a lock loses it when its lease runs out.
    let mut holder = lock_probe("hold", &a.join("lockfile"), "flock");
    let mut a = a;
    let mut a_process = a.child.take().expect("running");
    a_process.kill().expect("SIGKILL the mount");
    let _ = a_process.wait();
    let started = Instant::now();
    assert_eq!(
        lock_probe_once("try", &b.join("lockfile"), "flock"),
        "EAGAIN",
        "a crashed client's lock vanished before its lease"
    );
    loop {
        if lock_probe_once("try", &b.join("lockfile"), "flock") == "granted" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "a crashed client's lock was never released");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("a crashed client's lock was released after {:.1} s", started.elapsed().as_secs_f64());
    let _ = holder.kill();
    let _ = holder.wait();
    let out = trove().arg("umount").arg(a.path()).output().expect("trove umount runs");
    assert!(out.status.success(), "trove umount of a crashed mount: {}", String::from_utf8_lossy(&out.stderr));

    // `trove umount` ends b's process cleanly.
    let mut b = b;
    let out = trove().arg("umount").arg(b.path()).output().expect("trove umount runs");
    assert!(out.status.success(), "trove umount: {}", String::from_utf8_lossy(&out.stderr));
    let mut child = b.child.take().expect("running");
    let status = wait_timeout(&mut child, UNMOUNT_TIMEOUT);
    assert!(status.is_some_and(|s| s.success()), "trove mount after trove umount: {status:?}: {}", b.log_text());
}

/// Metadata calls of kind `op` that a mount started with [`CALL_LOG`] has logged so far.
fn calls_logged(mount: &Mount, op: &str) -> usize {
    mount.log_text().lines().filter(|l| l.contains("trove::meta_call") && l.trim_end().ends_with(op)).count()
}

/// The log filter that makes a mount log every metadata call it sends.
const CALL_LOG: &str = "warn,trove::meta_call=trace";

/// The caches that spare round trips do: stats of many files of one directory after their
/// entries expired are answered from one listing (statahead), and the directory's own
/// attributes after each change in it come from the change's reply (dircache). Each is checked
/// against a mount where it is off (zero timeouts), which must make the round trips, so the
/// count itself is shown to work.
#[test]
fn lookups_and_directory_getattrs_are_answered_without_round_trips() {
    if fuse_missing() {
        return;
    }
    const FILES: usize = 200;
    let cluster = TestCluster::start(3, "2+1");
    let cached = Mount::start_logging(&cluster, "cached", &[], CALL_LOG);
    let uncached =
        Mount::start_logging(&cluster, "uncached", &["--entry-timeout-ms", "0", "--attr-timeout-ms", "0"], CALL_LOG);
    std::fs::create_dir(cached.join("many")).expect("mkdir");
    for i in 0..FILES {
        std::fs::write(cached.join(&format!("many/f{i}")), b"x").expect("create");
    }
    // Past the 1 s entry timeout: the kernel asks the mount again for every name.
    std::thread::sleep(Duration::from_millis(1500));
    let stat_all = |m: &Mount| {
        for i in 0..FILES {
            let meta = std::fs::metadata(m.join(&format!("many/f{i}"))).expect("stat");
            assert_eq!(meta.len(), 1);
        }
    };
    // A lookup goes as `Lookup`, or as `LookupChunks` when the mount takes a file's records along.
    let lookups = |m: &Mount| calls_logged(m, "Lookup") + calls_logged(m, "LookupChunks");
    let (before_cached, before_uncached) = (lookups(&cached), lookups(&uncached));
    stat_all(&cached);
    stat_all(&uncached);
    let cached_lookups = lookups(&cached) - before_cached;
    let uncached_lookups = lookups(&uncached) - before_uncached;
    eprintln!("stat of {FILES} files: {cached_lookups} lookups sent with statahead, {uncached_lookups} without");
    assert!(uncached_lookups >= FILES, "without caches every stat is a lookup: {uncached_lookups} for {FILES} stats");
    assert!(cached_lookups <= FILES / 2, "statahead left {cached_lookups} of {FILES} lookups to the service");
    assert!(calls_logged(&cached, "ReadDir") >= 1, "statahead fetched no listing");

    // A change in a directory, then a stat of the directory: its attributes come with the
    // change's reply.
    let change_and_stat = |m: &Mount, dir: &str| {
        std::fs::create_dir(m.join(dir)).expect("mkdir");
        for i in 0..20 {
            std::fs::write(m.join(&format!("{dir}/g{i}")), b"").expect("create");
            let meta = std::fs::metadata(m.join(dir)).expect("stat dir");
            assert!(meta.is_dir());
        }
    };
    let (before_cached, before_uncached) = (calls_logged(&cached, "GetAttr"), calls_logged(&uncached, "GetAttr"));
    change_and_stat(&cached, "changing-a");
    change_and_stat(&uncached, "changing-b");
    let cached_getattrs = calls_logged(&cached, "GetAttr") - before_cached;
    let uncached_getattrs = calls_logged(&uncached, "GetAttr") - before_uncached;
    eprintln!("20 creates, each followed by a stat of the directory: {cached_getattrs} getattrs sent with the dircache, {uncached_getattrs} without");
    assert!(uncached_getattrs >= 20, "without caches every stat of the directory is a getattr: {uncached_getattrs}");
    assert_eq!(cached_getattrs, 0, "directory attributes after this mount's changes went to the service");

    // Small files written through one mount, read whole through the other: each open's
    // close-to-open check brings the file's chunk records along, so an open and read cost one
    // metadata round trip, not a getattr and then a chunk lookup.
    const SMALL: usize = 40;
    std::fs::create_dir(uncached.join("small")).expect("mkdir");
    for i in 0..SMALL {
        std::fs::write(uncached.join(&format!("small/s{i}")), content(i as u64, 70_000 + i)).expect("write");
    }
    let before: Vec<usize> = ["GetAttr", "GetChunks"].iter().map(|op| calls_logged(&cached, op)).collect();
    for i in 0..SMALL {
        let got = std::fs::read(cached.join(&format!("small/s{i}"))).expect("read");
        assert!(got == content(i as u64, 70_000 + i), "small/s{i} read back different bytes");
    }
    let getattrs = calls_logged(&cached, "GetAttr") - before[0];
    let chunk_lookups = calls_logged(&cached, "GetChunks") - before[1];
    eprintln!("open and read of {SMALL} small files: {getattrs} getattrs, {chunk_lookups} chunk lookups");
    assert!(
        getattrs + chunk_lookups <= SMALL + SMALL / 4,
        "{getattrs} getattrs and {chunk_lookups} chunk lookups for {SMALL} opens"
    );
    cached.stop();
    uncached.stop();
}

/// A chunk written whole (so uploaded) behind a chunk still buffered, then rewritten to its end
/// before the close: the fsync publishes it, and another mount reads the file as written. (The
/// first version, held back behind the buffered chunk, once met the second in one commit,
/// which the metadata service refused, so the fsync and close failed.)
#[test]
fn a_chunk_rewritten_behind_a_buffered_one_is_published_at_fsync() {
    use std::os::unix::fs::FileExt;
    if fuse_missing() {
        return;
    }
    // The test cluster's chunks are of the default size; a quarter of one is the unit here.
    let chunk = wire::CHUNK_BYTES_DEFAULT as usize;
    let q = chunk / 4;
    let cluster = TestCluster::start(3, "2+1");
    let writer = Mount::start(&cluster, "writer", &[]);
    let reader = Mount::start(&cluster, "reader", &[]);
    let path = writer.join("rewritten");
    let file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).expect("create");
    // Chunk 0 partly written, chunk 1 whole (uploaded, held back behind chunk 0), then chunk 1's
    // last quarter again.
    file.write_all_at(&vec![b'a'; q], 0).expect("write chunk 0");
    file.write_all_at(&vec![b'b'; chunk], chunk as u64).expect("write chunk 1");
    file.write_all_at(&vec![b'c'; q], (2 * chunk - q) as u64).expect("rewrite chunk 1's end");
    file.sync_all().expect("fsync publishes the file");
    drop(file);
    let mut want = vec![b'a'; q];
    want.resize(chunk, 0);
    want.resize(2 * chunk - q, b'b');
    want.resize(2 * chunk, b'c');
    let got = std::fs::read(reader.join("rewritten")).expect("read");
    assert_eq!(got.len(), want.len(), "size");
    assert!(got == want, "the other mount reads other bytes");
    writer.stop();
    reader.stop();
}

/// A small file's chunk fetched at its open is kept in the mount's memory cache as any chunk
/// when the file is read with `O_DIRECT` (the kernel's page cache keeps none of those reads, so
/// the mount's cache is the only copy), and only on probation otherwise (the kernel keeps the
/// pages). Six samples of 128 KiB and a cache of 1 MiB, whose probation queue holds one: read
/// again with `O_DIRECT` they all come from the cache; read through the page cache and then
/// dropped from it, most come from the storage nodes again.
#[test]
fn samples_read_with_o_direct_stay_in_the_mounts_cache_and_buffered_ones_on_probation() {
    if fuse_missing() {
        return;
    }
    const SAMPLES: usize = 6;
    const SAMPLE_BYTES: usize = 128 << 10;
    let cluster = TestCluster::start(3, "2+1");
    let writer = Mount::start(&cluster, "writer", &[]);
    let reader = Mount::start(&cluster, "reader", &["--chunk-cache-mib", "1", "--disk-cache-mib", "0"]);
    for set in ["direct", "buffered"] {
        std::fs::create_dir(writer.join(set)).expect("mkdir");
        for i in 0..SAMPLES {
            std::fs::write(writer.join(&format!("{set}/s{i}")), content(i as u64, SAMPLE_BYTES)).expect("write");
        }
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let served = || runtime.block_on(shard_reads_served(&cluster));
    // `dd iflag=direct`: each sample opened with O_DIRECT and read in one 128 KiB read.
    let read_direct = |i: usize| {
        let path = reader.join(&format!("direct/s{i}"));
        let out = Command::new("dd")
            .arg(format!("if={}", path.display()))
            .args(["iflag=direct", "bs=128k", "count=1", "status=none"])
            .output()
            .expect("dd runs");
        assert!(out.status.success(), "dd iflag=direct of s{i}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout == content(i as u64, SAMPLE_BYTES), "direct/s{i} read back different bytes");
    };
    (0..SAMPLES).for_each(read_direct);
    let before = served();
    (0..SAMPLES).for_each(read_direct);
    assert_eq!(served() - before, 0, "samples read with O_DIRECT were not kept in the mount's cache");

    // The control: the same pass through the page cache, whose pages are then dropped.
    let read_buffered = |i: usize| {
        let path = reader.join(&format!("buffered/s{i}"));
        let got = std::fs::read(&path).expect("read");
        assert!(got == content(i as u64, SAMPLE_BYTES), "buffered/s{i} read back different bytes");
        let file = std::fs::File::open(&path).expect("open");
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
    };
    (0..SAMPLES).for_each(read_buffered);
    let before = served();
    (0..SAMPLES).for_each(read_buffered);
    let again = served() - before;
    assert!(
        again >= (SAMPLES - 2) as u64,
        "{again} shard reads for {SAMPLES} samples read again: buffered samples were not on probation"
    );
    writer.stop();
    reader.stop();
}

/// A cold small file (never looked up by this mount, no listing fetched ahead) costs one
/// metadata round trip for its open and read: the LOOKUP of the open's path walk brings the
/// chunk records (LookupChunks) and the OPEN that follows takes them instead of asking again.
/// Each file has a directory of its own, so statahead (which starts after a few lookups in one
/// directory) answers none of the lookups. A lookup older than the hand-off time (a `stat`
/// long before the open) does not stand in for the open's own check.
#[test]
fn a_cold_small_file_opens_and_reads_with_one_metadata_round_trip() {
    if fuse_missing() {
        return;
    }
    const FILES: usize = 30;
    let cluster = TestCluster::start(3, "2+1");
    let writer = Mount::start(&cluster, "writer", &[]);
    let exporter = free_addr();
    let reader = Mount::start_logging(&cluster, "reader", &["--metrics-listen", &exporter], CALL_LOG);
    let opens = |result: &str| {
        let text = get_blocking(&exporter, "/metrics").expect("the mount's exporter answers");
        let scraped = metrics::scrape::parse(&text);
        let count =
            |cache: &str| scraped.sum("trove_cache_requests_total", &[("cache", cache), ("result", result)]) as usize;
        (count("mount.open_handoff"), count("mount.open"))
    };
    for i in 0..FILES {
        std::fs::create_dir(writer.join(&format!("d{i}"))).expect("mkdir");
        std::fs::write(writer.join(&format!("d{i}/c")), content(i as u64, 60_000 + i)).expect("write");
    }
    let ops = ["Lookup", "LookupChunks", "GetAttr", "GetChunks"];
    let count = |m: &Mount| -> Vec<usize> { ops.iter().map(|op| calls_logged(m, op)).collect() };
    let before = count(&reader);
    for i in 0..FILES {
        let got = std::fs::read(reader.join(&format!("d{i}/c"))).expect("read");
        assert!(got == content(i as u64, 60_000 + i), "d{i}/c read back different bytes");
    }
    let sent: Vec<usize> = count(&reader).iter().zip(&before).map(|(a, b)| a - b).collect();
    eprintln!("open and read of {FILES} cold small files: {sent:?} ({ops:?}), a directory and a file looked up each");
    assert!(sent[1] >= 2 * FILES, "each path walk looks its directory and file up: {sent:?}");
    assert!(sent[3] <= FILES / 10, "opens asked for chunk records their lookups had brought: {sent:?}");
    assert!(sent.iter().sum::<usize>() <= 2 * FILES + FILES / 10, "{sent:?} metadata calls for {FILES} opens");
    // The mount's counters tell the hand-offs apart from the open cache (off here).
    let handed = opens("hit");
    assert!(
        handed.0 >= FILES - FILES / 10 && handed.1 == 0,
        "opens handed their lookup's answer, open cache hits: {handed:?}"
    );

    // A stat's lookup, a change by the other mount, then an open of the name the kernel still
    // holds (no LOOKUP of its own): the stat's answer is past the hand-off time, so the open
    // asks the service and reads the new bytes.
    std::fs::write(writer.join("d0/late"), content(98, 60_000)).expect("write");
    let path = reader.join("d0/late");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 60_000);
    std::thread::sleep(Duration::from_millis(HANDOFF_MS * 3));
    std::fs::write(writer.join("d0/late"), content(99, 61_000)).expect("rewrite");
    assert!(std::fs::read(&path).expect("read") == content(99, 61_000), "the open read the bytes before the change");
    assert_eq!(opens("hit"), handed, "the late open was not handed the stat's answer");
    assert!(opens("miss").0 >= 1, "the late open counts as one the hand-off missed");
    writer.stop();
    reader.stop();
}

/// How long a LOOKUP's answer waits for its OPEN in the mount (`opencache::HANDOFF_MS`).
const HANDOFF_MS: u64 = 20;

fn lock_probe_spawn(action: &str, path: &Path, how: &str) -> Child {
    Command::new("python3")
        .arg(suite_dir().join("lock_probe.py"))
        .arg(action)
        .arg(path)
        .arg(how)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs lock_probe.py")
}

/// Starts a process holding a lock, once it holds it.
fn lock_probe(action: &str, path: &Path, how: &str) -> Child {
    use std::io::BufRead;
    let mut child = lock_probe_spawn(action, path, how);
    let mut line = String::new();
    let stdout = child.stdout.as_mut().expect("piped stdout");
    std::io::BufReader::new(stdout).read_line(&mut line).expect("lock_probe output");
    assert_eq!(line.trim(), "locked", "lock_probe {action} {how} on {}", path.display());
    child
}

/// Runs a non-blocking lock attempt; returns "granted" or the errno name.
fn lock_probe_once(action: &str, path: &Path, how: &str) -> String {
    let out = lock_probe_spawn(action, path, how).wait_with_output().expect("lock_probe runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn mount_errors_are_clear() {
    if fuse_missing() {
        return;
    }
    let dir = tempfile::Builder::new().prefix("trove-mnt-errors-").tempdir().expect("temp dir");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").expect("file");
    let cases: [(&Path, &str); 2] = [(&file, "is not a directory"), (&dir.path().join("missing"), "does not exist")];
    for (target, expected) in cases {
        let out = trove().args(["mount", "127.0.0.1:1"]).arg(target).output().expect("trove mount runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(expected), "mount on {}: {err}", target.display());
    }
    let out = trove().arg("umount").arg(dir.path()).output().expect("trove umount runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is not mounted"), "umount of a plain directory: {err}");
}

/// Stops a process (SIGSTOP) until dropped (SIGCONT): a storage node that answers nothing for
/// a while, without dying.
struct Paused(rustix::process::Pid);

impl Paused {
    fn pause(pid: u32) -> Paused {
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(self.0, rustix::process::Signal::CONT);
    }
}

/// The storage node (1-based, as `node-N` directories name them) holding shard `index` of the
/// only chunk in the cluster.
fn node_of_shard(cluster: &TestCluster, index: usize) -> usize {
    let shard = cluster
        .shard_files()
        .into_iter()
        .find(|p| p.extension().and_then(|e| e.to_str()) == Some(&index.to_string()))
        .unwrap_or_else(|| panic!("no file of shard {index}"));
    let node = shard
        .components()
        .find_map(|c| c.as_os_str().to_str().and_then(|s| s.strip_prefix("node-")).and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("{} is in no node directory", shard.display()));
    node
}

/// Reads of one file through a mount run side by side: while the node holding one range's
/// shard is stopped, a read of that range waits for it, and a read of another range of the same
/// file, whose shard is on another node, finishes at once instead of queueing behind it.
#[test]
fn reads_of_one_file_overlap_in_time() {
    use std::os::unix::fs::FileExt;
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start(6, "4+2");
    // The file is written through another mount: a mount that wrote it may still hold the
    // written chunk (its release is asynchronous, so a new open can share the writer's state),
    // and the reads below must go to the nodes.
    let data = content(3, 4 << 20);
    let writer = Mount::start(&cluster, "overlap-writer", &[]);
    std::fs::write(writer.join("f"), &data).expect("write");
    writer.stop();
    // Direct I/O: each read(2) is one FUSE read of exactly its bytes (no kernel read-ahead).
    let m = Mount::start(&cluster, "overlap", &["--direct-io"]);
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let node = node_of_shard(&cluster, 0);
    let pid = state["nodes"][node - 1]["pid"].as_integer().expect("pid") as u32;
    assert_ne!(node, node_of_shard(&cluster, 1), "shards 0 and 1 on one node");

    let file = std::sync::Arc::new(std::fs::File::open(m.join("f")).expect("open"));
    let paused = Paused::pause(pid);
    // Bytes 0.. are in shard 0 (on the stopped node), bytes 1 MiB.. in shard 1 (another node).
    let slow = {
        let file = file.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            file.read_exact_at(&mut buf, 0).map(|()| (buf, Instant::now()))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(!slow.is_finished(), "the read on the stopped node finished");
    let started = Instant::now();
    let mut other = vec![0u8; 4096];
    file.read_exact_at(&mut other, (1 << 20) + 4096).expect("read on another node");
    let fast_done = Instant::now();
    let waited = fast_done - started;
    assert!(other[..] == data[(1 << 20) + 4096..(1 << 20) + 8192], "the other range read back different bytes");
    assert!(!slow.is_finished(), "the read on the stopped node finished before the other one");
    assert!(
        waited < Duration::from_secs(5),
        "a read of another range waited {waited:?} for a read of the same file on a stopped node"
    );
    drop(paused);
    let (first, slow_done) = slow.join().expect("reader thread").expect("read on the resumed node");
    assert!(first[..] == data[..4096], "the first range read back different bytes");
    assert!(slow_done > fast_done, "the reads did not overlap");
    eprintln!("a read of another range took {waited:?} while a read of the same file waited for a stopped node");
    drop(file);
    m.stop();
}

/// Opening and reading a file costs one metadata round trip (the open's: the kernel's GETATTR
/// after it is answered from what the open fetched), opening it again within the attribute
/// timeout none (the attributes and first chunk records of the last open are used again), while
/// this mount's own changes show at once.
#[test]
fn repeated_opens_within_the_attribute_timeout_cost_no_round_trip() {
    if fuse_missing() {
        return;
    }
    const FILES: usize = 10;
    let cluster = TestCluster::start(3, "2+1");
    // A long timeout, so that the second round below is well within it however slow the host.
    let m =
        Mount::start_logging(&cluster, "reopen", &["--attr-timeout-ms", "60000", "--open-cache-ms", "60000"], CALL_LOG);
    std::fs::create_dir(m.join("d")).expect("mkdir");
    for i in 0..FILES {
        std::fs::write(m.join(&format!("d/f{i}")), content(i as u64, 4096 + i)).expect("write");
    }
    let open_calls = |m: &Mount| calls_logged(m, "GetChunks") + calls_logged(m, "GetAttr");
    let read_all = || {
        for i in 0..FILES {
            let got = std::fs::read(m.join(&format!("d/f{i}"))).expect("read");
            assert!(got == content(i as u64, 4096 + i), "d/f{i} read back different bytes");
        }
    };
    let before = open_calls(&m);
    read_all();
    let first = open_calls(&m) - before;
    let before = open_calls(&m);
    read_all();
    let again = open_calls(&m) - before;
    eprintln!("{FILES} files opened and read: {first} metadata calls the first time, {again} the second");
    assert!(first >= 1, "the first opens asked nothing: the count does not work");
    assert!(first <= FILES, "{first} metadata calls to open and read {FILES} files");
    assert_eq!(again, 0, "opens within the attribute timeout went to the metadata service");

    // This mount's own change shows at the next open, which asks again.
    let newer = content(99, 5000);
    std::fs::write(m.join("d/f3"), &newer).expect("rewrite");
    let before = open_calls(&m);
    assert!(std::fs::read(m.join("d/f3")).expect("reread") == newer, "an open after this mount's change read old data");
    assert!(open_calls(&m) - before >= 1, "the open after a change used what was kept");
    m.stop();
}

/// A mount's disk cache outlives it: started again on the same directory, the mount reads what
/// the last one read with no storage request; a second mount is refused the directory with the
/// cause; a damaged cache file is never served (the next mount reads the cluster and says so).
#[test]
fn a_mount_started_again_reads_from_its_disk_cache() {
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start(6, "4+2");
    let cache = cluster.path().join("disk-cache-own");
    let cache_arg = cache.to_str().expect("utf-8 path").to_string();
    // Past the kernel's page cache, and no memory cache: reads reach the disk cache.
    let args = ["--disk-cache-dir", &cache_arg, "--chunk-cache-mib", "0", "--direct-io"];
    let data = content(77, 10 << 20);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let files_in = |dir: &Path| -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else if e.file_name() != "lock" {
                    out.push(e.path());
                }
            }
        }
        out
    };
    let first = Mount::start(&cluster, "first", &args);
    std::fs::write(first.join("f"), &data).expect("write through the mount");
    assert!(std::fs::read(first.join("f")).expect("read") == data);
    let started = Instant::now();
    while files_in(&cache).len() < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "chunks did not reach the disk cache: {:?}",
            files_in(&cache)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    first.stop();

    let second = Mount::start(&cluster, "second", &args);
    // The restarted mount lists its cache in the background: wait until a read finds it all.
    let started = Instant::now();
    loop {
        let before_read = runtime.block_on(shard_reads_served(&cluster));
        assert!(std::fs::read(second.join("f")).expect("read again") == data);
        if runtime.block_on(shard_reads_served(&cluster)) == before_read {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "reads after the restart kept reaching the cluster");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Another mount on the same directory is refused, naming the cause.
    let point = tempfile::tempdir().expect("mount point");
    let out = trove()
        .args(["mount", &cluster.dir_str()])
        .arg(point.path())
        .args(["--disk-cache-dir", &cache_arg])
        .output()
        .expect("trove mount runs");
    assert!(!out.status.success(), "a second mount took a disk cache in use");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another process"), "{err}");
    second.stop();

    // A flipped bit in a cache file: the next mount reads the right bytes from the cluster.
    let victim = files_in(&cache).into_iter().max_by_key(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0));
    let victim = victim.expect("a cache file");
    let mut raw = std::fs::read(&victim).expect("cache file");
    let at = raw.len() - 100;
    raw[at] ^= 1;
    std::fs::write(&victim, &raw).expect("damage");
    let third = Mount::start(&cluster, "third", &args);
    let before = runtime.block_on(shard_reads_served(&cluster));
    let started = Instant::now();
    while !third.log_text().contains("fails its checksum") {
        assert!(std::fs::read(third.join("f")).expect("read after damage") == data, "damaged bytes were served");
        assert!(started.elapsed() < Duration::from_secs(20), "the damage was never found: {}", third.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(runtime.block_on(shard_reads_served(&cluster)) > before, "the damaged chunk came from the cluster");
    third.stop();
}

/// An open for reading of a small file whose pages the kernel does not hold starts fetching
/// it: the storage read happens before the first read call, which then costs none. An open for
/// writing, or of a file over 1 MiB, starts nothing.
#[test]
fn opening_a_small_file_for_reading_starts_fetching_it() {
    if fuse_missing() {
        return;
    }
    let cluster = TestCluster::start(6, "4+2");
    let c = cluster.dir_str();
    let local = cluster.path().join("local");
    std::fs::create_dir_all(&local).expect("local dir");
    // Stored through the CLI, so the mount has no pages of them.
    let files = [("small", content(5, 100 << 10)), ("other", content(6, 100 << 10)), ("big", content(7, 3 << 20))];
    for (name, bytes) in &files {
        let path = local.join(name);
        std::fs::write(&path, bytes).expect("local file");
        run_ok(&["--cluster", &c, "put", path.to_str().expect("utf-8"), &format!("/{name}")]);
    }
    let m = Mount::start(&cluster, "prefetch", &["--disk-cache-mib", "0"]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let reads = || runtime.block_on(shard_reads_served(&cluster));

    let before = reads();
    let mut f = std::fs::File::open(m.join("small")).expect("open for reading");
    let started = Instant::now();
    while reads() == before {
        assert!(started.elapsed() < Duration::from_secs(10), "opening the small file fetched nothing");
        std::thread::sleep(Duration::from_millis(10));
    }
    let fetched = reads() - before;
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut f, &mut got).expect("read");
    assert!(got == files[0].1, "the small file read back wrong");
    assert_eq!(reads() - before, fetched, "the read after the open went to the cluster again");
    drop(f);

    for (name, how) in [("other", "read-write"), ("big", "read-only")] {
        let before = reads();
        let f = std::fs::File::options().read(true).write(how == "read-write").open(m.join(name)).expect("open");
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(reads(), before, "a {how} open of {name} fetched data nobody asked for");
        drop(f);
    }
}
