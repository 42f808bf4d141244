//! Keeps s3s's own log lines out of the operator's log unless asked for.
//!
//! s3s logs every error answer at ERROR ("op returns error", "failed to prepare"), whatever its
//! cause: a client's wrong signature, an object that does not exist, a malformed XML body. Those
//! are the client's mistakes, answered with a 4xx; an operator reading ERROR lines must not see
//! them. The gateway logs what it handles itself (a 5xx answer at WARN, with its code and
//! message; a 4xx at DEBUG) in `front.rs`, so requests are served under [`QuietS3s`], which
//! forwards everything to the subscriber the process installed except s3s's events, which pass
//! only where the log filter enables DEBUG for the target `s3s` (`TROVE_LOG=s3s=debug`).

use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_core::span::Current;

/// The process's subscriber, with s3s's events held back to DEBUG.
pub struct QuietS3s {
    inner: Dispatch,
    s3s_debug: bool,
    hint: Option<LevelFilter>,
}

fn from_s3s(meta: &Metadata<'_>) -> bool {
    meta.is_event() && (meta.target() == "s3s" || meta.target().starts_with("s3s::"))
}

impl QuietS3s {
    /// Wraps the subscriber that is the default now (the process's global one).
    pub fn dispatch() -> Dispatch {
        let inner = tracing::dispatcher::get_default(Dispatch::clone);
        let s3s_debug =
            tracing::dispatcher::with_default(&inner, || tracing::enabled!(target: "s3s", tracing::Level::DEBUG));
        Dispatch::new(QuietS3s { inner, s3s_debug, hint: Some(LevelFilter::current()) })
    }
}

impl Subscriber for QuietS3s {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if from_s3s(meta) && !self.s3s_debug {
            Interest::never()
        } else {
            self.inner.register_callsite(meta)
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        (self.s3s_debug || !from_s3s(meta)) && self.inner.enabled(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.hint
    }

    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.inner.new_span(span)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        self.inner.record(span, values)
    }

    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.inner.record_follows_from(span, follows)
    }

    fn event(&self, event: &Event<'_>) {
        self.inner.event(event)
    }

    fn enter(&self, span: &Id) {
        self.inner.enter(span)
    }

    fn exit(&self, span: &Id) {
        self.inner.exit(span)
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.inner.clone_span(id)
    }

    fn try_close(&self, id: Id) -> bool {
        self.inner.try_close(id)
    }

    fn current_span(&self) -> Current {
        self.inner.current_span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts the events it is given, by whether they came from s3s; enables DEBUG for s3s
    /// only if `s3s_debug`.
    struct Counter {
        s3s_debug: bool,
        s3s: Arc<AtomicUsize>,
        other: Arc<AtomicUsize>,
    }

    impl Subscriber for Counter {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            self.s3s_debug || !(m.target().starts_with("s3s") && *m.level() == tracing::Level::DEBUG)
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            let n = if e.metadata().target().starts_with("s3s") { &self.s3s } else { &self.other };
            n.fetch_add(1, Ordering::Relaxed);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn s3s_events_pass_only_where_s3s_debug_is_enabled() {
        let mut kept = Vec::new();
        for s3s_debug in [false, true] {
            let (s3s, other) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let global = Dispatch::new(Counter { s3s_debug, s3s: s3s.clone(), other: other.clone() });
            let quiet = tracing::dispatcher::with_default(&global, QuietS3s::dispatch);
            tracing::dispatcher::with_default(&quiet, || {
                tracing::error!(target: "s3s::ops", "op returns error");
                tracing::error!(target: "s3gw::front", "a 5xx answer");
            });
            assert_eq!(
                (s3s.load(Ordering::Relaxed), other.load(Ordering::Relaxed)),
                (usize::from(s3s_debug), 1),
                "s3s debug {s3s_debug}"
            );
            kept.push((global, quiet));
        }
    }
}
