//! Linearizability of namespace operations: clients create (exclusively), unlink, rename and
//! look up a few names in directories they all share, and the history of what each was told
//! must be explainable by one order of the operations, each taking effect at a single moment
//! between its call and its answer (Herlihy and Wing's linearizability, checked by Wing and
//! Gong's search with Lowe's memo of the states already explored).
//!
//! The shared names are a few slots: a rename moves a file from one slot to another (within a
//! directory or across the two), so the slots are one object and the whole history is checked
//! at once. Without renames ([`Shared::OneDir`], the workload as first built) every name is
//! checked alone, as linearizability is local.
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

/// Most operations of one history the search takes (a 30 s run has about 100; a longer history
/// is reported, not cut, since a cut history may leave an answer unexplained).
pub const EVENTS_MAX: usize = 2048;

/// The names the clients share.
pub const SLOTS: usize = 4;

/// What the clients share, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// No shared names.
    Off,
    /// One directory of four names; create, unlink and lookup (as first built: the regression
    /// seeds found with it replay it).
    OneDir,
    /// Two directories of two names each; renames within and across them too.
    TwoDirs,
}

impl Shared {
    /// The directories' names under the root.
    pub fn dirs(self) -> &'static [&'static str] {
        match self {
            Shared::Off => &[],
            Shared::OneDir => &["shared"],
            Shared::TwoDirs => &["shared", "shared-b"],
        }
    }

    /// Slot `slot`'s directory (an index into [`Shared::dirs`]) and name.
    fn place(self, slot: usize) -> (usize, String) {
        match self {
            Shared::TwoDirs => (slot / 2, format!("n{}", slot % 2)),
            _ => (0, format!("n{slot}")),
        }
    }
}

/// An operation on the shared slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// An exclusive create.
    Create(usize),
    Unlink(usize),
    Lookup(usize),
    /// From one slot to another, replacing what the target held.
    Rename(usize, usize),
}

impl Op {
    fn slots(self) -> [usize; 2] {
        match self {
            Op::Create(s) | Op::Unlink(s) | Op::Lookup(s) => [s, s],
            Op::Rename(from, to) => [from, to],
        }
    }
}

/// What the client was told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Create: made the file with this inode. Lookup: found it. Unlink, rename: done (0).
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
    pub op: Op,
    pub called_ms: u64,
    pub answered_ms: u64,
    pub answer: Answer,
}

/// Client `me` works on the shared slots (in `dirs`, the inodes of `shared`'s directories)
/// until `stop`, adding what it saw to `history`.
#[allow(clippy::too_many_arguments)]
pub async fn shared_loop(
    me: usize,
    client: Client,
    shared: Shared,
    dirs: Vec<Ino>,
    seed: u64,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Event>>>,
    trace: Arc<Trace>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6c69_6e65 ^ ((me as u64) << 40));
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1000))).await;
        let slot = rng.gen_range(0..SLOTS);
        let draw = rng.gen_range(0..10);
        let op = match (shared, draw) {
            (Shared::TwoDirs, 5..=6) => Op::Rename(slot, (slot + rng.gen_range(1..SLOTS)) % SLOTS),
            (_, 0..=3) => Op::Create(slot),
            (_, 4..=6) => Op::Unlink(slot),
            _ => Op::Lookup(slot),
        };
        let at = |slot: usize| {
            let (dir, name) = shared.place(slot);
            (dirs[dir], name)
        };
        let called_ms = trace.elapsed_ms();
        let result = match op {
            Op::Create(s) => {
                let (dir, name) = at(s);
                client.create(dir, &name, 0o644, true).await.map(|a| a.ino)
            }
            Op::Unlink(s) => {
                let (dir, name) = at(s);
                client.unlink(dir, &name).await.map(|()| 0)
            }
            Op::Lookup(s) => {
                let (dir, name) = at(s);
                client.lookup(dir, &name).await.map(|a| a.ino)
            }
            Op::Rename(from, to) => {
                let ((dir, name), (new_dir, new_name)) = (at(from), at(to));
                client.rename(dir, &name, new_dir, &new_name).await.map(|()| 0)
            }
        };
        let answer = answer_of(result);
        let answered_ms = trace.elapsed_ms();
        trace.note(format_args!("client{me} shared {}: {answer:?}", describe(shared, op)));
        history.lock().push(Event { client: me, op, called_ms, answered_ms, answer });
    }
}

/// `op` with the shared names it works on, as the trace shows it.
fn describe(shared: Shared, op: Op) -> String {
    let path = |slot: usize| {
        let (dir, name) = shared.place(slot);
        format!("{}/{name}", shared.dirs().get(dir).copied().unwrap_or("?"))
    };
    match op {
        Op::Create(s) => format!("Create {}", path(s)),
        Op::Unlink(s) => format!("Unlink {}", path(s)),
        Op::Lookup(s) => format!("Lookup {}", path(s)),
        Op::Rename(from, to) => format!("Rename {} {}", path(from), path(to)),
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

/// A slot's state: empty, or a file with its inode (`None`: made by a create whose answer was
/// lost, so its inode is not known yet).
type Slot = Option<Option<u64>>;

/// Every slot's state.
type State = [Slot; SLOTS];

/// The states `op` may leave `state` in when the client was told `answer` (none: it could not
/// have been told that in this state).
fn step(state: State, op: Op, answer: Answer) -> Vec<State> {
    let with = |slot: usize, value: Slot| {
        let mut next = state;
        next[slot] = value;
        next
    };
    match (op, answer) {
        (Op::Create(s), Answer::Done(ino)) if state[s].is_none() => vec![with(s, Some(Some(ino)))],
        (Op::Create(s), Answer::Exists) if state[s].is_some() => vec![state],
        (Op::Create(s), Answer::Unknown) if state[s].is_none() => vec![with(s, Some(None))],
        (Op::Create(_), Answer::Unknown) => vec![state],
        (Op::Unlink(s), Answer::Done(_)) if state[s].is_some() => vec![with(s, None)],
        (Op::Unlink(s), Answer::NotFound) if state[s].is_none() => vec![state],
        (Op::Unlink(s), Answer::Unknown) => vec![with(s, None)],
        (Op::Lookup(s), Answer::Done(ino)) => match state[s] {
            Some(known) if known.is_none_or(|k| k == ino) => vec![with(s, Some(Some(ino)))],
            _ => Vec::new(),
        },
        (Op::Lookup(s), Answer::NotFound) if state[s].is_none() => vec![state],
        (Op::Rename(from, to), Answer::Done(_) | Answer::Unknown) if state[from].is_some() => {
            let mut next = with(to, state[from]);
            next[from] = None;
            vec![next]
        }
        (Op::Rename(from, _), Answer::NotFound | Answer::Unknown) if state[from].is_none() => vec![state],
        _ => Vec::new(),
    }
}

/// Checks the history; returns one line per part of it that no order explains. Without renames
/// each slot is checked alone; renames tie slots together, and the slots they tie are checked
/// as one.
pub fn check(events: &[Event]) -> Vec<String> {
    // Union the slots that one rename touches.
    let mut group: [usize; SLOTS] = std::array::from_fn(|s| s);
    let find = |group: &[usize; SLOTS], mut s: usize| {
        while group[s] != s {
            s = group[s];
        }
        s
    };
    for event in events {
        let [a, b] = event.op.slots();
        let (ra, rb) = (find(&group, a), find(&group, b));
        group[ra.max(rb)] = ra.min(rb);
    }
    let mut parts: BTreeMap<usize, Vec<&Event>> = BTreeMap::new();
    for event in events {
        if !(matches!(event.op, Op::Lookup(_)) && event.answer == Answer::Unknown) {
            parts.entry(find(&group, event.op.slots()[0])).or_default().push(event);
        }
    }
    let mut broken = Vec::new();
    for (_, mut history) in parts {
        history.sort_by_key(|e| (e.called_ms, e.client));
        if history.len() > EVENTS_MAX {
            broken.push(format!("{} operations, more than the {EVENTS_MAX} the checker takes", history.len()));
            continue;
        }
        let mut search = Search { history: &history, seen: HashSet::new() };
        let placed = vec![0u64; history.len().div_ceil(64)];
        if !search.explains(&placed, [None; SLOTS]) {
            let lines: Vec<String> = history
                .iter()
                .map(|e| format!("client{} {:?} {}..{} ms: {:?}", e.client, e.op, e.called_ms, e.answered_ms, e.answer))
                .collect();
            broken.push(format!("no order explains what the clients saw: {}", lines.join("; ")));
        }
    }
    broken
}

struct Search<'a> {
    history: &'a [&'a Event],
    /// (operations placed, state) pairs already explored.
    seen: HashSet<(Vec<u64>, State)>,
}

impl Search<'_> {
    fn answered(&self, i: usize) -> bool {
        self.history[i].answer != Answer::Unknown
    }

    /// Whether the operations not in `placed` can be ordered after those in it, from `state`.
    fn explains(&mut self, placed: &[u64], state: State) -> bool {
        let open = |i: usize| placed[i / 64] & (1 << (i % 64)) == 0;
        let n = self.history.len();
        // The next operation must have been called before every open answered one returned.
        let Some(bound) = (0..n).filter(|&i| open(i) && self.answered(i)).map(|i| self.history[i].answered_ms).min()
        else {
            // Every answered operation placed; the unanswered rest may never have happened.
            return true;
        };
        for i in (0..n).filter(|&i| open(i)) {
            let event = self.history[i];
            if event.called_ms > bound {
                // Sorted by call: no later operation can come next either.
                break;
            }
            for next in step(state, event.op, event.answer) {
                let mut after = placed.to_vec();
                after[i / 64] |= 1 << (i % 64);
                if self.seen.insert((after.clone(), next)) && self.explains(&after, next) {
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
        Event { client, op, called_ms, answered_ms, answer }
    }

    #[test]
    fn sequential_and_overlapping_histories_that_some_order_explains_pass() {
        let history = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(7)),
            ev(1, Op::Lookup(0), 20, 30, Answer::Done(7)),
            // Overlapping: the unlink may come before the create's Exists or after it.
            ev(0, Op::Unlink(0), 40, 60, Answer::Done(0)),
            ev(1, Op::Create(0), 45, 55, Answer::Exists),
            ev(1, Op::Lookup(0), 70, 80, Answer::NotFound),
        ];
        assert!(check(&history).is_empty(), "{:?}", check(&history));
    }

    #[test]
    fn an_unknown_outcome_may_have_happened_or_not() {
        let took = [
            ev(0, Op::Create(0), 0, 10, Answer::Unknown),
            ev(1, Op::Lookup(0), 20, 30, Answer::Done(9)),
            ev(1, Op::Create(0), 40, 50, Answer::Exists),
        ];
        assert!(check(&took).is_empty(), "{:?}", check(&took));
        let did_not = [ev(0, Op::Create(0), 0, 10, Answer::Unknown), ev(1, Op::Create(0), 20, 30, Answer::Done(4))];
        assert!(check(&did_not).is_empty(), "{:?}", check(&did_not));
        // Late: an unknown create may take effect after later operations returned.
        let late = [
            ev(0, Op::Create(0), 0, 10, Answer::Unknown),
            ev(1, Op::Lookup(0), 20, 30, Answer::NotFound),
            ev(1, Op::Lookup(0), 40, 50, Answer::Done(3)),
        ];
        assert!(check(&late).is_empty(), "{:?}", check(&late));
        // Once: a lost create and then a found inode, then another create answered as made.
        let twice = [
            ev(0, Op::Create(0), 0, 10, Answer::Unknown),
            ev(1, Op::Lookup(0), 20, 30, Answer::Done(9)),
            ev(1, Op::Create(0), 40, 50, Answer::Done(11)),
        ];
        assert_eq!(check(&twice).len(), 1);
    }

    #[test]
    fn histories_no_order_explains_are_caught() {
        // Two exclusive creates both made the file, with no unlink between.
        let double = [ev(0, Op::Create(0), 0, 10, Answer::Done(1)), ev(1, Op::Create(0), 20, 30, Answer::Done(2))];
        assert_eq!(check(&double).len(), 1);
        // A lookup after an unlink had returned still finds the file (a stale read).
        let stale = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(1)),
            ev(0, Op::Unlink(0), 20, 30, Answer::Done(0)),
            ev(1, Op::Lookup(0), 40, 50, Answer::Done(1)),
        ];
        assert_eq!(check(&stale).len(), 1);
        // A create answered Exists though nothing was ever made (a retry applied twice).
        let phantom = [ev(0, Op::Create(0), 0, 10, Answer::Exists)];
        assert_eq!(check(&phantom).len(), 1);
        // Another inode found than the one made.
        let other = [ev(0, Op::Create(0), 0, 10, Answer::Done(1)), ev(1, Op::Lookup(0), 20, 30, Answer::Done(2))];
        assert_eq!(check(&other).len(), 1);
    }

    #[test]
    fn a_rename_moves_the_file_at_one_moment() {
        let moved = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(5)),
            ev(0, Op::Create(3), 12, 18, Answer::Done(6)),
            ev(0, Op::Rename(0, 3), 20, 30, Answer::Done(0)),
            ev(1, Op::Lookup(3), 40, 50, Answer::Done(5)),
            ev(1, Op::Lookup(0), 60, 70, Answer::NotFound),
        ];
        assert!(check(&moved).is_empty(), "{:?}", check(&moved));
        // During the rename a lookup may see either side, but never both empty after it.
        let during = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(5)),
            ev(0, Op::Rename(0, 3), 20, 40, Answer::Done(0)),
            ev(1, Op::Lookup(3), 25, 30, Answer::NotFound),
            ev(1, Op::Lookup(0), 31, 35, Answer::NotFound),
        ];
        assert!(check(&during).is_empty(), "{:?}", check(&during));
        // Seen in both places: the target found before the source was found again.
        let both = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(5)),
            ev(0, Op::Rename(0, 3), 20, 40, Answer::Done(0)),
            ev(1, Op::Lookup(3), 22, 24, Answer::Done(5)),
            ev(1, Op::Lookup(0), 26, 28, Answer::Done(5)),
        ];
        assert_eq!(check(&both).len(), 1);
        // A rename of a name no one made is answered NotFound, not done.
        let ghost = [ev(0, Op::Rename(1, 2), 0, 10, Answer::Done(0))];
        assert_eq!(check(&ghost).len(), 1);
        // The replaced target's inode is gone.
        let replaced = [
            ev(0, Op::Create(0), 0, 10, Answer::Done(5)),
            ev(0, Op::Create(1), 12, 18, Answer::Done(6)),
            ev(0, Op::Rename(0, 1), 20, 30, Answer::Done(0)),
            ev(1, Op::Lookup(1), 40, 50, Answer::Done(6)),
        ];
        assert_eq!(check(&replaced).len(), 1);
    }

    #[test]
    fn slots_no_rename_ties_are_checked_apart() {
        let apart = [ev(0, Op::Create(0), 0, 10, Answer::Done(1)), ev(1, Op::Create(1), 20, 30, Answer::Done(2))];
        assert!(check(&apart).is_empty());
        // Two parts, one broken in each: two lines.
        let broken = [
            ev(0, Op::Create(0), 0, 10, Answer::Exists),
            ev(1, Op::Create(2), 20, 30, Answer::Exists),
            ev(1, Op::Rename(2, 3), 40, 50, Answer::NotFound),
        ];
        assert_eq!(check(&broken).len(), 2);
    }
}
