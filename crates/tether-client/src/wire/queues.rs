//! Queues: counts, settings and throughput.

use super::*;

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
pub(super) fn lenient_backoff<'de, D: Deserializer<'de>>(d: D) -> Result<Backoff, D::Error> {
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

#[derive(Deserialize)]
pub(crate) struct QueueEnvelope {
    pub(crate) queue: Queue,
}

#[derive(Deserialize)]
pub(crate) struct QueuesEnvelope {
    pub(crate) queues: Vec<Queue>,
}
