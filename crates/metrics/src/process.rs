//! The process's and the host's own figures, read from `/proc` at scrape time: CPU time,
//! memory, descriptors, threads and block-layer bytes of the process (the names every
//! Prometheus client library uses, plus `trove_process_disk_bytes_total`), and the host's CPU
//! time, memory, load, network and disk bytes (`trove_host_*`), so that `trove stats` shows per
//! node CPU, network and disk without a separate node exporter.
//!
//! Nothing is read on the hot path; a file that cannot be read (another OS, a restricted
//! `/proc`) leaves its metrics out.

use crate::gauges::Sample;
use crate::names;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

/// Fields of `/proc/self/stat` after the command name, 0-based from the state field.
fn stat_fields(text: &str) -> Vec<&str> {
    text.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default()
}

/// `kB` lines of a `/proc` key-value file (`/proc/meminfo`), in bytes.
fn kb_value(text: &str, key: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    let v: f64 = line[key.len() + 1..].split_whitespace().next()?.parse().ok()?;
    Some(v * 1024.0)
}

/// The process's and host's samples (also what `trove stats` would see of this process).
pub fn samples() -> Vec<Sample> {
    let mut out = Vec::new();
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as f64;
    if let Some(id) = crate::identity() {
        out.push(Sample::new(
            names::PROCESS_INFO,
            &[("role", &id.role), ("id", &id.id), ("cluster", &id.cluster), ("version", env!("CARGO_PKG_VERSION"))],
            1.0,
        ));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/self/stat") {
        let f = stat_fields(&text);
        // state is field 3 of stat(5); here index 0. utime 14, stime 15, threads 20,
        // starttime 22, vsize 23, rss 24.
        let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
        if let (Some(u), Some(s)) = (num(14), num(15)) {
            out.push(Sample::new(names::PROCESS_CPU, &[], (u + s) / ticks));
        }
        if let Some(t) = num(20) {
            out.push(Sample::new(names::PROCESS_THREADS, &[], t));
        }
        if let Some(v) = num(23) {
            out.push(Sample::new(names::PROCESS_VSZ, &[], v));
        }
        if let Some(r) = num(24) {
            out.push(Sample::new(names::PROCESS_RSS, &[], r * page));
        }
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("btime ").and_then(|v| v.trim().parse::<f64>().ok())));
        if let (Some(start), Some(boot)) = (num(22), boot) {
            out.push(Sample::new(names::PROCESS_START, &[], boot + start / ticks));
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        out.push(Sample::new(names::PROCESS_FDS, &[], dir.count() as f64));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/self/io") {
        for (key, direction) in [("read_bytes", "read"), ("write_bytes", "write")] {
            let v = text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().parse::<f64>().ok());
            if let Some(v) = v {
                out.push(Sample::new(names::PROCESS_DISK_BYTES, &[("direction", direction)], v));
            }
        }
    }
    host_samples(&mut out, ticks);
    out
}

fn host_samples(out: &mut Vec<Sample>, ticks: f64) {
    if let Ok(text) = std::fs::read_to_string("/proc/stat") {
        if let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) {
            let modes = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"];
            for (mode, v) in modes.iter().zip(line.split_whitespace().skip(1)) {
                if let Ok(v) = v.parse::<f64>() {
                    out.push(Sample::new(names::HOST_CPU, &[("mode", mode)], v / ticks));
                }
            }
        }
        let cpus = text
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count();
        out.push(Sample::new(names::HOST_CPUS, &[], cpus as f64));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/meminfo") {
        for (key, kind) in [("MemTotal", "total"), ("MemAvailable", "available")] {
            if let Some(v) = kb_value(&text, key) {
                out.push(Sample::new(names::HOST_MEMORY, &[("kind", kind)], v));
            }
        }
    }
    if let Some(load) = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
    {
        out.push(Sample::new(names::HOST_LOAD1, &[], load));
    }
    if let Ok(text) = std::fs::read_to_string("/proc/net/dev") {
        for line in text.lines().skip(2) {
            let Some((dev, rest)) = line.split_once(':') else {
                continue;
            };
            let f: Vec<f64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            if f.len() >= 9 {
                let dev = dev.trim();
                out.push(Sample::new(names::HOST_NET_BYTES, &[("device", dev), ("direction", "in")], f[0]));
                out.push(Sample::new(names::HOST_NET_BYTES, &[("device", dev), ("direction", "out")], f[8]));
            }
        }
    }
    if let Ok(text) = std::fs::read_to_string("/proc/diskstats") {
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 {
                continue;
            }
            let dev = f[2];
            // Whole devices only (a partition's bytes are its disk's too); no RAM or loop disks.
            let partition = std::path::Path::new("/sys/class/block").join(dev).join("partition").exists();
            if partition || dev.starts_with("loop") || dev.starts_with("ram") {
                continue;
            }
            // Sectors read (field 6) and written (field 10) are 512-byte units whatever the disk.
            let sectors = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) * 512.0;
            out.push(Sample::new(names::HOST_DISK_BYTES, &[("device", dev), ("direction", "read")], sectors(5)));
            out.push(Sample::new(names::HOST_DISK_BYTES, &[("device", dev), ("direction", "write")], sectors(9)));
        }
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = samples();
        for (name, kind, _) in names::ALL {
            let series: Vec<&Sample> = samples.iter().filter(|s| s.name == *name).collect();
            if series.is_empty() {
                continue;
            }
            let metric_type = if *kind == "counter" { MetricType::Counter } else { MetricType::Gauge };
            let mut m = encoder.encode_descriptor(name, names::help(name), None, metric_type)?;
            for s in series {
                let labels: Vec<(&str, &str)> = s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut f = m.encode_family(&labels)?;
                if metric_type == MetricType::Counter {
                    f.encode_counter::<NoLabelSet, _, u64>(&s.value, None)?;
                } else {
                    f.encode_gauge(&s.value)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_and_host_are_described_from_proc() {
        let s = samples();
        let find = |name: &str| s.iter().find(|x| x.name == name).map(|x| x.value);
        let cpu = find(names::PROCESS_CPU).expect("CPU time");
        assert!(cpu >= 0.0);
        assert!(find(names::PROCESS_RSS).expect("RSS") > 1e5);
        assert!(find(names::PROCESS_THREADS).expect("threads") >= 1.0);
        let start = find(names::PROCESS_START).expect("start time");
        assert!((start - crate::now_s()).abs() < 3600.0 * 24.0, "started {start}");
        assert!(find(names::HOST_CPUS).expect("cpus") >= 1.0);
        assert!(s.iter().any(|x| x.name == names::HOST_NET_BYTES && x.labels.iter().any(|(_, v)| v == "lo")));
        assert!(s.iter().any(|x| x.name == names::HOST_CPU && x.labels == vec![("mode", "idle".to_string())]));
        assert!(kb_value("MemTotal:       24567 kB\nMemFree: 1 kB\n", "MemTotal") == Some(24567.0 * 1024.0));
    }
}
