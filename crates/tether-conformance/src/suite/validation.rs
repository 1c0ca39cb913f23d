//! Invariant 12, bad input is refused whole: a typed error with a
//! machine-readable code, and nothing written.

use serde_json::json;
use tether_core::{
    Backoff, ClaimRequest, Error, Failure, Heartbeat, JobFilter, JobState, Limits, NewJob,
    QueueConfigPatch, ReplayFilter, RunAt,
};

use super::support::*;
use crate::TestDb;

/// Asserts the tenant holds no job and no queue at all.
async fn assert_nothing_written(db: &TestDb, tenant: &str) {
    let jobs = all_jobs(db, tenant).await;
    assert!(jobs.is_empty(), "refused input wrote {} jobs", jobs.len());
    let queues = ok(db.engine.list_queues(tenant).await);
    assert!(
        queues.is_empty(),
        "refused input registered queues: {:?}",
        queues.iter().map(|q| &q.name).collect::<Vec<_>>()
    );
    let stats = ok(db.engine.queue_stats(tenant, Q).await);
    assert_eq!(stats.counts, Default::default());
    assert_eq!((stats.ready, stats.scheduled), (0, 0));
}

#[track_caller]
fn assert_field(e: &Error, field: &str) {
    match e {
        Error::Invalid { field: f, .. } | Error::TooLarge { field: f, .. } => {
            assert!(
                f.contains(field),
                "error names field {f:?}, expected {field:?}"
            )
        }
        other => panic!("expected a field error, got {other:?}"),
    }
}

/// Queue, kind, tenant and tag names outside `[A-Za-z0-9._:-]{1,128}` are
/// `invalid_argument`; names at the edges of the rule are accepted.
pub async fn bad_names_are_refused(db: &TestDb) {
    let long = "a".repeat(129);
    let bad = ["", "has space", "ünïcode", "a/b", "semi;colon", &long];
    for name in bad {
        let e = expect_invalid(db.engine.enqueue(T, job(name)).await);
        assert_field(&e, "queue");
        let e = expect_invalid(db.engine.enqueue(T, NewJob::new(Q, name, json!({}))).await);
        assert_field(&e, "kind");
        let e = expect_invalid(db.engine.enqueue(T, job(Q).tags([name])).await);
        assert_field(&e, "tags");
        expect_invalid(db.engine.enqueue(name, job(Q)).await);
    }
    assert_nothing_written(db, T).await;

    // The edges of the rule are fine (written to another tenant).
    let edge = "a".repeat(128);
    let ok_names = ["A-Za-z0-9._:-", "x", edge.as_str()];
    for name in ok_names {
        enqueue(db, "edge", NewJob::new(name, name, json!({})).tags([name])).await;
    }
    assert_eq!(all_jobs(db, "edge").await.len(), 3);
    assert_nothing_written(db, T).await;
}

/// Priorities outside −100..=100, negative delays and attempt budgets
/// outside 1..=1000 are refused; the bounds are accepted.
pub async fn bad_priority_delay_and_attempts_are_refused(db: &TestDb) {
    for p in [101, -101, i16::MAX, i16::MIN] {
        let e = expect_invalid(db.engine.enqueue(T, job(Q).priority(p)).await);
        assert_field(&e, "priority");
    }
    let e = expect_invalid(db.engine.enqueue(T, job(Q).run_at(RunAt::Delay(-1))).await);
    assert_field(&e, "delay");
    for n in [0, -1, 1_001] {
        expect_invalid(db.engine.enqueue(T, job(Q).max_attempts(n)).await);
    }
    expect_invalid(
        db.engine
            .enqueue(
                T,
                job(Q).backoff(Backoff {
                    base_ms: 10,
                    cap_ms: 5,
                }),
            )
            .await,
    );
    expect_invalid(db.engine.enqueue(T, job(Q).idempotency_key("")).await);
    expect_invalid(db.engine.enqueue(T, job(Q).unique_key("a\nb")).await);
    expect_invalid(db.engine.enqueue(T, job(Q).timeout_ms(0)).await);
    assert_nothing_written(db, T).await;

    for p in [100, -100] {
        enqueue(db, "edge", job(Q).priority(p)).await;
    }
    enqueue(db, "edge", job(Q).run_at(RunAt::Delay(0))).await;
    enqueue(db, "edge", job(Q).max_attempts(1_000)).await;
    assert_nothing_written(db, T).await;
}

/// A payload above the engine's size limit is `payload_too_large`.
pub async fn oversize_payload_is_refused(db: &TestDb) {
    let small = db.engine.clone().with_limits(Limits {
        max_payload_bytes: 100,
        ..Limits::default()
    });
    let big = NewJob::new(Q, "k", json!("x".repeat(200)));
    let e = expect_code(small.enqueue(T, big.clone()).await, "payload_too_large");
    assert!(matches!(e, Error::TooLarge { size, limit: 100, .. } if size > 100));
    assert_field(&e, "payload");
    let e = expect_code(
        small.enqueue_many(T, &[job(Q), big]).await,
        "payload_too_large",
    );
    assert_field(&e, "jobs[1].payload");
    assert_nothing_written(db, T).await;

    // A result above the limit is refused and the job stays running.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    expect_code(
        small
            .complete(T, j.id, c.lease_token, Some(json!("y".repeat(200))))
            .await,
        "payload_too_large",
    );
    assert_eq!(get(db, T, j.id).await.state, JobState::Running);
}

/// A batch of 0 or of 1 001 jobs is refused.
pub async fn bad_batch_sizes_are_refused(db: &TestDb) {
    expect_invalid(db.engine.enqueue_many(T, &[]).await);
    let batch: Vec<NewJob> = (0..1_001).map(|_| job(Q)).collect();
    expect_invalid(db.engine.enqueue_many(T, &batch).await);
    assert_nothing_written(db, T).await;
    ok(db.engine.enqueue_many(T, &batch[..1_000]).await);
    assert_eq!(ok(db.engine.queue_stats(T, Q).await).counts.queued, 1_000);
}

/// One bad entry among good ones refuses the whole batch, naming the entry.
pub async fn one_bad_entry_refuses_the_whole_batch(db: &TestDb) {
    let mut batch: Vec<NewJob> = (0..10)
        .map(|i| job(Q).idempotency_key(format!("k{i}")))
        .collect();
    batch[5].priority = 500;
    let e = expect_invalid(db.engine.enqueue_many(T, &batch).await);
    assert_field(&e, "jobs[5].priority");
    batch[5].priority = 0;
    batch[9].queue = "bad queue".into();
    let e = expect_invalid(db.engine.enqueue_many(T, &batch).await);
    assert_field(&e, "jobs[9].queue");
    assert_nothing_written(db, T).await;

    // Fixed, the same batch goes in whole: none of its keys were taken.
    batch[9].queue = Q.into();
    let out = ok(db.engine.enqueue_many(T, &batch).await);
    assert!(out.iter().all(|e| e.created));
}

/// Claims, heartbeats, failures, snoozes, queue settings, listings and bulk
/// replays with out-of-range arguments are refused and change nothing.
pub async fn bad_arguments_to_other_operations_are_refused(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let bad_claims = [
        ClaimRequest {
            limit: 0,
            ..claim_req(Q, 1)
        },
        ClaimRequest {
            limit: 1_001,
            ..claim_req(Q, 1)
        },
        ClaimRequest {
            lease_ttl_ms: Some(999),
            ..claim_req(Q, 1)
        },
        ClaimRequest {
            lease_ttl_ms: Some(-5),
            ..claim_req(Q, 1)
        },
        ClaimRequest {
            worker_id: String::new(),
            ..claim_req(Q, 1)
        },
        ClaimRequest {
            queue: "no such/queue".into(),
            ..claim_req(Q, 1)
        },
    ];
    for req in &bad_claims {
        expect_invalid(db.engine.claim(T, req).await);
    }
    assert_eq!(
        get(db, T, j.id).await.state,
        JobState::Queued,
        "a bad claim took a job"
    );

    let c = claim_id(db, T, Q, j.id).await;
    let before = get(db, T, j.id).await;
    expect_invalid(
        db.engine
            .heartbeat(
                T,
                &Heartbeat {
                    id: j.id,
                    lease_token: c.lease_token,
                    lease_ttl_ms: Some(10),
                    progress: None,
                },
            )
            .await,
    );
    expect_invalid(
        db.engine
            .fail(
                T,
                j.id,
                c.lease_token,
                Failure {
                    fatal: true,
                    cancelled: true,
                    ..Failure::default()
                },
            )
            .await,
    );
    expect_invalid(
        db.engine
            .fail(
                T,
                j.id,
                c.lease_token,
                Failure {
                    retry_after_ms: Some(-1),
                    ..Failure::default()
                },
            )
            .await,
    );
    expect_invalid(db.engine.snooze(T, j.id, c.lease_token, -1).await);
    assert_eq!(
        get(db, T, j.id).await,
        before,
        "a refused call changed the job"
    );

    expect_invalid(
        db.engine
            .configure_queue(
                T,
                Q,
                &QueueConfigPatch {
                    max_attempts: Some(0),
                    ..Default::default()
                },
            )
            .await,
    );
    expect_invalid(
        db.engine
            .configure_queue(
                T,
                Q,
                &QueueConfigPatch {
                    backoff: Some(Backoff {
                        base_ms: 2,
                        cap_ms: 1,
                    }),
                    ..Default::default()
                },
            )
            .await,
    );
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(stats.config, tether_core::QueueConfig::default());

    for limit in [0, 501] {
        expect_invalid(
            db.engine
                .list(
                    T,
                    &JobFilter {
                        limit: Some(limit),
                        ..Default::default()
                    },
                )
                .await,
        );
    }
    expect_invalid(
        db.engine
            .replay_many(
                T,
                &ReplayFilter {
                    queue: Q.into(),
                    state: JobState::Queued,
                    kind: None,
                    limit: None,
                    cursor: None,
                    expires_at: None,
                },
            )
            .await,
    );
    expect_invalid(db.engine.acquire_lease("maintenance", "n", 10).await);
    expect_invalid(db.engine.acquire_lease("bad name", "n", 10_000).await);
}

/// U+0000 in a JSON payload, result or progress is refused on every backend
/// (PostgreSQL's `jsonb` cannot store it, so no backend does); in an error
/// message it is replaced, since the failure itself must be recorded.
pub async fn nul_characters_are_refused_or_replaced(db: &TestDb) {
    let e = &db.engine;
    let bad = json!({"text": "a\u{0}b"});
    assert_field(
        &expect_invalid(e.enqueue("t", NewJob::new(Q, "k", bad.clone())).await),
        "payload",
    );
    assert_nothing_written(db, "t").await;

    enqueue(db, "t", job(Q)).await;
    let c = claim_one(db, "t", Q).await;
    let hb = Heartbeat {
        id: c.job.id,
        lease_token: c.lease_token,
        lease_ttl_ms: None,
        progress: Some(bad.clone()),
    };
    assert_field(&expect_invalid(e.heartbeat("t", &hb).await), "progress");
    assert_field(
        &expect_invalid(e.complete("t", c.job.id, c.lease_token, Some(bad)).await),
        "result",
    );
    let failed = ok(e
        .fail("t", c.job.id, c.lease_token, failure("broken\u{0}pipe"))
        .await);
    assert_eq!(failed.last_error.as_deref(), Some("broken\u{FFFD}pipe"));
    assert_eq!(get(db, "t", c.job.id).await.last_error, failed.last_error);
}

/// Absolute times outside 1970-01-01..9999-12-31 (a negative year, the year
/// 10000, a millisecond before the epoch) are refused on every backend with
/// an error naming the field (`run_at`, `expires_at`, `jobs[i].…`, a cron
/// preview's `from`), and nothing is written; the bounds themselves are
/// accepted and read back unchanged.
pub async fn out_of_range_times_are_refused(db: &TestDb) {
    use chrono::{DateTime, NaiveDate, Utc};
    let ymd = |y: i32| {
        NaiveDate::from_ymd_opt(y, 1, 1)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
    };
    let before_epoch = DateTime::<Utc>::UNIX_EPOCH - chrono::Duration::milliseconds(1);
    for bad in [ymd(-5000), ymd(0), before_epoch, ymd(10_000)] {
        let e = expect_invalid(db.engine.enqueue(T, job(Q).run_at(RunAt::At(bad))).await);
        assert_field(&e, "run_at");
        let e = expect_invalid(db.engine.enqueue(T, job(Q).expires_at(bad)).await);
        assert_field(&e, "expires_at");
        let e = expect_invalid(
            db.engine
                .enqueue_many(T, &[job(Q), job(Q).expires_at(bad)])
                .await,
        );
        assert_field(&e, "jobs[1].expires_at");
        let e = expect_invalid(tether_core::Engine::cron_preview(
            "0 * * * *",
            "UTC",
            Some(bad),
            1,
        ));
        assert_field(&e, "from");
    }
    assert_nothing_written(db, T).await;

    let last = DateTime::parse_from_rfc3339("9999-12-31T23:59:59.999Z")
        .unwrap()
        .to_utc();
    let j = enqueue(
        db,
        T,
        job(Q)
            .run_at(RunAt::At(DateTime::<Utc>::UNIX_EPOCH))
            .expires_at(last),
    )
    .await;
    let stored = get(db, T, j.id).await;
    assert_eq!(stored.run_at, DateTime::<Utc>::UNIX_EPOCH);
    assert_eq!(stored.expires_at, Some(last));
}
