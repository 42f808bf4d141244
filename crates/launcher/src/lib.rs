//! The local cluster launcher: a cluster of real `trove` processes (one metadata service and N
//! storage nodes on loopback) in a directory of its own, with its configs, logs, state file and
//! TLS authority. `trove cluster`, `trove demo` and `trove bench` start clusters through it, and
//! the other commands find a local cluster's metadata address and admin credential through it.
//!
//! It runs the processes, never the services' code: every process it starts is the executable
//! that called it (`std::env::current_exe`), given a role.

pub mod cluster;
pub mod credentials;
