//! Invariant 3, server clock: leases and delays are computed from the
//! database's `now()`, so they line up with the timestamps the database
//! wrote in the same statement, not with the test's clock.

use chrono::{DateTime, Duration, DurationRound, Utc};
use tether_core::{ClaimRequest, Heartbeat, QueueConfigPatch, RunAt};

use super::support::*;
use crate::TestDb;

/// Tolerance when comparing two timestamps the database wrote in one
/// operation (SQLite keeps milliseconds).
const EPS_MS: f64 = 2.0;

#[track_caller]
fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= EPS_MS,
        "{what}: expected {expected} ms, got {actual} ms"
    );
}

#[track_caller]
fn assert_recent(t: DateTime<Utc>, what: &str) {
    let off = ms_between(Utc::now(), t).abs();
    assert!(off < 10_000.0, "{what} is {off} ms away from now: {t}");
}

/// `lease_expires_at − heartbeat_at` equals the TTL asked for at claim and
/// at heartbeat; without a TTL the queue's default (30 s, or as configured)
/// applies, and a heartbeat without one reuses the claim's.
pub async fn lease_expiry_is_database_now_plus_ttl(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let mut req = claim_req(Q, 1);
    req.lease_ttl_ms = Some(5_000);
    let c = ok(db.engine.claim(T, &req).await).remove(0);
    assert_eq!(c.job.id, j.id);
    let hb_at = c.job.heartbeat_at.expect("claim sets heartbeat_at");
    let started = c.job.started_at.expect("claim sets started_at");
    let expires = c.job.lease_expires_at.expect("claim sets lease_expires_at");
    assert_close(ms_between(expires, hb_at), 5_000.0, "claim lease");
    assert_close(
        ms_between(hb_at, started),
        0.0,
        "heartbeat_at vs started_at",
    );
    assert_recent(started, "started_at");
    assert_eq!(get(db, T, j.id).await.lease_expires_at, Some(expires));

    tick().await;
    let ack = ok(db
        .engine
        .heartbeat(
            T,
            &Heartbeat {
                id: j.id,
                lease_token: c.lease_token,
                lease_ttl_ms: Some(20_000),
                progress: None,
            },
        )
        .await);
    let after = get(db, T, j.id).await;
    let hb2 = after.heartbeat_at.expect("heartbeat_at");
    assert!(hb2 > hb_at, "a heartbeat must move heartbeat_at forward");
    assert_eq!(after.lease_expires_at, Some(ack.lease_expires_at));
    assert_close(
        ms_between(ack.lease_expires_at, hb2),
        20_000.0,
        "heartbeat lease",
    );

    tick().await;
    let ack = ok(db
        .engine
        .heartbeat(
            T,
            &Heartbeat {
                id: j.id,
                lease_token: c.lease_token,
                lease_ttl_ms: None,
                progress: None,
            },
        )
        .await);
    let hb3 = get(db, T, j.id).await.heartbeat_at.expect("heartbeat_at");
    assert_close(
        ms_between(ack.lease_expires_at, hb3),
        5_000.0,
        "a heartbeat without a TTL reuses the claim's",
    );

    // Queue default: 30 s unless configured.
    enqueue(db, T, job("q2")).await;
    let req = ClaimRequest {
        queue: "q2".into(),
        worker_id: "w".into(),
        limit: 1,
        lease_ttl_ms: None,
    };
    let c = ok(db.engine.claim(T, &req).await).remove(0);
    assert_close(
        ms_between(c.job.lease_expires_at.unwrap(), c.job.heartbeat_at.unwrap()),
        30_000.0,
        "default lease",
    );
    ok(db
        .engine
        .configure_queue(
            T,
            "q2",
            &QueueConfigPatch {
                default_lease_ttl_ms: Some(7_000),
                ..QueueConfigPatch::default()
            },
        )
        .await);
    enqueue(db, T, job("q2")).await;
    let c = ok(db.engine.claim(T, &req).await).remove(0);
    assert_close(
        ms_between(c.job.lease_expires_at.unwrap(), c.job.heartbeat_at.unwrap()),
        7_000.0,
        "configured default lease",
    );
}

/// A delayed enqueue's `run_at` is its `created_at` plus the delay; an
/// absolute `run_at` or `expires_at` is stored as given.
pub async fn delayed_run_at_is_created_at_plus_delay(db: &TestDb) {
    let j = enqueue(db, T, job(Q).run_at(RunAt::Delay(60_000))).await;
    assert_close(ms_between(j.run_at, j.created_at), 60_000.0, "delay");
    assert_recent(j.created_at, "created_at");
    assert_close(ms_between(j.updated_at, j.created_at), 0.0, "updated_at");
    assert_eq!(get(db, T, j.id).await.run_at, j.run_at);

    let now = enqueue(db, T, job(Q)).await;
    assert_close(ms_between(now.run_at, now.created_at), 0.0, "run now");

    let at = (Utc::now() + Duration::hours(3))
        .duration_trunc(Duration::milliseconds(1))
        .unwrap();
    let exp = (Utc::now() + Duration::hours(5))
        .duration_trunc(Duration::milliseconds(1))
        .unwrap();
    let abs = enqueue(db, T, job(Q).run_at(RunAt::At(at)).expires_at(exp)).await;
    assert_eq!(abs.run_at, at);
    assert_eq!(abs.expires_at, Some(exp));
    let stored = get(db, T, abs.id).await;
    assert_eq!(stored.run_at, at);
    assert_eq!(stored.expires_at, Some(exp));
}

/// A heartbeat stores the progress it carries (and keeps it when it
/// carries none), records no history event, and a new claim clears it.
pub async fn heartbeat_records_progress_without_history(db: &TestDb) {
    use serde_json::json;
    let j = enqueue(db, T, job(Q).max_attempts(3)).await;
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.progress, None);
    let events = ok(db.engine.events(T, j.id).await).len();
    let hb = |progress| Heartbeat {
        id: j.id,
        lease_token: c.lease_token,
        lease_ttl_ms: None,
        progress,
    };
    ok(db.engine.heartbeat(T, &hb(Some(json!({"done": 1})))).await);
    assert_eq!(get(db, T, j.id).await.progress, Some(json!({"done": 1})));
    ok(db.engine.heartbeat(T, &hb(Some(json!({"done": 2})))).await);
    ok(db.engine.heartbeat(T, &hb(None)).await);
    assert_eq!(get(db, T, j.id).await.progress, Some(json!({"done": 2})));
    assert_eq!(ok(db.engine.events(T, j.id).await).len(), events);
    ok(db
        .engine
        .fail(T, j.id, c.lease_token, failure("again"))
        .await);
    db.make_due(j.id).await;
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.progress, None, "a claim clears progress");
}

/// What enqueue and claim answer is exactly what the store holds: every
/// field, including caller-supplied instants the database rounds to its own
/// precision.
pub async fn answers_match_the_stored_job(db: &TestDb) {
    let at = Utc::now() + Duration::hours(3) + Duration::nanoseconds(123_456_789);
    let exp = Utc::now() + Duration::hours(5) + Duration::nanoseconds(987_654_321);
    let full = job(Q)
        .priority(7)
        .run_at(RunAt::At(at))
        .expires_at(exp)
        .max_attempts(9)
        .backoff(tether_core::Backoff {
            base_ms: 10,
            cap_ms: 20,
        })
        .timeout_ms(1_234)
        .idempotency_key("answer:1")
        .unique_key("answer:u")
        .tags(["a", "b"]);
    let answered = enqueue(db, T, full).await;
    assert_eq!(answered, get(db, T, answered.id).await, "single enqueue");

    let batch = ok(db
        .engine
        .enqueue_many(T, &[job(Q).tags(["x"]), job(Q).run_at(RunAt::Delay(5))])
        .await);
    for e in batch {
        assert_eq!(e.job, get(db, T, e.job.id).await, "batch enqueue");
    }

    let claimed = ok(db.engine.claim(T, &claim_req(Q, 10)).await);
    assert!(!claimed.is_empty());
    for c in claimed {
        assert_eq!(c.job, get(db, T, c.job.id).await, "claim");
    }
}
