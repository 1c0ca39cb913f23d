//! `jobs`: the job object, enqueueing, listing, history and replay.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tether_core::{Dependency, DependencyFailure, EventKind, JobState, NewJob, RunAt};
use uuid::Uuid;

use crate::{time, Backoff, ItemFailure};
#[cfg(feature = "openapi")]
use crate::{DependencyFailureSchema, EventKindSchema, JobStateSchema, NameSchema};

/// The job object of the API (no tenant, never the lease token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    /// Server-made, time-ordered (UUID v7).
    pub id: Uuid,
    /// The queue the job waits in.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub queue: String,
    /// The handler name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// Arguments for the handler, any JSON (`null` when none was given).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub payload: Value,
    /// What the handler returned on success.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub result: Option<Value>,
    /// Lifecycle state.
    #[cfg_attr(feature = "openapi", schema(value_type = JobStateSchema))]
    pub state: JobState,
    /// Higher runs first.
    pub priority: i16,
    /// Claims so far (a snooze gives one back).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub attempt: i32,
    /// Claims allowed before the job fails for good.
    pub max_attempts: i32,
    /// Not claimable before this instant.
    #[serde(serialize_with = "time::ser")]
    pub run_at: DateTime<Utc>,
    /// When the job was enqueued.
    #[serde(serialize_with = "time::ser")]
    pub created_at: DateTime<Utc>,
    /// When the latest attempt began.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal state.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub finished_at: Option<DateTime<Utc>>,
    /// Last change of any kind.
    #[serde(serialize_with = "time::ser")]
    pub updated_at: DateTime<Utc>,
    /// The last 2 000 characters of the last error message.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub last_error: Option<String>,
    /// At most one active (`waiting`, `queued` or `running`) job of the
    /// tenant has it.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub unique_key: Option<String>,
    /// At most one job of the tenant (any state, within retention) has it.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub idempotency_key: Option<String>,
    /// Free labels for filtering.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required, value_type = Vec<NameSchema>))]
    pub tags: Vec<String>,
    /// A queued job not claimed by then fails as expired.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub expires_at: Option<DateTime<Utc>>,
    /// Groups the job for its queue's `key_max_running` and `fair` claims.
    #[cfg_attr(feature = "openapi", schema(required, value_type = Option<NameSchema>))]
    pub concurrency_key: Option<String>,
    /// How long one attempt may run (enforced by the worker runtime).
    #[cfg_attr(feature = "openapi", schema(required, minimum = 1))]
    pub timeout_ms: Option<i64>,
    /// Cancellation was asked for while the job was running.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub cancel_requested: bool,
    /// The worker that claimed the latest attempt.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub worker_id: Option<String>,
    /// When the current lease lapses (running jobs).
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The last heartbeat of the current attempt.
    #[serde(serialize_with = "time::ser_opt")]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Whatever JSON the worker last sent with a heartbeat.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub progress: Option<Value>,
    /// The jobs it waits (or waited) for, in the order given at enqueue.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub depends_on: Vec<Uuid>,
    /// What it does when a dependency fails.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required, value_type = DependencyFailureSchema))]
    pub dependency_failure: DependencyFailure,
    /// The workflow it belongs to.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub workflow_id: Option<Uuid>,
    /// The string headers it was enqueued with (`{}` when none): W3C trace
    /// context, say.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub headers: BTreeMap<String, String>,
}

impl From<tether_core::Job> for Job {
    fn from(j: tether_core::Job) -> Self {
        Job {
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
            concurrency_key: j.concurrency_key,
            timeout_ms: j.timeout_ms,
            cancel_requested: j.cancel_requested,
            worker_id: j.worker_id,
            lease_expires_at: j.lease_expires_at,
            heartbeat_at: j.heartbeat_at,
            progress: j.progress,
            depends_on: j.depends_on,
            dependency_failure: j.dependency_failure,
            workflow_id: j.workflow_id,
            headers: j.headers,
        }
    }
}

impl Job {
    /// The engine's form of this job, for code written against
    /// [`tether_core`] (the worker runtime hands it to handlers).
    ///
    /// The API does not show a job's tenant or backoff: `tenant` fills the
    /// former, and the latter is [`tether_core::Backoff::default`] (the
    /// server, not the worker, computes retry delays).
    pub fn into_core(self, tenant: &str) -> tether_core::Job {
        tether_core::Job {
            id: self.id,
            tenant: tenant.to_owned(),
            queue: self.queue,
            kind: self.kind,
            payload: self.payload,
            result: self.result,
            state: self.state,
            priority: self.priority,
            attempt: self.attempt,
            max_attempts: self.max_attempts,
            backoff: tether_core::Backoff::default(),
            run_at: self.run_at,
            created_at: self.created_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            updated_at: self.updated_at,
            last_error: self.last_error,
            unique_key: self.unique_key,
            idempotency_key: self.idempotency_key,
            tags: self.tags,
            expires_at: self.expires_at,
            concurrency_key: self.concurrency_key,
            timeout_ms: self.timeout_ms,
            cancel_requested: self.cancel_requested,
            worker_id: self.worker_id,
            lease_expires_at: self.lease_expires_at,
            heartbeat_at: self.heartbeat_at,
            progress: self.progress,
            depends_on: self.depends_on,
            dependency_failure: self.dependency_failure,
            workflow_id: self.workflow_id,
            headers: self.headers,
        }
    }
}

/// One event of a job's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobEvent {
    /// When it happened.
    #[serde(serialize_with = "time::ser")]
    pub at: DateTime<Utc>,
    /// What happened.
    // A string, not an `EventKind`, so that kinds a newer server adds still
    // decode; `kind()` parses it.
    #[cfg_attr(feature = "openapi", schema(value_type = EventKindSchema))]
    pub event: String,
    /// The job's attempt after the transition.
    pub attempt: i32,
    /// The worker involved, if any.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub worker_id: Option<String>,
    /// Context, e.g. the error message.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub detail: Option<String>,
}

impl JobEvent {
    /// The event as a known kind (`None` for a kind this version does not
    /// know).
    pub fn kind(&self) -> Option<EventKind> {
        self.event.parse().ok()
    }
}

impl From<tether_core::JobEvent> for JobEvent {
    fn from(e: tether_core::JobEvent) -> Self {
        JobEvent {
            at: e.at,
            event: e.event.as_str().to_owned(),
            attempt: e.attempt,
            worker_id: e.worker_id,
            detail: e.detail,
        }
    }
}

/// `POST /v1/jobs` and each entry of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// The queue to wait in.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub queue: String,
    /// The handler name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub kind: String,
    /// Arguments for the handler, any JSON (default `null`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub payload: Value,
    /// Higher runs first (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = 0))]
    pub priority: Option<i16>,
    /// Not claimable before this instant; not with `delay_ms`. Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    #[serde(
        default,
        deserialize_with = "time::de_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub run_at: Option<DateTime<Utc>>,
    /// Not claimable before now + this; not with `run_at`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<i64>,
    /// Claims allowed before the job fails for good (default: the queue's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
    /// How long one attempt may run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
    /// A second enqueue with this key answers the existing job (200).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// While a `waiting`, `queued` or `running` job has this key, an enqueue
    /// with it answers that job (200).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// Free labels for filtering.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<NameSchema>>))]
    pub tags: Option<Vec<String>>,
    /// A job not claimed by then fails as expired. Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    #[serde(
        default,
        deserialize_with = "time::de_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<DateTime<Utc>>,
    /// Retry backoff (default: the queue's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Groups the job for its queue's flow control: at most
    /// `key_max_running` running jobs per key, and `fair` claims take keys
    /// in turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NameSchema>))]
    pub concurrency_key: Option<String>,
    /// Existing jobs of the tenant (at most 100 in all with
    /// `depends_on_entries`) this one waits for: it is created `waiting`
    /// and queued once they succeeded. An unknown id is a 400.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<Uuid>>,
    /// In a batch only: the earlier entries of the same batch (by index)
    /// this one waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<u32>>))]
    pub depends_on_entries: Option<Vec<usize>>,
    /// What it does when a dependency ends `failed` or `cancelled`
    /// (default `cancel`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<DependencyFailureSchema>))]
    pub dependency_failure: Option<DependencyFailure>,
    /// Joins this running workflow of the tenant (its `depends_on` may name
    /// any job, of the workflow or not). A finished workflow is a 409.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<Uuid>,
    /// String headers carried unchanged with the job and returned by claim
    /// and GET (W3C trace context, say): at most 32, names of 1 to 64
    /// characters of `A-Z a-z 0-9 _ . -`, values of at most 1 024 bytes
    /// without control characters, 4 096 bytes of names and values in all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

impl EnqueueRequest {
    /// The engine's form; `prefix` names the entry in errors (`jobs[3]`).
    pub fn into_new_job(self, prefix: &str) -> Result<NewJob, tether_core::Error> {
        let run_at = match (self.run_at, self.delay_ms) {
            (Some(_), Some(_)) => {
                let field = if prefix.is_empty() {
                    "run_at".to_owned()
                } else {
                    format!("{prefix}.run_at")
                };
                return Err(tether_core::Error::invalid(
                    field,
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
            concurrency_key: self.concurrency_key,
            depends_on: (self.depends_on.into_iter().flatten().map(Dependency::Job))
                .chain(
                    self.depends_on_entries
                        .into_iter()
                        .flatten()
                        .map(Dependency::Entry),
                )
                .collect(),
            dependency_failure: self.dependency_failure.unwrap_or_default(),
            workflow_id: self.workflow_id,
            headers: self.headers.unwrap_or_default(),
        })
    }
}

impl From<NewJob> for EnqueueRequest {
    /// The request for `job`, with only the fields it sets (times as they
    /// are: a client cuts them to what the server keeps).
    fn from(job: NewJob) -> Self {
        let (run_at, delay_ms) = match job.run_at {
            RunAt::Now => (None, None),
            RunAt::At(at) => (Some(at), None),
            RunAt::Delay(ms) => (None, Some(ms)),
        };
        EnqueueRequest {
            queue: job.queue,
            kind: job.kind,
            payload: job.payload,
            priority: (job.priority != 0).then_some(job.priority),
            run_at,
            delay_ms,
            max_attempts: job.max_attempts,
            timeout_ms: job.timeout_ms,
            idempotency_key: job.idempotency_key,
            unique_key: job.unique_key,
            tags: (!job.tags.is_empty()).then_some(job.tags),
            expires_at: job.expires_at,
            backoff: job.backoff.map(Into::into),
            concurrency_key: job.concurrency_key,
            depends_on: some_if_any(job.depends_on.iter().filter_map(|d| match d {
                Dependency::Job(id) => Some(*id),
                Dependency::Entry(_) => None,
            })),
            depends_on_entries: some_if_any(job.depends_on.iter().filter_map(|d| match d {
                Dependency::Entry(i) => Some(*i),
                Dependency::Job(_) => None,
            })),
            dependency_failure: (job.dependency_failure != DependencyFailure::default())
                .then_some(job.dependency_failure),
            workflow_id: job.workflow_id,
            headers: (!job.headers.is_empty()).then_some(job.headers),
        }
    }
}

/// The items, or `None` when there are none (a field left out).
fn some_if_any<T>(items: impl Iterator<Item = T>) -> Option<Vec<T>> {
    let items: Vec<T> = items.collect();
    (!items.is_empty()).then_some(items)
}

/// `POST /v1/jobs/batch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BatchEnqueueRequest {
    /// The jobs; one invalid entry rejects the whole batch.
    pub jobs: Vec<EnqueueRequest>,
    /// Makes the batch's jobs one new workflow (their entries then name no
    /// `workflow_id` of their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::NewWorkflowBody>,
}

/// `POST /v1/jobs/{id}/replay` (the body may be omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplayBody {
    /// The job's new `expires_at`; absent or `null` clears it (an expired
    /// job would otherwise expire again at once). Between
    /// 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    #[serde(
        default,
        deserialize_with = "time::de_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /v1/jobs/cancel`: the jobs to cancel, each on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JobIdsBody {
    /// The jobs' ids (1–500); each is cancelled as `POST /v1/jobs/{id}/cancel` would.
    pub ids: Vec<Uuid>,
}

/// `POST /v1/jobs/replay`: the jobs to replay, each on its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ReplayIdsBody {
    /// The jobs' ids (1–500); each is replayed as `POST /v1/jobs/{id}/replay` would.
    pub ids: Vec<Uuid>,
    /// Every replayed job's new `expires_at`; absent or `null` clears it.
    #[serde(
        default,
        deserialize_with = "time::de_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<DateTime<Utc>>,
}

/// One job of a bulk operation that went through.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDone {
    /// The job's id.
    pub id: Uuid,
    /// Always `true`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::attempts::ok_true))]
    pub ok: bool,
    /// The job after the operation.
    pub job: Job,
}

/// The outcome for one job of a bulk operation.
// Written only: an untagged enum cannot tell a failed item from a done one
// leniently, so the client reads batch answers item by item itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum JobResult {
    /// The operation went through.
    Done(Box<JobDone>),
    /// It did not, with the error the single route would have answered.
    Failed(ItemFailure),
}

/// The answer of `POST /v1/jobs/cancel` and `POST /v1/jobs/replay`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobResultsResponse {
    /// One per id, in request order.
    pub results: Vec<JobResult>,
}

/// `GET /v1/jobs` query. Empty parameters are unset; unknown ones are 400.
// Strings, as the query string has them: the server reads each by its own
// rules (an empty one is unset).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ListQuery {
    /// Only this queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<NameSchema>))]
    pub queue: Option<String>,
    /// Only this state (`failed` is the dead-letter queue).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<JobStateSchema>))]
    pub state: Option<String>,
    /// Only this kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<NameSchema>))]
    pub kind: Option<String>,
    /// Only jobs carrying this tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<NameSchema>))]
    pub tag: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<ListLimit>))]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page (opaque).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only jobs whose id starts with these hex digits (1–32; dashes are
    /// ignored), e.g. the first characters of an id a log line showed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_prefix: Option<String>,
    /// Only jobs created at or after this instant (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, format = DateTime))]
    pub created_after: Option<String>,
    /// Only jobs created before this instant (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, format = DateTime))]
    pub created_before: Option<String>,
    /// Only the jobs that wait (or waited) directly for this job.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, format = Uuid))]
    pub depends_on: Option<String>,
    /// Only the jobs of this workflow.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(value_type = Option<String>, format = Uuid))]
    pub workflow_id: Option<String>,
}

/// `GET /v1/jobs/{id}/events` query. Empty parameters are unset; unknown
/// ones are 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct EventsQuery {
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<EventsLimit>))]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page (opaque).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Query of `GET /v1/jobs/{id}` and `GET /v1/workflows/{id}`. A value
/// that is not an integer from 0 to the server's longest wait is 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct WaitQuery {
    /// Answer once the job (the workflow) has finished, or after this many
    /// milliseconds, whichever is first, with the object as it is then. 0
    /// or absent: at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<WaitMs>))]
    pub wait_ms: Option<String>,
}

/// `{job}`: the answer of the routes that act on one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobResponse {
    /// The job after the operation.
    pub job: Job,
}

impl From<tether_core::Job> for JobResponse {
    fn from(j: tether_core::Job) -> Self {
        JobResponse { job: j.into() }
    }
}

/// `{job, created}`: the answer of `POST /v1/jobs`, and one entry of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnqueueResponse {
    /// The new job, or the existing one for the same idempotency key or
    /// active unique key (unchanged, whatever this request said).
    pub job: Job,
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchEnqueueResponse {
    /// One per requested job, in request order; when a `workflow` key led
    /// to an existing workflow, that workflow's jobs, oldest first.
    pub results: Vec<EnqueueResponse>,
    /// The workflow the batch made (or its key led to), when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<Uuid>,
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobListResponse {
    /// The jobs, newest first.
    pub jobs: Vec<Job>,
    /// Pass as `cursor` for the next page; `null` at the end. Opaque.
    #[cfg_attr(feature = "openapi", schema(required, value_type = Option<String>))]
    pub next_cursor: Option<String>,
}

/// One page of `GET /v1/jobs/{id}/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventListResponse {
    /// The job's history, oldest first.
    pub events: Vec<JobEvent>,
    /// Pass as `cursor` for the next page; `null` at the end. Opaque.
    #[cfg_attr(feature = "openapi", schema(required, value_type = Option<String>))]
    pub next_cursor: Option<String>,
}

#[cfg(feature = "openapi")]
pub use self::openapi::{EventsLimit, ListLimit, WaitMs};

/// This topic's schemas that the derive cannot make, and its field bounds.
#[cfg(feature = "openapi")]
mod openapi {
    use tether_core::validate::{
        DEFAULT_EVENT_PAGE, MAX_ATTEMPTS_RANGE, MAX_BATCH, MAX_DURATION_MS, MAX_EVENT_PAGE,
        MAX_KEY_LEN, MAX_PAGE, MAX_TAGS, PRIORITY_RANGE,
    };

    use super::*;
    use crate::bounds::{at_most_items, count, field, items, length, range, FieldBound};

    schema_of!(
        /// Schema of the `limit` of `GET /v1/jobs`.
        ListLimit as "ListLimit" =>
        count(MAX_PAGE, 50)
    );

    schema_of!(
        /// Schema of the `limit` of `GET /v1/jobs/{id}/events`.
        EventsLimit as "EventsLimit" =>
        count(MAX_EVENT_PAGE, DEFAULT_EVENT_PAGE)
    );

    schema_of!(
        /// Schema of the `wait_ms` of `GET /v1/jobs/{id}` and
        /// `GET /v1/workflows/{id}`.
        WaitMs as "WaitMs" =>
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::Integer)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Int64,
            )))
            .default(Some(0.into()))
            .minimum(Some(0))
            .maximum(Some(crate::DEFAULT_MAX_WAIT_MS))
            .build()
    );

    /// The bounds of this topic's fields (see `bounds.rs`).
    pub(crate) fn field_bounds() -> Vec<FieldBound> {
        vec![
            (field!(Job.priority), range(PRIORITY_RANGE)),
            (field!(Job.max_attempts), range(MAX_ATTEMPTS_RANGE)),
            (field!(EnqueueRequest.priority), range(PRIORITY_RANGE)),
            (field!(EnqueueRequest.delay_ms), range(0..=MAX_DURATION_MS)),
            (
                field!(EnqueueRequest.max_attempts),
                range(MAX_ATTEMPTS_RANGE),
            ),
            (
                field!(EnqueueRequest.timeout_ms),
                range(1..=MAX_DURATION_MS),
            ),
            (
                field!(EnqueueRequest.idempotency_key),
                length(1..=MAX_KEY_LEN),
            ),
            (field!(EnqueueRequest.unique_key), length(1..=MAX_KEY_LEN)),
            (field!(EnqueueRequest.tags), at_most_items(MAX_TAGS)),
            (field!(BatchEnqueueRequest.jobs), items(1..=MAX_BATCH)),
            (field!(JobIdsBody.ids), items(1..=MAX_PAGE as usize)),
            (field!(ReplayIdsBody.ids), items(1..=MAX_PAGE as usize)),
        ]
    }
}

#[cfg(feature = "openapi")]
pub(crate) use self::openapi::field_bounds;
