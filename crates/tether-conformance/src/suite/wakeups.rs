//! Wake-up hints: a worker that subscribed to a queue hears about new work
//! without waiting for its poll interval. Hints are only hints (they may be
//! spurious, or lost), so these tests check that they arrive, not that
//! nothing else ever wakes a subscriber.

use std::time::Duration;

use tether_core::JobState;

use super::support::*;
use crate::TestDb;

/// Far longer than a hint takes, far shorter than any poll interval.
const HINT_WITHIN: Duration = Duration::from_secs(5);

async fn expect_hint(w: &mut tether_core::Wakeup, what: &str) {
    if tokio::time::timeout(HINT_WITHIN, w.hinted()).await.is_err() {
        panic!("no wake-up hint within {HINT_WITHIN:?} after {what}");
    }
}

/// Subscribing, then enqueueing, replaying or handing a job back with a
/// zero snooze each wakes the subscriber; a hint sent before the wait
/// starts is not lost.
pub async fn enqueue_replay_and_hand_back_wake_subscribers(db: &TestDb) {
    let mut w = db.engine.subscribe(T, Q).expect("subscribe");
    // Drain a spurious start-up hint (e.g. a listener connecting).
    let _ = tokio::time::timeout(Duration::from_millis(300), w.hinted()).await;

    enqueue(db, T, job(Q)).await;
    expect_hint(&mut w, "enqueue").await;

    let c = claim_one(db, T, Q).await;
    ok(db.engine.snooze(T, c.job.id, c.lease_token, 0).await);
    expect_hint(&mut w, "snooze(0)").await;

    let c = claim_one(db, T, Q).await;
    let failed = ok(db
        .engine
        .fail(T, c.job.id, c.lease_token, fatal("boom"))
        .await);
    assert_eq!(failed.state, JobState::Failed);
    ok(db.engine.replay(T, c.job.id).await);
    expect_hint(&mut w, "replay").await;
}
