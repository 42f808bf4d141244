//! Access times, batched: a read of a file whose atime relatime would move (not later than its
//! mtime or ctime, or a day old) notes the file here once per open file, and one task per
//! client sends the files noted in the last [`ATIME_FLUSH_INTERVAL`] in one
//! `MetaOp::TouchAtimes`. So reading costs no metadata round trip, every front end built on
//! the client (mount, S3, NFS, SDK, `trove get`) keeps atimes, and file pool policies by last
//! access see them (after at most the interval).

use crate::Client;
use std::collections::HashSet;
use std::time::Duration;
use wire::{Attr, Ino, MetaOp, Timestamp};

/// How long noted reads wait to be sent together.
pub const ATIME_FLUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Files one `TouchAtimes` names at most (the metadata service's limit).
pub const ATIME_BATCH_MAX: usize = 1024;
/// Files noted and not yet sent, at most; more are dropped until the next send (an atime is
/// a hint for policies, never worth holding memory or a reader for).
pub const ATIME_PENDING_MAX: usize = 65_536;
/// How old an atime may get before a read moves it regardless (relatime's day).
pub const ATIME_LAG_S: i64 = 24 * 3600;

/// Files read and not yet recorded, and whether a sender task is waiting to send them.
#[derive(Default)]
pub(crate) struct Pending {
    inos: HashSet<Ino>,
    sending: bool,
}

/// Whether relatime moves `attr`'s atime for a read at `now`.
pub fn relatime_due(attr: &Attr, now: Timestamp) -> bool {
    let a = attr.atime;
    a <= attr.mtime || a <= attr.ctime || a.secs + ATIME_LAG_S <= now.secs
}

impl Client {
    /// Notes a read of the file `attr` describes (as of its open); sent within
    /// [`ATIME_FLUSH_INTERVAL`] with the other files read meanwhile.
    pub fn note_read(&self, attr: &Attr) {
        if !self.inner.options.atime || !relatime_due(attr, Timestamp::now()) {
            return;
        }
        let spawn = {
            let mut pending = self.inner.atimes.lock();
            if pending.inos.len() < ATIME_PENDING_MAX {
                pending.inos.insert(attr.ino);
            }
            !std::mem::replace(&mut pending.sending, true)
        };
        if !spawn {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.atimes.lock().sending = false;
            return;
        };
        let client = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(ATIME_FLUSH_INTERVAL).await;
            client.send_atimes().await;
        });
    }

    /// Sends the files noted so far (also at a clean shutdown).
    pub async fn send_atimes(&self) {
        let inos: Vec<Ino> = {
            let mut pending = self.inner.atimes.lock();
            pending.sending = false;
            pending.inos.drain().collect()
        };
        let atime = Timestamp::now();
        for batch in inos.chunks(ATIME_BATCH_MAX) {
            let op = MetaOp::TouchAtimes {
                inos: batch.to_vec(),
                atime,
            };
            if let Err(e) = self.meta(op).await {
                tracing::debug!(
                    "cannot record the access times of {} files: {e}",
                    batch.len()
                );
            }
        }
    }
}
