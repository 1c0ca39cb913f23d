//! Upgrading to workflow events (PostgreSQL 19, SQLite 16), on both
//! backends: a workflow that had finished before is not announced; one
//! still running is announced once when its last job ends.

use tether_conformance::TestDb;
use tether_core::EventKind;
use uuid::Uuid;

const DONE_FLOW: &str = "0190f000-0000-7000-8000-000000000001";
const DONE_JOB: &str = "0190f000-0000-7000-8000-000000000002";
const RUNNING_FLOW: &str = "0190f000-0000-7000-8000-000000000003";
const RUNNING_JOB: &str = "0190f000-0000-7000-8000-000000000004";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.workflows (id, tenant, name, created_at)
        VALUES ('{DONE_FLOW}', 'default', 'done', now()),
               ('{RUNNING_FLOW}', 'default', 'running', now());
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, workflow_id)
        VALUES ('{DONE_JOB}', 'default', 'q', 'k', 'null', 'succeeded', 1, 5, 1000, 3600000,
                now(), now(), now(), '{DONE_FLOW}'),
               ('{RUNNING_JOB}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                now(), now(), now(), '{RUNNING_FLOW}');"
    )
}

fn sqlite_seed() -> String {
    let now = chrono::Utc::now().timestamp_millis();
    format!(
        "INSERT INTO tether_queues (tenant, name, created_at, updated_at)
            VALUES ('default', 'q', {now}, {now});
        INSERT INTO tether_workflows (id, tenant, name, created_at)
        VALUES ('{DONE_FLOW}', 'default', 'done', {now}),
               ('{RUNNING_FLOW}', 'default', 'running', {now});
        INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at, workflow_id)
        VALUES ('{DONE_JOB}', 'default', 'q', 'k', 'null', 'succeeded', 1, 5, 1000, 3600000,
                {now}, {now}, {now}, '{DONE_FLOW}'),
               ('{RUNNING_JOB}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                {now}, {now}, {now}, '{RUNNING_FLOW}');"
    )
}

async fn a_running_workflow_is_announced_when_it_ends(db: TestDb) {
    let (e, t) = (&db.engine, "default");
    let running = Uuid::parse_str(RUNNING_JOB).unwrap();
    e.cancel(t, running).await.expect("cancel");
    let events = |id: &str| {
        let id = Uuid::parse_str(id).unwrap();
        async move {
            e.events(t, id)
                .await
                .expect("events")
                .into_iter()
                .map(|ev| (ev.event, ev.detail))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        events(RUNNING_JOB).await,
        [
            (EventKind::Cancelled, None),
            (EventKind::WorkflowFinished, Some("cancelled".into()))
        ]
    );
    assert_eq!(events(DONE_JOB).await, [], "finished before: not announced");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_18_announces_running_workflows() {
    a_running_workflow_is_announced_when_it_ends(
        tether_conformance::postgres_upgraded_from(18, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_15_announces_running_workflows() {
    a_running_workflow_is_announced_when_it_ends(
        tether_conformance::sqlite_upgraded_from(15, &sqlite_seed()).await,
    )
    .await;
}
