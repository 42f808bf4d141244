//! End-to-end tests of Trove, apart from the product crates: every test in `tests/` runs the
//! real `trove` executable (local clusters, mounts, gateways, hosts in network namespaces) and
//! drives it with the tools users have (awscli, boto3, rclone, fio, a POSIX suite, PostgreSQL,
//! Garage, Chromium). This library only finds that executable.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The `trove` executable under test: `$TROVE_BIN` if set, else the one Cargo built beside this
/// test in the same target directory and profile (`target/<profile>/trove`). `cargo test
/// --workspace` builds it before any test runs (the trove package has an integration test of
/// its own, for which Cargo builds its binary); alone, `cargo test -p e2e` does not, so build
/// it first with `cargo build -p trove` in the same profile.
pub fn trove() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = match std::env::var_os("TROVE_BIN") {
            Some(path) => PathBuf::from(path),
            None => beside_this_test(),
        };
        assert!(
            path.is_file(),
            "the trove executable is not at {}: run the end-to-end tests with `cargo test --workspace`, \
             or build it first (`cargo build --release -p trove` for a release test build), or name it in TROVE_BIN",
            path.display()
        );
        path.into_os_string()
            .into_string()
            .unwrap_or_else(|path| panic!("the trove executable's path is not UTF-8: {path:?}"))
    })
}

/// `target/<profile>/trove` for a test executable at `target/<profile>/deps/<test>`.
fn beside_this_test() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("cannot find this test's executable: {e}"));
    let profile_dir =
        exe.parent().and_then(Path::parent).unwrap_or_else(|| panic!("{} has no profile directory", exe.display()));
    profile_dir.join(format!("trove{}", std::env::consts::EXE_SUFFIX))
}
