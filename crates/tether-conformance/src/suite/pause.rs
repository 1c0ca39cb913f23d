//! Invariant 9, pause: a paused queue accepts enqueues and hands out no
//! claims, until resumed.

use tether_core::JobState;

use super::support::*;
use crate::TestDb;

/// Pausing a queue (even one never used) keeps enqueues working and stops
/// claims of that queue only, in that tenant only; stats show it; resuming
/// makes the jobs claimable.
pub async fn paused_queue_accepts_enqueues_and_hands_out_nothing(db: &TestDb) {
    let stats = ok(db.engine.pause(T, Q).await);
    assert!(stats.paused);
    assert!(ok(db.engine.queue_stats(T, Q).await).paused);
    assert!(
        ok(db.engine.list_queues(T).await)
            .iter()
            .any(|q| q.name == Q && q.paused),
        "list_queues must show the paused queue"
    );

    let j = enqueue(db, T, job(Q)).await;
    assert_eq!(j.state, JobState::Queued);
    claim_none(db, T, Q).await;
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((stats.counts.queued, stats.ready), (1, 1));

    // Other queues and the same queue name of another tenant still run.
    let other = enqueue(db, T, job("other")).await;
    claim_id(db, T, "other", other.id).await;
    let theirs = enqueue(db, T2, job(Q)).await;
    assert!(!ok(db.engine.queue_stats(T2, Q).await).paused);
    claim_id(db, T2, Q, theirs.id).await;

    // Pausing twice is harmless.
    assert!(ok(db.engine.pause(T, Q).await).paused);
    claim_none(db, T, Q).await;

    let stats = ok(db.engine.resume(T, Q).await);
    assert!(!stats.paused);
    assert!(!ok(db.engine.queue_stats(T, Q).await).paused);
    claim_id(db, T, Q, j.id).await;
}
