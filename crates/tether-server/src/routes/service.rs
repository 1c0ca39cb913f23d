//! `service`: health (no key needed) and who a key is (`GET /openapi.json`
//! is in `openapi.rs`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use uuid::Uuid;

use crate::error::{ApiError, Unavailable};
use crate::extract::Caller;
use crate::AppState;
use tether_api::*;

/// Who the key is.
///
/// The key's tenant, id and scope, so an SDK or worker can check its key
/// (and that it acts for the tenant it expects) before it starts. Any valid
/// key may ask.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    tag = "service",
    responses(
        (status = 200, description = "The key's tenant, id and scope.", body = WhoamiResponse),
    )
)]
pub(crate) async fn whoami(caller: Caller) -> Json<WhoamiResponse> {
    let key = caller.0;
    Json(WhoamiResponse {
        tenant: TenantRef {
            id: key.tenant_id,
            name: key.tenant,
        },
        key_id: key.id,
        admin: key.admin,
    })
}

/// Liveness: the process is up.
///
/// No key needed; does not touch the database.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "service",
    responses((status = 200, description = "The process is alive.", body = HealthSchema))
)]
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: the database is reachable.
///
/// No key needed.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "service",
    responses(
        (status = 200, description = "The database is reachable.", body = HealthSchema),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    // One primary-key probe: cheap, and it needs a working connection.
    match state.engine.find_api_key(Uuid::nil()).await {
        Ok(_) => Json(json!({ "status": "ok" })).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            ApiError::unavailable("database unreachable").into_response()
        }
    }
}
