//! `jobs`: producing and managing jobs.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::{EventCursor, EventQuery, IdPrefix, JobFilter, JobState};
use uuid::Uuid;

use super::{job, job_id, non_empty, query_time};
use crate::error::{item_failure, ApiError, ApiResult, BadRequest};
use crate::extract::{ApiJson, ApiQuery, Caller, OptionalJson};
use crate::AppState;
use tether_api::*;

/// Enqueue a job.
///
/// An existing job for the same idempotency key, or for the same unique key
/// while that job is `queued` or `running`, is answered instead (200,
/// `created: false`), unchanged even if this request's payload differs. A
/// job that sets neither `max_attempts` nor `backoff` copies its queue's.
#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    request_body = EnqueueRequest,
    responses(
        (status = 201, description = "The job was created.", body = EnqueueResponse),
        (status = 200, description = "An existing job for the same idempotency key or active unique key (`created: false`).", body = EnqueueResponse),
        (status = 409, description = "`invalid_state`: the job's queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`); or the enqueue kept racing with concurrent enqueues for the same keys (retry).", body = ErrorBody),
    )
)]
pub(crate) async fn enqueue(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<EnqueueRequest>,
) -> ApiResult<(StatusCode, Json<EnqueueResponse>)> {
    let new = body.into_new_job("")?;
    let out = st.engine.enqueue(caller.tenant(), new).await?;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(out.into())))
}

/// Enqueue many jobs at once.
///
/// All or nothing: one invalid entry rejects the whole batch and writes
/// nothing. Each entry is deduplicated like a single enqueue. Entries may
/// wait for earlier entries (`depends_on_entries`), and with `workflow` the
/// batch is one new workflow (a second batch with its idempotency key
/// answers that workflow and its jobs and writes nothing).
#[utoipa::path(
    post,
    path = "/v1/jobs/batch",
    tag = "jobs",
    request_body = BatchEnqueueRequest,
    responses(
        (status = 200, description = "One result per job, in request order.", body = BatchEnqueueResponse),
        (status = 409, description = "`invalid_state`: the batch names new queues beyond the tenant's queue limit (`--max-queues-per-tenant`; nothing is written); or it kept racing with concurrent enqueues for the same keys (retry).", body = ErrorBody),
    )
)]
pub(crate) async fn enqueue_batch(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<BatchEnqueueRequest>,
) -> ApiResult<Json<BatchEnqueueResponse>> {
    let jobs = body
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, j)| j.into_new_job(&format!("jobs[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let Some(workflow) = body.workflow else {
        let out = st.engine.enqueue_many(caller.tenant(), &jobs).await?;
        return Ok(Json(BatchEnqueueResponse {
            results: out.into_iter().map(Into::into).collect(),
            workflow_id: None,
        }));
    };
    let out = st
        .engine
        .enqueue_workflow(caller.tenant(), &workflow.into(), &jobs)
        .await?;
    Ok(Json(BatchEnqueueResponse {
        results: out.jobs.into_iter().map(Into::into).collect(),
        workflow_id: Some(out.workflow.id),
    }))
}

/// List jobs.
///
/// Newest first, a page at a time: pass the answer's `next_cursor` as
/// `cursor` for the next page. `state=failed` is the dead-letter queue.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "One page of jobs.", body = JobListResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn list_jobs(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<JobListResponse>> {
    let state = non_empty(q.state)
        .map(|s| s.parse::<JobState>())
        .transpose()
        .map_err(|e| ApiError::invalid_field("state", e))?;
    let limit = non_empty(q.limit)
        .map(|s| s.parse::<u32>())
        .transpose()
        .map_err(|_| ApiError::invalid_field("limit", "must be an integer from 1 to 500"))?;
    let cursor = non_empty(q.cursor)
        .map(|s| Uuid::try_parse(&s))
        .transpose()
        .map_err(|_| ApiError::invalid_field("cursor", "not a cursor from a previous page"))?;
    let id_prefix = non_empty(q.id_prefix)
        .map(|s| s.parse::<IdPrefix>())
        .transpose()
        .map_err(|e| ApiError::invalid_field("id_prefix", e))?;
    let filter = JobFilter {
        queue: non_empty(q.queue),
        state,
        kind: non_empty(q.kind),
        tag: non_empty(q.tag),
        limit: Some(limit.unwrap_or(50)),
        cursor,
        id_prefix,
        created_after: query_time("created_after", q.created_after)?,
        created_before: query_time("created_before", q.created_before)?,
        depends_on: non_empty(q.depends_on)
            .map(|s| Uuid::try_parse(&s))
            .transpose()
            .map_err(|_| ApiError::invalid_field("depends_on", "not a job id"))?,
        workflow_id: non_empty(q.workflow_id)
            .map(|s| Uuid::try_parse(&s))
            .transpose()
            .map_err(|_| ApiError::invalid_field("workflow_id", "not a workflow id"))?,
    };
    let page = st.engine.list(caller.tenant(), &filter).await?;
    Ok(Json(JobListResponse {
        jobs: page.jobs.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// Read a job.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id."), WaitQuery),
    responses(
        (status = 200, description = "The job.", body = JobResponse),
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn get_job(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    let wait = wait_ms(&st, q.wait_ms)?;
    let tenant = caller.tenant();
    let found = crate::feed::wait_for(
        &st,
        tenant,
        wait,
        |e| e.job_id == id,
        || st.engine.get(tenant, id),
        |j| j.state.is_terminal(),
    )
    .await?;
    Ok(job(found))
}

/// The `wait_ms` of a read: 0 to the server's longest wait.
pub(crate) fn wait_ms(st: &AppState, wait_ms: Option<String>) -> ApiResult<Duration> {
    let max = st.config.max_wait_ms;
    match non_empty(wait_ms).map(|s| s.parse::<i64>()) {
        None => Ok(Duration::ZERO),
        Some(Ok(ms)) if (0..=max).contains(&ms) => Ok(Duration::from_millis(ms as u64)),
        Some(_) => Err(ApiError::invalid_field(
            "wait_ms",
            format!("must be an integer from 0 to {max}"),
        )),
    }
}

/// Read a job's history.
///
/// Oldest first, a page at a time (100 events unless `limit` says
/// otherwise, at most 1 000): pass the answer's `next_cursor` as `cursor`
/// for the next page.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/events",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id."), EventsQuery),
    responses(
        (status = 200, description = "One page of the job's events, oldest first.", body = EventListResponse),
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
    )
)]
pub(crate) async fn job_events(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> ApiResult<Json<EventListResponse>> {
    let id = job_id(&id)?;
    let max = tether_core::validate::MAX_EVENT_PAGE;
    let limit = non_empty(q.limit)
        .map(|s| s.parse::<u32>())
        .transpose()
        .map_err(|_| {
            ApiError::invalid_field("limit", format!("must be an integer from 1 to {max}"))
        })?;
    let cursor = non_empty(q.cursor)
        .map(|s| s.parse::<EventCursor>())
        .transpose()
        .map_err(|_| ApiError::invalid_field("cursor", "not a cursor from a previous page"))?;
    let query = EventQuery { limit, cursor };
    let page = st.engine.events_page(caller.tenant(), id, &query).await?;
    Ok(Json(EventListResponse {
        events: page.events.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// Cancel a job.
///
/// A `queued` job is cancelled at once; a `running` one gets
/// `cancel_requested: true`, which its worker sees in heartbeat answers.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job, now `cancelled` or with `cancel_requested`.", body = JobResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: the job is already terminal.", body = ErrorBody),
    )
)]
pub(crate) async fn cancel(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    Ok(job(st.engine.cancel(caller.tenant(), id).await?))
}

/// Replay a failed or cancelled job.
///
/// Queued again with attempt 0 and the body's `expires_at`, or none: an
/// expired job keeps no old expiry that would fail it again at once. The
/// body may be omitted.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/replay",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = Option<ReplayBody>,
    responses(
        (status = 200, description = "The job, now `queued`.", body = JobResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: the job is not `failed` or `cancelled`, or another active job holds its unique key.", body = ErrorBody),
    )
)]
pub(crate) async fn replay(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    OptionalJson(body): OptionalJson<ReplayBody>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    Ok(job(st
        .engine
        .replay_with(caller.tenant(), id, body.expires_at)
        .await?))
}

/// Cancel many jobs.
///
/// Each id is cancelled on its own, as `POST /v1/jobs/{id}/cancel` would:
/// one that cannot be (already finished, unknown) does not stop the
/// others, and its entry carries the error the single route would answer.
#[utoipa::path(
    post,
    path = "/v1/jobs/cancel",
    tag = "jobs",
    request_body = JobIdsBody,
    responses(
        (status = 200, description = "One result per id, in request order.", body = JobResultsResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn cancel_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<JobIdsBody>,
) -> ApiResult<Json<JobResultsResponse>> {
    bulk_ids(&body.ids)?;
    let mut results = Vec::with_capacity(body.ids.len());
    for id in body.ids {
        results.push(job_result(id, st.engine.cancel(caller.tenant(), id).await));
    }
    Ok(Json(JobResultsResponse { results }))
}

/// Replay many jobs.
///
/// Each id is replayed on its own, as `POST /v1/jobs/{id}/replay` would
/// (a succeeded job runs again; a queued or running one is refused): one
/// that cannot be does not stop the others, and its entry carries the
/// error the single route would answer. The request as a whole is checked
/// first: bad `ids` or an `expires_at` outside 1970–9999 is 400, and no
/// job changes.
#[utoipa::path(
    post,
    path = "/v1/jobs/replay",
    tag = "jobs",
    request_body = ReplayIdsBody,
    responses(
        (status = 200, description = "One result per id, in request order.", body = JobResultsResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn replay_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ReplayIdsBody>,
) -> ApiResult<Json<JobResultsResponse>> {
    bulk_ids(&body.ids)?;
    // What is wrong for every id is wrong with the request: one 400, not
    // the same error once per id.
    if let Some(at) = &body.expires_at {
        tether_core::validate::instant("expires_at", at)?;
    }
    let mut results = Vec::with_capacity(body.ids.len());
    for id in body.ids {
        let outcome = st
            .engine
            .replay_with(caller.tenant(), id, body.expires_at)
            .await;
        results.push(job_result(id, outcome));
    }
    Ok(Json(JobResultsResponse { results }))
}

/// The outcome of a bulk operation on job `id`, as its entry in the answer.
fn job_result(id: Uuid, outcome: tether_core::Result<tether_core::Job>) -> JobResult {
    match outcome {
        Ok(job) => JobResult::Done(Box::new(JobDone {
            id,
            ok: true,
            job: job.into(),
        })),
        Err(e) => JobResult::Failed(item_failure(id, e)),
    }
}

/// A bulk operation names 1 to a page of jobs (`MAX_PAGE`): what an
/// operator selects in one listing.
fn bulk_ids(ids: &[Uuid]) -> ApiResult<()> {
    let max = tether_core::validate::MAX_PAGE as usize;
    if ids.is_empty() || ids.len() > max {
        return Err(ApiError::invalid_field(
            "ids",
            format!("must name 1 to {max} jobs, got {}", ids.len()),
        ));
    }
    Ok(())
}
