//! Invariant 11, cron fires once, the scheduler's side: a schedule's fire
//! instant produces exactly one job across concurrent schedulers and
//! crashes; missed fires collapse into one run; overlap `skip`, disabling
//! and triggering behave as `docs/API.md` says; the due scan. The store's
//! side is driven directly through `Engine::store` with instants in the
//! past, so that it does not wait on the clock. Definitions, rows and
//! pruning are in `schedules.rs`, with the helpers both use.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use tether_core::cron::CronSchedule;
use tether_core::schedule::{fire_key, FireOutcome};
use tether_core::{
    Completion, Engine, JobState, NewJob, NewJobRef, Overlap, RunOutcome, Schedule, SchedulePatch,
    ScheduleRun,
};
use uuid::Uuid;

use super::support::*;
use crate::TestDb;

use super::schedules::*;

/// Four concurrent schedulers fire a per-second schedule for about three
/// seconds: every fire instant made exactly one job and one run. (Instants
/// are whole seconds apart; on a loaded machine a late pass may collapse
/// two into one, which is the documented behaviour, never a double.)
pub async fn concurrent_schedulers_fire_each_instant_once(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e.create_schedule("t", &spec("sec", EVERY_SECOND)).await);
    let until = Utc::now() + chrono::Duration::milliseconds(3_300);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let e = e.clone();
        tasks.push(tokio::spawn(async move {
            let mut enqueued = 0;
            while Utc::now() < until {
                enqueued += e
                    .fire_due_schedules(100, NO_CATCH_UP)
                    .await
                    .expect("fire")
                    .enqueued;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            enqueued
        }));
    }
    let mut enqueued = 0;
    for t in tasks {
        enqueued += t.await.unwrap();
    }
    let jobs = scheduled_jobs(e, "t").await;
    assert!(
        jobs.len() >= 2,
        "a per-second schedule fired only {} times",
        jobs.len()
    );
    assert_eq!(jobs.len() as u64, enqueued, "each enqueued run is one job");
    let keys: HashSet<String> = jobs
        .iter()
        .map(|j| j.idempotency_key.clone().expect("a fire key"))
        .collect();
    assert_eq!(keys.len(), jobs.len(), "no fire key made two jobs");

    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), jobs.len(), "one run per job");
    let mut instants: Vec<DateTime<Utc>> = runs.iter().map(|r| r.fire_at).collect();
    assert!(
        instants.windows(2).all(|w| w[0] > w[1]),
        "runs newest first, no instant twice: {instants:?}"
    );
    instants.reverse();
    for w in instants.windows(2) {
        let gap = (w[1] - w[0]).num_milliseconds();
        assert!(
            gap >= 1_000 && gap % 1_000 == 0,
            "instants {w:?} are not whole seconds apart"
        );
    }
    for (run, at) in runs.iter().zip(instants.iter().rev()) {
        assert_eq!(run.outcome, RunOutcome::Enqueued);
        let job = jobs
            .iter()
            .find(|j| Some(j.id) == run.job_id)
            .expect("the run's job");
        assert_eq!(
            job.idempotency_key.as_deref(),
            Some(fire_key(s.id, *at).as_str())
        );
        assert_eq!(job.kind, "tick");
        assert_eq!(job.payload, json!({"from": "sec"}));
    }
    let after = ok(e.get_schedule("t", s.id).await);
    assert_eq!(after.last_run_at, instants.last().copied());
    assert!(after.next_run_at.unwrap() > after.last_run_at.unwrap());
}

/// After downtime the missed fires collapse into one run stamped with the
/// latest missed instant, and the next run is in the future.
pub async fn missed_fires_collapse_into_one_run(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e.create_schedule("t", &spec("sec", EVERY_SECOND)).await);
    let first = s.next_run_at.unwrap();
    // Nobody fires for over three instants.
    sleep_past(first, 3_200).await;
    let report = ok(e.fire_due_schedules(100, NO_CATCH_UP).await);
    assert_eq!(report.enqueued, 1, "{report:?}");
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), 1);
    let stamped = runs[0].fire_at;
    assert!(
        stamped >= first + chrono::Duration::seconds(3),
        "stamped with the latest missed instant, got {stamped} (first was {first})"
    );
    assert!(stamped <= Utc::now());
    let after = ok(e.get_schedule("t", s.id).await);
    assert!(after.next_run_at.unwrap() > stamped);
    assert_eq!(
        ok(e.fire_due_schedules(100, NO_CATCH_UP).await).enqueued,
        0,
        "nothing due twice"
    );
}

/// Instants missed by less than the catch-up window (a leader failover) are
/// each fired, in order, one per pass; none is lost.
pub async fn short_gaps_are_caught_up_instant_by_instant(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e.create_schedule("t", &spec("sec", EVERY_SECOND)).await);
    let first = s.next_run_at.unwrap();
    sleep_past(first, 2_300).await;
    let mut enqueued = 0;
    for _ in 0..10 {
        enqueued += ok(e.fire_due_schedules(100, Duration::from_secs(60)).await).enqueued;
    }
    assert!(
        enqueued >= 3,
        "only {enqueued} of the missed instants fired"
    );
    let mut instants: Vec<DateTime<Utc>> = ok(e.schedule_runs("t", s.id).await)
        .into_iter()
        .map(|r| r.fire_at)
        .collect();
    instants.reverse();
    assert_eq!(instants[0], first, "the first missed instant fired");
    for w in instants.windows(2) {
        assert_eq!(
            (w[1] - w[0]).num_milliseconds(),
            1_000,
            "no instant lost: {instants:?}"
        );
    }
    assert_eq!(scheduled_jobs(e, "t").await.len(), instants.len());
}

/// A fire whose job already exists (the scheduler died after enqueueing,
/// before its transaction committed... or another node enqueued it) makes
/// no second job: the run refers to the existing one, which stays as it
/// was, and the id minted for the fire names no job. Firing the same
/// instant again (the timetable set back onto it) gives the same job. A
/// fire that does make a job wakes the queue's subscribers.
pub async fn a_fire_never_makes_a_second_job_for_its_instant(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e
        .create_schedule("t", &spec("soon", &soon_once_a_minute()))
        .await);
    let at = s.next_run_at.unwrap();
    let key = fire_key(s.id, at);
    let existing = ok(e
        .enqueue(
            "t",
            NewJob::new("cron-q", "tick", json!("early")).idempotency_key(key.clone()),
        )
        .await)
    .job;
    sleep_past(at, 200).await;
    ok(e.fire_due_schedules(100, NO_CATCH_UP).await);
    assert_eq!(
        jobs_with_key(e, "t", &key).await,
        [existing.id],
        "one job for the instant"
    );
    assert_eq!(get(db, "t", existing.id).await.payload, json!("early"));
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs[0].fire_at, at);
    assert_eq!(runs[0].job_id, Some(existing.id));
    let after = ok(e.get_schedule("t", s.id).await);
    assert_eq!(after.last_job_id, Some(existing.id));
    assert_eq!(after.last_run_at, Some(at));
    assert!(after.next_run_at.unwrap() > at, "the timetable moved on");

    // The same instant again, through the store with a fresh id.
    let store = e.store();
    let back = ok(store.update_schedule("t", s.id, &s.spec, Some(at)).await);
    let again = fire_next(&back);
    let fresh = Uuid::now_v7();
    assert_eq!(
        ok(store.fire_schedule(&again, fresh).await),
        FireOutcome::Ran(RunOutcome::Enqueued, Some(existing.id))
    );
    expect_not_found(e.get("t", fresh).await);
    assert_eq!(jobs_with_key(e, "t", &key).await, [existing.id]);
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.job_id == Some(existing.id)));
    let after = ok(e.get_schedule("t", s.id).await);
    assert_eq!(after.last_job_id, Some(existing.id));
    assert_eq!(after.next_run_at, again.next_run_at);

    // A fire that makes a job wakes the queue's subscribers.
    let mut w = subscribe(db, "t").await;
    match fire(db, &fire_next(&after)).await {
        FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) => assert_ne!(id, existing.id),
        other => panic!("the next instant's fire: {other:?}"),
    }
    expect_hint(&mut w, "a fire that made a job").await;
}

/// Overlap `skip`: while the previous run's job is queued or running, a fire
/// enqueues nothing and records a `skipped` run (the timetable moves on, the
/// last job stays the schedule's); once it finished, fires enqueue again.
pub async fn overlap_skip_records_skipped_runs(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e
        .create_schedule("t", &spec("sec", EVERY_SECOND).overlap(Overlap::Skip))
        .await);
    sleep_past(s.next_run_at.unwrap(), 100).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).enqueued, 1);
    let first = ok(e.get_schedule("t", s.id).await);
    let job1 = first.last_job_id.expect("the first fire's job");
    // The instant each fire was stamped with (a late pass may collapse
    // several into the latest, so read it back rather than predict it).
    let mut instants = vec![first.last_run_at.expect("fired")];

    // After a skipped fire: stamped, moved on, the last job kept.
    let skipped = |now: &Schedule, instants: &mut Vec<DateTime<Utc>>| {
        let stamped = now.last_run_at.expect("fired");
        assert!(
            stamped > *instants.last().unwrap(),
            "{stamped} is a new instant"
        );
        assert!(
            now.next_run_at.unwrap() > stamped,
            "skipped runs advance the timetable"
        );
        assert_eq!(
            now.last_job_id,
            Some(job1),
            "a skipped run keeps the last job"
        );
        instants.push(stamped);
    };
    // Still queued: skipped.
    sleep_past(first.next_run_at.unwrap(), 100).await;
    let report = ok(e.fire_due_schedules(100, NO_CATCH_UP).await);
    assert_eq!((report.enqueued, report.skipped), (0, 1), "{report:?}");
    let now = ok(e.get_schedule("t", s.id).await);
    skipped(&now, &mut instants);
    // Running: skipped.
    let claimed = claim_one(db, "t", "cron-q").await;
    assert_eq!(claimed.job.id, job1);
    sleep_past(now.next_run_at.unwrap(), 100).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).skipped, 1);
    let now = ok(e.get_schedule("t", s.id).await);
    skipped(&now, &mut instants);
    // Finished: enqueued again.
    let done = Completion {
        id: claimed.job.id,
        lease_token: claimed.lease_token,
        result: None,
    };
    ok(e.complete_many("t", &[done]).await)
        .into_iter()
        .for_each(|r| r.expect("completed"));
    sleep_past(now.next_run_at.unwrap(), 100).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).enqueued, 1);
    let now = ok(e.get_schedule("t", s.id).await);
    let job4 = now.last_job_id.expect("a new last job");
    assert_ne!(job4, job1);
    instants.push(now.last_run_at.expect("fired"));

    let runs = ok(e.schedule_runs("t", s.id).await);
    let seen: Vec<_> = runs
        .iter()
        .map(|r| (r.fire_at, r.outcome, r.job_id))
        .collect();
    assert_eq!(
        seen,
        [
            (instants[3], RunOutcome::Enqueued, Some(job4)),
            (instants[2], RunOutcome::Skipped, None),
            (instants[1], RunOutcome::Skipped, None),
            (instants[0], RunOutcome::Enqueued, Some(job1)),
        ],
        "newest first"
    );
    assert_eq!(
        ok(e.store().schedule_runs("t", s.id, 2).await),
        runs[..2],
        "the newest two"
    );
    assert_eq!(scheduled_jobs(e, "t").await.len(), 2);
}

/// A disabled schedule does not fire; re-enabling it starts from now and
/// does not replay the time it was off.
pub async fn disabled_schedules_do_not_fire_or_replay(db: &TestDb) {
    let e = &db.engine;
    let s = ok(e
        .create_schedule("t", &spec("sec", EVERY_SECOND).enabled(false))
        .await);
    assert_eq!(s.next_run_at, None);
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).total(), 0);

    let on = ok(e
        .patch_schedule(
            "t",
            s.id,
            &SchedulePatch {
                enabled: Some(true),
                cron: Some(soon_once_a_minute()),
                ..SchedulePatch::default()
            },
        )
        .await);
    let next = on.next_run_at.expect("enabled again");
    assert!(
        next > Utc::now() - chrono::Duration::milliseconds(50),
        "not in the past"
    );
    assert_eq!(
        ok(e.fire_due_schedules(100, NO_CATCH_UP).await).total(),
        0,
        "no replay"
    );
    sleep_past(next, 100).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).enqueued, 1);
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].fire_at, next);

    // Disabling stops it again.
    let off = ok(e
        .patch_schedule(
            "t",
            s.id,
            &SchedulePatch {
                enabled: Some(false),
                ..SchedulePatch::default()
            },
        )
        .await);
    assert_eq!(off.next_run_at, None);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(ok(e.fire_due_schedules(100, NO_CATCH_UP).await).total(), 0);

    // Disabled even with a due next_run_at handed to the store (as from a
    // stale read): not due, no next instant, and a fire of it races.
    let store = e.store();
    let past = minutes_ago(1);
    let stale = ok(store
        .update_schedule("t", s.id, &off.spec, Some(past))
        .await);
    assert!(!stale.spec.enabled);
    assert!(ok(store.due_schedules(10).await).1.is_empty());
    assert_eq!(ok(store.next_schedule_due().await).1, None);
    assert_eq!(fire(db, &fire_at(&stale, past)).await, FireOutcome::Raced);
    assert_eq!(ok(e.schedule_runs("t", s.id).await).len(), 1);
    assert_eq!(scheduled_jobs(e, "t").await.len(), 1);
}

/// A trigger runs the schedule now: one job, one run stamped by the
/// database's clock no later than its job was made; the timetable stays;
/// the queue's subscribers are woken. Through the store, the run's job is
/// the one handed in, under its id.
pub async fn trigger_runs_now_and_keeps_the_timetable(db: &TestDb) {
    let e = &db.engine;
    let store = e.store();
    let s = ok(e.create_schedule("t", &spec("daily", "0 3 * * *")).await);
    let mut w = subscribe(db, "t").await;
    let (before, _) = ok(store.next_schedule_due().await);
    let job = ok(e.trigger_schedule("t", s.id).await);
    expect_hint(&mut w, "a trigger").await;
    assert_eq!(job.queue, "cron-q");
    assert_eq!(job.kind, "tick");
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.payload, json!({"from": "daily"}));
    let again = ok(e.trigger_schedule("t", s.id).await);
    assert_ne!(again.id, job.id, "every trigger is a run of its own");
    let after = ok(e.get_schedule("t", s.id).await);
    assert_eq!(after.next_run_at, s.next_run_at);
    assert_eq!(after.last_job_id, Some(again.id));
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].job_id, Some(again.id), "newest first");
    assert_eq!(runs[1].job_id, Some(job.id));
    assert!(runs.iter().all(|r| r.outcome == RunOutcome::Enqueued));
    assert_eq!(after.last_run_at, Some(runs[0].fire_at));
    for (run, job) in runs.iter().zip([&again, &job]) {
        assert!(
            run.fire_at >= before && run.fire_at <= job.created_at,
            "run stamped {} outside [{before}, {}]",
            run.fire_at,
            job.created_at
        );
    }

    let new = NewJob::new("cron-q", "tick", json!({"manual": true}))
        .idempotency_key(tether_core::schedule::trigger_key(s.id));
    let id = Uuid::now_v7();
    let manual = ok(store
        .trigger_schedule("t", s.id, NewJobRef { id, job: &new })
        .await);
    assert_eq!(manual.id, id);
    assert_eq!(manual.payload, json!({"manual": true}));
    let after = ok(e.get_schedule("t", s.id).await);
    assert_eq!(after.next_run_at, s.next_run_at);
    assert_eq!(after.last_job_id, Some(id));
    let runs = ok(e.schedule_runs("t", s.id).await);
    assert_eq!(runs.len(), 3);
    assert_eq!(
        runs[0],
        ScheduleRun {
            fire_at: after.last_run_at.expect("stamped"),
            job_id: Some(id),
            outcome: RunOutcome::Enqueued,
        }
    );
}

/// Expressions and zones of the pass tests: daily, hourly, weekly and
/// sub-minute timetables, in zones with and without daylight saving
/// (including a half-hour shift), so that the pass writes back next
/// instants that only the cron module's DST rules give.
const TIMETABLES: [(&str, &str); 8] = [
    ("0 30 2 * * *", "America/New_York"),
    ("0 0 3 * * *", "Europe/Berlin"),
    ("0 15 * * * *", "Asia/Kolkata"),
    ("0 0 2 * * 0", "Australia/Lord_Howe"),
    ("*/7 * * * * *", "UTC"),
    ("0 30 1 * * *", "Europe/London"),
    ("0 0 */6 * * *", "America/Sao_Paulo"),
    ("0 45 23 * * 1-5", "Pacific/Auckland"),
];

/// Instants the pass tests start a timetable after: the daylight-saving
/// changes of 2025 in America and Europe, and days before now.
fn starts(now: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let at = |s: &str| {
        DateTime::parse_from_rfc3339(s)
            .expect("a fixed instant")
            .with_timezone(&Utc)
    };
    vec![
        at("2025-03-09T06:00:00Z"),
        at("2025-03-30T00:30:00Z"),
        at("2025-10-26T00:30:00Z"),
        at("2025-11-02T05:00:00Z"),
        now - chrono::Duration::days(9),
        now - chrono::Duration::days(20) - chrono::Duration::minutes(37),
    ]
}

/// Creates `n` schedules over `tenants` (round robin) on the
/// [`TIMETABLES`], and sets each one's `next_run_at` to an instant of its
/// timetable in the past (the first after one of [`starts`]), as after
/// downtime. Returns each schedule with that instant.
async fn due_schedules(
    e: &Engine,
    tenants: &[&str],
    n: usize,
) -> Vec<(tether_core::Schedule, DateTime<Utc>)> {
    let now = Utc::now();
    let starts = starts(now);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (cron, zone) = TIMETABLES[i % TIMETABLES.len()];
        let tenant = tenants[i % tenants.len()];
        let spec = spec(&format!("pass-{i}"), cron)
            .timezone(zone)
            .payload(json!({"n": i}));
        let s = ok(e.create_schedule(tenant, &spec).await);
        let timetable = CronSchedule::parse(cron, zone).expect("a valid timetable");
        let due = timetable
            .next_after(starts[i % starts.len()])
            .expect("an instant");
        assert!(due < now, "{due} is in the past");
        let s = ok(e
            .store()
            .update_schedule(tenant, s.id, &s.spec, Some(due))
            .await);
        out.push((s, due));
    }
    out
}

/// One pass fires several hundred due schedules of three tenants: one run
/// and at most one job each (none for a `skip` schedule whose last job is
/// still queued), the run history and `last_*` as a fire of each alone
/// would leave them, and each `next_run_at` the one the cron module gives
/// (its DST rules included).
pub async fn one_pass_fires_hundreds_of_due_schedules_once_each(db: &TestDb) {
    const N: usize = 360;
    let e = &db.engine;
    let tenants = ["t", "u", "v"];
    let mut due = due_schedules(e, &tenants, N).await;
    // Every fifth is overlap `skip`; of those, every other one still has a
    // queued job from a trigger, so its fire is a skipped run.
    let mut busy = HashSet::new();
    for (i, (s, _)) in due.iter_mut().enumerate() {
        if i % 5 != 0 {
            continue;
        }
        let spec = s.spec.clone().overlap(Overlap::Skip);
        *s = ok(e
            .store()
            .update_schedule(&s.tenant, s.id, &spec, s.next_run_at)
            .await);
        if i % 10 == 0 {
            ok(e.trigger_schedule(&s.tenant, s.id).await);
            busy.insert(s.id);
        }
    }
    // A long catch-up window: each schedule fires its stored instant and
    // moves to the next instant of its timetable.
    let catch_up = Duration::from_secs(3 * 366 * 24 * 3_600);
    let report = ok(e.fire_due_schedules(1_000, catch_up).await);
    assert_eq!(report.failed, 0, "{report:?}");
    assert_eq!(report.raced, 0, "{report:?}");
    assert_eq!(report.skipped, busy.len() as u64, "{report:?}");
    assert_eq!(report.enqueued, (N - busy.len()) as u64, "{report:?}");

    let mut jobs = Vec::new();
    for tenant in tenants {
        jobs.extend(scheduled_jobs(e, tenant).await);
    }
    // The triggered jobs, and one job per fire that was not skipped.
    assert_eq!(jobs.len(), N, "jobs: {}", jobs.len());
    for (s, at) in &due {
        let timetable = CronSchedule::parse(&s.spec.cron, &s.spec.timezone).expect("parses");
        let after = ok(e.get_schedule(&s.tenant, s.id).await);
        assert_eq!(
            after.next_run_at,
            timetable.next_after(*at),
            "{} in {}: the next instant after {at}",
            s.spec.cron,
            s.spec.timezone
        );
        assert_eq!(after.last_run_at, Some(*at));
        let runs = ok(e.schedule_runs(&s.tenant, s.id).await);
        let key = fire_key(s.id, *at);
        let fired: Vec<_> = jobs
            .iter()
            .filter(|j| j.idempotency_key.as_deref() == Some(key.as_str()))
            .collect();
        if busy.contains(&s.id) {
            assert!(fired.is_empty(), "a skipped run makes no job");
            // Newest first: the trigger's run (stamped now), then the
            // skipped run of the past instant.
            assert_eq!(runs.len(), 2, "the trigger's run and the skipped one");
            assert_eq!(
                (runs[1].fire_at, runs[1].job_id, runs[1].outcome),
                (*at, None, RunOutcome::Skipped)
            );
            assert_eq!(runs[0].outcome, RunOutcome::Enqueued);
            assert_eq!(
                after.last_job_id, runs[0].job_id,
                "the triggered job stays last"
            );
            continue;
        }
        assert_eq!(fired.len(), 1, "one job for {key}");
        let job = fired[0];
        assert_eq!(job.tenant, s.tenant);
        assert_eq!(job.kind, "tick");
        assert_eq!(job.payload, s.spec.payload);
        assert_eq!(after.last_job_id, Some(job.id));
        assert_eq!(runs.len(), 1, "{key}: one run");
        assert_eq!(
            (runs[0].fire_at, runs[0].job_id, runs[0].outcome),
            (*at, Some(job.id), RunOutcome::Enqueued)
        );
    }
}

/// Four scheduler passes racing over the same few hundred due schedules (as
/// replicas would during a leadership overlap) fire each exactly once
/// between them: one run and one job per schedule, each moved past now.
pub async fn racing_passes_fire_each_due_schedule_once(db: &TestDb) {
    const N: usize = 240;
    const PASSES: usize = 4;
    let e = &db.engine;
    let tenants = ["t", "u"];
    let due = due_schedules(e, &tenants, N).await;
    let (before, _) = ok(e.store().next_schedule_due().await);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(PASSES));
    let passes: Vec<_> = (0..PASSES)
        .map(|_| {
            let e = e.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                e.fire_due_schedules(1_000, NO_CATCH_UP).await
            })
        })
        .collect();
    let mut enqueued = 0;
    for pass in passes {
        let report = pass.await.expect("pass task").expect("pass");
        assert_eq!((report.failed, report.skipped), (0, 0), "{report:?}");
        enqueued += report.enqueued;
    }
    assert_eq!(
        enqueued, N as u64,
        "each schedule fired once between the passes"
    );

    let mut jobs = Vec::new();
    for tenant in tenants {
        jobs.extend(scheduled_jobs(e, tenant).await);
    }
    assert_eq!(jobs.len(), N, "one job per schedule");
    let keys: HashSet<&str> = jobs
        .iter()
        .map(|j| j.idempotency_key.as_deref().expect("a fire key"))
        .collect();
    assert_eq!(keys.len(), N, "no fire key made two jobs");
    for (s, at) in &due {
        let runs = ok(e.schedule_runs(&s.tenant, s.id).await);
        assert_eq!(runs.len(), 1, "{}: one run", s.spec.name);
        let run = &runs[0];
        assert_eq!(run.outcome, RunOutcome::Enqueued);
        // Missed instants collapse into one run stamped with the latest.
        assert!(run.fire_at >= *at, "{} before {at}", run.fire_at);
        let job = jobs
            .iter()
            .find(|j| Some(j.id) == run.job_id)
            .expect("the run's job");
        assert_eq!(
            job.idempotency_key.as_deref(),
            Some(fire_key(s.id, run.fire_at).as_str())
        );
        let after = ok(e.get_schedule(&s.tenant, s.id).await);
        assert_eq!(after.last_job_id, Some(job.id));
        assert_eq!(after.last_run_at, Some(run.fire_at));
        // Moved past the passes' "now" (database clock): nothing is left
        // due of what they found.
        assert!(after.next_run_at.expect("enabled") > before);
    }
}

/// The compare-and-set, the job and the run commit together: a fire whose
/// enqueue fails (a job only the engine's validation would have refused,
/// so the insert fails inside the fire's transaction) leaves the timetable,
/// the runs and the jobs as they were, and the same fire can then happen.
pub async fn a_failed_enqueue_leaves_the_timetable_alone(db: &TestDb) {
    let store = db.engine.store();
    let s = ok(store
        .create_schedule(
            "t",
            &spec("s", "* * * * *"),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await);
    let mut bad = fire_next(&s);
    bad.job = bad.job.priority(1_000);
    let refused = store.fire_schedule(&bad, Uuid::now_v7()).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(ok(store.get_schedule("t", s.id).await), s);
    assert!(ok(store.schedule_runs("t", s.id, 10).await).is_empty());
    assert!(all_jobs(db, "t").await.is_empty());
    // The store is clean and the fire can happen.
    let good = fire_next(&s);
    let FireOutcome::Ran(RunOutcome::Enqueued, Some(job)) = fire(db, &good).await else {
        panic!("the fire after the failed one enqueues");
    };
    assert_eq!(
        jobs_with_key(&db.engine, "t", &fire_key(s.id, good.fire_at)).await,
        [job]
    );
    let after = ok(store.get_schedule("t", s.id).await);
    assert_eq!(after.next_run_at, good.next_run_at);
    assert_eq!(after.last_job_id, Some(job));
}

/// The scheduler's reads: the enabled schedules of every tenant that are
/// due by the database's clock, earliest first, bounded by the limit, and
/// the earliest instant of any; a disabled schedule is neither, even if
/// created with a due instant.
pub async fn due_schedules_span_tenants_earliest_first(db: &TestDb) {
    let store = db.engine.store();
    let before = Utc::now() - TimeDelta::seconds(5);
    let (now, due) = ok(store.due_schedules(10).await);
    assert!(due.is_empty());
    assert!(now > before, "the database's clock: {now}");
    assert!(
        (Utc::now() - now).num_seconds().abs() < 5,
        "the database's clock: {now}"
    );
    let (now2, next) = ok(store.next_schedule_due().await);
    assert!(now2 >= now);
    assert_eq!(next, None);

    let spec = |name: &str| spec(name, "* * * * *");
    let late = ok(store
        .create_schedule("b", &spec("late"), Some(minutes_ago(3)), u32::MAX)
        .await);
    let later = ok(store
        .create_schedule("a", &spec("later"), Some(minutes_ago(1)), u32::MAX)
        .await);
    ok(store
        .create_schedule("a", &spec("future"), Some(minutes_ago(-5)), u32::MAX)
        .await);
    ok(store
        .create_schedule(
            "c",
            &spec("off").enabled(false),
            Some(minutes_ago(10)),
            u32::MAX,
        )
        .await);

    let (_, due) = ok(store.due_schedules(10).await);
    assert_eq!(due, vec![late.clone(), later]);
    let (_, due) = ok(store.due_schedules(1).await);
    assert_eq!(due, vec![late.clone()]);
    assert!(ok(store.due_schedules(0).await).1.is_empty());
    let (_, next) = ok(store.next_schedule_due().await);
    assert_eq!(next, late.next_run_at);
}
