//! The outbox: successes waiting to be reported, shared by the fetchers
//! (whose next claim carries them, one round trip and one commit for both)
//! and the completer (which sends the ones no claim takes soon).
//!
//! A completion goes into the outbox before its job's slot frees, so the
//! claim that slot lets out finds it there. While a fetcher waits for a
//! slot or gathers slots for a claim, the completions that arrive wait for
//! that claim, at most the outbox's `wait` (the source's
//! [`report_wait`](crate::Source::report_wait): a moment over HTTP, none
//! in process); when no fetcher is about to claim (each is in a claim's
//! round trip or idle, waiting for work), the completer takes them at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tether_core::Completion;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// A success waiting to be reported, and where its answer goes.
pub(crate) struct Pending<A> {
    pub(crate) item: Completion,
    pub(crate) done: oneshot::Sender<A>,
    /// When it came in.
    since: Instant,
    /// A claim may carry it (not once a claim carrying it failed: then the
    /// completer sends it, alone if need be).
    carry: bool,
}

/// The waiting completions (`A` is what each waits to hear).
pub(crate) struct Outbox<A> {
    waiting: Mutex<VecDeque<Pending<A>>>,
    /// Fetchers between the end of one claim and the taking of the outbox
    /// for the next (waiting for a slot, gathering slots).
    claiming: AtomicUsize,
    /// Something came in, or a claim went without taking everything.
    pub(crate) changed: Notify,
    /// Longest wait of a completion for a claim to carry it.
    wait: Duration,
}

/// A fetcher about to claim: while one is held, completions wait for it.
pub(crate) struct Claiming<'a, A> {
    outbox: &'a Outbox<A>,
}

impl<A> Drop for Claiming<'_, A> {
    fn drop(&mut self) {
        self.outbox.claiming.fetch_sub(1, Ordering::SeqCst);
        // What came in after the take is the completer's now.
        self.outbox.changed.notify_one();
    }
}

impl<A> Outbox<A> {
    /// An outbox whose completions wait at most `wait` for a claim.
    pub(crate) fn new(wait: Duration) -> Self {
        Outbox {
            waiting: Mutex::new(VecDeque::new()),
            claiming: AtomicUsize::new(0),
            changed: Notify::new(),
            wait,
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Pending<A>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A success to report; its answer goes to `done`.
    pub(crate) fn push(&self, item: Completion, done: oneshot::Sender<A>) {
        self.lock().push_back(Pending {
            item,
            done,
            since: Instant::now(),
            carry: true,
        });
        self.changed.notify_one();
    }

    /// Completions a failed claim carried, for the completer to send.
    pub(crate) fn give_back(&self, items: Vec<(Completion, oneshot::Sender<A>)>) {
        let mut waiting = self.lock();
        for (item, done) in items.into_iter().rev() {
            waiting.push_front(Pending {
                item,
                done,
                since: Instant::now(),
                carry: false,
            });
        }
        drop(waiting);
        self.changed.notify_one();
    }

    /// A fetcher waits for a slot and will claim once it has one.
    pub(crate) fn claiming(&self) -> Claiming<'_, A> {
        self.claiming.fetch_add(1, Ordering::SeqCst);
        Claiming { outbox: self }
    }

    /// Up to `max` completions for a claim to carry, oldest first.
    pub(crate) fn take_for_claim(&self, max: usize) -> Vec<(Completion, oneshot::Sender<A>)> {
        let mut waiting = self.lock();
        let mut out = Vec::new();
        let mut kept = VecDeque::new();
        while let Some(p) = waiting.pop_front() {
            if p.carry && out.len() < max {
                out.push((p.item, p.done));
            } else {
                kept.push_back(p);
            }
        }
        *waiting = kept;
        out
    }

    /// Up to `max` completions the completer should send now — every one
    /// when `all` (the worker is stopping) or no fetcher is about to claim,
    /// else those that waited the outbox's `wait` or may not be carried —
    /// and when the next one falls due.
    pub(crate) fn due(
        &self,
        all: bool,
        max: usize,
    ) -> (Vec<(Completion, oneshot::Sender<A>)>, Option<Instant>) {
        let all = all || self.wait.is_zero() || self.claiming.load(Ordering::SeqCst) == 0;
        let now = Instant::now();
        let mut waiting = self.lock();
        let mut out = Vec::new();
        let mut kept = VecDeque::new();
        while let Some(p) = waiting.pop_front() {
            let due = all || !p.carry || p.since + self.wait <= now;
            if due && out.len() < max {
                out.push((p.item, p.done));
            } else {
                kept.push_back(p);
            }
        }
        let next = kept.iter().map(|p| p.since + self.wait).min();
        *waiting = kept;
        (out, next)
    }

    /// Nothing is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::LeaseToken;

    const WAIT: Duration = Duration::from_millis(20);
    use uuid::Uuid;

    fn item() -> Completion {
        Completion {
            id: Uuid::new_v4(),
            lease_token: LeaseToken(Uuid::new_v4()),
            result: None,
        }
    }

    #[tokio::test]
    async fn completions_wait_for_a_claim_only_while_one_is_coming() {
        let outbox: Outbox<()> = Outbox::new(WAIT);
        let (tx, _rx) = oneshot::channel();
        outbox.push(item(), tx);
        // No fetcher is about to claim: the completer sends it at once.
        let (now, next) = outbox.due(false, 10);
        assert_eq!((now.len(), next), (1, None));

        let claiming = outbox.claiming();
        let (tx, _rx) = oneshot::channel();
        outbox.push(item(), tx);
        let (now, next) = outbox.due(false, 10);
        assert!(now.is_empty(), "it waits for the claim");
        assert!(next.is_some());
        // The claim carries it.
        assert_eq!(outbox.take_for_claim(1000).len(), 1);
        drop(claiming);
        assert!(outbox.is_empty());

        // One the claim did not take falls due after the wait.
        let _claiming = outbox.claiming();
        let (tx, _rx) = oneshot::channel();
        outbox.push(item(), tx);
        tokio::time::sleep(WAIT).await;
        assert_eq!(outbox.due(false, 10).0.len(), 1);
    }

    #[tokio::test]
    async fn given_back_completions_are_never_carried_again() {
        let outbox: Outbox<()> = Outbox::new(WAIT);
        let (tx, _rx) = oneshot::channel();
        let _claiming = outbox.claiming();
        outbox.give_back(vec![(item(), tx)]);
        assert!(outbox.take_for_claim(1000).is_empty());
        assert_eq!(outbox.due(false, 10).0.len(), 1);
    }

    #[tokio::test]
    async fn without_a_wait_nothing_waits_for_a_claim() {
        let outbox: Outbox<()> = Outbox::new(Duration::ZERO);
        let _claiming = outbox.claiming();
        let (tx, _rx) = oneshot::channel();
        outbox.push(item(), tx);
        assert_eq!(outbox.due(false, 10).0.len(), 1);
    }

    #[tokio::test]
    async fn a_stopping_worker_sends_everything() {
        let outbox: Outbox<()> = Outbox::new(WAIT);
        let _claiming = outbox.claiming();
        for _ in 0..3 {
            let (tx, _rx) = oneshot::channel();
            outbox.push(item(), tx);
        }
        assert_eq!(outbox.due(true, 2).0.len(), 2);
        assert_eq!(outbox.due(true, 2).0.len(), 1);
    }
}
