//! A claim and the reports that end or extend its attempt: leases,
//! heartbeats, completions, failures, and the workers holding jobs.

use super::*;

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

/// A worker as `GET /v1/workers` shows it: what its `running` jobs say
/// (how many, their queues, its latest heartbeat), merged with what it
/// said of itself when it announced (see [`WorkerAnnouncement`]), if it
/// did and was seen within [`WORKER_FORGET_AFTER_MS`]. A worker that holds
/// no job shows only through its announcement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSummary {
    /// The id the worker claims with.
    pub worker_id: String,
    /// The queues it announced, and those of its running jobs, by name.
    pub queues: Vec<String>,
    /// How many jobs it holds.
    pub running: u64,
    /// Its latest heartbeat on any of them (or claim, before the first
    /// heartbeat).
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// What it announced, and when it was last seen (an announcement or a
    /// claim); `None` for a worker that never announced.
    pub presence: Option<WorkerPresence>,
}

/// What a worker says of itself (`PUT /v1/workers/{worker_id}`): so that
/// an idle, long-polling worker is listed too, with what it runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkerAnnouncement {
    /// The queues it serves (1 to [`crate::validate::MAX_WORKER_QUEUES`]).
    pub queues: Vec<String>,
    /// How many jobs it runs at once, in all.
    pub concurrency: u32,
    /// Its SDK (`python`, `typescript`, `rust`, ...).
    pub sdk: Option<String>,
    /// The SDK's (or the application's) version.
    pub version: Option<String>,
    /// The host it runs on.
    pub host: Option<String>,
    /// Its process id there.
    pub pid: Option<u32>,
}

/// A worker's announcement as stored, with when it was last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPresence {
    /// What it announced last.
    pub announcement: WorkerAnnouncement,
    /// Its last announcement or claim (database clock; claims refresh it
    /// at most every [`WORKER_SEEN_REFRESH_MS`]).
    pub last_seen_at: DateTime<Utc>,
}

/// A worker not seen (announced or claimed) for this long is forgotten:
/// no longer listed, its row deleted.
pub const WORKER_FORGET_AFTER_MS: i64 = 5 * 60_000;

/// How often a claim refreshes its worker's `last_seen_at`, at most: far
/// inside [`WORKER_FORGET_AFTER_MS`], and a write per worker per interval
/// rather than per claim.
pub const WORKER_SEEN_REFRESH_MS: i64 = 30_000;

/// Most workers a tenant may have announced and not yet forgotten.
pub const MAX_LIVE_WORKERS: u32 = 10_000;
