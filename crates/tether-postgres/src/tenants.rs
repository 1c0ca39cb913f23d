//! Tenants, their API keys (stored as hashes), the operator key and the
//! server-secret check.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::keys::{StoredKey, TenantStatus, OPERATOR_KEY_NAME};
use tether_core::{ApiKeyInfo, Error, OperatorKeySetup, Result, Tenant, DEFAULT_TENANT};
use uuid::Uuid;

use crate::rows::{self, Db};
use crate::sql::tenants::{
    CREATE_API_KEY, CREATE_TENANT, ENSURE_TENANT, FIND_API_KEY, GET_TENANT, INSERT_OPERATOR_KEY,
    LIST_API_KEYS, LIST_TENANTS, LOCK_OPERATOR_KEYS, LOCK_TENANT, READ_SERVER_SECRET_CHECK,
    RECORD_SERVER_SECRET_CHECK, RESUME_SCHEDULES, RESUME_TENANT, REVOKE_API_KEY,
    REVOKE_OTHER_OPERATOR_KEYS, SUSPENDED_TENANTS, SUSPEND_TENANT, TOUCH_API_KEY,
};
use crate::PgStore;

pub(crate) async fn create_tenant(store: &PgStore, name: &str) -> Result<Tenant> {
    sqlx::query(CREATE_TENANT)
        .bind(name)
        .try_map(|row| rows::tenant(&row))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::tenant_name_taken(name))
}

pub(crate) async fn list_tenants(store: &PgStore) -> Result<Vec<Tenant>> {
    sqlx::query(LIST_TENANTS)
        .try_map(|row| rows::tenant(&row))
        .fetch_all(&store.db)
        .await
        .db()
}

pub(crate) async fn get_tenant(store: &PgStore, id: Uuid) -> Result<Tenant> {
    sqlx::query(GET_TENANT)
        .bind(id)
        .try_map(|row| rows::tenant(&row))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::tenant_not_found(id))
}

pub(crate) async fn ensure_tenant(store: &PgStore, name: &str) -> Result<Tenant> {
    sqlx::query(ENSURE_TENANT)
        .bind(name)
        .try_map(|row| rows::tenant(&row))
        .fetch_one(&store.db)
        .await
        .db()
}

pub(crate) async fn create_api_key(
    store: &PgStore,
    tenant_id: Uuid,
    name: Option<&str>,
    admin: bool,
    key_id: Uuid,
    hash: [u8; 32],
) -> Result<ApiKeyInfo> {
    let row = sqlx::query(CREATE_API_KEY)
        .bind(key_id)
        .bind(tenant_id)
        .bind(name)
        .bind(&hash[..])
        .bind(admin)
        .bind(DEFAULT_TENANT)
        .try_map(|row| rows::api_key(&row))
        .fetch_optional(&store.db)
        .await
        .db()?;
    match row {
        None => Err(Error::tenant_not_found(tenant_id)),
        Some(None) => Err(Error::admin_key_outside_default_tenant()),
        Some(Some(info)) => Ok(info),
    }
}

pub(crate) async fn find_api_key(store: &PgStore, key_id: Uuid) -> Result<Option<StoredKey>> {
    let row = sqlx::query(FIND_API_KEY)
        .bind(key_id)
        .fetch_optional(&store.db)
        .await
        .db()?;
    let Some(row) = row else {
        return Ok(None);
    };
    let info = rows::api_key(&row)
        .db()?
        .ok_or_else(|| rows::corrupt("api key row without id"))?;
    Ok(Some(StoredKey {
        info,
        hash: rows::key_hash(&row)?,
        tenant_suspended_at: row.try_get("tenant_suspended_at").db()?,
    }))
}

/// A tenant with its standing, from `id, name, created_at, suspended_at`.
fn tenant_status(row: &PgRow) -> Result<TenantStatus, sqlx::Error> {
    Ok(TenantStatus {
        tenant: rows::tenant(row)?,
        suspended_at: row.try_get("suspended_at")?,
    })
}

pub(crate) async fn suspend_tenant(store: &PgStore, id: Uuid) -> Result<TenantStatus> {
    sqlx::query(SUSPEND_TENANT)
        .bind(id)
        .try_map(|row| tenant_status(&row))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::tenant_not_found(id))
}

pub(crate) async fn resume_tenant(
    store: &PgStore,
    id: Uuid,
    next_runs: &[(Uuid, Option<DateTime<Utc>>)],
) -> Result<TenantStatus> {
    let mut tx = store.begin().await?;
    let current = sqlx::query(LOCK_TENANT)
        .bind(id)
        .try_map(|row| tenant_status(&row))
        .fetch_optional(&mut tx.conn())
        .await
        .db()?;
    let Some(current) = current else {
        tx.rollback().await.db()?;
        return Err(Error::tenant_not_found(id));
    };
    if !current.is_suspended() {
        tx.rollback().await.db()?;
        return Ok(current);
    }
    let (ids, next): (Vec<Uuid>, Vec<Option<DateTime<Utc>>>) = next_runs.iter().copied().unzip();
    sqlx::query(RESUME_SCHEDULES)
        .bind(&current.tenant.name)
        .bind(&ids)
        .bind(&next)
        .execute(&mut tx.conn())
        .await
        .db()?;
    let resumed = sqlx::query(RESUME_TENANT)
        .bind(id)
        .try_map(|row| tenant_status(&row))
        .fetch_one(&mut tx.conn())
        .await
        .db()?;
    tx.commit().await.db()?;
    Ok(resumed)
}

pub(crate) async fn suspended_tenants(store: &PgStore) -> Result<Vec<(Uuid, DateTime<Utc>)>> {
    sqlx::query_as(SUSPENDED_TENANTS)
        .fetch_all(&store.db)
        .await
        .db()
}

pub(crate) async fn revoke_api_key(store: &PgStore, key_id: Uuid) -> Result<()> {
    let done = sqlx::query(REVOKE_API_KEY)
        .bind(key_id)
        .execute(&store.db)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        return Err(Error::api_key_not_found(key_id));
    }
    Ok(())
}

pub(crate) async fn list_api_keys(store: &PgStore, tenant_id: Uuid) -> Result<Vec<ApiKeyInfo>> {
    let rows = sqlx::query(LIST_API_KEYS)
        .bind(tenant_id)
        .try_map(|row| rows::api_key(&row))
        .fetch_all(&store.db)
        .await
        .db()?;
    if rows.is_empty() {
        return Err(Error::tenant_not_found(tenant_id));
    }
    Ok(rows.into_iter().flatten().collect())
}

pub(crate) async fn touch_api_key(
    store: &PgStore,
    key_id: Uuid,
    min_interval_ms: i64,
) -> Result<bool> {
    let done = sqlx::query(TOUCH_API_KEY)
        .bind(key_id)
        .bind(min_interval_ms)
        .execute(&store.db)
        .await
        .db()?;
    Ok(done.rows_affected() > 0)
}

pub(crate) async fn store_operator_key(
    store: &PgStore,
    tenant_id: Uuid,
    key_id: Uuid,
    hash: [u8; 32],
) -> Result<OperatorKeySetup> {
    let mut tx = store.begin().await?;
    sqlx::query(LOCK_OPERATOR_KEYS)
        .execute(&mut tx.conn())
        .await
        .db()?;
    sqlx::query(INSERT_OPERATOR_KEY)
        .bind(key_id)
        .bind(tenant_id)
        .bind(OPERATOR_KEY_NAME)
        .bind(&hash[..])
        .execute(&mut tx.conn())
        .await
        .db()?;
    let key = sqlx::query(FIND_API_KEY)
        .bind(key_id)
        .try_map(|row| rows::api_key(&row))
        .fetch_one(&mut tx.conn())
        .await
        .db()?
        .ok_or_else(|| rows::corrupt("api key row without id"))?;
    let revoked = if key.is_revoked() {
        Vec::new()
    } else {
        sqlx::query_scalar(REVOKE_OTHER_OPERATOR_KEYS)
            .bind(key_id)
            .fetch_all(&mut tx.conn())
            .await
            .db()?
    };
    tx.commit().await.db()?;
    Ok(OperatorKeySetup { key, revoked })
}

pub(crate) async fn server_secret_check(
    store: &PgStore,
    check: [u8; 32],
    record: bool,
) -> Result<Option<[u8; 32]>> {
    let stored: Option<Vec<u8>> = if record {
        sqlx::query_scalar(RECORD_SERVER_SECRET_CHECK)
            .bind(&check[..])
            .fetch_optional(&store.db)
            .await
    } else {
        sqlx::query_scalar(READ_SERVER_SECRET_CHECK)
            .fetch_optional(&store.db)
            .await
    }
    .db()?;
    stored
        .map(|s| s.try_into())
        .transpose()
        .map_err(|_| rows::corrupt("server secret check is not 32 bytes"))
}
