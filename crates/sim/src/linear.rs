//! Linearizability of namespace operations: clients create (exclusively), unlink and look up
//! a few names in one directory they all share, and the history of what each saw must be
//! explainable by one order of the operations, each taking effect at a single moment between
//! its call and its answer (Herlihy and Wing's linearizability, checked as Wing and Gong
//! search for it, per name: operations on different names commute, and linearizability is
//! local, so each name's history is checked alone).
//!
//! An operation whose answer is an error other than `Exists` or `NotFound` (a timeout, the
//! cluster unavailable) may or may not have taken effect: the search may place it anywhere
//! after its call, or leave it out. A lookup without an answer says nothing and is dropped.

use crate::trace::Trace;
use client::{Client, ErrorCode, Ino};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most events of one name the search takes (the workload stays well below: a longer history
/// is reported, not cut, since a cut history may leave an answer unexplained).
pub const EVENTS_PER_NAME_MAX: usize = 128;

/// The names the clients share, in the shared directory.
const NAMES: usize = 4;

/// An operation on a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An exclusive create.
    Create,
    Unlink,
    Lookup,
}

/// What the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Create: made the file with this inode. Lookup: found it. Unlink: removed it.
    Done(u64),
    Exists,
    NotFound,
    /// No answer the client can rely on: it may have taken effect, once.
    Unknown,
}

/// One operation as a client saw it, in simulated milliseconds.
#[derive(Clone, Debug)]
pub struct Event {
    pub client: usize,
    pub name: String,
    pub op: Op,
    pub called_ms: u64,
    pub answered_ms: u64,
    pub answer: Answer,
}

/// Client `me` creates, unlinks and looks up the names of the shared directory `dir` until
/// `stop`, adding what it saw to `history`.
pub async fn shared_loop(
    me: usize,
    client: Client,
    dir: Ino,
    seed: u64,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Event>>>,
    trace: Arc<Trace>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6c69_6e65 ^ ((me as u64) << 40));
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1000))).await;
        let name = format!("n{}", rng.gen_range(0..NAMES));
        let op = match rng.gen_range(0..10) {
            0..=3 => Op::Create,
            4..=6 => Op::Unlink,
            _ => Op::Lookup,
        };
        let called_ms = trace.elapsed_ms();
        let answer = answer_of(match op {
            Op::Create => client.create(dir, &name, 0o644, true).await.map(|a| a.ino),
            Op::Unlink => client.unlink(dir, &name).await.map(|()| 0),
            Op::Lookup => client.lookup(dir, &name).await.map(|a| a.ino),
        });
        let answered_ms = trace.elapsed_ms();
        trace.note(format_args!("client{me} shared {op:?} {name}: {answer:?}"));
        history.lock().push(Event { client: me, name, op, called_ms, answered_ms, answer });
    }
}

fn answer_of(result: client::Result<u64>) -> Answer {
    match result {
        Ok(ino) => Answer::Done(ino),
        Err(e) if e.code == ErrorCode::Exists => Answer::Exists,
        Err(e) if e.code == ErrorCode::NotFound => Answer::NotFound,
        Err(_) => Answer::Unknown,
    }
}

/// A name's state: absent, or a file with its inode (`None`: made by a create whose answer was
/// lost, so its inode is not known yet).
type State = Option<Option<u64>>;

/// The states `op` may leave `state` in when the client was told `answer` (none: it could not
/// have been told that in this state).
fn step(state: State, op: Op, answer: Answer) -> Vec<State> {
    match (op, answer, state) {
        (Op::Create, Answer::Done(ino), None) => vec![Some(Some(ino))],
        (Op::Create, Answer::Exists, Some(_)) => vec![state],
        (Op::Create, Answer::Unknown, None) => vec![Some(None)],
        (Op::Create, Answer::Unknown, Some(_)) => vec![state],
        (Op::Unlink, Answer::Done(_), Some(_)) => vec![None],
        (Op::Unlink, Answer::NotFound, None) => vec![None],
        (Op::Unlink, Answer::Unknown, _) => vec![None],
        (Op::Lookup, Answer::Done(ino), Some(known)) if known.is_none_or(|k| k == ino) => vec![Some(Some(ino))],
        (Op::Lookup, Answer::NotFound, None) => vec![None],
        _ => Vec::new(),
    }
}

/// Checks every name's history; returns one line per name whose history no order explains.
pub fn check(events: &[Event]) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<&Event>> = BTreeMap::new();
    for event in events {
        if !(event.op == Op::Lookup && event.answer == Answer::Unknown) {
            by_name.entry(event.name.as_str()).or_default().push(event);
        }
    }
    let mut broken = Vec::new();
    for (name, mut history) in by_name {
        history.sort_by_key(|e| (e.called_ms, e.client));
        if history.len() > EVENTS_PER_NAME_MAX {
            broken.push(format!(
                "{name:?}: {} operations, more than the {EVENTS_PER_NAME_MAX} the checker takes",
                history.len()
            ));
            continue;
        }
        let mut search = Search { history: &history, seen: HashSet::new() };
        if !search.explains(0, None) {
            let lines: Vec<String> = history
                .iter()
                .map(|e| format!("client{} {:?} {}..{} ms: {:?}", e.client, e.op, e.called_ms, e.answered_ms, e.answer))
                .collect();
            broken.push(format!("no order explains what the clients saw of {name:?}: {}", lines.join("; ")));
        }
    }
    broken
}

struct Search<'a> {
    history: &'a [&'a Event],
    /// (operations placed, state) pairs already explored.
    seen: HashSet<(u128, State)>,
}

impl Search<'_> {
    fn answered(&self, i: usize) -> bool {
        self.history[i].answer != Answer::Unknown
    }

    /// Whether the operations not in `placed` can be ordered after those in it, from `state`.
    fn explains(&mut self, placed: u128, state: State) -> bool {
        let open = |i: usize| placed & (1 << i) == 0;
        let n = self.history.len();
        if (0..n).all(|i| !open(i) || !self.answered(i)) {
            // Every answered operation placed; the unanswered rest may never have happened.
            return true;
        }
        // The next operation must have been called before every open answered one returned.
        let bound = (0..n).filter(|&i| open(i) && self.answered(i)).map(|i| self.history[i].answered_ms).min();
        for i in (0..n).filter(|&i| open(i)) {
            let event = self.history[i];
            if bound.is_some_and(|b| event.called_ms > b) {
                continue;
            }
            for next in step(state, event.op, event.answer) {
                let key = (placed | 1 << i, next);
                if self.seen.insert(key) && self.explains(key.0, next) {
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(client: usize, op: Op, called_ms: u64, answered_ms: u64, answer: Answer) -> Event {
        Event { client, name: "n".into(), op, called_ms, answered_ms, answer }
    }

    #[test]
    fn sequential_and_overlapping_histories_that_some_order_explains_pass() {
        let history = [
            ev(0, Op::Create, 0, 10, Answer::Done(7)),
            ev(1, Op::Lookup, 20, 30, Answer::Done(7)),
            // Overlapping: the unlink may come before the create's Exists or after it.
            ev(0, Op::Unlink, 40, 60, Answer::Done(7)),
            ev(1, Op::Create, 45, 55, Answer::Exists),
            ev(1, Op::Lookup, 70, 80, Answer::NotFound),
        ];
        assert!(check(&history).is_empty(), "{:?}", check(&history));
    }

    #[test]
    fn an_unknown_outcome_may_have_happened_or_not() {
        let took = [
            ev(0, Op::Create, 0, 10, Answer::Unknown),
            ev(1, Op::Lookup, 20, 30, Answer::Done(9)),
            ev(1, Op::Create, 40, 50, Answer::Exists),
        ];
        assert!(check(&took).is_empty(), "{:?}", check(&took));
        let did_not = [ev(0, Op::Create, 0, 10, Answer::Unknown), ev(1, Op::Create, 20, 30, Answer::Done(4))];
        assert!(check(&did_not).is_empty(), "{:?}", check(&did_not));
        // Once: a lost create and then a found inode, then another create answered as made.
        let twice = [
            ev(0, Op::Create, 0, 10, Answer::Unknown),
            ev(1, Op::Lookup, 20, 30, Answer::Done(9)),
            ev(1, Op::Create, 40, 50, Answer::Done(11)),
        ];
        assert_eq!(check(&twice).len(), 1);
    }

    #[test]
    fn histories_no_order_explains_are_caught() {
        // Two exclusive creates both made the file, with no unlink between.
        let double = [ev(0, Op::Create, 0, 10, Answer::Done(1)), ev(1, Op::Create, 20, 30, Answer::Done(2))];
        assert_eq!(check(&double).len(), 1);
        // A lookup after an unlink had returned still finds the file (a stale read).
        let stale = [
            ev(0, Op::Create, 0, 10, Answer::Done(1)),
            ev(0, Op::Unlink, 20, 30, Answer::Done(1)),
            ev(1, Op::Lookup, 40, 50, Answer::Done(1)),
        ];
        assert_eq!(check(&stale).len(), 1);
        // A create answered Exists though nothing was ever made (a retry applied twice).
        let phantom = [ev(0, Op::Create, 0, 10, Answer::Exists)];
        assert_eq!(check(&phantom).len(), 1);
        // Another inode found than the one made.
        let other = [ev(0, Op::Create, 0, 10, Answer::Done(1)), ev(1, Op::Lookup, 20, 30, Answer::Done(2))];
        assert_eq!(check(&other).len(), 1);
    }

    #[test]
    fn names_are_checked_apart() {
        let mut a = ev(0, Op::Create, 0, 10, Answer::Done(1));
        let mut b = ev(1, Op::Create, 20, 30, Answer::Done(2));
        a.name = "a".into();
        b.name = "b".into();
        assert!(check(&[a, b]).is_empty());
    }
}
