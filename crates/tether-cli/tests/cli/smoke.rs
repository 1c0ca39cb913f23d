//! The PostgreSQL smoke test.

use super::*;

#[tokio::test]
async fn postgres_smoke() {
    let db = tether_conformance::postgres().await;
    let database_url = db.postgres_url().unwrap();
    let dir = temp_dir("cli-pg");
    let key = "cli-postgres-admin-key-0123456789";
    let server = Server::start(
        &dir,
        &["--database-url", &database_url],
        &[("TETHER_ADMIN_KEY", key)],
    );
    assert!(server.banner.contains("postgres"), "{}", server.banner);
    let url = format!("http://{}", server.addr);
    let env = [("TETHER_URL", url.as_str()), ("TETHER_KEY", key)];
    let out = tether(
        &["enqueue", "pg", "work", r#"{"a": 1}"#, "--json"],
        &env,
        None,
    )
    .ok();
    let id = out.json()["job"]["id"].as_str().unwrap().to_owned();
    let listed = tether(&["jobs", "ls", "--queue", "pg", "--json"], &env, None)
        .ok()
        .json();
    assert_eq!(ids(&listed, "jobs"), vec![id.clone()]);

    // Fail it, see it in the DLQ and the stats, replay it.
    let (status, claimed) = call(
        Method::POST,
        &server.url("/v1/queues/pg/claim"),
        key,
        Some(json!({"worker_id": "w"})),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let token = claimed["jobs"][0]["lease_token"].clone();
    let (status, _) = call(
        Method::POST,
        &server.url(&format!("/v1/jobs/{id}/fail")),
        key,
        Some(json!({"lease_token": token, "error": "nope", "fatal": true})),
    )
    .await;
    assert_eq!(status, 200);
    let dlq = tether(&["dlq", "ls", "--json"], &env, None).ok().json();
    assert_eq!(ids(&dlq, "jobs"), vec![id.clone()]);
    let stats = tether(&["stats"], &env, None).ok().stdout;
    assert!(stats.lines().any(|l| l.starts_with("pg ")), "{stats}");
    let replayed = tether(&["dlq", "replay", "pg", "--all", "--json"], &env, None)
        .ok()
        .json();
    assert_eq!(replayed["replayed"], 1);
    let (_, job) = call(
        Method::GET,
        &server.url(&format!("/v1/jobs/{id}")),
        key,
        None,
    )
    .await;
    assert_eq!(job["job"]["state"], "queued");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
