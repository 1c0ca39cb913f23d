//! Upgrading a database that the schema before flow control left behind
//! (PostgreSQL 5, SQLite 4): a configured queue keeps its settings and gains
//! no limit, its jobs still claim as before, and the limit can then be set.

use tether_conformance::TestDb;
use tether_core::{ClaimRequest, NewJob, QueueConfigPatch};

const PG_SEED: &str = "INSERT INTO tether.queues (tenant, name, paused, max_attempts)
    VALUES ('default', 'mail', false, 9);";
const SQLITE_SEED: &str = "INSERT INTO tether_queues (tenant, name, paused, max_attempts,
    backoff_base_ms, backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at)
    VALUES ('default', 'mail', 0, 9, 1000, 3600000, 30000, 0, 0);";

async fn keeps_settings_and_gains_no_limit(db: TestDb) {
    let engine = &db.engine;
    let q = engine.queue_stats("default", "mail").await.expect("stats");
    assert_eq!(q.config.max_attempts, 9, "the old setting stays");
    assert_eq!(q.limits.max_running, None, "no limit after the upgrade");
    for _ in 0..3 {
        engine
            .enqueue("default", NewJob::new("mail", "k", serde_json::Value::Null))
            .await
            .expect("enqueue");
    }
    let req = ClaimRequest {
        queue: "mail".into(),
        worker_id: "w".into(),
        limit: 2,
        lease_ttl_ms: None,
    };
    assert_eq!(engine.claim("default", &req).await.expect("claim").len(), 2);
    let limit = QueueConfigPatch {
        max_running: Some(Some(2)),
        ..Default::default()
    };
    let q = engine
        .configure_queue("default", "mail", &limit)
        .await
        .expect("configure");
    assert_eq!((q.limits.max_running, q.config.max_attempts), (Some(2), 9));
    assert!(engine
        .claim("default", &req)
        .await
        .expect("claim")
        .is_empty());
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_5_gains_flow_control() {
    keeps_settings_and_gains_no_limit(tether_conformance::postgres_upgraded_from(5, PG_SEED).await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_4_gains_flow_control() {
    keeps_settings_and_gains_no_limit(
        tether_conformance::sqlite_upgraded_from(4, SQLITE_SEED).await,
    )
    .await;
}
