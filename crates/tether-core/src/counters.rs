//! Counters and histograms of what the engine did, through the `metrics`
//! facade: they cost nothing until the embedding process installs a
//! recorder (`tether serve` installs a Prometheus exporter, which also
//! describes every metric and sets the histograms' buckets: the list with
//! help texts is `tether_server`'s `metrics::FAMILIES`, documented in
//! `docs/operations.md`). They count this process's work; sum them over replicas.
//!
//! - `tether_jobs_enqueued_total{tenant,queue}`: jobs created (a duplicate
//!   that returned an existing job is not counted);
//! - `tether_jobs_claimed_total{tenant,queue}`: attempts started;
//! - `tether_claims_throttled_total{tenant,queue}`: claims that flow
//!   control held back (fewer jobs than asked while ready ones were left;
//!   counted by the store, which alone sees why);
//! - `tether_jobs_completed_total{tenant,queue}`: attempts that succeeded;
//! - `tether_jobs_failed_total{tenant,queue,outcome}`: attempts that
//!   failed, by where the job went: `retried`, `dead` (state `failed`) or
//!   `cancelled`;
//! - `tether_jobs_snoozed_total{tenant,queue}`,
//!   `tether_jobs_replayed_total{tenant,queue}`;
//! - `tether_jobs_reaped_total{tenant,queue,outcome}`: lapsed leases taken
//!   back by the reaper (`requeued`, `failed`, `cancelled`);
//! - `tether_jobs_expired_total`, `tether_jobs_pruned_total`;
//! - the histogram `tether_job_wait_seconds{tenant,queue}`: from a job
//!   being ready (the later of its `run_at` and `created_at`) to its claim;
//! - the histogram `tether_job_run_seconds{tenant,queue,outcome}`: from a
//!   claim to the report that ended the attempt (`succeeded`, `retried`,
//!   `dead`, `cancelled`, `snoozed`), on the database clock;
//! - `tether_enqueue_groups_total{tenant}` and
//!   `tether_enqueue_group_jobs_total{tenant}`: group commits of single
//!   enqueues and the enqueues they carried (their ratio is the mean group
//!   size; see `group_commit`);
//! - `tether_schedule_fires_total{tenant}` and the histogram
//!   `tether_schedule_fire_lateness_seconds{tenant}`: from a fire instant to
//!   its job being enqueued.
//!
//! A report that repeats the one that ended an attempt (its answer was
//! lost, say) changes nothing and is counted nowhere: not as a completion,
//! failure or snooze, nor in the run-time histogram.
//!
//! The `queue` label is bounded: at most [`limit_queue_series`] distinct
//! (tenant, queue) pairs have their own series in this process at a time;
//! the work of the others is counted under `queue="~other"`
//! ([`OTHER_QUEUE`], which no queue name can be), so many queue names
//! cannot make the recorder, or a scrape, grow without bound. A pair keeps
//! its place while its series move; one whose series have not moved for
//! [`set_queue_series_idle`] (default an hour: a deleted queue, or one
//! gone quiet) gives its place to the next new pair, once the recorder
//! (which `tether serve` gives the same idle timeout) has dropped them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use metrics::{counter, histogram};

use crate::model::{ClaimedJob, Completed, Enqueued, Job, JobState, ReapReport};

/// The `queue` label of the (tenant, queue) pairs past the limit of
/// [`limit_queue_series`]: `~` is not allowed in queue names, so it
/// cannot be mistaken for a queue.
pub const OTHER_QUEUE: &str = "~other";

/// The default of [`limit_queue_series`] (the default of
/// `--metrics-max-queues`).
pub const DEFAULT_QUEUE_SERIES: usize = 1_000;

/// The default of [`set_queue_series_idle`].
pub const DEFAULT_SERIES_IDLE: Duration = Duration::from_secs(3_600);

static MAX_QUEUE_SERIES: AtomicUsize = AtomicUsize::new(DEFAULT_QUEUE_SERIES);
static SERIES_IDLE_MS: AtomicU64 = AtomicU64::new(DEFAULT_SERIES_IDLE.as_millis() as u64);

/// The (tenant, queue) pairs with series of their own, with when their
/// series last moved; and when the full set was last swept of idle ones.
struct Admitted {
    pairs: HashMap<(String, String), Instant>,
    swept: Option<Instant>,
}

static QUEUE_SERIES: LazyLock<Mutex<Admitted>> = LazyLock::new(|| {
    Mutex::new(Admitted {
        pairs: HashMap::new(),
        swept: None,
    })
});

/// A full set is swept at most this often, so that the work of pairs past
/// the limit does not scan it every time.
const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// Sets how many distinct (tenant, queue) pairs have series of their own
/// at a time (default [`DEFAULT_QUEUE_SERIES`]); `tether serve` sets it to
/// `--metrics-max-queues`. Pairs admitted already keep their series.
pub fn limit_queue_series(max: usize) {
    MAX_QUEUE_SERIES.store(max, Ordering::Relaxed);
}

/// Sets after how long without a move a pair's series count as gone
/// (default [`DEFAULT_SERIES_IDLE`]), so that its place goes to the next
/// new pair. Give the recorder the same idle timeout, so that it drops
/// those series too (`tether_server::install_recorder` does).
pub fn set_queue_series_idle(idle: Duration) {
    SERIES_IDLE_MS.store(
        idle.as_millis().min(u128::from(u64::MAX)) as u64,
        Ordering::Relaxed,
    );
}

/// The `queue` label value for `queue` of `tenant`: the name while the pair
/// has (or can be given) series of its own, else [`OTHER_QUEUE`].
fn queue_label(tenant: &str, queue: &str) -> String {
    let mut admitted = QUEUE_SERIES.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    let key = (tenant.to_owned(), queue.to_owned());
    if let Some(moved) = admitted.pairs.get_mut(&key) {
        *moved = now;
        return key.1;
    }
    let max = MAX_QUEUE_SERIES.load(Ordering::Relaxed);
    let due = admitted
        .swept
        .is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY);
    if admitted.pairs.len() >= max && due {
        let idle = Duration::from_millis(SERIES_IDLE_MS.load(Ordering::Relaxed));
        admitted
            .pairs
            .retain(|_, moved| now.duration_since(*moved) < idle);
        admitted.swept = Some(now);
    }
    if admitted.pairs.len() < max {
        admitted.pairs.insert(key.clone(), now);
        return key.1;
    }
    OTHER_QUEUE.to_owned()
}

/// Seconds from `from` to `to`, never negative (clocks of one database,
/// but a row written in the same instant may read a hair apart).
fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    let micros = (to - from).num_microseconds().unwrap_or(i64::MAX);
    (micros as f64 / 1e6).max(0.0)
}

/// Where a failure sent the job, as the `outcome` label says it.
fn failure_outcome(went_to: JobState) -> &'static str {
    match went_to {
        JobState::Queued => "retried",
        JobState::Cancelled => "cancelled",
        _ => "dead",
    }
}

/// The run time of the attempt that `job` (as its report left it) ended:
/// from its claim to the report's write, both on the database clock.
fn ran(tenant: &str, queue: &str, job: &Job, outcome: &'static str) {
    if let Some(started) = job.started_at {
        let ended = job.finished_at.unwrap_or(job.updated_at);
        run_time(tenant, queue, started, ended, outcome);
    }
}

fn run_time(
    tenant: &str,
    queue: &str,
    started: DateTime<Utc>,
    ended: DateTime<Utc>,
    outcome: &'static str,
) {
    histogram!(
        "tether_job_run_seconds",
        "tenant" => tenant.to_owned(),
        "queue" => queue_label(tenant, queue),
        "outcome" => outcome
    )
    .record(seconds(started, ended));
}

pub(crate) fn enqueued(tenant: &str, out: &[Enqueued]) {
    let mut per_queue: BTreeMap<&str, u64> = BTreeMap::new();
    for e in out.iter().filter(|e| e.created) {
        *per_queue.entry(e.job.queue.as_str()).or_default() += 1;
    }
    for (queue, n) in per_queue {
        counter!("tether_jobs_enqueued_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, queue))
            .increment(n);
    }
}

/// One group commit of `jobs` single enqueues of `tenant`.
pub(crate) fn enqueue_group(tenant: &str, jobs: usize) {
    counter!("tether_enqueue_groups_total", "tenant" => tenant.to_owned()).increment(1);
    counter!("tether_enqueue_group_jobs_total", "tenant" => tenant.to_owned())
        .increment(jobs as u64);
}

/// Jobs claimed from `queue`: the claim count, and each job's wait from
/// ready (the later of `run_at` and `created_at`) to its claim.
pub(crate) fn claimed(tenant: &str, queue: &str, jobs: &[ClaimedJob]) {
    if jobs.is_empty() {
        return;
    }
    let label = queue_label(tenant, queue);
    counter!("tether_jobs_claimed_total", "tenant" => tenant.to_owned(), "queue" => label.clone())
        .increment(jobs.len() as u64);
    let wait =
        histogram!("tether_job_wait_seconds", "tenant" => tenant.to_owned(), "queue" => label);
    for c in jobs {
        if let Some(claimed_at) = c.job.started_at {
            let ready = c.job.run_at.max(c.job.created_at);
            wait.record(seconds(ready, claimed_at));
        }
    }
}

/// A claim of `queue` that its flow control held back (see the list above).
pub fn throttled(tenant: &str, queue: &str) {
    counter!("tether_claims_throttled_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, queue))
        .increment(1);
}

/// One job completed by a single report.
pub(crate) fn completed(tenant: &str, job: &Job) {
    counter!("tether_jobs_completed_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, &job.queue))
        .increment(1);
    ran(tenant, &job.queue, job, "succeeded");
}

/// The items of a batch completion: those that completed their job now
/// (not the repeats of an earlier report).
pub(crate) fn completed_many<'a>(tenant: &str, out: impl IntoIterator<Item = &'a Completed>) {
    let mut per_queue: BTreeMap<&str, u64> = BTreeMap::new();
    for c in out {
        if let Completed::Now {
            queue,
            started_at,
            finished_at,
        } = c
        {
            *per_queue.entry(queue.as_str()).or_default() += 1;
            if let Some(started) = started_at {
                run_time(tenant, queue, *started, *finished_at, "succeeded");
            }
        }
    }
    for (queue, n) in per_queue {
        counter!("tether_jobs_completed_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, queue))
            .increment(n);
    }
}

/// A failure report, by where it sent `job`.
pub(crate) fn failed(tenant: &str, job: &Job) {
    let outcome = failure_outcome(job.state);
    counter!(
        "tether_jobs_failed_total",
        "tenant" => tenant.to_owned(),
        "queue" => queue_label(tenant, &job.queue),
        "outcome" => outcome
    )
    .increment(1);
    ran(tenant, &job.queue, job, outcome);
}

/// A snooze (one whose job had a cancel request ends it `cancelled`).
pub(crate) fn snoozed(tenant: &str, job: &Job) {
    counter!("tether_jobs_snoozed_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, &job.queue))
        .increment(1);
    let outcome = match job.state {
        JobState::Cancelled => "cancelled",
        _ => "snoozed",
    };
    ran(tenant, &job.queue, job, outcome);
}

pub(crate) fn replayed(tenant: &str, queue: &str, n: u64) {
    if n > 0 {
        counter!("tether_jobs_replayed_total", "tenant" => tenant.to_owned(), "queue" => queue_label(tenant, queue))
            .increment(n);
    }
}

pub(crate) fn reaped(r: &ReapReport) {
    for q in &r.by_queue {
        for (outcome, n) in [
            ("requeued", q.requeued),
            ("failed", q.failed),
            ("cancelled", q.cancelled),
        ] {
            if n > 0 {
                counter!(
                    "tether_jobs_reaped_total",
                    "tenant" => q.tenant.clone(),
                    "queue" => queue_label(&q.tenant, &q.queue),
                    "outcome" => outcome
                )
                .increment(n);
            }
        }
    }
}

pub(crate) fn expired(n: u64) {
    if n > 0 {
        counter!("tether_jobs_expired_total").increment(n);
    }
}

pub(crate) fn pruned(n: u64) {
    if n > 0 {
        counter!("tether_jobs_pruned_total").increment(n);
    }
}

pub(crate) fn fired(tenant: &str, fire_at: DateTime<Utc>) {
    counter!("tether_schedule_fires_total", "tenant" => tenant.to_owned()).increment(1);
    histogram!("tether_schedule_fire_lateness_seconds", "tenant" => tenant.to_owned())
        .record(seconds(fire_at, Utc::now()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_labels_past_the_limit_are_other_until_a_place_goes_idle() {
        // The only test of this process that touches the global set.
        limit_queue_series(2);
        set_queue_series_idle(Duration::from_millis(400));
        assert_eq!(queue_label("t", "a"), "a");
        assert_eq!(queue_label("t", "b"), "b");
        assert_eq!(queue_label("t", "c"), OTHER_QUEUE);
        assert_eq!(queue_label("u", "a"), OTHER_QUEUE, "pairs, not names");
        assert_eq!(queue_label("t", "a"), "a", "admitted pairs keep theirs");
        // b goes quiet (a deleted queue, say) while a keeps moving: b's
        // place goes to the next new pair, and b is past the limit then.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(queue_label("t", "a"), "a");
        }
        assert_eq!(queue_label("t", "c"), "c", "b's place, idle for 500 ms");
        assert_eq!(queue_label("t", "b"), OTHER_QUEUE);
        assert_eq!(queue_label("t", "a"), "a");
        set_queue_series_idle(DEFAULT_SERIES_IDLE);
        limit_queue_series(DEFAULT_QUEUE_SERIES);
        assert_eq!(queue_label("t", "b"), "b");
        assert!(crate::validate::name("queue", OTHER_QUEUE).is_err());
    }

    #[test]
    fn seconds_are_never_negative() {
        let t = Utc::now();
        assert_eq!(seconds(t, t - chrono::Duration::milliseconds(1)), 0.0);
        assert_eq!(seconds(t, t + chrono::Duration::milliseconds(1500)), 1.5);
    }
}
