//! Which TLS credential each `trove` process presents, and a local cluster's authority.
//!
//! A local cluster made by `trove cluster start` (without `--plaintext`) keeps its TLS
//! material in its directory:
//! ```text
//! DIR/tls/ca/          the cluster's authority (ca.pem, ca.key 0600, ca.name): issues credentials
//! DIR/tls/trust.pem    the authorities every credential trusts now (two while rotating)
//! DIR/tls/admin/       the admin credential: what commands given the cluster directory use
//! DIR/tls/client/      a client credential (files, no administration) to hand to mounts and
//!                      gateways on other machines
//! DIR/meta/tls/        the metadata service's node credential
//! DIR/node-I/tls/      storage node I's node credential
//! ```
//! Services name their credential in their config (`tls = "DIR"`), or `plaintext = true`;
//! commands take `--credentials DIR` (or `TROVE_CREDENTIALS`), and otherwise the admin
//! credential of a cluster directory given as `--cluster`.
//!
//! Rotation (`trove cluster rotate-ca`) replaces the authority without stopping anything: a
//! new authority is first trusted beside the old one everywhere, then every credential is
//! issued again by it, then the old one is no longer trusted. Each step waits until watching
//! processes have read the change ([`wire::tls::RELOAD_POLL`]).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wire::pki::{write_whole, Authority};
use wire::tls::{Role, TlsContext, CA_FILE};

/// The TLS directory of a local cluster.
pub const TLS_DIR: &str = "tls";
/// The authorities every credential of a local cluster trusts now.
pub const TRUST_FILE: &str = "trust.pem";

/// Where a local cluster's authority is kept.
pub fn authority_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join(TLS_DIR).join("ca")
}

/// A local cluster's admin credential.
pub fn admin_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join(TLS_DIR).join("admin")
}

/// A local cluster's client credential.
pub fn client_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join(TLS_DIR).join("client")
}

/// A local cluster's S3 gateway credential.
pub fn gateway_dir(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join(TLS_DIR).join("gateway")
}

/// Whether the local cluster in `dir` runs with TLS.
pub fn has_tls(cluster_dir: &Path) -> bool {
    authority_dir(cluster_dir).exists()
}

fn trust_of(cluster_dir: &Path) -> Result<String> {
    let path = cluster_dir.join(TLS_DIR).join(TRUST_FILE);
    std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
}

/// Creates the authority of a new local cluster named `cluster` in `dir`, with its admin and
/// client credentials.
pub fn create(cluster_dir: &Path, cluster: &str) -> Result<()> {
    let ca = Authority::create(cluster)?;
    ca.save(&authority_dir(cluster_dir))?;
    write_whole(&cluster_dir.join(TLS_DIR).join(TRUST_FILE), ca.cert_pem().as_bytes(), false)?;
    ca.issue(Role::Admin, "admin", ca.cert_pem(), &admin_dir(cluster_dir))?;
    ca.issue(Role::Client, "client", ca.cert_pem(), &client_dir(cluster_dir))?;
    ca.issue(Role::Gateway, "gateway", ca.cert_pem(), &gateway_dir(cluster_dir))?;
    Ok(())
}

/// Issues a credential of `role` named `name` into `out` from the local cluster in `dir`.
pub fn issue(cluster_dir: &Path, role: Role, name: &str, out: &Path) -> Result<()> {
    let ca = Authority::load(&authority_dir(cluster_dir))?;
    ca.issue(role, name, &trust_of(cluster_dir)?, out)?;
    Ok(())
}

/// Loads the credential in `dir` and keeps it up to date with its files.
fn load_watched(dir: &Path) -> Result<Arc<TlsContext>> {
    let ctx = TlsContext::load(dir).with_context(|| format!("cannot use the TLS credential in {}", dir.display()))?;
    ctx.watch();
    Ok(ctx)
}

/// Installs the credential of a command talking to `cluster`: `explicit` (`--credentials`),
/// else a local cluster directory's admin credential, else none (plaintext).
pub fn install_for_command(cluster: Option<&str>, explicit: Option<&Path>) -> Result<()> {
    let dir = match (explicit, cluster.map(Path::new)) {
        (Some(dir), _) => Some(dir.to_path_buf()),
        (None, Some(c)) if has_tls(c) => Some(admin_dir(c)),
        _ => None,
    };
    if let Some(dir) = dir {
        wire::tls::install(Some(load_watched(&dir)?));
    }
    Ok(())
}

/// Installs the admin credential of `cluster` when it is a local cluster directory and no
/// credential is installed yet: for commands that learn their cluster after `main` installed
/// one (a mount's first argument, a gateway's config).
pub fn install_if_none(cluster: &str) -> Result<()> {
    if wire::tls::installed().is_none() {
        install_for_command(Some(cluster), None)?;
    }
    Ok(())
}

/// As [`install_if_none`] for an S3 gateway: a local cluster directory's gateway credential
/// (which may read S3 keys' secrets and administer nothing), or its admin credential where an
/// older cluster has none.
pub fn install_gateway_if_none(cluster: &str) -> Result<()> {
    let dir = gateway_dir(Path::new(cluster));
    if wire::tls::installed().is_none() && has_tls(Path::new(cluster)) && dir.join(CA_FILE).exists() {
        wire::tls::install(Some(load_watched(&dir)?));
    }
    install_if_none(cluster)
}

/// Installs the credential of a service from its config's `tls` and `plaintext` (`what`
/// names the config in errors).
pub fn install_for_service(tls: Option<&Path>, plaintext: bool, what: &Path) -> Result<()> {
    match (tls, plaintext) {
        (Some(dir), false) => {
            let ctx = load_watched(dir)?;
            if ctx.role() != Role::Node {
                bail!(
                    "{}: the credential in {} is a {} credential; a service needs a node credential",
                    what.display(),
                    dir.display(),
                    ctx.role().name()
                );
            }
            wire::tls::install(Some(ctx));
            Ok(())
        }
        (None, true) => Ok(()),
        (Some(_), true) => bail!("{}: `tls` and `plaintext = true` exclude each other", what.display()),
        (None, false) => bail!(
            "{}: no `tls` credential directory: a service runs without TLS and authentication only by explicit choice (`plaintext = true`)",
            what.display()
        ),
    }
}

/// Every credential directory of the local cluster in `dir` (a directory holding `ca.pem`
/// under `tls/` or a process's directory), with the role and name it is issued for.
fn credentials_of(cluster_dir: &Path, state: &crate::cluster::State) -> Vec<(PathBuf, Role, String)> {
    let mut out = vec![
        (admin_dir(cluster_dir), Role::Admin, "admin".to_string()),
        (client_dir(cluster_dir), Role::Client, "client".to_string()),
        (gateway_dir(cluster_dir), Role::Gateway, "gateway".to_string()),
        (cluster_dir.join("meta").join(TLS_DIR), Role::Node, "meta".to_string()),
    ];
    for i in 1..=state.nodes.len() {
        out.push((cluster_dir.join(format!("node-{i}")).join(TLS_DIR), Role::Node, format!("node-{i}")));
    }
    out.retain(|(d, _, _)| d.join(CA_FILE).exists());
    out
}

/// Replaces the authority of the running local cluster in `dir` without stopping it (see the
/// module documentation); `wait` is how long each step waits for processes to reload.
pub async fn rotate(cluster_dir: &Path, wait: std::time::Duration) -> Result<()> {
    if !has_tls(cluster_dir) {
        bail!("the cluster in {} runs without TLS: there is no authority to rotate", cluster_dir.display());
    }
    let state = crate::cluster::State::load(cluster_dir)?;
    let old = Authority::load(&authority_dir(cluster_dir))?;
    let new = Authority::create(&state.cluster)?;
    let creds = credentials_of(cluster_dir, &state);
    let tls = cluster_dir.join(TLS_DIR);
    // 1. Everyone trusts both authorities.
    let both = format!("{}{}", old.cert_pem(), new.cert_pem());
    write_whole(&tls.join(TRUST_FILE), both.as_bytes(), false)?;
    for (dir, _, _) in &creds {
        write_whole(&dir.join(CA_FILE), both.as_bytes(), false)?;
    }
    tokio::time::sleep(wait).await;
    // 2. Every credential is issued again by the new authority, which then replaces the old.
    let next = tls.join("ca.next");
    new.save(&next)?;
    for (dir, role, name) in &creds {
        new.issue(*role, name, &both, dir)?;
    }
    let previous = tls.join("ca.previous");
    let _ = std::fs::remove_dir_all(&previous);
    std::fs::rename(authority_dir(cluster_dir), &previous)
        .with_context(|| format!("cannot retire the old authority into {}", previous.display()))?;
    std::fs::rename(&next, authority_dir(cluster_dir)).context("cannot put the new authority in place")?;
    tokio::time::sleep(wait).await;
    // 3. The old authority is trusted no more.
    write_whole(&tls.join(TRUST_FILE), new.cert_pem().as_bytes(), false)?;
    for (dir, _, _) in &creds {
        write_whole(&dir.join(CA_FILE), new.cert_pem().as_bytes(), false)?;
    }
    tokio::time::sleep(wait).await;
    std::fs::remove_dir_all(&previous).with_context(|| format!("cannot remove {}", previous.display()))?;
    Ok(())
}
