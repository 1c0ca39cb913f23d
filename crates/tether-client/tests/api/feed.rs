//! Waiting for a result (`wait_job`, `wait_workflow`) and the live event
//! stream (`stream_events`): items, filters, resuming after a cursor.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    // Ten minutes, far longer than any stall of the host: ending within two
    // can only be the job's end.
    let (done, ()) = tokio::join!(c.wait_job(job.id, Duration::from_secs(600)), async {
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
    let (graph, ()) = tokio::join!(c.wait_workflow(id, Duration::from_secs(600)), async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        finish(c, "wf", job).await;
    });
    assert_eq!(graph.unwrap().workflow.state, WorkflowState::Succeeded);
}

async fn the_event_stream_reads_events_and_resumes_after_a_cursor(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let mut stream = c.stream_events(&StreamFilter::default());
    // The stream connects on its first read and starts where the server
    // stands then: markers are enqueued (on a queue of their own) until it
    // shows one, so what follows is surely after its start.
    let marking = Arc::new(AtomicBool::new(true));
    let marker = {
        let (c, marking) = (c.clone(), marking.clone());
        tokio::spawn(async move {
            while marking.load(Ordering::SeqCst) {
                c.enqueue(NewJob::new("marker", "k", json!(0)))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    loop {
        let item = tokio::time::timeout(Duration::from_secs(120), stream.next())
            .await
            .expect("a marker within 120 s")
            .unwrap();
        if matches!(&item, StreamItem::Event(e) if e.queue == "marker") {
            break;
        }
    }
    marking.store(false, Ordering::SeqCst);
    marker.await.unwrap();
    let job = c
        .enqueue(NewJob::new("sq", "k", json!(1)))
        .await
        .unwrap()
        .job;
    finish(c, "sq", job.id).await;
    let mut items = Vec::new();
    while items.len() < 3 {
        let item = tokio::time::timeout(Duration::from_secs(120), stream.next())
            .await
            .expect("the job's events within 120 s")
            .unwrap();
        if !matches!(&item, StreamItem::Event(e) if e.queue == "marker") {
            items.push(item);
        }
    }
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
