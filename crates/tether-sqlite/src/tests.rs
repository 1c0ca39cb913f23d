//! Backend-specific checks: connection setup, migrations and transaction
//! hygiene. The lifecycle itself is proven by the shared behaviour suite
//! (`tether-conformance`); the few lifecycle tests here are smoke tests.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use sqlx::Connection;
use tether_core::{
    ClaimRequest, Completion, Error, EventKind, Failure, Heartbeat, JobFilter, JobState, NewJob,
    NewJobRef, Store,
};
use uuid::Uuid;

use super::SqliteStore;

/// A database file under the temp dir, deleted (with its WAL and shm files)
/// when dropped.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> TempDb {
        TempDb(std::env::temp_dir().join(format!(
            "tether-sqlite-test-{}-{}.db",
            std::process::id(),
            Uuid::new_v4()
        )))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut path = self.0.clone().into_os_string();
            path.push(suffix);
            let _ = std::fs::remove_file(path);
        }
    }
}

fn enqueue_refs(jobs: &[NewJob]) -> Vec<NewJobRef<'_>> {
    jobs.iter()
        .map(|job| NewJobRef {
            id: Uuid::now_v7(),
            job,
        })
        .collect()
}

fn claim_req(queue: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: queue.into(),
        worker_id: "w1".into(),
        limit,
        lease_ttl_ms: None,
    }
}

#[tokio::test]
async fn migrations_are_idempotent() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    store.close().await;
    let store = SqliteStore::open(&db.0).await.unwrap();
    let versions: Vec<(i64, String)> =
        sqlx::query_as("SELECT version, name FROM tether_migrations ORDER BY version")
            .fetch_all(&store.reader)
            .await
            .unwrap();
    assert_eq!(
        versions,
        vec![
            (1, "core".to_owned()),
            (2, "tenants_keys".to_owned()),
            (3, "schedules".to_owned()),
            (4, "key_hardening".to_owned())
        ]
    );
    assert_eq!(SqliteStore::schema_version(), 4);
    store.close().await;
}

/// A new file, and the `-wal` and `-shm` files SQLite makes beside it, are
/// readable by their owner only, whatever the umask lets through.
#[cfg(unix)]
#[tokio::test]
async fn a_new_file_and_its_wal_and_shm_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    store.ensure_tenant("t").await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.0.clone().into_os_string();
        path.push(suffix);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{path:?}");
    }
    store.close().await;
}

/// An empty claim answers from a reader: it does not wait for the writer,
/// so idle claimers never queue up behind (or in front of) real writes.
#[tokio::test]
async fn an_empty_claim_does_not_take_the_write_lock() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // Another connection holds the file's write lock.
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.0.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let claimed = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        store.claim("t", &claim_req("q", 10)),
    )
    .await
    .expect("an empty claim waited for the write lock")
    .unwrap();
    assert!(claimed.is_empty());
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    store.close().await;
}

/// With many claimers waiting on one queue, a new job wakes one of them,
/// not all: each woken claimer runs a claim.
#[tokio::test]
async fn a_new_job_wakes_one_waiting_claimer() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let woken = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..200 {
        let mut wakeup = store.subscribe("t", "q");
        let woken = woken.clone();
        waiters.push(tokio::spawn(async move {
            wakeup.hinted().await;
            woken.fetch_add(1, Ordering::SeqCst);
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let job = [NewJob::new("q", "k", json!(null))];
    store
        .enqueue("t", &enqueue_refs(&job), u32::MAX)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 1);
    let jobs: Vec<_> = (0..5).map(|_| NewJob::new("q", "k", json!(null))).collect();
    store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(woken.load(Ordering::SeqCst), 6);
    for w in waiters {
        w.abort();
    }
    store.close().await;
}

#[tokio::test]
async fn concurrent_opens_apply_migrations_once() {
    let db = TempDb::new();
    // Each open on its own task, so they really race for the new file.
    let handles: Vec<_> = (0..4)
        .map(|_| tokio::spawn(SqliteStore::open(db.0.clone())))
        .collect();
    let mut stores = Vec::new();
    for handle in handles {
        stores.push(handle.await.unwrap().unwrap());
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tether_migrations")
        .fetch_one(&stores[0].reader)
        .await
        .unwrap();
    assert_eq!(n, 4);
    for store in &stores {
        store.close().await;
    }
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    sqlx::query("INSERT INTO tether_migrations (version, name, applied_at) VALUES (99, 'x', 0)")
        .execute(&store.writer)
        .await
        .unwrap();
    store.close().await;
    let err = SqliteStore::open(&db.0).await.unwrap_err();
    assert!(matches!(err, Error::Storage(_)), "{err}");
}

#[tokio::test]
async fn pragmas_hold_on_every_connection() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // Hold several read connections at once so more than one is checked.
    let mut conns = Vec::new();
    for _ in 0..super::READ_CONNECTIONS {
        conns.push(store.reader.acquire().await.unwrap());
    }
    conns.push(store.writer.acquire().await.unwrap());
    for conn in &mut conns {
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(journal, "wal");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(synchronous, 2, "synchronous=FULL");
        let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(foreign_keys, 1);
        let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(busy, 5_000);
    }
    drop(conns);
    store.close().await;
}

#[tokio::test]
async fn sqlite_clock_has_milliseconds() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let now: i64 = sqlx::query_scalar(concat!("SELECT ", now_ms!()))
        .fetch_one(&store.reader)
        .await
        .unwrap();
    let rust_now = chrono::Utc::now().timestamp_millis();
    assert!((now - rust_now).abs() < 5_000, "{now} vs {rust_now}");
    store.close().await;
}

#[tokio::test]
async fn an_abandoned_write_transaction_is_rolled_back() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    {
        let mut tx = store.writer.begin_with("BEGIN IMMEDIATE").await.unwrap();
        sqlx::query(
            "INSERT INTO tether_leases (name, holder, token, acquired_at, expires_at) \
             VALUES ('x', 'h', 't', 0, 0)",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        // Dropped without commit, as when a caller's future is cancelled.
    }
    // The writer is usable again at once (no "cannot start a transaction
    // within a transaction") and the abandoned write is gone.
    let lease = store
        .acquire_lease("maintenance", "node-1", 10_000)
        .await
        .unwrap();
    assert!(lease.is_some());
    let mut conn = store.writer.acquire().await.unwrap();
    assert!(!conn.is_in_transaction());
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM tether_leases WHERE name = 'x'")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(n, 0);
    drop(conn);

    // A future dropped mid-operation leaves the writer clean too.
    for _ in 0..20 {
        let fut = store.acquire_lease("other", "node-2", 10_000);
        let _ = tokio::time::timeout(std::time::Duration::from_micros(50), fut).await;
    }
    store
        .acquire_lease("third", "node-3", 10_000)
        .await
        .unwrap();
    store.close().await;
}

#[tokio::test]
async fn lifecycle_smoke() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![
        NewJob::new("q", "k", json!({"n": 1})).tags(["a", "b"]),
        NewJob::new("q", "k", json!({"n": 2})).priority(5),
        NewJob::new("q", "k", json!({"n": 3, "f": 1.5e300})).idempotency_key("i1"),
        NewJob::new("q", "k", json!({"n": 4})).idempotency_key("i1"),
    ];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    assert_eq!(
        out.iter().map(|e| e.created).collect::<Vec<_>>(),
        [true, true, true, false]
    );
    assert_eq!(out[3].job.id, out[2].job.id);
    assert_eq!(out[2].job.payload, json!({"n": 3, "f": 1.5e300}));
    assert_eq!(out[0].job.max_attempts, 5);
    assert_eq!(out[0].job.tags, vec!["a", "b"]);

    let claimed = store.claim("t", &claim_req("q", 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    assert_eq!(claimed[0].job.id, out[1].job.id, "priority first");
    assert_eq!(claimed[1].job.id, out[0].job.id, "then run_at/id");
    let tokens: std::collections::HashSet<_> = claimed.iter().map(|c| c.lease_token).collect();
    assert_eq!(tokens.len(), 3, "one token per job");
    for c in &claimed {
        assert_eq!(c.job.state, JobState::Running);
        assert_eq!(c.job.attempt, 1);
        let lease = c.job.lease_expires_at.unwrap() - c.job.heartbeat_at.unwrap();
        assert_eq!(lease.num_milliseconds(), 30_000);
        assert_eq!(c.lease_token.0.get_version_num(), 4);
    }

    let ack = store
        .heartbeat(
            "t",
            &Heartbeat {
                id: claimed[0].job.id,
                lease_token: claimed[0].lease_token,
                lease_ttl_ms: Some(60_000),
                progress: Some(json!({"pct": 50})),
            },
        )
        .await
        .unwrap();
    assert!(!ack.cancel_requested);

    // A wrong token is fenced out, and the history says so.
    let wrong = tether_core::LeaseToken(Uuid::new_v4());
    let err = store
        .complete("t", claimed[0].job.id, wrong, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)), "{err}");
    let err = store
        .complete("t", Uuid::now_v7(), wrong, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::JobNotFound(_)), "{err}");
    let err = store
        .complete(
            "other-tenant",
            claimed[0].job.id,
            claimed[0].lease_token,
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::JobNotFound(_)), "{err}");

    let done = store
        .complete(
            "t",
            claimed[0].job.id,
            claimed[0].lease_token,
            Some(&json!(7)),
        )
        .await
        .unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.result, Some(json!(7)));
    assert!(done.finished_at.is_some());

    let results = store
        .complete_many(
            "t",
            &[
                Completion {
                    id: claimed[1].job.id,
                    lease_token: claimed[1].lease_token,
                    result: None,
                },
                Completion {
                    id: claimed[1].job.id,
                    lease_token: claimed[1].lease_token,
                    result: None,
                },
                Completion {
                    id: claimed[0].job.id,
                    lease_token: claimed[0].lease_token,
                    result: None,
                },
                Completion {
                    id: Uuid::now_v7(),
                    lease_token: wrong,
                    result: None,
                },
            ],
        )
        .await
        .unwrap();
    assert!(results[0].is_ok());
    assert!(
        results[1].is_ok(),
        "a repeated item is answered like the first"
    );
    assert!(
        results[2].is_ok(),
        "a complete repeated with the token that completed the job answers like the first"
    );
    assert!(matches!(results[3], Err(Error::JobNotFound(_))));

    let failed = store
        .fail(
            "t",
            claimed[2].job.id,
            claimed[2].lease_token,
            &Failure {
                error: "boom".into(),
                ..Failure::default()
            },
            1.0,
        )
        .await
        .unwrap();
    assert_eq!(failed.state, JobState::Queued);
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    let delay = failed.run_at - failed.updated_at;
    assert_eq!(delay.num_milliseconds(), 1_000);

    let events = store
        .events("t", claimed[0].job.id, None, 1000)
        .await
        .unwrap()
        .events;
    let kinds: Vec<_> = events.iter().map(|e| e.event).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Enqueued,
            EventKind::Claimed,
            EventKind::LeaseLost,
            EventKind::Succeeded,
        ],
        "the repeated complete in the batch records nothing"
    );
    assert_eq!(events[2].detail.as_deref(), Some("complete"));

    let page = store
        .list(
            "t",
            &JobFilter {
                tag: Some("a".into()),
                ..JobFilter::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 1);
    assert_eq!(page.jobs[0].id, out[0].job.id);

    let stats = store.queue_stats("t", "q").await.unwrap();
    assert_eq!(stats.counts.succeeded, 2);
    assert_eq!(stats.counts.queued, 1);
    assert_eq!(stats.scheduled, 1);
    let never = store.queue_stats("t", "never-used").await.unwrap();
    assert_eq!(never.config, tether_core::QueueConfig::default());
    assert!(!never.paused);
    store.close().await;
}

#[tokio::test]
async fn reaper_buries_exhausted_jobs_and_requeues_the_rest() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![
        NewJob::new("q", "k", json!(1)).max_attempts(1),
        NewJob::new("q", "k", json!(2)).max_attempts(3),
        NewJob::new("q", "k", json!(3)).max_attempts(3),
    ];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let claimed = store.claim("t", &claim_req("q", 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    store.cancel("t", out[2].job.id).await.unwrap();
    sqlx::query(concat!(
        "UPDATE tether_jobs SET lease_expires_at = ",
        now_ms!(),
        " - 1"
    ))
    .execute(&store.writer)
    .await
    .unwrap();
    let report = store.reap_lapsed_leases(100).await.unwrap();
    assert_eq!(
        (report.failed, report.requeued, report.cancelled),
        (1, 1, 1)
    );
    let states: Vec<_> = {
        let mut v = Vec::new();
        for e in &out {
            v.push(store.get("t", e.job.id).await.unwrap().state);
        }
        v
    };
    assert_eq!(
        states,
        [JobState::Failed, JobState::Queued, JobState::Cancelled]
    );
    let events = store
        .events("t", out[0].job.id, None, 1000)
        .await
        .unwrap()
        .events;
    let last = events.last().unwrap();
    assert_eq!(last.event, EventKind::LeaseExpired);
    assert_eq!(last.detail.as_deref(), Some("failed"));
    // The stale holder is fenced out once the reaper took over.
    let err = store
        .complete("t", out[1].job.id, claimed[1].lease_token, None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost(_)));
    store.close().await;
}

#[tokio::test]
async fn concurrent_claimers_never_share_a_job() {
    let db = TempDb::new();
    let store = Arc::new(SqliteStore::open(&db.0).await.unwrap());
    let jobs: Vec<NewJob> = (0..500).map(|i| NewJob::new("q", "k", json!(i))).collect();
    store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = store.claim("t", &claim_req("q", 7)).await.unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|c| c.job.id));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 500);
    assert_eq!(distinct.len(), 500);
    store.close().await;
}

#[tokio::test]
async fn batches_across_insert_chunks_keep_order_and_dedupe() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // 45 entries: chunks of 32, 8, 1, 1, 1, 1, 1. Entry 40 repeats entry 3's
    // idempotency key, entry 44 entry 35's unique key: both across chunks.
    let jobs: Vec<NewJob> = (0..45)
        .map(|i| {
            let job = NewJob::new("q", "k", json!({ "i": i }));
            match i {
                3 | 40 => job.idempotency_key("ik-3"),
                35 | 44 => job.unique_key("uk-35"),
                _ => job,
            }
        })
        .collect();
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    assert_eq!(out.len(), 45);
    for (i, answer) in out.iter().enumerate() {
        match i {
            40 => {
                assert!(!answer.created);
                assert_eq!(answer.job.id, out[3].job.id);
            }
            44 => {
                assert!(!answer.created);
                assert_eq!(answer.job.id, out[35].job.id);
            }
            _ => {
                assert!(answer.created, "entry {i}");
                assert_eq!(answer.job.payload, json!({ "i": i }), "entry {i}");
            }
        }
    }
    let stats = store.queue_stats("t", "q").await.unwrap();
    assert_eq!(stats.counts.queued, 43);
    // One `enqueued` event per created job, none for the duplicates.
    let n: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tether_job_events WHERE event = 'enqueued'")
            .fetch_one(&store.reader)
            .await
            .unwrap();
    assert_eq!(n, 43);
    store.close().await;
}

#[tokio::test]
async fn bulk_replay_takes_one_job_per_unique_key() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let fatal = Failure {
        error: "dead".into(),
        fatal: true,
        ..Failure::default()
    };
    let mut dead = Vec::new();
    // Two dead jobs share unique key u (one at a time was active), one has
    // no key.
    for job in [
        NewJob::new("q", "k", json!(1)).unique_key("u"),
        NewJob::new("q", "k", json!(2)).unique_key("u"),
        NewJob::new("q", "k", json!(3)),
    ] {
        let out = store
            .enqueue("t", &enqueue_refs(&[job]), u32::MAX)
            .await
            .unwrap();
        assert!(out[0].created);
        let c = store
            .claim("t", &claim_req("q", 1))
            .await
            .unwrap()
            .remove(0);
        store
            .fail("t", c.job.id, c.lease_token, &fatal, 1.0)
            .await
            .unwrap();
        dead.push(c.job.id);
    }
    let filter = tether_core::ReplayFilter {
        queue: "q".into(),
        state: JobState::Failed,
        kind: None,
        limit: None,
        cursor: None,
        expires_at: None,
    };
    assert_eq!(store.replay_many("t", &filter).await.unwrap().replayed, 2);
    let states: Vec<JobState> = {
        let mut v = Vec::new();
        for id in &dead {
            v.push(store.get("t", *id).await.unwrap().state);
        }
        v
    };
    assert_eq!(
        states,
        [JobState::Queued, JobState::Failed, JobState::Queued],
        "the oldest job of key u is replayed, the other waits"
    );
    // Now u is held by an active job: the second stays dead.
    assert_eq!(store.replay_many("t", &filter).await.unwrap().replayed, 0);
    assert!(matches!(
        store.replay("t", dead[1], None).await,
        Err(Error::Conflict(_))
    ));
    let events = store.events("t", dead[0], None, 1000).await.unwrap().events;
    assert_eq!(events.last().unwrap().event, EventKind::Replayed);
    store.close().await;
}

#[tokio::test]
async fn listing_pages_newest_first() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs: Vec<NewJob> = (0..7).map(|i| NewJob::new("q", "k", json!(i))).collect();
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list(
                "t",
                &JobFilter {
                    queue: Some("q".into()),
                    limit: Some(3),
                    cursor,
                    ..JobFilter::default()
                },
            )
            .await
            .unwrap();
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut expected: Vec<Uuid> = out.iter().map(|e| e.job.id).collect();
    expected.reverse();
    assert_eq!(seen, expected);
    store.close().await;
}

/// Operations whose futures are dropped at arbitrary points leave every
/// job consistent with its history (a claim and its `claimed` events commit
/// together or not at all) and the writer usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_operations_leave_nothing_half_done() {
    let db = TempDb::new();
    let store = Arc::new(SqliteStore::open(&db.0).await.unwrap());
    let jobs: Vec<NewJob> = (0..300).map(|i| NewJob::new("q", "k", json!(i))).collect();
    store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    for i in 0..300u64 {
        let store = store.clone();
        let budget = std::time::Duration::from_micros(i % 40 * 25);
        let _ = tokio::time::timeout(budget, async move {
            let claimed = store.claim("t", &claim_req("q", 3)).await?;
            let items: Vec<Completion> = claimed
                .iter()
                .map(|c| Completion {
                    id: c.job.id,
                    lease_token: c.lease_token,
                    result: None,
                })
                .collect();
            if !items.is_empty() {
                store.complete_many("t", &items).await?;
            }
            Ok::<(), Error>(())
        })
        .await;
    }
    // The writer still works, and nothing is left inside a transaction.
    store.acquire_lease("check", "me", 10_000).await.unwrap();
    let inconsistent: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tether_jobs AS j WHERE j.attempt <> \
         (SELECT count(*) FROM tether_job_events AS e WHERE e.job_id = j.id AND e.event = 'claimed') \
         OR (j.state = 'succeeded') <> EXISTS (SELECT 1 FROM tether_job_events AS e \
             WHERE e.job_id = j.id AND e.event = 'succeeded')",
    )
    .fetch_one(&store.reader)
    .await
    .unwrap();
    assert_eq!(inconsistent, 0);
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM tether_jobs")
        .fetch_one(&store.reader)
        .await
        .unwrap();
    assert_eq!(total, 300);
    store.close().await;
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn clock_controls_move_time_forward() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let jobs = vec![NewJob::new("q", "k", json!(1)).run_at(tether_core::RunAt::Delay(3_600_000))];
    let out = store
        .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
        .await
        .unwrap();
    let id = out[0].job.id;
    assert!(store
        .claim("t", &claim_req("q", 1))
        .await
        .unwrap()
        .is_empty());
    store.make_due(id).await.unwrap();
    let claimed = store.claim("t", &claim_req("q", 1)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(matches!(
        store.make_due(id).await,
        Err(Error::InvalidState { .. })
    ));
    assert!(matches!(
        store.lapse_lease(Uuid::now_v7()).await,
        Err(Error::JobNotFound(_))
    ));
    assert_eq!(store.reap_lapsed_leases(10).await.unwrap().total(), 0);
    store.lapse_lease(id).await.unwrap();
    assert_eq!(store.reap_lapsed_leases(10).await.unwrap().requeued, 1);

    let lease = store
        .acquire_lease("m", "a", 10_000)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .acquire_lease("m", "b", 10_000)
        .await
        .unwrap()
        .is_none());
    store.lapse_named_lease("m").await.unwrap();
    let taken = store
        .acquire_lease("m", "b", 10_000)
        .await
        .unwrap()
        .unwrap();
    assert_ne!(taken.token, lease.token);
    assert!(matches!(
        store.renew_lease("m", lease.token, 10_000).await,
        Err(Error::NamedLeaseLost(_))
    ));
    assert!(store.lapse_named_lease("nope").await.is_err());
    store.close().await;
}

/// An enqueue that returned is on disk: a process killed with SIGKILL right
/// after loses none of the jobs it was told about.
#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    use std::io::BufRead;
    let db = TempDb::new();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tests::kill_9_child", "--ignored", "--nocapture"])
        .env("TETHER_KILL9_DB", &db.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut acked = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(id) = line.strip_prefix("ACK ") {
            acked.push(Uuid::parse_str(id).unwrap());
            if acked.len() == 200 {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no clean close.
    child.wait().unwrap();
    assert_eq!(acked.len(), 200, "the child stopped early");
    let store = SqliteStore::open(&db.0).await.unwrap();
    for id in acked {
        store.get("t", id).await.unwrap();
    }
    store.close().await;
}

/// The child process of `acknowledged_writes_survive_kill_9`: enqueues jobs
/// one at a time forever, printing each id once the enqueue returned. Does
/// nothing when run on its own.
#[tokio::test]
#[ignore]
async fn kill_9_child() {
    use std::io::Write;
    let Ok(path) = std::env::var("TETHER_KILL9_DB") else {
        return;
    };
    let store = SqliteStore::open(path).await.unwrap();
    loop {
        let jobs = [NewJob::new("q", "k", json!({}))];
        let out = store
            .enqueue("t", &enqueue_refs(&jobs), u32::MAX)
            .await
            .unwrap();
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "ACK {}", out[0].job.id).unwrap();
        stdout.flush().unwrap();
    }
}

// ---------------------------------------------------------------------------
// Schedules. Their behaviour is proven by the shared suite; these check what
// is particular to SQLite: fires racing across two stores (two processes) on
// one file, the fire and its enqueue sharing one transaction, the rows and
// the query plans.
// ---------------------------------------------------------------------------

mod schedules {
    use std::time::Duration;

    use chrono::{DateTime, TimeZone, Utc};
    use tether_core::schedule::{
        fire_key, Fire, FireOutcome, Overlap, RunOutcome, Schedule, ScheduleRun, ScheduleSpec,
    };

    use super::*;

    /// A fixed instant well in the past, so it is due.
    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    fn minutes(n: i64) -> chrono::TimeDelta {
        chrono::TimeDelta::minutes(n)
    }

    fn spec(name: &str) -> ScheduleSpec {
        ScheduleSpec::new(name, "* * * * *", "q", "tick")
    }

    /// The fire the engine would ask for: the run at `at`, next one a
    /// minute later.
    fn fire_of(s: &Schedule, expected: DateTime<Utc>, at: DateTime<Utc>) -> Fire {
        Fire {
            schedule_id: s.id,
            tenant: s.tenant.clone(),
            expected_next_run_at: expected,
            fire_at: at,
            next_run_at: Some(at + minutes(1)),
            job: NewJob::new(&s.spec.queue, &s.spec.kind, s.spec.payload.clone())
                .idempotency_key(fire_key(s.id, at)),
            overlap: s.spec.overlap,
        }
    }

    async fn fire(store: &SqliteStore, fire: &Fire) -> FireOutcome {
        store.fire_schedule(fire, Uuid::now_v7()).await.unwrap()
    }

    async fn count(store: &SqliteStore, sql: &str) -> i64 {
        sqlx::query_scalar(sql)
            .fetch_one(&store.reader)
            .await
            .unwrap()
    }

    fn not_found(err: Error, id: Uuid) {
        match err {
            Error::NotFound(msg) => assert_eq!(msg, format!("schedule {id}")),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }

    /// Invariant 11 across processes: two stores on one file (as two
    /// `tether serve` replicas would have) race 20 fires for the same
    /// `(schedule, next_run_at)`, five rounds in a row. Each round exactly
    /// one fire runs and makes exactly one job; the others find the
    /// timetable moved.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_fires_from_two_stores_fire_once() {
        let db = TempDb::new();
        let a = SqliteStore::open(&db.0).await.unwrap();
        let b = SqliteStore::open(&db.0).await.unwrap();
        let s = a
            .create_schedule("t", &spec("every-minute"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let mut jobs = Vec::new();
        for round in 0..5 {
            let at = t0() + minutes(round);
            let f = Arc::new(fire_of(&s, at, at));
            let handles: Vec<_> = (0..20)
                .map(|i| {
                    let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                    let f = f.clone();
                    tokio::spawn(async move { store.fire_schedule(&f, Uuid::now_v7()).await })
                })
                .collect();
            let mut ran = Vec::new();
            let mut raced = 0;
            for handle in handles {
                match handle.await.unwrap().unwrap() {
                    FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) => ran.push(id),
                    FireOutcome::Raced => raced += 1,
                    other => panic!("unexpected outcome {other:?}"),
                }
            }
            assert_eq!(ran.len(), 1, "round {round}: {ran:?}");
            assert_eq!(raced, 19);
            let job = a.get("t", ran[0]).await.unwrap();
            assert_eq!(job.idempotency_key, Some(fire_key(s.id, at)));
            jobs.push(job.id);
        }
        let n = count(&a, "SELECT count(*) FROM tether_jobs").await;
        assert_eq!(n, 5, "one job per fire key");
        let runs = b.schedule_runs("t", s.id, 100).await.unwrap();
        let expected: Vec<ScheduleRun> = (0..5)
            .rev()
            .map(|round| ScheduleRun {
                fire_at: t0() + minutes(round),
                job_id: Some(jobs[round as usize]),
                outcome: RunOutcome::Enqueued,
            })
            .collect();
        assert_eq!(runs, expected, "newest first");
        let s = b.get_schedule("t", s.id).await.unwrap();
        assert_eq!(s.next_run_at, Some(t0() + minutes(5)));
        assert_eq!(s.last_run_at, Some(t0() + minutes(4)));
        assert_eq!(s.last_job_id, Some(jobs[4]));
        a.close().await;
        b.close().await;
    }

    /// The job of a fire key that exists already (as it would after a crash
    /// between the enqueue and the timetable on a backend that could split
    /// them) is the run's job: no second one is made.
    #[tokio::test]
    async fn a_fire_whose_job_exists_takes_that_job() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let earlier =
            [NewJob::new("q", "tick", json!("earlier")).idempotency_key(fire_key(s.id, t0()))];
        let earlier = store
            .enqueue("t", &enqueue_refs(&earlier), u32::MAX)
            .await
            .unwrap();
        let earlier = earlier[0].job.id;

        let mut wakeup = store.subscribe("t", "q");
        let outcome = fire(&store, &fire_of(&s, t0(), t0())).await;
        assert_eq!(
            outcome,
            FireOutcome::Ran(RunOutcome::Enqueued, Some(earlier))
        );
        assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 1);
        assert_eq!(
            store.get("t", earlier).await.unwrap().payload,
            json!("earlier")
        );
        let s = store.get_schedule("t", s.id).await.unwrap();
        assert_eq!(s.last_job_id, Some(earlier));
        assert_eq!(s.next_run_at, Some(t0() + minutes(1)));
        let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
        assert_eq!(runs[0].job_id, Some(earlier));
        // Nothing new was made, so nobody is woken.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), wakeup.hinted())
                .await
                .is_err()
        );

        // A fire that does make a job wakes the queue's workers.
        let outcome = fire(&store, &fire_of(&s, t0() + minutes(1), t0() + minutes(1))).await;
        assert!(
            matches!(outcome, FireOutcome::Ran(RunOutcome::Enqueued, Some(id)) if id != earlier)
        );
        tokio::time::timeout(Duration::from_secs(1), wakeup.hinted())
            .await
            .unwrap();
        store.close().await;
    }

    /// The compare-and-set, the job and the run commit together: a fire
    /// whose enqueue fails leaves the timetable where it was.
    #[tokio::test]
    async fn a_failed_enqueue_leaves_the_timetable_alone() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let mut bad = fire_of(&s, t0(), t0());
        // Out of the CHECK's range: only the engine's validation keeps such
        // a job out, so the INSERT fails inside the fire's transaction.
        bad.job = bad.job.priority(1_000);
        assert!(store.fire_schedule(&bad, Uuid::now_v7()).await.is_err());
        let after = store.get_schedule("t", s.id).await.unwrap();
        assert_eq!(after, s);
        assert!(store.schedule_runs("t", s.id, 10).await.unwrap().is_empty());
        assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 0);
        // The writer is clean and the fire can happen.
        let outcome = fire(&store, &fire_of(&s, t0(), t0())).await;
        assert!(matches!(
            outcome,
            FireOutcome::Ran(RunOutcome::Enqueued, Some(_))
        ));
        store.close().await;
    }

    /// Overlap `skip` records a skipped run while the last job is queued or
    /// running, and enqueues again once it finished.
    #[tokio::test]
    async fn overlap_skip_waits_for_the_last_job() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s").overlap(Overlap::Skip), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let at = |n| t0() + minutes(n);
        let FireOutcome::Ran(RunOutcome::Enqueued, Some(first)) =
            fire(&store, &fire_of(&s, at(0), at(0))).await
        else {
            panic!("the first fire enqueues");
        };
        // Queued: skipped.
        assert_eq!(
            fire(&store, &fire_of(&s, at(1), at(1))).await,
            FireOutcome::Ran(RunOutcome::Skipped, None)
        );
        // Running: skipped.
        let claimed = store.claim("t", &claim_req("q", 1)).await.unwrap();
        assert_eq!(claimed[0].job.id, first);
        assert_eq!(
            fire(&store, &fire_of(&s, at(2), at(2))).await,
            FireOutcome::Ran(RunOutcome::Skipped, None)
        );
        assert_eq!(
            store.get_schedule("t", s.id).await.unwrap().last_job_id,
            Some(first),
            "a skipped run keeps the last job"
        );
        // Finished: enqueued.
        store
            .complete("t", first, claimed[0].lease_token, None)
            .await
            .unwrap();
        let outcome = fire(&store, &fire_of(&s, at(3), at(3))).await;
        let FireOutcome::Ran(RunOutcome::Enqueued, Some(second)) = outcome else {
            panic!("expected an enqueue, got {outcome:?}");
        };
        let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
        let outcomes: Vec<_> = runs.iter().map(|r| (r.outcome, r.job_id)).collect();
        assert_eq!(
            outcomes,
            vec![
                (RunOutcome::Enqueued, Some(second)),
                (RunOutcome::Skipped, None),
                (RunOutcome::Skipped, None),
                (RunOutcome::Enqueued, Some(first)),
            ]
        );
        let s = store.get_schedule("t", s.id).await.unwrap();
        assert_eq!(
            s.next_run_at,
            Some(at(4)),
            "skipped runs advance the timetable"
        );
        store.close().await;
    }

    /// Invariant 13: another tenant's schedule does not exist for it, and
    /// names are unique per tenant only.
    #[tokio::test]
    async fn schedules_are_walled_by_tenant() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("a", &spec("nightly"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        assert_eq!(s.tenant, "a");
        // Same name, other tenant: fine.
        let other = store
            .create_schedule("b", &spec("nightly"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        assert_ne!(other.id, s.id);

        not_found(store.get_schedule("b", s.id).await.unwrap_err(), s.id);
        not_found(
            store
                .update_schedule("b", s.id, &spec("x"), None)
                .await
                .unwrap_err(),
            s.id,
        );
        not_found(store.delete_schedule("b", s.id).await.unwrap_err(), s.id);
        not_found(store.schedule_runs("b", s.id, 10).await.unwrap_err(), s.id);
        let job = NewJob::new("q", "tick", json!(null));
        let job_ref = NewJobRef {
            id: Uuid::now_v7(),
            job: &job,
        };
        not_found(
            store
                .trigger_schedule("b", s.id, job_ref)
                .await
                .unwrap_err(),
            s.id,
        );
        let mut wrong_tenant = fire_of(&s, t0(), t0());
        wrong_tenant.tenant = "b".into();
        assert_eq!(fire(&store, &wrong_tenant).await, FireOutcome::Raced);
        let listed: Vec<Uuid> = store
            .list_schedules("b")
            .await
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect();
        assert_eq!(listed, vec![other.id]);
        // Nothing of "a" was touched.
        assert_eq!(store.get_schedule("a", s.id).await.unwrap(), s);
        assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 0);

        // A taken name, on create and on rename.
        match store
            .create_schedule("a", &spec("nightly"), None, u32::MAX)
            .await
        {
            Err(Error::AlreadyExists(msg)) => assert_eq!(msg, "schedule \"nightly\""),
            other => panic!("expected AlreadyExists, got {other:?}"),
        }
        let second = store
            .create_schedule("a", &spec("hourly"), None, u32::MAX)
            .await
            .unwrap();
        let err = store
            .update_schedule("a", second.id, &spec("nightly"), None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
        assert_eq!(err.to_string(), "schedule \"nightly\" already exists");
        // The writer is usable after the refused UPDATE.
        store
            .update_schedule("a", second.id, &spec("hourly-2"), None)
            .await
            .unwrap();
        store.close().await;
    }

    /// Every field round-trips, any JSON payload included; an update keeps
    /// the runs and `last_*`.
    #[tokio::test]
    async fn schedule_rows_round_trip() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        for payload in [
            json!(null),
            json!(0),
            json!("text ✓"),
            json!([1, {"a": null}]),
            json!({"nested": {"list": [true, false], "n": -1.5}}),
        ] {
            let name = format!("p{}", Uuid::new_v4().simple());
            let spec = ScheduleSpec::new(&name, "0 30 2 * * *", "q", "k")
                .timezone("Europe/Berlin")
                .payload(payload.clone())
                .enabled(false)
                .overlap(Overlap::Skip);
            let s = store
                .create_schedule("t", &spec, None, u32::MAX)
                .await
                .unwrap();
            assert_eq!(s.spec, spec);
            assert_eq!(s.next_run_at, None);
            assert_eq!((s.last_run_at, s.last_job_id), (None, None));
            assert_eq!(s.created_at, s.updated_at);
            assert_eq!(store.get_schedule("t", s.id).await.unwrap(), s);
        }

        let s = store
            .create_schedule("t", &spec("main"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let FireOutcome::Ran(_, Some(job)) = fire(&store, &fire_of(&s, t0(), t0())).await else {
            panic!("fire");
        };
        let new_spec = spec("main-renamed")
            .payload(json!({"v": 2}))
            .overlap(Overlap::Skip);
        let updated = store
            .update_schedule("t", s.id, &new_spec, Some(t0() + minutes(10)))
            .await
            .unwrap();
        assert_eq!(updated.spec, new_spec);
        assert_eq!(updated.next_run_at, Some(t0() + minutes(10)));
        assert_eq!(updated.last_run_at, Some(t0()));
        assert_eq!(updated.last_job_id, Some(job));
        assert_eq!(updated.created_at, s.created_at);
        assert!(updated.updated_at >= s.updated_at);
        assert_eq!(store.schedule_runs("t", s.id, 10).await.unwrap().len(), 1);
        // The old timetable no longer fires.
        assert_eq!(
            fire(&store, &fire_of(&s, t0() + minutes(1), t0() + minutes(1))).await,
            FireOutcome::Raced
        );

        let names: Vec<String> = store
            .list_schedules("t")
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.spec.name)
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "listed by name");
        assert_eq!(names.len(), 6);
        store.close().await;
    }

    /// A disabled schedule does not fire, even with a stale read of it.
    #[tokio::test]
    async fn a_disabled_schedule_does_not_fire() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        // Disabled but (wrongly) keeping its next_run_at: still no fire.
        store
            .update_schedule("t", s.id, &spec("s").enabled(false), Some(t0()))
            .await
            .unwrap();
        assert_eq!(
            fire(&store, &fire_of(&s, t0(), t0())).await,
            FireOutcome::Raced
        );
        assert!(store.due_schedules(10).await.unwrap().1.is_empty());
        assert_eq!(store.next_schedule_due().await.unwrap().1, None);
        store.close().await;
    }

    /// Deleting a schedule deletes its runs, not its jobs.
    #[tokio::test]
    async fn delete_takes_the_runs_and_leaves_the_jobs() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let keep = store
            .create_schedule("t", &spec("keep"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        fire(&store, &fire_of(&s, t0(), t0())).await;
        fire(&store, &fire_of(&keep, t0(), t0())).await;
        let job = NewJob::new("q", "tick", json!(null));
        let triggered = store
            .trigger_schedule(
                "t",
                s.id,
                NewJobRef {
                    id: Uuid::now_v7(),
                    job: &job,
                },
            )
            .await
            .unwrap();
        store.delete_schedule("t", s.id).await.unwrap();
        not_found(store.get_schedule("t", s.id).await.unwrap_err(), s.id);
        not_found(store.schedule_runs("t", s.id, 10).await.unwrap_err(), s.id);
        not_found(store.delete_schedule("t", s.id).await.unwrap_err(), s.id);
        let runs = count(&store, "SELECT count(*) FROM tether_schedule_runs").await;
        assert_eq!(runs, 1, "only the other schedule's run is left");
        store.get("t", triggered.id).await.unwrap();
        assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 3);
        store.close().await;
    }

    /// A trigger enqueues now, records a run stamped now, and leaves the
    /// timetable alone.
    #[tokio::test]
    async fn a_trigger_runs_outside_the_timetable() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let next = Utc::now() + minutes(60);
        let spec = spec("s").payload(json!({"from": "trigger"}));
        let s = store
            .create_schedule("t", &spec, Some(next), u32::MAX)
            .await
            .unwrap();
        let mut wakeup = store.subscribe("t", "q");
        let job = NewJob::new("q", "tick", json!({"from": "trigger"})).idempotency_key("trig-1");
        let before = Utc::now() - minutes(1);
        let triggered = store
            .trigger_schedule(
                "t",
                s.id,
                NewJobRef {
                    id: Uuid::now_v7(),
                    job: &job,
                },
            )
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(1), wakeup.hinted())
            .await
            .unwrap();
        assert_eq!(triggered.state, JobState::Queued);
        assert_eq!(triggered.kind, "tick");
        assert_eq!(triggered.payload, json!({"from": "trigger"}));
        let after = store.get_schedule("t", s.id).await.unwrap();
        assert_eq!(after.next_run_at, s.next_run_at);
        assert_eq!(after.last_job_id, Some(triggered.id));
        let stamp = after.last_run_at.unwrap();
        assert!(stamp > before && stamp <= triggered.created_at + minutes(1));
        let runs = store.schedule_runs("t", s.id, 10).await.unwrap();
        assert_eq!(
            runs,
            vec![ScheduleRun {
                fire_at: stamp,
                job_id: Some(triggered.id),
                outcome: RunOutcome::Enqueued,
            }]
        );
        store.close().await;
    }

    /// The scheduler's reads: due schedules of every tenant, earliest first,
    /// with the database's clock.
    #[tokio::test]
    async fn due_schedules_span_tenants_earliest_first() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let (now, due) = store.due_schedules(10).await.unwrap();
        assert!(due.is_empty());
        assert!((Utc::now() - now).num_seconds().abs() < 5, "the db clock");
        assert_eq!(store.next_schedule_due().await.unwrap().1, None);

        let later = store
            .create_schedule("a", &spec("later"), Some(t0() + minutes(2)), u32::MAX)
            .await
            .unwrap();
        let first = store
            .create_schedule("b", &spec("first"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        let future = Utc::now() + minutes(60);
        store
            .create_schedule("a", &spec("future"), Some(future), u32::MAX)
            .await
            .unwrap();
        store
            .create_schedule("c", &spec("off").enabled(false), None, u32::MAX)
            .await
            .unwrap();
        let (_, due) = store.due_schedules(10).await.unwrap();
        let ids: Vec<(Uuid, &str)> = due.iter().map(|s| (s.id, s.tenant.as_str())).collect();
        assert_eq!(ids, vec![(first.id, "b"), (later.id, "a")]);
        let (_, due) = store.due_schedules(1).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].id, first.id);
        assert!(store.due_schedules(0).await.unwrap().1.is_empty());
        assert_eq!(store.next_schedule_due().await.unwrap().1, Some(t0()));

        store.close().await;
    }

    /// Pruning is bounded by its batch and spares recent runs.
    #[tokio::test]
    async fn pruning_runs_is_bounded() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let s = store
            .create_schedule("t", &spec("s"), Some(t0()), u32::MAX)
            .await
            .unwrap();
        for n in 0..3 {
            let at = t0() + minutes(n);
            fire(&store, &fire_of(&s, at, at)).await;
        }
        assert_eq!(store.prune_schedule_runs(3_600_000, 10).await.unwrap(), 0);
        assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 2);
        assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 1);
        assert_eq!(store.prune_schedule_runs(0, 2).await.unwrap(), 0);
        assert!(store.schedule_runs("t", s.id, 10).await.unwrap().is_empty());
        assert_eq!(count(&store, "SELECT count(*) FROM tether_jobs").await, 3);
        store.close().await;
    }

    /// The statements the scheduler runs every tick use their indexes
    /// instead of scanning every schedule or run.
    #[tokio::test]
    async fn schedule_queries_use_their_indexes() {
        let db = TempDb::new();
        let store = SqliteStore::open(&db.0).await.unwrap();
        let plan = |sql: String| {
            let store = store.clone();
            async move {
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                        .fetch_all(&store.reader)
                        .await
                        .unwrap();
                rows.into_iter()
                    .map(|r| r.3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            }
        };
        let due = plan(
            crate::sql::schedules::DUE_SCHEDULES
                .replace("?1", "1767225600000")
                .replace("?2", "10"),
        )
        .await;
        assert!(due.contains("tether_schedules_due"), "{due}");
        assert!(!due.contains("TEMP B-TREE"), "{due}");
        let next = plan(crate::sql::schedules::NEXT_SCHEDULE_DUE.to_owned()).await;
        assert!(next.contains("tether_schedules_due"), "{next}");
        let runs = plan(
            crate::sql::schedules::SCHEDULE_RUNS
                .replace("?1", "'t'")
                .replace("?2", "'x'")
                .replace("?3", "10"),
        )
        .await;
        assert!(runs.contains("tether_schedule_runs_schedule"), "{runs}");
        assert!(!runs.contains("TEMP B-TREE"), "{runs}");
        let prune = plan(
            crate::sql::schedules::PRUNE_SCHEDULE_RUNS
                .replace("?1", "0")
                .replace("?2", "10"),
        )
        .await;
        assert!(prune.contains("tether_schedule_runs_recorded"), "{prune}");
        store.close().await;
    }
}
