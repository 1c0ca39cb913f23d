//! Jobs: enqueue, claim, heartbeat, complete, fail, snooze, cancel, replay, listing, events and the long-poll claim.

use super::*;

tether_conformance::both_backends!(
    health_and_readiness,
    enqueue_maps_every_field,
    enqueue_batch_is_ordered_and_all_or_nothing,
    claim_heartbeat_and_complete,
    batch_heartbeat_and_complete_answer_per_item,
    fail_and_snooze,
    cancel_replay_and_bulk_replay,
    list_jobs_filters_and_pages,
    events_tell_the_history,
    long_poll_claim_is_woken_by_an_enqueue,
);

async fn health_and_readiness(db: &TestDb) {
    let s = start(db).await;
    s.admin.healthz().await.unwrap();
    s.admin.readyz().await.unwrap();
    // Health probes need no key.
    let anonymous = s.client("not-a-key");
    anonymous.healthz().await.unwrap();
    anonymous.readyz().await.unwrap();
    // A base URL with a trailing slash works the same.
    let slash = s.client(&s.admin_key);
    let slash = HttpClient::new(&format!("{}/", slash.base_url()), &s.admin_key).unwrap();
    slash.list_queues().await.unwrap();
}

#[derive(Serialize, Deserialize)]
struct Welcome {
    to: String,
}

impl JobArgs for Welcome {
    const KIND: &'static str = "welcome";
    const QUEUE: &'static str = "emails";
}

async fn enqueue_maps_every_field(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let run_at = Utc::now() + chrono::Duration::hours(1);
    let expires_at = Utc::now() + chrono::Duration::hours(2);
    let e = c
        .enqueue(
            NewJob::new("mail", "send", json!({"to": "a"}))
                .priority(7)
                .run_at(RunAt::At(run_at))
                .max_attempts(3)
                .timeout_ms(1_500)
                .idempotency_key("inv:1")
                .unique_key("u:1")
                .tags(["a", "b"])
                .expires_at(expires_at),
        )
        .await
        .unwrap();
    assert!(e.created);
    let j = e.job;
    assert_eq!(j.queue, "mail");
    assert_eq!(j.kind, "send");
    assert_eq!(j.payload, json!({"to": "a"}));
    assert_eq!(j.state, JobState::Queued);
    assert_eq!(j.priority, 7);
    assert_eq!(j.attempt, 0);
    assert_eq!(j.max_attempts, 3);
    assert_eq!(j.timeout_ms, Some(1_500));
    assert_eq!(j.idempotency_key.as_deref(), Some("inv:1"));
    assert_eq!(j.unique_key.as_deref(), Some("u:1"));
    assert_eq!(j.tags, vec!["a", "b"]);
    assert!(gap_ms(j.run_at, run_at) <= 1, "{} vs {run_at}", j.run_at);
    assert!(gap_ms(j.expires_at.unwrap(), expires_at) <= 1);
    assert!(j.result.is_none() && j.started_at.is_none() && j.worker_id.is_none());
    assert!(!j.cancel_requested);

    // The same idempotency key: the existing job, unchanged.
    let again = c
        .enqueue(NewJob::new("mail", "send", json!({"to": "b"})).idempotency_key("inv:1"))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.job.id, j.id);
    assert_eq!(again.job.payload, json!({"to": "a"}));
    // An active unique key: the active job.
    let dup = c
        .enqueue(NewJob::new("mail", "other", Value::Null).unique_key("u:1"))
        .await
        .unwrap();
    assert!(!dup.created);
    assert_eq!(dup.job.id, j.id);

    // delay_ms, and the defaults of everything unset.
    let d = c
        .enqueue(NewJob::new("mail", "send", Value::Null).run_at(RunAt::Delay(60_000)))
        .await
        .unwrap()
        .job;
    let delay = (d.run_at - d.created_at).num_milliseconds();
    assert!((59_000..=61_000).contains(&delay), "{delay}");
    assert_eq!(d.payload, Value::Null);
    assert_eq!((d.priority, d.max_attempts), (0, 5));
    assert!(d.tags.is_empty() && d.timeout_ms.is_none() && d.expires_at.is_none());

    // The backoff reaches the server: a retry waits at least its base.
    let b = c
        .enqueue(NewJob::new("bq", "k", Value::Null).backoff(Backoff {
            base_ms: 600_000,
            cap_ms: 600_000,
        }))
        .await
        .unwrap()
        .job;
    let claimed = c.claim("bq", &ClaimOptions::new("w1")).await.unwrap();
    assert_eq!(claimed[0].job.id, b.id);
    let failure = Failure {
        error: "boom".into(),
        ..Failure::default()
    };
    let retried = c
        .fail(b.id, claimed[0].lease_token, &failure)
        .await
        .unwrap();
    assert_eq!(retried.state, JobState::Queued);
    let wait = (retried.run_at - Utc::now()).num_seconds();
    assert!((590..=901).contains(&wait), "retry in {wait} s");

    // Typed arguments land on their kind's queue.
    let w = c
        .enqueue_args(&Welcome {
            to: "ada@example.com".into(),
        })
        .await
        .unwrap()
        .job;
    assert_eq!((w.queue.as_str(), w.kind.as_str()), ("emails", "welcome"));
    assert_eq!(w.payload, json!({"to": "ada@example.com"}));
}

async fn enqueue_batch_is_ordered_and_all_or_nothing(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let first = c
        .enqueue(NewJob::new("b", "k", json!(0)).idempotency_key("k:0"))
        .await
        .unwrap()
        .job;
    let out = c
        .enqueue_batch(&[
            NewJob::new("b", "k", json!(1)),
            NewJob::new("b", "k", json!(99)).idempotency_key("k:0"),
            NewJob::new("b", "k2", json!(2)).priority(-3),
        ])
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert!(out[0].created && !out[1].created && out[2].created);
    assert_eq!(out[0].job.payload, json!(1));
    assert_eq!(out[1].job.id, first.id);
    assert_eq!(out[1].job.payload, json!(0));
    assert_eq!((out[2].job.kind.as_str(), out[2].job.priority), ("k2", -3));

    // One bad entry refuses the whole batch; nothing is written.
    let err = c
        .enqueue_batch(&[
            NewJob::new("b", "k", json!(3)),
            NewJob::new("b", "bad kind!", json!(4)),
        ])
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument));
    assert!(err.to_string().contains("jobs[1]"), "{err}");
    let page = c.list_jobs(&JobQuery::new().queue("b")).await.unwrap();
    assert_eq!(page.jobs.len(), 3);
    // More than 1000 is refused too.
    let many = vec![NewJob::new("b", "k", Value::Null); 1001];
    assert!(c
        .enqueue_batch(&many)
        .await
        .unwrap_err()
        .is_invalid_argument());
}

async fn claim_heartbeat_and_complete(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let a = c
        .enqueue(NewJob::new("w", "k", json!("a")))
        .await
        .unwrap()
        .job;
    let b = c
        .enqueue(NewJob::new("w", "k", json!("b")))
        .await
        .unwrap()
        .job;
    let claimed = c
        .claim("w", &ClaimOptions::new("w1").limit(5).lease_ttl_ms(5_000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    assert_ne!(claimed[0].lease_token, claimed[1].lease_token);
    for cj in &claimed {
        assert!([a.id, b.id].contains(&cj.job.id));
        assert_eq!(cj.job.state, JobState::Running);
        assert_eq!(cj.job.attempt, 1);
        assert_eq!(cj.job.worker_id.as_deref(), Some("w1"));
        let lease = (cj.job.lease_expires_at.unwrap() - Utc::now()).num_milliseconds();
        assert!((3_000..=5_500).contains(&lease), "lease {lease} ms");
    }
    // Nothing left.
    assert!(c
        .claim("w", &ClaimOptions::new("w1"))
        .await
        .unwrap()
        .is_empty());

    let (x, y) = (&claimed[0], &claimed[1]);
    let ack = c
        .heartbeat(&Heartbeat {
            id: x.job.id,
            lease_token: x.lease_token,
            lease_ttl_ms: Some(60_000),
            progress: Some(json!({"pct": 50})),
        })
        .await
        .unwrap();
    assert!(!ack.cancel_requested);
    let lease = (ack.lease_expires_at - Utc::now()).num_milliseconds();
    assert!((55_000..=60_500).contains(&lease), "lease {lease} ms");
    let seen = c.get_job(x.job.id).await.unwrap();
    assert_eq!(seen.progress, Some(json!({"pct": 50})));
    assert!(seen.heartbeat_at.is_some());
    assert!(gap_ms(seen.lease_expires_at.unwrap(), ack.lease_expires_at) <= 1);

    let done = c
        .complete(x.job.id, x.lease_token, Some(json!({"ok": true})))
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!({"ok": true})));
    assert!(done.finished_at.is_some());
    let done = c.complete(y.job.id, y.lease_token, None).await.unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, None);
}

async fn batch_heartbeat_and_complete_answer_per_item(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    for i in 0..3 {
        c.enqueue(NewJob::new("hb", "k", json!(i))).await.unwrap();
    }
    let mut claimed = c
        .claim("hb", &ClaimOptions::new("w1").limit(3))
        .await
        .unwrap();
    claimed.sort_by_key(|c| c.job.id);
    let wrong = LeaseToken(Uuid::new_v4());
    let hb = |i: usize, token: LeaseToken, progress: Option<Value>| Heartbeat {
        id: claimed[i].job.id,
        lease_token: token,
        lease_ttl_ms: None,
        progress,
    };
    let answers = c
        .heartbeat_batch(&[
            hb(0, claimed[0].lease_token, None),
            hb(1, wrong, None),
            hb(2, claimed[2].lease_token, Some(json!(7))),
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 3);
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(a.id, claimed[i].job.id);
    }
    assert!(!answers[0].result.as_ref().unwrap().cancel_requested);
    let lost = answers[1].result.as_ref().unwrap_err();
    assert!(lost.is_lease_lost(), "{lost}");
    assert_eq!(lost.status(), Some(409));
    assert!(answers[2].result.is_ok());
    assert_eq!(
        c.get_job(claimed[2].job.id).await.unwrap().progress,
        Some(json!(7))
    );

    let answers = c
        .complete_batch(&[
            Completion {
                id: claimed[0].job.id,
                lease_token: claimed[0].lease_token,
                result: None,
            },
            Completion {
                id: claimed[1].job.id,
                lease_token: wrong,
                result: Some(json!("nope")),
            },
            Completion {
                id: claimed[2].job.id,
                lease_token: claimed[2].lease_token,
                result: Some(json!({"r": 2})),
            },
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 3);
    assert!(answers[0].result.is_ok());
    let lost = answers[1].result.as_ref().unwrap_err();
    assert_eq!(lost.code(), Some(ErrorCode::LeaseLost));
    assert!(answers[2].result.is_ok());
    assert_eq!(
        c.get_job(claimed[0].job.id).await.unwrap().state,
        JobState::Succeeded
    );
    assert_eq!(
        c.get_job(claimed[1].job.id).await.unwrap().state,
        JobState::Running
    );
    let third = c.get_job(claimed[2].job.id).await.unwrap();
    assert_eq!(third.state, JobState::Succeeded);
    assert_eq!(third.result, Some(json!({"r": 2})));
}

async fn fail_and_snooze(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let claim_one = |queue: &'static str| {
        let c = c.clone();
        async move {
            let mut jobs = c.claim(queue, &ClaimOptions::new("w1")).await.unwrap();
            assert_eq!(jobs.len(), 1);
            jobs.pop().unwrap()
        }
    };

    // Retry exactly when the upstream said.
    c.enqueue(NewJob::new("f1", "k", Value::Null).max_attempts(3))
        .await
        .unwrap();
    let cj = claim_one("f1").await;
    let failure = Failure {
        error: "upstream said 429".into(),
        retry_after_ms: Some(60_000),
        ..Failure::default()
    };
    let j = c.fail(cj.job.id, cj.lease_token, &failure).await.unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Queued, 1));
    assert_eq!(j.last_error.as_deref(), Some("upstream said 429"));
    let wait = (j.run_at - Utc::now()).num_milliseconds();
    assert!((55_000..=60_500).contains(&wait), "{wait}");

    // Fatal: failed for good.
    c.enqueue(NewJob::new("f2", "k", Value::Null))
        .await
        .unwrap();
    let cj = claim_one("f2").await;
    let failure = Failure {
        error: "bad input".into(),
        fatal: true,
        ..Failure::default()
    };
    let j = c.fail(cj.job.id, cj.lease_token, &failure).await.unwrap();
    assert_eq!(j.state, JobState::Failed);
    assert!(j.finished_at.is_some());

    // A cancel request reaches the heartbeat; the worker acknowledges it.
    c.enqueue(NewJob::new("f3", "k", Value::Null))
        .await
        .unwrap();
    let cj = claim_one("f3").await;
    let j = c.cancel(cj.job.id).await.unwrap();
    assert_eq!(j.state, JobState::Running);
    assert!(j.cancel_requested);
    let ack = c
        .heartbeat(&Heartbeat {
            id: cj.job.id,
            lease_token: cj.lease_token,
            lease_ttl_ms: None,
            progress: None,
        })
        .await
        .unwrap();
    assert!(ack.cancel_requested);
    let failure = Failure {
        error: "stopped on request".into(),
        cancelled: true,
        ..Failure::default()
    };
    let j = c.fail(cj.job.id, cj.lease_token, &failure).await.unwrap();
    assert_eq!(j.state, JobState::Cancelled);

    // Snooze: queued later, the attempt given back.
    c.enqueue(NewJob::new("f4", "k", Value::Null))
        .await
        .unwrap();
    let cj = claim_one("f4").await;
    assert_eq!(cj.job.attempt, 1);
    let j = c.snooze(cj.job.id, cj.lease_token, 30_000).await.unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Queued, 0));
    let wait = (j.run_at - Utc::now()).num_milliseconds();
    assert!((25_000..=30_500).contains(&wait), "{wait}");
}

async fn cancel_replay_and_bulk_replay(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let q = c
        .enqueue(NewJob::new("r", "k", Value::Null))
        .await
        .unwrap()
        .job;
    let j = c.cancel(q.id).await.unwrap();
    assert_eq!(j.state, JobState::Cancelled);
    let j = c.replay(q.id).await.unwrap();
    assert_eq!((j.state, j.attempt), (JobState::Queued, 0));
    assert_eq!(j.id, q.id);
    let err = c.replay(q.id).await.unwrap_err();
    assert!(err.is_invalid_state(), "{err}");

    // Five dead jobs: three of kind a, two of kind b.
    c.cancel(q.id).await.unwrap();
    for kind in ["a", "a", "a", "b", "b"] {
        c.enqueue(NewJob::new("dead", kind, Value::Null).max_attempts(1))
            .await
            .unwrap();
    }
    let claimed = c
        .claim("dead", &ClaimOptions::new("w1").limit(10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5);
    for cj in &claimed {
        let failure = Failure {
            error: "x".into(),
            ..Failure::default()
        };
        let j = c.fail(cj.job.id, cj.lease_token, &failure).await.unwrap();
        assert_eq!(j.state, JobState::Failed, "out of attempts");
    }
    let dlq = JobQuery::new().queue("dead").state(JobState::Failed);
    assert_eq!(c.list_jobs(&dlq).await.unwrap().jobs.len(), 5);
    let n = c
        .replay_queue(
            "dead",
            &BulkReplay {
                kind: Some("a".into()),
                ..BulkReplay::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    let n = c
        .replay_queue(
            "dead",
            &BulkReplay {
                limit: Some(1),
                ..BulkReplay::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(c.list_jobs(&dlq).await.unwrap().jobs.len(), 1);
    // Cancelled jobs replay with `state: cancelled`.
    let n = c
        .replay_queue(
            "r",
            &BulkReplay {
                state: Some(JobState::Cancelled),
                ..BulkReplay::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(c.get_job(q.id).await.unwrap().state, JobState::Queued);

    // A replay sets the given expires_at, or none.
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    c.cancel(q.id).await.unwrap();
    let j = c.replay_with(q.id, Some(later)).await.unwrap();
    assert_eq!(
        j.expires_at.map(|t| t.timestamp_millis()),
        Some(later.timestamp_millis())
    );
    c.cancel(q.id).await.unwrap();
    assert_eq!(c.replay(q.id).await.unwrap().expires_at, None);
    // Rounds follow the cursor: the last dead job, then the end.
    let round = c
        .replay_queue_round(
            "dead",
            &BulkReplay {
                limit: Some(1),
                expires_at: Some(later),
                ..BulkReplay::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(round.replayed, 1);
    let next = round.next_cursor.expect("a full round names its cursor");
    let round = c
        .replay_queue_round(
            "dead",
            &BulkReplay {
                cursor: Some(next),
                ..BulkReplay::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((round.replayed, round.next_cursor), (0, None));
    assert!(c.list_jobs(&dlq).await.unwrap().jobs.is_empty());
}

async fn list_jobs_filters_and_pages(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let mut ids = Vec::new();
    for i in 0..4 {
        let job = NewJob::new("la", "x", json!(i)).tags(["t1"]);
        ids.push(c.enqueue(job).await.unwrap().job.id);
    }
    for i in 0..3 {
        let job = NewJob::new("lb", "y", json!(i)).tags(["t2", "t3"]);
        ids.push(c.enqueue(job).await.unwrap().job.id);
    }
    // Pages of 3, newest first, until the cursor runs out.
    let mut seen = Vec::new();
    let mut query = JobQuery::new().limit(3);
    let mut pages = 0;
    loop {
        let page = c.list_jobs(&query).await.unwrap();
        pages += 1;
        assert!(page.jobs.len() <= 3);
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next_cursor {
            Some(cursor) => query = query.cursor(cursor),
            None => break,
        }
        assert!(pages < 10, "the cursor never ends");
    }
    let newest_first: Vec<Uuid> = ids.iter().rev().copied().collect();
    assert_eq!(seen, newest_first);

    let count = |q: JobQuery| {
        let c = c.clone();
        async move { c.list_jobs(&q).await.unwrap().jobs.len() }
    };
    assert_eq!(count(JobQuery::new().queue("lb")).await, 3);
    assert_eq!(count(JobQuery::new().kind("x")).await, 4);
    assert_eq!(count(JobQuery::new().tag("t3")).await, 3);
    assert_eq!(count(JobQuery::new().queue("la").tag("t3")).await, 0);
    let cj = c.claim("lb", &ClaimOptions::new("w1")).await.unwrap();
    c.complete(cj[0].job.id, cj[0].lease_token, None)
        .await
        .unwrap();
    assert_eq!(count(JobQuery::new().state(JobState::Succeeded)).await, 1);
    assert_eq!(
        count(JobQuery::new().queue("lb").state(JobState::Queued)).await,
        2
    );
    // The core filter converts.
    let core = tether_core::JobFilter {
        kind: Some("y".into()),
        ..Default::default()
    };
    assert_eq!(count(core.into()).await, 3);
    let err = c.list_jobs(&JobQuery::new().limit(0)).await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}

async fn events_tell_the_history(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(NewJob::new("ev", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let cj = c.claim("ev", &ClaimOptions::new("w1")).await.unwrap();
    let failure = Failure {
        error: "flaky".into(),
        retry_after_ms: Some(0),
        ..Failure::default()
    };
    c.fail(id, cj[0].lease_token, &failure).await.unwrap();
    let cj = c.claim("ev", &ClaimOptions::new("w2")).await.unwrap();
    assert_eq!(cj.len(), 1, "retry_after_ms 0 is ready at once");
    c.complete(id, cj[0].lease_token, None).await.unwrap();
    let events = c.events(id).await.unwrap();
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::RetryScheduled,
            EventKind::Claimed,
            EventKind::Succeeded
        ]
    );
    assert_eq!(events[1].worker_id.as_deref(), Some("w1"));
    assert_eq!(events[3].worker_id.as_deref(), Some("w2"));
    assert_eq!(events[3].attempt, 2);
    assert!(events[2].detail.as_deref().unwrap_or("").contains("flaky"));
    assert!(events.windows(2).all(|w| w[0].at <= w[1].at));
}

async fn long_poll_claim_is_woken_by_an_enqueue(db: &TestDb) {
    let s = start(db).await;
    let c = s.admin.clone();
    let started = Instant::now();
    let poll = tokio::spawn({
        let c = c.clone();
        async move {
            c.claim("lp", &ClaimOptions::new("w1").wait_ms(10_000))
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poll.is_finished(),
        "the claim waits while the queue is empty"
    );
    let id = c
        .enqueue(NewJob::new("lp", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let jobs = poll.await.unwrap();
    let took = started.elapsed();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].job.id, id);
    assert!(took < Duration::from_secs(5), "woken after {took:?}");

    // An empty wait ends empty, after about the wait.
    let started = Instant::now();
    let jobs = c
        .claim("lp", &ClaimOptions::new("w1").wait_ms(400))
        .await
        .unwrap();
    assert!(jobs.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(350));
}
