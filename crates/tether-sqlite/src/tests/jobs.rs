//! Smoke tests of the job lifecycle on SQLite (the behaviour itself is
//! proven by `tether-conformance`), and what is particular to it: claims
//! that find nothing stay off the writer, chunked inserts, bulk replay.

use super::*;

/// An empty claim answers from a reader: it does not wait for the writer,
/// so idle claimers never queue up behind (or in front of) real writes.
#[tokio::test]
async fn an_empty_claim_does_not_take_the_write_lock() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // Another connection holds the file's write lock.
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.0.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let claimed = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        store.claim("t", &claim_req("q", 10)),
    )
    .await
    .expect("an empty claim waited for the write lock")
    .unwrap();
    assert!(claimed.is_empty());
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    store.close().await;
}

/// With many claimers waiting on one queue, a new job wakes one of them,
/// not all: each woken claimer runs a claim.
#[tokio::test]
async fn a_new_job_wakes_one_waiting_claimer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let woken = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..200 {
        let mut wakeup = store.subscribe("t", "q");
        let woken = woken.clone();
        waiters.push(tokio::spawn(async move {
            wakeup.hinted().await;
            woken.fetch_add(1, Ordering::SeqCst);
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let job = [NewJob::new("q", "k", json!(null))];
    store
        .enqueue("t", &enqueue_refs(&job), u32::MAX)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 1);
    let jobs: Vec<_> = (0..5).map(|_| NewJob::new("q", "k", json!(null))).collect();
    store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 6);
    for w in waiters {
        w.abort();
    }
    store.close().await;
}

#[tokio::test]
async fn lifecycle_smoke() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![
        NewJob::new("q", "k", json!({"n": 1})).tags(["a", "b"]),
        NewJob::new("q", "k", json!({"n": 2})).priority(5),
        NewJob::new("q", "k", json!({"n": 3, "f": 1.5e300})).idempotency_key("i1"),
        NewJob::new("q", "k", json!({"n": 4})).idempotency_key("i1"),
    ];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|e| e.created).collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(out[3].job.id, out[2].job.id);
    assert_eq!(out[2].job.payload, json!({"n": 3, "f": 1.5e300}));
    assert_eq!(out[0].job.max_attempts, 5);
    assert_eq!(out[0].job.tags, vec!["a", "b"]);

    let claimed = store.claim("t", &claim_req("q", 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    assert_eq!(claimed[0].job.id, out[1].job.id, "priority first");
    assert_eq!(claimed[1].job.id, out[0].job.id, "then run_at/id");
    let tokens: std::collections::HashSet<_> = claimed.iter().map(|c| c.lease_token).collect();
    assert_eq!(tokens.len(), 3, "one token per job");
    for c in &claimed {
        assert_eq!(c.job.state, JobState::Running);
        assert_eq!(c.job.attempt, 1);
        let lease = c.job.lease_expires_at.unwrap() - c.job.heartbeat_at.unwrap();
        assert_eq!(lease.num_milliseconds(), 30_000);
        assert_eq!(c.lease_token.0.get_version_num(), 4);
    }

    let ack = store
        .heartbeat(
            "t",
            &Heartbeat {
                id: claimed[0].job.id,
                lease_token: claimed[0].lease_token,
                lease_ttl_ms: Some(60_000),
                progress: Some(json!({"pct": 50})),
            },
        )
        .await
        .unwrap();
    assert!(!ack.cancel_requested);

    // A wrong token is fenced out, and the history says so.
    let wrong = tether_core::LeaseToken(Uuid::new_v4());
    let err = store
        .complete("t", claimed[0].job.id, wrong, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)), "{err}");
    let err = store
        .complete("t", Uuid::now_v7(), wrong, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::JobNotFound(_)), "{err}");
    let err = store
        .complete(
            "other-tenant",
            claimed[0].job.id,
            claimed[0].lease_token,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::JobNotFound(_)), "{err}");

    let done = store
        .complete(
            "t",
            claimed[0].job.id,
            claimed[0].lease_token,
            Some(&json!(7)),
        )
        .await
        .unwrap();
    assert!(done.now, "this report ended the attempt");
    let again = store
        .complete(
            "t",
            claimed[0].job.id,
            claimed[0].lease_token,
            Some(&json!(7)),
        )
        .await
        .unwrap();
    assert!(
        !again.now,
        "a repeat is told apart, so it is not counted again"
    );
    assert_eq!(again.job, done.job);
    let done = done.job;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!(7)));
    assert!(done.finished_at.is_some());

    let results = store
        .complete_many(
            "t",
            &[
                Completion {
                    id: claimed[1].job.id,
                    lease_token: claimed[1].lease_token,
                    result: None,
                },
                Completion {
                    id: claimed[1].job.id,
                    lease_token: claimed[1].lease_token,
                    result: None,
                },
                Completion {
                    id: claimed[0].job.id,
                    lease_token: claimed[0].lease_token,
                    result: Some(json!(7)),
                },
                Completion {
                    id: Uuid::now_v7(),
                    lease_token: wrong,
                    result: None,
                },
            ],
        )
        .await
        .unwrap();
    assert!(
        matches!(&results[0], Ok(Completed::Now { queue, started_at: Some(_), .. }) if queue == "q"),
        "{:?}",
        results[0]
    );
    assert!(
        matches!(results[1], Ok(Completed::Repeated)),
        "a repeated item is answered like the first, and not counted again"
    );
    assert!(
        matches!(results[2], Ok(Completed::Repeated)),
        "a complete repeated with the token that completed the job answers like the first"
    );
    assert!(matches!(results[3], Err(Error::JobNotFound(_))));

    let failed = store
        .fail(
            "t",
            claimed[2].job.id,
            claimed[2].lease_token,
            &Failure {
                error: "boom".into(),
                ..Failure::default()
            },
            1.0,
        )
        .await
        .unwrap();
    assert!(failed.now);
    let failed = failed.job;
    assert_eq!(failed.state, JobState::Queued);
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    let delay = failed.run_at - failed.updated_at;
    assert_eq!(delay.num_milliseconds(), 1_000);

    let events = store
        .events("t", claimed[0].job.id, None, 1000)
        .await
        .unwrap()
        .events;
    let kinds: Vec<_> = events.iter().map(|e| e.event).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::LeaseLost,
            EventKind::Succeeded,
        ],
        "the repeated complete in the batch records nothing"
    );
    assert_eq!(events[2].detail.as_deref(), Some("complete"));

    let page = store
        .list(
            "t",
            &JobFilter {
                tag: Some("a".into()),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    assert_eq!(page.jobs[0].id, out[0].job.id);

    let stats = store.queue_stats("t", "q").await.unwrap();
    assert_eq!(stats.counts.succeeded, 2);
    assert_eq!(stats.counts.queued, 1);
    assert_eq!(stats.scheduled, 1);
    let never = store.queue_stats("t", "never-used").await.unwrap();
    assert_eq!(never.config, tether_core::QueueConfig::default());
    assert!(!never.paused);
    store.close().await;
}

#[tokio::test]
async fn reaper_buries_exhausted_jobs_and_requeues_the_rest() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![
        NewJob::new("q", "k", json!(1)).max_attempts(1),
        NewJob::new("q", "k", json!(2)).max_attempts(3),
        NewJob::new("q", "k", json!(3)).max_attempts(3),
    ];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let claimed = store.claim("t", &claim_req("q", 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    store.cancel("t", out[2].job.id).await.unwrap();
    sqlx::query(concat!(
        "UPDATE tether_jobs SET lease_expires_at = ",
        now_ms!(),
        " - 1"
    ))
    .execute(&store.writer)
    .await
    .unwrap();
    let report = store.reap_lapsed_leases(100).await.unwrap();
    assert_eq!(
        (report.failed, report.requeued, report.cancelled),
        (1, 1, 1)
    );
    let states: Vec<_> = {
        let mut v = Vec::new();
        for e in &out {
            v.push(store.get("t", e.job.id).await.unwrap().state);
        }
        v
    };
    assert_eq!(
        states,
        [JobState::Failed, JobState::Queued, JobState::Cancelled]
    );
    let events = store
        .events("t", out[0].job.id, None, 1000)
        .await
        .unwrap()
        .events;
    let last = events.last().unwrap();
    assert_eq!(last.event, EventKind::LeaseExpired);
    assert_eq!(last.detail.as_deref(), Some("failed"));
    // The stale holder is fenced out once the reaper took over.
    let err = store
        .complete("t", out[1].job.id, claimed[1].lease_token, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)));
    store.close().await;
}

#[tokio::test]
async fn concurrent_claimers_never_share_a_job() {
    let db = TempDb::new();
    let store = Arc::new(SqliteStore::open(&db.0).await.unwrap());
    let jobs: Vec<NewJob> = (0..500).map(|i| NewJob::new("q", "k", json!(i))).collect();
    store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim("t", &claim_req("q", 7)).await.unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|c| c.job.id));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 500);
    assert_eq!(distinct.len(), 500);
    store.close().await;
}

#[tokio::test]
async fn batches_across_insert_chunks_keep_order_and_dedupe() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // 45 entries: chunks of 32, 8, 1, 1, 1, 1, 1. Entry 40 repeats entry 3's
    // idempotency key, entry 44 entry 35's unique key: both across chunks.
    let jobs: Vec<NewJob> = (0..45)
        .map(|i| {
            let job = NewJob::new("q", "k", json!({ "i": i }));
            match i {
                3 | 40 => job.idempotency_key("ik-3"),
                35 | 44 => job.unique_key("uk-35"),
                _ => job,
            }
        })
        .collect();
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    assert_eq!(out.len(), 45);
    for (i, answer) in out.iter().enumerate() {
        match i {
            40 => {
                assert!(!answer.created);
                assert_eq!(answer.job.id, out[3].job.id);
            }
            44 => {
                assert!(!answer.created);
                assert_eq!(answer.job.id, out[35].job.id);
            }
            _ => {
                assert!(answer.created, "entry {i}");
                assert_eq!(answer.job.payload, json!({ "i": i }), "entry {i}");
            }
        }
    }
    let stats = store.queue_stats("t", "q").await.unwrap();
    assert_eq!(stats.counts.queued, 43);
    // One `enqueued` event per created job, none for the duplicates.
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tether_job_events WHERE event = 'enqueued'")
            .fetch_one(&store.reader)
            .await
            .unwrap();
    assert_eq!(n, 43);
    store.close().await;
}

#[tokio::test]
async fn bulk_replay_takes_one_job_per_unique_key() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let fatal = Failure {
        error: "dead".into(),
        fatal: true,
        ..Failure::default()
    };
    let mut dead = Vec::new();
    // Two dead jobs share unique key u (one at a time was active), one has
    // no key.
    for job in [
        NewJob::new("q", "k", json!(1)).unique_key("u"),
        NewJob::new("q", "k", json!(2)).unique_key("u"),
        NewJob::new("q", "k", json!(3)),
    ] {
        let out = store
            .enqueue("t", &enqueue_refs(&[job]), u32::MAX)
            .await
            .unwrap();
        assert!(out[0].created);
        let c = store
            .claim("t", &claim_req("q", 1))
            .await
            .unwrap()
            .remove(0);
        store
            .fail("t", c.job.id, c.lease_token, &fatal, 1.0)
            .await
            .unwrap();
        dead.push(c.job.id);
    }
    let filter = tether_core::ReplayFilter {
        queue: "q".into(),
        state: JobState::Failed,
        kind: None,
        limit: None,
        cursor: None,
        expires_at: None,
    };
    assert_eq!(store.replay_many("t", &filter).await.unwrap().replayed, 2);
    let states: Vec<JobState> = {
        let mut v = Vec::new();
        for id in &dead {
            v.push(store.get("t", *id).await.unwrap().state);
        }
        v
    };
    assert_eq!(
        states,
        [JobState::Queued, JobState::Failed, JobState::Queued],
        "the oldest job of key u is replayed, the other waits"
    );
    // Now u is held by an active job: the second stays dead.
    assert_eq!(store.replay_many("t", &filter).await.unwrap().replayed, 0);
    assert!(matches!(
        store.replay("t", dead[1], None).await,
        Err(Error::Conflict(_))
    ));
    let events = store.events("t", dead[0], None, 1000).await.unwrap().events;
    assert_eq!(events.last().unwrap().event, EventKind::Replayed);
    store.close().await;
}

#[tokio::test]
async fn listing_pages_newest_first() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs: Vec<NewJob> = (0..7).map(|i| NewJob::new("q", "k", json!(i))).collect();
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(
                "t",
                &JobFilter {
                    queue: Some("q".into()),
                    limit: Some(3),
                    cursor,
                    ..JobFilter::default()
                },
            )
            .await
            .unwrap();
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut expected: Vec<Uuid> = out.iter().map(|e| e.job.id).collect();
    expected.reverse();
    assert_eq!(seen, expected);
    store.close().await;
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn clock_controls_move_time_forward() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![NewJob::new("q", "k", json!(1)).run_at(tether_core::RunAt::Delay(3_600_000))];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let id = out[0].job.id;
    assert!(store
        .claim("t", &claim_req("q", 1))
        .await
        .unwrap()
        .is_empty());
    store.make_due(id).await.unwrap();
    let claimed = store.claim("t", &claim_req("q", 1)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(matches!(
        store.make_due(id).await,
        Err(Error::InvalidState { .. })
    ));
    assert!(matches!(
        store.lapse_lease(Uuid::now_v7()).await,
        Err(Error::JobNotFound(_))
    ));
    assert_eq!(store.reap_lapsed_leases(10).await.unwrap().total(), 0);
    store.lapse_lease(id).await.unwrap();
    assert_eq!(store.reap_lapsed_leases(10).await.unwrap().requeued, 1);

    let lease = store
        .acquire_lease("m", "a", 10_000)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .acquire_lease("m", "b", 10_000)
        .await
        .unwrap()
        .is_none());
    store.lapse_named_lease("m").await.unwrap();
    let taken = store
        .acquire_lease("m", "b", 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(taken.token, lease.token);
    assert!(matches!(
        store.renew_lease("m", lease.token, 10_000).await,
        Err(Error::NamedLeaseLost(_))
    ));
    assert!(store.lapse_named_lease("nope").await.is_err());
    store.close().await;
}
