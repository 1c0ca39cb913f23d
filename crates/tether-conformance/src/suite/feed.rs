//! The feed of committed history events (invariant 17): every event once,
//! each job's in the order of its history, resumable from any cursor it
//! handed out, filtered, and a gap announced when retention removed events
//! a reader had not read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;
use tether_core::{EventKind, FeedCursor, FeedEvent, FeedFilter, JobState, NewJob, NewWorkflow};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

/// Reads from `cursor` until a read comes back short, in reads of `limit`,
/// resuming each time from the cursor's text (as a client reconnecting
/// with `Last-Event-ID` would); answers the events and the last cursor.
pub(crate) async fn read_all(
    db: &TestDb,
    cursor: FeedCursor,
    filter: &FeedFilter,
    limit: u32,
) -> (Vec<FeedEvent>, FeedCursor) {
    let mut cursor = cursor;
    let mut events = Vec::new();
    loop {
        let text = cursor.to_string();
        let resumed: FeedCursor = text.parse().expect("a cursor reads back");
        let page = ok(db.engine.feed_read(&resumed, filter, limit).await);
        assert!(page.gap.is_none(), "no gap expected here");
        assert!(page.events.len() <= limit as usize);
        events.extend(page.events);
        cursor = page.next;
        if !page.more {
            return (events, cursor);
        }
    }
}

fn tenant(t: &str) -> FeedFilter {
    FeedFilter {
        tenant: Some(t.to_owned()),
        ..FeedFilter::default()
    }
}

/// Checks that `events` hold each job's history exactly (once, in order)
/// for every job in `jobs`, and nothing else.
async fn assert_exact_history(db: &TestDb, t: &str, jobs: &[Uuid], events: &[FeedEvent]) {
    let mut seen: HashMap<Uuid, Vec<EventKind>> = HashMap::new();
    for e in events {
        assert_eq!(e.tenant, t, "another tenant's event");
        seen.entry(e.job_id).or_default().push(e.event.event);
    }
    assert_eq!(seen.len(), jobs.len(), "events of other jobs, or none");
    for id in jobs {
        let want: Vec<EventKind> = history(db, t, *id).await.into_iter().map(|e| e.0).collect();
        assert_eq!(seen.get(id), Some(&want), "job {id}");
    }
}

/// From the head, a job's whole life reaches the feed in the order of its
/// history, with what it belongs to and the state each event left it in;
/// reads of any size, resumed from each cursor's text, read it exactly.
pub async fn the_feed_reads_each_event_once_in_order(db: &TestDb) {
    let head = ok(db.engine.feed_head().await);
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, NewJob::new("other", "k2", json!({}))).await;
    let c = claim_id(db, T, Q, a.id).await;
    ok(db.engine.complete(T, a.id, c.lease_token, None).await);
    ok(db.engine.cancel(T, b.id).await);
    let elsewhere = enqueue(db, T2, job(Q)).await;

    for limit in [1, 2, 3, 1000] {
        let (events, _) = read_all(db, head.clone(), &tenant(T), limit).await;
        assert_exact_history(db, T, &[a.id, b.id], &events).await;
    }
    let (events, end) = read_all(db, head.clone(), &tenant(T), 1000).await;
    let states: Vec<(Uuid, EventKind, JobState)> = events
        .iter()
        .map(|e| (e.job_id, e.event.event, e.state))
        .collect();
    assert_eq!(
        states,
        [
            (a.id, EventKind::Enqueued, JobState::Queued),
            (b.id, EventKind::Enqueued, JobState::Queued),
            (a.id, EventKind::Claimed, JobState::Running),
            (a.id, EventKind::Succeeded, JobState::Succeeded),
            (b.id, EventKind::Cancelled, JobState::Cancelled),
        ],
        "each event's own state"
    );
    let b_event = &events[1];
    assert_eq!(
        (b_event.queue.as_str(), b_event.kind.as_str()),
        ("other", "k2")
    );

    // Nothing new: the end reads nothing, and stays where it is.
    let (again, _) = read_all(db, end.clone(), &tenant(T), 10).await;
    assert!(again.is_empty(), "{again:?}");
    // Another tenant's reader sees its own only.
    let (theirs, _) = read_all(db, head, &tenant(T2), 10).await;
    assert_exact_history(db, T2, &[elsewhere.id], &theirs).await;
    // A new event after the end is read from the end.
    ok(db.engine.replay(T, b.id).await);
    let (after, _) = read_all(db, end, &tenant(T), 10).await;
    let names: Vec<EventKind> = after.iter().map(|e| e.event.event).collect();
    assert_eq!(names, [EventKind::Replayed]);
}

/// Each filter narrows the feed: queue, job, workflow, event names.
pub async fn feed_filters_narrow_what_is_read(db: &TestDb) {
    let head = ok(db.engine.feed_head().await);
    let a = enqueue(db, T, job(Q)).await;
    let b = enqueue(db, T, job("other")).await;
    let w = ok(db
        .engine
        .enqueue_workflow(
            T,
            &NewWorkflow {
                name: "feed".into(),
                idempotency_key: None,
            },
            &[job(Q)],
        )
        .await);
    let (flow, in_flow) = (w.workflow.id, w.jobs[0].job.id);
    ok(db.engine.cancel(T, a.id).await);

    let read = |filter: FeedFilter| {
        let head = head.clone();
        async move {
            let (events, _) = read_all(db, head, &filter, 2).await;
            events
                .iter()
                .map(|e| (e.job_id, e.event.event))
                .collect::<Vec<_>>()
        }
    };
    let base = tenant(T);
    assert_eq!(
        read(FeedFilter {
            queue: Some("other".into()),
            ..base.clone()
        })
        .await,
        [(b.id, EventKind::Enqueued)]
    );
    assert_eq!(
        read(FeedFilter {
            job_id: Some(a.id),
            ..base.clone()
        })
        .await,
        [(a.id, EventKind::Enqueued), (a.id, EventKind::Cancelled)]
    );
    assert_eq!(
        read(FeedFilter {
            workflow_id: Some(flow),
            ..base.clone()
        })
        .await,
        [
            (in_flow, EventKind::Enqueued),
            (in_flow, EventKind::WorkflowCreated)
        ]
    );
    assert_eq!(
        read(FeedFilter {
            events: vec![EventKind::Cancelled],
            ..base.clone()
        })
        .await,
        [(a.id, EventKind::Cancelled)]
    );
    assert_eq!(
        read(FeedFilter {
            job_id: Some(a.id),
            ..tenant(T2)
        })
        .await,
        [],
        "another tenant's job is not read"
    );
}

/// Jobs enqueued, claimed and reported by eight tasks at once while a
/// reader reads in small pages and resumes from each cursor: at the end
/// the reader has every job's history exactly, once, in order.
pub async fn concurrent_writers_are_read_exactly(db: &TestDb) {
    const TASKS: usize = 8;
    const JOBS: usize = 12;
    let head = ok(db.engine.feed_head().await);
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let engine = db.engine.clone();
        let done = done.clone();
        let head = head.clone();
        tokio::spawn(async move {
            let (mut cursor, mut events) = (head, Vec::new());
            loop {
                let finished = done.load(Ordering::SeqCst);
                let resumed: FeedCursor = cursor.to_string().parse().expect("cursor");
                let page = engine
                    .feed_read(&resumed, &tenant(T), 3)
                    .await
                    .expect("feed read");
                assert!(page.gap.is_none());
                events.extend(page.events);
                cursor = page.next;
                if !page.more {
                    if finished {
                        return events;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        })
    };
    let writers: Vec<_> = (0..TASKS)
        .map(|task| {
            let engine = db.engine.clone();
            let queue = format!("feed-{task}");
            tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..JOBS {
                    let job = engine.enqueue(T, job(&queue)).await.expect("enqueue").job;
                    ids.push(job.id);
                    let claimed = engine.claim(T, &claim_req(&queue, 1)).await.expect("claim");
                    for c in claimed {
                        engine
                            .complete(T, c.job.id, c.lease_token, None)
                            .await
                            .expect("complete");
                    }
                }
                ids
            })
        })
        .collect();
    let mut ids = Vec::new();
    for w in writers {
        ids.extend(w.await.expect("writer"));
    }
    done.store(true, Ordering::SeqCst);
    let events = reader.await.expect("reader");
    assert_exact_history(db, T, &ids, &events).await;
}

/// Retention that removes events a reader had not read yet is announced
/// as a gap, with the cursor to go on from; going on from it reads what
/// came after, and a reader that had read them sees no gap.
pub async fn events_pruned_before_they_were_read_are_a_gap(db: &TestDb) {
    let old = ok(db.engine.feed_head().await);
    let a = enqueue(db, T, job(Q)).await;
    ok(db.engine.cancel(T, a.id).await);
    let (read, caught_up) = read_all(db, old.clone(), &tenant(T), 10).await;
    assert_eq!(read.len(), 2);
    tick().await;
    assert_eq!(ok(db.engine.prune_finished(0, 100).await), 1);

    let page = ok(db.engine.feed_read(&old, &tenant(T), 10).await);
    let past = page
        .gap
        .expect("a gap: a's events went before they were read");
    assert!(page.events.is_empty());
    assert_eq!(page.next, past);
    let b = enqueue(db, T, job(Q)).await;
    let (after, _) = read_all(db, past, &tenant(T), 10).await;
    assert_exact_history(db, T, &[b.id], &after).await;

    let (after, _) = read_all(db, caught_up, &tenant(T), 10).await;
    assert_exact_history(db, T, &[b.id], &after).await;
}

/// A cursor of the other backend, and a read of no events, are refused.
pub async fn feed_reads_refuse_bad_input(db: &TestDb) {
    let other: FeedCursor = match db.backend() {
        "sqlite" => "p.10:10:".parse().unwrap(),
        _ => "s.0".parse().unwrap(),
    };
    expect_invalid(db.engine.feed_read(&other, &tenant(T), 10).await);
    let head = ok(db.engine.feed_head().await);
    expect_invalid(db.engine.feed_read(&head, &tenant(T), 0).await);
    expect_invalid(db.engine.feed_read(&head, &tenant(T), 1001).await);
}
