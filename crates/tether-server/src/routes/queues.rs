//! `queues`: queue stats, settings, pausing and bulk replay.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::{JobState, ReplayFilter};

use crate::error::{ApiResult, BadRequest};
use crate::extract::{ApiJson, ApiQuery, Caller, OptionalJson};
use crate::AppState;
use tether_api::*;

fn queue(q: tether_core::QueueStats) -> Json<QueueResponse> {
    Json(q.into())
}

/// List the tenant's queues.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "queues",
    responses(
        (status = 200, description = "The queues with their stats and settings.", body = QueueListResponse),
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
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue's stats and settings.", body = QueueResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn get_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<QueueResponse>> {
    Ok(queue(st.engine.queue_stats(caller.tenant(), &name).await?))
}

/// Change a queue's settings.
///
/// New jobs copy them at enqueue; jobs already enqueued keep theirs.
#[utoipa::path(
    patch,
    path = "/v1/queues/{queue}",
    tag = "queues",
    params(("queue" = NameSchema, Path, description = "The queue.")),
    request_body = QueueConfigBody,
    responses(
        (status = 200, description = "The queue with its new settings.", body = QueueResponse),
        (status = 409, description = "`invalid_state`: the queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`).", body = ErrorBody),
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

/// Pause a queue.
///
/// A paused queue accepts enqueues and hands out no claims.
#[utoipa::path(
    post,
    path = "/v1/queues/{queue}/pause",
    tag = "queues",
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue, now paused.", body = QueueResponse),
        (status = 400, response = BadRequest),
        (status = 409, description = "`invalid_state`: the queue is new and the tenant has as many queues as the server allows (`--max-queues-per-tenant`).", body = ErrorBody),
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
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 200, description = "The queue, no longer paused.", body = QueueResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn resume_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<QueueResponse>> {
    Ok(queue(st.engine.resume(caller.tenant(), &name).await?))
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
    params(("queue" = NameSchema, Path, description = "The queue.")),
    request_body = Option<BulkReplayBody>,
    responses(
        (status = 200, description = "How many jobs were queued again.", body = BulkReplayResponse),
        (status = 409, description = "`invalid_state`: a concurrent enqueue took a unique key being replayed; retry.", body = ErrorBody),
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
        next_cursor: out.next_cursor.map(|c| c.to_string()),
    }))
}

/// Remove an empty queue.
///
/// Its row goes: its pause flag and settings, and its place in
/// `GET /v1/queues` (a typo'd name that was paused or configured, say).
/// Only a queue that holds no job in any state can be removed.
#[utoipa::path(
    delete,
    path = "/v1/queues/{queue}",
    tag = "queues",
    params(("queue" = NameSchema, Path, description = "The queue.")),
    responses(
        (status = 204, description = "The queue's row is gone."),
        (status = 400, response = BadRequest),
        (status = 404, description = "`not_found`: the queue has no row (nothing to remove).", body = ErrorBody),
        (status = 409, description = "`invalid_state`: the queue holds jobs.", body = ErrorBody),
    )
)]
pub(crate) async fn delete_queue(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    st.engine.delete_queue(caller.tenant(), &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A queue's throughput.
///
/// Per minute, oldest first, how many of its jobs succeeded, failed,
/// were retried and were cancelled (counted from the history), and the
/// wait and run percentiles of the jobs that finished in the window.
#[utoipa::path(
    get,
    path = "/v1/queues/{queue}/throughput",
    tag = "queues",
    params(("queue" = NameSchema, Path, description = "The queue."), ThroughputQuery),
    responses(
        (status = 200, description = "The queue's last minutes.", body = ThroughputResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn queue_throughput(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<ThroughputQuery>,
) -> ApiResult<Json<ThroughputResponse>> {
    let minutes = super::query_number("minutes", q.minutes, tether_core::THROUGHPUT_MINUTES)?;
    let minutes = minutes.unwrap_or(60);
    let t = st
        .engine
        .throughput(caller.tenant(), &name, minutes)
        .await?;
    Ok(Json(t.into()))
}
