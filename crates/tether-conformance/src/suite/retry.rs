//! Invariant 7, backoff with jitter: a retryable failure waits
//! `min(base·2^(attempt−1), cap)·[1.0, 1.5)`, a Retry-After waits exactly
//! that, a snooze gives its attempt back, a fatal error fails at once.

use tether_core::lifecycle::{backoff_delay_ms, error_tail, ERROR_TAIL_CHARS};
use tether_core::{Backoff, EventKind, Failure, Job, JobState};

use super::support::*;
use crate::TestDb;

/// Rounding slack between two timestamps written by one statement.
const EPS_MS: f64 = 2.0;

/// The delay a retry was given: `run_at − updated_at` of the failed job.
fn retry_delay(job: &Job) -> f64 {
    ms_between(job.run_at, job.updated_at)
}

#[track_caller]
fn assert_backoff(job: &Job, backoff: Backoff, attempt: i32) -> f64 {
    let low = backoff_delay_ms(backoff, attempt, 1.0) as f64;
    let high = low * 1.5;
    let delay = retry_delay(job);
    assert!(
        delay >= low - EPS_MS && delay < high + EPS_MS,
        "retry after attempt {attempt}: delay {delay} ms outside [{low}, {high})"
    );
    delay
}

/// Failures with attempts left go back to `queued` with an exponentially
/// growing, jittered delay (base 10 s: 1×, 2×, 4× times [1.0, 1.5)), are not
/// claimable before it, and record `retry_scheduled` with the error.
pub async fn retryable_failure_backs_off_exponentially_with_jitter(db: &TestDb) {
    let b = Backoff {
        base_ms: 10_000,
        cap_ms: 10_000_000,
    };
    let j = enqueue(db, T, job(Q).max_attempts(5).backoff(b)).await;
    assert_eq!(j.backoff, b);
    let mut above_base = 0;
    for attempt in 1..=3 {
        if attempt > 1 {
            db.make_due(j.id).await;
        }
        let c = claim_id(db, T, Q, j.id).await;
        assert_eq!(c.job.attempt, attempt);
        let msg = format!("boom {attempt}");
        let f = ok(db.engine.fail(T, j.id, c.lease_token, failure(&msg)).await);
        assert_eq!(f.state, JobState::Queued);
        assert_eq!(f.attempt, attempt);
        assert_eq!(f.last_error.as_deref(), Some(msg.as_str()));
        assert_eq!(f.finished_at, None);
        assert_eq!(f.lease_expires_at, None);
        assert_eq!(get(db, T, j.id).await, f);
        let delay = assert_backoff(&f, b, attempt);
        if delay > backoff_delay_ms(b, attempt, 1.0) as f64 + EPS_MS {
            above_base += 1;
        }
        claim_none(db, T, Q).await;
        let ev = ok(db.engine.events(T, j.id).await);
        let last = ev.last().unwrap();
        assert_eq!(
            (last.event, last.attempt),
            (EventKind::RetryScheduled, attempt)
        );
        assert!(
            last.detail.as_deref().unwrap_or("").contains(&msg),
            "retry_scheduled detail should carry the error: {:?}",
            last.detail
        );
    }
    assert!(above_base > 0, "no jitter seen in 3 retries");
}

/// The exponential delay stops growing at the cap.
pub async fn backoff_is_capped(db: &TestDb) {
    let b = Backoff {
        base_ms: 10_000,
        cap_ms: 15_000,
    };
    let j = enqueue(db, T, job(Q).max_attempts(5).backoff(b)).await;
    for attempt in 1..=3 {
        if attempt > 1 {
            db.make_due(j.id).await;
        }
        let c = claim_id(db, T, Q, j.id).await;
        let f = ok(db.engine.fail(T, j.id, c.lease_token, failure("x")).await);
        let delay = assert_backoff(&f, b, attempt);
        if attempt > 1 {
            assert!((15_000.0 - EPS_MS..22_500.0 + EPS_MS).contains(&delay));
        }
    }
}

/// A failure with `retry_after_ms` comes back exactly that much later and
/// still spends its attempt (on the last attempt it fails).
pub async fn retry_after_sets_the_exact_delay_and_counts_an_attempt(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(2)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let upstream = Failure {
        error: "429".into(),
        retry_after_ms: Some(45_000),
        ..Failure::default()
    };
    let f = ok(db
        .engine
        .fail(T, j.id, c.lease_token, upstream.clone())
        .await);
    assert_eq!((f.state, f.attempt), (JobState::Queued, 1));
    let delay = retry_delay(&f);
    assert!(
        (delay - 45_000.0).abs() <= EPS_MS,
        "retry_after 45000 gave {delay} ms"
    );
    claim_none(db, T, Q).await;
    db.make_due(j.id).await;
    let c = claim_id(db, T, Q, j.id).await;
    assert_eq!(c.job.attempt, 2);
    let f = ok(db.engine.fail(T, j.id, c.lease_token, upstream).await);
    assert_eq!(
        f.state,
        JobState::Failed,
        "retry-after still spends attempts"
    );

    // A zero Retry-After is claimable at once.
    let k = enqueue(db, T, job("q2").max_attempts(3)).await;
    let c = claim_id(db, T, "q2", k.id).await;
    ok(db
        .engine
        .fail(
            T,
            k.id,
            c.lease_token,
            Failure {
                retry_after_ms: Some(0),
                ..failure("now")
            },
        )
        .await);
    claim_id(db, T, "q2", k.id).await;
}

/// A snooze queues the job after the delay, clears the lease, gives the
/// attempt back and records `snoozed`; the old token only repeats the
/// snooze (another report with it is a conflict, invariant 20).
pub async fn snooze_requeues_after_delay_with_event(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(3)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let s = ok(db.engine.snooze(T, j.id, c.lease_token, 30_000).await);
    assert_eq!((s.state, s.attempt), (JobState::Queued, 0));
    assert_eq!(s.lease_expires_at, None);
    let delay = ms_between(s.run_at, s.updated_at);
    assert!(
        (delay - 30_000.0).abs() <= EPS_MS,
        "snooze 30000 gave {delay}"
    );
    assert_eq!(get(db, T, j.id).await, s);
    let last = ok(db.engine.events(T, j.id).await).pop().unwrap();
    assert_eq!((last.event, last.attempt), (EventKind::Snoozed, 0));
    expect_invalid_state(db.engine.complete(T, j.id, c.lease_token, None).await);
    claim_none(db, T, Q).await;
    db.make_due(j.id).await;
    assert_eq!(claim_id(db, T, Q, j.id).await.job.attempt, 1);
}

/// A fatal failure fails the job at once, attempts left or not.
pub async fn fatal_failure_fails_at_once(db: &TestDb) {
    let j = enqueue(db, T, job(Q).max_attempts(5)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let f = ok(db
        .engine
        .fail(T, j.id, c.lease_token, fatal("bad input"))
        .await);
    assert_eq!((f.state, f.attempt), (JobState::Failed, 1));
    assert!(f.finished_at.is_some());
    assert_eq!(f.lease_expires_at, None);
    assert_eq!(f.last_error.as_deref(), Some("bad input"));
    let last = ok(db.engine.events(T, j.id).await).pop().unwrap();
    assert_eq!((last.event, last.attempt), (EventKind::Failed, 1));
    assert!(last.detail.unwrap_or_default().contains("bad input"));
    claim_none(db, T, Q).await;
    let dlq = ok(db
        .engine
        .list(
            T,
            &tether_core::JobFilter {
                state: Some(JobState::Failed),
                ..Default::default()
            },
        )
        .await);
    assert_eq!(dlq.jobs.len(), 1);
    assert_eq!(dlq.jobs[0].id, j.id);
}

/// `last_error` keeps the last 2 000 characters (characters, not bytes) of
/// a longer message.
pub async fn last_error_keeps_the_tail(db: &TestDb) {
    let msg = format!("HEAD{}TAIL-END", "é".repeat(2_500));
    let j = enqueue(db, T, job(Q).max_attempts(3)).await;
    let c = claim_id(db, T, Q, j.id).await;
    let f = ok(db.engine.fail(T, j.id, c.lease_token, failure(&msg)).await);
    let kept = f.last_error.expect("last_error");
    assert_eq!(kept.chars().count(), ERROR_TAIL_CHARS);
    assert!(kept.ends_with("TAIL-END"));
    assert!(!kept.contains("HEAD"));
    assert_eq!(kept, error_tail(&msg));
    assert_eq!(get(db, T, j.id).await.last_error, Some(kept));
    let last = ok(db.engine.events(T, j.id).await).pop().unwrap();
    assert!(last.detail.unwrap_or_default().contains("TAIL-END"));
}
