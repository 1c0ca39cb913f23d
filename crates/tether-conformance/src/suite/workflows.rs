//! Invariant 16, dependencies order work: a job waits until every
//! dependency succeeded (or, with `run`, ended), the release or the cascade
//! commits with the dependency's final transition on every path that ends a
//! job, and a failure cancels the graph downstream. And workflows: named
//! graphs, read, cancelled and retried whole, their state derived from
//! their jobs.

use chrono::{Duration, Utc};
use serde_json::json;
use tether_core::{
    Completion, DependencyFailure, EventKind, JobFilter, JobState, NewWorkflow, ReplayFilter,
    RetryMode, WorkflowFilter, WorkflowState,
};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// Claims `id` and completes it with `result`.
async fn succeed(db: &TestDb, id: Uuid, result: serde_json::Value) {
    let c = claim_id(db, T, Q, id).await;
    ok(db.engine.complete(T, id, c.lease_token, Some(result)).await);
}

/// Claims `id` and fails it for good.
async fn fail_for_good(db: &TestDb, id: Uuid) {
    let c = claim_id(db, T, Q, id).await;
    ok(db.engine.fail(T, id, c.lease_token, fatal("broken")).await);
}

async fn state(db: &TestDb, id: Uuid) -> JobState {
    get(db, T, id).await.state
}

/// The detail of the job's last event.
async fn last_detail(db: &TestDb, id: Uuid) -> Option<serde_json::Value> {
    let last = ok(db.engine.events(T, id).await).pop().unwrap();
    last.detail.map(|d| serde_json::from_str(&d).unwrap())
}

/// A job is created `waiting`, is not claimable, and is queued (event
/// `released`) once its dependency succeeded; its dependencies read back
/// with their results, in the order given.
pub async fn a_dependent_waits_until_its_dependencies_succeed(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, job(Q)).await;
    let c = enqueue(db, T, job(Q).after(b.id).after(a.id)).await;
    assert_eq!(c.state, JobState::Waiting);
    assert_eq!(c.depends_on, vec![b.id, a.id]);
    assert_eq!(get(db, T, c.id).await, c, "the answer is the stored job");
    assert_eq!(ok(db.engine.queue_stats(T, Q).await).counts.waiting, 1);

    succeed(db, a.id, json!({"from": "a"})).await;
    assert_eq!(state(db, c.id).await, JobState::Waiting);
    succeed(db, b.id, json!({"from": "b"})).await;
    assert_eq!(state(db, c.id).await, JobState::Queued);
    assert_eq!(
        history(db, T, c.id).await,
        vec![(EventKind::Enqueued, 0), (EventKind::Released, 0)]
    );
    let deps = ok(db.engine.dependencies(T, c.id).await);
    let got: Vec<_> = deps
        .iter()
        .map(|d| (d.id, d.state, d.result.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (b.id, JobState::Succeeded, Some(json!({"from": "b"}))),
            (a.id, JobState::Succeeded, Some(json!({"from": "a"}))),
        ]
    );
    assert!(ok(db.engine.dependencies(T, a.id).await).is_empty());
    expect_not_found(db.engine.dependencies(T, Uuid::now_v7()).await);
    expect_not_found(db.engine.dependencies(T2, c.id).await);
    claim_id(db, T, Q, c.id).await;
}

/// Dependencies that already ended count at once: succeeded ones are met
/// (the job is created `queued`), a failed one cancels a `cancel` job and
/// is met for a `run` one.
pub async fn dependencies_that_already_ended_count_at_enqueue(db: &TestDb) {
    let done = enqueue(db, T, job(Q)).await;
    succeed(db, done.id, json!(1)).await;
    let broken = enqueue(db, T, job(Q)).await;
    fail_for_good(db, broken.id).await;

    let ready = enqueue(db, T, job(Q).after(done.id)).await;
    assert_eq!(ready.state, JobState::Queued);
    assert_eq!(
        history(db, T, ready.id).await,
        vec![(EventKind::Enqueued, 0)]
    );

    let doomed = enqueue(db, T, job(Q).after(done.id).after(broken.id)).await;
    assert_eq!(doomed.state, JobState::Cancelled);
    assert!(get(db, T, doomed.id).await.finished_at.is_some());
    assert_eq!(
        last_detail(db, doomed.id).await,
        Some(json!({"dependency": broken.id, "state": "failed"}))
    );

    let anyway = enqueue(
        db,
        T,
        job(Q)
            .after(broken.id)
            .dependency_failure(DependencyFailure::Run),
    )
    .await;
    assert_eq!(anyway.state, JobState::Queued);
    assert_eq!(anyway.dependency_failure, DependencyFailure::Run);
}

/// A failure cancels every `cancel` job downstream (each with one
/// `cancelled` event naming the job it came through), while a `run` job
/// is released once all its dependencies ended.
pub async fn a_failure_cancels_the_graph_downstream(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let other = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, job(Q).after(a.id)).await;
    let c = enqueue(db, T, job(Q).after(b.id)).await;
    let d = enqueue(db, T, job(Q).after(b.id).after(c.id)).await;
    let summary = enqueue(
        db,
        T,
        job(Q)
            .after(c.id)
            .after(other.id)
            .dependency_failure(DependencyFailure::Run),
    )
    .await;

    fail_for_good(db, a.id).await;
    for (id, through, how) in [(b.id, a.id, "failed"), (c.id, b.id, "cancelled")] {
        assert_eq!(state(db, id).await, JobState::Cancelled);
        assert_eq!(count_events(db, T, id, EventKind::Cancelled).await, 1);
        assert_eq!(
            last_detail(db, id).await,
            Some(json!({"dependency": through, "state": how}))
        );
    }
    assert_eq!(state(db, d.id).await, JobState::Cancelled);
    assert_eq!(count_events(db, T, d.id, EventKind::Cancelled).await, 1);
    // `summary` still waits for `other`.
    assert_eq!(state(db, summary.id).await, JobState::Waiting);
    succeed(db, other.id, json!(null)).await;
    assert_eq!(state(db, summary.id).await, JobState::Queued);
    claim_id(db, T, Q, summary.id).await;
}

/// Every path that ends a job moves what waits for it: batch complete,
/// cancel, the reaper, expiry.
pub async fn every_path_that_ends_a_job_moves_its_dependents(db: &TestDb) {
    // Batch completion releases.
    let a = enqueue(db, T, job(Q)).await;
    let after_a = enqueue(db, T, job(Q).after(a.id)).await;
    let c = claim_id(db, T, Q, a.id).await;
    ok(db
        .engine
        .complete_many(
            T,
            &[Completion {
                id: a.id,
                lease_token: c.lease_token,
                result: None,
            }],
        )
        .await);
    assert_eq!(state(db, after_a.id).await, JobState::Queued);
    claim_id(db, T, Q, after_a.id).await;

    // Cancelling a queued dependency cancels; cancelling a waiting job
    // cancels it at once.
    let b = enqueue(db, T, job("other")).await;
    let after_b = enqueue(db, T, job("other").after(b.id)).await;
    let after_after_b = enqueue(db, T, job("other").after(after_b.id)).await;
    let cancelled = ok(db.engine.cancel(T, after_after_b.id).await);
    assert_eq!(cancelled.state, JobState::Cancelled);
    ok(db.engine.cancel(T, b.id).await);
    assert_eq!(state(db, after_b.id).await, JobState::Cancelled);

    // The reaper failing an exhausted job cancels.
    let r = enqueue(db, T, job(Q).max_attempts(1)).await;
    let after_r = enqueue(db, T, job(Q).after(r.id)).await;
    claim_id(db, T, Q, r.id).await;
    db.lapse_lease(r.id).await;
    ok(db.engine.reap_lapsed_leases(100).await);
    assert_eq!(state(db, r.id).await, JobState::Failed);
    assert_eq!(state(db, after_r.id).await, JobState::Cancelled);

    // Expiry cancels.
    let past = Utc::now() - Duration::seconds(60);
    let e = enqueue(db, T, job("late").expires_at(past)).await;
    let after_e = enqueue(db, T, job("late").after(e.id)).await;
    ok(db.engine.expire_jobs(100).await);
    assert_eq!(state(db, e.id).await, JobState::Failed);
    assert_eq!(state(db, after_e.id).await, JobState::Cancelled);
}

/// A batch is a whole graph: entries name earlier entries, the graph is
/// written at once, and `depends_on` lists a job's direct dependents.
pub async fn a_batch_enqueues_a_graph(db: &TestDb) {
    let out = ok(db
        .engine
        .enqueue_many(
            T,
            &[
                job(Q),
                job(Q).after_entry(0),
                job(Q).after_entry(0).after_entry(1),
            ],
        )
        .await);
    let ids: Vec<Uuid> = out.iter().map(|e| e.job.id).collect();
    let states: Vec<JobState> = out.iter().map(|e| e.job.state).collect();
    assert_eq!(
        states,
        vec![JobState::Queued, JobState::Waiting, JobState::Waiting]
    );
    assert_eq!(out[2].job.depends_on, vec![ids[0], ids[1]]);
    for e in &out {
        assert_eq!(
            get(db, T, e.job.id).await,
            e.job,
            "the answer is the stored job"
        );
    }
    let dependents = ok(db
        .engine
        .list(
            T,
            &JobFilter {
                depends_on: Some(ids[0]),
                ..JobFilter::default()
            },
        )
        .await);
    let listed: Vec<Uuid> = dependents.jobs.iter().map(|j| j.id).collect();
    assert_eq!(listed, vec![ids[2], ids[1]], "newest first");

    succeed(db, ids[0], json!(null)).await;
    assert_eq!(state(db, ids[1]).await, JobState::Queued);
    assert_eq!(state(db, ids[2]).await, JobState::Waiting);
    succeed(db, ids[1], json!(null)).await;
    assert_eq!(state(db, ids[2]).await, JobState::Queued);
    claim_id(db, T, Q, ids[2]).await;

    // An entry whose dependency is already failed cancels the entries after it.
    let broken = enqueue(db, T, job(Q)).await;
    fail_for_good(db, broken.id).await;
    let out = ok(db
        .engine
        .enqueue_many(T, &[job(Q).after(broken.id), job(Q).after_entry(0)])
        .await);
    assert_eq!(out[0].job.state, JobState::Cancelled);
    assert_eq!(state(db, out[1].job.id).await, JobState::Cancelled);
}

/// An unknown dependency (or another tenant's job) is a 400 naming the
/// field, and nothing is written; bad shapes are refused before any write.
pub async fn bad_dependencies_write_nothing(db: &TestDb) {
    let theirs = enqueue(db, T2, job(Q)).await;
    let e = expect_invalid(
        db.engine
            .enqueue_many(T, &[job(Q), job(Q).after_entry(0).after(Uuid::now_v7())])
            .await,
    );
    assert!(e.to_string().contains("jobs[1].depends_on"), "{e}");
    let e = expect_invalid(db.engine.enqueue(T, job(Q).after(theirs.id)).await);
    assert!(e.to_string().contains("depends_on"), "{e}");
    assert!(
        !e.to_string().contains("jobs[0]"),
        "a single job names its own field: {e}"
    );
    // A batch of one names its entry, as validation does.
    let e = expect_invalid(db.engine.enqueue_many(T, &[job(Q).after(theirs.id)]).await);
    assert!(e.to_string().contains("jobs[0].depends_on"), "{e}");
    assert!(all_jobs(db, T).await.is_empty(), "nothing was written");

    let mine = enqueue(db, T, job(Q)).await;
    for bad in [
        vec![job(Q).after_entry(0)],
        vec![job(Q), job(Q).after_entry(1)],
        vec![job(Q), job(Q).after_entry(0).after_entry(0)],
        vec![job(Q).after(mine.id).after(mine.id)],
    ] {
        expect_invalid(db.engine.enqueue_many(T, &bad).await);
    }
    expect_invalid(db.engine.enqueue(T, job(Q).after_entry(0)).await);
    let too_many = (0..=tether_core::MAX_DEPENDENCIES).fold(job(Q), |j, _| j.after(mine.id));
    expect_invalid(db.engine.enqueue(T, too_many).await);
    assert_eq!(all_jobs(db, T).await.len(), 1);
}

/// Two dependencies ending in two transactions at the same moment release
/// their dependent exactly once; a dependency ending while its dependent is
/// being enqueued is never missed.
pub async fn concurrent_ends_release_exactly_once(db: &TestDb) {
    for _ in 0..25 {
        let a = enqueue(db, T, job(Q)).await;
        let b = enqueue(db, T, job(Q)).await;
        let c = enqueue(db, T, job(Q).after(a.id).after(b.id)).await;
        let ca = claim_id(db, T, Q, a.id).await;
        let cb = claim_id(db, T, Q, b.id).await;
        let (ra, rb) = tokio::join!(
            db.engine.complete(T, a.id, ca.lease_token, None),
            db.engine.complete(T, b.id, cb.lease_token, None),
        );
        ok(ra);
        ok(rb);
        assert_eq!(state(db, c.id).await, JobState::Queued);
        assert_eq!(count_events(db, T, c.id, EventKind::Released).await, 1);
        claim_id(db, T, Q, c.id).await;

        let d = enqueue(db, T, job(Q)).await;
        let cd = claim_id(db, T, Q, d.id).await;
        let (done, dependent) = tokio::join!(
            db.engine.complete(T, d.id, cd.lease_token, None),
            db.engine.enqueue(T, job(Q).after(d.id)),
        );
        ok(done);
        let dependent = ok(dependent).job;
        assert_eq!(
            state(db, dependent.id).await,
            JobState::Queued,
            "a dependent enqueued as its dependency ended was stranded"
        );
        claim_id(db, T, Q, dependent.id).await;
    }
}

/// A replayed job with dependencies goes back to `waiting` and is settled
/// like a new one; replaying the failed dependency and then its cancelled
/// dependent runs both in order.
pub async fn replay_waits_for_dependencies_again(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, job(Q).after(a.id)).await;
    fail_for_good(db, a.id).await;
    assert_eq!(state(db, b.id).await, JobState::Cancelled);

    // Replayed while its dependency is still failed: cancelled again.
    let again = ok(db.engine.replay(T, b.id).await);
    assert_eq!(again.state, JobState::Cancelled);

    ok(db.engine.replay(T, a.id).await);
    let waiting = ok(db.engine.replay(T, b.id).await);
    assert_eq!(waiting.state, JobState::Waiting);
    succeed(db, a.id, json!(null)).await;
    assert_eq!(state(db, b.id).await, JobState::Queued);

    // Bulk replay settles too.
    let c = enqueue(db, T, job("bulk")).await;
    let d = enqueue(db, T, job("bulk").after(c.id)).await;
    ok(db.engine.cancel(T, c.id).await);
    assert_eq!(state(db, d.id).await, JobState::Cancelled);
    let mut filter = ReplayFilter::failed("bulk");
    filter.state = JobState::Cancelled;
    assert_eq!(ok(db.engine.replay_many(T, &filter).await).replayed, 2);
    assert_eq!(state(db, c.id).await, JobState::Queued);
    assert_eq!(state(db, d.id).await, JobState::Waiting);
}

fn flow(name: &str) -> NewWorkflow {
    NewWorkflow {
        name: name.into(),
        idempotency_key: None,
    }
}

/// A workflow's batch is one graph written at once: its jobs carry its id,
/// its graph reads back whole, its state follows its jobs (running, then
/// succeeded with the last job's end as `finished_at`).
pub async fn a_workflow_is_a_graph_enqueued_at_once(db: &TestDb) {
    let out = ok(db
        .engine
        .enqueue_workflow(
            T,
            &flow("publish"),
            &[
                job(Q),
                job(Q).after_entry(0),
                job(Q).after_entry(0).after_entry(1),
            ],
        )
        .await);
    assert!(out.created);
    let w = out.workflow.clone();
    assert_eq!(
        (w.name.as_str(), w.state),
        ("publish", WorkflowState::Running)
    );
    assert_eq!((w.counts.queued, w.counts.waiting), (1, 2));
    assert_eq!(w.finished_at, None);
    let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    for e in &out.jobs {
        assert_eq!(e.job.workflow_id, Some(w.id));
        assert_eq!(
            get(db, T, e.job.id).await,
            e.job,
            "the answer is the stored job"
        );
    }
    let graph = ok(db.engine.get_workflow(T, w.id).await);
    assert_eq!(graph.workflow, w);
    let edges: Vec<(Uuid, Vec<Uuid>)> = graph
        .jobs
        .iter()
        .map(|j| (j.id, j.depends_on.clone()))
        .collect();
    assert_eq!(
        edges,
        vec![
            (ids[0], vec![]),
            (ids[1], vec![ids[0]]),
            (ids[2], vec![ids[0], ids[1]]),
        ]
    );
    let listed = ok(db
        .engine
        .list(
            T,
            &JobFilter {
                workflow_id: Some(w.id),
                ..JobFilter::default()
            },
        )
        .await);
    assert_eq!(listed.jobs.len(), 3);

    for id in &ids {
        succeed(db, *id, json!(null)).await;
    }
    let done = ok(db.engine.get_workflow(T, w.id).await).workflow;
    assert_eq!(done.state, WorkflowState::Succeeded);
    assert_eq!(done.counts.succeeded, 3);
    assert_eq!(done.finished_at, get(db, T, ids[2]).await.finished_at);
    expect_code(db.engine.get_workflow(T2, w.id).await, "not_found");
    expect_code(db.engine.get_workflow(T, Uuid::now_v7()).await, "not_found");
}

/// A second batch with the same workflow key answers the existing workflow
/// and its jobs and writes nothing.
pub async fn a_workflow_key_answers_the_existing_workflow(db: &TestDb) {
    let keyed = NewWorkflow {
        name: "nightly".into(),
        idempotency_key: Some("2026-12-06".into()),
    };
    let first = ok(db
        .engine
        .enqueue_workflow(T, &keyed, &[job(Q), job(Q).after_entry(0)])
        .await);
    let again = ok(db
        .engine
        .enqueue_workflow(T, &keyed, &[job(Q), job(Q), job(Q)])
        .await);
    assert!(!again.created);
    assert_eq!(again.workflow.id, first.workflow.id);
    let ids = |o: &tether_core::WorkflowEnqueued| -> Vec<Uuid> {
        o.jobs.iter().map(|e| e.job.id).collect()
    };
    assert_eq!(ids(&again), ids(&first));
    assert!(again.jobs.iter().all(|e| !e.created));
    assert_eq!(all_jobs(db, T).await.len(), 2, "nothing was written");
    // Another tenant's key is its own.
    assert!(ok(db.engine.enqueue_workflow(T2, &keyed, &[job(Q)]).await).created);
}

/// Jobs join a running workflow later (a handler fanning out), waiting for
/// any of its jobs; a finished workflow takes no more, an unknown or
/// another tenant's is refused, and nothing is written.
pub async fn jobs_join_a_running_workflow(db: &TestDb) {
    let out = ok(db
        .engine
        .enqueue_workflow(T, &flow("import"), &[job(Q)])
        .await);
    let (w, root) = (out.workflow.id, out.jobs[0].job.id);
    let child = enqueue(db, T, job(Q).workflow(w).after(root)).await;
    assert_eq!(child.workflow_id, Some(w));
    assert_eq!(child.state, JobState::Waiting);
    let batch = ok(db
        .engine
        .enqueue_many(T, &[job(Q).workflow(w), job(Q).workflow(w).after_entry(0)])
        .await);
    assert_eq!(ok(db.engine.get_workflow(T, w).await).jobs.len(), 4);

    let e = expect_invalid(db.engine.enqueue(T, job(Q).workflow(Uuid::now_v7())).await);
    assert!(e.to_string().contains("workflow_id"), "{e}");
    assert!(
        !e.to_string().contains("jobs[0]"),
        "a single job names its own field: {e}"
    );
    let theirs = ok(db.engine.enqueue_workflow(T2, &flow("x"), &[job(Q)]).await);
    expect_invalid(
        db.engine
            .enqueue(T, job(Q).workflow(theirs.workflow.id))
            .await,
    );
    let e = expect_invalid(
        db.engine
            .enqueue_many(T, &[job(Q), job(Q).workflow(Uuid::now_v7())])
            .await,
    );
    assert!(e.to_string().contains("jobs[1].workflow_id"), "{e}");

    for id in [root, child.id, batch[0].job.id, batch[1].job.id] {
        succeed(db, id, json!(null)).await;
    }
    assert_eq!(
        ok(db.engine.get_workflow(T, w).await).workflow.state,
        WorkflowState::Succeeded
    );
    expect_code(
        db.engine.enqueue(T, job(Q).workflow(w)).await,
        "invalid_state",
    );
    assert_eq!(ok(db.engine.get_workflow(T, w).await).jobs.len(), 4);
    // A new workflow's jobs cannot name another workflow.
    expect_invalid(
        db.engine
            .enqueue_workflow(T, &flow("y"), &[job(Q).workflow(w)])
            .await,
    );
}

/// A workflow is `failed` when every job finished and one failed,
/// `cancelled` when none failed and one was cancelled; listings filter by
/// state and name and page newest first.
pub async fn workflows_list_by_state_and_name(db: &TestDb) {
    let mut made = Vec::new();
    for name in ["a", "b", "a", "b", "a"] {
        made.push(ok(db
            .engine
            .enqueue_workflow(T, &flow(name), &[job(Q)])
            .await));
    }
    let job_of = |i: usize| made[i].jobs[0].job.id;
    fail_for_good(db, job_of(0)).await;
    ok(db.engine.cancel(T, job_of(1)).await);
    succeed(db, job_of(2), json!(null)).await;
    for (i, want) in [
        WorkflowState::Failed,
        WorkflowState::Cancelled,
        WorkflowState::Succeeded,
    ]
    .into_iter()
    .enumerate()
    {
        let got = ok(db.engine.get_workflow(T, made[i].workflow.id).await);
        assert_eq!(got.workflow.state, want);
    }

    let list = |filter: WorkflowFilter| async move {
        let page = ok(db.engine.list_workflows(T, &filter).await);
        let ids: Vec<Uuid> = page.workflows.iter().map(|w| w.id).collect();
        (ids, page.next_cursor)
    };
    let id = |i: usize| made[i].workflow.id;
    let (all, _) = list(WorkflowFilter::default()).await;
    assert_eq!(all, vec![id(4), id(3), id(2), id(1), id(0)], "newest first");
    let running = WorkflowFilter {
        state: Some(WorkflowState::Running),
        ..WorkflowFilter::default()
    };
    assert_eq!(list(running).await.0, vec![id(4), id(3)]);
    let named_a = WorkflowFilter {
        name: Some("a".into()),
        limit: Some(2),
        ..WorkflowFilter::default()
    };
    let (first, cursor) = list(named_a.clone()).await;
    assert_eq!(first, vec![id(4), id(2)]);
    let (rest, end) = list(WorkflowFilter { cursor, ..named_a }).await;
    assert_eq!((rest, end), (vec![id(0)], None));
    assert!(ok(db
        .engine
        .list_workflows(T2, &WorkflowFilter::default())
        .await)
    .workflows
    .is_empty());
}

/// Cancelling a workflow cancels its waiting and queued jobs at once and
/// asks its running ones to stop; jobs outside it that wait for its jobs
/// are cancelled by the cascade.
pub async fn cancelling_a_workflow_stops_every_unfinished_job(db: &TestDb) {
    let out = ok(db
        .engine
        .enqueue_workflow(T, &flow("w"), &[job(Q), job(Q), job(Q).after_entry(0)])
        .await);
    let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    let outside = enqueue(db, T, job("other").after(ids[1])).await;
    claim_id(db, T, Q, ids[0]).await;
    let done = ok(db.engine.cancel_workflow(T, out.workflow.id).await);
    assert_eq!((done.cancelled, done.cancel_requested), (2, 1));
    assert!(get(db, T, ids[0]).await.cancel_requested);
    assert_eq!(state(db, ids[1]).await, JobState::Cancelled);
    assert_eq!(state(db, ids[2]).await, JobState::Cancelled);
    assert_eq!(state(db, outside.id).await, JobState::Cancelled);
    let again = ok(db.engine.cancel_workflow(T, out.workflow.id).await);
    assert_eq!((again.cancelled, again.cancel_requested), (0, 0));
    expect_code(
        db.engine.cancel_workflow(T2, out.workflow.id).await,
        "not_found",
    );
}

/// Retrying a workflow replays its failed jobs; with downstream, also what
/// their failure cancelled or ran anyway, which wait for them again;
/// succeeded jobs elsewhere in the graph are left alone.
pub async fn retrying_a_workflow_puts_failed_jobs_back(db: &TestDb) {
    let out = ok(db
        .engine
        .enqueue_workflow(
            T,
            &flow("w"),
            &[
                job(Q),
                job(Q).after_entry(0),
                job(Q)
                    .after_entry(0)
                    .dependency_failure(DependencyFailure::Run),
                job(Q),
            ],
        )
        .await);
    let w = out.workflow.id;
    let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    fail_for_good(db, ids[0]).await;
    succeed(db, ids[2], json!("ran anyway")).await;
    succeed(db, ids[3], json!(null)).await;
    assert_eq!(state(db, ids[1]).await, JobState::Cancelled);
    assert_eq!(
        ok(db.engine.get_workflow(T, w).await).workflow.state,
        WorkflowState::Failed
    );

    assert_eq!(
        ok(db.engine.retry_workflow(T, w, RetryMode::Failed).await),
        1
    );
    assert_eq!(state(db, ids[0]).await, JobState::Queued);
    assert_eq!(state(db, ids[1]).await, JobState::Cancelled);
    fail_for_good(db, ids[0]).await;

    let back = ok(db
        .engine
        .retry_workflow(T, w, RetryMode::FailedAndDownstream)
        .await);
    assert_eq!(back, 3);
    assert_eq!(state(db, ids[0]).await, JobState::Queued);
    assert_eq!(state(db, ids[1]).await, JobState::Waiting);
    assert_eq!(state(db, ids[2]).await, JobState::Waiting);
    assert_eq!(
        state(db, ids[3]).await,
        JobState::Succeeded,
        "not downstream"
    );
    assert_eq!(
        ok(db.engine.get_workflow(T, w).await).workflow.state,
        WorkflowState::Running
    );
    succeed(db, ids[0], json!(null)).await;
    assert_eq!(state(db, ids[1]).await, JobState::Queued);
    assert_eq!(state(db, ids[2]).await, JobState::Queued);
    expect_code(
        db.engine.retry_workflow(T2, w, RetryMode::Failed).await,
        "not_found",
    );
}

/// A waiting job is work to come: it holds its unique key, as a queued or
/// running job does, until it ends.
pub async fn a_waiting_job_holds_its_unique_key(db: &TestDb) {
    let a = enqueue(db, T, job(Q)).await;
    let waiting = enqueue(db, T, job(Q).after(a.id).unique_key("receipt:1")).await;
    let again = ok(db.engine.enqueue(T, job(Q).unique_key("receipt:1")).await);
    assert!(!again.created);
    assert_eq!(again.job.id, waiting.id);
    ok(db.engine.cancel(T, waiting.id).await);
    assert!(ok(db.engine.enqueue(T, job(Q).unique_key("receipt:1")).await).created);
}

/// Every workflow event of `ids`' histories (job by job, each job's in
/// order), with the job that carries it and its detail.
async fn workflow_events(db: &TestDb, ids: &[Uuid]) -> Vec<(Uuid, EventKind, String)> {
    let mut found = Vec::new();
    for id in ids {
        for e in ok(db.engine.events(T, *id).await) {
            if matches!(
                e.event,
                EventKind::WorkflowCreated | EventKind::WorkflowFinished
            ) {
                found.push((*id, e.event, e.detail.unwrap_or_default()));
            }
        }
    }
    found
}

/// `workflow_created` is an event of the batch's first job, after its
/// `enqueued`; `workflow_finished` is written once per finish, as an event
/// of the job whose end left none unfinished, after that end's own event,
/// with the workflow's state: when the last job succeeds, when a failure's
/// cascade cancels the rest, when the workflow is cancelled, again after a
/// retry ends it again, and at creation when every job ended at once.
pub async fn workflow_events_announce_creation_and_each_finish(db: &TestDb) {
    // The last job's failure: failed.
    let out = ok(db
        .engine
        .enqueue_workflow(
            T,
            &flow("publish"),
            &[job(Q), job(Q).after_entry(0), job(Q)],
        )
        .await);
    let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    assert_eq!(
        history(db, T, ids[0]).await,
        vec![(EventKind::Enqueued, 0), (EventKind::WorkflowCreated, 0)]
    );
    succeed(db, ids[0], json!(null)).await;
    succeed(db, ids[1], json!(null)).await;
    assert_eq!(
        workflow_events(db, &ids).await,
        vec![(ids[0], EventKind::WorkflowCreated, "publish".into())],
        "not finished while a job is left"
    );
    fail_for_good(db, ids[2]).await;
    assert_eq!(
        history(db, T, ids[2]).await.last().copied(),
        Some((EventKind::WorkflowFinished, 1)),
        "after the end's own event"
    );
    assert_eq!(
        workflow_events(db, &ids).await[1..],
        [(ids[2], EventKind::WorkflowFinished, "failed".into())]
    );

    // A retry runs it again; its end announces again.
    assert_eq!(
        ok(db
            .engine
            .retry_workflow(T, out.workflow.id, RetryMode::Failed)
            .await),
        1
    );
    succeed(db, ids[2], json!(null)).await;
    assert_eq!(
        workflow_events(db, &ids).await[2..],
        [(ids[2], EventKind::WorkflowFinished, "succeeded".into())]
    );

    // A failure whose cascade cancels the rest: one announcement, on a
    // cancelled job, after its `cancelled`.
    let out = ok(db
        .engine
        .enqueue_workflow(
            T,
            &flow("chain"),
            &[job(Q), job(Q).after_entry(0), job(Q).after_entry(1)],
        )
        .await);
    let chain: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    fail_for_good(db, chain[0]).await;
    let events = workflow_events(db, &chain).await;
    assert_eq!(events.len(), 2, "{events:?}");
    let (by, kind, detail) = &events[1];
    assert_eq!(
        (*kind, detail.as_str()),
        (EventKind::WorkflowFinished, "failed")
    );
    assert_ne!(*by, chain[0], "the cascade's job ended it");
    let history_of_by = history(db, T, *by).await;
    assert_eq!(
        history_of_by[history_of_by.len() - 2..],
        [(EventKind::Cancelled, 0), (EventKind::WorkflowFinished, 0)]
    );

    // Cancelling the workflow: cancelled.
    let out = ok(db
        .engine
        .enqueue_workflow(T, &flow("stopped"), &[job(Q), job(Q)])
        .await);
    let stopped: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
    ok(db.engine.cancel_workflow(T, out.workflow.id).await);
    let events = workflow_events(db, &stopped).await;
    assert_eq!(
        events
            .iter()
            .map(|e| (e.1, e.2.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (EventKind::WorkflowCreated, "stopped"),
            (EventKind::WorkflowFinished, "cancelled")
        ]
    );

    // Every job ended at enqueue (its dependency had failed): finished at
    // creation, right after `workflow_created`.
    let failed = enqueue(db, T, job(Q)).await;
    fail_for_good(db, failed.id).await;
    let out = ok(db
        .engine
        .enqueue_workflow(T, &flow("doomed"), &[job(Q).after(failed.id)])
        .await);
    let doomed = out.jobs[0].job.id;
    assert_eq!(out.jobs[0].job.state, JobState::Cancelled);
    assert_eq!(
        workflow_events(db, &[doomed]).await,
        vec![
            (doomed, EventKind::WorkflowCreated, "doomed".into()),
            (doomed, EventKind::WorkflowFinished, "cancelled".into())
        ]
    );
}

/// The last jobs of a workflow ending in separate transactions at the same
/// moment (two, then four, some of them while others still run): exactly
/// one of them announces the finish.
pub async fn concurrent_last_ends_announce_once(db: &TestDb) {
    for _ in 0..20 {
        let out = ok(db
            .engine
            .enqueue_workflow(T, &flow("four"), &[job(Q), job(Q), job(Q), job(Q)])
            .await);
        let ids: Vec<Uuid> = out.jobs.iter().map(|e| e.job.id).collect();
        let mut leases = Vec::new();
        for id in &ids {
            leases.push(claim_id(db, T, Q, *id).await.lease_token);
        }
        let e = &db.engine;
        let (r0, r1) = tokio::join!(
            e.complete(T, ids[0], leases[0], None),
            e.complete(T, ids[1], leases[1], None),
        );
        ok(r0);
        ok(r1);
        let (r2, r3) = tokio::join!(
            e.complete(T, ids[2], leases[2], None),
            e.fail(T, ids[3], leases[3], fatal("broken")),
        );
        ok(r2);
        ok(r3);
        let finished: Vec<_> = workflow_events(db, &ids)
            .await
            .into_iter()
            .filter(|e| e.1 == EventKind::WorkflowFinished)
            .map(|e| e.2)
            .collect();
        assert_eq!(finished, vec!["failed".to_owned()]);
    }
}
