//! Queues: their stats, pausing and their settings. A queue without a row
//! reads as one with the default settings; pausing or configuring it
//! creates its row, within the tenant's queue limit.

use tether_core::{QueueConfigPatch, QueueStats, Result};

use crate::enqueue::register_queues;
use crate::rows::{self, Db};
use crate::sql::queues::{CONFIGURE_QUEUE, LIST_QUEUES, QUEUE_STATS, RESUME, SET_PAUSED};
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
