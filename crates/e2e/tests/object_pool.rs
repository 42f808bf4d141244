//! An object pool on a real S3 server that is not Trove (Garage): storage nodes that keep their
//! shards as objects in a Garage bucket under prefixes of their own, beside a default pool of
//! nodes with drives. Files put in the object pool are read back bit-exact through `trove get`,
//! the FUSE mount and the S3 gateway under the same path; `stat --layout` names the pool; the
//! objects are looked at in the bucket with boto3; a shard object damaged in Garage is found by
//! the checksums and repaired by scrub (1+1) or reported (1+0); the credentials appear in no
//! status, listing or log; and a wrong endpoint, wrong credentials or a missing bucket stop the
//! node at start with the cause named. Over https (another cluster's S3 gateway with a
//! certificate of a private CA), a node trusts the CA its `ca_file` names and refuses to start
//! with any other.

mod common;
mod garage;
mod gw;
mod mnt;

use common::{content, run, run_ok, TestCluster};
use garage::Garage;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// `trove stat --layout --json` of `path`.
fn layout(cluster: &TestCluster, path: &str) -> serde_json::Value {
    let out = run_ok(&["--cluster", &cluster.dir_str(), "stat", "--layout", "--json", path]);
    serde_json::from_str(&out).expect("layout is JSON")
}

/// The object keys the shards of `path` must have: node 4 is prefix n1, node 5 is n2.
fn shard_objects(cluster: &TestCluster, path: &str) -> Vec<String> {
    let mut keys = Vec::new();
    for chunk in layout(cluster, path)["chunks"].as_array().expect("chunks") {
        assert_eq!(chunk["pool"], "cold", "{chunk}");
        let id = chunk["id"].as_str().expect("id");
        for shard in chunk["shards"].as_array().expect("shards") {
            let prefix = match shard["node"].as_u64() {
                Some(4) => "n1",
                Some(5) => "n2",
                other => {
                    panic!("shard of {path} on node {other:?}, not in the object pool: {chunk}")
                }
            };
            keys.push(format!("{prefix}/shards/{id}.{}", shard["index"]));
        }
    }
    keys
}

/// Flips one byte of object `key` in the data part (past header and table) and returns the
/// original bytes.
fn damage(garage: &Garage, key: &str) -> Vec<u8> {
    let original = garage.get(key);
    assert_eq!(&original[..4], b"TRSH", "{key} is a shard in Trove's shard format");
    let mut bad = original.clone();
    let at = bad.len() - 1 - bad.len() / 3;
    bad[at] ^= 0x5a;
    garage.put(key, &bad);
    original
}

/// Adds a storage node of pool `cold` whose `[object]` table is `table`.
fn add_object_node(cluster: &TestCluster, name: &str, table: &str) -> std::process::Output {
    let file = cluster.path().join(format!("{name}.toml"));
    std::fs::write(&file, table).expect("write object table");
    run(&[
        "cluster",
        "add-node",
        "--dir",
        &cluster.dir_str(),
        "--pool",
        "cold",
        "--object",
        file.to_str().expect("utf-8"),
    ])
}

/// Everything a person or a log collector could read: status, pool list, every log.
fn everything_shown(cluster: &TestCluster) -> String {
    let c = cluster.dir_str();
    let mut all = String::new();
    for args in [
        vec!["--cluster", &c, "status"],
        vec!["--cluster", &c, "status", "--json"],
        vec!["--cluster", &c, "pool", "list"],
        vec!["--cluster", &c, "pool", "list", "--json"],
    ] {
        all.push_str(&run_ok(&args));
    }
    let mut stack = vec![cluster.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                all.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    all
}

#[test]
fn an_object_pool_on_garage_serves_every_front_end_and_checks_every_block() {
    assert!(!mnt::fuse_missing());
    let garage = Garage::start("trove-cold");
    let cluster = TestCluster::start_with(3, "2+1", &["--scrub-interval-ms", "1000", "--gc-grace-ms", "1000"]);
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    let secret_file = scratch.path().join("s3.secret");
    std::fs::write(&secret_file, format!("{}\n", garage.secret)).expect("write secret");

    // Bad input: each stops the node at start with the cause named, quickly.
    let closed = format!("http://127.0.0.1:{}", garage::free_port());
    let wrong_secret = scratch.path().join("wrong.secret");
    std::fs::write(&wrong_secret, "0".repeat(64)).expect("write secret");
    let good = garage.object_table("n1", &secret_file);
    let cases = [
        (
            "wrong-endpoint",
            good.replace(&garage.endpoint, &closed),
            format!("cannot reach the object store at {closed}"),
        ),
        ("wrong-secret", garage.object_table("n1", &wrong_secret), "refused the credentials".to_string()),
        (
            "no-bucket",
            good.replace("\"trove-cold\"", "\"no-such-bucket\""),
            "bucket \"no-such-bucket\" does not exist".to_string(),
        ),
        ("plain-http", good.replace("allow_http = true", "allow_http = false"), "allow_http".to_string()),
    ];
    for (name, table, cause) in cases {
        let started = Instant::now();
        let out = add_object_node(&cluster, name, &table);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(&cause), "{name}: expected {cause:?}, got: {stderr}");
        assert!(started.elapsed() < Duration::from_secs(40), "{name}: took {:?}", started.elapsed());
    }

    // Two nodes front the bucket under prefixes n1 and n2: nodes 4 and 5, pool cold (made by
    // the first of them, an object pool storing one copy unless told otherwise).
    for prefix in ["n1", "n2"] {
        let out = add_object_node(&cluster, prefix, &garage.object_table(prefix, &secret_file));
        assert!(out.status.success(), "add-node {prefix}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let pools: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", &c, "pool", "list", "--json"])).expect("JSON");
    let cold = pools.as_array().expect("pools").iter().find(|p| p["name"] == "cold").expect("pool cold").clone();
    assert_eq!(
        (cold["kind"].as_str(), cold["endpoint"].as_str(), cold["bucket"].as_str()),
        (Some("object"), Some(garage.endpoint.as_str()), Some("trove-cold")),
        "{cold}"
    );
    assert_eq!(
        (cold["nodes"].as_u64(), cold["nodes_up"].as_u64(), cold["default_ec"].as_str()),
        (Some(2), Some(2), Some("1+0")),
        "{cold}"
    );
    assert!(cold["bytes_total"].as_u64().unwrap_or(0) >= 1 << 50, "a quota of 1 PiB per node: {cold}");
    let text = run_ok(&["--cluster", &c, "pool", "list"]);
    assert!(text.contains("pool cold: objects in bucket trove-cold at http://127.0.0.1"), "{text}");
    // A node with drives cannot join the object pool.
    let out = run(&["cluster", "add-node", "--dir", &c, "--pool", "cold"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("cannot join"), "{stderr}");

    // Directories in the object pool: /cold with two copies (Trove repairs), /single with the
    // pool's default, one copy (the bucket's own durability; damage is reported).
    run_ok(&["--cluster", &c, "mkdir", "--pool", "cold", "--ec", "1+1", "/cold"]);
    run_ok(&["--cluster", &c, "mkdir", "--pool", "cold", "/single"]);
    let big = content(1, (9 << 20) + 17);
    let small = content(2, 1000);
    let one = content(3, 5 << 20);
    let hot = content(4, 3 << 20);
    for (name, data, remote) in [
        ("big", &big, "/cold/big.bin"),
        ("small", &small, "/cold/small.bin"),
        ("one", &one, "/single/one.bin"),
        ("hot", &hot, "/hot.bin"),
    ] {
        let local = scratch.path().join(name);
        std::fs::write(&local, data).expect("write");
        run_ok(&["--cluster", &c, "put", local.to_str().expect("utf-8"), remote]);
    }

    // stat --layout names the object pool for every chunk, on its nodes only.
    let big_layout = layout(&cluster, "/cold/big.bin");
    assert_eq!((big_layout["pool"].as_str(), big_layout["ec"].as_str()), (Some("cold"), Some("1+1")), "{big_layout}");
    assert_eq!(big_layout["chunks"].as_array().map(Vec::len), Some(3));
    let text = run_ok(&["--cluster", &c, "stat", "--layout", "/cold/big.bin"]);
    assert!(text.contains("layout: pool cold  erasure 1+1"), "{text}");
    assert_eq!(layout(&cluster, "/single/one.bin")["ec"], "1+0");
    assert_eq!(layout(&cluster, "/hot.bin")["chunks"][0]["pool"], "default");

    // The shards are objects in Garage's bucket, in Trove's shard format, under the prefixes;
    // the default pool's shards are not there.
    let listed: BTreeSet<String> = garage.list("").into_iter().map(|(k, _)| k).collect();
    let mut expected: BTreeSet<String> = ["n1/node.uuid".to_string(), "n2/node.uuid".to_string()].into();
    for path in ["/cold/big.bin", "/cold/small.bin", "/single/one.bin"] {
        expected.extend(shard_objects(&cluster, path));
    }
    assert_eq!(listed, expected, "the bucket holds exactly the object pool's shards");
    assert_eq!(shard_objects(&cluster, "/cold/big.bin").len(), 6, "3 chunks, 2 copies each");

    // Reads through every front end, under the same path.
    let got = scratch.path().join("got");
    for (remote, data) in [("/cold/big.bin", &big), ("/cold/small.bin", &small), ("/single/one.bin", &one)] {
        run_ok(&["--cluster", &c, "get", remote, got.to_str().expect("utf-8")]);
        assert!(std::fs::read(&got).expect("read") == *data, "trove get {remote}");
    }
    {
        let mount = mnt::Mount::start(&cluster, "objects", &[]);
        for (rel, data) in [("cold/big.bin", &big), ("cold/small.bin", &small), ("single/one.bin", &one)] {
            assert!(std::fs::read(mount.join(rel)).expect("read through the mount") == *data, "mount {rel}");
        }
        // A small ranged read in the middle of a shard (ReadRange: a ranged GET).
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(mount.join("cold/big.bin")).expect("open");
        let mut piece = vec![0u8; 4096];
        f.read_exact_at(&mut piece, (5 << 20) + 12345).expect("pread");
        assert!(piece[..] == big[(5 << 20) + 12345..(5 << 20) + 12345 + 4096], "ranged read");
        drop(f);
        mount.stop();
    }
    {
        gw::need("aws");
        let gateway = gw::Gateway::s3(&cluster, "s3-objects", &[]);
        let home = tempfile::tempdir().expect("home");
        for (key, data) in [("big.bin", &big), ("small.bin", &small)] {
            let out = home.path().join(key);
            gw::run_ok(gw::aws(&gateway, home.path()).args(["s3", "cp", &format!("s3://cold/{key}")]).arg(&out));
            assert!(std::fs::read(&out).expect("read") == *data, "s3://cold/{key}");
        }
    }

    // A shard object damaged in Garage: the read still returns the file's bytes (the other
    // copy, verified), and scrub puts the object back as it was.
    let victim = shard_objects(&cluster, "/cold/big.bin")[2].clone();
    let original = damage(&garage, &victim);
    run_ok(&["--cluster", &c, "get", "/cold/big.bin", got.to_str().expect("utf-8")]);
    assert!(std::fs::read(&got).expect("read") == big, "read around the damaged object");
    let deadline = Instant::now() + Duration::from_secs(90);
    while garage.get(&victim) != original {
        assert!(Instant::now() < deadline, "scrub did not repair {victim}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let meta_log = std::fs::read_to_string(cluster.path().join("logs").join("meta.log")).unwrap_or_default();
    assert!(meta_log.contains("scrub: chunk"), "the repair is logged");

    // With one copy, damage is reported, never returned as data.
    let lone = shard_objects(&cluster, "/single/one.bin")[0].clone();
    damage(&garage, &lone);
    let out = run(&["--cluster", &c, "get", "/single/one.bin", got.to_str().expect("utf-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("chunk") && stderr.to_lowercase().contains("corrupt"), "{stderr}");
    let node_logs: String = (4..=5)
        .map(|i| std::fs::read_to_string(cluster.path().join("logs").join(format!("node-{i}.log"))).unwrap_or_default())
        .collect();
    assert!(node_logs.contains("is corrupt: block"), "the node logs the damaged object");

    // The credentials are in no status, listing or log.
    let shown = everything_shown(&cluster);
    assert!(shown.contains("trove-cold"), "the listing names the bucket");
    for secret in [&garage.key_id, &garage.secret] {
        assert!(!shown.contains(secret.as_str()), "a credential is shown somewhere");
    }
    let _ = Path::new(&c);
}

/// A private certificate authority and a server certificate it signs for 127.0.0.1 and
/// localhost (subjectAltName, as TLS clients check), made with openssl in `dir`; returns the
/// CA's certificate, the server's certificate and the server's key.
fn private_ca_and_server_certificate(dir: &Path) -> (String, String, String) {
    let file = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let (ca, ca_key, csr, cert, key, ext) = (
        file("ca.pem"),
        file("ca.key"),
        file("server.csr"),
        file("server.pem"),
        file("server.key"),
        file("server.ext"),
    );
    std::fs::write(&ext, "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
        .expect("write extensions");
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=Trove test CA",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
    ]);
    openssl(&["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", &key, "-out", &csr]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    (ca, cert, key)
}

#[test]
fn an_object_pool_over_https_trusts_the_configured_certificate_and_no_other() {
    gw::need("openssl");
    // The object store: another cluster's S3 gateway, serving TLS with a certificate of a
    // private CA; bucket "vault" is its top-level directory.
    let store = TestCluster::start(3, "2+1");
    let s = store.dir_str();
    run_ok(&["--cluster", &s, "mkdir", "/vault"]);
    let certs = tempfile::tempdir().expect("cert dir");
    let (ca, cert, key) = private_ca_and_server_certificate(certs.path());
    let tls = gw::Gateway::s3(&store, "s3-tls", &["--tls-cert", &cert, "--tls-key", &key]);
    let endpoint = format!("https://{}", tls.addr);

    let cluster = TestCluster::start(3, "2+1");
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");
    let secret_file = scratch.path().join("s3.secret");
    std::fs::write(&secret_file, format!("{}\n", gw::SECRET_KEY)).expect("write secret");
    let table = format!(
        "[object]\nendpoint = {endpoint:?}\nbucket = \"vault\"\nprefix = \"n1\"\naccess_key_id = {:?}\nsecret_access_key_file = {:?}\n",
        gw::ACCESS_KEY,
        secret_file.display().to_string()
    );

    // Without the certificate trusted, the node does not start, and says why.
    let out = add_object_node(&cluster, "untrusted", &table);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a node trusting no certificate of the store started");
    assert!(
        stderr.contains(&format!("cannot reach the object store at {endpoint}")) && stderr.contains("certificate"),
        "{stderr}"
    );
    let elsewhere = private_ca_and_server_certificate(scratch.path()).0;
    let out = add_object_node(&cluster, "other-ca", &format!("{table}ca_file = {elsewhere:?}\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("certificate"),
        "another certificate is not the store's: {stderr}"
    );

    // Trusting it: the node starts, and a file in the pool is stored as objects of the store
    // (files of its bucket directory), read back bit-exact.
    let out = add_object_node(&cluster, "trusted", &format!("{table}ca_file = {ca:?}\n"));
    assert!(out.status.success(), "add-node over https: {}", String::from_utf8_lossy(&out.stderr));
    run_ok(&["--cluster", &c, "mkdir", "--pool", "cold", "/cold"]);
    let data = content(9, (5 << 20) + 3);
    let local = scratch.path().join("data");
    std::fs::write(&local, &data).expect("write");
    run_ok(&["--cluster", &c, "put", local.to_str().expect("utf-8"), "/cold/data.bin"]);
    let got = scratch.path().join("got");
    run_ok(&["--cluster", &c, "get", "/cold/data.bin", got.to_str().expect("utf-8")]);
    assert!(std::fs::read(&got).expect("read") == data, "/cold/data.bin read back through the https store");
    let chunks = layout(&cluster, "/cold/data.bin")["chunks"].as_array().expect("chunks").clone();
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    let objects = run_ok(&["--cluster", &s, "ls", "/vault/n1/shards"]);
    for chunk in &chunks {
        assert_eq!(chunk["pool"], "cold", "{chunk}");
        let id = chunk["id"].as_str().expect("id");
        assert!(objects.contains(&format!("{id}.0")), "chunk {id} is an object in the store: {objects}");
    }
    drop(tls);
}
