//! The cancellation figures: how long a cancel request takes to reach a
//! running handler of a remote worker, against `tether serve` on
//! PostgreSQL over loopback HTTP. The workers learn of a cancel through
//! their `GET /v1/events` stream of `cancel_requested` events; the queue's
//! lease is 60 s, so a heartbeat (every 20 s) cannot be what delivers one
//! within the bar. The Rust runtime's figure comes first, then the Python
//! and TypeScript SDKs' (see [`crate::sdk::cancel`]), so that a run without
//! the SDK programs still shows the Rust one.

use std::time::{Duration, Instant};

use tether_client::{HttpClient, JobError, RemoteSource};
use tether_core::{Engine, NewJob, QueueConfigPatch};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::http::ServerProcess;
use crate::pg::BenchDb;
use crate::report::Report;
use crate::workload::TENANT;
use crate::Scale;

/// The queue lease of the cancellation figures: its heartbeats (every
/// 20 s) are far slower than the bar, so the push is what is measured.
pub const LEASE: Duration = Duration::from_secs(60);
/// Longest wait for a handler to start or to hear of its cancel.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the cancellation figures in a bench database of their own.
pub async fn run(admin_url: &str, scale: &Scale, report: &mut Report) {
    let db = BenchDb::create(admin_url, "_cancel").await;
    let server = ServerProcess::start(&db.url, None);
    let base = format!("http://{}", server.addr);
    let tenant = db.engine.ensure_tenant(TENANT).await.expect("bench tenant");
    let (_, key) = db
        .engine
        .issue_api_key(tenant.id, Some("cancel-bench"), false)
        .await
        .expect("bench key");
    rust(&db.engine, &base, &key, scale.cancel_jobs, report).await;
    // Checked only now: the Rust figure needs no SDK program.
    let sdks = crate::sdk::programs();
    for sdk in &sdks {
        crate::sdk::cancel(sdk, &db.engine, &base, &key, scale.cancel_jobs, report).await;
    }
    drop(server);
    db.drop_now().await;
}

/// Gives `queue` the figures' long lease.
pub async fn long_lease(engine: &Engine, queue: &str) {
    let patch = QueueConfigPatch {
        default_lease_ttl_ms: Some(LEASE.as_millis() as i64),
        ..QueueConfigPatch::default()
    };
    engine
        .configure_queue(TENANT, queue, &patch)
        .await
        .expect("configure the queue");
}

/// What the Rust worker's handler reports.
enum Seen {
    Started(Uuid),
    Cancelled(Uuid, Instant),
}

/// The Rust runtime over HTTP (the SDK's [`RemoteSource`]): `n` jobs one at
/// a time (after one unmeasured), each cancelled once its handler started;
/// each sample is the cancel request (through the engine) → the handler
/// seeing its cancellation.
async fn rust(engine: &Engine, base: &str, key: &str, n: usize, report: &mut Report) {
    const QUEUE: &str = "rust-cancel";
    long_lease(engine, QUEUE).await;
    let client = HttpClient::new(base, key).expect("bench client");
    let (tx, mut seen) = mpsc::unbounded_channel();
    let handle = RemoteSource::new(client)
        .worker()
        .tenant(TENANT)
        .queue(QUEUE, 4)
        .handler("wait_cancel", move |ctx| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Seen::Started(ctx.id()));
                ctx.cancelled().await;
                let _ = tx.send(Seen::Cancelled(ctx.id(), Instant::now()));
                Err(JobError::Cancelled)
            }
        })
        .build()
        .expect("worker configuration")
        .start();
    // Let its event stream and first claim reach the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ms = Vec::with_capacity(n);
    for i in 0..=n {
        let new = NewJob::new(QUEUE, "wait_cancel", serde_json::Value::Null);
        let job = engine.enqueue(TENANT, new).await.expect("enqueue").job.id;
        match next(&mut seen).await {
            Seen::Started(id) => assert_eq!(id, job, "the worker started the job just enqueued"),
            Seen::Cancelled(..) => panic!("the Rust worker reported a cancel before a start"),
        }
        let asked = Instant::now();
        engine.cancel(TENANT, job).await.expect("cancel");
        match next(&mut seen).await {
            Seen::Cancelled(id, at) => {
                assert_eq!(id, job, "the handler of the cancelled job heard of it");
                if i > 0 {
                    ms.push(at.duration_since(asked).as_secs_f64() * 1_000.0);
                }
            }
            Seen::Started(_) => panic!("the Rust worker started a job while one was running"),
        }
    }
    handle.shutdown();
    handle.join().await;
    let (p50, p99) = p50_p99(&mut ms);
    report.add(
        "rust_cancel_to_handler_p50_ms",
        p50,
        "ms",
        "Rust runtime over HTTP: cancel request -> handler sees it (event stream; 60 s lease)",
    );
    report.add(
        "rust_cancel_to_handler_p99_ms",
        p99,
        "ms",
        format!("same, p99 of {n} jobs (bar <= 1000)"),
    );
}

/// The worker's next report, panicking after [`SAMPLE_TIMEOUT`].
async fn next(seen: &mut mpsc::UnboundedReceiver<Seen>) -> Seen {
    tokio::time::timeout(SAMPLE_TIMEOUT, seen.recv())
        .await
        .unwrap_or_else(|_| panic!("the Rust worker reported nothing within {SAMPLE_TIMEOUT:?}"))
        .expect("the Rust worker's handler is gone")
}

/// The median and the 99th percentile of `ms` (sorted in place).
pub fn p50_p99(ms: &mut [f64]) -> (f64, f64) {
    assert!(!ms.is_empty(), "no samples");
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    (pct(0.50), pct(0.99))
}
