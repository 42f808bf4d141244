//! File pool policies as the metadata service keeps them: one ordered list under `F`, changed
//! by `AddPolicy` and `RemovePolicy` in a transaction (so concurrent changes serialize), read by
//! `trove policy` and by the data movement that applies them. The policies' meaning (their
//! conditions and how a file is judged) is `wire::policy`'s; this module checks what may be
//! stored: unique names, target pools that exist, and no policy that could never match.

use crate::keys::{self, PolicyListRec};
use crate::pools;
use crate::store::{self, abort, fail, get, TxResult};
use kv::KvTxn;
use wire::policy::POLICIES_MAX;
use wire::FilePolicy;

/// Every policy, in order.
pub async fn read(txn: &mut dyn KvTxn) -> TxResult<Vec<FilePolicy>> {
    Ok(get::<PolicyListRec>(txn, &keys::policies()).await?.unwrap_or_default().policies)
}

async fn write(txn: &mut dyn KvTxn, policies: Vec<FilePolicy>) -> TxResult<Vec<FilePolicy>> {
    let rec = PolicyListRec { policies };
    store::put(txn, &keys::policies(), &rec).await?;
    Ok(rec.policies)
}

/// Adds `policy` before the policy named `before` (`None`: last).
pub async fn add(txn: &mut dyn KvTxn, policy: FilePolicy, before: Option<&str>) -> TxResult<Vec<FilePolicy>> {
    policy.check().map_err(|e| abort(wire::werr!(Invalid, "{e}")))?;
    pools::by_name(txn, &policy.action.pool).await?;
    let mut policies = read(txn).await?;
    if policies.iter().any(|p| p.name == policy.name) {
        fail!(Exists, "a policy named {:?} exists already (remove it first to change it)", policy.name);
    }
    if policies.len() >= POLICIES_MAX {
        fail!(TooLarge, "the cluster has {} policies, the most it may have", policies.len());
    }
    let at = match before {
        Some(name) => match policies.iter().position(|p| p.name == name) {
            Some(at) => at,
            None => fail!(NotFound, "no policy named {name:?} to add {:?} before", policy.name),
        },
        None => policies.len(),
    };
    // A policy without conditions matches every file: whatever comes after it never matches.
    if let Some(all) = policies[..at].iter().find(|p| p.rule.is_empty()) {
        fail!(
            Invalid,
            "policy {:?} would never match: policy {:?} before it has no conditions and matches every file (add it with --before {})",
            policy.name,
            all.name,
            all.name
        );
    }
    if policy.rule.is_empty() && at < policies.len() {
        fail!(
            Invalid,
            "policy {:?} has no conditions and matches every file, so the {} policies after it would never match; a default policy goes last",
            policy.name,
            policies.len() - at
        );
    }
    policies.insert(at, policy);
    write(txn, policies).await
}

/// Removes the policy named `name`.
pub async fn remove(txn: &mut dyn KvTxn, name: &str) -> TxResult<Vec<FilePolicy>> {
    let mut policies = read(txn).await?;
    let Some(at) = policies.iter().position(|p| p.name == name) else {
        let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
        fail!(
            NotFound,
            "no policy named {name:?}; the policies are {}",
            if names.is_empty() { "none".to_string() } else { names.join(", ") }
        );
    };
    policies.remove(at);
    write(txn, policies).await
}
