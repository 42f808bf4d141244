//! The crash test of the `kv-tests` crate (`kv_tests::crash_test`) on [`RedbEngine`]: a child process
//! commits with two writers and is SIGKILLed at a random moment; reopening the file (redb
//! repairs it, the write-ahead log is replayed) must show every acknowledged commit and no torn
//! one. Six rounds continue on the same file; redb's own integrity check passes at the end.
//!
//! Reproducible kill timing: the seed is printed; `KV_REDB_CRASH_SEED=<seed>` replays it.

use kv::KvEngine;
use kv_redb::RedbEngine;
use kv_tests::crash_test::{self, CrashTest};
use std::sync::Arc;

const ENV: &str = "KV_REDB_CRASH";

async fn open(path: String) -> Arc<dyn KvEngine> {
    Arc::new(RedbEngine::open(&path).unwrap_or_else(|err| panic!("open {path}: {err}")))
}

#[test]
fn kill_during_commits_loses_nothing_acknowledged() {
    if crash_test::child(ENV, false, open) {
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("meta.redb");
    let test = CrashTest {
        env: ENV,
        test_name: "kill_during_commits_loses_nothing_acknowledged",
        target: path.to_str().expect("UTF-8 temporary path").to_string(),
        child_env: Vec::new(),
        retry_conflicts: false,
    };
    crash_test::run(test, open);

    // After the rounds, redb's own integrity check passes on the (repaired) file.
    let mut db = redb::Database::open(&path).expect("open with redb");
    assert!(db.check_integrity().expect("integrity check"), "redb integrity check needed a repair");
}
