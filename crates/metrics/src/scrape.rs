//! The reading side: fetching an exporter's `/metrics` and `/top`, reading the Prometheus text
//! format back, and the arithmetic `trove stats` and the dashboard share (rates between two
//! scrapes, latency quantiles from histogram buckets), so both show the same figures.
//!
//! The reader understands the text format as exporters write it (`name{label="value",...}
//! value [timestamp]`, `#` lines ignored); it is not a validating parser.

use crate::histogram;
use crate::names;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long one fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest answer read from an exporter.
pub const BODY_BYTES_MAX: usize = 16 << 20;

/// Errors fetching from an exporter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScrapeError {
    #[error("cannot reach the exporter at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("the exporter at {addr} answered {status} to {path}")]
    Status { addr: String, path: String, status: u16 },
    #[error("the exporter at {addr} did not answer within {} s", FETCH_TIMEOUT.as_secs())]
    Timeout { addr: String },
    #[error("the exporter at {addr} sent an unreadable answer: {reason}")]
    Body { addr: String, reason: String },
}

/// `GET path` from the HTTP server at `addr` ("HOST:PORT"); the body as text.
pub async fn get(addr: &str, path: &str) -> Result<String, ScrapeError> {
    match tokio::time::timeout(FETCH_TIMEOUT, get_inner(addr, path)).await {
        Ok(r) => r,
        Err(_) => Err(ScrapeError::Timeout { addr: addr.to_string() }),
    }
}

async fn get_inner(addr: &str, path: &str) -> Result<String, ScrapeError> {
    let connect = |reason: String| ScrapeError::Connect { addr: addr.to_string(), reason };
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| connect(e.to_string()))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| connect(e.to_string()))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| connect(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| connect(e.to_string()))?;
    let status = response.status().as_u16();
    if status != 200 {
        driver.abort();
        return Err(ScrapeError::Status { addr: addr.to_string(), path: path.to_string(), status });
    }
    let body = http_body_util::Limited::new(response.into_body(), BODY_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| ScrapeError::Body { addr: addr.to_string(), reason: e.to_string() })?
        .to_bytes();
    driver.abort();
    String::from_utf8(body.to_vec()).map_err(|e| ScrapeError::Body { addr: addr.to_string(), reason: e.to_string() })
}

/// One sample read back: its full name (with `_total`, `_bucket`, ... as published), labels
/// and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// The samples of one scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub samples: Vec<Parsed>,
}

/// Reads the text format. Lines that do not parse are skipped.
pub fn parse(text: &str) -> Metrics {
    Metrics { samples: text.lines().filter_map(parse_line).collect() }
}

fn parse_line(line: &str) -> Option<Parsed> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if rest.starts_with('{') {
        rest = &rest[1..];
        loop {
            rest = rest.trim_start_matches([',', ' ']);
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find('=')?;
            let key = rest[..eq].trim().to_string();
            rest = rest[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => break i,
                    c => value.push(c),
                }
            };
            labels.push((key, value));
            rest = &rest[end + 1..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().ok()?,
    };
    Some(Parsed { name, labels, value })
}

impl Parsed {
    fn has(&self, want: &[(&str, &str)]) -> bool {
        want.iter().all(|(k, v)| self.labels.iter().any(|(lk, lv)| lk == k && lv == v))
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

impl Metrics {
    /// Samples named `name` that carry every label of `want`.
    pub fn series<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Parsed> + 'a {
        self.samples.iter().filter(move |s| s.name == name && s.has(want))
    }

    /// The first such sample's value.
    pub fn value(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        self.series(name, want).next().map(|s| s.value)
    }

    /// The sum over such samples (0 when there are none).
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.series(name, want).map(|s| s.value).sum()
    }

    /// Histogram `name` (without `_bucket`) merged over every series carrying `want`: the upper
    /// bounds and the observations per bucket (not cumulative).
    pub fn histogram(&self, name: &str, want: &[(&str, &str)]) -> (Vec<f64>, Vec<u64>) {
        let bucket = format!("{name}_bucket");
        let mut cumulative: BTreeMap<u64, f64> = BTreeMap::new();
        for s in self.series(&bucket, want) {
            let Some(le) = s.label("le") else { continue };
            let bound = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::INFINITY) };
            *cumulative.entry(bound.to_bits()).or_default() += s.value;
        }
        let mut pairs: Vec<(f64, f64)> = cumulative.into_iter().map(|(b, c)| (f64::from_bits(b), c)).collect();
        pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut counts = Vec::with_capacity(pairs.len());
        let mut prev = 0.0;
        for (_, c) in &pairs {
            counts.push((c - prev).max(0.0) as u64);
            prev = *c;
        }
        (pairs.into_iter().map(|(b, _)| b).collect(), counts)
    }

    /// The protocols this process serves operations of (from `trove_ops_total`).
    pub fn protocols(&self) -> Vec<String> {
        let mut out: Vec<String> =
            self.series("trove_ops_total", &[]).filter_map(|s| s.label("protocol")).map(String::from).collect();
        out.sort();
        out.dedup();
        out
    }
}

/// What one process did per second between two scrapes; what `trove stats` shows per row and
/// the dashboard charts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Seconds between the scrapes.
    pub seconds: f64,
    /// CPU time of the process per wall second, in percent of one core.
    pub cpu_percent: f64,
    pub memory_bytes: f64,
    /// Operations per second by protocol.
    pub ops: BTreeMap<String, f64>,
    /// Operations answered with an error, per second (all protocols).
    pub errors: f64,
    /// Data bytes per second clients read and wrote, by protocol.
    pub read_bytes: BTreeMap<String, f64>,
    pub write_bytes: BTreeMap<String, f64>,
    pub net_in_bytes: f64,
    pub net_out_bytes: f64,
    /// What reached the block layer (the page cache answers the rest).
    pub disk_read_bytes: f64,
    pub disk_write_bytes: f64,
    /// Latency of the operations served in between (all protocols but the client library's,
    /// unless that is the only one), in seconds.
    pub latency_p50_s: Option<f64>,
    pub latency_p99_s: Option<f64>,
}

/// Operations of the protocol a process serves: everything but the embedded client library's,
/// unless that is all it has.
fn served(m: &Metrics) -> Vec<String> {
    let all = m.protocols();
    let served: Vec<String> = all.iter().filter(|p| *p != "client").cloned().collect();
    if served.is_empty() {
        all
    } else {
        served
    }
}

/// The rates between scrape `before` and `after`, `seconds` apart. Counters that went down
/// (the process restarted) count from zero.
pub fn rates(before: &Metrics, after: &Metrics, seconds: f64) -> Rates {
    let seconds = seconds.max(1e-3);
    let delta = |name: &str, want: &[(&str, &str)]| {
        let (b, a) = (before.sum(name, want), after.sum(name, want));
        (if a >= b { a - b } else { a }) / seconds
    };
    let mut r = Rates {
        seconds,
        cpu_percent: 100.0 * delta("process_cpu_seconds_total", &[]),
        memory_bytes: after.sum(names::PROCESS_RSS, &[]),
        errors: delta("trove_op_errors_total", &[]),
        net_in_bytes: delta("trove_net_bytes_total", &[("direction", "in")]),
        net_out_bytes: delta("trove_net_bytes_total", &[("direction", "out")]),
        disk_read_bytes: delta("trove_process_disk_bytes_total", &[("direction", "read")]),
        disk_write_bytes: delta("trove_process_disk_bytes_total", &[("direction", "write")]),
        ..Rates::default()
    };
    for p in after.protocols() {
        r.ops.insert(p.clone(), delta("trove_ops_total", &[("protocol", &p)]));
        r.read_bytes.insert(p.clone(), delta("trove_bytes_total", &[("protocol", &p), ("direction", "read")]));
        r.write_bytes.insert(p.clone(), delta("trove_bytes_total", &[("protocol", &p), ("direction", "write")]));
    }
    let mut bounds = Vec::new();
    let mut counts: Vec<u64> = Vec::new();
    for p in served(after) {
        let (b_after, c_after) = after.histogram(names::OP_DURATION, &[("protocol", &p)]);
        let (_, c_before) = before.histogram(names::OP_DURATION, &[("protocol", &p)]);
        if c_after.is_empty() {
            continue;
        }
        if counts.is_empty() {
            bounds = b_after.clone();
            counts = vec![0; c_after.len()];
        }
        let restarted = c_before.iter().sum::<u64>() > c_after.iter().sum::<u64>();
        for (i, c) in c_after.iter().enumerate() {
            let was = if restarted || c_before.len() != c_after.len() { 0 } else { c_before[i] };
            if let Some(slot) = counts.get_mut(i) {
                *slot += c.saturating_sub(was);
            }
        }
    }
    r.latency_p50_s = histogram::quantile(&bounds, &counts, 0.5);
    r.latency_p99_s = histogram::quantile(&bounds, &counts, 0.99);
    r
}

impl Rates {
    /// Operations per second, all protocols but the embedded client library's (unless it is
    /// the only one).
    pub fn ops_total(&self) -> f64 {
        let served: f64 = self.ops.iter().filter(|(p, _)| *p != "client").map(|(_, v)| v).sum();
        if self.ops.keys().any(|p| p != "client") {
            served
        } else {
            self.ops.values().sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_reads_back() {
        let text = "# HELP x y\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"uote\\\\\"} 3\nplain 2.5e3\ny{le=\"+Inf\"} +Inf\nbad line\n";
        let m = parse(text);
        assert_eq!(m.samples.len(), 3, "{m:?}");
        assert_eq!(m.value("x_total", &[("b", "q\"uote\\")]), Some(3.0));
        assert_eq!(m.value("plain", &[]), Some(2500.0));
        assert!(m.value("y", &[("le", "+Inf")]).is_some_and(f64::is_infinite));
    }

    #[test]
    fn rates_and_latency_come_from_two_scrapes() {
        let before = parse(concat!(
            "process_cpu_seconds_total 10\n",
            "trove_ops_total{protocol=\"storage\",op=\"GetShard\"} 100\n",
            "trove_ops_total{protocol=\"client\",op=\"Read\"} 5\n",
            "trove_bytes_total{protocol=\"storage\",direction=\"read\"} 1000\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"0.001\"} 100\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"0.01\"} 100\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"+Inf\"} 100\n",
        ));
        let after = parse(concat!(
            "process_cpu_seconds_total 11\n",
            "trove_ops_total{protocol=\"storage\",op=\"GetShard\"} 300\n",
            "trove_ops_total{protocol=\"client\",op=\"Read\"} 5\n",
            "trove_bytes_total{protocol=\"storage\",direction=\"read\"} 3000\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"0.001\"} 100\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"0.01\"} 300\n",
            "trove_op_duration_seconds_bucket{protocol=\"storage\",op=\"GetShard\",le=\"+Inf\"} 300\n",
        ));
        let r = rates(&before, &after, 2.0);
        assert_eq!(r.cpu_percent, 50.0);
        assert_eq!(r.ops.get("storage"), Some(&100.0));
        assert_eq!(r.ops_total(), 100.0);
        assert_eq!(r.read_bytes.get("storage"), Some(&1000.0));
        // The 200 operations in between all took 1-10 ms.
        let p50 = r.latency_p50_s.expect("p50");
        assert!((p50 - 0.0055).abs() < 1e-9, "{p50}");
        assert!(r.latency_p99_s.expect("p99") <= 0.01);
        // A restart (counters lower) counts from zero instead of going negative.
        let r = rates(&after, &before, 1.0);
        assert_eq!(r.ops.get("storage"), Some(&100.0));
    }
}
