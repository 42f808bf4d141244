//! The test kit of the key-value engines, apart from the trait it tests (as TiKV keeps
//! `engine_traits_tests` apart from `engine_traits`): engines and the code above them take it
//! as a dev-dependency, and no product crate links it.
//!
//! - [`conformance`]: the suite every engine passes unchanged (`conformance_tests!` expands to
//!   one test per case);
//! - [`model_test`]: interleaved random transactions checked against a `BTreeMap` model,
//!   reopening the engine mid-round;
//! - [`crash_test`]: a child process commits numbered transactions until SIGKILLed; every
//!   acknowledged commit must be there afterwards;
//! - [`memory`]: the in-memory reference engine, for unit tests of the code above the trait,
//!   and its deliberately flawed variants, which the suite and the model test must each catch.

/// The trait the kit tests, for the paths `conformance_tests!` expands to.
#[doc(hidden)]
pub use kv;

pub mod conformance;
pub mod crash_test;
pub mod memory;
pub mod model_test;

/// The number in environment variable `name`, if it is set: the replay knobs of the test
/// drivers (`model_test`, `crash_test`).
pub(crate) fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(text.parse().unwrap_or_else(|_| panic!("{name}={text} is not a number")))
}
