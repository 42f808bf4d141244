//! Fuzz target for the message decoders (postcard bodies of every request and reply type):
//! arbitrary bytes never panic, and whatever decodes re-encodes and decodes to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::{Hello, MetaCall, MetaResult, StorageOp, StorageResult};

fn check<T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(v) = postcard::from_bytes::<T>(data) {
        let bytes = postcard::to_allocvec(&v).expect("encodable");
        let back: T = postcard::from_bytes(&bytes).expect("re-decodes");
        assert_eq!(v, back);
    }
}

fuzz_target!(|data: &[u8]| {
    check::<Hello>(data);
    check::<MetaCall>(data);
    check::<MetaResult>(data);
    check::<StorageOp>(data);
    check::<StorageResult>(data);
});
