//! A tour of tether's engine on an embedded SQLite file: enqueue, claim,
//! complete, retry with backoff, dead-letter, replay, and the history that
//! answers "what happened to job X?".
//!
//! ```text
//! cargo run --release -p tether-sqlite --example tour [path/to/file.db]
//! ```

use std::sync::Arc;

use serde_json::json;
use tether_core::{
    Backoff, ClaimRequest, Engine, Failure, JobFilter, JobState, NewJob, QueueConfigPatch,
};
use tether_sqlite::SqliteStore;

const TENANT: &str = "default";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tether-data/tour.db".to_owned());
    if let Some(dir) = std::path::Path::new(&path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let engine = Engine::new(Arc::new(SqliteStore::open(&path).await?));
    println!("tether tour on SQLite file {path}\n");

    // Retries come back after 200 ms, 400 ms, ... (times a jitter in [1, 1.5)).
    engine
        .configure_queue(
            TENANT,
            "emails",
            &QueueConfigPatch {
                max_attempts: Some(3),
                backoff: Some(Backoff {
                    base_ms: 200,
                    cap_ms: 2_000,
                }),
                ..Default::default()
            },
        )
        .await?;

    let welcome = engine
        .enqueue(
            TENANT,
            NewJob::new("emails", "send_welcome", json!({"to": "ada@example.com"}))
                .idempotency_key(format!("welcome:{}", std::process::id())),
        )
        .await?;
    let again = engine
        .enqueue(
            TENANT,
            NewJob::new("emails", "send_welcome", json!({"to": "ada@example.com"}))
                .idempotency_key(format!("welcome:{}", std::process::id())),
        )
        .await?;
    println!(
        "enqueued {} (created: {}); the same idempotency key again returns it (created: {})",
        welcome.job.id, welcome.created, again.created
    );
    let flaky = engine
        .enqueue(
            TENANT,
            NewJob::new("emails", "send_invoice", json!({"invoice": 42})),
        )
        .await?
        .job;
    println!(
        "enqueued {} (an invoice whose mail server keeps failing)\n",
        flaky.id
    );

    // A worker loop, by hand: claim, run, report.
    let request = ClaimRequest {
        queue: "emails".into(),
        worker_id: "tour-worker".into(),
        limit: 10,
        lease_ttl_ms: Some(5_000),
    };
    let mut idle_rounds = 0;
    while idle_rounds < 30 {
        let claimed = engine.claim(TENANT, &request).await?;
        if claimed.is_empty() {
            let queued = engine.queue_stats(TENANT, "emails").await?.counts.queued;
            if queued == 0 {
                break;
            }
            idle_rounds += 1;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        for c in claimed {
            let job = &c.job;
            if job.kind == "send_invoice" {
                let failed = engine
                    .fail(
                        TENANT,
                        job.id,
                        c.lease_token,
                        Failure {
                            error: format!("SMTP 451: try again later (attempt {})", job.attempt),
                            ..Failure::default()
                        },
                    )
                    .await?;
                println!(
                    "attempt {} of {} failed -> {}",
                    job.attempt, job.max_attempts, failed.state
                );
            } else {
                engine
                    .complete(TENANT, job.id, c.lease_token, Some(json!({"sent": true})))
                    .await?;
                println!("{} {} succeeded", job.kind, job.id);
            }
        }
    }

    let dead = engine
        .list(
            TENANT,
            &JobFilter {
                queue: Some("emails".into()),
                state: Some(JobState::Failed),
                ..JobFilter::default()
            },
        )
        .await?;
    println!(
        "\ndead-letter queue of 'emails': {} job(s)",
        dead.jobs.len()
    );
    let replayed = engine.replay(TENANT, flaky.id).await?;
    println!(
        "replayed {}: {} with attempt {} (same id, fresh budget)",
        replayed.id, replayed.state, replayed.attempt
    );
    engine.cancel(TENANT, flaky.id).await?;

    println!("\nwhat happened to job {}?", flaky.id);
    for event in engine.events(TENANT, flaky.id).await? {
        println!(
            "  {}  {:<16} attempt {}  {}",
            event.at.format("%H:%M:%S%.3f"),
            event.event.as_str(),
            event.attempt,
            event.detail.unwrap_or_default()
        );
    }
    let stats = engine.queue_stats(TENANT, "emails").await?;
    println!(
        "\nqueue 'emails': {} succeeded, {} failed, {} cancelled, {} queued",
        stats.counts.succeeded, stats.counts.failed, stats.counts.cancelled, stats.counts.queued
    );
    Ok(())
}
