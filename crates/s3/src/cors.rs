//! Bucket CORS: the rules PutBucketCors stores, and how a browser's preflight (`OPTIONS`) and
//! its actual requests are answered from them, as S3 does.
//!
//! The rules are the extended attribute `user.s3.cors` of the bucket's directory, one rule per
//! line, fields separated by tabs, each field a space-separated list of hex-encoded values (so
//! no value can break the format): id, allowed origins, allowed methods, allowed headers,
//! expose headers, max age seconds. A preflight is answered by the first rule whose origin
//! (with at most one `*` wildcard), method and every requested header match; none matching is
//! 403 CORSResponse, and a bucket without rules is 403 CORSResponse too. Actual requests from
//! an allowed origin get `Access-Control-Allow-Origin` and the rule's exposed headers.

use crate::names;
use http::{HeaderMap, HeaderValue};
use s3s::dto::CORSRule;
use s3s::{S3Error, S3ErrorCode};

/// Extended attribute of a bucket's directory holding its CORS rules.
pub const XATTR_CORS: &str = "user.s3.cors";
/// Most rules one bucket may have, as in S3.
pub const RULES_MAX: usize = 100;

/// Why a CORS configuration or request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum CorsError {
    /// A rule lacks origins or methods, names an unknown method, or there are too many rules.
    Malformed(String),
    /// A preflight without an Origin or Access-Control-Request-Method.
    Insufficient,
    /// The bucket has no CORS rules.
    NotEnabled,
    /// No rule allows the request.
    NotAllowed,
}

impl From<CorsError> for S3Error {
    fn from(e: CorsError) -> S3Error {
        let status = match e {
            CorsError::Malformed(_) | CorsError::Insufficient => http::StatusCode::BAD_REQUEST,
            CorsError::NotEnabled | CorsError::NotAllowed => http::StatusCode::FORBIDDEN,
        };
        let mut err = match e {
            CorsError::Malformed(why) => S3Error::with_message(S3ErrorCode::MalformedXML, why),
            CorsError::Insufficient => S3Error::with_message(
                S3ErrorCode::Custom("BadRequest".into()),
                "Insufficient information. Origin request header needed.",
            ),
            CorsError::NotEnabled => S3Error::with_message(
                S3ErrorCode::Custom("CORSResponse".into()),
                "CORS is not enabled for this bucket.",
            ),
            CorsError::NotAllowed => S3Error::with_message(
                S3ErrorCode::Custom("CORSResponse".into()),
                "This CORS request is not allowed. This is usually because the evalution of Origin, request method / \
                 Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the \
                 resource's CORS spec.",
            ),
        };
        err.set_status_code(status);
        err
    }
}

/// The CORS rules of `bucket` (None: it has none).
pub async fn load(client: &client::Client, bucket: &str) -> Result<Option<Vec<Rule>>, S3Error> {
    use client::ErrorCode;
    let dir = match crate::scope::resolve_internal(client, &names::bucket_path(bucket)).await {
        Ok(a) if a.kind == client::FileKind::Dir => a,
        Ok(_) => return Err(S3Error::with_message(S3ErrorCode::NoSuchBucket, format!("no bucket {bucket:?}"))),
        Err(e) if matches!(e.code, ErrorCode::NotFound | ErrorCode::NotDir) => {
            return Err(S3Error::with_message(S3ErrorCode::NoSuchBucket, format!("no bucket {bucket:?}")))
        }
        Err(e) => return Err(crate::errors::s3_error(&e, crate::errors::Target::Bucket)),
    };
    match client.getxattr(dir.ino, XATTR_CORS).await {
        Ok(raw) => Ok(Some(decode(&String::from_utf8_lossy(&raw)).ok_or_else(|| {
            S3Error::with_message(
                S3ErrorCode::InternalError,
                format!("the CORS rules of bucket {bucket:?} are damaged"),
            )
        })?)),
        Err(e) if e.code == ErrorCode::NoAttr => Ok(None),
        Err(e) => Err(crate::errors::s3_error(&e, crate::errors::Target::Bucket)),
    }
}

/// One stored rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rule {
    pub id: Option<String>,
    pub origins: Vec<String>,
    pub methods: Vec<String>,
    pub headers: Vec<String>,
    pub expose: Vec<String>,
    pub max_age_secs: Option<i32>,
}

const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// Checks rules from PutBucketCors.
pub fn from_request(rules: &[CORSRule]) -> Result<Vec<Rule>, CorsError> {
    if rules.is_empty() || rules.len() > RULES_MAX {
        return Err(CorsError::Malformed(format!("a CORS configuration has 1 to {RULES_MAX} rules")));
    }
    rules
        .iter()
        .map(|r| {
            if r.allowed_origins.is_empty() || r.allowed_methods.is_empty() {
                return Err(CorsError::Malformed("every CORS rule needs an AllowedOrigin and an AllowedMethod".into()));
            }
            if let Some(m) = r.allowed_methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
                return Err(CorsError::Malformed(format!("Found unsupported HTTP method in CORS config: {m}")));
            }
            Ok(Rule {
                id: r.id.clone(),
                origins: r.allowed_origins.clone(),
                methods: r.allowed_methods.clone(),
                headers: r.allowed_headers.clone().unwrap_or_default(),
                expose: r.expose_headers.clone().unwrap_or_default(),
                max_age_secs: r.max_age_seconds,
            })
        })
        .collect()
}

/// The rules as GetBucketCors answers them.
pub fn to_response(rules: &[Rule]) -> Vec<CORSRule> {
    rules
        .iter()
        .map(|r| CORSRule {
            id: r.id.clone(),
            allowed_origins: r.origins.clone(),
            allowed_methods: r.methods.clone(),
            allowed_headers: (!r.headers.is_empty()).then(|| r.headers.clone()),
            expose_headers: (!r.expose.is_empty()).then(|| r.expose.clone()),
            max_age_seconds: r.max_age_secs,
        })
        .collect()
}

fn field(values: &[String]) -> String {
    values.iter().map(|v| names::hex(v.as_bytes())).collect::<Vec<_>>().join(" ")
}

fn unfield(text: &str) -> Option<Vec<String>> {
    text.split(' ').filter(|v| !v.is_empty()).map(|v| String::from_utf8(names::unhex(v)?).ok()).collect()
}

/// The xattr value of `rules`.
pub fn encode(rules: &[Rule]) -> String {
    rules
        .iter()
        .map(|r| {
            let id: Vec<String> = r.id.iter().cloned().collect();
            let age: Vec<String> = r.max_age_secs.iter().map(|a| a.to_string()).collect();
            format!(
                "{}\t{}\t{}\t{}\t{}\t{}\n",
                field(&id),
                field(&r.origins),
                field(&r.methods),
                field(&r.headers),
                field(&r.expose),
                field(&age)
            )
        })
        .collect()
}

/// Rules from their xattr value; None if damaged.
pub fn decode(text: &str) -> Option<Vec<Rule>> {
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 6 {
                return None;
            }
            Some(Rule {
                id: unfield(f[0])?.into_iter().next(),
                origins: unfield(f[1])?,
                methods: unfield(f[2])?,
                headers: unfield(f[3])?,
                expose: unfield(f[4])?,
                max_age_secs: match unfield(f[5])?.first() {
                    Some(a) => Some(a.parse().ok()?),
                    None => None,
                },
            })
        })
        .collect()
}

/// Whether `value` matches `pattern`, which may hold one `*` (case-insensitive when `fold`).
fn wildcard(pattern: &str, value: &str, fold: bool) -> bool {
    let (p, v) =
        if fold { (pattern.to_ascii_lowercase(), value.to_ascii_lowercase()) } else { (pattern.into(), value.into()) };
    match p.split_once('*') {
        None => p == v,
        Some((head, tail)) => v.len() >= head.len() + tail.len() && v.starts_with(head) && v.ends_with(tail),
    }
}

impl Rule {
    fn allows(&self, origin: &str, method: &str, headers: &[&str]) -> bool {
        self.origins.iter().any(|o| wildcard(o, origin, false))
            && self.methods.iter().any(|m| m == method)
            && headers.iter().all(|h| self.headers.iter().any(|a| wildcard(a, h, true)))
    }

    /// The headers answering a request from `origin` this rule allows.
    fn answer(&self, origin: &str, method: &str, requested_headers: Option<&str>, out: &mut HeaderMap) {
        let any = self.origins.iter().any(|o| o == "*");
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                out.insert(name, v);
            }
        };
        put("access-control-allow-origin", if any { "*" } else { origin });
        put("access-control-allow-methods", &self.methods.join(", "));
        let _ = method;
        if let Some(h) = requested_headers.filter(|h| !h.trim().is_empty()) {
            put("access-control-allow-headers", h);
        }
        if !self.expose.is_empty() {
            put("access-control-expose-headers", &self.expose.join(", "));
        }
        if let Some(age) = self.max_age_secs {
            put("access-control-max-age", &age.to_string());
        }
        if !any {
            put("access-control-allow-credentials", "true");
        }
        put("vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method");
    }
}

/// The answer headers of a preflight, from the bucket's `rules` (None: it has none).
pub fn preflight(rules: Option<&[Rule]>, req: &HeaderMap) -> Result<HeaderMap, CorsError> {
    let get = |n: &str| req.get(n).and_then(|v| v.to_str().ok());
    let (Some(origin), Some(method)) = (get("origin"), get("access-control-request-method")) else {
        return Err(CorsError::Insufficient);
    };
    let rules = rules.ok_or(CorsError::NotEnabled)?;
    let requested = get("access-control-request-headers");
    let headers: Vec<&str> =
        requested.into_iter().flat_map(|h| h.split(',')).map(str::trim).filter(|h| !h.is_empty()).collect();
    let rule = rules.iter().find(|r| r.allows(origin, method, &headers)).ok_or(CorsError::NotAllowed)?;
    let mut out = HeaderMap::new();
    rule.answer(origin, method, requested, &mut out);
    Ok(out)
}

/// The CORS headers of an actual request with an `Origin` (empty if no rule allows it).
pub fn actual(rules: &[Rule], origin: &str, method: &str) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(rule) = rules.iter().find(|r| r.allows(origin, method, &[])) {
        rule.answer(origin, method, None, &mut out);
        out.remove("access-control-allow-methods");
        out.remove("access-control-max-age");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rule {
        Rule {
            id: Some("web app".into()),
            origins: vec!["https://*.example.com".into()],
            methods: vec!["GET".into(), "PUT".into()],
            headers: vec!["x-amz-*".into(), "Content-Type".into()],
            expose: vec!["ETag".into()],
            max_age_secs: Some(600),
        }
    }

    #[test]
    fn rules_round_trip_through_their_xattr() {
        let rules = vec![rule(), Rule { origins: vec!["*".into()], methods: vec!["GET".into()], ..Default::default() }];
        assert_eq!(decode(&encode(&rules)), Some(rules));
        assert_eq!(decode("garbage"), None);
    }

    #[test]
    fn preflights_match_origin_method_and_headers() {
        let rules = [rule()];
        let mut req = HeaderMap::new();
        req.insert("origin", HeaderValue::from_static("https://app.example.com"));
        req.insert("access-control-request-method", HeaderValue::from_static("PUT"));
        req.insert("access-control-request-headers", HeaderValue::from_static("x-amz-date, content-type"));
        let out = preflight(Some(&rules), &req).expect("allowed");
        assert_eq!(out.get("access-control-allow-origin").map(|v| v.as_bytes()), Some(&b"https://app.example.com"[..]));
        assert_eq!(out.get("access-control-max-age").map(|v| v.as_bytes()), Some(&b"600"[..]));
        req.insert("access-control-request-method", HeaderValue::from_static("DELETE"));
        assert_eq!(preflight(Some(&rules), &req), Err(CorsError::NotAllowed));
        req.insert("access-control-request-method", HeaderValue::from_static("GET"));
        req.insert("origin", HeaderValue::from_static("https://evil.com"));
        assert_eq!(preflight(Some(&rules), &req), Err(CorsError::NotAllowed));
        assert_eq!(preflight(None, &req), Err(CorsError::NotEnabled));
        req.remove("origin");
        assert_eq!(preflight(Some(&rules), &req), Err(CorsError::Insufficient));
        assert!(actual(&rules, "https://a.example.com", "GET").contains_key("access-control-allow-origin"));
        assert!(actual(&rules, "https://a.example.org", "GET").is_empty());
    }

    #[test]
    fn bad_configurations_are_refused() {
        let ok =
            CORSRule { allowed_methods: vec!["GET".into()], allowed_origins: vec!["*".into()], ..Default::default() };
        assert!(from_request(&[ok.clone()]).is_ok());
        assert!(from_request(&[]).is_err());
        let bad = CORSRule { allowed_methods: vec!["PATCH".into()], ..ok };
        assert!(from_request(&[bad]).is_err());
    }
}
