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
//! - **Identity**: nfsserve 0.11 does not hand AUTH_UNIX credentials to the file system, so new
//!   files belong to root (0:0) unless a SETATTR changes them, and permissions are not checked
//!   by the gateway.
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

mod fs;

pub use fs::{Export, TroveNfs, REVALIDATE_MS};

use nfsserve::tcp::{NFSTcp, NFSTcpListener};
use serde::Deserialize;

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
}

/// The gateway's configuration file (`trove nfs --config nfs.toml`).
///
/// ```toml
/// cluster = "127.0.0.1:7000"   # or a local cluster directory
/// write_back_ms = 0            # 0: every WRITE is durable before its reply
/// [[exports]]
/// path = "/datasets"
/// listen = "0.0.0.0:2049"
/// read_only = true
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub cluster: Option<String>,
    #[serde(default)]
    pub write_back_ms: u64,
    #[serde(default)]
    pub exports: Vec<ExportConfig>,
}

/// A bound export, ready to serve.
pub struct Listening {
    listener: NFSTcpListener<TroveNfs>,
    pub path: String,
    pub read_only: bool,
}

impl Listening {
    /// The address actually bound.
    pub fn local_addr(&self) -> String {
        format!("{}:{}", self.listener.get_listen_ip(), self.listener.get_listen_port())
    }

    /// Serves until the process ends.
    pub async fn run(self) -> std::io::Result<()> {
        self.listener.handle_forever().await
    }
}

/// Resolves the export's directory and binds its address.
pub async fn bind(client: client::Client, export: &ExportConfig, write_back_ms: u64) -> Result<Listening, String> {
    let fs =
        TroveNfs::new(client, Export { path: export.path.clone(), read_only: export.read_only }, write_back_ms).await?;
    let listener = NFSTcpListener::bind(&export.listen, fs)
        .await
        .map_err(|e| format!("cannot listen on {} for export {}: {e}", export.listen, export.path))?;
    Ok(Listening { listener, path: export.path.clone(), read_only: export.read_only })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_files_parse() {
        let c: Config = toml::from_str(
            "cluster = \"dir\"\nwrite_back_ms = 50\n[[exports]]\npath = \"/a\"\nlisten = \"127.0.0.1:2049\"\nread_only = true\n[[exports]]\npath = \"/b\"\nlisten = \"127.0.0.1:2050\"\n",
        )
        .expect("parses");
        assert_eq!(c.write_back_ms, 50);
        assert_eq!(
            c.exports.iter().map(|e| (e.path.as_str(), e.read_only)).collect::<Vec<_>>(),
            vec![("/a", true), ("/b", false)]
        );
        assert!(toml::from_str::<Config>("[[exports]]\npath = \"/a\"\n").is_err(), "an export needs an address");
    }
}
