//! Schedules as definitions: create, read, change, delete behind tenant
//! walls, refused input, the rows as stored, pruning of runs; and the
//! helpers the scheduler's behaviours (`schedule_fires.rs`, invariant 11)
//! share. Store-side cases use instants in the past, so that they do not
//! wait on the clock.

use std::fmt::Debug;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde_json::json;
use tether_core::schedule::{fire_key, Fire, FireOutcome};
use tether_core::{
    Engine, Error, JobFilter, NewJob, NewJobRef, Overlap, PutOutcome, Result, RunOutcome, Schedule,
    SchedulePatch, ScheduleSpec,
};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

pub(super) const EVERY_SECOND: &str = "* * * * * *";
/// Collapse every missed instant (as after downtime).
pub(super) const NO_CATCH_UP: Duration = Duration::ZERO;
/// Far longer than a wake-up hint takes, far shorter than any poll interval.
pub(super) const HINT_WITHIN: Duration = Duration::from_secs(5);

/// A schedule firing once a minute, at the second-of-minute two seconds
/// from now: soon, and with no other instant within a minute, so a test
/// that runs late on a loaded machine still sees that instant as the latest.
pub(super) fn soon_once_a_minute() -> String {
    use chrono::Timelike;
    let at = Utc::now() + chrono::Duration::seconds(2);
    format!("{} * * * * *", at.second())
}

pub(super) fn spec(name: &str, cron: &str) -> ScheduleSpec {
    ScheduleSpec::new(name, cron, "cron-q", "tick").payload(json!({"from": name}))
}

/// A whole minute `n` minutes before now (cron instants are whole
/// seconds); negative `n` is in the future.
pub(super) fn minutes_ago(n: i64) -> DateTime<Utc> {
    Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .expect("truncate")
        - TimeDelta::minutes(n)
}

/// The fire a scheduler that read `expected` as the schedule's
/// `next_run_at` would ask the store for: the run at `expected`, the next
/// one a minute later.
pub(super) fn fire_at(s: &Schedule, expected: DateTime<Utc>) -> Fire {
    Fire {
        schedule_id: s.id,
        tenant: s.tenant.clone(),
        expected_next_run_at: expected,
        fire_at: expected,
        next_run_at: Some(expected + TimeDelta::minutes(1)),
        job: NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
            .idempotency_key(fire_key(s.id, expected)),
        overlap: s.spec.overlap,
    }
}

/// The fire of the schedule's stored `next_run_at`.
pub(super) fn fire_next(s: &Schedule) -> Fire {
    fire_at(s, s.next_run_at.expect("an enabled schedule"))
}

/// Fires `fire` through the store, with a fresh id for its job.
pub(super) async fn fire(db: &TestDb, fire: &Fire) -> FireOutcome {
    ok(db.engine.store().fire_schedule(fire, Uuid::now_v7()).await)
}

/// Sleeps until just after `at` (wall clock).
pub(super) async fn sleep_past(at: DateTime<Utc>, extra_ms: i64) {
    let wait = (at - Utc::now()).num_milliseconds() + extra_ms;
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

pub(super) async fn scheduled_jobs(e: &Engine, tenant: &str) -> Vec<tether_core::Job> {
    let filter = JobFilter {
        queue: Some("cron-q".into()),
        limit: Some(500),
        ..JobFilter::default()
    };
    ok(e.list(tenant, &filter).await).jobs
}

/// The ids of the tenant's jobs with idempotency key `key`.
pub(super) async fn jobs_with_key(e: &Engine, tenant: &str, key: &str) -> Vec<Uuid> {
    scheduled_jobs(e, tenant)
        .await
        .into_iter()
        .filter(|j| j.idempotency_key.as_deref() == Some(key))
        .map(|j| j.id)
        .collect()
}

/// Asserts `NotFound` for schedule `id`, with its message.
#[track_caller]
pub(super) fn expect_no_schedule<T: Debug>(r: Result<T>, id: Uuid, what: &str) {
    match r {
        Err(Error::NotFound(m)) => assert_eq!(m, format!("schedule {id}"), "{what}"),
        other => panic!("{what}: expected schedule {id} not found, got {other:?}"),
    }
}

/// Asserts `AlreadyExists` for the schedule name `name`, with its message.
#[track_caller]
pub(super) fn expect_name_taken<T: Debug>(r: Result<T>, name: &str) {
    match r {
        Err(Error::AlreadyExists(m)) => {
            assert_eq!(m, format!("schedule \"{name}\""));
            assert_eq!(
                Error::AlreadyExists(m).to_string(),
                format!("schedule \"{name}\" already exists")
            );
        }
        other => panic!("expected the name {name} taken, got {other:?}"),
    }
}

/// Subscribes to the scheduled jobs' queue and drains a spurious start-up
/// hint (e.g. a listener connecting).
pub(super) async fn subscribe(db: &TestDb, tenant: &str) -> tether_core::Wakeup {
    let mut w = db.engine.subscribe(tenant, "cron-q").expect("subscribe");
    let _ = tokio::time::timeout(Duration::from_millis(300), w.hinted()).await;
    w
}

pub(super) async fn expect_hint(w: &mut tether_core::Wakeup, what: &str) {
    if tokio::time::timeout(HINT_WITHIN, w.hinted()).await.is_err() {
        panic!("no wake-up hint within {HINT_WITHIN:?} after {what}");
    }
}

/// Create, read, list, patch and delete; names are unique per tenant; a
/// schedule of another tenant does not exist for this one, through the
/// engine or the store, and nothing of it is touched or fired.
pub async fn schedules_crud_and_tenant_walls(db: &TestDb) {
    let e = &db.engine;
    let store = e.store();
    let before = Utc::now();
    let nightly = spec("nightly", "0 3 * * *").timezone("Europe/Berlin");
    let s = ok(e.create_schedule("t1", &nightly).await);
    assert_eq!(s.tenant, "t1");
    assert_eq!(s.spec, nightly);
    assert_eq!(s.spec.name, "nightly");
    assert_eq!(s.spec.timezone, "Europe/Berlin");
    assert_eq!(s.spec.overlap, Overlap::Allow);
    assert!(s.spec.enabled);
    assert_eq!(s.spec.payload, json!({"from": "nightly"}));
    let next = s.next_run_at.expect("an enabled schedule has a next run");
    assert!(
        next > before && next <= before + chrono::Duration::days(1) + chrono::Duration::hours(1)
    );
    assert_eq!((s.last_run_at, s.last_job_id), (None, None));
    assert_eq!(s.created_at, s.updated_at);
    assert_eq!(ok(e.get_schedule("t1", s.id).await), s);

    expect_name_taken(
        e.create_schedule("t1", &spec("nightly", "0 4 * * *")).await,
        "nightly",
    );
    // Another tenant may use the same name.
    let other = ok(e.create_schedule("t2", &spec("nightly", "0 4 * * *")).await);
    ok(e.create_schedule("t1", &spec("hourly", "0 * * * *")).await);
    ok(e.create_schedule("t1", &spec("Weekly", "0 5 * * 1")).await);
    let names: Vec<String> = ok(e.list_schedules("t1").await)
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    assert_eq!(
        names,
        ["Weekly", "hourly", "nightly"],
        "listed by the bytes of their names"
    );

    // Timestamps at millisecond precision move on.
    tick().await;
    let patched = ok(e
        .patch_schedule(
            "t1",
            s.id,
            &SchedulePatch {
                cron: Some("30 6 * * 1-5".into()),
                overlap: Some(Overlap::Skip),
                payload: Some(json!(null)),
                ..SchedulePatch::default()
            },
        )
        .await);
    assert_eq!(patched.spec.cron, "30 6 * * 1-5");
    assert_eq!(patched.spec.overlap, Overlap::Skip);
    assert_eq!(patched.spec.payload, json!(null));
    assert_eq!(patched.spec.name, "nightly");
    assert_eq!(patched.created_at, s.created_at);
    // Not earlier: SQLite keeps milliseconds, and a patch in the create's
    // millisecond reads the same instant.
    assert!(patched.updated_at >= s.updated_at);
    expect_name_taken(
        e.patch_schedule(
            "t1",
            s.id,
            &SchedulePatch {
                name: Some("hourly".into()),
                ..SchedulePatch::default()
            },
        )
        .await,
        "hourly",
    );
    assert_eq!(
        ok(e.get_schedule("t1", s.id).await),
        patched,
        "a refused rename changes nothing"
    );
    // The store is usable after the refused update.
    let renamed = ok(e
        .patch_schedule(
            "t1",
            s.id,
            &SchedulePatch {
                name: Some("nightly-2".into()),
                ..SchedulePatch::default()
            },
        )
        .await);
    assert_eq!(renamed.spec.name, "nightly-2");

    // The walls: t1 cannot see, touch or fire t2's schedule.
    let id = other.id;
    expect_no_schedule(e.get_schedule("t1", id).await, id, "get");
    expect_no_schedule(
        e.patch_schedule("t1", id, &SchedulePatch::default()).await,
        id,
        "patch",
    );
    expect_no_schedule(e.schedule_runs("t1", id).await, id, "runs");
    expect_no_schedule(e.trigger_schedule("t1", id).await, id, "trigger");
    expect_no_schedule(e.delete_schedule("t1", id).await, id, "delete");
    // The store's own guards, which the engine's reads would hide.
    expect_no_schedule(
        store.update_schedule("t1", id, &other.spec, None).await,
        id,
        "store update",
    );
    let orphan = Uuid::now_v7();
    let job = NewJob::new("cron-q", "tick", json!(null));
    expect_no_schedule(
        store
            .trigger_schedule(
                "t1",
                id,
                NewJobRef {
                    id: orphan,
                    job: &job,
                },
            )
            .await,
        id,
        "store trigger",
    );
    expect_not_found(e.get("t1", orphan).await);
    let wrong_tenant = Fire {
        tenant: "t1".into(),
        ..fire_next(&other)
    };
    assert_eq!(
        fire(db, &wrong_tenant).await,
        FireOutcome::Raced,
        "a fire in another tenant's name"
    );
    assert_eq!(ok(e.get_schedule("t2", id).await), other, "untouched");
    assert_eq!(ok(e.list_schedules("t2").await), vec![other.clone()]);
    assert!(all_jobs(db, "t1").await.is_empty(), "no job made");
    assert!(all_jobs(db, "t2").await.is_empty(), "no job made");

    ok(e.delete_schedule("t1", s.id).await);
    expect_no_schedule(e.get_schedule("t1", s.id).await, s.id, "get deleted");
    expect_no_schedule(e.delete_schedule("t1", s.id).await, s.id, "delete twice");
}

/// A schedule put by name (as a deploy declares it): created, then the
/// same definition again writes nothing, a different one replaces it
/// keeping its id and runs, fields left out take their defaults; bad input
/// changes nothing; another tenant's schedule of the name is its own; and
/// puts racing for one new name all succeed, leaving one schedule.
pub async fn schedules_put_by_name_create_update_or_leave_unchanged(db: &TestDb) {
    let e = &db.engine;
    let nightly = spec("nightly", "0 3 * * *").timezone("Europe/Berlin");
    let (created, outcome) = ok(e.put_schedule("t1", &nightly).await);
    assert_eq!(outcome, PutOutcome::Created);
    assert_eq!(created.spec, nightly);

    tick().await;
    let (same, outcome) = ok(e.put_schedule("t1", &nightly).await);
    assert_eq!(outcome, PutOutcome::Unchanged);
    assert_eq!(same, created, "nothing written, not even updated_at");

    // A run to keep across the replacement.
    let past = minutes_ago(3);
    ok(e.store()
        .update_schedule("t1", created.id, &nightly, Some(past))
        .await);
    let stored = ok(e.get_schedule("t1", created.id).await);
    assert!(matches!(
        fire(db, &fire_next(&stored)).await,
        FireOutcome::Ran(RunOutcome::Enqueued, Some(_))
    ));
    let runs = ok(e.schedule_runs("t1", created.id).await);
    assert_eq!(runs.len(), 1);

    tick().await;
    let replacement = ScheduleSpec::new("nightly", "30 6 * * 1-5", "other-q", "digest");
    let (updated, outcome) = ok(e.put_schedule("t1", &replacement).await);
    assert_eq!(outcome, PutOutcome::Updated);
    assert_eq!(updated.id, created.id, "the same schedule");
    assert_eq!(updated.spec, replacement);
    assert_eq!(updated.spec.timezone, "UTC", "a default, not the old zone");
    assert_eq!(
        updated.spec.payload,
        json!(null),
        "a default, not the old payload"
    );
    assert!(updated.updated_at > created.updated_at);
    let next = updated.next_run_at.expect("enabled");
    assert!(next > Utc::now(), "recomputed from now: {next}");
    assert_eq!(
        ok(e.schedule_runs("t1", created.id).await),
        runs,
        "runs kept"
    );
    assert_eq!(updated.last_run_at, Some(past));

    // Disabling through a put clears the next run; putting it back
    // enabled computes one.
    let (off, outcome) = ok(e
        .put_schedule("t1", &replacement.clone().enabled(false))
        .await);
    assert_eq!(outcome, PutOutcome::Updated);
    assert_eq!(off.next_run_at, None);

    // Refused input changes nothing.
    for bad in [
        ScheduleSpec::new("nightly", "not cron", "q", "k"),
        ScheduleSpec::new("nightly", "0 3 * * *", "q", "k").timezone("Mars/Olympus"),
        ScheduleSpec::new("bad name!", "0 3 * * *", "q", "k"),
        ScheduleSpec::new("nightly", "0 3 * * *", "", "k"),
    ] {
        let err = e.put_schedule("t1", &bad).await.expect_err("refused");
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    }
    assert_eq!(ok(e.get_schedule("t1", created.id).await), off);
    assert_eq!(ok(e.list_schedules("t1").await).len(), 1);

    // Another tenant's name is its own.
    let (theirs, outcome) = ok(e.put_schedule("t2", &nightly).await);
    assert_eq!(outcome, PutOutcome::Created);
    assert_ne!(theirs.id, created.id);
    assert_eq!(ok(e.get_schedule("t1", created.id).await), off);

    // Four deploys putting one new name at once.
    let racers = (0..4).map(|i| {
        let spec = spec("raced", &format!("{i} 4 * * *"));
        async move { e.put_schedule("t1", &spec).await }
    });
    let answers = futures_util::future::join_all(racers).await;
    let outcomes: Vec<PutOutcome> = answers.into_iter().map(|a| ok(a).1).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == PutOutcome::Created)
            .count(),
        1,
        "{outcomes:?}"
    );
    let raced: Vec<Schedule> = ok(e.list_schedules("t1").await)
        .into_iter()
        .filter(|s| s.spec.name == "raced")
        .collect();
    assert_eq!(raced.len(), 1);
}

/// Bad expressions, zones, names and payloads are refused and write
/// nothing.
pub async fn bad_schedules_are_refused_and_write_nothing(db: &TestDb) {
    let e = &db.engine;
    for (bad, field) in [
        (spec("a", "* * * *"), "cron"),
        (spec("a", "61 * * * *"), "cron"),
        (spec("a", "not cron"), "cron"),
        (spec("a", "0 0 30 2 *"), "cron"),
        (
            spec("a", "0 3 * * *").timezone("Mars/Olympus_Mons"),
            "timezone",
        ),
        (spec("a", "0 3 * * *").timezone(""), "timezone"),
        (spec("has space", "0 3 * * *"), "name"),
        (
            ScheduleSpec::new("a", "0 3 * * *", "bad queue", "k"),
            "queue",
        ),
        (ScheduleSpec::new("a", "0 3 * * *", "q", ""), "kind"),
        // Characters the parser would read as whitespace (and the store
        // keep as written), or that a terminal obeys: printable ASCII only.
        (spec("a", "0 3 * * *\r"), "cron"),
        (spec("a", "0\u{b}3 * * *"), "cron"),
        (spec("a", "0 3 * * *\u{85}"), "cron"),
        (spec("a", "0\t3 * * *"), "cron"),
        (spec("a", "0 3 * * *\u{1b}]0;x\u{7}"), "cron"),
        (spec("a", "0 3 * * \u{2160}"), "cron"),
        (spec("a", "0 3 * * *").timezone("UTC\r"), "timezone"),
        (
            spec("a", "0 3 * * *").timezone("Europe/Berl\u{131}n"),
            "timezone",
        ),
    ] {
        match e.create_schedule("t", &bad).await {
            Err(Error::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad:?}"),
            other => panic!("{bad:?} was not refused as invalid {field}: {other:?}"),
        }
    }
    let big = spec("big", "0 3 * * *").payload(json!("x".repeat(2 * 1024 * 1024)));
    expect_code(e.create_schedule("t", &big).await, "payload_too_large");
    assert!(
        ok(e.list_schedules("t").await).is_empty(),
        "nothing written"
    );

    let s = ok(e.create_schedule("t", &spec("ok", "0 3 * * *")).await);
    expect_invalid(
        e.patch_schedule(
            "t",
            s.id,
            &SchedulePatch {
                timezone: Some("Nowhere/Land".into()),
                ..SchedulePatch::default()
            },
        )
        .await,
    );
    for (patch, field) in [
        (
            SchedulePatch {
                cron: Some("0 4 * * *\r".into()),
                ..SchedulePatch::default()
            },
            "cron",
        ),
        (
            SchedulePatch {
                cron: Some("0\u{85}4 * * *".into()),
                ..SchedulePatch::default()
            },
            "cron",
        ),
        (
            SchedulePatch {
                timezone: Some("UTC\u{b}".into()),
                ..SchedulePatch::default()
            },
            "timezone",
        ),
    ] {
        match e.patch_schedule("t", s.id, &patch).await {
            Err(Error::Invalid { field: f, message }) => {
                assert_eq!(f, field, "{patch:?}: {message}");
                assert!(message.contains("printable ASCII"), "{message}");
            }
            other => panic!("{patch:?} was not refused as invalid {field}: {other:?}"),
        }
    }
    assert_eq!(
        ok(e.get_schedule("t", s.id).await),
        s,
        "a refused patch changes nothing"
    );
}

/// A store asked to keep a next run for a disabled schedule keeps none,
/// on create and on update: a disabled schedule has no next run, whatever
/// its caller computed.
pub async fn a_disabled_schedule_keeps_no_next_run_even_if_given_one(db: &TestDb) {
    let store = db.engine.store();
    let spec = ScheduleSpec::new("s", "0 * * * *", "q", "k");
    let next = Utc::now()
        .duration_trunc(TimeDelta::minutes(1))
        .expect("truncate")
        + TimeDelta::minutes(30);
    let s = ok(store
        .create_schedule("t", &spec, Some(next), u32::MAX)
        .await);
    assert_eq!(s.next_run_at, Some(next));
    let disabled = spec.clone().enabled(false).payload(json!("new"));
    let u = ok(store
        .update_schedule("t", s.id, &disabled, Some(next))
        .await);
    assert_eq!(u.spec, disabled);
    assert_eq!(u.next_run_at, None);
    assert_eq!(u.created_at, s.created_at);
    assert!(
        u.updated_at >= s.updated_at,
        "not earlier (SQLite keeps milliseconds)"
    );
    assert_eq!(ok(store.get_schedule("t", s.id).await).next_run_at, None);

    let off = ok(store
        .create_schedule(
            "t",
            &ScheduleSpec::new("off", "0 * * * *", "q", "k").enabled(false),
            Some(next),
            u32::MAX,
        )
        .await);
    assert_eq!(off.next_run_at, None);
    assert_eq!(ok(store.get_schedule("t", off.id).await).next_run_at, None);
}

/// Runs older than the retention window are pruned, at most a batch at a
/// time (a retention beyond the range of a timestamp keeps everything);
/// their jobs stay, and outlive the schedule.
pub async fn schedule_runs_are_pruned_and_jobs_outlive_schedules(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e.create_schedule("t", &spec("daily", "0 3 * * *")).await);
    let mut jobs = Vec::new();
    for _ in 0..3 {
        jobs.push(ok(e.trigger_schedule("t", s.id).await).id);
    }
    assert_eq!(
        ok(e.prune_schedule_runs(i64::MAX, 100).await),
        0,
        "a retention beyond any timestamp keeps everything"
    );
    assert_eq!(
        ok(e.prune_schedule_runs(3_600_000, 100).await),
        0,
        "young runs stay"
    );
    tick().await;
    assert_eq!(ok(e.prune_schedule_runs(0, 2).await), 2, "bounded by batch");
    assert_eq!(ok(e.prune_schedule_runs(0, 2).await), 1);
    assert_eq!(ok(e.prune_schedule_runs(0, 2).await), 0);
    assert!(ok(e.schedule_runs("t", s.id).await).is_empty());
    let mut kept: Vec<Uuid> = scheduled_jobs(e, "t").await.iter().map(|j| j.id).collect();
    kept.sort();
    jobs.sort();
    assert_eq!(kept, jobs, "pruning runs leaves their jobs");
    ok(e.delete_schedule("t", s.id).await);
    assert_eq!(
        get(db, "t", jobs[0]).await.id,
        jobs[0],
        "the job outlives its schedule"
    );
}

/// Every field of a schedule round-trips, any JSON payload included (the
/// default one is JSON null); an update replaces the definition and
/// `next_run_at` and keeps the runs and `last_*`, and a fire of the old
/// timetable then races; schedules are listed by name.
pub async fn schedule_rows_round_trip(db: &TestDb) {
    let store = db.engine.store();
    let plain = ScheduleSpec::new("plain", "* * * * *", "q", "k");
    assert_eq!(plain.payload, json!(null));
    for (i, payload) in [
        json!(null),
        json!(0),
        json!("text ✓"),
        json!([1, {"a": null}]),
        json!({"nested": {"list": [true, false], "n": -1.5}}),
    ]
    .into_iter()
    .enumerate()
    {
        let spec = ScheduleSpec::new(format!("p{i}"), "0 30 2 * * *", "q", "k")
            .timezone("Europe/Berlin")
            .payload(payload)
            .enabled(false)
            .overlap(Overlap::Skip);
        let s = ok(store.create_schedule("t", &spec, None, u32::MAX).await);
        assert_eq!(s.spec, spec);
        assert_eq!(s.next_run_at, None);
        assert_eq!((s.last_run_at, s.last_job_id), (None, None));
        assert_eq!(s.created_at, s.updated_at);
        assert_eq!(ok(store.get_schedule("t", s.id).await), s);
    }
    let next = minutes_ago(-30);
    let s = ok(store
        .create_schedule("t", &plain, Some(next), u32::MAX)
        .await);
    assert_eq!(s.spec, plain);
    assert_eq!(s.spec.payload, json!(null));
    assert_eq!(s.next_run_at, Some(next));
    assert_eq!(ok(store.get_schedule("t", s.id).await), s);

    let t0 = minutes_ago(10);
    let main = spec("main", "* * * * *");
    let s = ok(store.create_schedule("t", &main, Some(t0), u32::MAX).await);
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(job)) = fire(db, &fire_next(&s)).await else {
        panic!("the fire enqueues");
    };
    let renamed = spec("main-renamed", "* * * * *")
        .payload(json!({"v": 2}))
        .overlap(Overlap::Skip);
    let later = t0 + TimeDelta::minutes(10);
    let updated = ok(store
        .update_schedule("t", s.id, &renamed, Some(later))
        .await);
    assert_eq!(updated.spec, renamed);
    assert_eq!(updated.next_run_at, Some(later));
    assert_eq!(updated.last_run_at, Some(t0));
    assert_eq!(updated.last_job_id, Some(job));
    assert_eq!(updated.created_at, s.created_at);
    assert!(updated.updated_at >= s.updated_at);
    assert_eq!(ok(store.get_schedule("t", s.id).await), updated);
    assert_eq!(ok(store.schedule_runs("t", s.id, 10).await).len(), 1);
    // The old timetable no longer fires.
    let old = fire_at(&s, t0 + TimeDelta::minutes(1));
    assert_eq!(fire(db, &old).await, FireOutcome::Raced);

    let names: Vec<String> = ok(store.list_schedules("t").await)
        .into_iter()
        .map(|s| s.spec.name)
        .collect();
    assert_eq!(
        names,
        ["main-renamed", "p0", "p1", "p2", "p3", "p4", "plain"],
        "listed by name"
    );
}

/// Deleting a schedule deletes its runs (and only its own: pruning then
/// finds only the other schedule's run) but not its jobs; a deleted
/// schedule is not found, cannot be triggered, and a refused trigger leaves
/// no job behind.
pub async fn deleting_a_schedule_takes_its_runs_and_leaves_its_jobs(db: &TestDb) {
    let e = &db.engine;
    let store = e.store();
    let s = ok(store
        .create_schedule(
            "t",
            &spec("s", "* * * * *"),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await);
    let keep = ok(store
        .create_schedule(
            "t",
            &spec("keep", "* * * * *"),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await);
    fire(db, &fire_next(&s)).await;
    fire(db, &fire_next(&keep)).await;
    let triggered = ok(e.trigger_schedule("t", s.id).await);
    assert_eq!(ok(e.schedule_runs("t", s.id).await).len(), 2);

    ok(e.delete_schedule("t", s.id).await);
    expect_no_schedule(e.get_schedule("t", s.id).await, s.id, "get");
    expect_no_schedule(e.schedule_runs("t", s.id).await, s.id, "runs");
    expect_no_schedule(e.delete_schedule("t", s.id).await, s.id, "delete twice");
    expect_no_schedule(e.trigger_schedule("t", s.id).await, s.id, "trigger");
    let orphan = Uuid::now_v7();
    let job = NewJob::new("cron-q", "tick", json!(null));
    expect_no_schedule(
        store
            .trigger_schedule(
                "t",
                s.id,
                NewJobRef {
                    id: orphan,
                    job: &job,
                },
            )
            .await,
        s.id,
        "store trigger",
    );
    expect_not_found(e.get("t", orphan).await);

    assert_eq!(ok(e.schedule_runs("t", keep.id).await).len(), 1);
    tick().await;
    assert_eq!(
        ok(e.prune_schedule_runs(0, 100).await),
        1,
        "only the other schedule's run is left"
    );
    get(db, "t", triggered.id).await;
    assert_eq!(scheduled_jobs(e, "t").await.len(), 3, "the jobs stay");
}
