//! Upgrading a database from before dependencies (PostgreSQL 12, SQLite
//! 10), on both backends: the jobs that were there read as before (no
//! dependencies, rule `cancel`), and new jobs can wait for them, a running
//! one included, whose report then releases them.

use serde_json::json;
use tether_conformance::TestDb;
use tether_core::{ClaimRequest, DependencyFailure, EventKind, JobState, LeaseToken, NewJob};
use uuid::Uuid;

const QUEUED: &str = "0190b000-0000-7000-8000-000000000001";
const RUNNING: &str = "0190b000-0000-7000-8000-000000000002";
const TOKEN: &str = "4a1c1a9e-0b6e-4b52-9d8a-2f0c7a1e0b02";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            updated_at, worker_id, lease_token, lease_ttl_ms, lease_expires_at)
        VALUES
            ('{QUEUED}', 'default', 'q', 'k', '{{\"n\": 1}}', 'queued', 0, 5, 1000, 3600000,
             now(), now(), NULL, now(), NULL, NULL, NULL, NULL),
            ('{RUNNING}', 'default', 'q', 'k', 'null', 'running', 1, 5, 1000, 3600000,
             now(), now(), now(), now(), 'w', '{TOKEN}', 30000, now() + interval '1 hour');"
    )
}

fn sqlite_seed() -> String {
    let now = chrono::Utc::now().timestamp_millis();
    let later = now + 3_600_000;
    format!(
        "INSERT INTO tether_queues (tenant, name, created_at, updated_at)
            VALUES ('default', 'q', {now}, {now});
        INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            updated_at, worker_id, lease_token, lease_ttl_ms, lease_expires_at)
        VALUES
            ('{QUEUED}', 'default', 'q', 'k', '{{\"n\":1}}', 'queued', 0, 5, 1000, 3600000,
             {now}, {now}, NULL, {now}, NULL, NULL, NULL, NULL),
            ('{RUNNING}', 'default', 'q', 'k', 'null', 'running', 1, 5, 1000, 3600000,
             {now}, {now}, {now}, {now}, 'w', '{TOKEN}', 30000, {later});"
    )
}

fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("a uuid")
}

async fn old_jobs_read_as_before_and_can_be_waited_for(db: TestDb) {
    let (e, t) = (&db.engine, "default");
    let queued = e.get(t, id(QUEUED)).await.expect("get");
    assert_eq!(queued.state, JobState::Queued);
    assert_eq!(queued.payload, json!({"n": 1}));
    assert!(queued.depends_on.is_empty());
    assert_eq!(queued.dependency_failure, DependencyFailure::Cancel);

    let new = |deps: &[&str]| {
        deps.iter()
            .fold(NewJob::new("q", "k", json!(null)), |j, d| j.after(id(d)))
    };
    let both = e
        .enqueue(t, new(&[QUEUED, RUNNING]))
        .await
        .expect("enqueue")
        .job;
    assert_eq!(both.state, JobState::Waiting);

    // The job that was running through the upgrade ends by its old token.
    e.complete(t, id(RUNNING), LeaseToken(id(TOKEN)), None)
        .await
        .expect("complete");
    assert_eq!(
        e.get(t, both.id).await.expect("get").state,
        JobState::Waiting
    );
    let claimed = e
        .claim(
            t,
            &ClaimRequest {
                queue: "q".into(),
                worker_id: "w".into(),
                limit: 1,
                lease_ttl_ms: None,
            },
        )
        .await
        .expect("claim");
    assert_eq!(claimed[0].job.id, id(QUEUED));
    e.complete(t, id(QUEUED), claimed[0].lease_token, None)
        .await
        .expect("complete");
    assert_eq!(
        e.get(t, both.id).await.expect("get").state,
        JobState::Queued
    );
    let events: Vec<EventKind> = e
        .events(t, both.id)
        .await
        .expect("events")
        .into_iter()
        .map(|ev| ev.event)
        .collect();
    assert_eq!(events, vec![EventKind::Enqueued, EventKind::Released]);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_12_waits_for_old_jobs() {
    old_jobs_read_as_before_and_can_be_waited_for(
        tether_conformance::postgres_upgraded_from(12, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_10_waits_for_old_jobs() {
    old_jobs_read_as_before_and_can_be_waited_for(
        tether_conformance::sqlite_upgraded_from(10, &sqlite_seed()).await,
    )
    .await;
}
