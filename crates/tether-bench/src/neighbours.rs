//! The noisy-neighbour figure (invariant 19): how long another tenant's
//! `GET /v1/queues` takes while one tenant hammers a fair, key-limited
//! queue — one key's long backlog at the head, then thousands of keys of
//! one job each, forty claim loops at once, and its own throughput reports
//! read over and over — against `tether serve` in a child process, on
//! PostgreSQL and on SQLite.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tether_client::{ClaimOptions, ClaimedJob, HttpClient, NewJob, QueueConfigPatch};
use tether_core::Completion;

use crate::http::ServerProcess;
use crate::report::Report;

/// Claim loops of the abusive tenant.
const CLAIMERS: usize = 40;
/// Throughput-report loops of the abusive tenant (the dashboard's chart).
const REPORTERS: usize = 8;
/// The victim's requests are this far apart.
const VICTIM_EVERY: Duration = Duration::from_millis(20);

/// Runs the figure for one backend: `database_url` is what `tether serve`
/// opens, `prefix` names the figures (`pg`, `sqlite`), `keys` how many
/// distinct keys the abusive queue holds, `seconds` how long it is measured.
pub async fn run(database_url: &str, prefix: &str, keys: usize, seconds: u64, report: &mut Report) {
    let (idle_name, loaded_name) = match prefix {
        "pg" => (
            "pg_noisy_neighbour_idle_p95_ms",
            "pg_noisy_neighbour_p95_ms",
        ),
        _ => (
            "sqlite_noisy_neighbour_idle_p95_ms",
            "sqlite_noisy_neighbour_p95_ms",
        ),
    };
    let server = ServerProcess::start(database_url, None);
    let base = format!("http://{}", server.addr);
    let admin = HttpClient::new(&base, crate::http::ADMIN_KEY).expect("admin client");
    let suffix = std::process::id();
    let abuser = tenant(&admin, &base, &format!("abuser-{prefix}-{suffix}")).await;
    let victim = tenant(&admin, &base, &format!("victim-{prefix}-{suffix}")).await;
    victim
        .enqueue(NewJob::new("tiny", "noop", json!({})))
        .await
        .expect("victim's job");

    // The abusive queue: 1 000 jobs of one key first, then one job per key.
    let mut jobs: Vec<NewJob> = (0..1_000)
        .map(|i| NewJob::new("flood", "noop", json!({"i": i})).concurrency_key("hot"))
        .collect();
    jobs.extend(
        (0..keys)
            .map(|k| NewJob::new("flood", "noop", json!({})).concurrency_key(format!("k{k:06}"))),
    );
    for chunk in jobs.chunks(1_000) {
        abuser.enqueue_batch(chunk).await.expect("abuser's jobs");
    }
    let patch = QueueConfigPatch {
        fair: Some(true),
        key_max_running: Some(Some(1)),
        ..Default::default()
    };
    abuser
        .configure_queue("flood", &patch)
        .await
        .expect("flow control");

    let idle = victim_p95(&victim, Duration::from_secs(3)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let claimed = Arc::new(AtomicU64::new(0));
    let mut load = Vec::new();
    for w in 0..CLAIMERS {
        let (client, stop, claimed) = (abuser.clone(), stop.clone(), claimed.clone());
        load.push(tokio::spawn(async move {
            let mut opts = ClaimOptions::new(format!("abuser-{w}"));
            opts.limit = Some(10);
            while !stop.load(Ordering::Relaxed) {
                let Ok(got) = client.claim("flood", &opts).await else {
                    continue;
                };
                claimed.fetch_add(got.len() as u64, Ordering::Relaxed);
                if !got.is_empty() {
                    let items: Vec<Completion> = got.iter().map(ClaimedJob::success).collect();
                    let _ = client.complete_batch(&items).await;
                }
            }
        }));
    }
    for _ in 0..REPORTERS {
        let (client, stop) = (abuser.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let _ = client.throughput("flood", Some(1_440)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = victim_p95(&victim, Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for h in load {
        let _ = h.await;
    }
    report.add(
        idle_name,
        idle,
        "ms",
        format!("{prefix}: another tenant's GET /v1/queues p95, nothing else running"),
    );
    report.add(
        loaded_name,
        loaded,
        "ms",
        format!(
            "{prefix}: the same while one tenant runs {CLAIMERS} claim loops on a fair, \
             key_max_running 1 queue (1000 jobs of one key, then {keys} keys) and \
             {REPORTERS} throughput reports; {} jobs claimed meanwhile (bar <= 100)",
            claimed.load(Ordering::Relaxed)
        ),
    );
    drop(server);
}

/// A new tenant and a client with its key.
async fn tenant(admin: &HttpClient, base: &str, name: &str) -> HttpClient {
    let created = admin.create_tenant(name).await.expect("create tenant");
    HttpClient::new(base, &created.api_key).expect("tenant client")
}

/// The victim's `GET /v1/queues` p95 over `for_how_long`, one request every
/// [`VICTIM_EVERY`].
async fn victim_p95(victim: &HttpClient, for_how_long: Duration) -> f64 {
    let until = Instant::now() + for_how_long;
    let mut samples = Vec::new();
    while Instant::now() < until {
        let at = Instant::now();
        victim.list_queues().await.expect("victim's request");
        samples.push(at.elapsed());
        tokio::time::sleep(VICTIM_EVERY).await;
    }
    samples.sort();
    let p95 = samples[(samples.len() * 95 / 100).min(samples.len() - 1)];
    p95.as_secs_f64() * 1_000.0
}
