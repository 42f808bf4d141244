//! Tenants, users and S3 keys from the command line: `trove tenant create|list|remove`,
//! `trove user add|list|remove`, `trove s3-key create|list|remove` (all need the admin
//! credential). What they mean is `wire::identity`'s; the metadata service keeps them.
//!
//! `tenant create` makes the tenant's directory before recording the tenant: owned by root and
//! the tenant's group, mode 1770 (the group's users may make buckets, the sticky bit keeps them
//! from removing each other's, and nobody else may enter), with the tenant's quota on it; the
//! default parent, `/tenants`, gets mode 0711, so that nobody but root can list the tenants. If
//! recording fails, the directory it made is removed again.

use crate::cmds::ClusterOpt;
use anyhow::{anyhow, bail, Context, Result};
use client::Client;
use rand::Rng;
use wire::identity::{Identities, IdentityChange, TENANTS_DIR};

/// The mode of a tenant's directory: the tenant's group may enter and make entries, the
/// sticky bit keeps users from removing each other's, others may not enter.
pub const TENANT_DIR_MODE: u32 = 0o1770;
/// The mode of the default parent of tenants' directories: everyone may pass through it to
/// their own tenant's, nobody but root may list which tenants there are.
pub const TENANTS_DIR_MODE: u32 = 0o711;
/// Characters of a generated access key (after its `TK` prefix).
const ACCESS_KEY_CHARS: usize = 18;
/// Characters of a generated secret key (as AWS's).
const SECRET_KEY_CHARS: usize = 40;

#[derive(clap::Subcommand)]
pub enum TenantCmd {
    /// Makes a tenant: a directory of its own (default /tenants/NAME) that its users' S3 keys
    /// see as the whole namespace, with an optional quota.
    Create {
        /// The tenant's name (lower-case letters, digits, '-', '_', '.').
        name: String,
        /// The tenant's group: its directory belongs to it and its users are put in it.
        #[arg(long)]
        gid: u32,
        /// The tenant's directory (must not exist yet); default /tenants/NAME.
        #[arg(long)]
        path: Option<String>,
        /// Hard limit of the tenant's logical bytes (K, M, G, T).
        #[arg(long, value_parser = crate::quota::parse_size)]
        quota_bytes: Option<u64>,
        /// Hard limit of the tenant's inodes.
        #[arg(long, value_parser = crate::quota::parse_size)]
        quota_inodes: Option<u64>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the tenants.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Forgets a tenant without users (its directory and files stay).
    Remove {
        /// The tenant's name.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

#[derive(clap::Subcommand)]
pub enum UserCmd {
    /// Adds a user (a uid, a primary group and supplementary groups), optionally of a tenant.
    Add {
        /// The user's name (lower-case letters, digits, '-', '_', '.').
        name: String,
        /// The user's uid (not 0; unique in the cluster).
        #[arg(long)]
        uid: u32,
        /// Primary group; default: the tenant's group, else the uid.
        #[arg(long)]
        gid: Option<u32>,
        /// Supplementary groups, comma-separated.
        #[arg(long, value_delimiter = ',')]
        groups: Vec<u32>,
        /// The tenant the user belongs to (none: the cluster's root namespace).
        #[arg(long)]
        tenant: Option<String>,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the users.
    List {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Forgets a user who holds no S3 key (their files keep their uid).
    Remove {
        /// The user's name.
        name: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

#[derive(clap::Subcommand)]
pub enum S3KeyCmd {
    /// Makes an access key and secret for a user; the secret is shown only now.
    Create {
        /// The user the key acts as.
        #[arg(long)]
        user: String,
        /// Print JSON (access_key, secret_key, user).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Lists the access keys and their users (never the secrets).
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
    /// Removes an access key: requests signed with it are refused (within 10 s on every
    /// gateway).
    Remove {
        /// The access key to remove.
        access_key: String,
        #[command(flatten)]
        cluster: ClusterOpt,
    },
}

impl TenantCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            TenantCmd::Create { cluster, .. } | TenantCmd::List { cluster, .. } | TenantCmd::Remove { cluster, .. } => {
                cluster
            }
        }
    }
}

impl UserCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            UserCmd::Add { cluster, .. } | UserCmd::List { cluster, .. } | UserCmd::Remove { cluster, .. } => cluster,
        }
    }
}

impl S3KeyCmd {
    pub fn cluster(&self) -> &ClusterOpt {
        match self {
            S3KeyCmd::Create { cluster, .. } | S3KeyCmd::List { cluster, .. } | S3KeyCmd::Remove { cluster, .. } => {
                cluster
            }
        }
    }
}

async fn change(client: &Client, change: IdentityChange) -> Result<Identities> {
    client.change_identity(change).await.map_err(|e| anyhow!("{e}"))
}

pub async fn run_tenant(cmd: TenantCmd, client: &Client) -> Result<()> {
    match cmd {
        TenantCmd::Create { name, gid, path, quota_bytes, quota_inodes, .. } => {
            wire::identity::check_name("tenant", &name).map_err(|e| anyhow!(e))?;
            let path = path.unwrap_or_else(|| format!("{TENANTS_DIR}/{name}"));
            let Some(path) = wire::ingest::normalize_path(&path).filter(|p| p != "/") else {
                bail!("{path:?} is not usable as a tenant's directory: an absolute path below the root");
            };
            let (parent_path, leaf) = path.rsplit_once('/').unwrap_or(("", &path));
            let parent =
                if parent_path.is_empty() { client.resolve("/").await } else { client.mkdir_p(parent_path).await }
                    .map_err(|e| anyhow!("cannot make {parent_path}: {e}"))?;
            if parent_path == TENANTS_DIR && parent.mode & 0o777 != TENANTS_DIR_MODE {
                // Users may pass through to their tenant's directory, not list the others.
                let set = wire::SetAttr { mode: Some((parent.mode & !0o777) | TENANTS_DIR_MODE), ..Default::default() };
                client
                    .setattr(parent.ino, set)
                    .await
                    .map_err(|e| anyhow!("cannot set the mode of {TENANTS_DIR}: {e}"))?;
            }
            let dir = client
                .mkdir_as(parent.ino, leaf, TENANT_DIR_MODE, 0, gid)
                .await
                .map_err(|e| anyhow!("cannot make the tenant's directory {path}: {e}"))?;
            let made = async {
                if quota_bytes.is_some() || quota_inodes.is_some() {
                    let limits = wire::QuotaLimits {
                        bytes_hard: quota_bytes.unwrap_or(0),
                        inodes_hard: quota_inodes.unwrap_or(0),
                        grace_ms: crate::quota::GRACE_MS_DEFAULT,
                        ..Default::default()
                    };
                    client.set_quota(dir.ino, Some(limits)).await.map_err(|e| anyhow!("cannot set the quota: {e}"))?;
                }
                change(client, IdentityChange::AddTenant { name: name.clone(), gid, root: dir.ino, path: path.clone() })
                    .await
            };
            if let Err(e) = made.await {
                let _ = client.set_quota(dir.ino, None).await;
                if let Err(undo) = client.rmdir(parent.ino, leaf).await {
                    eprintln!("trove: could not remove {path} again: {undo}");
                }
                return Err(e.context(format!("tenant {name} was not created")));
            }
            println!("tenant {name}: {path} (group {gid}, mode {TENANT_DIR_MODE:04o})");
            Ok(())
        }
        TenantCmd::List { json, .. } => {
            let all = client.identities().await?;
            if json {
                let list: Vec<_> = all
                    .tenants
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "gid": t.gid, "path": t.path, "root": t.root}))
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<20} {:>8} {:>6}  PATH", "TENANT", "GID", "USERS");
                for t in &all.tenants {
                    let users = all.users.iter().filter(|u| u.tenant.as_deref() == Some(t.name.as_str())).count();
                    println!("{:<20} {:>8} {:>6}  {}", t.name, t.gid, users, t.path);
                }
            }
            Ok(())
        }
        TenantCmd::Remove { name, .. } => {
            change(client, IdentityChange::RemoveTenant { name: name.clone() }).await?;
            println!("tenant {name} removed (its directory stays)");
            Ok(())
        }
    }
}

pub async fn run_user(cmd: UserCmd, client: &Client) -> Result<()> {
    match cmd {
        UserCmd::Add { name, uid, gid, groups, tenant, .. } => {
            let gid = match (gid, &tenant) {
                (Some(g), _) => g,
                (None, Some(t)) => {
                    let all = client.identities().await?;
                    match all.tenants.iter().find(|x| &x.name == t) {
                        Some(x) => x.gid,
                        None => bail!("no tenant {t:?}: create it first (trove tenant create {t} --gid G)"),
                    }
                }
                (None, None) => uid,
            };
            let all = change(client, IdentityChange::AddUser { name: name.clone(), uid, gid, groups, tenant }).await?;
            if let Some(u) = all.users.iter().find(|u| u.name == name) {
                println!("{}", describe_user(u));
            }
            Ok(())
        }
        UserCmd::List { json, .. } => {
            let all = client.identities().await?;
            if json {
                let list: Vec<_> = all
                    .users
                    .iter()
                    .map(|u| {
                        serde_json::json!({"name": u.name, "uid": u.uid, "gid": u.gid, "groups": u.groups, "tenant": u.tenant})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for u in &all.users {
                    println!("{}", describe_user(u));
                }
            }
            Ok(())
        }
        UserCmd::Remove { name, .. } => {
            change(client, IdentityChange::RemoveUser { name: name.clone() }).await?;
            println!("user {name} removed");
            Ok(())
        }
    }
}

fn describe_user(u: &wire::identity::User) -> String {
    let groups: Vec<String> = u.groups.iter().map(u32::to_string).collect();
    format!(
        "user {}: uid {} gid {} groups [{}] tenant {}",
        u.name,
        u.uid,
        u.gid,
        groups.join(","),
        u.tenant.as_deref().unwrap_or("- (root namespace)")
    )
}

/// `n` random characters from `alphabet`.
fn random_text(alphabet: &[u8], n: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..n).map(|_| char::from(alphabet[rng.gen_range(0..alphabet.len())])).collect()
}

pub async fn run_key(cmd: S3KeyCmd, client: &Client) -> Result<()> {
    match cmd {
        S3KeyCmd::Create { user, json, .. } => {
            const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
            const SECRET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let access_key = format!("TK{}", random_text(UPPER, ACCESS_KEY_CHARS));
            let secret_key = random_text(SECRET, SECRET_KEY_CHARS);
            change(
                client,
                IdentityChange::AddS3Key {
                    user: user.clone(),
                    access_key: access_key.clone(),
                    secret_key: secret_key.clone(),
                },
            )
            .await
            .context("no key was made")?;
            if json {
                println!("{}", serde_json::json!({"access_key": access_key, "secret_key": secret_key, "user": user}));
            } else {
                println!("access key: {access_key}\nsecret key: {secret_key}\nuser:       {user}");
                println!("(the secret is not shown again)");
            }
            Ok(())
        }
        S3KeyCmd::List { json, .. } => {
            let all = client.identities().await?;
            if json {
                let list: Vec<_> = all
                    .keys
                    .iter()
                    .map(
                        |k| serde_json::json!({"access_key": k.access_key, "user": k.user, "created_ms": k.created_ms}),
                    )
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                println!("{:<24} USER", "ACCESS KEY");
                for k in &all.keys {
                    println!("{:<24} {}", k.access_key, k.user);
                }
            }
            Ok(())
        }
        S3KeyCmd::Remove { access_key, .. } => {
            change(client, IdentityChange::RemoveS3Key { access_key: access_key.clone() }).await?;
            println!("access key {access_key} removed");
            Ok(())
        }
    }
}
