//! How fast this machine seals with AES-256-GCM (ring), the cipher of the cluster's TLS and of
//! encryption at rest, against a plain memory copy: one core, 1 GiB in 16 KiB parts (a TLS
//! record's size) and in 64 KiB parts (a shard block's). The floor of what either can cost.
//!
//!   cargo run --release -p storage --example seal_speed

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use std::time::Instant;

const TOTAL_BYTES: usize = 1 << 30;

fn main() {
    let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7u8; 32]).expect("a 32-byte key"));
    for part in [16 << 10, 64 << 10] {
        let mut buf = vec![1u8; part];
        let parts = TOTAL_BYTES / part;
        let started = Instant::now();
        for i in 0..parts {
            let mut nonce = [0u8; 12];
            nonce[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let tag = key
                .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), &mut buf)
                .expect("seals");
            let _ = std::hint::black_box(tag);
        }
        let sealed = TOTAL_BYTES as f64 / started.elapsed().as_secs_f64() / 1e9;
        let mut copy = vec![0u8; part];
        let started = Instant::now();
        for _ in 0..parts {
            copy.copy_from_slice(&buf);
            std::hint::black_box(&copy);
        }
        let copied = TOTAL_BYTES as f64 / started.elapsed().as_secs_f64() / 1e9;
        println!("{} KiB parts: AES-256-GCM seal {sealed:.2} GB/s, memory copy {copied:.2} GB/s", part >> 10);
    }
}
