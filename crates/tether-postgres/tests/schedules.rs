//! PostgreSQL specifics of schedules (invariant 11). Every behaviour that is
//! the same on both backends (tenant walls, a fire whose job exists, overlap
//! `skip`, triggers, disabled schedules, the due scan, pruning, deletion,
//! round trips) is proven by the behaviour suite in `tether-conformance`,
//! which runs on PostgreSQL directly and behind PgBouncer. What stays here
//! needs what the suite's one engine cannot give: several stores with their
//! own pools racing (standing in for server replicas), or the SQL rows
//! themselves (a JSON null payload, a triggered run stamped with its job's
//! transaction time).
//!
//! Each test gets a fresh database from the conformance harness
//! (`tether_conformance::postgres`), dropped when the test passes.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;
use tether_core::schedule::{fire_key, Fire, FireOutcome};
use tether_core::{Engine, NewJob, NewJobRef, RunOutcome, Schedule, ScheduleSpec, Store};
use tether_postgres::PgStore;
use tokio::sync::Barrier;
use uuid::Uuid;

/// A throw-away database from the conformance harness, on which each
/// [`TestDb::store`] is another replica with its own pool.
struct TestDb {
    harness: tether_conformance::TestDb,
    url: String,
}

impl TestDb {
    async fn new() -> TestDb {
        let harness = tether_conformance::postgres().await;
        let url = harness.postgres_url().expect("a PostgreSQL test database");
        TestDb { harness, url }
    }

    /// A store with its own pool (a "replica").
    async fn store(&self) -> Arc<PgStore> {
        Arc::new(
            PgStore::connect(&self.url)
                .await
                .unwrap_or_else(|e| panic!("PgStore::connect({}) failed: {e}", self.url)),
        )
    }

    /// A plain pool, for looking at rows directly.
    async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url).await.expect("inspection pool")
    }

    async fn drop(self) {
        self.harness.cleanup().await;
    }
}

/// A whole minute some minutes ago (cron instants are whole seconds).
fn minutes_ago(n: i64) -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .expect("truncate")
        - TimeDelta::minutes(n)
}

/// The fire the scheduler would ask for: the stored `next_run_at`, advanced
/// by `step`.
fn fire_of(s: &Schedule, step: TimeDelta) -> Fire {
    let expected = s.next_run_at.expect("an enabled schedule");
    Fire {
        schedule_id: s.id,
        tenant: s.tenant.clone(),
        expected_next_run_at: expected,
        fire_at: expected,
        next_run_at: Some(expected + step),
        job: NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
            .idempotency_key(fire_key(s.id, expected)),
        overlap: s.spec.overlap,
    }
}

async fn jobs_with_key(pool: &PgPool, key: &str) -> Vec<Uuid> {
    sqlx::query_scalar("SELECT id FROM tether.jobs WHERE idempotency_key = $1")
        .bind(key)
        .fetch_all(pool)
        .await
        .expect("jobs by key")
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

/// Fifty fires of one instant racing from two stores with their own pools
/// (two replicas), four rounds in a row: each round exactly one fire runs
/// and makes one job (counted in the table), the others race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_racing_fires_from_two_stores_run_once() {
    let db = TestDb::new().await;
    let stores = [db.store().await, db.store().await];
    let pool = db.pool().await;
    let spec = ScheduleSpec::new("every-minute", "* * * * *", "q", "tick").payload(json!({"n": 1}));
    let mut schedule = stores[0]
        .create_schedule("t", &spec, Some(minutes_ago(10)), u32::MAX)
        .await
        .expect("create");

    const RACERS: usize = 50;
    const ROUNDS: usize = 4;
    for round in 0..ROUNDS {
        let fire = Arc::new(fire_of(&schedule, TimeDelta::minutes(1)));
        let barrier = Arc::new(Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|i| {
                let store = stores[i % 2].clone();
                let fire = fire.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.fire_schedule(&fire, Uuid::now_v7()).await
                })
            })
            .collect();
        let mut ran = Vec::new();
        let mut raced = 0;
        for racer in racers {
            match racer.await.expect("racer task").expect("fire_schedule") {
                FireOutcome::Ran(outcome, job) => ran.push((outcome, job)),
                FireOutcome::Raced => raced += 1,
            }
        }
        assert_eq!(ran.len(), 1, "round {round}: exactly one fire runs");
        assert_eq!(raced, RACERS - 1, "round {round}: the others race");
        let (outcome, job) = ran[0];
        assert_eq!(outcome, RunOutcome::Enqueued);
        let jobs = jobs_with_key(&pool, &fire_key(schedule.id, fire.fire_at)).await;
        assert_eq!(jobs, vec![job.expect("a job")], "round {round}: one job");

        schedule = stores[1].get_schedule("t", schedule.id).await.expect("get");
        assert_eq!(schedule.next_run_at, fire.next_run_at);
        assert_eq!(schedule.last_run_at, Some(fire.fire_at));
        assert_eq!(schedule.last_job_id, job);
    }

    assert_eq!(
        count(&pool, "SELECT count(*) FROM tether.jobs").await,
        ROUNDS as i64
    );
    let runs = stores[0]
        .schedule_runs("t", schedule.id, 100)
        .await
        .expect("runs");
    assert_eq!(runs.len(), ROUNDS);
    assert!(runs.windows(2).all(|w| w[0].fire_at > w[1].fire_at));
    assert!(runs.iter().all(|r| r.outcome == RunOutcome::Enqueued));

    pool.close().await;
    drop(stores);
    db.drop().await;
}

/// Two replicas' scheduler passes over the same due schedules: every
/// schedule fires once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scheduler_passes_of_two_replicas_fire_each_schedule_once() {
    let db = TestDb::new().await;
    let engines = [Engine::new(db.store().await), Engine::new(db.store().await)];
    let pool = db.pool().await;
    const SCHEDULES: usize = 20;
    for i in 0..SCHEDULES {
        let tenant = if i % 2 == 0 { "a" } else { "b" };
        engines[0]
            .create_schedule(
                tenant,
                &ScheduleSpec::new(format!("s{i}"), "*/5 * * * *", "q", "tick"),
            )
            .await
            .expect("create");
    }
    // Make them all due: the instant five minutes before their next one.
    sqlx::query("UPDATE tether.schedules SET next_run_at = next_run_at - interval '5 minutes'")
        .execute(&pool)
        .await
        .expect("make due");

    let barrier = Arc::new(Barrier::new(2));
    let passes: Vec<_> = engines
        .iter()
        .cloned()
        .map(|engine| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                engine.fire_due_schedules(100, Duration::ZERO).await
            })
        })
        .collect();
    let mut enqueued = 0;
    let mut raced = 0;
    for pass in passes {
        let report = pass.await.expect("pass task").expect("fire_due_schedules");
        assert_eq!(report.failed, 0);
        assert_eq!(report.skipped, 0);
        enqueued += report.enqueued;
        raced += report.raced;
    }
    assert_eq!(enqueued, SCHEDULES as u64);
    // A schedule the other pass fired first is either raced or no longer due.
    assert!(raced <= SCHEDULES as u64);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM tether.jobs").await,
        SCHEDULES as i64
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(DISTINCT (tenant, idempotency_key)) FROM tether.jobs"
        )
        .await,
        SCHEDULES as i64
    );
    // Nothing is due any more, and the next fire is in the future.
    let (now, due) = engines[1]
        .store()
        .due_schedules(100)
        .await
        .expect("due after");
    assert!(due.is_empty());
    let (_, next) = engines[1].store().next_schedule_due().await.expect("next");
    assert!(next.expect("enabled schedules") > now);

    pool.close().await;
    drop(engines);
    db.drop().await;
}

/// A schedule's default payload is stored as a JSON `null` (a jsonb value),
/// not as SQL NULL; that it reads back as null the suite checks on both
/// backends.
#[tokio::test]
async fn a_null_payload_is_stored_as_json_null() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let s = store
        .create_schedule(
            "t",
            &ScheduleSpec::new("n", "* * * * *", "q", "k"),
            Some(minutes_ago(1)),
            u32::MAX,
        )
        .await
        .expect("create");
    assert_eq!(s.spec.payload, Value::Null);
    let kind: Option<String> =
        sqlx::query_scalar("SELECT jsonb_typeof(payload) FROM tether.schedules WHERE id = $1")
            .bind(s.id)
            .fetch_one(&pool)
            .await
            .expect("payload type");
    assert_eq!(kind.as_deref(), Some("null"));
    assert_eq!(
        store
            .get_schedule("t", s.id)
            .await
            .expect("get")
            .spec
            .payload,
        Value::Null
    );
    pool.close().await;
    drop(store);
    db.drop().await;
}

/// A trigger's run is stamped with the transaction's `now()`, the very
/// instant its job was created at (SQLite stamps it by its own statement,
/// no later than the job; the suite checks that bound on both).
#[tokio::test]
async fn a_triggered_run_is_stamped_at_its_jobs_creation() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let s = store
        .create_schedule(
            "t",
            &ScheduleSpec::new("s", "0 * * * *", "q", "k"),
            Some(minutes_ago(-60)),
            u32::MAX,
        )
        .await
        .expect("create");
    let new = NewJob::new("q", "k", json!({"manual": true}))
        .idempotency_key(tether_core::schedule::trigger_key(s.id));
    let id = Uuid::now_v7();
    store
        .trigger_schedule("t", s.id, NewJobRef { id, job: &new })
        .await
        .expect("trigger");
    let runs = store.schedule_runs("t", s.id, 10).await.expect("runs");
    let created: DateTime<Utc> =
        sqlx::query_scalar("SELECT created_at FROM tether.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("job");
    assert_eq!(runs[0].fire_at, created);

    pool.close().await;
    drop(store);
    db.drop().await;
}
