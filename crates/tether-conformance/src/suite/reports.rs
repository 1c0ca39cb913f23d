//! Invariant 20, every report is exact: a report repeated with the token
//! that ended the attempt is answered like the first and changes nothing; a
//! different report with that token is a conflict (`invalid_state`); a
//! worker is told `lease_lost` only when something else (another claim, the
//! reaper, a replay) has ended or taken its claim.

use serde_json::{json, Value};
use tether_core::{Completion, EventKind, Failure, Job, JobState, LeaseToken, NewJob};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// One of the reports the race sends twice.
#[derive(Debug, Clone)]
enum Sent {
    Complete(Option<Value>),
    CompleteItem(Option<Value>),
    Fail(Failure),
    Snooze(i64),
}

impl Sent {
    /// The `n`-th kind of report, for job number `n` of a round.
    fn nth(n: usize) -> Sent {
        match n % 5 {
            0 => Sent::Complete(Some(json!({"n": n}))),
            1 => Sent::CompleteItem(Some(json!({"n": n}))),
            2 => Sent::Fail(Failure {
                retry_after_ms: Some(600_000),
                ..failure(&format!("boom {n}"))
            }),
            3 => Sent::Fail(fatal(&format!("dead {n}"))),
            _ => Sent::Snooze(600_000),
        }
    }

    /// The event the report that ends the attempt records.
    fn event(&self) -> EventKind {
        match self {
            Sent::Complete(_) | Sent::CompleteItem(_) => EventKind::Succeeded,
            Sent::Fail(f) if f.fatal => EventKind::Failed,
            Sent::Fail(_) => EventKind::RetryScheduled,
            Sent::Snooze(_) => EventKind::Snoozed,
        }
    }

    /// Sends it; the answer's error code, if any.
    async fn send(
        self,
        engine: tether_core::Engine,
        id: Uuid,
        token: LeaseToken,
    ) -> Result<(), String> {
        let code = |e: tether_core::Error| e.code().as_str().to_owned();
        match self {
            Sent::Complete(result) => engine
                .complete(T, id, token, result)
                .await
                .map(drop)
                .map_err(code),
            Sent::CompleteItem(result) => {
                let item = Completion {
                    id,
                    lease_token: token,
                    result,
                };
                let mut answers = engine.complete_many(T, &[item]).await.map_err(code)?;
                answers.pop().expect("one answer").map_err(code)
            }
            Sent::Fail(f) => engine.fail(T, id, token, f).await.map(drop).map_err(code),
            Sent::Snooze(ms) => engine
                .snooze(T, id, token, ms)
                .await
                .map(drop)
                .map_err(code),
        }
    }
}

/// A report racing its own retry — a client resent it after losing the
/// answer while the first was still being applied, on another connection —
/// is answered like the first, never `lease_lost`: single `complete`,
/// `fail` (retried and fatal), `snooze` and a batch `complete` item, many
/// times over. Each job ends once, with one event, and records no
/// `lease_lost`.
pub async fn report_racing_its_own_retry_is_never_lease_lost(db: &TestDb) {
    const ROUNDS: usize = 12;
    const JOBS: usize = 40;
    let mut refused = Vec::new();
    let mut ended = Vec::new();
    for _ in 0..ROUNDS {
        let batch: Vec<NewJob> = (0..JOBS).map(|_| job(Q)).collect();
        ok(db.engine.enqueue_many(T, &batch).await);
        let claimed = claim(db, T, Q, JOBS as u32).await;
        assert_eq!(claimed.len(), JOBS);
        let mut tasks = Vec::new();
        for (n, c) in claimed.iter().enumerate() {
            let sent = Sent::nth(n);
            ended.push((c.job.id, sent.event()));
            for _ in 0..2 {
                let (engine, sent) = (db.engine.clone(), sent.clone());
                let (id, token) = (c.job.id, c.lease_token);
                tasks.push(tokio::spawn(async move {
                    (id, sent.clone(), sent.send(engine, id, token).await)
                }));
            }
        }
        for task in tasks {
            let (id, sent, answer) = task.await.expect("a report panicked");
            if let Err(code) = answer {
                refused.push(format!("{sent:?} of {id}: {code}"));
            }
        }
    }
    let mut lost = Vec::new();
    for (id, event) in &ended {
        let events = ok(db.engine.events(T, *id).await);
        let count = |kind: EventKind| events.iter().filter(|e| e.event == kind).count();
        if count(EventKind::LeaseLost) > 0 {
            lost.push(*id);
        }
        assert_eq!(count(*event), 1, "job {id}: {events:?}");
    }
    let mut by_kind = std::collections::BTreeMap::new();
    for r in &refused {
        let kind = r.split(['(', ' ']).next().unwrap_or_default();
        *by_kind.entry(kind.to_owned()).or_insert(0) += 1;
    }
    assert!(
        refused.is_empty() && lost.is_empty(),
        "{} of {} reports were refused (by kind {by_kind:?}; {:?}...), {} jobs recorded lease_lost",
        refused.len(),
        ended.len() * 2,
        &refused[..refused.len().min(3)],
        lost.len()
    );
}

/// The job's whole history, to show that nothing was recorded.
async fn events_of(db: &TestDb, id: Uuid) -> Vec<tether_core::JobEvent> {
    ok(db.engine.events(T, id).await)
}

/// A report repeated with the token that ended the attempt, with the same
/// arguments (its answer was lost), is answered like the first: the job as
/// it stands, equal to the first answer; nothing changed, nothing recorded
/// (one ending event, no `lease_lost`), and not counted again (the store
/// answers it as a repeat, `now` false). Single `complete` (with a result
/// whose keys come in another order), `complete` as a batch item, `fail`
/// retried, `fail` fatal, `fail` with `retry_after_ms`, `snooze`; and a
/// repeat after a cancel ended the retried job meanwhile.
pub async fn repeated_reports_are_answered_like_the_first(db: &TestDb) {
    let store = db.engine.store();
    // complete, then complete again: single, then as a batch item.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let first = ok(store
        .complete(
            T,
            j.id,
            c.lease_token,
            Some(&json!({"a": 1, "b": [1, {"y": 2, "x": 1}]})),
        )
        .await);
    assert!(first.now);
    let history = events_of(db, j.id).await;
    let again = ok(store
        .complete(
            T,
            j.id,
            c.lease_token,
            Some(&json!({"b": [1, {"x": 1, "y": 2}], "a": 1})),
        )
        .await);
    assert!(
        !again.now,
        "a repeat is not the report that ended the attempt"
    );
    assert_eq!(again.job, first.job, "the repeat answers the first outcome");
    let item = Completion {
        id: j.id,
        lease_token: c.lease_token,
        result: Some(json!({"a": 1, "b": [1, {"x": 1, "y": 2}]})),
    };
    let answers = ok(store.complete_many(T, &[item.clone(), item]).await);
    assert_eq!(
        answers.into_iter().map(|a| ok(a)).collect::<Vec<_>>(),
        vec![tether_core::Completed::Repeated; 2]
    );
    unchanged(db, &first.job).await;
    assert_eq!(
        events_of(db, j.id).await,
        history,
        "a repeat recorded something"
    );

    // A batch item first, then a single repeat of it.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let item = Completion {
        id: j.id,
        lease_token: c.lease_token,
        result: None,
    };
    let answers = ok(store.complete_many(T, &[item.clone(), item]).await);
    assert!(
        matches!(answers[0], Ok(tether_core::Completed::Now { .. })),
        "{answers:?}"
    );
    assert_eq!(
        answers[1].as_ref().ok(),
        Some(&tether_core::Completed::Repeated)
    );
    let done = get(db, T, j.id).await;
    let again = ok(store
        .complete(T, j.id, c.lease_token, Some(&Value::Null))
        .await);
    assert_eq!((again.job, again.now), (done.clone(), false));
    unchanged(db, &done).await;
    assert_eq!(count_events(db, T, j.id, EventKind::Succeeded).await, 1);

    // fail: retried, with retry_after_ms, fatal; each repeated.
    let failures = [
        (failure("boom"), JobState::Queued),
        (
            Failure {
                retry_after_ms: Some(60_000),
                ..failure("slow down")
            },
            JobState::Queued,
        ),
        (fatal("no"), JobState::Failed),
    ];
    for (n, (f, state)) in failures.into_iter().enumerate() {
        // A queue each: a retried job may be due again before the next.
        let queue = format!("fail-{n}");
        let j = enqueue(db, T, job(&queue)).await;
        let c = claim_id(db, T, &queue, j.id).await;
        let first = ok(store.fail(T, j.id, c.lease_token, &f, 1.2).await);
        assert!(first.now);
        assert_eq!(first.job.state, state);
        let history = events_of(db, j.id).await;
        // Another jitter is no other report: the delay was decided once.
        let again = ok(store.fail(T, j.id, c.lease_token, &f, 1.4).await);
        assert_eq!((&again.job, again.now), (&first.job, false), "{f:?}");
        assert_eq!(
            ok(db.engine.fail(T, j.id, c.lease_token, f.clone()).await),
            first.job
        );
        unchanged(db, &first.job).await;
        assert_eq!(events_of(db, j.id).await, history, "{f:?}");
    }

    // snooze, then again: the attempt is given back once.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let first = ok(store.snooze(T, j.id, c.lease_token, 60_000).await);
    assert_eq!(
        (first.job.state, first.job.attempt, first.now),
        (JobState::Queued, 0, true)
    );
    let again = ok(store.snooze(T, j.id, c.lease_token, 60_000).await);
    assert_eq!((&again.job, again.now), (&first.job, false));
    unchanged(db, &first.job).await;
    assert_eq!(count_events(db, T, j.id, EventKind::Snoozed).await, 1);

    // A retried job cancelled meanwhile: the repeat of its fail is still a
    // repeat (nothing took the claim; the fail ended it), answered with the
    // job as it stands now.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let f = Failure {
        retry_after_ms: Some(60_000),
        ..failure("later")
    };
    ok(db.engine.fail(T, j.id, c.lease_token, f.clone()).await);
    let cancelled = ok(db.engine.cancel(T, j.id).await);
    assert_eq!(cancelled.state, JobState::Cancelled);
    let again = ok(store.fail(T, j.id, c.lease_token, &f, 1.0).await);
    assert_eq!((&again.job, again.now), (&cancelled, false));
    unchanged(db, &cancelled).await;

    for id in all_jobs(db, T).await.iter().map(|j| j.id) {
        assert_eq!(
            count_events(db, T, id, EventKind::LeaseLost).await,
            0,
            "{id}"
        );
    }
}

/// A report with the token that ended the attempt that is not the same
/// report — another operation, or the same one with other arguments (an
/// error text, fatal or not, `retry_after_ms`, a result, a delay) — is a
/// conflict (`invalid_state`), not `lease_lost`: nothing changed, nothing
/// recorded. Single reports and batch items alike; a batch answers each
/// item on its own (the same result beside a different one).
pub async fn a_different_report_with_a_spent_token_is_a_conflict(db: &TestDb) {
    // fail (retried), then every other report with that token.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let f = Failure {
        retry_after_ms: Some(60_000),
        ..failure("boom")
    };
    let first = ok(db.engine.fail(T, j.id, c.lease_token, f.clone()).await);
    assert_eq!(first.state, JobState::Queued);
    let history = events_of(db, j.id).await;
    let token = c.lease_token;
    let others = [
        fatal("boom"),
        Failure {
            fatal: true,
            ..f.clone()
        },
        failure("boom"),
        Failure {
            retry_after_ms: Some(1_000),
            ..f.clone()
        },
        Failure {
            error: "another error".into(),
            ..f.clone()
        },
        Failure {
            cancelled: true,
            ..f.clone()
        },
    ];
    for other in others {
        expect_invalid_state(db.engine.fail(T, j.id, token, other).await);
    }
    expect_invalid_state(db.engine.snooze(T, j.id, token, 60_000).await);
    expect_invalid_state(db.engine.complete(T, j.id, token, None).await);
    let item = Completion {
        id: j.id,
        lease_token: token,
        result: None,
    };
    let mut answers = ok(db.engine.complete_many(T, &[item]).await);
    expect_invalid_state(answers.pop().expect("one answer"));
    unchanged(db, &first).await;
    assert_eq!(
        events_of(db, j.id).await,
        history,
        "a conflict recorded something"
    );
    // The first report is still a repeat.
    assert_eq!(ok(db.engine.fail(T, j.id, token, f).await), first);

    // complete with a result, then others.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let first = ok(db
        .engine
        .complete(T, j.id, c.lease_token, Some(json!({"n": 1})))
        .await);
    let history = events_of(db, j.id).await;
    for result in [None, Some(json!({"n": 2})), Some(json!({"n": 1, "m": 0}))] {
        expect_invalid_state(db.engine.complete(T, j.id, c.lease_token, result).await);
    }
    expect_invalid_state(db.engine.fail(T, j.id, c.lease_token, fatal("x")).await);
    expect_invalid_state(db.engine.snooze(T, j.id, c.lease_token, 0).await);
    let item = |n: i64| Completion {
        id: j.id,
        lease_token: c.lease_token,
        result: Some(json!({ "n": n })),
    };
    let answers = ok(db.engine.complete_many(T, &[item(2), item(1)]).await);
    assert!(
        matches!(answers[0], Err(tether_core::Error::InvalidState { .. })),
        "{answers:?}"
    );
    assert!(answers[1].is_ok(), "{answers:?}");
    unchanged(db, &first).await;
    assert_eq!(events_of(db, j.id).await, history);

    // A batch completing a job answers a second item with another result
    // as a conflict, whichever comes first.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let item = |n: i64| Completion {
        id: j.id,
        lease_token: c.lease_token,
        result: Some(json!({ "n": n })),
    };
    let answers = ok(db.engine.complete_many(T, &[item(1), item(2)]).await);
    let done = get(db, T, j.id).await;
    let kept = done.result.clone().expect("a result");
    let winner = usize::from(kept != json!({"n": 1}));
    assert!(answers[winner].is_ok(), "{answers:?}");
    assert!(
        matches!(
            answers[1 - winner],
            Err(tether_core::Error::InvalidState { .. })
        ),
        "{answers:?}"
    );
    assert_eq!(count_events(db, T, j.id, EventKind::Succeeded).await, 1);

    // snooze, then a snooze with another delay, and a fail.
    let j = enqueue(db, T, job(Q)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let first = ok(db.engine.snooze(T, j.id, c.lease_token, 60_000).await);
    expect_invalid_state(db.engine.snooze(T, j.id, c.lease_token, 1_000).await);
    expect_invalid_state(db.engine.fail(T, j.id, c.lease_token, failure("x")).await);
    unchanged(db, &first).await;

    for id in all_jobs(db, T).await.iter().map(|j| j.id) {
        assert_eq!(
            count_events(db, T, id, EventKind::LeaseLost).await,
            0,
            "{id}"
        );
    }
}

/// `lease_lost` (recorded in the history) answers a report only when
/// something else ended or took the claim: another claim, the reaper
/// (requeued, or ended `cancelled` after a cancel request), a replay. The
/// report that ended an attempt and its repeats never see it.
pub async fn lease_lost_only_when_something_else_took_the_job(db: &TestDb) {
    // Another claim: the job was retried and claimed again.
    let j = enqueue(db, T, job("took-1")).await;
    let c = claim_id(db, T, "took-1", j.id).await;
    let f = Failure {
        retry_after_ms: Some(0),
        ..failure("again")
    };
    ok(db.engine.fail(T, j.id, c.lease_token, f.clone()).await);
    let next = claim_id(db, T, "took-1", j.id).await;
    let before = get(db, T, j.id).await;
    expect_lease_lost(db.engine.fail(T, j.id, c.lease_token, f).await);
    let item = Completion {
        id: j.id,
        lease_token: c.lease_token,
        result: None,
    };
    let mut answers = ok(db.engine.complete_many(T, &[item]).await);
    expect_lease_lost(answers.pop().expect("one answer"));
    unchanged(db, &before).await;
    assert_eq!(count_events(db, T, j.id, EventKind::LeaseLost).await, 2);
    ok(db.engine.complete(T, j.id, next.lease_token, None).await);

    // The reaper: requeued after the lease lapsed.
    let j = enqueue(db, T, job("took-2")).await;
    let c = claim_id(db, T, "took-2", j.id).await;
    db.lapse_lease(j.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).requeued, 1);
    expect_lease_lost(db.engine.snooze(T, j.id, c.lease_token, 0).await);
    assert_eq!(count_events(db, T, j.id, EventKind::LeaseLost).await, 1);

    // The reaper ending a job whose cancel was requested.
    let j = enqueue(db, T, job("took-3")).await;
    let c = claim_id(db, T, "took-3", j.id).await;
    ok(db.engine.cancel(T, j.id).await);
    db.lapse_lease(j.id).await;
    assert_eq!(ok(db.engine.reap_lapsed_leases(100).await).cancelled, 1);
    expect_lease_lost(
        db.engine
            .fail(
                T,
                j.id,
                c.lease_token,
                Failure {
                    cancelled: true,
                    ..failure("stopped")
                },
            )
            .await,
    );
    assert_eq!(get(db, T, j.id).await.state, JobState::Cancelled);

    // A replay: the job ran again from the start.
    let j = enqueue(db, T, job("took-4")).await;
    let c = claim_id(db, T, "took-4", j.id).await;
    ok(db.engine.complete(T, j.id, c.lease_token, None).await);
    ok(db.engine.replay(T, j.id).await);
    expect_lease_lost(db.engine.complete(T, j.id, c.lease_token, None).await);
    assert_eq!(get(db, T, j.id).await.state, JobState::Queued);

    // A cancel request alone takes nothing: the holder's report applies.
    let j = enqueue(db, T, job("took-5")).await;
    let c = claim_id(db, T, "took-5", j.id).await;
    ok(db.engine.cancel(T, j.id).await);
    let stopped = ok(db.engine.snooze(T, j.id, c.lease_token, 0).await);
    assert_eq!(stopped.state, JobState::Cancelled);
    assert_eq!(
        ok(db.engine.snooze(T, j.id, c.lease_token, 0).await),
        stopped
    );
    assert_eq!(count_events(db, T, j.id, EventKind::LeaseLost).await, 0);
}

/// The job after `first` ended its attempt, and that nothing changes it.
async fn unchanged(db: &TestDb, first: &Job) {
    assert_eq!(&get(db, T, first.id).await, first, "the job changed");
}
