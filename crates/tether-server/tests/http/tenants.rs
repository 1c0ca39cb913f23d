//! Tenants and keys: the key routes, authentication, admin-only routes, tenant walls and per-tenant limits.

use super::*;

tether_conformance::both_backends!(
    tenant_and_key_routes,
    key_listing_shows_use_and_revocation,
    whoami_names_the_key,
    authentication_is_required,
    admin_routes_need_admin,
    tenant_walls_on_every_id_route,
    tenant_limits_are_409_and_metrics_are_bounded,
    admin_acts_for_a_tenant_by_name_or_id,
    tenant_names_that_read_as_ids_are_refused,
    a_name_that_is_another_tenants_id_is_ambiguous,
    two_tenant_headers_are_refused,
    suspended_tenants_are_refused_and_read_only,
);

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
    let c = common::setup_engine(db, engine, config).await;
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
    c.call(
        "PATCH",
        "/v1/queues/q1",
        Some(&c.admin.clone()),
        Some(json!({"max_running": 5})),
    )
    .await
    .expect(200);
    let (status, text) = c.get_text("/metrics").await;
    assert_eq!(status.as_u16(), 200, "{text}");
    // Only a queue with a limit has a max_running series.
    let limits: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tether_queue_max_running{"))
        .collect();
    assert_eq!(
        limits,
        ["tether_queue_max_running{tenant=\"default\",queue=\"q1\"} 5"],
        "{text}"
    );
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

/// `X-Tether-Tenant`: an admin key acts for any tenant (named or by id) on
/// the tenant-scoped routes; any other key gets 403 and changes nothing.
async fn admin_acts_for_a_tenant_by_name_or_id(db: &TestDb) {
    let c = setup(db).await;
    let theirs = c
        .call(
            "POST",
            "/v1/jobs",
            Some(&c.other),
            Some(json!({"queue": "mail", "kind": "send"})),
        )
        .await
        .expect(201)["job"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.enqueue("own", "k").await;
    for target in ["other", c.other_id.as_str()] {
        // Reads: their jobs, their queues, their identity.
        let jobs = c.call_for(target, "GET", "/v1/jobs", &c.admin, None).await;
        let ids: Vec<&str> = jobs.expect(200)["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [theirs.as_str()], "acting for {target}");
        let queues = c
            .call_for(target, "GET", "/v1/queues", &c.admin, None)
            .await;
        assert_eq!(queues.expect(200)["queues"][0]["name"], "mail");
        let me = c
            .call_for(target, "GET", "/v1/whoami", &c.admin, None)
            .await;
        assert_eq!(me.expect(200)["tenant"]["name"], "other");
        assert_eq!(me.body["tenant"]["id"], c.other_id.as_str());
        assert_eq!(me.body["admin"], true);
    }
    // Writes land in that tenant: the admin cancels their job and enqueues one.
    c.call_for(
        "other",
        "POST",
        &format!("/v1/jobs/{theirs}/cancel"),
        &c.admin,
        None,
    )
    .await
    .expect(200);
    c.call_for(
        "other",
        "POST",
        "/v1/jobs",
        &c.admin,
        Some(json!({"queue": "mail", "kind": "by-admin"})),
    )
    .await
    .expect(201);
    let seen = c
        .call("GET", "/v1/jobs?queue=mail", Some(&c.other), None)
        .await;
    let jobs = seen.expect(200)["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().any(|j| j["kind"] == "by-admin"));
    assert!(jobs.iter().any(|j| j["state"] == "cancelled"));
    // Without the header the admin key sees its own tenant, as before.
    let own = c.get("/v1/jobs").await;
    assert_eq!(own.expect(200)["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(own.body["jobs"][0]["queue"], "own");
    // A tenant key may not, not even naming its own tenant or default.
    for target in ["other", "default"] {
        c.call_for(target, "GET", "/v1/jobs", &c.other, None)
            .await
            .expect_error(403, "permission_denied");
    }
    c.call_for(
        "default",
        "POST",
        "/v1/jobs",
        &c.other,
        Some(json!({"queue": "sneaky", "kind": "k"})),
    )
    .await
    .expect_error(403, "permission_denied");
    let own = c.get("/v1/jobs?queue=sneaky").await;
    assert_eq!(own.expect(200)["jobs"], json!([]));
    // An unknown tenant is 404; an empty name is 400.
    c.call_for("nobody", "GET", "/v1/jobs", &c.admin, None)
        .await
        .expect_error(404, "not_found");
    c.call_for(
        &uuid::Uuid::nil().to_string(),
        "GET",
        "/v1/jobs",
        &c.admin,
        None,
    )
    .await
    .expect_error(404, "not_found");
    c.call_for(" ", "GET", "/v1/jobs", &c.admin, None)
        .await
        .expect_error(400, "invalid_argument");
}

/// A tenant may not be named like a tenant id, in any form a UUID parses
/// from: `X-Tether-Tenant` takes names and ids, so such a name could point
/// at another tenant. 400, and no tenant is made.
async fn tenant_names_that_read_as_ids_are_refused(db: &TestDb) {
    let c = setup(db).await;
    let id = uuid::Uuid::new_v4();
    let forms = [
        id.hyphenated().to_string(),
        id.simple().to_string(),
        id.urn().to_string(),
        id.hyphenated().to_string().to_uppercase(),
        c.other_id.clone(),
    ];
    for name in &forms {
        let a = c.post("/v1/tenants", json!({ "name": name })).await;
        a.expect_error(400, "invalid_argument");
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("UUID"), "{message}");
    }
    let names: Vec<Value> = c.get("/v1/tenants").await.expect(200)["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, [json!("default"), json!("other")]);
    // Names that merely hold hex digits and dashes are fine.
    c.post("/v1/tenants", json!({"name": "0123-4567"}))
        .await
        .expect(201);
}

/// A tenant named like another tenant's id before names were checked:
/// `X-Tether-Tenant` with that value names two tenants and is refused (400,
/// nothing written in either), while each stays reachable by its other
/// handle; a UUID-like name that is no tenant's id still finds its tenant.
async fn a_name_that_is_another_tenants_id_is_ambiguous(db: &TestDb) {
    let c = setup(db).await;
    // The store, unlike the API, does not check names: an older tether's row.
    let twin = db
        .engine
        .store()
        .create_tenant(&c.other_id)
        .await
        .expect("a tenant named like other's id");
    let twin_key = db
        .engine
        .issue_api_key(twin.id, None, false)
        .await
        .unwrap()
        .1;
    let enqueue = json!({"queue": "mail", "kind": "k"});
    let a = c
        .call_for(
            &c.other_id,
            "POST",
            "/v1/jobs",
            &c.admin,
            Some(enqueue.clone()),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    let message = a.body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&twin.id.to_string()), "{message}");
    for key in [&c.other, &twin_key] {
        let jobs = c.call("GET", "/v1/jobs", Some(key), None).await;
        assert_eq!(jobs.expect(200)["jobs"], json!([]), "nothing written");
    }
    // Each by its other handle: `other` by name, the twin by its id.
    for (target, name) in [("other", "other"), (&*twin.id.to_string(), &*c.other_id)] {
        let me = c
            .call_for(target, "GET", "/v1/whoami", &c.admin, None)
            .await;
        assert_eq!(
            me.expect(200)["tenant"]["name"],
            name,
            "acting for {target}"
        );
    }
    // A UUID-like name that is no tenant's id finds the tenant so named.
    let lone_name = uuid::Uuid::new_v4().to_string();
    let lone = db.engine.store().create_tenant(&lone_name).await.unwrap();
    let me = c
        .call_for(&lone_name, "GET", "/v1/whoami", &c.admin, None)
        .await;
    assert_eq!(me.expect(200)["tenant"]["id"], lone.id.to_string());
}

/// Two `X-Tether-Tenant` headers (or one listing two tenants, as a proxy
/// joining repeated headers would send) are 400 and change nothing: which
/// one counts would depend on who reads the request.
async fn two_tenant_headers_are_refused(db: &TestDb) {
    use axum::body::Body;
    use axum::http::Request;
    let c = setup(db).await;
    let enqueue = |tenants: &[&str]| {
        let mut req = Request::builder()
            .method("POST")
            .uri("/v1/jobs")
            .header("authorization", format!("Bearer {}", c.admin))
            .header("content-type", "application/json");
        for t in tenants {
            req = req.header("x-tether-tenant", *t);
        }
        req.body(Body::from(r#"{"queue": "mail", "kind": "k"}"#))
            .unwrap()
    };
    for tenants in [
        &["other", "default"][..],
        &["default", "other"],
        &["other", "other"],
        &["other, default"],
        &["other,other"],
    ] {
        let a = c.send(enqueue(tenants)).await;
        a.expect_error(400, "invalid_argument");
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("x-tether-tenant"),
            "{tenants:?}: {message}"
        );
    }
    for key in [&c.admin, &c.other] {
        let jobs = c.call("GET", "/v1/jobs", Some(key), None).await;
        assert_eq!(jobs.expect(200)["jobs"], json!([]), "nothing written");
    }
    // One header still works.
    c.send(enqueue(&["other"])).await.expect(201);
    let jobs = c.call("GET", "/v1/jobs", Some(&c.other), None).await;
    assert_eq!(jobs.expect(200)["jobs"].as_array().unwrap().len(), 1);
}

/// `POST /v1/tenants/{id}/suspend`: the tenant's keys are 403 with a
/// message that says so, an admin acting for it may read but not write (no
/// claim, no enqueue), the listing shows `suspended_at`; `/resume` undoes
/// it. The default tenant cannot be suspended (400), an unknown one is
/// 404, and a tenant key may do neither (403).
async fn suspended_tenants_are_refused_and_read_only(db: &TestDb) {
    let c = setup(db).await;
    let made = c.post("/v1/tenants", json!({"name": "acme"})).await;
    let made = made.expect(201).clone();
    assert_eq!(made["tenant"]["suspended_at"], Value::Null);
    let acme = made["tenant"]["id"].as_str().unwrap().to_owned();
    let key = made["api_key"].as_str().unwrap().to_owned();
    let job = json!({"queue": "mail", "kind": "k"});
    let a = c
        .call("POST", "/v1/jobs", Some(&key), Some(job.clone()))
        .await;
    let id = a.expect(201)["job"]["id"].as_str().unwrap().to_owned();

    let s = c.post_empty(&format!("/v1/tenants/{acme}/suspend")).await;
    let at = at(&s.expect(200)["tenant"]["suspended_at"]);
    assert_eq!(s.body["tenant"]["name"], "acme");
    let again = c.post_empty(&format!("/v1/tenants/{acme}/suspend")).await;
    assert_eq!(
        again.expect(200)["tenant"]["suspended_at"],
        s.body["tenant"]["suspended_at"],
        "the first instant stays ({at})"
    );
    for (method, uri, body) in [
        ("GET", "/v1/jobs", None),
        ("GET", "/v1/whoami", None),
        ("POST", "/v1/jobs", Some(job.clone())),
        (
            "POST",
            "/v1/queues/mail/claim",
            Some(json!({"worker_id": "w"})),
        ),
    ] {
        let a = c.call(method, uri, Some(&key), body).await;
        a.expect_error(403, "permission_denied");
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("\"acme\" is suspended"), "{message}");
    }
    // An admin acting for it reads, and writes nothing.
    let jobs = c.call_for(&acme, "GET", "/v1/jobs", &c.admin, None).await;
    assert_eq!(jobs.expect(200)["jobs"][0]["id"], id.as_str());
    for (uri, body) in [
        ("/v1/queues/mail/claim", json!({"worker_id": "w"})),
        ("/v1/jobs", job.clone()),
    ] {
        let a = c.call_for(&acme, "POST", uri, &c.admin, Some(body)).await;
        a.expect_error(403, "permission_denied");
        let message = a.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("resume"), "{message}");
    }
    c.call_for(
        &acme,
        "POST",
        &format!("/v1/jobs/{id}/cancel"),
        &c.admin,
        None,
    )
    .await
    .expect_error(403, "permission_denied");
    let jobs = c.call_for(&acme, "GET", "/v1/jobs", &c.admin, None).await;
    let jobs = jobs.expect(200)["jobs"].as_array().unwrap();
    assert_eq!((jobs.len(), &jobs[0]["state"]), (1, &json!("queued")));
    // The listing shows who is suspended.
    let list = c.get("/v1/tenants").await;
    for t in list.expect(200)["tenants"].as_array().unwrap() {
        assert_eq!(t["suspended_at"].is_null(), t["name"] != "acme", "{t}");
    }
    // Refused: the default tenant, unknown ones, a tenant key.
    let default_id = list.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "default")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    c.post_empty(&format!("/v1/tenants/{default_id}/suspend"))
        .await
        .expect_error(400, "invalid_argument");
    for unknown in [uuid::Uuid::new_v4().to_string(), "nope".to_owned()] {
        for action in ["suspend", "resume"] {
            c.post_empty(&format!("/v1/tenants/{unknown}/{action}"))
                .await
                .expect_error(404, "not_found");
        }
    }
    let other_id = c.other_id.clone();
    for action in ["suspend", "resume"] {
        c.call(
            "POST",
            &format!("/v1/tenants/{other_id}/{action}"),
            Some(&c.other.clone()),
            None,
        )
        .await
        .expect_error(403, "permission_denied");
    }
    // Resumed (an admin route works while acting for it): all is as before.
    let r = c
        .call_for(
            &acme,
            "POST",
            &format!("/v1/tenants/{acme}/resume"),
            &c.admin,
            None,
        )
        .await;
    assert_eq!(r.expect(200)["tenant"]["suspended_at"], Value::Null);
    let claimed = c
        .call(
            "POST",
            "/v1/queues/mail/claim",
            Some(&key),
            Some(json!({"worker_id": "w"})),
        )
        .await;
    assert_eq!(claimed.expect(200)["jobs"][0]["id"], id.as_str());
}
