//! The schedule routes: CRUD, defaults, bad input, conflicts, tenant walls, triggers and the cron preview.

use super::*;

tether_conformance::both_backends!(
    schedule_crud_round_trip,
    schedule_defaults,
    schedule_put_by_name,
    schedule_bad_input_is_refused,
    schedule_name_conflicts,
    schedule_tenant_walls,
    schedule_trigger_enqueues_a_job_and_records_a_run,
    disabled_schedule_has_no_next_run,
    cron_preview_follows_the_scheduler,
);

async fn schedule_crud_round_trip(db: &TestDb) {
    let c = setup(db).await;
    let before = chrono::Utc::now();
    let s = create_schedule(
        &c,
        json!({
            "name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Berlin",
            "queue": "reports", "kind": "build_report", "payload": {"format": "pdf"},
            "enabled": true, "overlap": "skip"
        }),
    )
    .await;
    assert_eq!(keys(&s), sorted(&SCHEDULE_FIELDS));
    let id = s["id"].as_str().unwrap().to_owned();
    uuid::Uuid::try_parse(&id).unwrap();
    assert_eq!(s["name"], "nightly-report");
    assert_eq!(s["cron"], "0 3 * * *");
    assert_eq!(s["timezone"], "Europe/Berlin");
    assert_eq!(s["queue"], "reports");
    assert_eq!(s["kind"], "build_report");
    assert_eq!(s["payload"], json!({"format": "pdf"}));
    assert_eq!(s["enabled"], true);
    assert_eq!(s["overlap"], "skip");
    assert_eq!(s["last_run_at"], Value::Null);
    // The next 03:00 in Berlin: within a day, on the hour (Berlin is a whole
    // number of hours off UTC).
    let next = at(&s["next_run_at"]);
    assert!(
        next > before && next <= before + chrono::Duration::hours(25),
        "{next}"
    );
    assert_eq!(next.timestamp() % 3600, 0, "{next}");
    let created = at(&s["created_at"]);
    assert!(at(&s["updated_at"]) >= created);

    // Read back, alone and in the list.
    let got = c.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(got.expect(200)["schedule"], s);
    assert_eq!(keys(&got.body), vec!["schedule"]);
    let other = create_schedule(
        &c,
        json!({"name": "a-first", "cron": "*/5 * * * *", "queue": "q", "kind": "k"}),
    )
    .await;
    let list = c.get("/v1/schedules").await;
    let list = list.expect(200)["schedules"].as_array().unwrap().clone();
    // By name.
    assert_eq!(list, vec![other.clone(), s.clone()]);

    // PATCH: only the given fields change; next_run_at follows the new
    // timetable.
    let uri = format!("/v1/schedules/{id}");
    let p = patch(
        &c,
        &uri,
        json!({"cron": "0 12 * * *", "timezone": "UTC", "overlap": "allow", "kind": "other_kind"}),
    )
    .await;
    let p = p.expect(200)["schedule"].clone();
    assert_eq!(keys(&p), sorted(&SCHEDULE_FIELDS));
    assert_eq!(p["id"], s["id"]);
    assert_eq!(p["name"], "nightly-report");
    assert_eq!(p["cron"], "0 12 * * *");
    assert_eq!(p["timezone"], "UTC");
    assert_eq!(p["queue"], "reports");
    assert_eq!(p["kind"], "other_kind");
    assert_eq!(p["payload"], json!({"format": "pdf"}));
    assert_eq!(p["overlap"], "allow");
    assert_eq!(p["created_at"], s["created_at"]);
    assert!(at(&p["updated_at"]) >= at(&s["updated_at"]));
    let next = at(&p["next_run_at"]);
    assert_eq!(
        next.format("%H:%M:%S%.3f").to_string(),
        "12:00:00.000",
        "{next}"
    );
    assert!(next > before && next <= chrono::Utc::now() + chrono::Duration::hours(24));
    // Absent payload stays; explicit null sets null; a value sets it.
    let p = patch(&c, &uri, json!({"name": "renamed"})).await;
    assert_eq!(
        p.expect(200)["schedule"]["payload"],
        json!({"format": "pdf"})
    );
    assert_eq!(p.body["schedule"]["name"], "renamed");
    let p = patch(&c, &uri, json!({"payload": null})).await;
    assert_eq!(p.expect(200)["schedule"]["payload"], Value::Null);
    assert_eq!(p.body["schedule"]["name"], "renamed");
    let p = patch(&c, &uri, json!({"payload": [1, "two"], "queue": "q2"})).await;
    assert_eq!(p.expect(200)["schedule"]["payload"], json!([1, "two"]));
    assert_eq!(p.body["schedule"]["queue"], "q2");
    // Null for any other field leaves it; an empty patch changes nothing
    // of the definition.
    let p = patch(
        &c,
        &uri,
        json!({"name": null, "enabled": null, "cron": null}),
    )
    .await;
    assert_eq!(p.expect(200)["schedule"]["name"], "renamed");
    assert_eq!(p.body["schedule"]["enabled"], true);
    assert_eq!(p.body["schedule"]["cron"], "0 12 * * *");
    let p = patch(&c, &uri, json!({})).await;
    let last = p.expect(200)["schedule"].clone();
    assert_eq!(c.get(&uri).await.expect(200)["schedule"], last);

    // DELETE: 204 without a body, then gone everywhere.
    let d = delete(&c, &uri).await;
    assert_eq!(d.expect(204), &Value::Null);
    c.get(&uri).await.expect_error(404, "not_found");
    delete(&c, &uri).await.expect_error(404, "not_found");
    patch(&c, &uri, json!({"enabled": false}))
        .await
        .expect_error(404, "not_found");
    c.get(&format!("{uri}/runs"))
        .await
        .expect_error(404, "not_found");
    c.post_empty(&format!("{uri}/trigger"))
        .await
        .expect_error(404, "not_found");
    let list = c.get("/v1/schedules").await;
    assert_eq!(list.expect(200)["schedules"], json!([other]));
    // The name is free again.
    create_schedule(
        &c,
        json!({"name": "nightly-report", "cron": "0 3 * * *", "queue": "q", "kind": "k"}),
    )
    .await;
}

async fn schedule_defaults(db: &TestDb) {
    let c = setup(db).await;
    let before = chrono::Utc::now();
    let s = create_schedule(
        &c,
        json!({"name": "minimal", "cron": "0 0 1 1 *", "queue": "q", "kind": "k"}),
    )
    .await;
    assert_eq!(keys(&s), sorted(&SCHEDULE_FIELDS));
    assert_eq!(s["timezone"], "UTC");
    assert_eq!(s["payload"], Value::Null);
    assert_eq!(s["enabled"], true);
    assert_eq!(s["overlap"], "allow");
    assert_eq!(s["last_run_at"], Value::Null);
    // The next 1 January, 00:00 UTC.
    use chrono::Datelike;
    let next = at(&s["next_run_at"]);
    let want = chrono::NaiveDate::from_ymd_opt(before.year() + 1, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    assert_eq!(next, want);
    // Explicit nulls are the defaults too; 6 fields (seconds first) are fine.
    let n = create_schedule(
        &c,
        json!({"name": "nulls", "cron": "30 0 0 1 1 *", "timezone": null, "queue": "q",
               "kind": "k", "payload": null, "enabled": null, "overlap": null}),
    )
    .await;
    assert_eq!(
        (&n["timezone"], &n["enabled"], &n["overlap"], &n["payload"]),
        (&json!("UTC"), &json!(true), &json!("allow"), &Value::Null)
    );
    assert_eq!(at(&n["next_run_at"]), want + chrono::Duration::seconds(30));
    // A fresh schedule has no runs.
    let id = s["id"].as_str().unwrap();
    let runs = c.get(&format!("/v1/schedules/{id}/runs")).await;
    assert_eq!(runs.expect(200), &json!({"runs": []}));
}

/// `PUT /v1/schedules/{name}`: 201 created, then 200 unchanged for the
/// same body, 200 updated (same id) for another; bad input is 400 and
/// changes nothing; `name` in the body is an unknown field.
async fn schedule_put_by_name(db: &TestDb) {
    let c = setup(db).await;
    let put = |body: Value| {
        let c = &c;
        async move {
            c.call(
                "PUT",
                "/v1/schedules/digest",
                Some(&c.admin.clone()),
                Some(body),
            )
            .await
        }
    };
    let body = json!({"cron": "0 3 * * *", "queue": "mail", "kind": "digest",
                      "payload": {"v": 1}, "timezone": "Europe/Paris"});
    let first = put(body.clone()).await;
    let created = first.expect(201).clone();
    assert_eq!(created["outcome"], "created", "{created}");
    assert_eq!(keys(&created["schedule"]), sorted(&SCHEDULE_FIELDS));
    assert_eq!(created["schedule"]["name"], "digest");
    let id = created["schedule"]["id"].as_str().unwrap().to_owned();

    let again = put(body.clone()).await;
    assert_eq!(again.expect(200)["outcome"], "unchanged");
    assert_eq!(again.body["schedule"], created["schedule"]);

    let changed = put(json!({"cron": "@hourly", "queue": "mail", "kind": "digest"})).await;
    let updated = changed.expect(200).clone();
    assert_eq!(updated["outcome"], "updated");
    assert_eq!(updated["schedule"]["id"], id.as_str());
    assert_eq!(
        updated["schedule"]["timezone"], "UTC",
        "left out: the default"
    );
    assert_eq!(updated["schedule"]["payload"], Value::Null);

    for bad in [
        json!({"cron": "nope", "queue": "mail", "kind": "digest"}),
        json!({"cron": "@daily", "queue": "mail"}),
        json!({"name": "digest", "cron": "@daily", "queue": "mail", "kind": "digest"}),
        json!({"cron": "@daily", "queue": "mail", "kind": "digest", "timezone": "Nowhere/Else"}),
    ] {
        let a = put(bad.clone()).await;
        assert_eq!(a.expect(400)["error"]["code"], "invalid_argument", "{bad}");
    }
    let bad_name = c
        .call(
            "PUT",
            "/v1/schedules/bad%20name",
            Some(&c.admin.clone()),
            Some(json!({"cron": "@daily", "queue": "mail", "kind": "digest"})),
        )
        .await;
    assert_eq!(bad_name.expect(400)["error"]["code"], "invalid_argument");
    let now = c.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(now.expect(200)["schedule"], updated["schedule"]);
    let listed = c.get("/v1/schedules").await;
    assert_eq!(listed.expect(200)["schedules"].as_array().unwrap().len(), 1);
}

async fn schedule_bad_input_is_refused(db: &TestDb) {
    let c = setup(db).await;
    let msg = |a: &common::Answer| a.body["error"]["message"].as_str().unwrap().to_owned();
    let good = json!({"name": "s", "cron": "0 3 * * *", "queue": "q", "kind": "k"});
    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(field);
        body
    };
    // (body, field the message must name)
    let cases: Vec<(Value, &str)> = vec![
        (with("cron", json!("not a cron")), "cron"),
        (with("cron", json!("* * * *")), "cron"),
        (with("cron", json!("* * * * * * *")), "cron"),
        (with("cron", json!("61 * * * *")), "cron"),
        (with("cron", json!("0 0 30 2 *")), "cron"),
        (with("cron", json!("@reboot")), "cron"),
        (with("cron", json!("")), "cron"),
        (with("cron", json!(5)), "cron"),
        (with("timezone", json!("Mars/Olympus_Mons")), "timezone"),
        (with("timezone", json!("")), "timezone"),
        (with("timezone", json!("+02:00")), "timezone"),
        (with("name", json!("bad name")), "name"),
        (with("name", json!("")), "name"),
        (with("name", json!("x".repeat(129))), "name"),
        (with("name", json!("é")), "name"),
        (with("queue", json!("bad/queue")), "queue"),
        (with("kind", json!("")), "kind"),
        (with("overlap", json!("queue")), "overlap"),
        (with("overlap", json!("Skip")), "overlap"),
        (with("enabled", json!("yes")), "enabled"),
        (with("colour", json!("red")), "colour"),
        (
            with("next_run_at", json!("2030-01-01T00:00:00Z")),
            "next_run_at",
        ),
        (without("name"), "name"),
        (without("cron"), "cron"),
        (without("queue"), "queue"),
        (without("kind"), "kind"),
    ];
    for (body, field) in cases {
        let a = c.post("/v1/schedules", body.clone()).await;
        a.expect_error(400, "invalid_argument");
        assert!(msg(&a).contains(field), "{body}: {}", msg(&a));
    }
    c.raw(
        "POST",
        "/v1/schedules",
        Some("application/json"),
        b"{\"name\": ".to_vec(),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.raw("POST", "/v1/schedules", Some("text/plain"), b"{}".to_vec())
        .await
        .expect_error(415, "unsupported_media_type");
    // Nothing was written.
    let list = c.get("/v1/schedules").await;
    assert_eq!(list.expect(200)["schedules"], json!([]));

    // PATCH refuses the same, and leaves the schedule as it was.
    let s = create_schedule(&c, good.clone()).await;
    let uri = format!("/v1/schedules/{}", s["id"].as_str().unwrap());
    let cases: Vec<(Value, &str)> = vec![
        (json!({"cron": "* * * *"}), "cron"),
        (json!({"cron": "bad"}), "cron"),
        (json!({"timezone": "Nowhere/Else"}), "timezone"),
        (json!({"name": "bad name"}), "name"),
        (json!({"queue": ""}), "queue"),
        (json!({"overlap": "sometimes"}), "overlap"),
        (json!({"enabled": 1}), "enabled"),
        (json!({"id": s["id"]}), "id"),
        (json!({"next_run_at": null}), "next_run_at"),
    ];
    for (body, field) in cases {
        let a = patch(&c, &uri, body.clone()).await;
        a.expect_error(400, "invalid_argument");
        assert!(msg(&a).contains(field), "{body}: {}", msg(&a));
    }
    assert_eq!(c.get(&uri).await.expect(200)["schedule"], s);

    // Preview: count out of range, bad values, unknown or missing parameters.
    for (query, field) in [
        ("cron=*+*+*+*+*&count=0", "count"),
        ("cron=*+*+*+*+*&count=101", "count"),
        ("cron=*+*+*+*+*&count=-1", "count"),
        ("cron=*+*+*+*+*&count=five", "count"),
        ("cron=*+*+*+*", "cron"),
        ("cron=", "cron"),
        ("count=3", "cron"),
        ("cron=*+*+*+*+*&timezone=Atlantis", "timezone"),
        // The characters a schedule's cron refuses (\r, \v, U+0085).
        ("cron=0+3+*+*+*%0D", "cron"),
        ("cron=0+3%0B*+*+*", "cron"),
        ("cron=0+3%C2%85*+*+*", "cron"),
        ("cron=*+*+*+*+*&from=yesterday", "from"),
        ("cron=*+*+*+*+*&from=2026-03-07", "from"),
        ("cron=*+*+*+*+*&colour=red", "colour"),
    ] {
        let a = c.get(&format!("/v1/cron/preview?{query}")).await;
        a.expect_error(400, "invalid_argument");
        assert!(msg(&a).contains(field), "{query}: {}", msg(&a));
    }
    // Still only the one schedule, and no job.
    let list = c.get("/v1/schedules").await;
    assert_eq!(list.expect(200)["schedules"], json!([s]));
    let jobs = c.get("/v1/jobs").await;
    assert_eq!(jobs.expect(200)["jobs"], json!([]));
}

async fn schedule_name_conflicts(db: &TestDb) {
    let c = setup(db).await;
    let body = json!({"name": "daily", "cron": "0 3 * * *", "queue": "q", "kind": "k"});
    let first = create_schedule(&c, body.clone()).await;
    // The same name, even with another definition.
    let mut again = body.clone();
    again["cron"] = json!("0 4 * * *");
    c.post("/v1/schedules", again)
        .await
        .expect_error(409, "already_exists");
    // Renaming onto a taken name.
    let second = create_schedule(
        &c,
        json!({"name": "hourly", "cron": "0 * * * *", "queue": "q", "kind": "k"}),
    )
    .await;
    let uri = format!("/v1/schedules/{}", second["id"].as_str().unwrap());
    patch(&c, &uri, json!({"name": "daily"}))
        .await
        .expect_error(409, "already_exists");
    // Keeping its own name is no conflict.
    let p = patch(&c, &uri, json!({"name": "hourly"})).await;
    assert_eq!(p.expect(200)["schedule"]["name"], "hourly");
    // Nothing changed by the refusals.
    let list = c.get("/v1/schedules").await;
    let names: Vec<&Value> = list.expect(200)["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["name"])
        .collect();
    assert_eq!(names, vec!["daily", "hourly"]);
    let got = c
        .get(&format!("/v1/schedules/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(got.expect(200)["schedule"]["cron"], "0 3 * * *");
    // Names are per tenant: another tenant may use it.
    let other = c
        .call("POST", "/v1/schedules", Some(&c.other.clone()), Some(body))
        .await;
    assert_ne!(other.expect(201)["schedule"]["id"], first["id"]);
}

async fn schedule_tenant_walls(db: &TestDb) {
    let c = setup(db).await;
    let s = create_schedule(
        &c,
        json!({"name": "mine", "cron": "0 3 * * *", "queue": "q", "kind": "k"}),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let other = c.other.clone();
    let admin = c.admin.clone();
    let unknown = uuid::Uuid::now_v7().to_string();
    for (key, id) in [
        (&other, id.as_str()),
        (&admin, "not-a-uuid"),
        (&admin, unknown.as_str()),
        (&other, "not-a-uuid"),
    ] {
        let cases: Vec<(&str, String, Option<Value>)> = vec![
            ("GET", format!("/v1/schedules/{id}"), None),
            (
                "PATCH",
                format!("/v1/schedules/{id}"),
                Some(json!({"enabled": false})),
            ),
            ("DELETE", format!("/v1/schedules/{id}"), None),
            ("GET", format!("/v1/schedules/{id}/runs"), None),
            ("POST", format!("/v1/schedules/{id}/trigger"), None),
        ];
        for (method, uri, body) in cases {
            c.call(method, &uri, Some(key), body)
                .await
                .expect_error(404, "not_found");
        }
    }
    // Even a bad patch of another tenant's schedule is 404: it names nothing.
    c.call(
        "PATCH",
        &format!("/v1/schedules/{id}"),
        Some(&other),
        Some(json!({"cron": "0 0 30 2 *"})),
    )
    .await
    .expect_error(404, "not_found");
    // Lists do not show it; the schedule is untouched, with no run and no job.
    let list = c.call("GET", "/v1/schedules", Some(&other), None).await;
    assert_eq!(list.expect(200)["schedules"], json!([]));
    let got = c.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(got.expect(200)["schedule"], s);
    let runs = c.get(&format!("/v1/schedules/{id}/runs")).await;
    assert_eq!(runs.expect(200)["runs"], json!([]));
    let jobs = c.call("GET", "/v1/jobs", Some(&other), None).await;
    assert_eq!(jobs.expect(200)["jobs"], json!([]));
    assert_eq!(c.get("/v1/jobs").await.expect(200)["jobs"], json!([]));
    // Without a key, every schedule route is 401.
    for (method, uri) in [
        ("GET", "/v1/schedules".to_owned()),
        ("POST", "/v1/schedules".to_owned()),
        ("GET", format!("/v1/schedules/{id}")),
        ("DELETE", format!("/v1/schedules/{id}")),
        ("POST", format!("/v1/schedules/{id}/trigger")),
        ("GET", "/v1/cron/preview?cron=*+*+*+*+*".to_owned()),
    ] {
        c.call(method, &uri, None, None)
            .await
            .expect_error(401, "unauthenticated");
    }
    // Wrong methods.
    for (method, uri) in [
        ("POST", format!("/v1/schedules/{id}")),
        ("GET", format!("/v1/schedules/{id}/trigger")),
        ("POST", format!("/v1/schedules/{id}/runs")),
        ("DELETE", "/v1/schedules".to_owned()),
        ("POST", "/v1/cron/preview".to_owned()),
    ] {
        c.call(method, &uri, Some(&admin), None)
            .await
            .expect_error(405, "method_not_allowed");
    }
}

async fn schedule_trigger_enqueues_a_job_and_records_a_run(db: &TestDb) {
    let c = setup(db).await;
    let s = create_schedule(
        &c,
        json!({"name": "t", "cron": "0 0 1 1 *", "queue": "sq", "kind": "sk",
               "payload": {"n": 1}, "overlap": "skip"}),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let before = chrono::Utc::now();
    let t = c.post_empty(&format!("/v1/schedules/{id}/trigger")).await;
    let body = t.expect(201).clone();
    assert_eq!(keys(&body), vec!["job"]);
    let job = &body["job"];
    assert_eq!(keys(job), sorted(&JOB_FIELDS));
    assert_eq!(job["queue"], "sq");
    assert_eq!(job["kind"], "sk");
    assert_eq!(job["payload"], json!({"n": 1}));
    assert_eq!(job["state"], "queued");
    assert_eq!(job["attempt"], 0);
    assert!(at(&job["run_at"]) <= chrono::Utc::now());
    // The job is an ordinary job of the tenant, ready now.
    let got = c
        .get(&format!("/v1/jobs/{}", job["id"].as_str().unwrap()))
        .await;
    assert_eq!(got.expect(200)["job"]["id"], job["id"]);
    let q = c.get("/v1/queues/sq").await;
    assert_eq!(q.expect(200)["queue"]["ready"], 1);
    // One run, stamped now, with the job.
    let runs = c.get(&format!("/v1/schedules/{id}/runs")).await;
    let runs = runs.expect(200)["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 1);
    assert_eq!(keys(&runs[0]), sorted(&["fire_at", "job_id", "outcome"]));
    assert_eq!(runs[0]["job_id"], job["id"]);
    assert_eq!(runs[0]["outcome"], "enqueued");
    let fired = at(&runs[0]["fire_at"]);
    assert!(
        fired >= before - chrono::Duration::seconds(1)
            && fired <= chrono::Utc::now() + chrono::Duration::seconds(1),
        "{fired}"
    );
    // The schedule shows the run; its timetable did not move.
    let after = c.get(&format!("/v1/schedules/{id}")).await;
    let after = after.expect(200)["schedule"].clone();
    assert_eq!(after["last_run_at"], runs[0]["fire_at"]);
    assert_eq!(after["next_run_at"], s["next_run_at"]);
    // A second trigger (overlap `skip` does not apply to triggers) makes a
    // second job; runs are newest first.
    let t2 = c.post_empty(&format!("/v1/schedules/{id}/trigger")).await;
    let job2 = t2.expect(201)["job"].clone();
    assert_ne!(job2["id"], job["id"]);
    let runs = c.get(&format!("/v1/schedules/{id}/runs")).await;
    let runs = runs.expect(200)["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["job_id"], job2["id"]);
    assert_eq!(runs[1]["job_id"], job["id"]);
    assert!(at(&runs[0]["fire_at"]) >= at(&runs[1]["fire_at"]));
    // A disabled schedule can be triggered too; it stays disabled.
    let uri = format!("/v1/schedules/{id}");
    patch(&c, &uri, json!({"enabled": false})).await.expect(200);
    let t3 = c.post_empty(&format!("/v1/schedules/{id}/trigger")).await;
    t3.expect(201);
    let got = c.get(&uri).await;
    assert_eq!(got.expect(200)["schedule"]["enabled"], false);
    assert_eq!(got.body["schedule"]["next_run_at"], Value::Null);
    // Deleting the schedule keeps its jobs.
    delete(&c, &uri).await.expect(204);
    let jobs = c.get("/v1/jobs?queue=sq").await;
    assert_eq!(jobs.expect(200)["jobs"].as_array().unwrap().len(), 3);
    // The runs list shows the newest 100.
    let s = create_schedule(
        &c,
        json!({"name": "many", "cron": "0 0 1 1 *", "queue": "mq", "kind": "k"}),
    )
    .await;
    let id = s["id"].as_str().unwrap();
    let mut last = Value::Null;
    for _ in 0..101 {
        last = c
            .post_empty(&format!("/v1/schedules/{id}/trigger"))
            .await
            .expect(201)["job"]["id"]
            .clone();
    }
    let runs = c.get(&format!("/v1/schedules/{id}/runs")).await;
    let runs = runs.expect(200)["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 100);
    assert_eq!(runs[0]["job_id"], last);
}

async fn disabled_schedule_has_no_next_run(db: &TestDb) {
    let c = setup(db).await;
    let s = create_schedule(
        &c,
        json!({"name": "off", "cron": "* * * * *", "queue": "q", "kind": "k", "enabled": false}),
    )
    .await;
    assert_eq!(s["enabled"], false);
    assert_eq!(s["next_run_at"], Value::Null);
    let uri = format!("/v1/schedules/{}", s["id"].as_str().unwrap());
    assert_eq!(
        c.get(&uri).await.expect(200)["schedule"]["next_run_at"],
        Value::Null
    );
    // Other changes keep it without a next run.
    let p = patch(&c, &uri, json!({"cron": "*/2 * * * *"})).await;
    assert_eq!(p.expect(200)["schedule"]["next_run_at"], Value::Null);
    // Time passes while it is disabled; re-enabling starts from now (the
    // next whole minute), not from when it was created or disabled.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let before = chrono::Utc::now();
    let p = patch(&c, &uri, json!({"enabled": true, "cron": "* * * * * *"})).await;
    let p = p.expect(200)["schedule"].clone();
    assert_eq!(p["enabled"], true);
    let next = at(&p["next_run_at"]);
    let created = at(&s["created_at"]);
    assert!(next > before, "{next} is not after {before}");
    assert!(next > created + chrono::Duration::seconds(1));
    assert!(
        next <= chrono::Utc::now() + chrono::Duration::seconds(1),
        "{next}"
    );
    // Every minute: the next whole minute after now.
    let p = patch(&c, &uri, json!({"cron": "* * * * *"})).await;
    let next = at(&p.expect(200)["schedule"]["next_run_at"]);
    assert!(next > chrono::Utc::now() - chrono::Duration::seconds(1));
    assert!(next <= chrono::Utc::now() + chrono::Duration::seconds(60));
    assert_eq!(next.timestamp() % 60, 0, "{next}");
    // Disabling again clears it.
    let p = patch(&c, &uri, json!({"enabled": false})).await;
    assert_eq!(p.expect(200)["schedule"]["next_run_at"], Value::Null);
    let list = c.get("/v1/schedules").await;
    assert_eq!(list.expect(200)["schedules"][0]["next_run_at"], Value::Null);
}

async fn cron_preview_follows_the_scheduler(db: &TestDb) {
    let c = setup(db).await;
    let preview = |query: &str| {
        let uri = format!("/v1/cron/preview?{query}");
        let c = &c;
        async move { c.get(&uri).await.expect(200).clone() }
    };
    // Spring forward in New York on 2026-03-08: 02:00 EST jumps to 03:00
    // EDT, so 02:30 does not exist that night and fires when the gap ends
    // (03:00 EDT = 07:00Z). Before: 02:30 EST = 07:30Z; after: 02:30 EDT =
    // 06:30Z.
    let a = preview(
        "cron=30%202%20*%20*%20*&timezone=America/New_York&from=2026-03-07T12:00:00Z&count=3",
    )
    .await;
    assert_eq!(keys(&a), vec!["times"]);
    assert_eq!(
        a["times"],
        json!([
            "2026-03-08T07:00:00.000Z",
            "2026-03-09T06:30:00.000Z",
            "2026-03-10T06:30:00.000Z",
        ])
    );
    // From the start of 7 March (UTC), the gap's instant is the second.
    let a = preview("cron=30+2+*+*+*&timezone=America/New_York&from=2026-03-07T00:00:00Z&count=3")
        .await;
    assert_eq!(
        a["times"],
        json!([
            "2026-03-07T07:30:00.000Z",
            "2026-03-08T07:00:00.000Z",
            "2026-03-09T06:30:00.000Z",
        ])
    );
    // `from` with an offset is the same instant (2026-03-07T07:00-05:00 =
    // 12:00Z).
    let a =
        preview("cron=30+2+*+*+*&timezone=America/New_York&from=2026-03-07T07:00:00-05:00&count=1")
            .await;
    assert_eq!(a["times"], json!(["2026-03-08T07:00:00.000Z"]));
    // Fall back on 2026-11-01: 01:30 happens twice and fires once, at its
    // first (EDT) occurrence, 05:30Z; the next day 01:30 EST = 06:30Z.
    let a = preview("cron=30+1+*+*+*&timezone=America/New_York&from=2026-10-31T12:00:00Z&count=2")
        .await;
    assert_eq!(
        a["times"],
        json!(["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"])
    );
    // Strictly after `from`; the default count is 5 and the default zone UTC.
    let a = preview("cron=0+*+*+*+*&from=2026-01-01T00:00:00Z").await;
    assert_eq!(
        a["times"],
        json!([
            "2026-01-01T01:00:00.000Z",
            "2026-01-01T02:00:00.000Z",
            "2026-01-01T03:00:00.000Z",
            "2026-01-01T04:00:00.000Z",
            "2026-01-01T05:00:00.000Z",
        ])
    );
    // Empty optional parameters are unset.
    let b = preview("cron=0+*+*+*+*&from=2026-01-01T00:00:00Z&timezone=&count=").await;
    assert_eq!(b, a);
    // Seconds first; day-of-month and day-of-week OR-ed; the maximum count.
    let a = preview("cron=15+0+0+13+*+FRI&from=2026-02-01T00:00:00Z&count=3").await;
    assert_eq!(
        a["times"],
        json!([
            "2026-02-06T00:00:15.000Z",
            "2026-02-13T00:00:15.000Z",
            "2026-02-20T00:00:15.000Z",
        ])
    );
    let a = preview("cron=*+*+*+*+*&count=100").await;
    assert_eq!(a["times"].as_array().unwrap().len(), 100);
    // `from` defaults to now.
    let before = chrono::Utc::now();
    let a = preview("cron=*+*+*+*+*").await;
    let times = a["times"].as_array().unwrap();
    assert_eq!(times.len(), 5);
    let first = at(&times[0]);
    assert!(first > before - chrono::Duration::seconds(1), "{first}");
    assert!(first <= chrono::Utc::now() + chrono::Duration::seconds(60));
    // A schedule's next_run_at is the preview's first instant.
    let s = create_schedule(
        &c,
        json!({"name": "p", "cron": "0 9 * * MON", "timezone": "Asia/Kolkata",
               "queue": "q", "kind": "k"}),
    )
    .await;
    let created = at(&s["created_at"]);
    let from = created - chrono::Duration::seconds(1);
    let a = preview(&format!(
        "cron=0+9+*+*+MON&timezone=Asia/Kolkata&count=1&from={}",
        from.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    ))
    .await;
    assert_eq!(a["times"][0], s["next_run_at"]);
}
