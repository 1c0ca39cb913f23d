//! Expiry: a queued job not claimed before its `expires_at` fails with
//! reason `expired` and is never claimed.

use chrono::{Duration, Utc};
use tether_core::{EventKind, JobState};

use super::support::*;
use crate::TestDb;

/// A queued job past its `expires_at` is not claimable; an expiry pass
/// fails it (`last_error` "expired", event `expired`), bounded by its batch;
/// jobs with a future `expires_at` are left alone.
pub async fn expired_job_fails_and_is_never_claimed(db: &TestDb) {
    let past = Utc::now() - Duration::seconds(60);
    let expired: Vec<_> = [
        enqueue(db, T, job(Q).expires_at(past).priority(10)).await,
        enqueue(db, T, job(Q).expires_at(past).priority(10)).await,
        enqueue(db, T, job(Q).expires_at(past).priority(10)).await,
    ]
    .into();
    let fresh = enqueue(db, T, job(Q).expires_at(Utc::now() + Duration::hours(1))).await;

    // The claim skips the expired ones even before the expiry pass.
    let got: Vec<_> = claim(db, T, Q, 10)
        .await
        .into_iter()
        .map(|c| c.job.id)
        .collect();
    assert_eq!(got, vec![fresh.id], "an expired job was claimed");

    assert_eq!(ok(db.engine.expire_jobs(2).await), 2);
    assert_eq!(ok(db.engine.expire_jobs(2).await), 1);
    assert_eq!(ok(db.engine.expire_jobs(2).await), 0);
    for j in &expired {
        let now = get(db, T, j.id).await;
        assert_eq!(now.state, JobState::Failed);
        assert_eq!(now.attempt, 0);
        assert_eq!(now.last_error.as_deref(), Some("expired"));
        assert!(now.finished_at.is_some());
        let last = ok(db.engine.events(T, j.id).await).pop().unwrap();
        assert_eq!(last.event, EventKind::Expired);
    }
    assert_eq!(get(db, T, fresh.id).await.state, JobState::Running);
    claim_none(db, T, Q).await;
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((stats.counts.failed, stats.counts.running), (3, 1));
}
