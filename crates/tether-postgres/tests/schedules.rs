//! PostgreSQL specifics of schedules (invariant 11): fires racing from
//! several stores with their own pools (standing in for server replicas),
//! a fire whose job already exists, and the SQL behind the store's contract.
//! The cross-backend behaviours live in `tether-conformance`.
//!
//! Each test gets a fresh database from the conformance harness
//! (`tether_conformance::postgres`), dropped when the test passes.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;
use tether_core::schedule::{fire_key, Fire, FireOutcome};
use tether_core::{
    ClaimRequest, Engine, Error, NewJob, NewJobRef, Overlap, RunOutcome, Schedule, SchedulePatch,
    ScheduleSpec, Store,
};
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

/// A crash after the enqueue but before the timetable moved (or a fire of an
/// instant already fired) finds the job by its idempotency key and does not
/// make a second one.
#[tokio::test]
async fn a_fire_whose_job_exists_yields_that_job() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let spec = ScheduleSpec::new("nightly", "0 3 * * *", "q", "report");
    let schedule = store
        .create_schedule("t", &spec, Some(minutes_ago(60)), u32::MAX)
        .await
        .expect("create");
    let fire = fire_of(&schedule, TimeDelta::days(1));
    let key = fire_key(schedule.id, fire.fire_at);

    let earlier = NewJob::new("q", "report", Value::Null).idempotency_key(key.clone());
    let existing = store
        .enqueue(
            "t",
            &NewJobRef::mint(std::slice::from_ref(&earlier)),
            u32::MAX,
        )
        .await
        .expect("the earlier attempt's job")
        .remove(0)
        .job;

    let fresh = Uuid::now_v7();
    let outcome = store.fire_schedule(&fire, fresh).await.expect("fire");
    assert_eq!(
        outcome,
        FireOutcome::Ran(RunOutcome::Enqueued, Some(existing.id))
    );
    assert_eq!(jobs_with_key(&pool, &key).await, vec![existing.id]);
    assert!(matches!(
        store.get("t", fresh).await,
        Err(Error::JobNotFound(_))
    ));
    let after = store.get_schedule("t", schedule.id).await.expect("get");
    assert_eq!(after.last_job_id, Some(existing.id));
    assert_eq!(after.next_run_at, fire.next_run_at);

    // The same instant again (the timetable set back onto it): same job.
    store
        .update_schedule("t", schedule.id, &spec, Some(fire.fire_at))
        .await
        .expect("set back");
    let again = store
        .fire_schedule(&fire, Uuid::now_v7())
        .await
        .expect("fire again");
    assert_eq!(
        again,
        FireOutcome::Ran(RunOutcome::Enqueued, Some(existing.id))
    );
    assert_eq!(jobs_with_key(&pool, &key).await, vec![existing.id]);

    let runs = store
        .schedule_runs("t", schedule.id, 10)
        .await
        .expect("runs");
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.job_id == Some(existing.id)));

    pool.close().await;
    drop(store);
    db.drop().await;
}

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

#[tokio::test]
async fn definitions_are_walled_by_tenant_and_names_are_unique() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let spec = ScheduleSpec::new("b-report", "0 * * * *", "q", "k")
        .timezone("Europe/Berlin")
        .payload(json!({"x": [1, 2]}))
        .overlap(Overlap::Skip);
    let next = minutes_ago(-30);
    let s = store
        .create_schedule("a", &spec, Some(next), u32::MAX)
        .await
        .expect("create");
    assert_eq!(s.tenant, "a");
    assert_eq!(s.spec, spec);
    assert_eq!(s.next_run_at, Some(next));
    assert_eq!((s.last_run_at, s.last_job_id), (None, None));
    assert_eq!(s.created_at, s.updated_at);
    assert_eq!(store.get_schedule("a", s.id).await.expect("get"), s);

    match store
        .create_schedule("a", &spec, Some(next), u32::MAX)
        .await
    {
        Err(Error::AlreadyExists(m)) => assert!(m.contains("b-report"), "{m}"),
        other => panic!("duplicate name: {other:?}"),
    }
    // Another tenant may use the name, and sees nothing of tenant a.
    let other = store
        .create_schedule("b", &spec, Some(next), u32::MAX)
        .await
        .expect("same name elsewhere");
    let spec_a2 = ScheduleSpec::new("A-first", "0 * * * *", "q", "k");
    let a2 = store
        .create_schedule("a", &spec_a2, None, u32::MAX)
        .await
        .expect("second of a");
    let names: Vec<String> = store
        .list_schedules("a")
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    assert_eq!(names, ["A-first", "b-report"], "byte order of names");
    assert_eq!(
        store.list_schedules("b").await.expect("list b"),
        vec![other.clone()]
    );

    let gone = |r: Result<(), Error>, what: &str| match r {
        Err(Error::NotFound(m)) => assert_eq!(m, format!("schedule {}", s.id), "{what}"),
        other => panic!("{what}: {other:?}"),
    };
    gone(store.get_schedule("b", s.id).await.map(drop), "get");
    gone(
        store
            .update_schedule("b", s.id, &spec, None)
            .await
            .map(drop),
        "update",
    );
    gone(store.schedule_runs("b", s.id, 10).await.map(drop), "runs");
    let job = NewJob::new("q", "k", Value::Null);
    gone(
        store
            .trigger_schedule(
                "b",
                s.id,
                NewJobRef {
                    id: Uuid::now_v7(),
                    job: &job,
                },
            )
            .await
            .map(drop),
        "trigger",
    );
    let fire = fire_of(&s, TimeDelta::hours(1));
    assert_eq!(
        store
            .fire_schedule(
                &Fire {
                    tenant: "b".into(),
                    ..fire
                },
                Uuid::now_v7()
            )
            .await
            .expect("fire"),
        FireOutcome::Raced
    );
    gone(store.delete_schedule("b", s.id).await, "delete");
    assert_eq!(count(&pool, "SELECT count(*) FROM tether.jobs").await, 0);
    assert_eq!(store.get_schedule("a", s.id).await.expect("still there"), s);

    // A rename onto a taken name is refused; disabling clears next_run_at
    // even if one is passed; last_* survive an update.
    let patched = SchedulePatch {
        name: Some("b-report".into()),
        ..SchedulePatch::default()
    }
    .apply(&spec_a2);
    match store.update_schedule("a", a2.id, &patched, None).await {
        Err(Error::AlreadyExists(m)) => assert!(m.contains("b-report"), "{m}"),
        other => panic!("rename onto a taken name: {other:?}"),
    }
    let disabled = spec.clone().enabled(false).payload(json!("new"));
    let u = store
        .update_schedule("a", s.id, &disabled, Some(next))
        .await
        .expect("disable");
    assert_eq!(u.spec, disabled);
    assert_eq!(u.next_run_at, None);
    assert_eq!(u.created_at, s.created_at);
    assert!(u.updated_at > s.updated_at);

    store.delete_schedule("a", s.id).await.expect("delete");
    gone(store.delete_schedule("a", s.id).await, "delete twice");
    gone(store.get_schedule("a", s.id).await.map(drop), "get deleted");

    pool.close().await;
    drop(store);
    db.drop().await;
}

#[tokio::test]
async fn overlap_skip_records_skipped_runs_while_the_last_job_is_active() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let engine = Engine::new(store.clone());
    let spec = ScheduleSpec::new("s", "* * * * *", "q", "k").overlap(Overlap::Skip);
    let mut s = store
        .create_schedule("t", &spec, Some(minutes_ago(10)), u32::MAX)
        .await
        .expect("create");
    let step = TimeDelta::minutes(1);
    let fire_next = |s: &Schedule| fire_of(s, step);

    let f1 = fire_next(&s);
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(job1)) =
        store.fire_schedule(&f1, Uuid::now_v7()).await.expect("1")
    else {
        panic!("the first fire enqueues");
    };
    s = store.get_schedule("t", s.id).await.expect("get");
    // Queued: skipped, and the timetable still moves.
    let f2 = fire_next(&s);
    assert_eq!(
        store.fire_schedule(&f2, Uuid::now_v7()).await.expect("2"),
        FireOutcome::Ran(RunOutcome::Skipped, None)
    );
    s = store.get_schedule("t", s.id).await.expect("get");
    assert_eq!(s.next_run_at, f2.next_run_at);
    assert_eq!(s.last_run_at, Some(f2.fire_at));
    assert_eq!(s.last_job_id, Some(job1));
    // Running: skipped.
    let claimed = engine
        .claim(
            "t",
            &ClaimRequest {
                queue: "q".into(),
                worker_id: "w".into(),
                limit: 1,
                lease_ttl_ms: None,
            },
        )
        .await
        .expect("claim");
    assert_eq!(claimed[0].job.id, job1);
    let f3 = fire_next(&s);
    assert_eq!(
        store.fire_schedule(&f3, Uuid::now_v7()).await.expect("3"),
        FireOutcome::Ran(RunOutcome::Skipped, None)
    );
    s = store.get_schedule("t", s.id).await.expect("get");
    // Finished: enqueued again.
    engine
        .complete("t", job1, claimed[0].lease_token, None)
        .await
        .expect("complete");
    let f4 = fire_next(&s);
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(job4)) =
        store.fire_schedule(&f4, Uuid::now_v7()).await.expect("4")
    else {
        panic!("a fire after the job finished enqueues");
    };
    assert_ne!(job4, job1);

    let runs = store.schedule_runs("t", s.id, 10).await.expect("runs");
    let seen: Vec<_> = runs
        .iter()
        .map(|r| (r.fire_at, r.outcome, r.job_id))
        .collect();
    assert_eq!(
        seen,
        vec![
            (f4.fire_at, RunOutcome::Enqueued, Some(job4)),
            (f3.fire_at, RunOutcome::Skipped, None),
            (f2.fire_at, RunOutcome::Skipped, None),
            (f1.fire_at, RunOutcome::Enqueued, Some(job1)),
        ]
    );
    assert_eq!(
        store.schedule_runs("t", s.id, 2).await.expect("runs"),
        runs[..2]
    );

    drop(engine);
    drop(store);
    db.drop().await;
}

#[tokio::test]
async fn a_trigger_runs_now_and_leaves_the_timetable() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let next = minutes_ago(-60);
    let s = store
        .create_schedule(
            "t",
            &ScheduleSpec::new("s", "0 * * * *", "q", "k"),
            Some(next),
            u32::MAX,
        )
        .await
        .expect("create");
    let new = NewJob::new("q", "k", json!({"manual": true}))
        .idempotency_key(tether_core::schedule::trigger_key(s.id));
    let id = Uuid::now_v7();
    let job = store
        .trigger_schedule("t", s.id, NewJobRef { id, job: &new })
        .await
        .expect("trigger");
    assert_eq!(job.id, id);
    assert_eq!(job.payload, json!({"manual": true}));

    let after = store.get_schedule("t", s.id).await.expect("get");
    assert_eq!(after.next_run_at, Some(next));
    assert_eq!(after.last_job_id, Some(id));
    let runs = store.schedule_runs("t", s.id, 10).await.expect("runs");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome, RunOutcome::Enqueued);
    assert_eq!(runs[0].job_id, Some(id));
    assert_eq!(after.last_run_at, Some(runs[0].fire_at));
    // Stamped by the database clock, in the same transaction as the job.
    let created: DateTime<Utc> =
        sqlx::query_scalar("SELECT created_at FROM tether.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("job");
    assert_eq!(runs[0].fire_at, created);

    // A deleted schedule cannot be triggered, and leaves no job behind.
    store.delete_schedule("t", s.id).await.expect("delete");
    let orphan = Uuid::now_v7();
    assert!(matches!(
        store
            .trigger_schedule(
                "t",
                s.id,
                NewJobRef {
                    id: orphan,
                    job: &new
                }
            )
            .await,
        Err(Error::NotFound(_))
    ));
    assert!(matches!(
        store.get("t", orphan).await,
        Err(Error::JobNotFound(_))
    ));
    assert_eq!(
        count(&pool, "SELECT count(*) FROM tether.schedule_runs").await,
        0,
        "runs go with their schedule"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM tether.jobs").await, 1);

    pool.close().await;
    drop(store);
    db.drop().await;
}

#[tokio::test]
async fn due_and_next_answer_with_the_database_clock_across_tenants() {
    let db = TestDb::new().await;
    let store = db.store().await;

    let before = Utc::now() - TimeDelta::seconds(5);
    let (now, due) = store.due_schedules(10).await.expect("due, none");
    assert!(due.is_empty());
    assert!(now > before && now < before + TimeDelta::seconds(60));
    let (now2, next) = store.next_schedule_due().await.expect("next, none");
    assert!(now2 >= now);
    assert_eq!(next, None);

    let spec = |name: &str| ScheduleSpec::new(name, "* * * * *", "q", "k");
    let late = store
        .create_schedule("b", &spec("late"), Some(minutes_ago(3)), u32::MAX)
        .await
        .expect("late");
    let later = store
        .create_schedule("a", &spec("later"), Some(minutes_ago(1)), u32::MAX)
        .await
        .expect("later");
    store
        .create_schedule("a", &spec("future"), Some(minutes_ago(-5)), u32::MAX)
        .await
        .expect("future");
    store
        .create_schedule(
            "a",
            &spec("off").enabled(false),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await
        .expect("disabled");

    let (_, due) = store.due_schedules(10).await.expect("due");
    assert_eq!(due, vec![late.clone(), later]);
    let (_, due) = store.due_schedules(1).await.expect("due, limited");
    assert_eq!(due, vec![late.clone()]);
    let (_, next) = store.next_schedule_due().await.expect("next");
    assert_eq!(next, late.next_run_at);

    drop(store);
    db.drop().await;
}

#[tokio::test]
async fn pruning_deletes_old_runs_in_batches() {
    let db = TestDb::new().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let mut s = store
        .create_schedule(
            "t",
            &ScheduleSpec::new("s", "* * * * *", "q", "k"),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await
        .expect("create");
    for _ in 0..5 {
        let fire = fire_of(&s, TimeDelta::minutes(1));
        assert!(matches!(
            store.fire_schedule(&fire, Uuid::now_v7()).await,
            Ok(FireOutcome::Ran(RunOutcome::Enqueued, Some(_)))
        ));
        s = store.get_schedule("t", s.id).await.expect("get");
    }
    let runs = "SELECT count(*) FROM tether.schedule_runs";
    assert_eq!(count(&pool, runs).await, 5);
    // Retentions beyond the range of a timestamp keep everything.
    assert_eq!(
        store
            .prune_schedule_runs(i64::MAX, 100)
            .await
            .expect("huge"),
        0
    );
    assert_eq!(
        store
            .prune_schedule_runs(3_600_000, 100)
            .await
            .expect("an hour"),
        0
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(store.prune_schedule_runs(0, 2).await.expect("batch"), 2);
    assert_eq!(count(&pool, runs).await, 3);
    assert_eq!(store.prune_schedule_runs(0, 100).await.expect("rest"), 3);
    assert_eq!(count(&pool, runs).await, 0);
    // The jobs stay.
    assert_eq!(count(&pool, "SELECT count(*) FROM tether.jobs").await, 5);

    pool.close().await;
    drop(store);
    db.drop().await;
}
