//! Wake-up hints across processes: LISTEN/NOTIFY on one channel. A payload
//! is `<tenant> <queue> <jobs>` (names never contain spaces); one without the
//! count, from an older tether, wakes every waiter of the queue.
//!
//! A NOTIFY inside every producer's transaction takes a global lock at
//! commit and serialises producers, so enqueues never send one themselves.
//! They hand the queue to a sender task that coalesces: whatever queues were
//! poked while it was busy go out together in one `pg_notify` statement, at
//! most one statement per [`WINDOW`]. Local subscribers are woken at once,
//! without the round trip. NOTIFY is only a hint: workers still poll.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPool};

use crate::exec::Pool;
use tether_core::{Wakeup, WakeupHub};
use tokio::sync::{mpsc, watch};

use crate::rows::Db;

/// The channel every tether process listens on.
const CHANNEL: &str = "tether_jobs";
/// Shortest gap between two NOTIFY statements of one process.
const WINDOW: Duration = Duration::from_millis(2);

/// A hint to send: tenant, queue and how many jobs became ready.
type Poke = (String, String, usize);

/// Where the LISTEN connection comes from: a pool straight to PostgreSQL,
/// and the moves of that pool to another server (after which it reconnects).
#[derive(Debug)]
pub(crate) struct Listen {
    pub(crate) pool: PgPool,
    pub(crate) moves: watch::Receiver<u64>,
}

/// Sends and receives the hints of one store. Dropping it (with the last
/// clone of the store) stops its tasks.
#[derive(Debug)]
pub(crate) struct Notifications {
    hub: WakeupHub,
    sender: OnceLock<mpsc::UnboundedSender<Poke>>,
    /// `None` behind a transaction pooler with no direct URL: no LISTEN,
    /// other processes' hints are missed and workers poll.
    listen: Option<Listen>,
    listener: OnceLock<()>,
    /// Never sends; its drop tells the listener (and the store's failover
    /// watchers) to stop.
    alive: watch::Sender<()>,
}

impl Notifications {
    pub(crate) fn new(listen: Option<Listen>, alive: watch::Sender<()>) -> Notifications {
        Notifications {
            hub: WakeupHub::new(),
            sender: OnceLock::new(),
            listen,
            listener: OnceLock::new(),
            alive,
        }
    }

    /// Hints that `jobs` jobs of `queue` of `tenant` are ready: wakes local
    /// subscribers now and other processes through NOTIFY shortly.
    pub(crate) fn poke(&self, pool: &Pool, tenant: &str, queue: &str, jobs: usize) {
        if jobs == 0 {
            return;
        }
        self.hub.notify(tenant, queue, jobs);
        let sender = self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(send_loop(pool.clone(), rx));
            tx
        });
        let _ = sender.send((tenant.to_owned(), queue.to_owned(), jobs));
    }

    /// This process's hub (its subscribers).
    pub(crate) fn hub(&self) -> &WakeupHub {
        &self.hub
    }

    /// Subscribes to hints for one queue, starting this store's listener on
    /// first use. Must be called inside a tokio runtime.
    pub(crate) fn subscribe(&self, tenant: &str, queue: &str) -> Wakeup {
        let wakeup = self.hub.subscribe(tenant, queue);
        if let Some(listen) = &self.listen {
            self.listener.get_or_init(|| {
                tokio::spawn(listen_loop(
                    listen.pool.clone(),
                    listen.moves.clone(),
                    self.hub.clone(),
                    self.alive.subscribe(),
                ));
            });
        }
        wakeup
    }
}

/// Sends the hints for freshly created jobs on the caller's connection (in a
/// transaction they are delivered at commit, and dropped on rollback).
pub(crate) async fn notify_in(
    conn: &mut crate::exec::Conn<'_>,
    tenant: &str,
    answers: &[tether_core::Enqueued],
) -> tether_core::Result<()> {
    let payloads: Vec<String> = tether_core::created_by_queue(answers)
        .into_iter()
        .map(|(queue, jobs)| payload(tenant, queue, jobs))
        .collect();
    if payloads.is_empty() {
        return Ok(());
    }
    sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) p")
        .bind(CHANNEL)
        .bind(&payloads)
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

fn payload(tenant: &str, queue: &str, jobs: usize) -> String {
    format!("{tenant} {queue} {jobs}")
}

/// Reads a payload: tenant, queue and the job count (`None`: wake all).
fn parse(payload: &str) -> Option<(&str, &str, Option<usize>)> {
    let mut parts = payload.splitn(3, ' ');
    let (tenant, queue) = (parts.next()?, parts.next()?);
    Some((tenant, queue, parts.next().and_then(|n| n.parse().ok())))
}

async fn send_loop(pool: Pool, mut rx: mpsc::UnboundedReceiver<Poke>) {
    while let Some(first) = rx.recv().await {
        let mut pokes = BTreeMap::new();
        let mut next = Some(first);
        while let Some((tenant, queue, jobs)) = next {
            *pokes.entry((tenant, queue)).or_insert(0usize) += jobs;
            next = rx.try_recv().ok();
        }
        let payloads: Vec<String> = pokes
            .into_iter()
            .map(|((t, q), jobs)| payload(&t, &q, jobs))
            .collect();
        // A lost hint costs one poll interval, nothing else: ignore errors.
        let _ = sqlx::query("SELECT pg_notify($1, p) FROM unnest($2::text[]) p")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&pool)
            .await;
        if pool.raw().is_closed() {
            return;
        }
        tokio::time::sleep(WINDOW).await;
    }
}

/// Listens on a dedicated connection (LISTEN does not work through a
/// transaction pooler: [`Listen`] is straight to PostgreSQL), reconnecting
/// when the pool moves to another server. After a lost connection every
/// subscriber is woken, since hints may have been missed.
async fn listen_loop(
    pool: PgPool,
    mut moves: watch::Receiver<u64>,
    hub: WakeupHub,
    mut alive: watch::Receiver<()>,
) {
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
        moves.mark_unchanged();
        loop {
            let received = tokio::select! {
                r = listener.try_recv() => r,
                // The pool moved to a new primary: listen there.
                _ = moves.changed() => break,
                // The store is gone (the sender never sends, so this only
                // ever resolves with an error).
                _ = alive.changed() => return,
            };
            match received {
                Ok(Some(n)) => match parse(n.payload()) {
                    Some((tenant, queue, Some(jobs))) => hub.notify(tenant, queue, jobs),
                    Some((tenant, queue, None)) => hub.notify(tenant, queue, usize::MAX),
                    None => {}
                },
                // The connection dropped; try_recv reconnects on the next
                // call. Hints sent meanwhile are gone: wake everyone.
                Ok(None) => hub.notify_all(),
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_the_job_count() {
        assert_eq!(parse(&payload("t", "q", 3)), Some(("t", "q", Some(3))));
        // An older sender's payload has no count.
        assert_eq!(parse("t q"), Some(("t", "q", None)));
        assert_eq!(parse("garbage"), None);
    }
}
