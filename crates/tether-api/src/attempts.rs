//! The `workers` tag (the attempts topic): claims, heartbeats, completions, failures and snoozes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::LeaseToken;
use uuid::Uuid;

#[cfg(feature = "openapi")]
use crate::NameSchema;
use crate::{time, ErrorDetail, Job};

/// The longest `wait_ms` of a claim when the server sets none (its
/// `max_wait_ms` default; the bound the document gives `wait_ms`).
pub const DEFAULT_MAX_WAIT_MS: i64 = 30_000;

/// A claimed job: the job object plus its lease token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimedJob {
    /// The job.
    #[serde(flatten)]
    pub job: Job,
    /// Proves ownership of the job to heartbeat, complete, fail and snooze.
    /// Only the claimer sees it.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
}

impl From<tether_core::ClaimedJob> for ClaimedJob {
    fn from(c: tether_core::ClaimedJob) -> Self {
        ClaimedJob {
            job: c.job.into(),
            lease_token: c.lease_token,
        }
    }
}

impl ClaimedJob {
    /// A completion of this job with no result (as
    /// [`tether_core::ClaimedJob::success`]).
    pub fn success(&self) -> tether_core::Completion {
        tether_core::Completion {
            id: self.job.id,
            lease_token: self.lease_token,
            result: None,
        }
    }

    /// The engine's form (see [`Job::into_core`] for `tenant`).
    pub fn into_core(self, tenant: &str) -> tether_core::ClaimedJob {
        tether_core::ClaimedJob {
            job: self.job.into_core(tenant),
            lease_token: self.lease_token,
        }
    }
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Who claims: 1–128 characters, no control characters.
    pub worker_id: String,
    /// Most jobs to take.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = 1))]
    pub limit: Option<u32>,
    /// Lease length (default: the queue's, 30 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<i64>,
    /// Long-poll: when nothing is ready, wait up to this long for a job
    /// (the maximum is the server's `max_wait_ms`, 30 000 by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = 0))]
    pub wait_ms: Option<i64>,
    /// The last batch's completions, applied before the claim in its
    /// transaction and answered in `reports` (with `fail`, at most 1 000).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete: Option<Vec<CompleteItem>>,
    /// The last batch's failures, applied after `complete` and before the
    /// claim, answered in `reports`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail: Option<Vec<FailItem>>,
}

/// One failure a claim carries: a `POST /v1/jobs/{id}/fail` with its job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FailItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// The error message (the job keeps its last 2 000 characters).
    pub error: String,
    /// Retry exactly this much later instead of the jittered backoff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
    /// Fail for good, no retry (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = false))]
    pub fatal: Option<bool>,
    /// The worker stopped because of a cancel request: the job becomes
    /// `cancelled` (default false; not with `fatal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = false))]
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

impl From<tether_core::FailureReport> for FailItem {
    fn from(r: tether_core::FailureReport) -> Self {
        let body = FailBody::new(r.lease_token, r.failure);
        FailItem {
            id: r.id,
            lease_token: body.lease_token,
            error: body.error,
            retry_after_ms: body.retry_after_ms,
            fatal: body.fatal,
            cancelled: body.cancelled,
        }
    }
}

/// `POST /v1/jobs/{id}/heartbeat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// Extend the lease to now + this (default: the TTL given at claim).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<i64>,
    /// Any JSON, shown as the job's `progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<Value>,
}

impl From<tether_core::Heartbeat> for HeartbeatBody {
    fn from(h: tether_core::Heartbeat) -> Self {
        HeartbeatBody {
            lease_token: h.lease_token,
            lease_ttl_ms: h.lease_ttl_ms,
            progress: h.progress,
        }
    }
}

/// One item of `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// Extend the lease to now + this (default: the TTL given at claim).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ttl_ms: Option<i64>,
    /// Any JSON, shown as the job's `progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
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

impl From<tether_core::Heartbeat> for HeartbeatItem {
    fn from(h: tether_core::Heartbeat) -> Self {
        HeartbeatItem {
            id: h.id,
            lease_token: h.lease_token,
            lease_ttl_ms: h.lease_ttl_ms,
            progress: h.progress,
        }
    }
}

/// `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HeartbeatManyBody {
    /// The heartbeats.
    pub items: Vec<HeartbeatItem>,
}

/// `POST /v1/jobs/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// What the handler returned, any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// One item of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteItem {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// What the handler returned, any JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
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

impl From<tether_core::Completion> for CompleteItem {
    fn from(c: tether_core::Completion) -> Self {
        CompleteItem {
            id: c.id,
            lease_token: c.lease_token,
            result: c.result,
        }
    }
}

/// `POST /v1/jobs/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CompleteManyBody {
    /// The completions.
    pub items: Vec<CompleteItem>,
}

/// `POST /v1/jobs/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// The error message (the job keeps its last 2 000 characters).
    pub error: String,
    /// Retry exactly this much later instead of the jittered backoff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<i64>,
    /// Fail for good, no retry (default false).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = false))]
    pub fatal: Option<bool>,
    /// The worker stopped because of a cancel request: the job becomes
    /// `cancelled` (default false; not with `fatal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = false))]
    pub cancelled: Option<bool>,
}

impl FailBody {
    /// The body of `failure` under `lease_token`; the flags are sent only
    /// when set.
    pub fn new(lease_token: LeaseToken, failure: tether_core::Failure) -> Self {
        FailBody {
            lease_token,
            error: failure.error,
            retry_after_ms: failure.retry_after_ms,
            fatal: failure.fatal.then_some(true),
            cancelled: failure.cancelled.then_some(true),
        }
    }

    /// The engine's form of the failure.
    pub fn failure(self) -> tether_core::Failure {
        tether_core::Failure {
            error: self.error,
            retry_after_ms: self.retry_after_ms,
            fatal: self.fatal.unwrap_or(false),
            cancelled: self.cancelled.unwrap_or(false),
        }
    }
}

/// `POST /v1/jobs/{id}/snooze`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    /// The token from the claim.
    #[cfg_attr(feature = "openapi", schema(value_type = Uuid))]
    pub lease_token: LeaseToken,
    /// Back to `queued` at now + this.
    pub delay_ms: i64,
}

/// The answer of a claim.
// Written only, as the batch answers it carries (see [`JobResult`](crate::JobResult)).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimResponse {
    /// The claimed jobs, now `running`; empty when none was ready.
    pub jobs: Vec<ClaimedJob>,
    /// One answer per report the claim carried (`complete` first, then
    /// `fail`, each in request order), as `POST /v1/jobs/complete` answers
    /// its items; absent when the claim carried none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reports: Option<Vec<CompleteResult>>,
}

/// The answer of a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatResponse {
    /// When the extended lease lapses.
    #[serde(serialize_with = "time::ser")]
    pub lease_expires_at: DateTime<Utc>,
    /// Cancellation was asked for: the worker should stop and acknowledge.
    pub cancel_requested: bool,
}

impl From<HeartbeatResponse> for tether_core::HeartbeatAck {
    fn from(a: HeartbeatResponse) -> Self {
        tether_core::HeartbeatAck {
            lease_expires_at: a.lease_expires_at,
            cancel_requested: a.cancel_requested,
        }
    }
}

impl From<tether_core::HeartbeatAck> for HeartbeatResponse {
    fn from(a: tether_core::HeartbeatAck) -> Self {
        HeartbeatResponse {
            lease_expires_at: a.lease_expires_at,
            cancel_requested: a.cancel_requested,
        }
    }
}

/// A heartbeat of a batch that went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatDone {
    /// The job.
    pub id: Uuid,
    /// Always `true`.
    #[cfg_attr(feature = "openapi", schema(schema_with = ok_true))]
    pub ok: bool,
    /// When the extended lease lapses.
    #[serde(serialize_with = "time::ser")]
    pub lease_expires_at: DateTime<Utc>,
    /// Cancellation was asked for: the worker should stop and acknowledge.
    pub cancel_requested: bool,
}

/// One item of a batch that failed, with the error it would have had alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ItemFailure {
    /// The job.
    pub id: Uuid,
    /// Always `false`.
    #[cfg_attr(feature = "openapi", schema(schema_with = ok_false))]
    pub ok: bool,
    /// Why, e.g. `lease_lost` or `not_found`.
    pub error: ErrorDetail,
}

/// The outcome of one heartbeat of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum HeartbeatResult {
    /// The lease was extended.
    Done(HeartbeatDone),
    /// The heartbeat failed.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatManyResponse {
    /// One per item, in request order.
    pub results: Vec<HeartbeatResult>,
}

/// A completion of a batch (or a report a claim carried) that went through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompleteDone {
    /// The job, now `succeeded` (or, for a failure, as the failure left it).
    pub id: Uuid,
    /// Always `true`.
    #[cfg_attr(feature = "openapi", schema(schema_with = ok_true))]
    pub ok: bool,
}

/// The outcome of one completion of a batch, or of a report a claim carried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum CompleteResult {
    /// The report was applied (or repeats the one that was).
    Done(CompleteDone),
    /// The report was refused; the others are unaffected.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompleteManyResponse {
    /// One per item, in request order.
    pub results: Vec<CompleteResult>,
}

/// A worker: one holding running jobs, or one that announced itself and
/// was seen within the last 5 minutes, or both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerInfo {
    /// The id it claims with.
    pub worker_id: String,
    /// The queues it announced and those of its running jobs, by name.
    pub queues: Vec<String>,
    /// How many jobs it holds (0 for an idle worker).
    pub running: u64,
    /// Its latest heartbeat on any of them (its claim before the first).
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// Its last announcement or claim (claims refresh it at most every 30
    /// s); `null` for a worker that never announced.
    #[serde(default, serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_seen_at: Option<DateTime<Utc>>,
    /// How many jobs it runs at once, as announced.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub concurrency: Option<u32>,
    /// Its SDK, as announced.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub sdk: Option<String>,
    /// Its SDK's (or application's) version, as announced.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub version: Option<String>,
    /// Its host, as announced.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub host: Option<String>,
    /// Its process id, as announced.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub pid: Option<u32>,
}

/// The answer of `GET /v1/workers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerListResponse {
    /// By `worker_id`.
    pub workers: Vec<WorkerInfo>,
}

impl From<tether_core::WorkerSummary> for WorkerInfo {
    fn from(w: tether_core::WorkerSummary) -> Self {
        let (announced, last_seen_at) = match w.presence {
            Some(p) => (Some(p.announcement), Some(p.last_seen_at)),
            None => (None, None),
        };
        let announced = announced.as_ref();
        WorkerInfo {
            worker_id: w.worker_id,
            queues: w.queues,
            running: w.running,
            last_heartbeat_at: w.last_heartbeat_at,
            last_seen_at,
            concurrency: announced.map(|a| a.concurrency),
            sdk: announced.and_then(|a| a.sdk.clone()),
            version: announced.and_then(|a| a.version.clone()),
            host: announced.and_then(|a| a.host.clone()),
            pid: announced.and_then(|a| a.pid),
        }
    }
}

/// `PUT /v1/workers/{worker_id}`: what a worker says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AnnounceWorkerBody {
    /// The queues it serves (1 to 100 names).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<NameSchema>))]
    pub queues: Vec<String>,
    /// How many jobs it runs at once, in all (1 to 100 000).
    pub concurrency: u32,
    /// Its SDK (`python`, `typescript`, `rust`, ...), up to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
    /// Its SDK's or application's version, up to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The host it runs on, up to 255 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its process id there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl From<AnnounceWorkerBody> for tether_core::WorkerAnnouncement {
    fn from(b: AnnounceWorkerBody) -> Self {
        tether_core::WorkerAnnouncement {
            queues: b.queues,
            concurrency: b.concurrency,
            sdk: b.sdk,
            version: b.version,
            host: b.host,
            pid: b.pid,
        }
    }
}

impl From<tether_core::WorkerAnnouncement> for AnnounceWorkerBody {
    fn from(a: tether_core::WorkerAnnouncement) -> Self {
        AnnounceWorkerBody {
            queues: a.queues,
            concurrency: a.concurrency,
            sdk: a.sdk,
            version: a.version,
            host: a.host,
            pid: a.pid,
        }
    }
}

#[cfg(feature = "openapi")]
pub(crate) use self::openapi::{field_bounds, ok_false, ok_true};

/// The `ok` schemas of batch items, and this topic's field bounds.
#[cfg(feature = "openapi")]
mod openapi {
    use tether_core::validate::{LEASE_TTL_RANGE, MAX_BATCH, MAX_DURATION_MS, MAX_NAME_LEN};
    use utoipa::openapi::schema::{Object, ObjectBuilder, Type};

    use super::*;
    use crate::bounds::{field, items, length, range, FieldBound};

    /// The `ok` of a successful batch item: always `true`.
    pub(crate) fn ok_true() -> Object {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([true]))
            .description(Some("Always `true` here: this item succeeded."))
            .build()
    }

    /// The `ok` of a failed batch item: always `false`.
    pub(crate) fn ok_false() -> Object {
        ObjectBuilder::new()
            .schema_type(Type::Boolean)
            .enum_values(Some([false]))
            .description(Some(
                "Always `false` here: this item failed; the others are unaffected.",
            ))
            .build()
    }

    /// The bounds of this topic's fields (see `bounds.rs`).
    pub(crate) fn field_bounds() -> Vec<FieldBound> {
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
}
