//! The operator additions: an admin key acting for a tenant, workers,
//! throughput, bulk cancel and replay, removing an empty queue.

use super::*;

tether_conformance::both_backends!(
    an_admin_key_acts_for_a_tenant,
    workers_throughput_bulk_and_queue_removal,
);

async fn an_admin_key_acts_for_a_tenant(db: &TestDb) {
    let s = start(db).await;
    let as_other = HttpClient::builder(&s.base, &s.admin_key)
        .tenant("other")
        .build()
        .unwrap();
    let made = as_other
        .enqueue(NewJob::new("theirs", "k", Value::Null))
        .await
        .unwrap();
    // The tenant's own key sees it; the admin key on its own does not.
    let theirs = s.other.list_jobs(&JobQuery::new()).await.unwrap();
    assert_eq!(theirs.jobs.len(), 1);
    assert_eq!(theirs.jobs[0].id, made.job.id);
    let own = s.admin.list_jobs(&JobQuery::new()).await.unwrap();
    assert!(own.jobs.is_empty(), "{own:?}");
    // By id as well as by name.
    let by_id = HttpClient::builder(&s.base, &s.admin_key)
        .tenant(s.other_id.to_string())
        .build()
        .unwrap();
    assert_eq!(by_id.get_job(made.job.id).await.unwrap().id, made.job.id);
    assert_eq!(by_id.whoami().await.unwrap().tenant.name, "other");

    // A tenant key may not, even for its own tenant; an unknown tenant is not found.
    let refused = HttpClient::builder(&s.base, &s.other_key)
        .tenant("other")
        .build()
        .unwrap()
        .list_queues()
        .await
        .unwrap_err();
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(403), Some(ErrorCode::PermissionDenied)),
        "{refused}"
    );
    let unknown = HttpClient::builder(&s.base, &s.admin_key)
        .tenant("nobody")
        .build()
        .unwrap()
        .list_queues()
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Some(ErrorCode::NotFound), "{unknown}");
}

async fn workers_throughput_bulk_and_queue_removal(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    for _ in 0..3 {
        c.enqueue(NewJob::new("ops", "k", Value::Null))
            .await
            .unwrap();
    }
    let claimed = c
        .claim("ops", &ClaimOptions::new("w1").limit(2))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let workers = c.list_workers().await.unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(
        (
            workers[0].worker_id.as_str(),
            &workers[0].queues,
            workers[0].running
        ),
        ("w1", &vec!["ops".to_owned()], 2)
    );
    let done = c
        .complete(claimed[0].job.id, claimed[0].lease_token, None)
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Succeeded);

    let t = c.throughput("ops", Some(5)).await.unwrap();
    assert_eq!(t.minutes.len(), 5);
    assert!(t.minutes.windows(2).all(|w| w[0].at < w[1].at), "{t:?}");
    let succeeded: u64 = t.minutes.iter().map(|m| m.succeeded).sum();
    assert_eq!(succeeded, 1, "{t:?}");
    let (wait, run) = (t.wait_ms.unwrap(), t.run_ms.unwrap());
    assert!(wait.p50 <= wait.p95 && wait.p95 <= wait.p99, "{wait:?}");
    assert!(run.p50 >= 0, "{run:?}");
    assert_eq!(c.throughput("ops", None).await.unwrap().minutes.len(), 60);
    let bad = c.throughput("ops", Some(0)).await.unwrap_err();
    assert_eq!(bad.code(), Some(ErrorCode::InvalidArgument), "{bad}");

    // Bulk: each id on its own, in order.
    let queued = c
        .list_jobs(&JobQuery::new().queue("ops").state(JobState::Queued))
        .await
        .unwrap()
        .jobs[0]
        .id;
    let answers = c.cancel_jobs(&[queued, done.id]).await.unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0].id, queued);
    assert_eq!(
        answers[0].result.as_ref().unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(answers[1].id, done.id);
    let refused = answers[1].result.as_ref().unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidState), "{refused}");
    let replayed = c.replay_jobs(&[done.id, queued]).await.unwrap();
    for answer in &replayed {
        let job = answer.result.as_ref().unwrap();
        assert_eq!((job.state, job.attempt), (JobState::Queued, 0), "{job:?}");
    }

    // A queue holding jobs stays; an empty one goes; an unknown one is not found.
    let busy = c.delete_queue("ops").await.unwrap_err();
    assert_eq!(busy.code(), Some(ErrorCode::InvalidState), "{busy}");
    c.pause("typo").await.unwrap();
    c.delete_queue("typo").await.unwrap();
    assert!(!c
        .list_queues()
        .await
        .unwrap()
        .iter()
        .any(|q| q.name == "typo"));
    let gone = c.delete_queue("typo").await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::NotFound), "{gone}");
}
