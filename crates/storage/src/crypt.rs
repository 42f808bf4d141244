//! Encryption at rest: the node's key-encryption key, each drive's data keys, and the sealing
//! of shard files with them.
//!
//! A storage node configured with `[encryption] key_file = "..."` (every node of a pool, for an
//! encrypted pool) writes every new shard sealed with AES-256-GCM (shard format version 2,
//! [`crate::format`]). The key file holds the *key-encryption key* (KEK): 64 hexadecimal
//! digits, 256 bits, from `trove storage keygen` or any good random source. It never encrypts
//! data itself: each drive has its own *data keys*, random, kept in `<drive>/keyring` wrapped
//! (sealed) by the KEK, so that a drive together with the KEK is readable anywhere, and
//! replacing the KEK (`trove storage rekey`) rewrites one small file per drive and no data.
//!
//! A node may instead leave its KEK in an external key management service: with
//! `[encryption] kms_command = ["/usr/local/bin/trove-kms", ...]` the data keys are wrapped and
//! unwrapped by that plug-in, and the KEK never reaches the node (envelope encryption, as with
//! Vault's transit engine or a cloud KMS's Encrypt/Decrypt). The plug-in interface:
//!
//! - the node runs the command with its configured arguments followed by `wrap ID` or
//!   `unwrap ID` (ID: the data key's id, decimal, for the KMS to bind as context);
//! - `wrap` reads the data key as 64 hexadecimal digits and a newline on standard input, and
//!   prints the wrapped key as one line of printable ASCII (at most [`WRAPPED_BYTES_MAX`]
//!   bytes) on standard output;
//! - `unwrap` reads that line on standard input and prints the 64 hexadecimal digits;
//! - it exits 0 on success; anything else (an exit status other than 0, output that is not as
//!   above, no answer within [`KMS_TIMEOUT`]) is an error naming the command, its status and
//!   the start of what it wrote on standard error;
//! - it runs at keyring opening (node start: one `unwrap` per data key) and at re-keying (one
//!   `wrap` per data key), never per shard. A key the KMS unwraps to other bytes than it
//!   wrapped is caught by the keyring's check value for it.
//!
//! Keyring file, version 1, a key file's (integers little-endian):
//! ```text
//! offset  size  field
//!      0     4  magic b"TRKR"
//!      4     2  version (1), u16
//!      6     2  count c of data keys, u16, 1 ..= KEYS_MAX
//!      8   64c  per key: id u32, nonce 12 bytes, the 32-byte key sealed with the KEK and its
//!               16-byte tag (AES-256-GCM, associated data b"trove data key" ‖ id)
//!  8+64c     4  crc32c of bytes 0 .. 8+64c
//! ```
//! Keyring file, version 2, a KMS plug-in's:
//! ```text
//! offset  size  field
//!      0     4  magic b"TRKR"
//!      4     2  version (2), u16
//!      6     2  count c of data keys, u16, 1 ..= KEYS_MAX
//!      8     …  per key: id u32; check value, 16 bytes (HMAC-SHA256 of b"trove key check" ‖ id
//!               under the data key, cut to 16 bytes); length l, u16, 1 ..= WRAPPED_BYTES_MAX;
//!               the wrapped key, l bytes of printable ASCII as the plug-in printed it
//!      …     4  crc32c of every byte before
//! ```
//! Version history: 1, the first (key files only); 2 added for KMS plug-ins, written only by
//! them (a key file's keyring stays version 1; re-keying from one to the other rewrites the
//! keyring in the new one's version).
//!
//! The newest key (the last) seals new shards; older ones still open the shards they sealed.
//! Ids are unique within a keyring and grow.
//!
//! A sealed shard's bytes are bound to their place: every block's nonce is the file's random
//! 8-byte prefix and the block's index, and its associated data is the file's 48-byte header
//! (chunk id, shard index, lengths, key id), so a block moved to another file or position, or a
//! header edited, fails authentication like a damaged byte does.
//!
//! Deliberately absent: a KMS client of our own (the plug-in is the interface; a local file is
//! the built-in implementation), and encryption of object pools' shards (their bucket's own encryption covers
//! them; such a node refuses `[encryption]`).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use std::path::{Path, PathBuf};

/// Bytes of a key (KEK or data key).
pub const KEY_BYTES: usize = 32;
/// Bytes of an AES-GCM authentication tag.
pub const TAG_BYTES: usize = 16;
/// Most data keys a keyring holds.
pub const KEYS_MAX: usize = 1024;
/// The keyring file of a drive.
pub const KEYRING_FILE: &str = "keyring";
/// Longest wrapped key a KMS plug-in may print, in bytes.
pub const WRAPPED_BYTES_MAX: usize = 4096;
/// How long a KMS plug-in may take to answer one call.
pub const KMS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Most bytes of a failed plug-in's standard error quoted in the error.
const KMS_STDERR_BYTES_MAX: usize = 512;
const MAGIC: [u8; 4] = *b"TRKR";
const VERSION: u16 = 1;
const VERSION_KMS: u16 = 2;
const CHECK_BYTES: usize = 16;
const CHECK_CONTEXT: &[u8] = b"trove key check";
const ENTRY_BYTES: usize = 4 + 12 + KEY_BYTES + TAG_BYTES;
const WRAP_AAD: &[u8] = b"trove data key";

/// Errors of keys and keyrings.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CryptError {
    #[error("cannot read the key file {path}: {reason}")]
    KeyFile { path: PathBuf, reason: String },
    #[error("the key file {path} must hold a 256-bit key as 64 hexadecimal digits; {found}")]
    KeyFormat { path: PathBuf, found: String },
    #[error("the keyring {path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    #[error("the key file does not open the keyring {path}: data key {id} fails to unwrap (another key file, or the keyring was re-keyed)")]
    WrongKey { path: PathBuf, id: u32 },
    #[error("cannot write {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("the keyring {path} is full ({KEYS_MAX} data keys)")]
    Full { path: PathBuf },
    #[error("the system's random source failed")]
    Random,
    #[error("the KMS plug-in {command} failed: {reason}")]
    Kms { command: String, reason: String },
    #[error("the KMS plug-in {command} unwrapped data key {id} of {path} to another key than it wrapped (another KMS key, or a damaged keyring)")]
    KmsMismatch { command: String, path: PathBuf, id: u32 },
    #[error("the keyring {path} is wrapped by {found}, and this node is configured with {configured}: re-key it (trove encryption rekey) or configure the other")]
    WrapKind { path: PathBuf, found: &'static str, configured: &'static str },
}

fn random<const N: usize>() -> Result<[u8; N], CryptError> {
    let mut out = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out).map_err(|_| CryptError::Random)?;
    Ok(out)
}

fn aes_key(bytes: &[u8; KEY_BYTES]) -> LessSafeKey {
    // A 32-byte key is always a valid AES-256 key.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, bytes).expect("32 bytes make an AES-256 key"))
}

/// An external key management service reached through a plug-in command (see the module
/// documentation for the interface).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KmsPlugin {
    /// The program and its arguments, before `wrap ID` / `unwrap ID`.
    pub argv: Vec<String>,
}

impl KmsPlugin {
    fn name(&self) -> String {
        self.argv.first().cloned().unwrap_or_default()
    }

    fn fail(&self, reason: String) -> CryptError {
        CryptError::Kms { command: self.name(), reason }
    }

    /// Runs `op ID` with `input` and a newline on standard input; returns the first line of
    /// standard output, checked to be printable ASCII of at most [`WRAPPED_BYTES_MAX`] bytes.
    fn call(&self, op: &str, id: u32, input: &str) -> Result<String, CryptError> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let Some((program, args)) = self.argv.split_first() else {
            return Err(self.fail("kms_command is empty".into()));
        };
        let mut child = Command::new(program)
            .args(args)
            .args([op, &id.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.fail(format!("cannot run it: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // A plug-in that exits without reading is judged by its status below.
            let _ = stdin.write_all(format!("{input}\n").as_bytes());
        }
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let output = match rx.recv_timeout(KMS_TIMEOUT) {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Err(self.fail(format!("cannot wait for it: {e}"))),
            Err(_) => {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                return Err(self.fail(format!("no answer to {op} {id} within {} s; killed", KMS_TIMEOUT.as_secs())));
            }
        };
        if !output.status.success() {
            let mut err = String::from_utf8_lossy(&output.stderr).trim().to_string();
            if err.len() > KMS_STDERR_BYTES_MAX {
                let mut cut = KMS_STDERR_BYTES_MAX;
                while !err.is_char_boundary(cut) {
                    cut -= 1;
                }
                err.truncate(cut);
            }
            return Err(self.fail(format!("{op} {id}: {}: {err}", output.status)));
        }
        let text = String::from_utf8_lossy(&output.stdout);
        let line = text.lines().next().unwrap_or("").trim().to_string();
        if line.is_empty() || line.len() > WRAPPED_BYTES_MAX || !line.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(self.fail(format!(
                "{op} {id}: it printed no line of 1 to {WRAPPED_BYTES_MAX} printable ASCII characters"
            )));
        }
        Ok(line)
    }
}

enum Wrap {
    /// A key file's key.
    Local(LessSafeKey),
    Kms(KmsPlugin),
}

/// A key-encryption key: a key file's, or one an external KMS keeps (reached through its
/// plug-in).
pub struct Kek(Wrap);

/// The check value of data key `key` with id `id` (keyring version 2).
fn check_value(id: u32, key: &[u8; KEY_BYTES]) -> [u8; CHECK_BYTES] {
    let tag = ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key),
        &[CHECK_CONTEXT, &id.to_le_bytes()].concat(),
    );
    let mut out = [0u8; CHECK_BYTES];
    out.copy_from_slice(&tag.as_ref()[..CHECK_BYTES]);
    out
}

fn hex_of(key: &[u8; KEY_BYTES]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn key_of_hex(hex: &str) -> Option<[u8; KEY_BYTES]> {
    if hex.len() != 2 * KEY_BYTES {
        return None;
    }
    let mut key = [0u8; KEY_BYTES];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Where a node's key-encryption key comes from (`[encryption]` of its configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// A key file (`key_file`).
    File(PathBuf),
    /// A KMS plug-in (`kms_command`: the program and its arguments).
    Kms(Vec<String>),
}

impl Kek {
    /// The KEK `source` names: a key file read, or a KMS plug-in to call.
    pub fn from_source(source: &KeySource) -> Result<Kek, CryptError> {
        match source {
            KeySource::File(path) => Kek::from_file(path),
            KeySource::Kms(argv) => Ok(Kek::kms(argv.clone())),
        }
    }

    /// The KEK an external KMS keeps, reached through the plug-in `argv`.
    pub fn kms(argv: Vec<String>) -> Kek {
        Kek(Wrap::Kms(KmsPlugin { argv }))
    }

    /// What wraps keys, in words.
    fn kind(&self) -> &'static str {
        match self.0 {
            Wrap::Local(_) => "a key file",
            Wrap::Kms(_) => "a KMS plug-in",
        }
    }

    /// Reads the KEK from a key file (64 hex digits; surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Kek, CryptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CryptError::KeyFile { path: path.to_path_buf(), reason: e.to_string() })?;
        Kek::parse_hex(text.trim()).map_err(|found| CryptError::KeyFormat { path: path.to_path_buf(), found })
    }

    /// The KEK written as 64 hexadecimal digits; the error says what is wrong with `hex`.
    pub fn parse_hex(hex: &str) -> Result<Kek, String> {
        if hex.len() != 2 * KEY_BYTES {
            return Err(format!("it holds {} characters", hex.len()));
        }
        let mut key = [0u8; KEY_BYTES];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("x"), 16)
                .map_err(|_| format!("character {} is not a hexadecimal digit", 2 * i + 1))?;
        }
        Ok(Kek(Wrap::Local(aes_key(&key))))
    }

    /// Writes a new random KEK to `path` (mode 0600; it must not exist).
    pub fn generate_file(path: &Path) -> Result<(), CryptError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let key: [u8; KEY_BYTES] = random()?;
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let werr = |e: std::io::Error| CryptError::Write { path: path.to_path_buf(), reason: e.to_string() };
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(werr)?;
        f.write_all(format!("{hex}\n").as_bytes()).and_then(|_| f.sync_all()).map_err(werr)
    }
}

/// The data keys of one drive.
pub struct Keyring {
    path: PathBuf,
    /// (id, key bytes, key), oldest first.
    keys: Vec<(u32, [u8; KEY_BYTES], LessSafeKey)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring").field("path", &self.path).field("keys", &self.keys.len()).finish()
    }
}

impl Keyring {
    /// Opens the keyring of the drive at `root` with `kek`, creating it with one new data key
    /// when the drive has none.
    pub fn open_or_create(root: &Path, kek: &Kek) -> Result<Keyring, CryptError> {
        let path = root.join(KEYRING_FILE);
        if path.exists() {
            return Keyring::open(root, kek);
        }
        let key: [u8; KEY_BYTES] = random()?;
        let ring = Keyring { path, keys: vec![(1, key, aes_key(&key))] };
        ring.save(kek)?;
        Ok(ring)
    }

    /// Opens the keyring of the drive at `root` with `kek`.
    pub fn open(root: &Path, kek: &Kek) -> Result<Keyring, CryptError> {
        let path = root.join(KEYRING_FILE);
        let bytes =
            std::fs::read(&path).map_err(|e| CryptError::KeyFile { path: path.clone(), reason: e.to_string() })?;
        Keyring::decode(&path, &bytes, kek)
    }

    /// Decodes and unwraps a keyring file's bytes. Never panics on any input.
    pub fn decode(path: &Path, bytes: &[u8], kek: &Kek) -> Result<Keyring, CryptError> {
        let damaged = |reason: String| CryptError::Damaged { path: path.to_path_buf(), reason };
        if bytes.len() < 12 {
            return Err(damaged(format!("{} bytes, fewer than a keyring's 12", bytes.len())));
        }
        if bytes[..4] != MAGIC {
            return Err(damaged("not a keyring (bad magic)".into()));
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        let count = usize::from(u16::from_le_bytes([bytes[6], bytes[7]]));
        if version != VERSION && version != VERSION_KMS {
            return Err(damaged(format!(
                "keyring version {version}; this build reads versions {VERSION} and {VERSION_KMS}"
            )));
        }
        if count == 0 || count > KEYS_MAX {
            return Err(damaged(format!("{count} data keys (1 ..= {KEYS_MAX})")));
        }
        let local = match (&kek.0, version) {
            (Wrap::Local(k), VERSION) => k,
            (Wrap::Kms(plugin), VERSION_KMS) => return Keyring::decode_kms(path, bytes, count, plugin),
            (_, v) => {
                let found = if v == VERSION { "a key file" } else { "a KMS plug-in" };
                return Err(CryptError::WrapKind { path: path.to_path_buf(), found, configured: kek.kind() });
            }
        };
        let body = 8 + count * ENTRY_BYTES;
        if bytes.len() != body + 4 {
            return Err(damaged(format!("{} bytes; {count} data keys make {}", bytes.len(), body + 4)));
        }
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[body..]);
        if crc32c::crc32c(&bytes[..body]) != u32::from_le_bytes(crc) {
            return Err(damaged("checksum mismatch".into()));
        }
        let mut keys: Vec<(u32, [u8; KEY_BYTES], LessSafeKey)> = Vec::with_capacity(count);
        for entry in bytes[8..body].chunks_exact(ENTRY_BYTES) {
            let mut id = [0u8; 4];
            id.copy_from_slice(&entry[..4]);
            let id = u32::from_le_bytes(id);
            if keys.last().is_some_and(|(last, _, _)| *last >= id) {
                return Err(damaged(format!("data key ids out of order at {id}")));
            }
            let mut nonce = [0u8; 12];
            nonce.copy_from_slice(&entry[4..16]);
            let mut sealed = entry[16..].to_vec();
            let aad = [WRAP_AAD, &id.to_le_bytes()].concat();
            let opened = local
                .open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), &mut sealed)
                .map_err(|_| CryptError::WrongKey { path: path.to_path_buf(), id })?;
            let mut key = [0u8; KEY_BYTES];
            key.copy_from_slice(opened);
            keys.push((id, key, aes_key(&key)));
        }
        Ok(Keyring { path: path.to_path_buf(), keys })
    }

    /// Decodes a version 2 keyring (`count` keys), unwrapping each key through `plugin`.
    fn decode_kms(path: &Path, bytes: &[u8], count: usize, plugin: &KmsPlugin) -> Result<Keyring, CryptError> {
        let damaged = |reason: String| CryptError::Damaged { path: path.to_path_buf(), reason };
        let body = bytes.len() - 4;
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[body..]);
        if crc32c::crc32c(&bytes[..body]) != u32::from_le_bytes(crc) {
            return Err(damaged("checksum mismatch".into()));
        }
        // Every entry is read before the plug-in is asked anything.
        let mut entries: Vec<(u32, [u8; CHECK_BYTES], &str)> = Vec::with_capacity(count);
        let mut at = 8;
        for _ in 0..count {
            let fixed = 4 + CHECK_BYTES + 2;
            let Some(head) = bytes.get(at..at + fixed).filter(|_| at + fixed <= body) else {
                return Err(damaged(format!("{count} data keys announced, the file ends at entry {}", entries.len())));
            };
            let id = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let mut check = [0u8; CHECK_BYTES];
            check.copy_from_slice(&head[4..4 + CHECK_BYTES]);
            let len = usize::from(u16::from_le_bytes([head[4 + CHECK_BYTES], head[5 + CHECK_BYTES]]));
            at += fixed;
            if len == 0 || len > WRAPPED_BYTES_MAX || at + len > body {
                return Err(damaged(format!("data key {id}: a wrapped key of {len} bytes")));
            }
            let wrapped = std::str::from_utf8(&bytes[at..at + len])
                .ok()
                .filter(|w| w.bytes().all(|b| (0x20..0x7f).contains(&b)))
                .ok_or_else(|| damaged(format!("data key {id}: the wrapped key is not printable ASCII")))?;
            at += len;
            if entries.last().is_some_and(|(last, _, _)| *last >= id) {
                return Err(damaged(format!("data key ids out of order at {id}")));
            }
            entries.push((id, check, wrapped));
        }
        if at != body {
            return Err(damaged(format!("{} bytes after the last data key", body - at)));
        }
        let mut keys = Vec::with_capacity(count);
        for (id, check, wrapped) in entries {
            let answer = plugin.call("unwrap", id, wrapped)?;
            let key = key_of_hex(&answer)
                .ok_or_else(|| plugin.fail(format!("unwrap {id}: it printed no 64 hexadecimal digits")))?;
            if check_value(id, &key) != check {
                return Err(CryptError::KmsMismatch { command: plugin.name(), path: path.to_path_buf(), id });
            }
            keys.push((id, key, aes_key(&key)));
        }
        Ok(Keyring { path: path.to_path_buf(), keys })
    }

    /// The keyring's bytes, every data key wrapped by `kek` (a key file's: version 1, with a
    /// fresh nonce each; a KMS plug-in's: version 2).
    fn encode(&self, kek: &Kek) -> Result<Vec<u8>, CryptError> {
        let local = match &kek.0 {
            Wrap::Local(k) => k,
            Wrap::Kms(plugin) => return self.encode_kms(plugin),
        };
        let mut out = Vec::with_capacity(12 + self.keys.len() * ENTRY_BYTES);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.keys.len() as u16).to_le_bytes());
        for (id, key, _) in &self.keys {
            let nonce: [u8; 12] = random()?;
            let mut sealed = key.to_vec();
            let aad = [WRAP_AAD, &id.to_le_bytes()].concat();
            local
                .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(&aad), &mut sealed)
                .map_err(|_| CryptError::Random)?;
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&nonce);
            out.extend_from_slice(&sealed);
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    fn encode_kms(&self, plugin: &KmsPlugin) -> Result<Vec<u8>, CryptError> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION_KMS.to_le_bytes());
        out.extend_from_slice(&(self.keys.len() as u16).to_le_bytes());
        for (id, key, _) in &self.keys {
            let wrapped = plugin.call("wrap", *id, &hex_of(key))?;
            if wrapped.contains(&hex_of(key)) {
                return Err(plugin.fail(format!("wrap {id}: it printed the data key itself")));
            }
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&check_value(*id, key));
            out.extend_from_slice(&(wrapped.len() as u16).to_le_bytes());
            out.extend_from_slice(wrapped.as_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Writes the keyring whole (temporary file, fsync, rename, fsync of the directory).
    fn save(&self, kek: &Kek) -> Result<(), CryptError> {
        use std::io::Write as _;
        let bytes = self.encode(kek)?;
        let werr = |e: std::io::Error| CryptError::Write { path: self.path.clone(), reason: e.to_string() };
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(werr)?;
        f.write_all(&bytes).and_then(|_| f.sync_all()).map_err(werr)?;
        std::fs::rename(&tmp, &self.path).map_err(werr)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(werr)?;
        }
        Ok(())
    }

    /// Wraps every data key with `new` instead of the KEK it was opened with (and, with
    /// `add_key`, adds a new data key for the shards written from now on); no shard changes.
    pub fn rekey(&mut self, new: &Kek, add_key: bool) -> Result<(), CryptError> {
        if add_key {
            if self.keys.len() >= KEYS_MAX {
                return Err(CryptError::Full { path: self.path.clone() });
            }
            let id = self.keys.last().map_or(1, |(id, _, _)| id + 1);
            let key: [u8; KEY_BYTES] = random()?;
            self.keys.push((id, key, aes_key(&key)));
        }
        self.save(new)
    }

    /// How many data keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds no key (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The data key new shards are sealed with, and its id.
    pub fn active(&self) -> (u32, &LessSafeKey) {
        let (id, _, key) = self.keys.last().expect("a keyring holds at least one key");
        (*id, key)
    }

    /// The data key with id `id`.
    pub fn key(&self, id: u32) -> Option<&LessSafeKey> {
        self.keys.iter().find(|(i, _, _)| *i == id).map(|(_, _, k)| k)
    }

    /// The keyring's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Seals and opens the parts of one shard file: its key, the random nonce prefix of the file
/// and the header bytes every part is bound to.
pub struct ShardSeal<'a> {
    pub key: &'a LessSafeKey,
    pub nonce_prefix: [u8; 8],
    pub header: &'a [u8],
}

/// The counter of the block crc table's nonce (blocks count from 0, at most 1,024 of them).
const TABLE_COUNTER: u32 = u32::MAX;

impl ShardSeal<'_> {
    fn nonce(&self, counter: u32) -> Nonce {
        let mut n = [0u8; 12];
        n[..8].copy_from_slice(&self.nonce_prefix);
        n[8..].copy_from_slice(&counter.to_le_bytes());
        Nonce::assume_unique_for_key(n)
    }

    /// `plain` sealed as part `counter`, its tag appended.
    fn seal(&self, counter: u32, plain: &[u8], out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(plain);
        let tag = self
            .key
            .seal_in_place_separate_tag(self.nonce(counter), Aad::from(self.header), &mut out[at..])
            .expect("AES-GCM seals any part shorter than 64 GiB");
        out.extend_from_slice(tag.as_ref());
    }

    /// Seals the block crc table: its bytes and tag.
    pub fn seal_table(&self, table: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(table.len() + TAG_BYTES);
        self.seal(TABLE_COUNTER, table, &mut out);
        out
    }

    /// Opens a sealed block crc table (its bytes and tag); `None` if it fails authentication.
    pub fn open_table(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        let mut buf = sealed.to_vec();
        let plain = self.key.open_in_place(self.nonce(TABLE_COUNTER), Aad::from(self.header), &mut buf).ok()?;
        Some(plain.to_vec())
    }

    /// Seals shard data block by block: each block followed by its tag.
    pub fn seal_data(&self, data: &[u8], block_bytes: usize) -> Vec<u8> {
        let blocks = data.len().div_ceil(block_bytes);
        let mut out = Vec::with_capacity(data.len() + blocks * TAG_BYTES);
        for (i, block) in data.chunks(block_bytes).enumerate() {
            self.seal(i as u32, block, &mut out);
        }
        out
    }

    /// Opens consecutive sealed blocks in place, the first being block `first`: afterwards the
    /// plaintext is at the start of `stored` and its length is returned. `Err(block)` names the
    /// first block that fails authentication.
    pub fn open_blocks(&self, first: u32, stored: &mut [u8], block_bytes: usize) -> Result<usize, u32> {
        let unit = block_bytes + TAG_BYTES;
        let mut plain = 0;
        let mut at = 0;
        let mut index = first;
        while at < stored.len() {
            let end = (at + unit).min(stored.len());
            let opened = self
                .key
                .open_in_place(self.nonce(index), Aad::from(self.header), &mut stored[at..end])
                .map_err(|_| index)?
                .len();
            stored.copy_within(at..at + opened, plain);
            plain += opened;
            at = end;
            index += 1;
        }
        Ok(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kek(byte: u8) -> Kek {
        Kek::parse_hex(&format!("{byte:02x}").repeat(32)).expect("kek")
    }

    #[test]
    fn key_files_hold_64_hex_digits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("kek");
        Kek::generate_file(&path).expect("generate");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.trim().len(), 64);
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        Kek::from_file(&path).expect("a generated key file reads back");
        assert!(Kek::generate_file(&path).is_err(), "an existing key file is never replaced");
        std::fs::write(&path, "abcd\n").expect("write");
        let e = Kek::from_file(&path).err().expect("short").to_string();
        assert!(e.contains("64 hexadecimal digits") && e.contains("4 characters"), "{e}");
        std::fs::write(&path, "zz".repeat(32)).expect("write");
        let e = Kek::from_file(&path).err().expect("not hex").to_string();
        assert!(e.contains("character 1 is not a hexadecimal digit"), "{e}");
        let e = Kek::from_file(&dir.path().join("absent")).err().expect("absent").to_string();
        assert!(e.contains("cannot read the key file"), "{e}");
    }

    #[test]
    fn a_keyring_opens_with_its_kek_only_and_rekeying_keeps_every_data_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ring = Keyring::open_or_create(dir.path(), &kek(1)).expect("create");
        let (id, key) = ring.active();
        assert_eq!(id, 1);
        let header = [7u8; 48];
        let seal = ShardSeal { key, nonce_prefix: [3; 8], header: &header };
        let sealed = seal.seal_data(b"some data", 4);

        let again = Keyring::open(dir.path(), &kek(1)).expect("reopen");
        let seal = ShardSeal { key: again.key(1).expect("key 1"), nonce_prefix: [3; 8], header: &header };
        let mut buf = sealed.clone();
        let n = seal.open_blocks(0, &mut buf, 4).expect("opens");
        assert_eq!(&buf[..n], b"some data");
        let e = Keyring::open(dir.path(), &kek(2)).expect_err("another kek").to_string();
        assert!(e.contains("does not open the keyring") && e.contains("data key 1"), "{e}");

        ring.rekey(&kek(2), true).expect("rekey");
        assert!(Keyring::open(dir.path(), &kek(1)).is_err(), "the old kek no longer opens it");
        let rekeyed = Keyring::open(dir.path(), &kek(2)).expect("the new kek opens it");
        assert_eq!(rekeyed.len(), 2);
        assert_eq!(rekeyed.active().0, 2);
        let seal = ShardSeal { key: rekeyed.key(1).expect("key 1 kept"), nonce_prefix: [3; 8], header: &header };
        let mut buf = sealed;
        let n = seal.open_blocks(0, &mut buf, 4).expect("old shards open with the kept key");
        assert_eq!(&buf[..n], b"some data");
    }

    #[test]
    fn damaged_keyrings_are_refused_by_name_and_never_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        Keyring::open_or_create(dir.path(), &kek(1)).expect("create");
        let path = dir.path().join(KEYRING_FILE);
        let good = std::fs::read(&path).expect("read");
        let mut flipped = good.clone();
        flipped[20] ^= 1;
        let e = Keyring::decode(&path, &flipped, &kek(1)).err().expect("flipped").to_string();
        assert!(e.contains("damaged: checksum mismatch"), "{e}");
        // Every cut and random garbage: an error, never a panic.
        for cut in 0..good.len() {
            assert!(Keyring::decode(&path, &good[..cut], &kek(1)).is_err());
        }
        let mut state = 0x1234_5678_u64;
        for _ in 0..2000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = (state >> 33) as usize % 200;
            let mut bytes: Vec<u8> = (0..len).map(|i| (state >> (i % 56)) as u8).collect();
            if bytes.len() >= 8 && state & 1 == 0 {
                bytes[..4].copy_from_slice(&MAGIC);
                bytes[4..6].copy_from_slice(&VERSION.to_le_bytes());
            }
            assert!(Keyring::decode(&path, &bytes, &kek(1)).is_err());
        }
    }

    #[test]
    fn kms_keyrings_are_read_whole_before_the_plugin_is_asked_and_never_panic() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A plug-in that wraps every key as the same text (enough to write a keyring).
        let wrapper = Kek::kms(vec!["sh".into(), "-c".into(), "read -r line; echo WRAPPED-KEY".into(), "kms".into()]);
        Keyring::open_or_create(dir.path(), &wrapper).expect("create");
        let path = dir.path().join(KEYRING_FILE);
        let good = std::fs::read(&path).expect("read");
        assert_eq!(&good[4..6], &VERSION_KMS.to_le_bytes());
        assert!(good.windows(11).any(|w| w == b"WRAPPED-KEY"));
        // Any damage is found without running the plug-in (`false` would fail if run).
        let never = Kek::kms(vec!["false".into()]);
        for cut in 0..good.len() {
            match Keyring::decode(&path, &good[..cut], &never) {
                Err(CryptError::Damaged { .. }) => {}
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        for at in 8..good.len() {
            let mut flipped = good.clone();
            flipped[at] ^= 0x40;
            assert!(matches!(Keyring::decode(&path, &flipped, &never), Err(CryptError::Damaged { .. })), "byte {at}");
        }
        // Whole, it asks the plug-in, and a failing one is named with its status.
        let e = Keyring::decode(&path, &good, &never).err().expect("false fails").to_string();
        assert!(e.contains("the KMS plug-in false failed: unwrap 1: exit status: 1"), "{e}");
        // The wrapped text is not a key: the plug-in's answer must be 64 hexadecimal digits.
        let echo = Kek::kms(vec!["sh".into(), "-c".into(), "read -r line; echo \"$line\"".into(), "kms".into()]);
        let e = Keyring::decode(&path, &good, &echo).err().expect("not a key").to_string();
        assert!(e.contains("printed no 64 hexadecimal digits"), "{e}");
        // A key file's KEK on a KMS keyring, and the other way round.
        let e = Keyring::decode(&path, &good, &kek(1)).err().expect("kind").to_string();
        assert!(e.contains("wrapped by a KMS plug-in, and this node is configured with a key file"), "{e}");
    }

    #[test]
    fn sealed_parts_are_bound_to_their_key_header_and_place() {
        let header = [9u8; 48];
        let key = aes_key(&[5; 32]);
        let seal = ShardSeal { key: &key, nonce_prefix: [1; 8], header: &header };
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let sealed = seal.seal_data(&data, 256);
        assert_eq!(sealed.len(), data.len() + 4 * TAG_BYTES);
        assert!(!sealed.windows(16).any(|w| data.windows(16).any(|d| d == w)), "ciphertext shows plaintext");
        // Blocks 1 ..= 2 alone.
        let unit = 256 + TAG_BYTES;
        let mut part = sealed[unit..3 * unit].to_vec();
        let n = seal.open_blocks(1, &mut part, 256).expect("opens");
        assert_eq!(&part[..n], &data[256..768]);
        // Opened as another block, under another header or key, or flipped: refused.
        let mut wrong_place = sealed[unit..2 * unit].to_vec();
        assert_eq!(seal.open_blocks(2, &mut wrong_place, 256), Err(2));
        let other_header = [8u8; 48];
        let elsewhere = ShardSeal { key: &key, nonce_prefix: [1; 8], header: &other_header };
        assert_eq!(elsewhere.open_blocks(0, &mut sealed.clone(), 256), Err(0));
        let other_key = aes_key(&[6; 32]);
        let stolen = ShardSeal { key: &other_key, nonce_prefix: [1; 8], header: &header };
        assert_eq!(stolen.open_blocks(0, &mut sealed.clone(), 256), Err(0));
        let mut flipped = sealed.clone();
        flipped[3 * unit + 5] ^= 0x80;
        assert_eq!(seal.open_blocks(0, &mut flipped, 256), Err(3));
        let table = seal.seal_table(b"0123456789abcdef");
        assert_eq!(seal.open_table(&table).as_deref(), Some(&b"0123456789abcdef"[..]));
        assert_eq!(elsewhere.open_table(&table), None);
    }
}
