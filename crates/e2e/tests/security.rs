//! The cluster's own links under mutual TLS, with real processes: strangers and other
//! clusters are refused by every port, administration needs the admin credential, a packet
//! capture of the cluster's traffic holds no plaintext of a file it carried, and the authority
//! is replaced under load without a refused read.

mod common;

use common::{run, run_ok, TestCluster};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use wire::tls::{Role, TlsContext};
use wire::{Connection, MetaCall, MetaOp, Service};

/// The addresses of the cluster's services: the metadata service's, then each storage node's.
fn service_addrs(cluster: &TestCluster) -> Vec<(Service, String)> {
    let state: toml::Value =
        toml::from_str(&std::fs::read_to_string(cluster.path().join("cluster.toml")).expect("state")).expect("toml");
    let mut out = vec![(Service::Meta, cluster.meta_addr.clone())];
    for n in state["nodes"].as_array().expect("nodes") {
        out.push((Service::Storage, n["addr"].as_str().expect("addr").to_string()));
    }
    out
}

/// `trove` with `credentials` (`None`: none at all) against the cluster's metadata address.
fn trove_as(credentials: Option<&Path>, cluster: &TestCluster, args: &[&str]) -> std::process::Output {
    let mut cmd = common::trove();
    cmd.env_remove("TROVE_CREDENTIALS").env_remove("TROVE_CLUSTER");
    if let Some(c) = credentials {
        cmd.arg("--credentials").arg(c);
    }
    cmd.arg("--cluster").arg(&cluster.meta_addr).args(args);
    cmd.output().expect("trove runs")
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A file whose content is `marker` over and over.
fn marked_file(dir: &Path, marker: &str, bytes: usize) -> PathBuf {
    let path = dir.join("marked");
    let content: Vec<u8> = marker.as_bytes().iter().copied().cycle().take(bytes).collect();
    std::fs::write(&path, content).expect("write");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_other_clusters_are_refused_by_every_port_and_administration_needs_the_admin_credential() {
    let cluster = TestCluster::start(4, "2+1");
    let scratch = tempfile::tempdir().expect("tempdir");
    let file = marked_file(scratch.path(), "known content ", 1 << 20);
    run_ok(&["--cluster", &cluster.dir_str(), "put", file.to_str().expect("utf-8"), "/known"]);

    // Another cluster's credentials: a whole authority of its own.
    let other = wire::pki::Authority::create("other").expect("authority");
    let intruder = scratch.path().join("intruder");
    other.issue(Role::Admin, "intruder", other.cert_pem(), &intruder).expect("issue");
    // ... and one that trusts our authority too, so that it is our side that refuses it.
    let ours_pem = std::fs::read_to_string(cluster.path().join("tls").join("trust.pem")).expect("trust");
    let sneaky = scratch.path().join("sneaky");
    other.issue(Role::Admin, "sneaky", &format!("{ours_pem}{}", other.cert_pem()), &sneaky).expect("issue");
    let sneaky_ctx = TlsContext::load(&sneaky).expect("load");
    let intruder_ctx = TlsContext::load(&intruder).expect("load");

    for (service, addr) in service_addrs(&cluster) {
        let plain = Connection::connect_with(&addr, service, None).await.err().expect("plaintext refused");
        assert!(plain.to_string().contains("answers like a TLS server"), "{service:?} {addr}: {plain}");
        let theirs = Connection::connect_with(&addr, service, Some(&intruder_ctx)).await.err().expect("refused");
        assert!(theirs.to_string().contains("another cluster"), "{service:?} {addr}: {theirs}");
        let e = Connection::connect_with(&addr, service, Some(&sneaky_ctx)).await.err().expect("refused");
        assert!(e.to_string().contains("refused this process's certificate"), "{service:?} {addr}: {e}");
    }
    // The services say whom they refused, and why.
    let meta_log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).expect("log");
    assert!(meta_log.contains("refused a connection from 127.0.0.1"), "{meta_log}");
    assert!(meta_log.contains("speaks plaintext") && meta_log.contains("TLS handshake failed"), "{meta_log}");

    // ... and the event log has them as authentication failures, from every port.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = run_ok(&["--cluster", &cluster.dir_str(), "events", "--json"]);
        let from = |who: &str| {
            events.lines().any(|l| {
                l.contains(who) && l.contains("refused authentication") && l.contains("a connection from 127.0.0.1")
            })
        };
        if from("\"metadata service 127.0.0.1") && from("\"storage node 127.0.0.1") {
            break;
        }
        assert!(Instant::now() < deadline, "refused connections missing from the event log:\n{events}");
        std::thread::sleep(Duration::from_millis(500));
    }

    // No credential, or another cluster's, reaches no data through the command line either.
    for creds in [None, Some(intruder.as_path()), Some(sneaky.as_path())] {
        let out = trove_as(creds, &cluster, &["cat", "/known"]);
        assert!(!out.status.success(), "{creds:?} read the file");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("known content"));
        assert!(stderr(&out).contains("TLS"), "{creds:?}: {}", stderr(&out));
    }

    // A client credential reads and writes files, but administers nothing.
    let client = cluster.path().join("tls").join("client");
    let out = trove_as(Some(&client), &cluster, &["cat", "/known"]);
    assert!(out.status.success() && out.stdout.starts_with(b"known content known"), "{}", stderr(&out));
    let out = trove_as(Some(&client), &cluster, &["mkdir", "/projects"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for admin in [
        vec!["node", "drain", "1"],
        vec!["quota", "set", "/projects", "--bytes", "1G"],
        vec!["snapshot", "create", "/projects", "s1"],
        vec!["pool", "create", "cold"],
        vec!["job", "start", "scrub"],
    ] {
        let out = trove_as(Some(&client), &cluster, &admin);
        assert!(!out.status.success(), "{admin:?} was done with a client credential");
        assert!(stderr(&out).contains("needs the admin credential"), "{admin:?}: {}", stderr(&out));
    }
    // With an admin credential they are done: one issued to an operator by name.
    let alice = cluster.path().join("ops-alice");
    run_ok(&[
        "cluster",
        "issue",
        "--dir",
        &cluster.dir_str(),
        "--role",
        "admin",
        "--name",
        "ops alice",
        "--out",
        &alice.to_string_lossy(),
    ]);
    let out = trove_as(Some(&alice), &cluster, &["snapshot", "create", "/projects", "s1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The refusals are in the audit trail, with the caller's credential and the name it was
    // issued under; so is what the operator did.
    let events = run_ok(&["--cluster", &cluster.dir_str(), "events"]);
    assert!(
        events.contains("with the client credential \"client\": refused")
            && events.contains("needs the admin credential"),
        "{events}"
    );
    assert!(events.contains("create snapshot s1 of /projects, asked from 127.0.0.1"), "{events}");
    assert!(events.contains("with the admin credential \"ops alice\": done"), "{events}");

    // Only nodes register as storage nodes.
    let client_ctx = TlsContext::load(&client).expect("load");
    let (conn, _) =
        Connection::connect_with(&cluster.meta_addr, Service::Meta, Some(&client_ctx)).await.expect("connect");
    let register = MetaCall {
        request_id: 0,
        op: MetaOp::RegisterNode {
            uuid: 77,
            addr: "127.0.0.1:9".into(),
            drives: vec![],
            pool: String::new(),
            object: None,
        },
    };
    let refused = conn
        .call::<MetaCall, wire::MetaReply>(&register, bytes::Bytes::new(), Duration::from_secs(10))
        .await
        .err()
        .expect("a client may not register a node");
    assert!(refused.to_string().contains("only storage nodes register"), "{refused}");
    assert_eq!(cluster.status()["nodes"].as_array().expect("nodes").len(), 4);
}

/// Captures the loopback traffic to and from `ports` into `pcap` while it lives.
struct Capture {
    child: std::process::Child,
    pcap: PathBuf,
    /// tcpdump's standard error, kept open while it runs.
    err: std::process::ChildStderr,
}

impl Capture {
    fn start(pcap: &Path, ports: &[u16]) -> Capture {
        let filter = ports.iter().map(|p| format!("tcp port {p}")).collect::<Vec<_>>().join(" or ");
        let mut child = Command::new("tcpdump")
            // As root throughout (-Z): the capture file is in a directory only root may enter.
            // A buffer of 256 MiB, so that the kernel drops nothing of a burst at loopback speed.
            .args(["-i", "lo", "-U", "-s", "0", "-B", "262144", "-Z", "root", "-w"])
            .arg(pcap)
            .arg(&filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpdump starts (scripts/deps.sh installs it)");
        // tcpdump says "listening on lo" once it captures.
        let mut err = child.stderr.take().expect("stderr");
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !String::from_utf8_lossy(&seen).contains("listening on") {
            assert!(Instant::now() < deadline, "tcpdump did not start: {}", String::from_utf8_lossy(&seen));
            let mut buf = [0u8; 256];
            let n = std::io::Read::read(&mut err, &mut buf).expect("tcpdump's stderr");
            assert!(n > 0, "tcpdump exited: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        Capture { child, pcap: pcap.to_path_buf(), err }
    }

    /// Stops the capture and returns what it captured.
    fn finish(mut self) -> Vec<u8> {
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        let mut said = String::new();
        let _ = std::io::Read::read_to_string(&mut self.err, &mut said);
        let pcap = std::fs::read(&self.pcap).expect("pcap");
        assert!(pcap.len() > 24, "tcpdump captured nothing: {said}");
        assert!(said.lines().any(|l| l.trim() == "0 packets dropped by kernel"), "tcpdump missed packets: {said}");
        eprintln!("captured {} bytes: {said}", pcap.len());
        pcap
    }
}

fn ports_of(cluster: &TestCluster) -> Vec<u16> {
    service_addrs(cluster)
        .iter()
        .map(|(_, a)| a.rsplit_once(':').expect("port").1.parse().expect("port number"))
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Writes and reads back a marked file while capturing the cluster's traffic; returns the
/// capture.
fn capture_a_write_and_read(cluster: &TestCluster, marker: &str, scratch: &Path) -> Vec<u8> {
    let file = marked_file(scratch, marker, 3 << 20);
    let capture = Capture::start(&scratch.join("cap.pcap"), &ports_of(cluster));
    run_ok(&["--cluster", &cluster.dir_str(), "put", file.to_str().expect("utf-8"), "/marked"]);
    let back = scratch.join("back");
    run_ok(&["--cluster", &cluster.dir_str(), "get", "/marked", back.to_str().expect("utf-8")]);
    assert_eq!(std::fs::read(&back).expect("read"), std::fs::read(&file).expect("read"));
    capture.finish()
}

#[test]
fn a_packet_capture_of_the_clusters_traffic_holds_no_plaintext_of_the_file_it_carried() {
    let marker = format!("secret-{:016x}-", rand::random::<u64>());
    // Control: a plaintext cluster's capture does hold it, so the capture sees the traffic.
    let plain = TestCluster::start_with(3, "2+1", &["--plaintext"]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let captured = capture_a_write_and_read(&plain, &marker, scratch.path());
    assert!(contains(&captured, marker.as_bytes()), "the plaintext cluster's capture lacks the file's content");
    drop(plain);

    let tls = TestCluster::start(3, "2+1");
    let scratch = tempfile::tempdir().expect("tempdir");
    let captured = capture_a_write_and_read(&tls, &marker, scratch.path());
    // Each of the 3 MiB went out once to be stored and once more to be read back.
    assert!(captured.len() > 6 << 20, "the capture holds {} bytes: it missed the traffic", captured.len());
    assert!(!contains(&captured, marker.as_bytes()), "the TLS cluster's traffic holds the file's content in plaintext");
    assert!(!contains(&captured, b"/marked"), "the TLS cluster's traffic holds the file's name in plaintext");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authority_is_replaced_under_load_and_the_old_credentials_are_refused_after() {
    let cluster = TestCluster::start(4, "2+1");
    let scratch = tempfile::tempdir().expect("tempdir");
    let dir = cluster.dir_str();
    for i in 0..6 {
        let f = marked_file(scratch.path(), &format!("file {i} "), 256 << 10);
        run_ok(&["--cluster", &dir, "put", f.to_str().expect("utf-8"), &format!("/f{i}")]);
    }
    // The admin credential as it was before: an outsider's copy.
    let before = scratch.path().join("before");
    std::fs::create_dir_all(&before).expect("mkdir");
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(cluster.path().join("tls/admin").join(f), before.join(f)).expect("copy");
    }
    // Readers in fresh processes all through the rotation: every read must succeed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut reads = 0;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let out = run(&["--cluster", &dir, "cat", &format!("/f{}", i % 6)]);
                assert!(
                    out.status.success() && out.stdout.starts_with(format!("file {} ", i % 6).as_bytes()),
                    "a read during the rotation failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                reads += 1;
                i += 1;
            }
            reads
        })
    };
    let rotate = Command::new(e2e::trove())
        .args(["cluster", "rotate-ca", "--dir", &dir, "--step-ms", "2500"])
        .output()
        .expect("rotate");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().expect("the reader saw every read succeed");
    assert!(rotate.status.success(), "{}", stderr(&rotate));
    assert!(reads >= 5, "only {reads} reads ran during the rotation");

    // The old credential is refused now; the rotated cluster serves everything.
    let out = trove_as(Some(&before), &cluster, &["cat", "/f0"]);
    assert!(!out.status.success() && stderr(&out).contains("TLS handshake failed"), "{}", stderr(&out));
    for i in 0..6 {
        let out = run_ok(&["--cluster", &dir, "cat", &format!("/f{i}")]);
        assert!(out.starts_with(&format!("file {i} ")));
    }
    // A restarted node comes back with its new credential.
    cluster.kill_node(2);
    cluster.restart_node(2);
    cluster.wait_status(Duration::from_secs(30), "every node up after the restart", |s| {
        s["nodes"].as_array().is_some_and(|n| n.iter().all(|n| n["state"] == "up"))
    });
    let issued = cluster.path().join("tls").join("ca").join("ca.pem");
    let trust = std::fs::read_to_string(cluster.path().join("node-2/tls/ca.pem")).expect("trust");
    assert_eq!(trust, std::fs::read_to_string(issued).expect("ca"), "node 2 trusts exactly the new authority");
}

/// Waits until the status shows every node up.
fn wait_all_up(cluster: &TestCluster) {
    cluster.wait_status(Duration::from_secs(30), "every node up", |s| {
        s["nodes"].as_array().is_some_and(|n| n.iter().all(|n| n["state"] == "up"))
    });
}

#[test]
fn shards_at_rest_hold_no_plaintext_open_only_with_their_key_and_read_back_after_a_rekey() {
    let cluster = TestCluster::start_with(6, "4+2", &["--encrypt"]);
    let dir = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("tempdir");
    let marker = format!("at-rest-{:016x}-", rand::random::<u64>());
    let file = marked_file(scratch.path(), &marker, 3 << 20);
    run_ok(&["--cluster", &dir, "put", file.to_str().expect("utf-8"), "/secret"]);
    let content = std::fs::read(&file).expect("read");

    // Every shard on every drive is sealed (format version 2) and holds none of the file.
    let shards = cluster.shard_files();
    assert_eq!(shards.len(), 6, "one chunk of 4+2: {shards:?}");
    for shard in &shards {
        let bytes = std::fs::read(shard).expect("shard");
        assert_eq!(&bytes[4..6], &2u16.to_le_bytes(), "{} is not sealed", shard.display());
        assert!(!contains(&bytes, marker.as_bytes()), "{} holds the file's content", shard.display());
    }
    let keyring = cluster.path().join("node-1/drive0/keyring");
    assert!(keyring.exists(), "the drive has no keyring");

    // Re-keying needs the node stopped.
    let new_key = cluster.path().join("keys/kek-2");
    run_ok(&["encryption", "keygen", "--out", new_key.to_str().expect("utf-8")]);
    let config = |n: usize| cluster.path().join(format!("node-{n}/storage.toml")).to_str().expect("utf-8").to_string();
    let rekey = |n: usize| {
        run(&[
            "encryption",
            "rekey",
            "--config",
            &config(n),
            "--new-key-file",
            new_key.to_str().expect("utf-8"),
            "--new-data-key",
        ])
    };
    let busy = rekey(2);
    assert!(!busy.status.success() && stderr(&busy).contains("stop it first"), "{}", stderr(&busy));

    // Node 1 stopped and re-keyed: its old key opens nothing now.
    cluster.kill_node(1);
    let out = rekey(1);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = cluster.path().join("logs/node-1.log");
    let logged_before = std::fs::read_to_string(&log).expect("log").len();
    let _ = run(&["cluster", "restart-node", "--dir", &dir, "--node", "1"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).expect("log");
        if text[logged_before..].contains("does not open the keyring") {
            break;
        }
        assert!(Instant::now() < deadline, "node 1 started with the old key: {}", &text[logged_before..]);
        std::thread::sleep(Duration::from_millis(200));
    }
    // With the new key it starts, and with two other nodes down every read needs its shards.
    let text = std::fs::read_to_string(config(1)).expect("config");
    let old_key = cluster.path().join("keys/kek");
    let text = text.replace(old_key.to_str().expect("utf-8"), new_key.to_str().expect("utf-8"));
    std::fs::write(config(1), text).expect("config");
    cluster.restart_node(1);
    wait_all_up(&cluster);
    cluster.kill_node(2);
    cluster.kill_node(3);
    let back = scratch.path().join("back");
    run_ok(&["--cluster", &dir, "get", "/secret", back.to_str().expect("utf-8")]);
    assert!(std::fs::read(&back).expect("read") == content, "the file read back differs");
    // New shards on node 1 are sealed with its new data key (id 2).
    let f2 = marked_file(scratch.path(), &marker, 1 << 20);
    run_ok(&["--cluster", &dir, "put", f2.to_str().expect("utf-8"), "/secret2"]);
    let ids: Vec<u32> = common::shard_files_in(&cluster.path().join("node-1"))
        .iter()
        .map(|p| {
            let b = std::fs::read(p).expect("shard");
            u32::from_le_bytes([b[32], b[33], b[34], b[35]])
        })
        .collect();
    assert!(ids.contains(&1) && ids.contains(&2), "node 1's shards are sealed with keys {ids:?}");

    // Node 4 moves its key into an external KMS (a plug-in holding a master key the node never
    // sees): re-keyed while stopped, started with `kms_command`, and with two other nodes down
    // every read needs its shards.
    cluster.restart_node(2);
    cluster.restart_node(3);
    wait_all_up(&cluster);
    let master = cluster.path().join("keys/kms-master");
    std::fs::write(&master, format!("{}\n", "5c".repeat(32))).expect("master key");
    let plugin = concat!(env!("CARGO_MANIFEST_DIR"), "/../storage/tests/kms/test-kms.sh");
    let master_arg = master.to_str().expect("utf-8");
    cluster.kill_node(4);
    let out = run(&["encryption", "rekey", "--config", &config(4), "--new-kms-command", "sh", plugin, master_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(said.contains("kms_command = [\"sh\""), "rekey says what to configure: {said}");
    let ring = std::fs::read(cluster.path().join("node-4/drive0/keyring")).expect("keyring");
    assert_eq!(&ring[4..6], &2u16.to_le_bytes(), "node 4's keyring is the KMS plug-in's (version 2)");
    let text = std::fs::read_to_string(config(4)).expect("config");
    let line = format!("key_file = {:?}", old_key.to_str().expect("utf-8"));
    assert!(text.contains(&line), "{text}");
    let text = text.replace(&line, &format!("kms_command = [\"sh\", {plugin:?}, {master_arg:?}]"));
    std::fs::write(config(4), text).expect("config");
    cluster.restart_node(4);
    wait_all_up(&cluster);
    cluster.kill_node(5);
    cluster.kill_node(6);
    let back = scratch.path().join("back-kms");
    run_ok(&["--cluster", &dir, "get", "/secret", back.to_str().expect("utf-8")]);
    assert!(std::fs::read(&back).expect("read") == content, "the file read back through the KMS differs");
}
