//! Bucket policies, the common subset: statements of `Effect`, `Principal`, `Action` and
//! `Resource` (IAM's JSON, with `*` and `?` wildcards), kept as the xattr `user.s3.policy` of
//! the bucket's directory and set by the bucket's owner.
//!
//! A policy can only **deny**. What a user may do is decided by POSIX permissions, which the
//! mount and NFS judge too (the owner's, group's and others' bits, set by canned ACLs); a bucket
//! policy narrows that for S3 requests (deny deletes to everyone, deny one user, deny a prefix).
//! An `Allow` statement would grant over S3 what the same user is refused through the mount, so
//! it is refused when the policy is set (MalformedPolicy, saying to use a canned ACL), rather
//! than stored and silently granting nothing. `Condition`, `NotPrincipal`, `NotAction` and
//! `NotResource` are refused the same way.
//!
//! Principals: `"*"` (everyone, anonymous requests included), a user's name, or
//! `arn:aws:iam::<tenant>:user/<name>` and `arn:aws:iam::<tenant>:root` (every user of the
//! tenant); a principal of another tenant never matches. Policies apply to requests signed
//! with the cluster's S3 keys and to unsigned ones; the gateway's configured keys (the
//! operator's) are not bound by them. The owner can always change or remove the policy, so no
//! policy locks them out. A gateway reads a bucket's policy again after [`POLICY_CACHE_MS`]:
//! a change made through another gateway applies within that time (this gateway's own changes
//! at once).

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

/// One Deny statement.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Statement {
    sid: String,
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
            match fields.get("Effect").and_then(Value::as_str) {
                Some("Deny") => {}
                Some("Allow") => {
                    return Err(malformed(format!(
                        "statement {i}: Allow is not supported: access is granted by POSIX permissions (set them with a canned ACL, e.g. public-read), which the mount judges too; a policy may only Deny"
                    )))
                }
                _ => return Err(malformed(format!("statement {i}: Effect must be Deny"))),
            }
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
            statements.push(Statement { sid, principals, actions, resources });
        }
        Ok(BucketPolicy { statements })
    }

    /// The statement denying `action` on `resource` to the request's scope, if one does:
    /// its Sid (or its position).
    pub fn denies(&self, scope: &Scope, tenant: Option<&str>, action: &str, resource: &str) -> Option<String> {
        let user = scope.user.as_ref();
        for (i, st) in self.statements.iter().enumerate() {
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

    /// Whether some statement could deny `action` on a key of the bucket (for DeleteObjects,
    /// whose keys are in its body: any such statement denies the whole request).
    pub fn denies_any_key(&self, scope: &Scope, tenant: Option<&str>, action: &str, bucket: &str) -> Option<String> {
        let keys = format!("arn:aws:s3:::{bucket}/");
        let broad = BucketPolicy {
            statements: self
                .statements
                .iter()
                .filter(|s| s.resources.iter().any(|r| r.starts_with(&keys) || r == "*"))
                .map(|s| Statement { resources: vec!["*".into()], ..s.clone() })
                .collect(),
        };
        broad.denies(scope, tenant, action, "*")
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
    entries: parking_lot::Mutex<HashMap<(Ino, String), (Instant, Option<Arc<BucketPolicy>>)>>,
}

impl PolicyCache {
    /// The policy of `bucket` in `scope`'s namespace (`None`: none, or no such bucket).
    pub async fn get(&self, client: &Client, scope: &Scope, bucket: &str) -> S3Result<Option<Arc<BucketPolicy>>> {
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
                    match BucketPolicy::parse(&text, bucket) {
                        Ok(p) => Some(Arc::new(p)),
                        Err(e) => {
                            // Checked when set; a damaged one denies nothing but is reported.
                            tracing::warn!("the policy of bucket {bucket} does not parse: {e}");
                            None
                        }
                    }
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
        assert_eq!(p.denies(&alice, Some("acme"), "s3:DeleteObject", obj).as_deref(), Some("NoDeletes"));
        assert_eq!(p.denies(&alice, Some("acme"), "s3:GetObject", obj), None);
        assert_eq!(p.denies(&bob, Some("acme"), "s3:GetObject", obj).as_deref(), Some("BobOutOfSecret"));
        assert_eq!(p.denies(&bob, Some("acme"), "s3:GetObject", "arn:aws:s3:::data/open/x"), None);
        assert_eq!(p.denies(&other_bob, Some("globex"), "s3:GetObject", obj), None, "another tenant's bob");
        assert_eq!(p.denies_any_key(&alice, Some("acme"), "s3:DeleteObject", "data").as_deref(), Some("NoDeletes"));
        assert_eq!(action_of("HeadObject"), "s3:GetObject");
    }

    #[test]
    fn what_a_policy_cannot_say_is_refused_when_it_is_set() {
        let code = |text: &str| BucketPolicy::parse(text, "data").err().map(|e| e.code().as_str().to_string());
        let allow = r#"{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::data/*"}}"#;
        assert_eq!(code(allow).as_deref(), Some("MalformedPolicy"));
        let cond = r#"{"Statement":{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::data","Condition":{}}}"#;
        assert_eq!(code(cond).as_deref(), Some("MalformedPolicy"));
        let other =
            r#"{"Statement":{"Effect":"Deny","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::other/*"}}"#;
        assert_eq!(code(other).as_deref(), Some("MalformedPolicy"));
        assert_eq!(code("not json").as_deref(), Some("MalformedPolicy"));
        assert_eq!(code(&"x".repeat(POLICY_BYTES_MAX + 1)).as_deref(), Some("MalformedPolicy"));
        let ok = r#"{"Statement":{"Effect":"Deny","Principal":{"AWS":"carol"},"Action":"s3:Get*","Resource":"arn:aws:s3:::data"}}"#;
        assert!(BucketPolicy::parse(ok, "data").is_ok());
    }
}
