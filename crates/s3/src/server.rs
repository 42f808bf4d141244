//! The HTTP side: configuration, authentication (SigV4 through s3s, against the configured
//! keys, with our access policy for anonymous requests), optional TLS, and the connection loop
//! with its limits: connections per client and overall (the excess is answered 503 SlowDown
//! and closed at once), the request-head timeout (which also closes idle keep-alive
//! connections), and the stall timeouts of bodies and of responses nobody reads.

use crate::conn::{ConnLimiter, Refusal, TimedIo};
use crate::errors;
use crate::front::Front;
use crate::policy::{PolicyCache, Verdict};
use crate::principals::Principals;
use crate::Gateway;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::service::S3ServiceBuilder;
use s3s::{s3_error, S3Result, S3};
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use crate::front::XML_BODY_BYTES_MAX;

/// Largest request head (request line and headers) accepted; larger ones get 431.
pub const HEAD_BYTES_MAX: usize = 64 << 10;
/// Default of [`Config::header_timeout_ms`].
pub const HEADER_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default of [`Config::body_idle_timeout_ms`].
pub const BODY_IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default of [`Config::connections_max`].
pub const CONNECTIONS_MAX_DEFAULT: usize = 4096;
/// Default of [`Config::connections_per_client_max`].
pub const CONNECTIONS_PER_CLIENT_MAX_DEFAULT: usize = 512;
/// Refused connections whose answer may still be waiting to be read by their client; beyond
/// this, refused connections are closed without waiting.
const REFUSALS_LINGERING_MAX: usize = 64;
/// How long a refused connection stays open so that its client can read the 503 before the
/// close (closing with unread request bytes would reset the connection and lose the answer).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

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
/// header_timeout_ms = 30000       # request head, and idle keep-alive connections
/// body_idle_timeout_ms = 30000    # a body (or a response) that stalls this long is cut
/// connections_max = 4096
/// connections_per_client_max = 512
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
    /// How long a client may take to send a request's head (and a TLS handshake), counted
    /// from the start of the connection or the end of the previous response; so an idle
    /// keep-alive connection is closed after this long too (as Go's net/http does when no idle
    /// timeout of its own is set). A slow head is cut without an answer.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// How long a request body may deliver no bytes while the gateway waits for them: the
    /// request is then cut, answered 400 RequestTimeout, and nothing is stored. Also how long
    /// a client may accept no bytes of a response before its connection is closed.
    #[serde(default = "default_body_idle_timeout_ms")]
    pub body_idle_timeout_ms: u64,
    /// Connections served at once; more are answered 503 SlowDown and closed.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// Connections one client address may have open; more are answered 503 SlowDown and
    /// closed.
    #[serde(default = "default_connections_per_client_max")]
    pub connections_per_client_max: usize,
}

fn default_listen() -> String {
    "127.0.0.1:9000".into()
}

fn default_header_timeout_ms() -> u64 {
    HEADER_TIMEOUT_MS_DEFAULT
}

fn default_body_idle_timeout_ms() -> u64 {
    BODY_IDLE_TIMEOUT_MS_DEFAULT
}

fn default_connections_max() -> usize {
    CONNECTIONS_MAX_DEFAULT
}

fn default_connections_per_client_max() -> usize {
    CONNECTIONS_PER_CLIENT_MAX_DEFAULT
}

impl Config {
    /// Checks that someone can use the gateway at all, and that the limits are usable.
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
        for (name, v) in
            [("header_timeout_ms", self.header_timeout_ms), ("body_idle_timeout_ms", self.body_idle_timeout_ms)]
        {
            if v == 0 {
                return Err(format!("{name} must be at least 1 (milliseconds)"));
            }
        }
        for (name, v) in
            [("connections_max", self.connections_max), ("connections_per_client_max", self.connections_per_client_max)]
        {
            if v == 0 {
                return Err(format!("{name} must be at least 1: the gateway would refuse every connection"));
            }
        }
        Ok(())
    }
}

/// The accepted access keys (configured, and the cluster's). Unlike s3s's `SimpleAuth`, an
/// unknown key is answered with AWS's InvalidAccessKeyId (not NotSignedUp) and a message
/// naming it.
struct Keys(Arc<Principals>);

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.get(access_key).await? {
            Some(p) => Ok(p.secret.clone()),
            None => Err(self.0.unknown(access_key)),
        }
    }
}

/// Operations an anonymous reader may perform.
const READ_OPERATIONS: &[&str] =
    &["GetObject", "HeadObject", "ListObjects", "ListObjectsV2", "ListBuckets", "HeadBucket", "GetBucketLocation"];

struct Policy {
    anonymous: Anonymous,
    principals: Arc<Principals>,
    /// Buckets' policies, and the client that reads them (`None`: none are checked).
    policies: Option<(client::Client, Arc<PolicyCache>)>,
}

/// Operations the bucket's owner may always do, whatever its policy says (so no policy locks
/// its owner out; the operations check ownership themselves).
const POLICY_MANAGEMENT: &[&str] = &["GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy"];

impl Policy {
    /// Refuses the request if its bucket's policy denies it (see [`crate::policy`]).
    async fn check_bucket_policy(&self, cx: &S3AccessContext<'_>) -> S3Result<()> {
        let Some((client, cache)) = &self.policies else { return Ok(()) };
        let scope = crate::scope::current();
        if scope.user.is_none() && scope.access_key.is_some() {
            return Ok(()); // A configured key: the operator's.
        }
        let op = cx.s3_op().name();
        if POLICY_MANAGEMENT.contains(&op) {
            if scope.access_key.is_none() {
                // Even where anonymous access is read-write: a policy confines the unsigned,
                // so they do not get to change it.
                return Err(s3_error!(AccessDenied, "{op} needs a request signed by the bucket's owner"));
            }
            return Ok(());
        }
        let (bucket, key) = match cx.s3_path() {
            s3s::path::S3Path::Root => return Ok(()),
            s3s::path::S3Path::Bucket { bucket } => (bucket.as_ref(), None),
            s3s::path::S3Path::Object { bucket, key } => (bucket.as_ref(), Some(key.as_ref())),
        };
        let action = crate::policy::action_of(op);
        let resource = match key {
            // DeleteObjects and browser POST uploads name their keys in their bodies: judged
            // for keys not known yet.
            _ if matches!(op, "DeleteObjects" | "PostObject") => None,
            Some(k) => Some(format!("arn:aws:s3:::{bucket}/{k}")),
            None => Some(format!("arn:aws:s3:::{bucket}")),
        };
        judge(client, cache, &scope, &action, bucket, resource).await?;
        if matches!(op, "CopyObject" | "UploadPartCopy") {
            // The source is read: its bucket's policy must let the caller read it, as AWS
            // requires s3:GetObject on a copy's source. A header that does not parse is left
            // to the operation, which reports it.
            let source = cx.headers().get("x-amz-copy-source").and_then(|v| v.to_str().ok());
            if let Some(Ok(s3s::dto::CopySource::Bucket { bucket, key, .. })) = source.map(s3s::dto::CopySource::parse)
            {
                let resource = format!("arn:aws:s3:::{bucket}/{key}");
                judge(client, cache, &scope, "s3:GetObject", &bucket, Some(resource)).await?;
            }
        }
        Ok(())
    }
}

/// Refuses `action` on `resource` of `bucket` (on keys not known yet when `None`) if the
/// bucket's policy does.
async fn judge(
    client: &client::Client,
    cache: &PolicyCache,
    scope: &crate::scope::Scope,
    action: &str,
    bucket: &str,
    resource: Option<String>,
) -> S3Result<()> {
    let Some(applied) = cache.get(client, scope, bucket).await? else { return Ok(()) };
    match applied.judge(scope, action, bucket, resource.as_deref()) {
        Verdict::Permitted => Ok(()),
        Verdict::Denied(statement) => {
            Err(s3_error!(AccessDenied, "{action} is denied by the policy of bucket {bucket} ({statement})"))
        }
        Verdict::NotAllowed => Err(s3_error!(
            AccessDenied,
            "{action} on {} is not allowed by the policy of bucket {bucket}: it has Allow statements, and none grants this to {}",
            resource.unwrap_or_else(|| format!("arn:aws:s3:::{bucket}/*")),
            who(scope)
        )),
        Verdict::Unreadable(why) => Err(s3_error!(
            AccessDenied,
            "the policy of bucket {bucket} does not parse ({why}), so only the bucket's owner may use it until the policy is set again"
        )),
    }
}

/// The caller as an error message names it.
fn who(scope: &crate::scope::Scope) -> String {
    match scope.access_key.as_ref().and(scope.user.as_ref()) {
        Some(u) => match &u.tenant {
            Some(t) => format!("arn:aws:iam::{t}:user/{}", u.name),
            None => format!("user {}", u.name),
        },
        None => "anonymous requests".to_string(),
    }
}

#[async_trait::async_trait]
impl S3Access for Policy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let scope = crate::scope::current();
        if let Some(c) = cx.credentials() {
            // s3s verified the signature against the key's secret. The request runs in the
            // scope the front chose from the key the request claims; it must be this key's.
            let verified = c.access_key.as_str();
            if scope.access_key.as_deref() == Some(verified) {
                return self.check_bucket_policy(cx).await;
            }
            // A configured key in a form the front does not read (a browser POST upload) acts
            // with the gateway's own rights, which is the scope a request without a claimed key
            // gets.
            if scope.access_key.is_none() && scope.user.is_none() && self.principals.is_configured(verified) {
                return self.check_bucket_policy(cx).await;
            }
            return Err(s3_error!(
                AccessDenied,
                "access key {verified} signed this request, but it names another key (or its key where the gateway does not read it, as in a browser POST form, which cluster S3 keys cannot sign)"
            ));
        }
        if scope.access_key.is_some() {
            return Err(s3_error!(AccessDenied, "an unsigned request cannot act for an access key"));
        }
        match self.anonymous {
            Anonymous::ReadWrite => self.check_bucket_policy(cx).await,
            Anonymous::Read if READ_OPERATIONS.contains(&cx.s3_op().name()) => self.check_bucket_policy(cx).await,
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

/// A bound gateway, ready to serve.
pub struct Listening {
    listener: TcpListener,
    front: Front,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limiter: Arc<ConnLimiter>,
    header_timeout: Duration,
    body_stall: Duration,
    /// The whole answer to a connection over the per-client limit, and to one over the total.
    refusals: (Arc<[u8]>, Arc<[u8]>),
}

/// The raw HTTP/1.1 answer to a refused connection: 503 SlowDown, then close.
fn refusal_bytes(refusal: Refusal, per_client_max: usize, total_max: usize) -> Result<Arc<[u8]>, String> {
    let resp = errors::slow_down(refusal, per_client_max, total_max)
        .to_http_response()
        .map_err(|e| format!("cannot make the 503 answer: {e}"))?;
    let body = resp.body().bytes().unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    Ok(out.into())
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

    /// Answers a connection over a limit with 503 SlowDown (plain HTTP) and closes it. With
    /// TLS nothing can be said before a handshake, which is not worth its cost here: the
    /// connection is just closed.
    fn refuse(&self, stream: TcpStream, refusal: Refusal, lingering: &Arc<AtomicUsize>) {
        if self.tls.is_some() {
            return;
        }
        let answer = match refusal {
            Refusal::Client { .. } => self.refusals.0.clone(),
            Refusal::Total { .. } => self.refusals.1.clone(),
        };
        // A fresh connection's send buffer is empty: the answer goes out without waiting.
        if stream.try_write(&answer).is_err() {
            return;
        }
        if lingering.fetch_add(1, Ordering::Relaxed) >= REFUSALS_LINGERING_MAX {
            lingering.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let lingering = lingering.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let _ = stream.shutdown().await;
            // Read (and drop) what the client still sends until it closes or the time is up,
            // so the close does not reset the connection before the answer is read.
            let mut sink = [0u8; 4096];
            let _ = tokio::time::timeout(REFUSAL_LINGER, async {
                while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
            lingering.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Serves connections until the process ends.
    pub async fn run(self) -> std::io::Result<()> {
        let mut http = ConnBuilder::new(TokioExecutor::new());
        http.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_timeout)
            .max_buf_size(HEAD_BYTES_MAX.max(8192));
        // HTTP/2 only where TLS negotiated it (ALPN): pings find dead peers.
        http.http2()
            .timer(TokioTimer::new())
            .keep_alive_interval(self.header_timeout)
            .keep_alive_timeout(self.header_timeout);
        // The protocol is known before the first byte: sniffing for HTTP/2's preface (as an
        // automatic builder does) would wait, without any timeout, for a client that sends
        // nothing. So plain connections speak HTTP/1.1 (no S3 client uses HTTP/2 without TLS).
        let h1 = Arc::new(http.clone().http1_only());
        let h2 = Arc::new(http.http2_only());
        let lingering = Arc::new(AtomicUsize::new(0));
        let name = match self.listener.local_addr() {
            Ok(a) => format!("S3 gateway {a}"),
            Err(_) => "S3 gateway".to_string(),
        };
        tokio::spawn(self.front.auth_failures.clone().report(self.front.client.clone(), name));
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let permit = match self.limiter.admit(peer.ip()) {
                Ok(p) => p,
                Err(refusal) => {
                    self.refuse(stream, refusal, &lingering);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let mut front = self.front.clone();
            front.peer = Some(peer);
            let (h1, h2) = (h1.clone(), h2.clone());
            let tls = self.tls.clone();
            let (header_timeout, body_stall) = (self.header_timeout, self.body_stall);
            tokio::spawn(async move {
                let _permit = permit;
                let result = match tls {
                    Some(acceptor) => match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => {
                            let http = if s.get_ref().1.alpn_protocol() == Some(b"h2") { h2 } else { h1 };
                            http.serve_connection(TokioIo::new(TimedIo::new(s, body_stall)), front).await
                        }
                        Ok(Err(e)) => {
                            tracing::debug!("TLS handshake with {peer} failed: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("TLS handshake with {peer} timed out");
                            return;
                        }
                    },
                    None => h1.serve_connection(TokioIo::new(TimedIo::new(stream, body_stall)), front).await,
                };
                if let Err(e) = result {
                    tracing::debug!("connection from {peer} ended: {e}");
                }
            });
        }
    }
}

/// The S3 service (s3s) over `s3` with the gateway's access-key check, its policy for
/// anonymous requests and its limit on XML bodies: what [`serve`] puts behind its HTTP front,
/// and what the `s3_request` fuzz target (in `fuzz/`) calls with a back end of no operations.
pub fn service(s3: impl S3, keys: &[KeyPair], anonymous: Anonymous) -> s3s::service::S3Service {
    let principals = Principals::new(keys.iter().map(|k| (k.access_key.clone(), k.secret_key.clone())), None);
    service_with(s3, Arc::new(principals), anonymous, None)
}

/// As [`service`], with the accepted keys given as [`Principals`], and buckets' policies
/// checked with `policies` when given.
pub fn service_with(
    s3: impl S3,
    principals: Arc<Principals>,
    anonymous: Anonymous,
    policies: Option<(client::Client, Arc<PolicyCache>)>,
) -> s3s::service::S3Service {
    let mut s3_config = s3s::config::S3Config::default();
    // The front reads every body that s3s would buffer, within this same limit.
    s3_config.xml_max_body_size = XML_BODY_BYTES_MAX;
    s3_config.post_object_max_file_size = XML_BODY_BYTES_MAX as u64;
    let mut builder = S3ServiceBuilder::new(s3);
    builder.set_auth(Keys(principals.clone()));
    builder.set_access(Policy { anonymous, principals, policies });
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(s3_config))));
    builder.build()
}

/// Binds the configured address and prepares the service; [`Listening::run`] serves.
pub async fn serve(gateway: Gateway, config: &Config) -> Result<Listening, String> {
    config.validate()?;
    let tls = match &config.tls {
        Some(t) => Some(tls_acceptor(t)?),
        None => None,
    };
    let client = gateway.client.clone();
    let mut principals =
        Principals::new(config.keys.iter().map(|k| (k.access_key.clone(), k.secret_key.clone())), Some(client.clone()));
    match config.anonymous {
        Anonymous::Read => principals = principals.anonymous_as_nobody(),
        Anonymous::ReadWrite => tracing::info!(
            "anonymous read-write access: unsigned requests act with the gateway's own rights over the whole namespace, tenants' directories included"
        ),
        Anonymous::Off => {}
    }
    let principals = Arc::new(principals);
    let policies = Some((client.clone(), gateway.policies.clone()));
    let inner = service_with(gateway, principals.clone(), config.anonymous, policies);
    let listener =
        TcpListener::bind(&config.listen).await.map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let body_stall = Duration::from_millis(config.body_idle_timeout_ms);
    let (per_client, total) = (config.connections_per_client_max, config.connections_max);
    Ok(Listening {
        listener,
        front: Front {
            inner,
            client,
            principals,
            body_stall,
            quiet: crate::quiet::QuietS3s::dispatch(),
            peer: None,
            auth_failures: Arc::default(),
        },
        tls,
        limiter: ConnLimiter::new("S3 gateway", per_client, total),
        header_timeout: Duration::from_millis(config.header_timeout_ms),
        body_stall,
        refusals: (
            refusal_bytes(Refusal::Client { open: per_client }, per_client, total)?,
            refusal_bytes(Refusal::Total { open: total }, per_client, total)?,
        ),
    })
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
        assert_eq!(
            (nobody.header_timeout_ms, nobody.body_idle_timeout_ms, nobody.connections_per_client_max),
            (HEADER_TIMEOUT_MS_DEFAULT, BODY_IDLE_TIMEOUT_MS_DEFAULT, CONNECTIONS_PER_CLIENT_MAX_DEFAULT)
        );
        let limited: Config = toml::from_str(
            "anonymous = \"read\"\nheader_timeout_ms = 500\nbody_idle_timeout_ms = 700\nconnections_max = 9\nconnections_per_client_max = 3\n",
        )
        .expect("parses");
        assert_eq!((limited.header_timeout_ms, limited.body_idle_timeout_ms), (500, 700));
        assert_eq!((limited.connections_max, limited.connections_per_client_max), (9, 3));
        let zero: Config = toml::from_str("anonymous = \"read\"\nbody_idle_timeout_ms = 0\n").expect("parses");
        assert!(zero.validate().expect_err("refused").contains("body_idle_timeout_ms"));
    }

    #[test]
    fn refusals_are_whole_http_answers() {
        let bytes = refusal_bytes(Refusal::Client { open: 2 }, 2, 10).expect("answer");
        let text = String::from_utf8_lossy(&bytes);
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        assert!(head.starts_with("HTTP/1.1 503 ") && head.contains("Connection: close"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
        assert!(body.contains("<Code>SlowDown</Code>") && body.contains("connections_per_client_max = 2"), "{body}");
    }
}
