//! Workloads that run through tether's public API, on any backend.

use std::time::{Duration, Instant};

use serde_json::json;
use tether_core::{CarriedReports, ClaimRequest, ClaimedJob, Completion, Engine, NewJob};

/// Tenant every benchmark job belongs to.
pub const TENANT: &str = "bench";

/// Enqueues `n` no-op jobs on `queue` in batches of 1 000 from `tasks`
/// concurrent tasks; returns the elapsed time.
pub async fn enqueue_batches(engine: &Engine, queue: &str, n: usize, tasks: usize) -> Duration {
    enqueue_keyed(engine, queue, n, tasks, 0).await
}

/// As [`enqueue_batches`], the jobs' concurrency keys taking `keys` values
/// in turn (0: no key).
pub async fn enqueue_keyed(
    engine: &Engine,
    queue: &str,
    n: usize,
    tasks: usize,
    keys: usize,
) -> Duration {
    let queue = queue.to_owned();
    enqueue_made(engine, n, tasks, move |i| {
        let job = NewJob::new(&queue, "noop", json!({ "i": i }));
        match keys {
            0 => job,
            k => job.concurrency_key(format!("key-{}", i % k)),
        }
    })
    .await
}

/// Enqueues `n` jobs made by `make` (from the job's index within its
/// batch) in batches of 1 000, from `tasks` concurrent tasks.
pub async fn enqueue_made(
    engine: &Engine,
    n: usize,
    tasks: usize,
    make: impl Fn(usize) -> NewJob + Clone + Send + 'static,
) -> Duration {
    let started = Instant::now();
    let per_task = n.div_ceil(tasks);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let engine = engine.clone();
        let make = make.clone();
        let count = per_task.min(n.saturating_sub(t * per_task));
        handles.push(tokio::spawn(async move {
            let mut left = count;
            while left > 0 {
                let size = left.min(1_000);
                let jobs: Vec<NewJob> = (0..size).map(&make).collect();
                engine
                    .enqueue_many(TENANT, &jobs)
                    .await
                    .expect("enqueue batch");
                left -= size;
            }
        }));
    }
    for h in handles {
        h.await.expect("enqueue task");
    }
    started.elapsed()
}

/// Enqueues `n` jobs one per call with `tasks` calls in flight.
pub async fn enqueue_singles(engine: &Engine, queue: &str, n: usize, tasks: usize) -> Duration {
    let started = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let engine = engine.clone();
        let queue = queue.to_owned();
        let count = n / tasks + usize::from(t < n % tasks);
        handles.push(tokio::spawn(async move {
            for i in 0..count {
                engine
                    .enqueue(
                        TENANT,
                        NewJob::new(queue.as_str(), "noop", json!({ "i": i })),
                    )
                    .await
                    .expect("enqueue");
            }
        }));
    }
    for h in handles {
        h.await.expect("enqueue task");
    }
    started.elapsed()
}

/// `claimers` tasks each claim `batch` jobs and complete them with the next
/// claim (which carries them, as workers do), until the queue is empty.
/// Returns (jobs done, elapsed).
pub async fn claim_complete(
    engine: &Engine,
    queue: &str,
    batch: u32,
    claimers: usize,
) -> (u64, Duration) {
    concurrently(claimers, |c| {
        let engine = engine.clone();
        let req = ClaimRequest {
            queue: queue.to_owned(),
            worker_id: format!("bench-{c}"),
            limit: batch,
            lease_ttl_ms: None,
        };
        async move {
            let mut done = 0u64;
            let mut reports = CarriedReports::default();
            loop {
                let out = (engine.report_and_claim(TENANT, &req, &reports).await).expect("claim");
                for answer in out.reports {
                    answer.expect("completion accepted");
                }
                done += reports.complete.len() as u64;
                if out.jobs.is_empty() {
                    return done;
                }
                reports.complete = completions(&out.jobs);
            }
        }
    })
    .await
}

/// Runs `tasks` copies of `task` (each given its index) at once; answers
/// the sum of what they count and the time until the last one ended.
pub async fn concurrently<F, Fut>(tasks: usize, task: F) -> (u64, Duration)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = u64> + Send + 'static,
{
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks).map(|i| tokio::spawn(task(i))).collect();
    let mut total = 0;
    for h in handles {
        total += h.await.expect("benchmark task");
    }
    (total, started.elapsed())
}

/// A success with no result for each claimed job.
pub fn completions(claimed: &[ClaimedJob]) -> Vec<Completion> {
    claimed.iter().map(ClaimedJob::success).collect()
}

/// Whether `queue` still has a queued or running job. Each state is asked
/// on its own (the partial index of each answers at once), so polling it
/// every few milliseconds costs the run it measures next to nothing; a
/// count of finished jobs would read every one of them each time.
pub async fn unfinished(pool: &sqlx::PgPool, queue: &str) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM tether.jobs WHERE tenant = $1 AND queue = $2 AND state = 'queued')
             OR EXISTS (SELECT 1 FROM tether.jobs WHERE tenant = $1 AND queue = $2 AND state = 'running')",
    )
    .bind(TENANT)
    .bind(queue)
    .fetch_one(pool)
    .await
    .expect("progress query")
}

/// Median of a set of durations, in milliseconds.
pub fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map(|d| d.as_secs_f64() * 1_000.0)
        .unwrap_or(f64::NAN)
}

/// Jobs per second.
pub fn rate(jobs: u64, elapsed: Duration) -> f64 {
    jobs as f64 / elapsed.as_secs_f64()
}
