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
    // The row the enqueue made has the same defaults (the migrations'
    // column defaults agree with tether_core::lifecycle).
    assert_eq!(s.config, QueueConfig::default());

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
                ..Default::default()
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
                ..Default::default()
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

/// Asserts the queue limit of 3 refused an operation.
#[track_caller]
fn limited<T: std::fmt::Debug>(r: tether_core::Result<T>) {
    let err = expect_code(r, "invalid_state");
    assert!(
        matches!(err, tether_core::Error::LimitReached { limit: 3, .. }),
        "{err:?}"
    );
}

/// The names of a tenant's queues, by name.
async fn queue_names(db: &TestDb, tenant: &str) -> Vec<String> {
    ok(db.engine.list_queues(tenant).await)
        .into_iter()
        .map(|q| q.name)
        .collect()
}

/// With a limit of 3 queues per tenant: enqueues into a fourth queue
/// (single or in a batch that also names a known one), pausing it and
/// configuring it are refused (`LimitReached`, code `invalid_state`) and
/// write nothing, while known queues take jobs and resuming an unknown
/// queue makes no row; other tenants have their own room; and concurrent
/// enqueues into new queues cannot pass the limit together.
pub async fn queue_limit_refuses_new_queues_and_writes_nothing(db: &TestDb) {
    let e = db.engine.clone().with_limits(tether_core::Limits {
        max_queues_per_tenant: 3,
        ..tether_core::Limits::default()
    });
    for q in ["a", "b"] {
        ok(e.enqueue(T, job(q)).await);
    }
    ok(e.configure_queue(
        T,
        "c",
        &QueueConfigPatch {
            max_attempts: Some(3),
            ..Default::default()
        },
    )
    .await);
    limited(e.enqueue(T, job("d")).await);
    limited(e.enqueue_many(T, &[job("a"), job("d")]).await);
    limited(e.pause(T, "d").await);
    limited(
        e.configure_queue(
            T,
            "d",
            &QueueConfigPatch {
                max_attempts: Some(2),
                ..Default::default()
            },
        )
        .await,
    );
    assert!(!ok(e.resume(T, "d").await).paused);
    assert_eq!(queue_names(db, T).await, ["a", "b", "c"]);
    assert!(jobs_in(db, T, "d").await.is_empty());
    assert_eq!(
        jobs_in(db, T, "a").await.len(),
        1,
        "the refused batch wrote nothing"
    );
    // Known queues still work.
    ok(e.enqueue_many(T, &[job("a"), job("b"), job("c")]).await);
    ok(e.pause(T, "a").await);
    ok(e.resume(T, "a").await);
    // Another tenant has its own three.
    for q in ["d", "e", "f"] {
        ok(e.enqueue(T2, job(q)).await);
    }
    limited(e.enqueue(T2, job("g")).await);

    // Eight enqueues into eight new queues at once: exactly three pass.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let e = e.clone();
            tokio::spawn(async move { e.enqueue("racing", job(&format!("q{i}"))).await })
        })
        .collect();
    let mut passed = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => passed += 1,
            Err(err) => assert_eq!(err.code(), "invalid_state", "{err}"),
        }
    }
    assert_eq!(passed, 3);
    assert_eq!(queue_names(db, "racing").await.len(), 3);
    assert_eq!(all_jobs(db, "racing").await.len(), 3);
}

/// With a limit of 2 schedules per tenant, a third is refused
/// (`LimitReached`, code `invalid_state`) and not created; deleting one
/// makes room; other tenants have their own room; concurrent creations
/// cannot pass the limit together.
pub async fn schedule_limit_refuses_more_schedules(db: &TestDb) {
    use tether_core::ScheduleSpec;
    let e = db.engine.clone().with_limits(tether_core::Limits {
        max_schedules_per_tenant: 2,
        ..tether_core::Limits::default()
    });
    let spec = |name: &str| ScheduleSpec::new(name, "0 * * * *", Q, "k");
    let first = ok(e.create_schedule(T, &spec("s1")).await);
    ok(e.create_schedule(T, &spec("s2")).await);
    let err = expect_code(e.create_schedule(T, &spec("s3")).await, "invalid_state");
    assert!(matches!(
        err,
        tether_core::Error::LimitReached { limit: 2, .. }
    ));
    assert_eq!(ok(e.list_schedules(T).await).len(), 2);
    ok(e.create_schedule(T2, &spec("s1")).await);
    ok(e.delete_schedule(T, first.id).await);
    ok(e.create_schedule(T, &spec("s3")).await);

    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let e = e.clone();
            let s = spec(&format!("r{i}"));
            tokio::spawn(async move { e.create_schedule("racing", &s).await })
        })
        .collect();
    let mut passed = 0;
    for t in tasks {
        if t.await.expect("task").is_ok() {
            passed += 1;
        }
    }
    assert_eq!(passed, 2);
    assert_eq!(ok(e.list_schedules("racing").await).len(), 2);
}

/// Maintenance removes queue rows that hold nothing: no job in any state,
/// not paused, default settings (also settings set back to the defaults),
/// at most `batch` a pass; queues with jobs (of any state), paused ones and
/// configured ones stay. A removed queue reads the same and comes back with
/// its next job; a queue freed this way gives room under the limit back.
pub async fn empty_queues_are_removed_and_others_kept(db: &TestDb) {
    // "emptied": its only job finished and was pruned.
    let j = enqueue(db, T, job("emptied")).await;
    let c = claim_id(db, T, "emptied", j.id).await;
    ok(db.engine.complete(T, j.id, c.lease_token, None).await);
    assert_eq!(ok(db.engine.prune_finished(0, 100).await), 1);
    ok(db.engine.pause(T, "paused").await);
    ok(db.engine.pause(T, "resumed").await);
    ok(db.engine.resume(T, "resumed").await);
    let custom = QueueConfigPatch {
        max_attempts: Some(3),
        ..Default::default()
    };
    ok(db.engine.configure_queue(T, "configured", &custom).await);
    let defaults = QueueConfig::default();
    let back = QueueConfigPatch {
        max_attempts: Some(defaults.max_attempts),
        backoff: Some(defaults.backoff),
        default_lease_ttl_ms: Some(defaults.default_lease_ttl_ms),
        // Limits set and removed again leave the row at its defaults.
        max_running: Some(None),
        rate_limit: Some(None),
        key_max_running: Some(None),
        fair: Some(false),
    };
    ok(db.engine.configure_queue(T, "defaults", &back).await);
    enqueue(db, T, job("busy")).await;
    let d = enqueue(db, T, job("dead")).await;
    let c = claim_id(db, T, "dead", d.id).await;
    ok(db.engine.fail(T, d.id, c.lease_token, fatal("x")).await);
    enqueue(db, T2, job("emptied")).await;
    assert_eq!(
        queue_names(db, T).await,
        [
            "busy",
            "configured",
            "dead",
            "defaults",
            "emptied",
            "paused",
            "resumed"
        ]
    );

    assert_eq!(
        ok(db.engine.prune_empty_queues(2).await),
        2,
        "bounded by batch"
    );
    assert_eq!(ok(db.engine.prune_empty_queues(100).await), 1);
    assert_eq!(ok(db.engine.prune_empty_queues(100).await), 0);
    assert_eq!(
        queue_names(db, T).await,
        ["busy", "configured", "dead", "paused"]
    );
    assert_eq!(
        queue_names(db, T2).await,
        ["emptied"],
        "a queue with a job stays"
    );
    let gone = ok(db.engine.queue_stats(T, "emptied").await);
    assert_eq!((gone.paused, gone.config), (false, defaults));
    enqueue(db, T, job("emptied")).await;
    assert!(queue_names(db, T).await.contains(&"emptied".to_owned()));

    // At the limit, a removed queue makes room for a new one.
    let e = db.engine.clone().with_limits(tether_core::Limits {
        max_queues_per_tenant: 5,
        ..tether_core::Limits::default()
    });
    expect_code(e.enqueue(T, job("new")).await, "invalid_state");
    ok(e.resume(T, "paused").await);
    assert_eq!(ok(db.engine.prune_empty_queues(100).await), 1);
    ok(e.enqueue(T, job("new")).await);
}

/// Removal passes racing with enqueues into queues that keep becoming empty
/// never leave a job without its queue row: every queue that holds a job is
/// listed, and the job's queue settings read as they should.
pub async fn queue_removal_racing_enqueues_keeps_every_used_queue(db: &TestDb) {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let pruner = {
        let (e, stop) = (db.engine.clone(), stop.clone());
        tokio::spawn(async move {
            let mut removed = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                removed += e.prune_empty_queues(1_000).await.expect("prune");
                tokio::task::yield_now().await;
            }
            removed
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let e = db.engine.clone();
            tokio::spawn(async move {
                let queue = format!("race-{w}");
                for _ in 0..30 {
                    let j = e.enqueue(T, job(&queue)).await.expect("enqueue").job;
                    let req = claim_req(&queue, 1);
                    let c = e.claim(T, &req).await.expect("claim").remove(0);
                    assert_eq!(c.job.id, j.id);
                    e.complete(T, j.id, c.lease_token, None)
                        .await
                        .expect("complete");
                    e.prune_finished(0, 1_000).await.expect("prune finished");
                }
                // The last one stays queued.
                e.enqueue(T, job(&queue)).await.expect("enqueue").job.id
            })
        })
        .collect();
    let mut left = Vec::new();
    for w in workers {
        left.push(w.await.expect("worker"));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let removed = pruner.await.expect("pruner");
    ok(db.engine.prune_empty_queues(1_000).await);
    let names = queue_names(db, T).await;
    for id in left {
        let j = get(db, T, id).await;
        assert!(
            names.contains(&j.queue),
            "{} lost its row ({names:?})",
            j.queue
        );
    }
    assert_eq!(names.len(), 4);
    // The pass did remove queues along the way (not a test that cannot fail).
    assert!(removed > 0, "no queue was ever found empty");
}
