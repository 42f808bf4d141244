//! A cluster's certificate authority: creating it, and issuing the credentials
//! ([`crate::tls`]) its processes present.
//!
//! An authority lives in a directory of its own, which only the cluster's owner may read:
//! ```text
//! ca.pem   the authority's certificate (self-signed, a CA for 10 years)
//! ca.key   its private key (mode 0600)
//! ca.name  its subject's common name, needed to issue under it again
//! ```
//! A credential it issues is a directory of `ca.pem` (the trusted authorities: this one, and
//! others passed along while rotating), `cert.pem` (valid for [`CREDENTIAL_VALIDITY`], for the
//! role's DNS name) and `key.pem` (mode 0600), each written whole to a temporary file and then
//! renamed into place, so a watching process never reads half a file.

use crate::tls::{Role, CA_FILE, CERT_FILE, KEY_FILE};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long an authority's certificate is valid.
pub const AUTHORITY_VALIDITY: Duration = Duration::from_secs(10 * 366 * 86_400);
/// How long an issued certificate is valid.
pub const CREDENTIAL_VALIDITY: Duration = Duration::from_secs(366 * 86_400);
/// How far back a new certificate's validity starts, for clocks a little behind.
const CLOCK_SKEW: Duration = Duration::from_secs(3600);
/// The authority's private key file.
pub const CA_KEY_FILE: &str = "ca.key";
/// The authority's common name file.
pub const CA_NAME_FILE: &str = "ca.name";

/// Errors of creating, loading and using an authority.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PkiError {
    #[error("cannot read {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("cannot make a certificate: {0}")]
    Generate(String),
}

/// A cluster's certificate authority.
pub struct Authority {
    name: String,
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn validity(span: Duration) -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    (now - CLOCK_SKEW, now + span)
}

fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f; // a positive integer
    SerialNumber::from_slice(&bytes)
}

fn authority_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, name);
    params.distinguished_name.push(DnType::OrganizationName, "Trove");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

/// Writes `contents` to `path` whole: a temporary file beside it, then a rename.
pub fn write_whole(path: &Path, contents: &[u8], private: bool) -> Result<(), PkiError> {
    use std::io::Write as _;
    let werr = |reason: String| PkiError::Write { path: path.to_path_buf(), reason };
    let tmp = path.with_extension("tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    if private {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(&tmp).map_err(|e| werr(e.to_string()))?;
    f.write_all(contents).and_then(|_| f.sync_all()).map_err(|e| werr(e.to_string()))?;
    std::fs::rename(&tmp, path).map_err(|e| werr(e.to_string()))
}

fn read_string(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|e| PkiError::Read { path: path.to_path_buf(), reason: e.to_string() })
}

impl Authority {
    /// A new authority for the cluster named `cluster`.
    pub fn create(cluster: &str) -> Result<Authority, PkiError> {
        let suffix: u32 = rand::random();
        let name = format!("Trove cluster {cluster} authority {suffix:08x}");
        let mut params = authority_params(&name);
        (params.not_before, params.not_after) = validity(AUTHORITY_VALIDITY);
        params.serial_number = Some(random_serial());
        let key = KeyPair::generate().map_err(|e| PkiError::Generate(e.to_string()))?;
        let cert = params.self_signed(&key).map_err(|e| PkiError::Generate(e.to_string()))?;
        Ok(Authority { cert_pem: cert.pem(), issuer: Issuer::new(authority_params(&name), key), name })
    }

    /// The authority's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Saves the authority into `dir` (created if missing).
    pub fn save(&self, dir: &Path) -> Result<(), PkiError> {
        std::fs::create_dir_all(dir).map_err(|e| PkiError::Write { path: dir.to_path_buf(), reason: e.to_string() })?;
        write_whole(&dir.join(CA_KEY_FILE), self.issuer.key().serialize_pem().as_bytes(), true)?;
        write_whole(&dir.join(CA_NAME_FILE), self.name.as_bytes(), false)?;
        write_whole(&dir.join(CA_FILE), self.cert_pem.as_bytes(), false)
    }

    /// Loads the authority saved in `dir`.
    pub fn load(dir: &Path) -> Result<Authority, PkiError> {
        let key_path = dir.join(CA_KEY_FILE);
        let key = KeyPair::from_pem(&read_string(&key_path)?)
            .map_err(|e| PkiError::Invalid { path: key_path, reason: format!("not a private key: {e}") })?;
        let name = read_string(&dir.join(CA_NAME_FILE))?.trim().to_string();
        let cert_pem = read_string(&dir.join(CA_FILE))?;
        Ok(Authority { issuer: Issuer::new(authority_params(&name), key), name, cert_pem })
    }

    /// Issues a credential for `role` into `out` (created if missing), named `name` in its
    /// subject, trusting the authorities whose certificates are `trust` (PEM, concatenated;
    /// usually this authority's own).
    pub fn issue(&self, role: Role, name: &str, trust: &str, out: &Path) -> Result<(), PkiError> {
        let mut params =
            CertificateParams::new(vec![role.dns_name().to_string()]).map_err(|e| PkiError::Generate(e.to_string()))?;
        params.distinguished_name.push(DnType::CommonName, format!("{name} ({})", role.name()));
        params.distinguished_name.push(DnType::OrganizationName, "Trove");
        (params.not_before, params.not_after) = validity(CREDENTIAL_VALIDITY);
        params.serial_number = Some(random_serial());
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match role {
            Role::Node => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            Role::Admin | Role::Client | Role::Gateway => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        let key = KeyPair::generate().map_err(|e| PkiError::Generate(e.to_string()))?;
        let cert = params.signed_by(&key, &self.issuer).map_err(|e| PkiError::Generate(e.to_string()))?;
        std::fs::create_dir_all(out).map_err(|e| PkiError::Write { path: out.to_path_buf(), reason: e.to_string() })?;
        write_whole(&out.join(KEY_FILE), key.serialize_pem().as_bytes(), true)?;
        write_whole(&out.join(CERT_FILE), cert.pem().as_bytes(), false)?;
        write_whole(&out.join(CA_FILE), trust.as_bytes(), false)
    }
}
