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
//! Under a simulation each process is a *host* (its name on the simulated network): code runs
//! on behalf of the host of its task ([`on_host`]; [`spawn`] hands the host on to the tasks a
//! service starts). The simulator may skew a host's wall clock ([`skew_clock`]), as NTP leaves
//! real machines apart, and may stand in for the disk ([`disk`]): the shard store asks before
//! each file operation, so a simulated disk can fail it, fill up, or remember which renames a
//! power loss would undo.
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
use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
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
    /// The shard store answers a put without syncing the directory it renamed the shard
    /// into: a power loss may undo the rename of a shard the writer was told is stored.
    SkipDirSync,
    /// The metadata service forgets the replies of the namespace mutations it applied: a
    /// request retried after its answer was lost is applied again (an exclusive create then
    /// answers that the file exists, an unlink that it is not there).
    ForgetReplies,
}

impl Flaw {
    pub const ALL: [Flaw; 6] = [
        Flaw::AckBeforeDurable,
        Flaw::IgnoreFailedShardPut,
        Flaw::GcIgnoresClones,
        Flaw::LeaseBeforeExpiry,
        Flaw::SkipDirSync,
        Flaw::ForgetReplies,
    ];

    /// The flaw's name on the simulator's command line.
    pub fn name(self) -> &'static str {
        match self {
            Flaw::AckBeforeDurable => "ack-before-durable",
            Flaw::IgnoreFailedShardPut => "ignore-failed-shard-put",
            Flaw::GcIgnoresClones => "gc-ignores-clones",
            Flaw::LeaseBeforeExpiry => "lease-before-expiry",
            Flaw::SkipDirSync => "skip-dir-sync",
            Flaw::ForgetReplies => "forget-replies",
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
    /// Milliseconds each host's wall clock is ahead (negative: behind) of the true one.
    skews_ms: BTreeMap<Arc<str>, i64>,
    disk: Option<Arc<dyn Disk>>,
}

thread_local! {
    static SIMULATED: RefCell<Option<Simulated>> = const { RefCell::new(None) };
}

tokio::task_local! {
    /// The simulated host the current task runs for.
    static HOST: Arc<str>;
}

/// The wall clock: `SystemTime::now()`, or under a [`Simulation`] the simulated time as the
/// current host's (possibly skewed) clock reads it.
pub fn now() -> SystemTime {
    SIMULATED.with(|s| match s.borrow().as_ref() {
        Some(sim) => {
            let t = sim.epoch + tokio::time::Instant::now().saturating_duration_since(sim.start);
            let skew_ms = HOST.try_with(|h| sim.skews_ms.get(h).copied()).ok().flatten().unwrap_or(0);
            let skew = Duration::from_millis(skew_ms.unsigned_abs());
            if skew_ms >= 0 {
                t + skew
            } else {
                t.checked_sub(skew).unwrap_or(UNIX_EPOCH)
            }
        }
        None => SystemTime::now(),
    })
}

/// Sets how far `host`'s wall clock is ahead of the true one (negative: behind). Without a
/// [`Simulation`] on this thread it does nothing: a real clock is what it is.
pub fn skew_clock(host: &str, skew_ms: i64) {
    SIMULATED.with(|s| {
        if let Some(sim) = s.borrow_mut().as_mut() {
            sim.skews_ms.insert(Arc::from(host), skew_ms);
        }
    });
}

/// The simulated host the current task runs for, if any.
pub fn host() -> Option<Arc<str>> {
    HOST.try_with(|h| h.clone()).ok()
}

/// Runs `fut` on behalf of the simulated host `name` (its clock, its disk).
pub async fn on_host<F: Future>(name: Arc<str>, fut: F) -> F::Output {
    HOST.scope(name, fut).await
}

/// Runs `f` on behalf of the simulated host `name`: the tasks it [`spawn`]s run for it too.
pub fn on_host_sync<R>(name: Arc<str>, f: impl FnOnce() -> R) -> R {
    HOST.sync_scope(name, f)
}

/// `tokio::spawn`, except that the new task runs for the current simulated host, if any:
/// services start their background tasks through it so that a simulated host's tasks all see
/// its clock.
pub fn spawn<F>(fut: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match host() {
        Some(name) => tokio::spawn(HOST.scope(name, fut)),
        None => tokio::spawn(fut),
    }
}

/// A file operation of the shard store, as a simulated [`Disk`] is asked about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskOp<'a> {
    /// Create and write a new file (a shard's temporary file).
    Write,
    /// Sync a file's data.
    SyncData,
    /// Rename a file over `to`.
    Rename { to: &'a Path },
    /// Sync a directory (what makes renames and unlinks in it survive a power loss).
    SyncDir,
    /// Read a file.
    Read,
    /// Remove a file.
    Remove,
}

/// A disk a simulator controls: asked before each file operation of the shard store, it may
/// fail the operation (a failing or full disk) and may remember what a power loss would undo.
pub trait Disk: Send + Sync + 'static {
    /// Whether `op` on `path` may go ahead; an error is what the operation fails with.
    fn check(&self, op: DiskOp<'_>, path: &Path) -> std::io::Result<()>;

    /// The free and total bytes of the file system holding `path`, if the disk says (else the
    /// real file system is asked).
    fn space(&self, _path: &Path) -> Option<(u64, u64)> {
        None
    }
}

/// The simulated disk's free and total bytes for `path`, if one is installed and says.
pub fn disk_space(path: &Path) -> Option<(u64, u64)> {
    let disk = SIMULATED.with(|s| s.borrow().as_ref().and_then(|sim| sim.disk.clone()));
    disk.and_then(|disk| disk.space(path))
}

/// Asks the simulated disk, if any, whether `op` on `path` may go ahead: `Ok(())` without a
/// [`Simulation`] or a disk installed in it.
pub fn disk(op: DiskOp<'_>, path: &Path) -> std::io::Result<()> {
    let disk = SIMULATED.with(|s| s.borrow().as_ref().and_then(|sim| sim.disk.clone()));
    match disk {
        Some(disk) => disk.check(op, path),
        None => Ok(()),
    }
}

/// Whether a simulated disk is installed on this thread: a hot path that must build a path to
/// ask [`disk`] asks this first.
pub fn disk_simulated() -> bool {
    SIMULATED.with(|s| s.borrow().as_ref().is_some_and(|sim| sim.disk.is_some()))
}

/// Puts the shard store's file operations on this thread under `disk` for the rest of the
/// [`Simulation`]. Does nothing without one.
pub fn install_disk(disk: Arc<dyn Disk>) {
    SIMULATED.with(|s| {
        if let Some(sim) = s.borrow_mut().as_mut() {
            sim.disk = Some(disk);
        }
    });
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
                skews_ms: BTreeMap::new(),
                disk: None,
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

    /// A disk that refuses every write and counts what it was asked.
    struct FullDisk(std::sync::atomic::AtomicUsize);

    impl Disk for FullDisk {
        fn check(&self, op: DiskOp<'_>, _path: &Path) -> std::io::Result<()> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match op {
                DiskOp::Write => Err(std::io::Error::from_raw_os_error(28)),
                _ => Ok(()),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_simulated_disk_answers_only_while_its_simulation_lasts() {
        let path = Path::new("/nowhere/shard");
        let full = Arc::new(FullDisk(Default::default()));
        install_disk(full.clone());
        assert!(disk(DiskOp::Write, path).is_ok(), "no disk is installed without a simulation");
        {
            let _sim = Simulation::install(3, UNIX_EPOCH);
            assert!(disk(DiskOp::Write, path).is_ok(), "no disk until one is installed");
            install_disk(full.clone());
            let refused = disk(DiskOp::Write, path).expect_err("the disk is full");
            assert_eq!(refused.raw_os_error(), Some(28));
            assert!(disk(DiskOp::Read, path).is_ok());
        }
        assert!(disk(DiskOp::Write, path).is_ok(), "the disk went with the simulation");
        assert_eq!(full.0.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

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
        {
            let _sim = Simulation::install(1, epoch);
            skew_clock("a", 250);
            skew_clock("b", -1500);
            let read = |host: &str| on_host_sync(Arc::from(host), now);
            assert_eq!(read("a"), epoch + Duration::from_millis(250));
            assert_eq!(read("b"), epoch - Duration::from_millis(1500));
            assert_eq!(read("c"), epoch, "a host without a skew reads the true time");
            assert_eq!(now(), epoch, "code on no host reads the true time");
            let spawned = on_host(Arc::from("a"), async { spawn(async { (host(), now()) }).await }).await;
            let (task_host, task_now) = spawned.expect("the task ran");
            assert_eq!(task_host.as_deref(), Some("a"), "a spawned task runs for its spawner's host");
            assert_eq!(task_now, epoch + Duration::from_millis(250));
        }
        skew_clock("a", 1000);
        assert!(host().is_none());
        let real = now().duration_since(UNIX_EPOCH).expect("after 1970");
        assert!(real > Duration::from_secs(1_700_000_000 + 3600 * 24 * 365), "the real clock is back: {real:?}");
    }
}
