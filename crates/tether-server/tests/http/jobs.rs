//! Jobs and queues: enqueue, claim, heartbeat, complete, fail, snooze, cancel, replay, listing, events and the queue routes.

use super::*;

tether_conformance::both_backends!(
    health_and_readiness,
    job_object_has_exactly_the_api_fields,
    headers_are_carried_to_the_claim,
    enqueue_single_batch_and_dedupe,
    claim_heartbeat_complete,
    fail_retry_fatal_and_cancel_ack,
    snooze_cancel_and_replay,
    complete_batch_answers_per_item,
    claims_carry_the_last_batchs_reports,
    heartbeat_batch_answers_per_item,
    list_get_and_events,
    queue_routes,
);

async fn health_and_readiness(db: &TestDb) {
    let c = setup(db).await;
    c.call("GET", "/healthz", None, None).await.expect(200);
    c.call("GET", "/readyz", None, None).await.expect(200);
}

/// `headers` at enqueue (one and batch) come back from GET, claim and the
/// batch answer unchanged; `{}` without; bad headers are a 400 naming the
/// field, enqueueing nothing.
async fn headers_are_carried_to_the_claim(db: &TestDb) {
    let c = setup(db).await;
    let headers = json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                         "tracestate": "a=1"});
    let one = c
        .post(
            "/v1/jobs",
            json!({"queue": "hq", "kind": "k", "headers": headers}),
        )
        .await;
    let id = one.expect(201)["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(one.body["job"]["headers"], headers);
    let batch = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"queue": "hq", "kind": "k"}, {"queue": "hq", "kind": "k",
                             "headers": {"x-req": "7"}}]}),
        )
        .await;
    let jobs = batch.expect(200)["results"].as_array().unwrap().clone();
    assert_eq!(jobs[0]["job"]["headers"], json!({}));
    assert_eq!(jobs[1]["job"]["headers"], json!({"x-req": "7"}));
    let got = c.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(got.expect(200)["job"]["headers"], headers);
    let claimed = c
        .post(
            "/v1/queues/hq/claim",
            json!({"worker_id": "w", "limit": 10}),
        )
        .await;
    let claimed = claimed.expect(200)["jobs"].as_array().unwrap().clone();
    let by_id = |id: &Value| claimed.iter().find(|j| &j["id"] == id).unwrap()["headers"].clone();
    assert_eq!(by_id(&json!(id)), headers);
    assert_eq!(by_id(&jobs[1]["job"]["id"]), json!({"x-req": "7"}));
    assert_eq!(by_id(&jobs[0]["job"]["id"]), json!({}));

    for (bad, field) in [
        (json!({"a": 1}), "headers"),
        (json!(["a"]), "headers"),
        (json!({"bad name": "v"}), "headers"),
        (json!({"n": "x".repeat(1_025)}), "headers.n"),
    ] {
        let a = c
            .post(
                "/v1/jobs",
                json!({"queue": "hq2", "kind": "k", "headers": bad}),
            )
            .await;
        assert_eq!(a.expect(400)["error"]["code"], "invalid_argument");
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{message}");
    }
    let none = c.get("/v1/jobs?queue=hq2").await;
    assert_eq!(none.expect(200)["jobs"], json!([]));
}

async fn job_object_has_exactly_the_api_fields(db: &TestDb) {
    let c = setup(db).await;
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "payload": {"a": 1}, "tags": ["t1"]}),
        )
        .await;
    let body = a.expect(201).clone();
    assert_eq!(body["created"], true);
    let job = body["job"].as_object().unwrap();
    let mut keys: Vec<&str> = job.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = JOB_FIELDS.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(job["state"], "queued");
    assert_eq!(job["payload"], json!({"a": 1}));
    assert_eq!(job["tags"], json!(["t1"]));
    assert_eq!(job["max_attempts"], 5);
    assert_eq!(job["priority"], 0);
    assert!(is_rfc3339_utc(&job["run_at"]), "{}", job["run_at"]);
    assert!(is_rfc3339_utc(&job["created_at"]));
    // Claimed jobs carry the lease token; reads never do.
    let claim = c
        .post("/v1/queues/q/claim", json!({"worker_id": "w"}))
        .await;
    let claimed = &claim.expect(200)["jobs"][0];
    assert!(claimed["lease_token"].is_string());
    assert_eq!(claimed["state"], "running");
    assert!(is_rfc3339_utc(&claimed["lease_expires_at"]));
    let id = claimed["id"].as_str().unwrap();
    let got = c.get(&format!("/v1/jobs/{id}")).await;
    assert!(got.expect(200)["job"].get("lease_token").is_none());
    assert!(got.body["job"].get("tenant").is_none());
}

async fn enqueue_single_batch_and_dedupe(db: &TestDb) {
    let c = setup(db).await;
    let first = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "idempotency_key": "inv:1", "payload": 1}),
        )
        .await;
    let id = first.expect(201)["job"]["id"].clone();
    let again = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "idempotency_key": "inv:1", "payload": 2}),
        )
        .await;
    assert_eq!(again.expect(200)["created"], false);
    assert_eq!(again.body["job"]["id"], id);
    assert_eq!(again.body["job"]["payload"], 1);
    // Unique key dedupes against the active job.
    let u1 = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "unique_key": "u"}),
        )
        .await;
    u1.expect(201);
    let u2 = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "unique_key": "u"}),
        )
        .await;
    assert_eq!(u2.expect(200)["job"]["id"], u1.body["job"]["id"]);
    // Delays, priorities, options.
    let d = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "delay_ms": 60000, "priority": 7,
                   "max_attempts": 2, "timeout_ms": 500, "backoff": {"base_ms": 10, "cap_ms": 20},
                   "expires_at": "2099-01-01T00:00:00Z"}),
        )
        .await;
    let j = &d.expect(201)["job"];
    assert_eq!(j["priority"], 7);
    assert_eq!(j["max_attempts"], 2);
    assert_eq!(j["timeout_ms"], 500);
    assert_eq!(j["expires_at"], "2099-01-01T00:00:00.000Z");
    let at = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "run_at": "2099-01-01T00:00:00+02:00"}),
        )
        .await;
    assert_eq!(at.expect(201)["job"]["run_at"], "2098-12-31T22:00:00.000Z");
    // Explicit nulls mean "unset".
    let n = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "payload": null, "priority": null, "tags": null,
                   "run_at": null, "delay_ms": null, "backoff": null}),
        )
        .await;
    assert_eq!(n.expect(201)["job"]["tags"], json!([]));
    assert_eq!(n.body["job"]["payload"], Value::Null);
    // Batch: request order, created flags, duplicates resolved.
    let b = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"queue": "b", "kind": "x"},
                {"queue": "b", "kind": "y", "idempotency_key": "inv:1"},
                {"queue": "b", "kind": "z"}
            ]}),
        )
        .await;
    let results = b.expect(200)["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["created"], true);
    assert_eq!(results[0]["job"]["kind"], "x");
    assert_eq!(results[1]["created"], false);
    assert_eq!(results[1]["job"]["id"], id);
    assert_eq!(results[2]["job"]["kind"], "z");
    // One bad entry refuses the whole batch and writes nothing.
    let bad = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"queue": "c", "kind": "x"}, {"queue": "c", "kind": "bad name"}]}),
        )
        .await;
    bad.expect_error(400, "invalid_argument");
    assert!(bad.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("jobs[1].kind"));
    let stats = c.get("/v1/queues/c").await;
    assert_eq!(stats.expect(200)["queue"]["counts"]["queued"], 0);
    // Empty and oversized batches.
    c.post("/v1/jobs/batch", json!({"jobs": []}))
        .await
        .expect_error(400, "invalid_argument");
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"queue": "c", "kind": "x"}))
        .collect();
    c.post("/v1/jobs/batch", json!({"jobs": many}))
        .await
        .expect_error(400, "invalid_argument");
}

async fn claim_heartbeat_complete(db: &TestDb) {
    let c = setup(db).await;
    for _ in 0..3 {
        c.enqueue("q", "k").await;
    }
    let a = c
        .post(
            "/v1/queues/q/claim",
            json!({"worker_id": "w", "limit": 2, "lease_ttl_ms": 5000}),
        )
        .await;
    let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0]["worker_id"], "w");
    assert_eq!(jobs[0]["attempt"], 1);
    let id = jobs[0]["id"].as_str().unwrap();
    let token = jobs[0]["lease_token"].as_str().unwrap();
    let hb = c
        .post(
            &format!("/v1/jobs/{id}/heartbeat"),
            json!({"lease_token": token, "lease_ttl_ms": 60000, "progress": {"pct": 50}}),
        )
        .await;
    assert_eq!(hb.expect(200)["cancel_requested"], false);
    assert!(is_rfc3339_utc(&hb.body["lease_expires_at"]));
    let got = c.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(got.expect(200)["job"]["progress"], json!({"pct": 50}));
    // Heartbeat without a TTL keeps the claim's.
    c.post(
        &format!("/v1/jobs/{id}/heartbeat"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    let done = c
        .post(
            &format!("/v1/jobs/{id}/complete"),
            json!({"lease_token": token, "result": {"ok": 1}}),
        )
        .await;
    let job = &done.expect(200)["job"];
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["result"], json!({"ok": 1}));
    assert!(is_rfc3339_utc(&job["finished_at"]));
    // The claim limit default is 1.
    let one = c
        .post("/v1/queues/q/claim", json!({"worker_id": "w"}))
        .await;
    assert_eq!(one.expect(200)["jobs"].as_array().unwrap().len(), 1);
    let none = c
        .post("/v1/queues/q/claim", json!({"worker_id": "w"}))
        .await;
    assert_eq!(none.expect(200)["jobs"], json!([]));
}

async fn fail_retry_fatal_and_cancel_ack(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    let (id, token) = c.claim_one("q").await;
    let f = c
        .post(
            &format!("/v1/jobs/{id}/fail"),
            json!({"lease_token": token, "error": "boom", "retry_after_ms": 0}),
        )
        .await;
    let job = &f.expect(200)["job"];
    assert_eq!(job["state"], "queued");
    assert_eq!(job["last_error"], "boom");
    assert_eq!(job["attempt"], 1);
    let (id2, token2) = c.claim_one("q").await;
    assert_eq!(id2, id);
    let f = c
        .post(
            &format!("/v1/jobs/{id}/fail"),
            json!({"lease_token": token2, "error": "bad", "fatal": true}),
        )
        .await;
    assert_eq!(f.expect(200)["job"]["state"], "failed");
    // Dead-letter listing.
    let dlq = c.get("/v1/jobs?state=failed").await;
    assert_eq!(dlq.expect(200)["jobs"][0]["id"], id.as_str());
    // Cancel acknowledgement.
    c.enqueue("q2", "k").await;
    let (id3, token3) = c.claim_one("q2").await;
    let cr = c.post_empty(&format!("/v1/jobs/{id3}/cancel")).await;
    assert_eq!(cr.expect(200)["job"]["cancel_requested"], true);
    assert_eq!(cr.body["job"]["state"], "running");
    let hb = c
        .post(
            &format!("/v1/jobs/{id3}/heartbeat"),
            json!({"lease_token": token3}),
        )
        .await;
    assert_eq!(hb.expect(200)["cancel_requested"], true);
    let f = c
        .post(
            &format!("/v1/jobs/{id3}/fail"),
            json!({"lease_token": token3, "error": "stopped", "cancelled": true}),
        )
        .await;
    assert_eq!(f.expect(200)["job"]["state"], "cancelled");
}

async fn snooze_cancel_and_replay(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    let (id, token) = c.claim_one("q").await;
    let s = c
        .post(
            &format!("/v1/jobs/{id}/snooze"),
            json!({"lease_token": token, "delay_ms": 60000}),
        )
        .await;
    let job = &s.expect(200)["job"];
    assert_eq!(job["state"], "queued");
    assert_eq!(job["attempt"], 0);
    // Queued → cancelled at once; then replay → queued, attempt 0.
    let cancelled = c.post_empty(&format!("/v1/jobs/{id}/cancel")).await;
    assert_eq!(cancelled.expect(200)["job"]["state"], "cancelled");
    let replayed = c.post_empty(&format!("/v1/jobs/{id}/replay")).await;
    assert_eq!(replayed.expect(200)["job"]["state"], "queued");
    assert_eq!(replayed.body["job"]["attempt"], 0);
    // Bulk replay of a queue's dead letters.
    for _ in 0..3 {
        c.enqueue("dead", "k").await;
    }
    for _ in 0..3 {
        let (id, token) = c.claim_one("dead").await;
        c.post(
            &format!("/v1/jobs/{id}/fail"),
            json!({"lease_token": token, "error": "x", "fatal": true}),
        )
        .await
        .expect(200);
    }
    let r = c.post("/v1/queues/dead/replay", json!({"limit": 2})).await;
    assert_eq!(r.expect(200)["replayed"], 2);
    let cursor = r.body["next_cursor"]
        .as_str()
        .expect("a full round names its cursor")
        .to_owned();
    // The next round starts after the cursor: the one job left, then the end.
    let later = "2999-01-01T00:00:00.000Z";
    let r = c
        .post(
            "/v1/queues/dead/replay",
            json!({"cursor": cursor, "expires_at": later}),
        )
        .await;
    assert_eq!(r.expect(200)["replayed"], 1);
    assert_eq!(r.body["next_cursor"], Value::Null);
    let listed = c.get("/v1/jobs?queue=dead").await;
    let expiries: Vec<&Value> = listed.expect(200)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["expires_at"])
        .collect();
    assert_eq!(
        expiries.iter().filter(|e| **e == later).count(),
        1,
        "{expiries:?}"
    );
    assert_eq!(
        expiries.iter().filter(|e| e.is_null()).count(),
        2,
        "{expiries:?}"
    );
    let r = c.post_empty("/v1/queues/dead/replay").await;
    assert_eq!(r.expect(200)["replayed"], 0);
    let r = c
        .post(
            "/v1/queues/dead/replay",
            json!({"state": "cancelled", "kind": "k"}),
        )
        .await;
    assert_eq!(r.expect(200)["replayed"], 0);
    for bad in [
        json!({"state": "running"}),
        json!({"cursor": "nope"}),
        json!({"expires_at": "-5000-01-01T00:00:00Z"}),
    ] {
        c.post("/v1/queues/dead/replay", bad.clone())
            .await
            .expect_error(400, "invalid_argument");
    }
    // A single replay sets the body's expires_at, or clears it.
    c.post_empty(&format!("/v1/jobs/{id}/cancel"))
        .await
        .expect(200);
    let r = c
        .post(
            &format!("/v1/jobs/{id}/replay"),
            json!({"expires_at": later}),
        )
        .await;
    assert_eq!(r.expect(200)["job"]["expires_at"], later);
    c.post_empty(&format!("/v1/jobs/{id}/cancel"))
        .await
        .expect(200);
    let r = c
        .post(
            &format!("/v1/jobs/{id}/replay"),
            json!({"expires_at": "1969-12-31T00:00:00Z"}),
        )
        .await;
    r.expect_error(400, "invalid_argument");
    let r = c
        .post(&format!("/v1/jobs/{id}/replay"), json!({"bogus": 1}))
        .await;
    r.expect_error(400, "invalid_argument");
    let r = c.post(&format!("/v1/jobs/{id}/replay"), json!({})).await;
    assert_eq!(r.expect(200)["job"]["expires_at"], Value::Null);
}

async fn complete_batch_answers_per_item(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    c.enqueue("q", "k").await;
    let (a, ta) = c.claim_one("q").await;
    let (b, _) = c.claim_one("q").await;
    let missing = uuid::Uuid::now_v7().to_string();
    let r = c
        .post(
            "/v1/jobs/complete",
            json!({"items": [
                {"id": a, "lease_token": ta, "result": 1},
                {"id": b, "lease_token": uuid::Uuid::new_v4()},
                {"id": missing, "lease_token": uuid::Uuid::new_v4()}
            ]}),
        )
        .await;
    let results = r.expect(200)["results"].as_array().unwrap().clone();
    assert_eq!(results[0], json!({"id": a, "ok": true}));
    assert_eq!(results[1]["id"], b.as_str());
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["error"]["code"], "lease_lost");
    assert_eq!(results[2]["ok"], false);
    assert_eq!(results[2]["error"]["code"], "not_found");
    let got = c.get(&format!("/v1/jobs/{a}")).await;
    assert_eq!(got.expect(200)["job"]["state"], "succeeded");
    c.post("/v1/jobs/complete", json!({"items": []}))
        .await
        .expect_error(400, "invalid_argument");
}

async fn claims_carry_the_last_batchs_reports(db: &TestDb) {
    let c = setup(db).await;
    for _ in 0..4 {
        c.enqueue("q", "k").await;
    }
    let (a, ta) = c.claim_one("q").await;
    let (b, tb) = c.claim_one("q").await;
    let missing = uuid::Uuid::now_v7().to_string();
    // A claim without reports answers no `reports`.
    let r = c
        .post(
            "/v1/queues/other/claim",
            json!({"worker_id": "w", "limit": 1}),
        )
        .await;
    assert_eq!(*r.expect(200), json!({"jobs": []}));

    let r = c
        .post(
            "/v1/queues/q/claim",
            json!({
                "worker_id": "w", "limit": 10,
                "complete": [
                    {"id": a, "lease_token": ta, "result": {"n": 1}},
                    {"id": missing, "lease_token": uuid::Uuid::new_v4()}
                ],
                "fail": [
                    {"id": b, "lease_token": tb, "error": "upstream", "retry_after_ms": 600000},
                    {"id": b, "lease_token": uuid::Uuid::new_v4(), "error": "stale"}
                ]
            }),
        )
        .await;
    let body = r.expect(200);
    let reports = body["reports"].as_array().unwrap().clone();
    assert_eq!(reports.len(), 4);
    assert_eq!(reports[0], json!({"id": a, "ok": true}));
    assert_eq!(reports[1]["ok"], false);
    assert_eq!(reports[1]["error"]["code"], "not_found");
    assert_eq!(reports[2], json!({"id": b, "ok": true}));
    assert_eq!(reports[3]["ok"], false);
    assert_eq!(reports[3]["error"]["code"], "lease_lost");
    // The refused reports did not fail the claim: the two ready jobs.
    assert_eq!(body["jobs"].as_array().unwrap().len(), 2);
    let got = c.get(&format!("/v1/jobs/{a}")).await;
    let got = got.expect(200);
    assert_eq!(got["job"]["state"], "succeeded");
    assert_eq!(got["job"]["result"], json!({"n": 1}));
    let got = c.get(&format!("/v1/jobs/{b}")).await;
    let got = got.expect(200);
    assert_eq!(got["job"]["state"], "queued");
    assert_eq!(got["job"]["last_error"], "upstream");

    // Empty lists are a claim that carried nothing: `reports` is empty.
    let r = c
        .post(
            "/v1/queues/q/claim",
            json!({"worker_id": "w", "complete": [], "fail": []}),
        )
        .await;
    assert_eq!(r.expect(200)["reports"], json!([]));

    // Bad as a whole: over 1 000 reports, or a malformed item; nothing
    // changes (the resent completion of `a` would be answered ok).
    c.enqueue("q", "k").await;
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({"id": a, "lease_token": ta}))
        .collect();
    let r = c
        .post(
            "/v1/queues/q/claim",
            json!({"worker_id": "w", "complete": many}),
        )
        .await;
    r.expect_error(400, "invalid_argument");
    let r = c
        .post(
            "/v1/queues/q/claim",
            json!({"worker_id": "w", "fail": [{"id": a, "lease_token": ta}]}),
        )
        .await;
    r.expect_error(400, "invalid_argument");
    let ready = c.get("/v1/jobs?queue=q&state=queued").await;
    let ready = ready.expect(200);
    assert_eq!(ready["jobs"].as_array().unwrap().len(), 2);

    // With a wait, the reports are applied at once and answered with the
    // claim (which finds the ready job without waiting).
    let (d, td) = c.claim_one("q").await;
    c.enqueue("q", "k").await;
    let r = c
        .post(
            "/v1/queues/q/claim",
            json!({"worker_id": "w", "wait_ms": 200,
                   "complete": [{"id": d, "lease_token": td}]}),
        )
        .await;
    let body = r.expect(200);
    assert_eq!(body["reports"], json!([{"id": d, "ok": true}]));
    assert_eq!(body["jobs"].as_array().unwrap().len(), 1);
}

async fn heartbeat_batch_answers_per_item(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    c.enqueue("q", "k").await;
    let (a, ta) = c.claim_one("q").await;
    let (b, _) = c.claim_one("q").await;
    let missing = uuid::Uuid::now_v7().to_string();
    let r = c
        .post(
            "/v1/jobs/heartbeat",
            json!({"items": [
                {"id": a, "lease_token": ta, "lease_ttl_ms": 120000, "progress": {"done": 3}},
                {"id": b, "lease_token": uuid::Uuid::new_v4()},
                {"id": missing, "lease_token": uuid::Uuid::new_v4()}
            ]}),
        )
        .await;
    let results = r.expect(200)["results"].as_array().unwrap().clone();
    assert_eq!(results[0]["id"], a.as_str());
    assert_eq!(results[0]["ok"], true);
    assert_eq!(results[0]["cancel_requested"], false);
    assert!(is_rfc3339_utc(&results[0]["lease_expires_at"]));
    assert_eq!(results[1]["ok"], false);
    assert_eq!(results[1]["error"]["code"], "lease_lost");
    assert_eq!(results[2]["error"]["code"], "not_found");
    let got = c.get(&format!("/v1/jobs/{a}")).await;
    let got = got.expect(200);
    assert_eq!(got["job"]["progress"], json!({"done": 3}));
    let until =
        chrono::DateTime::parse_from_rfc3339(got["job"]["lease_expires_at"].as_str().unwrap())
            .unwrap();
    assert!(until > chrono::Utc::now() + chrono::Duration::seconds(100));
    c.post("/v1/jobs/heartbeat", json!({"items": []}))
        .await
        .expect_error(400, "invalid_argument");
    c.post(
        "/v1/jobs/heartbeat",
        json!({"items": [{"id": a, "lease_token": ta, "extra": 1}]}),
    )
    .await
    .expect_error(400, "invalid_argument");
}

async fn list_get_and_events(db: &TestDb) {
    let c = setup(db).await;
    for i in 0..5 {
        c.post("/v1/jobs", json!({"queue": "l", "kind": if i % 2 == 0 { "even" } else { "odd" }, "tags": [format!("t{i}")]}))
            .await
            .expect(201);
    }
    c.enqueue("other-queue", "even").await;
    let all = c.get("/v1/jobs?queue=l").await;
    assert_eq!(all.expect(200)["jobs"].as_array().unwrap().len(), 5);
    assert_eq!(all.body["next_cursor"], Value::Null);
    let even = c.get("/v1/jobs?queue=l&kind=even").await;
    assert_eq!(even.expect(200)["jobs"].as_array().unwrap().len(), 3);
    let tagged = c.get("/v1/jobs?tag=t3").await;
    assert_eq!(tagged.expect(200)["jobs"].as_array().unwrap().len(), 1);
    let queued = c.get("/v1/jobs?state=queued&queue=").await;
    assert_eq!(queued.expect(200)["jobs"].as_array().unwrap().len(), 6);
    // Cursor pagination: newest first, every job once.
    let mut seen = Vec::new();
    let mut uri = "/v1/jobs?queue=l&limit=2".to_owned();
    loop {
        let page = c.get(&uri).await;
        let body = page.expect(200).clone();
        for j in body["jobs"].as_array().unwrap() {
            seen.push(j["id"].as_str().unwrap().to_owned());
        }
        match body["next_cursor"].as_str() {
            Some(cur) => uri = format!("/v1/jobs?queue=l&limit=2&cursor={cur}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5);
    let mut sorted = seen.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted, "newest first");
    // Bad filters.
    for bad in [
        "limit=0",
        "limit=501",
        "limit=x",
        "state=nope",
        "cursor=zzz",
        "queue=a%20b",
        "bogus=1",
    ] {
        c.get(&format!("/v1/jobs?{bad}"))
            .await
            .expect_error(400, "invalid_argument");
    }
    // History, oldest first.
    let (id, token) = c.claim_one("other-queue").await;
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    let ev = c.get(&format!("/v1/jobs/{id}/events")).await;
    let events = ev.expect(200)["events"].as_array().unwrap().clone();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["enqueued", "claimed", "succeeded"]);
    assert_eq!(events[1]["worker_id"], "w1");
    assert_eq!(events[1]["attempt"], 1);
    assert!(is_rfc3339_utc(&events[0]["at"]));
    assert!(events[0].as_object().unwrap().contains_key("detail"));
    assert_eq!(ev.body["next_cursor"], Value::Null);
    // Paged like the job list: a full page names its cursor; the pages
    // together are the history, once, oldest first.
    let mut seen = Vec::new();
    let mut uri = format!("/v1/jobs/{id}/events?limit=2");
    loop {
        let page = c.get(&uri).await;
        let body = page.expect(200).clone();
        let got = body["events"].as_array().unwrap();
        assert!(got.len() <= 2);
        seen.extend(got.iter().map(|e| e["event"].as_str().unwrap().to_owned()));
        match body["next_cursor"].as_str() {
            Some(cur) => uri = format!("/v1/jobs/{id}/events?limit=2&cursor={cur}"),
            None => break,
        }
    }
    assert_eq!(seen, ["enqueued", "claimed", "succeeded"]);
    for bad in [
        "limit=0",
        "limit=1001",
        "limit=x",
        "cursor=zzz",
        "cursor=-1",
        "after=1",
    ] {
        c.get(&format!("/v1/jobs/{id}/events?{bad}"))
            .await
            .expect_error(400, "invalid_argument");
    }
    c.get(&format!("/v1/jobs/{id}/events?limit=1000"))
        .await
        .expect(200);
}

async fn queue_routes(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "delay_ms": 60000}),
    )
    .await
    .expect(201);
    let list = c.get("/v1/queues").await;
    let queues = list.expect(200)["queues"].as_array().unwrap().clone();
    assert_eq!(queues.len(), 1);
    let q = &queues[0];
    assert_eq!(q["name"], "q");
    assert_eq!(q["counts"]["queued"], 2);
    assert_eq!(q["ready"], 1);
    assert_eq!(q["scheduled"], 1);
    for f in [
        "paused",
        "oldest_ready_age_ms",
        "expired_leases",
        "max_attempts",
        "backoff",
        "default_lease_ttl_ms",
    ] {
        assert!(q.get(f).is_some(), "queue stats lack {f}: {q}");
    }
    // An unused queue reads as zeros.
    let unused = c.get("/v1/queues/never-used").await;
    let u = &unused.expect(200)["queue"];
    assert_eq!(
        u["counts"],
        json!({"waiting": 0, "queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0})
    );
    assert_eq!(u["oldest_ready_age_ms"], 0);
    // Pause: enqueue accepted, no claims; resume.
    let p = c.post_empty("/v1/queues/q/pause").await;
    assert_eq!(p.expect(200)["queue"]["paused"], true);
    let none = c
        .post("/v1/queues/q/claim", json!({"worker_id": "w"}))
        .await;
    assert_eq!(none.expect(200)["jobs"], json!([]));
    let r = c.post_empty("/v1/queues/q/resume").await;
    assert_eq!(r.expect(200)["queue"]["paused"], false);
    c.claim_one("q").await;
    // Config.
    let patched = c
        .call(
            "PATCH",
            "/v1/queues/q",
            Some(&c.admin.clone()),
            Some(json!({"max_attempts": 9, "backoff": {"base_ms": 5, "cap_ms": 50}, "default_lease_ttl_ms": 2000})),
        )
        .await;
    let q = &patched.expect(200)["queue"];
    assert_eq!(q["max_attempts"], 9);
    assert_eq!(q["backoff"], json!({"base_ms": 5, "cap_ms": 50}));
    assert_eq!(q["default_lease_ttl_ms"], 2000);
    let j = c.post("/v1/jobs", json!({"queue": "q", "kind": "k"})).await;
    assert_eq!(j.expect(201)["job"]["max_attempts"], 9);
    c.call(
        "PATCH",
        "/v1/queues/q",
        Some(&c.admin.clone()),
        Some(json!({"max_attempts": 0})),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.call(
        "PATCH",
        "/v1/queues/q",
        Some(&c.admin.clone()),
        Some(json!({"paused": true})),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.get("/v1/queues/bad%20name")
        .await
        .expect_error(400, "invalid_argument");
}
