//! Queue stats and settings: the numbers an operator and an autoscaler read,
//! and per-queue settings that new jobs copy at enqueue.

use std::time::Duration;

use tether_core::{Backoff, QueueConfig, QueueConfigPatch, RunAt};

use super::support::*;
use crate::TestDb;

/// Stats count jobs per state, split queued into ready and scheduled, give
/// the age of the oldest ready job (0 when none), count lapsed leases, and
/// show the config; a never-used queue reads zeros and the defaults.
pub async fn queue_stats_report_counts_ready_scheduled_age_and_leases(db: &TestDb) {
    let empty = ok(db.engine.queue_stats(T, "never-used").await);
    assert_eq!(empty.name, "never-used");
    assert!(!empty.paused);
    assert_eq!(empty.counts, Default::default());
    assert_eq!(
        (
            empty.ready,
            empty.scheduled,
            empty.oldest_ready_age_ms,
            empty.expired_leases
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(empty.config, QueueConfig::default());
    assert_eq!(empty.config.max_attempts, 5);
    assert_eq!(
        empty.config.backoff,
        Backoff {
            base_ms: 1_000,
            cap_ms: 3_600_000
        }
    );
    assert_eq!(empty.config.default_lease_ttl_ms, 30_000);

    // Only scheduled jobs: nothing ready, age 0.
    let d1 = enqueue(db, T, job(Q).run_at(RunAt::Delay(3_600_000))).await;
    enqueue(db, T, job(Q).run_at(RunAt::Delay(3_600_000))).await;
    let s = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((s.ready, s.scheduled, s.oldest_ready_age_ms), (0, 2, 0));

    let old = enqueue(db, T, job(Q).priority(-1)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r1 = enqueue(db, T, job(Q)).await;
    let r2 = enqueue(db, T, job(Q)).await;
    let r3 = enqueue(db, T, job(Q)).await;
    let s = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((s.counts.queued, s.ready, s.scheduled), (6, 4, 2));
    assert!(
        (250..10_000).contains(&s.oldest_ready_age_ms),
        "oldest ready job is ~300 ms old, stats say {} ms",
        s.oldest_ready_age_ms
    );

    // Claim r1, r2, r3 (priority 0 before the older -1 job).
    let claimed = claim(db, T, Q, 3).await;
    let mut got: Vec<_> = claimed.iter().map(|c| c.job.id).collect();
    got.sort();
    let mut want = vec![r1.id, r2.id, r3.id];
    want.sort();
    assert_eq!(got, want);
    let token = |id| claimed.iter().find(|c| c.job.id == id).unwrap().lease_token;
    ok(db.engine.complete(T, r1.id, token(r1.id), None).await);
    db.lapse_lease(r2.id).await;
    ok(db.engine.fail(T, r3.id, token(r3.id), fatal("x")).await);
    ok(db.engine.cancel(T, d1.id).await);

    let s = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(s.counts.queued, 2, "old + one delayed");
    assert_eq!(s.counts.running, 1);
    assert_eq!(s.counts.succeeded, 1);
    assert_eq!(s.counts.failed, 1);
    assert_eq!(s.counts.cancelled, 1);
    assert_eq!((s.ready, s.scheduled), (1, 1));
    assert_eq!(s.expired_leases, 1);
    assert!(s.oldest_ready_age_ms >= 250);
    claim_id(db, T, Q, old.id).await;
    let s = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((s.ready, s.oldest_ready_age_ms), (0, 0));
}

/// A queue's max_attempts and backoff are copied into each job at enqueue
/// (a job's own setting wins); later changes affect later jobs only, and
/// the copied budget is what the reaper enforces.
pub async fn queue_config_is_copied_at_enqueue(db: &TestDb) {
    let b1 = Backoff {
        base_ms: 100,
        cap_ms: 200,
    };
    let s = ok(db
        .engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                max_attempts: Some(2),
                backoff: Some(b1),
                default_lease_ttl_ms: None,
            },
        )
        .await);
    assert_eq!(s.config.max_attempts, 2);
    assert_eq!(s.config.backoff, b1);
    assert_eq!(s.config.default_lease_ttl_ms, 30_000, "unset fields stay");

    let j1 = enqueue(db, T, job(Q)).await;
    assert_eq!((j1.max_attempts, j1.backoff), (2, b1));
    let own = enqueue(
        db,
        T,
        job(Q).max_attempts(9).backoff(Backoff {
            base_ms: 1,
            cap_ms: 2,
        }),
    )
    .await;
    assert_eq!(own.max_attempts, 9);
    assert_eq!(own.backoff.cap_ms, 2);
    ok(db.engine.cancel(T, own.id).await);

    let b2 = Backoff {
        base_ms: 20_000,
        cap_ms: 40_000,
    };
    let s = ok(db
        .engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                max_attempts: Some(7),
                backoff: Some(b2),
                default_lease_ttl_ms: Some(5_000),
            },
        )
        .await);
    assert_eq!(s.config.max_attempts, 7);
    assert_eq!(ok(db.engine.queue_stats(T, Q).await).config, s.config);
    let j2 = enqueue(db, T, job(Q).priority(-1)).await;
    assert_eq!((j2.max_attempts, j2.backoff), (7, b2));
    let j1_now = get(db, T, j1.id).await;
    assert_eq!(
        (j1_now.max_attempts, j1_now.backoff),
        (2, b1),
        "old job changed"
    );

    // j1 still fails for good after 2 lapses.
    for expected in ["queued", "failed"] {
        claim_id(db, T, Q, j1.id).await;
        db.lapse_lease(j1.id).await;
        ok(db.engine.reap_lapsed_leases(100).await);
        assert_eq!(get(db, T, j1.id).await.state.as_str(), expected);
    }
    // j2 retries with its own (copied) backoff.
    let c = claim_id(db, T, Q, j2.id).await;
    let f = ok(db.engine.fail(T, j2.id, c.lease_token, failure("x")).await);
    let delay = ms_between(f.run_at, f.updated_at);
    assert!(
        (20_000.0 - 2.0..30_000.0 + 2.0).contains(&delay),
        "queue backoff base 20 s gave {delay} ms"
    );
    // Other queues and tenants keep the defaults.
    assert_eq!(
        ok(db.engine.queue_stats(T2, Q).await).config,
        QueueConfig::default()
    );
    assert_eq!(enqueue(db, T, job("other")).await.max_attempts, 5);
}

/// list_queues shows every queue the tenant enqueued to or configured, by
/// name, with its stats.
pub async fn list_queues_shows_every_used_queue(db: &TestDb) {
    enqueue(db, T, job("q-b")).await;
    enqueue(db, T, job("q-a")).await;
    enqueue(db, T, job("q-a")).await;
    ok(db
        .engine
        .configure_queue(
            T,
            "q-c",
            &QueueConfigPatch {
                max_attempts: Some(3),
                ..Default::default()
            },
        )
        .await);
    ok(db.engine.pause(T, "q-d").await);
    enqueue(db, T2, job("q-z")).await;
    let qs = ok(db.engine.list_queues(T).await);
    let names: Vec<&str> = qs.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["q-a", "q-b", "q-c", "q-d"]);
    assert_eq!(qs[0].counts.queued, 2);
    assert_eq!(qs[1].counts.queued, 1);
    assert_eq!(qs[2].config.max_attempts, 3);
    assert!(qs[3].paused);
}
