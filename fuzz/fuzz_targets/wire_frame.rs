//! Fuzz target for the frame decoder: arbitrary bytes never panic, and an accepted frame
//! re-encodes to exactly the bytes it was decoded from.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::frame;

fuzz_target!(|data: &[u8]| {
    if let Ok((f, used)) = frame::decode_frame(data) {
        let mut again = frame::encode(f.header.version, f.header.kind, f.header.request_id, &f.body, f.data.len());
        again.extend_from_slice(&f.data);
        assert_eq!(&again[..], &data[..used]);
    }
});
