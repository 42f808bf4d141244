//! Fuzz target for the shard file decoder, plaintext (version 1) and sealed (version 2, with a
//! fixed data key): arbitrary bytes as a shard file must never panic, never allocate beyond
//! what the validated header allows, and anything accepted must re-encode to the same bytes.
//! The keyring decoder gets the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use storage::{crypt, format};

/// The data key sealed inputs are opened with (seeds sealed with it reach past the tags).
const KEY: [u8; 32] = [0x42; 32];

fuzz_target!(|data: &[u8]| {
    let key = ring::aead::LessSafeKey::new(
        ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, &KEY).expect("a 32-byte key"),
    );
    if let Ok((header, table)) = format::decode_header(data, None) {
        assert!(table.len() as u64 == u64::from(header.blocks));
        let encoded = format::encode_header(&header.info(table));
        assert_eq!(&encoded[..], &data[..encoded.len()]);
    }
    if let Ok((info, plain)) = format::verify_file(data, Some(&key)) {
        assert_eq!(plain.len(), info.len as usize);
        assert!(data.len() >= plain.len() + format::FIXED_HEADER_BYTES + 4 * info.block_crcs.len());
    }
    if let Ok(kek) = crypt::Kek::parse_hex(&"42".repeat(32)) {
        let _ = crypt::Keyring::decode(std::path::Path::new("fuzz"), data, &kek);
    }
});
