//! Claims that carry the last batch's reports: the completions, then the
//! failures, are applied first, in the claim's transaction, each answered
//! as the batch and fail routes answer it; a refused report never fails the
//! claim; the slots the reports free count for the claim they ride; a
//! request bad as a whole changes nothing.

use serde_json::json;
use tether_core::{
    CarriedReports, ClaimedJob, Completion, EventKind, Failure, FailureReport, JobState,
    QueueConfigPatch, ReportedAndClaimed,
};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

fn done(c: &ClaimedJob) -> Completion {
    Completion {
        id: c.job.id,
        lease_token: c.lease_token,
        result: Some(json!({"done": c.job.id})),
    }
}

fn failed(c: &ClaimedJob, failure: Failure) -> FailureReport {
    FailureReport {
        id: c.job.id,
        lease_token: c.lease_token,
        failure,
    }
}

async fn report_and_claim(
    db: &TestDb,
    limit: u32,
    complete: Vec<Completion>,
    fail: Vec<FailureReport>,
) -> ReportedAndClaimed {
    let reports = CarriedReports { complete, fail };
    ok(db
        .engine
        .report_and_claim(T, &claim_req(Q, limit), &reports)
        .await)
}

/// Completions and failures carried by a claim are applied and answered
/// one by one (a wrong token and an unknown id refused alone), and the
/// claim takes the jobs left ready.
pub async fn a_claim_applies_its_reports_first_and_answers_each(db: &TestDb) {
    for _ in 0..5 {
        enqueue(db, T, job(Q)).await;
    }
    let held = claim(db, T, Q, 3).await;
    let (a, b, c) = (&held[0], &held[1], &held[2]);
    let stray = Completion {
        id: Uuid::now_v7(),
        lease_token: random_token(),
        result: None,
    };
    let wrong = Completion {
        lease_token: random_token(),
        ..done(c)
    };
    let retry = Failure {
        retry_after_ms: Some(600_000),
        ..failure("upstream down")
    };
    let out = report_and_claim(db, 10, vec![done(a), wrong, stray], vec![failed(b, retry)]).await;

    // One answer per report: completions first, then failures.
    assert_eq!(out.reports.len(), 4);
    let mut answers = out.reports.into_iter();
    ok(answers.next().expect("four answers"));
    expect_lease_lost(answers.next().expect("four answers"));
    expect_not_found(answers.next().expect("four answers"));
    ok(answers.next().expect("four answers"));

    // The refused reports did not fail the claim: the two jobs left ready
    // are claimed (the failed one waits ten minutes for its retry).
    let mut claimed: Vec<Uuid> = out.jobs.iter().map(|c| c.job.id).collect();
    claimed.sort();
    let mut ready: Vec<Uuid> = jobs_in(db, T, Q)
        .await
        .into_iter()
        .filter(|j| ![a.job.id, b.job.id, c.job.id].contains(&j.id))
        .map(|j| j.id)
        .collect();
    ready.sort();
    assert_eq!(claimed, ready);

    let a_now = get(db, T, a.job.id).await;
    assert_eq!(a_now.state, JobState::Succeeded);
    assert_eq!(a_now.result, Some(json!({"done": a.job.id})));
    assert_eq!(count_events(db, T, a.job.id, EventKind::Succeeded).await, 1);
    let b_now = get(db, T, b.job.id).await;
    assert_eq!(b_now.state, JobState::Queued);
    assert_eq!(b_now.last_error.as_deref(), Some("upstream down"));
    assert_eq!(
        count_events(db, T, b.job.id, EventKind::RetryScheduled).await,
        1
    );
    // The wrong token changed nothing: c is still its holder's.
    let c_now = get(db, T, c.job.id).await;
    assert_eq!(c_now.state, JobState::Running);
    ok(db.engine.complete(T, c.job.id, c.lease_token, None).await);
}

/// Under `max_running` and per-key limits, the slot a carried report frees
/// is taken by the claim it rides.
pub async fn the_slots_carried_reports_free_count_for_their_claim(db: &TestDb) {
    for _ in 0..4 {
        enqueue(db, T, job(Q)).await;
    }
    let limit = QueueConfigPatch {
        max_running: Some(Some(1)),
        ..QueueConfigPatch::default()
    };
    ok(db.engine.configure_queue(T, Q, &limit).await);
    let first = claim_one(db, T, Q).await;
    claim_none(db, T, Q).await;
    // The completion frees the one slot in the claim's own transaction.
    let out = report_and_claim(db, 10, vec![done(&first)], vec![]).await;
    assert!(out.reports[0].is_ok());
    assert_eq!(
        out.jobs.len(),
        1,
        "the freed slot is taken by the same claim"
    );
    // So does a failure.
    let second = &out.jobs[0];
    let out = report_and_claim(db, 10, vec![], vec![failed(second, fatal("no"))]).await;
    assert!(out.reports[0].is_ok());
    assert_eq!(out.jobs.len(), 1);
    assert_eq!(get(db, T, second.job.id).await.state, JobState::Failed);

    // Per-key limits and fairness choose the jobs in the same transaction.
    let keyed = QueueConfigPatch {
        max_running: Some(None),
        key_max_running: Some(Some(1)),
        fair: Some(true),
        ..QueueConfigPatch::default()
    };
    ok(db.engine.configure_queue(T, "keyed", &keyed).await);
    for _ in 0..3 {
        enqueue(db, T, job("keyed").concurrency_key("k")).await;
    }
    let held = claim(db, T, "keyed", 10).await;
    assert_eq!(held.len(), 1);
    let reports = CarriedReports {
        complete: vec![done(&held[0])],
        fail: vec![],
    };
    let out = ok(db
        .engine
        .report_and_claim(T, &claim_req("keyed", 10), &reports)
        .await);
    assert!(out.reports[0].is_ok());
    assert_eq!(out.jobs.len(), 1, "the key's one slot, freed by the report");
}

/// Invariant 20 holds for carried reports: a repeat is answered like the
/// first, a different report with the spent token is a conflict.
pub async fn a_carried_report_repeated_is_answered_like_the_first(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    let held = claim_one(db, T, Q).await;
    for _ in 0..2 {
        let out = report_and_claim(db, 1, vec![done(&held)], vec![]).await;
        assert!(out.reports[0].is_ok(), "{:?}", out.reports[0]);
        assert!(out.jobs.is_empty());
    }
    assert_eq!(
        count_events(db, T, held.job.id, EventKind::Succeeded).await,
        1
    );
    // Sent again as a failure: a different report with the spent token.
    let out = report_and_claim(db, 1, vec![], vec![failed(&held, failure("late"))]).await;
    expect_invalid_state(out.reports.into_iter().next().expect("one answer"));
}

/// Over 1 000 reports, or one bad failure: the whole request is refused
/// and nothing is applied or claimed.
pub async fn a_claim_bad_as_a_whole_changes_nothing(db: &TestDb) {
    enqueue(db, T, job(Q)).await;
    enqueue(db, T, job(Q)).await;
    let held = claim_one(db, T, Q).await;
    let mut complete = vec![done(&held)];
    complete.extend((0..1000).map(|_| Completion {
        id: Uuid::now_v7(),
        lease_token: random_token(),
        result: None,
    }));
    let reports = CarriedReports {
        complete,
        fail: vec![],
    };
    expect_invalid(
        db.engine
            .report_and_claim(T, &claim_req(Q, 1), &reports)
            .await,
    );
    // A bad failure (fatal and a cancel acknowledgement at once) too.
    let reports = CarriedReports {
        complete: vec![done(&held)],
        fail: vec![failed(
            &held,
            Failure {
                fatal: true,
                cancelled: true,
                ..failure("both")
            },
        )],
    };
    expect_invalid(
        db.engine
            .report_and_claim(T, &claim_req(Q, 1), &reports)
            .await,
    );
    assert_eq!(get(db, T, held.job.id).await.state, JobState::Running);
    assert_eq!(claim(db, T, Q, 10).await.len(), 1, "nothing was claimed");
}
