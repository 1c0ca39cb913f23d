//! The embedded SQLite figures.

use std::sync::Arc;

use tether_core::Engine;
use tether_sqlite::SqliteStore;

use crate::report::Report;
use crate::workload::{claim_complete, enqueue_batches, rate};
use crate::Scale;

/// Runs the SQLite figures on a fresh file in a temporary directory.
pub async fn run(scale: &Scale, report: &mut Report) {
    let dir = std::env::temp_dir().join(format!("tether-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let store = SqliteStore::open(dir.join("bench.db"))
        .await
        .expect("open SQLite");
    let engine = Engine::new(Arc::new(store));
    let (_, n) = scale.e2e[2];
    enqueue_batches(&engine, "sqlite-e2e", n, 1).await;
    let (done, elapsed) = claim_complete(&engine, "sqlite-e2e", 100, 4).await;
    assert_eq!(done, n as u64, "every job claimed once");
    report.add(
        "sqlite_e2e_b100_jobs_per_s",
        rate(done, elapsed),
        "jobs/s",
        format!("SQLite (synchronous=FULL): claim 100 + complete 100, 4 claimers, {n} jobs"),
    );
    let n = scale.pickup_jobs;
    let (_, p99) = crate::runtime::pickup(&engine, &engine, "sqlite-pickup", n, 50).await;
    report.add(
        "sqlite_pickup_p99_ms",
        p99,
        "ms",
        format!("SQLite: enqueue returned -> handler started, {n} jobs at ~50/s (bar <= 10)"),
    );
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
