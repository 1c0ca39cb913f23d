//! The SDK figures: the Python and TypeScript SDKs' workers (each SDK's
//! bench worker program, in a child process) against `tether serve` on
//! PostgreSQL over loopback HTTP — end-to-end throughput with no-op handlers
//! and pickup latency (enqueue → handler start) with an idle worker; and,
//! for the `cancel` group (`crate::cancel`), how long a cancel request
//! takes to reach a running handler.
//!
//! The programs must be ready to run: the Python venv that
//! `sdk/python/scripts/test` makes (or `TETHER_BENCH_PYTHON`) and the
//! TypeScript build that `npm test` in `sdk/typescript` makes. A missing one
//! fails the run with the command that makes it; it is never skipped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sqlx::PgPool;
use tether_core::{Engine, NewJob};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::http::ServerProcess;
use crate::report::Report;
use crate::workload::{enqueue_made, rate, TENANT};
use crate::Scale;

/// Handler slots of the SDK worker (the bar's setting).
const CONCURRENCY: usize = 64;
/// Jobs of the throughput figure (the bar's setting, also in `--quick`).
const THROUGHPUT_JOBS: usize = 20_000;

/// One SDK's bench worker program.
pub struct Sdk {
    /// Figure prefix: `py` or `ts`.
    prefix: &'static str,
    /// For the table.
    name: &'static str,
    /// Program and first arguments.
    command: Vec<String>,
    /// Bars of the figures, for the table.
    throughput_bar: &'static str,
}

/// The repository root (this crate lives in `crates/tether-bench`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn must_exist(path: &Path, how: &str) {
    assert!(
        path.exists(),
        "{} is missing: {how} first (the SDK figures are part of every run)",
        path.display()
    );
}

/// The SDKs' bench worker programs; panics, saying what to run, when one
/// is not ready (called first, so a run fails before it measures anything).
pub fn programs() -> [Sdk; 2] {
    let repo = repo();
    let python = std::env::var("TETHER_BENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo.join("target/py-venv/bin/python"));
    must_exist(
        &python,
        "run `bash sdk/python/scripts/test` (it makes the venv) or set TETHER_BENCH_PYTHON",
    );
    let py_worker = repo.join("sdk/python/tools/bench_worker.py");
    must_exist(&py_worker, "check out the whole repository");
    let ts_worker = repo.join("sdk/typescript/build-test/tools/bench-worker.js");
    must_exist(&ts_worker, "run `npm ci && npm test` in sdk/typescript");
    [
        Sdk {
            prefix: "py",
            name: "Python",
            command: vec![path_str(&python), path_str(&py_worker)],
            throughput_bar: "bar >= 2500",
        },
        Sdk {
            prefix: "ts",
            name: "TypeScript",
            command: vec!["node".to_owned(), path_str(&ts_worker)],
            throughput_bar: "bar >= 6000",
        },
    ]
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Wall-clock microseconds: the worker's `START` lines use the same clock.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// A running bench worker; exits at once when dropped (its stdin closes).
struct WorkerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// `START <job> <µs>` lines of pickup and cancel modes.
    starts: mpsc::UnboundedReceiver<(Uuid, i64)>,
    /// `CANCELLED <job> <µs>` lines of cancel mode: the handler saw its
    /// cancellation.
    cancels: mpsc::UnboundedReceiver<(Uuid, i64)>,
}

impl WorkerProcess {
    /// Starts the SDK's worker on `queue` and waits for its `READY`; with
    /// `hooks`, the worker runs a no-op before, after and on-error hook
    /// around each handler, and tracing is on where the SDK traces (no
    /// exporter).
    async fn start(
        sdk: &Sdk,
        base: &str,
        key: &str,
        queue: &str,
        mode: &str,
        hooks: bool,
    ) -> WorkerProcess {
        let mut child = Command::new(&sdk.command[0])
            .args(&sdk.command[1..])
            .args([base, key, queue, &CONCURRENCY.to_string(), mode])
            .args(hooks.then_some("--hooks"))
            .current_dir(repo())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {} bench worker: {e}", sdk.name));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
        let (starts_tx, starts) = mpsc::unbounded_channel();
        let (cancels_tx, cancels) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let fields: Vec<&str> = line.split_whitespace().collect();
                match fields.as_slice() {
                    ["READY"] => {
                        let _ = ready_tx.send(());
                    }
                    [what @ ("START" | "CANCELLED"), job, at] => {
                        if let (Ok(job), Ok(at)) = (job.parse(), at.parse()) {
                            let to = if *what == "START" {
                                &starts_tx
                            } else {
                                &cancels_tx
                            };
                            let _ = to.send((job, at));
                        }
                    }
                    _ => {}
                }
            }
        });
        let ready = tokio::time::timeout(Duration::from_secs(30), ready_rx.recv()).await;
        assert!(
            matches!(ready, Ok(Some(()))),
            "the {} bench worker did not print READY within 30 s",
            sdk.name
        );
        WorkerProcess {
            child,
            stdin,
            starts,
            cancels,
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the SDK figures against the bench database at `url`.
pub async fn run(
    sdks: &[Sdk],
    engine: &Engine,
    url: &str,
    pool: &PgPool,
    scale: &Scale,
    report: &mut Report,
) {
    let server = ServerProcess::start(url, None);
    let base = format!("http://{}", server.addr);
    let tenant = engine.ensure_tenant(TENANT).await.expect("bench tenant");
    let (_, key) = engine
        .issue_api_key(tenant.id, Some("sdk-bench"), false)
        .await
        .expect("bench key");
    for sdk in sdks {
        throughput(sdk, engine, pool, &base, &key, report).await;
        pickup(sdk, engine, pool, &base, &key, scale.pickup_jobs, report).await;
    }
    drop(server);
}

/// Rounds of the throughput figure, each a run without hooks and one with
/// them, alternating (so that the machine's drift falls on both alike).
const THROUGHPUT_ROUNDS: usize = 2;

/// 20 000 queued jobs, then the SDK worker (64 slots) runs them all;
/// [`THROUGHPUT_ROUNDS`] times without hooks and as many with them. The
/// figure is the mean rate without; the hooks ratio is the rate with over
/// the rate without.
async fn throughput(
    sdk: &Sdk,
    engine: &Engine,
    pool: &PgPool,
    base: &str,
    key: &str,
    report: &mut Report,
) {
    let (mut plain, mut hooked) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..THROUGHPUT_ROUNDS {
        plain += run_all(sdk, engine, pool, base, key, false).await;
        hooked += run_all(sdk, engine, pool, base, key, true).await;
    }
    let jobs = (THROUGHPUT_JOBS * THROUGHPUT_ROUNDS) as u64;
    let (name, ratio) = match sdk.prefix {
        "py" => ("py_worker_jobs_per_s", "py_worker_hooks_ratio"),
        _ => ("ts_worker_jobs_per_s", "ts_worker_hooks_ratio"),
    };
    report.add(
        name,
        rate(jobs, plain),
        "jobs/s",
        format!(
            "{} SDK worker over HTTP, no-op handlers, concurrency {CONCURRENCY}, {THROUGHPUT_JOBS} jobs, mean of {THROUGHPUT_ROUNDS} runs ({})",
            sdk.name, sdk.throughput_bar
        ),
    );
    report.add(
        ratio,
        plain.as_secs_f64() / hooked.as_secs_f64(),
        "ratio",
        format!(
            "{name} with a no-op before, after and on-error hook and tracing on (no exporter) / without, alternating runs (bar >= 0.9)"
        ),
    );
}

/// One throughput run: how long the worker took to run every job.
async fn run_all(
    sdk: &Sdk,
    engine: &Engine,
    pool: &PgPool,
    base: &str,
    key: &str,
    hooks: bool,
) -> Duration {
    let queue = format!("{}-e2e", sdk.prefix);
    crate::pg::reset(pool).await;
    // Every job carries a trace context, as jobs enqueued inside a traced
    // request do: with hooks and tracing on, each gets its span.
    let traced = queue.clone();
    enqueue_made(engine, THROUGHPUT_JOBS, 2, move |i| {
        NewJob::new(&traced, "noop", serde_json::json!({ "i": i })).header(
            "traceparent",
            format!("00-{:032x}-{:016x}-01", i as u128 + 1, i as u64 + 1),
        )
    })
    .await;
    crate::pg::vacuum(pool).await;
    let worker = WorkerProcess::start(sdk, base, key, &queue, "throughput", hooks).await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    while crate::workload::unfinished(pool, &queue).await {
        assert!(
            Instant::now() < deadline,
            "the {} worker did not finish {THROUGHPUT_JOBS} jobs within 300 s",
            sdk.name
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    drop(worker);
    let succeeded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tether.jobs WHERE queue = $1 AND state = 'succeeded'",
    )
    .bind(&queue)
    .fetch_one(pool)
    .await
    .expect("count");
    assert_eq!(
        succeeded as usize, THROUGHPUT_JOBS,
        "every job succeeded through the {} worker",
        sdk.name
    );
    elapsed
}

/// Jobs enqueued one at a time (about 50 per second) while the SDK worker
/// waits; each sample is enqueue start → handler start, on the one clock of
/// this machine.
async fn pickup(
    sdk: &Sdk,
    engine: &Engine,
    pool: &PgPool,
    base: &str,
    key: &str,
    n: usize,
    report: &mut Report,
) {
    let queue = format!("{}-pickup", sdk.prefix);
    crate::pg::reset(pool).await;
    let mut worker = WorkerProcess::start(sdk, base, key, &queue, "pickup", false).await;
    // Let its first long-poll claim reach the server before timing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n {
        let sent = now_us();
        let job = engine
            .enqueue(TENANT, NewJob::new(&queue, "noop", serde_json::Value::Null))
            .await
            .expect("enqueue")
            .job
            .id;
        let (started, at) = tokio::time::timeout(Duration::from_secs(10), worker.starts.recv())
            .await
            .unwrap_or_else(|_| panic!("the {} worker did not start a job within 10 s", sdk.name))
            .expect("the worker's output ended");
        assert_eq!(started, job, "the worker started the job just enqueued");
        ms.push((at - sent).max(0) as f64 / 1_000.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(worker);
    let (p50_ms, p99_ms) = crate::cancel::p50_p99(&mut ms);
    let (p50, p99) = match sdk.prefix {
        "py" => ("py_pickup_p50_ms", "py_pickup_p99_ms"),
        _ => ("ts_pickup_p50_ms", "ts_pickup_p99_ms"),
    };
    report.add(
        p50,
        p50_ms,
        "ms",
        format!(
            "{} SDK worker: enqueue -> handler start, idle worker",
            sdk.name
        ),
    );
    report.add(
        p99,
        p99_ms,
        "ms",
        format!("same, p99 of {n} jobs (bar <= 20)"),
    );
}

/// The SDK worker in `cancel` mode runs `n` jobs one at a time (after one
/// unmeasured): its handler prints `START`, waits for its cancellation and
/// prints `CANCELLED` once it sees it. Each sample is the cancel request
/// (through the engine) → `CANCELLED`, on the one clock of this machine.
/// The queue's lease is long (see [`crate::cancel::LEASE`]): the SDK's push
/// of cancel requests is what is measured, not its heartbeat.
pub async fn cancel(
    sdk: &Sdk,
    engine: &Engine,
    base: &str,
    key: &str,
    n: usize,
    report: &mut Report,
) {
    let queue = format!("{}-cancel", sdk.prefix);
    crate::cancel::long_lease(engine, &queue).await;
    let mut worker = WorkerProcess::start(sdk, base, key, &queue, "cancel", false).await;
    // Let its event stream and first long-poll claim reach the server.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let timeout = crate::cancel::SAMPLE_TIMEOUT;
    let mut ms = Vec::with_capacity(n);
    for i in 0..=n {
        let job = engine
            .enqueue(TENANT, NewJob::new(&queue, "noop", serde_json::Value::Null))
            .await
            .expect("enqueue")
            .job
            .id;
        let (started, _) = tokio::time::timeout(timeout, worker.starts.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the {} worker did not start a job within {timeout:?}",
                    sdk.name
                )
            })
            .expect("the worker's output ended");
        assert_eq!(started, job, "the worker started the job just enqueued");
        let sent = now_us();
        engine.cancel(TENANT, job).await.expect("cancel");
        let (cancelled, at) = tokio::time::timeout(timeout, worker.cancels.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the {} worker's handler did not see its cancellation within {timeout:?} \
                     (does its bench worker have the `cancel` mode?)",
                    sdk.name
                )
            })
            .expect("the worker's output ended");
        assert_eq!(cancelled, job, "the handler of the cancelled job saw it");
        if i > 0 {
            ms.push((at - sent).max(0) as f64 / 1_000.0);
        }
    }
    drop(worker);
    let (p50_ms, p99_ms) = crate::cancel::p50_p99(&mut ms);
    let (p50, p99) = match sdk.prefix {
        "py" => ("py_cancel_to_handler_p50_ms", "py_cancel_to_handler_p99_ms"),
        _ => ("ts_cancel_to_handler_p50_ms", "ts_cancel_to_handler_p99_ms"),
    };
    report.add(
        p50,
        p50_ms,
        "ms",
        format!(
            "{} SDK worker: cancel request -> handler sees it (60 s lease)",
            sdk.name
        ),
    );
    report.add(
        p99,
        p99_ms,
        "ms",
        format!("same, p99 of {n} jobs (bar <= 1000)"),
    );
}
