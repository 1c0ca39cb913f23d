//! The handlers of the routes, one module per OpenAPI tag, each with its
//! OpenAPI description: a doc comment's first line is the operation's
//! summary, the rest its description.
//!
//! Every `/v1` route answers 401 without a valid key (checked before
//! anything else), 500 on an unexpected storage failure and 503 when the
//! database is unreachable or the request outlives the server's time limit.
//! Routes with a body also answer 400, 413 and 415.

pub(crate) mod admin;
pub(crate) mod jobs;
pub(crate) mod queues;
pub(crate) mod schedules;
pub(crate) mod service;
pub(crate) mod workers;

use axum::Json;
use uuid::Uuid;

use crate::dto::JobResponse;
use crate::error::{ApiError, ApiResult};

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
