//! Flow control's figure of its own: how exactly a rate limit hands out
//! jobs. (The cost of limits in the claim is in the end-to-end group, beside
//! the unlimited figure it is divided by, and the fair claim's latency in
//! the latency group.)

use std::time::{Duration, Instant};

use sqlx::PgPool;
use tether_core::{ClaimRequest, Engine, QueueConfigPatch, RateLimit};

use crate::pg::{fill_queue, reset, vacuum};
use crate::report::Report;
use crate::workload::TENANT;

/// Jobs per second the rate limit allows.
const PER_SECOND: usize = 200;
/// Claimers racing for the window.
const CLAIMERS: usize = 8;

/// `rate_limit_accuracy`: with a full backlog and eight claimers that keep
/// asking (each waits for a wake-up hint when a claim comes back empty),
/// the jobs handed out in `seconds` divided by what the limit allows in
/// that time. 1.0 is exact; above it the limit leaked, below it the window
/// was left unused.
pub async fn run(engine: &Engine, pool: &PgPool, seconds: u64, report: &mut Report) {
    reset(pool).await;
    let allowed = PER_SECOND * seconds as usize;
    fill_queue(pool, "rated", allowed + 2_000).await;
    let rate = QueueConfigPatch {
        rate_limit: Some(Some(RateLimit {
            count: PER_SECOND as i32,
            period_ms: 1_000,
        })),
        ..Default::default()
    };
    engine
        .configure_queue(TENANT, "rated", &rate)
        .await
        .expect("rate limit");
    vacuum(pool).await;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let claimers = (0..CLAIMERS).map(|i| {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut wakeup = engine.subscribe(TENANT, "rated").expect("subscribe");
            let req = ClaimRequest {
                queue: "rated".into(),
                worker_id: format!("rated-{i}"),
                limit: 50,
                lease_ttl_ms: None,
            };
            let mut handed_out = 0;
            while Instant::now() < deadline {
                let jobs = engine.claim(TENANT, &req).await.expect("claim");
                if Instant::now() >= deadline {
                    // Claimed after the measured interval: not counted.
                    break;
                }
                if jobs.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_millis(100), wakeup.hinted()).await;
                    continue;
                }
                handed_out += jobs.len();
                let done: Vec<_> = jobs.iter().map(|c| c.success()).collect();
                engine.complete_many(TENANT, &done).await.expect("complete");
            }
            handed_out
        })
    });
    let mut handed_out = 0;
    for c in futures_util::future::join_all(claimers).await {
        handed_out += c.expect("claimer");
    }
    report.add(
        "rate_limit_accuracy",
        handed_out as f64 / allowed as f64,
        "ratio",
        format!(
            "jobs handed out in {seconds} s at {PER_SECOND}/s, full backlog, {CLAIMERS} claimers, \
             / {allowed} (bar 0.95..1.0)"
        ),
    );
}
