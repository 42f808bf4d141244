//! Fuzz target for the S3 gateway's request handling before any data is touched: the s3s
//! service as the gateway builds it (`s3gw::service`: its access-key check, its policy for
//! anonymous requests, its XML body limit) routes and authenticates an arbitrary HTTP request
//! (method, path and query, headers, body) and parses the operation's input: SigV4
//! `Authorization` headers, presigned-URL query strings, `x-amz-*` headers, the XML of
//! DeleteObjects, CompleteMultipartUpload, CORS and bucket settings. The operations themselves
//! are those of a back end that implements none (S3's NotImplemented), so what is exercised is
//! the parsing, and it must answer every request with a status, never panic.
//!
//! Input: the first byte picks the method and the anonymous policy; the rest is split at the
//! first `\n` into the request target, then header lines up to an empty line, then the body.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use s3gw::{Anonymous, KeyPair};
use std::sync::OnceLock;

struct NoOperations;

impl s3s::S3 for NoOperations {}

struct Fixture {
    runtime: tokio::runtime::Runtime,
    /// By anonymous policy: off, read, read-write (unsigned requests then reach the XML).
    services: [s3s::service::S3Service; 3],
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let keys = [KeyPair { access_key: "AKIDFUZZ".into(), secret_key: "fuzz-secret-0123456789".into() }];
        let build = |anonymous| s3gw::service(NoOperations, &keys, anonymous);
        Fixture {
            runtime: tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime"),
            services: [build(Anonymous::Off), build(Anonymous::Read), build(Anonymous::ReadWrite)],
        }
    })
}

const METHODS: [&str; 6] = ["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let (target, rest) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let Ok(target) = std::str::from_utf8(target) else { return };
    let mut request = http::Request::builder()
        .method(METHODS[usize::from(pick) % METHODS.len()])
        .uri(format!("http://localhost:9000/{}", target.trim_start_matches('/')));
    let mut body = rest;
    while let Some(i) = body.iter().position(|&b| b == b'\n') {
        let line = &body[..i];
        body = &body[i + 1..];
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else { return };
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(&line[..colon]),
            http::HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            return;
        };
        request = request.header(name, value);
    }
    let Ok(request) = request.body(s3s::Body::from(Bytes::copy_from_slice(body))) else { return };
    let fixture = fixture();
    let service = &fixture.services[usize::from(pick / 8) % 3];
    // A request s3s cannot answer as S3 comes back as an error for hyper to turn into a 500;
    // either way there must be an answer.
    let _ = fixture.runtime.block_on(service.call(request));
});
