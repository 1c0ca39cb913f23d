//! Invariant 6, nothing lost, nothing doubled: idempotency keys and unique
//! keys return the existing job instead of a second one, also under
//! concurrency and inside one batch.

use std::collections::HashSet;

use serde_json::json;
use tether_core::{JobState, NewJob};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// An idempotency key returns the job it made, whatever its state (queued,
/// running, succeeded, failed), unchanged, with `created: false`.
pub async fn idempotency_key_returns_existing_job_in_any_state(db: &TestDb) {
    let first = enqueue(
        db,
        T,
        NewJob::new(Q, "k", json!({"v": 1})).idempotency_key("idem-1"),
    )
    .await;
    assert_eq!(first.idempotency_key.as_deref(), Some("idem-1"));

    let check = |label: &'static str, state: JobState| {
        let first = first.clone();
        async move {
            let again = ok(db
                .engine
                .enqueue(
                    T,
                    NewJob::new("other-queue", "other", json!({"v": 2}))
                        .idempotency_key("idem-1")
                        .priority(50),
                )
                .await);
            assert!(!again.created, "{label}: a second job was created");
            assert_eq!(again.job.id, first.id, "{label}");
            assert_eq!(again.job.state, state, "{label}");
            assert_eq!(again.job.payload, json!({"v": 1}), "{label}");
            assert_eq!(again.job.queue, Q, "{label}");
            assert_eq!(again.job.priority, 0, "{label}");
        }
    };
    check("queued", JobState::Queued).await;
    let c = claim_id(db, T, Q, first.id).await;
    check("running", JobState::Running).await;
    ok(db.engine.complete(T, first.id, c.lease_token, None).await);
    check("succeeded", JobState::Succeeded).await;

    let dead = enqueue(db, T, job(Q).idempotency_key("idem-2")).await;
    let c = claim_id(db, T, Q, dead.id).await;
    ok(db.engine.fail(T, dead.id, c.lease_token, fatal("x")).await);
    let again = ok(db.engine.enqueue(T, job(Q).idempotency_key("idem-2")).await);
    assert!(!again.created);
    assert_eq!((again.job.id, again.job.state), (dead.id, JobState::Failed));

    assert_eq!(all_jobs(db, T).await.len(), 2);
    assert_eq!(jobs_in(db, T, "other-queue").await.len(), 0);
}

/// A unique key returns the active (queued or running) job holding it, and
/// allows a new job once that one finished (succeeded or cancelled).
pub async fn unique_key_dedupes_only_against_active_jobs(db: &TestDb) {
    let first = enqueue(db, T, job(Q).unique_key("u")).await;
    assert_eq!(first.unique_key.as_deref(), Some("u"));
    let dup = ok(db
        .engine
        .enqueue(T, NewJob::new(Q, "k", json!({"dup": 1})).unique_key("u"))
        .await);
    assert!(!dup.created);
    assert_eq!(dup.job.id, first.id);
    assert_eq!(dup.job.payload, json!({}));

    let c = claim_id(db, T, Q, first.id).await;
    let dup = ok(db.engine.enqueue(T, job(Q).unique_key("u")).await);
    assert!(!dup.created, "a running job holds its unique key");
    assert_eq!(dup.job.id, first.id);
    assert_eq!(dup.job.state, JobState::Running);

    ok(db.engine.complete(T, first.id, c.lease_token, None).await);
    let second = enqueue(db, T, job(Q).unique_key("u")).await;
    assert_ne!(second.id, first.id);

    ok(db.engine.cancel(T, second.id).await);
    let third = enqueue(db, T, job(Q).unique_key("u")).await;
    assert_ne!(third.id, second.id);
    let dup = ok(db.engine.enqueue(T, job(Q).unique_key("u")).await);
    assert_eq!((dup.created, dup.job.id), (false, third.id));
    assert_eq!(all_jobs(db, T).await.len(), 3);
}

/// When the idempotency key and the unique key lead to different jobs, the
/// idempotency key wins.
pub async fn idempotency_key_wins_over_unique_key(db: &TestDb) {
    let holder = enqueue(db, T, job(Q).unique_key("u")).await;
    let keyed = enqueue(db, T, job(Q).idempotency_key("i")).await;
    let got = ok(db
        .engine
        .enqueue(T, job(Q).idempotency_key("i").unique_key("u"))
        .await);
    assert!(!got.created);
    assert_eq!(got.job.id, keyed.id, "idempotency key must win");
    // An unknown idempotency key with a held unique key: the unique holder.
    let got = ok(db
        .engine
        .enqueue(T, job(Q).idempotency_key("fresh").unique_key("u"))
        .await);
    assert!(!got.created);
    assert_eq!(got.job.id, holder.id);
    assert_eq!(all_jobs(db, T).await.len(), 2);
}

async fn concurrent_enqueues(db: &TestDb, make: fn() -> NewJob) {
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let engine = db.engine.clone();
        tasks.push(tokio::spawn(async move { engine.enqueue(T, make()).await }));
    }
    let mut created = 0;
    let mut ids = HashSet::<Uuid>::new();
    for t in tasks {
        let e = ok(t.await.expect("task panicked"));
        created += usize::from(e.created);
        ids.insert(e.job.id);
    }
    assert_eq!(created, 1, "exactly one of 20 concurrent enqueues creates");
    assert_eq!(ids.len(), 1, "all 20 must get the same job");
    assert_eq!(all_jobs(db, T).await.len(), 1);
}

/// 20 concurrent enqueues with one unique key: exactly one job is created,
/// all get it.
pub async fn concurrent_enqueues_with_one_unique_key_create_one_job(db: &TestDb) {
    concurrent_enqueues(db, || job(Q).unique_key("race")).await;
}

/// 20 concurrent enqueues with one idempotency key: exactly one job is
/// created, all get it.
pub async fn concurrent_enqueues_with_one_idempotency_key_create_one_job(db: &TestDb) {
    concurrent_enqueues(db, || job(Q).idempotency_key("race")).await;
}

/// Keys repeated inside one batch resolve to the first entry carrying them;
/// answers come in request order.
pub async fn duplicates_inside_one_batch_resolve_to_the_first(db: &TestDb) {
    let batch = vec![
        NewJob::new(Q, "k", json!(0)).idempotency_key("i"),
        NewJob::new(Q, "k", json!(1)).idempotency_key("i"),
        NewJob::new(Q, "k", json!(2)),
        NewJob::new(Q, "k", json!(3)).unique_key("u"),
        NewJob::new(Q, "k", json!(4)).unique_key("u"),
        NewJob::new(Q, "k", json!(5)).idempotency_key("i"),
        NewJob::new(Q, "k", json!(6)),
    ];
    let out = ok(db.engine.enqueue_many(T, &batch).await);
    assert_eq!(out.len(), 7);
    let created: Vec<bool> = out.iter().map(|e| e.created).collect();
    assert_eq!(
        created,
        vec![true, false, true, true, false, false, true],
        "created flags"
    );
    let payloads: Vec<_> = out.iter().map(|e| e.job.payload.clone()).collect();
    assert_eq!(
        payloads,
        vec![
            json!(0),
            json!(0),
            json!(2),
            json!(3),
            json!(3),
            json!(0),
            json!(6)
        ]
    );
    assert_eq!(out[1].job.id, out[0].job.id);
    assert_eq!(out[5].job.id, out[0].job.id);
    assert_eq!(out[4].job.id, out[3].job.id);
    let distinct: HashSet<Uuid> = out.iter().map(|e| e.job.id).collect();
    assert_eq!(distinct.len(), 4);
    assert_eq!(all_jobs(db, T).await.len(), 4);

    // A later batch hitting existing keys creates only the new ones.
    let out = ok(db
        .engine
        .enqueue_many(
            T,
            &[
                job(Q).unique_key("u"),
                job(Q).idempotency_key("j"),
                job(Q).idempotency_key("i"),
            ],
        )
        .await);
    let created: Vec<bool> = out.iter().map(|e| e.created).collect();
    assert_eq!(created, vec![false, true, false]);
    assert_eq!(all_jobs(db, T).await.len(), 5);
}

/// A batch resolves its keys in order, as if its entries were enqueued one
/// after the other: an entry deduplicated by its unique key against an
/// existing job returns that job, even when a later entry of the same batch
/// carries the same idempotency key; that later entry, finding no job with
/// the key, creates one.
pub async fn batch_keys_resolve_in_order_against_existing_jobs(db: &TestDb) {
    let a = enqueue(db, T, NewJob::new(Q, "k", json!("A")).unique_key("u")).await;
    let out = ok(db
        .engine
        .enqueue_many(
            T,
            &[
                NewJob::new(Q, "k", json!("first"))
                    .unique_key("u")
                    .idempotency_key("i"),
                NewJob::new(Q, "k", json!("second")).idempotency_key("i"),
            ],
        )
        .await);
    assert!(!out[0].created, "the first entry's unique key is held by A");
    assert_eq!(
        (out[0].job.id, &out[0].job.payload),
        (a.id, &json!("A")),
        "the first entry must resolve to the job holding its unique key"
    );
    assert!(
        out[1].created,
        "no job carries idempotency key i yet: the second entry creates one"
    );
    assert_ne!(out[1].job.id, a.id);
    assert_eq!(out[1].job.payload, json!("second"));
    assert_eq!(out[1].job.idempotency_key.as_deref(), Some("i"));
    let later = ok(db.engine.enqueue(T, job(Q).idempotency_key("i")).await);
    assert_eq!((later.created, later.job.id), (false, out[1].job.id));
    assert_eq!(all_jobs(db, T).await.len(), 2);
}

/// Group commit: single enqueues that arrive together share commits, yet
/// each caller gets its own answer: distinct jobs are each created once,
/// callers with one idempotency key or one unique key get the one job it
/// made, and every job is durable when its caller hears of it.
pub async fn single_enqueues_share_commits_and_keep_their_own_answers(db: &TestDb) {
    // A fresh engine of its own, so only these enqueues are counted.
    let engine = db.engine.clone().with_limits(*db.engine.limits());
    let calls: Vec<NewJob> = (0..40)
        .map(|i| match i % 4 {
            0 => NewJob::new(Q, "k", json!({"i": i})).idempotency_key("grouped"),
            1 => NewJob::new(Q, "k", json!({"i": i})).unique_key("grouped-u"),
            _ => NewJob::new(Q, "k", json!({"i": i})),
        })
        .collect();
    // One task polls all forty in turn without yielding, so they arrive
    // while the first writes are in flight.
    let answers =
        futures_util::future::join_all(calls.iter().map(|j| engine.enqueue(T, j.clone()))).await;
    let answers: Vec<_> = answers.into_iter().map(ok).collect();
    let stats = engine.group_commit_stats();
    assert_eq!(stats.jobs, 40, "every single enqueue went through a group");
    assert!(
        stats.groups < 40,
        "no two enqueues shared a commit: {stats:?}"
    );

    let by = |rem: usize| -> Vec<&tether_core::Enqueued> {
        answers
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 4 == rem)
            .map(|(_, a)| a)
            .collect()
    };
    for (rem, label) in [(0, "idempotency key"), (1, "unique key")] {
        let same = by(rem);
        assert_eq!(
            same.iter().filter(|a| a.created).count(),
            1,
            "{label}: one created"
        );
        let ids: HashSet<Uuid> = same.iter().map(|a| a.job.id).collect();
        assert_eq!(ids.len(), 1, "{label}: every caller got the one job");
    }
    let plain: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 >= 2)
        .collect();
    assert!(plain.iter().all(|(_, a)| a.created));
    for (i, a) in &plain {
        assert_eq!(
            a.job.payload,
            json!({"i": i}),
            "each caller got its own job"
        );
        assert_eq!(
            get(db, T, a.job.id).await.id,
            a.job.id,
            "answered means stored"
        );
    }
    assert_eq!(all_jobs(db, T).await.len(), 2 + plain.len());
}

/// Group commit: when one member of a group cannot be written (its queue
/// would pass the tenant's queue limit), only that caller gets the error;
/// the others in its group are written and answered as if alone.
pub async fn a_group_member_that_fails_fails_alone(db: &TestDb) {
    let engine = db.engine.clone().with_limits(tether_core::Limits {
        max_queues_per_tenant: 1,
        ..*db.engine.limits()
    });
    ok(engine.enqueue(T, job(Q)).await);
    let calls: Vec<NewJob> = (0..12)
        .map(|i| match i {
            3 => job("past-the-limit-1"),
            8 => job("past-the-limit-2"),
            _ => NewJob::new(Q, "k", json!({"i": i})),
        })
        .collect();
    let answers =
        futures_util::future::join_all(calls.iter().map(|j| engine.enqueue(T, j.clone()))).await;
    assert!(
        engine.group_commit_stats().groups < 13,
        "no two enqueues shared a commit"
    );
    for (i, answer) in answers.into_iter().enumerate() {
        if i == 3 || i == 8 {
            let e = expect_code(answer, "invalid_state");
            assert!(
                matches!(e, tether_core::Error::LimitReached { .. }),
                "{e:?}"
            );
        } else {
            let a = ok(answer);
            assert!(a.created);
            assert_eq!(a.job.payload, json!({"i": i}));
        }
    }
    assert_eq!(jobs_in(db, T, Q).await.len(), 11);
}
