//! Fuzz target for the write-ahead log of the embedded metadata engine (`kv-redb`), which is
//! replayed from disk at every open: whatever the log holds, replay never panics, and the
//! records it accepts re-encode to exactly the bytes it read them from.
//!
//! Random bytes seldom carry a valid CRC-32C, so when the first input byte is odd the rest is
//! first walked as records and each record's checksum is set right: the decoder's payload
//! parsing and its torn-write and damage rules are then reached, not only the checksum check.

#![no_main]

use kv_redb::fuzzing::{wal_encode, wal_scan};
use libfuzzer_sys::fuzz_target;

/// Sets the checksum of every record whose header and payload fit in `log`.
fn fix_checksums(log: &mut [u8]) {
    let mut pos = 0usize;
    while pos + 16 <= log.len() {
        let len = u32::from_le_bytes(log[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let Some(next) = (pos + 16).checked_add(len).filter(|&n| n <= log.len()) else { break };
        let crc = crc32c::crc32c(&log[pos + 8..next]);
        log[pos + 4..pos + 8].copy_from_slice(&crc.to_le_bytes());
        pos = next;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let Some((applied, rest)) = rest.split_first_chunk::<8>() else { return };
    let applied = u64::from_le_bytes(*applied) % 4;
    let mut log = rest.to_vec();
    if mode & 1 == 1 {
        fix_checksums(&mut log);
    }
    if let Ok((records, end)) = wal_scan(&log, applied) {
        let mut again = Vec::new();
        for (i, (lsn, entries)) in records.iter().enumerate() {
            assert_eq!(*lsn, applied + 1 + i as u64, "records are replayed in order from the checkpoint");
            wal_encode(*lsn, entries, &mut again);
        }
        assert_eq!(again, log[..end], "accepted records re-encode to the bytes they were read from");
    }
});
