//! Jobs: the job, its history, the listing's query and page, bulk replays.

use super::*;

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
