//! `workflows`: jobs that wait for other jobs.

use axum::extract::{Path, State};
use axum::Json;

use super::job_id;
use crate::error::ApiResult;
use crate::extract::Caller;
use crate::AppState;
use tether_api::*;

/// Read a job's dependencies.
///
/// The jobs it waits (or waited) for, in the order it names them, with
/// their states and results: what a handler reads to use its parents'
/// results. A dependency removed by retention is left out.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/dependencies",
    tag = "workflows",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job's dependencies.", body = DependenciesResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn job_dependencies(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<DependenciesResponse>> {
    let id = job_id(&id)?;
    let jobs = st.engine.dependencies(caller.tenant(), id).await?;
    Ok(Json(DependenciesResponse {
        jobs: jobs.into_iter().map(Into::into).collect(),
    }))
}
