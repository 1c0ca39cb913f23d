//! Waiting for a result: `GET /v1/jobs/{id}?wait_ms=` and
//! `GET /v1/workflows/{id}?wait_ms=` answer when the job (the workflow)
//! finishes or the wait runs out, woken by the feed.

use super::*;

tether_conformance::both_backends!(
    a_waiting_read_answers_when_the_job_finishes,
    a_waiting_read_answers_when_the_workflow_finishes,
    a_wait_that_runs_out_answers_what_is_there,
    bad_waits_are_400s_and_other_tenants_jobs_404s,
);

/// Claims `want` from `queue` and completes it.
async fn finish(c: &Ctx, queue: &str, want: &str) {
    let (id, token) = c.claim_one(queue).await;
    assert_eq!(id, want);
    c.post(
        &format!("/v1/jobs/{id}/complete"),
        json!({"lease_token": token, "result": {"done": true}}),
    )
    .await
    .expect(200);
}

/// A server whose reads may wait ten minutes: far longer than any stall of
/// the host, so a read that answers within two was woken by the end.
async fn long_waits(db: &TestDb) -> Ctx {
    setup_with(
        db,
        ServerConfig {
            max_wait_ms: 600_000,
            ..ServerConfig::default()
        },
    )
    .await
}

async fn a_waiting_read_answers_when_the_job_finishes(db: &TestDb) {
    let c = long_waits(db).await;
    let id = c.enqueue("q", "k").await;
    let started = Instant::now();
    let uri = format!("/v1/jobs/{id}?wait_ms=600000");
    let (answer, ()) = tokio::join!(c.get(&uri), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        finish(&c, "q", &id).await;
    });
    let job = &answer.expect(200)["job"];
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(job["result"], json!({"done": true}));
    // Woken by the end, not by the wait running out.
    assert!(started.elapsed() < Duration::from_secs(120));

    // A finished job is answered at once, whatever the wait.
    let started = Instant::now();
    let again = c.get(&format!("/v1/jobs/{id}?wait_ms=600000")).await;
    assert_eq!(again.expect(200)["job"]["state"], "succeeded");
    assert!(started.elapsed() < Duration::from_secs(120));
}

async fn a_waiting_read_answers_when_the_workflow_finishes(db: &TestDb) {
    let c = long_waits(db).await;
    let batch = c
        .post(
            "/v1/jobs/batch",
            json!({"workflow": {"name": "w"}, "jobs": [
                {"queue": "wq", "kind": "k"},
                {"queue": "wq", "kind": "k", "depends_on_entries": [0]},
            ]}),
        )
        .await;
    let body = batch.expect(200).clone();
    let flow = body["workflow_id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job"]["id"].as_str().unwrap().to_owned())
        .collect();
    let started = Instant::now();
    let uri = format!("/v1/workflows/{flow}?wait_ms=600000");
    let (answer, ()) = tokio::join!(c.get(&uri), async {
        for id in &ids {
            tokio::time::sleep(Duration::from_millis(150)).await;
            finish(&c, "wq", id).await;
        }
    });
    let w = answer.expect(200).clone();
    assert_eq!(w["state"], "succeeded", "{w}");
    assert!(started.elapsed() < Duration::from_secs(120));
}

async fn a_wait_that_runs_out_answers_what_is_there(db: &TestDb) {
    let c = setup(db).await;
    let id = c.enqueue("q", "k").await;
    let started = Instant::now();
    let answer = c.get(&format!("/v1/jobs/{id}?wait_ms=300")).await;
    assert_eq!(answer.expect(200)["job"]["state"], "queued");
    assert!(started.elapsed() >= Duration::from_millis(300));
    // Without a wait (or with 0), at once.
    for uri in [format!("/v1/jobs/{id}"), format!("/v1/jobs/{id}?wait_ms=0")] {
        assert_eq!(c.get(&uri).await.expect(200)["job"]["state"], "queued");
    }
}

async fn bad_waits_are_400s_and_other_tenants_jobs_404s(db: &TestDb) {
    let c = setup(db).await;
    let id = c.enqueue("q", "k").await;
    for wait in ["-1", "30001", "soon", "1.5"] {
        let a = c.get(&format!("/v1/jobs/{id}?wait_ms={wait}")).await;
        a.expect_error(400, "invalid_argument");
        assert!(
            a.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("wait_ms"),
            "{}",
            a.body
        );
        let a = c.get(&format!("/v1/workflows/{id}?wait_ms={wait}")).await;
        a.expect_error(400, "invalid_argument");
    }
    let theirs = c
        .call(
            "GET",
            &format!("/v1/jobs/{id}?wait_ms=200"),
            Some(&c.other),
            None,
        )
        .await;
    theirs.expect_error(404, "not_found");
}
