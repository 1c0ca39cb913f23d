//! Invariant 14, limits hold everywhere: a queue's `max_running` is never
//! exceeded by claims, whatever the number of claimers; a job frees its slot
//! when it ends or the reaper takes it back; a throttled claim hands out
//! fewer jobs and is never an error.

use std::time::Duration;

use tether_core::{ClaimRequest, JobState, QueueConfigPatch};

use super::support::*;
use crate::TestDb;

fn max_running(n: Option<i32>) -> QueueConfigPatch {
    QueueConfigPatch {
        max_running: Some(n),
        ..Default::default()
    }
}

async fn running(db: &TestDb, queue: &str) -> i64 {
    ok(db.engine.queue_stats(T, queue).await).counts.running
}

/// With `max_running` 3, claims hand out 3 jobs and then none; each job
/// that ends (success, retryable failure, snooze) frees one slot; lowering
/// the limit below the running count hands out nothing until enough end;
/// `None` removes the limit. The setting shows in the queue's stats, stays
/// when a patch leaves it out, and keeps the queue's row when it is empty.
pub async fn max_running_caps_claims_and_ends_free_slots(db: &TestDb) {
    for _ in 0..10 {
        enqueue(db, T, job(Q)).await;
    }
    let stats = ok(db.engine.configure_queue(T, Q, &max_running(Some(3))).await);
    assert_eq!(stats.limits.max_running, Some(3));
    let first = claim(db, T, Q, 10).await;
    assert_eq!(first.len(), 3, "a claim of 10 under max_running 3");
    claim_none(db, T, Q).await;

    ok(db
        .engine
        .complete(T, first[0].job.id, first[0].lease_token, None)
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a success frees one slot"
    );
    claim_none(db, T, Q).await;
    ok(db
        .engine
        .fail(T, first[1].job.id, first[1].lease_token, failure("again"))
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a failure frees one slot"
    );
    ok(db
        .engine
        .snooze(T, first[2].job.id, first[2].lease_token, 60_000)
        .await);
    assert_eq!(
        claim(db, T, Q, 10).await.len(),
        1,
        "a snooze frees one slot"
    );
    assert_eq!(running(db, Q).await, 3);

    // A patch that leaves the limit out keeps it.
    let other = QueueConfigPatch {
        max_attempts: Some(7),
        ..Default::default()
    };
    let stats = ok(db.engine.configure_queue(T, Q, &other).await);
    assert_eq!(stats.limits.max_running, Some(3));
    claim_none(db, T, Q).await;

    // Lowered below the running count: nothing until the count is under it.
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let held: Vec<_> = ok(db.engine.list(T, &Default::default()).await)
        .jobs
        .into_iter()
        .filter(|j| j.state == JobState::Running)
        .collect();
    assert_eq!(held.len(), 3);
    claim_none(db, T, Q).await;

    // No limit: the rest of the ready jobs (the failed one backs off and
    // the snoozed one is not due).
    let stats = ok(db.engine.configure_queue(T, Q, &max_running(None)).await);
    assert_eq!(stats.limits.max_running, None);
    assert_eq!(claim(db, T, Q, 10).await.len(), 4);

    // Another tenant's queue of the same name is not limited by ours.
    ok(db
        .engine
        .configure_queue(T, "capped", &max_running(Some(1)))
        .await);
    for _ in 0..3 {
        enqueue(db, T2, job("capped")).await;
    }
    assert_eq!(claim(db, T2, "capped", 10).await.len(), 3);

    // An empty queue with a limit keeps its row (and so its limit).
    ok(db.engine.prune_empty_queues(1_000).await);
    let capped = ok(db.engine.queue_stats(T, "capped").await);
    assert_eq!(capped.limits.max_running, Some(1));

    // Out of range: refused, nothing changes.
    for bad in [0, -1, 100_001] {
        expect_invalid(
            db.engine
                .configure_queue(T, Q, &max_running(Some(bad)))
                .await,
        );
    }
    assert_eq!(
        ok(db.engine.queue_stats(T, Q).await).limits.max_running,
        None
    );
}

/// Sixteen claimers race for five slots, round after round: every round
/// hands out exactly five jobs in all, never more, however the claims
/// interleave.
pub async fn concurrent_claimers_never_exceed_max_running(db: &TestDb) {
    const SLOTS: usize = 5;
    const ROUNDS: usize = 4;
    for _ in 0..(SLOTS * ROUNDS + 10) {
        enqueue(db, T, job(Q)).await;
    }
    ok(db
        .engine
        .configure_queue(T, Q, &max_running(Some(SLOTS as i32)))
        .await);
    for round in 0..ROUNDS {
        let claims = (0..16).map(|i| {
            let engine = db.engine.clone();
            tokio::spawn(async move {
                let req = ClaimRequest {
                    worker_id: format!("racer-{i}"),
                    ..claim_req(Q, 3)
                };
                ok(engine.claim(T, &req).await)
            })
        });
        let mut claimed = Vec::new();
        for c in futures_util::future::join_all(claims).await {
            claimed.extend(c.expect("claimer"));
        }
        assert_eq!(claimed.len(), SLOTS, "round {round}: slots handed out");
        assert_eq!(running(db, Q).await, SLOTS as i64);
        for c in &claimed {
            ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
        }
    }
}

/// Real time: a job whose lease lapsed holds its slot until the reaper
/// takes it back; then the slot is free again.
pub async fn reaped_job_frees_its_slot(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    enqueue(db, T, job(Q)).await;
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let req = ClaimRequest {
        lease_ttl_ms: Some(1_000),
        ..claim_req(Q, 2)
    };
    assert_eq!(ok(db.engine.claim(T, &req).await).len(), 1);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // Lapsed but not yet reaped: still running, still counted.
    claim_none(db, T, Q).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    assert_eq!(claim(db, T, Q, 2).await.len(), 1);
    claim_none(db, T, Q).await;
}

/// A claim the limit held back hears when a slot frees: a subscriber of a
/// throttled queue is woken by a job of it ending (a completion alone and
/// in a batch, a failure) and by the reaper taking one back, not only by
/// its poll interval.
pub async fn a_freed_slot_wakes_throttled_claims(db: &TestDb) {
    const WITHIN: Duration = Duration::from_secs(5);
    for _ in 0..6 {
        enqueue(db, T, job(Q)).await;
    }
    ok(db.engine.configure_queue(T, Q, &max_running(Some(1))).await);
    let mut w = db.engine.subscribe(T, Q).expect("subscribe");
    // Drain a start-up hint (e.g. a listener connecting) and the enqueues'.
    drain(&mut w).await;

    let mut ends = 0;
    let mut holder = claim_one(db, T, Q).await;
    loop {
        // Held back: the queue has ready jobs and no free slot.
        claim_none(db, T, Q).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(200), w.hinted())
                .await
                .is_err(),
            "a hint before any slot freed"
        );
        let (id, token) = (holder.job.id, holder.lease_token);
        match ends {
            0 => drop(ok(db.engine.complete(T, id, token, None).await)),
            1 => {
                let item = holder.success();
                for answer in ok(db.engine.complete_many(T, &[item]).await) {
                    ok(answer);
                }
            }
            2 => drop(ok(db.engine.fail(T, id, token, failure("again")).await)),
            _ => break,
        }
        if tokio::time::timeout(WITHIN, w.hinted()).await.is_err() {
            panic!("no hint within {WITHIN:?} after end {ends} freed the slot");
        }
        // On PostgreSQL the process also hears its own NOTIFY a moment later.
        drain(&mut w).await;
        holder = claim_one(db, T, Q).await;
        ends += 1;
    }

    // The reaper taking a lapsed job back frees its slot too.
    db.lapse_lease(holder.job.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    if tokio::time::timeout(WITHIN, w.hinted()).await.is_err() {
        panic!("no hint within {WITHIN:?} after the reaper freed the slot");
    }
    claim_one(db, T, Q).await;
}

/// Waits until no hint has come for 300 ms.
async fn drain(w: &mut tether_core::Wakeup) {
    while tokio::time::timeout(Duration::from_millis(300), w.hinted())
        .await
        .is_ok()
    {}
}
