//! Trove's NFSv3 gateway: the `nfsserve` crate's server over the client library, so NFS clients
//! see the same namespace as the mount and S3.
//!
//! - **File handles** are inode numbers behind a fixed 8-byte tag, so they stay valid across
//!   gateway restarts and between gateways of one cluster; an inode that no longer exists
//!   answers `NFS3ERR_STALE`.
//! - **Exports** are directories of the cluster, each served on its own address, read-write or
//!   read-only ([`Export`]). A client mounts the export's root or any directory below it.
//!   Exports decide what a client mounts, not what a client that forges file handles can
//!   reach (like Linux's `no_subtree_check`): they are not an isolation boundary between
//!   tenants.
//! - **Clients**: an export may list the addresses and networks allowed to connect (`clients`);
//!   others are closed at once by the guard. This is the only access control an export has:
//! - **Identity**: nfsserve 0.11 does not hand AUTH_UNIX credentials to the file system, so new
//!   files belong to root (0:0) unless a SETATTR changes them, and permissions are not checked
//!   by the gateway. Root squash and uid mapping are therefore impossible here: an export is
//!   for trusted networks only, and `clients` is how to say which (`trove nfs` warns of an
//!   export without it). Of the other NFSv3 server crates, zerofs_nfsserve passes each call's
//!   AUTH_UNIX credential to the file system but is licensed AGPL-3.0, and nfs3_server 0.11
//!   only lets the file system accept or refuse a credential per call, without telling the
//!   operation whose it is.
//!
//! # Consistency
//!
//! nfsserve 0.11 answers every WRITE as `FILE_SYNC` and implements no COMMIT, so a client is
//! told its data is on stable storage when the WRITE returns. By default the gateway makes that
//! true: a WRITE goes into the file's open handle and is flushed (uploaded as a copy-on-write
//! chunk, committed to the metadata) before the reply, so an acknowledged write survives a
//! gateway crash. Writes to one file are applied in order; writes smaller than a chunk rewrite
//! that chunk, which costs bandwidth (sequential 1 MiB writes into 4 MiB chunks upload about
//! 2.5 times the data).
//!
//! With `write_back_ms` set, writes are buffered per file and flushed once the file has been
//! idle that long (and before any SETATTR, RENAME or REMOVE of it): much faster, but a gateway
//! crash loses up to that window of writes the client believes are stable. Use it only where
//! that is acceptable.
//!
//! Reads go through a cached open handle (with the client's read-ahead) that is revalidated
//! against the file's `data_version` at most every [`REVALIDATE_MS`] milliseconds: changes made
//! through S3, the mount or another gateway are visible within that time, like NFS attribute
//! caching; this gateway's own writes are visible at once. Namespace operations (create,
//! rename, remove, readdir) are transactions of the metadata service and visible at once.
//! Files being written under a temporary name (S3 uploads, `trove put`) are not listed (the
//! client library hides them) but can be looked up by name.
//!
//! # Connections
//!
//! Clients connect to a guard in front of nfsserve (`guard.rs`) that bounds what one client
//! can hold: calls of at most [`guard::CALL_BYTES_MAX`] bytes whose bytes never stall longer
//! than `call_idle_timeout_ms`, connections idle at most `idle_timeout_ms`, and at most
//! `connections_per_client_max` connections per client address (`connections_max` in all).

mod fs;
pub mod guard;
mod handles;
pub mod metered;

pub use fs::{Export, TroveNfs, REVALIDATE_MS};
pub use handles::XATTR_HANDLE_KEY;

use nfsserve::tcp::{NFSTcp, NFSTcpListener};
use serde::Deserialize;
use std::time::Duration;

/// Default of [`Config::idle_timeout_ms`]: Linux's knfsd closes idle connections after 6
/// minutes too.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 360_000;
/// Default of [`Config::call_idle_timeout_ms`].
pub const CALL_IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default of [`Config::connections_max`].
pub const CONNECTIONS_MAX_DEFAULT: usize = 1024;
/// Default of [`Config::connections_per_client_max`] (a Linux client opens one connection per
/// server, or `nconnect` of them, at most 16).
pub const CONNECTIONS_PER_CLIENT_MAX_DEFAULT: usize = 64;

/// One exported directory.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// The directory of the cluster to export ("/" for everything).
    pub path: String,
    /// Where to serve it, HOST:PORT (port 0 picks a free one).
    pub listen: String,
    /// Refuse every change.
    #[serde(default)]
    pub read_only: bool,
    /// Client addresses and networks allowed to connect (`["10.0.0.0/8", "192.168.1.5"]`);
    /// empty (the default): every client that can reach `listen`.
    #[serde(default)]
    pub clients: Vec<String>,
}

/// The gateway's configuration file (`trove nfs --config nfs.toml`).
///
/// ```toml
/// cluster = "127.0.0.1:7000"   # or a local cluster directory
/// write_back_ms = 0            # 0: every WRITE is durable before its reply
/// idle_timeout_ms = 360000     # a connection with no call for this long is closed
/// call_idle_timeout_ms = 30000 # a call (or reply) that stalls this long closes its connection
/// connections_max = 1024
/// connections_per_client_max = 64
/// [[exports]]
/// path = "/datasets"
/// listen = "0.0.0.0:2049"
/// read_only = true
/// clients = ["10.0.0.0/8"]   # addresses or networks allowed; absent: all
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub cluster: Option<String>,
    #[serde(default)]
    pub write_back_ms: u64,
    #[serde(default)]
    pub exports: Vec<ExportConfig>,
    /// How long a connection may carry nothing (no call, no reply) before it is closed.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// How long the bytes of a call that has begun may stall (or a reply go unread) before the
    /// connection is closed.
    #[serde(default = "default_call_idle_timeout_ms")]
    pub call_idle_timeout_ms: u64,
    /// Connections served at once per export; more are closed at once.
    #[serde(default = "default_connections_max")]
    pub connections_max: usize,
    /// Connections one client address may hold per export; more are closed at once.
    #[serde(default = "default_connections_per_client_max")]
    pub connections_per_client_max: usize,
}

fn default_idle_timeout_ms() -> u64 {
    IDLE_TIMEOUT_MS_DEFAULT
}

fn default_call_idle_timeout_ms() -> u64 {
    CALL_IDLE_TIMEOUT_MS_DEFAULT
}

fn default_connections_max() -> usize {
    CONNECTIONS_MAX_DEFAULT
}

fn default_connections_per_client_max() -> usize {
    CONNECTIONS_PER_CLIENT_MAX_DEFAULT
}

impl Default for Config {
    fn default() -> Config {
        Config {
            cluster: None,
            write_back_ms: 0,
            exports: Vec::new(),
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            call_idle_timeout_ms: CALL_IDLE_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            connections_per_client_max: CONNECTIONS_PER_CLIENT_MAX_DEFAULT,
        }
    }
}

impl Config {
    /// Checks that the limits are usable.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("idle_timeout_ms", self.idle_timeout_ms as usize),
            ("call_idle_timeout_ms", self.call_idle_timeout_ms as usize),
            ("connections_max", self.connections_max),
            ("connections_per_client_max", self.connections_per_client_max),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        Ok(())
    }

    fn limits(&self) -> guard::Limits {
        guard::Limits {
            idle: Duration::from_millis(self.idle_timeout_ms),
            call_stall: Duration::from_millis(self.call_idle_timeout_ms),
            connections_max: self.connections_max,
            connections_per_client_max: self.connections_per_client_max,
        }
    }
}

/// A bound export, ready to serve.
pub struct Listening {
    /// The address clients connect to (the guard's).
    front: tokio::net::TcpListener,
    /// nfsserve, on a loopback port of its own.
    backend: NFSTcpListener<metered::Metered<TroveNfs>>,
    limits: guard::Limits,
    allow: guard::AllowList,
    pub path: String,
    pub read_only: bool,
}

impl Listening {
    /// Whether the export admits every client address (it has no `clients` list).
    pub fn admits_every_host(&self) -> bool {
        self.allow.admits_every_address()
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> String {
        match self.front.local_addr() {
            Ok(a) => a.to_string(),
            Err(e) => format!("(unknown: {e})"),
        }
    }

    /// Serves until the process ends.
    pub async fn run(self) -> std::io::Result<()> {
        let backend = std::net::SocketAddr::from(([127, 0, 0, 1], self.backend.get_listen_port()));
        tokio::select! {
            r = self.backend.handle_forever() => r,
            r = guard::serve(self.front, backend, self.limits, self.allow, self.path.clone()) => r,
        }
    }
}

/// Resolves the export's directory and binds its address (and nfsserve's loopback one).
pub async fn bind(client: client::Client, export: &ExportConfig, config: &Config) -> Result<Listening, String> {
    config.validate()?;
    let allow = guard::AllowList::parse(&export.clients).map_err(|e| format!("export {}: {e}", export.path))?;
    let fs =
        TroveNfs::new(client, Export { path: export.path.clone(), read_only: export.read_only }, config.write_back_ms)
            .await?;
    let front = tokio::net::TcpListener::bind(&export.listen)
        .await
        .map_err(|e| format!("cannot listen on {} for export {}: {e}", export.listen, export.path))?;
    let backend = NFSTcpListener::bind("127.0.0.1:0", metered::Metered(fs))
        .await
        .map_err(|e| format!("cannot listen on a loopback port for export {}: {e}", export.path))?;
    Ok(Listening {
        front,
        backend,
        limits: config.limits(),
        allow,
        path: export.path.clone(),
        read_only: export.read_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_files_parse() {
        let c: Config = toml::from_str(
            "cluster = \"dir\"\nwrite_back_ms = 50\n[[exports]]\npath = \"/a\"\nlisten = \"127.0.0.1:2049\"\nread_only = true\n[[exports]]\npath = \"/b\"\nlisten = \"127.0.0.1:2050\"\nclients = [\"10.0.0.0/8\", \"192.168.1.5\"]\n",
        )
        .expect("parses");
        assert_eq!((c.exports[0].clients.len(), c.exports[1].clients.len()), (0, 2));
        assert_eq!(c.write_back_ms, 50);
        assert_eq!(
            c.exports.iter().map(|e| (e.path.as_str(), e.read_only)).collect::<Vec<_>>(),
            vec![("/a", true), ("/b", false)]
        );
        assert!(toml::from_str::<Config>("[[exports]]\npath = \"/a\"\n").is_err(), "an export needs an address");
        assert_eq!(
            (c.idle_timeout_ms, c.connections_per_client_max),
            (IDLE_TIMEOUT_MS_DEFAULT, CONNECTIONS_PER_CLIENT_MAX_DEFAULT)
        );
        let limited: Config = toml::from_str(
            "idle_timeout_ms = 1000\ncall_idle_timeout_ms = 200\nconnections_max = 5\nconnections_per_client_max = 2\n",
        )
        .expect("parses");
        assert_eq!((limited.idle_timeout_ms, limited.call_idle_timeout_ms), (1000, 200));
        assert_eq!((limited.connections_max, limited.connections_per_client_max), (5, 2));
        assert!(limited.validate().is_ok());
        let zero: Config = toml::from_str("connections_max = 0\n").expect("parses");
        assert!(zero.validate().expect_err("refused").contains("connections_max"));
    }
}
