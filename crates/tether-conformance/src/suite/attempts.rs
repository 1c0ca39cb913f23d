//! Invariant 4, bounded attempts: `attempt` grows at claim; a lapse on the
//! last attempt fails the job; only snoozes give an attempt back.

use tether_core::{EventKind, JobState};

use super::support::*;
use crate::TestDb;

/// `attempt` is 0 when queued and grows by one at each claim, recorded on
/// the `claimed` event; the claim also records the worker.
pub async fn attempt_grows_at_claim(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(5)).await;
    assert_eq!(j.attempt, 0);
    assert_eq!(j.max_attempts, 5);
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.attempt, 1);
    assert_eq!(c.job.worker_id.as_deref(), Some("worker-1"));
    assert_eq!(get(db, T, j.id).await.attempt, 1);
    ok(db
        .engine
        .fail(T, j.id, c.lease_token, failure("boom"))
        .await);
    db.make_due(j.id).await;
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.attempt, 2);
    let events = ok(db.engine.events(T, j.id).await);
    let claims: Vec<_> = events
        .iter()
        .filter(|e| e.event == EventKind::Claimed)
        .map(|e| (e.attempt, e.worker_id.clone()))
        .collect();
    assert_eq!(
        claims,
        vec![(1, Some("worker-1".into())), (2, Some("worker-1".into()))]
    );
}

/// With max_attempts = 2: lapse → queued, lapse again → failed, and the job
/// is never claimable a third time.
pub async fn lapse_on_last_attempt_fails_and_is_never_claimed_again(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(2)).await;
    claim_id(db, T, Q, j.id).await;
    db.lapse_lease(j.id).await;
    let r = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!((r.requeued, r.failed, r.cancelled), (1, 0, 0));
    let after = get(db, T, j.id).await;
    assert_eq!((after.state, after.attempt), (JobState::Queued, 1));
    assert_eq!(after.lease_expires_at, None, "lease must be cleared");

    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.attempt, 2);
    db.lapse_lease(j.id).await;
    let r = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!((r.requeued, r.failed, r.cancelled), (0, 1, 0));
    let dead = get(db, T, j.id).await;
    assert_eq!((dead.state, dead.attempt), (JobState::Failed, 2));
    assert!(dead.finished_at.is_some());
    let err = dead.last_error.unwrap_or_default().to_lowercase();
    assert!(
        err.contains("lease"),
        "last_error should say the lease expired"
    );

    claim_none(db, T, Q).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).total(), 0);
    assert_eq!(get(db, T, j.id).await.state, JobState::Failed);
    assert_eq!(count_events(db, T, j.id, EventKind::Claimed).await, 2);
}

/// A snooze gives the attempt back, so a job with max_attempts = 1 can be
/// claimed again and again as long as it snoozes; its real failure then
/// still counts.
pub async fn snooze_gives_the_attempt_back(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(1)).await;
    for _ in 0..3 {
        let c = claim_id(db, T, Q, j.id).await;
        assert_eq!(c.job.attempt, 1);
        let s = ok(db.engine.snooze(T, j.id, c.lease_token, 0).await);
        assert_eq!((s.state, s.attempt), (JobState::Queued, 0));
    }
    let c = claim_id(db, T, Q, j.id).await;
    let f = ok(db
        .engine
        .fail(T, j.id, c.lease_token, failure("real"))
        .await);
    assert_eq!(f.state, JobState::Failed, "the only real attempt was spent");
    assert_eq!(count_events(db, T, j.id, EventKind::Snoozed).await, 3);
    assert_eq!(count_events(db, T, j.id, EventKind::Claimed).await, 4);
}
