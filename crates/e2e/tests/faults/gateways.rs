//! The S3 and NFS gateways under slow, oversized and malformed input, from real clients: raw
//! TCP sockets for what no well-behaved client sends (bodies shorter than announced, heads
//! and calls that stall, 200 MB of garbage), boto3 and awscli for what a user reads, libnfs
//! and the FUSE mount for what other front ends list. Every gateway runs with short timeouts
//! set by its flags, so each test takes seconds.

use crate::common::{trove, TestCluster};
use crate::gw::{aws, need, python, run, run_ok, Gateway};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Slack for process scheduling on a loaded 2-core machine, added to every timeout checked.
const SLACK: Duration = Duration::from_millis(2500);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("runtime")
}

/// An HTTP answer read off a raw socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn code(&self) -> Option<&str> {
        self.tag("Code")
    }

    fn message(&self) -> Option<&str> {
        self.tag("Message")
    }

    fn tag(&self, tag: &str) -> Option<&str> {
        let start = self.body.find(&format!("<{tag}>"))? + tag.len() + 2;
        let end = start + self.body[start..].find(&format!("</{tag}>"))?;
        Some(&self.body[start..end])
    }
}

/// Reads one HTTP answer (head, then a Content-Length body) until `deadline`; None if the
/// connection ended or the time ran out first.
fn read_answer(s: &mut TcpStream, deadline: Instant) -> Option<Answer> {
    read_answer_to(s, deadline, false)
}

/// [`read_answer`] of a request whose answer has no body (`no_body`: HEAD).
fn read_answer_to(s: &mut TcpStream, deadline: Instant, no_body: bool) -> Option<Answer> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let status = head.split(' ').nth(1).and_then(|c| c.parse().ok())?;
            let len: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if no_body || body.len() >= len {
                return Some(Answer { status, head: head.to_string(), body: body.to_string() });
            }
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1)))).ok()?;
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Waits until the peer closes `s` (EOF or reset); how long it took, or None at `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut chunk = [0u8; 4096];
    while started.elapsed() < within {
        s.set_read_timeout(Some(Duration::from_millis(100))).ok()?;
        match s.read(&mut chunk) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// Sends a whole anonymous request without a body and reads the answer.
fn request(addr: &str, method: &str, path: &str) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .expect("send");
    read_answer_to(&mut s, Instant::now() + Duration::from_secs(20), method == "HEAD")
        .unwrap_or_else(|| panic!("no answer to {method} {path}"))
}

/// The peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib << 10
}

/// The names in a cluster directory, including temporary ones (what the client library
/// otherwise hides).
fn raw_names(cluster: &TestCluster, dir: &str) -> Vec<String> {
    runtime().block_on(async {
        let c = cluster.client().await;
        let d = c.resolve(dir).await.expect("directory");
        let (entries, _) = c.readdir_page_with_tmp(d.ino, "", 1000).await.expect("listing");
        entries.into_iter().map(|e| e.name).collect()
    })
}

/// The names the client library lists in a cluster directory.
fn listed_names(cluster: &TestCluster, dir: &str) -> Vec<String> {
    runtime().block_on(async {
        let c = cluster.client().await;
        let d = c.resolve(dir).await.expect("directory");
        c.readdir(d.ino).await.expect("listing").into_iter().map(|e| e.name).collect()
    })
}

fn nfs_url(gw: &Gateway, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?nfsport={0}&mountport={0}&version=3", gw.port())
}

/// A `trove mount` of the cluster, unmounted on drop.
struct Mount {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Mount {
    /// Mounts the cluster and waits until `ready` (a path below the mount point) appears.
    fn start(cluster: &TestCluster, ready: &str) -> Mount {
        let dir = tempfile::Builder::new().prefix("trove-faults-mnt-").tempdir().expect("mount point");
        let child = trove()
            .args(["mount", &cluster.dir_str()])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("trove mount starts");
        let started = Instant::now();
        while !dir.path().join(ready).exists() {
            assert!(started.elapsed() < Duration::from_secs(30), "the mount did not show {ready}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Mount { child: Some(child), dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = trove().arg("umount").arg(self.dir.path()).output();
        if let Some(mut child) = self.child.take() {
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = trove().args(["umount", "--lazy"]).arg(self.dir.path()).output();
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Checks that every front end lists exactly `want` in bucket `bkt` (native client, CLI, S3,
/// NFS, and the mount when there is one).
fn every_front_end_lists(
    cluster: &TestCluster,
    s3: &Gateway,
    nfs: &Gateway,
    mount: Option<&Path>,
    home: &Path,
    want: &[&str],
) {
    assert_eq!(listed_names(cluster, "/bkt"), want, "client library listing");
    let cli = run_ok(trove().args(["--cluster", &cluster.dir_str(), "ls", "/bkt"]));
    assert_eq!(cli.split_whitespace().filter(|w| !w.is_empty()).collect::<Vec<_>>(), want, "trove ls: {cli}");
    let listed = run_ok(aws(s3, home).args([
        "s3api",
        "list-objects-v2",
        "--bucket",
        "bkt",
        "--query",
        "Contents[].Key",
        "--output",
        "text",
    ]));
    assert_eq!(listed.split_whitespace().collect::<Vec<_>>(), want, "S3 listing: {listed}");
    let nfs_ls = run_ok(Command::new("nfs-ls").arg(nfs_url(nfs, "/bkt")));
    let names: Vec<&str> =
        nfs_ls.lines().filter_map(|l| l.split_whitespace().last()).filter(|n| *n != "." && *n != "..").collect();
    assert_eq!(names, want, "NFS listing: {nfs_ls}");
    if let Some(m) = mount {
        let mut names: Vec<String> = std::fs::read_dir(m.join("bkt"))
            .expect("list through the mount")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, want, "mount listing");
    }
}

#[test]
fn a_put_whose_body_stalls_is_cut_and_its_temporary_file_is_never_listed() {
    need("aws");
    need("nfs-ls");
    let cluster = TestCluster::start(3, "2+1");
    runtime().block_on(async {
        let c = cluster.client().await;
        c.mkdir_p("/bkt").await.expect("bucket");
        c.write_file("/bkt/visible.txt", b"here").await.expect("object");
    });
    let stall = Duration::from_millis(2000);
    let s3 = Gateway::s3(&cluster, "s3-stall", &["--anonymous", "read-write", "--body-idle-timeout-ms", "2000"]);
    let nfs = Gateway::nfs(&cluster, "nfs-stall", "/", &[]);
    let mount = Path::new("/dev/fuse").exists().then(|| Mount::start(&cluster, "bkt/visible.txt"));
    if mount.is_none() {
        eprintln!("NOTE: /dev/fuse is absent; the mount's listing was not checked");
    }
    let home = tempfile::tempdir().expect("home");

    // A PUT announcing 5 GiB that sends 4 bytes, then one byte every 400 ms: in progress.
    let mut put = TcpStream::connect(&s3.addr).expect("connect");
    write!(put, "PUT /bkt/big.bin HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\nabcd", s3.addr, 5u64 << 30)
        .expect("send");
    let started = Instant::now();
    let tmp = loop {
        if let Some(n) = raw_names(&cluster, "/bkt").into_iter().find(|n| n.starts_with(client::TMP_PREFIX)) {
            break n;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the upload's temporary file never appeared");
        std::thread::sleep(Duration::from_millis(50));
    };
    let trickling = Arc::new(AtomicBool::new(true));
    let trickler = {
        let (mut s, on) = (put.try_clone().expect("clone"), trickling.clone());
        // Returns when the last byte went out.
        std::thread::spawn(move || {
            let mut last = Instant::now();
            while on.load(Ordering::Relaxed) {
                if s.write_all(b"x").is_err() {
                    break;
                }
                last = Instant::now();
                std::thread::sleep(Duration::from_millis(400));
            }
            last
        })
    };
    every_front_end_lists(&cluster, &s3, &nfs, mount.as_ref().map(Mount::path), home.path(), &["visible.txt"]);
    // Hidden, not gone: reachable by its exact name.
    runtime().block_on(async {
        let c = cluster.client().await;
        let bkt = c.resolve("/bkt").await.expect("bucket");
        c.lookup(bkt.ino, &tmp).await.expect("the temporary file by name");
    });
    if let Some(m) = &mount {
        assert!(m.path().join("bkt").join(&tmp).exists(), "the temporary file by name through the mount");
    }
    assert!(trickling.load(Ordering::Relaxed) && !trickler.is_finished(), "the upload was still in progress");

    // The body stops: the request is cut within the timeout, answered, and nothing is left.
    trickling.store(false, Ordering::Relaxed);
    let stopped = trickler.join().expect("trickler");
    let answer = read_answer(&mut put, stopped + stall + SLACK + SLACK).unwrap_or_else(|| {
        panic!("no answer within {:?} of the body stalling: {}", stall + SLACK + SLACK, s3.log_text())
    });
    let waited = stopped.elapsed();
    assert!(
        waited < stall + SLACK && waited + Duration::from_millis(100) >= stall,
        "cut {waited:?} after the last byte"
    );
    assert_eq!((answer.status, answer.code()), (400, Some("RequestTimeout")), "{answer:?}");
    assert!(answer.message().is_some_and(|m| m.contains("2000 ms")), "{answer:?}");
    assert!(answer.head.to_ascii_lowercase().contains("connection: close"), "{answer:?}");
    assert_eq!(raw_names(&cluster, "/bkt"), ["visible.txt"], "the temporary file was removed");
    assert_eq!(request(&s3.addr, "HEAD", "/bkt/big.bin").status, 404, "nothing was published");

    // A body shorter than its Content-Length whose client then closes: no object, no file.
    let mut short = TcpStream::connect(&s3.addr).expect("connect");
    write!(short, "PUT /bkt/short.bin HTTP/1.1\r\nHost: {}\r\nContent-Length: 100000\r\n\r\n0123456789", s3.addr)
        .expect("send");
    std::thread::sleep(Duration::from_millis(300));
    short.shutdown(Shutdown::Write).expect("half-close");
    if let Some(a) = read_answer(&mut short, Instant::now() + stall + SLACK) {
        assert_eq!((a.status, a.code()), (400, Some("IncompleteBody")), "{a:?}");
    }
    let started = Instant::now();
    while raw_names(&cluster, "/bkt") != ["visible.txt"] {
        assert!(started.elapsed() < stall + SLACK, "left behind: {:?}", raw_names(&cluster, "/bkt"));
        std::thread::sleep(Duration::from_millis(100));
    }
    every_front_end_lists(&cluster, &s3, &nfs, mount.as_ref().map(Mount::path), home.path(), &["visible.txt"]);
    assert!(!s3.log_text().contains("ERROR"), "{}", s3.log_text());
}

#[test]
fn slow_request_heads_and_idle_connections_are_cut() {
    let cluster = TestCluster::start(3, "2+1");
    runtime().block_on(async { cluster.client().await.mkdir_p("/bkt").await.expect("bucket") });
    let limit = Duration::from_millis(1500);
    let gw = Gateway::s3(&cluster, "s3-heads", &["--anonymous", "read-write", "--header-timeout-ms", "1500"]);

    // A head sent a byte every 200 ms never completes: the connection is cut.
    let mut slow = TcpStream::connect(&gw.addr).expect("connect");
    let started = Instant::now();
    write!(slow, "GET /bkt?list-type=2 HTTP/1.1\r\nHost: {}\r\n", gw.addr).expect("send");
    let mut cut = None;
    for b in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter().cycle() {
        if slow.write_all(&[*b]).is_err() || started.elapsed() > limit + SLACK + SLACK {
            cut = closed_within(&mut slow, Duration::from_millis(500)).map(|_| started.elapsed());
            break;
        }
        if let Some(after) = closed_within(&mut slow, Duration::from_millis(200)) {
            cut = Some(started.elapsed() - Duration::from_millis(200) + after);
            break;
        }
    }
    let cut = cut.expect("a slow head was never cut");
    assert!(cut + Duration::from_millis(300) >= limit && cut < limit + SLACK, "a slow head was cut after {cut:?}");

    // A connection that sends nothing, and one idle after a request, are closed as well.
    let mut silent = TcpStream::connect(&gw.addr).expect("connect");
    let mut kept = TcpStream::connect(&gw.addr).expect("connect");
    write!(kept, "GET /bkt?list-type=2 HTTP/1.1\r\nHost: {}\r\n\r\n", gw.addr).expect("send");
    let a = read_answer(&mut kept, Instant::now() + Duration::from_secs(10)).expect("an answer");
    assert_eq!(a.status, 200, "{a:?}");
    let silent_after = closed_within(&mut silent, limit + SLACK).expect("a silent connection stays open");
    let kept_after = closed_within(&mut kept, limit + SLACK).expect("an idle keep-alive connection stays open");
    assert!(silent_after < limit + SLACK && kept_after < limit + SLACK, "{silent_after:?} {kept_after:?}");
    // Meanwhile and afterwards, requests are served.
    assert_eq!(request(&gw.addr, "GET", "/bkt?list-type=2").status, 200);
    assert!(!gw.log_text().contains("ERROR"), "{}", gw.log_text());
}

/// `python3` making an anonymous request from the source address `from`; prints the status.
fn status_from(from: &str, addr: &str, path: &str) -> String {
    let (host, port) = addr.rsplit_once(':').expect("host:port");
    let script = format!(
        "import http.client\nc = http.client.HTTPConnection('{host}', {port}, timeout=20, source_address=('{from}', 0))\nc.request('GET', '{path}')\nprint(c.getresponse().status)\n"
    );
    run_ok(Command::new("python3").args(["-c", &script])).trim().to_string()
}

#[test]
fn connections_over_the_per_client_limit_are_refused_and_others_still_served() {
    need("python3");
    need("nfs-ls");
    let cluster = TestCluster::start(3, "2+1");
    runtime().block_on(async { cluster.client().await.mkdir_p("/bkt").await.expect("bucket") });
    let gw = Gateway::s3(
        &cluster,
        "s3-conns",
        &["--anonymous", "read-write", "--connections-per-client-max", "3", "--header-timeout-ms", "60000"],
    );
    // Three idle connections from 127.0.0.1 fill its share.
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&gw.addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    for i in 0..10 {
        let started = Instant::now();
        let mut s = TcpStream::connect(&gw.addr).expect("connect");
        let _ = write!(s, "GET /bkt?list-type=2 HTTP/1.1\r\nHost: {}\r\n\r\n", gw.addr);
        let a =
            read_answer(&mut s, Instant::now() + Duration::from_secs(5)).expect("an answer to a refused connection");
        assert_eq!((a.status, a.code()), (503, Some("SlowDown")), "refusal {i}: {a:?}");
        assert!(a.message().is_some_and(|m| m.contains("connections_per_client_max = 3")), "{a:?}");
        assert!(closed_within(&mut s, Duration::from_secs(3)).is_some(), "a refused connection is closed");
        assert!(started.elapsed() < Duration::from_secs(2), "refused slowly: {:?}", started.elapsed());
    }
    // Another client address is served meanwhile.
    assert_eq!(status_from("127.0.0.2", &gw.addr, "/bkt?list-type=2"), "200");
    // A freed place is taken again.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(request(&gw.addr, "GET", "/bkt?list-type=2").status, 200);
    let log = gw.log_text();
    let warnings = log.lines().filter(|l| l.contains("refused")).count();
    assert_eq!(warnings, 1, "ten refusals in a few seconds make one warning:\n{log}");
    assert!(log.contains("connections_per_client_max = 3") && !log.contains("ERROR"), "{log}");
    drop(held);

    // NFS: connections over the limit are closed at once; the client is served once one goes.
    let nfs = Gateway::nfs(&cluster, "nfs-conns", "/", &["--connections-per-client-max", "2"]);
    let mut nfs_held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(&nfs.addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut over = TcpStream::connect(&nfs.addr).expect("connect");
    assert!(closed_within(&mut over, Duration::from_secs(2)).is_some(), "a connection over the NFS limit stays open");
    let refused = run(Command::new("nfs-ls").arg(nfs_url(&nfs, "/")));
    assert!(!refused.status.success(), "nfs-ls over the limit succeeded");
    nfs_held.clear();
    std::thread::sleep(Duration::from_millis(300));
    let ls = run_ok(Command::new("nfs-ls").arg(nfs_url(&nfs, "/")));
    assert!(ls.contains("bkt"), "{ls}");
    assert!(nfs.log_text().contains("connections_per_client_max = 2"), "{}", nfs.log_text());
}

#[test]
fn oversized_and_malformed_xml_bodies_are_refused_with_4xx_and_bounded_memory() {
    let cluster = TestCluster::start(3, "2+1");
    runtime().block_on(async { cluster.client().await.mkdir_p("/bkt").await.expect("bucket") });
    let gw = Gateway::s3(&cluster, "s3-xml", &["--anonymous", "read-write"]);
    let created = request(&gw.addr, "POST", "/bkt/mp.bin?uploads");
    let upload = created.tag("UploadId").unwrap_or_else(|| panic!("no upload id: {created:?}")).to_string();
    let peak_before = peak_rss(gw.pid());
    const GARBAGE_BYTES: u64 = 200 << 20;

    // 200 MB of garbage as a CompleteMultipartUpload body, announced and then chunked: a 4xx
    // arrives while the client is still sending, and the gateway holds little of it.
    for chunked in [false, true] {
        let mut s = TcpStream::connect(&gw.addr).expect("connect");
        let framing =
            if chunked { "Transfer-Encoding: chunked".to_string() } else { format!("Content-Length: {GARBAGE_BYTES}") };
        write!(s, "POST /bkt/mp.bin?uploadId={upload} HTTP/1.1\r\nHost: {}\r\n{framing}\r\n\r\n", gw.addr)
            .expect("send");
        let sending = Arc::new(AtomicBool::new(true));
        let writer = {
            let (mut w, on) = (s.try_clone().expect("clone"), sending.clone());
            std::thread::spawn(move || {
                let piece = vec![b'<'; 1 << 20];
                let mut sent = 0u64;
                while sent < GARBAGE_BYTES && on.load(Ordering::Relaxed) {
                    let ok = if chunked {
                        write!(w, "{:x}\r\n", piece.len()).is_ok()
                            && w.write_all(&piece).is_ok()
                            && w.write_all(b"\r\n").is_ok()
                    } else {
                        w.write_all(&piece).is_ok()
                    };
                    if !ok {
                        break;
                    }
                    sent += piece.len() as u64;
                }
                sent
            })
        };
        let started = Instant::now();
        let a = read_answer(&mut s, started + Duration::from_secs(10)).expect("an answer while sending");
        let took = started.elapsed();
        sending.store(false, Ordering::Relaxed);
        let _ = s.shutdown(Shutdown::Both);
        let sent = writer.join().expect("writer");
        assert_eq!((a.status, a.code()), (400, Some("MaxMessageLengthExceeded")), "chunked {chunked}: {a:?}");
        assert!(a.message().is_some_and(|m| m.contains(&s3gw::XML_BODY_BYTES_MAX.to_string())), "{a:?}");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        assert!(sent < GARBAGE_BYTES, "the gateway read all {sent} bytes");
    }
    let peak_after = peak_rss(gw.pid());
    assert!(
        peak_after < peak_before + (48 << 20),
        "the gateway's peak memory grew from {peak_before} to {peak_after} bytes"
    );

    // Small malformed bodies: MalformedXML with a message.
    for (path, body) in
        [(format!("/bkt/mp.bin?uploadId={upload}"), "not xml at all"), ("/bkt?delete".to_string(), "<Delete><Obj")]
    {
        let mut s = TcpStream::connect(&gw.addr).expect("connect");
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            gw.addr,
            body.len()
        )
        .expect("send");
        let a = read_answer(&mut s, Instant::now() + Duration::from_secs(10)).expect("an answer");
        assert!(a.status == 400 && a.message().is_some_and(|m| !m.is_empty()), "{path}: {a:?}");
        if path.contains("uploadId") {
            assert_eq!(a.code(), Some("MalformedXML"), "{a:?}");
        }
    }
    // The upload itself is untouched and the log holds no error.
    let parts = request(&gw.addr, "GET", &format!("/bkt/mp.bin?uploadId={upload}"));
    assert_eq!(parts.status, 200, "{parts:?}");
    let log = gw.log_text();
    assert!(!log.contains("ERROR") && !log.contains("WARN"), "client mistakes logged above debug:\n{log}");
}

#[test]
fn boto3_sees_every_error_code_with_a_message() {
    need("python3");
    let probe = run(Command::new("python3").args(["-c", "import boto3"]));
    assert!(probe.status.success(), "boto3 is needed by this test: run scripts/deps.sh");
    let cluster = TestCluster::start(3, "2+1");
    let gw = Gateway::s3(&cluster, "s3-messages", &[]);
    let script = r#"
import os
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

E = os.environ["S3_ENDPOINT"]
cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, signature_version="s3v4")
s3 = boto3.client("s3", endpoint_url=E, config=cfg)
s3.create_bucket(Bucket="msgs")

def garbage_body(request, **kwargs):
    # What no SDK sends, signed like what it does: the body is replaced before signing.
    request.data = b"<CompleteMultipartUpload><Part><PartNum"
    for name in list(request.headers.keys()):
        if name.lower() == "content-md5" or name.lower().startswith("x-amz-checksum-"):
            del request.headers[name]

def error(fn):
    try:
        fn()
    except ClientError as e:
        err = e.response.get("Error", {})
        return err.get("Code"), err.get("Message"), str(e)
    return None, None, "no error"

upload = s3.create_multipart_upload(Bucket="msgs", Key="mp")["UploadId"]
garbled = boto3.client("s3", endpoint_url=E, config=cfg)
garbled.meta.events.register("before-sign.s3.CompleteMultipartUpload", garbage_body)
cases = {
    "InvalidBucketName": lambda: s3.create_bucket(Bucket="ab"),
    "SignatureDoesNotMatch": lambda: boto3.client("s3", endpoint_url=E, config=cfg, aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key="wrong").list_objects_v2(Bucket="msgs"),
    "InvalidAccessKeyId": lambda: boto3.client("s3", endpoint_url=E, config=cfg, aws_access_key_id="nobody", aws_secret_access_key="x").list_buckets(),
    "MalformedXML": lambda: garbled.complete_multipart_upload(Bucket="msgs", Key="mp", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": "x"}]}),
    "NoSuchKey": lambda: s3.get_object(Bucket="msgs", Key="missing"),
    "InvalidArgument": lambda: s3.put_object(Bucket="msgs", Key=".trove-s3/x", Body=b"x"),
    "InvalidArgument.tmp": lambda: s3.put_object(Bucket="msgs", Key="d/.trove-tmp.x", Body=b"x"),
}
for want, fn in cases.items():
    code, message, text = error(fn)
    print(f"{want}\t{code}\t{message}\t{text}")
"#;
    let out = run(python(&gw).args(["-c", script]));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "boto3 script failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut seen = 0;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let [want, code, message, text] = f[..] else { panic!("unexpected line {line:?}") };
        seen += 1;
        assert_eq!(code, want.split('.').next().unwrap_or_default(), "{line}");
        assert!(message != "None" && message.len() > 10, "{want} came without a message: {line}");
        assert!(!text.contains("Unknown"), "boto3 shows \"Unknown\": {line}");
        match want {
            "InvalidBucketName" => assert!(message.contains("\"ab\""), "{line}"),
            "InvalidAccessKeyId" => assert!(message.contains("nobody"), "{line}"),
            "InvalidArgument" => assert!(message.contains("\".trove-s3\" is reserved"), "{line}"),
            "InvalidArgument.tmp" => {
                assert!(message.contains("\".trove-tmp.\" are reserved"), "{line}")
            }
            _ => {}
        }
    }
    assert_eq!(seen, 7, "{stdout}");
    let log = gw.log_text();
    assert!(!log.contains("ERROR"), "client mistakes logged at ERROR:\n{log}");
}

#[test]
fn nfs_calls_that_stall_or_announce_too_much_close_the_connection() {
    need("nfs-ls");
    let cluster = TestCluster::start(3, "2+1");
    runtime().block_on(async { cluster.client().await.mkdir_p("/bkt").await.expect("directory") });
    let call_stall = Duration::from_millis(1000);
    let idle = Duration::from_millis(3000);
    let gw = Gateway::nfs(&cluster, "nfs-bad", "/", &["--call-idle-timeout-ms", "1000", "--idle-timeout-ms", "3000"]);
    let peak_before = peak_rss(gw.pid());

    // A record mark announcing a 1 GiB fragment: closed before nfsserve sees (or allocates) it.
    let mut huge = TcpStream::connect(&gw.addr).expect("connect");
    huge.write_all(&(1u32 << 31 | 1 << 30).to_be_bytes()).expect("send");
    huge.write_all(&[0u8; 64]).expect("send");
    let after = closed_within(&mut huge, SLACK).expect("an oversized call was not refused");
    assert!(after < SLACK, "{after:?}");
    // Half a call, then nothing: closed after the call stall limit.
    let mut half = TcpStream::connect(&gw.addr).expect("connect");
    half.write_all(&(1u32 << 31 | 200).to_be_bytes()).expect("send");
    half.write_all(&[0u8; 40]).expect("send");
    let after = closed_within(&mut half, call_stall + SLACK).expect("a stalled call was not cut");
    assert!(after + Duration::from_millis(300) >= call_stall, "{after:?}");
    // A connection that never sends anything: closed after the idle limit.
    let mut silent = TcpStream::connect(&gw.addr).expect("connect");
    let after = closed_within(&mut silent, idle + SLACK).expect("an idle connection was not closed");
    assert!(after + Duration::from_millis(300) >= idle, "{after:?}");
    // Real clients are served throughout.
    let ls = run_ok(Command::new("nfs-ls").arg(nfs_url(&gw, "/")));
    assert!(ls.contains("bkt"), "{ls}");
    let peak_after = peak_rss(gw.pid());
    assert!(peak_after < peak_before + (64 << 20), "peak memory grew from {peak_before} to {peak_after} bytes");
    assert!(!gw.log_text().contains("ERROR"), "{}", gw.log_text());
}
