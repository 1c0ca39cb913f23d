//! Refused requests: bad input, size and media-type limits, routing errors and conflicts.

use super::*;

tether_conformance::both_backends!(
    bad_input_is_refused,
    size_and_media_type_limits,
    routing_errors,
    conflicts,
    body_and_query_times_follow_one_rule,
);

/// Every time the API takes, in a body or a query string, is read by one
/// rule: a signed or expanded year (`+2026-…`) is 400, and so is a fraction
/// of a second finer than microseconds (it would be cut off silently);
/// microseconds are taken. A refused request changes nothing.
async fn body_and_query_times_follow_one_rule(db: &TestDb) {
    let c = setup(db).await;
    let failed = c.enqueue("times", "k").await;
    c.post_empty(&format!("/v1/jobs/{failed}/cancel"))
        .await
        .expect(200);
    let enc = |t: &str| t.replace('+', "%2B").replace(':', "%3A");
    // (field, the uri and body that carry a time `t` in it).
    type Use<'a> = (
        &'a str,
        Box<dyn Fn(&str) -> (String, Option<Value>) + Send + Sync + 'a>,
    );
    let uses: Vec<Use<'_>> = vec![
        (
            "run_at",
            Box::new(|t| {
                (
                    "/v1/jobs".into(),
                    Some(json!({"queue": "times", "kind": "k", "run_at": t})),
                )
            }),
        ),
        (
            "expires_at",
            Box::new(|t| {
                (
                    "/v1/jobs".into(),
                    Some(json!({"queue": "times", "kind": "k", "expires_at": t})),
                )
            }),
        ),
        (
            "jobs[0].run_at",
            Box::new(|t| {
                (
                    "/v1/jobs/batch".into(),
                    Some(json!({"jobs": [{"queue": "times", "kind": "k", "run_at": t}]})),
                )
            }),
        ),
        (
            "expires_at",
            Box::new(|t| {
                (
                    format!("/v1/jobs/{failed}/replay"),
                    Some(json!({"expires_at": t})),
                )
            }),
        ),
        (
            "expires_at",
            Box::new(|t| {
                (
                    "/v1/jobs/replay".into(),
                    Some(json!({"ids": [failed], "expires_at": t})),
                )
            }),
        ),
        (
            "expires_at",
            Box::new(|t| {
                (
                    "/v1/queues/times/replay".into(),
                    Some(json!({"state": "cancelled", "expires_at": t})),
                )
            }),
        ),
        (
            "created_after",
            Box::new(move |t| (format!("/v1/jobs?created_after={}", enc(t)), None)),
        ),
        (
            "from",
            Box::new(move |t| {
                (
                    format!("/v1/cron/preview?cron=0+*+*+*+*&from={}", enc(t)),
                    None,
                )
            }),
        ),
    ];
    for bad in [
        "+2026-01-01T00:00:00Z",
        "+002026-01-01T00:00:00Z",
        "2026-01-01T00:00:59.9999999Z",
        "2026-01-01T00:00:59.123456789+01:00",
    ] {
        for (field, use_) in &uses {
            let (uri, body) = use_(bad);
            let method = if body.is_some() { "POST" } else { "GET" };
            let a = c.call(method, &uri, Some(&c.admin.clone()), body).await;
            assert_eq!(a.status.as_u16(), 400, "{bad} at {uri}: {}", a.body);
            let message = a.body["error"]["message"].as_str().unwrap();
            assert!(message.contains(field), "{bad} at {uri}: {message}");
        }
    }
    // Nothing was written: the one cancelled job, as it was.
    let jobs = c.get("/v1/jobs?queue=times").await;
    let jobs = jobs.expect(200)["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["state"], "cancelled");
    // Microseconds, and any offset, are taken everywhere.
    for (field, use_) in &uses {
        let (uri, body) = use_("2999-01-01T01:00:59.123456+01:00");
        let method = if body.is_some() { "POST" } else { "GET" };
        let a = c.call(method, &uri, Some(&c.admin.clone()), body).await;
        assert!(a.status.is_success(), "{uri}: {}", a.body);
        if uri == "/v1/jobs" {
            let job = &a.body["job"];
            assert_eq!(job[*field], "2999-01-01T00:00:59.123Z", "{job}");
        }
    }
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
    // been lost); another report with that token is a conflict, not a lost
    // lease (nobody else took the job).
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
    .expect_error(409, "invalid_state");
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token, "result": "another"}),
    )
    .await
    .expect_error(409, "invalid_state");
    c.post("/v1/tenants", json!({"name": "other"}))
        .await
        .expect_error(409, "already_exists");
}
