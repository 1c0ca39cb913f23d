//! Schedules. Their behaviour is proven by the shared suite; these check what
//! is particular to SQLite: fires racing across two stores (two processes) on
//! one file, the fire and its enqueue sharing one transaction, the rows and
//! the query plans.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tether_core::schedule::{
    fire_key, Fire, FireOutcome, Overlap, RunOutcome, Schedule, ScheduleRun, ScheduleSpec,
};

use super::*;

/// A fixed instant well in the past, so it is due.
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

fn minutes(n: i64) -> chrono::TimeDelta {
    chrono::TimeDelta::minutes(n)
}

fn spec(name: &str) -> ScheduleSpec {
    ScheduleSpec::new(name, "* * * * *", "q", "tick")
}

/// The fire the engine would ask for: the run at `at`, next one a
/// minute later.
fn fire_of(s: &Schedule, expected: DateTime<Utc>, at: DateTime<Utc>) -> Fire {
    Fire {
        schedule_id: s.id,
        tenant: s.tenant.clone(),
        expected_next_run_at: expected,
        fire_at: at,
        next_run_at: Some(at + minutes(1)),
        job: NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
            .idempotency_key(fire_key(s.id, at)),
        overlap: s.spec.overlap,
    }
}

async fn fire(store: &SqliteStore, fire: &Fire) -> FireOutcome {
    store.fire_schedule(fire, Uuid::now_v7()).await.unwrap()
}

async fn count(store: &SqliteStore, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&store.reader)
        .await
        .unwrap()
}

fn not_found(err: Error, id: Uuid) {
    match err {
        Error::NotFound(msg) => assert_eq!(msg, format!("schedule {id}")),
        other => panic!("expected NotFound, got {other:?}"),
    }
}

/// Invariant 11 across processes: two stores on one file (as two
/// `tether serve` replicas would have) race 20 fires for the same
/// `(schedule, next_run_at)`, five rounds in a row. Each round exactly
/// one fire runs and makes exactly one job; the others find the
/// timetable moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_fires_from_two_stores_fire_once() {
    let db = TempDb::new();
    let a = SqliteStore::open(&db.0).await.unwrap();
    let b = SqliteStore::open(&db.0).await.unwrap();
    let s = a
        .create_schedule("t", &spec("every-minute"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for round in 0..5 {
        let at = t0() + minutes(round);
        let f = Arc::new(fire_of(&s, at, at));
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                let f = f.clone();
                tokio::spawn(async move { store.fire_schedule(&f, Uuid::now_v7()).await })
            })
            .collect();
        let mut ran = Vec::new();
        let mut raced = 0;
        for handle in handles {
            match handle.await.unwrap().unwrap() {
                FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) => ran.push(id),
                FireOutcome::Raced => raced += 1,
                other @ FireOutcome::Ran(..) => panic!("unexpected outcome {other:?}"),
            }
        }
        assert_eq!(ran.len(), 1, "round {round}: {ran:?}");
        assert_eq!(raced, 19);
        let job = a.get("t", ran[0]).await.unwrap();
        assert_eq!(job.idempotency_key, Some(fire_key(s.id, at)));
        jobs.push(job.id);
    }
    let n = count(&a, "SELECT count(*) FROM tether_jobs").await;
    assert_eq!(n, 5, "one job per fire key");
    let runs = b.schedule_runs("t", s.id, 100).await.unwrap();
    let expected: Vec<ScheduleRun> = (0..5)
        .rev()
        .map(|round| ScheduleRun {
            fire_at: t0() + minutes(round),
            job_id: Some(jobs[round as usize]),
            outcome: RunOutcome::Enqueued,
        })
        .collect();
    assert_eq!(runs, expected, "newest first");
    let s = b.get_schedule("t", s.id).await.unwrap();
    assert_eq!(s.next_run_at, Some(t0() + minutes(5)));
    assert_eq!(s.last_run_at, Some(t0() + minutes(4)));
    assert_eq!(s.last_job_id, Some(jobs[4]));
    a.close().await;
    b.close().await;
}

/// The job of a fire key that exists already (as it would after a crash
/// between the enqueue and the timetable on a backend that could split
/// them) is the run's job: no second one is made.
#[tokio::test]
async fn a_fire_whose_job_exists_takes_that_job() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let earlier =
        [NewJob::new("q", "tick", json!("earlier")).idempotency_key(fire_key(s.id, t0()))];
    let earlier = store
        .enqueue("t", &enqueue_refs(&earlier), u32::MAX)
        .await
        .unwrap();
    let earlier = earlier[0].job.id;

    let mut wakeup = store.subscribe("t", "q");
    let outcome = fire(&store, &fire_of(&s, t0(), t0())).await;
    assert_eq!(
        outcome,
        FireOutcome::Ran(RunOutcome::Enqueued, Some(earlier))
    );
    assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 1);
    assert_eq!(
        store.get("t", earlier).await.unwrap().payload,
        json!("earlier")
    );
    let s = store.get_schedule("t", s.id).await.unwrap();
    assert_eq!(s.last_job_id, Some(earlier));
    assert_eq!(s.next_run_at, Some(t0() + minutes(1)));
    let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
    assert_eq!(runs[0].job_id, Some(earlier));
    // Nothing new was made, so nobody is woken.
    assert!(
        tokio::time::timeout(Duration::from_millis(50), wakeup.hinted())
            .await
            .is_err()
    );

    // A fire that does make a job wakes the queue's workers.
    let outcome = fire(&store, &fire_of(&s, t0() + minutes(1), t0() + minutes(1))).await;
    assert!(matches!(outcome, FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) if id != earlier));
    tokio::time::timeout(Duration::from_secs(1), wakeup.hinted())
        .await
        .unwrap();
    store.close().await;
}

/// The compare-and-set, the job and the run commit together: a fire
/// whose enqueue fails leaves the timetable where it was.
#[tokio::test]
async fn a_failed_enqueue_leaves_the_timetable_alone() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let mut bad = fire_of(&s, t0(), t0());
    // Out of the CHECK's range: only the engine's validation keeps such
    // a job out, so the INSERT fails inside the fire's transaction.
    bad.job = bad.job.priority(1_000);
    assert!(store.fire_schedule(&bad, Uuid::now_v7()).await.is_err());
    let after = store.get_schedule("t", s.id).await.unwrap();
    assert_eq!(after, s);
    assert!(store.schedule_runs("t", s.id, 10).await.unwrap().is_empty());
    assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 0);
    // The writer is clean and the fire can happen.
    let outcome = fire(&store, &fire_of(&s, t0(), t0())).await;
    assert!(matches!(
        outcome,
        FireOutcome::Ran(RunOutcome::Enqueued, Some(_))
    ));
    store.close().await;
}

/// Overlap `skip` records a skipped run while the last job is queued or
/// running, and enqueues again once it finished.
#[tokio::test]
async fn overlap_skip_waits_for_the_last_job() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s").overlap(Overlap::Skip), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let at = |n| t0() + minutes(n);
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(first)) =
        fire(&store, &fire_of(&s, at(0), at(0))).await
    else {
        panic!("the first fire enqueues");
    };
    // Queued: skipped.
    assert_eq!(
        fire(&store, &fire_of(&s, at(1), at(1))).await,
        FireOutcome::Ran(RunOutcome::Skipped, None)
    );
    // Running: skipped.
    let claimed = store.claim("t", &claim_req("q", 1)).await.unwrap();
    assert_eq!(claimed[0].job.id, first);
    assert_eq!(
        fire(&store, &fire_of(&s, at(2), at(2))).await,
        FireOutcome::Ran(RunOutcome::Skipped, None)
    );
    assert_eq!(
        store.get_schedule("t", s.id).await.unwrap().last_job_id,
        Some(first),
        "a skipped run keeps the last job"
    );
    // Finished: enqueued.
    store
        .complete("t", first, claimed[0].lease_token, None)
        .await
        .unwrap();
    let outcome = fire(&store, &fire_of(&s, at(3), at(3))).await;
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(second)) = outcome else {
        panic!("expected an enqueue, got {outcome:?}");
    };
    let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
    let outcomes: Vec<_> = runs.iter().map(|r| (r.outcome, r.job_id)).collect();
    assert_eq!(
        outcomes,
        vec![
            (RunOutcome::Enqueued, Some(second)),
            (RunOutcome::Skipped, None),
            (RunOutcome::Skipped, None),
            (RunOutcome::Enqueued, Some(first)),
        ]
    );
    let s = store.get_schedule("t", s.id).await.unwrap();
    assert_eq!(
        s.next_run_at,
        Some(at(4)),
        "skipped runs advance the timetable"
    );
    store.close().await;
}

/// Invariant 13: another tenant's schedule does not exist for it, and
/// names are unique per tenant only.
#[tokio::test]
async fn schedules_are_walled_by_tenant() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("a", &spec("nightly"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    assert_eq!(s.tenant, "a");
    // Same name, other tenant: fine.
    let other = store
        .create_schedule("b", &spec("nightly"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    assert_ne!(other.id, s.id);

    not_found(store.get_schedule("b", s.id).await.unwrap_err(), s.id);
    not_found(
        store
            .update_schedule("b", s.id, &spec("x"), None)
            .await
            .unwrap_err(),
        s.id,
    );
    not_found(store.delete_schedule("b", s.id).await.unwrap_err(), s.id);
    not_found(store.schedule_runs("b", s.id, 10).await.unwrap_err(), s.id);
    let job = NewJob::new("q", "tick", json!(null));
    let job_ref = NewJobRef {
        id: Uuid::now_v7(),
        job: &job,
    };
    not_found(
        store
            .trigger_schedule("b", s.id, job_ref)
            .await
            .unwrap_err(),
        s.id,
    );
    let mut wrong_tenant = fire_of(&s, t0(), t0());
    wrong_tenant.tenant = "b".into();
    assert_eq!(fire(&store, &wrong_tenant).await, FireOutcome::Raced);
    let listed: Vec<Uuid> = store
        .list_schedules("b")
        .await
        .unwrap()
        .iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec![other.id]);
    // Nothing of "a" was touched.
    assert_eq!(store.get_schedule("a", s.id).await.unwrap(), s);
    assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 0);

    // A taken name, on create and on rename.
    match store
        .create_schedule("a", &spec("nightly"), None, u32::MAX)
        .await
    {
        Err(Error::AlreadyExists(msg)) => assert_eq!(msg, "schedule \"nightly\""),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    let second = store
        .create_schedule("a", &spec("hourly"), None, u32::MAX)
        .await
        .unwrap();
    let err = store
        .update_schedule("a", second.id, &spec("nightly"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    assert_eq!(err.to_string(), "schedule \"nightly\" already exists");
    // The writer is usable after the refused UPDATE.
    store
        .update_schedule("a", second.id, &spec("hourly-2"), None)
        .await
        .unwrap();
    store.close().await;
}

/// Every field round-trips, any JSON payload included; an update keeps
/// the runs and `last_*`.
#[tokio::test]
async fn schedule_rows_round_trip() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    for payload in [
        json!(null),
        json!(0),
        json!("text ✓"),
        json!([1, {"a": null}]),
        json!({"nested": {"list": [true, false], "n": -1.5}}),
    ] {
        let name = format!("p{}", Uuid::new_v4().simple());
        let spec = ScheduleSpec::new(&name, "0 30 2 * * *", "q", "k")
            .timezone("Europe/Berlin")
            .payload(payload.clone())
            .enabled(false)
            .overlap(Overlap::Skip);
        let s = store
            .create_schedule("t", &spec, None, u32::MAX)
            .await
            .unwrap();
        assert_eq!(s.spec, spec);
        assert_eq!(s.next_run_at, None);
        assert_eq!((s.last_run_at, s.last_job_id), (None, None));
        assert_eq!(s.created_at, s.updated_at);
        assert_eq!(store.get_schedule("t", s.id).await.unwrap(), s);
    }

    let s = store
        .create_schedule("t", &spec("main"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let FireOutcome::Ran(_, Some(job)) = fire(&store, &fire_of(&s, t0(), t0())).await else {
        panic!("fire");
    };
    let new_spec = spec("main-renamed")
        .payload(json!({"v": 2}))
        .overlap(Overlap::Skip);
    let updated = store
        .update_schedule("t", s.id, &new_spec, Some(t0() + minutes(10)))
        .await
        .unwrap();
    assert_eq!(updated.spec, new_spec);
    assert_eq!(updated.next_run_at, Some(t0() + minutes(10)));
    assert_eq!(updated.last_run_at, Some(t0()));
    assert_eq!(updated.last_job_id, Some(job));
    assert_eq!(updated.created_at, s.created_at);
    assert!(updated.updated_at >= s.updated_at);
    assert_eq!(store.schedule_runs("t", s.id, 10).await.unwrap().len(), 1);
    // The old timetable no longer fires.
    assert_eq!(
        fire(&store, &fire_of(&s, t0() + minutes(1), t0() + minutes(1))).await,
        FireOutcome::Raced
    );

    let names: Vec<String> = store
        .list_schedules("t")
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "listed by name");
    assert_eq!(names.len(), 6);
    store.close().await;
}

/// A disabled schedule does not fire, even with a stale read of it.
#[tokio::test]
async fn a_disabled_schedule_does_not_fire() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    // Disabled but (wrongly) keeping its next_run_at: still no fire.
    store
        .update_schedule("t", s.id, &spec("s").enabled(false), Some(t0()))
        .await
        .unwrap();
    assert_eq!(
        fire(&store, &fire_of(&s, t0(), t0())).await,
        FireOutcome::Raced
    );
    assert!(store.due_schedules(10).await.unwrap().1.is_empty());
    assert_eq!(store.next_schedule_due().await.unwrap().1, None);
    store.close().await;
}

/// Deleting a schedule deletes its runs, not its jobs.
#[tokio::test]
async fn delete_takes_the_runs_and_leaves_the_jobs() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let keep = store
        .create_schedule("t", &spec("keep"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    fire(&store, &fire_of(&s, t0(), t0())).await;
    fire(&store, &fire_of(&keep, t0(), t0())).await;
    let job = NewJob::new("q", "tick", json!(null));
    let triggered = store
        .trigger_schedule(
            "t",
            s.id,
            NewJobRef {
                id: Uuid::now_v7(),
                job: &job,
            },
        )
        .await
        .unwrap();
    store.delete_schedule("t", s.id).await.unwrap();
    not_found(store.get_schedule("t", s.id).await.unwrap_err(), s.id);
    not_found(store.schedule_runs("t", s.id, 10).await.unwrap_err(), s.id);
    not_found(store.delete_schedule("t", s.id).await.unwrap_err(), s.id);
    let runs = count(&store, "SELECT count(*) FROM tether_schedule_runs").await;
    assert_eq!(runs, 1, "only the other schedule's run is left");
    store.get("t", triggered.id).await.unwrap();
    assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 3);
    store.close().await;
}

/// A trigger enqueues now, records a run stamped now, and leaves the
/// timetable alone.
#[tokio::test]
async fn a_trigger_runs_outside_the_timetable() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let next = Utc::now() + minutes(60);
    let spec = spec("s").payload(json!({"from": "trigger"}));
    let s = store
        .create_schedule("t", &spec, Some(next), u32::MAX)
        .await
        .unwrap();
    let mut wakeup = store.subscribe("t", "q");
    let job = NewJob::new("q", "tick", json!({"from": "trigger"})).idempotency_key("trig-1");
    let before = Utc::now() - minutes(1);
    let triggered = store
        .trigger_schedule(
            "t",
            s.id,
            NewJobRef {
                id: Uuid::now_v7(),
                job: &job,
            },
        )
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(1), wakeup.hinted())
        .await
        .unwrap();
    assert_eq!(triggered.state, JobState::Queued);
    assert_eq!(triggered.kind, "tick");
    assert_eq!(triggered.payload, json!({"from": "trigger"}));
    let after = store.get_schedule("t", s.id).await.unwrap();
    assert_eq!(after.next_run_at, s.next_run_at);
    assert_eq!(after.last_job_id, Some(triggered.id));
    let stamp = after.last_run_at.unwrap();
    assert!(stamp > before && stamp <= triggered.created_at + minutes(1));
    let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
    assert_eq!(
        runs,
        vec![ScheduleRun {
            fire_at: stamp,
            job_id: Some(triggered.id),
            outcome: RunOutcome::Enqueued,
        }]
    );
    store.close().await;
}

/// The scheduler's reads: due schedules of every tenant, earliest first,
/// with the database's clock.
#[tokio::test]
async fn due_schedules_span_tenants_earliest_first() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let (now, due) = store.due_schedules(10).await.unwrap();
    assert!(due.is_empty());
    assert!((Utc::now() - now).num_seconds().abs() < 5, "the db clock");
    assert_eq!(store.next_schedule_due().await.unwrap().1, None);

    let later = store
        .create_schedule("a", &spec("later"), Some(t0() + minutes(2)), u32::MAX)
        .await
        .unwrap();
    let first = store
        .create_schedule("b", &spec("first"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    let future = Utc::now() + minutes(60);
    store
        .create_schedule("a", &spec("future"), Some(future), u32::MAX)
        .await
        .unwrap();
    store
        .create_schedule("c", &spec("off").enabled(false), None, u32::MAX)
        .await
        .unwrap();
    let (_, due) = store.due_schedules(10).await.unwrap();
    let ids: Vec<(Uuid, &str)> = due.iter().map(|s| (s.id, s.tenant.as_str())).collect();
    assert_eq!(ids, vec![(first.id, "b"), (later.id, "a")]);
    let (_, due) = store.due_schedules(1).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].id, first.id);
    assert!(store.due_schedules(0).await.unwrap().1.is_empty());
    assert_eq!(store.next_schedule_due().await.unwrap().1, Some(t0()));

    store.close().await;
}

/// Pruning is bounded by its batch and spares recent runs.
#[tokio::test]
async fn pruning_runs_is_bounded() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = store
        .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
        .await
        .unwrap();
    for n in 0..3 {
        let at = t0() + minutes(n);
        fire(&store, &fire_of(&s, at, at)).await;
    }
    assert_eq!(store.prune_schedule_runs(3_600_000, 10).await.unwrap(), 0);
    assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 2);
    assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 1);
    assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 0);
    assert!(store.schedule_runs("t", s.id, 10).await.unwrap().is_empty());
    assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 3);
    store.close().await;
}

/// The statements the scheduler runs every tick use their indexes
/// instead of scanning every schedule or run.
#[tokio::test]
async fn schedule_queries_use_their_indexes() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let plan = |sql: String| {
        let store = store.clone();
        async move {
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(&store.reader)
                    .await
                    .unwrap();
            rows.into_iter()
                .map(|r| r.3)
                .collect::<Vec<_>>()
                .join(" | ")
        }
    };
    let due = plan(
        crate::sql::schedules::DUE_SCHEDULES
            .replace("?1", "1767225600000")
            .replace("?2", "10"),
    )
    .await;
    assert!(due.contains("tether_schedules_due"), "{due}");
    assert!(!due.contains("TEMP B-TREE"), "{due}");
    let next = plan(crate::sql::schedules::NEXT_SCHEDULE_DUE.to_owned()).await;
    assert!(next.contains("tether_schedules_due"), "{next}");
    let runs = plan(
        crate::sql::schedules::SCHEDULE_RUNS
            .replace("?1", "'t'")
            .replace("?2", "'x'")
            .replace("?3", "10"),
    )
    .await;
    assert!(runs.contains("tether_schedule_runs_schedule"), "{runs}");
    assert!(!runs.contains("TEMP B-TREE"), "{runs}");
    let prune = plan(
        crate::sql::schedules::PRUNE_SCHEDULE_RUNS
            .replace("?1", "0")
            .replace("?2", "10"),
    )
    .await;
    assert!(prune.contains("tether_schedule_runs_recorded"), "{prune}");
    // A pass's statements walk the pass and look each row up by primary
    // key, whatever the table holds.
    for (name, sql, table) in [
        (
            "advance",
            crate::sql::schedules::ADVANCE_SCHEDULES,
            "tether_schedules",
        ),
        (
            "last jobs",
            crate::sql::schedules::SET_LAST_JOBS,
            "tether_schedules",
        ),
        // `j` is tether_jobs.
        ("active jobs", crate::sql::schedules::ACTIVE_JOBS, "j"),
    ] {
        let pass = plan(sql.replace("?1", "'[]'")).await;
        let scans = pass
            .split(" | ")
            .any(|step| step.split(' ').take(2).eq(["SCAN", table]));
        assert!(!scans, "{name}: {pass}");
        assert!(pass.contains(&format!("SEARCH {table} ")), "{name}: {pass}");
    }
    store.close().await;
}
