//! The remote worker end to end: the worker runtime fed by a real tether
//! server over HTTP, on PostgreSQL and SQLite.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tether_client::{
    Backoff, ClaimOptions, EventKind, HttpClient, JobArgs, JobError, JobQuery, JobState, NewJob,
    RemoteSource, WorkerBuilder,
};
use tether_conformance::TestDb;
use tether_worker::Source;

use common::start;
use tether_conformance::eventually;

tether_conformance::both_backends!(
    runs_many_jobs_to_success,
    retries_then_succeeds,
    fatal_failure_dead_letters_the_job,
    snooze_hands_the_job_back_and_it_runs_again,
    batched_heartbeats_keep_long_jobs_alive,
    cancel_during_a_run_reaches_the_handler,
    a_cancel_is_pushed_by_the_event_stream,
    a_refused_event_stream_leaves_cancels_to_heartbeats,
    graceful_shutdown_loses_nothing,
    an_idle_worker_is_woken_by_the_long_poll,
    handlers_read_their_dependencies_over_http,
);

#[derive(Serialize, Deserialize)]
struct Double {
    n: i64,
}

impl JobArgs for Double {
    const KIND: &'static str = "double";
    const QUEUE: &'static str = "math";
}

/// A remote worker builder whose idle claims wait 1 s, so that the
/// shutdowns of these tests are quick (the default 5 s wait is exercised by
/// `runs_many_jobs_to_success` and `an_idle_worker_is_woken_by_the_long_poll`).
fn quick_worker(c: &HttpClient) -> WorkerBuilder {
    RemoteSource::new(c.clone())
        .claim_wait(Duration::from_secs(1))
        .worker()
}

async fn events(c: &HttpClient, id: uuid::Uuid) -> Vec<EventKind> {
    c.events(id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind().unwrap())
        .collect()
}

async fn runs_many_jobs_to_success(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let jobs: Vec<NewJob> = (0..40)
        .map(|n| NewJob::for_args(&Double { n }).unwrap())
        .collect();
    let ids: Vec<_> = c
        .enqueue_batch(&jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.job.id)
        .collect();
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = c
        .worker()
        .worker_id("remote-1")
        .queue("math", 8)
        .job({
            let runs = runs.clone();
            move |args: Double, ctx| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(ctx.job().queue, "math");
                    assert_eq!(ctx.job().state, JobState::Running);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok::<_, JobError>(json!({ "doubled": args.n * 2 }))
                }
            }
        })
        .build()
        .unwrap();
    let handle = worker.start();
    eventually("40 successes", Duration::from_secs(45), || async {
        (c.get_queue("math").await.unwrap().counts.succeeded == 40).then_some(())
    })
    .await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(runs.load(Ordering::SeqCst), 40, "each job ran once");
    for (n, id) in ids.iter().enumerate() {
        let j = c.get_job(*id).await.unwrap();
        assert_eq!(j.state, JobState::Succeeded);
        assert_eq!(j.attempt, 1);
        assert_eq!(j.worker_id.as_deref(), Some("remote-1"));
        assert_eq!(j.result, Some(json!({ "doubled": n as i64 * 2 })));
    }
    let q = c.get_queue("math").await.unwrap();
    assert_eq!((q.counts.running, q.counts.queued), (0, 0));
}

async fn retries_then_succeeds(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(
            NewJob::new("flaky", "flaky", json!({}))
                .max_attempts(3)
                .backoff(Backoff {
                    base_ms: 0,
                    cap_ms: 0,
                }),
        )
        .await
        .unwrap()
        .job
        .id;
    let worker = quick_worker(c)
        .queue("flaky", 1)
        .handler("flaky", |ctx| async move {
            if ctx.attempt() == 1 {
                Err(JobError::retry("the upstream hiccuped"))
            } else {
                Ok(Some(json!({ "attempt": ctx.attempt() })))
            }
        })
        .build()
        .unwrap();
    let handle = worker.start();
    let j = s
        .wait_for_state(id, JobState::Succeeded, Duration::from_secs(20))
        .await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(j.attempt, 2);
    assert_eq!(j.result, Some(json!({ "attempt": 2 })));
    assert_eq!(
        events(c, id).await,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::RetryScheduled,
            EventKind::Claimed,
            EventKind::Succeeded
        ]
    );
}

async fn fatal_failure_dead_letters_the_job(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(NewJob::new("strict", "parse", json!("garbage")))
        .await
        .unwrap()
        .job
        .id;
    let worker = quick_worker(c)
        .queue("strict", 2)
        .handler("parse", |_ctx| async move {
            Err(JobError::fatal("cannot parse \"garbage\""))
        })
        .build()
        .unwrap();
    let handle = worker.start();
    let j = s
        .wait_for_state(id, JobState::Failed, Duration::from_secs(20))
        .await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(j.attempt, 1, "fatal: no retry although attempts were left");
    assert!(j.last_error.unwrap().contains("cannot parse"));
    let dlq = c
        .list_jobs(&JobQuery::new().queue("strict").state(JobState::Failed))
        .await
        .unwrap();
    assert_eq!(dlq.jobs.len(), 1);
    assert_eq!(
        events(c, id).await.last(),
        Some(&EventKind::Failed),
        "dead-lettered by the worker's report"
    );
}

async fn snooze_hands_the_job_back_and_it_runs_again(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(NewJob::new("busy", "limited", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let runs = Arc::new(AtomicUsize::new(0));
    let worker = quick_worker(c)
        .queue("busy", 1)
        // Every snooze goes back to the server (none is slept in-process).
        .max_in_process_snooze(Duration::ZERO)
        .handler("limited", {
            let runs = runs.clone();
            move |_ctx| {
                let runs = runs.clone();
                async move {
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        Err(JobError::snooze(Duration::from_millis(400)))
                    } else {
                        Ok(None)
                    }
                }
            }
        })
        .build()
        .unwrap();
    let handle = worker.start();
    let j = s
        .wait_for_state(id, JobState::Succeeded, Duration::from_secs(20))
        .await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(j.attempt, 1, "the snoozed attempt was given back");
    assert_eq!(
        events(c, id).await,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::Snoozed,
            EventKind::Claimed,
            EventKind::Succeeded
        ]
    );
}

async fn batched_heartbeats_keep_long_jobs_alive(db: &TestDb) {
    let mut s = start(db).await;
    // The server's maintenance, compressed: a lapsed lease is taken back
    // within 100 ms.
    s.spawn_reaper();
    let c = &s.admin;

    // Control: a job claimed with a 1 s lease and never heartbeated is
    // reaped, so the long jobs below survive only through heartbeats.
    let control = c
        .enqueue(NewJob::new("control", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let claimed = c
        .claim("control", &ClaimOptions::new("silent").lease_ttl_ms(1_000))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);

    let mut ids = Vec::new();
    for i in 0..3 {
        let job = NewJob::new("long", "slow", json!(i));
        ids.push(c.enqueue(job).await.unwrap().job.id);
    }
    let worker = quick_worker(c)
        .queue("long", 3)
        .lease_ttl(Duration::from_secs(1))
        .handler("slow", |ctx| async move {
            for step in 1..=6 {
                tokio::time::sleep(Duration::from_millis(500)).await;
                ctx.set_progress(json!({ "step": step }));
            }
            Ok(Some(json!("done")))
        })
        .build()
        .unwrap();
    let handle = worker.start();
    for id in &ids {
        let j = s
            .wait_for_state(*id, JobState::Succeeded, Duration::from_secs(30))
            .await;
        assert_eq!(j.attempt, 1, "never reclaimed");
        assert!(j.heartbeat_at.is_some(), "heartbeated");
        assert!(
            j.progress.is_some(),
            "progress travelled with the heartbeats"
        );
        let history = events(c, *id).await;
        // A heartbeat batch already on the wire when the completion lands
        // is fenced after the success (`lease_lost` then); before it, any
        // `lease_lost` or expiry would mean the lease lapsed.
        let succeeded = history
            .iter()
            .position(|e| *e == EventKind::Succeeded)
            .expect("succeeded event");
        assert!(
            !history.contains(&EventKind::LeaseExpired)
                && !history[..succeeded].contains(&EventKind::LeaseLost),
            "{history:?}"
        );
    }
    handle.shutdown();
    handle.join().await;
    let j = c.get_job(control).await.unwrap();
    assert_eq!(j.state, JobState::Queued, "the silent claim was reaped");
    assert!(events(c, control).await.contains(&EventKind::LeaseExpired));
}

async fn cancel_during_a_run_reaches_the_handler(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(NewJob::new("cancellable", "wait", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let started = Arc::new(AtomicBool::new(false));
    let saw_cancel = Arc::new(AtomicBool::new(false));
    let worker = quick_worker(c)
        .queue("cancellable", 1)
        .lease_ttl(Duration::from_secs(1))
        .handler("wait", {
            let (started, saw_cancel) = (started.clone(), saw_cancel.clone());
            move |ctx| {
                let (started, saw_cancel) = (started.clone(), saw_cancel.clone());
                async move {
                    started.store(true, Ordering::SeqCst);
                    tokio::select! {
                        _ = ctx.cancelled() => {
                            saw_cancel.store(true, Ordering::SeqCst);
                            Err(JobError::Cancelled)
                        }
                        _ = tokio::time::sleep(Duration::from_secs(30)) => Ok(None),
                    }
                }
            }
        })
        .build()
        .unwrap();
    let handle = worker.start();
    eventually("the handler to start", Duration::from_secs(20), || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let j = c.cancel(id).await.unwrap();
    assert_eq!(j.state, JobState::Running);
    assert!(j.cancel_requested);
    let j = s
        .wait_for_state(id, JobState::Cancelled, Duration::from_secs(10))
        .await;
    handle.shutdown();
    handle.join().await;
    assert!(
        saw_cancel.load(Ordering::SeqCst),
        "the handler was asked to stop"
    );
    assert_eq!(j.attempt, 1);
    let history = events(c, id).await;
    assert!(history.contains(&EventKind::CancelRequested), "{history:?}");
    assert_eq!(history.last(), Some(&EventKind::Cancelled));
}

/// A worker whose one handler says when it started and waits for its
/// cancellation, then says it heard it.
fn cancellable_worker(
    builder: WorkerBuilder,
    started: &Arc<AtomicBool>,
    heard: &Arc<AtomicBool>,
) -> tether_client::WorkerHandle {
    let (started, heard) = (started.clone(), heard.clone());
    builder
        .queue("cancellable", 1)
        .handler("wait", move |ctx| {
            let (started, heard) = (started.clone(), heard.clone());
            async move {
                started.store(true, Ordering::SeqCst);
                ctx.cancelled().await;
                heard.store(true, Ordering::SeqCst);
                Err(JobError::Cancelled)
            }
        })
        .build()
        .unwrap()
        .start()
}

/// A cancel reaches the handler through the worker's event stream, long
/// before a heartbeat could carry it: with a 300 s lease the first
/// heartbeat is due 100 s after the claim; the bound is 60 s (generous, so
/// that a stalled host cannot fail it; the push takes milliseconds).
async fn a_cancel_is_pushed_by_the_event_stream(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let id = c
        .enqueue(NewJob::new("cancellable", "wait", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let (started, heard) = (Arc::default(), Arc::default());
    let handle = cancellable_worker(
        quick_worker(c).lease_ttl(Duration::from_secs(300)),
        &started,
        &heard,
    );
    eventually("the handler to start", Duration::from_secs(60), || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let claimed = c.get_job(id).await.unwrap();
    let asked = Instant::now();
    let j = c.cancel(id).await.unwrap();
    assert!(j.cancel_requested);
    eventually(
        "the handler to hear of the cancel",
        Duration::from_secs(60),
        || async { heard.load(Ordering::SeqCst).then_some(()) },
    )
    .await;
    let took = asked.elapsed();
    let j = s
        .wait_for_state(id, JobState::Cancelled, Duration::from_secs(60))
        .await;
    handle.shutdown();
    handle.join().await;
    assert!(
        took < Duration::from_secs(100),
        "{took:?}: a heartbeat could not have carried it"
    );
    assert_eq!(
        j.heartbeat_at, claimed.heartbeat_at,
        "no heartbeat went out: the stream delivered the cancel"
    );
}

/// A server that refuses the worker's event stream (the tenant's streams
/// are capped, here at one, which another client holds: 429) does not stop
/// the worker: its jobs run, and a cancel comes with the next heartbeat.
async fn a_refused_event_stream_leaves_cancels_to_heartbeats(db: &TestDb) {
    let keys = db.two_tenants().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = tether_server::ServerConfig {
        max_event_streams_per_tenant: 1,
        ..tether_server::ServerConfig::default()
    };
    let app = tether_server::router(tether_server::AppState::new(db.engine.clone(), config));
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let c = HttpClient::new(&base, &keys.admin_key).unwrap();
    // Another client holds the tenant's one stream: it is open once it
    // shows an event (markers, in a queue no worker takes).
    let (shown, mut shows) = tokio::sync::mpsc::unbounded_channel();
    let holder = tokio::spawn({
        let mut stream = c.stream_events(&tether_client::StreamFilter::default());
        async move {
            while let Ok(item) = stream.next().await {
                let _ = shown.send(item);
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.enqueue(NewJob::new("markers", "marker", Value::Null))
            .await
            .unwrap();
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(500), shows.recv()).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the holder's stream did not open within 60 s"
        );
    }
    let refused = tokio::time::timeout(
        Duration::from_secs(60),
        c.stream_events(&tether_client::StreamFilter::default())
            .next(),
    )
    .await
    .expect("a refusal, not a stream")
    .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(tether_client::ErrorCode::TooManyRequests)
    );

    let id = c
        .enqueue(NewJob::new("cancellable", "wait", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let (started, heard) = (Arc::default(), Arc::default());
    let handle = cancellable_worker(
        // A heartbeat every 333 ms.
        quick_worker(&c).lease_ttl(Duration::from_secs(1)),
        &started,
        &heard,
    );
    eventually("the handler to start", Duration::from_secs(60), || async {
        started.load(Ordering::SeqCst).then_some(())
    })
    .await;
    c.cancel(id).await.unwrap();
    eventually("the cancelled job", Duration::from_secs(60), || async {
        (c.get_job(id).await.unwrap().state == JobState::Cancelled).then_some(())
    })
    .await;
    assert!(
        heard.load(Ordering::SeqCst),
        "the handler heard of the cancel"
    );
    handle.shutdown();
    handle.join().await;
    holder.abort();
    server.abort();
}

async fn graceful_shutdown_loses_nothing(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let mut quick = Vec::new();
    let mut stuck = Vec::new();
    for _ in 0..2 {
        quick.push(
            c.enqueue(NewJob::new("drain", "quick", Value::Null))
                .await
                .unwrap()
                .job
                .id,
        );
        stuck.push(
            c.enqueue(NewJob::new("drain", "stuck", Value::Null))
                .await
                .unwrap()
                .job
                .id,
        );
    }
    let running = Arc::new(AtomicUsize::new(0));
    let source = RemoteSource::new(c.clone()).claim_wait(Duration::from_secs(1));
    let worker = source
        .worker()
        .queue("drain", 4)
        .shutdown_grace(Duration::from_secs(2))
        .handler("quick", {
            let running = running.clone();
            move |_ctx| {
                let running = running.clone();
                async move {
                    running.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    Ok(Some(json!("finished in the grace period")))
                }
            }
        })
        .handler("stuck", {
            let running = running.clone();
            move |_ctx| {
                let running = running.clone();
                async move {
                    running.fetch_add(1, Ordering::SeqCst);
                    // Ignores cancellation: only the end of the grace stops it.
                    std::future::pending::<()>().await;
                    Ok(None)
                }
            }
        })
        .build()
        .unwrap();
    let handle = worker.start();
    eventually(
        "all four handlers running",
        Duration::from_secs(20),
        || async { (running.load(Ordering::SeqCst) == 4).then_some(()) },
    )
    .await;
    assert_eq!(handle.jobs_in_flight(), 4);
    let stopping = Instant::now();
    handle.shutdown();
    tokio::time::timeout(Duration::from_secs(15), handle.join())
        .await
        .expect("the shutdown ends within claim wait + grace");
    let took = stopping.elapsed();
    assert!(
        took >= Duration::from_millis(1_500),
        "waited for the grace: {took:?}"
    );
    for id in &quick {
        let j = c.get_job(*id).await.unwrap();
        assert_eq!(j.state, JobState::Succeeded, "{j:?}");
        assert_eq!(j.result, Some(json!("finished in the grace period")));
    }
    for id in &stuck {
        let j = c.get_job(*id).await.unwrap();
        assert_eq!(j.state, JobState::Queued, "handed back: {j:?}");
        assert_eq!(j.attempt, 0, "the interrupted attempt was given back");
    }
    assert_eq!(c.get_queue("drain").await.unwrap().counts.running, 0);

    // Nothing lost: a second worker finishes what the first handed back.
    let worker = quick_worker(c)
        .queue("drain", 4)
        .handler("stuck", |_ctx| async move { Ok(Some(json!("second try"))) })
        .handler("quick", |_ctx| async move { Ok(None) })
        .build()
        .unwrap();
    let handle = worker.start();
    for id in &stuck {
        let j = s
            .wait_for_state(*id, JobState::Succeeded, Duration::from_secs(20))
            .await;
        assert_eq!(j.result, Some(json!("second try")));
        assert_eq!(j.attempt, 1);
    }
    handle.shutdown();
    handle.join().await;
}

async fn an_idle_worker_is_woken_by_the_long_poll(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let worker = c
        .worker()
        .queue("idle", 1)
        // Polling alone would take up to a minute: only the long-poll can
        // pick the job up quickly.
        .poll_interval(Duration::from_secs(60))
        .handler("k", |_ctx| async move { Ok(None) })
        .build()
        .unwrap();
    let handle = worker.start();
    // Idle, it is listed: it announced itself.
    let idle = eventually(
        "the idle worker is listed",
        Duration::from_secs(20),
        || async {
            c.list_workers()
                .await
                .unwrap()
                .into_iter()
                .find(|w| w.sdk.as_deref() == Some("rust"))
        },
    )
    .await;
    assert_eq!(
        (idle.queues.as_slice(), idle.running),
        (&["idle".to_owned()][..], 0)
    );
    assert_eq!(idle.concurrency, Some(1));
    assert_eq!(idle.pid, Some(std::process::id()));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let enqueued = Instant::now();
    let id = c
        .enqueue(NewJob::new("idle", "k", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    s.wait_for_state(id, JobState::Succeeded, Duration::from_secs(20))
        .await;
    let took = enqueued.elapsed();
    assert!(took < Duration::from_secs(3), "picked up after {took:?}");
    // The claim in flight (up to the 5 s wait) delays the shutdown, not more.
    let stopping = Instant::now();
    handle.shutdown();
    handle.join().await;
    assert!(stopping.elapsed() < Duration::from_secs(8));
}

#[tokio::test]
async fn maintenance_is_left_to_the_server() {
    let client = HttpClient::new("http://127.0.0.1:9", "k").unwrap();
    let source = RemoteSource::new(client.clone());
    let err = source
        .acquire_lease("maintenance", "w", 3_000)
        .await
        .unwrap_err();
    assert!(matches!(err, tether_core::Error::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("server"), "{err}");
    assert!(source.reap_lapsed_leases(10).await.is_err());
    assert!(source.expire_jobs(10).await.is_err());
    assert!(source.prune_finished(1, 10).await.is_err());
    // A worker builds without further settings (maintenance is off).
    let worker = client
        .worker()
        .queue("q", 1)
        .handler("k", |_ctx| async move { Ok(None) })
        .build()
        .unwrap();
    assert!(!worker.worker_id().is_empty());
}

#[derive(Serialize, Deserialize)]
struct Rendered {
    pages: i64,
}

/// A → B over HTTP: B's handler reads A's result from its context, typed
/// and untyped (`GET /v1/jobs/{id}/dependencies`); a job without
/// dependencies reads none.
async fn handlers_read_their_dependencies_over_http(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let a = c
        .enqueue(NewJob::new("graph", "render", json!({"pages": 7})))
        .await
        .unwrap()
        .job
        .id;
    let b = c
        .enqueue(NewJob::new("graph", "publish", Value::Null).after(a))
        .await
        .unwrap()
        .job;
    assert_eq!(b.state, JobState::Waiting);
    let lonely = c
        .enqueue(NewJob::new("graph", "publish", Value::Null))
        .await
        .unwrap()
        .job
        .id;
    let worker = quick_worker(c)
        .queue("graph", 2)
        .handler("render", |ctx| async move {
            Ok(Some(json!({ "pages": ctx.job().payload["pages"] })))
        })
        .handler("publish", |ctx| async move {
            let deps = ctx.dependencies().await?;
            let typed = match ctx.job().depends_on.first() {
                Some(id) => ctx
                    .dependency_result::<Rendered>(*id)
                    .await?
                    .map(|r| r.pages),
                None => None,
            };
            Ok(Some(json!({
                "deps": deps.iter().map(|d| json!({
                    "id": d.id, "kind": d.kind, "state": d.state.as_str(), "result": d.result,
                })).collect::<Vec<_>>(),
                "typed": typed,
            })))
        })
        .build()
        .unwrap();
    let handle = worker.start();
    let done = s
        .wait_for_state(b.id, JobState::Succeeded, Duration::from_secs(20))
        .await;
    let alone = s
        .wait_for_state(lonely, JobState::Succeeded, Duration::from_secs(20))
        .await;
    handle.shutdown();
    handle.join().await;
    assert_eq!(
        done.result,
        Some(json!({
            "deps": [{"id": a, "kind": "render", "state": "succeeded", "result": {"pages": 7}}],
            "typed": 7,
        }))
    );
    assert_eq!(alone.result, Some(json!({ "deps": [], "typed": null })));
    assert!(
        events(c, b.id).await.contains(&EventKind::Released),
        "released by its dependency's success"
    );
}
