//! Schedules on SQLite. Every behaviour that is the same on both backends
//! (tenant walls, a fire whose job exists, a failed enqueue, overlap `skip`,
//! triggers, disabled schedules, the due scan, pruning, deletion, round
//! trips) is proven by the behaviour suite in `tether-conformance`. What
//! stays here is particular to SQLite: fires racing from two stores (two
//! processes) on one file, wake-up hints that are exact because they are
//! in-process, and the query plans of the scheduler's statements.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tether_core::schedule::{
    fire_key, Fire, FireOutcome, RunOutcome, Schedule, ScheduleRun, ScheduleSpec,
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

/// Wake-up hints are in-process here, so they are exact: a fire that finds
/// its job already made (nothing new to claim) wakes nobody, while one that
/// makes a job wakes the queue's workers. (On PostgreSQL a hint may be
/// spurious, e.g. when its listener reconnects, so the suite checks only
/// that hints arrive.)
#[tokio::test]
async fn a_fire_that_finds_its_job_wakes_nobody() {
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
    assert!(
        tokio::time::timeout(Duration::from_millis(50), wakeup.hinted())
            .await
            .is_err(),
        "nothing new was made, so nobody is woken"
    );

    let outcome = fire(&store, &fire_of(&s, t0() + minutes(1), t0() + minutes(1))).await;
    assert!(matches!(outcome, FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) if id != earlier));
    tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
        .await
        .unwrap();
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
