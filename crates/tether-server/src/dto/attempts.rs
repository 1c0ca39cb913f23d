//! The `workers` tag (the attempts topic): claims, heartbeats, completions, failures and snoozes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::{ClaimedJob, LeaseToken};
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::ToSchema;
use uuid::Uuid;

use tether_core::validate::{LEASE_TTL_RANGE, MAX_BATCH, MAX_DURATION_MS, MAX_NAME_LEN};

use super::bounds::{field, items, length, range, FieldBound};
use super::{ser_time, JobDto};
use crate::error::{ApiError, ErrorDetail};
use crate::DEFAULT_MAX_WAIT_MS;

/// The `ok` of a successful batch item: always `true`.
pub(super) fn ok_true() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([true]))
        .description(Some("Always `true` here: this item succeeded."))
        .build()
}

/// The `ok` of a failed batch item: always `false`.
fn ok_false() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([false]))
        .description(Some(
            "Always `false` here: this item failed; the others are unaffected.",
        ))
        .build()
}

/// A claimed job: the job object plus its lease token.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ClaimedJob)]
pub struct ClaimedJobDto {
    /// The job.
    #[serde(flatten)]
    pub job: JobDto,
    /// Proves ownership of the job to heartbeat, complete, fail and snooze.
    /// Only the claimer sees it.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
}

impl From<ClaimedJob> for ClaimedJobDto {
    fn from(c: ClaimedJob) -> Self {
        ClaimedJobDto {
            job: c.job.into(),
            lease_token: c.lease_token,
        }
    }
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Who claims: 1–128 characters, no control characters.
    pub worker_id: String,
    /// Most jobs to take.
    #[schema(default = 1)]
    pub limit: Option<u32>,
    /// Lease length (default: the queue's, 30 000).
    pub lease_ttl_ms: Option<i64>,
    /// Long-poll: when nothing is ready, wait up to this long for a job
    /// (the maximum is the server's `max_wait_ms`, 30 000 by default).
    #[schema(default = 0)]
    pub wait_ms: Option<i64>,
    /// The last batch's completions, applied before the claim in its
    /// transaction and answered in `reports` (with `fail`, at most 1 000).
    pub complete: Option<Vec<CompleteItem>>,
    /// The last batch's failures, applied after `complete` and before the
    /// claim, answered in `reports`.
    pub fail: Option<Vec<FailItem>>,
}

/// One failure a claim carries: a `POST /v1/jobs/{id}/fail` with its job.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// The error message (the job keeps its last 2 000 characters).
    pub error: String,
    /// Retry exactly this much later instead of the jittered backoff.
    pub retry_after_ms: Option<i64>,
    /// Fail for good, no retry (default false).
    #[schema(default = false)]
    pub fatal: Option<bool>,
    /// The worker stopped because of a cancel request: the job becomes
    /// `cancelled` (default false; not with `fatal`).
    #[schema(default = false)]
    pub cancelled: Option<bool>,
}

impl From<FailItem> for tether_core::FailureReport {
    fn from(i: FailItem) -> Self {
        tether_core::FailureReport {
            id: i.id,
            lease_token: i.lease_token,
            failure: tether_core::Failure {
                error: i.error,
                retry_after_ms: i.retry_after_ms,
                fatal: i.fatal.unwrap_or(false),
                cancelled: i.cancelled.unwrap_or(false),
            },
        }
    }
}

/// `POST /v1/jobs/{id}/heartbeat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// Extend the lease to now + this (default: the TTL given at claim).
    pub lease_ttl_ms: Option<i64>,
    /// Any JSON, shown as the job's `progress`.
    pub progress: Option<Value>,
}

/// One item of `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// Extend the lease to now + this (default: the TTL given at claim).
    pub lease_ttl_ms: Option<i64>,
    /// Any JSON, shown as the job's `progress`.
    pub progress: Option<Value>,
}

impl From<HeartbeatItem> for tether_core::Heartbeat {
    fn from(i: HeartbeatItem) -> Self {
        tether_core::Heartbeat {
            id: i.id,
            lease_token: i.lease_token,
            lease_ttl_ms: i.lease_ttl_ms,
            progress: i.progress,
        }
    }
}

/// `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatManyBody {
    /// The heartbeats.
    pub items: Vec<HeartbeatItem>,
}

/// `POST /v1/jobs/{id}/complete`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// What the handler returned, any JSON.
    pub result: Option<Value>,
}

/// One item of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// What the handler returned, any JSON.
    pub result: Option<Value>,
}

impl From<CompleteItem> for tether_core::Completion {
    fn from(i: CompleteItem) -> Self {
        tether_core::Completion {
            id: i.id,
            lease_token: i.lease_token,
            result: i.result,
        }
    }
}

/// `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteManyBody {
    /// The completions.
    pub items: Vec<CompleteItem>,
}

/// `POST /v1/jobs/{id}/fail`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// The error message (the job keeps its last 2 000 characters).
    pub error: String,
    /// Retry exactly this much later instead of the jittered backoff.
    pub retry_after_ms: Option<i64>,
    /// Fail for good, no retry (default false).
    #[schema(default = false)]
    pub fatal: Option<bool>,
    /// The worker stopped because of a cancel request: the job becomes
    /// `cancelled` (default false; not with `fatal`).
    #[schema(default = false)]
    pub cancelled: Option<bool>,
}

/// `POST /v1/jobs/{id}/snooze`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// Back to `queued` at now + this.
    pub delay_ms: i64,
}

/// The answer of a claim.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClaimResponse {
    /// The claimed jobs, now `running`; empty when none was ready.
    pub jobs: Vec<ClaimedJobDto>,
    /// One answer per report the claim carried (`complete` first, then
    /// `fail`, each in request order), as `POST /v1/jobs/complete` answers
    /// its items; absent when the claim carried none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<Vec<CompleteResult>>,
}

/// The answer of a heartbeat.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeartbeatResponse {
    /// When the extended lease lapses.
    #[serde(serialize_with = "ser_time")]
    pub lease_expires_at: DateTime<Utc>,
    /// Cancellation was asked for: the worker should stop and acknowledge.
    pub cancel_requested: bool,
}

/// A heartbeat of a batch that went through.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeartbeatDone {
    /// The job.
    pub id: Uuid,
    /// Always `true`.
    #[schema(schema_with = ok_true)]
    pub ok: bool,
    /// When the extended lease lapses.
    #[serde(serialize_with = "ser_time")]
    pub lease_expires_at: DateTime<Utc>,
    /// Cancellation was asked for: the worker should stop and acknowledge.
    pub cancel_requested: bool,
}

/// One item of a batch that failed, with the error it would have had alone.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ItemFailure {
    /// The job.
    pub id: Uuid,
    /// Always `false`.
    #[schema(schema_with = ok_false)]
    pub ok: bool,
    /// Why, e.g. `lease_lost` or `not_found`.
    pub error: ErrorDetail,
}

impl ItemFailure {
    /// The failure of the item about job `id`.
    pub fn new(id: Uuid, e: tether_core::Error) -> Self {
        ItemFailure {
            id,
            ok: false,
            error: ApiError::from(e).detail(),
        }
    }
}

/// The outcome of one heartbeat of a batch.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum HeartbeatResult {
    /// The lease was extended.
    Done(HeartbeatDone),
    /// The heartbeat failed.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeartbeatManyResponse {
    /// One per item, in request order.
    pub results: Vec<HeartbeatResult>,
}

/// A completion of a batch (or a report a claim carried) that went through.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompleteDone {
    /// The job, now `succeeded` (or, for a failure, as the failure left it).
    pub id: Uuid,
    /// Always `true`.
    #[schema(schema_with = ok_true)]
    pub ok: bool,
}

/// The outcome of one completion of a batch, or of a report a claim carried.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum CompleteResult {
    /// The report was applied (or repeats the one that was).
    Done(CompleteDone),
    /// The report was refused; the others are unaffected.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompleteManyResponse {
    /// One per item, in request order.
    pub results: Vec<CompleteResult>,
}

/// The bounds of this module's fields (see `bounds.rs`).
pub(super) fn field_bounds() -> Vec<FieldBound> {
    vec![
        (field!(ClaimBody.worker_id), length(1..=MAX_NAME_LEN)),
        (field!(ClaimBody.limit), range(1..=MAX_BATCH as u32)),
        (field!(ClaimBody.lease_ttl_ms), range(LEASE_TTL_RANGE)),
        (field!(ClaimBody.wait_ms), range(0..=DEFAULT_MAX_WAIT_MS)),
        (field!(ClaimBody.complete), items(0..=MAX_BATCH)),
        (field!(ClaimBody.fail), items(0..=MAX_BATCH)),
        (field!(FailItem.retry_after_ms), range(0..=MAX_DURATION_MS)),
        (field!(HeartbeatBody.lease_ttl_ms), range(LEASE_TTL_RANGE)),
        (field!(HeartbeatItem.lease_ttl_ms), range(LEASE_TTL_RANGE)),
        (field!(HeartbeatManyBody.items), items(1..=MAX_BATCH)),
        (field!(CompleteManyBody.items), items(1..=MAX_BATCH)),
        (field!(FailBody.retry_after_ms), range(0..=MAX_DURATION_MS)),
        (field!(SnoozeBody.delay_ms), range(0..=MAX_DURATION_MS)),
    ]
}
