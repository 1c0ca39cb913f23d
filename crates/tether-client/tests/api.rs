//! Every client method against a real tether server on a loopback socket,
//! on PostgreSQL and SQLite: the answers' fields, the typed errors, and the
//! long-poll claim.

mod common;

use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tether_client::{
    Backoff, BulkReplay, ClaimOptions, Client, Completion, CronPreview, Error, ErrorCode,
    EventKind, Failure, Heartbeat, JobArgs, JobQuery, JobState, LeaseToken, NewJob, NewKey,
    Overlap, QueueConfigPatch, RunAt, RunOutcome, SchedulePatch, ScheduleSpec,
};
use tether_conformance::TestDb;
use uuid::Uuid;

use common::start;

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
    queue_stats_pause_resume_configure,
    tenants_and_keys,
    typed_errors,
    long_poll_claim_is_woken_by_an_enqueue,
    metrics_need_an_admin_key_and_show_queues,
    openapi_document_is_served,
    schedules_round_trip,
    schedule_trigger_and_runs,
    cron_preview_times,
    schedule_typed_errors,
);

/// |a - b| in milliseconds.
fn gap_ms(a: chrono::DateTime<Utc>, b: chrono::DateTime<Utc>) -> i64 {
    (a - b).num_milliseconds().abs()
}

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
    let slash = Client::new(&format!("{}/", slash.base_url()), &s.admin_key).unwrap();
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

async fn queue_stats_pause_resume_configure(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    c.enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap();
    c.enqueue(NewJob::new("qs", "k", Value::Null).run_at(RunAt::Delay(600_000)))
        .await
        .unwrap();
    let q = c.get_queue("qs").await.unwrap();
    assert_eq!(q.name, "qs");
    assert!(!q.paused);
    assert_eq!(q.counts.queued, 2);
    assert_eq!((q.ready, q.scheduled, q.expired_leases), (1, 1, 0));
    assert_eq!(q.max_attempts, 5);
    assert_eq!(q.backoff, Backoff::default());
    assert_eq!(q.default_lease_ttl_ms, 30_000);
    let all = c.list_queues().await.unwrap();
    assert!(all.iter().any(|q| q.name == "qs" && q.counts.queued == 2));
    // An unused queue reads as empty.
    let empty = c.get_queue("nothing-here").await.unwrap();
    assert_eq!(empty.counts, Default::default());

    let paused = c.pause("qs").await.unwrap();
    assert!(paused.paused);
    assert!(c
        .claim("qs", &ClaimOptions::new("w1"))
        .await
        .unwrap()
        .is_empty());
    c.enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap();
    let resumed = c.resume("qs").await.unwrap();
    assert!(!resumed.paused);
    assert_eq!(resumed.counts.queued, 3);
    assert_eq!(
        c.claim("qs", &ClaimOptions::new("w1").limit(5))
            .await
            .unwrap()
            .len(),
        2
    );

    let patch = QueueConfigPatch {
        max_attempts: Some(9),
        backoff: Some(Backoff {
            base_ms: 10,
            cap_ms: 20,
        }),
        default_lease_ttl_ms: Some(45_000),
    };
    let q = c.configure_queue("qs", &patch).await.unwrap();
    assert_eq!(q.max_attempts, 9);
    assert_eq!(
        q.backoff,
        Backoff {
            base_ms: 10,
            cap_ms: 20
        }
    );
    assert_eq!(q.default_lease_ttl_ms, 45_000);
    // Unset fields stay as they are.
    let q = c
        .configure_queue(
            "qs",
            &QueueConfigPatch {
                max_attempts: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((q.max_attempts, q.default_lease_ttl_ms), (4, 45_000));
    let j = c
        .enqueue(NewJob::new("qs", "k", Value::Null))
        .await
        .unwrap()
        .job;
    assert_eq!(j.max_attempts, 4);
    let cj = c.claim("qs", &ClaimOptions::new("w1")).await.unwrap();
    let lease = (cj[0].job.lease_expires_at.unwrap() - Utc::now()).num_milliseconds();
    assert!(
        (40_000..=45_500).contains(&lease),
        "the queue's lease: {lease}"
    );
    let bad = QueueConfigPatch {
        max_attempts: Some(0),
        ..Default::default()
    };
    assert!(c
        .configure_queue("qs", &bad)
        .await
        .unwrap_err()
        .is_invalid_argument());
}

async fn tenants_and_keys(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let acme = c.create_tenant("acme").await.unwrap();
    assert_eq!(acme.tenant.name, "acme");
    let acme_client = s.client(&acme.api_key);
    let me = acme_client.whoami().await.unwrap();
    assert_eq!(
        (me.tenant.id, me.tenant.name.as_str()),
        (acme.tenant.id, "acme")
    );
    assert!(!me.admin);
    assert!(c.whoami().await.unwrap().admin);
    let job = acme_client
        .enqueue(NewJob::new("q", "k", Value::Null))
        .await
        .unwrap()
        .job;
    // Walls: the admin's tenant does not see acme's job.
    assert!(c.get_job(job.id).await.unwrap_err().is_not_found());
    let names: Vec<String> = c
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    for name in ["default", "other", "acme"] {
        assert!(names.iter().any(|n| n == name), "{names:?}");
    }
    let err = c.create_tenant("acme").await.unwrap_err();
    assert!(err.is_already_exists(), "{err}");
    assert!(matches!(
        tether_core::Error::from(err),
        tether_core::Error::AlreadyExists(_)
    ));

    let key = c
        .create_key(
            acme.tenant.id,
            &NewKey {
                name: Some("ci".into()),
                admin: false,
            },
        )
        .await
        .unwrap();
    let second = s.client(&key.api_key);
    assert_eq!(second.get_job(job.id).await.unwrap().id, job.id);
    // Admin keys only in the default tenant.
    let err = c
        .create_key(
            acme.tenant.id,
            &NewKey {
                name: None,
                admin: true,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidArgument), "{err}");
    // Revoked at once.
    c.revoke_key(key.key_id).await.unwrap();
    let err = second.get_job(job.id).await.unwrap_err();
    assert!(err.is_unauthenticated(), "{err}");
    assert_eq!(err.status(), Some(401));
    // Listed, oldest first, the revoked one with its instant.
    let keys = c.list_keys(acme.tenant.id).await.unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(
        (keys[1].id, keys[1].name.as_deref()),
        (key.key_id, Some("ci"))
    );
    assert!(keys[1].revoked_at.is_some() && keys[0].revoked_at.is_none());
    assert!(keys.iter().all(|k| !k.admin));
    let err = c.list_keys(Uuid::new_v4()).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    // Unknown tenant: a not_found that is not a job's.
    let err = c
        .create_key(Uuid::new_v4(), &NewKey::default())
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    assert!(matches!(
        tether_core::Error::from(err),
        tether_core::Error::NotFound(_)
    ));
    // A second admin key for default works on admin routes.
    let default_id = c
        .list_tenants()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "default")
        .unwrap()
        .id;
    let admin2 = c
        .create_key(
            default_id,
            &NewKey {
                name: Some("ops".into()),
                admin: true,
            },
        )
        .await
        .unwrap();
    s.client(&admin2.api_key).list_tenants().await.unwrap();
}

async fn typed_errors(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    use tether_core::Error as Core;

    // 401: a bad key.
    let err = s.client("tth_nope").list_queues().await.unwrap_err();
    assert!(
        matches!(&err, Error::Api { status: 401, code: ErrorCode::Unauthenticated, message } if !message.is_empty()),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert!(matches!(Core::from(err), Core::Unauthenticated));

    // 403: a non-admin key on admin routes.
    let err = s.other.create_tenant("x").await.unwrap_err();
    assert!(err.is_permission_denied(), "{err}");
    assert_eq!(err.status(), Some(403));
    assert!(s
        .other
        .list_tenants()
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .create_key(s.other_id, &NewKey::default())
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .revoke_key(Uuid::new_v4())
        .await
        .unwrap_err()
        .is_permission_denied());
    assert!(s
        .other
        .list_keys(s.other_id)
        .await
        .unwrap_err()
        .is_permission_denied());

    // 404: another tenant's job, on every job route.
    let id = c
        .enqueue(NewJob::new("te", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let err = s.other.get_job(id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::JobNotFound(x) if x == id));
    assert!(s.other.cancel(id).await.unwrap_err().is_not_found());
    assert!(s.other.replay(id).await.unwrap_err().is_not_found());
    assert!(s.other.events(id).await.unwrap_err().is_not_found());
    assert_eq!(c.get_job(id).await.unwrap().state, JobState::Queued);

    // 409 lease_lost: a token that does not own the job.
    let cj = c.claim("te", &ClaimOptions::new("w1")).await.unwrap();
    let wrong = LeaseToken(Uuid::new_v4());
    let err = c.complete(id, wrong, None).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::LeaseLost,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::LeaseLost(x) if x == id));
    let err = c.snooze(id, wrong, 0).await.unwrap_err();
    assert!(matches!(err.into_core_for_job(id), Core::LeaseLost(x) if x == id));
    // Another tenant's running job with the right token: still 404.
    let err = s
        .other
        .complete(id, cj[0].lease_token, None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err}");

    // 409 invalid_state: cancelling a finished job.
    c.complete(id, cj[0].lease_token, None).await.unwrap();
    let err = c.cancel(id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::InvalidState,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        matches!(Core::from(err), Core::InvalidState { id: x, state: JobState::Succeeded, .. } if x == id)
    );

    // 400 invalid_argument, with a message naming the field.
    let err = c
        .enqueue(NewJob::new("bad queue!", "k", Value::Null))
        .await
        .unwrap_err();
    match &err {
        Error::Api {
            status: 400,
            code: ErrorCode::InvalidArgument,
            message,
        } => assert!(message.contains("queue"), "{message}"),
        other => panic!("{other:?}"),
    }
    let core = Core::from(err);
    // (The server names it `jobs[0].queue` even for a single enqueue.)
    assert!(
        matches!(&core, Core::Invalid { field, .. } if field.ends_with("queue")),
        "{core:?}"
    );
    let err = c
        .enqueue(NewJob::new("q", "k", Value::Null).priority(500))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    let err = c
        .claim("q", &ClaimOptions::new("w1").wait_ms(60_000))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("wait_ms"),
        "{err}"
    );
    let err = c
        .enqueue(NewJob::new("q", "k", Value::Null).run_at(RunAt::Delay(-5)))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");

    // 413: a payload above the 1 MiB limit.
    let big = "x".repeat(1_100_000);
    let err = c
        .enqueue(NewJob::new("q", "k", json!(big)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::PayloadTooLarge), "{err}");
    assert_eq!(err.status(), Some(413));
    assert!(!err.is_retryable());

    // Refused before sending: names no URL can carry.
    let err = c.get_queue("..").await.unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    assert!(matches!(
        Client::new("not a url", "k").unwrap_err(),
        Error::Invalid { .. }
    ));
    assert!(matches!(
        Client::new("ftp://127.0.0.1/", "k").unwrap_err(),
        Error::Invalid { .. }
    ));
    assert!(matches!(
        Client::new(&s.base, "bad\nkey").unwrap_err(),
        Error::Invalid { .. }
    ));

    // Transport: nobody listens there.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let down = Client::builder(&format!("http://{closed}"), "k")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = down.healthz().await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(matches!(Core::from(err), Core::Unavailable(_)));
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

async fn metrics_need_an_admin_key_and_show_queues(db: &TestDb) {
    let s = start(db).await;
    s.admin
        .enqueue(NewJob::new("mq", "k", Value::Null))
        .await
        .unwrap();
    s.other
        .enqueue(NewJob::new("oq", "k", Value::Null))
        .await
        .unwrap();
    let text = s.admin.metrics().await.unwrap();
    let line = |tenant: &str, queue: &str| {
        format!("tether_queue_jobs{{tenant=\"{tenant}\",queue=\"{queue}\",state=\"queued\"}} 1")
    };
    // Every tenant's queues, for the admin.
    for want in [line("default", "mq"), line("other", "oq")] {
        assert!(text.lines().any(|l| l == want), "no {want:?} in:\n{text}");
    }
    assert!(text.contains("tether_queue_oldest_ready_age_seconds"));
    assert!(text.contains("tether_queue_expired_leases"));
    let err = s.other.metrics().await.unwrap_err();
    assert!(err.is_permission_denied(), "{err}");
    assert!(s
        .client("tth_nope")
        .metrics()
        .await
        .unwrap_err()
        .is_unauthenticated());
}

async fn openapi_document_is_served(db: &TestDb) {
    let s = start(db).await;
    // No key needed.
    let doc = s.client("no key").openapi().await.unwrap();
    for path in ["/v1/jobs", "/v1/queues/{queue}/claim", "/v1/jobs/heartbeat"] {
        assert!(doc["paths"][path].is_object(), "no {path} in the document");
    }
}

/// An instant of a test, from RFC 3339.
fn instant(s: &str) -> chrono::DateTime<Utc> {
    s.parse().unwrap()
}

async fn schedules_round_trip(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let before = Utc::now();
    let spec = ScheduleSpec::new("nightly", "0 3 * * *", "reports", "build")
        .timezone("Europe/Berlin")
        .payload(json!({"format": "pdf"}))
        .overlap(Overlap::Skip);
    let made = c.create_schedule(&spec).await.unwrap();
    assert_eq!(made.spec(), spec);
    assert_eq!(made.name, "nightly");
    assert_eq!(made.cron, "0 3 * * *");
    assert_eq!(made.timezone, "Europe/Berlin");
    assert_eq!(
        (made.queue.as_str(), made.kind.as_str()),
        ("reports", "build")
    );
    assert_eq!(made.payload, json!({"format": "pdf"}));
    assert!(made.enabled);
    assert_eq!(made.overlap, Overlap::Skip);
    assert!(made.last_run_at.is_none());
    let next = made.next_run_at.unwrap();
    assert!(
        next > before && next <= before + chrono::Duration::hours(25),
        "{next}"
    );
    assert!(made.updated_at >= made.created_at);

    // The defaults of ScheduleSpec::new are the server's.
    let minimal = c
        .create_schedule(&ScheduleSpec::new("a-minimal", "*/5 * * * *", "q", "k"))
        .await
        .unwrap();
    assert_eq!(minimal.timezone, "UTC");
    assert_eq!(minimal.payload, Value::Null);
    assert!(minimal.enabled);
    assert_eq!(minimal.overlap, Overlap::Allow);

    // Reads: one, and all by name.
    assert_eq!(c.get_schedule(made.id).await.unwrap(), made);
    assert_eq!(
        c.list_schedules().await.unwrap(),
        vec![minimal.clone(), made.clone()]
    );

    // Patch: only what is set changes; `Some(Value::Null)` sets a null
    // payload.
    let patched = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                cron: Some("0 12 * * *".into()),
                timezone: Some("UTC".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.cron, "0 12 * * *");
    assert_eq!(patched.timezone, "UTC");
    assert_eq!(patched.payload, json!({"format": "pdf"}));
    assert_eq!(patched.name, "nightly");
    assert_eq!(patched.created_at, made.created_at);
    assert_eq!(
        patched.next_run_at.unwrap().format("%H:%M:%S").to_string(),
        "12:00:00"
    );
    let nulled = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                payload: Some(Value::Null),
                name: Some("renamed".into()),
                overlap: Some(Overlap::Allow),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(nulled.payload, Value::Null);
    assert_eq!(nulled.name, "renamed");
    assert_eq!(nulled.overlap, Overlap::Allow);
    // Disabled: no next run; enabled again: the next one after now.
    let off = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                enabled: Some(false),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert!(!off.enabled && off.next_run_at.is_none());
    let on = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                enabled: Some(true),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert!(on.enabled && on.next_run_at.unwrap() > before);
    // The empty patch changes no field of the definition.
    let same = c
        .patch_schedule(made.id, &SchedulePatch::default())
        .await
        .unwrap();
    assert_eq!(same.spec(), on.spec());

    // Delete: gone, and a second delete is 404.
    c.delete_schedule(made.id).await.unwrap();
    assert!(c.get_schedule(made.id).await.unwrap_err().is_not_found());
    assert!(c.delete_schedule(made.id).await.unwrap_err().is_not_found());
    assert_eq!(c.list_schedules().await.unwrap(), vec![minimal]);
}

async fn schedule_trigger_and_runs(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let sched = c
        .create_schedule(&ScheduleSpec::new("t", "0 0 1 1 *", "tq", "tk").payload(json!({"n": 1})))
        .await
        .unwrap();
    assert!(c.schedule_runs(sched.id).await.unwrap().is_empty());
    let before = Utc::now();
    let job = c.trigger_schedule(sched.id).await.unwrap();
    assert_eq!((job.queue.as_str(), job.kind.as_str()), ("tq", "tk"));
    assert_eq!(job.payload, json!({"n": 1}));
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(c.get_job(job.id).await.unwrap().id, job.id);
    let second = c.trigger_schedule(sched.id).await.unwrap();
    assert_ne!(second.id, job.id);
    // Newest first.
    let runs = c.schedule_runs(sched.id).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].job_id, Some(second.id));
    assert_eq!(runs[1].job_id, Some(job.id));
    for run in &runs {
        assert_eq!(run.outcome, "enqueued");
        assert_eq!(run.run_outcome(), Some(RunOutcome::Enqueued));
        assert!(gap_ms(run.fire_at, before) < 60_000, "{}", run.fire_at);
    }
    assert!(runs[0].fire_at >= runs[1].fire_at);
    let after = c.get_schedule(sched.id).await.unwrap();
    assert_eq!(after.last_run_at, Some(runs[0].fire_at));
    assert_eq!(after.next_run_at, sched.next_run_at);
    // The other tenant sees neither the schedule nor its runs.
    assert!(s
        .other
        .schedule_runs(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(s
        .other
        .trigger_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert_eq!(c.schedule_runs(sched.id).await.unwrap().len(), 2);
}

async fn cron_preview_times(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    // New York springs forward on 2026-03-08: 02:30 does not exist and
    // fires when the gap ends, 03:00 EDT (07:00Z).
    let times = c
        .cron_preview(
            &CronPreview::new("30 2 * * *")
                .timezone("America/New_York")
                .from(instant("2026-03-07T00:00:00Z"))
                .count(3),
        )
        .await
        .unwrap();
    assert_eq!(
        times,
        vec![
            instant("2026-03-07T07:30:00Z"),
            instant("2026-03-08T07:00:00Z"),
            instant("2026-03-09T06:30:00Z"),
        ]
    );
    // Defaults: UTC, 5 instants, strictly after `from` (now when unset).
    let times = c
        .cron_preview(&CronPreview::new("0 * * * *").from(instant("2026-01-01T00:00:00Z")))
        .await
        .unwrap();
    assert_eq!(times.len(), 5);
    assert_eq!(times[0], instant("2026-01-01T01:00:00Z"));
    assert_eq!(times[4], instant("2026-01-01T05:00:00Z"));
    let before = Utc::now();
    let times = c
        .cron_preview(&CronPreview::new("*/10 * * * * *"))
        .await
        .unwrap();
    assert_eq!(times.len(), 5);
    assert!(times[0] > before - chrono::Duration::seconds(1));
    assert!(times[0] <= Utc::now() + chrono::Duration::seconds(10));
    assert!(times
        .windows(2)
        .all(|w| w[1] - w[0] == chrono::Duration::seconds(10)));
    // Any tenant's key may preview.
    let times = s
        .other
        .cron_preview(&CronPreview::new("0 0 * * *").count(1))
        .await
        .unwrap();
    assert_eq!(times.len(), 1);
}

async fn schedule_typed_errors(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    use tether_core::Error as Core;
    let sched = c
        .create_schedule(&ScheduleSpec::new("mine", "0 3 * * *", "q", "k"))
        .await
        .unwrap();

    // 400 invalid_argument, naming the field.
    for (spec, field) in [
        (ScheduleSpec::new("bad", "* * * *", "q", "k"), "cron"),
        (ScheduleSpec::new("bad", "0 0 30 2 *", "q", "k"), "cron"),
        (
            ScheduleSpec::new("bad", "0 3 * * *", "q", "k").timezone("Mars/Base"),
            "timezone",
        ),
        (ScheduleSpec::new("bad name", "0 3 * * *", "q", "k"), "name"),
    ] {
        let err = c.create_schedule(&spec).await.unwrap_err();
        match &err {
            Error::Api {
                status: 400,
                code: ErrorCode::InvalidArgument,
                message,
            } => assert!(message.contains(field), "{message}"),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(Core::from(err), Core::Invalid { field: f, .. } if f == field),
            "{field}"
        );
    }
    let err = c
        .patch_schedule(
            sched.id,
            &SchedulePatch {
                cron: Some("nope".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("cron"),
        "{err}"
    );
    for count in [0, 101] {
        let err = c
            .cron_preview(&CronPreview::new("* * * * *").count(count))
            .await
            .unwrap_err();
        assert!(
            err.is_invalid_argument() && err.to_string().contains("count"),
            "{err}"
        );
    }
    let err = c
        .cron_preview(&CronPreview::new("* * * * *").timezone("Nowhere"))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("timezone"),
        "{err}"
    );
    assert_eq!(c.list_schedules().await.unwrap(), vec![sched.clone()]);

    // 409 already_exists: a taken name, on create and on rename.
    let err = c
        .create_schedule(&ScheduleSpec::new("mine", "0 4 * * *", "q", "k"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::AlreadyExists,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::AlreadyExists(_)));
    let second = c
        .create_schedule(&ScheduleSpec::new("second", "0 4 * * *", "q", "k"))
        .await
        .unwrap();
    let err = c
        .patch_schedule(
            second.id,
            &SchedulePatch {
                name: Some("mine".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    // 404 not_found: another tenant's schedule on every route, and an
    // unknown id.
    let other = &s.other;
    let err = other.get_schedule(sched.id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::NotFound(_)));
    let disable = SchedulePatch {
        enabled: Some(false),
        ..SchedulePatch::default()
    };
    assert!(other
        .patch_schedule(sched.id, &disable)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .delete_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .schedule_runs(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .trigger_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other.list_schedules().await.unwrap().is_empty());
    assert!(c
        .get_schedule(Uuid::now_v7())
        .await
        .unwrap_err()
        .is_not_found());
    // Untouched by all of it.
    assert_eq!(c.get_schedule(sched.id).await.unwrap(), sched);

    // 401: a bad key.
    let err = s
        .client("tth_nope")
        .cron_preview(&CronPreview::new("* * * * *"))
        .await
        .unwrap_err();
    assert!(err.is_unauthenticated(), "{err}");
}
