//! A queue's settings, flow-control limits, counts and throughput.

use super::*;

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
    /// Waiting for their dependencies.
    pub waiting: i64,
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
            JobState::Waiting => self.waiting += n,
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
mod tests {
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
