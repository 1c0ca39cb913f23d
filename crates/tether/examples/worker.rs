//! A small app on tether: typed jobs, a worker, retries with backoff, a
//! snooze, and a job that ends in the dead-letter queue.
//!
//! ```text
//! cargo run -p tether --example worker                                  # SQLite file
//! cargo run -p tether --example worker -- postgres://postgres@127.0.0.1/postgres
//! ```

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether::{Backoff, Client, JobArgs, JobError, JobFilter, JobState, NewJob, QueueConfigPatch};

#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
}
impl JobArgs for SendEmail {
    const KIND: &'static str = "send_email";
    const QUEUE: &'static str = "example";
}

/// Fails twice (the payment provider is "down"), then succeeds.
#[derive(Serialize, Deserialize)]
struct ChargeCard {
    cents: u64,
}
impl JobArgs for ChargeCard {
    const KIND: &'static str = "charge_card";
    const QUEUE: &'static str = "example";
}

/// Always fails: ends in the dead-letter queue after its attempts.
#[derive(Serialize, Deserialize)]
struct ImportFeed {
    url: String,
}
impl JobArgs for ImportFeed {
    const KIND: &'static str = "import_feed";
    const QUEUE: &'static str = "example";
}

/// Told "not now" once (a rate limit), which gives its attempt back.
#[derive(Serialize, Deserialize)]
struct CallPartnerApi {
    call: u32,
}
impl JobArgs for CallPartnerApi {
    const KIND: &'static str = "call_partner_api";
    const QUEUE: &'static str = "example";
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tether-data/example.db".to_owned());
    if !url.starts_with("postgres") {
        if let Some(dir) = std::path::Path::new(url.trim_start_matches("sqlite://")).parent() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let client = Client::connect(&url).await?.with_tenant("example")?;
    println!("tether example on {}\n", client.engine().store().backend());
    // Quick retries for the demo: 100 ms, 200 ms, ... (times a jitter).
    client
        .engine()
        .configure_queue(
            client.tenant(),
            "example",
            &QueueConfigPatch {
                max_attempts: Some(3),
                backoff: Some(Backoff {
                    base_ms: 100,
                    cap_ms: 1_000,
                }),
                ..Default::default()
            },
        )
        .await?;

    let ids = [
        client
            .enqueue_args(&SendEmail {
                to: "ada@example.com".into(),
            })
            .await?
            .job
            .id,
        client
            .enqueue_args(&ChargeCard { cents: 4_200 })
            .await?
            .job
            .id,
        client
            .enqueue(
                NewJob::for_args(&ImportFeed {
                    url: "https://feeds.example.com/broken".into(),
                })?
                .max_attempts(2),
            )
            .await?
            .job
            .id,
        client
            .enqueue_args(&CallPartnerApi { call: 1 })
            .await?
            .job
            .id,
    ];

    let charges = Arc::new(AtomicU32::new(0));
    let snoozed = Arc::new(AtomicU32::new(0));
    let worker = client
        .worker()
        .queue("example", 4)
        .poll_interval(Duration::from_millis(100))
        .job(|args: SendEmail, _ctx| async move {
            println!("  send_email: mailed {}", args.to);
            Ok::<_, JobError>(())
        })
        .job({
            let charges = charges.clone();
            move |args: ChargeCard, ctx| {
                let charges = charges.clone();
                async move {
                    if charges.fetch_add(1, Ordering::SeqCst) < 2 {
                        println!(
                            "  charge_card: attempt {} failed, will retry",
                            ctx.attempt()
                        );
                        return Err(JobError::retry("payment provider unavailable (503)"));
                    }
                    println!(
                        "  charge_card: charged {} cents on attempt {}",
                        args.cents,
                        ctx.attempt()
                    );
                    Ok(serde_json::json!({ "charged": args.cents }))
                }
            }
        })
        .job(|args: ImportFeed, ctx| async move {
            println!("  import_feed: attempt {} failed", ctx.attempt());
            Err::<(), _>(JobError::retry(format!("{} answered 404", args.url)))
        })
        .job({
            let snoozed = snoozed.clone();
            move |args: CallPartnerApi, ctx| {
                let snoozed = snoozed.clone();
                async move {
                    if snoozed.fetch_add(1, Ordering::SeqCst) == 0 {
                        println!(
                            "  call_partner_api: rate limited, snoozing 300 ms (attempt {})",
                            ctx.attempt()
                        );
                        return Err(JobError::snooze(Duration::from_millis(300)));
                    }
                    println!(
                        "  call_partner_api: call {} done on attempt {}",
                        args.call,
                        ctx.attempt()
                    );
                    Ok::<_, JobError>(())
                }
            }
        })
        .build()?;
    let handle = worker.start();

    // Wait until every job has finished, one way or the other.
    for _ in 0..200 {
        let mut done = 0;
        for id in ids {
            if client
                .engine()
                .get(client.tenant(), id)
                .await?
                .state
                .is_terminal()
            {
                done += 1;
            }
        }
        if done == ids.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown();
    handle.join().await;

    println!("\n{:<18} {:<10} {:>8}", "kind", "state", "attempts");
    for id in ids {
        let job = client.engine().get(client.tenant(), id).await?;
        println!(
            "{:<18} {:<10} {:>8}",
            job.kind,
            job.state.as_str(),
            job.attempt
        );
    }
    let dead = client
        .engine()
        .list(
            client.tenant(),
            &JobFilter {
                state: Some(JobState::Failed),
                queue: Some("example".into()),
                ..JobFilter::default()
            },
        )
        .await?;
    if let Some(job) = dead.jobs.first() {
        println!(
            "\ndead-letter queue: {} job(s); history of {}:",
            dead.jobs.len(),
            job.id
        );
        for e in client.engine().events(client.tenant(), job.id).await? {
            println!(
                "  {}  {:<16} attempt {}  {}",
                e.at.format("%H:%M:%S%.3f"),
                e.event.as_str(),
                e.attempt,
                e.detail.unwrap_or_default()
            );
        }
    }
    Ok(())
}
