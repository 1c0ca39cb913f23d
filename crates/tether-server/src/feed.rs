//! The feed's tail: one reader of the store's feed per process, shared by
//! every event stream and every waiting request, so that a thousand of
//! them cost one query per tick, not a thousand.
//!
//! The tail reads the whole feed (every tenant) from where it stands and
//! keeps what each read returned, a *segment* (where the read started,
//! where it ended, the events), in a ring of recent segments. A reader
//! whose cursor is the start of a kept segment takes it and the ones after
//! from memory and filters them itself; its cursors are then the tail's
//! own, exact as the store's. A reader whose cursor is elsewhere (a client
//! resuming from an older cursor, one that fell behind the ring) reads the
//! store itself until it reaches the tail: on PostgreSQL it reads up to the
//! snapshot a kept segment ended at, and from there is in step.
//!
//! The tail runs only while someone listens: the first [`FeedTail::listen`]
//! starts it at the feed's head, and it stops a little after the last
//! listener is dropped. While it finds events it reads every [`TICK`];
//! once a read finds none it waits up to [`IDLE_TICK`], or until a write
//! of this process nudges it ([`FeedTail::nudge`]): an idle server with
//! connected workers (each holds a stream) then reads 40 times a second,
//! not 100, an event written through it is still read at once, and one
//! another process wrote into a quiet feed within about 25 ms.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use tether_api::FeedEventData;
use tether_core::{Engine, FeedCursor, FeedEvent, FeedFilter, MAX_FEED_READ};

/// Reads of the tail that found nothing more start this far apart (the
/// feed's lag behind a commit is at most about this, plus the read): the
/// pause is what is left of it after the read, so a read slowed by load
/// does not add itself to the lag a second time.
const TICK: Duration = Duration::from_millis(10);
/// How long after a read that found nothing the next one starts, unless a
/// write of this process nudges it first: the lag of the first event that
/// another process (another replica, a library user) writes into a quiet
/// feed.
const IDLE_TICK: Duration = Duration::from_millis(25);
/// Pause after a read that failed (the database away).
const RETRY: Duration = Duration::from_millis(200);
/// How long the tail keeps running once nobody listens.
const LINGER: Duration = Duration::from_secs(2);
/// Most segments kept, and most events in them: a reader further behind
/// reads the store itself.
const KEPT_SEGMENTS: usize = 1_000;
const KEPT_EVENTS: usize = 20_000;

/// One read of the tail: from `start` to `next`, these events.
#[derive(Debug)]
pub(crate) struct Segment {
    /// Counts the segments the tail made, from 1.
    pub number: u64,
    /// Where the read started.
    pub start: FeedCursor,
    /// Where the next read starts.
    pub next: FeedCursor,
    /// The events read, in order.
    pub events: Vec<FeedEvent>,
    /// Each event as a server-sent event message, made by the first stream
    /// that takes the segment and shared by the rest: ten streams of one
    /// tenant serialize an event once, not ten times.
    messages: std::sync::OnceLock<Vec<Bytes>>,
    /// Set when retention removed events before the tail read them (see
    /// `FeedPage::gap`): every stream that takes this segment is told.
    pub gap: Option<FeedCursor>,
}

impl Segment {
    /// The events as server-sent event messages (see [`message`]), in order.
    pub fn messages(&self) -> &[Bytes] {
        self.messages
            .get_or_init(|| self.events.iter().map(message).collect())
    }
}

/// A history event as one server-sent event message: its cursor as the
/// id, its name as the event type, its JSON (one line) as the data.
pub(crate) fn message(e: &FeedEvent) -> Bytes {
    let data = serde_json::to_string(&FeedEventData::from(e)).expect("an event serializes");
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        e.cursor,
        e.event.event.as_str()
    ))
}

/// The shared tail (cheap to clone).
#[derive(Clone, Debug)]
pub struct FeedTail {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Engine,
    ring: Mutex<Ring>,
    listeners: AtomicUsize,
    /// The newest segment's number, for listeners to wait on.
    made: tokio::sync::watch::Sender<u64>,
    /// Set when this process may have written events (see `nudge`).
    nudged: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Ring {
    segments: VecDeque<Arc<Segment>>,
    events: usize,
    running: bool,
    made: u64,
}

impl FeedTail {
    /// A tail over `engine`'s store, not yet running.
    pub fn new(engine: Engine) -> Self {
        FeedTail {
            inner: Arc::new(Inner {
                engine,
                ring: Mutex::new(Ring::default()),
                listeners: AtomicUsize::new(0),
                made: tokio::sync::watch::channel(0).0,
                nudged: tokio::sync::Notify::new(),
            }),
        }
    }

    /// Tells the tail that this process may just have committed events, so
    /// that an idle tail reads now rather than at its next idle tick (25 ms).
    /// Cheap, and harmless when nothing was written or nobody listens.
    pub fn nudge(&self) {
        self.inner.nudged.notify_one();
    }

    /// Registers a listener, starting the tail if it is not running. Must
    /// be called inside a tokio runtime.
    pub(crate) fn listen(&self) -> Listener {
        self.inner.listeners.fetch_add(1, Ordering::SeqCst);
        let start = {
            let mut ring = self.inner.ring.lock().expect("feed ring");
            !std::mem::replace(&mut ring.running, true)
        };
        if start {
            tokio::spawn(run(self.inner.clone()));
        }
        Listener {
            inner: self.inner.clone(),
            made: self.inner.made.subscribe(),
        }
    }
}

/// A listener of the tail; the tail runs while any exists.
pub(crate) struct Listener {
    inner: Arc<Inner>,
    made: tokio::sync::watch::Receiver<u64>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.inner.listeners.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Listener {
    /// Waits until the tail has made a segment this listener has not been
    /// woken for (at once if one was made since the last wait).
    pub(crate) async fn changed(&mut self) {
        if self.made.changed().await.is_err() {
            // The tail's sender lives as long as `inner`: not reached.
            std::future::pending::<()>().await;
        }
    }

    /// The kept segments from the one that starts at `cursor` on, or
    /// `None` when no kept segment does (on SQLite, whose cursors are
    /// ordered, from the one that holds `cursor`; its events up to the
    /// cursor are the caller's to skip).
    pub(crate) fn segments_from(&self, cursor: &FeedCursor) -> Option<Vec<Arc<Segment>>> {
        let ring = self.inner.ring.lock().expect("feed ring");
        let at = ring
            .segments
            .iter()
            .position(|s| match (cursor, &s.start, &s.next) {
                (FeedCursor::Seq(c), FeedCursor::Seq(a), FeedCursor::Seq(b)) => a <= c && c <= b,
                _ => s.start == *cursor,
            })?;
        Some(ring.segments.iter().skip(at).cloned().collect())
    }

    /// The newest segment's number (0 before the first).
    pub(crate) fn made(&self) -> u64 {
        self.inner.ring.lock().expect("feed ring").made
    }

    /// The kept segments numbered after `number`, and whether any between
    /// were dropped from the ring before they could be taken.
    pub(crate) fn segments_after(&self, number: u64) -> (Vec<Arc<Segment>>, bool) {
        let ring = self.inner.ring.lock().expect("feed ring");
        let segments: Vec<_> = ring
            .segments
            .iter()
            .filter(|s| s.number > number)
            .cloned()
            .collect();
        let missed = segments
            .first()
            .map_or(ring.made > number, |s| s.number > number + 1);
        (segments, missed)
    }

    /// Where the newest kept segment ended, if it ended between batches (a
    /// place a reader can read the store up to and be in step).
    pub(crate) fn boundary(&self) -> Option<FeedCursor> {
        let ring = self.inner.ring.lock().expect("feed ring");
        let newest = ring.segments.back()?;
        match &newest.next {
            c @ FeedCursor::Snapshots { batch: None, .. } => Some(c.clone()),
            _ => None,
        }
    }

    /// Where the tail will read next (the head of the feed, about), once it
    /// has made a segment.
    pub(crate) fn position(&self) -> Option<FeedCursor> {
        let ring = self.inner.ring.lock().expect("feed ring");
        ring.segments.back().map(|s| s.next.clone())
    }
}

/// The tail's loop: reads the feed from its head while anyone listens.
async fn run(inner: Arc<Inner>) {
    let everything = FeedFilter::default();
    let mut cursor: Option<FeedCursor> = None;
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        if inner.listeners.load(Ordering::SeqCst) == 0 {
            let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= LINGER {
                let mut ring = inner.ring.lock().expect("feed ring");
                if inner.listeners.load(Ordering::SeqCst) == 0 {
                    // Nobody needs the past: the next start begins at the
                    // head again.
                    ring.running = false;
                    ring.segments.clear();
                    ring.events = 0;
                    return;
                }
            }
        } else {
            idle_since = None;
        }
        let from = match &cursor {
            Some(c) => c.clone(),
            None => match inner.engine.feed_head().await {
                Ok(head) => head,
                Err(e) => {
                    tracing::warn!(error = %e, "event feed: reading the head failed");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            },
        };
        let started = tokio::time::Instant::now();
        match inner
            .engine
            .feed_read(&from, &everything, MAX_FEED_READ)
            .await
        {
            Ok(page) => {
                let more = page.more;
                let lag = page.events.last().map_or(0.0, |e| {
                    (chrono::Utc::now() - e.event.at)
                        .num_microseconds()
                        .unwrap_or(0) as f64
                        / 1e6
                });
                metrics::gauge!("tether_feed_lag_seconds").set(lag.max(0.0));
                cursor = Some(page.next.clone());
                let found = !page.events.is_empty();
                keep(&inner, from, page.next, page.events, page.gap);
                if !more {
                    tokio::time::sleep_until(started + TICK).await;
                }
                if !more && !found {
                    // A nudge that came during the read (its commit maybe
                    // after the read's snapshot) is kept, and ends this at
                    // once.
                    tokio::select! {
                        _ = inner.nudged.notified() => {}
                        _ = tokio::time::sleep_until(started + IDLE_TICK) => {}
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "event feed: a read failed");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Adds a segment to the ring (dropping the oldest past its bounds) and
/// wakes the listeners; a read that moved nothing is not kept.
fn keep(
    inner: &Inner,
    start: FeedCursor,
    next: FeedCursor,
    events: Vec<FeedEvent>,
    gap: Option<FeedCursor>,
) {
    if events.is_empty() && start == next && gap.is_none() {
        return;
    }
    let number = {
        let mut ring = inner.ring.lock().expect("feed ring");
        ring.made += 1;
        ring.events += events.len();
        let segment = Segment {
            number: ring.made,
            start,
            next,
            events,
            messages: std::sync::OnceLock::new(),
            gap,
        };
        ring.segments.push_back(Arc::new(segment));
        while ring.segments.len() > KEPT_SEGMENTS
            || (ring.events > KEPT_EVENTS && ring.segments.len() > 1)
        {
            let old = ring.segments.pop_front().expect("a segment");
            ring.events -= old.events.len();
        }
        ring.made
    };
    inner.made.send_replace(number);
}

/// Reads a value with `read` until `done` holds or `wait` has passed
/// (or the server begins to stop), re-reading it whenever the feed shows
/// an event of `tenant` that `concerns` it: what `?wait_ms=` does. The
/// wait takes one of the tenant's waiting places (shared with waiting
/// claims); with none free the value is answered at once, as with no wait.
pub(crate) async fn wait_for<T, Read, Fut>(
    st: &crate::AppState,
    tenant: &str,
    wait: Duration,
    concerns: impl Fn(&FeedEvent) -> bool,
    read: Read,
    done: impl Fn(&T) -> bool,
) -> tether_core::Result<T>
where
    Read: Fn() -> Fut,
    Fut: std::future::Future<Output = tether_core::Result<T>>,
{
    let place = match wait.is_zero() {
        true => None,
        false => st
            .tenant_long_polls
            .try_take(tenant.to_owned())
            .and_then(|mine| Some((mine, st.long_polls.clone().try_acquire_owned().ok()?))),
    };
    // Listen before the first read, so no end after it goes unseen.
    let Some(mut listener) = place.as_ref().map(|_| st.feed.listen()) else {
        return read().await;
    };
    let mut taken = listener.made();
    // A tail that has read nothing yet starts at a head taken after this
    // read, maybe: read again once it has.
    let mut started = listener.position().is_some();
    let mut value = read().await?;
    let deadline = tokio::time::Instant::now() + wait;
    while !done(&value) {
        tokio::select! {
            _ = listener.changed() => {}
            _ = tokio::time::sleep_until(deadline) => break,
            _ = st.shutdown.cancelled() => break,
        }
        let (segments, missed) = listener.segments_after(taken);
        if let Some(last) = segments.last() {
            taken = last.number;
        }
        let relevant = segments
            .iter()
            .flat_map(|s| s.events.iter())
            .any(|e| e.tenant == tenant && concerns(e));
        if relevant || missed || !started {
            started = true;
            value = read().await?;
        }
    }
    Ok(value)
}
