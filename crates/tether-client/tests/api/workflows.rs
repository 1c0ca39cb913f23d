//! Workflows: a job's dependencies (`GET /v1/jobs/{id}/dependencies`) and
//! the jobs that wait for it (`?depends_on=`).

use super::*;

tether_conformance::both_backends!(dependencies_and_dependents_are_read,);

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
