//! Small helpers shared by the behaviours.

use std::fmt::Debug;

use chrono::{DateTime, Utc};
use serde_json::json;
use tether_core::{
    ClaimRequest, ClaimedJob, Error, EventKind, Failure, Job, JobFilter, LeaseToken, NewJob, Result,
};
use uuid::Uuid;

use crate::TestDb;

/// The tenant most behaviours use.
pub const T: &str = "tenant-a";
/// A second tenant, for walls between tenants.
pub const T2: &str = "tenant-b";
/// The queue most behaviours use.
pub const Q: &str = "default";
/// Lease length of claims in the suite: long enough never to lapse by itself.
pub const TTL: i64 = 60_000;

/// A job of kind `k` on `queue` with an empty payload.
pub fn job(queue: &str) -> NewJob {
    NewJob::new(queue, "k", json!({}))
}

/// Enqueues `new` in `tenant`, expecting a new job.
pub async fn enqueue(db: &TestDb, tenant: &str, new: NewJob) -> Job {
    match db.engine.enqueue(tenant, new).await {
        Ok(e) => {
            assert!(
                e.created,
                "expected a new job, got the existing {}",
                e.job.id
            );
            e.job
        }
        Err(e) => panic!("enqueue failed: {e}"),
    }
}

/// A claim request by `worker` with the suite's TTL.
pub fn claim_req(queue: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: queue.to_owned(),
        worker_id: "worker-1".to_owned(),
        limit,
        lease_ttl_ms: Some(TTL),
    }
}

/// Claims up to `limit` jobs from `queue`.
pub async fn claim(db: &TestDb, tenant: &str, queue: &str, limit: u32) -> Vec<ClaimedJob> {
    ok(db.engine.claim(tenant, &claim_req(queue, limit)).await)
}

/// Claims exactly one job from `queue` (panics otherwise).
pub async fn claim_one(db: &TestDb, tenant: &str, queue: &str) -> ClaimedJob {
    let mut jobs = claim(db, tenant, queue, 1).await;
    assert_eq!(jobs.len(), 1, "expected to claim one job from {queue}");
    jobs.remove(0)
}

/// Claims exactly one job from `queue` and checks that it is `id`.
pub async fn claim_id(db: &TestDb, tenant: &str, queue: &str, id: Uuid) -> ClaimedJob {
    let c = claim_one(db, tenant, queue).await;
    assert_eq!(c.job.id, id, "claimed another job than expected");
    c
}

/// Asserts that a claim from `queue` returns nothing.
pub async fn claim_none(db: &TestDb, tenant: &str, queue: &str) {
    let jobs = claim(db, tenant, queue, 100).await;
    assert!(
        jobs.is_empty(),
        "expected no claimable job in {queue}, claimed {:?}",
        jobs.iter().map(|c| c.job.id).collect::<Vec<_>>()
    );
}

/// Unwraps a result, panicking with the error.
#[track_caller]
pub fn ok<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error [{}]: {e}", e.code()),
    }
}

/// Unwraps an error, panicking if the operation succeeded.
#[track_caller]
pub fn err<T: Debug>(r: Result<T>) -> Error {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e,
    }
}

/// Asserts an error with this machine-readable code.
#[track_caller]
pub fn expect_code<T: Debug>(r: Result<T>, code: &str) -> Error {
    let e = err(r);
    assert_eq!(e.code(), code, "wrong error code for: {e}");
    e
}

/// Asserts `LeaseLost`.
#[track_caller]
pub fn expect_lease_lost<T: Debug>(r: Result<T>) {
    let e = expect_code(r, "lease_lost");
    assert!(matches!(e, Error::LeaseLost(_)), "{e:?}");
}

/// Asserts `NamedLeaseLost` (code `lease_lost`): a named lease was taken
/// over, released or never held with this token.
#[track_caller]
pub fn expect_named_lease_lost<T: Debug>(r: Result<T>) {
    let e = expect_code(r, "lease_lost");
    assert!(matches!(e, Error::NamedLeaseLost(_)), "{e:?}");
}

/// Asserts `JobNotFound`.
#[track_caller]
pub fn expect_not_found<T: Debug>(r: Result<T>) {
    let e = expect_code(r, "not_found");
    assert!(matches!(e, Error::JobNotFound(_)), "{e:?}");
}

/// Asserts `InvalidState`.
#[track_caller]
pub fn expect_invalid_state<T: Debug>(r: Result<T>) {
    let e = expect_code(r, "invalid_state");
    assert!(matches!(e, Error::InvalidState { .. }), "{e:?}");
}

/// Asserts `Invalid` (code `invalid_argument`).
#[track_caller]
pub fn expect_invalid<T: Debug>(r: Result<T>) -> Error {
    let e = expect_code(r, "invalid_argument");
    assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
    e
}

/// A job as stored now.
pub async fn get(db: &TestDb, tenant: &str, id: Uuid) -> Job {
    ok(db.engine.get(tenant, id).await)
}

/// A job's history as (event, attempt) pairs.
pub async fn history(db: &TestDb, tenant: &str, id: Uuid) -> Vec<(EventKind, i32)> {
    ok(db.engine.events(tenant, id).await)
        .into_iter()
        .map(|e| (e.event, e.attempt))
        .collect()
}

/// How many events of `kind` a job's history holds.
pub async fn count_events(db: &TestDb, tenant: &str, id: Uuid, kind: EventKind) -> usize {
    ok(db.engine.events(tenant, id).await)
        .iter()
        .filter(|e| e.event == kind)
        .count()
}

/// `a - b` in milliseconds (with sub-millisecond precision).
pub fn ms_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (a - b)
        .num_microseconds()
        .expect("timestamps too far apart") as f64
        / 1000.0
}

/// A random token nobody was given.
pub fn random_token() -> LeaseToken {
    LeaseToken(Uuid::new_v4())
}

/// A plain retryable failure.
pub fn failure(msg: &str) -> Failure {
    Failure {
        error: msg.to_owned(),
        ..Failure::default()
    }
}

/// A fatal failure.
pub fn fatal(msg: &str) -> Failure {
    Failure {
        error: msg.to_owned(),
        fatal: true,
        ..Failure::default()
    }
}

/// Every job of a tenant (up to 500), newest first.
pub async fn all_jobs(db: &TestDb, tenant: &str) -> Vec<Job> {
    let page = ok(db
        .engine
        .list(
            tenant,
            &JobFilter {
                limit: Some(500),
                ..JobFilter::default()
            },
        )
        .await);
    page.jobs
}

/// Every job of one queue of a tenant (up to 500), newest first.
pub async fn jobs_in(db: &TestDb, tenant: &str, queue: &str) -> Vec<Job> {
    let page = ok(db
        .engine
        .list(
            tenant,
            &JobFilter {
                queue: Some(queue.to_owned()),
                limit: Some(500),
                ..JobFilter::default()
            },
        )
        .await);
    page.jobs
}

/// Sleeps a little so that timestamps at millisecond precision move on.
pub async fn tick() {
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
}
