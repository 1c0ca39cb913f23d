//! Wake-up hints: "queue Q of tenant T may have ready jobs now".
//!
//! A hint is only a hint. Workers still poll at an interval, because a hint
//! can be lost (a dropped LISTEN connection, another process's enqueue on
//! SQLite) and jobs also become ready by time alone (delays, backoff).
//! Subscribing before claiming means a hint sent between an empty claim and
//! the wait is never missed: the watch channel remembers it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// One hint channel per (tenant, queue); the value only counts hints.
type Channels = HashMap<(String, String), watch::Sender<u64>>;

/// Channels nobody listens to any more are dropped when the table reaches
/// this size, then each time it doubles: a long-poll may name any queue, so
/// names must not pile up in memory (amortised, a sweep costs O(1) a
/// subscription).
const SWEEP_FROM: usize = 1_024;

/// Delivers hints to the subscribers of each (tenant, queue) in a process.
#[derive(Debug, Clone, Default)]
pub struct WakeupHub {
    senders: Arc<Mutex<Channels>>,
}

impl WakeupHub {
    /// A new hub with no subscribers.
    pub fn new() -> Self {
        WakeupHub::default()
    }

    /// Subscribes to hints for one queue of one tenant.
    pub fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        let mut senders = self.senders.lock().expect("wakeup hub lock");
        if senders.len() >= SWEEP_FROM && senders.len().is_power_of_two() {
            senders.retain(|_, s| s.receiver_count() > 0);
        }
        let sender = senders
            .entry((tenant.to_owned(), queue.to_owned()))
            .or_insert_with(|| watch::channel(0).0);
        let mut rx = sender.subscribe();
        rx.mark_unchanged();
        Wakeup { rx: Some(rx) }
    }

    /// Wakes the subscribers of one queue (no-op when it has none).
    pub fn notify(&self, tenant: &str, queue: &str) {
        let senders = self.senders.lock().expect("wakeup hub lock");
        if let Some(sender) = senders.get(&(tenant.to_owned(), queue.to_owned())) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every subscriber, e.g. after hints may have been lost.
    pub fn notify_all(&self) {
        let senders = self.senders.lock().expect("wakeup hub lock");
        for sender in senders.values() {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// One subscriber's end: resolves when a hint arrived since the last wait.
#[derive(Debug)]
pub struct Wakeup {
    /// `None` for [`Wakeup::always`].
    rx: Option<watch::Receiver<u64>>,
}

impl Wakeup {
    /// A wake-up that is always hinted, for sources whose claim itself
    /// waits for work (a long-poll over HTTP): the caller goes straight back
    /// to claiming instead of sleeping its poll interval.
    pub fn always() -> Self {
        Wakeup { rx: None }
    }

    /// Waits for the next hint (returns at once if one arrived since the
    /// last call). Pair it with a timeout: hints are not guaranteed.
    pub async fn hinted(&mut self) {
        let Some(rx) = self.rx.as_mut() else {
            return;
        };
        if rx.changed().await.is_err() {
            // The hub is gone: no hint will ever come; let the caller's
            // timeout (its poll interval) do the waking.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_sent_before_the_wait_is_kept() {
        let hub = WakeupHub::new();
        let w = hub.subscribe("t", "q");
        let other = hub.subscribe("t", "other");
        let (mut w, mut other) = (w.rx.unwrap(), other.rx.unwrap());
        hub.notify("t", "q");
        assert!(w.has_changed().unwrap());
        assert!(!other.has_changed().unwrap());
        hub.notify_all();
        assert!(other.has_changed().unwrap());
        other.mark_unchanged();
        w.mark_unchanged();
        assert!(!w.has_changed().unwrap());
    }

    #[test]
    fn channels_without_subscribers_do_not_pile_up() {
        let hub = WakeupHub::new();
        let mut kept = hub.subscribe("t", "kept").rx.unwrap();
        for i in 0..10_000 {
            drop(hub.subscribe("t", &format!("q{i}")));
        }
        let size = hub.senders.lock().unwrap().len();
        assert!(size <= 2 * SWEEP_FROM, "{size} channels for 1 subscriber");
        hub.notify("t", "kept");
        assert!(kept.has_changed().unwrap(), "a live subscription survives");
        kept.mark_unchanged();
    }

    #[test]
    fn always_is_hinted_at_once() {
        use std::future::Future;
        let mut w = Wakeup::always();
        let mut hinted = std::pin::pin!(w.hinted());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(hinted.as_mut().poll(&mut cx).is_ready());
    }
}
