//! See the suite's root, `faults.rs`.
