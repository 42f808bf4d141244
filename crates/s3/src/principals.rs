//! The access keys the gateway accepts and whom each acts as: the keys of its configuration
//! (the gateway's own rights over the root namespace), and the cluster's S3 keys, looked up in
//! the metadata service (`MetaOp::LookupS3Key`, which needs a gateway, admin or node
//! credential) and kept for [`KEY_CACHE_MS`]: a removed key is refused within that time on
//! every gateway. Unknown keys are remembered for [`KEY_MISS_CACHE_MS`], so guessing keys
//! costs the metadata service at most one lookup per key per interval.

use crate::errors;
use crate::scope::Scope;
use client::{Client, ErrorCode, ROOT_INO};
use s3s::auth::SecretKey;
use s3s::{S3Error, S3ErrorCode, S3Result};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a cluster key found in the metadata service is used without asking again.
pub const KEY_CACHE_MS: u64 = 10_000;
/// How long a key the metadata service does not know is refused without asking again.
pub const KEY_MISS_CACHE_MS: u64 = 2_000;
/// Keys remembered at most; the cache is emptied when it would grow past this.
const KEY_CACHE_ENTRIES_MAX: usize = 65_536;

/// An access key's secret and the scope its requests run in.
pub struct Principal {
    pub secret: SecretKey,
    pub scope: Arc<Scope>,
}

/// The uid and gid unsigned requests are checked as where anonymous access is read-only (the
/// traditional `nobody`): they read what POSIX lets others read, and never enter a tenant.
pub const NOBODY_ID: u32 = 65534;

/// The accepted access keys.
pub struct Principals {
    /// The scope of unsigned requests.
    anonymous: Arc<Scope>,
    config: HashMap<String, Arc<Principal>>,
    /// Where cluster keys are looked up; `None`: configured keys only.
    client: Option<Client>,
    /// Set once the metadata service refused this gateway's credential the keys' secrets: from
    /// then on only configured keys are accepted, and refusals say why.
    cluster_keys_refused: std::sync::atomic::AtomicBool,
    cache: parking_lot::Mutex<HashMap<String, Looked>>,
}

/// When a cluster key was looked up, and whom it was found to be.
type Looked = (Instant, Option<Arc<Principal>>);

impl Principals {
    /// The keys of the gateway's configuration (`(access key, secret)`), and the cluster's
    /// keys when `client` is given.
    pub fn new(config: impl IntoIterator<Item = (String, String)>, client: Option<Client>) -> Principals {
        let config = config
            .into_iter()
            .map(|(key, secret)| {
                let scope = Arc::new(Scope {
                    root: String::new(),
                    root_ino: ROOT_INO,
                    user: None,
                    access_key: Some(key.clone()),
                });
                (key, Arc::new(Principal { secret: SecretKey::from(secret), scope }))
            })
            .collect();
        Principals {
            anonymous: Scope::root(),
            config,
            client,
            cluster_keys_refused: std::sync::atomic::AtomicBool::new(false),
            cache: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Unsigned requests act as `nobody`, with its permissions checked (read-only anonymous
    /// access), instead of with the gateway's own rights (read-write anonymous access, which
    /// opens the whole namespace, tenants' directories included).
    pub fn anonymous_as_nobody(mut self) -> Principals {
        let nobody = wire::identity::User {
            name: "anonymous".into(),
            uid: NOBODY_ID,
            gid: NOBODY_ID,
            groups: Vec::new(),
            tenant: None,
            created_ms: 0,
        };
        self.anonymous =
            Arc::new(Scope { root: String::new(), root_ino: ROOT_INO, user: Some(nobody), access_key: None });
        self
    }

    /// The scope of unsigned requests.
    pub fn anonymous(&self) -> Arc<Scope> {
        self.anonymous.clone()
    }

    /// Whether `key` is one of the configuration's keys.
    pub fn is_configured(&self, key: &str) -> bool {
        self.config.contains_key(key)
    }

    /// The answer to a request signed with `key`, which nobody holds.
    pub fn unknown(&self, key: &str) -> S3Error {
        if self.cluster_keys_refused.load(std::sync::atomic::Ordering::Relaxed) {
            return S3Error::with_message(
                S3ErrorCode::InvalidAccessKeyId,
                format!(
                    "The access key ID that you provided ({key:?}) is not one of this gateway's configured keys, and the gateway cannot check the cluster's S3 keys: it needs a gateway credential (trove cluster issue --role gateway)."
                ),
            );
        }
        errors::unknown_access_key(key)
    }

    /// Who `key` is, `None` if nobody.
    pub async fn get(&self, key: &str) -> S3Result<Option<Arc<Principal>>> {
        if let Some(p) = self.config.get(key) {
            return Ok(Some(p.clone()));
        }
        let Some(client) = &self.client else { return Ok(None) };
        if self.cluster_keys_refused.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        if let Some((at, found)) = self.cache.lock().get(key) {
            let ttl = if found.is_some() { KEY_CACHE_MS } else { KEY_MISS_CACHE_MS };
            if at.elapsed() < Duration::from_millis(ttl) {
                return Ok(found.clone());
            }
        }
        let found = match client.lookup_s3_key(key).await {
            Ok(None) => None,
            Ok(Some(grant)) => {
                let (root, root_ino) = match &grant.tenant {
                    Some(t) => {
                        // The tenant's directory is found by its path; it must still be the one
                        // recorded, or requests would land elsewhere.
                        match client.resolve(&t.path).await {
                            Ok(a) if a.ino == t.root => {}
                            Ok(_) | Err(_) => {
                                return Err(S3Error::with_message(
                                    S3ErrorCode::ServiceUnavailable,
                                    format!(
                                        "tenant {}'s directory is no longer at {}: it was moved or removed",
                                        t.name, t.path
                                    ),
                                ))
                            }
                        }
                        (t.path.clone(), t.root)
                    }
                    None => (String::new(), ROOT_INO),
                };
                let scope =
                    Arc::new(Scope { root, root_ino, user: Some(grant.user), access_key: Some(key.to_string()) });
                Some(Arc::new(Principal { secret: SecretKey::from(grant.secret_key), scope }))
            }
            Err(e) if e.code == ErrorCode::PermissionDenied => {
                if !self.cluster_keys_refused.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::info!(
                        "this gateway accepts only its configured keys: the cluster refused it the S3 keys' secrets ({e}); run it with a gateway credential (trove cluster issue --role gateway) to accept them"
                    );
                }
                return Ok(None);
            }
            Err(e) => return Err(errors::s3_error(&e, errors::Target::Bucket)),
        };
        let mut cache = self.cache.lock();
        if cache.len() >= KEY_CACHE_ENTRIES_MAX {
            cache.clear();
        }
        cache.insert(key.to_string(), (Instant::now(), found.clone()));
        Ok(found)
    }
}
