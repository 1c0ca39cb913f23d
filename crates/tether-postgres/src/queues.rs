//! Queues: their stats, pausing and their settings. A queue without a row
//! reads as one with the default settings; pausing or configuring it
//! creates its row, within the tenant's queue limit.

use chrono::{DateTime, Utc};
use sqlx::Row;
use tether_core::{
    Error, EventKind, MinuteCounts, Percentiles, QueueConfigPatch, QueueStats, QueueThroughput,
    Result,
};

use crate::enqueue::register_queues;
use crate::enqueue::QUEUE_ROWS_LOCK;
use crate::rows::{self, Db};
use crate::sql::queues::{
    CONFIGURE_QUEUE, DB_NOW, DELETE_EMPTY_QUEUE, LIST_QUEUES, QUEUE_HOLDS, QUEUE_STATS, RESUME,
    SET_PAUSED, THROUGHPUT_EVENTS, THROUGHPUT_TIMES,
};
use crate::sql::TRY_LOCK_TENANT;
use crate::PgStore;

pub(crate) async fn queue_stats(store: &PgStore, tenant: &str, queue: &str) -> Result<QueueStats> {
    sqlx::query(QUEUE_STATS)
        .bind(tenant)
        .bind(queue)
        .try_map(|row| rows::queue_stats(&row))
        .fetch_one(&store.db)
        .await
        .db()
}

pub(crate) async fn list_queues(store: &PgStore, tenant: &str) -> Result<Vec<QueueStats>> {
    sqlx::query(LIST_QUEUES)
        .bind(tenant)
        .try_map(|row| rows::queue_stats(&row))
        .fetch_all(&store.db)
        .await
        .db()
}

pub(crate) async fn set_paused(
    store: &PgStore,
    tenant: &str,
    queue: &str,
    paused: bool,
    max_queues: u32,
) -> Result<QueueStats> {
    if !paused {
        // A queue without a row is not paused: resuming creates none.
        sqlx::query(RESUME)
            .bind(tenant)
            .bind(queue)
            .execute(&store.db)
            .await
            .db()?;
        return queue_stats(store, tenant, queue).await;
    }
    // The row is created (within the limit) and set in one
    // transaction, so a removal pass never sees it unpaused and empty.
    let mut tx = store.begin().await?;
    register_queues(&mut tx.conn(), tenant, &[queue], Some(max_queues)).await?;
    sqlx::query(SET_PAUSED)
        .bind(tenant)
        .bind(queue)
        .bind(paused)
        .execute(&mut tx.conn())
        .await
        .db()?;
    tx.commit().await.db()?;
    queue_stats(store, tenant, queue).await
}

pub(crate) async fn configure_queue(
    store: &PgStore,
    tenant: &str,
    queue: &str,
    patch: &QueueConfigPatch,
    max_queues: u32,
) -> Result<QueueStats> {
    let mut tx = store.begin().await?;
    register_queues(&mut tx.conn(), tenant, &[queue], Some(max_queues)).await?;
    sqlx::query(CONFIGURE_QUEUE)
        .bind(tenant)
        .bind(queue)
        .bind(patch.max_attempts)
        .bind(patch.backoff.map(|b| b.base_ms))
        .bind(patch.backoff.map(|b| b.cap_ms))
        .bind(patch.default_lease_ttl_ms)
        .bind(patch.max_running.is_some())
        .bind(patch.max_running.flatten())
        .bind(patch.rate_limit.is_some())
        .bind(patch.rate_limit.flatten().map(|r| r.count))
        .bind(patch.rate_limit.flatten().map(|r| r.period_ms))
        .bind(patch.key_max_running.is_some())
        .bind(patch.key_max_running.flatten())
        .bind(patch.fair)
        .execute(&mut tx.conn())
        .await
        .db()?;
    tx.commit().await.db()?;
    queue_stats(store, tenant, queue).await
}

pub(crate) async fn delete_queue(store: &PgStore, tenant: &str, queue: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    // Exclusive against enqueues of the tenant (which hold it shared), as
    // the pruning of empty queue rows does: the queue cannot get a job
    // between the check and the delete. Trying, not waiting (see there).
    let locked: bool = sqlx::query_scalar(TRY_LOCK_TENANT)
        .bind(QUEUE_ROWS_LOCK)
        .bind(tenant)
        .fetch_one(&mut tx.conn())
        .await
        .db()?;
    if !locked {
        return Err(Error::Conflict(format!(
            "queue {queue} is being enqueued to; try again"
        )));
    }
    let deleted = sqlx::query(DELETE_EMPTY_QUEUE)
        .bind(tenant)
        .bind(queue)
        .fetch_optional(&mut tx.conn())
        .await
        .db()?;
    if deleted.is_some() {
        return tx.commit().await.db();
    }
    let row = sqlx::query(QUEUE_HOLDS)
        .bind(tenant)
        .bind(queue)
        .fetch_one(&mut tx.conn())
        .await
        .db()?;
    let jobs: i64 = row.try_get("jobs").db()?;
    let has_row: bool = row.try_get("has_row").db()?;
    Err(Error::queue_not_deletable(queue, jobs, has_row))
}

pub(crate) async fn throughput(
    store: &PgStore,
    tenant: &str,
    queue: &str,
    minutes: u32,
) -> Result<QueueThroughput> {
    let now: DateTime<Utc> = sqlx::query_scalar(DB_NOW).fetch_one(&store.db).await.db()?;
    let start = MinuteCounts::window_start(now, minutes);
    let events: Vec<(DateTime<Utc>, EventKind, u64)> = sqlx::query(THROUGHPUT_EVENTS)
        .bind(tenant)
        .bind(queue)
        .bind(start)
        .try_map(|row: sqlx::postgres::PgRow| {
            let minute: DateTime<Utc> = row.try_get("minute")?;
            let event: String = row.try_get("event")?;
            let n: i64 = row.try_get("n")?;
            let event = event
                .parse::<EventKind>()
                .map_err(|e| sqlx::Error::Decode(e.into()))?;
            Ok((minute, event, n as u64))
        })
        .fetch_all(&store.db)
        .await
        .db()?;
    let times = sqlx::query(THROUGHPUT_TIMES)
        .bind(tenant)
        .bind(queue)
        .bind(start)
        .fetch_one(&store.db)
        .await
        .db()?;
    let n: i64 = times.try_get("n").db()?;
    let percentiles = |column: &str| -> Result<Option<Percentiles>> {
        if n == 0 {
            return Ok(None);
        }
        let p: Vec<i64> = times.try_get(column).db()?;
        Ok(Some(Percentiles {
            p50: p[0],
            p95: p[1],
            p99: p[2],
        }))
    };
    Ok(QueueThroughput {
        minutes: MinuteCounts::series(now, minutes, &events),
        wait_ms: percentiles("wait")?,
        run_ms: percentiles("run")?,
    })
}
