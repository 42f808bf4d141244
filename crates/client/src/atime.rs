//! Access times, batched: a read of a file whose atime relatime would move (not later than its
//! mtime or ctime, or older than the cluster's lag: a day, or finer when a file pool policy
//! judges atimes, see `wire::policy::atime_lag_s`) notes the file here once per open file, and
//! one task per client sends the files noted in the last [`ATIME_FLUSH_INTERVAL`] in one
//! `MetaOp::TouchAtimes`. So reading costs no metadata round trip, every front end built on
//! the client (mount, S3, NFS, SDK, `trove get`) keeps atimes, and file pool policies by last
//! access see them (after at most the interval). The client learns the lag from the policies
//! (re-read every [`ATIME_LAG_REFRESH`]); until it has, it notes every read older than a second.

use crate::Client;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;
use wire::{Attr, Ino, MetaOp, MetaReply, Timestamp};

/// How long noted reads wait to be sent together.
pub const ATIME_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Files one `TouchAtimes` names at most (the metadata service's limit).
pub const ATIME_BATCH_MAX: usize = 1024;
/// Files noted and not yet sent, at most; more are dropped until the next send (an atime is
/// a hint for policies, never worth holding memory or a reader for).
pub const ATIME_PENDING_MAX: usize = 65_536;
/// How often the client re-reads the policies for the atime lag.
pub const ATIME_LAG_REFRESH: Duration = Duration::from_secs(60);

/// Files read and not yet recorded, whether a sender task is waiting to send them, and the
/// atime lag as last learnt (with when).
pub(crate) struct Pending {
    inos: HashSet<Ino>,
    sending: bool,
    lag_s: i64,
    lag_learnt: Option<Instant>,
}

impl Default for Pending {
    fn default() -> Pending {
        Pending { inos: HashSet::new(), sending: false, lag_s: 1, lag_learnt: None }
    }
}

/// Whether relatime (with lag `lag_s`) moves `attr`'s atime for a read at `now`.
pub fn relatime_due(attr: &Attr, now: Timestamp, lag_s: i64) -> bool {
    wire::policy::atime_due(attr.atime, attr.mtime, attr.ctime, now, lag_s)
}

impl Client {
    /// Notes a read of the file `attr` describes, if relatime would move its atime; sent
    /// within [`ATIME_FLUSH_INTERVAL`] with the other files read meanwhile. Whether it was
    /// noted.
    pub fn note_read(&self, attr: &Attr) -> bool {
        if !self.inner.options.atime {
            return false;
        }
        let spawn = {
            let mut pending = self.inner.atimes.lock();
            if !relatime_due(attr, Timestamp::now(), pending.lag_s) {
                return false;
            }
            if pending.inos.len() < ATIME_PENDING_MAX {
                pending.inos.insert(attr.ino);
            }
            !std::mem::replace(&mut pending.sending, true)
        };
        if !spawn {
            return true;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.atimes.lock().sending = false;
            return true;
        };
        let client = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(ATIME_FLUSH_INTERVAL).await;
            client.send_atimes().await;
        });
        true
    }

    /// Sends the files noted so far (also at a clean shutdown).
    pub async fn send_atimes(&self) {
        let (inos, learn): (Vec<Ino>, bool) = {
            let mut pending = self.inner.atimes.lock();
            pending.sending = false;
            let learn = pending.lag_learnt.is_none_or(|t| t.elapsed() >= ATIME_LAG_REFRESH);
            (pending.inos.drain().collect(), learn)
        };
        if learn {
            match self.meta(MetaOp::ListPolicies).await {
                Ok(MetaReply::Policies(policies)) => {
                    let mut pending = self.inner.atimes.lock();
                    pending.lag_s = wire::policy::atime_lag_s(&policies);
                    pending.lag_learnt = Some(Instant::now());
                }
                Ok(_) | Err(_) => {}
            }
        }
        let atime = Timestamp::now();
        for batch in inos.chunks(ATIME_BATCH_MAX) {
            let op = MetaOp::TouchAtimes { inos: batch.to_vec(), atime };
            if let Err(e) = self.meta(op).await {
                tracing::debug!("cannot record the access times of {} files: {e}", batch.len());
            }
        }
    }
}
