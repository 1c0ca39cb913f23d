//! The history table answers "what happened to job X?" in one query: every
//! transition, in order, with its attempt.

use chrono::{Duration, Utc};
use tether_core::{
    ClaimRequest,
    EventKind::{
        CancelRequested, Cancelled, Claimed, Enqueued, Expired, Failed, LeaseExpired, LeaseLost,
        Replayed, RetryScheduled, Snoozed, Succeeded,
    },
    Failure,
};

use super::support::*;
use crate::TestDb;

/// One job driven through every kind of transition records, in order:
/// enqueued, claimed, retry_scheduled, claimed, snoozed, claimed,
/// lease_expired, claimed, lease_lost, cancel_requested, cancelled,
/// replayed, claimed, failed, replayed, claimed, succeeded — each with the
/// attempt after the transition; another job records enqueued, expired.
pub async fn history_records_every_transition_in_order(db: &TestDb) {
    let e = &db.engine;
    let j = enqueue(db, T, job(Q).max_attempts(10)).await;
    let mut req = claim_req(Q, 1);
    let mut claim_as = |worker: &str| {
        req.worker_id = worker.to_owned();
        req.clone()
    };
    let claim_with = |req: ClaimRequest| async move {
        let mut got = ok(e.claim(T, &req).await);
        assert_eq!(got.len(), 1);
        got.remove(0)
    };

    let c = claim_with(claim_as("w1")).await;
    ok(e.fail(T, j.id, c.lease_token, failure("first")).await);
    db.make_due(j.id).await;
    let c = claim_with(claim_as("w2")).await;
    ok(e.snooze(T, j.id, c.lease_token, 0).await);
    let stale = claim_with(claim_as("w3")).await;
    db.lapse_lease(j.id).await;
    assert_eq!(ok(e.reap_lapsed_leases(100).await).requeued, 1);
    let c = claim_with(claim_as("w4")).await;
    expect_lease_lost(e.complete(T, j.id, stale.lease_token, None).await);
    ok(e.cancel(T, j.id).await);
    ok(e.fail(
        T,
        j.id,
        c.lease_token,
        Failure {
            cancelled: true,
            ..failure("stopped")
        },
    )
    .await);
    ok(e.replay(T, j.id).await);
    let c = claim_with(claim_as("w5")).await;
    ok(e.fail(T, j.id, c.lease_token, fatal("fatal")).await);
    ok(e.replay(T, j.id).await);
    let c = claim_with(claim_as("w6")).await;
    ok(e.complete(T, j.id, c.lease_token, None).await);

    let events = ok(e.events(T, j.id).await);
    let got: Vec<_> = events.iter().map(|e| (e.event, e.attempt)).collect();
    assert_eq!(
        got,
        vec![
            (Enqueued, 0),
            (Claimed, 1),
            (RetryScheduled, 1),
            (Claimed, 2),
            (Snoozed, 1),
            (Claimed, 2),
            (LeaseExpired, 2),
            (Claimed, 3),
            (LeaseLost, 3),
            (CancelRequested, 3),
            (Cancelled, 3),
            (Replayed, 0),
            (Claimed, 1),
            (Failed, 1),
            (Replayed, 0),
            (Claimed, 1),
            (Succeeded, 1),
        ]
    );
    let workers: Vec<_> = events
        .iter()
        .filter(|e| e.event == Claimed)
        .map(|e| e.worker_id.clone().unwrap_or_default())
        .collect();
    assert_eq!(workers, ["w1", "w2", "w3", "w4", "w5", "w6"]);
    for pair in events.windows(2) {
        assert!(pair[0].at <= pair[1].at, "history out of time order");
    }
    let now = Utc::now();
    for ev in &events {
        assert!(
            (now - ev.at).num_seconds().abs() < 60,
            "event time {}",
            ev.at
        );
    }
    let lost = events.iter().find(|e| e.event == LeaseLost).unwrap();
    assert!(lost.detail.as_deref().unwrap_or("").contains("complete"));

    // Expiry, on a job that never ran.
    let x = enqueue(
        db,
        T,
        job("expiring").expires_at(Utc::now() - Duration::seconds(30)),
    )
    .await;
    assert_eq!(ok(e.expire_jobs(100).await), 1);
    assert_eq!(
        history(db, T, x.id).await,
        vec![(Enqueued, 0), (Expired, 0)]
    );
}

/// A job's history comes a page at a time, oldest first: a full page names
/// a cursor, the pages together hold every event once and in order, a page
/// past the end is empty (the job exists), the page size is 1..=1000
/// (default 100), and another tenant's job is not found on any page.
pub async fn history_is_paged_oldest_first(db: &TestDb) {
    use tether_core::EventQuery;
    let e = &db.engine;
    let j = enqueue(db, T, job(Q).max_attempts(100)).await;
    // 1 enqueued + 2 × 120 (claimed, snoozed) = 241 events.
    for _ in 0..120 {
        let c = claim_id(db, T, Q, j.id).await;
        ok(e.snooze(T, j.id, c.lease_token, 0).await);
    }
    let whole = ok(e.events(T, j.id).await);
    assert_eq!(whole.len(), 241);

    let first = ok(e.events_page(T, j.id, &EventQuery::default()).await);
    assert_eq!(first.events.len(), 100, "default page size");
    assert_eq!(first.events[..], whole[..100]);
    assert!(first.next_cursor.is_some());

    let mut paged = Vec::new();
    let mut query = EventQuery {
        limit: Some(7),
        cursor: None,
    };
    let mut pages = 0;
    loop {
        let page = ok(e.events_page(T, j.id, &query).await);
        assert!(page.events.len() <= 7);
        pages += 1;
        paged.extend(page.events);
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(paged, whole);
    assert_eq!(pages, 241 / 7 + 1);

    let big = ok(e
        .events_page(
            T,
            j.id,
            &EventQuery {
                limit: Some(1_000),
                cursor: None,
            },
        )
        .await);
    assert_eq!(big.events, whole);
    assert_eq!(big.next_cursor, None);
    let past = ok(e
        .events_page(
            T,
            j.id,
            &EventQuery {
                limit: Some(5),
                cursor: Some(tether_core::EventCursor(i64::MAX)),
            },
        )
        .await);
    assert!(past.events.is_empty());
    assert_eq!(past.next_cursor, None);

    for limit in [0, 1_001] {
        expect_invalid(
            e.events_page(
                T,
                j.id,
                &EventQuery {
                    limit: Some(limit),
                    cursor: None,
                },
            )
            .await,
        );
    }
    expect_not_found(e.events_page(T2, j.id, &EventQuery::default()).await);
    expect_not_found(
        e.events_page(
            T2,
            j.id,
            &EventQuery {
                limit: Some(5),
                cursor: first.next_cursor,
            },
        )
        .await,
    );
}
