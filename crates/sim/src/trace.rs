//! The trace of one simulation: every message's fate, every fault, every operation of the
//! workload and its result, each stamped with the simulated time. Two runs of one seed must
//! produce the same trace byte for byte; a failing seed is debugged by reading it.

use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;

pub struct Trace {
    lines: Mutex<Vec<String>>,
    start: tokio::time::Instant,
    /// Also print each line as it is noted (`--trace`).
    echo: bool,
}

impl Trace {
    /// A trace whose clock starts now (call inside the simulation's runtime).
    pub fn new(echo: bool) -> Arc<Trace> {
        Arc::new(Trace { lines: Mutex::new(Vec::new()), start: tokio::time::Instant::now(), echo })
    }

    /// Simulated milliseconds since the trace began.
    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn note(&self, what: fmt::Arguments<'_>) {
        let line = format!("{:>9} {what}", self.elapsed_ms());
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
