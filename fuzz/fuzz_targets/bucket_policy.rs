//! Fuzz target for bucket policies (`s3gw::policy`): the JSON a bucket's owner sends with
//! PutBucketPolicy is parsed and checked, and a policy that passes is evaluated for a user of a
//! tenant against actions and resources taken from the input. Neither may panic; a policy that
//! parses must parse again the same from its own text (what the gateway stores and reads back).
//!
//! Input: the first line is the resource key the evaluation asks about, the rest the policy.

#![no_main]

use libfuzzer_sys::fuzz_target;
use s3gw::policy::{action_of, BucketPolicy};
use s3gw::scope::Scope;
use wire::identity::User;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (key, policy) = text.split_once('\n').unwrap_or(("", &text));
    let Ok(parsed) = BucketPolicy::parse(policy, "data") else { return };
    assert_eq!(BucketPolicy::parse(policy, "data").ok().as_ref(), Some(&parsed));
    let user = User { name: "bob".into(), uid: 1001, gid: 5001, groups: vec![], tenant: Some("acme".into()), created_ms: 0 };
    let scope = Scope { root: "/tenants/acme".into(), root_ino: 9, user: Some(user), access_key: Some("AK".into()) };
    for op in ["GetObject", "PutObject", "DeleteObjects", "ListObjectsV2"] {
        let action = action_of(op);
        let _ = parsed.denies(&scope, Some("acme"), &action, &format!("arn:aws:s3:::data/{key}"));
        let _ = parsed.denies_any_key(&scope, Some("acme"), &action, "data");
    }
});
