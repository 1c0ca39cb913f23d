//! Invariant 1, one owner: a claim is atomic, hands out at most N jobs, in
//! the documented order, only ready jobs of the asked queue and tenant.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use chrono::{Duration, Utc};
use serde_json::json;
use tether_core::{ClaimedJob, Completion, Job, NewJob, RunAt};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// 8 concurrent claimers, each looping "claim 50, complete them all" over
/// 10 000 jobs: every job is claimed exactly once, every token is distinct,
/// all end succeeded and none is left.
pub async fn one_owner_under_eight_concurrent_claimers(db: &TestDb) {
    const JOBS: usize = 10_000;
    for chunk in 0..JOBS / 1000 {
        let batch: Vec<NewJob> = (0..1000)
            .map(|i| NewJob::new(Q, "k", json!({ "n": chunk * 1000 + i })))
            .collect();
        let out = ok(db.engine.enqueue_many(T, &batch).await);
        assert_eq!(out.len(), 1000);
        assert!(out.iter().all(|e| e.created));
    }

    let claims: Arc<Mutex<HashMap<Uuid, usize>>> = Arc::default();
    let tokens: Arc<Mutex<HashSet<Uuid>>> = Arc::default();
    let mut tasks = Vec::new();
    for w in 0..8 {
        let engine = db.engine.clone();
        let claims = claims.clone();
        let tokens = tokens.clone();
        tasks.push(tokio::spawn(async move {
            let mut req = claim_req(Q, 50);
            req.worker_id = format!("worker-{w}");
            loop {
                let got = ok(engine.claim(T, &req).await);
                assert!(got.len() <= 50, "claim of 50 returned {}", got.len());
                if got.is_empty() {
                    break;
                }
                {
                    let mut claims = claims.lock().unwrap();
                    let mut tokens = tokens.lock().unwrap();
                    for c in &got {
                        assert_eq!(c.job.state, tether_core::JobState::Running);
                        assert_eq!(c.job.attempt, 1, "job {} claimed twice", c.job.id);
                        *claims.entry(c.job.id).or_default() += 1;
                        assert!(
                            tokens.insert(c.lease_token.0),
                            "token {} handed out twice",
                            c.lease_token
                        );
                    }
                }
                let items: Vec<Completion> = got.iter().map(ClaimedJob::success).collect();
                let answers = ok(engine.complete_many(T, &items).await);
                assert_eq!(answers.len(), items.len());
                for (item, answer) in items.iter().zip(answers) {
                    if let Err(e) = answer {
                        panic!("completing {} failed: {e}", item.id);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("claimer task panicked");
    }
    let claims = claims.lock().unwrap().clone();
    assert_eq!(claims.len(), JOBS, "not every job was claimed");
    let doubled: Vec<_> = claims.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        doubled.is_empty(),
        "jobs claimed more than once: {doubled:?}"
    );

    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(stats.counts.succeeded, JOBS as i64);
    assert_eq!(stats.counts.queued, 0);
    assert_eq!(stats.counts.running, 0);
    assert_eq!(stats.counts.failed, 0);
    claim_none(db, T, Q).await;
}

/// A claim of N returns at most N jobs, and exactly min(N, ready).
pub async fn claim_returns_at_most_limit_jobs(db: &TestDb) {
    let batch: Vec<NewJob> = (0..7).map(|_| job(Q)).collect();
    ok(db.engine.enqueue_many(T, &batch).await);
    assert_eq!(claim(db, T, Q, 3).await.len(), 3);
    assert_eq!(claim(db, T, Q, 1).await.len(), 1);
    assert_eq!(claim(db, T, Q, 10).await.len(), 3);
    assert_eq!(claim(db, T, Q, 10).await.len(), 0);
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(stats.counts.running, 7);
    assert_eq!(stats.counts.queued, 0);
}

/// Jobs are claimed by priority (high first), then run_at, then id.
pub async fn claim_order_is_priority_desc_run_at_id(db: &TestDb) {
    let base = Utc::now() - Duration::seconds(60);
    let at = |s: i64| RunAt::At(base + Duration::seconds(s));
    // Enqueued in an order that differs from the claim order.
    let specs: Vec<NewJob> = vec![
        job(Q).priority(0).run_at(at(3)),
        job(Q).priority(5).run_at(at(9)),
        job(Q).priority(-3).run_at(at(1)),
        job(Q).priority(5).run_at(at(2)),
        job(Q).priority(100).run_at(at(20)),
        job(Q).priority(0).run_at(at(3)),
        job(Q).priority(5).run_at(at(2)),
        job(Q).priority(0),
        job(Q).priority(-100).run_at(at(0)),
        job(Q).priority(0).run_at(at(1)),
    ];
    let mut jobs: Vec<Job> = Vec::new();
    // One at a time, so that the ids are minted in enqueue order, which is
    // not the claim order.
    for spec in specs {
        jobs.push(enqueue(db, T, spec).await);
    }
    let mut expected = jobs.clone();
    expected.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.run_at.cmp(&b.run_at))
            .then(a.id.cmp(&b.id))
    });

    // A batch of 3 takes exactly the top 3.
    let top: HashSet<Uuid> = claim(db, T, Q, 3).await.iter().map(|c| c.job.id).collect();
    let want: HashSet<Uuid> = expected[..3].iter().map(|j| j.id).collect();
    assert_eq!(top, want, "a claim of 3 did not take the top 3");

    // Then one by one, the rest in order.
    for want in &expected[3..] {
        let c = claim_one(db, T, Q).await;
        assert_eq!(
            (c.job.id, c.job.priority, c.job.run_at),
            (want.id, want.priority, want.run_at),
            "claim order broken"
        );
    }
    claim_none(db, T, Q).await;
}

/// Delayed jobs (a far delay or a future run_at) are not claimed until due.
pub async fn delayed_jobs_are_not_claimed_until_due(db: &TestDb) {
    let delayed = enqueue(db, T, job(Q).run_at(RunAt::Delay(3_600_000))).await;
    let later = enqueue(
        db,
        T,
        job(Q).run_at(RunAt::At(Utc::now() + Duration::hours(2))),
    )
    .await;
    assert!(delayed.run_at > Utc::now() + Duration::minutes(50));
    claim_none(db, T, Q).await;
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!((stats.ready, stats.scheduled), (0, 2));

    db.make_due(delayed.id).await;
    let c = claim_id(db, T, Q, delayed.id).await;
    assert_eq!(c.job.attempt, 1);
    claim_none(db, T, Q).await;
    db.make_due(later.id).await;
    claim_id(db, T, Q, later.id).await;
}

/// A claim takes only jobs of the asked queue and of the caller's tenant.
pub async fn other_queues_and_tenants_are_not_claimed(db: &TestDb) {
    let mine = enqueue(db, T, job("a")).await;
    let other_queue = enqueue(db, T, job("b")).await;
    let other_tenant = enqueue(db, T2, job("a")).await;
    let got: Vec<Uuid> = claim(db, T, "a", 10)
        .await
        .iter()
        .map(|c| c.job.id)
        .collect();
    assert_eq!(got, vec![mine.id]);
    assert_eq!(get(db, T, other_queue.id).await.state.as_str(), "queued");
    assert_eq!(get(db, T2, other_tenant.id).await.state.as_str(), "queued");
    claim_id(db, T, "b", other_queue.id).await;
    claim_id(db, T2, "a", other_tenant.id).await;
}
