//! Ingest rules as the metadata service keeps them: one list under `d`, in name order, changed
//! by `AddIngestRule` and `RemoveIngestRule` in a transaction (so concurrent changes
//! serialize), read by `trove ingest` and by the job that derives the variants (`jobs::ingest`).
//! A rule's meaning is `wire::ingest`'s; this module checks what may be stored: unique names,
//! and no rule whose variants land in a tree another rule (or itself) derives from.

use crate::keys::{self, IngestListRec};
use crate::store::{self, abort, fail, get, TxResult};
use kv::KvTxn;
use wire::ingest::{within, INGEST_RULES_MAX};
use wire::IngestRule;

/// Every rule, in name order.
pub async fn read(txn: &mut dyn KvTxn) -> TxResult<Vec<IngestRule>> {
    Ok(get::<IngestListRec>(txn, &keys::ingest_rules()).await?.unwrap_or_default().rules)
}

async fn write(txn: &mut dyn KvTxn, rules: Vec<IngestRule>) -> TxResult<Vec<IngestRule>> {
    let rec = IngestListRec { rules };
    store::put(txn, &keys::ingest_rules(), &rec).await?;
    Ok(rec.rules)
}

/// Adds `rule`.
pub async fn add(txn: &mut dyn KvTxn, rule: IngestRule) -> TxResult<Vec<IngestRule>> {
    rule.check().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    let mut rules = read(txn).await?;
    if rules.iter().any(|r| r.name == rule.name) {
        fail!(Exists, "an ingest rule named {:?} exists already (remove it first to change it)", rule.name);
    }
    if rules.len() >= INGEST_RULES_MAX {
        fail!(TooLarge, "the cluster has {} ingest rules, the most it may have", rules.len());
    }
    // A variant landing in a source tree would be derived again, and again.
    for other in &rules {
        if within(&rule.into, &other.from) || within(&other.into, &rule.from) {
            fail!(
                Invalid,
                "ingest rule {:?} ({} -> {}) and ingest rule {:?} ({} -> {}) overlap: one's variants would land in the other's source",
                rule.name,
                rule.from,
                rule.into,
                other.name,
                other.from,
                other.into
            );
        }
        if rule.into == other.into || within(&rule.into, &other.into) || within(&other.into, &rule.into) {
            fail!(
                Invalid,
                "ingest rule {:?} writes into {}, which ingest rule {:?} writes into ({}): give each rule a tree of its own",
                rule.name,
                rule.into,
                other.name,
                other.into
            );
        }
    }
    let at = rules.partition_point(|r| r.name < rule.name);
    rules.insert(at, rule);
    write(txn, rules).await
}

/// Removes the rule named `name`.
pub async fn remove(txn: &mut dyn KvTxn, name: &str) -> TxResult<Vec<IngestRule>> {
    let mut rules = read(txn).await?;
    let Some(at) = rules.iter().position(|r| r.name == name) else {
        let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        fail!(
            NotFound,
            "no ingest rule named {name:?}; the rules are {}",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        );
    };
    rules.remove(at);
    write(txn, rules).await
}
