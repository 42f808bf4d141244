//! Helpers shared by the storage integration tests: deterministic shard contents and small
//! assertions, so each test file states only what it checks.

#![allow(dead_code)]

use bytes::Bytes;
use rand::{RngCore, SeedableRng};
use std::path::{Path, PathBuf};
use storage::format;
use wire::{EcScheme, ErrorCode, ShardInfo, ShardKey, WireError};

pub const B: usize = wire::SHARD_BLOCK_BYTES as usize;

/// Deterministic shard content: the same (key, len) always gives the same bytes, so a test (or
/// a crashed child process) can be checked without remembering what was written.
pub fn shard(key: ShardKey, len: usize) -> (ShardInfo, Bytes) {
    let mut rng =
        rand::rngs::StdRng::seed_from_u64(key.chunk.wrapping_mul(31).wrapping_add(u64::from(key.index)) ^ len as u64);
    let mut data = vec![0u8; len];
    rng.fill_bytes(&mut data);
    let info = ShardInfo { key, ec: EcScheme::DEFAULT, len: len as u32, block_crcs: format::block_crcs(&data) };
    (info, Bytes::from(data))
}

pub fn key(chunk: u64, index: u8) -> ShardKey {
    ShardKey { chunk, index }
}

pub fn code(r: Result<impl std::fmt::Debug, WireError>) -> ErrorCode {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code,
    }
}

/// Every file under `<drive>/shards` whose name marks it as a temp file.
pub fn temp_files(drive: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(drive.join("shards")) else {
        return out;
    };
    for d in dirs.flatten() {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if f.file_name().to_string_lossy().starts_with(storage::store::TMP_PREFIX) {
                out.push(f.path());
            }
        }
    }
    out
}
