//! PostgreSQL only: a wake-up hint crosses processes (two stores with their
//! own pools stand in for two processes). SQLite hints are in-process by
//! design; its workers find other processes' jobs by polling.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::{Engine, NewJob};
use tether_postgres::PgStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_in_one_process_wakes_a_worker_in_another() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let other = Engine::new(Arc::new(
        PgStore::connect(&url).await.expect("second store"),
    ));
    let mut wakeup = other.subscribe("t", "q");
    // Let the listener connect (it wakes everyone once when it does).
    let _ = tokio::time::timeout(Duration::from_secs(2), wakeup.hinted()).await;

    for round in 0..3 {
        db.engine
            .enqueue("t", NewJob::new("q", "k", json!({ "round": round })))
            .await
            .expect("enqueue");
        tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no hint crossed to the other store"));
    }
    drop(other);
    db.cleanup().await;
}
