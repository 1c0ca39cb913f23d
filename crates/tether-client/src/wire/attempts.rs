//! The worker's side: claim options and the answer of a claim that
//! carried reports.

use serde::Deserialize;
use tether_api::{ClaimBody, ClaimedJob};

use super::{BatchItem, ItemResult};

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

    /// The claim's body, without reports.
    pub(crate) fn body(&self) -> ClaimBody {
        ClaimBody {
            worker_id: self.worker_id.clone(),
            limit: self.limit,
            lease_ttl_ms: self.lease_ttl_ms,
            wait_ms: self.wait_ms,
            complete: None,
            fail: None,
        }
    }
}

/// The answer of a claim, its reports read item by item (see
/// [`BatchItem`]).
#[derive(Deserialize)]
pub(crate) struct ClaimAnswer {
    pub(crate) jobs: Vec<ClaimedJob>,
    /// The answers to the reports a claim carried (absent when none).
    #[serde(default)]
    pub(crate) reports: Vec<BatchItem>,
}
