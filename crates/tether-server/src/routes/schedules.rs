//! `schedules`: cron timetables that enqueue jobs, their runs, and a
//! preview of cron expressions.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use tether_core::{Engine, Error, PutOutcome, MAX_LISTED_RUNS};
use uuid::Uuid;

use super::{job, non_empty, query_number, query_time};
use crate::error::{ApiError, ApiResult, BadRequest};
use crate::extract::{ApiJson, ApiQuery, Caller};
use crate::AppState;
use tether_api::*;

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
    request_body = CreateScheduleBody,
    responses(
        (status = 201, description = "The schedule was created.", body = ScheduleResponse),
        (status = 409, description = "`already_exists`: the tenant has a schedule of this name; `invalid_state`: the tenant has as many schedules as the server allows (`--max-schedules-per-tenant`).", body = ErrorBody),
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

/// Create or replace a schedule by name.
///
/// For schedules declared in code and applied on every deploy: the
/// tenant's schedule of this name becomes exactly the body (the body of a
/// creation without `name`; fields left out take their defaults). A new
/// name is created (201); an existing schedule keeps its id and runs and
/// gets this definition, its next run recomputed as by a change (200,
/// `updated`), or, when it already is exactly this, nothing is written
/// (200, `unchanged`).
#[utoipa::path(
    put,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = String, Path, description = "The schedule's **name** (this method addresses a schedule by its name; the others by its id).")),
    request_body = PutScheduleBody,
    responses(
        (status = 200, description = "The schedule existed: `outcome` is `updated` or `unchanged`.", body = PutScheduleResponse),
        (status = 201, description = "The schedule was created (`outcome` is `created`).", body = PutScheduleResponse),
        (status = 400, response = BadRequest),
        (status = 409, description = "`invalid_state`: the tenant has as many schedules as the server allows (`--max-schedules-per-tenant`).", body = ErrorBody),
    )
)]
pub(crate) async fn put_schedule(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PutScheduleBody>,
) -> ApiResult<(StatusCode, Json<PutScheduleResponse>)> {
    let spec = body.into_spec(name);
    let (s, outcome) = st.engine.put_schedule(caller.tenant(), &spec).await?;
    let status = match outcome {
        PutOutcome::Created => StatusCode::CREATED,
        PutOutcome::Updated | PutOutcome::Unchanged => StatusCode::OK,
    };
    Ok((
        status,
        Json(PutScheduleResponse {
            schedule: s.into(),
            outcome,
        }),
    ))
}

/// List the tenant's schedules.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    params(ScheduleListQuery),
    responses(
        (status = 200, description = "Every schedule of the tenant, by name.", body = ScheduleListResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn list_schedules(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ScheduleListQuery>,
) -> ApiResult<Json<ScheduleListResponse>> {
    let runs = query_number("runs", q.runs, 1..=MAX_LISTED_RUNS)?;
    let next = query_number("next", q.next, 1..=MAX_LISTED_RUNS)?;
    let schedules = st.engine.list_schedules(caller.tenant()).await?;
    let mut recent = match runs {
        Some(n) => Some(st.engine.recent_schedule_runs(caller.tenant(), n).await?),
        None => None,
    };
    let now = chrono::Utc::now();
    let mut out = Vec::with_capacity(schedules.len());
    for s in schedules {
        let next_runs = match (next, s.spec.enabled) {
            (Some(n), true) => Some(Engine::cron_preview(
                &s.spec.cron,
                &s.spec.timezone,
                Some(now),
                n,
            )?),
            (Some(_), false) => Some(Vec::new()),
            (None, _) => None,
        };
        let recent_runs = recent.as_mut().map(|by_id| {
            by_id
                .remove(&s.id)
                .unwrap_or_default()
                .into_iter()
                .map(Into::into)
                .collect()
        });
        let mut schedule = Schedule::from(s);
        schedule.recent_runs = recent_runs;
        schedule.next_runs = next_runs;
        out.push(schedule);
    }
    Ok(Json(ScheduleListResponse { schedules: out }))
}

/// Read a schedule.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 200, description = "The schedule.", body = ScheduleResponse),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
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
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    request_body = PatchScheduleBody,
    responses(
        (status = 200, description = "The schedule after the change.", body = ScheduleResponse),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
        (status = 409, description = "`already_exists`: the tenant has another schedule of the new name.", body = ErrorBody),
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
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 204, description = "The schedule is deleted."),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
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
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 200, description = "The newest runs, newest first.", body = ScheduleRunListResponse),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
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
    params(("id" = Uuid, Path, description = "The schedule's id.")),
    responses(
        (status = 201, description = "The job of this run.", body = JobResponse),
        (status = 404, description = "`not_found`: no such schedule in this tenant (also an id that is not a UUID).", body = ErrorBody),
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
    params(CronPreviewQuery),
    responses(
        (status = 200, description = "The next fire instants, earliest first.", body = CronPreviewResponse),
        (status = 400, response = BadRequest),
    )
)]
pub(crate) async fn cron_preview(
    _caller: Caller,
    ApiQuery(q): ApiQuery<CronPreviewQuery>,
) -> ApiResult<Json<CronPreviewResponse>> {
    let timezone = non_empty(q.timezone).unwrap_or_else(|| "UTC".to_owned());
    let from = query_time("from", q.from)?;
    let count = non_empty(q.count)
        .map(|s| s.parse::<u32>())
        .transpose()
        .map_err(|_| ApiError::invalid_field("count", "must be an integer from 1 to 100"))?;
    let times = Engine::cron_preview(&q.cron, &timezone, from, count.unwrap_or(5))?;
    Ok(Json(CronPreviewResponse { times }))
}
