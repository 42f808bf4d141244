//! Trove's wire protocol: the types every process shares, the messages of the metadata and
//! storage services, the frame format, and the RPC transport that carries them.
//!
//! This is the only crate the services share. It knows nothing about how services store
//! anything: no disk, no key-value engine, no erasure coding. It also holds the seam a
//! simulator replaces ([`world`]: the wall clock, chance and the network).

pub mod crc;
pub mod error;
pub mod events;
pub mod frame;
pub mod identity;
pub mod ingest;
pub mod jobs;
pub mod msg;
mod opnames;
pub mod pki;
pub mod policy;
pub mod pool;
pub mod records;
pub mod rpc;
pub mod stages;
pub mod tls;
pub mod traffic;
pub mod types;
pub mod world;

pub use error::{ErrorCode, WireError};
pub use events::{Event, ProcessInfo, Severity};
pub use ingest::IngestRule;
pub use jobs::{JobAction, JobInfo, JobProgress, JobState};
pub use msg::*;
pub use policy::{FilePolicy, PolicyAction, PolicyRule};
pub use rpc::{BlockingAnswer, Connection, Handler, Peer, RpcError};
pub use types::*;

/// The protocol version this build speaks (highest).
pub const PROTOCOL_VERSION: u16 = 15;
/// The oldest protocol version this build still speaks.
pub const PROTOCOL_VERSION_MIN: u16 = 15;
