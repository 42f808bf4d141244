//! Test support: `trove mount` processes started from the real binary on a test cluster, and
//! unmounted (SIGTERM, then a lazy unmount) on drop.

#![allow(dead_code)]

use crate::common::{trove, TestCluster};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// How long a mount may take to appear in the mount table.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `trove mount` may take to exit after SIGTERM.
pub const UNMOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// False when this machine can run FUSE tests; a machine without `/dev/fuse` fails the test
/// with the cause (scripts/deps.sh loads the fuse module when the device is absent), so a mount
/// test never passes without mounting.
pub fn fuse_missing() -> bool {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is absent, so no FUSE file system can be mounted here (scripts/deps.sh runs `modprobe fuse`; a container needs --device /dev/fuse)"
    );
    false
}

pub fn mounted_at(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| t.lines().any(|l| l.split(' ').nth(4) == Some(path.to_str().unwrap_or_default())))
        .unwrap_or(false)
}

/// A `trove mount` process and its mount point.
pub struct Mount {
    pub child: Option<Child>,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl Mount {
    pub fn start(cluster: &TestCluster, name: &str, extra: &[&str]) -> Mount {
        Mount::start_logging(cluster, name, extra, "warn")
    }

    /// [`Mount::start`] with `TROVE_LOG` set to `filter`.
    pub fn start_logging(cluster: &TestCluster, name: &str, extra: &[&str], filter: &str) -> Mount {
        let dir = tempfile::Builder::new().prefix("trove-mnt-").tempdir().expect("mount point");
        let log = cluster.path().join(format!("mount-{name}.log"));
        let mut cmd = trove();
        cmd.args(["mount", &cluster.dir_str()]).arg(dir.path()).args(extra);
        cmd.env("TROVE_LOG", filter).stdout(Stdio::null()).stderr(std::fs::File::create(&log).expect("log file"));
        // A disk cache of its own, inside the cluster's directory (gone with it), unless the
        // test names one.
        cmd.env("TROVE_DISK_CACHE_DIR", cluster.path().join(format!("disk-cache-{name}")));
        let mut child = cmd.spawn().expect("trove mount starts");
        let started = Instant::now();
        while !mounted_at(dir.path()) {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("trove mount exited with {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
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

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Sends SIGTERM and checks the process unmounts cleanly and exits with success.
    pub fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
        let status = wait_timeout(&mut child, UNMOUNT_TIMEOUT);
        assert!(
            status.is_some_and(|s| s.success()),
            "trove mount did not exit cleanly on SIGTERM ({status:?}): {}",
            self.log_text()
        );
        assert!(!mounted_at(self.path()), "still mounted after SIGTERM");
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            if wait_timeout(&mut child, UNMOUNT_TIMEOUT).is_none() {
                let _ = trove().args(["umount", "--lazy"]).arg(self.dir.path()).output();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if started.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
