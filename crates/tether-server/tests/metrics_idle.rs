//! The recorder's per-queue series are bounded over time, not only in
//! number: past `--metrics-max-queues` (tenant, queue) pairs the work of new
//! queues is counted under `queue="~other"` only until a pair's series have
//! not moved for the series idle time; then the recorder drops them (a
//! deleted or quiet queue's series leave the scrape) and the next new queue
//! gets their place. The counters without labels stay. Its own binary: the
//! recorder is global, and here it has a limit of 2 pairs and an idle time
//! of a second.

#[path = "common/mod.rs"]
mod common;

use std::time::Duration;

use serde_json::json;
use tether_conformance::TestDb;
use tether_server::{AppState, Metrics, ServerConfig};

const IDLE: Duration = Duration::from_millis(1_000);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_queue_series_are_dropped_and_their_places_reused() {
    tether_conformance::run(tether_conformance::sqlite, |db| Box::pin(series(db))).await;
}

/// The samples of `tether_jobs_enqueued_total` in a scrape, as
/// `(tenant, queue, value)`; and whether `tether_jobs_expired_total` is there.
fn enqueued(text: &str) -> (Vec<(String, String, f64)>, bool) {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("tether_jobs_enqueued_total{") else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap()
        };
        out.push((label("tenant"), label("queue"), value.parse().unwrap()));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    let expired = text.lines().any(|l| l == "tether_jobs_expired_total 0");
    (out, expired)
}

async fn series(db: &TestDb) {
    let recorder = tether_server::install_recorder_with(2, IDLE).expect("install");
    let c = common::setup_state(db, db.engine.clone(), |engine| {
        AppState::new(engine, ServerConfig::default())
            .with_metrics(Metrics::with_recorder(recorder))
    })
    .await;
    let scrape = || async {
        let (status, text) = c.get_text("/metrics").await;
        assert_eq!(status.as_u16(), 200, "{text}");
        enqueued(&text)
    };
    for queue in ["q1", "q2", "q3", "q3"] {
        c.post("/v1/jobs", json!({"queue": queue, "kind": "k"}))
            .await
            .expect(201);
    }
    let d = |q: &str, n: f64| ("default".to_owned(), q.to_owned(), n);
    assert_eq!(
        scrape().await,
        (vec![d("q1", 1.0), d("q2", 1.0), d("~other", 2.0)], true),
        "two pairs have series, the third is counted under ~other"
    );
    // Nothing moves for longer than the idle time: the recorder drops the
    // queues' series; the counter without labels stays.
    tokio::time::sleep(IDLE + Duration::from_millis(300)).await;
    assert_eq!(scrape().await, (vec![], true), "idle series are gone");
    // q3 now gets a place of its own; so does q1 when it moves again.
    for queue in ["q3", "q1"] {
        c.post("/v1/jobs", json!({"queue": queue, "kind": "k"}))
            .await
            .expect(201);
    }
    assert_eq!(scrape().await, (vec![d("q1", 1.0), d("q3", 1.0)], true));
    // A third queue is past the limit again while those two move.
    c.post("/v1/jobs", json!({"queue": "q4", "kind": "k"}))
        .await
        .expect(201);
    assert_eq!(
        scrape().await,
        (vec![d("q1", 1.0), d("q3", 1.0), d("~other", 1.0)], true)
    );
}
