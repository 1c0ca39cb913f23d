//! The runtime's behaviours, one `pub async fn name(db: &TestDb)` each; the
//! `runtime_suite!` in `runtime.rs` runs every one on both backends.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use tether_conformance::TestDb;
use tether_core::lifecycle::MAINTENANCE_LEASE;
use tether_core::{
    Backoff, ClaimRequest, DependencyFailure, EventKind, JobArgs, JobState, NewJob,
    QueueConfigPatch,
};
use tether_worker::{JobError, Worker};

use super::support::*;

const SEC: Duration = Duration::from_secs(1);

/// Retries of `queue` wait a minute: a retried job stays visibly `queued`.
async fn slow_retries(db: &TestDb, queue: &str) {
    db.engine
        .configure_queue(
            T,
            queue,
            &QueueConfigPatch {
                backoff: Some(Backoff {
                    base_ms: 60_000,
                    cap_ms: 60_000,
                }),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .expect("configure queue");
}

/// A handler's result is stored and the job succeeds on its first attempt.
pub async fn success_stores_the_result(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 2)
        .handler("echo", |ctx| async move {
            Ok(Some(
                json!({ "echo": ctx.job().payload, "attempt": ctx.attempt() }),
            ))
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "echo", json!({ "x": 1 }))).await;
    let done = job_where(db, j.id, "success", 5 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 1);
    assert_eq!(
        done.result,
        Some(json!({ "echo": { "x": 1 }, "attempt": 1 }))
    );
    assert_eq!(done.worker_id.as_deref(), Some(handle.worker_id()));
    handle.shutdown();
    handle.join().await;
}

/// Hooks run around each handler, in order: `before` sees the job and its
/// headers (a trace context) and may refuse it (the handler then does not
/// run, and the attempt fails with the hook's error); `on_error` sees
/// failures (a returned error, a panic), not successes; `after` sees every
/// outcome; a panicking `after` hook changes nothing.
pub async fn hooks_run_around_every_handler(db: &TestDb) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (b, a, e) = (seen.clone(), seen.clone(), seen.clone());
    let handle = worker(db)
        .queue(Q, 1)
        .before(move |ctx| {
            let parent = ctx
                .job()
                .headers
                .get("traceparent")
                .cloned()
                .unwrap_or_default();
            b.lock()
                .unwrap()
                .push(format!("before {} {parent}", ctx.job().kind));
            if ctx.job().payload["refuse"] == json!(true) {
                return Err(JobError::fatal("refused by a hook"));
            }
            Ok(())
        })
        .on_error(move |ctx, err| {
            e.lock()
                .unwrap()
                .push(format!("error {} {err}", ctx.job().kind));
        })
        .after(move |ctx, outcome| {
            a.lock()
                .unwrap()
                .push(format!("after {} {}", ctx.job().kind, outcome.is_ok()));
        })
        .after(|_, _| panic!("a broken after hook"))
        .handler("ok", |_| async { Ok(Some(json!(1))) })
        .handler("boom", |_| async { panic!("kaboom") })
        .build()
        .unwrap()
        .start();
    let ok = enqueue(
        db,
        NewJob::new(Q, "ok", json!({})).header("traceparent", "00-abc-def-01"),
    )
    .await;
    let done = job_where(db, ok.id, "ok", 5 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(
        (done.state, done.result),
        (JobState::Succeeded, Some(json!(1)))
    );
    let refused = enqueue(db, NewJob::new(Q, "ok", json!({"refuse": true}))).await;
    let done = job_where(db, refused.id, "refused", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Failed);
    assert_eq!(done.last_error.as_deref(), Some("refused by a hook"));
    let boom = enqueue(db, NewJob::new(Q, "boom", json!({})).max_attempts(1)).await;
    job_where(db, boom.id, "boom", 5 * SEC, |j| j.state.is_terminal()).await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "before ok 00-abc-def-01",
            "after ok true",
            "before ok ",
            "error ok refused by a hook",
            "after ok false",
            "before boom ",
            "error boom handler panicked: kaboom",
            "after boom false",
        ]
    );
}

#[derive(Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

impl JobArgs for Add {
    const KIND: &'static str = "add";
    const QUEUE: &'static str = "jobs";
}

#[derive(Serialize)]
struct Sum {
    sum: i64,
}

/// A typed handler gets decoded arguments and its result is serialized; a
/// payload that does not decode fails the job for good, naming the problem.
pub async fn typed_jobs_decode_args_and_bad_payloads_are_fatal(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 2)
        .job(|args: Add, _ctx| async move {
            Ok::<_, JobError>(Sum {
                sum: args.a + args.b,
            })
        })
        .build()
        .unwrap()
        .start();
    let good = enqueue(db, Add { a: 2, b: 40 }.to_new_job().unwrap()).await;
    let bad = enqueue(db, NewJob::new(Q, "add", json!({ "a": "two" }))).await;
    let good = job_where(db, good.id, "typed success", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(good.state, JobState::Succeeded);
    assert_eq!(good.result, Some(json!({ "sum": 42 })));
    let bad = job_where(db, bad.id, "decode failure", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(
        bad.state,
        JobState::Failed,
        "a payload that cannot decode is fatal"
    );
    assert_eq!(bad.attempt, 1);
    let err = bad.last_error.unwrap_or_default();
    assert!(
        err.contains("does not decode") && err.contains("Add"),
        "{err}"
    );
    handle.shutdown();
    handle.join().await;
}

/// A retryable error (here through `?` on an ordinary error) is retried
/// after the queue's backoff and the second attempt succeeds.
pub async fn retry_then_success(db: &TestDb) {
    db.engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                backoff: Some(Backoff {
                    base_ms: 100,
                    cap_ms: 100,
                }),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    let handle = worker(db)
        .queue(Q, 1)
        .handler("flaky", |ctx| async move {
            if ctx.attempt() == 1 {
                Err(std::io::Error::other("flaky upstream"))?;
            }
            Ok(Some(json!("ok")))
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "flaky", json!({}))).await;
    let done = job_where(db, j.id, "retry then success", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 2);
    let history = db.engine.events(T, j.id).await.unwrap();
    let retry = history
        .iter()
        .find(|e| e.event == EventKind::RetryScheduled)
        .expect("a retry_scheduled event");
    assert!(
        retry
            .detail
            .as_deref()
            .unwrap_or_default()
            .contains("flaky upstream"),
        "{retry:?}"
    );
    handle.shutdown();
    handle.join().await;
}

/// A fatal error fails the job at once, attempts left or not.
pub async fn fatal_fails_at_once(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 1)
        .handler(
            "doomed",
            |_ctx| async move { Err(JobError::fatal("bad input")) },
        )
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "doomed", json!({})).max_attempts(5)).await;
    let done = job_where(db, j.id, "fatal", 5 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Failed);
    assert_eq!(done.attempt, 1);
    assert_eq!(done.last_error.as_deref(), Some("bad input"));
    handle.shutdown();
    handle.join().await;
}

/// RetryAfter sets `run_at` exactly that far after the failure and counts
/// the attempt.
pub async fn retry_after_sets_the_exact_delay(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 1)
        .handler("limited", |_ctx| async move {
            Err(JobError::retry_after(
                "429 from upstream",
                Duration::from_secs(5),
            ))
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "limited", json!({}))).await;
    let after = job_where(db, j.id, "retry scheduled", 5 * SEC, |j| {
        j.state == JobState::Queued && j.attempt == 1
    })
    .await;
    let delay = ms_between(after.run_at, after.updated_at);
    assert!(
        (4_990..=5_010).contains(&delay),
        "run_at is {delay} ms after the failure"
    );
    assert_eq!(after.last_error.as_deref(), Some("429 from upstream"));
    handle.shutdown();
    handle.join().await;
}

/// A short snooze is reported like any other (invariant 21): the job goes
/// back to the queue with the attempt given back, the history shows
/// `snoozed`, and it is claimed again when due and succeeds. The old
/// in-process limit, still accepted by the builder, hides nothing.
pub async fn a_short_snooze_is_reported(db: &TestDb) {
    let calls: Arc<Mutex<Vec<(Instant, i32)>>> = Arc::default();
    let seen = calls.clone();
    let handle = worker(db)
        .queue(Q, 1)
        .max_in_process_snooze(SEC)
        .handler("busy", move |ctx| {
            let seen = seen.clone();
            async move {
                let first = {
                    let mut calls = seen.lock().unwrap();
                    calls.push((Instant::now(), ctx.attempt()));
                    calls.len() == 1
                };
                if first {
                    Err(JobError::snooze(Duration::from_millis(100)))
                } else {
                    Ok(None)
                }
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "busy", json!({}))).await;
    let done = job_where(db, j.id, "success", 10 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 1, "the snoozed attempt was given back");
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "the handler ran again after the snooze");
    assert_eq!((calls[0].1, calls[1].1), (1, 1), "attempt 1 both times");
    let waited = calls[1].0 - calls[0].0;
    assert!(
        waited >= Duration::from_millis(100),
        "ran again after {waited:?}"
    );
    assert_eq!(
        events(db, j.id).await,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::Snoozed,
            EventKind::Claimed,
            EventKind::Succeeded
        ]
    );
    handle.shutdown();
    handle.join().await;
}

/// A worker given no lease TTL claims with none (invariant 21): each job
/// gets the lease its queue is configured with (2 s here, not the
/// runtime's 30 s), and the worker heartbeats it every third of that
/// lease, so a 3 s handler keeps its job while a reaper runs every 100 ms.
pub async fn the_queues_lease_applies_and_is_heartbeated_at_a_third(db: &TestDb) {
    db.engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                default_lease_ttl_ms: Some(2_000),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .expect("configure queue");
    let claimed_lease = Arc::new(Mutex::new(None));
    let seen = claimed_lease.clone();
    let handle = worker_on_queue_leases(db)
        .queue(Q, 1)
        .handler("long", move |ctx| {
            *seen.lock().unwrap() = Some(lease_ms(ctx.job()));
            async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(Some(json!("done")))
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    let reaper_engine = db.engine.clone();
    let stop = Gate::new();
    let stop_reaper = stop.clone();
    let reaper = tokio::spawn(async move {
        let mut reaped = 0;
        while !stop_reaper.is_open() {
            reaped += reaper_engine.reap_lapsed_leases(100).await.unwrap().total();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        reaped
    });
    // While it runs, every lease the job holds is 2 s long, and the
    // heartbeats move it on.
    let leases = Mutex::new(Vec::new());
    let beats = Mutex::new(std::collections::BTreeSet::new());
    let done = job_where(db, j.id, "the long job", 15 * SEC, |j| {
        if j.state == JobState::Running {
            leases.lock().unwrap().push(lease_ms(j));
            beats.lock().unwrap().insert(j.heartbeat_at);
        }
        j.state.is_terminal()
    })
    .await;
    stop.open();
    let reaped = reaper.await.unwrap();
    assert_eq!(
        *claimed_lease.lock().unwrap(),
        Some(Some(2_000)),
        "the claim granted the queue's lease"
    );
    let leases = leases.into_inner().unwrap();
    assert!(!leases.is_empty(), "the job was seen running");
    assert!(
        leases.iter().all(|l| *l == Some(2_000)),
        "leases while running: {leases:?}"
    );
    let beats = beats.into_inner().unwrap();
    assert!(
        beats.len() >= 2,
        "no heartbeat seen in a 3 s run on a 2 s lease: {beats:?}"
    );
    assert_eq!(reaped, 0, "the reaper took a heartbeated job");
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 1);
    let history = events(db, j.id).await;
    assert_eq!(
        history,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::Succeeded
        ],
        "no lease_expired or lease_lost"
    );
    handle.shutdown();
    handle.join().await;
}

/// A lease TTL given to the worker is asked for on every claim and wins
/// over the queue's.
pub async fn an_explicit_lease_ttl_wins_over_the_queues(db: &TestDb) {
    db.engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                default_lease_ttl_ms: Some(2_000),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .expect("configure queue");
    let claimed_lease = Arc::new(Mutex::new(None));
    let seen = claimed_lease.clone();
    let handle = worker(db)
        .lease_ttl(Duration::from_secs(5))
        .queue(Q, 1)
        .handler("k", move |ctx| {
            *seen.lock().unwrap() = Some(lease_ms(ctx.job()));
            async move { Ok(None) }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "k", json!({}))).await;
    let done = job_where(db, j.id, "success", 5 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(*claimed_lease.lock().unwrap(), Some(Some(5_000)));
    handle.shutdown();
    handle.join().await;
}

/// A long snooze hands the job back too: queued, attempt given back,
/// `run_at` that far away, a `snoozed` event.
pub async fn long_snooze_is_handed_back(db: &TestDb) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let handle = worker(db)
        .queue(Q, 1)
        .handler("later", move |_ctx| {
            seen.fetch_add(1, Ordering::SeqCst);
            async move { Err(JobError::snooze(Duration::from_secs(60))) }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "later", json!({}))).await;
    eventually("the snooze", 5 * SEC, || async {
        events(db, j.id)
            .await
            .contains(&EventKind::Snoozed)
            .then_some(())
    })
    .await;
    let after = get(db, j.id).await;
    assert_eq!(after.state, JobState::Queued);
    assert_eq!(after.attempt, 0, "the attempt is given back");
    let delay = ms_between(after.run_at, after.updated_at);
    assert!(
        (59_990..=60_010).contains(&delay),
        "run_at is {delay} ms away"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    handle.shutdown();
    handle.join().await;
}

/// A panic is caught and becomes a retryable failure naming it; the worker
/// keeps running and takes the next job.
pub async fn panic_becomes_a_retryable_failure(db: &TestDb) {
    slow_retries(db, Q).await;
    let handle = worker(db)
        .queue(Q, 1)
        .handler("boom", |ctx| async move {
            if ctx.job().payload["panic"] == json!(true) {
                panic!("boom 42");
            }
            Ok(Some(json!("fine")))
        })
        .build()
        .unwrap()
        .start();
    let bad = enqueue(
        db,
        NewJob::new(Q, "boom", json!({ "panic": true })).max_attempts(3),
    )
    .await;
    let after = job_where(db, bad.id, "the panic's retry", 5 * SEC, |j| {
        j.attempt == 1 && j.state != JobState::Running
    })
    .await;
    assert_eq!(after.state, JobState::Queued, "a panic is retryable");
    let err = after.last_error.unwrap_or_default();
    assert!(err.contains("panicked") && err.contains("boom 42"), "{err}");
    let good = enqueue(db, NewJob::new(Q, "boom", json!({ "panic": false }))).await;
    let good = job_where(db, good.id, "the next job", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(
        good.state,
        JobState::Succeeded,
        "the worker survived the panic"
    );
    handle.shutdown();
    handle.join().await;
}

/// `timeout_ms` drops the handler when it elapses and fails the attempt
/// (retryable) with "timed out after N ms".
pub async fn timeout_drops_the_handler_and_fails_the_attempt(db: &TestDb) {
    slow_retries(db, Q).await;
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let handle = worker(db)
        .queue(Q, 1)
        .handler("slow", move |_ctx| {
            let guard = DropFlag(flag.clone());
            async move {
                let _guard = guard;
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let started = Instant::now();
    let j = enqueue(
        db,
        NewJob::new(Q, "slow", json!({}))
            .timeout_ms(300)
            .max_attempts(3),
    )
    .await;
    let after = job_where(db, j.id, "the timeout", 5 * SEC, |j| {
        j.attempt == 1 && j.state != JobState::Running
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(after.state, JobState::Queued, "a timeout is retryable");
    assert_eq!(after.last_error.as_deref(), Some("timed out after 300 ms"));
    assert!(dropped.load(Ordering::SeqCst), "the handler was dropped");
    handle.shutdown();
    handle.join().await;
}

/// Cancelling a running job reaches the handler (through the engine's push
/// or the next heartbeat, whichever comes first); the handler stops and the
/// job ends `cancelled`.
pub async fn cancel_of_a_running_job_reaches_the_handler(db: &TestDb) {
    let started = Gate::new();
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let (s, saw) = (started.clone(), saw_cancel.clone());
    let handle = worker(db)
        .queue(Q, 1)
        .handler("long", move |ctx| {
            let (s, saw) = (s.clone(), saw.clone());
            async move {
                s.open();
                ctx.cancelled().await;
                saw.store(ctx.is_cancelled(), Ordering::SeqCst);
                Err(JobError::Cancelled)
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    started.wait_within("the handler to start", 5 * SEC).await;
    let requested = db.engine.cancel(T, j.id).await.unwrap();
    assert_eq!(requested.state, JobState::Running);
    assert!(requested.cancel_requested);
    let done = job_where(db, j.id, "the cancellation", 3 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Cancelled);
    assert!(
        saw_cancel.load(Ordering::SeqCst),
        "the handler saw the cancellation"
    );
    handle.shutdown();
    handle.join().await;
}

/// A lease long enough that no heartbeat comes during a behaviour (every
/// 100 s): what reaches the store sooner came another way.
const LONG_LEASE: Duration = Duration::from_secs(300);

/// A cancel reaches a running handler by the engine's push, long before a
/// heartbeat could carry it: with a 300 s lease the first heartbeat is due
/// 100 s after the claim, and the bound is 60 s (generous, so that a
/// stalled host cannot fail it; the push takes about a quarter second).
pub async fn a_cancel_is_pushed_to_the_handler_before_any_heartbeat(db: &TestDb) {
    let probe = Probe::new(db.engine.clone());
    let started = Gate::new();
    let heard = Gate::new();
    // Heartbeats sent when the handler heard of the cancel.
    let beats_when_heard = Arc::new(AtomicUsize::new(usize::MAX));
    let (s, h, p, b) = (
        started.clone(),
        heard.clone(),
        probe.clone(),
        beats_when_heard.clone(),
    );
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        .lease_ttl(LONG_LEASE)
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("long", move |ctx| {
            let (s, h, p, b) = (s.clone(), h.clone(), p.clone(), b.clone());
            async move {
                s.open();
                ctx.cancelled().await;
                b.store(p.heartbeat_calls.load(Ordering::SeqCst), Ordering::SeqCst);
                h.open();
                Err(JobError::Cancelled)
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    started.wait_within("the handler to start", 60 * SEC).await;
    let beats_before = probe.heartbeat_calls.load(Ordering::SeqCst);
    let requested = db.engine.cancel(T, j.id).await.unwrap();
    assert!(requested.cancel_requested);
    heard
        .wait_within("the handler to hear of the cancel", 60 * SEC)
        .await;
    assert_eq!(
        beats_when_heard.load(Ordering::SeqCst),
        beats_before,
        "no heartbeat went out between the cancel and the handler hearing of it: the push delivered it"
    );
    let done = job_where(db, j.id, "the cancellation", 60 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Cancelled);
    handle.shutdown();
    handle.join().await;
}

/// Without a push (a source that offers none), the heartbeat's answer still
/// delivers a cancel: the fallback.
pub async fn without_a_push_a_cancel_comes_with_a_heartbeat(db: &TestDb) {
    let probe = Probe::new(db.engine.clone());
    probe.no_push.store(true, Ordering::SeqCst);
    let started = Gate::new();
    let s = started.clone();
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        // A heartbeat every 333 ms.
        .lease_ttl(SEC)
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("long", move |ctx| {
            let s = s.clone();
            async move {
                s.open();
                ctx.cancelled().await;
                Err(JobError::Cancelled)
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    started.wait_within("the handler to start", 60 * SEC).await;
    db.engine.cancel(T, j.id).await.unwrap();
    let done = job_where(db, j.id, "the cancellation", 60 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Cancelled);
    assert!(probe.heartbeat_calls.load(Ordering::SeqCst) > 0);
    handle.shutdown();
    handle.join().await;
}

/// Progress a handler sets is stored well before the next heartbeat due
/// (a 300 s lease: every 100 s; the bound of 60 s only absorbs a stalled
/// host), and a handler that sets it a thousand times a second costs at
/// most about two heartbeat requests a second.
pub async fn progress_is_sent_promptly_and_coalesced(db: &TestDb) {
    const BUSY: Duration = Duration::from_secs(2);
    let probe = Probe::new(db.engine.clone());
    let (go, finish) = (Gate::new(), Gate::new());
    let (g, f) = (go.clone(), finish.clone());
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        .lease_ttl(LONG_LEASE)
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("busy", move |ctx| {
            let (g, f) = (g.clone(), f.clone());
            async move {
                ctx.set_progress(json!({ "phase": "first" }));
                g.wait().await;
                let begun = Instant::now();
                let mut n = 0;
                while begun.elapsed() < BUSY {
                    n += 1;
                    ctx.set_progress(json!({ "n": n }));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                ctx.set_progress(json!({ "phase": "last" }));
                f.wait().await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "busy", json!({}))).await;
    job_where(db, j.id, "the first progress", 60 * SEC, |j| {
        j.progress == Some(json!({ "phase": "first" }))
    })
    .await;
    let before = probe.heartbeat_calls.load(Ordering::SeqCst);
    let opened = Instant::now();
    go.open();
    job_where(db, j.id, "the last progress", 60 * SEC, |j| {
        j.progress == Some(json!({ "phase": "last" }))
    })
    .await;
    let took = opened.elapsed();
    let calls = probe.heartbeat_calls.load(Ordering::SeqCst) - before;
    // One cycle per 500 ms at most (a stalled host makes fewer, never more).
    let most = 2 * took.as_secs() as usize + 3;
    assert!(
        calls <= most,
        "{calls} heartbeat requests in {took:?} of constant progress (at most {most})"
    );
    finish.open();
    let done = job_where(db, j.id, "the job", 60 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded);
    handle.shutdown();
    handle.join().await;
}

/// Whatever a handler answers once a cancel was requested (here a success),
/// the worker acknowledges the cancellation: the job ends `cancelled`.
pub async fn any_answer_after_a_cancel_request_cancels(db: &TestDb) {
    let started = Gate::new();
    let s = started.clone();
    let handle = worker(db)
        .queue(Q, 1)
        .handler("long", move |ctx| {
            let s = s.clone();
            async move {
                s.open();
                ctx.cancelled().await;
                Ok(Some(json!("done anyway")))
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    started.wait_within("the handler to start", 5 * SEC).await;
    db.engine.cancel(T, j.id).await.unwrap();
    let done = job_where(db, j.id, "the cancellation", 3 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Cancelled);
    assert_eq!(done.result, None);
    handle.shutdown();
    handle.join().await;
}

/// A handler that ignores a cancel request is dropped one lease TTL later,
/// and the worker reports the job cancelled itself (no reaper is running).
pub async fn ignored_cancel_drops_the_handler_after_a_lease_ttl(db: &TestDb) {
    let started = Gate::new();
    let dropped = Arc::new(AtomicBool::new(false));
    let (s, flag) = (started.clone(), dropped.clone());
    let handle = worker(db)
        .queue(Q, 1)
        .handler("stubborn", move |_ctx| {
            let s = s.clone();
            let guard = DropFlag(flag.clone());
            async move {
                let _guard = guard;
                s.open();
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "stubborn", json!({}))).await;
    started.wait_within("the handler to start", 5 * SEC).await;
    let asked = Instant::now();
    db.engine.cancel(T, j.id).await.unwrap();
    let done = job_where(db, j.id, "the forced cancellation", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    let took = asked.elapsed();
    assert_eq!(done.state, JobState::Cancelled);
    assert!(dropped.load(Ordering::SeqCst), "the handler was dropped");
    assert!(
        took >= Duration::from_millis(1_000),
        "the handler got less than one lease TTL: {took:?}"
    );
    handle.shutdown();
    handle.join().await;
}

/// With a 1 s lease, a 2.5 s handler keeps its job through heartbeats while
/// a reaper runs every 200 ms: the job succeeds on attempt 1, never reaped.
pub async fn heartbeats_keep_a_long_job_alive(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 1)
        .handler("long", |ctx| async move {
            ctx.set_progress(json!({ "phase": "working" }));
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            Ok(Some(json!("done")))
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "long", json!({}))).await;
    let reaper_engine = db.engine.clone();
    let stop = Gate::new();
    let stop_reaper = stop.clone();
    let reaper = tokio::spawn(async move {
        let mut reaped = 0;
        while !stop_reaper.is_open() {
            reaped += reaper_engine.reap_lapsed_leases(100).await.unwrap().total();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        reaped
    });
    let saw_progress = Arc::new(AtomicBool::new(false));
    let done = job_where(db, j.id, "the long job", 8 * SEC, |j| {
        if j.progress == Some(json!({ "phase": "working" })) {
            saw_progress.store(true, Ordering::SeqCst);
        }
        j.state.is_terminal()
    })
    .await;
    stop.open();
    assert_eq!(
        reaper.await.unwrap(),
        0,
        "the reaper took a heartbeated job"
    );
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 1);
    assert!(!events(db, j.id).await.contains(&EventKind::LeaseExpired));
    assert!(
        saw_progress.load(Ordering::SeqCst),
        "the progress was sent with a heartbeat"
    );
    handle.shutdown();
    handle.join().await;
}

/// Takes a running job away from the worker the way a real takeover does:
/// the lease lapses, the reaper requeues it, another worker claims it and
/// completes it with its own result.
async fn take_over(db: &TestDb, id: uuid::Uuid) {
    // The worker's heartbeat may renew the lapsed lease between the lapse
    // and the reap (it still owns it until someone takes over): try again.
    let mut requeued = false;
    for _ in 0..10 {
        db.lapse_lease(id).await;
        if db.engine.reap_lapsed_leases(100).await.unwrap().requeued == 1 {
            requeued = true;
            break;
        }
    }
    assert!(requeued, "the reaper never took the job over");
    let mut claimed = db
        .engine
        .claim(
            T,
            &ClaimRequest {
                queue: Q.to_owned(),
                worker_id: "usurper".to_owned(),
                limit: 1,
                lease_ttl_ms: Some(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let c = claimed.remove(0);
    assert_eq!((c.job.id, c.job.attempt), (id, 2));
    db.engine
        .complete(T, id, c.lease_token, Some(json!("usurper")))
        .await
        .unwrap();
}

/// The lease is lost while the handler runs and a heartbeat notices: the
/// handler is asked to stop and whatever it returns is discarded; the job
/// is what the new owner made it.
pub async fn lease_lost_to_a_new_owner_discards_the_outcome(db: &TestDb) {
    let started = Gate::new();
    let release = Gate::new();
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let (s, r, saw) = (started.clone(), release.clone(), saw_cancel.clone());
    let handle = worker(db)
        .queue(Q, 1)
        .handler("stale", move |ctx| {
            let (s, r, saw) = (s.clone(), r.clone(), saw.clone());
            async move {
                s.open();
                r.wait().await;
                saw.store(ctx.is_cancelled(), Ordering::SeqCst);
                Ok(Some(json!("stale")))
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "stale", json!({}))).await;
    started.wait_within("the handler to start", 5 * SEC).await;
    take_over(db, j.id).await;
    // Two heartbeat intervals: one of them finds the lease gone.
    tokio::time::sleep(Duration::from_millis(800)).await;
    release.open();
    eventually("the worker to let go of the job", 5 * SEC, || async {
        (handle.jobs_in_flight() == 0).then_some(())
    })
    .await;
    let after = get(db, j.id).await;
    assert_eq!(after.state, JobState::Succeeded);
    assert_eq!(after.result, Some(json!("usurper")), "the stale result won");
    assert_eq!(after.attempt, 2);
    assert!(
        saw_cancel.load(Ordering::SeqCst),
        "the heartbeat's lease_lost did not reach the handler"
    );
    assert!(events(db, j.id).await.contains(&EventKind::LeaseLost));
    handle.shutdown();
    handle.join().await;
}

/// The lease is lost and no heartbeat runs before the handler returns (30 s
/// lease): the completion itself is refused as `lease_lost` and discarded.
pub async fn lease_lost_on_complete_is_discarded(db: &TestDb) {
    let started = Gate::new();
    let release = Gate::new();
    let saw_cancel = Arc::new(AtomicBool::new(true));
    let (s, r, saw) = (started.clone(), release.clone(), saw_cancel.clone());
    let handle = worker(db)
        .lease_ttl(Duration::from_secs(30))
        .queue(Q, 1)
        .handler("stale", move |ctx| {
            let (s, r, saw) = (s.clone(), r.clone(), saw.clone());
            async move {
                s.open();
                r.wait().await;
                saw.store(ctx.is_cancelled(), Ordering::SeqCst);
                Ok(Some(json!("stale")))
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "stale", json!({}))).await;
    started.wait_within("the handler to start", 5 * SEC).await;
    take_over(db, j.id).await;
    release.open();
    eventually("the worker to let go of the job", 5 * SEC, || async {
        (handle.jobs_in_flight() == 0).then_some(())
    })
    .await;
    assert!(
        !saw_cancel.load(Ordering::SeqCst),
        "a heartbeat ran: this test meant the completion to find the loss"
    );
    let after = get(db, j.id).await;
    assert_eq!(after.state, JobState::Succeeded);
    assert_eq!(after.result, Some(json!("usurper")));
    let history = db.engine.events(T, j.id).await.unwrap();
    let lost = history
        .iter()
        .find(|e| e.event == EventKind::LeaseLost)
        .expect("the refused completion is recorded");
    assert!(
        lost.detail
            .as_deref()
            .unwrap_or_default()
            .contains("complete"),
        "{lost:?}"
    );
    handle.shutdown();
    handle.join().await;
}

/// Never more handlers of a queue run at once than its concurrency, per
/// queue, and every slot is used.
pub async fn concurrency_is_bounded_per_queue(db: &TestDb) {
    let a = Arc::new(Concurrency::default());
    let b = Arc::new(Concurrency::default());
    let (ca, cb) = (a.clone(), b.clone());
    let handle = worker(db)
        .queue("qa", 2)
        .queue("qb", 3)
        .handler("work", move |ctx| {
            let c = if ctx.job().queue == "qa" {
                ca.clone()
            } else {
                cb.clone()
            };
            async move {
                c.enter();
                tokio::time::sleep(Duration::from_millis(150)).await;
                c.leave();
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let mut ids = Vec::new();
    for queue in ["qa", "qb"] {
        let jobs: Vec<NewJob> = (0..9)
            .map(|_| NewJob::new(queue, "work", json!({})))
            .collect();
        for e in db.engine.enqueue_many(T, &jobs).await.unwrap() {
            ids.push(e.job.id);
        }
    }
    eventually("all 18 jobs to succeed", 10 * SEC, || async {
        (jobs_in_state(db, JobState::Succeeded).await.len() == ids.len()).then_some(())
    })
    .await;
    assert_eq!(a.max(), 2, "queue qa ran {} handlers at once", a.max());
    assert_eq!(b.max(), 3, "queue qb ran {} handlers at once", b.max());
    handle.shutdown();
    handle.join().await;
}

/// A worker that could run 8 at once on a queue with `max_running` 2 and
/// `key_max_running` 1: it runs every job, never more than 2 at once nor 2
/// of one key, and a freed slot is taken without waiting for a long poll
/// (its poll interval here is 30 s).
pub async fn a_throttled_queue_runs_within_its_limits(db: &TestDb) {
    let limits = QueueConfigPatch {
        max_running: Some(Some(2)),
        key_max_running: Some(Some(1)),
        ..Default::default()
    };
    db.engine.configure_queue(T, "qa", &limits).await.unwrap();
    let all = Arc::new(Concurrency::default());
    let per_key: Arc<Mutex<std::collections::HashMap<String, Arc<Concurrency>>>> = Arc::default();
    let (a, k) = (all.clone(), per_key.clone());
    let handle = worker(db)
        .poll_interval(Duration::from_secs(30))
        .queue("qa", 8)
        .handler("work", move |ctx| {
            let key = ctx.job().concurrency_key.clone().unwrap_or_default();
            let mine = k.lock().unwrap().entry(key).or_default().clone();
            let all = a.clone();
            async move {
                all.enter();
                mine.enter();
                tokio::time::sleep(Duration::from_millis(100)).await;
                mine.leave();
                all.leave();
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let jobs: Vec<NewJob> = (0..9)
        .map(|i| NewJob::new("qa", "work", json!({})).concurrency_key(["a", "b", "c"][i % 3]))
        .collect();
    db.engine.enqueue_many(T, &jobs).await.unwrap();
    eventually("all 9 jobs to succeed", 10 * SEC, || async {
        (jobs_in_state(db, JobState::Succeeded).await.len() == 9).then_some(())
    })
    .await;
    assert_eq!(all.max(), 2, "{} handlers at once", all.max());
    for (key, c) in per_key.lock().unwrap().iter() {
        assert_eq!(c.max(), 1, "key {key} ran {} at once", c.max());
    }
    handle.shutdown();
    handle.join().await;
}

/// An idle worker with a 30 s poll interval starts a new job within 2 s:
/// the enqueue's wake-up hint, not polling, brought it.
pub async fn an_idle_worker_wakes_on_enqueue(db: &TestDb) {
    wakes_on_enqueue_with(db.engine.clone(), &db.engine).await;
}

/// A worker on `consumer` (30 s polls), jobs enqueued through `producer`.
pub async fn wakes_on_enqueue_with(consumer: tether_core::Engine, producer: &tether_core::Engine) {
    let started: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let seen = started.clone();
    let handle = Worker::builder(consumer)
        .tenant(T)
        .maintenance(false)
        .poll_interval(Duration::from_secs(30))
        .queue(Q, 2)
        .handler("hello", move |ctx| {
            let seen = seen.clone();
            async move {
                let name = ctx.job().payload["name"].as_str().unwrap_or("").to_owned();
                seen.lock().unwrap().push((name, Instant::now()));
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    // The first job proves the worker has claimed once; after it the queue
    // came back short, so the worker waits for a hint (or 30 s).
    producer
        .enqueue(T, NewJob::new(Q, "hello", json!({ "name": "first" })))
        .await
        .unwrap();
    eventually("the first job to start", 35 * SEC, || async {
        (!started.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let name = format!("round-{round}");
        let enqueued = Instant::now();
        producer
            .enqueue(T, NewJob::new(Q, "hello", json!({ "name": name })))
            .await
            .unwrap();
        let began = eventually("the hinted job to start", 3 * SEC, || async {
            started
                .lock()
                .unwrap()
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, at)| *at)
        })
        .await;
        let latency = began - enqueued;
        assert!(
            latency < 2 * SEC,
            "{name} started {latency:?} after its enqueue"
        );
    }
    handle.shutdown();
    handle.join().await;
}

/// Shutdown with a handler that outlives the grace: claims stop at once, a
/// handler that finishes within the grace completes, the stuck one is
/// dropped and its job handed back (queued, attempt given back); nothing is
/// left `running`.
pub async fn graceful_shutdown_hands_back_what_outlives_the_grace(db: &TestDb) {
    let quick_started = Gate::new();
    let stuck_started = Gate::new();
    let dropped = Arc::new(AtomicBool::new(false));
    let (qs, ss, flag) = (
        quick_started.clone(),
        stuck_started.clone(),
        dropped.clone(),
    );
    let handle = worker(db)
        .shutdown_grace(Duration::from_millis(700))
        .queue(Q, 4)
        .handler("quick", move |_ctx| {
            let qs = qs.clone();
            async move {
                qs.open();
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(Some(json!("finished in the grace")))
            }
        })
        .handler("stuck", move |_ctx| {
            let ss = ss.clone();
            let guard = DropFlag(flag.clone());
            async move {
                let _guard = guard;
                ss.open();
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(None)
            }
        })
        .build()
        .unwrap()
        .start();
    let quick = enqueue(db, NewJob::new(Q, "quick", json!({}))).await;
    let stuck = enqueue(db, NewJob::new(Q, "stuck", json!({}))).await;
    quick_started.wait_within("quick to start", 5 * SEC).await;
    stuck_started.wait_within("stuck to start", 5 * SEC).await;

    let began = Instant::now();
    handle.shutdown();
    // Free slots, a fresh job and a hint: a worker still claiming would take
    // it within a poll interval (100 ms), long before the grace ends. (It is
    // enqueued a little after the shutdown began: a claim already in flight
    // at that moment may still return, and its jobs are handed back.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    let late = enqueue(db, NewJob::new(Q, "quick", json!({}))).await;
    handle.join().await;
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(700),
        "the grace was cut short: {took:?}"
    );
    assert!(took < Duration::from_secs(4), "shutdown took {took:?}");

    let quick = get(db, quick.id).await;
    assert_eq!(quick.state, JobState::Succeeded);
    let stuck_after = get(db, stuck.id).await;
    assert_eq!(stuck_after.state, JobState::Queued);
    assert_eq!(stuck_after.attempt, 0, "the attempt is given back");
    assert!(events(db, stuck.id).await.contains(&EventKind::Snoozed));
    assert!(
        dropped.load(Ordering::SeqCst),
        "the stuck handler was dropped"
    );
    let late = get(db, late.id).await;
    assert_eq!(
        (late.state, late.attempt),
        (JobState::Queued, 0),
        "a job was claimed after shutdown began"
    );
    assert!(!events(db, late.id).await.contains(&EventKind::Claimed));
    assert!(jobs_in_state(db, JobState::Running).await.is_empty());
}

/// A claim that is in flight when the shutdown begins still returns its
/// jobs; they are handed back at once (queued, attempt given back), never
/// started.
pub async fn a_claim_in_flight_at_shutdown_is_handed_back(db: &TestDb) {
    let probe = Probe::new(db.engine.clone());
    probe.claim_delay_ms.store(500, Ordering::SeqCst);
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        .poll_interval(Duration::from_millis(50))
        .queue(Q, 2)
        .handler("k", move |_ctx| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { Ok(None) }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "k", json!({}))).await;
    // Claimed in the database, its answer still on the way to the worker.
    job_where(db, j.id, "the claim", 5 * SEC, |j| {
        j.state == JobState::Running
    })
    .await;
    handle.shutdown();
    handle.join().await;
    let after = get(db, j.id).await;
    assert_eq!((after.state, after.attempt), (JobState::Queued, 0));
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a job claimed during shutdown ran"
    );
    let history = events(db, j.id).await;
    assert!(
        history.ends_with(&[EventKind::Claimed, EventKind::Snoozed]),
        "{history:?}"
    );
}

/// Waits until exactly one of `handles` leads maintenance and returns it.
async fn leader_of(handles: &[&tether_worker::WorkerHandle], within: Duration) -> usize {
    eventually("a maintenance leader", within, || async {
        let leaders: Vec<usize> = (0..handles.len())
            .filter(|i| handles[*i].is_maintenance_leader())
            .collect();
        (leaders.len() == 1).then(|| leaders[0])
    })
    .await
}

/// Two workers with maintenance on: exactly one holds the lease; when the
/// leader shuts down it releases the lease and the other takes over at its
/// next tick; when a leader dies without releasing, another takes over once
/// the lease lapses (about one lease TTL).
pub async fn maintenance_has_one_leader_and_fails_over(db: &TestDb) {
    let start = |name: &str| {
        worker(db)
            .worker_id(name)
            .maintenance(true)
            // 100 ms ticks, so a 1 s lease (the shortest): a released lease
            // is taken within a tick, a lapsing one only after the TTL.
            .maintenance_tick(Duration::from_millis(100))
            .queue(Q, 1)
            .handler("noop", |_ctx| async move { Ok(None) })
            .build()
            .unwrap()
            .start()
    };
    let a = start("node-a");
    let first = leader_of(&[&a], 3 * SEC).await;
    assert_eq!(first, 0);
    let b = start("node-b");
    // For a second, A keeps leading and B never does; the lease is held.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(a.is_maintenance_leader() && !b.is_maintenance_leader());
        assert_eq!(
            db.engine
                .acquire_lease(MAINTENANCE_LEASE, "probe", 1_000)
                .await
                .unwrap(),
            None,
            "the maintenance lease was free while A led"
        );
    }

    // A shuts down gracefully and releases: B leads within a few ticks,
    // well before A's lease (renewed every 100 ms, 1 s long) could lapse.
    a.shutdown();
    a.join().await;
    let released = Instant::now();
    leader_of(&[&b], 3 * SEC).await;
    let took = released.elapsed();
    assert!(
        took < Duration::from_millis(700),
        "takeover after a release took {took:?}"
    );

    // B dies without releasing: C takes over once the lease lapses.
    let c = start("node-c");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(b.is_maintenance_leader() && !c.is_maintenance_leader());
    b.abort();
    let died = Instant::now();
    b.join().await;
    leader_of(&[&c], 5 * SEC).await;
    let took = died.elapsed();
    // No lower bound: on a loaded machine B's last renewal may already be
    // most of a lease old when it dies (a tick's maintenance work runs
    // between renewals). That C never takes a lease before it lapses is the
    // behaviour suite's `leader` module's job, at the store.
    assert!(
        took < Duration::from_millis(2_500),
        "takeover after a crash took {took:?} (lease 1 s, ticks 100 ms)"
    );
    c.shutdown();
    c.join().await;
}

/// A job whose worker vanished (lease lapsed) is requeued by the runtime's
/// own reaper and then run, with no manual maintenance call.
pub async fn a_vanished_workers_job_is_requeued_by_the_runtime(db: &TestDb) {
    let j = enqueue(db, NewJob::new(Q, "noop", json!({}))).await;
    let ghost = db
        .engine
        .claim(
            T,
            &ClaimRequest {
                queue: Q.to_owned(),
                worker_id: "ghost".to_owned(),
                limit: 1,
                lease_ttl_ms: Some(60_000),
            },
        )
        .await
        .unwrap();
    assert_eq!(ghost.len(), 1);
    db.lapse_lease(j.id).await;
    let handle = worker(db)
        .maintenance(true)
        .maintenance_tick(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("noop", |_ctx| async move { Ok(Some(json!("rescued"))) })
        .build()
        .unwrap()
        .start();
    let done = job_where(db, j.id, "the rescue", 5 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 2);
    assert_eq!(done.worker_id.as_deref(), Some(handle.worker_id()));
    assert!(events(db, j.id).await.contains(&EventKind::LeaseExpired));
    handle.shutdown();
    handle.join().await;
}

/// A kind without a handler fails its attempt (retryable) with a message
/// naming the kind and the worker.
pub async fn a_kind_without_handler_is_a_retryable_failure(db: &TestDb) {
    slow_retries(db, Q).await;
    let handle = worker(db)
        .worker_id("worker-x")
        .queue(Q, 1)
        .handler("known", |_ctx| async move { Ok(None) })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "mystery", json!({}))).await;
    let after = job_where(db, j.id, "the failed attempt", 5 * SEC, |j| {
        j.attempt == 1 && j.state != JobState::Running
    })
    .await;
    assert_eq!(after.state, JobState::Queued);
    assert_eq!(
        after.last_error.as_deref(),
        Some("no handler for kind mystery on worker worker-x")
    );
    handle.shutdown();
    handle.join().await;
}

/// An outage of the source: the worker keeps running, claims once the source
/// is back, and a completion that failed during the outage is retried and
/// lands (the job succeeds on its first attempt).
pub async fn a_source_outage_is_survived(db: &TestDb) {
    let probe = Probe::new(db.engine.clone());
    probe.down.store(true, Ordering::SeqCst);
    let p = probe.clone();
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        .lease_ttl(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("k", move |ctx| {
            let p = p.clone();
            async move {
                if ctx.job().payload["cut"] == json!(true) {
                    // The outage starts as the handler finishes: the
                    // completion must wait it out.
                    p.down.store(true, Ordering::SeqCst);
                }
                Ok(Some(json!("done")))
            }
        })
        .build()
        .unwrap()
        .start();
    let first = enqueue(db, NewJob::new(Q, "k", json!({}))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        probe.failed_calls.load(Ordering::SeqCst) > 0,
        "the worker tried to claim"
    );
    assert_eq!(get(db, first.id).await.state, JobState::Queued);
    probe.down.store(false, Ordering::SeqCst);
    let first = job_where(
        db,
        first.id,
        "the first job after the outage",
        5 * SEC,
        |j| j.state.is_terminal(),
    )
    .await;
    assert_eq!(first.state, JobState::Succeeded);

    let failed_before = probe.failed_calls.load(Ordering::SeqCst);
    let second = enqueue(db, NewJob::new(Q, "k", json!({ "cut": true }))).await;
    eventually("the completion to fail", 5 * SEC, || async {
        (probe.failed_calls.load(Ordering::SeqCst) > failed_before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get(db, second.id).await.state, JobState::Running);
    probe.down.store(false, Ordering::SeqCst);
    let second = job_where(db, second.id, "the retried completion", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(second.state, JobState::Succeeded);
    assert_eq!(second.attempt, 1);
    assert_eq!(second.result, Some(json!("done")));
    handle.shutdown();
    handle.join().await;
}

/// Heartbeats that fail back off: while the source is down, a job whose
/// heartbeat is overdue is tried again after the backoff (at most its
/// heartbeat interval), not as fast as the errors come back. (Its overdue
/// heartbeat made the heartbeater spin: about 30 000 failed heartbeats to
/// replicas that were down in one chaos run.) A stalled host makes fewer
/// attempts, never more, so the bound cannot fail for slowness.
pub async fn failing_heartbeats_back_off(db: &TestDb) {
    const OUTAGE: Duration = Duration::from_millis(1_500);
    let probe = Probe::new(db.engine.clone());
    let p = probe.clone();
    let during = Arc::new(AtomicUsize::new(0));
    let counted = during.clone();
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        // A heartbeat every 333 ms (the shortest lease).
        .lease_ttl(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 1)
        .handler("k", move |_ctx| {
            let (p, counted) = (p.clone(), counted.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let before = p.failed_calls.load(Ordering::SeqCst);
                p.down.store(true, Ordering::SeqCst);
                // The outage lasts until a heartbeat has failed, then
                // OUTAGE more: a stalled host cannot end it untried.
                let tried = Instant::now() + Duration::from_secs(30);
                while p.failed_calls.load(Ordering::SeqCst) == before && Instant::now() < tried {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                tokio::time::sleep(OUTAGE).await;
                p.down.store(false, Ordering::SeqCst);
                counted.store(
                    p.failed_calls.load(Ordering::SeqCst) - before,
                    Ordering::SeqCst,
                );
                Ok(Some(json!("done")))
            }
        })
        .build()
        .unwrap()
        .start();
    let job = enqueue(db, NewJob::new(Q, "k", json!({}))).await;
    let job = job_where(db, job.id, "the job", 10 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(job.state, JobState::Succeeded);
    let tries = during.load(Ordering::SeqCst);
    // 100 ms doubling, capped at the 333 ms interval: about 6 in 1.5 s
    // (plus the wait for the first).
    assert!(tries >= 1, "the heartbeater tried during the outage");
    assert!(
        tries <= 30,
        "{tries} failed calls in a {OUTAGE:?} outage: the heartbeater did not back off"
    );
    handle.shutdown();
    handle.join().await;
}

/// Many quick jobs: all succeed, and completions go out in batches (fewer
/// calls than jobs), most of them carried by the next claims.
pub async fn completions_are_batched(db: &TestDb) {
    let probe = Probe::new(db.engine.clone());
    let handle = Worker::builder_shared(probe.clone())
        .tenant(T)
        .maintenance(false)
        .poll_interval(Duration::from_millis(100))
        .queue(Q, 50)
        .handler("noop", |_ctx| async move { Ok(None) })
        .build()
        .unwrap()
        .start();
    let jobs: Vec<NewJob> = (0..300)
        .map(|_| NewJob::new(Q, "noop", json!({})))
        .collect();
    db.engine.enqueue_many(T, &jobs).await.unwrap();
    eventually("300 jobs to succeed", 20 * SEC, || async {
        (jobs_in_state(db, JobState::Succeeded).await.len() == 300).then_some(())
    })
    .await;
    handle.shutdown();
    handle.join().await;
    let alone = probe.complete_batches.lock().unwrap().clone();
    let carried = probe.carried_batches.lock().unwrap().clone();
    let batches: Vec<usize> = alone.iter().chain(&carried).copied().collect();
    assert_eq!(batches.iter().sum::<usize>(), 300, "{alone:?} {carried:?}");
    assert!(
        batches.len() < 300 && batches.iter().any(|n| *n > 1),
        "no completion was batched: {} calls",
        batches.len()
    );
    // How many ride claims depends on timing (a completion that comes in
    // while every fetcher's claim is on its way goes alone); that some do
    // does not.
    assert!(
        !carried.is_empty(),
        "no claim carried a completion; complete_many sent {alone:?}"
    );
}

/// The attempt number seen by a handler grows with each claim.
pub async fn handlers_see_their_attempt(db: &TestDb) {
    db.engine
        .configure_queue(
            T,
            Q,
            &QueueConfigPatch {
                backoff: Some(Backoff {
                    base_ms: 50,
                    cap_ms: 50,
                }),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    let last = Arc::new(AtomicI32::new(0));
    let l = last.clone();
    let handle = worker(db)
        .queue(Q, 1)
        .handler("thrice", move |ctx| {
            l.store(ctx.attempt(), Ordering::SeqCst);
            async move {
                if ctx.attempt() < 3 {
                    Err(JobError::retry("not yet"))
                } else {
                    Ok(None)
                }
            }
        })
        .build()
        .unwrap()
        .start();
    let j = enqueue(db, NewJob::new(Q, "thrice", json!({})).max_attempts(3)).await;
    let done = job_where(db, j.id, "the third attempt", 5 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.attempt, 3);
    assert_eq!(last.load(Ordering::SeqCst), 3);
    handle.shutdown();
    handle.join().await;
}

#[derive(Serialize, Deserialize)]
struct Doubled {
    n: i64,
}

/// A → B: B's handler reads A's result, typed or not; with `run`, a
/// dependent of a failed job reads the failure; a job without
/// dependencies reads none.
pub async fn handlers_read_their_dependencies(db: &TestDb) {
    let handle = worker(db)
        .queue(Q, 4)
        .handler("parent", |ctx| async move {
            if ctx.job().payload["fail"] == json!(true) {
                return Err(JobError::fatal("no luck"));
            }
            let n = ctx.job().payload["n"].as_i64().unwrap_or_default();
            Ok(Some(json!({ "n": n * 2 })))
        })
        .handler("child", |ctx| async move {
            let deps = ctx.dependencies().await?;
            let parent = ctx.job().depends_on.first().copied();
            let typed = match parent {
                Some(id) => ctx
                    .dependency_result::<Doubled>(id)
                    .await?
                    .map(|d| json!(d.n)),
                None => None,
            };
            let stranger = ctx.dependency_result::<Doubled>(ctx.id()).await;
            Ok(Some(json!({
                "ids": deps.iter().map(|d| d.id).collect::<Vec<_>>(),
                "kinds": deps.iter().map(|d| d.kind.clone()).collect::<Vec<_>>(),
                "states": deps.iter().map(|d| d.state.as_str()).collect::<Vec<_>>(),
                "results": deps.iter().map(|d| d.result.clone()).collect::<Vec<_>>(),
                "errors": deps.iter().map(|d| d.last_error.clone()).collect::<Vec<_>>(),
                "finished": deps.iter().all(|d| d.finished_at.is_some()),
                "typed": typed,
                "stranger": matches!(stranger, Err(JobError::Fatal(_))),
            })))
        })
        .build()
        .unwrap()
        .start();
    let graph = db
        .engine
        .enqueue_many(
            T,
            &[
                NewJob::new(Q, "parent", json!({ "n": 21 })),
                NewJob::new(Q, "child", json!({})).after_entry(0),
                NewJob::new(Q, "parent", json!({ "fail": true })).max_attempts(1),
                NewJob::new(Q, "child", json!({}))
                    .after_entry(2)
                    .dependency_failure(DependencyFailure::Run),
                NewJob::new(Q, "child", json!({})),
            ],
        )
        .await
        .unwrap();
    let ids: Vec<_> = graph.iter().map(|e| e.job.id).collect();

    let b = job_where(db, ids[1], "B after A", 10 * SEC, |j| j.state.is_terminal()).await;
    assert_eq!(b.state, JobState::Succeeded, "{:?}", b.last_error);
    assert_eq!(
        b.result.unwrap(),
        json!({
            "ids": [ids[0]], "kinds": ["parent"], "states": ["succeeded"],
            "results": [{ "n": 42 }], "errors": [null], "finished": true,
            "typed": 42, "stranger": true,
        })
    );

    let g = job_where(db, ids[3], "G after F failed", 10 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(g.state, JobState::Succeeded, "{:?}", g.last_error);
    let g = g.result.unwrap();
    assert_eq!(g["states"], json!(["failed"]));
    assert_eq!(g["results"], json!([null]));
    assert_eq!(g["typed"], json!(null), "a failed dependency has no result");
    assert!(g["errors"][0].as_str().unwrap().contains("no luck"), "{g}");

    let lonely = job_where(db, ids[4], "a job without dependencies", 10 * SEC, |j| {
        j.state.is_terminal()
    })
    .await;
    assert_eq!(lonely.state, JobState::Succeeded, "{:?}", lonely.last_error);
    let lonely = lonely.result.unwrap();
    assert_eq!(lonely["ids"], json!([]));
    assert_eq!(lonely["typed"], json!(null));
    handle.shutdown();
    handle.join().await;
}
