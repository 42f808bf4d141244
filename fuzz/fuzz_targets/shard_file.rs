//! Fuzz target for the shard file decoder: arbitrary bytes as a shard file must never panic,
//! never allocate beyond what the validated header allows, and anything accepted must
//! re-encode to the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use storage::format;

fuzz_target!(|data: &[u8]| {
    if let Ok((header, table)) = format::decode_header(data) {
        assert!(table.len() as u64 == u64::from(header.blocks));
        let encoded = format::encode_header(&header.info(table));
        assert_eq!(&encoded[..], &data[..encoded.len()]);
    }
    if let Ok(info) = format::verify_file(data) {
        assert_eq!(info.len as usize + format::FIXED_HEADER_BYTES + 4 * info.block_crcs.len(), data.len());
    }
});
