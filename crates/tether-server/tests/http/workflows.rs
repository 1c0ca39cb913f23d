//! Dependencies and workflows over HTTP: a graph in one batch, a job's
//! dependencies, the workflow routes, their errors and the tenant walls.

use super::*;

tether_conformance::both_backends!(
    a_batch_graph_and_a_jobs_dependencies,
    dependency_errors_are_400s_naming_the_field,
    workflow_routes,
    workflow_errors_and_tenant_walls,
);

async fn complete(c: &Ctx, queue: &str, want: &str, result: Value) {
    let (id, token) = c.claim_one(queue).await;
    assert_eq!(id, want);
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token, "result": result}),
    )
    .await
    .expect(200);
}

async fn a_batch_graph_and_a_jobs_dependencies(db: &TestDb) {
    let c = setup(db).await;
    let a = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [
                {"queue": "q", "kind": "charge"},
                {"queue": "q", "kind": "receipt", "depends_on_entries": [0]},
                {"queue": "q", "kind": "audit", "depends_on_entries": [0],
                 "dependency_failure": "run"},
            ]}),
        )
        .await;
    let body = a.expect(200).clone();
    assert!(body.get("workflow_id").is_none(), "{body}");
    let results = body["results"].as_array().unwrap();
    let id = |i: usize| results[i]["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(results[1]["job"]["state"], "waiting");
    assert_eq!(results[1]["job"]["depends_on"], json!([id(0)]));
    assert_eq!(results[2]["job"]["dependency_failure"], "run");
    assert_eq!(results[0]["job"]["depends_on"], json!([]));
    assert_eq!(results[0]["job"]["dependency_failure"], "cancel");

    let dependents = c.get(&format!("/v1/jobs?depends_on={}", id(0))).await;
    let listed: Vec<&str> = dependents.expect(200)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![id(2), id(1)]);
    let q = c.get("/v1/queues/q").await;
    assert_eq!(q.expect(200)["queue"]["counts"]["waiting"], 2);

    complete(&c, "q", &id(0), json!({"charge": "ch_1"})).await;
    let deps = c.get(&format!("/v1/jobs/{}/dependencies", id(1))).await;
    let deps = deps.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(deps.len(), 1);
    assert_eq!(
        keys(&deps[0]),
        sorted(&["id", "kind", "state", "result", "last_error", "finished_at"])
    );
    assert_eq!(deps[0]["id"], id(0));
    assert_eq!(deps[0]["state"], "succeeded");
    assert_eq!(deps[0]["result"], json!({"charge": "ch_1"}));
    at(&deps[0]["finished_at"]);
    let events = c.get(&format!("/v1/jobs/{}/events", id(1))).await;
    let names: Vec<&str> = events.expect(200)["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["enqueued", "released"]);
    c.get(&format!("/v1/jobs/{}/dependencies", uuid::Uuid::now_v7()))
        .await
        .expect_error(404, "not_found");
}

async fn dependency_errors_are_400s_naming_the_field(db: &TestDb) {
    let c = setup(db).await;
    let unknown = uuid::Uuid::now_v7();
    let a = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "k", "depends_on": [unknown]}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(a.body.to_string().contains("depends_on"), "{}", a.body);
    let a = c
        .post(
            "/v1/jobs/batch",
            json!({"jobs": [{"queue": "q", "kind": "k", "depends_on_entries": [0]}]}),
        )
        .await;
    a.expect_error(400, "invalid_argument");
    assert!(
        a.body.to_string().contains("jobs[0].depends_on_entries"),
        "{}",
        a.body
    );
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "dependency_failure": "maybe"}),
    )
    .await
    .expect_error(400, "invalid_argument");
    // Another tenant's job is no dependency of ours.
    let theirs = c
        .call(
            "POST",
            "/v1/jobs",
            Some(&c.other.clone()),
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    let theirs = theirs.expect(201)["job"]["id"].clone();
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "k", "depends_on": [theirs]}),
    )
    .await
    .expect_error(400, "invalid_argument");
    let all = c.get("/v1/jobs").await;
    assert_eq!(all.expect(200)["jobs"], json!([]), "nothing was written");
}

async fn workflow_routes(db: &TestDb) {
    let c = setup(db).await;
    let body = json!({
        "workflow": {"name": "publish", "idempotency_key": "post-7"},
        "jobs": [
            {"queue": "q", "kind": "thumb"},
            {"queue": "q", "kind": "publish", "depends_on_entries": [0]},
        ],
    });
    let first = c
        .post("/v1/jobs/batch", body.clone())
        .await
        .expect(200)
        .clone();
    let w = first["workflow_id"].as_str().unwrap().to_owned();
    let job = |i: usize| {
        first["results"][i]["job"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(first["results"][0]["job"]["workflow_id"], w);
    let again = c.post("/v1/jobs/batch", body).await.expect(200).clone();
    assert_eq!(again["workflow_id"], w);
    assert_eq!(again["results"][1]["created"], false);
    assert_eq!(again["results"][1]["job"]["id"], job(1));

    // A job joins it at run time.
    let joined = c
        .post(
            "/v1/jobs",
            json!({"queue": "q", "kind": "notify", "workflow_id": w, "depends_on": [job(1)]}),
        )
        .await;
    let joined = joined.expect(201)["job"]["id"].as_str().unwrap().to_owned();

    let got = c
        .get(&format!("/v1/workflows/{w}"))
        .await
        .expect(200)
        .clone();
    assert_eq!(
        keys(&got),
        sorted(&[
            "id",
            "name",
            "idempotency_key",
            "state",
            "created_at",
            "finished_at",
            "counts",
            "jobs"
        ])
    );
    assert_eq!(got["state"], "running");
    assert_eq!(got["counts"]["waiting"], 2);
    assert_eq!(got["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(got["jobs"][2]["id"], joined);
    assert_eq!(got["jobs"][2]["depends_on"], json!([job(1)]));
    assert_eq!(
        keys(&got["jobs"][0]),
        sorted(&["id", "kind", "state", "depends_on"])
    );
    let of_it = c.get(&format!("/v1/jobs?workflow_id={w}")).await;
    assert_eq!(of_it.expect(200)["jobs"].as_array().unwrap().len(), 3);

    let listed = c.get("/v1/workflows?state=running&name=publish").await;
    let listed = listed.expect(200).clone();
    assert_eq!(listed["workflows"][0]["id"], w);
    assert_eq!(listed["next_cursor"], Value::Null);
    let none = c.get("/v1/workflows?state=succeeded").await;
    assert_eq!(none.expect(200)["workflows"], json!([]));

    // Fail the first job: the rest are cancelled; retry with downstream.
    let (id, token) = c.claim_one("q").await;
    assert_eq!(id, job(0));
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "boom", "fatal": true}),
    )
    .await
    .expect(200);
    let failed = c
        .get(&format!("/v1/workflows/{w}"))
        .await
        .expect(200)
        .clone();
    assert_eq!(failed["state"], "failed");
    at(&failed["finished_at"]);
    let retried = c
        .post(
            &format!("/v1/workflows/{w}/retry"),
            json!({"mode": "failed_and_downstream"}),
        )
        .await;
    assert_eq!(retried.expect(200)["replayed"], 3);
    let cancelled = c.post_empty(&format!("/v1/workflows/{w}/cancel")).await;
    assert_eq!(
        cancelled.expect(200).clone(),
        json!({"cancelled": 3, "cancel_requested": 0})
    );
    let after = c
        .get(&format!("/v1/workflows/{w}"))
        .await
        .expect(200)
        .clone();
    assert_eq!(after["state"], "cancelled");
    // A finished workflow takes no more jobs.
    c.post(
        "/v1/jobs",
        json!({"queue": "q", "kind": "late", "workflow_id": w}),
    )
    .await
    .expect_error(409, "invalid_state");
}

async fn workflow_errors_and_tenant_walls(db: &TestDb) {
    let c = setup(db).await;
    let made = c
        .post(
            "/v1/jobs/batch",
            json!({"workflow": {"name": "w"}, "jobs": [{"queue": "q", "kind": "k"}]}),
        )
        .await;
    let w = made.expect(200)["workflow_id"].as_str().unwrap().to_owned();
    let other = c.other.clone();
    for (method, uri, body) in [
        ("GET", format!("/v1/workflows/{w}"), None),
        ("POST", format!("/v1/workflows/{w}/cancel"), None),
        (
            "POST",
            format!("/v1/workflows/{w}/retry"),
            Some(json!({"mode": "failed"})),
        ),
    ] {
        c.call(method, &uri, Some(&other), body)
            .await
            .expect_error(404, "not_found");
    }
    let theirs = c.call("GET", "/v1/workflows", Some(&other), None).await;
    assert_eq!(theirs.expect(200)["workflows"], json!([]));
    c.call(
        "POST",
        "/v1/jobs",
        Some(&other),
        Some(json!({"queue": "q", "kind": "k", "workflow_id": w})),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.get("/v1/workflows/not-a-uuid")
        .await
        .expect_error(404, "not_found");
    c.post(&format!("/v1/workflows/{w}/retry"), json!({"mode": "all"}))
        .await
        .expect_error(400, "invalid_argument");
    c.get("/v1/workflows?state=done")
        .await
        .expect_error(400, "invalid_argument");
    c.get("/v1/workflows?limit=0")
        .await
        .expect_error(400, "invalid_argument");
    c.post(
        "/v1/jobs/batch",
        json!({"workflow": {"name": "w"},
               "jobs": [{"queue": "q", "kind": "k", "workflow_id": w}]}),
    )
    .await
    .expect_error(400, "invalid_argument");
    c.post(
        "/v1/jobs/batch",
        json!({"workflow": {"name": "w", "colour": "red"}, "jobs": [{"queue": "q", "kind": "k"}]}),
    )
    .await
    .expect_error(400, "invalid_argument");
}
