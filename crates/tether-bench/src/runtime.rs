//! Figures through the worker runtime: end-to-end throughput with no-op
//! handlers, and pickup latency (enqueue → handler start) with idle workers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tether_core::{Engine, NewJob};
use tether_worker::Worker;

use crate::workload::{enqueue_batches, rate, TENANT};

/// Handler slots of the throughput worker: enough that claims come in
/// batches of about a hundred, like the library-mode figure it is compared to.
const E2E_CONCURRENCY: usize = 256;

/// Runs `n` already-enqueued no-op jobs of `queue` through one worker and
/// returns jobs per second (until the last one succeeded).
pub async fn e2e(engine: &Engine, pool: &sqlx::PgPool, queue: &str, n: usize) -> f64 {
    enqueue_batches(engine, queue, n, 2).await;
    // As the end-to-end figures and the physical limit start.
    crate::pg::vacuum(pool).await;
    let started = Instant::now();
    let handle = Worker::builder(engine.clone())
        .tenant(TENANT)
        .queue(queue, E2E_CONCURRENCY)
        .handler("noop", |_ctx| async move { Ok(None) })
        .maintenance(false)
        .poll_interval(Duration::from_millis(20))
        .build()
        .expect("worker configuration")
        .start();
    while crate::workload::unfinished(pool, queue).await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    handle.shutdown();
    handle.join().await;
    let stats = engine.queue_stats(TENANT, queue).await.expect("stats");
    assert_eq!(stats.counts.succeeded as usize, n, "every job succeeded");
    rate(n as u64, elapsed)
}

/// Enqueues `n` jobs through `producer` at about `per_second`, while an idle
/// worker on `consumer` runs them; returns (p50, p99) of the time from the
/// enqueue call returning to the handler starting, in milliseconds.
pub async fn pickup(
    producer: &Engine,
    consumer: &Engine,
    queue: &str,
    n: usize,
    per_second: u64,
) -> (f64, f64) {
    let starts: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let seen = starts.clone();
    let handle = Worker::builder(consumer.clone())
        .tenant(TENANT)
        .queue(queue, 16)
        .handler("probe", move |ctx| {
            let seen = seen.clone();
            async move {
                let now = Instant::now();
                if let Some(i) = ctx.job().payload["i"].as_u64() {
                    seen.lock().expect("lock").insert(i, now);
                }
                Ok(None)
            }
        })
        .maintenance(false)
        // Far longer than any pickup: a job found by polling would show.
        .poll_interval(Duration::from_secs(5))
        .build()
        .expect("worker configuration")
        .start();
    // Let the worker subscribe (and its listener connect) before timing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let gap = Duration::from_micros(1_000_000 / per_second);
    let mut enqueued = HashMap::new();
    for i in 0..n as u64 {
        producer
            .enqueue(TENANT, NewJob::new(queue, "probe", json!({ "i": i })))
            .await
            .expect("enqueue");
        enqueued.insert(i, Instant::now());
        tokio::time::sleep(gap).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while starts.lock().expect("lock").len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.shutdown();
    handle.join().await;
    let starts = starts.lock().expect("lock");
    assert_eq!(starts.len(), n, "every probe job ran");
    let mut ms: Vec<f64> = enqueued
        .iter()
        .map(|(i, at)| starts[i].saturating_duration_since(*at).as_secs_f64() * 1_000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    (pct(0.50), pct(0.99))
}
