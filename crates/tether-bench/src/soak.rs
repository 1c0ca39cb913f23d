//! `tether-bench --soak [--soak-jobs N]`: N jobs (default 1,000,000) through
//! the HTTP path with pruning on, to show that nothing grows without bound;
//! the default and `--quick` runs make a shorter soak (group `soak`).
//! A `tether serve` child process keeps finished jobs for the retention (30 s
//! in `--soak`); two producers enqueue batches of 1,000 while four client
//! workers claim 100 and batch-complete. Reported: server RSS and finished
//! rows over time, the most finished rows held at once against its bar
//! (twice completion rate × retention), claim latency at the start and end
//! and its growth, and the job table after pruning has caught up.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tether_client::{ClaimOptions, ClaimedJob, HttpClient};
use tether_core::{Completion, NewJob};

use crate::http::{rss_of, ServerProcess};
use crate::pg::BenchDb;
use crate::report::Report;
use crate::workload::{median_ms, TENANT};

const QUEUE: &str = "soak";
/// Retention of `--soak`.
pub const RETENTION: Duration = Duration::from_secs(30);
const WORKERS: usize = 4;
/// Counts the finished rows, the ones pruning is there to remove.
const FINISHED_ROWS: &str =
    "SELECT count(*) FROM tether.jobs WHERE state IN ('succeeded', 'failed', 'cancelled')";

/// One look at the server and the table during the run.
struct Sample {
    /// Seconds since the load started.
    secs: f64,
    rss_mib: f64,
    /// Jobs completed so far.
    done: u64,
    /// Finished rows in `tether.jobs`.
    finished: i64,
}

/// Runs the soak of `jobs` jobs, keeping finished ones for `retention`, on a
/// database of its own.
pub async fn run(admin_url: &str, jobs: u64, retention: Duration, report: &mut Report) {
    let db = BenchDb::create(admin_url, "_soak").await;
    let server = ServerProcess::start(&db.url, Some(retention));
    let tenant = db.engine.ensure_tenant(TENANT).await.expect("tenant");
    let (_, key) = db
        .engine
        .issue_api_key(tenant.id, Some("soak"), false)
        .await
        .expect("key");
    let client = HttpClient::new(&format!("http://{}", server.addr), &key).expect("client");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_start = server.rss_mib();
    let started = Instant::now();

    let enqueued = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let (client, enqueued) = (client.clone(), enqueued.clone());
            tokio::spawn(async move {
                let mut batch_no = 0u64;
                loop {
                    let first = enqueued.fetch_add(1_000, Ordering::SeqCst);
                    if first >= jobs {
                        return;
                    }
                    let size = (jobs - first).min(1_000);
                    let batch: Vec<NewJob> = (0..size)
                        .map(|i| NewJob::new(QUEUE, "noop", json!({"p": p, "b": batch_no, "i": i})))
                        .collect();
                    client.enqueue_batch(&batch).await.expect("enqueue");
                    batch_no += 1;
                }
            })
        })
        .collect();

    // Claim latency samples: (seconds since start, claim duration).
    let claims: Arc<Mutex<Vec<(f64, Duration)>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (client, done, claims) = (client.clone(), done.clone(), claims.clone());
            tokio::spawn(async move {
                let mut opts = ClaimOptions::new(format!("soak-{w}"));
                opts.limit = Some(100);
                opts.wait_ms = Some(1_000);
                while done.load(Ordering::SeqCst) < jobs {
                    let t = Instant::now();
                    let claimed = client.claim(QUEUE, &opts).await.expect("claim");
                    let took = t.elapsed();
                    if claimed.is_empty() {
                        continue;
                    }
                    claims
                        .lock()
                        .unwrap()
                        .push((started.elapsed().as_secs_f64(), took));
                    let items: Vec<Completion> = claimed.iter().map(ClaimedJob::success).collect();
                    for item in client.complete_batch(&items).await.expect("complete") {
                        item.result.expect("completion accepted");
                    }
                    done.fetch_add(items.len() as u64, Ordering::SeqCst);
                }
            })
        })
        .collect();

    // RSS and finished rows every 2 s while it runs.
    let running = Arc::new(AtomicBool::new(true));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let sampler = {
        let (running, samples, done) = (running.clone(), samples.clone(), done.clone());
        let (pid, pool) = (server.pid(), db.pool.clone());
        tokio::spawn(async move {
            while running.load(Ordering::SeqCst) {
                let finished: i64 = sqlx::query_scalar(FINISHED_ROWS)
                    .fetch_one(&pool)
                    .await
                    .expect("count finished");
                samples.lock().unwrap().push(Sample {
                    secs: started.elapsed().as_secs_f64(),
                    rss_mib: rss_of(pid),
                    done: done.load(Ordering::SeqCst),
                    finished,
                });
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        })
    };
    for p in producers {
        p.await.expect("producer");
    }
    for w in workers {
        w.await.expect("worker");
    }
    let elapsed = started.elapsed();
    running.store(false, Ordering::SeqCst);
    let _ = sampler.await;

    // Let pruning catch up: every finished job is older than the retention
    // window after it, and the leader prunes each tick.
    let deadline = Instant::now() + retention + Duration::from_secs(150);
    let rows = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM tether.jobs")
            .fetch_one(&db.pool)
            .await
            .expect("count");
        if rows == 0 || Instant::now() > deadline {
            break rows;
        }
    };
    sqlx::query("VACUUM tether.jobs")
        .execute(&db.pool)
        .await
        .expect("vacuum");
    let table_mib: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('tether.jobs')")
        .fetch_one(&db.pool)
        .await
        .expect("size");
    let rss_end = server.rss_mib();

    let samples = std::mem::take(&mut *samples.lock().unwrap());
    eprintln!("\n  soak: server RSS and finished rows over time");
    eprintln!(
        "  {:>8} {:>10} {:>12} {:>14}",
        "t (s)", "RSS (MiB)", "jobs done", "finished rows"
    );
    let step = (samples.len() / 12).max(1);
    for s in samples.iter().step_by(step) {
        eprintln!(
            "  {:>8.0} {:>10.1} {:>12} {:>14}",
            s.secs, s.rss_mib, s.done, s.finished
        );
    }
    let peak = samples.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
    let rows_peak = samples.iter().map(|s| s.finished).max().unwrap_or(0);
    let rate = jobs as f64 / elapsed.as_secs_f64();
    let claims = claims.lock().unwrap().clone();
    let tenth = (claims.len() / 10).max(1);
    let first: Vec<Duration> = claims.iter().take(tenth).map(|c| c.1).collect();
    let last: Vec<Duration> = claims.iter().rev().take(tenth).map(|c| c.1).collect();

    report.add(
        "soak_jobs_per_s",
        rate,
        "jobs/s",
        format!(
            "{jobs} jobs enqueued and completed over HTTP, pruning on ({}s)",
            retention.as_secs()
        ),
    );
    report.add(
        "soak_rss_start_mib",
        rss_start,
        "MiB",
        "tether serve RSS before the load",
    );
    report.add("soak_rss_peak_mib", peak, "MiB", "peak RSS during the soak");
    report.add(
        "soak_rss_end_mib",
        rss_end,
        "MiB",
        "RSS after the soak and pruning",
    );
    let (claim_start, claim_end) = (median_ms(first), median_ms(last));
    report.add(
        "soak_claim_ms_start",
        claim_start,
        "ms",
        "median HTTP claim of 100, first tenth of the run",
    );
    report.add(
        "soak_claim_ms_end",
        claim_end,
        "ms",
        "median HTTP claim of 100, last tenth of the run",
    );
    report.add(
        "soak_claim_growth",
        claim_end / claim_start,
        "x",
        "soak_claim_ms_end / soak_claim_ms_start (bar <= 1.5)",
    );
    report.add(
        "soak_rows_peak",
        rows_peak as f64,
        "rows",
        "most finished rows in tether.jobs at once, sampled every 2 s (bar <= soak_rows_bar)",
    );
    report.add(
        "soak_rows_bar",
        2.0 * rate * retention.as_secs_f64(),
        "rows",
        "2 x soak_jobs_per_s x retention: the bar of soak_rows_peak",
    );
    report.add(
        "soak_rows_after_prune",
        rows as f64,
        "rows",
        "rows left in tether.jobs once pruning caught up",
    );
    report.add(
        "soak_table_mib_after_prune",
        table_mib as f64 / (1024.0 * 1024.0),
        "MiB",
        "tether.jobs with indexes and TOAST after pruning and VACUUM (space kept for reuse)",
    );
    drop(server);
    db.drop_now().await;
}
