//! File pool policies on a real local cluster: `trove policy add/list/rm/test` against the
//! metadata service, the order rules (first match wins, a policy without conditions goes last),
//! refusals with their reasons, `test` explaining each condition by the file's real size, name
//! and times, and the list surviving a metadata restart.

mod common;

use common::*;

fn policy_names(c: &str) -> Vec<String> {
    let list: serde_json::Value =
        serde_json::from_str(&run_ok(&["--cluster", c, "policy", "list", "--json"])).expect("JSON");
    list.as_array().expect("list").iter().map(|p| p["name"].as_str().unwrap_or("").to_string()).collect()
}

fn refused(args: &[&str]) -> String {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `trove policy test --json PATH`.
fn decide(c: &str, path: &str) -> serde_json::Value {
    serde_json::from_str(&run_ok(&["--cluster", c, "policy", "test", "--json", path])).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_are_kept_in_order_and_explain_which_one_decides_a_file() {
    let cluster = TestCluster::start_with(0, "2+1", &["--pool", "flash=3", "--pool", "hdd=3"]);
    let c = cluster.dir_str();
    let scratch = tempfile::tempdir().expect("scratch");

    let none = run_ok(&["--cluster", &c, "policy", "list"]);
    assert!(none.contains("no policies"), "{none}");

    run_ok(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "cold",
        "--pool",
        "hdd",
        "--path",
        "/data/**",
        "--accessed-before",
        "1h",
    ]);
    run_ok(&["--cluster", &c, "policy", "add", "rest", "--pool", "flash"]);
    run_ok(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "small",
        "--pool",
        "flash",
        "--ec",
        "1+2",
        "--size-max",
        "64K",
        "--before",
        "cold",
    ]);
    assert_eq!(policy_names(&c), ["small", "cold", "rest"]);

    // What cannot be stored is refused, naming the reason; nothing changes.
    let err = refused(&["--cluster", &c, "policy", "add", "late", "--pool", "hdd", "--name-glob", "*.x"]);
    assert!(err.contains("would never match") && err.contains("\"rest\""), "{err}");
    let err = refused(&["--cluster", &c, "policy", "add", "all", "--pool", "hdd", "--before", "cold"]);
    assert!(err.contains("no conditions") && err.contains("a default policy goes last"), "{err}");
    let err =
        refused(&["--cluster", &c, "policy", "add", "tape", "--pool", "tape", "--size-min", "1G", "--before", "rest"]);
    assert!(err.contains("no pool named \"tape\""), "{err}");
    let err =
        refused(&["--cluster", &c, "policy", "add", "cold", "--pool", "hdd", "--size-min", "1", "--before", "rest"]);
    assert!(err.contains("exists already"), "{err}");
    let err =
        refused(&["--cluster", &c, "policy", "add", "rel", "--pool", "hdd", "--path", "data/*", "--before", "rest"]);
    assert!(err.contains("must be absolute"), "{err}");
    let err = refused(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "odd",
        "--pool",
        "hdd",
        "--size-min",
        "2M",
        "--size-max",
        "1M",
        "--before",
        "rest",
    ]);
    assert!(err.contains("larger than"), "{err}");
    let err = refused(&["--cluster", &c, "policy", "add", "x", "--pool", "hdd", "--accessed-before", "2w"]);
    assert!(err.contains("unknown unit"), "{err}");
    let err = refused(&["--cluster", &c, "policy", "rm", "nope"]);
    assert!(err.contains("no policy named \"nope\"") && err.contains("small, cold, rest"), "{err}");
    assert_eq!(policy_names(&c), ["small", "cold", "rest"]);

    // Files are judged by their real size, path and times.
    run_ok(&["--cluster", &c, "mkdir", "/data"]);
    let (tiny, big) = (scratch.path().join("tiny"), scratch.path().join("big"));
    std::fs::write(&tiny, content(1, 100)).expect("write");
    std::fs::write(&big, content(2, 1 << 20)).expect("write");
    run_ok(&["--cluster", &c, "put", tiny.to_str().expect("utf-8"), "/data/tiny"]);
    run_ok(&["--cluster", &c, "put", big.to_str().expect("utf-8"), "/data/big.bin"]);
    let d = decide(&c, "/data/tiny");
    assert_eq!(
        (d["policy"].as_str(), d["pool"].as_str(), d["pool_now"].as_str()),
        (Some("small"), Some("flash"), Some("flash")),
        "{d}"
    );
    let d = decide(&c, "/data/big.bin");
    assert_eq!(d["policy"], "rest", "{d}");
    let judged = d["judged"].as_array().expect("judged");
    assert_eq!(judged.len(), 3, "every policy up to the deciding one: {d}");
    assert_eq!(judged[0]["conditions"][0]["why"], "size 1048576 bytes > 65536");
    let cold = &judged[1]["conditions"];
    assert_eq!((cold[0]["holds"].as_bool(), cold[1]["holds"].as_bool()), (Some(true), Some(false)), "{d}");
    assert!(cold[1]["why"].as_str().unwrap_or("").contains("less than 3600 s"), "{d}");
    let text = run_ok(&["--cluster", &c, "policy", "test", "/data/big.bin"]);
    assert!(
        text.contains("policy cold: does not match")
            && text.contains("belongs in pool flash by policy rest, and is there"),
        "{text}"
    );

    // An age condition that the file's age meets: it belongs in hdd, where it is not yet.
    run_ok(&[
        "--cluster",
        &c,
        "policy",
        "add",
        "aged",
        "--pool",
        "hdd",
        "--name-glob",
        "big.*",
        "--accessed-before",
        "1s",
        "--before",
        "rest",
    ]);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let d = decide(&c, "/data/big.bin");
    assert_eq!(
        (d["policy"].as_str(), d["pool"].as_str(), d["pool_now"].as_str()),
        (Some("aged"), Some("hdd"), Some("flash")),
        "{d}"
    );
    let text = run_ok(&["--cluster", &c, "policy", "test", "/data/big.bin"]);
    assert!(text.contains("belongs in pool hdd by policy aged (it is in pool flash now)"), "{text}");
    let err = refused(&["--cluster", &c, "policy", "test", "/data"]);
    assert!(err.contains("is not a regular file"), "{err}");

    // The list is stored by the metadata service: it survives a restart.
    run_ok(&["cluster", "restart-meta", "--dir", &c]);
    assert_eq!(policy_names(&c), ["small", "cold", "aged", "rest"]);
    run_ok(&["--cluster", &c, "policy", "rm", "cold"]);
    assert_eq!(policy_names(&c), ["small", "aged", "rest"]);
    let listed = run_ok(&["--cluster", &c, "policy", "list"]);
    assert!(
        listed.contains("small")
            && listed.contains("size <= 65536 -> pool flash (1+2)")
            && listed.contains("every file -> pool flash (the pool's scheme)"),
        "{listed}"
    );
}
