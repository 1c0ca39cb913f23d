//! Upgrading to job headers and worker presence (PostgreSQL 20 and 21,
//! SQLite 17 and 18), on both backends: a job enqueued before has no
//! headers and is claimed as before; new jobs carry theirs; a worker
//! announces itself and is listed.

use tether_conformance::TestDb;
use tether_core::{ClaimRequest, NewJob, WorkerAnnouncement};
use uuid::Uuid;

const OLD_JOB: &str = "0190f000-0000-7000-8000-0000000000a1";

fn pg_seed() -> String {
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
        VALUES ('{OLD_JOB}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                now(), now(), now());"
    )
}

fn sqlite_seed() -> String {
    let now = chrono::Utc::now().timestamp_millis();
    format!(
        "INSERT INTO tether_queues (tenant, name, created_at, updated_at)
            VALUES ('default', 'q', {now}, {now});
        INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, attempt, max_attempts,
            backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at)
        VALUES ('{OLD_JOB}', 'default', 'q', 'k', 'null', 'queued', 0, 5, 1000, 3600000,
                {now}, {now}, {now});"
    )
}

async fn old_jobs_have_none_and_new_ones_carry_theirs(db: TestDb) {
    let (e, t) = (&db.engine, "default");
    let old = Uuid::parse_str(OLD_JOB).unwrap();
    assert!(e.get(t, old).await.expect("get").headers.is_empty());
    let new = e
        .enqueue(
            t,
            NewJob::new("q", "k", serde_json::json!(1)).header("traceparent", "x"),
        )
        .await
        .expect("enqueue")
        .job;
    let claimed = e
        .claim(
            t,
            &ClaimRequest {
                queue: "q".into(),
                worker_id: "w".into(),
                limit: 10,
                lease_ttl_ms: Some(60_000),
            },
        )
        .await
        .expect("claim");
    let mut got: Vec<(Uuid, usize)> = claimed
        .iter()
        .map(|c| (c.job.id, c.job.headers.len()))
        .collect();
    got.sort();
    let mut want = vec![(old, 0), (new.id, 1)];
    want.sort();
    assert_eq!(got, want);
    let idle = WorkerAnnouncement {
        queues: vec!["other".into()],
        concurrency: 2,
        ..WorkerAnnouncement::default()
    };
    e.announce_worker(t, "idle", &idle).await.expect("announce");
    let listed: Vec<(String, u64)> = e
        .list_workers(t)
        .await
        .expect("workers")
        .into_iter()
        .map(|w| (w.worker_id, w.running))
        .collect();
    assert_eq!(listed, [("idle".to_owned(), 0), ("w".to_owned(), 2)]);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_19_takes_headers() {
    old_jobs_have_none_and_new_ones_carry_theirs(
        tether_conformance::postgres_upgraded_from(19, &pg_seed()).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_16_takes_headers() {
    old_jobs_have_none_and_new_ones_carry_theirs(
        tether_conformance::sqlite_upgraded_from(16, &sqlite_seed()).await,
    )
    .await;
}
