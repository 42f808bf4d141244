//! The HTTP side: configuration, authentication (SigV4 through s3s, with our access policy for
//! anonymous requests), optional TLS, and the connection loop.

use crate::Gateway;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::SimpleAuth;
use s3s::service::S3ServiceBuilder;
use s3s::{s3_error, S3Result};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Largest request head (request line and headers) accepted; larger ones get 431.
pub const HEAD_BYTES_MAX: usize = 64 << 10;
/// Largest XML request body (DeleteObjects, CompleteMultipartUpload) accepted.
pub const XML_BODY_BYTES_MAX: usize = 4 << 20;
/// How long a TLS handshake may take before the connection is dropped, in seconds.
const TLS_HANDSHAKE_SECS_MAX: u64 = 10;

/// Who may use the gateway without signing requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Anonymous {
    /// Every request must be signed with a configured access key.
    #[default]
    Off,
    /// Unsigned requests may read (GET, HEAD, listings) but not change anything.
    Read,
    /// Unsigned requests may do anything.
    ReadWrite,
}

/// An access key and its secret.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyPair {
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyPair {{ access_key: {:?}, secret_key: <hidden> }}", self.access_key)
    }
}

/// Certificate chain and private key files (PEM) for HTTPS.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The gateway's configuration file (`trove s3 --config s3.toml`).
///
/// ```toml
/// cluster = "127.0.0.1:7000"      # or a local cluster directory
/// listen = "0.0.0.0:9000"
/// region = "us-east-1"
/// anonymous = "off"               # off | read | read-write
/// [[keys]]
/// access_key = "trove"
/// secret_key = "a-long-secret"
/// [tls]                           # optional: serve HTTPS
/// cert = "cert.pem"
/// key = "key.pem"
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub cluster: Option<String>,
    #[serde(default = "default_listen")]
    pub listen: String,
    pub region: Option<String>,
    #[serde(default)]
    pub anonymous: Anonymous,
    #[serde(default)]
    pub keys: Vec<KeyPair>,
    pub tls: Option<TlsConfig>,
}

fn default_listen() -> String {
    "127.0.0.1:9000".into()
}

impl Config {
    /// Checks that someone can use the gateway at all.
    pub fn validate(&self) -> Result<(), String> {
        if self.keys.is_empty() && self.anonymous == Anonymous::Off {
            return Err(
                "no access keys are configured and anonymous access is off: nobody could use the gateway".into()
            );
        }
        for k in &self.keys {
            if k.access_key.is_empty() || k.secret_key.is_empty() {
                return Err("access keys and secret keys must not be empty".into());
            }
        }
        Ok(())
    }
}

/// Operations an anonymous reader may perform.
const READ_OPERATIONS: &[&str] =
    &["GetObject", "HeadObject", "ListObjects", "ListObjectsV2", "ListBuckets", "HeadBucket", "GetBucketLocation"];

struct Policy {
    anonymous: Anonymous,
}

#[async_trait::async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        if cx.credentials().is_some() {
            // s3s verified the signature against the key's secret.
            return Ok(());
        }
        match self.anonymous {
            Anonymous::ReadWrite => Ok(()),
            Anonymous::Read if READ_OPERATIONS.contains(&cx.s3_op().name()) => Ok(()),
            Anonymous::Read => {
                Err(s3_error!(AccessDenied, "anonymous access is read-only; sign the request with an access key"))
            }
            Anonymous::Off => {
                Err(s3_error!(AccessDenied, "anonymous access is off; sign the request with an access key"))
            }
        }
    }
}

fn tls_acceptor(tls: &TlsConfig) -> Result<tokio_rustls::TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", tls.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", tls.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| format!("cannot read the private key {}: {e}", tls.key.display()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("TLS certificate {} / key {}: {e}", tls.cert.display(), tls.key.display()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// Closes the connection after answering a request that carried `Expect: 100-continue` when
/// the answer may have come without a `100 Continue` (an empty body, or an error answered
/// before the body was read). botocore (awscli, boto3) mishandles the next response on such a
/// connection and waits for its read timeout (boto/botocore#3010); a fresh connection avoids it.
#[derive(Clone)]
struct ExpectGuard {
    inner: s3s::service::S3Service,
}

impl hyper::service::Service<http::Request<hyper::body::Incoming>> for ExpectGuard {
    type Response = s3s::HttpResponse;
    type Error = s3s::HttpError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let expects = req
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let empty = req.headers().get(http::header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() == b"0");
        let fut = hyper::service::Service::call(&self.inner, req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if expects && (empty || !resp.status().is_success()) {
                resp.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            Ok(resp)
        })
    }
}

/// A bound gateway, ready to serve.
pub struct Listening {
    listener: TcpListener,
    service: ExpectGuard,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Listening {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Whether connections are HTTPS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves connections until the process ends.
    pub async fn run(self) -> std::io::Result<()> {
        let mut http = ConnBuilder::new(TokioExecutor::new());
        http.http1().max_buf_size(HEAD_BYTES_MAX.max(8192));
        let http = Arc::new(http);
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let service = self.service.clone();
            let http = http.clone();
            let tls = self.tls.clone();
            tokio::spawn(async move {
                let result = match tls {
                    Some(acceptor) => {
                        let handshake = tokio::time::timeout(
                            std::time::Duration::from_secs(TLS_HANDSHAKE_SECS_MAX),
                            acceptor.accept(stream),
                        )
                        .await;
                        match handshake {
                            Ok(Ok(s)) => http.serve_connection(TokioIo::new(s), service).await,
                            Ok(Err(e)) => {
                                tracing::debug!("TLS handshake with {peer} failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake with {peer} timed out");
                                return;
                            }
                        }
                    }
                    None => http.serve_connection(TokioIo::new(stream), service).await,
                };
                if let Err(e) = result {
                    tracing::debug!("connection from {peer} ended: {e}");
                }
            });
        }
    }
}

/// Binds the configured address and prepares the service; [`Listening::run`] serves.
pub async fn serve(gateway: Gateway, config: &Config) -> Result<Listening, String> {
    config.validate()?;
    let tls = match &config.tls {
        Some(t) => Some(tls_acceptor(t)?),
        None => None,
    };
    let mut auth = SimpleAuth::new();
    for k in &config.keys {
        auth.register(k.access_key.clone(), k.secret_key.clone().into());
    }
    let mut s3_config = s3s::config::S3Config::default();
    s3_config.xml_max_body_size = XML_BODY_BYTES_MAX;
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(auth);
    builder.set_access(Policy { anonymous: config.anonymous });
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(s3_config))));
    let listener =
        TcpListener::bind(&config.listen).await.map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    Ok(Listening { listener, service: ExpectGuard { inner: builder.build() }, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_files_parse_and_are_checked() {
        let c: Config = toml::from_str(
            "cluster = \"127.0.0.1:7000\"\nlisten = \"0.0.0.0:9000\"\nanonymous = \"read\"\n[[keys]]\naccess_key = \"a\"\nsecret_key = \"s\"\n[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        )
        .expect("parses");
        assert_eq!((c.anonymous, c.keys.len(), c.listen.as_str()), (Anonymous::Read, 1, "0.0.0.0:9000"));
        assert!(c.validate().is_ok());
        assert!(!format!("{:?}", c.keys[0]).contains("\"s\""), "secrets stay out of debug output");
        let nobody: Config = toml::from_str("").expect("defaults");
        assert_eq!((nobody.anonymous, nobody.listen.as_str()), (Anonymous::Off, "127.0.0.1:9000"));
        assert!(nobody.validate().is_err(), "no keys and no anonymous access");
        assert!(toml::from_str::<Config>("anonymous = \"everyone\"").is_err());
        assert!(toml::from_str::<Config>("acces_key = \"typo\"").is_err(), "unknown fields are refused");
    }
}
