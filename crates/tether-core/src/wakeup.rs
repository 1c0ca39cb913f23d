//! Wake-up hints: "queue Q of tenant T has n new ready jobs".
//!
//! A hint is only a hint. Workers still poll at an interval, because a hint
//! can be lost (a dropped LISTEN connection, another process's enqueue on
//! SQLite) and jobs also become ready by time alone (delays, backoff).
//!
//! Two rules keep hints cheap with many waiters on one queue (a thousand
//! long-polls, each of which runs a claim when woken):
//! - A hint for n jobs wakes at most n of the subscribers that are waiting,
//!   oldest waiter first: the others would only find nothing.
//! - A subscriber that is not waiting when a hint arrives (it is between an
//!   empty claim and its wait) still sees it on its next wait, which returns
//!   at once. Subscribing before claiming therefore never misses a hint.
//!
//! A queue's entry lives only while someone subscribes to it: the last
//! [`Wakeup`] dropped removes it, so names that are asked for once cost
//! nothing afterwards.
//!
//! Jobs also become claimable when a queue's limit (`max_running`) frees a
//! slot. A store remembers the queues its claims found limited
//! ([`LimitedQueues`]) and hints those when one of their jobs ends, so a
//! claim the limit held back is woken by the slot, not by its next poll.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::model::{Enqueued, Job, JobState};

/// Furthest ahead [`when_due`] sets a timer: a claim waits at most a
/// minute for a hint, and a later instant is found by a worker's poll.
const DUE_HORIZON: std::time::Duration = std::time::Duration::from_secs(60);

/// After a report left `job` queued for later (a retry's backoff, a
/// snooze), runs `hint` when it becomes claimable, so that a claim waiting
/// on its queue is woken by it instead of waiting out its `wait_ms` (a
/// job due now is hinted at once). The delay is read from the job's own
/// `run_at` and `updated_at`, both the database's clock. Not for a job due
/// beyond a minute, nor one that is not queued. Must be called inside a
/// tokio runtime.
pub fn when_due(job: &Job, hint: impl FnOnce() + Send + 'static) {
    if job.state != JobState::Queued {
        return;
    }
    let ms = (job.run_at - job.updated_at).num_milliseconds();
    if ms <= 0 {
        hint();
        return;
    }
    let after = std::time::Duration::from_millis(ms as u64);
    if after <= DUE_HORIZON {
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            hint();
        });
    }
}

/// The queues whose claims a store found limited (`max_running` set), as
/// of its latest claim of each: a job of one of them that ends frees a slot
/// and is worth a hint. Unlimited queues are not kept, so a busy process
/// without limits pays one lookup in an empty set per claim and report.
///
/// It also holds what the claims of those queues share in this process:
/// their turns ([`LimitedQueues::turn`]) and where each queue's walk over
/// its keys stopped ([`LimitedQueues::walk_from`]).
#[derive(Debug)]
pub struct LimitedQueues {
    queues: Mutex<std::collections::HashSet<Key>>,
    turns: Arc<crate::turns::Turns>,
    walks: Mutex<HashMap<Key, String>>,
}

impl Default for LimitedQueues {
    fn default() -> Self {
        LimitedQueues {
            queues: Mutex::default(),
            turns: crate::turns::Turns::new(1),
            walks: Mutex::default(),
        }
    }
}

/// Most queues whose walk position a process keeps; past it they start
/// over from the first key (a position is only where fairness resumes).
const MAX_WALKS: usize = 10_000;

impl LimitedQueues {
    /// Records what a claim of `queue` found.
    pub fn mark(&self, tenant: &str, queue: &str, limited: bool) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if limited {
            if !queues.contains(&(tenant.to_owned(), queue.to_owned())) {
                queues.insert((tenant.to_owned(), queue.to_owned()));
            }
        } else if !queues.is_empty() {
            queues.remove(&(tenant.to_owned(), queue.to_owned()));
        }
    }

    /// Whether the latest claim of `queue` found it limited.
    pub fn contains(&self, tenant: &str, queue: &str) -> bool {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        !queues.is_empty() && queues.contains(&(tenant.to_owned(), queue.to_owned()))
    }

    /// Waits for this process's turn at a limited claim of `queue`. The
    /// claims of a flow-controlled queue take turns in the database anyway
    /// (on the queue's row, or SQLite's writer); taking the turn here first
    /// makes the others wait in memory instead of each holding a pooled
    /// connection or a place in the writer's line, which other tenants need.
    pub async fn turn(&self, tenant: &str, queue: &str) -> crate::turns::Turn {
        self.turns
            .take(crate::turns::queue_key(tenant, queue))
            .await
    }

    /// The key after which the next walk over `queue`'s keys starts (`""`:
    /// the first key).
    pub fn walk_from(&self, tenant: &str, queue: &str) -> String {
        let walks = self.walks.lock().unwrap_or_else(|e| e.into_inner());
        walks
            .get(&(tenant.to_owned(), queue.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Records the last key a walk over `queue`'s keys visited.
    pub fn walked_to(&self, tenant: &str, queue: &str, last: String) {
        let mut walks = self.walks.lock().unwrap_or_else(|e| e.into_inner());
        if walks.len() >= MAX_WALKS {
            walks.clear();
        }
        walks.insert((tenant.to_owned(), queue.to_owned()), last);
    }
}

/// The hints of one (tenant, queue).
#[derive(Debug, Default)]
struct Hints {
    /// Counts hints: a subscriber that saw an older value missed one.
    seq: AtomicU64,
    /// Wakes waiting subscribers, one `notify_one` per job.
    notify: Notify,
}

type Key = (String, String);
type Entries = HashMap<Key, Arc<Hints>>;

/// Delivers hints to the subscribers of each (tenant, queue) in a process.
#[derive(Debug, Clone, Default)]
pub struct WakeupHub {
    entries: Arc<Mutex<Entries>>,
    /// When each queue's delayed hint (see [`WakeupHub::notify_after`]) is
    /// due, so a burst of throttled claims schedules one timer, not many.
    delayed: Arc<Mutex<HashMap<Key, tokio::time::Instant>>>,
}

/// Most waiters one hint wakes, whatever the count says (a batch of 1 000
/// jobs need not wake more claims than a server lets wait).
const MAX_WOKEN: usize = 1_024;

impl WakeupHub {
    /// A new hub with no subscribers.
    pub fn new() -> Self {
        WakeupHub::default()
    }

    /// Subscribes to hints for one queue of one tenant.
    pub fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        let key = (tenant.to_owned(), queue.to_owned());
        let mut entries = self.entries.lock().expect("wakeup hub lock");
        let hints = entries.entry(key.clone()).or_default().clone();
        let seen = hints.seq.load(Ordering::SeqCst);
        Wakeup {
            inner: Some(Subscription {
                hub: self.clone(),
                key,
                hints: Some(hints),
                seen,
            }),
        }
    }

    /// Says that `jobs` jobs became ready in one queue: wakes up to that
    /// many waiting subscribers, and every subscriber not waiting now sees
    /// the hint on its next wait. No-op when the queue has no subscribers.
    pub fn notify(&self, tenant: &str, queue: &str, jobs: usize) {
        if jobs == 0 {
            return;
        }
        let entries = self.entries.lock().expect("wakeup hub lock");
        if let Some(hints) = entries.get(&(tenant.to_owned(), queue.to_owned())) {
            hints.seq.fetch_add(1, Ordering::SeqCst);
            for _ in 0..jobs.min(MAX_WOKEN) {
                hints.notify.notify_one();
            }
        }
    }

    /// Says that `jobs` jobs of a queue become claimable `after` from now
    /// (a rate limit's window frees slots then): sends the hint then, from
    /// a timer task. An earlier or equal hint already due for the queue
    /// covers this one. Must be called inside a tokio runtime.
    pub fn notify_after(&self, tenant: &str, queue: &str, after: std::time::Duration, jobs: usize) {
        let key = (tenant.to_owned(), queue.to_owned());
        let due = tokio::time::Instant::now() + after;
        {
            let mut delayed = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            delayed.retain(|_, at| *at > now);
            if delayed.get(&key).is_some_and(|at| *at <= due) {
                return;
            }
            delayed.insert(key.clone(), due);
        }
        let hub = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due).await;
            hub.notify(&key.0, &key.1, jobs);
        });
    }

    /// Wakes every subscriber of every queue, e.g. after hints may have been
    /// lost.
    pub fn notify_all(&self) {
        let entries = self.entries.lock().expect("wakeup hub lock");
        for hints in entries.values() {
            hints.seq.fetch_add(1, Ordering::SeqCst);
            hints.notify.notify_waiters();
        }
    }

    /// Hints for the jobs an enqueue created (an existing job that was
    /// returned is not new and wakes nobody).
    pub fn notify_created(&self, tenant: &str, answers: &[Enqueued]) {
        for (queue, jobs) in created_by_queue(answers) {
            self.notify(tenant, queue, jobs);
        }
    }

    /// How many queues have subscribers now (for tests of the clean-up).
    pub fn queues(&self) -> usize {
        self.entries.lock().expect("wakeup hub lock").len()
    }
}

/// How many jobs an enqueue created in each queue, by queue name, leaving
/// out jobs that wait for others (their release sends its own hint).
pub fn created_by_queue(answers: &[Enqueued]) -> BTreeMap<&str, usize> {
    let mut out = BTreeMap::new();
    let ready = |a: &&Enqueued| a.created && a.job.state != crate::JobState::Waiting;
    for answer in answers.iter().filter(ready) {
        *out.entry(answer.job.queue.as_str()).or_default() += 1;
    }
    out
}

/// One subscriber's end: resolves when a hint arrived since the last wait.
#[derive(Debug)]
pub struct Wakeup {
    /// `None` for [`Wakeup::always`] and [`Wakeup::never`].
    inner: Option<Subscription>,
}

#[derive(Debug)]
struct Subscription {
    hub: WakeupHub,
    key: Key,
    /// Taken in `drop`, so the last reference goes under the hub's lock.
    hints: Option<Arc<Hints>>,
    /// The hint count at the last wait.
    seen: u64,
}

impl Wakeup {
    /// A wake-up that is always hinted, for sources whose claim itself
    /// waits for work (a long-poll over HTTP): the caller goes straight back
    /// to claiming instead of sleeping its poll interval.
    pub fn always() -> Self {
        Wakeup { inner: None }
    }

    /// A wake-up that never comes, for sources that only poll: the caller's
    /// timeout (its poll interval) does the waking.
    pub fn never() -> Self {
        Wakeup {
            inner: Some(Subscription {
                hub: WakeupHub::new(),
                key: Default::default(),
                hints: Some(Arc::default()),
                seen: 0,
            }),
        }
    }

    /// Waits for the next hint (returns at once if one arrived since the
    /// last call). Pair it with a timeout: hints are not guaranteed.
    pub async fn hinted(&mut self) {
        let Some(sub) = self.inner.as_mut() else {
            return;
        };
        let hints = sub.hints.as_ref().expect("taken only in drop");
        let notified = hints.notify.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the look at `seq`, so a hint sent between the
        // look and the wait still wakes this subscriber.
        notified.as_mut().enable();
        let seq = hints.seq.load(Ordering::SeqCst);
        if seq != sub.seen {
            sub.seen = seq;
            return;
        }
        notified.await;
        sub.seen = hints.seq.load(Ordering::SeqCst);
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(hints) = self.hints.take() else {
            return;
        };
        let mut entries = self.hub.entries.lock().expect("wakeup hub lock");
        // Every clone and drop of an entry happens under this lock, so the
        // count is exact: 1 means only the hub holds it now.
        drop(hints);
        if entries
            .get(&self.key)
            .is_some_and(|h| Arc::strong_count(h) == 1)
        {
            entries.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// Polls a wait once: whether it has resolved.
    fn ready(w: &mut Wakeup) -> bool {
        let mut hinted = std::pin::pin!(w.hinted());
        let mut cx = Context::from_waker(Waker::noop());
        hinted.as_mut().poll(&mut cx).is_ready()
    }

    #[test]
    fn a_hint_sent_before_the_wait_is_kept() {
        let hub = WakeupHub::new();
        let mut w = hub.subscribe("t", "q");
        let mut other = hub.subscribe("t", "other");
        hub.notify("t", "q", 1);
        assert!(ready(&mut w));
        assert!(!ready(&mut other));
        hub.notify_all();
        assert!(ready(&mut other));
        // Seen, then no longer pending (a spare permit may answer once more).
        assert!((0..3).any(|_| !ready(&mut w)), "a hint is consumed");
    }

    #[tokio::test]
    async fn a_hint_wakes_as_many_waiters_as_it_has_jobs() {
        let hub = WakeupHub::new();
        let woken = Arc::new(AtomicU64::new(0));
        let mut waiters = Vec::new();
        for _ in 0..100 {
            let mut w = hub.subscribe("t", "q");
            let woken = woken.clone();
            waiters.push(tokio::spawn(async move {
                w.hinted().await;
                woken.fetch_add(1, Ordering::SeqCst);
            }));
        }
        // Let every waiter reach its wait.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        hub.notify("t", "q", 3);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(woken.load(Ordering::SeqCst), 3);
        hub.notify_all();
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(woken.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn the_last_subscriber_gone_removes_the_entry() {
        let hub = WakeupHub::new();
        let a = hub.subscribe("t", "q");
        let b = hub.subscribe("t", "q");
        let c = hub.subscribe("t", "r");
        assert_eq!(hub.queues(), 2);
        drop(a);
        assert_eq!(hub.queues(), 2);
        drop(b);
        assert_eq!(hub.queues(), 1);
        drop(c);
        assert_eq!(hub.queues(), 0);
        // Hints for a queue nobody waits on create nothing.
        hub.notify("t", "q", 5);
        assert_eq!(hub.queues(), 0);
    }

    #[test]
    fn always_is_hinted_at_once_and_never_never() {
        assert!(ready(&mut Wakeup::always()));
        let mut never = Wakeup::never();
        assert!(!ready(&mut never));
    }

    #[test]
    fn notified_waiters_poll_ready() {
        // A waiter whose future was polled (registered) and then notified
        // resolves on its next poll.
        let hub = WakeupHub::new();
        let mut w = hub.subscribe("t", "q");
        let mut cx = Context::from_waker(Waker::noop());
        let mut hinted = std::pin::pin!(w.hinted());
        assert!(hinted.as_mut().poll(&mut cx).is_pending());
        hub.notify("t", "q", 1);
        assert!(matches!(hinted.as_mut().poll(&mut cx), Poll::Ready(())));
    }
}
