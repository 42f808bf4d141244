//! The Python package (`crates/py`) end to end: its wheel is built from the repository with
//! maturin, installed into a fresh virtual environment, and its tests (`crates/py/tests`: Client
//! round trips, fsspec with pandas and PyArrow on a Parquet file, fork safety under a process
//! pool, the datasets' splits, trove.vision against Pillow, `trove dataset` end to end) run
//! against a real cluster started from the `trove` binary.
//!
//! The virtual environment sees the interpreter's own packages (numpy, pandas, pyarrow, fsspec,
//! Pillow, maturin: `scripts/deps.sh` installs them) but `trove` only from the wheel. The wheel is
//! built in the workspace's target directory, so only the pyo3 crates and the package itself
//! are compiled again. `TROVE_TEST_PYTHON` names another interpreter.

mod common;

use common::TestCluster;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

fn python() -> String {
    std::env::var("TROVE_TEST_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

#[test]
fn python_package_from_a_fresh_virtualenv_against_a_real_cluster() {
    let repo = repo_root();
    let work = tempfile::Builder::new().prefix("trove-py-").tempdir().expect("temp dir");
    let wheels = work.path().join("wheels");
    let venv = work.path().join("venv");

    let started = Instant::now();
    run(
        Command::new(python())
            .args(["-m", "maturin", "build", "--release", "--manifest-path"])
            .arg(repo.join("crates/py/Cargo.toml"))
            .arg("--out")
            .arg(&wheels)
            .current_dir(&repo),
        "maturin build of the trove wheel",
    );
    let wheel: Vec<PathBuf> = std::fs::read_dir(&wheels)
        .expect("wheel directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheel.len(), 1, "one wheel: {wheel:?}");
    let name = wheel[0].file_name().and_then(|n| n.to_str()).expect("wheel name").to_string();
    assert!(name.starts_with("trove-") && name.contains("-abi3-"), "an abi3 wheel named trove: {name}");
    eprintln!("wheel built in {:.1} s: {name}", started.elapsed().as_secs_f64());

    run(Command::new(python()).args(["-m", "venv", "--system-site-packages"]).arg(&venv), "python -m venv");
    let py = venv.join("bin/python");
    run(
        Command::new(&py).args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]).arg(&wheel[0]),
        "pip install of the wheel",
    );
    // `trove` comes from the environment's own site-packages, not from the source tree.
    let origin = run(
        Command::new(&py)
            .args(["-c", "import trove, trove._native; print(trove._native.__file__)"])
            .current_dir(work.path()),
        "import trove",
    );
    let origin = String::from_utf8_lossy(&origin.stdout).trim().to_string();
    assert!(origin.starts_with(venv.to_str().expect("utf-8 path")), "trove imported from {origin}");

    let cluster = TestCluster::start(3, "2+1");
    let started = Instant::now();
    let out = run(
        Command::new(&py)
            .args(["-m", "unittest", "discover", "-v", "-s"])
            .arg(repo.join("crates/py/tests"))
            .env("TROVE_CLUSTER", cluster.dir_str())
            .env("TROVE_BIN", e2e::trove())
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(work.path()),
        "the package's tests",
    );
    let report = String::from_utf8_lossy(&out.stderr);
    eprintln!("{report}");
    let ran: usize = report
        .lines()
        .find_map(|l| l.strip_prefix("Ran ").and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok()))
        .expect("unittest's summary line");
    assert!(ran >= 20, "only {ran} Python tests ran");
    assert!(!report.contains("skipped"), "no Python test may skip");
    eprintln!("{ran} Python tests in {:.1} s", started.elapsed().as_secs_f64());
}
