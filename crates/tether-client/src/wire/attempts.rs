//! The worker's side: claimed jobs, claim options, heartbeat answers,
//! and the workers holding jobs.

use super::*;

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
