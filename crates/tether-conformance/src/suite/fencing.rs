//! Invariant 2, fencing: only the current lease token may act on a running
//! job; a stale one changes nothing, reports `lease_lost` and leaves a
//! `lease_lost` event.

use std::collections::HashSet;

use serde_json::json;
use tether_core::{EventKind, Heartbeat, JobState, NewJob};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// Every claim, and every re-claim of the same job, mints a new token.
pub async fn every_claim_mints_a_distinct_token(db: &TestDb) {
    let batch: Vec<NewJob> = (0..20).map(|_| job(Q)).collect();
    ok(db.engine.enqueue_many(T, &batch).await);
    let claimed = claim(db, T, Q, 20).await;
    assert_eq!(claimed.len(), 20);
    let mut tokens: HashSet<Uuid> = claimed.iter().map(|c| c.lease_token.0).collect();
    assert_eq!(tokens.len(), 20, "tokens repeat within one batch");

    // The same job claimed again (after its lease lapsed) gets a new token.
    let first = &claimed[0];
    db.lapse_lease(first.job.id).await;
    let report = ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!(report.requeued, 1);
    let again = claim_id(db, T, Q, first.job.id).await;
    assert_ne!(again.lease_token, first.lease_token);
    assert!(tokens.insert(again.lease_token.0), "a token was reused");
}

/// After a lapse, a reap and a new claim by someone else, the old holder's
/// heartbeat, complete, fail and snooze are all `LeaseLost`, change nothing
/// (the job reads the same before and after) and each leaves a `lease_lost`
/// event; the new holder is unaffected.
pub async fn stale_token_is_refused_after_takeover_and_changes_nothing(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let old = claim_id(db, T, Q, j.id).await;
    db.lapse_lease(j.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    let mut req = claim_req(Q, 1);
    req.worker_id = "worker-2".into();
    let new = ok(db.engine.claim(T, &req).await).remove(0);
    assert_eq!(new.job.id, j.id);
    assert_eq!(new.job.attempt, 2);

    let before = get(db, T, j.id).await;
    let lost_before = count_events(db, T, j.id, EventKind::LeaseLost).await;
    expect_lease_lost(
        db.engine
            .heartbeat(
                T,
                &Heartbeat {
                    id: j.id,
                    lease_token: old.lease_token,
                    lease_ttl_ms: Some(3_600_000),
                    progress: Some(json!({"stale": true})),
                },
            )
            .await,
    );
    expect_lease_lost(
        db.engine
            .complete(T, j.id, old.lease_token, Some(json!("stale")))
            .await,
    );
    expect_lease_lost(
        db.engine
            .fail(T, j.id, old.lease_token, fatal("stale"))
            .await,
    );
    expect_lease_lost(db.engine.snooze(T, j.id, old.lease_token, 0).await);
    let after = get(db, T, j.id).await;
    assert_eq!(before, after, "a stale token changed the job");
    assert_eq!(after.state, JobState::Running);
    assert_eq!(
        count_events(db, T, j.id, EventKind::LeaseLost).await - lost_before,
        4,
        "each refused operation must record a lease_lost event"
    );

    // The new owner's lease is intact.
    let done = ok(db
        .engine
        .complete(T, j.id, new.lease_token, Some(json!("fresh")))
        .await);
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!("fresh")));
}

/// A heartbeat that the attempt's own report overtook (a completion, a
/// retryable failure or a snooze, then the heartbeat sent just before it)
/// is refused, alone or in a batch, but records no `lease_lost`: no lease
/// was lost, and the job's history must not say one was.
pub async fn heartbeat_after_the_attempts_own_report_records_no_lease_lost(db: &TestDb) {
    let ended = [
        enqueue(db, T, job(Q)).await,
        enqueue(db, T, job(Q)).await,
        enqueue(db, T, job(Q)).await,
    ];
    let mut claims = Vec::new();
    for j in &ended {
        claims.push(claim_id(db, T, Q, j.id).await);
    }
    ok(db
        .engine
        .complete(T, ended[0].id, claims[0].lease_token, None)
        .await);
    ok(db
        .engine
        .fail(T, ended[1].id, claims[1].lease_token, failure("again"))
        .await);
    ok(db
        .engine
        .snooze(T, ended[2].id, claims[2].lease_token, 60_000)
        .await);

    expect_lease_lost(db.engine.heartbeat(T, &claims[0].heartbeat()).await);
    let beats: Vec<Heartbeat> = claims.iter().map(|c| c.heartbeat()).collect();
    for answer in ok(db.engine.heartbeat_many(T, &beats).await) {
        expect_lease_lost(answer);
    }
    for j in &ended {
        assert_eq!(
            count_events(db, T, j.id, EventKind::LeaseLost).await,
            0,
            "a heartbeat after the attempt's own report recorded lease_lost"
        );
    }

    // A stale token of an earlier attempt still records one.
    db.make_due(ended[1].id).await;
    let again = claim_id(db, T, Q, ended[1].id).await;
    assert_ne!(again.lease_token, claims[1].lease_token);
    expect_lease_lost(db.engine.heartbeat(T, &claims[1].heartbeat()).await);
    assert_eq!(
        count_events(db, T, ended[1].id, EventKind::LeaseLost).await,
        1
    );
}

/// The reaper requeueing a lapsed job is already a new owner: the old
/// holder is fenced out even before anyone claims it again.
pub async fn reaper_takeover_alone_fences_the_old_holder(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let old = claim_id(db, T, Q, j.id).await;
    db.lapse_lease(j.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    let before = get(db, T, j.id).await;
    assert_eq!(before.state, JobState::Queued);
    expect_lease_lost(db.engine.complete(T, j.id, old.lease_token, None).await);
    expect_lease_lost(
        db.engine
            .fail(T, j.id, old.lease_token, failure("late"))
            .await,
    );
    let after = get(db, T, j.id).await;
    assert_eq!(before, after);
    assert!(count_events(db, T, j.id, EventKind::LeaseLost).await >= 2);
}

/// A lapsed lease nobody took over still belongs to its holder: heartbeat
/// revives it and complete succeeds.
pub async fn lapsed_lease_nobody_took_over_still_belongs_to_holder(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, job(Q)).await;
    let ca = claim_id(db, T, Q, a.id).await;
    let cb = claim_id(db, T, Q, b.id).await;

    db.lapse_lease(a.id).await;
    let done = ok(db.engine.complete(T, a.id, ca.lease_token, None).await);
    assert_eq!(done.state, JobState::Succeeded);

    db.lapse_lease(b.id).await;
    let ack = ok(db
        .engine
        .heartbeat(
            T,
            &Heartbeat {
                id: b.id,
                lease_token: cb.lease_token,
                lease_ttl_ms: Some(TTL),
                progress: None,
            },
        )
        .await);
    assert!(ack.lease_expires_at > chrono::Utc::now());
    // The heartbeat revived the lease: the reaper leaves the job alone.
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).total(), 0);
    assert_eq!(get(db, T, b.id).await.state, JobState::Running);
    let done = ok(db.engine.complete(T, b.id, cb.lease_token, None).await);
    assert_eq!(done.state, JobState::Succeeded);
}

/// A token that was never this job's is `LeaseLost` for every fenced
/// operation, changes nothing and is recorded.
pub async fn wrong_token_is_lease_lost(db: &TestDb) {
    let j = enqueue(db, T, job(Q)).await;
    let other = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let c_other = claim_id(db, T, Q, other.id).await;
    let before = get(db, T, j.id).await;
    for token in [random_token(), c_other.lease_token] {
        expect_lease_lost(
            db.engine
                .heartbeat(
                    T,
                    &Heartbeat {
                        id: j.id,
                        lease_token: token,
                        lease_ttl_ms: None,
                        progress: None,
                    },
                )
                .await,
        );
        expect_lease_lost(db.engine.complete(T, j.id, token, None).await);
        expect_lease_lost(db.engine.fail(T, j.id, token, fatal("x")).await);
        expect_lease_lost(db.engine.snooze(T, j.id, token, 0).await);
    }
    assert_eq!(get(db, T, j.id).await, before);
    assert_eq!(count_events(db, T, j.id, EventKind::LeaseLost).await, 8);
    let lost = ok(db.engine.events(T, j.id).await)
        .into_iter()
        .filter(|e| e.event == EventKind::LeaseLost)
        .collect::<Vec<_>>();
    let ops = ["heartbeat", "complete", "fail", "snooze"];
    for (e, op) in lost.iter().zip(ops.iter().cycle()) {
        let detail = e.detail.clone().unwrap_or_default();
        assert!(
            detail.contains(op),
            "lease_lost detail should name the operation {op}: {detail:?}"
        );
    }
    ok(db.engine.complete(T, j.id, c.lease_token, None).await);
}

/// An id that does not exist is `JobNotFound` for every job operation.
pub async fn unknown_id_is_job_not_found(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    let id = Uuid::now_v7();
    let token = random_token();
    expect_not_found(db.engine.get(T, id).await);
    expect_not_found(db.engine.events(T, id).await);
    expect_not_found(
        db.engine
            .heartbeat(
                T,
                &Heartbeat {
                    id,
                    lease_token: token,
                    lease_ttl_ms: None,
                    progress: None,
                },
            )
            .await,
    );
    expect_not_found(db.engine.complete(T, id, token, None).await);
    expect_not_found(db.engine.fail(T, id, token, failure("x")).await);
    expect_not_found(db.engine.snooze(T, id, token, 0).await);
    expect_not_found(db.engine.cancel(T, id).await);
    expect_not_found(db.engine.replay(T, id).await);
}

/// Holders completing their lapsed jobs while the reaper sweeps them: each
/// job has exactly one winner. A job whose complete succeeded is
/// `succeeded` and was not reaped; a job whose complete was `LeaseLost` was
/// reaped and is `queued`; the reaper's count matches the losers.
pub async fn holder_and_reaper_race_has_one_winner(db: &TestDb) {
    const N: usize = 200;
    let batch: Vec<NewJob> = (0..N).map(|_| job(Q)).collect();
    ok(db.engine.enqueue_many(T, &batch).await);
    let claimed = claim(db, T, Q, N as u32).await;
    assert_eq!(claimed.len(), N);
    for c in &claimed {
        db.lapse_lease(c.job.id).await;
    }
    let engine = db.engine.clone();
    let holders = tokio::spawn({
        let claimed = claimed.clone();
        async move {
            let mut answers = Vec::new();
            for c in claimed {
                let r = engine.complete(T, c.job.id, c.lease_token, None).await;
                answers.push((c.job.id, r.map(|_| ()).map_err(|e| e.code().as_str())));
            }
            answers
        }
    });
    let engine = db.engine.clone();
    let reaper = tokio::spawn(async move {
        let mut requeued = 0;
        loop {
            let r = ok(engine.reap_lapsed_leases(7).await);
            assert_eq!((r.failed, r.cancelled), (0, 0));
            requeued += r.requeued;
            if r.total() == 0 {
                break requeued;
            }
            tokio::task::yield_now().await;
        }
    });
    let answers = holders.await.expect("holders panicked");
    let requeued = reaper.await.expect("reaper panicked");
    // Whatever the reaper had not reached when it stopped is still running
    // and was completed by its holder.
    let mut lost = 0;
    for (id, answer) in answers {
        let j = get(db, T, id).await;
        match answer {
            Ok(()) => assert_eq!(j.state, JobState::Succeeded, "{id}"),
            Err("lease_lost") => {
                lost += 1;
                assert_eq!(j.state, JobState::Queued, "{id}");
                assert_eq!(count_events(db, T, id, EventKind::LeaseExpired).await, 1);
            }
            Err(code) => panic!("complete of {id} failed with {code}"),
        }
    }
    assert_eq!(lost, requeued, "reaped jobs and refused completions differ");
    let stats = ok(db.engine.queue_stats(T, Q).await);
    assert_eq!(stats.counts.running, 0);
    assert_eq!(stats.counts.queued + stats.counts.succeeded, N as i64);
}
