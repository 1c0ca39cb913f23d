//! HTTP-level tests of the `/v1` API, each on PostgreSQL and SQLite, driving
//! the router in-process.

mod common;

use std::time::{Duration, Instant};

use common::{setup, setup_with, Ctx};
use serde_json::{json, Value};
use tether_conformance::TestDb;
use tether_server::ServerConfig;

tether_conformance::both_backends!(
    health_and_readiness,
    job_object_has_exactly_the_api_fields,
    enqueue_single_batch_and_dedupe,
    claim_heartbeat_complete,
    fail_retry_fatal_and_cancel_ack,
    snooze_cancel_and_replay,
    complete_batch_answers_per_item,
    heartbeat_batch_answers_per_item,
    list_get_and_events,
    queue_routes,
    tenant_and_key_routes,
    key_listing_shows_use_and_revocation,
    whoami_names_the_key,
    authentication_is_required,
    admin_routes_need_admin,
    tenant_walls_on_every_id_route,
    bad_input_is_refused,
    size_and_media_type_limits,
    routing_errors,
    conflicts,
    long_poll_wakes_on_enqueue,
    long_poll_times_out_empty,
    long_polls_beyond_the_cap_answer_at_once,
    requests_past_the_time_limit_are_503,
    schedule_crud_round_trip,
    schedule_defaults,
    schedule_bad_input_is_refused,
    schedule_name_conflicts,
    schedule_tenant_walls,
    schedule_trigger_enqueues_a_job_and_records_a_run,
    disabled_schedule_has_no_next_run,
    cron_preview_follows_the_scheduler,
    tenant_limits_are_409_and_metrics_are_bounded,
);

const JOB_FIELDS: [&str; 25] = [
    "id",
    "queue",
    "kind",
    "payload",
    "result",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "created_at",
    "started_at",
    "finished_at",
    "updated_at",
    "last_error",
    "unique_key",
    "idempotency_key",
    "tags",
    "expires_at",
    "timeout_ms",
    "cancel_requested",
    "worker_id",
    "lease_expires_at",
    "heartbeat_at",
    "progress",
];

fn is_rfc3339_utc(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(s).is_ok())
}

async fn health_and_readiness(db: &TestDb) {
    let c = setup(db).await;
    c.call("GET", "/healthz", None, None).await.expect(200);
    c.call("GET", "/readyz", None, None).await.expect(200);
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
        json!({"queued": 0, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0})
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

async fn tenant_and_key_routes(db: &TestDb) {
    let c = setup(db).await;
    let t = c.post("/v1/tenants", json!({"name": "acme"})).await;
    let body = t.expect(201).clone();
    assert_eq!(body["tenant"]["name"], "acme");
    assert!(is_rfc3339_utc(&body["tenant"]["created_at"]));
    let acme_id = body["tenant"]["id"].as_str().unwrap().to_owned();
    let acme_key = body["api_key"].as_str().unwrap().to_owned();
    // The new key works and sees only acme's jobs.
    let e = c
        .call(
            "POST",
            "/v1/jobs",
            Some(&acme_key),
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    e.expect(201);
    let mine = c.call("GET", "/v1/jobs", Some(&acme_key), None).await;
    assert_eq!(mine.expect(200)["jobs"].as_array().unwrap().len(), 1);
    let admins = c.get("/v1/jobs").await;
    assert_eq!(admins.expect(200)["jobs"], json!([]));
    // Listing.
    let list = c.get("/v1/tenants").await;
    let names: Vec<String> = list.expect(200)["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    for n in ["default", "other", "acme"] {
        assert!(names.contains(&n.to_owned()), "{names:?}");
    }
    // Duplicate name, bad name.
    c.post("/v1/tenants", json!({"name": "acme"}))
        .await
        .expect_error(409, "already_exists");
    c.post("/v1/tenants", json!({"name": "a b"}))
        .await
        .expect_error(400, "invalid_argument");
    // Keys: a second key for acme; admin only for default.
    let k = c
        .post(
            &format!("/v1/tenants/{acme_id}/keys"),
            json!({"name": "ci"}),
        )
        .await;
    let key2 = k.expect(201)["api_key"].as_str().unwrap().to_owned();
    let key2_id = k.body["key_id"].as_str().unwrap().to_owned();
    c.call("GET", "/v1/jobs", Some(&key2), None)
        .await
        .expect(200);
    c.post_empty(&format!("/v1/tenants/{acme_id}/keys"))
        .await
        .expect(201);
    c.post(
        &format!("/v1/tenants/{acme_id}/keys"),
        json!({"admin": true}),
    )
    .await
    .expect_error(400, "invalid_argument");
    let default_id = list.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "default")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ak = c
        .post(
            &format!("/v1/tenants/{default_id}/keys"),
            json!({"admin": true}),
        )
        .await;
    let admin2 = ak.expect(201)["api_key"].as_str().unwrap().to_owned();
    c.call("GET", "/v1/tenants", Some(&admin2), None)
        .await
        .expect(200);
    c.post(
        &format!("/v1/tenants/{}/keys", uuid::Uuid::new_v4()),
        json!({}),
    )
    .await
    .expect_error(404, "not_found");
    c.post("/v1/tenants/not-a-uuid/keys", json!({}))
        .await
        .expect_error(404, "not_found");
    // Revocation takes effect at once.
    let del = c
        .call(
            "DELETE",
            &format!("/v1/keys/{key2_id}"),
            Some(&c.admin.clone()),
            None,
        )
        .await;
    del.expect(204);
    c.call("GET", "/v1/jobs", Some(&key2), None)
        .await
        .expect_error(401, "unauthenticated");
    c.call(
        "DELETE",
        &format!("/v1/keys/{}", uuid::Uuid::new_v4()),
        Some(&c.admin.clone()),
        None,
    )
    .await
    .expect_error(404, "not_found");
}

/// `GET /v1/whoami` names the key's tenant, id and scope, for an admin key
/// and a tenant key alike, and is 401 without a valid key.
async fn whoami_names_the_key(db: &TestDb) {
    let c = setup(db).await;
    let admin = c.get("/v1/whoami").await;
    let body = admin.expect(200).clone();
    assert_eq!(body["tenant"]["name"], "default", "{body}");
    assert_eq!(body["admin"], true);
    let mut fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["admin", "key_id", "tenant"]);

    let made = c.post("/v1/tenants", json!({"name": "acme"})).await;
    let acme_id = made.expect(201)["tenant"]["id"].clone();
    let key = made.body["api_key"].as_str().unwrap().to_owned();
    let me = c.call("GET", "/v1/whoami", Some(&key), None).await;
    let body = me.expect(200).clone();
    assert_eq!(body["tenant"], json!({"id": acme_id, "name": "acme"}));
    assert_eq!(body["admin"], false);
    let key_id = body["key_id"].as_str().unwrap();
    assert!(
        key.contains(&key_id.replace('-', "")),
        "{key_id} is the key's id"
    );

    c.call("GET", "/v1/whoami", Some("tth_nonsense"), None)
        .await
        .expect(401);
    c.call("GET", "/v1/whoami", None, None).await.expect(401);
}

/// `GET /v1/tenants/{id}/keys` lists a tenant's keys with exactly the
/// documented fields (never a secret or hash), oldest first, revoked ones
/// included; a request records `last_used_at` (in the background, at most
/// once a minute); an unknown or malformed tenant id is 404.
async fn key_listing_shows_use_and_revocation(db: &TestDb) {
    let c = setup(db).await;
    let made = c.post("/v1/tenants", json!({"name": "acme"})).await;
    let acme_id = made.expect(201)["tenant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let used_key = made.body["api_key"].as_str().unwrap().to_owned();
    let uri = format!("/v1/tenants/{acme_id}/keys");
    let issued = c.post(&uri, json!({"name": "ci"})).await;
    let ci_id = issued.expect(201)["key_id"].as_str().unwrap().to_owned();
    let ci_key = issued.body["api_key"].as_str().unwrap().to_owned();

    let list = c.get(&uri).await;
    let keys = list.expect(200)["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for key in &keys {
        let mut fields: Vec<&str> = key
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "admin",
                "created_at",
                "id",
                "last_used_at",
                "name",
                "revoked_at"
            ]
        );
        assert!(is_rfc3339_utc(&key["created_at"]), "{key}");
        assert_eq!(key["admin"], false);
        assert_eq!(key["last_used_at"], Value::Null, "unused so far: {key}");
        assert_eq!(key["revoked_at"], Value::Null);
    }
    assert_eq!(keys[0]["name"], Value::Null, "the first key, oldest first");
    assert_eq!(
        (&keys[1]["id"], &keys[1]["name"]),
        (&json!(ci_id), &json!("ci"))
    );
    let text = list.body.to_string();
    for secret in [&used_key, &ci_key] {
        let tail = secret.rsplit('_').next().unwrap();
        assert!(!text.contains(tail), "a secret is listed: {text}");
    }

    // A use is recorded, off the request's path: poll for it.
    c.call("GET", "/v1/jobs", Some(&used_key), None)
        .await
        .expect(200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let used_at = loop {
        let keys = c.get(&uri).await.expect(200)["keys"].clone();
        if let Some(at) = keys[0]["last_used_at"].as_str() {
            assert_eq!(keys[1]["last_used_at"], Value::Null, "{keys}");
            break at.to_owned();
        }
        assert!(Instant::now() < deadline, "last_used_at never set: {keys}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(is_rfc3339_utc(&json!(used_at)));
    // Within the minute, further uses write nothing.
    c.call("GET", "/v1/jobs", Some(&used_key), None)
        .await
        .expect(200);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = c.get(&uri).await.expect(200)["keys"].clone();
    assert_eq!(keys[0]["last_used_at"], json!(used_at));

    c.call(
        "DELETE",
        &format!("/v1/keys/{ci_id}"),
        Some(&c.admin.clone()),
        None,
    )
    .await
    .expect(204);
    let keys = c.get(&uri).await.expect(200)["keys"].clone();
    assert!(is_rfc3339_utc(&keys[1]["revoked_at"]), "{keys}");
    assert_eq!(keys[0]["revoked_at"], Value::Null);

    // The default tenant's list holds the admin keys.
    let tenants = c.get("/v1/tenants").await.expect(200)["tenants"].clone();
    let default_id = tenants
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "default")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let keys = c.get(&format!("/v1/tenants/{default_id}/keys")).await;
    let keys = keys.expect(200)["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 1);
    assert_eq!(
        (&keys[0]["name"], &keys[0]["admin"]),
        (&json!("admin"), &json!(true))
    );

    c.get(&format!("/v1/tenants/{}/keys", uuid::Uuid::new_v4()))
        .await
        .expect_error(404, "not_found");
    c.get("/v1/tenants/not-a-uuid/keys")
        .await
        .expect_error(404, "not_found");
}

async fn authentication_is_required(db: &TestDb) {
    let c = setup(db).await;
    let id = c.enqueue("q", "k").await;
    let (_, fake, _) = tether_core::ApiKeySecret::generate();
    let routes = [
        ("POST", "/v1/jobs".to_owned()),
        ("GET", "/v1/jobs".to_owned()),
        ("GET", format!("/v1/jobs/{id}")),
        ("POST", "/v1/queues/q/claim".to_owned()),
        ("GET", "/v1/queues".to_owned()),
        ("GET", "/v1/tenants".to_owned()),
        ("GET", format!("/v1/tenants/{}/keys", c.other_id)),
    ];
    for (method, uri) in &routes {
        c.call(method, uri, None, Some(json!({})))
            .await
            .expect_error(401, "unauthenticated");
        c.call(method, uri, Some("garbage"), Some(json!({})))
            .await
            .expect_error(401, "unauthenticated");
        c.call(method, uri, Some(&fake), Some(json!({})))
            .await
            .expect_error(401, "unauthenticated");
    }
    // Wrong scheme.
    let req = axum::http::Request::builder()
        .uri("/v1/jobs")
        .header("authorization", format!("Basic {}", c.admin))
        .body(axum::body::Body::empty())
        .unwrap();
    c.send(req).await.expect_error(401, "unauthenticated");
    // Revoked key.
    let tenant = db.engine.ensure_tenant("default").await.unwrap();
    let (info, key) = db
        .engine
        .issue_api_key(tenant.id, None, false)
        .await
        .unwrap();
    c.call("GET", "/v1/jobs", Some(&key), None)
        .await
        .expect(200);
    db.engine.revoke_api_key(info.id).await.unwrap();
    c.call("GET", "/v1/jobs", Some(&key), None)
        .await
        .expect_error(401, "unauthenticated");
}

async fn admin_routes_need_admin(db: &TestDb) {
    let c = setup(db).await;
    let other = c.other.clone();
    let tid = c.other_id.clone();
    let key_id = uuid::Uuid::new_v4();
    c.call(
        "POST",
        "/v1/tenants",
        Some(&other),
        Some(json!({"name": "x"})),
    )
    .await
    .expect_error(403, "permission_denied");
    c.call("GET", "/v1/tenants", Some(&other), None)
        .await
        .expect_error(403, "permission_denied");
    c.call(
        "POST",
        &format!("/v1/tenants/{tid}/keys"),
        Some(&other),
        Some(json!({})),
    )
    .await
    .expect_error(403, "permission_denied");
    c.call("DELETE", &format!("/v1/keys/{key_id}"), Some(&other), None)
        .await
        .expect_error(403, "permission_denied");
    c.call(
        "GET",
        &format!("/v1/tenants/{tid}/keys"),
        Some(&other),
        None,
    )
    .await
    .expect_error(403, "permission_denied");
    // A non-admin key of the default tenant is no admin either.
    let tenant = db.engine.ensure_tenant("default").await.unwrap();
    let (_, plain) = db
        .engine
        .issue_api_key(tenant.id, None, false)
        .await
        .unwrap();
    c.call("GET", "/v1/tenants", Some(&plain), None)
        .await
        .expect_error(403, "permission_denied");
}

async fn tenant_walls_on_every_id_route(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    let (id, token) = c.claim_one("q").await;
    let other = c.other.clone();
    let lt = json!({"lease_token": token});
    let cases: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/jobs/{id}"), None),
        ("GET", format!("/v1/jobs/{id}/events"), None),
        ("POST", format!("/v1/jobs/{id}/heartbeat"), Some(lt.clone())),
        ("POST", format!("/v1/jobs/{id}/complete"), Some(lt.clone())),
        (
            "POST",
            format!("/v1/jobs/{id}/fail"),
            Some(json!({"lease_token": token, "error": "x"})),
        ),
        (
            "POST",
            format!("/v1/jobs/{id}/snooze"),
            Some(json!({"lease_token": token, "delay_ms": 0})),
        ),
        ("POST", format!("/v1/jobs/{id}/cancel"), None),
        ("POST", format!("/v1/jobs/{id}/replay"), None),
    ];
    for (method, uri, body) in cases {
        c.call(method, &uri, Some(&other), body)
            .await
            .expect_error(404, "not_found");
    }
    let batch = c
        .call(
            "POST",
            "/v1/jobs/complete",
            Some(&other),
            Some(json!({"items": [{"id": id, "lease_token": token}]})),
        )
        .await;
    assert_eq!(
        batch.expect(200)["results"][0]["error"]["code"],
        "not_found"
    );
    // Lists and queues do not show it; the other tenant's claim finds nothing.
    let list = c.call("GET", "/v1/jobs", Some(&other), None).await;
    assert_eq!(list.expect(200)["jobs"], json!([]));
    let queues = c.call("GET", "/v1/queues", Some(&other), None).await;
    assert_eq!(queues.expect(200)["queues"], json!([]));
    let q = c.call("GET", "/v1/queues/q", Some(&other), None).await;
    assert_eq!(q.expect(200)["queue"]["counts"]["running"], 0);
    // The job is untouched: still running and completable by its owner.
    let done = c.post(&format!("/v1/jobs/{id}/complete"), lt).await;
    assert_eq!(done.expect(200)["job"]["state"], "succeeded");
    // Same idempotency key in two tenants makes two jobs.
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "idempotency_key": "same"}),
        )
        .await;
    let b = c
        .call(
            "POST",
            "/v1/jobs",
            Some(&other),
            Some(json!({"queue": "q", "kind": "k", "idempotency_key": "same"})),
        )
        .await;
    assert_eq!(b.expect(201)["created"], true);
    assert_ne!(a.expect(201)["job"]["id"], b.body["job"]["id"]);
}

async fn bad_input_is_refused(db: &TestDb) {
    let c = setup(db).await;
    let msg = |a: &common::Answer| a.body["error"]["message"].as_str().unwrap().to_owned();
    // Unknown field, named.
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "colour": "red"}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("colour"), "{}", msg(&a));
    // A body that is not an object, even one serde could read as a struct.
    for body in [json!(["q", "k"]), json!(null), json!("q"), json!(7)] {
        let a = c.post("/v1/jobs", body.clone()).await;
        a.expect_error(400, "invalid_argument");
        assert!(msg(&a).contains("JSON object"), "{body}: {}", msg(&a));
    }
    let a = c
        .post(
            &format!("/v1/tenants/{}/keys", c.other_id),
            json!([null, null]),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    // Wrong type, field named.
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "priority": "high"}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("priority"), "{}", msg(&a));
    // Nested field named.
    let a = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"queue": "q", "kind": "k"}, {"queue": "q", "kind": 5}]}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("jobs[1].kind"), "{}", msg(&a));
    // Absolute times outside 1970..=9999, named; nothing is written.
    for (field, at) in [
        ("run_at", "-5000-01-01T00:00:00Z"),
        ("run_at", "1969-12-31T23:59:59Z"),
        ("expires_at", "-0001-06-01T00:00:00+02:00"),
    ] {
        let a = c
            .post(
                "/v1/jobs",
                json!({"queue": "times", "kind": "k", field: at}),
            )
            .await;
        a.expect_error(400, "invalid_argument");
        assert!(msg(&a).contains(field), "{at}: {}", msg(&a));
        let a = c
            .post(
                "/v1/jobs/batch",
                json!({"jobs": [{"queue": "times", "kind": "k"}, {"queue": "times", "kind": "k", field: at}]}),
            )
            .await;
        a.expect_error(400, "invalid_argument");
        assert!(
            msg(&a).contains(&format!("jobs[1].{field}")),
            "{at}: {}",
            msg(&a)
        );
    }
    let a = c
        .get("/v1/cron/preview?cron=0%20*%20*%20*%20*&from=-5000-01-01T00:00:00Z")
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("from"), "{}", msg(&a));
    let listed = c.get("/v1/jobs?queue=times").await;
    assert_eq!(listed.expect(200)["jobs"], json!([]));
    // Missing required field.
    let a = c.post("/v1/jobs", json!({"queue": "q"})).await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("kind"), "{}", msg(&a));
    // Malformed JSON.
    c.raw(
        "POST",
        "/v1/jobs",
        Some("application/json"),
        b"{\"queue\": ".to_vec(),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.raw(
        "POST",
        "/v1/jobs",
        Some("application/json"),
        b"{} trailing".to_vec(),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.raw("POST", "/v1/jobs", Some("application/json"), Vec::new())
        .await
        .expect_error(400, "invalid_argument");
    // Bad values.
    let a = c
        .post("/v1/jobs", json!({"queue": "bad name", "kind": "k"}))
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("queue"), "{}", msg(&a));
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "delay_ms": -1}),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "priority": 101}),
    )
    .await
    .expect_error(400, "invalid_argument");
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "run_at": "2099-01-01T00:00:00Z", "delay_ms": 5}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(msg(&a).contains("run_at"), "{}", msg(&a));
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "run_at": "tomorrow"}),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.post("/v1/queues/bad%20q/claim", json!({"worker_id": "w"}))
        .await
        .expect_error(400, "invalid_argument");
    for body in [
        json!({"worker_id": "w", "limit": 0}),
        json!({"worker_id": "w", "limit": 1001}),
        json!({"worker_id": "w", "lease_ttl_ms": 999}),
        json!({"worker_id": "w", "wait_ms": 30001}),
        json!({"worker_id": "w", "wait_ms": -1}),
        json!({"limit": 1}),
    ] {
        c.post("/v1/queues/q/claim", body)
            .await
            .expect_error(400, "invalid_argument");
    }
    let id = c.enqueue("q", "k").await;
    let (_, token) = c.claim_one("q").await;
    c.post(
        &format!("/v1/jobs/{id}/heartbeat"),
        json!({"lease_token": "not-a-uuid"}),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.post(
        &format!("/v1/jobs/{id}/snooze"),
        json!({"lease_token": token, "delay_ms": -5}),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "x", "fatal": true, "cancelled": true}),
    )
    .await
    .expect_error(400, "invalid_argument");
    // Nothing was written by the refused enqueues: one job only.
    let list = c.get("/v1/jobs").await;
    assert_eq!(list.expect(200)["jobs"].as_array().unwrap().len(), 1);
}

async fn size_and_media_type_limits(db: &TestDb) {
    let c = setup(db).await;
    // Body above the default 1 MiB.
    let big = "x".repeat(1024 * 1024 + 10);
    let body = serde_json::to_vec(&json!({"queue": "q", "kind": "k", "payload": big})).unwrap();
    c.raw("POST", "/v1/jobs", Some("application/json"), body)
        .await
        .expect_error(413, "payload_too_large");
    // A smaller configured limit, with the body streamed without a length.
    let small = setup_with(
        db,
        ServerConfig {
            max_body_bytes: 100,
            ..ServerConfig::default()
        },
    )
    .await;
    let body = serde_json::to_vec(&json!({"queue": "q", "kind": "k", "payload": "y".repeat(200)}))
        .unwrap();
    small
        .raw("POST", "/v1/jobs", Some("application/json"), body)
        .await
        .expect_error(413, "payload_too_large");
    // Wrong or missing content type.
    let ok = serde_json::to_vec(&json!({"queue": "q", "kind": "k"})).unwrap();
    c.raw("POST", "/v1/jobs", Some("text/plain"), ok.clone())
        .await
        .expect_error(415, "unsupported_media_type");
    c.raw("POST", "/v1/jobs", None, ok.clone())
        .await
        .expect_error(415, "unsupported_media_type");
    c.raw(
        "POST",
        "/v1/queues/q/replay",
        Some("text/plain"),
        b"{}".to_vec(),
    )
    .await
    .expect_error(415, "unsupported_media_type");
    c.raw(
        "POST",
        "/v1/jobs",
        Some("application/json; charset=utf-8"),
        ok,
    )
    .await
    .expect(201);
}

async fn routing_errors(db: &TestDb) {
    let c = setup(db).await;
    c.get("/v1/nope").await.expect_error(404, "not_found");
    c.call("GET", "/nope", None, None)
        .await
        .expect_error(404, "not_found");
    c.call("DELETE", "/v1/jobs", Some(&c.admin.clone()), None)
        .await
        .expect_error(405, "method_not_allowed");
    c.call("PUT", "/v1/queues/q", Some(&c.admin.clone()), None)
        .await
        .expect_error(405, "method_not_allowed");
    c.call("POST", "/healthz", None, None)
        .await
        .expect_error(405, "method_not_allowed");
    // Routing answers come before authentication.
    c.call("DELETE", "/v1/jobs", None, None)
        .await
        .expect_error(405, "method_not_allowed");
    c.call("GET", "/v1/nope", None, None)
        .await
        .expect_error(404, "not_found");
    c.get("/v1/jobs/0190a0a0-0000-7000-8000-000000000000/nope")
        .await
        .expect_error(404, "not_found");
    c.get("/v1").await.expect_error(404, "not_found");
    // A path id that is not a UUID names no job.
    c.get("/v1/jobs/not-a-uuid")
        .await
        .expect_error(404, "not_found");
    c.get(&format!("/v1/jobs/{}", uuid::Uuid::now_v7()))
        .await
        .expect_error(404, "not_found");
}

async fn conflicts(db: &TestDb) {
    let c = setup(db).await;
    c.enqueue("q", "k").await;
    let (id, token) = c.claim_one("q").await;
    let wrong = uuid::Uuid::new_v4().to_string();
    for (route, body) in [
        ("heartbeat", json!({"lease_token": wrong})),
        ("complete", json!({"lease_token": wrong})),
        ("fail", json!({"lease_token": wrong, "error": "x"})),
        ("snooze", json!({"lease_token": wrong, "delay_ms": 0})),
    ] {
        c.post(&format!("/v1/jobs/{id}/{route}"), body)
            .await
            .expect_error(409, "lease_lost");
    }
    // Replay of a running job; cancel and complete of a finished one.
    c.post_empty(&format!("/v1/jobs/{id}/replay"))
        .await
        .expect_error(409, "invalid_state");
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    c.post_empty(&format!("/v1/jobs/{id}/cancel"))
        .await
        .expect_error(409, "invalid_state");
    // The same complete again answers like the first (its answer may have
    // been lost); another report with that token is refused.
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token}),
    )
    .await
    .expect(200);
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "x"}),
    )
    .await
    .expect_error(409, "lease_lost");
    c.post("/v1/tenants", json!({"name": "other"}))
        .await
        .expect_error(409, "already_exists");
}

async fn long_poll_wakes_on_enqueue(db: &TestDb) {
    let c = setup(db).await;
    let app = c.app.clone();
    let admin = c.admin.clone();
    let poller = tokio::spawn(async move {
        let c = Ctx {
            app,
            admin,
            other: String::new(),
            other_id: String::new(),
        };
        let start = Instant::now();
        let a = c
            .post(
                "/v1/queues/lp/claim",
                json!({"worker_id": "w", "wait_ms": 5000}),
            )
            .await;
        (a, start.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = c.enqueue("lp", "k").await;
    let (a, elapsed) = poller.await.unwrap();
    let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 1, "{}", a.body);
    assert_eq!(jobs[0]["id"], id.as_str());
    assert!(
        elapsed >= Duration::from_millis(150),
        "returned before the enqueue: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(2500),
        "woke too late: {elapsed:?}"
    );
}

async fn long_poll_times_out_empty(db: &TestDb) {
    let c = setup(db).await;
    let start = Instant::now();
    let a = c
        .post(
            "/v1/queues/empty/claim",
            json!({"worker_id": "w", "wait_ms": 300}),
        )
        .await;
    let elapsed = start.elapsed();
    assert_eq!(a.expect(200), &json!({"jobs": []}));
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3000), "{elapsed:?}");
}

async fn long_polls_beyond_the_cap_answer_at_once(db: &TestDb) {
    let c = std::sync::Arc::new(
        setup_with(
            db,
            ServerConfig {
                max_long_polls: 1,
                ..ServerConfig::default()
            },
        )
        .await,
    );
    let first = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(
                "/v1/queues/capped/claim",
                json!({"worker_id": "a", "wait_ms": 1500}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let second = c
        .post(
            "/v1/queues/capped/claim",
            json!({"worker_id": "b", "wait_ms": 1500}),
        )
        .await;
    let elapsed = start.elapsed();
    assert_eq!(second.expect(200), &json!({"jobs": []}));
    assert!(
        elapsed < Duration::from_millis(1000),
        "the second claim waited: {elapsed:?}"
    );
    assert_eq!(first.await.unwrap().expect(200), &json!({"jobs": []}));
    // The place is free again once the first wait ended.
    let start = Instant::now();
    let third = c
        .post(
            "/v1/queues/capped/claim",
            json!({"worker_id": "c", "wait_ms": 300}),
        )
        .await;
    assert_eq!(third.expect(200), &json!({"jobs": []}));
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "the third claim did not wait"
    );
}

async fn requests_past_the_time_limit_are_503(db: &TestDb) {
    let c = setup_with(
        db,
        ServerConfig {
            request_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    )
    .await;
    let start = Instant::now();
    c.post(
        "/v1/queues/slow/claim",
        json!({"worker_id": "w", "wait_ms": 5000}),
    )
    .await
    .expect_error(503, "unavailable");
    assert!(
        start.elapsed() < Duration::from_millis(2000),
        "{:?}",
        start.elapsed()
    );
    // Quick requests are unaffected.
    c.get("/v1/queues").await.expect(200);
}

// Not through `both_backends!`: sqlx's connect future is not `Send` for
// every lifetime, which the harness's boxed behaviour future needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_503_postgres() {
    let db = tether_conformance::postgres().await;
    unreachable_database(db.postgres_url()).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_503_sqlite() {
    unreachable_database(None).await;
}

/// A second store on the same backend, closed after bootstrap: every query
/// then fails as "database unavailable".
async fn unreachable_database(url: Option<String>) {
    let dir = std::env::temp_dir().join(format!("tether-server-503-{}", uuid::Uuid::new_v4()));
    type Close = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    let (store, close): (std::sync::Arc<dyn tether_core::Store>, Close) = match url {
        Some(url) => {
            let pg = tether_postgres::PgStore::connect(&url).await.unwrap();
            let pool = pg.pool().clone();
            (
                std::sync::Arc::new(pg),
                Box::pin(async move { pool.close().await }),
            )
        }
        None => {
            std::fs::create_dir_all(&dir).unwrap();
            let lite = tether_sqlite::SqliteStore::open(dir.join("db.sqlite"))
                .await
                .unwrap();
            let handle = lite.clone();
            (
                std::sync::Arc::new(lite),
                Box::pin(async move { handle.close().await }),
            )
        }
    };
    let engine = tether_core::Engine::new(store);
    let tenant = engine.ensure_tenant("default").await.unwrap();
    let (_, key) = engine.issue_api_key(tenant.id, None, true).await.unwrap();
    let c = Ctx {
        app: tether_server::router(tether_server::AppState::new(
            engine,
            ServerConfig::default(),
        )),
        admin: key,
        other: String::new(),
        other_id: String::new(),
    };
    c.call("GET", "/readyz", None, None).await.expect(200);
    close.await;
    c.call("GET", "/readyz", None, None)
        .await
        .expect_error(503, "unavailable");
    c.call("GET", "/healthz", None, None).await.expect(200);
    c.get("/v1/jobs").await.expect_error(503, "unavailable");
    let _ = std::fs::remove_dir_all(&dir);
}

const SCHEDULE_FIELDS: [&str; 13] = [
    "id",
    "name",
    "cron",
    "timezone",
    "queue",
    "kind",
    "payload",
    "enabled",
    "overlap",
    "next_run_at",
    "last_run_at",
    "created_at",
    "updated_at",
];

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort_unstable();
    keys
}

fn sorted(fields: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
    v.sort_unstable();
    v
}

/// A time of an answer.
fn at(v: &Value) -> chrono::DateTime<chrono::Utc> {
    assert!(is_rfc3339_utc(v), "not an RFC 3339 UTC time: {v}");
    let s = v.as_str().unwrap();
    // Milliseconds, like every time the server writes.
    assert_eq!(s.len(), "2026-11-29T23:00:00.123Z".len(), "{s}");
    s.parse().unwrap()
}

/// Creates a schedule with the admin key; returns it.
async fn create_schedule(c: &Ctx, body: Value) -> Value {
    let a = c.post("/v1/schedules", body).await;
    a.expect(201)["schedule"].clone()
}

async fn patch(c: &Ctx, uri: &str, body: Value) -> common::Answer {
    c.call("PATCH", uri, Some(&c.admin.clone()), Some(body))
        .await
}

async fn delete(c: &Ctx, uri: &str) -> common::Answer {
    c.call("DELETE", uri, Some(&c.admin.clone()), None).await
}

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
        (with("cron", json!("@daily")), "cron"),
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
        ("PUT", format!("/v1/schedules/{id}")),
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

/// Past the tenant's queue limit, an enqueue (single or batch), pause or
/// configuration of a new queue is 409 `invalid_state` and writes nothing,
/// while resuming one is fine; past the schedule limit, creating one is
/// 409. `/metrics` shows per-queue gauges for at most `metrics_max_queues`
/// queues, the busiest, and counts the rest.
async fn tenant_limits_are_409_and_metrics_are_bounded(db: &TestDb) {
    let engine = db.engine.clone().with_limits(tether_core::Limits {
        max_queues_per_tenant: 2,
        max_schedules_per_tenant: 1,
        ..tether_core::Limits::default()
    });
    let config = ServerConfig {
        metrics_max_queues: 2,
        ..ServerConfig::default()
    };
    let c = common::setup_engine(engine, config).await;
    c.enqueue("q1", "k").await;
    c.enqueue("q1", "k").await;
    c.enqueue("q2", "k").await;
    let msg = |a: &common::Answer| a.body["error"]["message"].as_str().unwrap().to_owned();
    let a = c
        .post("/v1/jobs", json!({"queue": "q3", "kind": "k"}))
        .await;
    a.expect_error(409, "invalid_state");
    assert!(msg(&a).contains("2 queues"), "{}", msg(&a));
    c.post(
        "/v1/jobs/batch",
        json!({"jobs": [{"queue": "q1", "kind": "k"}, {"queue": "q3", "kind": "k"}]}),
    )
    .await
    .expect_error(409, "invalid_state");
    c.post_empty("/v1/queues/q3/pause")
        .await
        .expect_error(409, "invalid_state");
    c.call(
        "PATCH",
        "/v1/queues/q3",
        Some(&c.admin.clone()),
        Some(json!({"max_attempts": 2})),
    )
    .await
    .expect_error(409, "invalid_state");
    assert_eq!(
        c.post_empty("/v1/queues/q3/resume").await.expect(200)["queue"]["paused"],
        false
    );
    let names: Vec<Value> = c.get("/v1/queues").await.expect(200)["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].clone())
        .collect();
    assert_eq!(names, [json!("q1"), json!("q2")]);
    assert_eq!(
        c.get("/v1/jobs?queue=q1").await.expect(200)["jobs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let s = json!({"name": "s1", "cron": "0 * * * *", "queue": "q1", "kind": "k"});
    c.post("/v1/schedules", s).await.expect(201);
    let s = json!({"name": "s2", "cron": "0 * * * *", "queue": "q1", "kind": "k"});
    let a = c.post("/v1/schedules", s).await;
    a.expect_error(409, "invalid_state");
    assert!(msg(&a).contains("schedules"), "{}", msg(&a));

    // Four queues in two tenants; the gauges show the two busiest.
    let other = c.other.clone();
    for queue in ["o1", "o1", "o1", "o2"] {
        c.call(
            "POST",
            "/v1/jobs",
            Some(&other),
            Some(json!({"queue": queue, "kind": "k"})),
        )
        .await
        .expect(201);
    }
    let (status, text) = c.get_text("/metrics").await;
    assert_eq!(status.as_u16(), 200, "{text}");
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tether_queue_paused{"))
        .collect();
    assert_eq!(
        series,
        [
            "tether_queue_paused{tenant=\"default\",queue=\"q1\"} 0",
            "tether_queue_paused{tenant=\"other\",queue=\"o1\"} 0",
        ],
        "{text}"
    );
    assert!(text.contains("\ntether_queue_series_omitted 2\n"), "{text}");
}
