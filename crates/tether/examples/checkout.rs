//! A graph of typed jobs: charge the card, then send the receipt with the
//! charge's id, and no receipt if the charge fails. The README's Rust
//! graph example is this file from its first `use`, and a test runs it.
//!
//! ```text
//! cargo run -p tether --example checkout                                # SQLite file
//! cargo run -p tether --example checkout -- postgres://postgres@127.0.0.1/postgres
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tether::{Client, JobArgs, JobError, NewJob};

#[derive(Serialize, Deserialize)]
struct Charge {
    order: u64,
}
impl JobArgs for Charge {
    const KIND: &'static str = "charge";
    const QUEUE: &'static str = "orders";
}

#[derive(Serialize, Deserialize)]
struct Receipt {
    order: u64,
}
impl JobArgs for Receipt {
    const KIND: &'static str = "receipt";
    const QUEUE: &'static str = "orders";
}

/// What a charge returns, and its receipt reads.
#[derive(Serialize, Deserialize)]
struct Charged {
    charge_id: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // "postgres://..." in production; a file path for an embedded SQLite
    // store of this program's own (`tether serve` keeps its in tether-data).
    let url = std::env::args().nth(1);
    let sent = checkout(url.as_deref().unwrap_or("app-jobs.db"), 42).await?;
    println!("{sent}"); // receipt for order 42 (charge ch_42)
    Ok(())
}

/// Enqueues the two jobs as one graph, runs them, and answers the receipt.
pub async fn checkout(url: &str, order: u64) -> Result<String, Box<dyn std::error::Error>> {
    let client = Client::connect(url).await?;
    // One batch, all or nothing: entry 1 waits for entry 0.
    let jobs = client
        .enqueue_many(&[
            NewJob::for_args(&Charge { order })?,
            NewJob::for_args(&Receipt { order })?.after_entry(0),
        ])
        .await?;
    let (charge, receipt) = (jobs[0].job.id, jobs[1].job.id);

    let worker = client
        .worker()
        .queue("orders", 4)
        .job(|c: Charge, _ctx| async move {
            Ok::<_, JobError>(Charged {
                charge_id: format!("ch_{}", c.order),
            })
        })
        .job(move |r: Receipt, ctx| async move {
            // The parent's result, typed.
            let charged: Charged = ctx
                .dependency_result(charge)
                .await?
                .ok_or_else(|| JobError::Fatal("the charge returned nothing".into()))?;
            Ok::<_, JobError>(format!(
                "receipt for order {} (charge {})",
                r.order, charged.charge_id
            ))
        })
        .build()?
        .start();

    let done = loop {
        let job = client.engine().get(client.tenant(), receipt).await?;
        if job.state.is_terminal() {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    worker.shutdown();
    worker.join().await;
    Ok(serde_json::from_value(done.result.unwrap_or_default())?)
}
