//! Whom an S3 request acts as, and which namespace it sees.
//!
//! A request signed with an access key of the cluster (`trove s3-key create`) acts as the key's
//! user: it sees only the user's tenant's directory, as if it were the whole file system (its
//! top-level directories are the tenant's buckets, its multipart uploads and versions are kept
//! below it), whatever its bucket and key say; what it creates is owned by the user; and POSIX
//! permissions are checked as the user on everything it reaches. A request signed with a key of
//! the gateway's configuration, or anonymous where allowed, keeps the gateway's own rights over
//! the cluster's root namespace, as before tenants existed.
//!
//! The scope is a task-local that the HTTP front sets around each request, from the access key
//! the request claims; the access check (`server::Policy`) refuses a request whose verified
//! key is not the one its scope was made for, so a scope is never chosen by a key whose
//! signature did not verify.

use client::{Attr, Client, Ino, Result, ROOT_INO};
use std::sync::{Arc, LazyLock};
use wire::identity::{permits, Access, Caller, User};

tokio::task_local! {
    static SCOPE: Arc<Scope>;
}

/// The namespace and identity of one request.
#[derive(Debug)]
pub struct Scope {
    /// The namespace's directory as a path prefix: empty for the cluster's root, else the
    /// tenant's directory (`/tenants/acme`).
    pub root: String,
    /// The namespace's directory.
    pub root_ino: Ino,
    /// The user the request acts as; `None`: the gateway's own rights, no permission checks.
    pub user: Option<User>,
    /// The access key the scope was made for (`None`: unsigned, or the root scope).
    pub access_key: Option<String>,
}

static ROOT: LazyLock<Arc<Scope>> =
    LazyLock::new(|| Arc::new(Scope { root: String::new(), root_ino: ROOT_INO, user: None, access_key: None }));

impl Scope {
    /// The root namespace with the gateway's own rights.
    pub fn root() -> Arc<Scope> {
        ROOT.clone()
    }

    /// The caller permissions are checked as, if any.
    pub fn caller(&self) -> Option<Caller> {
        self.user.as_ref().map(User::caller)
    }

    /// The absolute path of `rel` (a path from the namespace's root, starting with `/`).
    pub fn path(&self, rel: &str) -> String {
        if self.root.is_empty() {
            rel.to_string()
        } else if rel == "/" {
            self.root.clone()
        } else {
            format!("{}{rel}", self.root)
        }
    }

    /// Who new files and directories belong to: the user's uid and primary gid, or `None` for
    /// the gateway's own.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.user.as_ref().map(|u| (u.uid, u.gid))
    }

    /// The owner's name S3 answers with.
    pub fn owner_name(&self) -> String {
        self.user.as_ref().map_or_else(|| "trove".to_string(), |u| u.name.clone())
    }

    /// Whether this scope may access `attr` as `want` (always, with the gateway's own rights).
    pub fn permits(&self, attr: &Attr, want: Access) -> bool {
        match &self.user {
            None => true,
            Some(u) => permits(&u.caller(), attr.uid, attr.gid, attr.mode, want),
        }
    }

    /// Whether the sticky bit of directory `dir` keeps this scope from removing or replacing
    /// `entry` in it (only the owner of the entry or of the directory may, as in POSIX).
    pub fn sticky_refuses(&self, dir: &Attr, entry: &Attr) -> bool {
        match &self.user {
            Some(u) => dir.mode & 0o1000 != 0 && u.uid != dir.uid && u.uid != entry.uid,
            None => false,
        }
    }
}

/// The scope of the request being answered (the root scope outside any).
pub fn current() -> Arc<Scope> {
    SCOPE.try_with(Arc::clone).unwrap_or_else(|_| Scope::root())
}

/// Runs `f` in `scope`.
pub async fn run<F: std::future::Future>(scope: Arc<Scope>, f: F) -> F::Output {
    SCOPE.scope(scope, f).await
}

/// Resolves `rel` (a path from the namespace's root) in the current scope, checking `want`
/// (and search on the way) as its user.
pub async fn resolve(client: &Client, rel: &str, want: Access) -> Result<Attr> {
    let scope = current();
    let path = scope.path(rel);
    match scope.caller() {
        Some(caller) => client.resolve_as(&path, &caller, want).await,
        None => client.resolve(&path).await,
    }
}

/// Resolves `rel` in the current scope's namespace with the gateway's own rights: for what the
/// gateway keeps and reads for itself (uploads, versions, a bucket's settings, directories it
/// prunes), never for what a request asks of a user's files (that is [`resolve`]).
pub async fn resolve_internal(client: &Client, rel: &str) -> Result<Attr> {
    client.resolve(&current().path(rel)).await
}

/// Makes directory `name` in `parent`, owned by the scope's user.
pub async fn mkdir(client: &Client, parent: Ino, name: &str, mode: u32) -> Result<Attr> {
    match current().owner() {
        Some((uid, gid)) => client.mkdir_as(parent, name, mode, uid, gid).await,
        None => client.mkdir(parent, name, mode).await,
    }
}

/// Creates file `name` in `parent`, owned by the scope's user.
pub async fn create(client: &Client, parent: Ino, name: &str, mode: u32, exclusive: bool) -> Result<Attr> {
    match current().owner() {
        Some((uid, gid)) => client.create_as(parent, name, mode, uid, gid, exclusive).await,
        None => client.create(parent, name, mode, exclusive).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_below_the_namespace_root() {
        let tenant = Scope { root: "/tenants/acme".into(), root_ino: 9, user: None, access_key: None };
        assert_eq!(tenant.path("/"), "/tenants/acme");
        assert_eq!(tenant.path("/b/k"), "/tenants/acme/b/k");
        assert_eq!(Scope::root().path("/b/k"), "/b/k");
        assert_eq!(Scope::root().path("/"), "/");
    }

    #[tokio::test]
    async fn the_scope_is_the_one_the_request_runs_in() {
        assert!(current().root.is_empty());
        let tenant = Arc::new(Scope { root: "/t/a".into(), root_ino: 9, user: None, access_key: Some("AK".into()) });
        let seen = run(tenant, async { current().root.clone() }).await;
        assert_eq!(seen, "/t/a");
        assert!(current().root.is_empty());
    }
}
