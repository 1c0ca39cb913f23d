//! A job as stored and read: its states, its history, the listing's
//! filters and pages, and bulk replays.

use super::*;

/// Where a job is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for its dependencies: not claimable until they end.
    Waiting,
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
    pub const ALL: [JobState; 6] = [
        JobState::Waiting,
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name as stored and shown (`queued`, `running`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Waiting => "waiting",
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

impl UnknownName {
    /// `value` is not the name of any `what`.
    pub fn new(what: &'static str, value: impl Into<String>) -> Self {
        UnknownName {
            what,
            value: value.into(),
        }
    }
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
    /// Its dependencies ended as it waited for: queued.
    Released,
    /// A workflow was created with this job among its first; the detail is
    /// the workflow's name. Written once per workflow, on the first job of
    /// the batch that created it.
    WorkflowCreated,
    /// This job's end left no job of its workflow unfinished; the detail
    /// is the workflow's state (`succeeded`, `failed` or `cancelled`).
    /// Written again if the workflow runs again (a retry) and ends again.
    WorkflowFinished,
}

impl EventKind {
    /// All event kinds.
    pub const ALL: [EventKind; 15] = [
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
        EventKind::Released,
        EventKind::WorkflowCreated,
        EventKind::WorkflowFinished,
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
            EventKind::Released => "released",
            EventKind::WorkflowCreated => "workflow_created",
            EventKind::WorkflowFinished => "workflow_finished",
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
    /// At most one active (`waiting`/`queued`/`running`) job per tenant has
    /// this key.
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
    /// The jobs it waits for (or waited for), in the order given.
    pub depends_on: Vec<Uuid>,
    /// What it does when a dependency fails.
    pub dependency_failure: DependencyFailure,
    /// The workflow it belongs to, if any.
    pub workflow_id: Option<Uuid>,
    /// The headers it was enqueued with (empty when none).
    pub headers: BTreeMap<String, String>,
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
    /// Only the jobs that depend directly on this one.
    pub depends_on: Option<Uuid>,
    /// Only the jobs of this workflow.
    pub workflow_id: Option<Uuid>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
