//! Ingest rules on a real local cluster: `trove ingest add/list/rm` with refusals naming their
//! reasons, and the job engine's ingest job deriving, for every JPEG that lands below a rule's
//! source (written by `trove dataset synth` and `trove put`), a variant at the same path below
//! the target with the rule's short side (smaller images copied as they are), carrying its
//! source's modification time; an unchanged source is not derived again, a changed one is, a
//! damaged one is counted and named in `trove job status`, other files are left alone, and a
//! removed rule derives nothing more.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use wire::{FileKind, IngestRule};

fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Every regular file below `dir` with its attributes, by path relative to `dir`.
async fn tree(client: &client::Client, dir: &str) -> BTreeMap<String, wire::Attr> {
    let mut out = BTreeMap::new();
    let Ok(root) = client.resolve(dir).await else {
        return out;
    };
    let mut stack = vec![(String::new(), root.ino)];
    while let Some((rel, ino)) = stack.pop() {
        for e in client.readdir(ino).await.expect("readdir") {
            let path = if rel.is_empty() { e.name.clone() } else { format!("{rel}/{}", e.name) };
            match e.attr.kind {
                FileKind::Dir => stack.push((path, e.attr.ino)),
                FileKind::File => {
                    out.insert(path, e.attr);
                }
                _ => {}
            }
        }
    }
    out
}

/// Waits until every JPEG below /raw has a variant below `into` carrying its mtime.
async fn wait_derived(client: &client::Client, into: &str, within: Duration) -> BTreeMap<String, wire::Attr> {
    let deadline = Instant::now() + within;
    loop {
        let sources = tree(client, "/raw").await;
        let variants = tree(client, into).await;
        let pending: Vec<&String> = sources
            .iter()
            .filter(|(p, _)| p.ends_with(".jpg") && !p.contains("damaged"))
            .filter(|(p, a)| variants.get(*p).is_none_or(|v| v.mtime != a.mtime))
            .map(|(p, _)| p)
            .collect();
        if pending.is_empty() {
            return variants;
        }
        assert!(
            Instant::now() < deadline,
            "{} sources still without a current variant in {into}, e.g. {:?}",
            pending.len(),
            pending[0]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Checks each variant below `into` against its source: the rule's size, a whole JPEG.
async fn check_variants(client: &client::Client, rule: &IngestRule) {
    let sources = tree(client, &rule.from).await;
    let variants = tree(client, &rule.into).await;
    for (path, src) in &sources {
        if !path.ends_with(".jpg") || path.contains("damaged") {
            assert!(!variants.contains_key(path), "{path} is not an image to derive, yet {} has it", rule.into);
            continue;
        }
        let source = client.read_file(&format!("{}/{path}", rule.from)).await.expect("read source");
        let variant = client.read_file(&format!("{}/{path}", rule.into)).await.expect("read variant");
        let (w, h) = vision::jpeg_size(&source).expect("source size");
        let want = rule.variant_size(w, h).unwrap_or((w, h));
        assert_eq!(vision::jpeg_size(&variant).expect("variant size"), want, "{path}: {w}x{h} for {}", rule.name);
        if rule.variant_size(w, h).is_none() {
            assert!(variant == source, "{path} ({w}x{h}) is small enough to be copied as it is");
        }
        vision::decode_rgb(&variant).expect("the variant decodes");
        assert_eq!(variants[path].mtime, src.mtime, "{path}: the variant carries its source's mtime");
    }
}

fn ingest_job(c: &str) -> serde_json::Value {
    let jobs: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", c, "job", "status", "--json"])).expect("JSON");
    jobs.as_array().expect("jobs").iter().find(|j| j["name"] == "ingest").cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_landing_under_a_rule_get_resized_variants_beside_them() {
    let cluster = TestCluster::start_with(3, "2+1", &["--ingest-interval-ms", "500"]);
    let c = cluster.dir_str();
    let client = cluster.client().await;
    let scratch = tempfile::tempdir().expect("scratch");

    let none = run_ok(&["--cluster", &c, "ingest", "list"]);
    assert!(none.contains("no ingest rules"), "{none}");
    let added =
        run_ok(&["--cluster", &c, "ingest", "add", "r224", "--from", "/raw", "--into", "/raw-224", "--size", "224"]);
    assert!(added.contains("short side 224 px"), "{added}");
    run_ok(&[
        "--cluster",
        &c,
        "ingest",
        "add",
        "r64",
        "--from",
        "/raw/",
        "--into",
        "/small/64",
        "--size",
        "64",
        "--quality",
        "80",
    ]);

    // What cannot be stored is refused with its reason; nothing changes.
    let err =
        refused(&["--cluster", &c, "ingest", "add", "in", "--from", "/raw", "--into", "/raw/small", "--size", "64"]);
    assert!(err.contains("overlap"), "{err}");
    let err =
        refused(&["--cluster", &c, "ingest", "add", "chain", "--from", "/raw-224", "--into", "/x", "--size", "64"]);
    assert!(err.contains("\"r224\"") && err.contains("overlap"), "{err}");
    let err =
        refused(&["--cluster", &c, "ingest", "add", "same", "--from", "/other", "--into", "/small/64", "--size", "64"]);
    assert!(err.contains("\"r64\"") && err.contains("tree of its own"), "{err}");
    let err = refused(&["--cluster", &c, "ingest", "add", "r224", "--from", "/a", "--into", "/b", "--size", "64"]);
    assert!(err.contains("exists already"), "{err}");
    let err = refused(&["--cluster", &c, "ingest", "add", "big", "--from", "/a", "--into", "/b", "--size", "100000"]);
    assert!(err.contains("8 to 8192 pixels"), "{err}");
    let err = refused(&["--cluster", &c, "ingest", "add", "rel", "--from", "raw", "--into", "/b", "--size", "64"]);
    assert!(err.contains("absolute"), "{err}");
    let err = refused(&["--cluster", &c, "ingest", "rm", "nope"]);
    assert!(err.contains("no ingest rule named \"nope\"") && err.contains("r224, r64"), "{err}");
    let list: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", &c, "ingest", "list", "--json"])).expect("JSON");
    let rules: Vec<IngestRule> = list
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| IngestRule {
            name: r["name"].as_str().expect("name").into(),
            from: r["from"].as_str().expect("from").into(),
            into: r["into"].as_str().expect("into").into(),
            size_px: r["size_px"].as_u64().expect("size") as u32,
            quality: r["quality"].as_u64().expect("quality") as u8,
        })
        .collect();
    assert_eq!(rules.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["r224", "r64"]);
    assert_eq!(rules[1].from, "/raw", "paths are stored normalized");

    // Images land: a synthetic ImageNet-like set (short sides 180 to 500), a file that is not a
    // JPEG, and a damaged JPEG (cut short).
    run_ok(&["--cluster", &c, "dataset", "synth", "--out", "/raw", "--images", "24", "--classes", "3", "--seed", "5"]);
    let notes = scratch.path().join("notes.txt");
    std::fs::write(&notes, b"not an image").expect("write");
    run_ok(&["--cluster", &c, "put", notes.to_str().expect("utf-8"), "/raw/notes.txt"]);
    let whole = client.read_file("/raw/class_0000/img_0000000.jpg").await.expect("read");
    let damaged = scratch.path().join("damaged.jpg");
    std::fs::write(&damaged, &whole[..whole.len() / 2]).expect("write");
    run_ok(&["--cluster", &c, "put", damaged.to_str().expect("utf-8"), "/raw/class_0001/damaged.jpg"]);

    let first = wait_derived(&client, "/raw-224", Duration::from_secs(60)).await;
    wait_derived(&client, "/small/64", Duration::from_secs(60)).await;
    for rule in &rules {
        check_variants(&client, rule).await;
    }
    assert_eq!(first.len(), 24, "one variant per image: {:?}", first.keys().collect::<Vec<_>>());

    // The damaged image is counted and named in the job's record.
    let deadline = Instant::now() + Duration::from_secs(30);
    let job = loop {
        let job = ingest_job(&c);
        if job["problems_found"].as_u64().unwrap_or(0) > 0 {
            break job;
        }
        assert!(Instant::now() < deadline, "the damaged image was never reported: {job:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert!(job["message"].as_str().unwrap_or("").contains("/raw/class_0001/damaged.jpg"), "{job:#}");
    let text = run_ok(&["--cluster", &c, "job", "status"]);
    assert!(text.contains("variants written") && text.contains("could not be derived"), "{text}");

    // Passes go on (every 500 ms) without writing anything again: the variants stay the same
    // files.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = tree(&client, "/raw-224").await;
    for (path, attr) in &first {
        assert_eq!(later[path].ino, attr.ino, "{path} was written again although its source did not change");
    }

    // A changed source is derived again, a new one too, and nothing else is rewritten.
    let replaced = client.read_file("/raw/class_0002/img_0000002.jpg").await.expect("read");
    let other = vision::encode_jpeg(&vision::synth_image(99, 640, 480), 90).expect("encode");
    client.write_file("/raw/class_0000/img_0000000.jpg", &other).await.expect("rewrite");
    client.mkdir_p("/raw/new").await.expect("mkdir");
    client.write_file("/raw/new/late.jpg", &replaced).await.expect("write");
    let after = wait_derived(&client, "/raw-224", Duration::from_secs(30)).await;
    wait_derived(&client, "/small/64", Duration::from_secs(30)).await;
    check_variants(&client, &rules[0]).await;
    check_variants(&client, &rules[1]).await;
    assert_ne!(
        after["class_0000/img_0000000.jpg"].ino, first["class_0000/img_0000000.jpg"].ino,
        "the changed source's variant was written again"
    );
    let variant = client.read_file("/raw-224/class_0000/img_0000000.jpg").await.expect("read");
    assert_eq!(vision::jpeg_size(&variant).expect("size"), (299, 224));
    assert_eq!(
        after["class_0001/img_0000001.jpg"].ino, first["class_0001/img_0000001.jpg"].ino,
        "an unchanged source's variant stays"
    );

    // `trove job start ingest` runs a pass at once and records it as the operator's run.
    let deadline = Instant::now() + Duration::from_secs(30);
    while ingest_job(&c)["state"] != "done" {
        assert!(Instant::now() < deadline, "the ingest run never ended: {:#}", ingest_job(&c));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let run_before = ingest_job(&c)["run"].as_u64().expect("run");
    let started = run_ok(&["--cluster", &c, "job", "start", "ingest"]);
    assert!(started.contains("job ingest: running"), "{started}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = ingest_job(&c);
        if job["state"] == "done" && job["run"].as_u64() == Some(run_before + 1) {
            assert_eq!(job["trigger"], "operator", "{job:#}");
            assert!(job["items_seen"].as_u64().unwrap_or(0) >= 2 * 25, "{job:#}");
            break;
        }
        assert!(Instant::now() < deadline, "the operator's run never ended: {job:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Without its rule, nothing more lands in a target tree.
    let removed = run_ok(&["--cluster", &c, "ingest", "rm", "r64"]);
    assert!(removed.contains("removed"), "{removed}");
    client.write_file("/raw/new/later.jpg", &replaced).await.expect("write");
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_derived(&client, "/raw-224", Duration::from_secs(30)).await;
    assert!(client.resolve("/small/64/new/later.jpg").await.is_err(), "a removed rule derived a variant");
    assert!(client.resolve("/small/64/new/late.jpg").await.is_ok(), "the removed rule's variants stay");
}
