//! Bucket policies, the common subset: statements of `Effect` (Allow or Deny), `Principal`,
//! `Action` and `Resource` (IAM's JSON, with `*` and `?` wildcards), kept as the xattr
//! `user.s3.policy` of the bucket's directory and set by the bucket's owner.
//!
//! A policy never grants more than POSIX permissions do. What a user may do with a file is
//! decided by its mode (the owner's, group's and others' bits, set by canned ACLs), which the
//! mount and NFS judge too; a bucket policy is a second gate that S3 requests must pass as well,
//! as on multiprotocol NAS buckets (NetApp ONTAP's, OneFS's S3 over file permissions):
//!
//! 1. a **Deny** statement that matches refuses the request, the bucket's owner's included;
//! 2. when the policy holds **Allow** statements, a request of anyone but the bucket's owner
//!    (another user, an anonymous reader) must match one of them; the owner is not confined to
//!    them (no Allow statement can lock the owner out of their own bucket);
//! 3. then POSIX permissions decide, as without a policy.
//!
//! So `Allow` names who may use a bucket over S3 and for what (only bob, only reads, only
//! below `public/`), and an Allow that POSIX modes do not back grants nothing: bob allowed
//! `s3:PutObject` into alice's 0755 bucket is still refused, as he is through the mount. A
//! policy of Deny statements only confines nobody beyond them. `Condition`, `NotPrincipal`,
//! `NotAction` and `NotResource` are refused when the policy is set (MalformedPolicy), rather
//! than stored and silently ignored.
//!
//! Principals: `"*"` (everyone, anonymous requests included), a user's name, or
//! `arn:aws:iam::<tenant>:user/<name>` and `arn:aws:iam::<tenant>:root` (every user of the
//! tenant); a principal of another tenant never matches. Policies apply to requests signed
//! with the cluster's S3 keys and to unsigned ones; the gateway's configured keys (the
//! operator's) are not bound by them. The owner can always change or remove the policy, so no
//! policy locks them out; an unsigned request never changes a policy, and is matched only by
//! `"*"`. DeleteObjects and browser POST uploads name their keys in their bodies, after the
//! access check: a Deny that could cover any key refuses one whole, and for anyone but the
//! owner under Allow statements, only an Allow on every key (`arn:aws:s3:::BUCKET/*`) lets it
//! through. A gateway reads a bucket's policy (and its owner) again after
//! [`POLICY_CACHE_MS`]: a change made through another gateway applies within that time (this
//! gateway's own changes at once).

use crate::scope::Scope;
use client::{Client, ErrorCode, Ino};
use s3s::S3Result;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The xattr of a bucket's directory holding its policy (the JSON as set).
pub const XATTR_POLICY: &str = "user.s3.policy";
/// Largest policy, in bytes (AWS's limit for bucket policies).
pub const POLICY_BYTES_MAX: usize = 20 << 10;
/// Statements one policy may hold.
pub const STATEMENTS_MAX: usize = 100;
/// How long a gateway uses a bucket's policy before reading it again.
pub const POLICY_CACHE_MS: u64 = 2_000;
/// Buckets whose policy is remembered at most; the cache is emptied beyond.
const POLICY_CACHE_ENTRIES_MAX: usize = 16_384;

/// What a statement does to the requests it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    Allow,
    Deny,
}

/// One statement.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Statement {
    sid: String,
    effect: Effect,
    /// `None`: everyone.
    principals: Option<Vec<Principal>>,
    actions: Vec<String>,
    resources: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Principal {
    /// A user of `tenant` (`None`: named without a tenant, so the bucket's).
    User { tenant: Option<String>, name: String },
    /// Every user of the tenant.
    Tenant(String),
}

/// A parsed bucket policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketPolicy {
    statements: Vec<Statement>,
}

/// What a bucket's policy says of one request (POSIX permissions are judged after it, by the
/// operation itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing in the policy stands in the way.
    Permitted,
    /// A Deny statement matches: its Sid (or its position).
    Denied(String),
    /// The policy holds Allow statements, none matches, and the caller is not the bucket's
    /// owner.
    NotAllowed,
    /// The stored policy does not parse (it was checked when set through S3, so it was
    /// written another way): only the bucket's owner passes until it is set again.
    Unreadable(String),
}

/// A bucket's policy as a gateway applies it: the statements (or why the stored text does
/// not parse) and the bucket's owner, who is not confined to the Allow statements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub policy: Result<BucketPolicy, String>,
    pub owner_uid: u32,
}

impl Applied {
    /// Whether the request's scope is the bucket's owner: signed with a key of the user who
    /// owns the bucket's directory (an unsigned request owns nothing, even where it acts as
    /// `nobody` and `nobody` owns the directory).
    pub fn owned_by(&self, scope: &Scope) -> bool {
        scope.access_key.is_some() && scope.user.as_ref().is_some_and(|u| u.uid == self.owner_uid)
    }

    /// [`BucketPolicy::judge`], or [`BucketPolicy::judge_any_key`] when `resource` is `None`
    /// (keys not known yet, of bucket `bucket`).
    pub fn judge(&self, scope: &Scope, action: &str, bucket: &str, resource: Option<&str>) -> Verdict {
        let owner = self.owned_by(scope);
        let tenant = scope.user.as_ref().and_then(|u| u.tenant.as_deref());
        match (&self.policy, resource) {
            (Err(_), _) if owner => Verdict::Permitted,
            (Err(why), _) => Verdict::Unreadable(why.clone()),
            (Ok(p), Some(r)) => p.judge(scope, tenant, action, r, owner),
            (Ok(p), None) => p.judge_any_key(scope, tenant, action, bucket, owner),
        }
    }
}

fn malformed(why: String) -> s3s::S3Error {
    s3s::S3Error::with_message(s3s::S3ErrorCode::MalformedPolicy, why)
}

/// A string or an array of strings.
fn strings(v: &Value, what: &str) -> S3Result<Vec<String>> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).ok_or_else(|| malformed(format!("{what} holds a non-string"))))
            .collect(),
        _ => Err(malformed(format!("{what} must be a string or a non-empty array of strings"))),
    }
}

fn principal(text: &str) -> S3Result<Principal> {
    if let Some(rest) = text.strip_prefix("arn:aws:iam::") {
        let (tenant, what) =
            rest.split_once(':').ok_or_else(|| malformed(format!("principal {text:?} is not an IAM ARN")))?;
        if what == "root" {
            return Ok(Principal::Tenant(tenant.to_string()));
        }
        let name = what
            .strip_prefix("user/")
            .ok_or_else(|| malformed(format!("principal {text:?}: only users (user/NAME) and accounts (root)")))?;
        return Ok(Principal::User { tenant: Some(tenant.to_string()), name: name.to_string() });
    }
    wire::identity::check_name("user", text).map_err(malformed)?;
    Ok(Principal::User { tenant: None, name: text.to_string() })
}

impl BucketPolicy {
    /// Parses and checks a policy for `bucket`: every resource must be the bucket or below it.
    pub fn parse(text: &str, bucket: &str) -> S3Result<BucketPolicy> {
        if text.len() > POLICY_BYTES_MAX {
            return Err(malformed(format!(
                "a bucket policy has at most {POLICY_BYTES_MAX} bytes; this one has {}",
                text.len()
            )));
        }
        let doc: Value = serde_json::from_str(text).map_err(|e| malformed(format!("the policy is not JSON: {e}")))?;
        let Some(list) = doc.get("Statement") else { return Err(malformed("the policy has no Statement".into())) };
        let list = match list {
            Value::Array(a) => a.clone(),
            Value::Object(_) => vec![list.clone()],
            _ => return Err(malformed("Statement must be an object or an array".into())),
        };
        if list.is_empty() || list.len() > STATEMENTS_MAX {
            return Err(malformed(format!("a policy holds 1 to {STATEMENTS_MAX} statements")));
        }
        let own = format!("arn:aws:s3:::{bucket}");
        let mut statements = Vec::new();
        for (i, st) in list.iter().enumerate() {
            let Value::Object(fields) = st else { return Err(malformed(format!("statement {i} is not an object"))) };
            for key in fields.keys() {
                if !matches!(key.as_str(), "Sid" | "Effect" | "Principal" | "Action" | "Resource") {
                    return Err(malformed(format!(
                        "statement {i}: {key} is not supported (Sid, Effect, Principal, Action and Resource are)"
                    )));
                }
            }
            let sid = fields.get("Sid").and_then(Value::as_str).unwrap_or("").to_string();
            let effect = match fields.get("Effect").and_then(Value::as_str) {
                Some("Deny") => Effect::Deny,
                Some("Allow") => Effect::Allow,
                _ => return Err(malformed(format!("statement {i}: Effect must be Allow or Deny"))),
            };
            let principals = match fields.get("Principal") {
                Some(Value::String(s)) if s == "*" => None,
                Some(Value::Object(p)) => match p.get("AWS") {
                    Some(Value::String(s)) if s == "*" => None,
                    Some(v) if p.len() == 1 => {
                        Some(strings(v, "Principal.AWS")?.iter().map(|s| principal(s)).collect::<S3Result<_>>()?)
                    }
                    _ => return Err(malformed(format!("statement {i}: Principal must be \"*\" or {{\"AWS\": ...}}"))),
                },
                _ => return Err(malformed(format!("statement {i}: Principal must be \"*\" or {{\"AWS\": ...}}"))),
            };
            let actions = strings(fields.get("Action").unwrap_or(&Value::Null), "Action")?;
            for a in &actions {
                if !a.to_ascii_lowercase().starts_with("s3:") && a != "*" {
                    return Err(malformed(format!("statement {i}: action {a:?} is not an s3: action")));
                }
            }
            let resources = strings(fields.get("Resource").unwrap_or(&Value::Null), "Resource")?;
            for r in &resources {
                let inside = r == &own || r.strip_prefix(own.as_str()).is_some_and(|rest| rest.starts_with('/'));
                if !inside {
                    return Err(malformed(format!("statement {i}: resource {r:?} is not {own} or below it")));
                }
            }
            statements.push(Statement { sid, effect, principals, actions, resources });
        }
        Ok(BucketPolicy { statements })
    }

    /// The first statement of `effect` that matches `action` on `resource` for the request's
    /// scope, if one does: its Sid (or its position).
    fn matching(
        &self,
        effect: Effect,
        scope: &Scope,
        tenant: Option<&str>,
        action: &str,
        resource: &str,
    ) -> Option<String> {
        // Only a request signed with a user's key is that user: an unsigned one (which may
        // act as `nobody` for POSIX checks) is matched by "*" alone.
        let user = scope.access_key.as_ref().and(scope.user.as_ref());
        for (i, st) in self.statements.iter().enumerate() {
            if st.effect != effect {
                continue;
            }
            let who = match &st.principals {
                None => true,
                Some(list) => list.iter().any(|p| match (p, user) {
                    (Principal::Tenant(t), Some(_)) => Some(t.as_str()) == tenant,
                    (Principal::User { tenant: t, name }, Some(u)) => {
                        &u.name == name && t.as_deref().is_none_or(|t| Some(t) == tenant)
                    }
                    (_, None) => false,
                }),
            };
            let what = st.actions.iter().any(|a| glob(&a.to_ascii_lowercase(), &action.to_ascii_lowercase()));
            let where_ = st.resources.iter().any(|r| glob(r, resource));
            if who && what && where_ {
                return Some(if st.sid.is_empty() { format!("statement {i}") } else { st.sid.clone() });
            }
        }
        None
    }

    /// Whether the policy holds an Allow statement (which confines everyone but the owner).
    pub fn has_allow(&self) -> bool {
        self.statements.iter().any(|s| s.effect == Effect::Allow)
    }

    /// What the policy says of `action` on `resource` for the request's scope; `owner`: the
    /// scope is the bucket's owner (not confined to the Allow statements).
    pub fn judge(&self, scope: &Scope, tenant: Option<&str>, action: &str, resource: &str, owner: bool) -> Verdict {
        self.verdict(self.matching(Effect::Deny, scope, tenant, action, resource), owner, || {
            self.matching(Effect::Allow, scope, tenant, action, resource).is_some()
        })
    }

    /// The verdict once the Deny statements have been judged (`denied`): the owner, and anyone
    /// under a policy without Allow statements, passes; anyone else needs `allowed`.
    fn verdict(&self, denied: Option<String>, owner: bool, allowed: impl FnOnce() -> bool) -> Verdict {
        match denied {
            Some(statement) => Verdict::Denied(statement),
            None if owner || !self.has_allow() || allowed() => Verdict::Permitted,
            None => Verdict::NotAllowed,
        }
    }

    /// What the policy says of `action` on keys of `bucket` not known yet (DeleteObjects,
    /// whose keys are in its body): a Deny that could cover any key denies the whole request,
    /// and under Allow statements, anyone but the owner needs one that covers every key.
    pub fn judge_any_key(
        &self,
        scope: &Scope,
        tenant: Option<&str>,
        action: &str,
        bucket: &str,
        owner: bool,
    ) -> Verdict {
        let keys = format!("arn:aws:s3:::{bucket}/");
        let widened = |effect: Effect, keep: &dyn Fn(&str) -> bool| BucketPolicy {
            statements: self
                .statements
                .iter()
                .filter(|s| s.effect == effect && s.resources.iter().any(|r| keep(r)))
                .map(|s| Statement { resources: vec!["*".into()], ..s.clone() })
                .collect(),
        };
        let could_cover_a_key = |r: &str| r.starts_with(&keys) || r == "*";
        let covers_every_key = |r: &str| {
            r == "*"
                || r.strip_prefix(keys.as_str()).is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c == '*'))
        };
        let denied = widened(Effect::Deny, &could_cover_a_key).matching(Effect::Deny, scope, tenant, action, "*");
        self.verdict(denied, owner, || {
            widened(Effect::Allow, &covers_every_key).matching(Effect::Allow, scope, tenant, action, "*").is_some()
        })
    }
}

/// `text` matched against `pattern` with `*` (any run) and `?` (any one character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// The IAM action of an S3 operation (s3s's operation names).
pub fn action_of(op: &str) -> String {
    let action = match op {
        "HeadObject" | "GetObjectAttributes" => "GetObject",
        "ListObjects" | "ListObjectsV2" | "HeadBucket" => "ListBucket",
        "ListObjectVersions" => "ListBucketVersions",
        "CopyObject" | "CreateMultipartUpload" | "UploadPart" | "UploadPartCopy" | "CompleteMultipartUpload" => {
            "PutObject"
        }
        "DeleteObjects" => "DeleteObject",
        // A browser POST upload writes an object whose key is in its form.
        "PostObject" => "PutObject",
        "ListParts" => "ListMultipartUploadParts",
        "ListMultipartUploads" => "ListBucketMultipartUploads",
        "GetBucketCors" => "GetBucketCORS",
        "PutBucketCors" | "DeleteBucketCors" => "PutBucketCORS",
        "DeleteBucketPolicy" => "DeleteBucketPolicy",
        other => other,
    };
    format!("s3:{action}")
}

/// The policies of buckets as this gateway last read them.
#[derive(Default)]
pub struct PolicyCache {
    entries: parking_lot::Mutex<HashMap<(Ino, String), (Instant, Option<Arc<Applied>>)>>,
}

impl PolicyCache {
    /// The policy of `bucket` in `scope`'s namespace (`None`: none, or no such bucket).
    pub async fn get(&self, client: &Client, scope: &Scope, bucket: &str) -> S3Result<Option<Arc<Applied>>> {
        let key = (scope.root_ino, bucket.to_string());
        if let Some((at, p)) = self.entries.lock().get(&key) {
            if at.elapsed() < Duration::from_millis(POLICY_CACHE_MS) {
                return Ok(p.clone());
            }
        }
        let found = match client.resolve(&scope.path(&format!("/{bucket}"))).await {
            Ok(dir) => match client.getxattr(dir.ino, XATTR_POLICY).await {
                Ok(raw) => {
                    let text = String::from_utf8_lossy(&raw);
                    let policy = BucketPolicy::parse(&text, bucket).map_err(|e| {
                        // Checked when set through S3; one written another way that does not
                        // parse fails closed (only the owner passes) and is reported.
                        tracing::warn!("the policy of bucket {bucket} does not parse: {e}");
                        e.message().unwrap_or("malformed").to_string()
                    });
                    Some(Arc::new(Applied { policy, owner_uid: dir.uid }))
                }
                Err(e) if e.code == ErrorCode::NoAttr => None,
                Err(e) => return Err(crate::errors::s3_error(&e, crate::errors::Target::Bucket)),
            },
            Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => None,
            Err(e) => return Err(crate::errors::s3_error(&e, crate::errors::Target::Bucket)),
        };
        let mut entries = self.entries.lock();
        if entries.len() >= POLICY_CACHE_ENTRIES_MAX {
            entries.clear();
        }
        entries.insert(key, (Instant::now(), found.clone()));
        Ok(found)
    }

    /// Forgets `bucket`'s policy in `root`'s namespace (after this gateway changed it).
    pub fn forget(&self, root: Ino, bucket: &str) {
        self.entries.lock().remove(&(root, bucket.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::identity::User;

    fn scope(name: &str, tenant: &str) -> Scope {
        let user = User {
            name: name.into(),
            uid: 1000,
            gid: 1000,
            groups: vec![],
            tenant: Some(tenant.into()),
            created_ms: 0,
        };
        Scope { root: format!("/tenants/{tenant}"), root_ino: 5, user: Some(user), access_key: Some("AK".into()) }
    }

    #[test]
    fn wildcards_match_as_iam_does() {
        assert!(glob("arn:aws:s3:::b/*", "arn:aws:s3:::b/a/c.txt"));
        assert!(glob("s3:get*", "s3:getobject"));
        assert!(glob("a?c", "abc") && !glob("a?c", "ac"));
        assert!(glob("*", "") && glob("**x", "yx") && !glob("b/*", "c/x"));
    }

    #[test]
    fn deny_statements_match_principal_action_and_resource() {
        let text = r#"{"Version":"2012-10-17","Statement":[
            {"Sid":"NoDeletes","Effect":"Deny","Principal":"*","Action":["s3:DeleteObject"],"Resource":"arn:aws:s3:::data/*"},
            {"Sid":"BobOutOfSecret","Effect":"Deny","Principal":{"AWS":["arn:aws:iam::acme:user/bob"]},"Action":"s3:*","Resource":["arn:aws:s3:::data/secret/*"]}]}"#;
        let p = BucketPolicy::parse(text, "data").expect("parses");
        let (alice, bob, other_bob) = (scope("alice", "acme"), scope("bob", "acme"), scope("bob", "globex"));
        let obj = "arn:aws:s3:::data/secret/x";
        let denied = |s: &str| Verdict::Denied(s.to_string());
        assert_eq!(p.judge(&alice, Some("acme"), "s3:DeleteObject", obj, true), denied("NoDeletes"), "owner too");
        assert_eq!(p.judge(&alice, Some("acme"), "s3:GetObject", obj, false), Verdict::Permitted);
        assert_eq!(p.judge(&bob, Some("acme"), "s3:GetObject", obj, false), denied("BobOutOfSecret"));
        assert_eq!(p.judge(&bob, Some("acme"), "s3:GetObject", "arn:aws:s3:::data/open/x", false), Verdict::Permitted);
        assert_eq!(
            p.judge(&other_bob, Some("globex"), "s3:GetObject", obj, false),
            Verdict::Permitted,
            "another tenant's bob"
        );
        assert_eq!(p.judge_any_key(&alice, Some("acme"), "s3:DeleteObject", "data", true), denied("NoDeletes"));
        assert_eq!(action_of("HeadObject"), "s3:GetObject");
    }

    #[test]
    fn allow_statements_confine_everyone_but_the_owner() {
        let text = r#"{"Statement":[
            {"Sid":"BobReadsA","Effect":"Allow","Principal":{"AWS":"arn:aws:iam::acme:user/bob"},"Action":["s3:GetObject","s3:ListBucket"],"Resource":["arn:aws:s3:::data","arn:aws:s3:::data/a/*"]},
            {"Sid":"PublicP","Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/public/*"},
            {"Sid":"NotA2","Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/a/2"}]}"#;
        let p = BucketPolicy::parse(text, "data").expect("parses");
        let (alice, bob, carol) = (scope("alice", "acme"), scope("bob", "acme"), scope("carol", "acme"));
        let anon = Scope { root: String::new(), root_ino: 1, user: None, access_key: None };
        let at = |k: &str| format!("arn:aws:s3:::data/{k}");
        assert_eq!(p.judge(&bob, Some("acme"), "s3:GetObject", &at("a/1"), false), Verdict::Permitted);
        assert_eq!(p.judge(&bob, Some("acme"), "s3:ListBucket", "arn:aws:s3:::data", false), Verdict::Permitted);
        assert_eq!(p.judge(&bob, Some("acme"), "s3:GetObject", &at("b/1"), false), Verdict::NotAllowed);
        assert_eq!(p.judge(&bob, Some("acme"), "s3:PutObject", &at("a/1"), false), Verdict::NotAllowed);
        assert_eq!(p.judge(&carol, Some("acme"), "s3:GetObject", &at("a/1"), false), Verdict::NotAllowed);
        assert_eq!(p.judge(&carol, Some("acme"), "s3:GetObject", &at("public/x"), false), Verdict::Permitted);
        assert_eq!(p.judge(&anon, None, "s3:GetObject", &at("public/x"), false), Verdict::Permitted, "* is anyone");
        assert_eq!(p.judge(&anon, None, "s3:ListBucket", "arn:aws:s3:::data", false), Verdict::NotAllowed);
        // The owner is not confined to the Allow statements, but a Deny binds everyone.
        assert_eq!(p.judge(&alice, Some("acme"), "s3:PutObject", &at("b/1"), true), Verdict::Permitted);
        assert_eq!(p.judge(&bob, Some("acme"), "s3:GetObject", &at("a/2"), false), Verdict::Denied("NotA2".into()));
        assert_eq!(p.judge(&alice, Some("acme"), "s3:GetObject", &at("a/2"), true), Verdict::Denied("NotA2".into()));
        // A user of another tenant named like bob is not bob.
        assert_eq!(
            p.judge(&scope("bob", "globex"), Some("globex"), "s3:GetObject", &at("a/1"), false),
            Verdict::NotAllowed
        );
    }

    #[test]
    fn an_unsigned_request_is_no_user_and_owns_nothing() {
        // Where anonymous reading is on, unsigned requests are judged by POSIX as `nobody`.
        let mut nobody = scope("anonymous", "acme");
        nobody.access_key = None;
        if let Some(u) = nobody.user.as_mut() {
            u.uid = 65534;
            u.tenant = None;
        }
        let text = r#"{"Statement":[
            {"Effect":"Allow","Principal":{"AWS":"anonymous"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::data/*"},
            {"Sid":"NoNamed","Effect":"Deny","Principal":{"AWS":"anonymous"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::data/x"}]}"#;
        let applied =
            Applied { policy: BucketPolicy::parse(text, "data").map_err(|e| format!("{e:?}")), owner_uid: 65534 };
        assert!(!applied.owned_by(&nobody), "a bucket nobody owns is not the unsigned requests'");
        let x = Some("arn:aws:s3:::data/x");
        assert_eq!(
            applied.judge(&nobody, "s3:GetObject", "data", x),
            Verdict::NotAllowed,
            "not the user named anonymous"
        );
    }

    #[test]
    fn delete_objects_under_allow_statements_needs_an_allow_of_every_key() {
        let some = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:DeleteObject","Resource":"arn:aws:s3:::data/tmp/*"}}"#;
        let every = r#"{"Statement":{"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:DeleteObject","Resource":"arn:aws:s3:::data/*"}}"#;
        let bob = scope("bob", "acme");
        let p = BucketPolicy::parse(some, "data").expect("parses");
        assert_eq!(p.judge_any_key(&bob, Some("acme"), "s3:DeleteObject", "data", false), Verdict::NotAllowed);
        assert_eq!(p.judge_any_key(&bob, Some("acme"), "s3:DeleteObject", "data", true), Verdict::Permitted);
        let p = BucketPolicy::parse(every, "data").expect("parses");
        assert_eq!(p.judge_any_key(&bob, Some("acme"), "s3:DeleteObject", "data", false), Verdict::Permitted);
        assert_eq!(
            p.judge_any_key(&scope("carol", "acme"), Some("acme"), "s3:DeleteObject", "data", false),
            Verdict::NotAllowed
        );
    }

    #[test]
    fn a_stored_policy_that_does_not_parse_lets_only_the_owner_through() {
        let applied = Applied { policy: Err("the policy is not JSON".into()), owner_uid: 1000 };
        let mut other = scope("bob", "acme");
        if let Some(u) = other.user.as_mut() {
            u.uid = 1001;
        }
        let resource = Some("arn:aws:s3:::data/x");
        assert_eq!(applied.judge(&scope("alice", "acme"), "s3:GetObject", "data", resource), Verdict::Permitted);
        assert!(matches!(applied.judge(&other, "s3:GetObject", "data", resource), Verdict::Unreadable(_)));
        let anon = Scope { root: String::new(), root_ino: 1, user: None, access_key: None };
        assert!(matches!(applied.judge(&anon, "s3:GetObject", "data", None), Verdict::Unreadable(_)));
    }

    #[test]
    fn what_a_policy_cannot_say_is_refused_when_it_is_set() {
        let code = |text: &str| BucketPolicy::parse(text, "data").err().map(|e| e.code().as_str().to_string());
        let effect = r#"{"Statement":{"Effect":"Permit","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/*"}}"#;
        assert_eq!(code(effect).as_deref(), Some("MalformedPolicy"));
        let cond = r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::data","Condition":{}}}"#;
        assert_eq!(code(cond).as_deref(), Some("MalformedPolicy"));
        let other =
            r#"{"Statement":{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::other/*"}}"#;
        assert_eq!(code(other).as_deref(), Some("MalformedPolicy"));
        assert_eq!(code("not json").as_deref(), Some("MalformedPolicy"));
        assert_eq!(code(&"x".repeat(POLICY_BYTES_MAX + 1)).as_deref(), Some("MalformedPolicy"));
        let ok = r#"{"Statement":{"Effect":"Deny","Principal":{"AWS":"carol"},"Action":"s3:Get*","Resource":"arn:aws:s3:::data"}}"#;
        assert!(BucketPolicy::parse(ok, "data").is_ok());
        let allow = r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/*"}}"#;
        assert!(BucketPolicy::parse(allow, "data").is_ok());
    }
}
