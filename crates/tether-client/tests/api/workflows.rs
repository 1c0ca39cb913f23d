//! Workflows: a job's dependencies (`GET /v1/jobs/{id}/dependencies`) and
//! the jobs that wait for it (`?depends_on=`); workflows enqueued as one
//! graph, grown at run time, listed, read, failed, retried and cancelled
//! whole.

use super::*;

tether_conformance::both_backends!(
    dependencies_and_dependents_are_read,
    a_workflow_is_enqueued_read_grown_and_listed,
    a_workflow_is_retried_and_cancelled_whole,
    workflow_errors_and_tenant_walls,
);

async fn dependencies_and_dependents_are_read(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let a = c
        .enqueue(NewJob::new("flow", "render", json!({"n": 1})))
        .await
        .unwrap()
        .job;
    let b = c
        .enqueue(NewJob::new("flow", "resize", Value::Null))
        .await
        .unwrap()
        .job;
    let child = c
        .enqueue(
            NewJob::new("flow", "publish", Value::Null)
                .after(b.id)
                .after(a.id)
                .dependency_failure(DependencyFailure::Run),
        )
        .await
        .unwrap()
        .job;
    assert_eq!(child.state, JobState::Waiting);
    assert_eq!(child.depends_on, vec![b.id, a.id]);
    assert_eq!(child.dependency_failure, DependencyFailure::Run);

    // In the order the job named them, with their states; none yet ended.
    let deps = c.dependencies(child.id).await.unwrap();
    let seen: Vec<_> = deps
        .iter()
        .map(|d| (d.id, d.kind.as_str(), d.state))
        .collect();
    assert_eq!(
        seen,
        [
            (b.id, "resize", JobState::Queued),
            (a.id, "render", JobState::Queued)
        ]
    );
    assert!(deps
        .iter()
        .all(|d| d.result.is_none() && d.finished_at.is_none()));
    // A job without dependencies has none.
    assert_eq!(c.dependencies(a.id).await.unwrap(), vec![]);
    // What waits for a job.
    let waiting = c
        .list_jobs(&JobQuery::new().depends_on(a.id))
        .await
        .unwrap();
    assert_eq!(
        waiting.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [child.id]
    );

    // a succeeds with a result, b fails for good: the job, waiting with
    // `run`, is released, and reads both outcomes.
    for _ in 0..2 {
        let claimed = c
            .claim("flow", &ClaimOptions::new("w").limit(1))
            .await
            .unwrap();
        let cj = &claimed[0];
        if cj.job.id == a.id {
            c.complete(cj.job.id, cj.lease_token, Some(json!({"pages": 3})))
                .await
                .unwrap();
        } else {
            let failure = Failure {
                error: "no luck".to_owned(),
                fatal: true,
                ..Failure::default()
            };
            c.fail(cj.job.id, cj.lease_token, &failure).await.unwrap();
        }
    }
    assert_eq!(c.get_job(child.id).await.unwrap().state, JobState::Queued);
    let deps = c.dependencies(child.id).await.unwrap();
    assert_eq!((deps[0].id, deps[0].state), (b.id, JobState::Failed));
    assert_eq!(deps[0].result, None);
    assert!(deps[0].last_error.as_deref().unwrap().contains("no luck"));
    assert_eq!((deps[1].id, deps[1].state), (a.id, JobState::Succeeded));
    assert_eq!(deps[1].result, Some(json!({"pages": 3})));
    assert!(deps.iter().all(|d| d.finished_at.is_some()));

    // Unknown, or another tenant's: not found.
    let err = c.dependencies(Uuid::now_v7()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = s.other.dependencies(child.id).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
}

/// A diamond: fetch, then resize and thumb, then publish after both.
fn diamond() -> Vec<NewJob> {
    vec![
        NewJob::new("wf", "fetch", json!({"post": 7})),
        NewJob::new("wf", "resize", Value::Null).after_entry(0),
        NewJob::new("wf", "thumb", Value::Null).after_entry(0),
        NewJob::new("wf", "publish", Value::Null)
            .after_entry(1)
            .after_entry(2),
    ]
}

/// Claims every ready job of `queue`: id and lease token, by id.
async fn claim_all(c: &HttpClient, queue: &str) -> Vec<(Uuid, LeaseToken)> {
    let claimed = c
        .claim(queue, &ClaimOptions::new("w").limit(10))
        .await
        .unwrap();
    claimed.iter().map(|j| (j.job.id, j.lease_token)).collect()
}

/// Claims the one ready job `want` of `queue` and fails it for good.
async fn fail_for_good(c: &HttpClient, queue: &str, want: Uuid) {
    let claimed = claim_all(c, queue).await;
    assert_eq!(claimed.iter().map(|j| j.0).collect::<Vec<_>>(), [want]);
    let failure = Failure {
        error: "no luck".to_owned(),
        fatal: true,
        ..Failure::default()
    };
    c.fail(want, claimed[0].1, &failure).await.unwrap();
}

/// The graph as (id, kind, state, depends_on), oldest first.
fn graph(g: &WorkflowGraph) -> Vec<(Uuid, &str, JobState, Vec<Uuid>)> {
    g.jobs
        .iter()
        .map(|j| (j.id, j.kind.as_str(), j.state, j.depends_on.clone()))
        .collect()
}

async fn a_workflow_is_enqueued_read_grown_and_listed(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let new = NewWorkflow {
        name: "publish-post".to_owned(),
        idempotency_key: Some("post-7".to_owned()),
    };
    let made = c.enqueue_workflow(&new, &diamond()).await.unwrap();
    assert!(made.created);
    let w = made.workflow_id;
    let ids: Vec<Uuid> = made.jobs.iter().map(|e| e.job.id).collect();
    assert_eq!(ids.len(), 4);
    assert!(made.jobs.iter().all(|e| e.created));
    assert!(made.jobs.iter().all(|e| e.job.workflow_id == Some(w)));
    let states: Vec<JobState> = made.jobs.iter().map(|e| e.job.state).collect();
    assert_eq!(
        states,
        [
            JobState::Queued,
            JobState::Waiting,
            JobState::Waiting,
            JobState::Waiting
        ]
    );
    assert_eq!(made.jobs[3].job.depends_on, vec![ids[1], ids[2]]);

    // The same key: the existing workflow and its jobs, nothing written.
    let again = c.enqueue_workflow(&new, &diamond()[..1]).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.workflow_id, w);
    assert_eq!(again.jobs.iter().map(|e| e.job.id).collect::<Vec<_>>(), ids);
    assert!(again.jobs.iter().all(|e| !e.created));

    // Read whole.
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.workflow.id, w);
    assert_eq!(g.workflow.name, "publish-post");
    assert_eq!(g.workflow.idempotency_key.as_deref(), Some("post-7"));
    assert_eq!(g.workflow.state, WorkflowState::Running);
    assert_eq!(g.workflow.finished_at, None);
    assert_eq!(
        (g.workflow.counts.queued, g.workflow.counts.waiting),
        (1, 3)
    );
    assert_eq!(
        graph(&g),
        [
            (ids[0], "fetch", JobState::Queued, vec![]),
            (ids[1], "resize", JobState::Waiting, vec![ids[0]]),
            (ids[2], "thumb", JobState::Waiting, vec![ids[0]]),
            (ids[3], "publish", JobState::Waiting, vec![ids[1], ids[2]]),
        ]
    );

    // fetch runs and fans out: a job joins the workflow at run time.
    let (id, token) = claim_all(c, "wf").await[0];
    assert_eq!(id, ids[0]);
    c.complete(id, token, None).await.unwrap();
    let joined = c
        .enqueue(
            NewJob::new("wf", "notify", Value::Null)
                .workflow(w)
                .after(ids[3]),
        )
        .await
        .unwrap()
        .job;
    assert_eq!(joined.workflow_id, Some(w));
    assert_eq!(joined.state, JobState::Waiting);
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.jobs.len(), 5);
    assert_eq!(
        graph(&g)[4],
        (joined.id, "notify", JobState::Waiting, vec![ids[3]])
    );
    assert_eq!(g.jobs[0].state, JobState::Succeeded);
    assert_eq!(g.jobs[1].state, JobState::Queued);
    // Its jobs whole, through the job listing.
    let listed = c.list_jobs(&JobQuery::new().workflow_id(w)).await.unwrap();
    let mut listed: Vec<Uuid> = listed.jobs.iter().map(|j| j.id).collect();
    listed.sort();
    let mut all = ids.clone();
    all.push(joined.id);
    all.sort();
    assert_eq!(listed, all);

    // Two more workflows: listed newest first, by name, by state, a page
    // at a time.
    let one = |kind: &str| vec![NewJob::new("other", kind, Value::Null)];
    let nightly = NewWorkflow {
        name: "nightly".to_owned(),
        idempotency_key: None,
    };
    let second = c.enqueue_workflow(&nightly, &one("a")).await.unwrap();
    let third = c.enqueue_workflow(&nightly, &one("b")).await.unwrap();
    let (id, token) = claim_all(c, "other").await[0];
    assert_eq!(id, second.jobs[0].job.id);
    c.complete(id, token, None).await.unwrap();
    let ids_of = |p: &WorkflowPage| p.workflows.iter().map(|w| w.id).collect::<Vec<_>>();
    let every = c.list_workflows(&WorkflowQuery::new()).await.unwrap();
    assert_eq!(ids_of(&every), [third.workflow_id, second.workflow_id, w]);
    assert_eq!(every.next_cursor, None);
    assert_eq!(every.workflows[1].state, WorkflowState::Succeeded);
    assert!(every.workflows[1].finished_at.is_some());
    assert_eq!(every.workflows[1].counts.succeeded, 1);
    assert_eq!(
        (
            every.workflows[2].counts.queued,
            every.workflows[2].counts.waiting
        ),
        (2, 2)
    );
    let named = c
        .list_workflows(&WorkflowQuery::new().name("nightly"))
        .await
        .unwrap();
    assert_eq!(ids_of(&named), [third.workflow_id, second.workflow_id]);
    let running = c
        .list_workflows(&WorkflowQuery::new().state(WorkflowState::Running))
        .await
        .unwrap();
    assert_eq!(ids_of(&running), [third.workflow_id, w]);
    let done = c
        .list_workflows(
            &WorkflowQuery::new()
                .state(WorkflowState::Succeeded)
                .name("nightly"),
        )
        .await
        .unwrap();
    assert_eq!(ids_of(&done), [second.workflow_id]);
    let mut query = WorkflowQuery::new().limit(1);
    let mut paged = Vec::new();
    loop {
        let page = c.list_workflows(&query).await.unwrap();
        assert!(page.workflows.len() <= 1);
        paged.extend(ids_of(&page));
        match page.next_cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => break,
        }
    }
    assert_eq!(paged, ids_of(&every));
}

async fn a_workflow_is_retried_and_cancelled_whole(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let new = NewWorkflow {
        name: "publish-post".to_owned(),
        idempotency_key: None,
    };
    let made = c.enqueue_workflow(&new, &diamond()).await.unwrap();
    let w = made.workflow_id;
    let ids: Vec<Uuid> = made.jobs.iter().map(|e| e.job.id).collect();
    let (id, token) = claim_all(c, "wf").await[0];
    c.complete(id, token, None).await.unwrap();
    let state = |g: &WorkflowGraph| g.jobs.iter().map(|j| j.state).collect::<Vec<_>>();

    // resize fails for good, thumb succeeds: publish is cancelled by the
    // cascade, and the workflow has failed.
    for (id, token) in claim_all(c, "wf").await {
        if id == ids[1] {
            let failure = Failure {
                error: "no luck".to_owned(),
                fatal: true,
                ..Failure::default()
            };
            c.fail(id, token, &failure).await.unwrap();
        } else {
            assert_eq!(id, ids[2]);
            c.complete(id, token, None).await.unwrap();
        }
    }
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.workflow.state, WorkflowState::Failed);
    assert!(g.workflow.finished_at.is_some());
    assert_eq!(
        state(&g),
        [
            JobState::Succeeded,
            JobState::Failed,
            JobState::Succeeded,
            JobState::Cancelled
        ]
    );

    // Failed only: resize goes back, publish stays cancelled.
    assert_eq!(c.retry_workflow(w, RetryMode::Failed).await.unwrap(), 1);
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.workflow.state, WorkflowState::Running);
    assert_eq!(g.workflow.finished_at, None);
    assert_eq!(
        state(&g),
        [
            JobState::Succeeded,
            JobState::Queued,
            JobState::Succeeded,
            JobState::Cancelled
        ]
    );
    assert_eq!(c.get_job(ids[1]).await.unwrap().attempt, 0);

    // It fails again; failed and downstream: publish goes back to wait.
    fail_for_good(c, "wf", ids[1]).await;
    assert_eq!(
        c.retry_workflow(w, RetryMode::FailedAndDownstream)
            .await
            .unwrap(),
        2
    );
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(
        state(&g),
        [
            JobState::Succeeded,
            JobState::Queued,
            JobState::Succeeded,
            JobState::Waiting
        ]
    );
    // Nothing failed: nothing to retry.
    assert_eq!(c.retry_workflow(w, RetryMode::Failed).await.unwrap(), 0);

    // Cancel: resize is running (asked to stop), publish waiting (at once).
    let claimed = claim_all(c, "wf").await;
    assert_eq!(claimed[0].0, ids[1]);
    let done = c.cancel_workflow(w).await.unwrap();
    assert_eq!((done.cancelled, done.cancel_requested), (1, 1));
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.workflow.state, WorkflowState::Running);
    assert_eq!(g.jobs[3].state, JobState::Cancelled);
    assert!(c.get_job(ids[1]).await.unwrap().cancel_requested);
    let stopped = Failure {
        error: "asked to stop".to_owned(),
        cancelled: true,
        ..Failure::default()
    };
    c.fail(ids[1], claimed[0].1, &stopped).await.unwrap();
    let g = c.get_workflow(w).await.unwrap();
    assert_eq!(g.workflow.state, WorkflowState::Cancelled);
    // Cancelling a finished workflow changes nothing.
    let again = c.cancel_workflow(w).await.unwrap();
    assert_eq!((again.cancelled, again.cancel_requested), (0, 0));
    // A finished workflow takes no more jobs.
    let err = c
        .enqueue(NewJob::new("wf", "late", Value::Null).workflow(w))
        .await
        .unwrap_err();
    assert!(err.is_invalid_state(), "{err}");
}

async fn workflow_errors_and_tenant_walls(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let new = NewWorkflow {
        name: "w".to_owned(),
        idempotency_key: None,
    };
    let jobs = [NewJob::new("q", "k", Value::Null)];
    let w = c.enqueue_workflow(&new, &jobs).await.unwrap().workflow_id;

    // Another tenant's workflow is not found on every route, and not listed.
    let other = &s.other;
    let err = other.get_workflow(w).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = other.cancel_workflow(w).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = other
        .retry_workflow(w, RetryMode::Failed)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let theirs = other.list_workflows(&WorkflowQuery::new()).await.unwrap();
    assert_eq!(theirs.workflows, vec![]);
    // Nor can it join it (400 naming the field).
    let err = other
        .enqueue(NewJob::new("q", "k", Value::Null).workflow(w))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("workflow_id"),
        "{err}"
    );
    // An unknown workflow.
    let err = c.get_workflow(Uuid::now_v7()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    // The jobs of a new workflow name no workflow of their own.
    let err = c
        .enqueue_workflow(&new, &[NewJob::new("q", "k", Value::Null).workflow(w)])
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    // A name that is not one; a bad page size; a cursor that is not one.
    let bad = NewWorkflow {
        name: "no spaces".to_owned(),
        idempotency_key: None,
    };
    let err = c.enqueue_workflow(&bad, &jobs).await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = c
        .list_workflows(&WorkflowQuery::new().limit(0))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = c
        .list_workflows(&WorkflowQuery::new().cursor("nope"))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}
