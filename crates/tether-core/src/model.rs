//! The job model: what a job is, what happens to it, and the shapes of the
//! requests and answers of every store operation.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, DurationRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::lifecycle;

/// Where a job is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting to be claimed (possibly not before `run_at`).
    Queued,
    /// Claimed by a worker that holds its lease.
    Running,
    /// Finished successfully. Terminal.
    Succeeded,
    /// Finished for good: fatal error, attempts exhausted or expired. Terminal;
    /// the failed jobs are the dead-letter queue.
    Failed,
    /// Cancelled. Terminal.
    Cancelled,
}

impl JobState {
    /// All states, in lifecycle order.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name as stored and shown (`queued`, `running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Whether the job is finished for good.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not the name of a known enum value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownName {
    what: &'static str,
    value: String,
}

impl FromStr for JobState {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "job state",
                value: s.to_owned(),
            })
    }
}

/// A transition recorded in a job's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The job was created.
    Enqueued,
    /// A worker claimed it (a new attempt began).
    Claimed,
    /// The attempt failed and the job was queued again for later.
    RetryScheduled,
    /// The worker said "not now": queued again, the attempt given back.
    Snoozed,
    /// The lease lapsed without a heartbeat; the reaper requeued, failed or
    /// cancelled the job (the detail says which).
    LeaseExpired,
    /// A worker whose lease no longer owns the job tried to act on it.
    LeaseLost,
    /// Finished successfully.
    Succeeded,
    /// Failed for good (fatal, or attempts exhausted).
    Failed,
    /// Cancellation was requested while the job was running.
    CancelRequested,
    /// The job was cancelled.
    Cancelled,
    /// A failed or cancelled job was queued again with a fresh attempt budget.
    Replayed,
    /// The job passed its `expires_at` before it could run.
    Expired,
}

impl EventKind {
    /// All event kinds.
    pub const ALL: [EventKind; 12] = [
        EventKind::Enqueued,
        EventKind::Claimed,
        EventKind::RetryScheduled,
        EventKind::Snoozed,
        EventKind::LeaseExpired,
        EventKind::LeaseLost,
        EventKind::Succeeded,
        EventKind::Failed,
        EventKind::CancelRequested,
        EventKind::Cancelled,
        EventKind::Replayed,
        EventKind::Expired,
    ];

    /// The event's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Enqueued => "enqueued",
            EventKind::Claimed => "claimed",
            EventKind::RetryScheduled => "retry_scheduled",
            EventKind::Snoozed => "snoozed",
            EventKind::LeaseExpired => "lease_expired",
            EventKind::LeaseLost => "lease_lost",
            EventKind::Succeeded => "succeeded",
            EventKind::Failed => "failed",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Cancelled => "cancelled",
            EventKind::Replayed => "replayed",
            EventKind::Expired => "expired",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "event kind",
                value: s.to_owned(),
            })
    }
}

/// Exponential backoff parameters: the n-th retry waits
/// `min(base_ms * 2^(n-1), cap_ms)` times a jitter in [1.0, 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// Delay before the first retry, in milliseconds.
    pub base_ms: i64,
    /// Largest delay before jitter, in milliseconds.
    pub cap_ms: i64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base_ms: lifecycle::DEFAULT_BACKOFF_BASE_MS,
            cap_ms: lifecycle::DEFAULT_BACKOFF_CAP_MS,
        }
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Server-made, time-ordered (UUID v7).
    pub id: Uuid,
    /// The tenant that owns the job.
    pub tenant: String,
    /// The queue it waits in.
    pub queue: String,
    /// The handler name.
    pub kind: String,
    /// Arguments for the handler.
    pub payload: Value,
    /// What the handler returned on success.
    pub result: Option<Value>,
    /// Lifecycle state.
    pub state: JobState,
    /// Higher runs first, in −100..=100.
    pub priority: i16,
    /// Claims so far (a snooze gives one back).
    pub attempt: i32,
    /// Claims allowed before the job fails for good.
    pub max_attempts: i32,
    /// Retry backoff of this job (copied from its queue at enqueue unless set).
    pub backoff: Backoff,
    /// Not claimable before this instant.
    pub run_at: DateTime<Utc>,
    /// When the job was enqueued.
    pub created_at: DateTime<Utc>,
    /// When the latest attempt began.
    pub started_at: Option<DateTime<Utc>>,
    /// When the job reached a terminal state.
    pub finished_at: Option<DateTime<Utc>>,
    /// Last change of any kind.
    pub updated_at: DateTime<Utc>,
    /// The tail of the last error message (at most 2 000 characters).
    pub last_error: Option<String>,
    /// At most one active (`queued`/`running`) job per tenant has this key.
    pub unique_key: Option<String>,
    /// At most one job per tenant (any state, within retention) has this key.
    pub idempotency_key: Option<String>,
    /// Free labels for filtering.
    pub tags: Vec<String>,
    /// A queued job not claimed by then fails with reason `expired`.
    pub expires_at: Option<DateTime<Utc>>,
    /// Groups the job for its queue's `key_max_running` and `fair` claims.
    pub concurrency_key: Option<String>,
    /// How long one attempt may run, enforced by the worker runtime.
    pub timeout_ms: Option<i64>,
    /// Cancellation was asked for while the job was running.
    pub cancel_requested: bool,
    /// The worker that claimed the latest attempt.
    pub worker_id: Option<String>,
    /// When the current lease lapses (running jobs only).
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// The last heartbeat of the current attempt.
    pub heartbeat_at: Option<DateTime<Utc>>,
    /// Whatever the worker last sent with a heartbeat.
    pub progress: Option<Value>,
}

/// The random per-claim token that proves ownership of a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LeaseToken(pub Uuid);

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A job handed to a claimer, with the token that fences its lease.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedJob {
    /// The job, already `running`.
    pub job: Job,
    /// Only this claimer knows it.
    pub lease_token: LeaseToken,
}

impl ClaimedJob {
    /// Sorts claimed jobs into claim order: priority (highest first), then
    /// `run_at`, then id. A backend's statement that claims many jobs
    /// answers them in no defined order; every claim hands them out in this
    /// one.
    pub fn sort_in_claim_order(claimed: &mut [ClaimedJob]) {
        claimed.sort_by(|a, b| {
            (b.job.priority.cmp(&a.job.priority))
                .then(a.job.run_at.cmp(&b.job.run_at))
                .then(a.job.id.cmp(&b.job.id))
        });
    }

    /// A success with no result for this job, as a batch completion takes it.
    pub fn success(&self) -> Completion {
        Completion {
            id: self.job.id,
            lease_token: self.lease_token,
            result: None,
        }
    }

    /// A heartbeat of this job that keeps the claim's lease TTL and reports
    /// no progress.
    pub fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            id: self.job.id,
            lease_token: self.lease_token,
            lease_ttl_ms: None,
            progress: None,
        }
    }
}

/// When a new job becomes claimable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    /// Right away.
    #[default]
    Now,
    /// Not before this instant.
    At(DateTime<Utc>),
    /// This many milliseconds after the database's `now()`.
    Delay(i64),
}

/// A job to enqueue. Build one with [`NewJob::new`] and the setters.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Queue name.
    pub queue: String,
    /// Handler name.
    pub kind: String,
    /// Handler arguments.
    pub payload: Value,
    /// −100..=100, higher first.
    pub priority: i16,
    /// When it becomes claimable.
    pub run_at: RunAt,
    /// Unset: the queue's setting.
    pub max_attempts: Option<i32>,
    /// Unset: the queue's setting.
    pub backoff: Option<Backoff>,
    /// Per-attempt time limit.
    pub timeout_ms: Option<i64>,
    /// Returns the existing job for this key instead of a second one.
    pub idempotency_key: Option<String>,
    /// Returns the active job for this key instead of a second one.
    pub unique_key: Option<String>,
    /// Labels.
    pub tags: Vec<String>,
    /// Fails with reason `expired` if not claimed by then.
    pub expires_at: Option<DateTime<Utc>>,
    /// Groups jobs for the queue's `key_max_running` and `fair` claims.
    pub concurrency_key: Option<String>,
}

impl NewJob {
    /// A job of `kind` on `queue` with `payload` and every other field default.
    pub fn new(queue: impl Into<String>, kind: impl Into<String>, payload: Value) -> Self {
        NewJob {
            queue: queue.into(),
            kind: kind.into(),
            payload,
            priority: 0,
            run_at: RunAt::Now,
            max_attempts: None,
            backoff: None,
            timeout_ms: None,
            idempotency_key: None,
            unique_key: None,
            tags: Vec::new(),
            expires_at: None,
            concurrency_key: None,
        }
    }

    /// A job carrying typed arguments, on their kind's default queue.
    pub fn for_args<J: JobArgs>(args: &J) -> crate::Result<Self> {
        args.to_new_job()
            .map_err(|e| crate::Error::invalid("payload", format!("cannot serialize: {e}")))
    }

    /// Sets the queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Sets the priority.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Sets when the job becomes claimable.
    pub fn run_at(mut self, run_at: RunAt) -> Self {
        self.run_at = run_at;
        self
    }

    /// Sets the attempt budget.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Sets the retry backoff.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Sets the per-attempt time limit.
    pub fn timeout_ms(mut self, timeout_ms: i64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Sets the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the unique key.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Sets the tags.
    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tags: I) -> Self {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the expiry instant.
    pub fn expires_at(mut self, at: DateTime<Utc>) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Sets the concurrency key (see `key_max_running` and `fair`).
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }
}

/// The answer to one enqueued job.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued {
    /// The new job, or the existing one its idempotency/unique key led to.
    pub job: Job,
    /// False when an existing job was returned instead of creating one.
    pub created: bool,
}

/// A claim of up to `limit` ready jobs from one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The queue to claim from.
    pub queue: String,
    /// Who claims (shown in history and on the job).
    pub worker_id: String,
    /// 1..=1000 jobs.
    pub limit: u32,
    /// Lease length; unset: the queue's default.
    pub lease_ttl_ms: Option<i64>,
}

/// A heartbeat: extends the lease and reports progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    pub lease_token: LeaseToken,
    /// New lease length from now; unset: the TTL given at claim.
    pub lease_ttl_ms: Option<i64>,
    /// Replaces the stored progress when set.
    pub progress: Option<Value>,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatAck {
    /// The extended lease's end.
    pub lease_expires_at: DateTime<Utc>,
    /// Someone asked for the job to be cancelled: the handler should stop.
    pub cancel_requested: bool,
}

/// One completion in a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    pub lease_token: LeaseToken,
    /// The handler's result.
    pub result: Option<Value>,
}

/// One failure in a batch: the job, the token from its claim, and how the
/// attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureReport {
    /// The job.
    pub id: Uuid,
    /// The token from the claim.
    pub lease_token: LeaseToken,
    /// How the attempt failed.
    pub failure: Failure,
}

/// The reports a claim carries: the last batch's completions and failures,
/// applied before the claim in its transaction (completions first, each
/// list in order), so a worker's report and its next claim share one round
/// trip and one commit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CarriedReports {
    /// Completions, as for a batch completion.
    pub complete: Vec<Completion>,
    /// Failures, as for single fail reports.
    pub fail: Vec<FailureReport>,
}

impl CarriedReports {
    /// Carries nothing.
    pub fn is_empty(&self) -> bool {
        self.complete.is_empty() && self.fail.is_empty()
    }

    /// How many reports it carries.
    pub fn len(&self) -> usize {
        self.complete.len() + self.fail.len()
    }

    /// The job each report is about, in answer order (completions first).
    pub fn ids(&self) -> impl Iterator<Item = Uuid> + '_ {
        (self.complete.iter().map(|c| c.id)).chain(self.fail.iter().map(|f| f.id))
    }
}

/// What the store answers for a claim that carried reports.
#[derive(Debug)]
pub struct StoredClaim {
    /// One answer per carried completion, in order.
    pub completed: Vec<crate::Result<Completed>>,
    /// One answer per carried failure, in order.
    pub failed: Vec<crate::Result<Reported>>,
    /// The claimed jobs, in claim order.
    pub jobs: Vec<ClaimedJob>,
}

/// The answer of a claim that carried reports: one answer per report
/// (completions first, each list in order), then the claimed jobs.
#[derive(Debug)]
pub struct ReportedAndClaimed {
    /// One answer per carried report, in [`CarriedReports::ids`] order.
    pub reports: Vec<crate::Result<()>>,
    /// The claimed jobs, in claim order.
    pub jobs: Vec<ClaimedJob>,
}

/// What the store says of one item of a batch completion that it accepted
/// (the engine counts these and answers `Ok(())` for each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// This item completed its job now.
    Now {
        /// The job's queue.
        queue: String,
        /// When the attempt began (its claim).
        started_at: Option<DateTime<Utc>>,
        /// When it succeeded (database clock).
        finished_at: DateTime<Utc>,
    },
    /// It repeats a report that completed the job already: nothing changed.
    Repeated,
}

/// What the store says of a single report (complete, fail, snooze) that
/// it accepted: the job as it stands, and whether this report ended the
/// attempt or repeats the one that did (then nothing changed, and the
/// engine does not count it again).
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    /// The job after the report.
    pub job: Job,
    /// True when this report ended the attempt; false for a repeat.
    pub now: bool,
}

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Failure {
    /// The error message (only its last 2 000 characters are kept).
    pub error: String,
    /// The upstream said when to come back: retry exactly this much later.
    pub retry_after_ms: Option<i64>,
    /// Do not retry: the job fails for good.
    pub fatal: bool,
    /// The handler stopped because cancellation was requested.
    pub cancelled: bool,
}

/// One event of a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// When it happened (database clock).
    pub at: DateTime<Utc>,
    /// What happened.
    pub event: EventKind,
    /// The job's attempt counter after the transition.
    pub attempt: i32,
    /// The worker involved, if any.
    pub worker_id: Option<String>,
    /// More context (an error, where the job went).
    pub detail: Option<String>,
}

/// One page of a job's history (oldest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventQuery {
    /// Page size, 1..=1000 (unset: 100).
    pub limit: Option<u32>,
    /// Continue after this cursor (from a previous page's `next_cursor`).
    pub cursor: Option<EventCursor>,
}

/// Where a page of a job's history ends: the position (`seq`) of its last
/// event. Opaque to callers; the HTTP API writes it as a decimal string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventCursor(pub i64);

impl fmt::Display for EventCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for EventCursor {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<i64>() {
            Ok(n) if n >= 0 && !s.starts_with('+') => Ok(EventCursor(n)),
            _ => Err(UnknownName {
                what: "history cursor",
                value: s.to_owned(),
            }),
        }
    }
}

/// One page of a job's history.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    /// The events, oldest first.
    pub events: Vec<JobEvent>,
    /// Pass as `cursor` for the next page; `None` at the end.
    pub next_cursor: Option<EventCursor>,
}

impl EventPage {
    /// A page of at most `limit` events, oldest first, each with its place
    /// in the history: a full page may have more after it, so its last
    /// place is the next page's cursor; a short one is the end.
    pub fn of(found: Vec<(EventCursor, JobEvent)>, limit: usize) -> EventPage {
        let next_cursor = match found.len() == limit {
            true => found.last().map(|(at, _)| *at),
            false => None,
        };
        EventPage {
            events: found.into_iter().map(|(_, e)| e).collect(),
            next_cursor,
        }
    }
}

/// Filters and page of a job listing (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobFilter {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state (`Failed` = the dead-letter queue).
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only jobs carrying this tag.
    pub tag: Option<String>,
    /// Page size, 1..=500 (unset: 50).
    pub limit: Option<u32>,
    /// Continue after this job id (from a previous page's `next_cursor`).
    pub cursor: Option<Uuid>,
    /// Only jobs whose id starts with this prefix.
    pub id_prefix: Option<IdPrefix>,
    /// Only jobs created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this instant.
    pub created_before: Option<DateTime<Utc>>,
}

/// The first hex digits of a job id (1 to 32; dashes are ignored), as an
/// operator copies them from a log line or a narrow table. It selects the
/// ids in [`IdPrefix::bounds`], a range the id index answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPrefix(String);

impl IdPrefix {
    /// The prefix's hex digits, lowercase, without dashes.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The smallest and the largest id that start with the prefix.
    pub fn bounds(&self) -> (Uuid, Uuid) {
        let fill = |digit: char| {
            let mut hex = self.0.clone();
            hex.extend(std::iter::repeat_n(digit, 32 - hex.len()));
            Uuid::try_parse(&hex).expect("32 hex digits are a UUID")
        };
        (fill('0'), fill('f'))
    }
}

impl std::str::FromStr for IdPrefix {
    type Err = &'static str;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.is_empty() || hex.len() > 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err("must be 1 to 32 hex digits of a job id (dashes allowed)");
        }
        Ok(IdPrefix(hex.to_ascii_lowercase()))
    }
}

/// One page of a job listing.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPage {
    /// The jobs, newest first.
    pub jobs: Vec<Job>,
    /// Pass as `cursor` for the next page; `None` at the end.
    pub next_cursor: Option<Uuid>,
}

impl JobPage {
    /// A page of at most `limit` jobs, newest first: a full page may have
    /// more after it, so its last id is the next page's cursor; a short one
    /// is the end.
    pub fn of(jobs: Vec<Job>, limit: usize) -> JobPage {
        let next_cursor = match jobs.len() == limit {
            true => jobs.last().map(|j| j.id),
            false => None,
        };
        JobPage { jobs, next_cursor }
    }
}

/// Selects dead (or cancelled) jobs of one queue for a bulk replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayFilter {
    /// The queue.
    pub queue: String,
    /// `Failed` (default) or `Cancelled`.
    pub state: JobState,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many jobs, 1..=10 000 (unset: 1 000).
    pub limit: Option<u32>,
    /// Only jobs with a greater id: the `next_cursor` of the previous
    /// round, so that rounds move through the queue and take each job once
    /// even if replayed jobs fail again meanwhile.
    pub cursor: Option<Uuid>,
    /// The replayed jobs' new `expires_at`; unset clears it (an expired job
    /// would otherwise expire again at once).
    pub expires_at: Option<DateTime<Utc>>,
}

impl ReplayFilter {
    /// The `failed` jobs of `queue`, 1 000 at most, from the start, with no
    /// expiry.
    pub fn failed(queue: impl Into<String>) -> Self {
        ReplayFilter {
            queue: queue.into(),
            state: JobState::Failed,
            kind: None,
            limit: None,
            cursor: None,
            expires_at: None,
        }
    }
}

/// What one bulk replay did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BulkReplayed {
    /// How many jobs were queued again.
    pub replayed: u64,
    /// Pass as the filter's `cursor` for the next round: the greatest id
    /// this round looked at, when it looked at as many jobs as its limit;
    /// `None` when the round reached the end of the selection.
    pub next_cursor: Option<Uuid>,
}

/// Per-queue settings that new jobs copy at enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Attempt budget of new jobs.
    pub max_attempts: i32,
    /// Backoff of new jobs.
    pub backoff: Backoff,
    /// Lease length of claims that do not set one.
    pub default_lease_ttl_ms: i64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_attempts: lifecycle::DEFAULT_MAX_ATTEMPTS,
            backoff: Backoff::default(),
            default_lease_ttl_ms: lifecycle::DEFAULT_LEASE_TTL_MS,
        }
    }
}

/// How hard a queue's claims may hit what its jobs call (flow control):
/// enforced by the claim itself, for every worker and server replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueLimits {
    /// Claims never bring the queue's `running` jobs above this number
    /// (`None`: no limit). A claim that would hands out fewer jobs.
    pub max_running: Option<i32>,
    /// At most `count` jobs handed out by claims in any `period_ms`
    /// (`None`: no limit).
    pub rate_limit: Option<RateLimit>,
    /// At most this many `running` jobs per `concurrency_key` (`None`: no
    /// limit); jobs of a key at its limit are passed over.
    pub key_max_running: Option<i32>,
    /// Claims take jobs of one priority round-robin over concurrency keys.
    pub fair: bool,
}

impl QueueLimits {
    /// Whether any limit applies (the claim must then count before it takes).
    pub fn any(&self) -> bool {
        self.max_running.is_some()
            || self.rate_limit.is_some()
            || self.key_max_running.is_some()
            || self.fair
    }
}

/// A strict sliding window on the database clock: in any interval of
/// `period_ms`, claims hand out at most `count` jobs of the queue. A retry
/// or snooze does not give a slot back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Jobs per window (1–100 000).
    pub count: i32,
    /// Window length in milliseconds (1 000–86 400 000).
    pub period_ms: i64,
}

/// A change to a queue's settings; unset fields stay as they are. In JSON,
/// a limit that is absent stays, `null` clears it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfigPatch {
    /// New attempt budget.
    pub max_attempts: Option<i32>,
    /// New backoff.
    pub backoff: Option<Backoff>,
    /// New default lease length.
    pub default_lease_ttl_ms: Option<i64>,
    /// New `max_running`: `Some(None)` removes the limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_present"
    )]
    pub max_running: Option<Option<i32>>,
    /// New `rate_limit`: `Some(None)` removes it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_present"
    )]
    pub rate_limit: Option<Option<RateLimit>>,
    /// New `key_max_running`: `Some(None)` removes the limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "deserialize_present"
    )]
    pub key_max_running: Option<Option<i32>>,
    /// New `fair`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair: Option<bool>,
}

impl QueueConfigPatch {
    /// Whether the patch changes any flow-control setting.
    pub fn touches_limits(&self) -> bool {
        self.max_running.is_some()
            || self.rate_limit.is_some()
            || self.key_max_running.is_some()
            || self.fair.is_some()
    }
}

/// Deserialises a field that is present (possibly `null`) as `Some`, so
/// that with `#[serde(default)]` absent, `null` and a value differ.
pub fn deserialize_present<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// Number of jobs per state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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

impl StateCounts {
    /// Adds `n` jobs in `state`.
    pub fn add(&mut self, state: JobState, n: i64) {
        match state {
            JobState::Queued => self.queued += n,
            JobState::Running => self.running += n,
            JobState::Succeeded => self.succeeded += n,
            JobState::Failed => self.failed += n,
            JobState::Cancelled => self.cancelled += n,
        }
    }
}

/// A queue's health and settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
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
    /// Current settings.
    #[serde(flatten)]
    pub config: QueueConfig,
    /// Current flow-control limits.
    #[serde(flatten)]
    pub limits: QueueLimits,
}

/// What one reaper pass did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReapReport {
    /// Lapsed on their last attempt: now `failed`.
    pub failed: u64,
    /// Lapsed after a cancel request: now `cancelled`.
    pub cancelled: u64,
    /// Lapsed with attempts left: `queued` again.
    pub requeued: u64,
    /// The same, queue by queue (for the metrics' `queue` label).
    pub by_queue: Vec<QueueReaped>,
}

/// One queue's part of a reaper pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueReaped {
    /// The queue's tenant.
    pub tenant: String,
    /// The queue.
    pub queue: String,
    /// Now `failed`.
    pub failed: u64,
    /// Now `cancelled`.
    pub cancelled: u64,
    /// `queued` again.
    pub requeued: u64,
}

impl ReapReport {
    /// Jobs touched in all.
    pub fn total(&self) -> u64 {
        self.failed + self.cancelled + self.requeued
    }

    /// Counts `n` lapsed jobs of `queue` of `tenant` that the pass sent to
    /// `state` (`queued`: requeued; `failed`; `cancelled`).
    pub fn add(&mut self, tenant: &str, queue: &str, state: JobState, n: u64) {
        let at = match self
            .by_queue
            .iter()
            .position(|q| q.tenant == tenant && q.queue == queue)
        {
            Some(at) => at,
            None => {
                self.by_queue.push(QueueReaped {
                    tenant: tenant.to_owned(),
                    queue: queue.to_owned(),
                    ..QueueReaped::default()
                });
                self.by_queue.len() - 1
            }
        };
        let q = &mut self.by_queue[at];
        let (total, part) = match state {
            JobState::Failed => (&mut self.failed, &mut q.failed),
            JobState::Cancelled => (&mut self.cancelled, &mut q.cancelled),
            _ => (&mut self.requeued, &mut q.requeued),
        };
        *total += n;
        *part += n;
    }
}

/// A held lease on a named role (e.g. the maintenance leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The role.
    pub name: String,
    /// Who holds it.
    pub holder: String,
    /// Fences the holder: renew and release need it.
    pub token: LeaseToken,
    /// When it lapses unless renewed (database clock).
    pub expires_at: DateTime<Utc>,
}

/// Arguments of a typed job: the kind names the handler, the value is the
/// payload. Producers enqueue values of this type; the worker runtime hands
/// handlers the decoded value instead of raw JSON.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tether_core::JobArgs;
///
/// #[derive(Serialize, Deserialize)]
/// struct SendWelcome {
///     to: String,
/// }
///
/// impl JobArgs for SendWelcome {
///     const KIND: &'static str = "send_welcome";
///     const QUEUE: &'static str = "emails";
/// }
/// ```
pub trait JobArgs: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static {
    /// The handler name (1–128 characters of `[A-Za-z0-9._:-]`).
    const KIND: &'static str;
    /// The queue jobs of this kind go to unless the caller says otherwise.
    const QUEUE: &'static str = "default";

    /// A [`NewJob`] carrying these arguments, ready for more settings.
    fn to_new_job(&self) -> Result<NewJob, serde_json::Error> {
        Ok(NewJob::new(
            Self::QUEUE,
            Self::KIND,
            serde_json::to_value(self)?,
        ))
    }
}

/// A worker as its jobs show it: the `running` jobs that name it as their
/// `worker_id`. There is no registry of workers that could go stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSummary {
    /// The id the worker claims with.
    pub worker_id: String,
    /// The queues of its running jobs, by name.
    pub queues: Vec<String>,
    /// How many jobs it holds.
    pub running: u64,
    /// Its latest heartbeat on any of them (or claim, before the first
    /// heartbeat).
    pub last_heartbeat_at: Option<DateTime<Utc>>,
}

/// What happened to a queue's jobs in one minute, counted from history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteCounts {
    /// The minute's start.
    pub at: DateTime<Utc>,
    /// `succeeded` events.
    pub succeeded: u64,
    /// `failed` events.
    pub failed: u64,
    /// `retry_scheduled` events.
    pub retried: u64,
    /// `cancelled` events.
    pub cancelled: u64,
}

impl MinuteCounts {
    /// The start of the first of `minutes` minutes ending with the one
    /// `now` is in: where a store starts reading history.
    pub fn window_start(now: DateTime<Utc>, minutes: u32) -> DateTime<Utc> {
        Self::last_minute(now) - chrono::Duration::minutes(i64::from(minutes.max(1)) - 1)
    }

    fn last_minute(now: DateTime<Utc>) -> DateTime<Utc> {
        now.duration_trunc(chrono::Duration::minutes(1))
            .expect("a minute divides any time")
    }

    /// `minutes` minutes ending with the one `now` is in, oldest first, each
    /// with the counts of `events` (minute start, event, count) in it.
    pub fn series(
        now: DateTime<Utc>,
        minutes: u32,
        events: &[(DateTime<Utc>, EventKind, u64)],
    ) -> Vec<MinuteCounts> {
        let minute = chrono::Duration::minutes(1);
        let last = Self::last_minute(now);
        let mut series: Vec<MinuteCounts> = (0..i64::from(minutes))
            .rev()
            .map(|back| MinuteCounts {
                at: last - minute * back as i32,
                succeeded: 0,
                failed: 0,
                retried: 0,
                cancelled: 0,
            })
            .collect();
        for (at, event, n) in events {
            let Some(slot) = series.iter_mut().find(|m| m.at == *at) else {
                continue;
            };
            match event {
                EventKind::Succeeded => slot.succeeded += n,
                EventKind::Failed => slot.failed += n,
                EventKind::RetryScheduled => slot.retried += n,
                EventKind::Cancelled => slot.cancelled += n,
                _ => {}
            }
        }
        series
    }
}

/// The 50th, 95th and 99th percentiles of some durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 95th percentile.
    pub p95: i64,
    /// 99th percentile.
    pub p99: i64,
}

impl Percentiles {
    /// The percentiles of `sorted` (ascending), each the smallest value at
    /// or above that fraction of them (PostgreSQL's `percentile_disc`);
    /// `None` for no values.
    pub fn of_sorted(sorted: &[i64]) -> Option<Percentiles> {
        if sorted.is_empty() {
            return None;
        }
        let at = |p: f64| {
            let rank = (p * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1]
        };
        Some(Percentiles {
            p50: at(0.5),
            p95: at(0.95),
            p99: at(0.99),
        })
    }
}

/// A queue's recent activity, what a dashboard draws: per-minute outcomes
/// and how long its finished jobs waited and ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueThroughput {
    /// One entry per minute, oldest first; the last is the current minute.
    pub minutes: Vec<MinuteCounts>,
    /// Ready (`run_at`) to claimed (`started_at`) of the last attempt of
    /// the jobs that finished (`succeeded` or `failed`) in the window.
    pub wait_ms: Option<Percentiles>,
    /// Claimed to finished of the last attempt of those jobs.
    pub run_ms: Option<Percentiles>,
}

/// The bounds of a throughput window, in minutes.
pub const THROUGHPUT_MINUTES: std::ops::RangeInclusive<u32> = 1..=1_440;

#[cfg(test)]
mod operator_tests {
    use super::*;

    #[test]
    fn percentiles_pick_like_percentile_disc() {
        assert_eq!(Percentiles::of_sorted(&[]), None);
        let one = Percentiles::of_sorted(&[7]).unwrap();
        assert_eq!((one.p50, one.p95, one.p99), (7, 7, 7));
        let hundred: Vec<i64> = (1..=100).collect();
        let p = Percentiles::of_sorted(&hundred).unwrap();
        assert_eq!((p.p50, p.p95, p.p99), (50, 95, 99));
        let p = Percentiles::of_sorted(&[1, 2, 3]).unwrap();
        assert_eq!((p.p50, p.p95, p.p99), (2, 3, 3));
    }

    #[test]
    fn id_prefixes_are_id_ranges() {
        let p: IdPrefix = "0193AB-12".parse().unwrap();
        assert_eq!(p.as_str(), "0193ab12");
        let (low, high) = p.bounds();
        assert_eq!(low.to_string(), "0193ab12-0000-0000-0000-000000000000");
        assert_eq!(high.to_string(), "0193ab12-ffff-ffff-ffff-ffffffffffff");
        for bad in ["", "-", "g", &"a".repeat(33)] {
            assert!(bad.parse::<IdPrefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn minute_series_ends_with_the_current_minute() {
        let now = "2026-12-03T10:30:42Z".parse::<DateTime<Utc>>().unwrap();
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let events = [
            (at("2026-12-03T10:30:00Z"), EventKind::Succeeded, 3),
            (at("2026-12-03T10:28:00Z"), EventKind::RetryScheduled, 2),
            (at("2026-12-03T10:00:00Z"), EventKind::Failed, 9),
        ];
        let s = MinuteCounts::series(now, 3, &events);
        assert_eq!(MinuteCounts::window_start(now, 3), s[0].at);
        assert_eq!(
            MinuteCounts::window_start(now, 1),
            at("2026-12-03T10:30:00Z")
        );
        let shown: Vec<_> = s
            .iter()
            .map(|m| (m.at, m.succeeded, m.retried, m.failed))
            .collect();
        assert_eq!(
            shown,
            [
                (at("2026-12-03T10:28:00Z"), 0, 2, 0),
                (at("2026-12-03T10:29:00Z"), 0, 0, 0),
                (at("2026-12-03T10:30:00Z"), 3, 0, 0)
            ]
        );
    }
}
