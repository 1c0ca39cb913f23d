//! The bodies of the API, field for field as in `docs/API.md`.
//!
//! Answers are decoded leniently (fields a newer server adds are ignored);
//! requests carry only the fields that are set.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use tether_core::{
    Backoff, EventKind, JobState, LeaseToken, NewJob, Overlap, RateLimit, RunAt, RunOutcome,
    SchedulePatch, ScheduleSpec,
};
use uuid::Uuid;

/// A job as the API shows it (`GET /v1/jobs/{id}` and every answer that
/// carries a job). It has no tenant (the API key decides it) and never the
/// lease token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Server-made, time-ordered id.
    pub id: Uuid,
    /// The queue it waits in.
    pub queue: String,
    /// The handler name.
    pub kind: String,
    /// Arguments for the handler (`null` when none were given).
    #[serde(default)]
    pub payload: Value,
    /// What the handler returned on success.
    #[serde(default)]
    pub result: Option<Value>,
    /// Lifecycle state.
    pub state: JobState,
    /// Higher runs first, in −100..=100.
    pub priority: i16,
    /// Claims so far (a snooze gives one back).
    pub attempt: i32,
    /// Claims allowed before the job fails for good.
    pub max_attempts: i32,
    /// Not claimable before this instant.
    pub run_at: DateTime<Utc>,
    /// When the job was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the latest attempt began.
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal state.
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// Last change of any kind.
    pub updated_at: DateTime<Utc>,
    /// The last 2 000 characters of the last error.
    #[serde(default)]
    pub last_error: Option<String>,
    /// At most one active job per tenant has this key.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// At most one job per tenant (within retention) has this key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Free labels.
    #[serde(default)]
    pub tags: Vec<String>,
    /// A queued job not claimed by then fails with reason `expired`.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// Groups the job for its queue's `key_max_running` and `fair` claims.
    #[serde(default)]
    pub concurrency_key: Option<String>,
    /// How long one attempt may run.
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// Cancellation was asked for while the job was running.
    #[serde(default)]
    pub cancel_requested: bool,
    /// The worker that claimed the latest attempt.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// When the current lease lapses (running jobs only).
    #[serde(default)]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The last heartbeat of the current attempt.
    #[serde(default)]
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Whatever the worker last sent with a heartbeat.
    #[serde(default)]
    pub progress: Option<Value>,
}

impl Job {
    /// The engine's form of this job, for code written against
    /// [`tether_core`] (the worker runtime hands it to handlers).
    ///
    /// The API does not show a job's tenant or backoff: `tenant` fills the
    /// former, and the latter is [`Backoff::default`] (the server, not the
    /// worker, computes retry delays).
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
            backoff: Backoff::default(),
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
        }
    }
}

/// A job handed to a claimer: the job object plus its lease token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// The job, `running`.
    #[serde(flatten)]
    pub job: Job,
    /// Proves ownership: heartbeat, complete, fail and snooze need it.
    pub lease_token: LeaseToken,
}

impl ClaimedJob {
    /// A completion of this job with no result, for `complete_batch` (as
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

/// The answer to one enqueued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enqueued {
    /// The new job, or the existing one its idempotency or unique key led to
    /// (unchanged, even if this request's payload differs).
    pub job: Job,
    /// `false` when an existing job was returned instead of a new one.
    pub created: bool,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatAck {
    /// The extended lease's end.
    pub lease_expires_at: DateTime<Utc>,
    /// Someone asked for the job to be cancelled: the handler should stop.
    pub cancel_requested: bool,
}

impl From<HeartbeatAck> for tether_core::HeartbeatAck {
    fn from(a: HeartbeatAck) -> Self {
        tether_core::HeartbeatAck {
            lease_expires_at: a.lease_expires_at,
            cancel_requested: a.cancel_requested,
        }
    }
}

/// The answer of a claim that carried reports
/// ([`crate::HttpClient::report_and_claim`]).
#[derive(Debug)]
pub struct Claimed {
    /// The claimed jobs, `running`, in claim order.
    pub jobs: Vec<ClaimedJob>,
    /// One answer per carried report (completions first, each in order).
    pub reports: Vec<ItemResult<()>>,
}

/// One item of a batch answer (`POST /v1/jobs/heartbeat`,
/// `POST /v1/jobs/complete`, a claim's `reports`), in request order.
#[derive(Debug)]
pub struct ItemResult<T> {
    /// The job the item is about.
    pub id: Uuid,
    /// Its outcome; a failed item is an [`crate::Error::Api`] with the status
    /// the API pairs with its code (e.g. 409 for `lease_lost`).
    pub result: crate::Result<T>,
}

/// One event of a job's history (`GET /v1/jobs/{id}/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvent {
    /// When it happened (server clock).
    pub at: DateTime<Utc>,
    /// What happened (`enqueued`, `claimed`, `retry_scheduled`, ...), kept
    /// as a string so that event kinds a newer server adds still decode;
    /// [`JobEvent::kind`] parses it.
    pub event: String,
    /// The job's attempt counter after the transition.
    pub attempt: i32,
    /// The worker involved, if any.
    #[serde(default)]
    pub worker_id: Option<String>,
    /// More context (an error, where the job went).
    #[serde(default)]
    pub detail: Option<String>,
}

impl JobEvent {
    /// The event as a known kind (`None` for a kind this client does not know).
    pub fn kind(&self) -> Option<EventKind> {
        self.event.parse().ok()
    }
}

/// One page of `GET /v1/jobs/{id}/events` (oldest first). Unset fields are
/// not sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventQuery {
    /// Page size, 1–1000 (server default 100).
    pub limit: Option<u32>,
    /// Continue after a previous page (its [`EventPage::next_cursor`]).
    pub cursor: Option<String>,
}

impl EventQuery {
    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(limit) = self.limit {
            q.push(("limit", limit.to_string()));
        }
        if let Some(cursor) = &self.cursor {
            q.push(("cursor", cursor.clone()));
        }
        q
    }
}

/// One page of a job's history (`GET /v1/jobs/{id}/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventPage {
    /// The events, oldest first.
    pub events: Vec<JobEvent>,
    /// Pass as [`EventQuery::cursor`] for the next page; `None` at the end.
    /// Opaque: do not build one yourself.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// Filters and page of `GET /v1/jobs` (newest first). Unset fields are not
/// sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobQuery {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state (`failed` = the dead-letter queue).
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only jobs carrying this tag.
    pub tag: Option<String>,
    /// Page size, 1–500 (server default 50).
    pub limit: Option<u32>,
    /// Continue after a previous page (its [`JobPage::next_cursor`]).
    pub cursor: Option<String>,
    /// Only jobs whose id starts with these hex digits (dashes ignored).
    pub id_prefix: Option<String>,
    /// Only jobs created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this instant.
    pub created_before: Option<DateTime<Utc>>,
}

impl JobQuery {
    /// Every job, first page, default size.
    pub fn new() -> Self {
        JobQuery::default()
    }

    /// Only this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Only this state.
    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs carrying this tag.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// Page size, 1–500.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Continue after a previous page.
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// Only jobs whose id starts with `prefix` (hex digits, dashes ignored).
    pub fn id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.id_prefix = Some(prefix.into());
        self
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let mut put = |k, v: Option<String>| {
            if let Some(v) = v {
                q.push((k, v));
            }
        };
        put("queue", self.queue.clone());
        put("state", self.state.map(|s| s.as_str().to_owned()));
        put("kind", self.kind.clone());
        put("tag", self.tag.clone());
        put("limit", self.limit.map(|l| l.to_string()));
        put("cursor", self.cursor.clone());
        put("id_prefix", self.id_prefix.clone());
        let time = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        put("created_after", self.created_after.as_ref().map(time));
        put("created_before", self.created_before.as_ref().map(time));
        q
    }
}

impl From<tether_core::JobFilter> for JobQuery {
    fn from(f: tether_core::JobFilter) -> Self {
        JobQuery {
            queue: f.queue,
            state: f.state,
            kind: f.kind,
            tag: f.tag,
            limit: f.limit,
            cursor: f.cursor.map(|c| c.to_string()),
            id_prefix: f.id_prefix.map(|p| p.as_str().to_owned()),
            created_after: f.created_after,
            created_before: f.created_before,
        }
    }
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<Job>,
    /// Pass as [`JobQuery::cursor`] for the next page; `None` at the end.
    /// Opaque: do not build one yourself.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// Options of a claim (`POST /v1/queues/{queue}/claim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimOptions {
    /// Who claims (shown on the job and in its history).
    pub worker_id: String,
    /// 1–1000 jobs (server default 1).
    pub limit: Option<u32>,
    /// Lease length, 1 000–3 600 000 ms (default: the queue's, 30 000).
    pub lease_ttl_ms: Option<i64>,
    /// Long-poll: when nothing is ready, hold the request up to this long
    /// (0–30 000 ms) until a job becomes ready.
    pub wait_ms: Option<i64>,
}

impl ClaimOptions {
    /// A claim of one job under `worker_id`, no wait.
    pub fn new(worker_id: impl Into<String>) -> Self {
        ClaimOptions {
            worker_id: worker_id.into(),
            limit: None,
            lease_ttl_ms: None,
            wait_ms: None,
        }
    }

    /// Claims up to `limit` jobs.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Sets the lease length.
    pub fn lease_ttl_ms(mut self, ms: i64) -> Self {
        self.lease_ttl_ms = Some(ms);
        self
    }

    /// Long-polls up to `ms` when nothing is ready.
    pub fn wait_ms(mut self, ms: i64) -> Self {
        self.wait_ms = Some(ms);
        self
    }
}

/// Selects the jobs of a bulk replay (`POST /v1/queues/{queue}/replay`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkReplay {
    /// `failed` (the server's default) or `cancelled`.
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many jobs (the first ones by id after `cursor`).
    pub limit: Option<u32>,
    /// Continue after a previous round (its [`BulkReplayed::next_cursor`]).
    pub cursor: Option<String>,
    /// The replayed jobs' new `expires_at`; `None` clears it.
    pub expires_at: Option<DateTime<Utc>>,
}

/// The answer of one bulk replay round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkReplayed {
    /// How many jobs were queued again.
    pub replayed: u64,
    /// Pass as [`BulkReplay::cursor`] for the next round; `None` when this
    /// round reached the end. Opaque.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// A queue's health and settings (`GET /v1/queues/{queue}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queue {
    /// Queue name.
    pub name: String,
    /// Paused queues accept enqueues and hand out no claims.
    pub paused: bool,
    /// Jobs per state.
    pub counts: StateCounts,
    /// Queued with `run_at <= now`.
    pub ready: i64,
    /// Queued with `run_at > now`.
    pub scheduled: i64,
    /// Age of the oldest ready job (0 when none is ready): the "stuck" signal.
    pub oldest_ready_age_ms: i64,
    /// Running jobs whose lease has lapsed.
    pub expired_leases: i64,
    /// Attempt budget of new jobs.
    pub max_attempts: i32,
    /// Backoff of new jobs.
    #[serde(deserialize_with = "lenient_backoff")]
    pub backoff: Backoff,
    /// Lease length of claims that do not set one.
    pub default_lease_ttl_ms: i64,
    /// Claims never bring the queue's running jobs above this (`None`: no
    /// limit; also what a server without flow control answers).
    #[serde(default)]
    pub max_running: Option<i32>,
    /// At most `count` jobs handed out in any `period_ms` (`None`: no limit).
    #[serde(default)]
    pub rate_limit: Option<RateLimit>,
    /// At most this many running jobs per concurrency key (`None`: no limit).
    #[serde(default)]
    pub key_max_running: Option<i32>,
    /// Claims take jobs round-robin over concurrency keys.
    #[serde(default)]
    pub fair: bool,
}

/// Number of jobs per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateCounts {
    /// Queued (ready or scheduled).
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

/// [`Backoff`] refuses unknown fields (right for requests); an answer may
/// carry more.
fn lenient_backoff<'de, D: Deserializer<'de>>(d: D) -> Result<Backoff, D::Error> {
    #[derive(Deserialize)]
    struct Wire {
        base_ms: i64,
        cap_ms: i64,
    }
    let w = Wire::deserialize(d)?;
    Ok(Backoff {
        base_ms: w.base_ms,
        cap_ms: w.cap_ms,
    })
}

/// A worker holding running jobs (`GET /v1/workers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The id it claims with.
    pub worker_id: String,
    /// The queues of its running jobs, by name.
    pub queues: Vec<String>,
    /// How many jobs it holds.
    pub running: u64,
    /// Its latest heartbeat on any of them (its claim before the first).
    pub last_heartbeat_at: Option<DateTime<Utc>>,
}

#[derive(Deserialize)]
pub(crate) struct WorkersEnvelope {
    pub(crate) workers: Vec<WorkerInfo>,
}

/// A queue's recent throughput (`GET /v1/queues/{queue}/throughput`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throughput {
    /// One entry per minute, oldest first; the last is the current
    /// (partial) minute.
    pub minutes: Vec<ThroughputMinute>,
    /// Ready to claimed, over the last attempt of the jobs that finished in
    /// the window; `None` when none did.
    pub wait_ms: Option<Percentiles>,
    /// Claimed to finished, over the same jobs; `None` when none did.
    pub run_ms: Option<Percentiles>,
}

/// One minute of a queue's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThroughputMinute {
    /// The minute's start.
    pub at: DateTime<Utc>,
    /// Jobs that succeeded in it.
    pub succeeded: u64,
    /// Jobs that failed for good in it.
    pub failed: u64,
    /// Attempts that failed and were scheduled again.
    pub retried: u64,
    /// Jobs cancelled in it.
    pub cancelled: u64,
}

/// The 50th, 95th and 99th percentiles of some durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 95th percentile.
    pub p95: i64,
    /// 99th percentile.
    pub p99: i64,
}

/// A tenant (`GET /v1/tenants`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tenant {
    /// Its id (used by `POST /v1/tenants/{tenant_id}/keys`).
    pub id: Uuid,
    /// Its unique name.
    pub name: String,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When an admin suspended it; `None` while it is active (also from a
    /// server older than suspension).
    #[serde(default)]
    pub suspended_at: Option<DateTime<Utc>>,
}

/// The answer to `POST /v1/tenants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedTenant {
    /// The new tenant.
    pub tenant: Tenant,
    /// Its first API key, shown only now.
    pub api_key: String,
}

/// Options of `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewKey {
    /// A label for humans.
    pub name: Option<String>,
    /// Admin scope (only for keys of the `default` tenant).
    pub admin: bool,
}

/// The answer to `POST /v1/tenants/{tenant_id}/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedKey {
    /// The key's id (for `DELETE /v1/keys/{key_id}`).
    pub key_id: Uuid,
    /// The key, shown only now.
    pub api_key: String,
}

/// An API key as `GET /v1/tenants/{tenant_id}/keys` lists it: never its
/// secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    /// The key id (for `DELETE /v1/keys/{key_id}`).
    pub id: Uuid,
    /// Its label, if any; the operator's key is `TETHER_ADMIN_KEY`.
    pub name: Option<String>,
    /// Whether it has admin scope.
    pub admin: bool,
    /// When it was issued.
    pub created_at: DateTime<Utc>,
    /// When it last authenticated a request, to within a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Who a key is (`GET /v1/whoami`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    /// The tenant the key acts for.
    pub tenant: TenantRef,
    /// The key's id.
    pub key_id: Uuid,
    /// Whether it has admin scope.
    pub admin: bool,
}

/// A tenant by id and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRef {
    /// Its id.
    pub id: Uuid,
    /// Its name.
    pub name: String,
}

/// A schedule as the API shows it (`GET /v1/schedules/{id}` and every
/// answer that carries one): a cron timetable that enqueues one job per
/// fire instant. It has no tenant (the API key decides it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Server-made id.
    pub id: Uuid,
    /// Unique in the tenant.
    pub name: String,
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    pub queue: String,
    /// The kind of the jobs it enqueues.
    pub kind: String,
    /// The payload of the jobs it enqueues.
    #[serde(default)]
    pub payload: Value,
    /// Disabled schedules do not fire.
    pub enabled: bool,
    /// What it does while the previous run's job is unfinished.
    pub overlap: Overlap,
    /// The next fire instant; `None` when disabled.
    #[serde(default)]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The fire instant of the last run (scheduled or triggered).
    #[serde(default)]
    pub last_run_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When its definition last changed.
    pub updated_at: DateTime<Utc>,
}

impl Schedule {
    /// Its definition, e.g. to create a copy under another name.
    pub fn spec(&self) -> ScheduleSpec {
        ScheduleSpec {
            name: self.name.clone(),
            cron: self.cron.clone(),
            timezone: self.timezone.clone(),
            queue: self.queue.clone(),
            kind: self.kind.clone(),
            payload: self.payload.clone(),
            enabled: self.enabled,
            overlap: self.overlap,
        }
    }
}

/// One run of a schedule (`GET /v1/schedules/{id}/runs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRun {
    /// The fire instant (for a triggered run, when it was triggered).
    pub fire_at: DateTime<Utc>,
    /// The job it enqueued; `None` when it was skipped.
    #[serde(default)]
    pub job_id: Option<Uuid>,
    /// What it did (`enqueued`, `skipped`), kept as a string so that
    /// outcomes a newer server adds still decode; [`ScheduleRun::run_outcome`]
    /// parses it.
    pub outcome: String,
}

impl ScheduleRun {
    /// The outcome as a known one (`None` for one this client does not
    /// know).
    pub fn run_outcome(&self) -> Option<RunOutcome> {
        RunOutcome::parse(&self.outcome)
    }
}

/// What `GET /v1/cron/preview` computes: the next fire instants of an
/// expression, by the same code the scheduler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronPreview {
    /// The expression: 5 fields, or 6 with seconds first.
    pub cron: String,
    /// The IANA time zone it is read in (server default `UTC`).
    pub timezone: Option<String>,
    /// Instants strictly after this one (server default: now).
    pub from: Option<DateTime<Utc>>,
    /// How many instants, 1–100 (server default 5).
    pub count: Option<u32>,
}

impl CronPreview {
    /// The next 5 instants of `cron` in UTC after now.
    pub fn new(cron: impl Into<String>) -> Self {
        CronPreview {
            cron: cron.into(),
            timezone: None,
            from: None,
            count: None,
        }
    }

    /// Reads the expression in this IANA time zone.
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// Instants strictly after `from` instead of now.
    pub fn from(mut self, from: DateTime<Utc>) -> Self {
        self.from = Some(from);
        self
    }

    /// This many instants (1–100).
    pub fn count(mut self, count: u32) -> Self {
        self.count = Some(count);
        self
    }

    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut q = vec![("cron", self.cron.clone())];
        if let Some(tz) = &self.timezone {
            q.push(("timezone", tz.clone()));
        }
        if let Some(from) = &self.from {
            q.push(("from", time(from)));
        }
        if let Some(n) = self.count {
            q.push(("count", n.to_string()));
        }
        q
    }
}

/// The body of `POST /v1/schedules`: every field of the definition (the
/// defaults of [`ScheduleSpec::new`] are the server's).
pub(crate) fn schedule_body(spec: &ScheduleSpec) -> Value {
    serde_json::json!({
        "name": spec.name,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "queue": spec.queue,
        "kind": spec.kind,
        "payload": spec.payload,
        "enabled": spec.enabled,
        "overlap": spec.overlap.as_str(),
    })
}

/// The body of `PATCH /v1/schedules/{id}`: only the fields the patch sets
/// (`payload: Some(Value::Null)` is sent as an explicit `null`, which sets
/// it).
pub(crate) fn schedule_patch_body(patch: &SchedulePatch) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    };
    put("name", patch.name.clone().map(Value::from));
    put("cron", patch.cron.clone().map(Value::from));
    put("timezone", patch.timezone.clone().map(Value::from));
    put("queue", patch.queue.clone().map(Value::from));
    put("kind", patch.kind.clone().map(Value::from));
    put("payload", patch.payload.clone());
    put("enabled", patch.enabled.map(Value::from));
    put("overlap", patch.overlap.map(|o| Value::from(o.as_str())));
    Value::Object(m)
}

/// The body of `POST /v1/jobs` (and of each entry of a batch): only the
/// fields the job sets.
pub(crate) fn enqueue_body(job: &NewJob) -> Value {
    let mut m = Map::new();
    m.insert("queue".into(), job.queue.clone().into());
    m.insert("kind".into(), job.kind.clone().into());
    if !job.payload.is_null() {
        m.insert("payload".into(), job.payload.clone());
    }
    if job.priority != 0 {
        m.insert("priority".into(), job.priority.into());
    }
    match job.run_at {
        RunAt::Now => {}
        RunAt::At(at) => {
            m.insert("run_at".into(), time(&at).into());
        }
        RunAt::Delay(ms) => {
            m.insert("delay_ms".into(), ms.into());
        }
    }
    if let Some(n) = job.max_attempts {
        m.insert("max_attempts".into(), n.into());
    }
    if let Some(ms) = job.timeout_ms {
        m.insert("timeout_ms".into(), ms.into());
    }
    if let Some(k) = &job.idempotency_key {
        m.insert("idempotency_key".into(), k.clone().into());
    }
    if let Some(k) = &job.unique_key {
        m.insert("unique_key".into(), k.clone().into());
    }
    if let Some(k) = &job.concurrency_key {
        m.insert("concurrency_key".into(), k.clone().into());
    }
    if !job.tags.is_empty() {
        m.insert("tags".into(), job.tags.clone().into());
    }
    if let Some(at) = job.expires_at {
        m.insert("expires_at".into(), time(&at).into());
    }
    if let Some(b) = job.backoff {
        m.insert(
            "backoff".into(),
            serde_json::json!({ "base_ms": b.base_ms, "cap_ms": b.cap_ms }),
        );
    }
    Value::Object(m)
}

/// RFC 3339 in UTC, as the API writes times (`2026-11-29T23:00:00.123Z`).
/// A time as the server takes it: RFC 3339 in UTC with at most
/// microseconds (the finest it keeps; it refuses more digits), so
/// nanoseconds are cut here.
pub(crate) fn time(t: &DateTime<Utc>) -> String {
    use chrono::SubsecRound;
    t.trunc_subsecs(6)
        .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// `{"jobs": [...]}` and the other one-field envelopes of answers.
#[derive(Deserialize)]
pub(crate) struct JobEnvelope {
    pub(crate) job: Job,
}

#[derive(Deserialize)]
pub(crate) struct JobsEnvelope {
    pub(crate) jobs: Vec<ClaimedJob>,
    /// The answers to the reports a claim carried (absent when none).
    #[serde(default)]
    pub(crate) reports: Vec<BatchItem>,
}

#[derive(Deserialize)]
pub(crate) struct ResultsEnvelope<T> {
    pub(crate) results: Vec<T>,
}

#[derive(Deserialize)]
pub(crate) struct QueueEnvelope {
    pub(crate) queue: Queue,
}

#[derive(Deserialize)]
pub(crate) struct QueuesEnvelope {
    pub(crate) queues: Vec<Queue>,
}

#[derive(Deserialize)]
pub(crate) struct TenantsEnvelope {
    pub(crate) tenants: Vec<Tenant>,
}

#[derive(Deserialize)]
pub(crate) struct TenantEnvelope {
    pub(crate) tenant: Tenant,
}

#[derive(Deserialize)]
pub(crate) struct KeysEnvelope {
    pub(crate) keys: Vec<ApiKey>,
}

#[derive(Deserialize)]
pub(crate) struct ScheduleEnvelope {
    pub(crate) schedule: Schedule,
}

#[derive(Deserialize)]
pub(crate) struct SchedulesEnvelope {
    pub(crate) schedules: Vec<Schedule>,
}

#[derive(Deserialize)]
pub(crate) struct RunsEnvelope {
    pub(crate) runs: Vec<ScheduleRun>,
}

#[derive(Deserialize)]
pub(crate) struct TimesEnvelope {
    pub(crate) times: Vec<DateTime<Utc>>,
}

/// The `{"code", "message"}` of an error answer or a failed batch item.
#[derive(Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) code: String,
    #[serde(default)]
    pub(crate) message: String,
}

#[derive(Deserialize)]
pub(crate) struct ErrorEnvelope {
    pub(crate) error: ErrorBody,
}

/// One item of a batch answer, before it becomes an [`ItemResult`].
#[derive(Deserialize)]
pub(crate) struct BatchItem {
    pub(crate) id: Uuid,
    pub(crate) ok: bool,
    #[serde(default)]
    pub(crate) error: Option<ErrorBody>,
    #[serde(default)]
    pub(crate) lease_expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) cancel_requested: Option<bool>,
    /// The job, in the answers of the bulk cancel and replay.
    #[serde(default)]
    pub(crate) job: Option<Box<Job>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn enqueue_body_carries_every_set_field_and_nothing_else() {
        let at: DateTime<Utc> = "2030-01-02T03:04:05.678Z".parse().unwrap();
        let full = NewJob::new("q", "k", json!({"a": 1}))
            .priority(7)
            .run_at(RunAt::At(at))
            .max_attempts(3)
            .timeout_ms(1500)
            .idempotency_key("i:1")
            .unique_key("u:1")
            .tags(["x", "y"])
            .expires_at(at)
            .backoff(Backoff {
                base_ms: 10,
                cap_ms: 20,
            });
        assert_eq!(
            enqueue_body(&full),
            json!({
                "queue": "q", "kind": "k", "payload": {"a": 1}, "priority": 7,
                "run_at": "2030-01-02T03:04:05.678Z", "max_attempts": 3,
                "timeout_ms": 1500, "idempotency_key": "i:1", "unique_key": "u:1",
                "tags": ["x", "y"], "expires_at": "2030-01-02T03:04:05.678Z",
                "backoff": {"base_ms": 10, "cap_ms": 20},
            })
        );
        // Nanoseconds are cut to the microseconds the server takes.
        let fine: DateTime<Utc> = "2030-01-02T03:04:05.123456789Z".parse().unwrap();
        assert_eq!(time(&fine), "2030-01-02T03:04:05.123456Z");
        let delayed = NewJob::new("q", "k", Value::Null).run_at(RunAt::Delay(250));
        assert_eq!(
            enqueue_body(&delayed),
            json!({"queue": "q", "kind": "k", "delay_ms": 250})
        );
    }

    #[test]
    fn schedule_bodies_carry_what_is_set() {
        let spec = ScheduleSpec::new("nightly", "0 3 * * *", "q", "k");
        assert_eq!(
            schedule_body(&spec),
            json!({
                "name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "queue": "q",
                "kind": "k", "payload": null, "enabled": true, "overlap": "allow",
            })
        );
        assert_eq!(schedule_patch_body(&SchedulePatch::default()), json!({}));
        let patch = SchedulePatch {
            payload: Some(Value::Null),
            enabled: Some(false),
            overlap: Some(Overlap::Skip),
            ..SchedulePatch::default()
        };
        assert_eq!(
            schedule_patch_body(&patch),
            json!({"payload": null, "enabled": false, "overlap": "skip"})
        );
        let from: DateTime<Utc> = "2026-03-07T12:00:00Z".parse().unwrap();
        let preview = CronPreview::new("30 2 * * *")
            .timezone("America/New_York")
            .from(from)
            .count(3);
        assert_eq!(
            preview.pairs(),
            vec![
                ("cron", "30 2 * * *".to_owned()),
                ("timezone", "America/New_York".to_owned()),
                ("from", "2026-03-07T12:00:00Z".to_owned()),
                ("count", "3".to_owned()),
            ]
        );
        let run: ScheduleRun = serde_json::from_value(json!({
            "fire_at": "2030-01-02T03:04:05.678Z", "job_id": null, "outcome": "postponed",
            "added_later": 1,
        }))
        .unwrap();
        assert_eq!(run.run_outcome(), None);
    }

    #[test]
    fn answers_with_unknown_fields_still_decode() {
        let q: Queue = serde_json::from_value(json!({
            "name": "q", "paused": false,
            "counts": {"queued": 1, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0, "new": 1},
            "ready": 1, "scheduled": 0, "oldest_ready_age_ms": 5, "expired_leases": 0,
            "max_attempts": 5, "backoff": {"base_ms": 1000, "cap_ms": 3600000, "jitter": 0.5},
            "default_lease_ttl_ms": 30000, "added_later": true,
        }))
        .unwrap();
        assert_eq!(q.backoff.base_ms, 1000);
        let e: JobEvent = serde_json::from_value(json!({
            "at": "2030-01-02T03:04:05.678Z", "event": "teleported", "attempt": 1,
            "worker_id": null, "detail": null,
        }))
        .unwrap();
        assert_eq!(e.kind(), None);
    }
}
