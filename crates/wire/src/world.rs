//! The world the services live in: the wall clock, chance and the network, reached through
//! this module so that a deterministic simulator can stand in for all three.
//!
//! In production every function here is the plain thing: [`now`] is `SystemTime::now`,
//! [`random`] is `rand::random` and a [`Peer`](crate::Peer) on [`Net::Tcp`] dials TCP. The
//! cost is one thread-local read per call.
//!
//! The simulator (`crates/sim`) runs a whole cluster on one thread, in a Tokio runtime whose
//! clock is paused (it jumps to the next timer when every task waits). It installs a
//! [`Simulation`] on that thread: then [`now`] is a fixed epoch plus the runtime's virtual
//! time, and [`random`] draws from the simulation's seeded generator. Services given a
//! [`Net::Simulated`] endpoint send their RPCs through the simulator's [`Network`], which
//! decides, from its own seed, what arrives, when, twice or never. Same seed, same run.
//!
//! Monotonic time needs nothing from here: services measure intervals with
//! `tokio::time::Instant`, which is the runtime's clock (virtual under the simulator).
//!
//! A simulation may also plant [`Flaw`]s: deliberate bugs in the services' own code, switched
//! on only under the simulator, so that its checkers can be shown to catch them (FoundationDB
//! and TigerBeetle test their simulators the same way). [`flawed`] is always false without a
//! simulation; no production path can turn a flaw on.
//!
//! Invariant: nothing here changes behaviour without a [`Simulation`] on the thread; code
//! that must be deterministic under the simulator reads the clock and draws chance only here.

use crate::msg::{Hello, Service};
use crate::rpc::RpcError;
use async_trait::async_trait;
use bytes::Bytes;
use rand::distributions::{Distribution, Standard};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A bug planted on purpose in the services' code, on only under a [`Simulation`] that asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flaw {
    /// A storage node answers a shard put at once and writes the shard up to two seconds
    /// later (as a write left to the page cache's writeback would be): a crash in between
    /// loses a shard the writer was told is stored.
    AckBeforeDurable,
    /// The client counts a failed shard put as stored: the chunk is committed without the
    /// shard recorded missing.
    IgnoreFailedShardPut,
    /// Garbage collection forgets that a clone may share the chunk: it deletes shards another
    /// file still references.
    GcIgnoresClones,
    /// A metadata server takes the cluster manager's lease once less than half of it remains,
    /// not once it has expired: two servers may lead at once.
    LeaseBeforeExpiry,
}

impl Flaw {
    pub const ALL: [Flaw; 4] =
        [Flaw::AckBeforeDurable, Flaw::IgnoreFailedShardPut, Flaw::GcIgnoresClones, Flaw::LeaseBeforeExpiry];

    /// The flaw's name on the simulator's command line.
    pub fn name(self) -> &'static str {
        match self {
            Flaw::AckBeforeDurable => "ack-before-durable",
            Flaw::IgnoreFailedShardPut => "ignore-failed-shard-put",
            Flaw::GcIgnoresClones => "gc-ignores-clones",
            Flaw::LeaseBeforeExpiry => "lease-before-expiry",
        }
    }
}

/// What a simulation replaces on its thread.
struct Simulated {
    /// The wall-clock time at `start`.
    epoch: SystemTime,
    /// The runtime's (virtual) instant the simulation began at.
    start: tokio::time::Instant,
    rng: StdRng,
    flaws: Vec<Flaw>,
}

thread_local! {
    static SIMULATED: RefCell<Option<Simulated>> = const { RefCell::new(None) };
}

/// The wall clock: `SystemTime::now()`, or the simulated time under a [`Simulation`].
pub fn now() -> SystemTime {
    SIMULATED.with(|s| match s.borrow().as_ref() {
        Some(sim) => sim.epoch + tokio::time::Instant::now().saturating_duration_since(sim.start),
        None => SystemTime::now(),
    })
}

/// Milliseconds since the Unix epoch by [`now`] (0 for a clock before 1970).
pub fn now_unix_ms() -> u64 {
    now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A random value: `rand::random()`, or the simulation's next draw under a [`Simulation`].
pub fn random<T>() -> T
where
    Standard: Distribution<T>,
{
    SIMULATED.with(|s| match s.borrow_mut().as_mut() {
        Some(sim) => Standard.sample(&mut sim.rng),
        None => rand::random(),
    })
}

/// Whether `flaw` is planted: never outside a [`Simulation`] that planted it.
pub fn flawed(flaw: Flaw) -> bool {
    SIMULATED.with(|s| s.borrow().as_ref().is_some_and(|sim| sim.flaws.contains(&flaw)))
}

/// A simulation installed on the current thread until dropped. Create it inside the
/// simulator's runtime (its clock is the one [`now`] follows).
pub struct Simulation {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Simulation {
    /// Installs a simulation whose wall clock starts at `epoch` and whose chance is seeded by
    /// `seed`. Panics if one is already installed on this thread: simulations do not nest.
    pub fn install(seed: u64, epoch: SystemTime) -> Simulation {
        Simulation::install_flawed(seed, epoch, &[])
    }

    /// As [`Simulation::install`], with `flaws` planted.
    pub fn install_flawed(seed: u64, epoch: SystemTime, flaws: &[Flaw]) -> Simulation {
        SIMULATED.with(|s| {
            let mut s = s.borrow_mut();
            assert!(s.is_none(), "a simulation is already installed on this thread");
            *s = Some(Simulated {
                epoch,
                start: tokio::time::Instant::now(),
                rng: StdRng::seed_from_u64(seed),
                flaws: flaws.to_vec(),
            });
        });
        Simulation { _not_send: std::marker::PhantomData }
    }
}

impl Drop for Simulation {
    fn drop(&mut self) {
        SIMULATED.with(|s| *s.borrow_mut() = None);
    }
}

/// One request on a simulated network.
pub struct Request {
    pub service: Service,
    /// The encoded request (postcard), as the TCP transport would frame it.
    pub body: Vec<u8>,
    pub data: Bytes,
    /// How long the caller waits for the reply.
    pub timeout: Duration,
}

/// A network a simulator controls: it carries requests between endpoints by name.
#[async_trait]
pub trait Network: Send + Sync + 'static {
    /// Opens a connection from `from` to the `service` listening at `to`: the server's hello,
    /// or why not (as the TCP transport would say it).
    async fn connect(&self, from: &str, to: &str, service: Service) -> Result<Hello, RpcError>;

    /// Carries one request from `from` to `to` and its reply back: the encoded
    /// `Result<Reply, WireError>` and the reply's data section.
    async fn call(&self, from: &str, to: &str, request: Request) -> Result<(Vec<u8>, Bytes), RpcError>;
}

/// A process's place on a simulated network: the network and the name it sends from.
#[derive(Clone)]
pub struct Endpoint {
    pub network: Arc<dyn Network>,
    pub name: Arc<str>,
}

/// The network a process's peers are reached over.
#[derive(Clone, Default)]
pub enum Net {
    /// TCP (with TLS where a credential says so): production.
    #[default]
    Tcp,
    /// A simulator's network.
    Simulated(Endpoint),
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Net::Tcp => f.write_str("Tcp"),
            Net::Simulated(e) => write!(f, "Simulated({})", e.name),
        }
    }
}

/// How a service answers a request that arrived over a simulated network: the caller's name,
/// the encoded request and its data in; the encoded result and the reply's data out.
pub type Answer = Arc<dyn Fn(Arc<str>, Vec<u8>, Bytes) -> AnswerFuture + Send + Sync>;
/// The future of an [`Answer`].
pub type AnswerFuture = Pin<Box<dyn Future<Output = (Vec<u8>, Bytes)> + Send>>;

/// The [`Answer`] of `handler`: decodes the request, answers it as the TCP transport would
/// (with the caller known to [`crate::rpc::current_peer`]) and encodes the result.
pub fn answer<H: crate::rpc::Handler>(handler: Arc<H>) -> Answer {
    Arc::new(move |from: Arc<str>, body: Vec<u8>, data: Bytes| {
        let handler = handler.clone();
        Box::pin(crate::rpc::answer_simulated(handler, from, body, data)) as AnswerFuture
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_simulation_replaces_the_clock_and_chance_until_dropped() {
        let epoch = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let draws = |seed| {
            let _sim = Simulation::install(seed, epoch);
            (0..4).map(|_| random::<u64>()).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7), "one seed, one sequence");
        assert_ne!(draws(7), draws(8), "another seed, another sequence");
        {
            let _sim = Simulation::install(1, epoch);
            assert_eq!(now(), epoch);
            tokio::time::sleep(Duration::from_secs(90)).await;
            assert_eq!(now(), epoch + Duration::from_secs(90), "the wall clock follows the virtual one");
            assert_eq!(now_unix_ms(), 1_700_000_090_000);
        }
        {
            let _sim = Simulation::install_flawed(1, epoch, &[Flaw::GcIgnoresClones]);
            assert!(flawed(Flaw::GcIgnoresClones) && !flawed(Flaw::AckBeforeDurable));
        }
        assert!(!flawed(Flaw::GcIgnoresClones), "no flaw outside a simulation");
        let real = now().duration_since(UNIX_EPOCH).expect("after 1970");
        assert!(real > Duration::from_secs(1_700_000_000 + 3600 * 24 * 365), "the real clock is back: {real:?}");
    }
}
