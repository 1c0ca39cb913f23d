//! Request and response bodies, field for field as in `shared/API.md`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use tether_core::{
    Backoff, ClaimedJob, Job, JobEvent, JobState, LeaseToken, NewJob, RunAt, Tenant,
};
use uuid::Uuid;

use crate::error::ApiError;

/// RFC 3339 in UTC with milliseconds: `2026-11-29T23:00:00.123Z`.
pub fn time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn ser_time<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&time(t))
}

fn ser_opt_time<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&time(t)),
        None => s.serialize_none(),
    }
}

/// The job object of the API (no tenant, never the lease token).
#[derive(Debug, Clone, Serialize)]
pub struct JobDto {
    /// Job id.
    pub id: Uuid,
    /// Queue.
    pub queue: String,
    /// Kind.
    pub kind: String,
    /// Payload.
    pub payload: Value,
    /// Result.
    pub result: Option<Value>,
    /// State.
    pub state: JobState,
    /// Priority.
    pub priority: i16,
    /// Claims so far.
    pub attempt: i32,
    /// Attempt budget.
    pub max_attempts: i32,
    /// Not before.
    #[serde(serialize_with = "ser_time")]
    pub run_at: DateTime<Utc>,
    /// Created.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// Latest attempt began.
    #[serde(serialize_with = "ser_opt_time")]
    pub started_at: Option<DateTime<Utc>>,
    /// Terminal since.
    #[serde(serialize_with = "ser_opt_time")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Last change.
    #[serde(serialize_with = "ser_time")]
    pub updated_at: DateTime<Utc>,
    /// Tail of the last error.
    pub last_error: Option<String>,
    /// Unique key.
    pub unique_key: Option<String>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Expiry.
    #[serde(serialize_with = "ser_opt_time")]
    pub expires_at: Option<DateTime<Utc>>,
    /// Per-attempt time limit.
    pub timeout_ms: Option<i64>,
    /// Cancel asked for while running.
    pub cancel_requested: bool,
    /// Latest claimer.
    pub worker_id: Option<String>,
    /// Lease end.
    #[serde(serialize_with = "ser_opt_time")]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Last heartbeat.
    #[serde(serialize_with = "ser_opt_time")]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Last progress.
    pub progress: Option<Value>,
}

impl From<Job> for JobDto {
    fn from(j: Job) -> Self {
        JobDto {
            id: j.id,
            queue: j.queue,
            kind: j.kind,
            payload: j.payload,
            result: j.result,
            state: j.state,
            priority: j.priority,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            run_at: j.run_at,
            created_at: j.created_at,
            started_at: j.started_at,
            finished_at: j.finished_at,
            updated_at: j.updated_at,
            last_error: j.last_error,
            unique_key: j.unique_key,
            idempotency_key: j.idempotency_key,
            tags: j.tags,
            expires_at: j.expires_at,
            timeout_ms: j.timeout_ms,
            cancel_requested: j.cancel_requested,
            worker_id: j.worker_id,
            lease_expires_at: j.lease_expires_at,
            heartbeat_at: j.heartbeat_at,
            progress: j.progress,
        }
    }
}

/// A claimed job: the job object plus its lease token.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimedJobDto {
    /// The job.
    #[serde(flatten)]
    pub job: JobDto,
    /// Only the claimer sees it.
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

/// One history event.
#[derive(Debug, Clone, Serialize)]
pub struct EventDto {
    /// When.
    #[serde(serialize_with = "ser_time")]
    pub at: DateTime<Utc>,
    /// What.
    pub event: tether_core::EventKind,
    /// Attempt after the transition.
    pub attempt: i32,
    /// Worker involved.
    pub worker_id: Option<String>,
    /// Context.
    pub detail: Option<String>,
}

impl From<JobEvent> for EventDto {
    fn from(e: JobEvent) -> Self {
        EventDto {
            at: e.at,
            event: e.event,
            attempt: e.attempt,
            worker_id: e.worker_id,
            detail: e.detail,
        }
    }
}

/// A tenant.
#[derive(Debug, Clone, Serialize)]
pub struct TenantDto {
    /// Id.
    pub id: Uuid,
    /// Name.
    pub name: String,
    /// Created.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
}

impl From<Tenant> for TenantDto {
    fn from(t: Tenant) -> Self {
        TenantDto {
            id: t.id,
            name: t.name,
            created_at: t.created_at,
        }
    }
}

/// `POST /v1/jobs` and each entry of a batch.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// Queue.
    pub queue: String,
    /// Kind.
    pub kind: String,
    /// Payload (default null).
    #[serde(default)]
    pub payload: Value,
    /// Priority (default 0).
    pub priority: Option<i16>,
    /// Not before this instant.
    pub run_at: Option<DateTime<Utc>>,
    /// Not before now + this.
    pub delay_ms: Option<i64>,
    /// Attempt budget.
    pub max_attempts: Option<i32>,
    /// Per-attempt time limit.
    pub timeout_ms: Option<i64>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Unique key.
    pub unique_key: Option<String>,
    /// Tags.
    pub tags: Option<Vec<String>>,
    /// Expiry.
    pub expires_at: Option<DateTime<Utc>>,
    /// Backoff.
    pub backoff: Option<Backoff>,
}

impl EnqueueRequest {
    /// The engine's form; `prefix` names the entry in errors (`jobs[3]`).
    pub fn into_new_job(self, prefix: &str) -> Result<NewJob, ApiError> {
        let run_at = match (self.run_at, self.delay_ms) {
            (Some(_), Some(_)) => {
                let field = if prefix.is_empty() {
                    "run_at".to_owned()
                } else {
                    format!("{prefix}.run_at")
                };
                return Err(ApiError::invalid_field(
                    &field,
                    "run_at and delay_ms are mutually exclusive",
                ));
            }
            (Some(at), None) => RunAt::At(at),
            (None, Some(ms)) => RunAt::Delay(ms),
            (None, None) => RunAt::Now,
        };
        Ok(NewJob {
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            priority: self.priority.unwrap_or(0),
            run_at,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            timeout_ms: self.timeout_ms,
            idempotency_key: self.idempotency_key,
            unique_key: self.unique_key,
            tags: self.tags.unwrap_or_default(),
            expires_at: self.expires_at,
        })
    }
}

/// `POST /v1/jobs/batch`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchEnqueueRequest {
    /// 1–1000 jobs.
    pub jobs: Vec<EnqueueRequest>,
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Claimer.
    pub worker_id: String,
    /// 1–1000 (default 1).
    pub limit: Option<u32>,
    /// Lease length (default: the queue's, 30 000).
    pub lease_ttl_ms: Option<i64>,
    /// Long-poll up to this long (0–30 000, default 0).
    pub wait_ms: Option<i64>,
}

/// `POST /v1/jobs/{id}/heartbeat`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// Token from the claim.
    pub lease_token: LeaseToken,
    /// New lease length.
    pub lease_ttl_ms: Option<i64>,
    /// Progress.
    pub progress: Option<Value>,
}

/// One item of `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatItem {
    /// Job.
    pub id: Uuid,
    /// Token from the claim.
    pub lease_token: LeaseToken,
    /// New lease length.
    pub lease_ttl_ms: Option<i64>,
    /// Progress.
    pub progress: Option<Value>,
}

/// `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatManyBody {
    /// 1–1000 items.
    pub items: Vec<HeartbeatItem>,
}

/// `POST /v1/jobs/{id}/complete`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    /// Token from the claim.
    pub lease_token: LeaseToken,
    /// Result.
    pub result: Option<Value>,
}

/// One item of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteItem {
    /// Job.
    pub id: Uuid,
    /// Token.
    pub lease_token: LeaseToken,
    /// Result.
    pub result: Option<Value>,
}

/// `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteManyBody {
    /// 1–1000 items.
    pub items: Vec<CompleteItem>,
}

/// `POST /v1/jobs/{id}/fail`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailBody {
    /// Token.
    pub lease_token: LeaseToken,
    /// Message.
    pub error: String,
    /// Exact retry delay.
    pub retry_after_ms: Option<i64>,
    /// No retry.
    pub fatal: Option<bool>,
    /// Cancel acknowledged.
    pub cancelled: Option<bool>,
}

/// `POST /v1/jobs/{id}/snooze`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    /// Token.
    pub lease_token: LeaseToken,
    /// Back to queued after this.
    pub delay_ms: i64,
}

/// `POST /v1/queues/{queue}/replay`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayBody {
    /// `failed` (default) or `cancelled`.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many.
    pub limit: Option<u32>,
}

/// `GET /v1/jobs` query.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Queue.
    pub queue: Option<String>,
    /// State.
    pub state: Option<String>,
    /// Kind.
    pub kind: Option<String>,
    /// Tag.
    pub tag: Option<String>,
    /// Page size.
    pub limit: Option<String>,
    /// Opaque cursor.
    pub cursor: Option<String>,
}

/// `POST /v1/tenants`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// Name.
    pub name: String,
}

/// `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// Label.
    pub name: Option<String>,
    /// Admin scope (default tenant only).
    pub admin: Option<bool>,
}
