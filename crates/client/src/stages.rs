//! The latency breakdown of reads as a front end reports it: this process's stage totals
//! (`wire::stages`: the mount's, the client's, the transport's) together with every storage
//! node's, in a small text form that crosses a process boundary (the mount answers it as a
//! virtual extended attribute) and that a benchmark diffs before and after a run.

use crate::{Client, Result};
use futures::future::join_all;
use std::collections::BTreeMap;
use wire::stages::StageTotal;
use wire::{ErrorCode, StorageOp, StorageReply, WireError};

/// The virtual extended attribute through which a mount answers its [`StageReport`] (on any
/// inode; it is never stored and names no namespace a file can use).
pub const STAGES_XATTR: &str = "trove.stages";

/// Stage totals of one front end's process (`local`) and summed over the storage nodes
/// (`storage`), as of one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StageReport {
    pub local: Vec<StageTotal>,
    pub storage: Vec<StageTotal>,
    /// Storage nodes that did not answer (their stages are missing from `storage`).
    pub nodes_unreached: u32,
}

impl StageReport {
    /// One line per stage, `local|storage NAME COUNT TOTAL_NS`, and `unreached N`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (side, totals) in [("local", &self.local), ("storage", &self.storage)] {
            for t in totals {
                out.push_str(&format!("{side} {} {} {}\n", t.stage, t.count, t.total_ns));
            }
        }
        out.push_str(&format!("unreached {}\n", self.nodes_unreached));
        out
    }

    /// Parses [`StageReport::to_text`]'s form.
    pub fn parse(text: &str) -> Result<StageReport, String> {
        let mut report = StageReport::default();
        for (n, line) in text.lines().enumerate() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let bad = || format!("stage report line {}: {line:?} is not `local|storage NAME COUNT TOTAL_NS`", n + 1);
            match fields.as_slice() {
                [] => {}
                ["unreached", count] => report.nodes_unreached = count.parse().map_err(|_| bad())?,
                [side, stage, count, total_ns] => {
                    let t = StageTotal {
                        stage: stage.to_string(),
                        count: count.parse().map_err(|_| bad())?,
                        total_ns: total_ns.parse().map_err(|_| bad())?,
                    };
                    match *side {
                        "local" => report.local.push(t),
                        "storage" => report.storage.push(t),
                        _ => return Err(bad()),
                    }
                }
                _ => return Err(bad()),
            }
        }
        Ok(report)
    }

    /// What happened between `before` and this report: per stage, the differences.
    pub fn since(&self, before: &StageReport) -> StageReport {
        let diff = |now: &[StageTotal], then: &[StageTotal]| -> Vec<StageTotal> {
            now.iter()
                .map(|t| {
                    let old = then.iter().find(|o| o.stage == t.stage);
                    StageTotal {
                        stage: t.stage.clone(),
                        count: t.count.saturating_sub(old.map_or(0, |o| o.count)),
                        total_ns: t.total_ns.saturating_sub(old.map_or(0, |o| o.total_ns)),
                    }
                })
                .filter(|t| t.count > 0)
                .collect()
        };
        StageReport {
            local: diff(&self.local, &before.local),
            storage: diff(&self.storage, &before.storage),
            nodes_unreached: self.nodes_unreached.max(before.nodes_unreached),
        }
    }
}

/// Sums totals of several processes by stage name.
fn sum_by_stage(all: impl IntoIterator<Item = StageTotal>) -> Vec<StageTotal> {
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in all {
        let e = sums.entry(t.stage).or_default();
        e.0 += t.count;
        e.1 += t.total_ns;
    }
    sums.into_iter().map(|(stage, (count, total_ns))| StageTotal { stage, count, total_ns }).collect()
}

impl Client {
    /// This process's stage totals and the sum of every known storage node's.
    pub async fn stage_report(&self) -> Result<StageReport> {
        let nodes: Vec<_> = self.inner.nodes.read().values().cloned().collect();
        let timeout = self.inner.options.storage_timeout;
        let answers = join_all(nodes.iter().map(|n| async move {
            match n.peer.call::<StorageOp, StorageReply>(&StorageOp::Stages, bytes::Bytes::new(), timeout).await {
                Ok((StorageReply::Stages(totals), _)) => Ok(totals),
                Ok((other, _)) => {
                    Err(WireError::new(ErrorCode::Internal, format!("unexpected reply to Stages: {other:?}")))
                }
                Err(e) => Err(crate::rpc_error(e)),
            }
        }))
        .await;
        let mut unreached = 0;
        let mut storage = Vec::new();
        for a in answers {
            match a {
                Ok(totals) => storage.extend(totals),
                Err(e) => {
                    tracing::debug!("stage totals of a storage node: {e}");
                    unreached += 1;
                }
            }
        }
        Ok(StageReport { local: wire::stages::snapshot(), storage: sum_by_stage(storage), nodes_unreached: unreached })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(stage: &str, count: u64, total_ns: u64) -> StageTotal {
        StageTotal { stage: stage.into(), count, total_ns }
    }

    #[test]
    fn reports_round_trip_and_diff() {
        let before = StageReport {
            local: vec![t("mount.read", 10, 1000)],
            storage: vec![t("storage.disk", 4, 400)],
            nodes_unreached: 0,
        };
        let after = StageReport {
            local: vec![t("mount.read", 15, 1600), t("client.record", 1, 90)],
            storage: vec![t("storage.disk", 4, 400), t("storage.verify", 2, 20)],
            nodes_unreached: 1,
        };
        assert_eq!(StageReport::parse(&after.to_text()), Ok(after.clone()));
        let d = after.since(&before);
        assert_eq!(d.local, vec![t("mount.read", 5, 600), t("client.record", 1, 90)]);
        assert_eq!(d.storage, vec![t("storage.verify", 2, 20)]);
        assert_eq!(d.nodes_unreached, 1);
        assert!(StageReport::parse("local x 1").is_err());
        assert!(StageReport::parse("remote x 1 2").is_err());
    }

    #[test]
    fn node_totals_sum_by_stage() {
        let s = sum_by_stage(vec![t("a", 1, 10), t("b", 2, 5), t("a", 3, 30)]);
        assert_eq!(s, vec![t("a", 4, 40), t("b", 2, 5)]);
    }
}
