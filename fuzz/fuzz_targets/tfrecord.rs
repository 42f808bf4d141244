//! Fuzz target for reading user datasets: TFRecord framing (`bench::tfrecord::Parser`, which
//! `trove bench train --existing` and the dataset tools run over every shard) and the
//! `tf.train.Example` walk of each record.
//!
//! The first input byte picks how the rest is used: as a raw stream (the framing's length and
//! data checksums are checked), or as record payloads framed properly first (so the Example
//! parser sees arbitrary protobuf). Either way the stream is fed whole and in the pieces the
//! second byte sets, and both feeds must yield the same records and the same verdict.

#![no_main]

use bench::tfrecord::{frame_into, parse_example, Parser};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

/// Records and the verdict of one feed.
fn feed(stream: &[u8], piece: usize) -> (Vec<Bytes>, bool) {
    let mut parser = Parser::default();
    let mut records = Vec::new();
    for part in stream.chunks(piece.max(1)) {
        match parser.feed_bytes(Bytes::copy_from_slice(part)) {
            Ok(r) => records.extend(r),
            Err(_) => return (records, false),
        }
    }
    (records, parser.finish().is_ok())
}

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, piece], rest)) = data.split_first_chunk::<2>() else { return };
    let stream = if mode & 1 == 1 {
        let mut out = BytesMut::new();
        for payload in rest.split(|&b| b == 0xff) {
            frame_into(&mut out, payload);
        }
        out.to_vec()
    } else {
        rest.to_vec()
    };
    let whole = feed(&stream, stream.len());
    let pieces = feed(&stream, usize::from(piece));
    assert_eq!(whole, pieces, "the same stream fed in other pieces reads the same");
    if mode & 1 == 1 {
        assert!(whole.1, "properly framed records are accepted");
        let payloads: Vec<&[u8]> = rest.split(|&b| b == 0xff).collect();
        assert_eq!(whole.0.len(), payloads.len());
        for (record, payload) in whole.0.iter().zip(payloads) {
            assert_eq!(&record[..], payload);
        }
    }
    for record in &whole.0 {
        if let Ok((image_bytes, _)) = parse_example(record) {
            assert!(image_bytes <= record.len(), "an image no longer than its record");
        }
    }
});
