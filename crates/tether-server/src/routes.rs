//! The handlers of the `/v1` routes.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tether_core::{
    ClaimRequest, Completion, Error, Failure, Heartbeat, JobFilter, JobState, QueueConfigPatch,
    ReplayFilter,
};
use uuid::Uuid;

use crate::dto::*;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiJson, ApiQuery, Caller, OptionalJson};
use crate::AppState;

/// A job id from the path; anything that is not a UUID names no job.
fn job_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::not_found(format!("job {raw} not found")))
}

fn job(j: tether_core::Job) -> Json<Value> {
    Json(json!({ "job": JobDto::from(j) }))
}

fn queue(q: tether_core::QueueStats) -> Json<Value> {
    Json(json!({ "queue": q }))
}

pub(crate) async fn enqueue(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<EnqueueRequest>,
) -> ApiResult<Response> {
    let new = body.into_new_job("")?;
    let out = st.engine.enqueue(caller.tenant(), new).await?;
    let status = if out.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let body = json!({ "job": JobDto::from(out.job), "created": out.created });
    Ok((status, Json(body)).into_response())
}

pub(crate) async fn enqueue_batch(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<BatchEnqueueRequest>,
) -> ApiResult<Json<Value>> {
    let jobs = body
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, j)| j.into_new_job(&format!("jobs[{i}]")))
        .collect::<ApiResult<Vec<_>>>()?;
    let out = st.engine.enqueue_many(caller.tenant(), &jobs).await?;
    let results: Vec<Value> = out
        .into_iter()
        .map(|e| json!({ "job": JobDto::from(e.job), "created": e.created }))
        .collect();
    Ok(Json(json!({ "results": results })))
}

pub(crate) async fn claim(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue_name): Path<String>,
    ApiJson(body): ApiJson<ClaimBody>,
) -> ApiResult<Json<Value>> {
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
    // and the wait is not missed.
    let mut wakeup = waiting
        .as_ref()
        .map(|_| st.engine.subscribe(tenant, &req.queue));
    loop {
        let jobs = st.engine.claim(tenant, &req).await?;
        if !jobs.is_empty() {
            return Ok(claimed(jobs));
        }
        let Some(w) = wakeup.as_mut() else {
            return Ok(claimed(jobs));
        };
        if tokio::time::timeout_at(deadline, w.hinted()).await.is_err() {
            // The wait is over. One last claim catches jobs that became ready
            // by time alone (a delay ending), which sends no hint.
            let jobs = st.engine.claim(tenant, &req).await?;
            return Ok(claimed(jobs));
        }
    }
}

fn claimed(jobs: Vec<tether_core::ClaimedJob>) -> Json<Value> {
    let jobs: Vec<ClaimedJobDto> = jobs.into_iter().map(Into::into).collect();
    Json(json!({ "jobs": jobs }))
}

pub(crate) async fn heartbeat(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<Value>> {
    let hb = Heartbeat {
        id: job_id(&id)?,
        lease_token: body.lease_token,
        lease_ttl_ms: body.lease_ttl_ms,
        progress: body.progress,
    };
    let ack = st.engine.heartbeat(caller.tenant(), &hb).await?;
    Ok(Json(json!({
        "lease_expires_at": time(&ack.lease_expires_at),
        "cancel_requested": ack.cancel_requested,
    })))
}

/// Heartbeats many jobs in one round trip (an addition to API.md, used by
/// remote workers): one answer per item, in request order.
pub(crate) async fn heartbeat_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<HeartbeatManyBody>,
) -> ApiResult<Json<Value>> {
    let items: Vec<Heartbeat> = body
        .items
        .into_iter()
        .map(|i| Heartbeat {
            id: i.id,
            lease_token: i.lease_token,
            lease_ttl_ms: i.lease_ttl_ms,
            progress: i.progress,
        })
        .collect();
    let out = st.engine.heartbeat_many(caller.tenant(), &items).await?;
    let results: Vec<Value> = items
        .iter()
        .zip(out)
        .map(|(item, r)| match r {
            Ok(ack) => json!({
                "id": item.id,
                "ok": true,
                "lease_expires_at": time(&ack.lease_expires_at),
                "cancel_requested": ack.cancel_requested,
            }),
            Err(e) => json!({ "id": item.id, "ok": false, "error": ApiError::from(e).body() }),
        })
        .collect();
    Ok(Json(json!({ "results": results })))
}

pub(crate) async fn complete(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CompleteBody>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    let j = st
        .engine
        .complete(caller.tenant(), id, body.lease_token, body.result)
        .await?;
    Ok(job(j))
}

pub(crate) async fn complete_many(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CompleteManyBody>,
) -> ApiResult<Json<Value>> {
    let items: Vec<Completion> = body
        .items
        .into_iter()
        .map(|i| Completion {
            id: i.id,
            lease_token: i.lease_token,
            result: i.result,
        })
        .collect();
    let out = st.engine.complete_many(caller.tenant(), &items).await?;
    let results: Vec<Value> = items
        .iter()
        .zip(out)
        .map(|(item, r)| match r {
            Ok(()) => json!({ "id": item.id, "ok": true }),
            Err(e) => json!({ "id": item.id, "ok": false, "error": ApiError::from(e).body() }),
        })
        .collect();
    Ok(Json(json!({ "results": results })))
}

pub(crate) async fn fail(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<FailBody>,
) -> ApiResult<Json<Value>> {
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

pub(crate) async fn snooze(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<SnoozeBody>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    let j = st
        .engine
        .snooze(caller.tenant(), id, body.lease_token, body.delay_ms)
        .await?;
    Ok(job(j))
}

pub(crate) async fn cancel(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    Ok(job(st.engine.cancel(caller.tenant(), id).await?))
}

pub(crate) async fn replay(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    Ok(job(st.engine.replay(caller.tenant(), id).await?))
}

pub(crate) async fn replay_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(queue_name): Path<String>,
    OptionalJson(body): OptionalJson<BulkReplayBody>,
) -> ApiResult<Json<Value>> {
    let filter = ReplayFilter {
        queue: queue_name,
        state: body.state.unwrap_or(JobState::Failed),
        kind: body.kind,
        limit: body.limit,
    };
    let n = st.engine.replay_many(caller.tenant(), &filter).await?;
    Ok(Json(json!({ "replayed": n })))
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

pub(crate) async fn list_jobs(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<Value>> {
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
    let jobs: Vec<JobDto> = page.jobs.into_iter().map(Into::into).collect();
    Ok(Json(json!({
        "jobs": jobs,
        "next_cursor": page.next_cursor.map(|c| c.to_string()),
    })))
}

pub(crate) async fn get_job(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    Ok(job(st.engine.get(caller.tenant(), id).await?))
}

pub(crate) async fn job_events(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let id = job_id(&id)?;
    let events = st.engine.events(caller.tenant(), id).await?;
    let events: Vec<EventDto> = events.into_iter().map(Into::into).collect();
    Ok(Json(json!({ "events": events })))
}

pub(crate) async fn list_queues(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    let queues = st.engine.list_queues(caller.tenant()).await?;
    Ok(Json(json!({ "queues": queues })))
}

pub(crate) async fn get_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(queue(st.engine.queue_stats(caller.tenant(), &name).await?))
}

pub(crate) async fn pause_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(queue(st.engine.pause(caller.tenant(), &name).await?))
}

pub(crate) async fn resume_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(queue(st.engine.resume(caller.tenant(), &name).await?))
}

pub(crate) async fn configure_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<QueueConfigPatch>,
) -> ApiResult<Json<Value>> {
    Ok(queue(
        st.engine
            .configure_queue(caller.tenant(), &name, &patch)
            .await?,
    ))
}

pub(crate) async fn create_tenant(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateTenantBody>,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let tenant = st.engine.create_tenant(&body.name).await?;
    let (_, key) = st.engine.issue_api_key(tenant.id, None, false).await?;
    let body = json!({ "tenant": TenantDto::from(tenant), "api_key": key });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

pub(crate) async fn list_tenants(
    State(st): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Value>> {
    caller.require_admin()?;
    let tenants: Vec<TenantDto> = st
        .engine
        .list_tenants()
        .await?
        .into_iter()
        .map(Into::into)
        .collect();
    Ok(Json(json!({ "tenants": tenants })))
}

pub(crate) async fn create_key(
    State(st): State<AppState>,
    caller: Caller,
    Path(tenant_id): Path<String>,
    OptionalJson(body): OptionalJson<CreateKeyBody>,
) -> ApiResult<Response> {
    caller.require_admin()?;
    let tenant_id = Uuid::try_parse(&tenant_id)
        .map_err(|_| ApiError::from(Error::NotFound(format!("tenant {tenant_id}"))))?;
    let (info, key) = st
        .engine
        .issue_api_key(tenant_id, body.name.as_deref(), body.admin.unwrap_or(false))
        .await?;
    let body = json!({ "key_id": info.id, "api_key": key });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

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
