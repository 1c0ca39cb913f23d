//! The HTTP figures: `tether serve` on PostgreSQL in a child process (this
//! same program, re-run as `__serve`, so it runs exactly `tether serve`'s
//! code), driven over loopback by the Rust SDK.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;
use tether_client::{ClaimOptions, ClaimedJob, HttpClient};
use tether_core::{CarriedReports, Engine, NewJob};
use uuid::Uuid;

use crate::report::Report;
use crate::workload::{enqueue_batches, median_ms, rate, TENANT};
use crate::Scale;

/// Single enqueues in flight over HTTP (as for the library's figure).
const SINGLE_PRODUCERS: usize = 8;

/// Requests of the one-caller single-enqueue latency (about a second).
const SINGLE_ALONE: usize = 1_000;

/// HTTP client workers claiming end to end.
const CLIENT_WORKERS: usize = 4;
/// The admin key the child server is started with.
pub(crate) const ADMIN_KEY: &str = "tether-bench-admin-key-000000";
/// The server secret of every child server: the SDK figures start a second
/// server on the bench database, which must hold the same secret.
const SERVER_SECRET: &str = "7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e";

/// The child `tether serve`; stopped when dropped.
pub struct ServerProcess {
    child: Child,
    /// Closing it asks the server to stop gracefully.
    stdin: Option<std::process::ChildStdin>,
    /// Where it listens.
    pub addr: String,
}

impl ServerProcess {
    /// Starts `tether serve` on `database_url`; `retention` overrides how
    /// long finished jobs are kept.
    pub fn start(database_url: &str, retention: Option<Duration>) -> ServerProcess {
        let exe = std::env::current_exe().expect("own executable");
        let mut child = Command::new(exe)
            .arg("__serve")
            .arg(database_url)
            .env(
                "TETHER_BENCH_RETENTION_MS",
                retention.map_or(String::new(), |r| r.as_millis().to_string()),
            )
            .env("TETHER_ADMIN_KEY", ADMIN_KEY)
            .env("TETHER_SERVER_SECRET", SERVER_SECRET)
            .env("TETHER_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(a) = line.strip_prefix("tether serve: listening on http://") {
                        break a.trim().to_owned();
                    }
                }
                _ => panic!("the server process ended before listening"),
            }
        };
        // Keep draining its stdout so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ServerProcess { child, stdin, addr }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its resident memory in MiB.
    pub fn rss_mib(&self) -> f64 {
        rss_of(self.child.id())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
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

/// `__serve <database url>`: runs `tether serve` on a free loopback port
/// until stdin closes (the parent died or is done).
pub fn serve_child(database_url: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mut args = tether_server::ServeConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            database_url: Some(database_url.to_owned()),
            data_dir: std::env::temp_dir().join(format!("tether-bench-{}", std::process::id())),
            ..tether_server::ServeConfig::default()
        };
        if let Ok(retention) = std::env::var("TETHER_BENCH_RETENTION_MS") {
            if !retention.is_empty() {
                let ms: u64 = retention
                    .parse()
                    .unwrap_or_else(|e| panic!("TETHER_BENCH_RETENTION_MS: {e}"));
                args.retention = Duration::from_millis(ms);
            }
        }
        let secrets = tether_server::Secrets::from_env();
        let running = tether_server::start(&args, &secrets, tether_server::Metrics::gauges_only())
            .await
            .unwrap_or_else(|e| panic!("tether serve: {e}"));
        print!("{}", running.banner());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // The parent holds our stdin; its end (or its death) stops us.
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin()
                .read_line(&mut sink)
                .map(|n| n > 0)
                .unwrap_or(false)
            {}
        })
        .await;
        let _ = running.stop().await;
        let _ = std::fs::remove_dir_all(&args.data_dir);
    });
}

/// Runs the HTTP figures against the bench database at `url`.
pub async fn run(engine: &Engine, url: &str, pool: &PgPool, scale: &Scale, report: &mut Report) {
    let server = ServerProcess::start(url, None);
    let base = format!("http://{}", server.addr);
    // A key of the bench tenant, so HTTP and library calls see the same jobs.
    let tenant = engine.ensure_tenant(TENANT).await.expect("bench tenant");
    let (_, key) = engine
        .issue_api_key(tenant.id, Some("bench"), false)
        .await
        .expect("bench key");
    let client = HttpClient::new(&base, &key).expect("client");
    tokio::time::sleep(Duration::from_secs(1)).await;
    report.add(
        "server_rss_idle_mib",
        server.rss_mib(),
        "MiB",
        "tether serve resident memory, idle after start (bar <= 64)",
    );

    // Single enqueues over HTTP: one caller on an idle server (each
    // request's own latency), then 8 in flight (what group commit shares).
    // The first request is left out: it opens the connection and creates
    // the queue, which a caller pays once, not per job. 1,000 samples, so
    // that the p99 is not simply the slowest request.
    crate::pg::reset(pool).await;
    client
        .enqueue(NewJob::new("http-single", "noop", json!({ "warm": true })))
        .await
        .expect("enqueue");
    let mut alone = Vec::with_capacity(SINGLE_ALONE);
    for i in 0..SINGLE_ALONE {
        let started = Instant::now();
        client
            .enqueue(NewJob::new("http-single", "noop", json!({ "i": i })))
            .await
            .expect("enqueue");
        alone.push(started.elapsed());
    }
    alone.sort();
    report.add(
        "http_enqueue_single_p50_ms",
        alone[alone.len() / 2].as_secs_f64() * 1_000.0,
        "ms",
        format!(
            "POST /v1/jobs, one caller, idle server, median of {}",
            alone.len()
        ),
    );
    report.add(
        "http_enqueue_single_p99_ms",
        alone[(alone.len() * 99 / 100).min(alone.len() - 1)].as_secs_f64() * 1_000.0,
        "ms",
        format!(
            "POST /v1/jobs, one caller, idle server, p99 of {} (bar <= 2)",
            alone.len()
        ),
    );
    // The floors under every HTTP figure, same client and concurrency:
    // requests that reach no database (`/healthz`), and requests that run
    // one primary-key read and nothing else (`/readyz`, the cost of the
    // key lookup every `/v1` request makes).
    let n = scale.enqueue_single;
    for (name, route) in [
        ("http_floor_requests_per_s", "healthz"),
        ("http_floor_one_read_requests_per_s", "readyz"),
    ] {
        let (done, took) = crate::workload::concurrently(SINGLE_PRODUCERS, |_| {
            let client = client.clone();
            async move {
                for _ in 0..n / SINGLE_PRODUCERS {
                    match route {
                        "healthz" => client.healthz().await,
                        _ => client.readyz().await,
                    }
                    .expect("probe");
                }
                (n / SINGLE_PRODUCERS) as u64
            }
        })
        .await;
        report.add(
            name,
            rate(done, took),
            "requests/s",
            format!("GET /{route}, {SINGLE_PRODUCERS} in flight, {n} requests"),
        );
    }
    crate::pg::reset(pool).await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..SINGLE_PRODUCERS {
        let client = client.clone();
        let count = n / SINGLE_PRODUCERS;
        handles.push(tokio::spawn(async move {
            for i in 0..count {
                client
                    .enqueue(NewJob::new(
                        "http-single",
                        "noop",
                        json!({ "t": t, "i": i }),
                    ))
                    .await
                    .expect("enqueue");
            }
        }));
    }
    for h in handles {
        h.await.expect("enqueue task");
    }
    report.add(
        "http_pg_enqueue_single_jobs_per_s",
        rate(
            (n / SINGLE_PRODUCERS * SINGLE_PRODUCERS) as u64,
            started.elapsed(),
        ),
        "jobs/s",
        format!("POST /v1/jobs, one job each, {SINGLE_PRODUCERS} in flight, {n} jobs"),
    );

    // Batch enqueue over HTTP.
    let n = scale.enqueue_batch / 2;
    crate::pg::reset(pool).await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..2 {
        let client = client.clone();
        let per_task = n / 2;
        handles.push(tokio::spawn(async move {
            let mut left = per_task;
            let mut i = 0;
            while left > 0 {
                let size = left.min(1_000);
                let jobs: Vec<NewJob> = (0..size)
                    .map(|j| NewJob::new("http-batch", "noop", json!({"t": t, "i": i, "j": j})))
                    .collect();
                client.enqueue_batch(&jobs).await.expect("enqueue batch");
                left -= size;
                i += 1;
            }
        }));
    }
    for h in handles {
        h.await.expect("enqueue task");
    }
    report.add(
        "http_pg_enqueue_batch_jobs_per_s",
        rate((n / 2 * 2) as u64, started.elapsed()),
        "jobs/s",
        format!("POST /v1/jobs/batch of 1000, 2 in flight, {n} jobs"),
    );

    // End to end: claims of 100 each carrying the last batch's
    // completions, 4 client workers; then again with 10 event-stream
    // readers attached (their cost to the server, and how far behind the
    // commits they read).
    let (_, n) = scale.e2e[2];
    let first = e2e(engine, pool, &client, n, server.pid(), None).await;
    let (http, peak) = (first.rate, first.peak_rss_mib);
    report.add(
        "http_pg_e2e_jobs_per_s",
        http,
        "jobs/s",
        format!("HTTP claims of 100 carrying the last 100 completions, {CLIENT_WORKERS} client workers, {n} jobs"),
    );
    report.add(
        "http_vs_library_ratio",
        http / report.get("pg_e2e_b100_jobs_per_s"),
        "ratio",
        "HTTP e2e / library e2e at batch 100 (bar >= 0.4)",
    );
    report.add(
        "server_rss_load_mib",
        peak,
        "MiB",
        "tether serve peak resident memory during the HTTP e2e run",
    );
    // The readers' cost: rounds of the e2e without then with readers, the
    // figure the median of the rounds' ratios (one e2e of the quick scale
    // is about a second, and this machine's noise moves one by ±20 %).
    let mut ratios = Vec::with_capacity(READER_ROUNDS);
    let mut cpu_ratios = Vec::with_capacity(READER_ROUNDS);
    let mut lags = Vec::new();
    let mut without = first;
    for round in 0..READER_ROUNDS {
        if round > 0 {
            without = e2e(engine, pool, &client, n, server.pid(), None).await;
        }
        let readers = Readers::attach(&client, engine).await;
        let probes = Probes::default();
        let with = e2e(engine, pool, &client, n, server.pid(), Some(&probes)).await;
        lags.extend(readers.detach(n, &probes).await);
        ratios.push(with.rate / without.rate);
        cpu_ratios.push(with.cpu_ms_per_job / without.cpu_ms_per_job);
        // The server's feed reader stops a while after its last stream
        // closes: the next run without readers starts after it has.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    report.add(
        "http_pg_e2e_with_readers_ratio",
        crate::cancel::p50_p99(&mut ratios).0,
        "ratio",
        format!(
            "the HTTP e2e with {READERS} GET /v1/events readers attached / without, median of {READER_ROUNDS} rounds' ratios (bar >= 0.9)"
        ),
    );
    report.add(
        "http_pg_e2e_readers_server_cpu_ratio",
        crate::cancel::p50_p99(&mut cpu_ratios).0,
        "ratio",
        format!(
            "CPU of tether serve + PostgreSQL per job, with the {READERS} readers / without (their cost apart from the readers' own), median of {READER_ROUNDS} rounds"
        ),
    );
    report.add(
        "events_lag_p50_ms",
        p50_p99_ms(&lags).0,
        "ms",
        format!("commit -> a stream reader has the event, probes every {PROBE_EVERY:?} during the HTTP e2e with {READERS} readers"),
    );
    report.add(
        "events_lag_p99_ms",
        p50_p99_ms(&lags).1,
        "ms",
        format!("same, p99 of {} events read (bar <= 50)", lags.len()),
    );

    // Waiting for a result: a GET ?wait_ms= waits while the job runs.
    crate::pg::reset(pool).await;
    let waits = wait_result(&client, engine, scale.pickup_jobs).await;
    report.add(
        "wait_result_p50_ms",
        p50_p99_ms(&waits).0,
        "ms",
        "completion sent -> the waiting GET /v1/jobs/{id}?wait_ms= answered",
    );
    report.add(
        "wait_result_p99_ms",
        p50_p99_ms(&waits).1,
        "ms",
        format!("same, p99 of {} jobs (bar <= 20)", waits.len()),
    );

    // Long-poll wake-up: an idle client waits in a claim; jobs arrive ~50/s.
    crate::pg::reset(pool).await;
    let samples = pickup(&client, engine, scale.pickup_jobs).await;
    let mut sorted = samples.clone();
    sorted.sort();
    let p99 = sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)];
    report.add(
        "http_pickup_p50_ms",
        median_ms(samples),
        "ms",
        "enqueue -> long-poll claim answered, over HTTP",
    );
    report.add(
        "http_pickup_p99_ms",
        p99.as_secs_f64() * 1_000.0,
        "ms",
        format!("same, p99 of {} jobs (bar <= 15)", sorted.len()),
    );
    drop(server);
}

/// Resident memory of a process in MiB (Linux), NaN when unknown.
pub fn rss_of(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

/// Enqueues `n` jobs (library, one at a time, about 50 per second) while a
/// client long-polls for them; each sample is enqueue start → claim answer.
async fn pickup(client: &HttpClient, engine: &Engine, n: usize) -> Vec<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(uuid::Uuid, Instant)>();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut opts = ClaimOptions::new("http-pickup");
            opts.wait_ms = Some(30_000);
            let mut seen = Vec::with_capacity(n);
            while seen.len() < n {
                for c in client.claim("http-pickup", &opts).await.expect("claim") {
                    seen.push((c.job.id, Instant::now()));
                    let _ = client.complete_batch(&[c.success()]).await;
                }
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..n {
        let at = Instant::now();
        let out = engine
            .enqueue(
                TENANT,
                NewJob::new("http-pickup", "noop", serde_json::Value::Null),
            )
            .await
            .expect("enqueue");
        tx.send((out.job.id, at)).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(tx);
    let seen = waiter.await.expect("waiter");
    let mut sent = std::collections::HashMap::new();
    while let Some((id, at)) = rx.recv().await {
        sent.insert(id, at);
    }
    seen.into_iter()
        .filter_map(|(id, got)| sent.get(&id).map(|at| got.duration_since(*at)))
        .collect()
}

/// Event-stream readers attached during the HTTP e2e runs with readers.
const READERS: usize = 10;
/// Rounds of the HTTP e2e without and with readers.
const READER_ROUNDS: usize = 3;

/// The median and the 99th percentile of `samples`, in milliseconds.
fn p50_p99_ms(samples: &[Duration]) -> (f64, f64) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1_000.0).collect();
    crate::cancel::p50_p99(&mut ms)
}

/// One HTTP e2e run over `n` queued jobs of `http-e2e`. With `probes`, a probe job is enqueued
/// every [`PROBE_EVERY`] while it runs, each commit's time noted.
async fn e2e(
    engine: &Engine,
    pool: &PgPool,
    client: &HttpClient,
    n: usize,
    server_pid: u32,
    probes: Option<&Probes>,
) -> E2e {
    crate::pg::reset(pool).await;
    enqueue_batches(engine, "http-e2e", n, 2).await;
    // From the same start as the library's figure it is divided by.
    crate::pg::vacuum(pool).await;
    let peak = Arc::new(std::sync::Mutex::new(0f64));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                let rss = rss_of(server_pid);
                {
                    let mut p = peak.lock().unwrap();
                    *p = p.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let cpu_before = server_and_postgres_cpu(server_pid);
    let started = Instant::now();
    let prober = probes.map(|p| p.start(engine.clone()));
    let mut handles = Vec::new();
    for w in 0..CLIENT_WORKERS {
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            let mut opts = ClaimOptions::new(format!("http-bench-{w}"));
            opts.limit = Some(100);
            let mut done = 0u64;
            let mut reports = CarriedReports::default();
            loop {
                let out =
                    (client.report_and_claim("http-e2e", &opts, &reports).await).expect("claim");
                for item in out.reports {
                    item.result.expect("completion accepted");
                }
                done += reports.complete.len() as u64;
                if out.jobs.is_empty() {
                    return done;
                }
                reports.complete = out.jobs.iter().map(ClaimedJob::success).collect();
            }
        }));
    }
    let mut done = 0;
    for h in handles {
        done += h.await.expect("client worker");
    }
    let elapsed = started.elapsed();
    let cpu = server_and_postgres_cpu(server_pid) - cpu_before;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    if let Some(prober) = prober {
        prober.abort();
    }
    assert_eq!(done as usize, n, "every job completed over HTTP");
    let peak = *peak.lock().unwrap();
    E2e {
        rate: rate(done, elapsed),
        peak_rss_mib: peak,
        cpu_ms_per_job: cpu * 1_000.0 / done as f64,
    }
}

/// What one HTTP e2e run measured.
struct E2e {
    /// Jobs per second.
    rate: f64,
    /// `tether serve`'s peak resident memory, MiB.
    peak_rss_mib: f64,
    /// CPU time of `tether serve` and every PostgreSQL process per job
    /// completed, ms: the server side's cost apart from the clients'
    /// (this bench's own readers share the machine's two cores).
    cpu_ms_per_job: f64,
}

/// CPU seconds used so far by the process `pid` and every process named
/// `postgres` (the bench machine's whole cluster; the others are idle).
fn server_and_postgres_cpu(pid: u32) -> f64 {
    let postgres: f64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .map(cpu_seconds)
        .sum();
    cpu_seconds(pid) + postgres
}

/// User and system CPU seconds of process `pid` (0 once it is gone).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // After the command's closing parenthesis, utime and stime are the
    // 12th and 13th fields, in clock ticks (100 a second on Linux).
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// How often a probe job is enqueued during the HTTP e2e with readers.
const PROBE_EVERY: Duration = Duration::from_millis(20);

/// Probe jobs (queue `http-probe`) and when each enqueue had committed:
/// the library's enqueue returns after its commit, so the time noted is a
/// commit's, later by at most the return (an `at` of the history is the
/// transaction's start, earlier than its commit by the whole transaction).
#[derive(Clone, Default)]
struct Probes(Arc<std::sync::Mutex<HashMap<Uuid, Instant>>>);

impl Probes {
    /// Enqueues a probe every [`PROBE_EVERY`] until the task is aborted.
    fn start(&self, engine: Engine) -> tokio::task::JoinHandle<()> {
        let committed = self.0.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_EVERY);
            loop {
                tick.tick().await;
                let id = engine
                    .enqueue(TENANT, NewJob::new("http-probe", "probe", json!({})))
                    .await
                    .expect("enqueue a probe")
                    .job
                    .id;
                committed.lock().unwrap().insert(id, Instant::now());
            }
        })
    }
}

/// [`READERS`] open `GET /v1/events` streams of the bench tenant (every
/// event), each noting when each probe's `enqueued` reached it and
/// counting the `succeeded` events of `http-e2e`.
struct Readers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// (probe, when a reader had it), one per reader and probe.
    seen: tokio::sync::mpsc::UnboundedReceiver<(Uuid, Instant)>,
    /// `succeeded` events of `http-e2e` the readers have had, all told.
    succeeded: Arc<AtomicUsize>,
}

impl Readers {
    /// Opens the streams and returns once each has shown an event
    /// committed after it connected (a job of its own queue).
    async fn attach(client: &HttpClient, engine: &Engine) -> Readers {
        let (seen_tx, seen) = tokio::sync::mpsc::unbounded_channel();
        let (up_tx, mut up) = tokio::sync::mpsc::unbounded_channel();
        let succeeded = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..READERS {
            let mut stream = client.stream_events(&tether_client::StreamFilter::default());
            let (seen_tx, up_tx, succeeded) = (seen_tx.clone(), up_tx.clone(), succeeded.clone());
            tasks.push(tokio::spawn(async move {
                let mut connected = false;
                loop {
                    let item = stream.next().await.expect("event stream");
                    let at = Instant::now();
                    let tether_client::StreamItem::Event(e) = item else {
                        panic!("a gap in the bench's event stream: {item:?}");
                    };
                    if !connected {
                        connected = true;
                        let _ = up_tx.send(());
                    }
                    if e.queue == "http-probe" {
                        let _ = seen_tx.send((e.job_id, at));
                    } else if e.queue == "http-e2e" && e.event == "succeeded" {
                        succeeded.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        // Each stream starts where the server's reader stands when it
        // connects: jobs of another queue until every reader shows one.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ready = 0;
        while ready < READERS {
            assert!(
                Instant::now() < deadline,
                "{ready} of {READERS} event streams connected in 60 s"
            );
            engine
                .enqueue(TENANT, NewJob::new("http-readers", "marker", json!({})))
                .await
                .expect("enqueue");
            while let Ok(Some(())) =
                tokio::time::timeout(Duration::from_millis(100), up.recv()).await
            {
                ready += 1;
            }
        }
        Readers {
            tasks,
            seen,
            succeeded,
        }
    }

    /// Waits (up to a minute) for every reader to have had the `n` jobs'
    /// `succeeded` events and every probe, closes the streams and answers
    /// each probe's commit → a reader had it.
    async fn detach(mut self, n: usize, probes: &Probes) -> Vec<Duration> {
        let committed = probes.0.lock().unwrap().clone();
        let mut lags = Vec::with_capacity(committed.len() * READERS);
        let deadline = Instant::now() + Duration::from_secs(60);
        while lags.len() < committed.len() * READERS
            || self.succeeded.load(Ordering::Relaxed) < n * READERS
        {
            assert!(
                Instant::now() < deadline,
                "within a minute of the run the readers had {} of {} probes and {} of {} succeeded events",
                lags.len(),
                committed.len() * READERS,
                self.succeeded.load(Ordering::Relaxed),
                n * READERS
            );
            match tokio::time::timeout(Duration::from_millis(100), self.seen.recv()).await {
                Ok(Some((id, at))) => {
                    if let Some(c) = committed.get(&id) {
                        lags.push(at.saturating_duration_since(*c));
                    }
                }
                Ok(None) => unreachable!("the readers hold the sender"),
                Err(_) => {}
            }
        }
        for task in self.tasks {
            task.abort();
        }
        lags
    }
}

/// Jobs enqueued one at a time while a `GET /v1/jobs/{id}?wait_ms=` waits
/// for each; each sample is the completion's request sent → the waiting
/// read answered (an upper bound of commit → answer).
async fn wait_result(client: &HttpClient, engine: &Engine, n: usize) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    let opts = ClaimOptions::new("http-wait");
    for _ in 0..n {
        let id = engine
            .enqueue(TENANT, NewJob::new("http-wait", "noop", json!({})))
            .await
            .expect("enqueue")
            .job
            .id;
        let waiting = {
            let client = client.clone();
            tokio::spawn(async move {
                let job = client
                    .wait_job(id, Duration::from_secs(60))
                    .await
                    .expect("wait");
                (job.state, Instant::now())
            })
        };
        let claimed = client.claim("http-wait", &opts).await.expect("claim");
        assert_eq!(claimed.len(), 1, "the job just enqueued is claimed");
        // Let the waiting read reach the server and wait there.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let sent = Instant::now();
        client
            .complete_batch(&[claimed[0].success()])
            .await
            .expect("complete");
        let (state, answered) = waiting.await.expect("waiting read");
        assert_eq!(state, tether_core::JobState::Succeeded);
        samples.push(answered.saturating_duration_since(sent));
    }
    samples
}
