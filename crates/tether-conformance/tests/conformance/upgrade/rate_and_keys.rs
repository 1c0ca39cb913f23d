//! Upgrading a database that the first part of flow control left behind
//! (PostgreSQL 6, SQLite 5): a queue keeps its `max_running` and gains no
//! rate limit, key limit or fairness; a job queued before the upgrade has
//! no concurrency key and is claimed as before; the new settings can then
//! be set and hold.

use tether_conformance::TestDb;
use tether_core::{ClaimRequest, NewJob, QueueConfigPatch, RateLimit};

const PG_SEED: &str = "INSERT INTO tether.queues (tenant, name, paused, max_running)
        VALUES ('default', 'mail', false, 3);
    INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, max_attempts,
        backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
    VALUES ('0190a000-0000-7000-8000-000000000001', 'default', 'mail', 'k', 'null', 'queued',
        5, 1000, 3600000, now(), now(), now());";
const SQLITE_SEED: &str = "INSERT INTO tether_queues (tenant, name, paused, max_attempts,
        backoff_base_ms, backoff_cap_ms, default_lease_ttl_ms, max_running, created_at, updated_at)
    VALUES ('default', 'mail', 0, 5, 1000, 3600000, 30000, 3, 0, 0);
    INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, max_attempts,
        backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
    VALUES ('0190a000-0000-7000-8000-000000000001', 'default', 'mail', 'k', 'null', 'queued',
        5, 1000, 3600000, 0, 0, 0);";

async fn keeps_max_running_and_gains_the_rest(db: TestDb) {
    let engine = &db.engine;
    let q = engine.queue_stats("default", "mail").await.expect("stats");
    assert_eq!(q.limits.max_running, Some(3), "the old limit stays");
    assert_eq!(
        (q.limits.rate_limit, q.limits.key_max_running, q.limits.fair),
        (None, None, false)
    );
    let patch = QueueConfigPatch {
        key_max_running: Some(Some(1)),
        rate_limit: Some(Some(RateLimit {
            count: 100,
            period_ms: 60_000,
        })),
        ..Default::default()
    };
    engine
        .configure_queue("default", "mail", &patch)
        .await
        .expect("configure");
    for key in ["a", "a", "b"] {
        engine
            .enqueue(
                "default",
                NewJob::new("mail", "k", serde_json::Value::Null).concurrency_key(key),
            )
            .await
            .expect("enqueue");
    }
    let req = ClaimRequest {
        queue: "mail".into(),
        worker_id: "w".into(),
        limit: 10,
        lease_ttl_ms: None,
    };
    let claimed = engine.claim("default", &req).await.expect("claim");
    let mut keys: Vec<_> = claimed
        .iter()
        .map(|c| c.job.concurrency_key.clone())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![None, Some("a".to_owned()), Some("b".to_owned())],
        "the old job (no key), one a and one b"
    );
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_6_gains_rate_and_key_limits() {
    keeps_max_running_and_gains_the_rest(
        tether_conformance::postgres_upgraded_from(6, PG_SEED).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_5_gains_rate_and_key_limits() {
    keeps_max_running_and_gains_the_rest(
        tether_conformance::sqlite_upgraded_from(5, SQLITE_SEED).await,
    )
    .await;
}
