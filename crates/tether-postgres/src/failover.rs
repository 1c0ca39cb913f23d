//! Following the primary. With several hosts in the database URL (a primary
//! and its standbys), tether connects to the writable one, and a watcher
//! checks twice a second that it still is; when it is gone or read-only
//! (after a failover the old primary is down, or back as a standby), the
//! watcher finds the new primary and moves the pool there: new connections
//! go to it, and connections made before the move are dropped when next
//! taken from the pool. The LISTEN connection follows the same way.
//!
//! A statement in flight when the primary dies fails as `unavailable`; the
//! caller retries (workers do), and jobs it had claimed come back through
//! their leases as after any crash.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::watch;

use crate::url::Hosts;

/// How often the watcher checks the pool's server.
const CHECK_EVERY: Duration = Duration::from_millis(500);
/// Longest a check (connect, or the query) may take before the server
/// counts as gone.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between two rounds over the hosts while none is writable (the
/// standby is being promoted).
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// When a pool last moved to another server.
#[derive(Debug)]
pub(crate) struct Moves {
    last: Mutex<Option<Instant>>,
    count: watch::Sender<u64>,
}

impl Moves {
    pub(crate) fn new() -> Arc<Moves> {
        Arc::new(Moves {
            last: Mutex::new(None),
            count: watch::channel(0).0,
        })
    }

    fn record(&self) {
        *self.last.lock().expect("moves lock") = Some(Instant::now());
        self.count.send_modify(|n| *n += 1);
    }

    /// Whether a connection `age` old was made before the last move (so it
    /// may be on the old server).
    fn predates(&self, age: Duration) -> bool {
        self.last
            .lock()
            .expect("moves lock")
            .is_some_and(|at| age > at.elapsed())
    }

    /// Changes with every move (the listener reconnects on it).
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.count.subscribe()
    }
}

/// A pooled connection idle this long is pinged before it is handed out.
/// One used more recently is not: under load every statement would
/// otherwise pay a second round trip (sqlx pings on every acquire by
/// default), and a connection that died meanwhile fails its statement as
/// `unavailable`, which callers retry, like one that dies mid-statement.
const PING_IDLE: Duration = Duration::from_secs(1);

/// Pool options that drop connections made before the last move and ping
/// those idle for [`PING_IDLE`] or longer (after a database restart in a
/// quiet period, every pooled connection is dead).
pub(crate) fn pool_options(max_connections: u32, moves: &Arc<Moves>) -> PgPoolOptions {
    let moves = moves.clone();
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            let fresh = !moves.predates(meta.age);
            Box::pin(async move {
                if fresh && meta.idle_for >= PING_IDLE {
                    conn.ping().await?;
                }
                Ok(fresh)
            })
        })
}

/// The first of `hosts` that answers (and is writable, when asked), trying
/// them in order.
// (The helpers below return boxed futures: spawned, the watcher must be
// `Send` for every lifetime, which rustc cannot see through `async fn`s that
// borrow a connection.)
pub(crate) fn find(hosts: &Hosts) -> BoxFuture<'_, Result<PgConnectOptions, String>> {
    Box::pin(async move {
        let mut reasons = Vec::new();
        for candidate in &hosts.candidates {
            match connect(candidate, hosts.writable_only).await {
                Ok(_) => return Ok(candidate.clone()),
                Err(why) => reasons.push(format!(
                    "{}:{}: {why}",
                    candidate.get_host(),
                    candidate.get_port()
                )),
            }
        }
        Err(format!("no usable server: {}", reasons.join("; ")))
    })
}

/// A connection to `options`, checked to be writable when asked.
fn connect(
    options: &PgConnectOptions,
    writable_only: bool,
) -> BoxFuture<'_, Result<PgConnection, String>> {
    Box::pin(async move {
        let mut conn = tokio::time::timeout(CHECK_TIMEOUT, options.connect())
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        check(&mut conn, writable_only).await?;
        Ok(conn)
    })
}

/// Whether the server of `conn` still answers and, when asked, takes writes
/// (libpq's test for read-write: `transaction_read_only` is off). Simple
/// protocol, so that it also works through a transaction pooler.
fn check(conn: &mut PgConnection, writable_only: bool) -> BoxFuture<'_, Result<(), String>> {
    use sqlx::Row;
    Box::pin(async move {
        let row = tokio::time::timeout(
            CHECK_TIMEOUT,
            sqlx::Executor::fetch_one(&mut *conn, "SHOW transaction_read_only"),
        )
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())?;
        let read_only: String = row.try_get(0).map_err(|e| e.to_string())?;
        if writable_only && read_only != "off" {
            return Err("read-only (a standby)".to_owned());
        }
        Ok(())
    })
}

/// Keeps `pool` on the writable server of `hosts` until `alive` closes.
pub(crate) async fn watch(
    hosts: Hosts,
    pool: PgPool,
    moves: Arc<Moves>,
    mut alive: watch::Receiver<()>,
) {
    let mut probe: Option<PgConnection> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CHECK_EVERY) => {}
            _ = alive.changed() => return,
        }
        if pool.is_closed() {
            return;
        }
        let current = pool.connect_options();
        let healthy = match probe.as_mut() {
            Some(conn) => check(conn, hosts.writable_only).await.is_ok(),
            None => match connect(&current, hosts.writable_only).await {
                Ok(conn) => {
                    probe = Some(conn);
                    true
                }
                Err(_) => false,
            },
        };
        if healthy {
            continue;
        }
        if let Some(conn) = probe.take() {
            let _ = tokio::time::timeout(CHECK_TIMEOUT, conn.close()).await;
        }
        let next = loop {
            match find(&hosts).await {
                Ok(next) => break next,
                Err(why) => {
                    tracing::warn!(target: "tether::failover", "{why}; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_EVERY) => {}
                        _ = alive.changed() => return,
                    }
                }
            }
        };
        if (next.get_host(), next.get_port()) != (current.get_host(), current.get_port()) {
            tracing::warn!(
                target: "tether::failover",
                from = %format!("{}:{}", current.get_host(), current.get_port()),
                to = %format!("{}:{}", next.get_host(), next.get_port()),
                "the database moved: connecting to the new primary"
            );
            pool.set_connect_options(next);
            moves.record();
        }
    }
}
