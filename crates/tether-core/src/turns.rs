//! Turns: how many operations of one kind may use a shared resource at once
//! for one key (a tenant, or a tenant's queue), the rest waiting in memory.
//!
//! The resources a server shares between tenants — pooled connections,
//! SQLite's readers and its single writer — are few. An operation that
//! must wait its turn anyway (the claims of a flow-controlled queue take
//! turns on the queue's row) or that is heavy (a throughput report reads a
//! day of history) would otherwise wait *holding* one of them, and a tenant
//! firing forty at once would hold them all. Taken before the resource, a
//! turn keeps one key's surplus waiting here, where it costs nothing to
//! anyone else (invariant 19 of docs/DESIGN.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Per-key turns: at most `width` holders of a turn per key at once.
/// A key's entry lives only while someone holds or waits for a turn.
#[derive(Debug)]
pub struct Turns {
    width: usize,
    keys: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A turn held; dropping it lets the next waiter of its key in.
#[derive(Debug)]
pub struct Turn {
    permit: Option<OwnedSemaphorePermit>,
    key: String,
    turns: Arc<Turns>,
}

impl Turns {
    /// Turns of `width` holders per key (at least one).
    pub fn new(width: usize) -> Arc<Turns> {
        Arc::new(Turns {
            width: width.max(1),
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// Waits for a turn of `key`. Waiters of one key get their turns in the
    /// order they asked (tokio's semaphore is fair).
    pub async fn take(self: &Arc<Self>, key: String) -> Turn {
        let gate = {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            keys.entry(key.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.width)))
                .clone()
        };
        let permit = gate
            .acquire_owned()
            .await
            .expect("a turn gate is never closed");
        Turn {
            permit: Some(permit),
            key,
            turns: self.clone(),
        }
    }

    /// A turn of `key` if one is free now, else `None` (nothing waits).
    pub fn try_take(self: &Arc<Self>, key: String) -> Option<Turn> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let gate = keys
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.width)))
            .clone();
        match gate.try_acquire_owned().ok() {
            Some(permit) => Some(Turn {
                permit: Some(permit),
                key,
                turns: self.clone(),
            }),
            None => {
                // A new entry nobody holds is not kept.
                if keys.get(&key).is_some_and(|g| {
                    Arc::strong_count(g) == 1 && g.available_permits() == self.width
                }) {
                    keys.remove(&key);
                }
                None
            }
        }
    }

    /// Keys with an entry now (someone holds or waits for a turn).
    pub fn keys_in_use(&self) -> usize {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut keys = self.turns.keys.lock().unwrap_or_else(|e| e.into_inner());
        // Nobody else holds the gate (the map's Arc is the only one) and
        // every permit is back: the key is idle, its entry goes.
        if let Some(gate) = keys.get(&self.key) {
            if Arc::strong_count(gate) == 1 && gate.available_permits() == self.turns.width {
                keys.remove(&self.key);
            }
        }
    }
}

/// The key of one tenant's queue in [`Turns`].
pub fn queue_key(tenant: &str, queue: &str) -> String {
    // Names cannot hold a NUL (validate::name), so the pair is unambiguous.
    format!("{tenant}\0{queue}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_key_waits_for_its_turn_while_another_key_goes_ahead() {
        let turns = Turns::new(1);
        let held = turns.take("a".into()).await;
        // A second turn of "a" waits...
        let waiting = tokio::time::timeout(Duration::from_millis(50), turns.take("a".into())).await;
        assert!(waiting.is_err(), "a second turn of the same key must wait");
        // ...while "b" is not held back by "a".
        let b = tokio::time::timeout(Duration::from_secs(30), turns.take("b".into())).await;
        assert!(b.is_ok(), "another key must get its turn at once");
        drop(b);
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(30), turns.take("a".into())).await;
        assert!(again.is_ok(), "the turn comes back when the holder lets go");
        drop(again);
        assert_eq!(turns.keys_in_use(), 0, "idle keys leave no entry");
    }

    #[tokio::test]
    async fn a_wider_gate_lets_that_many_in() {
        let turns = Turns::new(2);
        let first = turns.take("t".into()).await;
        let second = tokio::time::timeout(Duration::from_secs(30), turns.take("t".into())).await;
        assert!(second.is_ok());
        let third = tokio::time::timeout(Duration::from_millis(50), turns.take("t".into())).await;
        assert!(third.is_err());
        drop((first, second));
        assert_eq!(turns.keys_in_use(), 0);
    }

    #[tokio::test]
    async fn try_take_never_waits() {
        let turns = Turns::new(1);
        let held = turns.try_take("t".into()).expect("a free turn");
        assert!(turns.try_take("t".into()).is_none());
        assert!(turns.try_take("u".into()).is_some());
        drop(held);
        assert!(turns.try_take("t".into()).is_some());
        assert_eq!(turns.keys_in_use(), 0);
    }
}
