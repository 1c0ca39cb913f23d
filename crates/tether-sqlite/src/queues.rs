//! Queues: their stats, pausing and their settings. A queue without a row
//! reads as one with the default settings; pausing or configuring it
//! creates its row, within the tenant's queue limit.

use sqlx::{Row, SqliteConnection};
use tether_core::{
    Error, EventKind, MinuteCounts, Percentiles, QueueConfig, QueueConfigPatch, QueueStats,
    QueueThroughput, Result,
};

use crate::rows::{self, Db};
use crate::sql::enqueue::COUNT_QUEUES;
use crate::sql::queues::{
    CONFIGURE_QUEUE, DELETE_EMPTY_QUEUE, LIST_QUEUES, QUEUE_EXISTS, QUEUE_HOLDS, QUEUE_STATS,
    RESUME, SET_PAUSED, THROUGHPUT_EVENTS, THROUGHPUT_TIMES,
};
use crate::sql::schedules::DB_NOW;
use crate::SqliteStore;

pub(crate) async fn queue_stats(
    store: &SqliteStore,
    tenant: &str,
    queue: &str,
) -> Result<QueueStats> {
    let mut conn = store.reader.acquire().await.db()?;
    queue_stats_on(&mut conn, tenant, queue).await
}

pub(crate) async fn list_queues(store: &SqliteStore, tenant: &str) -> Result<Vec<QueueStats>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(LIST_QUEUES)
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    found.iter().map(rows::queue_stats).collect()
}

pub(crate) async fn set_paused(
    store: &SqliteStore,
    tenant: &str,
    queue: &str,
    paused: bool,
    max_queues: u32,
) -> Result<QueueStats> {
    let defaults = QueueConfig::default();
    let mut tx = store.begin().await?;
    if !paused {
        // A queue without a row is not paused: resuming creates none.
        sqlx::query(RESUME)
            .bind(tenant)
            .bind(queue)
            .execute(&mut *tx)
            .await
            .db()?;
        let stats = queue_stats_on(&mut tx, tenant, queue).await?;
        tx.commit().await.db()?;
        return Ok(stats);
    }
    check_new_queue(&mut tx, tenant, queue, max_queues).await?;
    sqlx::query(SET_PAUSED)
        .bind(tenant)
        .bind(queue)
        .bind(paused)
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .execute(&mut *tx)
        .await
        .db()?;
    // Read back inside the transaction: the answer is what was written.
    let stats = queue_stats_on(&mut tx, tenant, queue).await?;
    tx.commit().await.db()?;
    Ok(stats)
}

pub(crate) async fn configure_queue(
    store: &SqliteStore,
    tenant: &str,
    queue: &str,
    patch: &QueueConfigPatch,
    max_queues: u32,
) -> Result<QueueStats> {
    let defaults = QueueConfig::default();
    let mut tx = store.begin().await?;
    check_new_queue(&mut tx, tenant, queue, max_queues).await?;
    sqlx::query(CONFIGURE_QUEUE)
        .bind(tenant)
        .bind(queue)
        .bind(patch.max_attempts)
        .bind(patch.backoff.map(|b| b.base_ms))
        .bind(patch.backoff.map(|b| b.cap_ms))
        .bind(patch.default_lease_ttl_ms)
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .bind(patch.max_running.is_some())
        .bind(patch.max_running.flatten())
        .bind(patch.rate_limit.is_some())
        .bind(patch.rate_limit.flatten().map(|r| r.count))
        .bind(patch.rate_limit.flatten().map(|r| r.period_ms))
        .bind(patch.key_max_running.is_some())
        .bind(patch.key_max_running.flatten())
        .bind(patch.fair)
        .execute(&mut *tx)
        .await
        .db()?;
    let stats = queue_stats_on(&mut tx, tenant, queue).await?;
    tx.commit().await.db()?;
    Ok(stats)
}

/// Queue stats on any connection (the writer inside a transaction, or a
/// reader).
async fn queue_stats_on(
    conn: &mut SqliteConnection,
    tenant: &str,
    queue: &str,
) -> Result<QueueStats> {
    let row = sqlx::query(QUEUE_STATS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(conn)
        .await
        .db()?;
    rows::queue_stats(&row)
}

/// Before an operation that creates queue `queue`'s row if missing (on the
/// open write transaction): `LimitReached` if it is missing and the tenant
/// has `max` queue rows already.
async fn check_new_queue(
    conn: &mut SqliteConnection,
    tenant: &str,
    queue: &str,
    max: u32,
) -> Result<()> {
    let exists: bool = sqlx::query_scalar(QUEUE_EXISTS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(&mut *conn)
        .await
        .db()?;
    if exists {
        return Ok(());
    }
    let n: i64 = sqlx::query_scalar(COUNT_QUEUES)
        .bind(tenant)
        .fetch_one(conn)
        .await
        .db()?;
    if n >= i64::from(max) {
        return Err(Error::too_many_queues(max));
    }
    Ok(())
}

pub(crate) async fn delete_queue(store: &SqliteStore, tenant: &str, queue: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    let deleted = sqlx::query(DELETE_EMPTY_QUEUE)
        .bind(tenant)
        .bind(queue)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    if deleted.is_some() {
        return tx.commit().await.db();
    }
    let row = sqlx::query(QUEUE_HOLDS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let jobs: i64 = row.try_get("jobs").db()?;
    let has_row: bool = row.try_get("has_row").db()?;
    SqliteStore::finish_unchanged(tx).await?;
    Err(Error::queue_not_deletable(queue, jobs, has_row))
}

pub(crate) async fn throughput(
    store: &SqliteStore,
    tenant: &str,
    queue: &str,
    minutes: u32,
) -> Result<QueueThroughput> {
    let mut conn = store.reader.acquire().await.db()?;
    let now: i64 = sqlx::query_scalar(DB_NOW)
        .fetch_one(&mut *conn)
        .await
        .db()?;
    let now = rows::ts(now)?;
    let start = MinuteCounts::window_start(now, minutes).timestamp_millis();
    let found = sqlx::query(THROUGHPUT_EVENTS)
        .bind(tenant)
        .bind(queue)
        .bind(start)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut events = Vec::with_capacity(found.len());
    for row in &found {
        let event: &str = row.try_get("event").db()?;
        let event = event
            .parse::<EventKind>()
            .map_err(|e| Error::Storage(format!("unknown history event: {e}").into()))?;
        let n: i64 = row.try_get("n").db()?;
        events.push((rows::ts(row.try_get("minute").db()?)?, event, n as u64));
    }
    let times = sqlx::query(THROUGHPUT_TIMES)
        .bind(tenant)
        .bind(queue)
        .bind(start)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut waits = Vec::with_capacity(times.len());
    let mut runs = Vec::with_capacity(times.len());
    for row in &times {
        waits.push(row.try_get::<i64, _>("wait").db()?);
        runs.push(row.try_get::<i64, _>("run").db()?);
    }
    // SQLite has no percentile aggregate: sorted here, picked the way
    // PostgreSQL's percentile_disc picks.
    waits.sort_unstable();
    runs.sort_unstable();
    Ok(QueueThroughput {
        minutes: MinuteCounts::series(now, minutes, &events),
        wait_ms: Percentiles::of_sorted(&waits),
        run_ms: Percentiles::of_sorted(&runs),
    })
}
