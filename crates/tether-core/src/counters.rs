//! Counters of what the engine did, through the `metrics` facade: they cost
//! nothing until the embedding process installs a recorder (`tether serve`
//! installs a Prometheus exporter). They count this process's work; sum
//! them over replicas.
//!
//! - `tether_jobs_enqueued_total{tenant,queue}`: jobs created (a duplicate
//!   that returned an existing job is not counted);
//! - `tether_jobs_claimed_total{tenant,queue}`: attempts started;
//! - `tether_claims_throttled_total{tenant,queue}`: claims that flow
//!   control held back (fewer jobs than asked while ready ones were left;
//!   counted by the store, which alone sees why);
//! - `tether_jobs_completed_total{tenant}`: attempts that succeeded;
//! - `tether_jobs_failed_total{tenant,outcome}`: attempts that failed, by
//!   where the job went: `retried`, `dead` (state `failed`) or `cancelled`;
//! - `tether_jobs_snoozed_total{tenant}`, `tether_jobs_replayed_total{tenant}`;
//! - `tether_jobs_reaped_total{outcome}`: lapsed leases taken back by the
//!   reaper (`requeued`, `failed`, `cancelled`);
//! - `tether_jobs_expired_total`, `tether_jobs_pruned_total`;
//! - `tether_schedule_fires_total{tenant}` and the histogram
//!   `tether_schedule_fire_lateness_seconds{tenant}`: from a fire instant to
//!   its job being enqueued.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use metrics::{counter, histogram};

use crate::model::{Enqueued, JobState, ReapReport};

pub(crate) fn enqueued(tenant: &str, out: &[Enqueued]) {
    let mut per_queue: BTreeMap<&str, u64> = BTreeMap::new();
    for e in out.iter().filter(|e| e.created) {
        *per_queue.entry(e.job.queue.as_str()).or_default() += 1;
    }
    for (queue, n) in per_queue {
        counter!("tether_jobs_enqueued_total", "tenant" => tenant.to_owned(), "queue" => queue.to_owned())
            .increment(n);
    }
}

pub(crate) fn claimed(tenant: &str, queue: &str, n: usize) {
    if n > 0 {
        counter!("tether_jobs_claimed_total", "tenant" => tenant.to_owned(), "queue" => queue.to_owned())
            .increment(n as u64);
    }
}

/// A claim of `queue` that its flow control held back (see the list above).
pub fn throttled(tenant: &str, queue: &str) {
    counter!("tether_claims_throttled_total", "tenant" => tenant.to_owned(), "queue" => queue.to_owned())
        .increment(1);
}

pub(crate) fn completed(tenant: &str, n: usize) {
    if n > 0 {
        counter!("tether_jobs_completed_total", "tenant" => tenant.to_owned()).increment(n as u64);
    }
}

pub(crate) fn failed(tenant: &str, went_to: JobState) {
    let outcome = match went_to {
        JobState::Queued => "retried",
        JobState::Cancelled => "cancelled",
        _ => "dead",
    };
    counter!("tether_jobs_failed_total", "tenant" => tenant.to_owned(), "outcome" => outcome)
        .increment(1);
}

pub(crate) fn snoozed(tenant: &str) {
    counter!("tether_jobs_snoozed_total", "tenant" => tenant.to_owned()).increment(1);
}

pub(crate) fn replayed(tenant: &str, n: u64) {
    if n > 0 {
        counter!("tether_jobs_replayed_total", "tenant" => tenant.to_owned()).increment(n);
    }
}

pub(crate) fn reaped(r: &ReapReport) {
    for (outcome, n) in [
        ("requeued", r.requeued),
        ("failed", r.failed),
        ("cancelled", r.cancelled),
    ] {
        if n > 0 {
            counter!("tether_jobs_reaped_total", "outcome" => outcome).increment(n);
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
    let late = (Utc::now() - fire_at)
        .num_microseconds()
        .unwrap_or(i64::MAX) as f64
        / 1e6;
    histogram!("tether_schedule_fire_lateness_seconds", "tenant" => tenant.to_owned())
        .record(late.max(0.0));
}
