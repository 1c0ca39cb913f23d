//! Upgrading a PostgreSQL database from schema 16, whose release counted a
//! waiting job's `waiting_on` down, to 17, which releases a job when none
//! of its edges is left unmet: jobs caught half-way through the upgrade
//! (some dependencies counted under 16, the rest ending under 17) are
//! released exactly when their last dependency ends, once, and new pages
//! of edges leave room for the marks.

use tether_conformance::TestDb;
use tether_core::{ClaimRequest, EventKind, JobState, LeaseToken};
use uuid::Uuid;

/// Succeeded under 16; `HALF` counted it.
const DONE: &str = "0190d000-0000-7000-8000-000000000001";
/// Running through the upgrade; `HALF` and `BOTH` wait for it.
const RUNNING: &str = "0190d000-0000-7000-8000-000000000002";
/// Queued through the upgrade; `BOTH` waits for it.
const QUEUED: &str = "0190d000-0000-7000-8000-000000000003";
/// Waits for `DONE` (met, counted: `waiting_on` 1) and `RUNNING`.
const HALF: &str = "0190d000-0000-7000-8000-000000000004";
/// Waits for `RUNNING` and `QUEUED`, neither ended.
const BOTH: &str = "0190d000-0000-7000-8000-000000000005";
const TOKEN: &str = "4a1c1a9e-0b6e-4b52-9d8a-2f0c7a1e0b05";

fn seed() -> String {
    let job = |id: &str, state: &str, depended: bool, waiting_on: i32| {
        let running = state == "running";
        format!(
            "('{id}', 'default', 'q', 'k', 'null', '{state}', {attempt}, 5, 1000, 3600000,
              now(), now(), now(), {worker}, {token}, {ttl}, {expires}, {depended}, {waiting_on})",
            attempt = i32::from(running),
            worker = if running { "'w'" } else { "NULL" },
            token = if running {
                format!("'{TOKEN}'")
            } else {
                "NULL".into()
            },
            ttl = if running { "30000" } else { "NULL" },
            expires = if running {
                "now() + interval '1 hour'"
            } else {
                "NULL"
            },
        )
    };
    format!(
        "INSERT INTO tether.queues (tenant, name) VALUES ('default', 'q');
        INSERT INTO tether.jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
            worker_id, lease_token, lease_ttl_ms, lease_expires_at, has_dependents, waiting_on)
        VALUES {}, {}, {}, {}, {};
        INSERT INTO tether.job_dependencies (depends_on, job_id, met) VALUES
            ('{DONE}', '{HALF}', true), ('{RUNNING}', '{HALF}', false),
            ('{RUNNING}', '{BOTH}', false), ('{QUEUED}', '{BOTH}', false);",
        job(DONE, "succeeded", true, 0),
        job(RUNNING, "running", true, 0),
        job(QUEUED, "queued", true, 0),
        job(HALF, "waiting", false, 1),
        job(BOTH, "waiting", false, 2),
    )
}

fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("a uuid")
}

async fn state(db: &TestDb, job: &str) -> JobState {
    db.engine.get("default", id(job)).await.expect("get").state
}

async fn released(db: &TestDb, job: &str) -> usize {
    let events = db.engine.events("default", id(job)).await.expect("events");
    events
        .iter()
        .filter(|e| e.event == EventKind::Released)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_16_releases_jobs_caught_half_way() {
    let db = tether_conformance::postgres_upgraded_from(16, &seed()).await;
    let (e, t) = (&db.engine, "default");

    e.complete(t, id(RUNNING), LeaseToken(id(TOKEN)), None)
        .await
        .expect("complete");
    assert_eq!(
        state(&db, HALF).await,
        JobState::Queued,
        "its last one ended"
    );
    assert_eq!(released(&db, HALF).await, 1);
    assert_eq!(state(&db, BOTH).await, JobState::Waiting, "one is left");
    assert_eq!(released(&db, BOTH).await, 0);

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
    assert_eq!(claimed[0].job.id, id(QUEUED), "the oldest queued job");
    e.complete(t, id(QUEUED), claimed[0].lease_token, None)
        .await
        .expect("complete");
    assert_eq!(state(&db, BOTH).await, JobState::Queued);
    assert_eq!(released(&db, BOTH).await, 1);
    assert_eq!(released(&db, HALF).await, 1, "released once");

    let url = db.postgres_url().expect("a PostgreSQL test database");
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    let (options,): (Vec<String>,) = sqlx::query_as(
        "SELECT coalesce(reloptions, '{}') FROM pg_class
         WHERE oid = 'tether.job_dependencies'::regclass",
    )
    .fetch_one(&pool)
    .await
    .expect("reloptions");
    assert_eq!(options, vec!["fillfactor=50".to_owned()]);
    pool.close().await;
    db.cleanup().await;
}
