//! The OpenAPI document: the committed copy is current, the server serves
//! it without a key, it documents exactly the routes of `docs/API.md`, and
//! real requests and answers fit its schemas.

use crate::common;

use std::collections::BTreeSet;

use common::{Answer, Ctx};
use serde_json::{json, Map, Value};
use tether_conformance::TestDb;

/// The committed copy of the document.
const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");

/// The API reference, which names every route as `` `METHOD /path` ``.
const API_MD: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/API.md"));

/// Every route `docs/API.md` names before its "Planned" section (which
/// includes the batch heartbeat, an addition, see `docs/http.md`). Not
/// here, on purpose: the dashboard's page (`GET /`), a web page, not an API
/// operation (`tests/http/dashboard.rs` tests it and its static files).
fn api_md_routes() -> BTreeSet<(String, String)> {
    let reference = API_MD.split("\n## Planned").next().unwrap();
    let mut routes = BTreeSet::new();
    for method in ["GET", "PUT", "POST", "DELETE", "PATCH"] {
        for (at, _) in reference.match_indices(&format!("`{method} /")) {
            let rest = &reference[at + method.len() + 2..];
            let path = rest.split(['`', ' ', '?']).next().unwrap();
            if path != "/" {
                routes.insert((method.to_lowercase(), unnamed(path)));
            }
        }
    }
    routes
}

/// Every (method, path) the document has an operation for.
fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            if METHODS.contains(&method.as_str()) {
                documented.insert((method.clone(), unnamed(path)));
            }
        }
    }
    documented
}

/// A path with its parameters' names left out (`/v1/schedules/{}`): a name
/// is not on the wire, and the router needs one name per position where
/// the text may say what a method takes there (`PUT /v1/schedules/{name}`
/// beside `GET /v1/schedules/{id}`).
fn unnamed(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut inside = false;
    for c in path.chars() {
        match c {
            '{' => {
                inside = true;
                out.push_str("{}");
            }
            '}' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn generated() -> Value {
    serde_json::to_value(tether_server::openapi()).unwrap()
}

#[test]
fn committed_document_is_current() {
    let fresh = tether_server::openapi_json();
    if std::env::var_os("TETHER_UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(COMMITTED).unwrap_or_default();
    assert!(
        committed == fresh,
        "docs/openapi.json differs from the document the code generates; regenerate it with \
         `TETHER_UPDATE_OPENAPI=1 cargo test -p tether-server --test http -- openapi` and commit it"
    );
}

#[test]
fn the_document_has_exactly_the_routes_of_the_api() {
    let documented = documented_routes(&generated());
    let expected = api_md_routes();
    let missing: Vec<_> = expected.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "undocumented routes: {missing:?}; documented routes the API does not have: {extra:?}"
    );
}

#[test]
fn every_key_route_is_secured_and_every_operation_answers_errors_in_shape() {
    let doc = generated();
    let scheme = &doc["components"]["securitySchemes"]["api_key"];
    assert_eq!(
        (&scheme["type"], &scheme["scheme"]),
        (&json!("http"), &json!("bearer"))
    );
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let keyed = path.starts_with("/v1/") || path == "/metrics";
            let security = op.get("security");
            if keyed {
                assert_eq!(security, Some(&json!([{"api_key": []}])), "{method} {path}");
                assert!(op["responses"].get("401").is_some(), "{method} {path}");
            } else {
                assert_eq!(security, None, "{method} {path}");
            }
            assert!(op["operationId"].is_string(), "{method} {path}");
            for (status, response) in op["responses"].as_object().unwrap() {
                if status.starts_with('4') || status.starts_with('5') {
                    let response = resolve(&doc, response);
                    assert_eq!(
                        response["content"]["application/json"]["schema"],
                        json!({"$ref": "#/components/schemas/Error"}),
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
}

#[test]
fn documented_ranges_are_the_validators() {
    use tether_core::validate::{LEASE_TTL_RANGE, MAX_BATCH, MAX_PAGE, PRIORITY_RANGE};
    let doc = generated();
    let schema = |name: &str| doc["components"]["schemas"][name]["properties"].clone();
    let enqueue = schema("EnqueueRequest");
    assert_eq!(enqueue["priority"]["minimum"], *PRIORITY_RANGE.start());
    assert_eq!(enqueue["priority"]["maximum"], *PRIORITY_RANGE.end());
    let claim = schema("ClaimBody");
    assert_eq!(claim["limit"]["maximum"], MAX_BATCH);
    assert_eq!(claim["lease_ttl_ms"]["minimum"], *LEASE_TTL_RANGE.start());
    assert_eq!(claim["lease_ttl_ms"]["maximum"], *LEASE_TTL_RANGE.end());
    assert_eq!(
        claim["wait_ms"]["maximum"],
        tether_server::ServerConfig::default().max_wait_ms
    );
    assert_eq!(schema("BatchEnqueueRequest")["jobs"]["maxItems"], MAX_BATCH);
    let list = &doc["paths"]["/v1/jobs"]["get"]["parameters"];
    let limit = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "limit")
        .unwrap();
    assert_eq!(limit["schema"]["maximum"], MAX_PAGE);
    let max_cron = tether_core::cron::MAX_INPUT_LEN;
    for body in ["CreateScheduleBody", "PatchScheduleBody"] {
        assert_eq!(schema(body)["cron"]["maxLength"], max_cron, "{body}");
        assert_eq!(schema(body)["timezone"]["maxLength"], max_cron, "{body}");
    }
    let preview = &doc["paths"]["/v1/cron/preview"]["get"]["parameters"];
    let count = preview
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "count")
        .unwrap();
    assert_eq!(count["schema"]["maximum"], 100);
    assert!(tether_core::Engine::cron_preview("* * * * *", "UTC", None, 100).is_ok());
    assert!(tether_core::Engine::cron_preview("* * * * *", "UTC", None, 101).is_err());
    for state in ["queued", "running", "succeeded", "failed", "cancelled"] {
        let states = doc["components"]["schemas"]["JobState"]["enum"]
            .as_array()
            .unwrap();
        assert!(states.contains(&json!(state)), "{state}");
    }
}

tether_conformance::both_backends!(served_without_a_key, requests_and_answers_fit_the_document);

async fn served_without_a_key(db: &TestDb) {
    let c = common::setup(db).await;
    let a = c.call("GET", "/openapi.json", None, None).await;
    assert_eq!(a.expect(200), &generated());
    // Every documented route is routed: with no key, a `/v1` route is 401,
    // an unknown one 404 and a wrong method 405.
    for (method, path) in documented_routes(&generated()) {
        let uri = path
            .replace("{queue}", "q")
            .replace("{id}", &uuid::Uuid::nil().to_string())
            .replace("{tenant_id}", &uuid::Uuid::nil().to_string())
            .replace("{key_id}", &uuid::Uuid::nil().to_string());
        let a = c.call(&method.to_uppercase(), &uri, None, None).await;
        let status = a.status.as_u16();
        assert!(
            status != 404 && status != 405,
            "{method} {path} is documented but not routed: {status} {}",
            a.body
        );
    }
}

/// Sends a request, checks its body against the operation's request schema
/// and the answer against the documented answer of its status.
async fn check(
    c: &Ctx,
    doc: &Value,
    key: Option<&str>,
    (method, template): (&str, &str),
    uri: &str,
    body: Option<Value>,
) -> Answer {
    let op = &doc["paths"][template][method];
    assert!(op.is_object(), "{method} {template} is not documented");
    if let Some(body) = &body {
        let schema = &op["requestBody"]["content"]["application/json"]["schema"];
        if let Err(e) = validate(doc, body, schema, "request") {
            panic!("{method} {uri}: the request does not fit the document: {e}\n{body}");
        }
    }
    let key = key.map(str::to_owned);
    let answer = c
        .call(&method.to_uppercase(), uri, key.as_deref(), body)
        .await;
    let status = answer.status.as_u16().to_string();
    let response = op["responses"]
        .get(&status)
        .unwrap_or_else(|| panic!("{method} {template} answered an undocumented {status}"));
    let response = resolve(doc, response);
    match response.get("content") {
        None => assert_eq!(answer.body, Value::Null, "{method} {uri}"),
        Some(content) => {
            let schema = &content["application/json"]["schema"];
            if let Err(e) = validate(doc, &answer.body, schema, "answer") {
                panic!(
                    "{method} {uri} {status}: the answer does not fit the document: {e}\n{}",
                    answer.body
                );
            }
        }
    }
    answer
}

async fn requests_and_answers_fit_the_document(db: &TestDb) {
    let c = common::setup(db).await;
    let doc = generated();
    let admin = Some(c.admin.as_str());
    let nil = uuid::Uuid::nil();

    for route in [("get", "/healthz"), ("get", "/readyz")] {
        check(&c, &doc, None, route, route.1, None).await;
    }
    // Producing.
    let full = json!({
        "queue": "q", "kind": "k", "payload": {"a": [1, 2]}, "priority": 7,
        "delay_ms": 0, "max_attempts": 3, "timeout_ms": 60000,
        "idempotency_key": "inv:1", "unique_key": "u:1", "tags": ["t1", "t2"],
        "expires_at": "2999-01-01T00:00:00Z", "backoff": {"base_ms": 10, "cap_ms": 100}
    });
    let post_jobs = ("post", "/v1/jobs");
    check(&c, &doc, admin, post_jobs, "/v1/jobs", Some(full.clone()))
        .await
        .expect(201);
    check(&c, &doc, admin, post_jobs, "/v1/jobs", Some(full))
        .await
        .expect(200);
    let batch = json!({"jobs": [{"queue": "q", "kind": "k"}, {"queue": "q", "kind": "k", "run_at": "2000-01-01T00:00:00.5+02:00"}]});
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/batch"),
        "/v1/jobs/batch",
        Some(batch),
    )
    .await
    .expect(200);
    // Working.
    let claim = ("post", "/v1/queues/{queue}/claim");
    let body = json!({"worker_id": "w1", "limit": 3, "lease_ttl_ms": 60000, "wait_ms": 0});
    let claimed = check(&c, &doc, admin, claim, "/v1/queues/q/claim", Some(body)).await;
    let jobs = claimed.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 3);
    let id = |i: usize| jobs[i]["id"].as_str().unwrap().to_owned();
    let token = |i: usize| jobs[i]["lease_token"].clone();
    let hb = json!({"lease_token": token(0), "lease_ttl_ms": 30000, "progress": {"done": 1}});
    let uri = format!("/v1/jobs/{}/heartbeat", id(0));
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/heartbeat"),
        &uri,
        Some(hb),
    )
    .await
    .expect(200);
    let lost = json!({"lease_token": nil});
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/heartbeat"),
        &uri,
        Some(lost),
    )
    .await
    .expect_error(409, "lease_lost");
    let hbs = json!({"items": [
        {"id": id(0), "lease_token": token(0)},
        {"id": nil, "lease_token": nil, "lease_ttl_ms": 1000, "progress": null}
    ]});
    let hbs_route = ("post", "/v1/jobs/heartbeat");
    check(&c, &doc, admin, hbs_route, hbs_route.1, Some(hbs))
        .await
        .expect(200);
    let done = json!({"lease_token": token(0), "result": {"ok": 1}});
    let uri = format!("/v1/jobs/{}/complete", id(0));
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/complete"),
        &uri,
        Some(done),
    )
    .await
    .expect(200);
    let many = json!({"items": [
        {"id": id(1), "lease_token": token(1)},
        {"id": id(0), "lease_token": token(0), "result": 1}
    ]});
    let many_route = ("post", "/v1/jobs/complete");
    check(&c, &doc, admin, many_route, many_route.1, Some(many))
        .await
        .expect(200);
    let failed = json!({"lease_token": token(2), "error": "boom", "fatal": true});
    let uri = format!("/v1/jobs/{}/fail", id(2));
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/fail"),
        &uri,
        Some(failed),
    )
    .await
    .expect(200);
    c.enqueue("q", "k").await;
    let c2 = check(
        &c,
        &doc,
        admin,
        claim,
        "/v1/queues/q/claim",
        Some(json!({"worker_id": "w2"})),
    )
    .await;
    let c2 = c2.expect(200)["jobs"][0].clone();
    let snooze = json!({"lease_token": c2["lease_token"], "delay_ms": 1000});
    let uri = format!("/v1/jobs/{}/snooze", c2["id"].as_str().unwrap());
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/snooze"),
        &uri,
        Some(snooze),
    )
    .await
    .expect(200);
    // Managing.
    let list = ("get", "/v1/jobs");
    let page = check(&c, &doc, admin, list, "/v1/jobs?queue=q&limit=2", None).await;
    assert!(page.expect(200)["next_cursor"].is_string());
    check(
        &c,
        &doc,
        admin,
        list,
        "/v1/jobs?state=failed&kind=k&tag=t1",
        None,
    )
    .await
    .expect(200);
    check(&c, &doc, admin, list, "/v1/jobs?limit=0", None)
        .await
        .expect_error(400, "invalid_argument");
    let uri = format!("/v1/jobs/{}", id(2));
    check(&c, &doc, admin, ("get", "/v1/jobs/{id}"), &uri, None)
        .await
        .expect(200);
    check(
        &c,
        &doc,
        admin,
        ("get", "/v1/jobs/{id}"),
        "/v1/jobs/nope",
        None,
    )
    .await
    .expect_error(404, "not_found");
    let uri = format!("/v1/jobs/{}/events", id(2));
    check(&c, &doc, admin, ("get", "/v1/jobs/{id}/events"), &uri, None)
        .await
        .expect(200);
    let cancel = ("post", "/v1/jobs/{id}/cancel");
    let uri = format!("/v1/jobs/{}/cancel", id(2));
    check(&c, &doc, admin, cancel, &uri, None)
        .await
        .expect_error(409, "invalid_state");
    let uri = format!("/v1/jobs/{}/cancel", c2["id"].as_str().unwrap());
    check(&c, &doc, admin, cancel, &uri, None).await.expect(200);
    let uri = format!("/v1/jobs/{}/replay", id(2));
    check(
        &c,
        &doc,
        admin,
        ("post", "/v1/jobs/{id}/replay"),
        &uri,
        None,
    )
    .await
    .expect(200);
    let bulk = ("post", "/v1/queues/{queue}/replay");
    let body = json!({"state": "cancelled", "kind": "k", "limit": 10});
    check(&c, &doc, admin, bulk, "/v1/queues/q/replay", Some(body))
        .await
        .expect(200);
    check(&c, &doc, admin, bulk, "/v1/queues/q/replay", None)
        .await
        .expect(200);
    // Queues.
    check(&c, &doc, admin, ("get", "/v1/queues"), "/v1/queues", None)
        .await
        .expect(200);
    let one = ("get", "/v1/queues/{queue}");
    check(&c, &doc, admin, one, "/v1/queues/unused", None)
        .await
        .expect(200);
    check(&c, &doc, admin, one, "/v1/queues/bad%20name", None)
        .await
        .expect_error(400, "invalid_argument");
    for action in ["pause", "resume"] {
        let template = format!("/v1/queues/{{queue}}/{action}");
        let uri = format!("/v1/queues/q/{action}");
        check(&c, &doc, admin, ("post", &template), &uri, None)
            .await
            .expect(200);
    }
    let patch = json!({"max_attempts": 9, "backoff": {"base_ms": 5, "cap_ms": 50}, "default_lease_ttl_ms": 2000});
    check(
        &c,
        &doc,
        admin,
        ("patch", "/v1/queues/{queue}"),
        "/v1/queues/q",
        Some(patch),
    )
    .await
    .expect(200);
    // Schedules.
    let create = ("post", "/v1/schedules");
    let full = json!({
        "name": "nightly", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "queue": "q",
        "kind": "k", "payload": {"a": 1}, "enabled": true, "overlap": "skip"
    });
    let made = check(&c, &doc, admin, create, "/v1/schedules", Some(full.clone())).await;
    let sid = made.expect(201)["schedule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    check(&c, &doc, admin, create, "/v1/schedules", Some(full))
        .await
        .expect_error(409, "already_exists");
    let minimal =
        json!({"name": "off", "cron": "0 0 * * *", "queue": "q", "kind": "k", "enabled": false});
    let off = check(&c, &doc, admin, create, "/v1/schedules", Some(minimal)).await;
    assert!(off.expect(201)["schedule"]["next_run_at"].is_null());
    let bad = json!({"name": "bad", "cron": "* * * *", "queue": "q", "kind": "k"});
    check(&c, &doc, admin, create, "/v1/schedules", Some(bad))
        .await
        .expect_error(400, "invalid_argument");
    check(
        &c,
        &doc,
        admin,
        ("get", "/v1/schedules"),
        "/v1/schedules",
        None,
    )
    .await
    .expect(200);
    let one = ("get", "/v1/schedules/{id}");
    let uri = format!("/v1/schedules/{sid}");
    check(&c, &doc, admin, one, &uri, None).await.expect(200);
    check(&c, &doc, admin, one, "/v1/schedules/nope", None)
        .await
        .expect_error(404, "not_found");
    let patch = ("patch", "/v1/schedules/{id}");
    let body = json!({"name": "nightly-2", "cron": "30 2 * * *", "timezone": "UTC", "queue": "q2",
                      "kind": "k2", "payload": null, "enabled": true, "overlap": "allow"});
    check(&c, &doc, admin, patch, &uri, Some(body))
        .await
        .expect(200);
    check(&c, &doc, admin, patch, &uri, Some(json!({"name": "off"})))
        .await
        .expect_error(409, "already_exists");
    check(
        &c,
        &doc,
        admin,
        patch,
        &uri,
        Some(json!({"timezone": "Nowhere"})),
    )
    .await
    .expect_error(400, "invalid_argument");
    let trigger = ("post", "/v1/schedules/{id}/trigger");
    check(&c, &doc, admin, trigger, &format!("{uri}/trigger"), None)
        .await
        .expect(201);
    let runs = ("get", "/v1/schedules/{id}/runs");
    let answer = check(&c, &doc, admin, runs, &format!("{uri}/runs"), None).await;
    assert_eq!(answer.expect(200)["runs"].as_array().unwrap().len(), 1);
    let preview = ("get", "/v1/cron/preview");
    let answer = check(
        &c,
        &doc,
        admin,
        preview,
        "/v1/cron/preview?cron=30+2+*+*+*&timezone=America/New_York&from=2026-03-07T12:00:00Z&count=2",
        None,
    )
    .await;
    assert_eq!(answer.expect(200)["times"].as_array().unwrap().len(), 2);
    check(
        &c,
        &doc,
        admin,
        preview,
        "/v1/cron/preview?cron=*+*+*+*+*&count=0",
        None,
    )
    .await
    .expect_error(400, "invalid_argument");
    let delete = ("delete", "/v1/schedules/{id}");
    check(&c, &doc, admin, delete, &uri, None).await.expect(204);
    check(&c, &doc, admin, delete, &uri, None)
        .await
        .expect_error(404, "not_found");
    // Tenants and keys.
    let tenants = ("post", "/v1/tenants");
    let made = check(
        &c,
        &doc,
        admin,
        tenants,
        "/v1/tenants",
        Some(json!({"name": "acme"})),
    )
    .await;
    let acme = made.expect(201)["tenant"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    check(
        &c,
        &doc,
        admin,
        tenants,
        "/v1/tenants",
        Some(json!({"name": "acme"})),
    )
    .await
    .expect_error(409, "already_exists");
    let other = Some(c.other.as_str());
    check(&c, &doc, other, ("get", "/v1/tenants"), "/v1/tenants", None)
        .await
        .expect_error(403, "permission_denied");
    check(&c, &doc, admin, ("get", "/v1/whoami"), "/v1/whoami", None)
        .await
        .expect(200);
    check(&c, &doc, admin, ("get", "/v1/tenants"), "/v1/tenants", None)
        .await
        .expect(200);
    let keys = ("post", "/v1/tenants/{tenant_id}/keys");
    let uri = format!("/v1/tenants/{acme}/keys");
    let key = check(
        &c,
        &doc,
        admin,
        keys,
        &uri,
        Some(json!({"name": "ci", "admin": false})),
    )
    .await;
    let key_id = key.expect(201)["key_id"].as_str().unwrap().to_owned();
    check(&c, &doc, admin, keys, &uri, None).await.expect(201);
    let revoke = ("delete", "/v1/keys/{key_id}");
    check(&c, &doc, admin, revoke, &format!("/v1/keys/{key_id}"), None)
        .await
        .expect(204);
    let list_keys = ("get", "/v1/tenants/{tenant_id}/keys");
    let listed = check(&c, &doc, admin, list_keys, &uri, None).await;
    assert_eq!(listed.expect(200)["keys"].as_array().unwrap().len(), 3);
    let unknown = format!("/v1/tenants/{}/keys", uuid::Uuid::new_v4());
    check(&c, &doc, admin, list_keys, &unknown, None)
        .await
        .expect_error(404, "not_found");
    check(&c, &doc, other, list_keys, &uri, None)
        .await
        .expect_error(403, "permission_denied");
    // Errors of the request itself.
    check(&c, &doc, None, ("get", "/v1/queues"), "/v1/queues", None)
        .await
        .expect_error(401, "unauthenticated");
    let bad = c
        .raw("POST", "/v1/jobs", Some("text/plain"), b"{}".to_vec())
        .await;
    bad.expect_error(415, "unsupported_media_type");
    let response = resolve(&doc, &doc["paths"]["/v1/jobs"]["post"]["responses"]["415"]);
    validate(
        &doc,
        &bad.body,
        &response["content"]["application/json"]["schema"],
        "answer",
    )
    .unwrap();
}

/// Follows a `$ref` to a response or schema of the document.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let mut at = doc;
            for part in r.trim_start_matches("#/").split('/') {
                at = &at[part];
            }
            assert!(!at.is_null(), "dangling $ref {r}");
            resolve(doc, at)
        }
        None => v,
    }
}

/// The property names an object schema declares (through `allOf` and refs).
fn declared(doc: &Value, schema: &Value) -> BTreeSet<String> {
    let schema = resolve(doc, schema);
    let mut names: BTreeSet<String> = schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        names.extend(declared(doc, part));
    }
    names
}

/// Checks `value` against the JSON Schema subset the document uses. Objects
/// must not carry properties their schema does not declare: an undocumented
/// field is a mismatch too.
fn validate(doc: &Value, value: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(parts) = schema["allOf"].as_array() {
        for part in parts {
            validate_open(doc, value, part, at)?;
        }
        return closed(doc, value, schema, at);
    }
    validate_open(doc, value, schema, at)?;
    closed(doc, value, schema, at)
}

fn closed(doc: &Value, value: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let (Some(object), false) = (value.as_object(), schema["oneOf"].is_array()) else {
        return Ok(());
    };
    let names = declared(doc, schema);
    if names.is_empty() && schema["type"] != "object" {
        return Ok(());
    }
    match object.keys().find(|k| !names.contains(*k)) {
        Some(k) => Err(format!("{at}.{k} is not in the schema")),
        None => Ok(()),
    }
}

fn validate_open(doc: &Value, value: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(choices) = schema["oneOf"].as_array() {
        let fits = choices
            .iter()
            .filter(|s| validate(doc, value, s, at).is_ok())
            .count();
        return match fits {
            1 => Ok(()),
            n => Err(format!("{at} fits {n} of the oneOf choices: {value}")),
        };
    }
    if let Some(parts) = schema["allOf"].as_array() {
        for part in parts {
            validate_open(doc, value, part, at)?;
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let type_fits = |t: &&str| match *t {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown type {other}"),
    };
    if !types.is_empty() && !types.iter().any(type_fits) {
        return Err(format!("{at} is not of type {types:?}: {value}"));
    }
    if let Some(values) = schema["enum"].as_array() {
        if !values.contains(value) {
            return Err(format!("{at} is not one of {values:?}: {value}"));
        }
    }
    if let Some(n) = value.as_f64() {
        let below = schema["minimum"].as_f64().is_some_and(|min| n < min);
        let above = schema["maximum"].as_f64().is_some_and(|max| n > max);
        if below || above {
            return Err(format!("{at} is out of range: {n}"));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        let short = schema["minLength"].as_u64().is_some_and(|min| len < min);
        let long = schema["maxLength"].as_u64().is_some_and(|max| len > max);
        if short || long {
            return Err(format!("{at} has a length out of range: {s:?}"));
        }
        match schema["format"].as_str() {
            Some("date-time") if chrono::DateTime::parse_from_rfc3339(s).is_err() => {
                return Err(format!("{at} is not a date-time: {s:?}"));
            }
            Some("uuid") if uuid::Uuid::try_parse(s).is_err() => {
                return Err(format!("{at} is not a UUID: {s:?}"));
            }
            _ => {}
        }
    }
    if let Some(items) = value.as_array() {
        if let Some(max) = schema["maxItems"].as_u64() {
            if items.len() as u64 > max {
                return Err(format!("{at} has more than {max} items"));
            }
        }
        if let Some(min) = schema["minItems"].as_u64() {
            if (items.len() as u64) < min {
                return Err(format!("{at} has fewer than {min} items"));
            }
        }
        for (i, item) in items.iter().enumerate() {
            validate(doc, item, &schema["items"], &format!("{at}[{i}]"))?;
        }
    }
    if let Some(object) = value.as_object() {
        check_properties(doc, object, schema, at)?;
    }
    Ok(())
}

fn check_properties(
    doc: &Value,
    object: &Map<String, Value>,
    schema: &Value,
    at: &str,
) -> Result<(), String> {
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap();
        if !object.contains_key(name) {
            return Err(format!("{at}.{name} is required but missing"));
        }
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, value) in object {
            if let Some(s) = properties.get(name) {
                validate(doc, value, s, &format!("{at}.{name}"))?;
            }
        }
    }
    Ok(())
}
