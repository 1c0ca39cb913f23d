//! Tenants, their API keys (stored as hashes), the operator key and the
//! server-secret check.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::Row;
use tether_core::keys::{StoredKey, TenantStatus, OPERATOR_KEY_NAME};
use tether_core::{ApiKeyInfo, Error, OperatorKeySetup, Result, Tenant, DEFAULT_TENANT};
use uuid::Uuid;

use crate::rows::{self, Db};
use crate::sql::tenants::{
    CLEAR_NEXT_RUNS, CREATE_TENANT, FIND_API_KEY, GET_TENANT, INSERT_API_KEY, INSERT_OPERATOR_KEY,
    LIST_API_KEYS, LIST_TENANTS, READ_SERVER_SECRET_CHECK, RECORD_SERVER_SECRET_CHECK,
    RESUME_SCHEDULES, RESUME_TENANT, REVOKE_API_KEY, REVOKE_OTHER_OPERATOR_KEYS, SUSPENDED_TENANTS,
    SUSPEND_TENANT, TENANT_BY_NAME, TENANT_STATUS, TOUCH_API_KEY,
};
use crate::SqliteStore;

pub(crate) async fn create_tenant(store: &SqliteStore, name: &str) -> Result<Tenant> {
    let mut tx = store.begin().await?;
    let row = sqlx::query(CREATE_TENANT)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(row) = row else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::tenant_name_taken(name));
    };
    let tenant = rows::tenant(&row)?;
    tx.commit().await.db()?;
    Ok(tenant)
}

pub(crate) async fn list_tenants(store: &SqliteStore) -> Result<Vec<Tenant>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(LIST_TENANTS).fetch_all(&mut *conn).await.db()?;
    found.iter().map(rows::tenant).collect()
}

pub(crate) async fn get_tenant(store: &SqliteStore, id: Uuid) -> Result<Tenant> {
    let mut conn = store.reader.acquire().await.db()?;
    let row = sqlx::query(GET_TENANT)
        .bind(id.to_string())
        .fetch_optional(&mut *conn)
        .await
        .db()?;
    row.as_ref()
        .map(rows::tenant)
        .transpose()?
        .ok_or_else(|| Error::tenant_not_found(id))
}

pub(crate) async fn ensure_tenant(store: &SqliteStore, name: &str) -> Result<Tenant> {
    let mut tx = store.begin().await?;
    let created = sqlx::query(CREATE_TENANT)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let row = match created {
        Some(row) => row,
        None => sqlx::query(TENANT_BY_NAME)
            .bind(name)
            .fetch_one(&mut *tx)
            .await
            .db()?,
    };
    let tenant = rows::tenant(&row)?;
    tx.commit().await.db()?;
    Ok(tenant)
}

pub(crate) async fn create_api_key(
    store: &SqliteStore,
    tenant_id: Uuid,
    name: Option<&str>,
    admin: bool,
    key_id: Uuid,
    hash: [u8; 32],
) -> Result<ApiKeyInfo> {
    let mut tx = store.begin().await?;
    let tenant = sqlx::query(GET_TENANT)
        .bind(tenant_id.to_string())
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(tenant) = tenant.as_ref().map(rows::tenant).transpose()? else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::tenant_not_found(tenant_id));
    };
    if admin && tenant.name != DEFAULT_TENANT {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::admin_key_outside_default_tenant());
    }
    let row = sqlx::query(INSERT_API_KEY)
        .bind(key_id.to_string())
        .bind(tenant_id.to_string())
        .bind(name)
        .bind(&hash[..])
        .bind(admin)
        .bind(&tenant.name)
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let info = rows::api_key(&row)?.ok_or_else(|| rows::corrupt("inserted api key without id"))?;
    tx.commit().await.db()?;
    Ok(info)
}

pub(crate) async fn find_api_key(store: &SqliteStore, key_id: Uuid) -> Result<Option<StoredKey>> {
    let mut conn = store.reader.acquire().await.db()?;
    let row = sqlx::query(FIND_API_KEY)
        .bind(key_id.to_string())
        .fetch_optional(&mut *conn)
        .await
        .db()?;
    let Some(row) = row else {
        return Ok(None);
    };
    let info = rows::api_key(&row)?.ok_or_else(|| rows::corrupt("api key row without id"))?;
    Ok(Some(StoredKey {
        info,
        hash: rows::key_hash(&row)?,
        tenant_suspended_at: rows::opt_ts(row.try_get("tenant_suspended_at").db()?)?,
    }))
}

/// A tenant with its standing, from `id, name, created_at, suspended_at`.
fn tenant_status(row: &SqliteRow) -> Result<TenantStatus> {
    Ok(TenantStatus {
        tenant: rows::tenant(row)?,
        suspended_at: rows::opt_ts(row.try_get("suspended_at").db()?)?,
    })
}

/// Tenant `id` with its standing, read in the write transaction `tx`.
async fn status_in(tx: &mut crate::Tx, id: Uuid) -> Result<Option<TenantStatus>> {
    let row = sqlx::query(TENANT_STATUS)
        .bind(id.to_string())
        .fetch_optional(&mut **tx)
        .await
        .db()?;
    row.as_ref().map(tenant_status).transpose()
}

pub(crate) async fn suspend_tenant(store: &SqliteStore, id: Uuid) -> Result<TenantStatus> {
    let mut tx = store.begin().await?;
    let Some(current) = status_in(&mut tx, id).await? else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::tenant_not_found(id));
    };
    sqlx::query(SUSPEND_TENANT)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    sqlx::query(CLEAR_NEXT_RUNS)
        .bind(&current.tenant.name)
        .execute(&mut *tx)
        .await
        .db()?;
    let suspended = status_in(&mut tx, id)
        .await?
        .ok_or_else(|| rows::corrupt("a suspended tenant vanished"))?;
    tx.commit().await.db()?;
    Ok(suspended)
}

pub(crate) async fn resume_tenant(
    store: &SqliteStore,
    id: Uuid,
    next_runs: &[(Uuid, Option<DateTime<Utc>>)],
) -> Result<TenantStatus> {
    let mut tx = store.begin().await?;
    let Some(current) = status_in(&mut tx, id).await? else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::tenant_not_found(id));
    };
    if !current.is_suspended() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(current);
    }
    let runs: Vec<serde_json::Value> = next_runs
        .iter()
        .map(|(id, next)| serde_json::json!([id.to_string(), next.map(|t| t.timestamp_millis())]))
        .collect();
    sqlx::query(RESUME_SCHEDULES)
        .bind(&current.tenant.name)
        .bind(serde_json::Value::Array(runs).to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    sqlx::query(RESUME_TENANT)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    let resumed = status_in(&mut tx, id)
        .await?
        .ok_or_else(|| rows::corrupt("a resumed tenant vanished"))?;
    tx.commit().await.db()?;
    Ok(resumed)
}

pub(crate) async fn suspended_tenants(store: &SqliteStore) -> Result<Vec<(Uuid, DateTime<Utc>)>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found: Vec<(String, i64)> = sqlx::query_as(SUSPENDED_TENANTS)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    found
        .into_iter()
        .map(|(id, at)| Ok((rows::uuid(&id)?, rows::ts(at)?)))
        .collect()
}

pub(crate) async fn revoke_api_key(store: &SqliteStore, key_id: Uuid) -> Result<()> {
    let mut tx = store.begin().await?;
    let done = sqlx::query(REVOKE_API_KEY)
        .bind(key_id.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::api_key_not_found(key_id));
    }
    tx.commit().await.db()?;
    Ok(())
}

pub(crate) async fn list_api_keys(store: &SqliteStore, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(LIST_API_KEYS)
        .bind(tenant_id.to_string())
        .fetch_all(&mut *conn)
        .await
        .db()?;
    if found.is_empty() {
        return Err(Error::tenant_not_found(tenant_id));
    }
    let mut keys = Vec::with_capacity(found.len());
    for row in &found {
        if let Some(info) = rows::api_key(row)? {
            keys.push(info);
        }
    }
    Ok(keys)
}

pub(crate) async fn touch_api_key(
    store: &SqliteStore,
    key_id: Uuid,
    min_interval_ms: i64,
) -> Result<bool> {
    let mut tx = store.begin().await?;
    let done = sqlx::query(TOUCH_API_KEY)
        .bind(key_id.to_string())
        .bind(min_interval_ms)
        .execute(&mut *tx)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(false);
    }
    tx.commit().await.db()?;
    Ok(true)
}

pub(crate) async fn store_operator_key(
    store: &SqliteStore,
    tenant_id: Uuid,
    key_id: Uuid,
    hash: [u8; 32],
) -> Result<OperatorKeySetup> {
    // BEGIN IMMEDIATE: one such transaction at a time, across processes.
    let mut tx = store.begin().await?;
    sqlx::query(INSERT_OPERATOR_KEY)
        .bind(key_id.to_string())
        .bind(tenant_id.to_string())
        .bind(OPERATOR_KEY_NAME)
        .bind(&hash[..])
        .execute(&mut *tx)
        .await
        .db()?;
    let row = sqlx::query(FIND_API_KEY)
        .bind(key_id.to_string())
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let key = rows::api_key(&row)?.ok_or_else(|| rows::corrupt("api key row without id"))?;
    let mut revoked = Vec::new();
    if !key.is_revoked() {
        let ids: Vec<String> = sqlx::query_scalar(REVOKE_OTHER_OPERATOR_KEYS)
            .bind(key_id.to_string())
            .fetch_all(&mut *tx)
            .await
            .db()?;
        for id in &ids {
            revoked.push(rows::uuid(id)?);
        }
    }
    tx.commit().await.db()?;
    Ok(OperatorKeySetup { key, revoked })
}

pub(crate) async fn server_secret_check(
    store: &SqliteStore,
    check: [u8; 32],
    record: bool,
) -> Result<Option<[u8; 32]>> {
    let stored: Option<Vec<u8>> = if record {
        let mut tx = store.begin().await?;
        sqlx::query(RECORD_SERVER_SECRET_CHECK)
            .bind(&check[..])
            .execute(&mut *tx)
            .await
            .db()?;
        let stored = sqlx::query_scalar(READ_SERVER_SECRET_CHECK)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        tx.commit().await.db()?;
        stored
    } else {
        sqlx::query_scalar(READ_SERVER_SECRET_CHECK)
            .fetch_optional(&store.reader)
            .await
            .db()?
    };
    stored
        .map(|s| s.try_into())
        .transpose()
        .map_err(|_| rows::corrupt("server secret check is not 32 bytes"))
}
