//! `queues`: the queue object, its settings, throughput and bulk replay.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tether_core::{JobState, QueueConfigPatch, QueueStats};
use uuid::Uuid;

use crate::{lenient_backoff, time, Backoff};
#[cfg(feature = "openapi")]
use crate::{JobStateSchema, NameSchema};

/// Number of jobs per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StateCounts {
    /// Waiting for their dependencies.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub waiting: i64,
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

impl From<tether_core::StateCounts> for StateCounts {
    fn from(c: tether_core::StateCounts) -> Self {
        StateCounts {
            waiting: c.waiting,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Queue {
    /// Queue name.
    #[cfg_attr(feature = "openapi", schema(value_type = NameSchema))]
    pub name: String,
    /// A paused queue accepts enqueues and hands out no claims.
    pub paused: bool,
    /// Jobs per state.
    pub counts: StateCounts,
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
    // The core's types here and in `rate_limit`, as the client has always
    // shown them.
    #[serde(deserialize_with = "lenient_backoff")]
    #[cfg_attr(feature = "openapi", schema(value_type = Backoff))]
    pub backoff: tether_core::Backoff,
    /// Lease length of claims that do not set one (default 30 000).
    pub default_lease_ttl_ms: i64,
    /// Claims never bring the queue's running jobs above this number,
    /// across every worker and replica; `null`: no limit.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub max_running: Option<i32>,
    /// At most `count` jobs handed out by claims in any `period_ms`;
    /// `null`: no limit.
    #[cfg_attr(feature = "openapi", schema(required, value_type = Option<RateLimit>))]
    pub rate_limit: Option<tether_core::RateLimit>,
    /// At most this many running jobs per `concurrency_key`; `null`: no
    /// limit.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub key_max_running: Option<i32>,
    /// Claims take jobs of one priority round-robin over concurrency keys.
    // Absent from a server older than flow control.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required))]
    pub fair: bool,
}

/// A strict sliding window on the database clock: in any `period_ms`,
/// claims hand out at most `count` of the queue's jobs. A retry or snooze
/// does not give a slot back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Jobs per window.
    pub count: i32,
    /// The window's length in milliseconds.
    pub period_ms: i64,
}

impl From<tether_core::RateLimit> for RateLimit {
    fn from(r: tether_core::RateLimit) -> Self {
        RateLimit {
            count: r.count,
            period_ms: r.period_ms,
        }
    }
}

impl From<RateLimit> for tether_core::RateLimit {
    fn from(r: RateLimit) -> Self {
        tether_core::RateLimit {
            count: r.count,
            period_ms: r.period_ms,
        }
    }
}

impl From<QueueStats> for Queue {
    fn from(q: QueueStats) -> Self {
        Queue {
            name: q.name,
            paused: q.paused,
            counts: q.counts.into(),
            ready: q.ready,
            scheduled: q.scheduled,
            oldest_ready_age_ms: q.oldest_ready_age_ms,
            expired_leases: q.expired_leases,
            max_attempts: q.config.max_attempts,
            backoff: q.config.backoff,
            default_lease_ttl_ms: q.config.default_lease_ttl_ms,
            max_running: q.limits.max_running,
            rate_limit: q.limits.rate_limit,
            key_max_running: q.limits.key_max_running,
            fair: q.limits.fair,
        }
    }
}

/// `PATCH /v1/queues/{queue}`: unset fields stay as they are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct QueueConfigBody {
    /// Attempt budget that new jobs copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
    /// Backoff that new jobs copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// Lease length of claims that do not set one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_lease_ttl_ms: Option<i64>,
    /// At most this many running jobs (a claim that would exceed it hands
    /// out fewer, possibly none); `null` removes the limit, absent keeps it.
    #[serde(
        default,
        deserialize_with = "tether_core::deserialize_present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i32>, nullable))]
    pub max_running: Option<Option<i32>>,
    /// At most `count` jobs handed out in any `period_ms`; `null` removes
    /// the limit, absent keeps it.
    #[serde(
        default,
        deserialize_with = "tether_core::deserialize_present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<RateLimit>, nullable))]
    pub rate_limit: Option<Option<RateLimit>>,
    /// At most this many running jobs per `concurrency_key` (jobs of a key
    /// at its limit are passed over); `null` removes the limit, absent
    /// keeps it.
    #[serde(
        default,
        deserialize_with = "tether_core::deserialize_present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<i32>, nullable))]
    pub key_max_running: Option<Option<i32>>,
    /// Round-robin over concurrency keys; `null` is `false`, absent keeps it.
    #[serde(
        default,
        deserialize_with = "tether_core::deserialize_present",
        skip_serializing_if = "Option::is_none"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<bool>, nullable))]
    pub fair: Option<Option<bool>>,
}

impl From<QueueConfigBody> for QueueConfigPatch {
    fn from(b: QueueConfigBody) -> Self {
        QueueConfigPatch {
            max_attempts: b.max_attempts,
            backoff: b.backoff.map(Into::into),
            default_lease_ttl_ms: b.default_lease_ttl_ms,
            max_running: b.max_running,
            rate_limit: b.rate_limit.map(|r| r.map(Into::into)),
            key_max_running: b.key_max_running,
            fair: b.fair.map(|f| f.unwrap_or(false)),
        }
    }
}

impl From<QueueConfigPatch> for QueueConfigBody {
    fn from(p: QueueConfigPatch) -> Self {
        QueueConfigBody {
            max_attempts: p.max_attempts,
            backoff: p.backoff.map(Into::into),
            default_lease_ttl_ms: p.default_lease_ttl_ms,
            max_running: p.max_running,
            rate_limit: p.rate_limit.map(|r| r.map(Into::into)),
            key_max_running: p.key_max_running,
            fair: p.fair.map(Some),
        }
    }
}

/// `POST /v1/queues/{queue}/replay` (the body may be omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkReplayBody {
    /// Replay jobs in this state: `failed` (default) or `cancelled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<JobStateSchema>))]
    pub state: Option<JobState>,
    /// Only jobs of this kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<NameSchema>))]
    pub kind: Option<String>,
    /// At most this many jobs (the first ones by id after `cursor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(default = 1000))]
    pub limit: Option<u32>,
    /// Only jobs after this one: the `next_cursor` of the previous round
    /// (opaque). Rounds that follow it take each job once, even when jobs
    /// they replayed fail again meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub cursor: Option<Uuid>,
    /// The replayed jobs' new `expires_at`; absent or `null` clears it.
    /// Between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z.
    #[serde(
        default,
        deserialize_with = "time::de_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub expires_at: Option<DateTime<Utc>>,
}

/// `{queue}`: the answer of the routes about one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueResponse {
    /// The queue, after the operation.
    pub queue: Queue,
}

impl From<QueueStats> for QueueResponse {
    fn from(q: QueueStats) -> Self {
        QueueResponse { queue: q.into() }
    }
}

/// The answer of `GET /v1/queues`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct QueueListResponse {
    /// The tenant's queues that have jobs or settings.
    pub queues: Vec<Queue>,
}

/// The answer of `POST /v1/queues/{queue}/replay`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkReplayResponse {
    /// How many jobs were queued again.
    pub replayed: u64,
    /// Pass as `cursor` for the next round; `null` when this round reached
    /// the end of the selection. Opaque.
    #[cfg_attr(feature = "openapi", schema(required, value_type = Option<String>))]
    pub next_cursor: Option<String>,
}

/// `GET /v1/queues/{queue}/throughput` query. Empty parameters are unset;
/// unknown ones are 400.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct ThroughputQuery {
    /// How many minutes, ending with the current one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(inline, value_type = Option<ThroughputMinutes>))]
    pub minutes: Option<String>,
}

/// One minute of a queue's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThroughputMinute {
    /// The minute's start.
    #[serde(serialize_with = "time::ser")]
    pub at: DateTime<Utc>,
    /// Jobs that succeeded in it.
    pub succeeded: u64,
    /// Jobs that failed for good in it.
    pub failed: u64,
    /// Attempts that failed and were scheduled again (`retry_scheduled`).
    pub retried: u64,
    /// Jobs cancelled in it.
    pub cancelled: u64,
}

/// The 50th, 95th and 99th percentiles of some durations, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Percentiles {
    /// Median.
    pub p50: i64,
    /// 95th percentile.
    pub p95: i64,
    /// 99th percentile.
    pub p99: i64,
}

/// The answer of `GET /v1/queues/{queue}/throughput`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ThroughputResponse {
    /// One entry per minute, oldest first; the last is the current
    /// (partial) minute. Counted from the history (database clock).
    pub minutes: Vec<ThroughputMinute>,
    /// Ready (`run_at`) to claimed, of the last attempt of the jobs that
    /// finished (`succeeded` or `failed`) in the window; `null` when none did.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub wait_ms: Option<Percentiles>,
    /// Claimed to finished, of the last attempt of those jobs; `null` when
    /// none did.
    #[cfg_attr(feature = "openapi", schema(required))]
    pub run_ms: Option<Percentiles>,
}

impl From<tether_core::QueueThroughput> for ThroughputResponse {
    fn from(t: tether_core::QueueThroughput) -> Self {
        let p = |p: tether_core::Percentiles| Percentiles {
            p50: p.p50,
            p95: p.p95,
            p99: p.p99,
        };
        ThroughputResponse {
            minutes: t
                .minutes
                .into_iter()
                .map(|m| ThroughputMinute {
                    at: m.at,
                    succeeded: m.succeeded,
                    failed: m.failed,
                    retried: m.retried,
                    cancelled: m.cancelled,
                })
                .collect(),
            wait_ms: t.wait_ms.map(p),
            run_ms: t.run_ms.map(p),
        }
    }
}

#[cfg(feature = "openapi")]
pub(crate) use self::openapi::field_bounds;
#[cfg(feature = "openapi")]
pub use self::openapi::ThroughputMinutes;

/// This topic's schemas that the derive cannot make, and its field bounds.
#[cfg(feature = "openapi")]
mod openapi {
    use tether_core::validate::{
        LEASE_TTL_RANGE, MAX_ATTEMPTS_RANGE, MAX_REPLAY, MAX_RUNNING_RANGE, RATE_PERIOD_RANGE,
    };

    use super::*;
    use crate::bounds::{count, field, range, FieldBound};

    schema_of!(
        /// Schema of `minutes` of `GET /v1/queues/{queue}/throughput`.
        ThroughputMinutes as "ThroughputMinutes" =>
        count(*tether_core::THROUGHPUT_MINUTES.end(), 60)
    );

    /// The bounds of this topic's fields (see `bounds.rs`).
    pub(crate) fn field_bounds() -> Vec<FieldBound> {
        vec![
            (
                field!(QueueConfigBody.max_attempts),
                range(MAX_ATTEMPTS_RANGE),
            ),
            (
                field!(QueueConfigBody.default_lease_ttl_ms),
                range(LEASE_TTL_RANGE),
            ),
            (
                field!(QueueConfigBody.max_running),
                range(MAX_RUNNING_RANGE),
            ),
            (
                field!(QueueConfigBody.key_max_running),
                range(MAX_RUNNING_RANGE),
            ),
            (field!(RateLimit.count), range(MAX_RUNNING_RANGE)),
            (field!(RateLimit.period_ms), range(RATE_PERIOD_RANGE)),
            (field!(BulkReplayBody.limit), range(1..=MAX_REPLAY)),
        ]
    }
}
