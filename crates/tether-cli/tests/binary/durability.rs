//! SQLite durability: `tether serve` is SIGKILLed during an enqueue storm;
//! after a restart every acknowledged job is there, and the database file
//! passes `PRAGMA integrity_check`.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{temp_dir, Server};
use serde_json::{json, Value};

const KEY: &str = "durability-admin-key-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_jobs_survive_sigkill_of_the_sqlite_server() {
    let dir = temp_dir("durability");
    let mut server = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", KEY)]);
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();

    // Eight producers: singles and batches of 50, each with idempotency keys.
    let mut producers = Vec::new();
    for p in 0..8 {
        let (http, acked, base) = (http.clone(), acked.clone(), server.url(""));
        producers.push(tokio::spawn(async move {
            for i in 0.. {
                let batch = p % 2 == 0;
                let keys: Vec<String> = if batch {
                    (0..50).map(|j| format!("p{p}-{i}-{j}")).collect()
                } else {
                    vec![format!("p{p}-{i}")]
                };
                let jobs: Vec<Value> = keys
                    .iter()
                    .map(|k| json!({"queue": "storm", "kind": "k", "idempotency_key": k, "payload": {"k": k}}))
                    .collect();
                let (url, body) = if batch {
                    (format!("{base}/v1/jobs/batch"), json!({"jobs": jobs}))
                } else {
                    (format!("{base}/v1/jobs"), jobs[0].clone())
                };
                let Ok(resp) = http.post(&url).bearer_auth(KEY).json(&body).send().await else {
                    return; // the server is gone
                };
                if !resp.status().is_success() {
                    return;
                }
                let Ok(answer) = resp.json::<Value>().await else {
                    return;
                };
                let created: Vec<Value> = if batch {
                    answer["results"].as_array().unwrap().iter().map(|r| r["job"].clone()).collect()
                } else {
                    vec![answer["job"].clone()]
                };
                let mut acked = acked.lock().unwrap();
                for job in created {
                    acked.push((
                        job["id"].as_str().unwrap().to_owned(),
                        job["idempotency_key"].as_str().unwrap().to_owned(),
                    ));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.signal("KILL");
    server.wait_exit(Duration::from_secs(5));
    for p in producers {
        p.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "the storm acknowledged only {} jobs",
        acked.len()
    );

    // The file is sound after the kill (checked before anything reopens it).
    let url = format!("sqlite://{}", dir.join("tether.db").display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);

    // Every acknowledged job is there, once, after a restart.
    let server = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", KEY)]);
    let mut missing = Vec::new();
    for (id, key) in &acked {
        let resp = http
            .get(server.url(&format!("/v1/jobs/{id}")))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        if resp.status() != 200 {
            missing.push(id.clone());
            continue;
        }
        let job: Value = resp.json().await.unwrap();
        assert_eq!(job["job"]["idempotency_key"], key.as_str());
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged jobs lost: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    let stats: Value = http
        .get(server.url("/v1/queues/storm"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let queued = stats["queue"]["counts"]["queued"].as_i64().unwrap();
    assert!(
        queued >= acked.len() as i64,
        "{queued} queued < {} acknowledged",
        acked.len()
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
