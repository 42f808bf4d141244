//! The simulated network: carries every RPC between the cluster's services, and decides from
//! its own seeded generator what arrives, when, twice or never.
//!
//! It implements [`wire::world::Network`], so the services' real transport code hands it whole
//! requests ([`wire::Peer`] and [`wire::Connection`] on a [`wire::world::Net::Simulated`]
//! endpoint). Each request is answered on a task of its own at the receiving host, as a TCP
//! server would, so a caller that gives up does not cancel work the server already started.
//!
//! Faults, each drawn per message: a request or a reply lost (the connection breaks, as TCP
//! shows a bad link: the caller gets a reset, not knowing whether its request ran), delivered
//! late (reordering whatever else is in flight), or delivered twice (as a client's retry after
//! a lost reply would). Links can be cut (both ways: calls across hang until the caller's
//! timeout) and healed; a crashed host refuses connections and loses the requests it was
//! answering.

use crate::trace::Trace;
use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use wire::world::{Answer, Network, Request};
use wire::{Hello, RpcError, Service};

/// How often, per thousand messages, each fault strikes, and how late a message may arrive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    pub drop_per_mille: u32,
    pub duplicate_per_mille: u32,
    pub delay_max_ms: u64,
}

impl Faults {
    /// A network that delivers everything at once, in order.
    pub const NONE: Faults = Faults { drop_per_mille: 0, duplicate_per_mille: 0, delay_max_ms: 0 };
}

/// A service listening at an address.
struct Host {
    service: Service,
    cluster: String,
    /// `None` while the process is down.
    answer: Option<Answer>,
    /// The requests it is answering, aborted if it crashes.
    running: Vec<tokio::task::AbortHandle>,
}

/// What happened to messages, for the run's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub requests: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub refused: u64,
    pub cut: u64,
}

struct State {
    rng: StdRng,
    hosts: BTreeMap<String, Host>,
    /// Cut links, each pair in order.
    cut: BTreeSet<(String, String)>,
    faults: Faults,
    stats: NetStats,
}

/// The network of one simulation.
pub struct SimNet {
    state: Mutex<State>,
    trace: Arc<Trace>,
    /// Itself, for the tasks of duplicated requests.
    this: std::sync::Weak<SimNet>,
}

/// The fate drawn for one request.
struct Plan {
    drop_request: bool,
    drop_reply: bool,
    duplicate: bool,
    there_ms: u64,
    back_ms: u64,
    duplicate_ms: u64,
}

fn link(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

/// The operation, for the trace: its name, and for shard operations the shards.
fn op_name(service: Service, body: &[u8]) -> String {
    let short = |k: &wire::ShardKey| format!("{:x}/{}", k.chunk, k.index);
    match service {
        Service::Meta => postcard::from_bytes::<wire::MetaCall>(body).map_or("?".into(), |c| c.op.name().to_string()),
        Service::Storage => match postcard::from_bytes::<wire::StorageOp>(body) {
            Ok(wire::StorageOp::PutShard { info }) => format!("PutShard {}", short(&info.key)),
            Ok(wire::StorageOp::GetShard { key, .. }) => format!("GetShard {}", short(&key)),
            Ok(wire::StorageOp::ReadRange { key, .. }) => format!("ReadRange {}", short(&key)),
            Ok(wire::StorageOp::DeleteShards { keys }) => {
                format!("DeleteShards {}", keys.iter().map(short).collect::<Vec<_>>().join(","))
            }
            Ok(op) => op.name().to_string(),
            Err(_) => "?".into(),
        },
    }
}

impl SimNet {
    pub fn new(seed: u64, trace: Arc<Trace>) -> Arc<SimNet> {
        Arc::new_cyclic(|this| SimNet {
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                hosts: BTreeMap::new(),
                cut: BTreeSet::new(),
                faults: Faults::NONE,
                stats: NetStats::default(),
            }),
            trace,
            this: this.clone(),
        })
    }

    /// Starts answering requests for `service` at `addr` (again, after a crash).
    pub fn listen(&self, addr: &str, service: Service, cluster: &str, answer: Answer) {
        let mut state = self.state.lock();
        state.hosts.insert(
            addr.to_string(),
            Host { service, cluster: cluster.to_string(), answer: Some(answer), running: Vec::new() },
        );
    }

    /// The process at `addr` dies: the requests it was answering are lost, and connections to
    /// it are refused until it listens again.
    pub fn crash(&self, addr: &str) {
        let mut state = self.state.lock();
        if let Some(host) = state.hosts.get_mut(addr) {
            host.answer = None;
            for task in host.running.drain(..) {
                task.abort();
            }
        }
    }

    /// Forgets every host. The services hold the network (their endpoints) and the network
    /// holds the services (their answers): a run ends by breaking that cycle, or each run
    /// would keep its services, and their open shard files, until the process exits.
    pub fn close(&self) {
        let hosts = std::mem::take(&mut self.state.lock().hosts);
        for host in hosts.into_values() {
            for task in host.running {
                task.abort();
            }
        }
    }

    /// Cuts the link between `a` and `b`, both ways.
    pub fn cut(&self, a: &str, b: &str) {
        self.state.lock().cut.insert(link(a, b));
    }

    /// Restores every cut link.
    pub fn heal(&self) {
        self.state.lock().cut.clear();
    }

    pub fn set_faults(&self, faults: Faults) {
        self.state.lock().faults = faults;
    }

    pub fn stats(&self) -> NetStats {
        self.state.lock().stats
    }

    fn plan(&self) -> Plan {
        let mut state = self.state.lock();
        let faults = state.faults;
        let rng = &mut state.rng;
        let mut chance = |per_mille: u32| per_mille > 0 && rng.gen_range(0..1000) < per_mille;
        let drop_request = chance(faults.drop_per_mille);
        let drop_reply = chance(faults.drop_per_mille);
        let duplicate = chance(faults.duplicate_per_mille);
        let mut delay = || if faults.delay_max_ms == 0 { 0 } else { rng.gen_range(0..=faults.delay_max_ms) };
        let (there_ms, back_ms, duplicate_ms) = (delay(), delay(), delay());
        Plan { drop_request, drop_reply, duplicate, there_ms, back_ms, duplicate_ms }
    }

    fn is_cut(&self, a: &str, b: &str) -> bool {
        self.state.lock().cut.contains(&link(a, b))
    }

    /// Starts answering a request at `to`, if it is up; the task is aborted if `to` crashes.
    fn deliver(
        &self,
        from: &str,
        to: &str,
        body: Vec<u8>,
        data: Bytes,
    ) -> Option<tokio::task::JoinHandle<(Vec<u8>, Bytes)>> {
        let mut state = self.state.lock();
        let host = state.hosts.get_mut(to)?;
        let answer = host.answer.clone()?;
        // Answered on behalf of the receiving host: its clock, its tasks.
        let task = tokio::spawn(wire::world::on_host(Arc::from(to), answer(Arc::from(from), body, data)));
        host.running.retain(|t| !t.is_finished());
        host.running.push(task.abort_handle());
        Some(task)
    }

    async fn carry(&self, from: &str, to: &str, request: Request) -> Result<(Vec<u8>, Bytes), RpcError> {
        let op = op_name(request.service, &request.body);
        let plan = self.plan();
        self.state.lock().stats.requests += 1;
        self.trace.note(format_args!("net {from} -> {to} {op}"));
        if self.is_cut(from, to) {
            self.state.lock().stats.cut += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: link cut"));
            std::future::pending::<()>().await;
        }
        let reset = || RpcError::Closed { addr: to.to_string(), reason: "connection reset by peer".into() };
        if plan.drop_request {
            // Over TCP a lost message is retransmitted; what a caller sees of a bad link is
            // its connection breaking, with the request unanswered.
            self.state.lock().stats.dropped += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: connection broke, request lost"));
            tokio::time::sleep(Duration::from_millis(plan.there_ms)).await;
            return Err(reset());
        }
        tokio::time::sleep(Duration::from_millis(plan.there_ms)).await;
        if plan.duplicate {
            self.state.lock().stats.duplicated += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: delivered twice"));
            let copy = (request.body.clone(), request.data.clone());
            let (net, from, to) = (self.me(), from.to_string(), to.to_string());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(plan.duplicate_ms)).await;
                if let Some(task) = net.deliver(&from, &to, copy.0, copy.1) {
                    let _ = task.await;
                }
            });
        }
        let Some(task) = self.deliver(from, to, request.body, request.data) else {
            // It went down while the request was on its way: the connection is reset.
            self.state.lock().stats.refused += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: reset, the host is down"));
            return Err(RpcError::Closed { addr: to.to_string(), reason: "connection reset by peer".into() });
        };
        let Ok(reply) = task.await else {
            self.trace.note(format_args!("net {from} -> {to} {op}: the host crashed while answering"));
            return Err(RpcError::Closed { addr: to.to_string(), reason: "connection reset by peer".into() });
        };
        if self.is_cut(from, to) {
            self.state.lock().stats.cut += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: link cut, reply lost"));
            std::future::pending::<()>().await;
        }
        if plan.drop_reply {
            self.state.lock().stats.dropped += 1;
            self.trace.note(format_args!("net {from} -> {to} {op}: connection broke, reply lost"));
            tokio::time::sleep(Duration::from_millis(plan.back_ms)).await;
            return Err(reset());
        }
        tokio::time::sleep(Duration::from_millis(plan.back_ms)).await;
        Ok(reply)
    }

    /// This network, for tasks that outlive a call (the network lives as long as the cluster).
    fn me(&self) -> Arc<SimNet> {
        self.this.upgrade().expect("the network outlives its calls")
    }
}

#[async_trait]
impl Network for SimNet {
    async fn connect(&self, from: &str, to: &str, service: Service) -> Result<Hello, RpcError> {
        let refused = |reason: &str| RpcError::Connect { addr: to.to_string(), reason: reason.to_string() };
        if self.is_cut(from, to) {
            self.state.lock().stats.cut += 1;
            self.trace.note(format_args!("net {from} -> {to} connect: link cut"));
            tokio::time::sleep(wire::rpc::CONNECT_TIMEOUT).await;
            return Err(refused("timed out: no connection (the link is cut)"));
        }
        let state = self.state.lock();
        let host = state.hosts.get(to).filter(|h| h.answer.is_some());
        let Some(host) = host else {
            drop(state);
            self.state.lock().stats.refused += 1;
            self.trace.note(format_args!("net {from} -> {to} connect: refused"));
            return Err(refused("connection refused: nothing listens there"));
        };
        if host.service != service {
            return Err(RpcError::Protocol {
                addr: to.to_string(),
                reason: format!("expected the {service:?} service, found {:?}", host.service),
            });
        }
        Ok(Hello {
            magic: *b"TROV",
            version_min: wire::PROTOCOL_VERSION_MIN,
            version_max: wire::PROTOCOL_VERSION,
            service,
            cluster: host.cluster.clone(),
        })
    }

    async fn call(&self, from: &str, to: &str, request: Request) -> Result<(Vec<u8>, Bytes), RpcError> {
        let waited = request.timeout;
        match tokio::time::timeout(waited, self.carry(from, to, request)).await {
            Ok(result) => result,
            Err(_) => Err(RpcError::Timeout { addr: to.to_string(), timeout_ms: waited.as_millis() as u64 }),
        }
    }
}
