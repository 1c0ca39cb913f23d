//! Invariant 13, tenants are walls: another tenant's job does not exist for
//! you, in any operation, listing or count.

use serde_json::json;
use tether_core::{Heartbeat, JobState, ReplayFilter};

use super::support::*;
use crate::TestDb;

/// Tenant B gets `JobNotFound` for A's job from get, events, cancel, replay,
/// heartbeat, complete, fail and snooze (even with A's valid token), and
/// A's job is untouched.
pub async fn tenant_cannot_see_or_touch_another_tenants_job(db: &TestDb) {
    let running = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, running.id).await;
    let dead = enqueue(db, T, job(Q)).await;
    let cd = claim_id(db, T, Q, dead.id).await;
    ok(db.engine.fail(T, dead.id, cd.lease_token, fatal("x")).await);
    let before_running = get(db, T, running.id).await;
    let before_dead = get(db, T, dead.id).await;
    let events_before = ok(db.engine.events(T, running.id).await).len();

    for id in [running.id, dead.id] {
        expect_not_found(db.engine.get(T2, id).await);
        expect_not_found(db.engine.events(T2, id).await);
        expect_not_found(db.engine.cancel(T2, id).await);
        expect_not_found(db.engine.replay(T2, id).await);
    }
    let t = c.lease_token;
    expect_not_found(
        db.engine
            .heartbeat(
                T2,
                &Heartbeat {
                    id: running.id,
                    lease_token: t,
                    lease_ttl_ms: None,
                    progress: Some(json!("theirs")),
                },
            )
            .await,
    );
    expect_not_found(db.engine.complete(T2, running.id, t, None).await);
    expect_not_found(db.engine.fail(T2, running.id, t, fatal("x")).await);
    expect_not_found(db.engine.snooze(T2, running.id, t, 0).await);
    let items = [tether_core::Completion {
        id: running.id,
        lease_token: t,
        result: None,
    }];
    let answers = ok(db.engine.complete_many(T2, &items).await);
    assert_eq!(answers.len(), 1);
    assert_eq!(
        answers[0].as_ref().map_err(|e| e.code().as_str()),
        Err("not_found")
    );

    assert_eq!(get(db, T, running.id).await, before_running);
    assert_eq!(get(db, T, dead.id).await, before_dead);
    assert_eq!(
        ok(db.engine.events(T, running.id).await).len(),
        events_before,
        "another tenant's calls left events on the job"
    );
    let replayed = ok(db
        .engine
        .replay_many(
            T2,
            &ReplayFilter {
                queue: Q.into(),
                state: JobState::Failed,
                kind: None,
                limit: None,
                cursor: None,
                expires_at: None,
            },
        )
        .await);
    assert_eq!(replayed.replayed, 0);
    assert_eq!(get(db, T, dead.id).await.state, JobState::Failed);
    // A's own token still works for A.
    ok(db.engine.complete(T, running.id, t, None).await);
}

/// B's listings, stats and claims do not include A's jobs or queues.
pub async fn tenant_listings_and_stats_are_separate(db: &TestDb) {
    let a1 = enqueue(db, T, job(Q).tags(["x"])).await;
    enqueue(db, T, job("a-only")).await;
    let b1 = enqueue(db, T2, job(Q)).await;

    let b_jobs: Vec<_> = all_jobs(db, T2).await.into_iter().map(|j| j.id).collect();
    assert_eq!(b_jobs, vec![b1.id]);
    assert_eq!(jobs_in(db, T2, "a-only").await.len(), 0);
    assert_eq!(all_jobs(db, T).await.len(), 2);

    let b_stats = ok(db.engine.queue_stats(T2, Q).await);
    assert_eq!(b_stats.counts.queued, 1);
    assert_eq!(
        ok(db.engine.queue_stats(T2, "a-only").await).counts.queued,
        0
    );
    let b_queues: Vec<String> = ok(db.engine.list_queues(T2).await)
        .into_iter()
        .map(|q| q.name)
        .collect();
    assert_eq!(b_queues, vec![Q.to_owned()]);

    let got: Vec<_> = claim(db, T2, Q, 10)
        .await
        .into_iter()
        .map(|c| c.job.id)
        .collect();
    assert_eq!(got, vec![b1.id]);
    claim_none(db, T2, Q).await;
    assert_eq!(get(db, T, a1.id).await.state, JobState::Queued);
    claim_id(db, T, Q, a1.id).await;
}

/// The same idempotency key, or unique key, in two tenants makes two jobs.
pub async fn same_keys_in_two_tenants_make_two_jobs(db: &TestDb) {
    let a = enqueue(db, T, job(Q).idempotency_key("k")).await;
    let b = enqueue(db, T2, job(Q).idempotency_key("k")).await;
    assert_ne!(a.id, b.id);
    assert_eq!(b.tenant, T2);
    let ua = enqueue(db, T, job(Q).unique_key("u")).await;
    let ub = enqueue(db, T2, job(Q).unique_key("u")).await;
    assert_ne!(ua.id, ub.id);
    // And within each tenant the keys still dedupe.
    let again = ok(db.engine.enqueue(T2, job(Q).idempotency_key("k")).await);
    assert_eq!((again.created, again.job.id), (false, b.id));
    let again = ok(db.engine.enqueue(T, job(Q).unique_key("u")).await);
    assert_eq!((again.created, again.job.id), (false, ua.id));
}
