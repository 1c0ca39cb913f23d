//! Waiting for a result (`wait_job`, `wait_workflow`) and the live event
//! stream (`stream_events`): items, filters, resuming after a cursor.

use tether_client::{StreamFilter, StreamItem};

use super::*;

tether_conformance::both_backends!(
    a_wait_returns_the_finished_job_or_what_is_there,
    a_workflow_wait_returns_once_it_finished,
    the_event_stream_reads_events_and_resumes_after_a_cursor,
);

/// Claims `id` from `queue` and completes it with `result`.
async fn finish(c: &HttpClient, queue: &str, id: Uuid) {
    let claimed = c.claim(queue, &ClaimOptions::new("w1")).await.unwrap();
    assert_eq!(claimed[0].job.id, id);
    c.complete(id, claimed[0].lease_token, Some(json!({"ok": 1})))
        .await
        .unwrap();
}

async fn a_wait_returns_the_finished_job_or_what_is_there(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let job = c
        .enqueue(NewJob::new("wq", "k", json!(1)))
        .await
        .unwrap()
        .job;
    let started = Instant::now();
    let (done, ()) = tokio::join!(c.wait_job(job.id, Duration::from_secs(60)), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        finish(c, "wq", job.id).await;
    });
    let done = done.unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!({"ok": 1})));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "woken by the end"
    );

    let other = c
        .enqueue(NewJob::new("wq", "k", json!(2)))
        .await
        .unwrap()
        .job;
    let still = c
        .wait_job(other.id, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(still.state, JobState::Queued);
    let missing = c.wait_job(Uuid::now_v7(), Duration::from_millis(200)).await;
    assert_eq!(missing.unwrap_err().code(), Some(ErrorCode::NotFound));
}

async fn a_workflow_wait_returns_once_it_finished(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let flow = c
        .enqueue_workflow(
            &NewWorkflow {
                name: "w".into(),
                idempotency_key: None,
            },
            &[NewJob::new("wf", "k", json!(1))],
        )
        .await
        .unwrap();
    let id = flow.workflow_id;
    let job = flow.jobs[0].job.id;
    let (graph, ()) = tokio::join!(c.wait_workflow(id, Duration::from_secs(60)), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        finish(c, "wf", job).await;
    });
    assert_eq!(graph.unwrap().workflow.state, WorkflowState::Succeeded);
}

async fn the_event_stream_reads_events_and_resumes_after_a_cursor(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let mut stream = c.stream_events(&StreamFilter::default());
    // The stream connects on the first read; let it, then write.
    let (first, job) = tokio::join!(stream.next(), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let job = c
            .enqueue(NewJob::new("sq", "k", json!(1)))
            .await
            .unwrap()
            .job;
        finish(c, "sq", job.id).await;
        job
    });
    let mut items = vec![first.unwrap()];
    items.push(stream.next().await.unwrap());
    items.push(stream.next().await.unwrap());
    let events: Vec<(Uuid, String, JobState)> = items
        .iter()
        .map(|i| match i {
            StreamItem::Event(e) => (e.job_id, e.event.clone(), e.state),
            StreamItem::Gap { .. } => panic!("a gap"),
        })
        .collect();
    assert_eq!(
        events,
        [
            (job.id, "enqueued".to_owned(), JobState::Queued),
            (job.id, "claimed".to_owned(), JobState::Running),
            (job.id, "succeeded".to_owned(), JobState::Succeeded),
        ]
    );
    drop(stream);

    // From the first item's cursor: exactly the two after it, filtered.
    let mut resumed = c.stream_events(&StreamFilter {
        job_id: Some(job.id),
        after: Some(items[0].cursor().to_owned()),
        ..StreamFilter::default()
    });
    for want in ["claimed", "succeeded"] {
        match resumed.next().await.unwrap() {
            StreamItem::Event(e) => assert_eq!(e.event, want),
            gap @ StreamItem::Gap { .. } => panic!("{gap:?}"),
        }
    }
    // A bad filter is an error, not a retry.
    let mut bad = c.stream_events(&StreamFilter {
        events: vec!["exploded".into()],
        ..StreamFilter::default()
    });
    assert_eq!(
        bad.next().await.unwrap_err().code(),
        Some(ErrorCode::InvalidArgument)
    );
}
