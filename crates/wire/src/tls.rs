//! TLS on the cluster's own links: which credential a process presents, whom it trusts, and
//! what role the other end of a connection plays.
//!
//! Every process of a TLS cluster holds one *credential*, a directory of three PEM files:
//! ```text
//! ca.pem    the certificates of the cluster authorities it trusts (one, or two while the
//!           authority is being rotated)
//! cert.pem  its own certificate, issued by one of them
//! key.pem   its private key
//! ```
//! Both ends of every connection present a certificate (mutual TLS, TLS 1.3 only), and each
//! checks the other's against its trusted authorities: a process of another cluster, or one
//! without a certificate, never completes a handshake. What a certificate may do is its *role*,
//! carried as the DNS name its certificate is valid for ([`Role::dns_name`]):
//! - `node.trove`: metadata servers and storage nodes. Only node certificates may serve: a
//!   client checks the server it reaches against that name, whatever address it dialled.
//! - `admin.trove`: administrators (the `trove` commands of a cluster's owner).
//! - `client.trove`: mounts, gateways and SDK clients: files, but not administration.
//!
//! Credentials are read again when their files change ([`TlsContext::watch`]), so new
//! connections use a rotated certificate or trust list without a restart; connections already
//! open keep the credential they were made with. Issuing credentials is [`crate::pki`]'s job.
//!
//! Deliberately absent: certificate revocation lists (a leaked credential is answered by
//! rotating the authority), and any TLS version but 1.3.

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

/// The trusted authorities' certificates in a credential directory.
pub const CA_FILE: &str = "ca.pem";
/// The process's own certificate (chain) in a credential directory.
pub const CERT_FILE: &str = "cert.pem";
/// The process's private key in a credential directory.
pub const KEY_FILE: &str = "key.pem";
/// How often a watched credential's files are checked for changes.
pub const RELOAD_POLL: Duration = Duration::from_secs(1);
/// How many times a credential whose key does not fit its certificate is read again.
const MISMATCH_RETRIES: u32 = 20;
/// The pause before reading it again.
const MISMATCH_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How the reason of an unusable credential starts when its key does not fit the certificate.
const KEY_MISMATCH: &str = "the key does not fit the certificate";

/// What a certificate allows its holder to do in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Role {
    /// A metadata server or storage node: serves, and may do everything.
    Node,
    /// An administrator: files and administration.
    Admin,
    /// A mount or SDK client: files only.
    Client,
    /// An S3 gateway: files, and the S3 keys' secrets it checks signatures with.
    Gateway,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Node, Role::Admin, Role::Client, Role::Gateway];

    /// The DNS name a certificate of this role is valid for.
    pub fn dns_name(self) -> &'static str {
        match self {
            Role::Node => "node.trove",
            Role::Admin => "admin.trove",
            Role::Client => "client.trove",
            Role::Gateway => "gateway.trove",
        }
    }

    /// The role's name in commands and messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Admin => "admin",
            Role::Client => "client",
            Role::Gateway => "gateway",
        }
    }

    /// The role named `name` ("node", "admin", "client", "gateway").
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Whether the role may administer the cluster (node states, pools, policies, jobs,
    /// quotas, snapshots, retention, trash).
    pub fn may_administer(self) -> bool {
        matches!(self, Role::Node | Role::Admin)
    }

    /// Whether the role may read the secrets of S3 access keys (to check signatures).
    pub fn may_read_s3_secrets(self) -> bool {
        matches!(self, Role::Node | Role::Admin | Role::Gateway)
    }
}

/// Errors of loading a credential.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("the credential in {dir} is not usable: {reason}")]
    Unusable { dir: PathBuf, reason: String },
}

/// One loaded state of a credential directory.
struct Loaded {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    role: Role,
    /// Modification time and length of each file when it was read.
    stamp: Vec<Option<(SystemTime, u64)>>,
}

/// A process's TLS credential: the configurations its connections are made and accepted with.
pub struct TlsContext {
    dir: PathBuf,
    current: RwLock<Arc<Loaded>>,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext").field("dir", &self.dir).field("role", &self.role()).finish()
    }
}

/// ring's provider, with AES-128-GCM first among the TLS 1.3 suites (ring's default puts
/// AES-256-GCM first): every byte of the cluster's traffic is sealed and opened once, and
/// AES-128 takes 10 rounds per block where AES-256 takes 14. AES-128-GCM is the suite every
/// TLS 1.3 implementation must offer (RFC 8446 §9.1), with 128-bit security. Both ends of a
/// link use this order; a peer offering only the others still gets them.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(provider)
}

fn stamp_of(dir: &Path) -> Vec<Option<(SystemTime, u64)>> {
    [CA_FILE, CERT_FILE, KEY_FILE]
        .iter()
        .map(|f| std::fs::metadata(dir.join(f)).ok().and_then(|m| Some((m.modified().ok()?, m.len()))))
        .collect()
}

fn read(dir: &Path, file: &str) -> Result<Vec<u8>, TlsError> {
    let path = dir.join(file);
    std::fs::read(&path).map_err(|e| TlsError::Read { path, reason: e.to_string() })
}

fn certificates(dir: &Path, file: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(dir, file)?;
    let path = dir.join(file);
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid { path: path.clone(), reason: format!("not PEM certificates: {e}") })?;
    if certs.is_empty() {
        return Err(TlsError::Invalid { path, reason: "holds no certificate".into() });
    }
    Ok(certs)
}

/// The role the end-entity certificate `cert` was issued for, if any.
pub fn role_of(cert: &CertificateDer<'_>) -> Option<Role> {
    let ee = webpki::EndEntityCert::try_from(cert).ok()?;
    Role::ALL.into_iter().find(|r| {
        ServerName::try_from(r.dns_name()).is_ok_and(|name| ee.verify_is_valid_for_subject_name(&name).is_ok())
    })
}

/// Most characters of a credential's name kept for messages.
pub const CREDENTIAL_NAME_CHARS_MAX: usize = 128;

/// The name the end-entity certificate `cert` was issued under (`trove cluster issue --name`):
/// its subject's common name without the ` (role)` Trove appends to it. Characters other than
/// printable ones become `?`, and the name is cut at [`CREDENTIAL_NAME_CHARS_MAX`]: it goes into
/// messages and the audit trail. `None` when the certificate has no readable common name.
pub fn name_of(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let common = parsed.subject().iter_common_name().next()?.as_str().ok()?;
    let name = Role::ALL.into_iter().find_map(|r| common.strip_suffix(&format!(" ({})", r.name()))).unwrap_or(common);
    Some(name.chars().take(CREDENTIAL_NAME_CHARS_MAX).map(|c| if c.is_control() { '?' } else { c }).collect())
}

fn load(dir: &Path) -> Result<Loaded, TlsError> {
    let stamp = stamp_of(dir);
    let unusable = |reason: String| TlsError::Unusable { dir: dir.to_path_buf(), reason };
    let mut roots = RootCertStore::empty();
    for ca in certificates(dir, CA_FILE)? {
        roots.add(ca).map_err(|e| TlsError::Invalid {
            path: dir.join(CA_FILE),
            reason: format!("not an authority certificate: {e}"),
        })?;
    }
    let roots = Arc::new(roots);
    let chain = certificates(dir, CERT_FILE)?;
    let key_pem = read(dir, KEY_FILE)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| TlsError::Invalid { path: dir.join(KEY_FILE), reason: format!("not a PEM private key: {e}") })?;
    let role = role_of(&chain[0]).ok_or_else(|| {
        unusable(format!(
            "{} is not a Trove certificate: it is valid for none of {}",
            CERT_FILE,
            Role::ALL.map(Role::dns_name).join(", ")
        ))
    })?;
    let provider = provider();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| unusable(format!("cannot check client certificates: {e}")))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| unusable(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| unusable(format!("{KEY_MISMATCH}: {e}")))?;
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| unusable(e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| unusable(format!("{KEY_MISMATCH}: {e}")))?;
    // The record layer is `records`' own (rustls keeps the key schedule): it needs the traffic
    // secrets; sessions are not resumed, so no tickets.
    client.enable_secret_extraction = true;
    server.enable_secret_extraction = true;
    server.send_tls13_tickets = 0;
    Ok(Loaded { client: Arc::new(client), server: Arc::new(server), role, stamp })
}

impl TlsContext {
    /// Loads the credential in `dir` (see the module documentation for its files). A
    /// credential being issued again is written file by file: a key that does not fit the
    /// certificate (read between the two writes) is read again a few times before it is an
    /// error.
    pub fn load(dir: &Path) -> Result<Arc<TlsContext>, TlsError> {
        let mut attempt = 0;
        let loaded = loop {
            match load(dir) {
                Err(TlsError::Unusable { reason, .. })
                    if reason.starts_with(KEY_MISMATCH) && attempt < MISMATCH_RETRIES =>
                {
                    attempt += 1;
                    std::thread::sleep(MISMATCH_RETRY_PAUSE);
                }
                other => break other?,
            }
        };
        Ok(Arc::new(TlsContext { dir: dir.to_path_buf(), current: RwLock::new(Arc::new(loaded)) }))
    }

    /// The credential's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The role of this process's own certificate.
    pub fn role(&self) -> Role {
        self.current.read().role
    }

    /// The client side's configuration with the current credential.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.current.read().client.clone()
    }

    /// The server side's configuration with the current credential.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current.read().server.clone()
    }

    /// Reads the credential again if its files changed since they were read. A changed
    /// credential that does not load (a rotation half written) is an error and leaves the
    /// current one in use.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        if stamp_of(&self.dir) == self.current.read().stamp {
            return Ok(false);
        }
        let loaded = load(&self.dir)?;
        *self.current.write() = Arc::new(loaded);
        Ok(true)
    }

    /// Checks the credential's files every [`RELOAD_POLL`] and loads them again when they
    /// change, for as long as the context lives. Needs a Tokio runtime.
    pub fn watch(self: &Arc<Self>) {
        let me: Weak<TlsContext> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(RELOAD_POLL).await;
                let Some(ctx) = me.upgrade() else { return };
                match ctx.reload_if_changed() {
                    Ok(true) => {
                        failing = false;
                        tracing::info!("loaded the changed TLS credential in {}", ctx.dir.display());
                    }
                    Ok(false) => {}
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!("the changed TLS credential does not load, the previous one stays in use: {e}");
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

/// The credential this process uses where none is given explicitly.
static INSTALLED: RwLock<Option<Arc<TlsContext>>> = RwLock::new(None);

/// Makes `ctx` the credential of every connection made or served without an explicit one
/// (`None`: plaintext).
pub fn install(ctx: Option<Arc<TlsContext>>) {
    *INSTALLED.write() = ctx;
}

/// The credential installed with [`install`], if any.
pub fn installed() -> Option<Arc<TlsContext>> {
    INSTALLED.read().clone()
}

/// Which credential a connection or server uses.
#[derive(Debug, Clone, Default)]
pub enum TlsChoice {
    /// The one [`install`]ed for the process, looked up when connecting.
    #[default]
    Installed,
    /// This one (`None`: plaintext).
    Explicit(Option<Arc<TlsContext>>),
}

impl TlsChoice {
    /// The credential to use now.
    pub fn resolve(&self) -> Option<Arc<TlsContext>> {
        match self {
            TlsChoice::Installed => installed(),
            TlsChoice::Explicit(ctx) => ctx.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::Authority;

    fn issued(role: Role, name: &str) -> CertificateDer<'static> {
        let ca = Authority::create("names").expect("authority");
        let dir = tempfile::tempdir().expect("tempdir");
        ca.issue(role, name, ca.cert_pem(), dir.path()).expect("issue");
        certificates(dir.path(), CERT_FILE).expect("certificate").remove(0)
    }

    #[test]
    fn a_credential_carries_its_role_and_name() {
        for (role, name) in [(Role::Admin, "ops-alice"), (Role::Client, "loader (rack 7)"), (Role::Gateway, "s3")] {
            let cert = issued(role, name);
            assert_eq!(role_of(&cert), Some(role));
            assert_eq!(name_of(&cert).as_deref(), Some(name), "{role:?}");
        }
    }

    #[test]
    fn names_are_made_printable_and_cut() {
        let cert = issued(Role::Admin, "evil\nname\u{1b}[31m");
        assert_eq!(name_of(&cert).as_deref(), Some("evil?name?[31m"));
        let long = "n".repeat(300);
        assert_eq!(name_of(&issued(Role::Client, &long)).map(|n| n.len()), Some(CREDENTIAL_NAME_CHARS_MAX));
    }

    #[test]
    fn what_is_no_certificate_has_no_name() {
        assert_eq!(name_of(&CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x01])), None);
        assert_eq!(name_of(&CertificateDer::from(Vec::new())), None);
    }
}
