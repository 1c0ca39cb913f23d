//! Wake-up hints across processes: LISTEN/NOTIFY on one channel.
//!
//! A NOTIFY inside every producer's transaction takes a global lock at
//! commit and serialises producers, so enqueues never send one themselves.
//! They hand the queue to a sender task that coalesces: whatever queues were
//! poked while it was busy go out together in one `pg_notify` statement, at
//! most one statement per [`WINDOW`]. Local subscribers are woken at once,
//! without the round trip. NOTIFY is only a hint: workers still poll.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};
use tether_core::{Wakeup, WakeupHub};
use tokio::sync::{mpsc, watch};

/// The channel every tether process listens on.
const CHANNEL: &str = "tether_jobs";
/// Shortest gap between two NOTIFY statements of one process.
const WINDOW: Duration = Duration::from_millis(2);

/// Sends and receives the hints of one store. Dropping it (with the last
/// clone of the store) stops its tasks.
#[derive(Debug)]
pub(crate) struct Notifications {
    hub: WakeupHub,
    sender: OnceLock<mpsc::UnboundedSender<(String, String)>>,
    listener: OnceLock<()>,
    /// Never sends; its drop tells the listener to stop.
    alive: watch::Sender<()>,
}

impl Default for Notifications {
    fn default() -> Self {
        Notifications {
            hub: WakeupHub::new(),
            sender: OnceLock::new(),
            listener: OnceLock::new(),
            alive: watch::channel(()).0,
        }
    }
}

impl Notifications {
    /// Hints that `queue` of `tenant` has ready jobs: wakes local
    /// subscribers now and other processes through NOTIFY shortly.
    pub(crate) fn poke(&self, pool: &PgPool, tenant: &str, queue: &str) {
        self.hub.notify(tenant, queue);
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(send_loop(pool.clone(), rx));
            tx
        });
        let _ = sender.send((tenant.to_owned(), queue.to_owned()));
    }

    /// Subscribes to hints for one queue, starting this store's listener on
    /// first use. Must be called inside a tokio runtime.
    pub(crate) fn subscribe(&self, pool: &PgPool, tenant: &str, queue: &str) -> Wakeup {
        let wakeup = self.hub.subscribe(tenant, queue);
        self.listener.get_or_init(|| {
            tokio::spawn(listen_loop(
                pool.clone(),
                self.hub.clone(),
                self.alive.subscribe(),
            ));
        });
        wakeup
    }
}

/// Sends the hints for freshly created jobs on the caller's connection (in a
/// transaction they are delivered at commit, and dropped on rollback).
pub(crate) async fn notify_in(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    answers: &[tether_core::Enqueued],
) -> tether_core::Result<()> {
    let payloads: BTreeSet<String> = answers
        .iter()
        .filter(|a| a.created)
        .map(|a| format!("{tenant} {}", a.job.queue))
        .collect();
    if payloads.is_empty() {
        return Ok(());
    }
    let payloads: Vec<String> = payloads.into_iter().collect();
    sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) p")
        .bind(CHANNEL)
        .bind(&payloads)
        .execute(conn)
        .await
        .map_err(crate::db_error)?;
    Ok(())
}

async fn send_loop(pool: PgPool, mut rx: mpsc::UnboundedReceiver<(String, String)>) {
    while let Some(first) = rx.recv().await {
        let mut keys = BTreeSet::from([first]);
        while let Ok(key) = rx.try_recv() {
            keys.insert(key);
        }
        let payloads: Vec<String> = keys.into_iter().map(|(t, q)| format!("{t} {q}")).collect();
        // A lost hint costs one poll interval, nothing else: ignore errors.
        let _ = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) p")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&pool)
            .await;
        if pool.is_closed() {
            return;
        }
        tokio::time::sleep(WINDOW).await;
    }
}

/// Listens on a dedicated connection (LISTEN does not work through a
/// transaction pooler: point tether at PostgreSQL directly). After a lost
/// connection every subscriber is woken, since hints may have been missed.
async fn listen_loop(pool: PgPool, hub: WakeupHub, mut alive: watch::Receiver<()>) {
    loop {
        if pool.is_closed() || alive.has_changed().is_err() {
            return;
        }
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if listener.listen(CHANNEL).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        hub.notify_all();
        loop {
            let received = tokio::select! {
                r = listener.try_recv() => r,
                // The store is gone (the sender never sends, so this only
                // ever resolves with an error).
                _ = alive.changed() => return,
            };
            match received {
                Ok(Some(n)) => {
                    if let Some((tenant, queue)) = n.payload().split_once(' ') {
                        hub.notify(tenant, queue);
                    }
                }
                // The connection dropped; try_recv reconnects on the next
                // call. Hints sent meanwhile are gone: wake everyone.
                Ok(None) => hub.notify_all(),
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
