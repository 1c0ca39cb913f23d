//! Flow control across server replicas (PostgreSQL): three `tether serve`
//! routers, each with its own pool and listener on one database, and twelve
//! HTTP workers claiming from one queue with `max_running`,
//! `key_max_running` and a rate limit. A sampler reads the queue's running
//! count and its busiest key's in its own snapshots all along; no snapshot
//! may show more than the limits, and afterwards no second of the history's
//! `claimed` events may hold more than the rate.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use tether_core::Engine;
use tether_postgres::PgStore;
use tether_server::{router, AppState, ServerConfig};

use super::*;

const LIMIT: i64 = 7;
const KEY_LIMIT: i64 = 2;
const RATE: i64 = 150;
const JOBS: usize = 240;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits_hold_across_three_replicas() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("postgres");
    let first = start(&db).await;
    let mut bases = vec![first.base.clone()];
    let mut servers = Vec::new();
    for _ in 0..2 {
        let engine = Engine::new(Arc::new(
            PgStore::connect(&url).await.expect("replica store"),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        bases.push(format!("http://{}", listener.local_addr().unwrap()));
        let app = router(AppState::new(engine, ServerConfig::default()));
        servers.push(tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        }));
    }
    let admin = &first.admin;
    let limit = QueueConfigPatch {
        max_running: Some(Some(LIMIT as i32)),
        key_max_running: Some(Some(KEY_LIMIT as i32)),
        rate_limit: Some(Some(RateLimit {
            count: RATE as i32,
            period_ms: 1_000,
        })),
        ..Default::default()
    };
    admin.configure_queue("capped", &limit).await.unwrap();
    // Three keys at two each (6) and jobs without a key: both the per-key
    // and the queue's limit bind.
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| {
            let job = NewJob::new("capped", "k", json!({ "i": i }));
            match i % 4 {
                0 => job,
                _ => job.concurrency_key(format!("key{}", i % 3)),
            }
        })
        .collect();
    admin.enqueue_batch(&jobs).await.unwrap();

    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, most, pool) = (stop.clone(), most.clone(), pool.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // One statement, one snapshot: both counts at one instant.
                let (running, busiest_key): (i64, i64) = sqlx::query_as(
                    "SELECT count(*), COALESCE((SELECT max(n) FROM (SELECT count(*) AS n
                         FROM tether.jobs WHERE queue = 'capped' AND state = 'running'
                           AND concurrency_key IS NOT NULL GROUP BY concurrency_key) k), 0)
                     FROM tether.jobs WHERE queue = 'capped' AND state = 'running'",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                assert!(
                    running <= LIMIT,
                    "{running} running under max_running {LIMIT}"
                );
                assert!(
                    busiest_key <= KEY_LIMIT,
                    "{busiest_key} running of one key under key_max_running {KEY_LIMIT}"
                );
                most.fetch_max(running, Ordering::Relaxed);
            }
        })
    };

    let workers: Vec<_> = (0..12)
        .map(|w| {
            let client = HttpClient::new(&bases[w % 3], &first.admin_key).unwrap();
            tokio::spawn(async move {
                let opts = ClaimOptions::new(format!("w{w}")).limit(3).wait_ms(200);
                let mut done = 0usize;
                loop {
                    let claimed = client.claim("capped", &opts).await.unwrap();
                    if claimed.is_empty() {
                        let q = client.get_queue("capped").await.unwrap();
                        if q.counts.queued == 0 {
                            return done;
                        }
                        continue;
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let items: Vec<Completion> = claimed
                        .iter()
                        .map(tether_client::ClaimedJob::success)
                        .collect();
                    for answer in client.complete_batch(&items).await.unwrap() {
                        answer.result.unwrap();
                    }
                    done += items.len();
                }
            })
        })
        .collect();
    let mut done = 0;
    for w in workers {
        done += w.await.expect("worker");
    }
    stop.store(true, Ordering::Relaxed);
    sampler.await.expect("sampler");
    assert_eq!(done, JOBS, "every job done once");
    let q = admin.get_queue("capped").await.unwrap();
    assert_eq!(q.counts.succeeded as usize, JOBS);
    // The rate, from the history: the most claims in any second.
    let busiest_second: i64 = sqlx::query_scalar(
        "WITH c AS (SELECT e.at FROM tether.job_events e JOIN tether.jobs j ON j.id = e.job_id
                    WHERE j.queue = 'capped' AND e.event = 'claimed')
         SELECT max((SELECT count(*) FROM c c2
                     WHERE c2.at > c1.at - interval '1 second' AND c2.at <= c1.at))
         FROM c c1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        (RATE / 2..=RATE).contains(&busiest_second),
        "{busiest_second} claims in the busiest second under a rate of {RATE}"
    );
    let most = most.load(Ordering::Relaxed);
    assert!(
        most > 1,
        "the workers never ran jobs side by side ({most}): the test proved nothing"
    );
    for s in servers {
        s.abort();
    }
    drop(first);
    db.cleanup().await;
}
