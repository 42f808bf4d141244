//! What recording costs, in nanoseconds per call on this machine: an operation (clock read,
//! count, histogram bucket), bytes, a cache lookup and a top-table count, single-threaded and
//! from several threads at once. `bench/metrics-overhead.sh` runs it beside the end-to-end
//! comparison, whose noise on a shared machine is larger than what it tries to see.
//!
//!   cargo run --release -p metrics --example record_cost

use std::time::Instant;

const CALLS: u64 = 5_000_000;

fn per_call(label: &str, threads: usize, f: impl Fn(u64) + Sync) {
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &f;
            s.spawn(move || {
                for i in 0..CALLS {
                    f(i ^ (t as u64) << 40);
                }
            });
        }
    });
    let ns = started.elapsed().as_nanos() as f64 / CALLS as f64;
    println!("{label:<58} {threads} thread(s): {ns:7.1} ns per call (per thread)");
}

fn main() {
    static NAMES: [&str; 4] = ["read", "write", "lookup", "getattr"];
    let table = metrics::ops::table("cost", &NAMES);
    let cache = metrics::gauges::cache("cost.cache");
    metrics::disable();
    per_call("operation, recording off (one relaxed load)", 1, |_| table.done(0, table.start(), true));
    metrics::enable();
    for threads in [1, 2] {
        per_call("operation (start + done: clock, count, bucket, sum)", threads, |_| {
            table.done(0, table.start(), true)
        });
        per_call("bytes", threads, |_| table.read_bytes(4096));
        per_call("cache lookup", threads, |i| cache.lookup(i % 3 != 0));
        per_call("top table: file by inode (one of 1,000)", threads, |i| metrics::top::file(i % 1000, 4096, 0));
    }
    let text = metrics::encode_text();
    println!("(one scrape of this process: {} bytes of text)", text.len());
}
