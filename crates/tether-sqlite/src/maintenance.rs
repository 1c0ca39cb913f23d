//! The maintenance leader's passes, each bounded by a batch and over every
//! tenant: removing empty queue rows, the reaper, expiry, pruning finished
//! jobs; and the named leases that elect the leader.

use sqlx::Row;
use tether_core::{Error, JobState, Lease, LeaseToken, QueueConfig, ReapReport, Result};

use crate::rows::{self, id_array, Db};
use crate::sql::maintenance::{
    ACQUIRE_LEASE, EXPIRE, EXPIRED_EVENTS, LEASE_EXPIRED_EVENTS, LEASE_HOLDS, PRUNE,
    PRUNE_ANNOUNCE, PRUNE_EDGES, PRUNE_EMPTY_QUEUES, PRUNE_EVENTS, REAP, RELEASE_LEASE,
    RENEW_LEASE,
};
use crate::workflows::{take_released_after, Released};
use crate::{SqliteStore, Tx};

/// `last_error` of a queued job that passed its `expires_at`.
const EXPIRED_ERROR: &str = "expired";

pub(crate) fn fence_maintenance(store: &SqliteStore, lease: Option<(&str, LeaseToken)>) {
    store.fence.set(lease);
}

/// Starts a maintenance pass's write transaction, or `None` when the pass
/// is fenced by a lease that no longer holds (see
/// `tether_core::MaintenanceFence`): checked inside the transaction, which
/// holds the file's write lock, so no other node takes the lease before
/// the pass commits.
pub(crate) async fn begin_fenced(store: &SqliteStore) -> Result<Option<Tx>> {
    let mut tx = store.begin().await?;
    if let Some((name, token)) = store.fence.get() {
        let holds: bool = sqlx::query_scalar(LEASE_HOLDS)
            .bind(name)
            .bind(token.0.to_string())
            .fetch_one(&mut *tx)
            .await
            .db()?;
        if !holds {
            SqliteStore::finish_unchanged(tx).await?;
            return Ok(None);
        }
    }
    Ok(Some(tx))
}

pub(crate) async fn prune_empty_queues(store: &SqliteStore, batch: u32) -> Result<u64> {
    let defaults = QueueConfig::default();
    let Some(mut tx) = begin_fenced(store).await? else {
        return Ok(0);
    };
    let done = sqlx::query(PRUNE_EMPTY_QUEUES)
        .bind(i64::from(batch))
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .execute(&mut *tx)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(0);
    }
    tx.commit().await.db()?;
    Ok(done.rows_affected())
}

pub(crate) async fn reap_lapsed_leases(store: &SqliteStore, batch: u32) -> Result<ReapReport> {
    let Some(mut tx) = begin_fenced(store).await? else {
        return Ok(ReapReport::default());
    };
    let reaped = sqlx::query(REAP)
        .bind(i64::from(batch))
        .fetch_all(&mut *tx)
        .await
        .db()?;
    if reaped.is_empty() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(ReapReport::default());
    }
    let mut report = ReapReport::default();
    for row in &reaped {
        let state: &str = row.try_get("state").db()?;
        let state = match state.parse::<JobState>().map_err(rows::corrupt)? {
            s @ (JobState::Queued | JobState::Failed | JobState::Cancelled) => s,
            other => return Err(rows::corrupt(format!("reaper produced state {other}"))),
        };
        report.add(
            row.try_get("tenant").db()?,
            row.try_get("queue").db()?,
            state,
            1,
        );
    }
    let mut released = Released::new();
    take_released_after(&mut tx, &reaped, &mut released).await?;
    SqliteStore::finish_bulk(tx, &reaped, LEASE_EXPIRED_EVENTS).await?;
    // Requeued jobs are ready now, and every reaped job freed a slot of its
    // queue's limit: the queue's waiting claims may take them.
    for row in &reaped {
        let (tenant, queue): (&str, &str) =
            (row.try_get("tenant").db()?, row.try_get("queue").db()?);
        store.notify(tenant, queue, 1);
    }
    store.notify_released(&released);
    Ok(report)
}

pub(crate) async fn expire_jobs(store: &SqliteStore, batch: u32) -> Result<u64> {
    let Some(mut tx) = begin_fenced(store).await? else {
        return Ok(0);
    };
    let expired = sqlx::query(EXPIRE)
        .bind(i64::from(batch))
        .bind(EXPIRED_ERROR)
        .fetch_all(&mut *tx)
        .await
        .db()?;
    let mut released = Released::new();
    take_released_after(&mut tx, &expired, &mut released).await?;
    let n = SqliteStore::finish_bulk(tx, &expired, EXPIRED_EVENTS).await?;
    store.notify_released(&released);
    Ok(n)
}

pub(crate) async fn prune_finished(
    store: &SqliteStore,
    retention_ms: i64,
    batch: u32,
) -> Result<u64> {
    let Some(mut tx) = begin_fenced(store).await? else {
        return Ok(0);
    };
    let pruned = sqlx::query(PRUNE)
        .bind(retention_ms)
        .bind(i64::from(batch))
        .fetch_all(&mut *tx)
        .await
        .db()?;
    if !pruned.is_empty() {
        let ids = pruned
            .iter()
            .map(|row| row.try_get::<&str, _>("id"))
            .collect::<std::result::Result<Vec<_>, _>>()
            .db()?;
        let ids = id_array(ids);
        for sql in [PRUNE_EDGES, PRUNE_ANNOUNCE] {
            sqlx::query(sql).bind(&ids).execute(&mut *tx).await.db()?;
        }
    }
    SqliteStore::finish_bulk(tx, &pruned, PRUNE_EVENTS).await
}

pub(crate) async fn acquire_lease(
    store: &SqliteStore,
    name: &str,
    holder: &str,
    ttl_ms: i64,
) -> Result<Option<Lease>> {
    let mut tx = store.begin().await?;
    let row = sqlx::query(ACQUIRE_LEASE)
        .bind(name)
        .bind(holder)
        .bind(ttl_ms)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let lease = row.as_ref().map(rows::lease).transpose()?;
    tx.commit().await.db()?;
    Ok(lease)
}

pub(crate) async fn renew_lease(
    store: &SqliteStore,
    name: &str,
    token: LeaseToken,
    ttl_ms: i64,
) -> Result<Lease> {
    let mut tx = store.begin().await?;
    let row = sqlx::query(RENEW_LEASE)
        .bind(name)
        .bind(token.0.to_string())
        .bind(ttl_ms)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(row) = row else {
        // Taken over, released, or never held with this token.
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::NamedLeaseLost(name.to_owned()));
    };
    let lease = rows::lease(&row)?;
    tx.commit().await.db()?;
    Ok(lease)
}

pub(crate) async fn release_lease(
    store: &SqliteStore,
    name: &str,
    token: LeaseToken,
) -> Result<()> {
    let mut tx = store.begin().await?;
    sqlx::query(RELEASE_LEASE)
        .bind(name)
        .bind(token.0.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    tx.commit().await.db()?;
    Ok(())
}
