//! Every route of the service, in one list ([`api`]), and their handlers,
//! one module per topic, named as in every other layer (the OpenAPI
//! tags `workers` and `admin` are `attempts.rs` and `tenants.rs`). Each handler carries its OpenAPI description:
//! a doc comment's first line is the operation's summary, the rest its
//! description.
//!
//! Every keyed route (all of `/v1`, and `/metrics`) answers 401 without a
//! valid key (on `/v1`, checked before anything else), 500 on an
//! unexpected storage failure and 503 when the database is unreachable or
//! the request outlives the server's time limit. Routes with a body also
//! answer 400, 413 and 415.

pub(crate) mod attempts;
pub(crate) mod feed;
pub(crate) mod jobs;
pub(crate) mod queues;
pub(crate) mod schedules;
pub(crate) mod service;
pub(crate) mod tenants;
pub(crate) mod workflows;

use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::error::{ApiError, ApiResult};
use crate::{metrics, openapi, AppState};
use tether_api::JobResponse;

/// The one list of routes. `routes!` routes each handler at the method and
/// path of its `#[utoipa::path]` and adds that operation to the OpenAPI
/// document, so the router ([`crate::router`]) and the document
/// ([`crate::openapi()`]) are both made from this list. `guard` wraps the
/// `/v1` routes: the router passes authentication, the document nothing.
/// What every keyed route answers (401, 500, 503...) is documented once,
/// by [`openapi::keyed`], not by each handler.
///
/// Not here, on purpose: the dashboard's static files (`dashboard.rs`),
/// which are a web page, not API operations.
pub(crate) fn api(
    guard: impl FnOnce(OpenApiRouter<AppState>) -> OpenApiRouter<AppState>,
) -> OpenApiRouter<AppState> {
    let v1 = OpenApiRouter::default()
        .routes(routes!(jobs::enqueue, jobs::list_jobs))
        .routes(routes!(jobs::enqueue_batch))
        .routes(routes!(jobs::get_job))
        .routes(routes!(jobs::job_events))
        .routes(routes!(feed::events))
        .routes(routes!(workflows::job_dependencies))
        .routes(routes!(workflows::list_workflows))
        .routes(routes!(workflows::get_workflow))
        .routes(routes!(workflows::cancel_workflow))
        .routes(routes!(workflows::retry_workflow))
        .routes(routes!(jobs::cancel))
        .routes(routes!(jobs::replay))
        .routes(routes!(jobs::cancel_many))
        .routes(routes!(jobs::replay_many))
        .routes(routes!(attempts::claim))
        .routes(routes!(attempts::heartbeat))
        .routes(routes!(attempts::heartbeat_many))
        .routes(routes!(attempts::complete))
        .routes(routes!(attempts::complete_many))
        .routes(routes!(attempts::fail))
        .routes(routes!(attempts::snooze))
        .routes(routes!(attempts::list_workers))
        .routes(routes!(attempts::announce_worker))
        .routes(routes!(queues::list_queues))
        .routes(routes!(
            queues::get_queue,
            queues::configure_queue,
            queues::delete_queue
        ))
        .routes(routes!(queues::queue_throughput))
        .routes(routes!(queues::pause_queue))
        .routes(routes!(queues::resume_queue))
        .routes(routes!(queues::replay_queue))
        .routes(routes!(
            schedules::create_schedule,
            schedules::list_schedules
        ))
        .routes(routes!(
            schedules::get_schedule,
            schedules::patch_schedule,
            schedules::put_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(schedules::schedule_runs))
        .routes(routes!(schedules::trigger_schedule))
        .routes(routes!(schedules::cron_preview))
        .routes(routes!(tenants::create_tenant, tenants::list_tenants))
        .routes(routes!(tenants::suspend_tenant))
        .routes(routes!(tenants::resume_tenant))
        .routes(routes!(tenants::create_key, tenants::list_keys))
        .routes(routes!(tenants::revoke_key))
        .routes(routes!(service::whoami));
    // `/metrics` needs a key too, but checks it itself: it joins the keyed
    // routes after the guard.
    let mut keyed = guard(v1).routes(routes!(metrics::metrics));
    openapi::keyed(keyed.get_openapi_mut());
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(service::healthz))
        .routes(routes!(service::readyz))
        .routes(routes!(openapi::serve))
        .merge(keyed)
}

/// A job id from the path; anything that is not a UUID names no job.
pub(crate) fn job_id(raw: &str) -> ApiResult<Uuid> {
    Uuid::try_parse(raw).map_err(|_| ApiError::not_found(format!("job {raw} not found")))
}

pub(crate) fn job(j: tether_core::Job) -> Json<JobResponse> {
    Json(j.into())
}

pub(crate) fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

/// A query parameter holding a whole number in `range` (unset when empty).
pub(crate) fn query_number(
    field: &str,
    v: Option<String>,
    range: std::ops::RangeInclusive<u32>,
) -> ApiResult<Option<u32>> {
    let refuse = || {
        ApiError::invalid_field(
            field,
            format!(
                "must be an integer from {} to {}",
                range.start(),
                range.end()
            ),
        )
    };
    match non_empty(v) {
        None => Ok(None),
        Some(s) => match s.parse::<u32>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(refuse()),
        },
    }
}

/// A query parameter holding an instant (unset when empty), read by the
/// one rule of every input time, bodies' too
/// ([`tether_core::validate::parse_instant`]).
pub(crate) fn query_time(
    field: &str,
    v: Option<String>,
) -> ApiResult<Option<chrono::DateTime<chrono::Utc>>> {
    non_empty(v)
        .map(|s| tether_core::validate::parse_instant(&s))
        .transpose()
        .map_err(|e| ApiError::invalid_field(field, e))
}
