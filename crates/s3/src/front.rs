//! The HTTP front of the gateway: what every request goes through before and after s3s.
//!
//! - **Bodies.** An object's data (PUT of an object or a part) streams to the operation through
//!   [`IdleBody`], so a body that stops arriving is cut after `body_idle_timeout_ms` and
//!   answered 400 RequestTimeout; nothing is published. Every other body (the XML of
//!   CompleteMultipartUpload, DeleteObjects, bucket settings; none at all for most requests) is
//!   read here, at most [`XML_BODY_BYTES_MAX`] bytes: a larger one is refused with 400
//!   MaxMessageLengthExceeded as soon as its Content-Length (or its bytes) says so, without
//!   reading or holding the rest. s3s would buffer it itself and answer a body over its limit
//!   with 500 InternalError.
//! - **Answers.** An error answer that s3s made with a code only (InvalidBucketName,
//!   SignatureDoesNotMatch, MalformedXML, ...) gets a message ([`errors::default_message`]);
//!   boto3 shows "Unknown" otherwise. A request that was cut, refused before its body was read,
//!   or carried `Expect: 100-continue` and was answered without `100 Continue`, gets
//!   `Connection: close`: botocore mishandles the next response on such a connection and waits
//!   for its read timeout (boto/botocore#3010).
//! - **CORS.** A preflight (`OPTIONS` on a bucket or object) is answered here from the
//!   bucket's rules, unauthenticated as in S3; an answer to a request carrying `Origin` gets
//!   the allowing rule's `Access-Control-*` headers.
//! - **Logs.** A 5xx answer is logged at WARN with its code and message, anything else at DEBUG
//!   at most; s3s's own lines are held back (see `quiet.rs`).
//! - **Audit.** Requests refused for failed authentication (bad signature, unknown access key,
//!   unsigned where anonymous access is off, ...) are counted and reported to the cluster's
//!   event log as one `auth_failure` event per [`AUTH_REPORT_INTERVAL`] at most, naming how
//!   many and the latest (code, client address, access key): a flood of bad requests cannot
//!   flood the log.

use crate::conn::IdleBody;
use crate::errors;
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Uri};
use hyper::body::{Body, Incoming};
use s3s::{HttpError, HttpResponse, S3Error, S3ErrorCode};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tracing::instrument::WithSubscriber;

/// Largest request body that is not object data (the XML of DeleteObjects with 1000 keys of
/// 1 KiB, or of a completion listing 10,000 parts, fits with room to spare).
pub const XML_BODY_BYTES_MAX: usize = 4 << 20;

/// How often refused authentications are reported to the event log, at most.
pub const AUTH_REPORT_INTERVAL: Duration = Duration::from_secs(5);
/// The error codes of a request refused for failed authentication.
const AUTH_FAILURE_CODES: [&str; 7] = [
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "AccessDenied",
    "AuthorizationHeaderMalformed",
    "AuthorizationQueryParametersError",
    "RequestTimeTooSkewed",
    "MissingSecurityHeader",
];

/// Refused authentications not yet reported: how many, and the latest.
#[derive(Default)]
pub struct AuthFailures(parking_lot::Mutex<(u64, String)>);

impl AuthFailures {
    fn note(&self, latest: String) {
        let mut pending = self.0.lock();
        pending.0 += 1;
        pending.1 = latest;
    }

    fn take(&self) -> Option<(u64, String)> {
        let mut pending = self.0.lock();
        (pending.0 > 0).then(|| (std::mem::take(&mut pending.0), std::mem::take(&mut pending.1)))
    }

    /// Reports what accumulated every [`AUTH_REPORT_INTERVAL`], as `front` ("S3 gateway
    /// ADDR"), until the process ends.
    pub async fn report(self: Arc<Self>, client: client::Client, front: String) {
        loop {
            tokio::time::sleep(AUTH_REPORT_INTERVAL).await;
            let Some((refused, latest)) = self.take() else { continue };
            let op = wire::MetaOp::ReportAuthFailures { front: front.clone(), refused, latest };
            if let Err(e) = client.meta(op).await {
                tracing::warn!("{refused} refused authentication(s) could not be reported to the event log: {e}");
            }
        }
    }
}

/// The access key a request was signed with (header or presigned URL, signature version 4 or
/// 2), if it names one. The request's scope is chosen by it, and the access check makes sure
/// it is the key s3s verified.
fn access_key_of(authorization: Option<&HeaderValue>, uri: &Uri) -> Option<String> {
    if let Some(v) = authorization.and_then(|v| v.to_str().ok()) {
        if let Some(at) = v.find("Credential=") {
            let rest = &v[at + "Credential=".len()..];
            return Some(rest[..rest.find('/')?].to_string());
        }
        // Signature version 2: "AWS KEY:SIGNATURE".
        if let Some(rest) = v.strip_prefix("AWS ") {
            return Some(rest[..rest.rfind(':')?].trim().to_string());
        }
        return None;
    }
    let query = uri.query()?;
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "X-Amz-Credential" => {
                let value = percent_decode(value);
                return Some(value.split('/').next().unwrap_or_default().to_string());
            }
            "AWSAccessKeyId" => return Some(percent_decode(value)),
            _ => {}
        }
    }
    None
}

/// `%XX` escapes (and `+` as a space) of a query value decoded; malformed escapes kept.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The service hyper calls for each request.
#[derive(Clone)]
pub struct Front {
    pub inner: s3s::service::S3Service,
    /// For the buckets' CORS rules (see [`crate::cors`]).
    pub client: client::Client,
    /// Whom access keys act as: each request runs in its key's scope ([`crate::scope`]).
    pub principals: Arc<crate::principals::Principals>,
    /// `body_idle_timeout_ms`.
    pub body_stall: Duration,
    /// Where requests run, so s3s's own log lines are held back.
    pub quiet: tracing::Dispatch,
    /// The client of this connection.
    pub peer: Option<std::net::SocketAddr>,
    /// Refused authentications waiting to be reported.
    pub auth_failures: Arc<AuthFailures>,
}

/// Whether a request's body is object data, streamed to the operation: a PUT of an object or
/// a part (or a copy, which has no body). Subresource PUTs (`?tagging`, `?acl`, ...) carry XML.
fn carries_object_data(method: &Method, uri: &Uri) -> bool {
    if method != Method::PUT {
        return false;
    }
    let path = uri.path().trim_start_matches('/');
    let has_key = path.split_once('/').is_some_and(|(_, key)| !key.is_empty());
    has_key
        && uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()).all(|p| {
            let name = p.split('=').next().unwrap_or("");
            matches!(name, "partNumber" | "uploadId" | "x-id") || name.to_ascii_lowercase().starts_with("x-amz-")
        })
}

/// Longest validity of a presigned URL, as S3 allows (one week).
pub const PRESIGNED_EXPIRES_SECS_MAX: u64 = 604_800;

/// Refuses a presigned URL whose `X-Amz-Expires` S3 would not accept (over a week, or not a
/// number) with S3's 400 AuthorizationQueryParametersError; s3s would take any `u32`.
fn check_presigned_expiry(uri: &Uri) -> Result<(), S3Error> {
    let Some(value) = uri.query().unwrap_or("").split('&').find_map(|p| p.strip_prefix("X-Amz-Expires=")) else {
        return Ok(());
    };
    let refuse = |message: String| {
        let mut e = S3Error::with_message(S3ErrorCode::Custom("AuthorizationQueryParametersError".into()), message);
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        Err(e)
    };
    match value.parse::<u64>() {
        Ok(secs) if secs <= PRESIGNED_EXPIRES_SECS_MAX => Ok(()),
        Ok(_) => refuse(format!(
            "X-Amz-Expires must be less than a week (in seconds) that is, the given X-Amz-Expires must be less than \
             {PRESIGNED_EXPIRES_SECS_MAX} seconds"
        )),
        Err(_) => refuse("X-Amz-Expires should be a number".into()),
    }
}

/// The bucket a path-style request names, if any (for messages).
fn bucket_of(uri: &Uri) -> Option<String> {
    let first = uri.path().trim_start_matches('/').split('/').next().unwrap_or("");
    (!first.is_empty()).then(|| first.chars().take(100).collect())
}

/// Reads a body that is not object data, refusing it once it is known to exceed `limit`.
async fn read_bounded(
    mut body: Incoming,
    declared: Option<u64>,
    limit: usize,
    stall: Duration,
) -> Result<Bytes, S3Error> {
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(errors::body_too_large(limit));
    }
    let mut buf = BytesMut::new();
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
        let frame = match tokio::time::timeout(stall, next).await {
            Err(_) => return Err(errors::request_timeout(stall)),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => return Err(errors::body_error(&e)),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(errors::body_too_large(limit));
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// The `<Code>` and `<Message>` of an error answer's XML body, if it has them.
fn code_and_message(xml: &str) -> (Option<&str>, Option<&str>) {
    let inside = |tag: &str| {
        let open = format!("<{tag}>");
        let start = xml.find(&open)? + open.len();
        let end = start + xml[start..].find(&format!("</{tag}>"))?;
        Some(&xml[start..end])
    };
    (inside("Code"), inside("Message"))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Gives an error answer without a message the default one for its code.
fn add_missing_message(resp: &mut HttpResponse, bucket: Option<&str>) {
    let Some(bytes) = resp.body().bytes() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return;
    };
    let (Some(code), None) = code_and_message(text) else {
        return;
    };
    let Some(code_end) = text.find("</Code>").map(|i| i + "</Code>".len()) else {
        return;
    };
    let parsed =
        S3ErrorCode::from_bytes(code.as_bytes()).unwrap_or_else(|| S3ErrorCode::Custom(code.to_string().into()));
    let message = xml_escape(&errors::default_message(&parsed, bucket));
    let body = format!("{}<Message>{message}</Message>{}", &text[..code_end], &text[code_end..]);
    if resp.headers().contains_key(http::header::CONTENT_LENGTH) {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    }
    *resp.body_mut() = s3s::Body::from(body);
}

fn error_response(e: S3Error) -> Result<HttpResponse, HttpError> {
    e.to_http_response().map_err(|e| HttpError::new(Box::new(e)))
}

impl Front {
    /// Answers a CORS preflight for `bucket`.
    async fn preflight(&self, bucket: &str, headers: &http::HeaderMap) -> Result<HttpResponse, HttpError> {
        let answer = match crate::cors::load(&self.client, bucket).await {
            Ok(rules) => crate::cors::preflight(rules.as_deref(), headers).map_err(S3Error::from),
            Err(e) => Err(e),
        };
        match answer {
            Ok(cors) => {
                let mut resp = HttpResponse::new(s3s::Body::empty());
                resp.headers_mut().extend(cors);
                resp.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from(0));
                Ok(resp)
            }
            Err(e) => error_response(e),
        }
    }

    async fn handle(self, req: Request<Incoming>) -> Result<HttpResponse, HttpError> {
        let claimed = access_key_of(req.headers().get(http::header::AUTHORIZATION), req.uri());
        let scope = match &claimed {
            Some(key) => match self.principals.get(key).await {
                Ok(Some(p)) => p.scope.clone(),
                // Unknown: s3s refuses it with InvalidAccessKeyId.
                Ok(None) => crate::scope::Scope::root(),
                Err(e) => return error_response(e),
            },
            None => self.principals.anonymous(),
        };
        crate::scope::run(scope, self.handle_in_scope(req)).await
    }

    async fn handle_in_scope(self, req: Request<Incoming>) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        let metered = crate::metered::Request::new(&parts.method, &parts.uri, &parts.headers);
        let bucket = bucket_of(&parts.uri);
        if parts.method == Method::OPTIONS {
            if let Some(bucket) = &bucket {
                let resp = self.preflight(bucket, &parts.headers).await?;
                metered.finish(resp.status(), resp.headers());
                return Ok(resp);
            }
        }
        let origin = parts.headers.get("origin").and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Err(e) = check_presigned_expiry(&parts.uri) {
            let mut resp = error_response(e)?;
            // The body is unread.
            resp.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
            metered.finish(resp.status(), resp.headers());
            return Ok(resp);
        }
        let method = parts.method.clone();
        let uri = parts.uri.clone();
        // Kept for the audit of a refused request (a reference count, no copy).
        let authorization = parts.headers.get(http::header::AUTHORIZATION).cloned();
        let expects =
            parts.headers.get(http::header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let declared: Option<u64> = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let stalled = Arc::new(AtomicBool::new(false));
        let (mut resp, mut close) = if carries_object_data(&method, &uri) {
            let body = s3s::Body::http_body(IdleBody::new(body, self.body_stall, stalled.clone()));
            (self.inner.call(Request::from_parts(parts, body)).await?, false)
        } else {
            match read_bounded(body, declared, XML_BODY_BYTES_MAX, self.body_stall).await {
                Ok(bytes) => (self.inner.call(Request::from_parts(parts, s3s::Body::from(bytes))).await?, false),
                // The rest of the body is unread: this connection cannot carry another request.
                Err(e) => (error_response(e)?, true),
            }
        };
        if stalled.load(Ordering::Relaxed) {
            // Whatever the operation made of the failed body, the client is told why.
            resp = error_response(errors::request_timeout(self.body_stall))?;
            close = true;
        }
        let status = resp.status();
        if status.is_client_error() || status.is_server_error() {
            add_missing_message(&mut resp, bucket_of(&uri).as_deref());
            let text = resp.body().bytes().map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
            let (code, message) = code_and_message(&text);
            let (code, message) = (code.unwrap_or("-"), message.unwrap_or("-"));
            if AUTH_FAILURE_CODES.contains(&code) {
                let peer = self.peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string());
                let key = access_key_of(authorization.as_ref(), &uri)
                    .map_or_else(|| "unsigned".to_string(), |k| format!("access key {k}"));
                self.auth_failures.note(format!("{code} for {method} {} from {peer} ({key})", uri.path()));
            }
            if status.is_server_error() {
                tracing::warn!("{method} {}: answered {} {code}: {message}", uri.path(), status.as_u16());
            } else {
                tracing::debug!("{method} {}: answered {} {code}: {message}", uri.path(), status.as_u16());
            }
        }
        if let (Some(origin), Some(bucket)) = (&origin, &bucket) {
            if let Ok(Some(rules)) = crate::cors::load(&self.client, bucket).await {
                resp.headers_mut().extend(crate::cors::actual(&rules, origin, method.as_str()));
            }
        }
        let empty = declared == Some(0);
        if close || (expects && (empty || !status.is_success())) {
            resp.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        metered.finish(resp.status(), resp.headers());
        Ok(resp)
    }
}

impl hyper::service::Service<Request<Incoming>> for Front {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let quiet = self.quiet.clone();
        Box::pin(self.clone().handle(req).with_subscriber(quiet))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_requests_name_the_access_key_they_were_signed_with() {
        let uri: Uri = "/b/k".parse().expect("uri");
        let header = HeaderValue::from_static(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261127/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
        );
        assert_eq!(access_key_of(Some(&header), &uri).as_deref(), Some("AKIDEXAMPLE"));
        let presigned: Uri = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDURL%2F20261127%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=00"
            .parse()
            .expect("uri");
        assert_eq!(access_key_of(None, &presigned).as_deref(), Some("AKIDURL"));
        assert_eq!(access_key_of(None, &uri), None, "unsigned");
        let v2: Uri = "/b/k?AWSAccessKeyId=trove-test-key&Signature=x%2By&Expires=1".parse().expect("uri");
        assert_eq!(access_key_of(None, &v2).as_deref(), Some("trove-test-key"));
        let v2_header = HeaderValue::from_static("AWS AKID2:c2lnbmF0dXJl");
        assert_eq!(access_key_of(Some(&v2_header), &uri).as_deref(), Some("AKID2"));
        // A name inside another parameter's value is not a parameter.
        let tricky: Uri = "/b/k?prefix=X-Amz-Credential%3DEVIL&X-Amz-Credential=GOOD%2F2026".parse().expect("uri");
        assert_eq!(access_key_of(None, &tricky).as_deref(), Some("GOOD"));
        assert_eq!(percent_decode("a%2Fb+c%zz%4"), "a/b c%zz%4");
    }

    #[test]
    fn object_data_is_only_put_to_a_key() {
        let data = |m: Method, u: &str| carries_object_data(&m, &u.parse().expect("uri"));
        assert!(data(Method::PUT, "/b/k"));
        assert!(data(Method::PUT, "/b/a/b/c?partNumber=2&uploadId=00ff"));
        assert!(data(Method::PUT, "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=00"));
        assert!(!data(Method::PUT, "/b"));
        assert!(!data(Method::PUT, "/b/"));
        assert!(!data(Method::PUT, "/b/k?tagging"));
        assert!(!data(Method::POST, "/b/k?uploadId=00ff"));
        assert!(!data(Method::POST, "/b?delete"));
        assert_eq!(bucket_of(&"/ab/k".parse().expect("uri")).as_deref(), Some("ab"));
        assert_eq!(bucket_of(&"/".parse().expect("uri")), None);
    }

    #[test]
    fn presigned_urls_valid_over_a_week_are_refused() {
        let check =
            |u: &str| check_presigned_expiry(&u.parse().expect("uri")).map_err(|e| e.code().as_str().to_string());
        assert!(check("/b/k?X-Amz-Expires=604800&X-Amz-Signature=00").is_ok());
        assert!(check("/b/k").is_ok());
        assert_eq!(check("/b/k?X-Amz-Expires=604801").err().as_deref(), Some("AuthorizationQueryParametersError"));
        assert!(check("/b/k?X-Amz-Expires=soon").is_err());
    }

    #[test]
    fn error_answers_without_a_message_get_one() {
        let mut resp = error_response(S3Error::new(S3ErrorCode::InvalidBucketName)).expect("response");
        add_missing_message(&mut resp, Some("ab"));
        let text = String::from_utf8(resp.body().bytes().expect("bytes").to_vec()).expect("utf-8");
        let (code, message) = code_and_message(&text);
        assert_eq!(code, Some("InvalidBucketName"));
        assert!(message.is_some_and(|m| m.contains("(&quot;ab&quot;)")), "{text}");
        // One with a message keeps it.
        let mut resp =
            error_response(S3Error::with_message(S3ErrorCode::NoSuchKey, "no object \"k\"")).expect("response");
        add_missing_message(&mut resp, None);
        let text = String::from_utf8(resp.body().bytes().expect("bytes").to_vec()).expect("utf-8");
        assert_eq!(text.matches("<Message>").count(), 1, "{text}");
    }
}
