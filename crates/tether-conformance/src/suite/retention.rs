//! Retention: finished jobs are pruned with their history, in bounded
//! batches; active jobs never are.

use tether_core::{Error, JobState};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// `prune_finished(0, n)` deletes succeeded, failed and cancelled jobs and
/// their events, at most n per pass, and leaves queued and running jobs and
/// their history alone; a long retention deletes nothing; a pruned job's
/// idempotency key is free again.
pub async fn prune_deletes_finished_jobs_and_history_only(db: &TestDb) {
    let s = enqueue(db, T, job(Q).idempotency_key("idem")).await;
    let c = claim_id(db, T, Q, s.id).await;
    ok(db.engine.complete(T, s.id, c.lease_token, None).await);
    let f = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, f.id).await;
    ok(db.engine.fail(T, f.id, c.lease_token, fatal("x")).await);
    let x = enqueue(db, T, job(Q)).await;
    ok(db.engine.cancel(T, x.id).await);
    let running = enqueue(db, T, job(Q)).await;
    claim_id(db, T, Q, running.id).await;
    let queued = enqueue(db, T, job(Q)).await;
    let finished_elsewhere = enqueue(db, T2, job(Q)).await;
    ok(db.engine.cancel(T2, finished_elsewhere.id).await);
    tick().await;

    assert_eq!(ok(db.engine.prune_finished(3_600_000, 100).await), 0);
    assert_eq!(ok(db.engine.prune_finished(0, 2).await), 2);
    assert_eq!(ok(db.engine.prune_finished(0, 2).await), 2);
    assert_eq!(ok(db.engine.prune_finished(0, 2).await), 0);

    for (tenant, id) in [(T, s.id), (T, f.id), (T, x.id), (T2, finished_elsewhere.id)] {
        expect_not_found(db.engine.get(tenant, id).await);
        assert_pruned_history(db, tenant, id).await;
    }
    for id in [running.id, queued.id] {
        let j = get(db, T, id).await;
        assert!(matches!(j.state, JobState::Queued | JobState::Running));
        assert!(
            !history(db, T, id).await.is_empty(),
            "active history pruned"
        );
    }
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(
        (
            stats.counts.succeeded,
            stats.counts.failed,
            stats.counts.cancelled
        ),
        (0, 0, 0)
    );
    assert_eq!((stats.counts.queued, stats.counts.running), (1, 1));

    let again = ok(db.engine.enqueue(T, job(Q).idempotency_key("idem")).await);
    assert!(again.created, "the pruned job's idempotency key is free");
    assert_ne!(again.job.id, s.id);
}

async fn assert_pruned_history(db: &TestDb, tenant: &str, id: Uuid) {
    match db.engine.events(tenant, id).await {
        Ok(events) => assert!(events.is_empty(), "history of pruned job {id} left"),
        Err(Error::JobNotFound(_)) => {}
        Err(e) => panic!("events of a pruned job: {e}"),
    }
}
