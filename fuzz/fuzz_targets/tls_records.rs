//! Fuzz target for the record layer of the cluster's TLS sessions (`wire::records`): what a peer
//! sends after the handshake, read through a reader holding fixed keys. Nothing may panic.
//!
//! Input: the first byte picks the mode and how the bytes are read: how many arrive at once
//! (from one byte to all) and how many the caller asks for at once (reads of 64 KiB or more are
//! opened in the caller's buffer, smaller ones copied out of the reader's). Even: the rest is
//! inner plaintexts (two bytes of length, then the bytes: content, content type, padding), each
//! sealed as the next record under the fixed keys (sequence numbers restart after a record that is one key update, as the
//! reader's do), so the fuzzer reaches what the reader does with authenticated content: data,
//! alerts, tickets, key updates, bad content types. When every record is application data
//! within the protocol's limits, what the reader returns must be exactly their contents in order.
//! Odd: the rest is fed to the reader as it is (headers, lengths, forgeries).

#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::records::fuzzing::{open_records, Sealer};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let piece = [1, 1_000, 16_406, 100_000, usize::MAX][usize::from(mode >> 1) % 5];
    let read_bytes = [4_096, 65_536, 1 << 20][usize::from(mode >> 4) % 3];
    if mode % 2 == 1 {
        let _ = open_records(rest, piece, read_bytes);
        return;
    }
    let mut sealer = Sealer::new();
    let mut records = Vec::new();
    let mut expected = Vec::new();
    let mut all_data = true;
    let mut input = rest;
    while input.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([input[0], input[1]])).min(input.len() - 2).min((16 << 10) + 1);
        let inner = &input[2..2 + len];
        input = &input[2 + len..];
        sealer.seal(inner, &mut records);
        match inner.iter().rposition(|&b| b != 0) {
            Some(at) if inner[at] == 23 && at <= 16 << 10 => expected.extend_from_slice(&inner[..at]),
            Some(at) if inner[at] == 22 && (inner[..at] == [24, 0, 0, 1, 0] || inner[..at] == [24, 0, 0, 1, 1]) => {
                all_data = false;
                sealer.restart();
            }
            _ => all_data = false,
        }
    }
    let opened = open_records(&records, piece, read_bytes);
    if all_data {
        assert_eq!(opened.error, None, "application data records were refused");
        assert!(opened.data == expected, "the reader returned other bytes than were sealed");
    }
});
