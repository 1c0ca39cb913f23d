//! Invariant 5, nothing stuck: a lapsed lease goes back to `queued`, or to
//! `failed` / `cancelled`, in one reaper pass.

use std::time::Duration;

use tether_core::{ClaimRequest, EventKind, JobState};

use super::support::*;
use crate::TestDb;

/// Real time, no hook: a job claimed with a 1 s lease whose worker does
/// nothing is left alone before the TTL and queued again by a reaper pass
/// after it, claimable at once.
pub async fn lapsed_lease_is_requeued_in_real_time(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let req = ClaimRequest {
        lease_ttl_ms: Some(1_000),
        ..claim_req(Q, 1)
    };
    let c = ok(db.engine.claim(T, &req).await).remove(0);
    assert_eq!(c.job.id, j.id);
    assert_eq!(
        ok(db.engine.reap_lapsed_leases(100).await).total(),
        0,
        "a live lease was reaped"
    );
    assert_eq!(get(db, T, j.id).await.state, JobState::Running);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(stats.expired_leases, 1, "stats must count the lapsed lease");
    let r = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!((r.requeued, r.failed, r.cancelled), (1, 0, 0));
    let after = get(db, T, j.id).await;
    assert_eq!(after.state, JobState::Queued);
    assert_eq!(after.lease_expires_at, None);
    let again = claim_id(db, T, Q, j.id).await;
    assert_eq!(again.job.attempt, 2);
}

/// One pass over three lapsed jobs: the exhausted one fails, the one with a
/// cancel request is cancelled, the other is requeued; each gets a
/// `lease_expired` event whose detail names its new state.
pub async fn reaper_buries_exhausted_requeues_rest_and_cancels_in_one_pass(db: &TestDb) {
    let exhausted = enqueue(db, T, job(Q).max_attempts(1).priority(3)).await;
    let retry = enqueue(db, T, job(Q).max_attempts(3).priority(2)).await;
    let cancel = enqueue(db, T, job(Q).max_attempts(1).priority(1)).await;
    let claimed = claim(db, T, Q, 3).await;
    assert_eq!(claimed.len(), 3);
    ok(db.engine.cancel(T, cancel.id).await);
    for j in [&exhausted, &retry, &cancel] {
        db.lapse_lease(j.id).await;
    }
    let r = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!((r.failed, r.cancelled, r.requeued), (1, 1, 1), "{r:?}");

    for (j, state) in [
        (&exhausted, JobState::Failed),
        (&retry, JobState::Queued),
        (&cancel, JobState::Cancelled),
    ] {
        let now = get(db, T, j.id).await;
        assert_eq!(now.state, state, "job {}", j.id);
        assert_eq!(now.attempt, 1);
        let events = ok(db.engine.events(T, j.id).await);
        let last = events.last().expect("history");
        assert_eq!(last.event, EventKind::LeaseExpired);
        assert_eq!(last.attempt, 1);
        assert!(
            last.detail
                .as_deref()
                .unwrap_or("")
                .contains(state.as_str()),
            "lease_expired detail should name {state}: {:?}",
            last.detail
        );
    }
    // Only the requeued one can be claimed.
    claim_id(db, T, Q, retry.id).await;
    claim_none(db, T, Q).await;
}

/// A pass touches at most `batch` jobs; the next pass does the rest.
pub async fn reaper_pass_is_bounded_by_batch(db: &TestDb) {
    for _ in 0..5 {
        enqueue(db, T, job(Q)).await;
    }
    let claimed = claim(db, T, Q, 5).await;
    for c in &claimed {
        db.lapse_lease(c.job.id).await;
    }
    assert_eq!(ok(db.engine.reap_lapsed_leases(2).await).total(), 2);
    assert_eq!(ok(db.engine.queue_stats(T, Q).await).counts.running, 3);
    assert_eq!(ok(db.engine.reap_lapsed_leases(2).await).total(), 2);
    assert_eq!(ok(db.engine.reap_lapsed_leases(2).await).total(), 1);
    assert_eq!(ok(db.engine.reap_lapsed_leases(2).await).total(), 0);
    assert_eq!(ok(db.engine.queue_stats(T, Q).await).counts.queued, 5);
}

/// The reaper is one pass over all tenants.
pub async fn reaper_works_across_tenants(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T2, job(Q)).await;
    claim_id(db, T, Q, a.id).await;
    claim_id(db, T2, Q, b.id).await;
    db.lapse_lease(a.id).await;
    db.lapse_lease(b.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 2);
    assert_eq!(get(db, T, a.id).await.state, JobState::Queued);
    assert_eq!(get(db, T2, b.id).await.state, JobState::Queued);
}
