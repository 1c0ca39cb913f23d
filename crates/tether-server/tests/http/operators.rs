//! The operator routes: bulk cancel and replay by ids, finding jobs by id
//! prefix and creation time, workers, a queue's throughput, removing an
//! empty queue, and schedules listed with their runs in one request.

use super::*;

tether_conformance::both_backends!(
    bulk_cancel_and_replay_answer_per_id,
    bulk_replay_with_a_bad_expires_at_is_400_and_changes_nothing,
    jobs_are_found_by_prefix_and_time,
    workers_and_throughput,
    idle_workers_announce_themselves,
    empty_queues_are_removed,
    schedules_list_with_runs_and_next_times,
);

fn ids_of(a: &Value) -> Vec<String> {
    a["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn bulk_cancel_and_replay_answer_per_id(db: &TestDb) {
    let c = setup(db).await;
    let a = c.enqueue("bulk", "k").await;
    let b = c.enqueue("bulk", "k").await;
    let (done, token) = c.claim_one("bulk").await;
    assert!(done == a || done == b);
    let queued = if done == a { &b } else { &a };
    c.post(
        &format!("/v1/jobs/{done}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    let unknown = uuid::Uuid::now_v7().to_string();
    let r = c
        .post("/v1/jobs/cancel", json!({"ids": [queued, done, unknown]}))
        .await;
    let results = r.expect(200)["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[0]["job"]["state"], "cancelled");
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["error"]["code"], "invalid_state");
    assert_eq!(results[2]["error"]["code"], "not_found");
    // Replay: the succeeded job runs again and the cancelled one is queued.
    let r = c
        .post("/v1/jobs/replay", json!({"ids": [done, queued]}))
        .await;
    let results = r.expect(200)["results"].as_array().unwrap();
    for (i, id) in [&done, queued].into_iter().enumerate() {
        assert_eq!(results[i]["id"], id.as_str());
        assert_eq!(results[i]["job"]["state"], "queued");
        assert_eq!(results[i]["job"]["attempt"], 0);
    }
    let events = c.get(&format!("/v1/jobs/{done}/events")).await;
    let last = events.expect(200)["events"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["event"], "replayed");
    // Single replay of a succeeded job works too; a queued one is 409.
    c.post_empty(&format!("/v1/jobs/{done}/replay"))
        .await
        .expect_error(409, "invalid_state");
    // Bounds: no ids, too many, not an id.
    c.post("/v1/jobs/cancel", json!({"ids": []}))
        .await
        .expect_error(400, "invalid_argument");
    let many: Vec<String> = (0..501).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    c.post("/v1/jobs/replay", json!({"ids": many}))
        .await
        .expect_error(400, "invalid_argument");
    c.post("/v1/jobs/cancel", json!({"ids": ["nope"]}))
        .await
        .expect_error(400, "invalid_argument");
    // Another tenant's job is not found for this key.
    let r = c
        .call(
            "POST",
            "/v1/jobs/cancel",
            Some(&c.other),
            Some(json!({"ids": [done]})),
        )
        .await;
    assert_eq!(r.expect(200)["results"][0]["error"]["code"], "not_found");
}

/// A bulk replay whose `expires_at` no job could take is a bad request as
/// a whole: 400 before any id is looked at, and no job changes (it was 200
/// with the same error once per id).
async fn bulk_replay_with_a_bad_expires_at_is_400_and_changes_nothing(db: &TestDb) {
    let c = setup(db).await;
    let a = c.enqueue("bulk", "k").await;
    let b = c.enqueue("bulk", "k").await;
    for id in [&a, &b] {
        c.post_empty(&format!("/v1/jobs/{id}/cancel"))
            .await
            .expect(200);
    }
    let unknown = uuid::Uuid::now_v7().to_string();
    for bad in ["1969-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z"] {
        let r = c
            .post(
                "/v1/jobs/replay",
                json!({"ids": [a, unknown, b], "expires_at": bad}),
            )
            .await;
        r.expect_error(400, "invalid_argument");
        let message = r.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("expires_at"), "{message}");
    }
    for id in [&a, &b] {
        let job = c.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(job.expect(200)["job"]["state"], "cancelled", "{id}");
        assert_eq!(job.body["job"]["expires_at"], Value::Null);
    }
    // A good one replays each job with it.
    let r = c
        .post(
            "/v1/jobs/replay",
            json!({"ids": [a, b], "expires_at": "2999-01-01T00:00:00Z"}),
        )
        .await;
    for result in r.expect(200)["results"].as_array().unwrap() {
        assert_eq!(result["job"]["state"], "queued", "{result}");
        assert_eq!(result["job"]["expires_at"], "2999-01-01T00:00:00.000Z");
    }
}

async fn jobs_are_found_by_prefix_and_time(db: &TestDb) {
    let c = setup(db).await;
    let id = c.enqueue("find", "k").await;
    c.enqueue("find", "k").await;
    let prefix = &id[..13];
    let found = c.get(&format!("/v1/jobs?id_prefix={prefix}")).await;
    assert!(ids_of(found.expect(200)).contains(&id));
    assert!(ids_of(&found.body).iter().all(|j| j.starts_with(prefix)));
    let exact = c
        .get(&format!("/v1/jobs?id_prefix={}", id.replace('-', "")))
        .await;
    assert_eq!(ids_of(exact.expect(200)), std::slice::from_ref(&id));
    let later = c
        .get("/v1/jobs?queue=find&created_after=2999-01-01T00:00:00Z")
        .await;
    assert!(ids_of(later.expect(200)).is_empty());
    let earlier = c
        .get("/v1/jobs?queue=find&created_before=2999-01-01T00:00:00Z&created_after=2000-01-01T00:00:00%2B02:00")
        .await;
    assert_eq!(ids_of(earlier.expect(200)).len(), 2);
    for bad in [
        "id_prefix=xyz",
        "id_prefix=0123456789abcdef0123456789abcdef0",
        "created_after=yesterday",
        "created_before=10000-01-01T00:00:00Z",
    ] {
        c.get(&format!("/v1/jobs?{bad}"))
            .await
            .expect_error(400, "invalid_argument");
    }
}

async fn workers_and_throughput(db: &TestDb) {
    let c = setup(db).await;
    assert_eq!(c.get("/v1/workers").await.expect(200)["workers"], json!([]));
    c.enqueue("tp", "k").await;
    c.enqueue("tp", "k").await;
    let (id, token) = c.claim_one("tp").await;
    let w = c.get("/v1/workers").await;
    let workers = w.expect(200)["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0]["worker_id"], "w1");
    assert_eq!(workers[0]["queues"], json!(["tp"]));
    assert_eq!(workers[0]["running"], 1);
    assert!(is_rfc3339_utc(&workers[0]["last_heartbeat_at"]));
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    let t = c.get("/v1/queues/tp/throughput?minutes=3").await;
    let body = t.expect(200);
    let minutes = body["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 3);
    let succeeded: u64 = minutes
        .iter()
        .map(|m| m["succeeded"].as_u64().unwrap())
        .sum();
    assert_eq!(succeeded, 1);
    for m in minutes {
        assert!(is_rfc3339_utc(&m["at"]));
        for field in ["failed", "retried", "cancelled"] {
            assert_eq!(m[field], 0);
        }
    }
    for field in ["wait_ms", "run_ms"] {
        for p in ["p50", "p95", "p99"] {
            assert!(body[field][p].as_i64().unwrap() >= 0, "{field}.{p}");
        }
    }
    let default = c.get("/v1/queues/tp/throughput").await;
    assert_eq!(default.expect(200)["minutes"].as_array().unwrap().len(), 60);
    let idle = c.get("/v1/queues/idle/throughput?minutes=1").await;
    assert_eq!(idle.expect(200)["wait_ms"], Value::Null);
    for bad in ["minutes=0", "minutes=1441", "minutes=x", "other=1"] {
        c.get(&format!("/v1/queues/tp/throughput?{bad}"))
            .await
            .expect_error(400, "invalid_argument");
    }
    // Tenant walls: the other tenant sees no worker and no throughput.
    let theirs = c.call("GET", "/v1/workers", Some(&c.other), None).await;
    assert_eq!(theirs.expect(200)["workers"], json!([]));
}

/// `PUT /v1/workers/{worker_id}`: 204, then listed idle with what it
/// announced (every field of the object); bad bodies are 400 and list
/// nothing; another tenant does not see it.
async fn idle_workers_announce_themselves(db: &TestDb) {
    let c = setup(db).await;
    let put = |id: &str, body: Value| {
        let c = &c;
        let uri = format!("/v1/workers/{id}");
        async move {
            c.call("PUT", &uri, Some(&c.admin.clone()), Some(body))
                .await
        }
    };
    let body = json!({"queues": ["mail", "pdf"], "concurrency": 8, "sdk": "typescript",
                      "version": "0.1.0", "host": "box-1", "pid": 4242});
    put("ts-1", body.clone()).await.expect(204);
    let listed = c.get("/v1/workers").await;
    let workers = listed.expect(200)["workers"].as_array().unwrap().clone();
    assert_eq!(workers.len(), 1);
    let w = &workers[0];
    let mut fields: Vec<&str> = w.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "concurrency",
            "host",
            "last_heartbeat_at",
            "last_seen_at",
            "pid",
            "queues",
            "running",
            "sdk",
            "version",
            "worker_id"
        ]
    );
    assert_eq!(
        (
            &w["worker_id"],
            &w["queues"],
            &w["running"],
            &w["concurrency"]
        ),
        (
            &json!("ts-1"),
            &json!(["mail", "pdf"]),
            &json!(0),
            &json!(8)
        )
    );
    assert_eq!(
        (&w["sdk"], &w["version"]),
        (&json!("typescript"), &json!("0.1.0"))
    );
    assert_eq!((&w["host"], &w["pid"]), (&json!("box-1"), &json!(4242)));
    assert_eq!(w["last_heartbeat_at"], Value::Null);
    assert!(is_rfc3339_utc(&w["last_seen_at"]));
    // Only the required fields.
    put("bare", json!({"queues": ["q"], "concurrency": 1}))
        .await
        .expect(204);
    for (id, bad) in [
        ("w", json!({"queues": [], "concurrency": 1})),
        ("w", json!({"queues": ["q"]})),
        ("w", json!({"queues": ["q"], "concurrency": 0})),
        (
            "w",
            json!({"queues": ["q"], "concurrency": 1, "colour": "red"}),
        ),
        ("w", json!({"queues": ["q"], "concurrency": 1, "pid": -1})),
    ] {
        put(id, bad.clone())
            .await
            .expect_error(400, "invalid_argument");
    }
    let listed = c.get("/v1/workers").await;
    let ids: Vec<&str> = listed.expect(200)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["bare", "ts-1"]);
    let theirs = c.call("GET", "/v1/workers", Some(&c.other), None).await;
    assert_eq!(theirs.expect(200)["workers"], json!([]));
}

async fn empty_queues_are_removed(db: &TestDb) {
    let c = setup(db).await;
    c.post_empty("/v1/queues/typo/pause").await.expect(200);
    let r = c
        .call("DELETE", "/v1/queues/typo", Some(&c.admin), None)
        .await;
    assert_eq!(r.status, 204);
    let queues = c.get("/v1/queues").await;
    assert_eq!(queues.expect(200)["queues"], json!([]));
    c.call("DELETE", "/v1/queues/typo", Some(&c.admin), None)
        .await
        .expect_error(404, "not_found");
    c.enqueue("busy", "k").await;
    c.call("DELETE", "/v1/queues/busy", Some(&c.admin), None)
        .await
        .expect_error(409, "invalid_state");
    assert_eq!(
        c.get("/v1/queues").await.expect(200)["queues"][0]["name"],
        "busy"
    );
}

async fn schedules_list_with_runs_and_next_times(db: &TestDb) {
    let c = setup(db).await;
    let s = c
        .post(
            "/v1/schedules",
            json!({"name": "hourly", "cron": "@hourly", "queue": "cron-q", "kind": "tick"}),
        )
        .await;
    let id = s.expect(201)["schedule"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.body["schedule"]["cron"], "@hourly");
    c.post(
        "/v1/schedules",
        json!({"name": "off", "cron": "0 4 * * *", "queue": "cron-q", "kind": "tick", "enabled": false}),
    )
    .await
    .expect(201);
    for _ in 0..3 {
        c.post_empty(&format!("/v1/schedules/{id}/trigger"))
            .await
            .expect(201);
    }
    // Without the parameters: as before, no extra fields.
    let plain = c.get("/v1/schedules").await;
    let first = &plain.expect(200)["schedules"][0];
    assert!(first.get("recent_runs").is_none() && first.get("next_runs").is_none());
    let full = c.get("/v1/schedules?runs=2&next=3").await;
    let list = full.expect(200)["schedules"].as_array().unwrap();
    let hourly = list.iter().find(|s| s["name"] == "hourly").unwrap();
    let off = list.iter().find(|s| s["name"] == "off").unwrap();
    assert_eq!(hourly["recent_runs"].as_array().unwrap().len(), 2);
    assert_eq!(hourly["recent_runs"][0]["outcome"], "enqueued");
    let next = hourly["next_runs"].as_array().unwrap();
    assert_eq!(next.len(), 3);
    assert!(next.iter().all(|t| t.as_str().unwrap().contains(":00:00")));
    assert_eq!(off["recent_runs"], json!([]));
    assert_eq!(off["next_runs"], json!([]));
    for bad in ["runs=0", "runs=21", "next=0", "next=x", "limit=1"] {
        c.get(&format!("/v1/schedules?{bad}"))
            .await
            .expect_error(400, "invalid_argument");
    }
}
