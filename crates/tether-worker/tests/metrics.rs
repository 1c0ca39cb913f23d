//! The runtime's metrics, read through a recorder installed for this test
//! binary alone (its own process, so the global recorder is ours). Each
//! backend's test uses its own kinds, so the two can run side by side.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use serde_json::json;
use tether_conformance::TestDb;
use tether_core::{Backoff, JobFilter, JobState, NewJob, QueueConfigPatch};
use tether_worker::{JobError, Worker};

/// Counts everything recorded, by `name{label=value,...}` (labels sorted).
#[derive(Default)]
struct Recorded {
    values: Mutex<HashMap<String, Arc<Cell>>>,
}

#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl HistogramFn for Cell {
    /// Histograms count their samples.
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Recorded {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        self.values.lock().unwrap().entry(name).or_default().clone()
    }

    fn get(&self, name: &str) -> u64 {
        self.values
            .lock()
            .unwrap()
            .get(name)
            .map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
}

struct Rec(&'static Recorded);

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.cell(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.cell(key))
    }
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<&'static Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let r: &'static Recorded = Box::leak(Box::default());
        metrics::set_global_recorder(Rec(r)).expect("no other recorder in this binary");
        r
    })
}

/// One job per outcome the runtime can count without a takeover; each ends
/// up counted once under its queue, kind and outcome, and every handler run
/// is timed.
async fn every_outcome_is_counted(db: &TestDb) {
    let rec = recorded();
    let p = db.backend();
    let tenant = "t";
    let queue = format!("metrics-{p}");
    db.engine
        .configure_queue(
            tenant,
            &queue,
            &QueueConfigPatch {
                backoff: Some(Backoff {
                    base_ms: 60_000,
                    cap_ms: 60_000,
                }),
                ..QueueConfigPatch::default()
            },
        )
        .await
        .unwrap();
    let handle = Worker::builder(db.engine.clone())
        .tenant(tenant)
        .maintenance(false)
        .lease_ttl(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(100))
        .queue(queue.clone(), 10)
        .handler(format!("{p}-ok"), |_ctx| async move { Ok(None) })
        .handler(format!("{p}-retry"), |_ctx| async move {
            Err(JobError::retry("again"))
        })
        .handler(format!("{p}-fatal"), |_ctx| async move {
            Err(JobError::fatal("never"))
        })
        .handler(format!("{p}-panic"), |_ctx| async move {
            if true {
                panic!("counted");
            }
            Ok(None)
        })
        .handler(format!("{p}-snooze"), |_ctx| async move {
            Err(JobError::snooze(Duration::from_secs(60)))
        })
        .handler(format!("{p}-timeout"), |_ctx| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(None)
        })
        .handler(format!("{p}-cancel"), |_ctx| async move {
            Err(JobError::Cancelled)
        })
        .build()
        .unwrap()
        .start();
    let kinds = [
        "ok", "retry", "fatal", "panic", "snooze", "timeout", "cancel",
    ];
    let jobs: Vec<NewJob> = kinds
        .iter()
        .map(|k| {
            let job = NewJob::new(queue.clone(), format!("{p}-{k}"), json!({})).max_attempts(3);
            if *k == "timeout" {
                job.timeout_ms(200)
            } else {
                job
            }
        })
        .collect();
    db.engine.enqueue_many(tenant, &jobs).await.unwrap();
    let expect = [
        ("ok", "succeeded"),
        ("retry", "retried"),
        ("fatal", "failed"),
        ("panic", "panicked"),
        ("snooze", "snoozed"),
        ("timeout", "timed_out"),
        ("cancel", "cancelled"),
    ];
    let name = |kind: &str, outcome: &str| {
        format!("tether_worker_jobs_total{{kind={p}-{kind},outcome={outcome},queue={queue}}}")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while expect.iter().any(|(k, o)| rec.get(&name(k, o)) == 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "not every outcome was counted: {:?}",
            expect.map(|(k, o)| (k, o, rec.get(&name(k, o))))
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown();
    handle.join().await;
    for (k, o) in expect {
        assert_eq!(rec.get(&name(k, o)), 1, "{k} counted as {o}");
        let duration =
            format!("tether_worker_handler_duration_seconds{{kind={p}-{k},queue={queue}}}");
        assert_eq!(rec.get(&duration), 1, "{k}'s handler run was timed once");
    }
    // Nothing is still running and nothing was counted twice in another way.
    let running = db
        .engine
        .list(
            tenant,
            &JobFilter {
                state: Some(JobState::Running),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert!(running.jobs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_every_outcome_is_counted() {
    tether_conformance::run(tether_conformance::postgres, |db| {
        Box::pin(every_outcome_is_counted(db))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_every_outcome_is_counted() {
    tether_conformance::run(tether_conformance::sqlite, |db| {
        Box::pin(every_outcome_is_counted(db))
    })
    .await;
}
