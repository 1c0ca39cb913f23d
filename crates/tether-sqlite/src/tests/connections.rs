//! The file and its connections: migrations, file modes, pragmas, SQLite's
//! clock, transaction hygiene on the single writer, and durability.

use super::*;

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
            (4, "key_hardening".to_owned()),
            (5, "flow_control".to_owned()),
            (6, "rate_and_keys".to_owned()),
            (7, "history_time".to_owned()),
            (8, "report_digest".to_owned()),
            (9, "tenant_suspension".to_owned()),
            (10, "outcome_history_time".to_owned()),
            (11, "dependencies".to_owned()),
            (12, "workflows".to_owned()),
            (13, "dependency_plans".to_owned()),
            (14, "release_unmet".to_owned()),
            (15, "event_feed".to_owned()),
            (16, "workflow_events".to_owned()),
            (17, "job_headers".to_owned()),
            (18, "worker_presence".to_owned())
        ]
    );
    assert_eq!(SqliteStore::schema_version(), 18);
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
    assert_eq!(n, SqliteStore::schema_version());
    for store in &stores {
        store.close().await;
    }
}

#[tokio::test]
async fn pragmas_hold_on_every_connection() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    // Hold several read connections at once so more than one is checked.
    let mut conns = Vec::new();
    for _ in 0..crate::READ_CONNECTIONS {
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
        // The cascade of `tether_jobs_dependency_ended` (migration 11).
        let recursive: i64 = sqlx::query_scalar("PRAGMA recursive_triggers")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(recursive, 1);
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
                .map(tether_core::ClaimedJob::success)
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

/// An enqueue that returned is on disk: a process killed with SIGKILL right
/// after loses none of the jobs it was told about.
#[tokio::test]
async fn acknowledged_writes_survive_kill_9() {
    use std::io::BufRead;
    let db = TempDb::new();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tests::connections::kill_9_child",
            "--ignored",
            "--nocapture",
        ])
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
