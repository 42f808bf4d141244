//! `trove encryption`: the key files of encryption at rest, and re-keying a stopped storage
//! node's drives (`storage::crypt` holds the formats and the cryptography).

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use storage::crypt::{Kek, KeySource, Keyring};

#[derive(Subcommand)]
pub enum EncryptionCmd {
    /// Writes a new random key-encryption key (64 hexadecimal digits, mode 0600) for
    /// `[encryption] key_file` of storage nodes.
    Keygen {
        /// The key file to make (it must not exist).
        #[arg(long)]
        out: PathBuf,
    },
    /// Wraps every data key of a stopped storage node's drives with a new key-encryption key
    /// (a key file's, or a KMS plug-in's): no shard is rewritten. Then point the node's
    /// `[encryption]` at the new key and start the node; the old key opens nothing any more.
    Rekey {
        /// The node's storage.toml (its drives and current `[encryption]`).
        #[arg(long)]
        config: PathBuf,
        /// The new key file (`trove encryption keygen`).
        #[arg(long, conflicts_with = "new_kms_command", required_unless_present = "new_kms_command")]
        new_key_file: Option<PathBuf>,
        /// Or the KMS plug-in that wraps the data keys from now on: its program and arguments.
        #[arg(long, num_args = 1.., allow_hyphen_values = true, value_name = "PROGRAM [ARG]...")]
        new_kms_command: Option<Vec<String>>,
        /// Also add a new data key to each drive, which seals the shards written from now on
        /// (older shards keep the key that sealed them).
        #[arg(long)]
        new_data_key: bool,
    },
}

pub fn run(cmd: EncryptionCmd) -> Result<()> {
    match cmd {
        EncryptionCmd::Keygen { out } => {
            Kek::generate_file(&out)?;
            println!("wrote a new key-encryption key to {}", out.display());
            Ok(())
        }
        EncryptionCmd::Rekey { config, new_key_file, new_kms_command, new_data_key } => {
            let new = match (new_key_file, new_kms_command) {
                (Some(f), None) => KeySource::File(f),
                (None, Some(argv)) => KeySource::Kms(argv),
                _ => bail!("give --new-key-file or --new-kms-command"),
            };
            rekey(&config, &new, new_data_key)
        }
    }
}

/// Takes a drive's lock, which a running storage node holds, so that no running node's
/// keyring is replaced under it.
fn lock_drive(root: &Path) -> Result<std::fs::File> {
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(root.join("lock"))
        .with_context(|| format!("{} is not a drive of a storage node (no lock file)", root.display()))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(|e| {
        if e == rustix::io::Errno::WOULDBLOCK {
            anyhow::anyhow!("drive {} is in use by a running storage node: stop it first", root.display())
        } else {
            anyhow::anyhow!("cannot lock drive {}: {e}", root.display())
        }
    })?;
    Ok(lock)
}

/// The new key's `[encryption]` setting, in TOML.
fn setting(source: &KeySource) -> String {
    match source {
        KeySource::File(f) => format!("key_file = {:?}", f.display().to_string()),
        KeySource::Kms(argv) => format!("kms_command = {argv:?}"),
    }
}

fn rekey(config_path: &Path, new_source: &KeySource, new_data_key: bool) -> Result<()> {
    let config = storage::StorageConfig::load(config_path)?;
    let Some(encryption) = &config.encryption else {
        bail!("{} has no [encryption]: its shards are not encrypted", config_path.display());
    };
    let old_source = encryption.source()?;
    let old = Kek::from_source(&old_source)?;
    let new = Kek::from_source(new_source)?;
    let new_name = match new_source {
        KeySource::File(f) => f.display().to_string(),
        KeySource::Kms(argv) => format!("the KMS plug-in {}", argv.first().map_or("", String::as_str)),
    };
    // Every drive is opened with the old key before any is changed: a drive the old key does
    // not open stops the re-key with nothing changed.
    let mut locked = Vec::new();
    for drive in &config.drives {
        let lock = lock_drive(drive)?;
        let ring = Keyring::open(drive, &old)?;
        locked.push((drive, lock, ring));
    }
    for (drive, _lock, ring) in &mut locked {
        ring.rekey(&new, new_data_key).with_context(|| format!("drive {}", drive.display()))?;
        println!(
            "drive {}: {} data key(s) now wrapped by {}{}",
            drive.display(),
            ring.len(),
            new_name,
            if new_data_key { format!("; new shards use data key {}", ring.active().0) } else { String::new() }
        );
    }
    println!(
        "now set `{}` in [encryption] of {} (instead of `{}`) and start the node",
        setting(new_source),
        config_path.display(),
        setting(&old_source)
    );
    Ok(())
}
