//! Upgrading a database from before report digests (PostgreSQL 9, SQLite
//! 7), on both backends: a job that ended before the upgrade carries its
//! token but no digest of the report that ended it, so a report with that
//! token counts as a repeat when it can lead to the job's state (the rule
//! before the upgrade) and is a conflict otherwise; a job running through
//! the upgrade records its report's digest, and a repeat of it is told from
//! a different report exactly.

use serde_json::json;
use tether_conformance::TestDb;
use tether_core::{Error, Failure, JobState, LeaseToken};
use uuid::Uuid;

const SUCCEEDED: &str = "0190a000-0000-7000-8000-000000000001";
const RETRIED: &str = "0190a000-0000-7000-8000-000000000002";
const RUNNING: &str = "0190a000-0000-7000-8000-000000000003";
const T_SUCCEEDED: &str = "4a1c1a9e-0b6e-4b52-9d8a-2f0c7a1e0001";
const T_RETRIED: &str = "4a1c1a9e-0b6e-4b52-9d8a-2f0c7a1e0002";
const T_RUNNING: &str = "4a1c1a9e-0b6e-4b52-9d8a-2f0c7a1e0003";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.jobs (id, tenant, queue, kind, payload, result, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            finished_at, updated_at, last_error, worker_id, lease_token, lease_ttl_ms,
            lease_expires_at, heartbeat_at)
        VALUES
            ('{SUCCEEDED}', 'default', 'q', 'k', 'null', '{{\"n\": 1}}', 'succeeded', 1, 5, 1000,
             3600000, now(), now(), now(), now(), now(), NULL, 'w', '{T_SUCCEEDED}', 30000,
             NULL, now()),
            ('{RETRIED}', 'default', 'q', 'k', 'null', NULL, 'queued', 1, 5, 1000, 3600000,
             now() + interval '1 hour', now(), now(), NULL, now(), 'boom', 'w', '{T_RETRIED}',
             30000, NULL, now()),
            ('{RUNNING}', 'default', 'q', 'k', 'null', NULL, 'running', 1, 5, 1000, 3600000,
             now(), now(), now(), NULL, now(), NULL, 'w', '{T_RUNNING}', 30000,
             now() + interval '1 hour', now());"
    )
}

fn sqlite_seed() -> String {
    // Times in ms; the retried job is due in an hour, the lease lapses in one.
    let now = chrono::Utc::now().timestamp_millis();
    let later = now + 3_600_000;
    format!(
        "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, result, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at,
            finished_at, updated_at, last_error, worker_id, lease_token, lease_ttl_ms,
            lease_expires_at, heartbeat_at)
        VALUES
            ('{SUCCEEDED}', 'default', 'q', 'k', 'null', '{{\"n\":1}}', 'succeeded', 1, 5, 1000,
             3600000, {now}, {now}, {now}, {now}, {now}, NULL, 'w', '{T_SUCCEEDED}', 30000,
             NULL, {now}),
            ('{RETRIED}', 'default', 'q', 'k', 'null', NULL, 'queued', 1, 5, 1000, 3600000,
             {later}, {now}, {now}, NULL, {now}, 'boom', 'w', '{T_RETRIED}', 30000, NULL, {now}),
            ('{RUNNING}', 'default', 'q', 'k', 'null', NULL, 'running', 1, 5, 1000, 3600000,
             {now}, {now}, {now}, NULL, {now}, NULL, 'w', '{T_RUNNING}', 30000, {later}, {now});"
    )
}

fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("a uuid")
}

fn token(s: &str) -> LeaseToken {
    LeaseToken(id(s))
}

fn conflict<T: std::fmt::Debug>(r: tether_core::Result<T>) {
    match r {
        Err(Error::InvalidState { .. }) => {}
        other => panic!("expected a conflict (invalid_state), got {other:?}"),
    }
}

async fn ended_jobs_repeat_by_state_and_new_reports_exactly(db: TestDb) {
    let e = &db.engine;
    let t = "default";
    let fail = |error: &str| Failure {
        error: error.into(),
        ..Failure::default()
    };

    // Ended before the upgrade: judged by the state alone.
    let done = e.get(t, id(SUCCEEDED)).await.expect("get");
    let again = e
        .complete(t, id(SUCCEEDED), token(T_SUCCEEDED), Some(json!({"n": 1})))
        .await
        .expect("a repeated complete");
    assert_eq!(again, done);
    conflict(
        e.fail(t, id(SUCCEEDED), token(T_SUCCEEDED), fail("x"))
            .await,
    );
    let queued = e.get(t, id(RETRIED)).await.expect("get");
    let again = e
        .fail(t, id(RETRIED), token(T_RETRIED), fail("boom"))
        .await
        .expect("a repeated fail");
    assert_eq!(again, queued);
    conflict(e.complete(t, id(RETRIED), token(T_RETRIED), None).await);
    assert_eq!(e.get(t, id(SUCCEEDED)).await.expect("get"), done);
    assert_eq!(e.get(t, id(RETRIED)).await.expect("get"), queued);

    // Running through the upgrade: its report records a digest.
    let first = e
        .complete(t, id(RUNNING), token(T_RUNNING), Some(json!({"r": 1})))
        .await
        .expect("complete");
    assert_eq!(first.state, JobState::Succeeded);
    conflict(
        e.complete(t, id(RUNNING), token(T_RUNNING), Some(json!({"r": 2})))
            .await,
    );
    let again = e
        .complete(t, id(RUNNING), token(T_RUNNING), Some(json!({"r": 1})))
        .await
        .expect("a repeated complete");
    assert_eq!(again, first);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_9_judges_old_and_new_reports() {
    ended_jobs_repeat_by_state_and_new_reports_exactly(
        tether_conformance::postgres_upgraded_from(9, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_7_judges_old_and_new_reports() {
    ended_jobs_repeat_by_state_and_new_reports_exactly(
        tether_conformance::sqlite_upgraded_from(7, &sqlite_seed()).await,
    )
    .await;
}
