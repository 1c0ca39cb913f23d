//! Upgrading a database from before the outcome-only history index
//! (PostgreSQL 11, SQLite 9), on both backends: the index on every
//! event's time gives way to one on outcome events only, and a queue's
//! per-minute throughput counts the same outcomes, those from before the
//! upgrade and those after it.

use chrono::Utc;
use tether_conformance::TestDb;
use tether_core::{ClaimRequest, NewJob};

const JOB: &str = "0190b000-0000-7000-8000-000000000001";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, result, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            finished_at, updated_at, worker_id)
        VALUES ('{JOB}', 'default', 'q', 'k', 'null', 'null', 'succeeded', 2, 5, 1000, 3600000,
            now(), now(), now(), now(), now(), 'w');
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id) VALUES
            ('{JOB}', 'default', now(), 'enqueued', 0, NULL),
            ('{JOB}', 'default', now(), 'claimed', 1, 'w'),
            ('{JOB}', 'default', now(), 'retry_scheduled', 1, 'w'),
            ('{JOB}', 'default', now(), 'claimed', 2, 'w'),
            ('{JOB}', 'default', now(), 'succeeded', 2, 'w');"
    )
}

fn sqlite_seed() -> String {
    let now = Utc::now().timestamp_millis();
    format!(
        "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, result, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            finished_at, updated_at, worker_id)
        VALUES ('{JOB}', 'default', 'q', 'k', 'null', 'null', 'succeeded', 2, 5, 1000, 3600000,
            {now}, {now}, {now}, {now}, {now}, 'w');
        INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id) VALUES
            ('{JOB}', 'default', {now}, 'enqueued', 0, NULL),
            ('{JOB}', 'default', {now}, 'claimed', 1, 'w'),
            ('{JOB}', 'default', {now}, 'retry_scheduled', 1, 'w'),
            ('{JOB}', 'default', {now}, 'claimed', 2, 'w'),
            ('{JOB}', 'default', {now}, 'succeeded', 2, 'w');"
    )
}

/// (succeeded, retried) over the queue's last five minutes.
async fn outcomes(db: &TestDb) -> (u64, u64) {
    let t = db
        .engine
        .throughput("default", "q", 5)
        .await
        .expect("throughput");
    t.minutes
        .iter()
        .fold((0, 0), |(s, r), m| (s + m.succeeded, r + m.retried))
}

/// The outcomes from before the upgrade count, and so do the ones after.
async fn outcomes_count_across_the_upgrade(db: &TestDb) {
    assert_eq!(outcomes(db).await, (1, 1), "the outcomes from before");
    let e = &db.engine;
    e.enqueue("default", NewJob::new("q", "k", serde_json::json!({})))
        .await
        .expect("enqueue");
    let req = ClaimRequest {
        queue: "q".into(),
        worker_id: "w".into(),
        limit: 1,
        lease_ttl_ms: None,
    };
    let claimed = e.claim("default", &req).await.expect("claim");
    let c = claimed.first().expect("a job");
    e.complete("default", c.job.id, c.lease_token, None)
        .await
        .expect("complete");
    assert_eq!(outcomes(db).await, (2, 1), "and the one after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_11_upgrades() {
    let db = tether_conformance::postgres_upgraded_from(11, &pg_seed()).await;
    let pool = sqlx::PgPool::connect(&db.postgres_url().expect("a postgres url"))
        .await
        .expect("connect");
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
         WHERE schemaname = 'tether' AND tablename = 'job_events' AND indexname LIKE '%\\_at'",
    )
    .fetch_all(&pool)
    .await
    .expect("indexes");
    pool.close().await;
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    assert_eq!(indexes[0].0, "job_events_outcome_at");
    assert!(indexes[0].1.contains("WHERE"), "{indexes:?}");
    outcomes_count_across_the_upgrade(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_9_upgrades() {
    let db = tether_conformance::sqlite_upgraded_from(9, &sqlite_seed()).await;
    let path = db.sqlite_path().expect("a sqlite file");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open");
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, sql FROM sqlite_master
         WHERE type = 'index' AND tbl_name = 'tether_job_events' AND name LIKE '%\\_at' ESCAPE '\\'",
    )
    .fetch_all(&pool)
    .await
    .expect("indexes");
    pool.close().await;
    assert_eq!(indexes.len(), 1, "{indexes:?}");
    assert_eq!(indexes[0].0, "tether_job_events_outcome_at");
    assert!(indexes[0].1.contains("WHERE"), "{indexes:?}");
    outcomes_count_across_the_upgrade(&db).await;
}
