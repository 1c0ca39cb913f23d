//! The handlers of the `/v1` routes, each with its OpenAPI description:
//! a doc comment's first line is the operation's summary, the rest its
//! description.
//!
//! Every `/v1` route answers 401 without a valid key (checked before
//! anything else), 500 on an unexpected storage failure and 503 when the
//! database is unreachable or the request outlives the server's time limit.
//! Routes with a body also answer 400, 413 and 415.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::{
    ClaimRequest, Completion, Engine, Error, EventCursor, EventQuery, Failure, Heartbeat,
    JobFilter, JobState, ReplayFilter,
};
use uuid::Uuid;

use crate::dto::*;
use crate::error::{
    ApiError, ApiResult, BadRequest, ErrorBody, Internal, PayloadTooLarge, PermissionDenied,
    Unauthenticated, Unavailable, UnsupportedMediaType,
};
use crate::extract::{ApiJson, ApiQuery, Caller, OptionalJson};
use crate::AppState;

/// A job id from the path; anything that is not a UUID names no job.
fn job_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::not_found(format!("job {raw} not found")))
}

fn job(j: tether_core::Job) -> Json<JobResponse> {
    Json(j.into())
}

fn queue(q: tether_core::QueueStats) -> Json<QueueResponse> {
    Json(q.into())
}

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
    security(("api_key" = [])),
    request_body = EnqueueRequest,
    responses(
        (status = 201, description = "The job was created.", body = EnqueueResponse),
        (status = 200, description = "An existing job for the same idempotency key or active unique key (`created: false`).", body = EnqueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`invalid_state`: the job's queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`); or the enqueue kept racing with concurrent enqueues for the same keys (retry).", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
/// nothing. Each entry is deduplicated like a single enqueue.
#[utoipa::path(
    post,
    path = "/v1/jobs/batch",
    tag = "jobs",
    security(("api_key" = [])),
    request_body = BatchEnqueueRequest,
    responses(
        (status = 200, description = "One result per job, in request order.", body = BatchEnqueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`invalid_state`: the batch names new queues beyond the tenant's queue limit (`--max-queues-per-tenant`; nothing is written); or it kept racing with concurrent enqueues for the same keys (retry).", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
        .collect::<ApiResult<Vec<_>>>()?;
    let out = st.engine.enqueue_many(caller.tenant(), &jobs).await?;
    Ok(Json(BatchEnqueueResponse {
        results: out.into_iter().map(Into::into).collect(),
    }))
}

/// Claim ready jobs from a queue.
///
/// Hands out up to `limit` ready jobs, highest priority first, each now
/// `running` under a lease and with the `lease_token` that proves ownership.
/// With `wait_ms`, an empty queue holds the request until a job becomes
/// ready or the wait ends (then `{"jobs": []}`); when the server's waiting
/// places are all taken, the claim answers at once, and a waiting claim
/// answers empty when the server begins to stop. A paused queue hands out
/// nothing.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/claim",
    tag = "workers",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue to claim from.")),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "The claimed jobs, possibly none.", body = ClaimResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn claim(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue_name): Path<String>,
    ApiJson(body): ApiJson<ClaimBody>,
) -> ApiResult<Json<ClaimResponse>> {
    let max_wait = st.config.max_wait_ms;
    let wait_ms = body.wait_ms.unwrap_or(0);
    if !(0..=max_wait).contains(&wait_ms) {
        return Err(ApiError::invalid_field(
            "wait_ms",
            format!("must be between 0 and {max_wait}, got {wait_ms}"),
        ));
    }
    let req = ClaimRequest {
        queue: queue_name,
        worker_id: body.worker_id,
        limit: body.limit.unwrap_or(1),
        lease_ttl_ms: body.lease_ttl_ms,
    };
    let tenant = caller.tenant();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms as u64);
    // Only so many claims may wait at once; beyond that, answer at once.
    let waiting = if wait_ms > 0 {
        st.long_polls.clone().try_acquire_owned().ok()
    } else {
        None
    };
    // Subscribe before the first claim so a hint sent between an empty claim
    // and the wait is not missed (a bad queue name is refused here, before
    // anything is kept for it).
    let mut wakeup = match waiting {
        Some(_) => Some(st.engine.subscribe(tenant, &req.queue)?),
        None => None,
    };
    loop {
        let jobs = st.engine.claim(tenant, &req).await?;
        if !jobs.is_empty() {
            return Ok(claimed(jobs));
        }
        let Some(w) = wakeup.as_mut() else {
            return Ok(claimed(jobs));
        };
        tokio::select! {
            _ = w.hinted() => {}
            _ = tokio::time::sleep_until(deadline) => {
                // The wait is over. One last claim catches jobs that became
                // ready by time alone (a delay ending), which sends no hint.
                let jobs = st.engine.claim(tenant, &req).await?;
                return Ok(claimed(jobs));
            }
            // The server is stopping: answer now, empty, so it can exit.
            _ = st.shutdown.cancelled() => return Ok(claimed(Vec::new())),
        }
    }
}

fn claimed(jobs: Vec<tether_core::ClaimedJob>) -> Json<ClaimResponse> {
    Json(ClaimResponse {
        jobs: jobs.into_iter().map(Into::into).collect(),
    })
}

/// Extend a job's lease.
///
/// The lease is extended to now + `lease_ttl_ms`, or + the TTL given at
/// claim when omitted. `cancel_requested` tells the worker to stop. A token
/// stays valid while the job is `running` with it, even past
/// `lease_expires_at`, until the reaper or another claimer takes the job.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/heartbeat",
    tag = "workers",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = HeartbeatBody,
    responses(
        (status = 200, description = "The lease was extended.", body = HeartbeatResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn heartbeat(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<HeartbeatResponse>> {
    let hb = Heartbeat {
        id: job_id(&id)?,
        lease_token: body.lease_token,
        lease_ttl_ms: body.lease_ttl_ms,
        progress: body.progress,
    };
    let ack = st.engine.heartbeat(caller.tenant(), &hb).await?;
    Ok(Json(HeartbeatResponse {
        lease_expires_at: ack.lease_expires_at,
        cancel_requested: ack.cancel_requested,
    }))
}

/// Extend many leases at once.
///
/// An addition to the original v1 routes: the batch form of the heartbeat, so a
/// remote worker extends all its leases in one round trip. Each item
/// succeeds or fails on its own (`ok`), with the error it would have had
/// alone.
#[utoipa::path(
    post,
    path = "/v1/jobs/heartbeat",
    tag = "workers",
    security(("api_key" = [])),
    request_body = HeartbeatManyBody,
    responses(
        (status = 200, description = "One result per item, in request order.", body = HeartbeatManyResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn heartbeat_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<HeartbeatManyBody>,
) -> ApiResult<Json<HeartbeatManyResponse>> {
    let items: Vec<Heartbeat> = body.items.into_iter().map(Heartbeat::from).collect();
    let out = st.engine.heartbeat_many(caller.tenant(), &items).await?;
    let results = items
        .iter()
        .zip(out)
        .map(|(item, r)| match r {
            Ok(ack) => HeartbeatResult::Done(HeartbeatDone {
                id: item.id,
                ok: true,
                lease_expires_at: ack.lease_expires_at,
                cancel_requested: ack.cancel_requested,
            }),
            Err(e) => HeartbeatResult::Failed(ItemFailure::new(item.id, e)),
        })
        .collect();
    Ok(Json(HeartbeatManyResponse { results }))
}

/// Complete a job.
///
/// The job becomes `succeeded` with `result`.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/complete",
    tag = "workers",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "The job, now `succeeded`.", body = JobResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn complete(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CompleteBody>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    let j = st
        .engine
        .complete(caller.tenant(), id, body.lease_token, body.result)
        .await?;
    Ok(job(j))
}

/// Complete many jobs at once.
///
/// Each item succeeds or fails on its own (`ok`), with the error it would
/// have had alone.
#[utoipa::path(
    post,
    path = "/v1/jobs/complete",
    tag = "workers",
    security(("api_key" = [])),
    request_body = CompleteManyBody,
    responses(
        (status = 200, description = "One result per item, in request order.", body = CompleteManyResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn complete_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CompleteManyBody>,
) -> ApiResult<Json<CompleteManyResponse>> {
    let items: Vec<Completion> = body.items.into_iter().map(Completion::from).collect();
    let out = st.engine.complete_many(caller.tenant(), &items).await?;
    let results = items
        .iter()
        .zip(out)
        .map(|(item, r)| match r {
            Ok(()) => CompleteResult::Done(CompleteDone {
                id: item.id,
                ok: true,
            }),
            Err(e) => CompleteResult::Failed(ItemFailure::new(item.id, e)),
        })
        .collect();
    Ok(Json(CompleteManyResponse { results }))
}

/// Fail an attempt.
///
/// The attempt counts as failed: the job is queued again with jittered
/// backoff, or exactly `retry_after_ms` later when given, or becomes
/// `failed` when `fatal` or out of attempts. A worker that stopped because
/// of a cancel request sends `cancelled: true`: the job becomes `cancelled`.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/fail",
    tag = "workers",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = FailBody,
    responses(
        (status = 200, description = "The job, now `queued`, `failed` or `cancelled`.", body = JobResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn fail(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FailBody>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    let failure = Failure {
        error: body.error,
        retry_after_ms: body.retry_after_ms,
        fatal: body.fatal.unwrap_or(false),
        cancelled: body.cancelled.unwrap_or(false),
    };
    let j = st
        .engine
        .fail(caller.tenant(), id, body.lease_token, failure)
        .await?;
    Ok(job(j))
}

/// Snooze a job: "not now, not my fault".
///
/// Back to `queued` at now + `delay_ms`; the attempt is given back (the
/// answer already shows the lowered `attempt`). For rate limits, a busy
/// resource, a revision race.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/snooze",
    tag = "workers",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = SnoozeBody,
    responses(
        (status = 200, description = "The job, now `queued`.", body = JobResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn snooze(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SnoozeBody>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    let j = st
        .engine
        .snooze(caller.tenant(), id, body.lease_token, body.delay_ms)
        .await?;
    Ok(job(j))
}

/// Cancel a job.
///
/// A `queued` job is cancelled at once; a `running` one gets
/// `cancel_requested: true`, which its worker sees in heartbeat answers.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/cancel",
    tag = "jobs",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job, now `cancelled` or with `cancel_requested`.", body = JobResponse),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: the job is already terminal.", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = Option<ReplayBody>,
    responses(
        (status = 200, description = "The job, now `queued`.", body = JobResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: the job is not `failed` or `cancelled`, or another active job holds its unique key.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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

/// Replay a queue's dead letters in bulk.
///
/// Queues again (attempt 0, `expires_at` as the body says or none) the
/// queue's `failed` jobs, or its `cancelled` ones with `state:
/// "cancelled"`: the first `limit` of them by id after `cursor`. To replay
/// more than `limit`, pass the answer's `next_cursor` as `cursor` until it
/// is `null`: each job is then taken once, even if jobs replayed by an
/// earlier round fail again meanwhile. The body may be omitted.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/replay",
    tag = "queues",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue.")),
    request_body = Option<BulkReplayBody>,
    responses(
        (status = 200, description = "How many jobs were queued again.", body = BulkReplayResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`invalid_state`: a concurrent enqueue took a unique key being replayed; retry.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn replay_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue_name): Path<String>,
    OptionalJson(body): OptionalJson<BulkReplayBody>,
) -> ApiResult<Json<BulkReplayResponse>> {
    let filter = ReplayFilter {
        queue: queue_name,
        state: body.state.unwrap_or(JobState::Failed),
        kind: body.kind,
        limit: body.limit,
        cursor: body.cursor,
        expires_at: body.expires_at,
    };
    let out = st.engine.replay_many(caller.tenant(), &filter).await?;
    Ok(Json(BulkReplayResponse {
        replayed: out.replayed,
        next_cursor: out.next_cursor,
    }))
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// List jobs.
///
/// Newest first, a page at a time: pass the answer's `next_cursor` as
/// `cursor` for the next page. `state=failed` is the dead-letter queue.
#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    security(("api_key" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "One page of jobs.", body = JobListResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
    let filter = JobFilter {
        queue: non_empty(q.queue),
        state,
        kind: non_empty(q.kind),
        tag: non_empty(q.tag),
        limit: Some(limit.unwrap_or(50)),
        cursor,
    };
    let page = st.engine.list(caller.tenant(), &filter).await?;
    Ok(Json(JobListResponse {
        jobs: page.jobs.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}

/// Read a job.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id.")),
    responses(
        (status = 200, description = "The job.", body = JobResponse),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn get_job(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<JobResponse>> {
    let id = job_id(&id)?;
    Ok(job(st.engine.get(caller.tenant(), id).await?))
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
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The job's id."), EventsQuery),
    responses(
        (status = 200, description = "One page of the job's events, oldest first.", body = EventListResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
        next_cursor: page.next_cursor,
    }))
}

/// List the tenant's queues.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "queues",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The queues with their stats and settings.", body = QueueListResponse),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn list_queues(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<QueueListResponse>> {
    let queues = st.engine.list_queues(caller.tenant()).await?;
    Ok(Json(QueueListResponse {
        queues: queues.into_iter().map(Into::into).collect(),
    }))
}

/// Read a queue.
///
/// Queues exist implicitly: any valid name can be read, and an unused one
/// reads as zeros with the default settings.
#[utoipa::path(
    get,
    path = "/v1/queues/{queue}",
    tag = "queues",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue's stats and settings.", body = QueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn get_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<QueueResponse>> {
    Ok(queue(st.engine.queue_stats(caller.tenant(), &name).await?))
}

/// Pause a queue.
///
/// A paused queue accepts enqueues and hands out no claims.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/pause",
    tag = "queues",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue, now paused.", body = QueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`invalid_state`: the queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn pause_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<QueueResponse>> {
    Ok(queue(st.engine.pause(caller.tenant(), &name).await?))
}

/// Resume a paused queue.
///
/// A queue that was never paused stays as it is (no row is made for it).
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/resume",
    tag = "queues",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue, no longer paused.", body = QueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn resume_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<QueueResponse>> {
    Ok(queue(st.engine.resume(caller.tenant(), &name).await?))
}

/// Change a queue's settings.
///
/// New jobs copy them at enqueue; jobs already enqueued keep theirs.
#[utoipa::path(
    patch,
    path = "/v1/queues/{queue}",
    tag = "queues",
    security(("api_key" = [])),
    params(("queue" = NameSchema, Path, description = "The queue.")),
    request_body = QueueConfigBody,
    responses(
        (status = 200, description = "The queue with its new settings.", body = QueueResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`invalid_state`: the queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`).", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn configure_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<QueueConfigBody>,
) -> ApiResult<Json<QueueResponse>> {
    let patch = body.into();
    Ok(queue(
        st.engine
            .configure_queue(caller.tenant(), &name, &patch)
            .await?,
    ))
}

/// Create a tenant (admin).
///
/// Creates the tenant, then issues its first (non-admin) key. These are two
/// steps: if issuing fails, the tenant exists without a key, and an admin
/// can issue one with `POST /v1/tenants/{tenant_id}/keys`.
#[utoipa::path(
    post,
    path = "/v1/tenants",
    tag = "admin",
    security(("api_key" = [])),
    request_body = CreateTenantBody,
    responses(
        (status = 201, description = "The tenant and its first key.", body = CreateTenantResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = PermissionDenied),
        (status = 409, description = "`already_exists`: the name is taken.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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

/// Who the key is.
///
/// The key's tenant, id and scope, so an SDK or worker can check its key
/// (and that it acts for the tenant it expects) before it starts. Any valid
/// key may ask.
#[utoipa::path(
    get,
    path = "/v1/whoami",
    tag = "service",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The key's tenant, id and scope.", body = WhoamiResponse),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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

/// List tenants (admin).
#[utoipa::path(
    get,
    path = "/v1/tenants",
    tag = "admin",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Every tenant.", body = TenantListResponse),
        (status = 401, response = Unauthenticated),
        (status = 403, response = PermissionDenied),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn list_tenants(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<TenantListResponse>> {
    caller.require_admin()?;
    let tenants = st.engine.list_tenants().await?;
    Ok(Json(TenantListResponse {
        tenants: tenants.into_iter().map(Into::into).collect(),
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
    security(("api_key" = [])),
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    request_body = Option<CreateKeyBody>,
    responses(
        (status = 201, description = "The new key.", body = CreateKeyResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = PermissionDenied),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
    security(("api_key" = [])),
    params(("tenant_id" = Uuid, Path, description = "The tenant's id.")),
    responses(
        (status = 200, description = "The tenant's keys.", body = KeyListResponse),
        (status = 401, response = Unauthenticated),
        (status = 403, response = PermissionDenied),
        (status = 404, description = "`not_found`: no such tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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
    security(("api_key" = [])),
    params(("key_id" = Uuid, Path, description = "The key's id (`key_id` when it was issued).")),
    responses(
        (status = 204, description = "The key is revoked."),
        (status = 401, response = Unauthenticated),
        (status = 403, response = PermissionDenied),
        (status = 404, description = "`not_found`: no such key (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
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

/// A schedule id from the path; anything that is not a UUID names no
/// schedule.
fn schedule_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::from(Error::NotFound(format!("schedule {raw}"))))
}

fn schedule(s: tether_core::Schedule) -> Json<ScheduleResponse> {
    Json(s.into())
}

/// Create a schedule.
///
/// Its first run is the first fire instant of `cron` in `timezone` after
/// now (none while disabled). Each run enqueues one job `{queue, kind,
/// payload}`; after downtime, the missed fire instants collapse into one
/// run.
#[utoipa::path(
    post,
    path = "/v1/schedules",
    tag = "schedules",
    security(("api_key" = [])),
    request_body = CreateScheduleBody,
    responses(
        (status = 201, description = "The schedule was created.", body = ScheduleResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 409, description = "`already_exists`: the tenant has a schedule of this name; `invalid_state`: the tenant has as many schedules as the server allows (`--max-schedules-per-tenant`).", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn create_schedule(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateScheduleBody>,
) -> ApiResult<(StatusCode, Json<ScheduleResponse>)> {
    let spec = body.into();
    let s = st.engine.create_schedule(caller.tenant(), &spec).await?;
    Ok((StatusCode::CREATED, schedule(s)))
}

/// List the tenant's schedules.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Every schedule of the tenant, by name.", body = ScheduleListResponse),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn list_schedules(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<ScheduleListResponse>> {
    let schedules = st.engine.list_schedules(caller.tenant()).await?;
    Ok(Json(ScheduleListResponse {
        schedules: schedules.into_iter().map(Into::into).collect(),
    }))
}

/// Read a schedule.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 200, description = "The schedule.", body = ScheduleResponse),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn get_schedule(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleResponse>> {
    let id = schedule_id(&id)?;
    Ok(schedule(st.engine.get_schedule(caller.tenant(), id).await?))
}

/// Change a schedule.
///
/// Any field of the creation may be given; absent ones stay as they are
/// (`null` too, except for `payload`, which it sets to `null`). Every
/// change recomputes `next_run_at` from now, so re-enabling a schedule does
/// not replay the time it was disabled. Its runs stay.
#[utoipa::path(
    patch,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    request_body = PatchScheduleBody,
    responses(
        (status = 200, description = "The schedule after the change.", body = ScheduleResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`already_exists`: the tenant has another schedule of the new name.", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn patch_schedule(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchScheduleBody>,
) -> ApiResult<Json<ScheduleResponse>> {
    let id = schedule_id(&id)?;
    let patch = body.into();
    Ok(schedule(
        st.engine
            .patch_schedule(caller.tenant(), id, &patch)
            .await?,
    ))
}

/// Delete a schedule.
///
/// Its runs go with it; the jobs it enqueued stay.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 204, description = "The schedule is deleted."),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn delete_schedule(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let id = schedule_id(&id)?;
    st.engine.delete_schedule(caller.tenant(), id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Read a schedule's runs.
///
/// The newest 100 runs, newest first; a triggered run is stamped with the
/// instant it was triggered.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}/runs",
    tag = "schedules",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 200, description = "The newest runs, newest first.", body = ScheduleRunListResponse),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn schedule_runs(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<ScheduleRunListResponse>> {
    let id = schedule_id(&id)?;
    let runs = st.engine.schedule_runs(caller.tenant(), id).await?;
    Ok(Json(ScheduleRunListResponse {
        runs: runs.into_iter().map(Into::into).collect(),
    }))
}

/// Run a schedule now.
///
/// Enqueues its job at once, outside the timetable, whether or not it is
/// enabled and whatever its overlap policy, and records an `enqueued` run;
/// `next_run_at` stays as it is.
#[utoipa::path(
    post,
    path = "/v1/schedules/{id}/trigger",
    tag = "schedules",
    security(("api_key" = [])),
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 201, description = "The job of this run.", body = JobResponse),
        (status = 401, response = Unauthenticated),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn trigger_schedule(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<JobResponse>)> {
    let id = schedule_id(&id)?;
    let j = st.engine.trigger_schedule(caller.tenant(), id).await?;
    Ok((StatusCode::CREATED, job(j)))
}

/// Preview a cron expression.
///
/// The next `count` fire instants of `cron` in `timezone` strictly after
/// `from`, computed by the same code the scheduler uses (so with its
/// daylight-saving rules: a fixed time in a skipped hour fires when the
/// hour ends, a repeated hour fires once).
#[utoipa::path(
    get,
    path = "/v1/cron/preview",
    tag = "schedules",
    security(("api_key" = [])),
    params(CronPreviewQuery),
    responses(
        (status = 200, description = "The next fire instants, earliest first.", body = CronPreviewResponse),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    )
)]
pub(crate) async fn cron_preview(
    _caller: Caller,
    ApiQuery(q): ApiQuery<CronPreviewQuery>,
) -> ApiResult<Json<CronPreviewResponse>> {
    let timezone = non_empty(q.timezone).unwrap_or_else(|| "UTC".to_owned());
    let from = non_empty(q.from)
        .map(|s| chrono::DateTime::parse_from_rfc3339(&s))
        .transpose()
        .map_err(|e| ApiError::invalid_field("from", format!("not an RFC 3339 time: {e}")))?
        .map(|t| t.with_timezone(&chrono::Utc));
    let count = non_empty(q.count)
        .map(|s| s.parse::<u32>())
        .transpose()
        .map_err(|_| ApiError::invalid_field("count", "must be an integer from 1 to 100"))?;
    let times = Engine::cron_preview(&q.cron, &timezone, from, count.unwrap_or(5))?;
    Ok(Json(CronPreviewResponse { times }))
}
