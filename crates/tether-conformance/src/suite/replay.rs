//! Replay: a failed or cancelled job goes back to `queued` with a fresh
//! attempt budget and the same id, singly or in bulk.

use serde_json::json;
use tether_core::{Error, EventKind, JobState, NewJob, ReplayFilter};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// Makes a job of `kind` on `queue` and fails it for good.
async fn dead(db: &TestDb, queue: &str, kind: &str) -> Uuid {
    dead_job(db, NewJob::new(queue, kind, json!({}))).await
}

async fn dead_job(db: &TestDb, new: NewJob) -> Uuid {
    let queue = new.queue.clone();
    let j = enqueue(db, T, new).await;
    let c = claim_id(db, T, &queue, j.id).await;
    let f = ok(db.engine.fail(T, j.id, c.lease_token, fatal("dead")).await);
    assert_eq!(f.state, JobState::Failed);
    j.id
}

/// Replay gives a failed job attempt 0, the same id, a cleared lease,
/// result and finish time, keeps its last error, records `replayed`, and
/// the job gets its whole attempt budget again.
pub async fn replay_resets_attempts_and_keeps_the_id(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(2)).await;
    for _ in 0..2 {
        db.make_due(j.id).await;
        let c = claim_id(db, T, Q, j.id).await;
        ok(db
            .engine
            .fail(T, j.id, c.lease_token, failure("nope"))
            .await);
    }
    let f = get(db, T, j.id).await;
    assert_eq!((f.state, f.attempt), (JobState::Failed, 2));

    let r = ok(db.engine.replay(T, j.id).await);
    assert_eq!(r.id, j.id);
    assert_eq!((r.state, r.attempt), (JobState::Queued, 0));
    assert_eq!(r.finished_at, None);
    assert_eq!(r.lease_expires_at, None);
    assert!(!r.cancel_requested);
    assert_eq!(r.last_error.as_deref(), Some("nope"), "last_error is kept");
    assert_eq!(get(db, T, j.id).await, r);
    let last = ok(db.engine.events(T, j.id).await).pop().unwrap();
    assert_eq!((last.event, last.attempt), (EventKind::Replayed, 0));

    // Claimable at once, with the full budget again.
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.attempt, 1);
    let f = ok(db
        .engine
        .fail(T, j.id, c.lease_token, failure("again"))
        .await);
    assert_eq!(f.state, JobState::Queued, "the budget was not reset");

    // A cancelled job (cancel requested while running) replays too.
    let k = enqueue(db, T, job("q2")).await;
    claim_id(db, T, "q2", k.id).await;
    ok(db.engine.cancel(T, k.id).await);
    db.lapse_lease(k.id).await;
    ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!(get(db, T, k.id).await.state, JobState::Cancelled);
    let r = ok(db.engine.replay(T, k.id).await);
    assert_eq!(
        (r.state, r.attempt, r.cancel_requested),
        (JobState::Queued, 0, false)
    );
    claim_id(db, T, "q2", k.id).await;
}

/// Replaying a queued or running job is `InvalidState` and changes nothing.
pub async fn replay_of_active_job_is_invalid_state(db: &TestDb) {
    let q = enqueue(db, T, job(Q).priority(-1)).await;
    let r = enqueue(db, T, job(Q).priority(1)).await;
    let c = claim_id(db, T, Q, r.id).await;
    for id in [q.id, r.id] {
        let before = get(db, T, id).await;
        expect_invalid_state(db.engine.replay(T, id).await);
        assert_eq!(get(db, T, id).await, before);
    }
    ok(db.engine.complete(T, r.id, c.lease_token, None).await);
}

/// A succeeded job replays as a new run of the same job: `queued`, attempt
/// 0 with its whole budget, the result cleared, `replayed` in its history;
/// it is claimed again (with a new lease token) and can succeed again.
pub async fn replay_of_succeeded_job_runs_it_again(db: &TestDb) {
    let s = enqueue(db, T, job("q2").max_attempts(2)).await;
    let first = claim_id(db, T, "q2", s.id).await;
    ok(db
        .engine
        .complete(T, s.id, first.lease_token, Some(json!({"n": 1})))
        .await);
    let r = ok(db.engine.replay(T, s.id).await);
    assert_eq!(
        (
            r.id,
            r.state,
            r.attempt,
            r.max_attempts,
            r.result.clone(),
            r.finished_at
        ),
        (s.id, JobState::Queued, 0, 2, None, None)
    );
    assert_eq!(
        history(db, T, s.id).await.last(),
        Some(&(EventKind::Replayed, 0))
    );
    let second = claim_id(db, T, "q2", s.id).await;
    assert_ne!(second.lease_token, first.lease_token);
    assert_eq!(second.job.attempt, 1);
    ok(db
        .engine
        .complete(T, s.id, second.lease_token, Some(json!({"n": 2})))
        .await);
    let done = get(db, T, s.id).await;
    assert_eq!(
        (done.state, done.result),
        (JobState::Succeeded, Some(json!({"n": 2})))
    );
    let events: Vec<EventKind> = history(db, T, s.id)
        .await
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(
        events,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::Succeeded,
            EventKind::Replayed,
            EventKind::Claimed,
            EventKind::Succeeded
        ]
    );
}

/// A dead job whose unique key is now held by another active job cannot be
/// replayed (`Conflict`, code `invalid_state`) and stays dead.
pub async fn replay_is_refused_while_unique_key_is_held(db: &TestDb) {
    let old = dead_job(db, job(Q).unique_key("u")).await;
    let holder = enqueue(db, T, job(Q).unique_key("u")).await;
    let e = expect_code(db.engine.replay(T, old).await, "invalid_state");
    assert!(matches!(e, Error::Conflict(_)), "{e:?}");
    assert_eq!(get(db, T, old).await.state, JobState::Failed);
    // Once the holder finished, the replay goes through.
    ok(db.engine.cancel(T, holder.id).await);
    assert_eq!(ok(db.engine.replay(T, old).await).state, JobState::Queued);
}

/// Bulk replay takes the failed (or cancelled) jobs of one queue, optionally
/// of one kind, up to a limit, and skips jobs whose unique key is held.
pub async fn bulk_replay_by_queue_kind_and_state(db: &TestDb) {
    let a: Vec<Uuid> = [
        dead(db, Q, "a").await,
        dead(db, Q, "a").await,
        dead(db, Q, "a").await,
    ]
    .into();
    let b: Vec<Uuid> = [dead(db, Q, "b").await, dead(db, Q, "b").await].into();
    let other_queue = dead(db, "q2", "a").await;
    let cancelled = enqueue(db, T, NewJob::new(Q, "a", json!({}))).await;
    ok(db.engine.cancel(T, cancelled.id).await);
    let blocked = dead_job(db, NewJob::new(Q, "c", json!({})).unique_key("u")).await;
    enqueue(db, T, NewJob::new("q3", "c", json!({})).unique_key("u")).await;
    let succeeded = enqueue(db, T, NewJob::new(Q, "a", json!({}))).await;
    let c = claim_id(db, T, Q, succeeded.id).await;
    ok(db
        .engine
        .complete(T, succeeded.id, c.lease_token, None)
        .await);

    let filter = |state, kind: Option<&str>, limit| ReplayFilter {
        queue: Q.into(),
        state,
        kind: kind.map(str::to_owned),
        limit,
        cursor: None,
        expires_at: None,
    };
    let n = ok(db
        .engine
        .replay_many(T, &filter(JobState::Failed, Some("a"), None))
        .await)
    .replayed;
    assert_eq!(n, 3);
    for id in &a {
        let j = get(db, T, *id).await;
        assert_eq!((j.state, j.attempt), (JobState::Queued, 0), "{id}");
        assert_eq!(
            history(db, T, *id).await.last(),
            Some(&(EventKind::Replayed, 0))
        );
    }
    for id in b.iter().chain([&other_queue, &blocked]) {
        assert_eq!(get(db, T, *id).await.state, JobState::Failed, "{id}");
    }
    assert_eq!(get(db, T, cancelled.id).await.state, JobState::Cancelled);

    // Limit 1 replays one of the two b's.
    let n = ok(db
        .engine
        .replay_many(T, &filter(JobState::Failed, None, Some(1)))
        .await)
    .replayed;
    assert_eq!(n, 1);
    let mut states = Vec::new();
    for id in &b {
        states.push(get(db, T, *id).await.state);
    }
    assert_eq!(
        states.iter().filter(|s| **s == JobState::Queued).count(),
        1,
        "limit 1 replayed {states:?}"
    );

    // The rest: the other b; the blocked one is skipped.
    let n = ok(db
        .engine
        .replay_many(T, &filter(JobState::Failed, None, None))
        .await)
    .replayed;
    assert_eq!(n, 1, "a job whose unique key is held must be skipped");
    assert_eq!(get(db, T, blocked).await.state, JobState::Failed);
    for id in &b {
        assert_eq!(get(db, T, *id).await.state, JobState::Queued);
    }

    let n = ok(db
        .engine
        .replay_many(T, &filter(JobState::Cancelled, None, None))
        .await)
    .replayed;
    assert_eq!(n, 1);
    assert_eq!(get(db, T, cancelled.id).await.state, JobState::Queued);
    assert_eq!(get(db, T, succeeded.id).await.state, JobState::Succeeded);
    assert_eq!(get(db, T, other_queue).await.state, JobState::Failed);
}

/// An expired job replayed (singly or in bulk) loses its old `expires_at`,
/// so an expiry pass leaves it queued and it can be claimed; a replay that
/// sets `expires_at` gives it that one (and a past one expires it again);
/// an out-of-range `expires_at` is refused and changes nothing.
pub async fn replay_clears_or_sets_expires_at(db: &TestDb) {
    use chrono::{Duration, Utc};
    let past = Utc::now() - Duration::seconds(60);
    let mut expired = Vec::new();
    for _ in 0..4 {
        expired.push(enqueue(db, T, job("exp").expires_at(past)).await.id);
    }
    assert_eq!(ok(db.engine.expire_jobs(100).await), 4);

    // Single replay without a new expiry: queued for good.
    let j = ok(db.engine.replay(T, expired[0]).await);
    assert_eq!((j.state, j.expires_at), (JobState::Queued, None));
    // Single replay with a new expiry.
    let later = Utc::now() + Duration::hours(1);
    let j = ok(db.engine.replay_with(T, expired[1], Some(later)).await);
    assert_eq!(
        j.expires_at.map(|t| t.timestamp_millis()),
        Some(later.timestamp_millis())
    );
    // Out of range: refused, still failed with its old expiry.
    let year_10000 = chrono::NaiveDate::from_ymd_opt(10_000, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    expect_invalid(db.engine.replay_with(T, expired[2], Some(year_10000)).await);
    let mut bad = ReplayFilter::failed("exp");
    bad.expires_at = Some(year_10000);
    expect_invalid(db.engine.replay_many(T, &bad).await);
    let still = get(db, T, expired[2]).await;
    assert_eq!(still.state, JobState::Failed);
    assert!(still.expires_at.is_some());
    // Bulk replay without a new expiry clears it too.
    let out = ok(db.engine.replay_many(T, &ReplayFilter::failed("exp")).await);
    assert_eq!(out.replayed, 2);
    assert_eq!(out.next_cursor, None);

    assert_eq!(
        ok(db.engine.expire_jobs(100).await),
        0,
        "nothing expires again"
    );
    for id in [expired[0], expired[2], expired[3]] {
        let j = get(db, T, id).await;
        assert_eq!((j.state, j.expires_at), (JobState::Queued, None), "{id}");
    }
    assert_eq!(claim(db, T, "exp", 10).await.len(), 4);

    // A replay that asks for a past expiry gets what it asked for.
    let d = dead(db, "exp2", "k").await;
    ok(db.engine.replay_with(T, d, Some(past)).await);
    assert_eq!(ok(db.engine.expire_jobs(100).await), 1);
    assert_eq!(get(db, T, d).await.state, JobState::Failed);
}

/// Bulk replay in rounds that follow `next_cursor` takes every job of the
/// selection once, by id: jobs replayed by an earlier round that fail again
/// meanwhile are not taken again, a full round names the last id it looked
/// at, and the round past the end answers no cursor.
pub async fn bulk_replay_rounds_follow_a_cursor_and_take_each_job_once(db: &TestDb) {
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(dead(db, "rounds", "k").await);
    }
    ids.sort();
    let mut filter = ReplayFilter::failed("rounds");
    filter.limit = Some(3);
    let mut replayed = 0;
    let mut rounds = 0;
    loop {
        let out = ok(db.engine.replay_many(T, &filter).await);
        rounds += 1;
        replayed += out.replayed;
        // Whatever this round replayed fails again at once.
        for c in claim(db, T, "rounds", 100).await {
            ok(db
                .engine
                .fail(T, c.job.id, c.lease_token, fatal("again"))
                .await);
        }
        match out.next_cursor {
            Some(cursor) => {
                assert!(ids.contains(&cursor));
                filter.cursor = Some(cursor);
            }
            None => break,
        }
    }
    assert_eq!(replayed, 7, "each job once");
    assert_eq!(rounds, 3);
    for id in &ids {
        assert_eq!(
            count_events(db, T, *id, EventKind::Replayed).await,
            1,
            "{id}"
        );
    }
    // A cursor past every job: nothing, no next cursor.
    filter.cursor = Some(*ids.last().unwrap());
    let out = ok(db.engine.replay_many(T, &filter).await);
    assert_eq!((out.replayed, out.next_cursor), (0, None));
    // Exactly `limit` jobs left: the round is full and names its last id,
    // the next one is empty.
    filter.cursor = Some(ids[3]);
    let out = ok(db.engine.replay_many(T, &filter).await);
    assert_eq!((out.replayed, out.next_cursor), (3, Some(ids[6])));
}
