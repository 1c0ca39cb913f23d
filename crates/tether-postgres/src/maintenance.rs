//! The maintenance leader's passes, each bounded by a batch and over every
//! tenant: removing empty queue rows, the reaper, expiry, pruning finished
//! jobs; and the named leases that elect the leader.

use std::collections::HashMap;

use sqlx::Row;
use tether_core::{Error, JobState, Lease, LeaseToken, QueueConfig, ReapReport, Result};

use crate::enqueue::QUEUE_ROWS_LOCK;
use crate::rows::{self, Db};
use crate::sql::maintenance::{
    ACQUIRE_LEASE, DELETE_EMPTY_QUEUES, EMPTY_QUEUES, EXPIRE, FOLD_PRUNED, PRUNE, REAP,
    RELEASE_LEASE, RENEW_LEASE,
};
use crate::sql::TRY_LOCK_TENANT;
use crate::PgStore;

pub(crate) fn fence_maintenance(store: &PgStore, lease: Option<(&str, LeaseToken)>) {
    store.fence.set(lease);
}

/// The maintenance fence's two parameters (lease name, token), both NULL
/// when passes run unfenced (see `sql::maintenance_fence!`).
pub(crate) fn fence_params(store: &PgStore) -> (Option<String>, Option<uuid::Uuid>) {
    match store.fence.get() {
        Some((name, token)) => (Some(name), Some(token.0)),
        None => (None, None),
    }
}

pub(crate) async fn prune_empty_queues(store: &PgStore, batch: u32) -> Result<u64> {
    let defaults = QueueConfig::default();
    let candidates: Vec<(String, String)> = sqlx::query_as(EMPTY_QUEUES)
        .bind(i64::from(batch))
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .fetch_all(&store.db)
        .await
        .db()?;
    let mut by_tenant: HashMap<String, Vec<String>> = HashMap::new();
    for (tenant, name) in candidates {
        by_tenant.entry(tenant).or_default().push(name);
    }
    let mut removed = 0;
    for (tenant, names) in by_tenant {
        let mut tx = store.begin().await?;
        // Only while no enqueue of the tenant is in flight. Trying, not
        // waiting: a waiting exclusive request would queue every new
        // enqueue of the tenant behind an enqueue in a long caller
        // transaction. A busy tenant is tried again next pass.
        let locked: bool = sqlx::query_scalar(TRY_LOCK_TENANT)
            .bind(QUEUE_ROWS_LOCK)
            .bind(&tenant)
            .fetch_one(&mut tx.conn())
            .await
            .db()?;
        if !locked {
            continue;
        }
        let (fence_name, fence_token) = fence_params(store);
        let done = sqlx::query(DELETE_EMPTY_QUEUES)
            .bind(&tenant)
            .bind(&names)
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms)
            .bind(defaults.default_lease_ttl_ms)
            .bind(fence_name)
            .bind(fence_token)
            .execute(&mut tx.conn())
            .await
            .db()?;
        tx.commit().await.db()?;
        removed += done.rows_affected();
    }
    Ok(removed)
}

pub(crate) async fn reap_lapsed_leases(store: &PgStore, batch: u32) -> Result<ReapReport> {
    let (fence_name, fence_token) = fence_params(store);
    let reaped = sqlx::query(REAP)
        .bind(i64::from(batch))
        .bind(fence_name)
        .bind(fence_token)
        .fetch_all(&store.db)
        .await
        .db()?;
    let mut report = ReapReport::default();
    for row in reaped {
        let state: String = row.try_get("state").db()?;
        let n: i64 = row.try_get("n").db()?;
        // Requeued jobs are ready now, and every reaped job freed a slot of
        // its queue's limit: the queue's waiting claims may take them.
        let (tenant, queue): (String, String) =
            (row.try_get("tenant").db()?, row.try_get("queue").db()?);
        store.notify(&tenant, &queue, n as usize);
        let state = match state.as_str() {
            "failed" => JobState::Failed,
            "cancelled" => JobState::Cancelled,
            _ => JobState::Queued,
        };
        report.add(&tenant, &queue, state, n as u64);
    }
    Ok(report)
}

pub(crate) async fn expire_jobs(store: &PgStore, batch: u32) -> Result<u64> {
    let (fence_name, fence_token) = fence_params(store);
    let n: i64 = sqlx::query_scalar(EXPIRE)
        .bind(i64::from(batch))
        .bind(fence_name)
        .bind(fence_token)
        .fetch_one(&store.db)
        .await
        .db()?;
    if n > 0 {
        sqlx::query(FOLD_PRUNED)
            .bind(crate::feed::PRUNED_KEPT)
            .execute(&store.db)
            .await
            .db()?;
    }
    Ok(n as u64)
}

pub(crate) async fn prune_finished(store: &PgStore, retention_ms: i64, batch: u32) -> Result<u64> {
    let (fence_name, fence_token) = fence_params(store);
    let n: i64 = sqlx::query_scalar(PRUNE)
        .bind(retention_ms)
        .bind(i64::from(batch))
        .bind(fence_name)
        .bind(fence_token)
        .fetch_one(&store.db)
        .await
        .db()?;
    Ok(n as u64)
}

pub(crate) async fn acquire_lease(
    store: &PgStore,
    name: &str,
    holder: &str,
    ttl_ms: i64,
) -> Result<Option<Lease>> {
    sqlx::query(ACQUIRE_LEASE)
        .bind(name)
        .bind(holder)
        .bind(ttl_ms)
        .try_map(|row| rows::lease(&row))
        .fetch_optional(&store.db)
        .await
        .db()
}

pub(crate) async fn renew_lease(
    store: &PgStore,
    name: &str,
    token: LeaseToken,
    ttl_ms: i64,
) -> Result<Lease> {
    sqlx::query(RENEW_LEASE)
        .bind(name)
        .bind(token.0)
        .bind(ttl_ms)
        .try_map(|row| rows::lease(&row))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::NamedLeaseLost(name.to_owned()))
}

pub(crate) async fn release_lease(store: &PgStore, name: &str, token: LeaseToken) -> Result<()> {
    sqlx::query(RELEASE_LEASE)
        .bind(name)
        .bind(token.0)
        .execute(&store.db)
        .await
        .db()?;
    Ok(())
}
