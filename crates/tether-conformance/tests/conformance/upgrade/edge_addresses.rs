//! Upgrading from the release that counted a waiting job's `waiting_on`
//! down (PostgreSQL 16, SQLite 13) to the one that releases a job when none
//! of its edges is left unmet (PostgreSQL 17, SQLite 14), on both backends:
//! jobs caught half-way through the upgrade (some dependencies counted
//! before, the rest ending after) are released exactly when their last
//! dependency ends, once; on PostgreSQL new pages of edges leave room for
//! the marks.

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

/// The five jobs and their edges, in PostgreSQL's schema or SQLite's.
fn seed(postgres: bool) -> String {
    let now = chrono::Utc::now().timestamp_millis();
    let (prefix, now, later) = if postgres {
        (
            "tether.",
            "now()".to_owned(),
            "now() + interval '1 hour'".to_owned(),
        )
    } else {
        ("tether_", now.to_string(), (now + 3_600_000).to_string())
    };
    let job = |id: &str, state: &str, depended: bool, waiting_on: i32| {
        let running = state == "running";
        let null = || "NULL".to_owned();
        format!(
            "('{id}', 'default', 'q', 'k', 'null', '{state}', {attempt}, 5, 1000, 3600000,
              {now}, {now}, {now}, {worker}, {token}, {ttl}, {expires}, {depended}, {waiting_on})",
            attempt = i32::from(running),
            worker = if running { "'w'".into() } else { null() },
            token = if running {
                format!("'{TOKEN}'")
            } else {
                null()
            },
            ttl = if running { "30000".into() } else { null() },
            expires = if running { later.clone() } else { null() },
            depended = if postgres {
                depended.to_string()
            } else {
                i32::from(depended).to_string()
            },
        )
    };
    let queue = if postgres {
        format!("INSERT INTO {prefix}queues (tenant, name) VALUES ('default', 'q');")
    } else {
        format!(
            "INSERT INTO {prefix}queues (tenant, name, created_at, updated_at)
             VALUES ('default', 'q', {now}, {now});"
        )
    };
    let (met, unmet) = if postgres {
        ("true", "false")
    } else {
        ("1", "0")
    };
    format!(
        "{queue}
        INSERT INTO {prefix}jobs (id, tenant, queue, kind, payload, state, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
            worker_id, lease_token, lease_ttl_ms, lease_expires_at, has_dependents, waiting_on)
        VALUES {}, {}, {}, {}, {};
        INSERT INTO {prefix}job_dependencies (depends_on, job_id, met) VALUES
            ('{DONE}', '{HALF}', {met}), ('{RUNNING}', '{HALF}', {unmet}),
            ('{RUNNING}', '{BOTH}', {unmet}), ('{QUEUED}', '{BOTH}', {unmet});",
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

/// Ends the two jobs still open, in turn, and checks each release.
async fn jobs_caught_half_way_are_released_once(db: &TestDb) {
    let (e, t) = (&db.engine, "default");

    e.complete(t, id(RUNNING), LeaseToken(id(TOKEN)), None)
        .await
        .expect("complete");
    assert_eq!(
        state(db, HALF).await,
        JobState::Queued,
        "its last one ended"
    );
    assert_eq!(released(db, HALF).await, 1);
    assert_eq!(state(db, BOTH).await, JobState::Waiting, "one is left");
    assert_eq!(released(db, BOTH).await, 0);

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
    assert_eq!(state(db, BOTH).await, JobState::Queued);
    assert_eq!(released(db, BOTH).await, 1);
    assert_eq!(released(db, HALF).await, 1, "released once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_database_from_schema_13_releases_jobs_caught_half_way() {
    let db = tether_conformance::sqlite_upgraded_from(13, &seed(false)).await;
    jobs_caught_half_way_are_released_once(&db).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_16_releases_jobs_caught_half_way() {
    let db = tether_conformance::postgres_upgraded_from(16, &seed(true)).await;
    jobs_caught_half_way_are_released_once(&db).await;

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
