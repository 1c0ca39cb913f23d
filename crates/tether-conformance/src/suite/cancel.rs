//! Invariant 8, cancellation: a queued job cancels at once; a running one
//! is asked to stop and ends `cancelled` when its worker acknowledges or its
//! lease lapses.

use tether_core::{EventKind, Failure, Heartbeat, JobState};

use super::support::*;
use crate::TestDb;

/// Cancelling a queued job makes it `cancelled` at once, finished, never
/// claimed.
pub async fn cancel_of_queued_job_is_immediate(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let c = ok(db.engine.cancel(T, j.id).await);
    assert_eq!(c.state, JobState::Cancelled);
    assert!(c.finished_at.is_some());
    assert_eq!(get(db, T, j.id).await, c);
    assert_eq!(
        history(db, T, j.id).await,
        vec![(EventKind::Enqueued, 0), (EventKind::Cancelled, 0)]
    );
    claim_none(db, T, Q).await;
}

/// Cancelling a running job sets `cancel_requested` (one event, however
/// often asked), heartbeats report it, and a `cancelled: true` failure
/// ends it `cancelled`.
pub async fn cancel_of_running_job_is_requested_and_acknowledged(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let hb = Heartbeat {
        id: j.id,
        lease_token: c.lease_token,
        lease_ttl_ms: None,
        progress: None,
    };
    assert!(!ok(db.engine.heartbeat(T, &hb).await).cancel_requested);

    let r = ok(db.engine.cancel(T, j.id).await);
    assert_eq!(r.state, JobState::Running);
    assert!(r.cancel_requested);
    assert_eq!(r.finished_at, None);
    let again = ok(db.engine.cancel(T, j.id).await);
    assert_eq!(again.state, JobState::Running);
    assert_eq!(
        count_events(db, T, j.id, EventKind::CancelRequested).await,
        1,
        "cancel_requested is recorded once"
    );
    assert!(ok(db.engine.heartbeat(T, &hb).await).cancel_requested);

    let done = ok(db
        .engine
        .fail(
            T,
            j.id,
            c.lease_token,
            Failure {
                error: "stopped".into(),
                cancelled: true,
                ..Failure::default()
            },
        )
        .await);
    assert_eq!(done.state, JobState::Cancelled);
    assert!(done.finished_at.is_some());
    assert_eq!(
        history(db, T, j.id).await,
        vec![
            (EventKind::Enqueued, 0),
            (EventKind::Claimed, 1),
            (EventKind::CancelRequested, 1),
            (EventKind::Cancelled, 1),
        ]
    );
}

/// While cancel is requested, a plain failure and a snooze end `cancelled`
/// (the job is not retried), a fatal failure ends `failed`.
pub async fn failure_or_snooze_while_cancel_requested_ends_cancelled(db: &TestDb) {
    let a = enqueue(db, T, job(Q).max_attempts(5)).await;
    let b = enqueue(db, T, job(Q).max_attempts(5)).await;
    let f = enqueue(db, T, job(Q).max_attempts(5)).await;
    let ca = claim_id(db, T, Q, a.id).await;
    let cb = claim_id(db, T, Q, b.id).await;
    let cf = claim_id(db, T, Q, f.id).await;
    for id in [a.id, b.id, f.id] {
        ok(db.engine.cancel(T, id).await);
    }
    let ra = ok(db.engine.fail(T, a.id, ca.lease_token, failure("x")).await);
    assert_eq!(ra.state, JobState::Cancelled);
    let rb = ok(db.engine.snooze(T, b.id, cb.lease_token, 0).await);
    assert_eq!(rb.state, JobState::Cancelled);
    let rf = ok(db.engine.fail(T, f.id, cf.lease_token, fatal("x")).await);
    assert_eq!(rf.state, JobState::Failed);
    claim_none(db, T, Q).await;
}

/// A worker that finishes despite a cancel request succeeds: the work is done.
pub async fn complete_while_cancel_requested_succeeds(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    ok(db.engine.cancel(T, j.id).await);
    let done = ok(db.engine.complete(T, j.id, c.lease_token, None).await);
    assert_eq!(done.state, JobState::Succeeded);
}

/// A running job with a cancel request whose worker never answers ends
/// `cancelled` when the reaper finds its lapsed lease, not `queued`.
pub async fn lapsed_lease_with_cancel_requested_ends_cancelled(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(5)).await;
    claim_id(db, T, Q, j.id).await;
    ok(db.engine.cancel(T, j.id).await);
    db.lapse_lease(j.id).await;
    let r = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!((r.cancelled, r.requeued, r.failed), (1, 0, 0));
    let now = get(db, T, j.id).await;
    assert_eq!(now.state, JobState::Cancelled);
    assert!(now.finished_at.is_some());
    claim_none(db, T, Q).await;
}

/// Cancelling a succeeded, failed or cancelled job is `InvalidState` and
/// changes nothing.
pub async fn cancel_of_terminal_job_is_invalid_state(db: &TestDb) {
    let s = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, s.id).await;
    ok(db.engine.complete(T, s.id, c.lease_token, None).await);
    let f = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, f.id).await;
    ok(db.engine.fail(T, f.id, c.lease_token, fatal("x")).await);
    let x = enqueue(db, T, job(Q)).await;
    ok(db.engine.cancel(T, x.id).await);
    for id in [s.id, f.id, x.id] {
        let before = get(db, T, id).await;
        expect_invalid_state(db.engine.cancel(T, id).await);
        assert_eq!(get(db, T, id).await, before);
    }
}

/// Cancels racing claims never lose the request: a job whose cancel came
/// back `cancelled` was never handed out, and every job handed out ends
/// `running` with `cancel_requested` set.
pub async fn cancel_racing_claims_never_loses_the_request(db: &TestDb) {
    const N: usize = 200;
    let batch: Vec<tether_core::NewJob> = (0..N).map(|_| job(Q)).collect();
    let ids: Vec<_> = ok(db.engine.enqueue_many(T, &batch).await)
        .into_iter()
        .map(|e| e.job.id)
        .collect();
    let mut claimers = Vec::new();
    for _ in 0..2 {
        let engine = db.engine.clone();
        claimers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = ok(engine.claim(T, &claim_req(Q, 5)).await);
                if batch.is_empty() {
                    break got;
                }
                got.extend(batch.into_iter().map(|c| c.job.id));
            }
        }));
    }
    let engine = db.engine.clone();
    let canceller = tokio::spawn(async move {
        let mut cancelled_at_once = Vec::new();
        for id in ids.into_iter().rev() {
            let j = ok(engine.cancel(T, id).await);
            match j.state {
                JobState::Cancelled => cancelled_at_once.push(id),
                JobState::Running => assert!(j.cancel_requested),
                other => panic!("cancel left {id} {other}"),
            }
        }
        cancelled_at_once
    });
    let mut claimed = std::collections::HashSet::new();
    for c in claimers {
        for id in c.await.expect("claimer panicked") {
            assert!(claimed.insert(id), "{id} claimed twice");
        }
    }
    let cancelled = canceller.await.expect("canceller panicked");
    assert_eq!(claimed.len() + cancelled.len(), N);
    for id in &cancelled {
        assert!(!claimed.contains(id), "{id} was cancelled and claimed");
        assert_eq!(get(db, T, *id).await.state, JobState::Cancelled);
    }
    for id in &claimed {
        let j = get(db, T, *id).await;
        assert_eq!(j.state, JobState::Running, "{id}");
        assert!(
            j.cancel_requested,
            "the cancel of running job {id} was lost"
        );
    }
}
