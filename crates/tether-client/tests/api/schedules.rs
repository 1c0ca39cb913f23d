//! Schedules: the round trip, triggers and runs, the cron preview and the typed errors.

use super::*;

tether_conformance::both_backends!(
    schedules_round_trip,
    schedule_trigger_and_runs,
    cron_preview_times,
    schedule_typed_errors,
);

/// An instant of a test, from RFC 3339.
fn instant(s: &str) -> chrono::DateTime<Utc> {
    s.parse().unwrap()
}

async fn schedules_round_trip(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let before = Utc::now();
    let spec = ScheduleSpec::new("nightly", "0 3 * * *", "reports", "build")
        .timezone("Europe/Berlin")
        .payload(json!({"format": "pdf"}))
        .overlap(Overlap::Skip);
    let made = c.create_schedule(&spec).await.unwrap();
    assert_eq!(made.spec(), spec);
    assert_eq!(made.name, "nightly");
    assert_eq!(made.cron, "0 3 * * *");
    assert_eq!(made.timezone, "Europe/Berlin");
    assert_eq!(
        (made.queue.as_str(), made.kind.as_str()),
        ("reports", "build")
    );
    assert_eq!(made.payload, json!({"format": "pdf"}));
    assert!(made.enabled);
    assert_eq!(made.overlap, Overlap::Skip);
    assert!(made.last_run_at.is_none());
    let next = made.next_run_at.unwrap();
    assert!(
        next > before && next <= before + chrono::Duration::hours(25),
        "{next}"
    );
    assert!(made.updated_at >= made.created_at);

    // The defaults of ScheduleSpec::new are the server's.
    let minimal = c
        .create_schedule(&ScheduleSpec::new("a-minimal", "*/5 * * * *", "q", "k"))
        .await
        .unwrap();
    assert_eq!(minimal.timezone, "UTC");
    assert_eq!(minimal.payload, Value::Null);
    assert!(minimal.enabled);
    assert_eq!(minimal.overlap, Overlap::Allow);

    // Reads: one, and all by name.
    assert_eq!(c.get_schedule(made.id).await.unwrap(), made);
    assert_eq!(
        c.list_schedules().await.unwrap(),
        vec![minimal.clone(), made.clone()]
    );

    // Patch: only what is set changes; `Some(Value::Null)` sets a null
    // payload.
    let patched = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                cron: Some("0 12 * * *".into()),
                timezone: Some("UTC".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(patched.cron, "0 12 * * *");
    assert_eq!(patched.timezone, "UTC");
    assert_eq!(patched.payload, json!({"format": "pdf"}));
    assert_eq!(patched.name, "nightly");
    assert_eq!(patched.created_at, made.created_at);
    assert_eq!(
        patched.next_run_at.unwrap().format("%H:%M:%S").to_string(),
        "12:00:00"
    );
    let nulled = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                payload: Some(Value::Null),
                name: Some("renamed".into()),
                overlap: Some(Overlap::Allow),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(nulled.payload, Value::Null);
    assert_eq!(nulled.name, "renamed");
    assert_eq!(nulled.overlap, Overlap::Allow);
    // Disabled: no next run; enabled again: the next one after now.
    let off = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                enabled: Some(false),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert!(!off.enabled && off.next_run_at.is_none());
    let on = c
        .patch_schedule(
            made.id,
            &SchedulePatch {
                enabled: Some(true),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap();
    assert!(on.enabled && on.next_run_at.unwrap() > before);
    // The empty patch changes no field of the definition.
    let same = c
        .patch_schedule(made.id, &SchedulePatch::default())
        .await
        .unwrap();
    assert_eq!(same.spec(), on.spec());

    // Delete: gone, and a second delete is 404.
    c.delete_schedule(made.id).await.unwrap();
    assert!(c.get_schedule(made.id).await.unwrap_err().is_not_found());
    assert!(c.delete_schedule(made.id).await.unwrap_err().is_not_found());
    assert_eq!(c.list_schedules().await.unwrap(), vec![minimal]);
}

async fn schedule_trigger_and_runs(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    let sched = c
        .create_schedule(&ScheduleSpec::new("t", "0 0 1 1 *", "tq", "tk").payload(json!({"n": 1})))
        .await
        .unwrap();
    assert!(c.schedule_runs(sched.id).await.unwrap().is_empty());
    let before = Utc::now();
    let job = c.trigger_schedule(sched.id).await.unwrap();
    assert_eq!((job.queue.as_str(), job.kind.as_str()), ("tq", "tk"));
    assert_eq!(job.payload, json!({"n": 1}));
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(c.get_job(job.id).await.unwrap().id, job.id);
    let second = c.trigger_schedule(sched.id).await.unwrap();
    assert_ne!(second.id, job.id);
    // Newest first.
    let runs = c.schedule_runs(sched.id).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].job_id, Some(second.id));
    assert_eq!(runs[1].job_id, Some(job.id));
    for run in &runs {
        assert_eq!(run.outcome, "enqueued");
        assert_eq!(run.run_outcome(), Some(RunOutcome::Enqueued));
        assert!(gap_ms(run.fire_at, before) < 60_000, "{}", run.fire_at);
    }
    assert!(runs[0].fire_at >= runs[1].fire_at);
    let after = c.get_schedule(sched.id).await.unwrap();
    assert_eq!(after.last_run_at, Some(runs[0].fire_at));
    assert_eq!(after.next_run_at, sched.next_run_at);
    // The other tenant sees neither the schedule nor its runs.
    assert!(s
        .other
        .schedule_runs(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(s
        .other
        .trigger_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert_eq!(c.schedule_runs(sched.id).await.unwrap().len(), 2);
}

async fn cron_preview_times(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    // New York springs forward on 2026-03-08: 02:30 does not exist and
    // fires when the gap ends, 03:00 EDT (07:00Z).
    let times = c
        .cron_preview(
            &CronPreview::new("30 2 * * *")
                .timezone("America/New_York")
                .from(instant("2026-03-07T00:00:00Z"))
                .count(3),
        )
        .await
        .unwrap();
    assert_eq!(
        times,
        vec![
            instant("2026-03-07T07:30:00Z"),
            instant("2026-03-08T07:00:00Z"),
            instant("2026-03-09T06:30:00Z"),
        ]
    );
    // Defaults: UTC, 5 instants, strictly after `from` (now when unset).
    let times = c
        .cron_preview(&CronPreview::new("0 * * * *").from(instant("2026-01-01T00:00:00Z")))
        .await
        .unwrap();
    assert_eq!(times.len(), 5);
    assert_eq!(times[0], instant("2026-01-01T01:00:00Z"));
    assert_eq!(times[4], instant("2026-01-01T05:00:00Z"));
    let before = Utc::now();
    let times = c
        .cron_preview(&CronPreview::new("*/10 * * * * *"))
        .await
        .unwrap();
    assert_eq!(times.len(), 5);
    assert!(times[0] > before - chrono::Duration::seconds(1));
    assert!(times[0] <= Utc::now() + chrono::Duration::seconds(10));
    assert!(times
        .windows(2)
        .all(|w| w[1] - w[0] == chrono::Duration::seconds(10)));
    // Any tenant's key may preview.
    let times = s
        .other
        .cron_preview(&CronPreview::new("0 0 * * *").count(1))
        .await
        .unwrap();
    assert_eq!(times.len(), 1);
}

async fn schedule_typed_errors(db: &TestDb) {
    let s = start(db).await;
    let c = &s.admin;
    use tether_core::Error as Core;
    let sched = c
        .create_schedule(&ScheduleSpec::new("mine", "0 3 * * *", "q", "k"))
        .await
        .unwrap();

    // 400 invalid_argument, naming the field.
    for (spec, field) in [
        (ScheduleSpec::new("bad", "* * * *", "q", "k"), "cron"),
        (ScheduleSpec::new("bad", "0 0 30 2 *", "q", "k"), "cron"),
        (
            ScheduleSpec::new("bad", "0 3 * * *", "q", "k").timezone("Mars/Base"),
            "timezone",
        ),
        (ScheduleSpec::new("bad name", "0 3 * * *", "q", "k"), "name"),
    ] {
        let err = c.create_schedule(&spec).await.unwrap_err();
        match &err {
            Error::Api {
                status: 400,
                code: ErrorCode::InvalidArgument,
                message,
            } => assert!(message.contains(field), "{message}"),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(Core::from(err), Core::Invalid { field: f, .. } if f == field),
            "{field}"
        );
    }
    let err = c
        .patch_schedule(
            sched.id,
            &SchedulePatch {
                cron: Some("nope".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("cron"),
        "{err}"
    );
    for count in [0, 101] {
        let err = c
            .cron_preview(&CronPreview::new("* * * * *").count(count))
            .await
            .unwrap_err();
        assert!(
            err.is_invalid_argument() && err.to_string().contains("count"),
            "{err}"
        );
    }
    let err = c
        .cron_preview(&CronPreview::new("* * * * *").timezone("Nowhere"))
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("timezone"),
        "{err}"
    );
    assert_eq!(c.list_schedules().await.unwrap(), vec![sched.clone()]);

    // 409 already_exists: a taken name, on create and on rename.
    let err = c
        .create_schedule(&ScheduleSpec::new("mine", "0 4 * * *", "q", "k"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 409,
                code: ErrorCode::AlreadyExists,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::AlreadyExists(_)));
    let second = c
        .create_schedule(&ScheduleSpec::new("second", "0 4 * * *", "q", "k"))
        .await
        .unwrap();
    let err = c
        .patch_schedule(
            second.id,
            &SchedulePatch {
                name: Some("mine".into()),
                ..SchedulePatch::default()
            },
        )
        .await
        .unwrap_err();
    assert!(err.is_already_exists(), "{err}");

    // 404 not_found: another tenant's schedule on every route, and an
    // unknown id.
    let other = &s.other;
    let err = other.get_schedule(sched.id).await.unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(matches!(Core::from(err), Core::NotFound(_)));
    let disable = SchedulePatch {
        enabled: Some(false),
        ..SchedulePatch::default()
    };
    assert!(other
        .patch_schedule(sched.id, &disable)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .delete_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .schedule_runs(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other
        .trigger_schedule(sched.id)
        .await
        .unwrap_err()
        .is_not_found());
    assert!(other.list_schedules().await.unwrap().is_empty());
    assert!(c
        .get_schedule(Uuid::now_v7())
        .await
        .unwrap_err()
        .is_not_found());
    // Untouched by all of it.
    assert_eq!(c.get_schedule(sched.id).await.unwrap(), sched);

    // 401: a bad key.
    let err = s
        .client("tth_nope")
        .cron_preview(&CronPreview::new("* * * * *"))
        .await
        .unwrap_err();
    assert!(err.is_unauthenticated(), "{err}");
}
