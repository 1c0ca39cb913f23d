//! Upgrading a database from before workflows (PostgreSQL 13, SQLite 11),
//! on both backends: the jobs that were there belong to no workflow, a
//! workflow can wait for them, and a waiting job now holds its unique key.

use serde_json::json;
use tether_conformance::TestDb;
use tether_core::{JobState, NewJob, NewWorkflow};
use uuid::Uuid;

const OLD: &str = "0190c000-0000-7000-8000-000000000001";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
        VALUES ('{OLD}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                now(), now(), now());"
    )
}

fn sqlite_seed() -> String {
    let now = chrono::Utc::now().timestamp_millis();
    format!(
        "INSERT INTO tether_queues (tenant, name, created_at, updated_at)
            VALUES ('default', 'q', {now}, {now});
        INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
        VALUES ('{OLD}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                {now}, {now}, {now});"
    )
}

async fn old_jobs_join_no_workflow_and_can_be_waited_for(db: TestDb) {
    let (e, t) = (&db.engine, "default");
    let old = Uuid::parse_str(OLD).unwrap();
    assert_eq!(e.get(t, old).await.expect("get").workflow_id, None);
    let made = e
        .enqueue_workflow(
            t,
            &NewWorkflow {
                name: "after-upgrade".into(),
                idempotency_key: None,
            },
            &[NewJob::new("q", "k", json!(null))
                .after(old)
                .unique_key("u")],
        )
        .await
        .expect("enqueue_workflow");
    let waiting = &made.jobs[0].job;
    assert_eq!(waiting.state, JobState::Waiting);
    assert_eq!(waiting.workflow_id, Some(made.workflow.id));
    let again = e
        .enqueue(t, NewJob::new("q", "k", json!(null)).unique_key("u"))
        .await
        .expect("enqueue");
    assert!(!again.created, "a waiting job holds its unique key");
    assert_eq!(again.job.id, waiting.id);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_13_runs_workflows() {
    old_jobs_join_no_workflow_and_can_be_waited_for(
        tether_conformance::postgres_upgraded_from(13, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_11_runs_workflows() {
    old_jobs_join_no_workflow_and_can_be_waited_for(
        tether_conformance::sqlite_upgraded_from(11, &sqlite_seed()).await,
    )
    .await;
}
