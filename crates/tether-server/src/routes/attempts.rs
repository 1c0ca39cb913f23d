//! The `workers` tag (the attempts topic): claiming jobs and reporting on them, under a lease.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::{CarriedReports, ClaimRequest, Completion, Failure, FailureReport, Heartbeat};

use super::{job, job_id};
use crate::error::{item_failure, ApiError, ApiResult, BadRequest};
use crate::extract::{ApiJson, Caller};
use crate::AppState;
use tether_api::*;

/// Claim ready jobs from a queue.
///
/// Hands out up to `limit` ready jobs, highest priority first, each now
/// `running` under a lease and with the `lease_token` that proves ownership.
/// With `wait_ms`, an empty queue holds the request until a job becomes
/// ready or the wait ends (then `{"jobs": []}`); when the server's waiting
/// places are all taken, the claim answers at once, and a waiting claim
/// answers empty when the server begins to stop. A paused queue hands out
/// nothing.
///
/// The claim may carry the last batch's reports (`complete`, `fail`,
/// together at most 1 000): they are applied first, in the claim's
/// transaction, and each is answered in `reports` as the batch routes
/// answer their items; a refused report never fails the claim. They are
/// applied at once, before any wait, but answered with the claim.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/claim",
    tag = "workers",
    params(("queue" = NameSchema, Path, description = "The queue to claim from.")),
    request_body = ClaimBody,
    responses(
        (status = 200, description = "The claimed jobs, possibly none.", body = ClaimResponse),
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
    // Only so many claims may wait at once, and of them only so many of
    // one tenant; beyond that, answer at once.
    let waiting = if wait_ms > 0 {
        st.tenant_long_polls
            .try_take(tenant.to_owned())
            .and_then(|mine| Some((mine, st.long_polls.clone().try_acquire_owned().ok()?)))
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
    // The carried reports go with the first claim, in its transaction;
    // their answers wait for the claim's (a worker that wants them at once
    // sends no wait_ms with them).
    let carried = body.complete.is_some() || body.fail.is_some();
    let reports = CarriedReports {
        complete: (body.complete.into_iter().flatten())
            .map(Completion::from)
            .collect(),
        fail: (body.fail.into_iter().flatten())
            .map(FailureReport::from)
            .collect(),
    };
    let first = st.engine.report_and_claim(tenant, &req, &reports).await?;
    let reports = carried.then(|| {
        (reports.ids().zip(first.reports))
            .map(|(id, r)| match r {
                Ok(()) => CompleteResult::Done(CompleteDone { id, ok: true }),
                Err(e) => CompleteResult::Failed(item_failure(id, e)),
            })
            .collect()
    });
    let answer = |jobs: Vec<tether_core::ClaimedJob>| {
        Json(ClaimResponse {
            jobs: jobs.into_iter().map(Into::into).collect(),
            reports,
        })
    };
    let (Some(w), true) = (wakeup.as_mut(), first.jobs.is_empty()) else {
        return Ok(answer(first.jobs));
    };
    loop {
        tokio::select! {
            _ = w.hinted() => {}
            _ = tokio::time::sleep_until(deadline) => {
                // The wait is over. One last claim catches jobs that became
                // ready by time alone (a delay ending), which sends no hint.
                let jobs = st.engine.claim(tenant, &req).await?;
                return Ok(answer(jobs));
            }
            // The server is stopping: answer now, empty, so it can exit.
            _ = st.shutdown.cancelled() => return Ok(answer(Vec::new())),
        }
        let jobs = st.engine.claim(tenant, &req).await?;
        if !jobs.is_empty() {
            return Ok(answer(jobs));
        }
    }
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
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = HeartbeatBody,
    responses(
        (status = 200, description = "The lease was extended.", body = HeartbeatResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
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
    request_body = HeartbeatManyBody,
    responses(
        (status = 200, description = "One result per item, in request order.", body = HeartbeatManyResponse),
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
            Err(e) => HeartbeatResult::Failed(item_failure(item.id, e)),
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
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "The job, now `succeeded`.", body = JobResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
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
    request_body = CompleteManyBody,
    responses(
        (status = 200, description = "One result per item, in request order.", body = CompleteManyResponse),
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
            Err(e) => CompleteResult::Failed(item_failure(item.id, e)),
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
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = FailBody,
    responses(
        (status = 200, description = "The job, now `queued`, `failed` or `cancelled`.", body = JobResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
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
    params(("id" = Uuid, Path, description = "The job's id.")),
    request_body = SnoozeBody,
    responses(
        (status = 200, description = "The job, now `queued`.", body = JobResponse),
        (status = 404, description = "`not_found`: no such job in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the token no longer owns the job.", body = ErrorBody),
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

/// Announce a worker.
///
/// A worker says which queues it serves, how many jobs it runs at once and
/// what it runs on, so that `GET /v1/workers` lists it while it is idle
/// too. Its claims keep it seen (at most every 30 s); a worker neither
/// announcing nor claiming for 5 minutes is forgotten. Announcing again
/// replaces what it said. The SDKs' workers announce when they start and
/// every minute.
#[utoipa::path(
    put,
    path = "/v1/workers/{worker_id}",
    tag = "workers",
    params(("worker_id" = String, Path, description = "The id the worker claims with (1–128 characters).")),
    request_body = AnnounceWorkerBody,
    responses(
        (status = 204, description = "Announced."),
        (status = 400, response = BadRequest),
        (status = 409, description = "`invalid_state`: the tenant has 10 000 announced workers not yet forgotten, and this one is new.", body = ErrorBody),
    )
)]
pub(crate) async fn announce_worker(
    State(st): State<AppState>,
    caller: Caller,
    Path(worker_id): Path<String>,
    ApiJson(body): ApiJson<AnnounceWorkerBody>,
) -> ApiResult<StatusCode> {
    st.engine
        .announce_worker(caller.tenant(), &worker_id, &body.into())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who is working.
///
/// The workers holding running jobs of the tenant now (with how many and
/// their latest heartbeat, read from the jobs themselves), and the workers
/// that announced themselves (`PUT /v1/workers/{worker_id}`) and were seen
/// within the last 5 minutes, idle or not, with what they announced.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "workers",
    responses(
        (status = 200, description = "The workers, by id.", body = WorkerListResponse),
    )
)]
pub(crate) async fn list_workers(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<WorkerListResponse>> {
    let workers = st.engine.list_workers(caller.tenant()).await?;
    Ok(Json(WorkerListResponse {
        workers: workers.into_iter().map(Into::into).collect(),
    }))
}
