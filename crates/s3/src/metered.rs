//! What the S3 gateway records into its process's metrics (protocol `s3`): every request by S3
//! operation, timed from its arrival to its response head, errors (4xx and 5xx answers), the
//! object bytes clients wrote and read, the bytes of bodies on the network, and the busiest
//! objects and access keys (`/top`).
//!
//! The operation is told from the request line and headers the way S3 defines them (method,
//! whether the path names a key, subresource parameters, `x-amz-copy-source`), in the front
//! every request passes, so the operations themselves stay as they are.

use http::{HeaderMap, Method};
use metrics::ops::OpTable;
use std::sync::OnceLock;
use std::time::Instant;

/// The S3 operations, in slot order; `Other` is anything else.
pub const NAMES: [&str; 20] = [
    "ListBuckets",
    "CreateBucket",
    "DeleteBucket",
    "HeadBucket",
    "GetBucketLocation",
    "ListObjects",
    "ListObjectsV2",
    "DeleteObjects",
    "ListMultipartUploads",
    "GetObject",
    "HeadObject",
    "PutObject",
    "CopyObject",
    "DeleteObject",
    "CreateMultipartUpload",
    "UploadPart",
    "CompleteMultipartUpload",
    "AbortMultipartUpload",
    "ListParts",
    "Other",
];

/// The `s3` protocol's operations.
pub fn table() -> &'static OpTable {
    static TABLE: OnceLock<&'static OpTable> = OnceLock::new();
    TABLE.get_or_init(|| metrics::ops::table("s3", &NAMES))
}

fn slot(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).unwrap_or(NAMES.len() - 1)
}

/// The S3 operation of a path-style request.
pub fn operation(method: &Method, path: &str, query: &str, headers: &HeaderMap) -> &'static str {
    let path = path.trim_start_matches('/');
    let (bucket, key) = match path.split_once('/') {
        Some((b, k)) => (b, k),
        None => (path, ""),
    };
    let has = |name: &str| query.split('&').any(|p| p.split('=').next() == Some(name));
    if bucket.is_empty() {
        return if *method == Method::GET { "ListBuckets" } else { "Other" };
    }
    if key.is_empty() {
        return match *method {
            Method::GET if has("uploads") => "ListMultipartUploads",
            Method::GET if has("location") => "GetBucketLocation",
            Method::GET if query.split('&').any(|p| p == "list-type=2") => "ListObjectsV2",
            Method::GET => "ListObjects",
            Method::PUT => "CreateBucket",
            Method::DELETE => "DeleteBucket",
            Method::HEAD => "HeadBucket",
            Method::POST if has("delete") => "DeleteObjects",
            _ => "Other",
        };
    }
    match *method {
        Method::GET if has("uploadId") => "ListParts",
        Method::GET => "GetObject",
        Method::HEAD => "HeadObject",
        Method::PUT if has("partNumber") && has("uploadId") => "UploadPart",
        Method::PUT if headers.contains_key("x-amz-copy-source") => "CopyObject",
        Method::PUT => "PutObject",
        Method::DELETE if has("uploadId") => "AbortMultipartUpload",
        Method::DELETE => "DeleteObject",
        Method::POST if has("uploads") => "CreateMultipartUpload",
        Method::POST if has("uploadId") => "CompleteMultipartUpload",
        _ => "Other",
    }
}

/// The access key a request is signed with (SigV4 header or presigned URL), or "anonymous".
fn access_key(query: &str, headers: &HeaderMap) -> String {
    let from_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("Credential=").nth(1))
        .and_then(|c| c.split('/').next());
    let from_query = query
        .split('&')
        .find_map(|p| p.strip_prefix("X-Amz-Credential="))
        .and_then(|c| c.split("%2F").next().and_then(|k| k.split('/').next()));
    from_header
        .or(from_query)
        .filter(|k| !k.is_empty())
        .map_or_else(|| "anonymous".to_string(), |k| format!("s3 key {k}"))
}

fn length(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok())
}

/// A request on its way through the front.
pub struct Request {
    op: usize,
    started: Option<Instant>,
    /// Object bytes the request carries (a PUT of an object or part).
    body_bytes: u64,
    object: String,
    client: String,
}

impl Request {
    /// Starts timing a request from its head.
    pub fn new(method: &Method, uri: &http::Uri, headers: &HeaderMap) -> Request {
        let started = table().start();
        if started.is_none() {
            return Request { op: 0, started, body_bytes: 0, object: String::new(), client: String::new() };
        }
        let query = uri.query().unwrap_or("");
        let name = operation(method, uri.path(), query, headers);
        // Streaming SigV4 bodies (aws-chunked) carry the object's length separately.
        let body_bytes = length(headers, "x-amz-decoded-content-length")
            .or_else(|| length(headers, http::header::CONTENT_LENGTH.as_str()))
            .unwrap_or(0);
        Request {
            op: slot(name),
            started,
            body_bytes,
            object: uri.path().trim_start_matches('/').to_string(),
            client: access_key(query, headers),
        }
    }

    /// Finishes it with the response's status and head.
    pub fn finish(self, status: http::StatusCode, headers: &HeaderMap) {
        if self.started.is_none() {
            return;
        }
        let t = table();
        let ok = !(status.is_client_error() || status.is_server_error());
        t.done(self.op, self.started, ok);
        let out = length(headers, http::header::CONTENT_LENGTH.as_str()).unwrap_or(0);
        metrics::gauges::net_in(self.body_bytes);
        metrics::gauges::net_out(out);
        if !ok {
            return;
        }
        let (read, written) = match NAMES[self.op] {
            "GetObject" => (out, 0),
            "PutObject" | "UploadPart" => (0, self.body_bytes),
            _ => (0, 0),
        };
        if read > 0 {
            t.read_bytes(read);
        }
        if written > 0 {
            t.write_bytes(written);
        }
        if read > 0 || written > 0 {
            metrics::top::file_path(&self.object, read, written);
        }
        metrics::top::client(&self.client, read, written);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_told_from_the_request() {
        let none = HeaderMap::new();
        let mut copy = HeaderMap::new();
        copy.insert("x-amz-copy-source", "b/k".parse().expect("header"));
        let cases = [
            (Method::GET, "/", "", &none, "ListBuckets"),
            (Method::PUT, "/b", "", &none, "CreateBucket"),
            (Method::GET, "/b", "list-type=2&prefix=a", &none, "ListObjectsV2"),
            (Method::GET, "/b/", "", &none, "ListObjects"),
            (Method::POST, "/b", "delete", &none, "DeleteObjects"),
            (Method::GET, "/b/k/x.jpg", "", &none, "GetObject"),
            (Method::HEAD, "/b/k", "", &none, "HeadObject"),
            (Method::PUT, "/b/k", "", &none, "PutObject"),
            (Method::PUT, "/b/k", "", &copy, "CopyObject"),
            (Method::PUT, "/b/k", "partNumber=1&uploadId=u", &none, "UploadPart"),
            (Method::POST, "/b/k", "uploads", &none, "CreateMultipartUpload"),
            (Method::POST, "/b/k", "uploadId=u", &none, "CompleteMultipartUpload"),
            (Method::DELETE, "/b/k", "uploadId=u", &none, "AbortMultipartUpload"),
            (Method::DELETE, "/b/k", "", &none, "DeleteObject"),
            (Method::GET, "/b/k", "uploadId=u", &none, "ListParts"),
            (Method::PATCH, "/b/k", "", &none, "Other"),
        ];
        for (method, path, query, headers, want) in cases {
            assert_eq!(operation(&method, path, query, headers), want, "{method} {path}?{query}");
            assert_eq!(NAMES[slot(want)], want);
        }
        let mut signed = HeaderMap::new();
        signed.insert(
            http::header::AUTHORIZATION,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=x"
                .parse()
                .expect("header"),
        );
        assert_eq!(access_key("", &signed), "s3 key AKIDEXAMPLE");
        assert_eq!(access_key("X-Amz-Credential=KEY2%2F20261126%2Fus-east-1", &none), "s3 key KEY2");
        assert_eq!(access_key("", &none), "anonymous");
    }
}
