//! Fuzz target for bucket policies (`s3gw::policy`): the JSON a bucket's owner sends with
//! PutBucketPolicy is parsed and checked, and a policy that passes is judged for a user of a
//! tenant, as the bucket's owner and as another user, against actions and resources taken from
//! the input. Nothing may panic; a policy that parses must parse again the same from its own
//! text (what the gateway stores and reads back); the owner is never judged more strictly than
//! another user (a Deny binds both alike; only others are confined to the Allow statements);
//! and a policy without Allow statements confines nobody beyond its Deny statements.
//!
//! Input: the first line is the resource key the evaluation asks about, the rest the policy.

#![no_main]

use libfuzzer_sys::fuzz_target;
use s3gw::policy::{action_of, BucketPolicy, Verdict};
use s3gw::scope::Scope;
use wire::identity::User;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (key, policy) = text.split_once('\n').unwrap_or(("", &text));
    let Ok(parsed) = BucketPolicy::parse(policy, "data") else { return };
    assert_eq!(BucketPolicy::parse(policy, "data").ok().as_ref(), Some(&parsed));
    let has_allow = parsed.has_allow();
    let user = User { name: "bob".into(), uid: 1001, gid: 5001, groups: vec![], tenant: Some("acme".into()), created_ms: 0 };
    let scope = Scope { root: "/tenants/acme".into(), root_ino: 9, user: Some(user), access_key: Some("AK".into()) };
    let resource = format!("arn:aws:s3:::data/{key}");
    for op in ["GetObject", "PutObject", "DeleteObjects", "ListObjectsV2"] {
        let action = action_of(op);
        let pairs = [
            (
                parsed.judge(&scope, Some("acme"), &action, &resource, true),
                parsed.judge(&scope, Some("acme"), &action, &resource, false),
            ),
            (
                parsed.judge_any_key(&scope, Some("acme"), &action, "data", true),
                parsed.judge_any_key(&scope, Some("acme"), &action, "data", false),
            ),
        ];
        for (owner, other) in pairs {
            match (&owner, &other) {
                (Verdict::Denied(a), Verdict::Denied(b)) => assert_eq!(a, b),
                (Verdict::Permitted, Verdict::Permitted | Verdict::NotAllowed) => {}
                _ => panic!("owner judged {owner:?}, another user {other:?}"),
            }
            if !has_allow {
                assert_ne!(other, Verdict::NotAllowed, "a policy without Allow confined a user");
            }
        }
    }
});
