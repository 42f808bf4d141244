//! The trace of one simulation: every message's fate, every fault, every operation of the
//! workload and its result, each stamped with the simulated time. Two runs of one seed must
//! produce the same trace byte for byte; a failing seed is debugged by reading it.

use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;

pub struct Trace {
    lines: Mutex<Vec<String>>,
    /// A path that differs from run to run (the drives' temporary directory), written as
    /// `<drives>` wherever a line names it.
    redacted: Mutex<Option<String>>,
    start: tokio::time::Instant,
    /// Also print each line as it is noted (`--trace`).
    echo: bool,
}

impl Trace {
    /// A trace whose clock starts now (call inside the simulation's runtime).
    pub fn new(echo: bool) -> Arc<Trace> {
        Arc::new(Trace {
            lines: Mutex::new(Vec::new()),
            redacted: Mutex::new(None),
            start: tokio::time::Instant::now(),
            echo,
        })
    }

    /// Simulated milliseconds since the trace began.
    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Writes `path` as `<drives>` in every line noted from now on.
    pub fn redact(&self, path: &std::path::Path) {
        *self.redacted.lock() = Some(path.display().to_string());
    }

    /// `text` with the redacted path written as `<drives>`.
    pub fn redacted(&self, text: &str) -> String {
        match self.redacted.lock().as_deref() {
            Some(path) if text.contains(path) => text.replace(path, "<drives>"),
            _ => text.to_string(),
        }
    }

    pub fn note(&self, what: fmt::Arguments<'_>) {
        let line = self.redacted(&format!("{:>9} {what}", self.elapsed_ms()));
        if self.echo {
            println!("{line}");
        }
        self.lines.lock().push(line);
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().clone()
    }

    /// The whole trace as text, one line per event.
    pub fn text(&self) -> String {
        let lines = self.lines.lock();
        let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for line in lines.iter() {
            text.push_str(line);
            text.push('\n');
        }
        text
    }

    /// A 64-bit digest of [`Trace::text`] (FNV-1a): what a sweep prints per seed.
    pub fn digest(&self) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for line in self.lines.lock().iter() {
            for &b in line.as_bytes().iter().chain(b"\n") {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
        hash
    }
}
