//! Invariant 11 across real processes: three `tether serve` replicas on one
//! PostgreSQL database race to fire a per-second schedule for 60 fires; the
//! leader is killed mid-run. Every fire instant from the first to the last
//! produced exactly one job: none lost, none doubled.

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{call, temp_dir, Server};
use serde_json::json;

const KEY: &str = "cron-replicas-admin-key-0123";

async fn leader_pid(pool: &sqlx::PgPool) -> Option<u32> {
    let holder: Option<String> = sqlx::query_scalar(
        "SELECT holder FROM tether.leases WHERE name = 'maintenance' AND expires_at > now()",
    )
    .fetch_optional(pool)
    .await
    .unwrap();
    holder.and_then(|h| h.split(':').nth(1)?.parse().ok())
}

#[tokio::test]
async fn three_replicas_fire_a_per_second_schedule_exactly_once() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let dirs: Vec<PathBuf> = (0..3).map(|i| temp_dir(&format!("cron{i}"))).collect();
    // Replicas in their own data directories share one server secret.
    let secret = "c7".repeat(32);
    let args = [
        "--database-url",
        url.as_str(),
        "--maintenance-tick",
        "300ms",
    ];
    let mut servers: Vec<Server> = dirs
        .iter()
        .map(|d| {
            let env = [("TETHER_ADMIN_KEY", KEY), ("TETHER_SERVER_SECRET", &secret)];
            Server::start(d, &args, &env)
        })
        .collect();

    let (status, created) = call(
        reqwest::Method::POST,
        &servers[0].url("/v1/schedules"),
        KEY,
        Some(json!({"name": "every-second", "cron": "* * * * * *", "queue": "ticks", "kind": "tick"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["schedule"]["id"].as_str().unwrap().to_owned();

    // Let it run, kill the leader after about 20 fires, run on to 60+.
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let leader = leader_pid(&pool).await.expect("a leader");
    let idx = servers
        .iter()
        .position(|s| s.pid() == leader)
        .expect("the leader is ours");
    let mut dead = servers.remove(idx);
    dead.signal("KILL");
    dead.wait_exit(Duration::from_secs(5));
    while started.elapsed() < Duration::from_secs(64) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Stop firing before reading, so the read is complete.
    let (status, _) = call(
        reqwest::Method::PATCH,
        &servers[0].url(&format!("/v1/schedules/{id}")),
        KEY,
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, 200);

    let runs: Vec<(DateTime<Utc>, Option<uuid::Uuid>, String)> = sqlx::query_as(
        "SELECT fire_at, job_id, outcome FROM tether.schedule_runs WHERE schedule_id = $1::uuid ORDER BY fire_at",
    )
    .bind(&id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(runs.len() >= 60, "only {} fires in 64 s", runs.len());
    for w in runs.windows(2) {
        assert_eq!(
            (w[1].0 - w[0].0).num_milliseconds(),
            1_000,
            "fire instants {} and {} are not consecutive: an instant was lost or doubled",
            w[0].0,
            w[1].0
        );
    }
    assert!(runs.iter().all(|r| r.2 == "enqueued" && r.1.is_some()));
    let jobs: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT id, idempotency_key FROM tether.jobs WHERE queue = 'ticks'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(jobs.len(), runs.len(), "one job per fire");
    let keys: HashSet<&String> = jobs.iter().map(|j| &j.1).collect();
    assert_eq!(keys.len(), jobs.len(), "no fire key made two jobs");
    let run_jobs: HashSet<uuid::Uuid> = runs.iter().filter_map(|r| r.1).collect();
    let job_ids: HashSet<uuid::Uuid> = jobs.iter().map(|j| j.0).collect();
    assert_eq!(run_jobs, job_ids, "every run names its own job");

    drop(servers);
    pool.close().await;
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}
