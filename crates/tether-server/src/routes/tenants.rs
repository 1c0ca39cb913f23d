//! The `admin` tag (the tenants topic): tenants and keys, for admin keys only (`GET /metrics` is in
//! `metrics.rs`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::Error;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, Caller, OptionalJson};
use crate::AppState;
use tether_api::*;

/// Create a tenant (admin).
///
/// Creates the tenant, then issues its first (non-admin) key. These are two
/// steps: if issuing fails, the tenant exists without a key, and an admin
/// can issue one with `POST /v1/tenants/{tenant_id}/keys`.
#[utoipa::path(
    post,
    path = "/v1/tenants",
    tag = "admin",
    request_body = CreateTenantBody,
    responses(
        (status = 201, description = "The tenant and its first key.", body = CreateTenantResponse),
        (status = 409, description = "`already_exists`: the name is taken.", body = ErrorBody),
    )
)]
pub(crate) async fn create_tenant(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateTenantBody>,
) -> ApiResult<(StatusCode, Json<CreateTenantResponse>)> {
    caller.require_admin()?;
    let tenant = st.engine.create_tenant(&body.name).await?;
    let (_, api_key) = st.engine.issue_api_key(tenant.id, None, false).await?;
    let body = CreateTenantResponse {
        tenant: tenant.into(),
        api_key,
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// List tenants (admin).
#[utoipa::path(
    get,
    path = "/v1/tenants",
    tag = "admin",
    responses(
        (status = 200, description = "Every tenant.", body = TenantListResponse),
    )
)]
pub(crate) async fn list_tenants(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<TenantListResponse>> {
    caller.require_admin()?;
    let tenants = st.engine.tenant_statuses().await?;
    Ok(Json(TenantListResponse {
        tenants: tenants.into_iter().map(Into::into).collect(),
    }))
}

/// A tenant id from the path; anything that is not a UUID names no tenant.
fn tenant_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::from(Error::NotFound(format!("tenant {raw}"))))
}

/// Suspend a tenant (admin).
///
/// Stops the tenant without deleting anything: from now on its keys are
/// refused (403 `permission_denied`), its schedules do not fire, and an
/// admin acting for it (`X-Tether-Tenant`) may only read, so no job of it
/// is claimed through the API. Its jobs, queues, schedules and keys stay.
/// Suspending a suspended tenant changes nothing. The `default` tenant,
/// which holds the operator's admin keys, cannot be suspended (400).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/suspend",
    tag = "admin",
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    responses(
        (status = 200, description = "The tenant, suspended.", body = TenantResponse),
        (status = 400, description = "`invalid_argument`: the `default` tenant cannot be suspended.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn suspend_tenant(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantResponse>> {
    caller.require_admin()?;
    let tenant = st.engine.suspend_tenant(tenant_id(&id)?).await?;
    Ok(Json(TenantResponse {
        tenant: tenant.into(),
    }))
}

/// Resume a suspended tenant (admin).
///
/// Its keys work again and its enabled schedules fire from their first
/// instant after now: the instants of the suspension are not made up, as
/// when a schedule is enabled again. Resuming an active tenant changes
/// nothing.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/resume",
    tag = "admin",
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    responses(
        (status = 200, description = "The tenant, active.", body = TenantResponse),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn resume_tenant(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<TenantResponse>> {
    caller.require_admin()?;
    let tenant = st.engine.resume_tenant(tenant_id(&id)?).await?;
    Ok(Json(TenantResponse {
        tenant: tenant.into(),
    }))
}

/// Issue an API key for a tenant (admin).
///
/// The key is shown this once. `admin: true` is only for the `default`
/// tenant. The body may be omitted.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/keys",
    tag = "admin",
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    request_body = Option<CreateKeyBody>,
    responses(
        (status = 201, description = "The new key.", body = CreateKeyResponse),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn create_key(
    State(st): State<AppState>,
    caller: Caller,
    Path(tenant_id): Path<String>,
    OptionalJson(body): OptionalJson<CreateKeyBody>,
) -> ApiResult<(StatusCode, Json<CreateKeyResponse>)> {
    caller.require_admin()?;
    let tenant_id = Uuid::try_parse(&tenant_id)
        .map_err(|_| ApiError::from(Error::NotFound(format!("tenant {tenant_id}"))))?;
    let (info, api_key) = st
        .engine
        .issue_api_key(tenant_id, body.name.as_deref(), body.admin.unwrap_or(false))
        .await?;
    let body = CreateKeyResponse {
        key_id: info.id,
        api_key,
    };
    Ok((StatusCode::CREATED, Json(body)))
}

/// List a tenant's API keys (admin).
///
/// Revoked keys included, oldest first; never a secret or hash.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/keys",
    tag = "admin",
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    responses(
        (status = 200, description = "The tenant's keys.", body = KeyListResponse),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn list_keys(
    State(st): State<AppState>,
    caller: Caller,
    Path(tenant_id): Path<String>,
) -> ApiResult<Json<KeyListResponse>> {
    caller.require_admin()?;
    let tenant_id = Uuid::try_parse(&tenant_id)
        .map_err(|_| ApiError::from(Error::NotFound(format!("tenant {tenant_id}"))))?;
    let keys = st.engine.list_api_keys(tenant_id).await?;
    Ok(Json(KeyListResponse {
        keys: keys.into_iter().map(Into::into).collect(),
    }))
}

/// Revoke an API key (admin).
///
/// Takes effect at once: the key authenticates nothing from then on.
#[utoipa::path(
    delete,
    path = "/v1/keys/{key_id}",
    tag = "admin",
    params(("key_id" = Uuid, Path, description = "The key's id (`key_id` when it was issued).")),
    responses(
        (status = 204, description = "The key is revoked."),
        (status = 404, description = "`not_found`: no such key (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn revoke_key(
    State(st): State<AppState>,
    caller: Caller,
    Path(key_id): Path<String>,
) -> ApiResult<StatusCode> {
    caller.require_admin()?;
    let key_id = Uuid::try_parse(&key_id)
        .map_err(|_| ApiError::from(Error::NotFound(format!("API key {key_id}"))))?;
    st.engine.revoke_api_key(key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
