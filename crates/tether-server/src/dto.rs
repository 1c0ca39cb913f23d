//! Request and response bodies, field for field as in `docs/API.md`, with
//! their OpenAPI schemas: doc comments become the document's descriptions.

use std::borrow::Cow;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use tether_core::validate::MAX_NAME_LEN;
use tether_core::{
    ApiKeyInfo, Backoff, ClaimedJob, EventCursor, EventKind, Job, JobEvent, JobState, LeaseToken,
    NewJob, Overlap, QueueConfigPatch, QueueStats, RunAt, RunOutcome, Schedule, SchedulePatch,
    ScheduleRun, ScheduleSpec, StateCounts, Tenant,
};
use utoipa::openapi::schema::{Object, ObjectBuilder, Schema, Type};
use utoipa::openapi::RefOr;
use utoipa::{IntoParams, PartialSchema, ToSchema};
use uuid::Uuid;

use crate::error::{ApiError, ErrorDetail};

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

/// Declares a unit type that stands for a schema the derive cannot make: a
/// type of `tether-core`, or a body written outside this module.
macro_rules! schema_of {
    ($(#[$doc:meta])* $ty:ident as $name:literal => $schema:expr) => {
        $(#[$doc])*
        pub(crate) struct $ty;

        impl PartialSchema for $ty {
            fn schema() -> RefOr<Schema> {
                $schema.into()
            }
        }

        impl ToSchema for $ty {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
        }
    };
}

/// A string schema with these values only.
fn string_enum<'a>(description: &str, values: impl IntoIterator<Item = &'a str>) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values))
        .description(Some(description))
        .build()
}

schema_of!(
    /// Schema of [`JobState`], with the values the core knows.
    JobStateSchema as "JobState" => string_enum(
        "Where a job is in its lifecycle: `queued` (waiting, possibly not before `run_at`), \
         `running` (claimed, under a lease), and the terminal `succeeded`, `failed` (the \
         dead-letter queue) and `cancelled`.",
        JobState::ALL.map(JobState::as_str),
    )
);

schema_of!(
    /// Schema of [`EventKind`], with the values the core knows.
    EventKindSchema as "EventKind" => string_enum(
        "A transition in a job's history.",
        EventKind::ALL.map(EventKind::as_str),
    )
);

schema_of!(
    /// Schema of the names of queues, kinds, tags, tenants and schedules.
    NameSchema as "Name" => ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(MAX_NAME_LEN))
        .pattern(Some("^[A-Za-z0-9._:-]+$"))
        .description(Some(format!(
            "A queue, kind, tag, tenant or schedule name: 1–{MAX_NAME_LEN} characters of \
             `[A-Za-z0-9._:-]`."
        )))
);

schema_of!(
    /// Schema of [`Overlap`], with the values the core knows.
    OverlapSchema as "Overlap" => string_enum(
        "What a schedule does while the job of its previous run is still `queued` or \
         `running`: `allow` enqueues anyway (the default), `skip` enqueues nothing and records \
         the run as `skipped`.",
        [Overlap::Allow, Overlap::Skip].map(Overlap::as_str),
    )
);

schema_of!(
    /// Schema of [`RunOutcome`], with the values the core knows.
    RunOutcomeSchema as "RunOutcome" => string_enum(
        "What a run of a schedule did: `enqueued` a job, or `skipped` (overlap `skip` while the \
         previous run's job was unfinished).",
        [RunOutcome::Enqueued, RunOutcome::Skipped].map(RunOutcome::as_str),
    )
);

schema_of!(
    /// Schema of the answer of `/healthz` and `/readyz`: `{"status": "ok"}`.
    HealthSchema as "Health" => ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("status", string_enum("Always `ok`.", ["ok"]))
        .required("status")
        .description(Some("The service is up (`/healthz`) or ready (`/readyz`)."))
);

/// The `ok` of a successful batch item: always `true`.
fn ok_true() -> Object {
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

/// The job object of the API (no tenant, never the lease token).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Job)]
pub struct JobDto {
    /// Server-made, time-ordered (UUID v7).
    pub id: Uuid,
    /// The queue the job waits in.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The handler name.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// Arguments for the handler, any JSON (`null` when none was given).
    pub payload: Value,
    /// What the handler returned on success.
    #[schema(required)]
    pub result: Option<Value>,
    /// Lifecycle state.
    #[schema(value_type = JobStateSchema)]
    pub state: JobState,
    /// Higher runs first.
    #[schema(minimum = -100, maximum = 100)]
    pub priority: i16,
    /// Claims so far (a snooze gives one back).
    #[schema(minimum = 0)]
    pub attempt: i32,
    /// Claims allowed before the job fails for good.
    #[schema(minimum = 1, maximum = 1000)]
    pub max_attempts: i32,
    /// Not claimable before this instant.
    #[serde(serialize_with = "ser_time")]
    pub run_at: DateTime<Utc>,
    /// When the job was enqueued.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When the latest attempt began.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal state.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Last change of any kind.
    #[serde(serialize_with = "ser_time")]
    pub updated_at: DateTime<Utc>,
    /// The last 2 000 characters of the last error message.
    #[schema(required)]
    pub last_error: Option<String>,
    /// At most one active (`queued` or `running`) job of the tenant has it.
    #[schema(required)]
    pub unique_key: Option<String>,
    /// At most one job of the tenant (any state, within retention) has it.
    #[schema(required)]
    pub idempotency_key: Option<String>,
    /// Free labels for filtering.
    #[schema(value_type = Vec<NameSchema>)]
    pub tags: Vec<String>,
    /// A queued job not claimed by then fails as expired.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub expires_at: Option<DateTime<Utc>>,
    /// How long one attempt may run (enforced by the worker runtime).
    #[schema(required, minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Cancellation was asked for while the job was running.
    pub cancel_requested: bool,
    /// The worker that claimed the latest attempt.
    #[schema(required)]
    pub worker_id: Option<String>,
    /// When the current lease lapses (running jobs).
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The last heartbeat of the current attempt.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Whatever JSON the worker last sent with a heartbeat.
    #[schema(required)]
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

/// One event of a job's history.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = JobEvent)]
pub struct EventDto {
    /// When it happened.
    #[serde(serialize_with = "ser_time")]
    pub at: DateTime<Utc>,
    /// What happened.
    #[schema(value_type = EventKindSchema)]
    pub event: EventKind,
    /// The job's attempt after the transition.
    pub attempt: i32,
    /// The worker involved, if any.
    #[schema(required)]
    pub worker_id: Option<String>,
    /// Context, e.g. the error message.
    #[schema(required)]
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

/// The answer of `GET /v1/whoami`: who the request's key is.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WhoamiResponse {
    /// The tenant the key acts for.
    pub tenant: TenantRef,
    /// The key's id (never its secret).
    pub key_id: Uuid,
    /// Whether the key has admin scope.
    pub admin: bool,
}

/// A tenant by id and name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantRef {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
}

/// A tenant: the wall around a set of jobs, queues and keys.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Tenant)]
pub struct TenantDto {
    /// Its id.
    pub id: Uuid,
    /// Its unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// When it was created.
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

/// An API key as listed: what it is and when it was used, never its
/// secret or hash.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub struct KeyDto {
    /// The key id (the middle part of an issued key; for
    /// `DELETE /v1/keys/{key_id}`).
    pub id: Uuid,
    /// Its label, if any; the operator's key is `TETHER_ADMIN_KEY`.
    #[schema(required)]
    pub name: Option<String>,
    /// Whether it has admin scope.
    pub admin: bool,
    /// When it was issued.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within a minute (it is
    /// written at most once a minute); `null` if never.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked; `null` while it is valid.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<ApiKeyInfo> for KeyDto {
    fn from(k: ApiKeyInfo) -> Self {
        KeyDto {
            id: k.id,
            name: k.name,
            admin: k.admin,
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// Exponential retry backoff: the n-th retry waits
/// `min(base_ms * 2^(n-1), cap_ms)` times a jitter in [1.0, 1.5).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Backoff)]
pub struct BackoffDto {
    /// Delay before the first retry (default 1 000).
    #[schema(minimum = 0, maximum = 31622400000_i64)]
    pub base_ms: i64,
    /// Largest delay before jitter, at least `base_ms` (default 3 600 000).
    #[schema(minimum = 0, maximum = 31622400000_i64)]
    pub cap_ms: i64,
}

impl From<Backoff> for BackoffDto {
    fn from(b: Backoff) -> Self {
        BackoffDto {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}

impl From<BackoffDto> for Backoff {
    fn from(b: BackoffDto) -> Self {
        Backoff {
            base_ms: b.base_ms,
            cap_ms: b.cap_ms,
        }
    }
}

/// Number of jobs per state.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[schema(as = StateCounts)]
pub struct StateCountsDto {
    /// Queued, ready or scheduled.
    pub queued: i64,
    /// Running.
    pub running: i64,
    /// Succeeded (within retention).
    pub succeeded: i64,
    /// Failed: the dead-letter queue.
    pub failed: i64,
    /// Cancelled (within retention).
    pub cancelled: i64,
}

impl From<StateCounts> for StateCountsDto {
    fn from(c: StateCounts) -> Self {
        StateCountsDto {
            queued: c.queued,
            running: c.running,
            succeeded: c.succeeded,
            failed: c.failed,
            cancelled: c.cancelled,
        }
    }
}

/// A queue's health and settings. Queues exist implicitly: an unused one
/// reads as zeros with the default settings.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Queue)]
pub struct QueueDto {
    /// Queue name.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// A paused queue accepts enqueues and hands out no claims.
    pub paused: bool,
    /// Jobs per state.
    pub counts: StateCountsDto,
    /// Queued with `run_at` ≤ now.
    pub ready: i64,
    /// Queued with `run_at` > now.
    pub scheduled: i64,
    /// Age of the oldest ready job, 0 when none is ready.
    pub oldest_ready_age_ms: i64,
    /// Running jobs past their `lease_expires_at`.
    pub expired_leases: i64,
    /// Attempt budget that new jobs copy (default 5).
    pub max_attempts: i32,
    /// Backoff that new jobs copy.
    pub backoff: BackoffDto,
    /// Lease length of claims that do not set one (default 30 000).
    pub default_lease_ttl_ms: i64,
}

impl From<QueueStats> for QueueDto {
    fn from(q: QueueStats) -> Self {
        QueueDto {
            name: q.name,
            paused: q.paused,
            counts: q.counts.into(),
            ready: q.ready,
            scheduled: q.scheduled,
            oldest_ready_age_ms: q.oldest_ready_age_ms,
            expired_leases: q.expired_leases,
            max_attempts: q.config.max_attempts,
            backoff: q.config.backoff.into(),
            default_lease_ttl_ms: q.config.default_lease_ttl_ms,
        }
    }
}

/// `POST /v1/jobs` and each entry of a batch.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The queue to wait in.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The handler name.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// Arguments for the handler, any JSON (default `null`).
    #[serde(default)]
    pub payload: Value,
    /// Higher runs first (default 0).
    #[schema(minimum = -100, maximum = 100, default = 0)]
    pub priority: Option<i16>,
    /// Not claimable before this instant; not with `delay_ms`. Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    pub run_at: Option<DateTime<Utc>>,
    /// Not claimable before now + this; not with `run_at`.
    #[schema(minimum = 0, maximum = 31622400000_i64)]
    pub delay_ms: Option<i64>,
    /// Claims allowed before the job fails for good (default: the queue's).
    #[schema(minimum = 1, maximum = 1000)]
    pub max_attempts: Option<i32>,
    /// How long one attempt may run.
    #[schema(minimum = 1, maximum = 31622400000_i64)]
    pub timeout_ms: Option<i64>,
    /// A second enqueue with this key answers the existing job (200).
    #[schema(min_length = 1, max_length = 255)]
    pub idempotency_key: Option<String>,
    /// While a `queued` or `running` job has this key, an enqueue with it
    /// answers that job (200).
    #[schema(min_length = 1, max_length = 255)]
    pub unique_key: Option<String>,
    /// Free labels for filtering.
    #[schema(value_type = Option<Vec<NameSchema>>, max_items = 32)]
    pub tags: Option<Vec<String>>,
    /// A job not claimed by then fails as expired. Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    pub expires_at: Option<DateTime<Utc>>,
    /// Retry backoff (default: the queue's).
    pub backoff: Option<BackoffDto>,
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
            backoff: self.backoff.map(Into::into),
            timeout_ms: self.timeout_ms,
            idempotency_key: self.idempotency_key,
            unique_key: self.unique_key,
            tags: self.tags.unwrap_or_default(),
            expires_at: self.expires_at,
        })
    }
}

/// `POST /v1/jobs/batch`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchEnqueueRequest {
    /// The jobs; one invalid entry rejects the whole batch.
    #[schema(min_items = 1, max_items = 1000)]
    pub jobs: Vec<EnqueueRequest>,
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    /// Who claims: 1–128 characters, no control characters.
    #[schema(min_length = 1, max_length = 128)]
    pub worker_id: String,
    /// Most jobs to take.
    #[schema(minimum = 1, maximum = 1000, default = 1)]
    pub limit: Option<u32>,
    /// Lease length (default: the queue's, 30 000).
    #[schema(minimum = 1000, maximum = 3600000)]
    pub lease_ttl_ms: Option<i64>,
    /// Long-poll: when nothing is ready, wait up to this long for a job
    /// (the maximum is the server's `max_wait_ms`, 30 000 by default).
    #[schema(minimum = 0, maximum = 30000, default = 0)]
    pub wait_ms: Option<i64>,
}

/// `POST /v1/jobs/{id}/heartbeat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatBody {
    /// The token from the claim.
    #[schema(value_type = Uuid)]
    pub lease_token: LeaseToken,
    /// Extend the lease to now + this (default: the TTL given at claim).
    #[schema(minimum = 1000, maximum = 3600000)]
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
    #[schema(minimum = 1000, maximum = 3600000)]
    pub lease_ttl_ms: Option<i64>,
    /// Any JSON, shown as the job's `progress`.
    pub progress: Option<Value>,
}

/// `POST /v1/jobs/heartbeat`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatManyBody {
    /// The heartbeats.
    #[schema(min_items = 1, max_items = 1000)]
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

/// `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteManyBody {
    /// The completions.
    #[schema(min_items = 1, max_items = 1000)]
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
    #[schema(minimum = 0, maximum = 31622400000_i64)]
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
    #[schema(minimum = 0, maximum = 31622400000_i64)]
    pub delay_ms: i64,
}

/// `POST /v1/queues/{queue}/replay` (the body may be omitted).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkReplayBody {
    /// Replay jobs in this state: `failed` (default) or `cancelled`.
    #[schema(value_type = Option<JobStateSchema>)]
    pub state: Option<JobState>,
    /// Only jobs of this kind.
    #[schema(value_type = Option<NameSchema>)]
    pub kind: Option<String>,
    /// At most this many jobs (the first ones by id after `cursor`).
    #[schema(minimum = 1, maximum = 10000, default = 1000)]
    pub limit: Option<u32>,
    /// Only jobs after this one: the `next_cursor` of the previous round
    /// (opaque). Rounds that follow it take each job once, even when jobs
    /// they replayed fail again meanwhile.
    #[schema(value_type = Option<String>)]
    pub cursor: Option<Uuid>,
    /// The replayed jobs' new `expires_at`; absent or `null` clears it.
    /// Between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /v1/jobs/{id}/replay` (the body may be omitted).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// The job's new `expires_at`; absent or `null` clears it (an expired
    /// job would otherwise expire again at once). Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    pub expires_at: Option<DateTime<Utc>>,
}

/// `PATCH /v1/queues/{queue}`: unset fields stay as they are.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfigBody {
    /// Attempt budget that new jobs copy.
    #[schema(minimum = 1, maximum = 1000)]
    pub max_attempts: Option<i32>,
    /// Backoff that new jobs copy.
    pub backoff: Option<BackoffDto>,
    /// Lease length of claims that do not set one.
    #[schema(minimum = 1000, maximum = 3600000)]
    pub default_lease_ttl_ms: Option<i64>,
}

impl From<QueueConfigBody> for QueueConfigPatch {
    fn from(b: QueueConfigBody) -> Self {
        QueueConfigPatch {
            max_attempts: b.max_attempts,
            backoff: b.backoff.map(Into::into),
            default_lease_ttl_ms: b.default_lease_ttl_ms,
        }
    }
}

/// `GET /v1/jobs` query. Empty parameters are unset; unknown ones are 400.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only this queue.
    #[param(value_type = Option<NameSchema>)]
    pub queue: Option<String>,
    /// Only this state (`failed` is the dead-letter queue).
    #[param(value_type = Option<JobStateSchema>)]
    pub state: Option<String>,
    /// Only this kind.
    #[param(value_type = Option<NameSchema>)]
    pub kind: Option<String>,
    /// Only jobs carrying this tag.
    #[param(value_type = Option<NameSchema>)]
    pub tag: Option<String>,
    /// Page size.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page (opaque).
    pub cursor: Option<String>,
}

/// `POST /v1/tenants`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenantBody {
    /// The new tenant's unique name.
    #[schema(value_type = NameSchema)]
    pub name: String,
}

/// `POST /v1/tenants/{tenant_id}/keys` (the body may be omitted).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyBody {
    /// A label for humans: 1–128 characters, no control characters.
    #[schema(min_length = 1, max_length = 128)]
    pub name: Option<String>,
    /// Admin scope; only for the `default` tenant, else 400 (default false).
    #[schema(default = false)]
    pub admin: Option<bool>,
}

/// `{job}`: the answer of the routes that act on one job.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobResponse {
    /// The job after the operation.
    pub job: JobDto,
}

impl From<Job> for JobResponse {
    fn from(j: Job) -> Self {
        JobResponse { job: j.into() }
    }
}

/// `{job, created}`: the answer of `POST /v1/jobs`, and one entry of a batch.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EnqueueResponse {
    /// The new job, or the existing one for the same idempotency key or
    /// active unique key (unchanged, whatever this request said).
    pub job: JobDto,
    /// Whether this request created the job.
    pub created: bool,
}

impl From<tether_core::Enqueued> for EnqueueResponse {
    fn from(e: tether_core::Enqueued) -> Self {
        EnqueueResponse {
            job: e.job.into(),
            created: e.created,
        }
    }
}

/// The answer of `POST /v1/jobs/batch`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchEnqueueResponse {
    /// One per requested job, in request order.
    pub results: Vec<EnqueueResponse>,
}

/// The answer of a claim.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClaimResponse {
    /// The claimed jobs, now `running`; empty when none was ready.
    pub jobs: Vec<ClaimedJobDto>,
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

/// A completion of a batch that went through.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompleteDone {
    /// The job, now `succeeded`.
    pub id: Uuid,
    /// Always `true`.
    #[schema(schema_with = ok_true)]
    pub ok: bool,
}

/// The outcome of one completion of a batch.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
pub enum CompleteResult {
    /// The job succeeded.
    Done(CompleteDone),
    /// The completion failed.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/complete`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CompleteManyResponse {
    /// One per item, in request order.
    pub results: Vec<CompleteResult>,
}

/// The answer of `POST /v1/queues/{queue}/replay`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BulkReplayResponse {
    /// How many jobs were queued again.
    pub replayed: u64,
    /// Pass as `cursor` for the next round; `null` when this round reached
    /// the end of the selection. Opaque.
    #[schema(required, value_type = Option<String>)]
    pub next_cursor: Option<Uuid>,
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobListResponse {
    /// The jobs, newest first.
    pub jobs: Vec<JobDto>,
    /// Pass as `cursor` for the next page; `null` at the end. Opaque.
    #[schema(required, value_type = Option<String>)]
    pub next_cursor: Option<Uuid>,
}

/// One page of `GET /v1/jobs/{id}/events`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventListResponse {
    /// The job's history, oldest first.
    pub events: Vec<EventDto>,
    /// Pass as `cursor` for the next page; `null` at the end. Opaque.
    #[schema(required, value_type = Option<String>)]
    #[serde(serialize_with = "ser_opt_display")]
    pub next_cursor: Option<EventCursor>,
}

fn ser_opt_display<S: Serializer, T: std::fmt::Display>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// `GET /v1/jobs/{id}/events` query. Empty parameters are unset; unknown
/// ones are 400.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Page size.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page (opaque).
    pub cursor: Option<String>,
}

/// `{queue}`: the answer of the routes about one queue.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueResponse {
    /// The queue, after the operation.
    pub queue: QueueDto,
}

impl From<QueueStats> for QueueResponse {
    fn from(q: QueueStats) -> Self {
        QueueResponse { queue: q.into() }
    }
}

/// The answer of `GET /v1/queues`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueListResponse {
    /// The tenant's queues that have jobs or settings.
    pub queues: Vec<QueueDto>,
}

/// The answer of `POST /v1/tenants`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateTenantResponse {
    /// The new tenant.
    pub tenant: TenantDto,
    /// Its first (non-admin) API key, shown this once.
    pub api_key: String,
}

/// The answer of `GET /v1/tenants`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantListResponse {
    /// Every tenant.
    pub tenants: Vec<TenantDto>,
}

/// The answer of `GET /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyListResponse {
    /// The tenant's keys, revoked ones included, oldest first.
    pub keys: Vec<KeyDto>,
}

/// The answer of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreateKeyResponse {
    /// The key's id (for `DELETE /v1/keys/{key_id}`).
    pub key_id: Uuid,
    /// The key, shown this once.
    pub api_key: String,
}

/// A schedule: a cron timetable that enqueues one job per fire instant.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Schedule)]
pub struct ScheduleDto {
    /// Server-made id.
    pub id: Uuid,
    /// Unique in the tenant.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// The expression: 5 fields, or 6 with seconds first (Vixie/OCPS).
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON.
    pub payload: Value,
    /// Disabled schedules do not fire.
    pub enabled: bool,
    /// What it does while the previous run's job is unfinished.
    #[schema(value_type = OverlapSchema)]
    pub overlap: Overlap,
    /// The next fire instant; `null` when disabled.
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    #[serde(serialize_with = "ser_opt_time")]
    #[schema(required)]
    pub last_run_at: Option<DateTime<Utc>>,
    /// When it was created.
    #[serde(serialize_with = "ser_time")]
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    #[serde(serialize_with = "ser_time")]
    pub updated_at: DateTime<Utc>,
}

impl From<Schedule> for ScheduleDto {
    fn from(s: Schedule) -> Self {
        ScheduleDto {
            id: s.id,
            name: s.spec.name,
            cron: s.spec.cron,
            timezone: s.spec.timezone,
            queue: s.spec.queue,
            kind: s.spec.kind,
            payload: s.spec.payload,
            enabled: s.spec.enabled,
            overlap: s.spec.overlap,
            next_run_at: s.next_run_at,
            last_run_at: s.last_run_at,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// One run of a schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = ScheduleRun)]
pub struct ScheduleRunDto {
    /// The fire instant (for a triggered run, when it was triggered).
    #[serde(serialize_with = "ser_time")]
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued; `null` when it was skipped.
    #[schema(required)]
    pub job_id: Option<Uuid>,
    /// What it did.
    #[schema(value_type = RunOutcomeSchema)]
    pub outcome: RunOutcome,
}

impl From<ScheduleRun> for ScheduleRunDto {
    fn from(r: ScheduleRun) -> Self {
        ScheduleRunDto {
            fire_at: r.fire_at,
            job_id: r.job_id,
            outcome: r.outcome,
        }
    }
}

/// `POST /v1/schedules`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleBody {
    /// Unique in the tenant.
    #[schema(value_type = NameSchema)]
    pub name: String,
    /// 5 fields, or 6 with seconds first; Vixie/OCPS semantics
    /// (day-of-month and day-of-week OR-ed when both are restricted, 0 or 7
    /// = Sunday, names, `L`, `W`, `#`).
    #[schema(min_length = 1, max_length = 256)]
    pub cron: String,
    /// The IANA time zone the expression is read in (default `UTC`).
    #[schema(default = "UTC", min_length = 1, max_length = 256)]
    pub timezone: Option<String>,
    /// The queue of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub queue: String,
    /// The kind of the jobs it enqueues.
    #[schema(value_type = NameSchema)]
    pub kind: String,
    /// The payload of the jobs it enqueues, any JSON (default `null`).
    #[serde(default)]
    pub payload: Value,
    /// Whether it fires (default true).
    #[schema(default = true)]
    pub enabled: Option<bool>,
    /// What it does while the previous run's job is unfinished (default
    /// `allow`).
    #[schema(value_type = Option<OverlapSchema>)]
    pub overlap: Option<Overlap>,
}

impl From<CreateScheduleBody> for ScheduleSpec {
    fn from(b: CreateScheduleBody) -> Self {
        ScheduleSpec {
            name: b.name,
            cron: b.cron,
            timezone: b.timezone.unwrap_or_else(|| "UTC".to_owned()),
            queue: b.queue,
            kind: b.kind,
            payload: b.payload,
            enabled: b.enabled.unwrap_or(true),
            overlap: b.overlap.unwrap_or_default(),
        }
    }
}

/// A field that is set whenever it is present, even to JSON `null` (with
/// `#[serde(default)]`, absent stays `None`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `PATCH /v1/schedules/{id}`: absent fields (and fields set to `null`,
/// except `payload`) stay as they are.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchScheduleBody {
    /// New name, unique in the tenant.
    #[schema(value_type = Option<NameSchema>)]
    pub name: Option<String>,
    /// New expression.
    #[schema(min_length = 1, max_length = 256)]
    pub cron: Option<String>,
    /// New IANA time zone.
    #[schema(min_length = 1, max_length = 256)]
    pub timezone: Option<String>,
    /// New queue.
    #[schema(value_type = Option<NameSchema>)]
    pub queue: Option<String>,
    /// New kind.
    #[schema(value_type = Option<NameSchema>)]
    pub kind: Option<String>,
    /// New payload, any JSON: an explicit `null` sets it to `null`; absent
    /// leaves it as it is.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Value)]
    pub payload: Option<Value>,
    /// Enable or disable.
    pub enabled: Option<bool>,
    /// New overlap policy.
    #[schema(value_type = Option<OverlapSchema>)]
    pub overlap: Option<Overlap>,
}

impl From<PatchScheduleBody> for SchedulePatch {
    fn from(b: PatchScheduleBody) -> Self {
        SchedulePatch {
            name: b.name,
            cron: b.cron,
            timezone: b.timezone,
            queue: b.queue,
            kind: b.kind,
            payload: b.payload,
            enabled: b.enabled,
            overlap: b.overlap,
        }
    }
}

/// `GET /v1/cron/preview` query. Empty parameters (but `cron`) are unset;
/// unknown ones are 400.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CronPreviewQuery {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in.
    #[param(default = "UTC")]
    pub timezone: Option<String>,
    /// Fire instants strictly after this one (RFC 3339, between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z; default now).
    #[param(value_type = Option<DateTime<Utc>>)]
    pub from: Option<String>,
    /// How many instants.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 100, default = 5)]
    pub count: Option<String>,
}

/// `{schedule}`: the answer of the routes that act on one schedule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleResponse {
    /// The schedule after the operation.
    pub schedule: ScheduleDto,
}

impl From<Schedule> for ScheduleResponse {
    fn from(s: Schedule) -> Self {
        ScheduleResponse { schedule: s.into() }
    }
}

/// The answer of `GET /v1/schedules`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleListResponse {
    /// The tenant's schedules, by name.
    pub schedules: Vec<ScheduleDto>,
}

/// The answer of `GET /v1/schedules/{id}/runs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ScheduleRunListResponse {
    /// The newest runs (at most 100), newest first.
    pub runs: Vec<ScheduleRunDto>,
}

/// The answer of `GET /v1/cron/preview`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CronPreviewResponse {
    /// The next fire instants, earliest first.
    #[serde(serialize_with = "ser_times")]
    pub times: Vec<DateTime<Utc>>,
}

fn ser_times<S: Serializer>(ts: &[DateTime<Utc>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ts.iter().map(time))
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

impl From<CompleteItem> for tether_core::Completion {
    fn from(i: CompleteItem) -> Self {
        tether_core::Completion {
            id: i.id,
            lease_token: i.lease_token,
            result: i.result,
        }
    }
}
