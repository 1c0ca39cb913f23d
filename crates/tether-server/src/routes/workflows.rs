//! `workflows`: jobs that wait for other jobs, and workflows.

use axum::extract::{Path, State};
use axum::Json;
use tether_core::{WorkflowFilter, WorkflowState};
use uuid::Uuid;

use super::{job_id, non_empty, query_number};
use crate::error::{ApiError, ApiResult, BadRequest};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::AppState;
use tether_api::*;

/// A workflow id from the path: one that is not a UUID names no workflow.
fn workflow_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::not_found(format!("workflow {raw} not found")))
}

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

/// List workflows.
///
/// Newest first, a page at a time: pass the answer's `next_cursor` as
/// `cursor` for the next page. A workflow's state is derived from its jobs,
/// so with a `state` filter a page looks at a bounded number of workflows
/// and may come back shorter than `limit` with a `next_cursor` to go on.
#[utoipa::path(
    get,
    path = "/v1/workflows",
    tag = "workflows",
    params(WorkflowListQuery),
    responses(
        (status = 200, description = "One page of workflows.", body = WorkflowListResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn list_workflows(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<WorkflowListQuery>,
) -> ApiResult<Json<WorkflowListResponse>> {
    let state = non_empty(q.state)
        .map(|s| s.parse::<WorkflowState>())
        .transpose()
        .map_err(|e| ApiError::invalid_field("state", e))?;
    let limit = query_number("limit", q.limit, 1..=500)?;
    let cursor = non_empty(q.cursor)
        .map(|s| Uuid::try_parse(&s))
        .transpose()
        .map_err(|_| ApiError::invalid_field("cursor", "not a cursor from a previous page"))?;
    let filter = WorkflowFilter {
        state,
        name: non_empty(q.name),
        limit,
        cursor,
    };
    let page = st.engine.list_workflows(caller.tenant(), &filter).await?;
    Ok(Json(WorkflowListResponse {
        workflows: page.workflows.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// Read a workflow and its graph.
///
/// The workflow's fields and its jobs (at most 10 000, oldest first), each
/// with what it waits for: enough to draw the graph with every job's state,
/// including jobs that joined it at run time.
#[utoipa::path(
    get,
    path = "/v1/workflows/{id}",
    tag = "workflows",
    params(("id" = Uuid, Path, description = "The workflow's id."), WaitQuery),
    responses(
        (status = 200, description = "The workflow and its graph.", body = WorkflowResponse),
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: no such workflow in this tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn get_workflow(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> ApiResult<Json<WorkflowResponse>> {
    let id = workflow_id(&id)?;
    let wait = super::jobs::wait_ms(&st, q.wait_ms)?;
    let tenant = caller.tenant();
    let graph = crate::feed::wait_for(
        &st,
        tenant,
        wait,
        |e| e.workflow_id == Some(id),
        || st.engine.get_workflow(tenant, id),
        |g| g.workflow.state != WorkflowState::Running,
    )
    .await?;
    Ok(Json(graph.into()))
}

/// Cancel a workflow.
///
/// Every unfinished job: waiting and queued ones are cancelled at once,
/// running ones get `cancel_requested` (as a single cancel does). Jobs
/// outside the workflow that wait for its jobs are cancelled by the usual
/// rule. Cancelling a finished workflow changes nothing.
#[utoipa::path(
    post,
    path = "/v1/workflows/{id}/cancel",
    tag = "workflows",
    params(("id" = Uuid, Path, description = "The workflow's id.")),
    responses(
        (status = 200, description = "How many jobs were cancelled and asked to stop.", body = WorkflowCancelResponse),
        (status = 404, description = "`not_found`: no such workflow in this tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_workflow(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkflowCancelResponse>> {
    let id = workflow_id(&id)?;
    let done = st.engine.cancel_workflow(caller.tenant(), id).await?;
    Ok(Json(WorkflowCancelResponse {
        cancelled: done.cancelled,
        cancel_requested: done.cancel_requested,
    }))
}

/// Retry a workflow.
///
/// Replays its failed jobs (`failed`) and, with `failed_and_downstream`,
/// every finished job of the workflow downstream of them (cancelled by the
/// cascade, or run anyway): each goes back to `queued`, or to `waiting` for
/// its dependencies, with a new attempt budget. Succeeded jobs that are not
/// downstream are left alone.
#[utoipa::path(
    post,
    path = "/v1/workflows/{id}/retry",
    tag = "workflows",
    params(("id" = Uuid, Path, description = "The workflow's id.")),
    request_body = WorkflowRetryBody,
    responses(
        (status = 200, description = "How many jobs went back.", body = WorkflowRetryResponse),
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: no such workflow in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: a job to retry has a unique key another active job holds (nothing was retried).", body = ErrorBody),
    )
)]
pub(crate) async fn retry_workflow(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<WorkflowRetryBody>,
) -> ApiResult<Json<WorkflowRetryResponse>> {
    let id = workflow_id(&id)?;
    let replayed = st
        .engine
        .retry_workflow(caller.tenant(), id, body.mode)
        .await?;
    Ok(Json(WorkflowRetryResponse { replayed }))
}
