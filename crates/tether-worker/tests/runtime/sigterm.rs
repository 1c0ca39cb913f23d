//! A real SIGTERM to a real process: the test binary re-executes itself as a
//! worker (`run_until_signal`) on an SQLite file, the parent signals it
//! mid-job and then inspects the file.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_core::{Engine, EventKind, JobFilter, JobState, NewJob};
use tether_sqlite::SqliteStore;
use tether_worker::Worker;

const ENV: &str = "TETHER_WORKER_SIGTERM_DB";
const TENANT: &str = "t";
const QUEUE: &str = "q";

/// The parent: enqueues a job that finishes within the grace, one that never
/// finishes, and some quick ones; starts the child; once both slow jobs run,
/// sends SIGTERM. The child must exit 0 and leave nothing `running`: every
/// job succeeded or is queued with its attempt given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_job_exits_cleanly_and_loses_nothing() {
    let dir = std::env::temp_dir().join(format!(
        "tether-test-worker-sigterm-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("db.sqlite");
    let store = SqliteStore::open(&path).await.unwrap();
    let engine = Engine::new(Arc::new(store.clone()));
    let mut jobs = vec![
        NewJob::new(QUEUE, "medium", json!({})).priority(10),
        NewJob::new(QUEUE, "stuck", json!({})).priority(10),
    ];
    jobs.extend((0..6).map(|_| NewJob::new(QUEUE, "quick", json!({}))));
    let ids: Vec<_> = engine
        .enqueue_many(TENANT, &jobs)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.job.id)
        .collect();
    let (medium, stuck) = (ids[0], ids[1]);

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigterm::child", "--ignored", "--nocapture"])
        .env(ENV, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Read the child's lines on a thread; report when both slow jobs run.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut running = 0;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("RUNNING ") {
                running += 1;
                if running == 2 {
                    let _ = tx.send(());
                }
            }
        }
    });
    let ready = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(20)))
        .await
        .unwrap();
    if ready.is_err() {
        let _ = child.kill();
        panic!("the child never ran both slow jobs");
    }
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM failed");
    let status = tokio::task::spawn_blocking(move || {
        // The grace is 1 s; give the child generous room, then kill it.
        for _ in 0..200 {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        None
    })
    .await
    .unwrap()
    .expect("the child did not exit within 10 s of SIGTERM");
    assert!(status.success(), "the child exited with {status}");

    let all = engine
        .list(
            TENANT,
            &JobFilter {
                limit: Some(100),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap()
        .jobs;
    assert_eq!(all.len(), ids.len());
    for j in &all {
        assert!(
            j.state == JobState::Succeeded || (j.state == JobState::Queued && j.attempt == 0),
            "job {} ({}) is {} with attempt {}",
            j.id,
            j.kind,
            j.state,
            j.attempt
        );
    }
    let medium = engine.get(TENANT, medium).await.unwrap();
    assert_eq!(
        medium.state,
        JobState::Succeeded,
        "finished within the grace"
    );
    let stuck_job = engine.get(TENANT, stuck).await.unwrap();
    assert_eq!((stuck_job.state, stuck_job.attempt), (JobState::Queued, 0));
    let history: Vec<EventKind> = engine
        .events(TENANT, stuck)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event)
        .collect();
    assert!(history.contains(&EventKind::Snoozed), "{history:?}");
    drop(engine);
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child: a worker on the parent's SQLite file until SIGTERM. Does
/// nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn child() {
    let Ok(path) = std::env::var(ENV) else {
        return;
    };
    let store = SqliteStore::open(&path).await.unwrap();
    let engine = Engine::new(Arc::new(store.clone()));
    let announce = |what: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "RUNNING {what}").unwrap();
        out.flush().unwrap();
    };
    let worker = Worker::builder(engine)
        .tenant(TENANT)
        .queue(QUEUE, 4)
        .lease_ttl(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(100))
        .shutdown_grace(Duration::from_secs(1))
        .maintenance_tick(Duration::from_millis(200))
        .handler("quick", |_ctx| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(None)
        })
        .handler("medium", move |_ctx| async move {
            announce("medium");
            tokio::time::sleep(Duration::from_millis(400)).await;
            Ok(Some(json!("medium done")))
        })
        .handler("stuck", move |_ctx| async move {
            announce("stuck");
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(None)
        })
        .build()
        .unwrap();
    worker.run_until_signal().await.unwrap();
    store.close().await;
}
