//! PostgreSQL-only behaviours: wake-up hints that cross processes (two
//! stores with their own pools stand in for two processes; SQLite hints are
//! in-process by design, its workers find other processes' jobs by polling),
//! and enqueueing inside the caller's own transaction.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sqlx::postgres::PgPool;
use tether_core::{Engine, Error, Limits, NewJob};
use tether_postgres::{enqueue_in, PgStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_in_one_process_wakes_a_worker_in_another() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let other = Engine::new(Arc::new(
        PgStore::connect(&url).await.expect("second store"),
    ));
    let mut wakeup = other.subscribe("t", "q").expect("subscribe");
    // Let the listener connect (it wakes everyone once when it does).
    let _ = tokio::time::timeout(Duration::from_secs(2), wakeup.hinted()).await;

    for round in 0..3 {
        db.engine
            .enqueue("t", NewJob::new("q", "k", json!({ "round": round })))
            .await
            .expect("enqueue");
        tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
            .await
            .unwrap_or_else(|_| panic!("round {round}: no hint crossed to the other store"));
    }
    drop(other);
    db.cleanup().await;
}

/// A job enqueued in the caller's transaction exists if and only if that
/// transaction commits, appears to others only at commit, and its wake-up
/// hint is delivered at commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_in_a_transaction_exists_iff_it_commits() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let app = PgPool::connect(&url).await.expect("application pool");
    sqlx::query("CREATE TABLE orders (id int PRIMARY KEY)")
        .execute(&app)
        .await
        .expect("application table");
    let limits = Limits::default();

    // Rolled back: neither the order nor its job exists.
    let mut tx = app.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES (1)")
        .execute(&mut *tx)
        .await
        .expect("business write");
    let rolled = enqueue_in(
        &mut tx,
        "t",
        &[NewJob::new("q", "ship", json!({"order": 1}))],
        &limits,
    )
    .await
    .expect("enqueue in transaction");
    tx.rollback().await.expect("rollback");
    assert!(matches!(
        db.engine.get("t", rolled[0].job.id).await,
        Err(Error::JobNotFound(_))
    ));

    // Committed: invisible until the commit, then there and claimable.
    let mut wakeup = db.engine.subscribe("t", "q").expect("subscribe");
    let _ = tokio::time::timeout(Duration::from_secs(2), wakeup.hinted()).await;
    let mut tx = app.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES (2)")
        .execute(&mut *tx)
        .await
        .expect("business write");
    let kept = enqueue_in(
        &mut tx,
        "t",
        &[NewJob::new("q", "ship", json!({"order": 2}))],
        &limits,
    )
    .await
    .expect("enqueue in transaction");
    let id = kept[0].job.id;
    assert!(kept[0].created);
    assert!(matches!(
        db.engine.get("t", id).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), wakeup.hinted())
            .await
            .is_err(),
        "the hint must wait for the commit"
    );
    tx.commit().await.expect("commit");
    tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
        .await
        .expect("the hint arrives after the commit");
    assert_eq!(db.engine.get("t", id).await.expect("committed job").id, id);
    let claimed = db
        .engine
        .claim(
            "t",
            &tether_core::ClaimRequest {
                queue: "q".into(),
                worker_id: "w".into(),
                limit: 10,
                lease_ttl_ms: None,
            },
        )
        .await
        .expect("claim");
    assert_eq!(
        claimed.iter().map(|c| c.job.id).collect::<Vec<_>>(),
        vec![id]
    );

    // Bad input is refused before anything is written.
    let mut tx = app.begin().await.expect("begin");
    assert!(matches!(
        enqueue_in(
            &mut tx,
            "t",
            &[NewJob::new("bad queue", "k", json!(null))],
            &limits
        )
        .await,
        Err(Error::Invalid { .. })
    ));
    tx.rollback().await.expect("rollback");
    app.close().await;
    db.cleanup().await;
}

/// The listener survives losing its connection: after PostgreSQL drops it,
/// it reconnects, listens again, and hints cross once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_listener_reconnects_and_hints_flow_again() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let database = url.rsplit('/').next().expect("database name").to_owned();
    let other = Engine::new(Arc::new(
        PgStore::connect(&url).await.expect("second store"),
    ));
    let mut wakeup = other.subscribe("t", "q").expect("subscribe");
    let _ = tokio::time::timeout(Duration::from_secs(2), wakeup.hinted()).await;

    let admin = PgPool::connect(&url).await.expect("admin pool");
    let killed: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
         WHERE datname = $1 AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .bind(&database)
    .fetch_all(&admin)
    .await
    .expect("find listeners");
    assert!(!killed.is_empty(), "a LISTEN connection exists");
    for pid in &killed {
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&admin)
            .await
            .expect("terminate listener");
    }
    // The reconnect wakes everyone once (hints may have been missed); let it
    // happen, then check that a fresh hint still crosses.
    let _ = tokio::time::timeout(Duration::from_secs(3), wakeup.hinted()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = tokio::time::timeout(Duration::from_millis(200), wakeup.hinted()).await;
    db.engine
        .enqueue("t", NewJob::new("q", "k", json!("after reconnect")))
        .await
        .expect("enqueue");
    tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
        .await
        .expect("a hint crosses after the listener reconnected");
    admin.close().await;
    drop(other);
    db.cleanup().await;
}

/// A worker's heartbeat cycle and its completion batches name the same
/// running jobs at once, in any order. The heartbeat never waits for a row
/// while it holds others (it skips held rows, then takes each of those on
/// its own), so the two never deadlock (PostgreSQL would abort one of them
/// after `deadlock_timeout`), and every lease is still extended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_and_completions_of_the_same_jobs_never_deadlock() {
    use tether_core::{ClaimRequest, ClaimedJob, Completion, Heartbeat};
    let db = tether_conformance::postgres().await;
    for round in 0..5 {
        let jobs: Vec<NewJob> = (0..200)
            .map(|i| NewJob::new("q", "k", json!({ "round": round, "i": i })))
            .collect();
        db.engine.enqueue_many("t", &jobs).await.expect("enqueue");
        let req = ClaimRequest {
            queue: "q".into(),
            worker_id: "w".into(),
            limit: 200,
            lease_ttl_ms: None,
        };
        let mut claimed = db.engine.claim("t", &req).await.expect("claim");
        assert_eq!(claimed.len(), 200);
        // Newest first: the opposite of the order the locks are taken in.
        claimed.sort_by_key(|c| std::cmp::Reverse(c.job.id));
        let beats: Vec<Heartbeat> = claimed.iter().map(ClaimedJob::heartbeat).collect();
        let completions: Vec<Vec<Completion>> = claimed
            .chunks(50)
            .map(|chunk| chunk.iter().map(ClaimedJob::success).collect())
            .collect();
        let heartbeat = {
            let engine = db.engine.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    let answers = engine.heartbeat_many("t", &beats).await.expect("heartbeat");
                    // A job is either still held (extended) or completed by
                    // now (its token no longer holds it): never anything else.
                    for answer in answers {
                        match answer {
                            Ok(_) | Err(Error::LeaseLost(_)) => {}
                            Err(e) => panic!("heartbeat item: {e}"),
                        }
                    }
                }
            })
        };
        let mut batches = Vec::new();
        for items in completions {
            let engine = db.engine.clone();
            batches.push(tokio::spawn(async move {
                let answers = engine.complete_many("t", &items).await.expect("complete");
                assert!(answers.iter().all(|a| a.is_ok()), "every completion lands");
            }));
        }
        heartbeat.await.expect("heartbeat task");
        for b in batches {
            b.await.expect("completion task");
        }
    }
    db.cleanup().await;
}

/// The batch completion never reads its rows through a partial index of
/// running or finished jobs (which would read all of them for a batch of
/// a hundred), even with statistics that make such an index look cheap and
/// with the generic plan a prepared statement ends up with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_completion_reads_rows_by_primary_key_whatever_the_statistics() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let pool = PgPool::connect(&url).await.expect("pool");
    // Statistics of a table with nothing running: the running index is
    // then the cheapest-looking way to every running job.
    let jobs: Vec<NewJob> = (0..500).map(|i| NewJob::new("q", "k", json!(i))).collect();
    db.engine.enqueue_many("t", &jobs).await.expect("enqueue");
    sqlx::query("ANALYZE tether.jobs")
        .execute(&pool)
        .await
        .expect("analyze");
    let mut conn = pool.acquire().await.expect("connection");
    sqlx::query("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *conn)
        .await
        .expect("generic plans");
    sqlx::query(&format!(
        "PREPARE complete_many (text, uuid[], uuid[], jsonb[], text[]) AS {}",
        tether_postgres::reference_sql::COMPLETE_MANY
    ))
    .execute(&mut *conn)
    .await
    .expect("prepare");
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN (COSTS OFF) EXECUTE complete_many('t', ARRAY[gen_random_uuid()], ARRAY[gen_random_uuid()], ARRAY[NULL::jsonb], ARRAY[NULL::text])",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("explain");
    let plan = plan.join("\n");
    for partial in ["jobs_running", "jobs_done", "jobs_queued", "jobs_claim"] {
        assert!(!plan.contains(partial), "{partial} in\n{plan}");
    }
    drop(conn);
    pool.close().await;
    db.cleanup().await;
}

/// A limited claim that waited for its turn on the queue's row records the
/// time it took effect, not the time it started waiting: its job's
/// `started_at` and `claimed` event are never before the end of the job
/// whose slot it took, so a check of the history (no instant with more
/// running jobs than the limit) reads the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_claim_that_waited_records_when_it_took_effect() {
    use tether_core::{ClaimRequest, EventKind, QueueConfigPatch};
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let engine = db.engine.clone();
    let limit = QueueConfigPatch {
        max_running: Some(Some(1)),
        ..Default::default()
    };
    engine
        .configure_queue("t", "q", &limit)
        .await
        .expect("limit");
    for _ in 0..2 {
        engine
            .enqueue("t", NewJob::new("q", "k", json!({})))
            .await
            .expect("enqueue");
    }
    let req = ClaimRequest {
        queue: "q".into(),
        worker_id: "w".into(),
        limit: 1,
        lease_ttl_ms: None,
    };
    let first = engine.claim("t", &req).await.expect("claim").remove(0);

    // Hold the queue's row, so the next claim waits for its turn.
    let pool = PgPool::connect(&url).await.expect("pool");
    let mut holder = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM tether.queues WHERE tenant = 't' AND name = 'q' FOR UPDATE")
        .execute(&mut *holder)
        .await
        .expect("lock");
    let waiting = {
        let (engine, req) = (engine.clone(), req.clone());
        tokio::spawn(async move { engine.claim("t", &req).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done = engine
        .complete("t", first.job.id, first.lease_token, None)
        .await
        .expect("complete");
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.commit().await.expect("release");
    let second = waiting.await.expect("task").expect("claim").remove(0);

    let ended = done.finished_at.expect("finished_at");
    let started = second.job.started_at.expect("started_at");
    assert!(
        started >= ended,
        "claimed at {started}, before the slot freed at {ended}"
    );
    let claimed_at = engine
        .events("t", second.job.id)
        .await
        .expect("events")
        .into_iter()
        .filter(|e| e.event == EventKind::Claimed)
        .map(|e| e.at)
        .next_back()
        .expect("a claimed event");
    assert!(
        claimed_at >= ended,
        "claimed event at {claimed_at}, before {ended}"
    );
    pool.close().await;
    db.cleanup().await;
}

/// A claim of a queue with `max_running` reserves its slots in a short turn
/// and claims beside other claims. A reservation whose claim never came (the
/// process died between the two) holds its slots until it lapses, and is
/// then deleted by the next turn, which gets the slots; a reservation is
/// taken once, and not at all after it lapsed and was deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_reservation_whose_claim_never_came_lapses() {
    use tether_core::{ClaimRequest, QueueConfigPatch};
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let engine = db.engine.clone();
    let limit = QueueConfigPatch {
        max_running: Some(Some(3)),
        ..Default::default()
    };
    engine
        .configure_queue("t", "q", &limit)
        .await
        .expect("limit");
    for _ in 0..5 {
        engine
            .enqueue("t", NewJob::new("q", "k", json!({})))
            .await
            .expect("enqueue");
    }
    let pool = PgPool::connect(&url).await.expect("pool");
    // An orphan: two of the three slots, taken by a claim that died.
    let orphan: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO tether.claim_reservations (id, tenant, queue, at, jobs, expires_at)
         VALUES (gen_random_uuid(), 't', 'q', now(), 2, now() + interval '1 second') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .expect("orphan");
    let req = ClaimRequest {
        queue: "q".into(),
        worker_id: "w".into(),
        limit: 10,
        lease_ttl_ms: None,
    };
    let first = engine.claim("t", &req).await.expect("claim");
    assert_eq!(first.len(), 1, "two slots are reserved");
    assert!(engine.claim("t", &req).await.expect("claim").is_empty());
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let second = engine.claim("t", &req).await.expect("claim");
    assert_eq!(second.len(), 2, "the lapsed reservation's slots are free");
    let left: i64 =
        sqlx::query_scalar("SELECT count(*) FROM tether.claim_reservations WHERE id = $1")
            .bind(orphan)
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(left, 0, "the lapsed reservation was deleted");
    let reservations: i64 = sqlx::query_scalar("SELECT count(*) FROM tether.claim_reservations")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(reservations, 0, "every claim replaced its own reservation");
    pool.close().await;
    db.cleanup().await;
}

/// The feed under commits that land out of `seq` order (invariant 17).
/// Sixteen committers each hold a transaction open for a while after
/// writing an event (its `seq` drawn, its commit late), one in five rolls
/// back, and each writes its own job's events under that job's row lock, as
/// the store does; a straggler draws the first `seq` of all and commits only
/// once the reader has read a higher one, so the run holds at least one
/// commit that a `seq > last` reader would skip forever. The reader resumes
/// from the text of its last cursor at every read, as a client
/// reconnecting would. It must read every committed event exactly once,
/// each job's in order, and no rolled-back one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_reads_commits_that_land_out_of_seq_order_exactly() {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    use tether_core::{EventKind, FeedCursor, FeedFilter};

    const COMMITTERS: usize = 16;
    const ROUNDS: usize = 12;
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("a PostgreSQL test database");
    let pool = PgPool::connect(&url).await.expect("committers' pool");
    let mut jobs = Vec::new();
    for _ in 0..=COMMITTERS {
        let job = db
            .engine
            .enqueue("t", NewJob::new("q", "k", json!({})))
            .await
            .expect("enqueue");
        jobs.push(job.job.id);
    }
    let filter = FeedFilter {
        tenant: Some("t".into()),
        events: vec![EventKind::CancelRequested],
        ..FeedFilter::default()
    };
    let head = db.engine.feed_head().await.expect("head");
    let done = Arc::new(AtomicBool::new(false));
    let highest_read = Arc::new(AtomicI64::new(0));
    let straggler = jobs.pop().expect("the straggler's job");
    let mut straggling = pool.begin().await.expect("begin");
    let first: i64 = sqlx::query_scalar(
        "INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
         VALUES ($1, 't', now(), 'cancel_requested', 0, 'straggler 0 0') RETURNING seq",
    )
    .bind(straggler)
    .fetch_one(&mut *straggling)
    .await
    .expect("the straggler's event");

    let reader = {
        let (engine, done, filter) = (db.engine.clone(), done.clone(), filter.clone());
        let highest_read = highest_read.clone();
        tokio::spawn(async move {
            let (mut text, mut read, mut reads) = (head.to_string(), Vec::new(), 0u32);
            let mut late = 0usize;
            let mut highest = 0i64;
            loop {
                let finished = done.load(Ordering::SeqCst);
                // Reconnect: nothing but the cursor's text survives.
                let cursor: FeedCursor = text.parse().expect("cursor");
                let page = engine.feed_read(&cursor, &filter, 7).await.expect("read");
                assert!(page.gap.is_none());
                reads += 1;
                for e in &page.events {
                    let seq: i64 = e
                        .event
                        .detail
                        .as_deref()
                        .unwrap_or("")
                        .split(' ')
                        .nth(2)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    if seq < highest {
                        late += 1;
                    }
                    highest = highest.max(seq);
                }
                highest_read.store(highest, Ordering::SeqCst);
                read.extend(page.events);
                text = page.next.to_string();
                if !page.more {
                    if finished {
                        return (read, late, reads);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            }
        })
    };

    let committers: Vec<_> = jobs
        .iter()
        .enumerate()
        .map(|(task, &job)| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut kept = Vec::new();
                for round in 0..ROUNDS {
                    let mut tx = pool.begin().await.expect("begin");
                    sqlx::query("SELECT 1 FROM tether.jobs WHERE id = $1 FOR UPDATE")
                        .bind(job)
                        .execute(&mut *tx)
                        .await
                        .expect("lock the job");
                    let seq: i64 = sqlx::query_scalar(
                        "INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
                         VALUES ($1, 't', now(), 'cancel_requested', 0, 'placeholder')
                         RETURNING seq",
                    )
                    .bind(job)
                    .fetch_one(&mut *tx)
                    .await
                    .expect("write an event");
                    let detail = format!("{task} {round} {seq}");
                    sqlx::query(
                        "UPDATE tether.job_events SET detail = $1 WHERE job_id = $2 AND seq = $3",
                    )
                    .bind(&detail)
                    .bind(job)
                    .bind(seq)
                    .execute(&mut *tx)
                    .await
                    .expect("name the event");
                    // Held open with its seq drawn: others commit past it.
                    let hold = (task * 7 + round * 13) % 23;
                    tokio::time::sleep(Duration::from_millis(hold as u64)).await;
                    if (task + round) % 5 == 0 {
                        tx.rollback().await.expect("rollback");
                    } else {
                        tx.commit().await.expect("commit");
                        kept.push(detail);
                    }
                }
                kept
            })
        })
        .collect();
    // The straggler commits once a higher seq than its own was read.
    while highest_read.load(Ordering::SeqCst) <= first {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    straggling.commit().await.expect("the straggler commits");
    let mut committed = vec!["straggler 0 0".to_owned()];
    for c in committers {
        committed.extend(c.await.expect("committer"));
    }
    done.store(true, Ordering::SeqCst);
    let (read, late, reads) = reader.await.expect("reader");

    let details: Vec<String> = read
        .iter()
        .map(|e| e.event.detail.clone().unwrap_or_default())
        .collect();
    let mut sorted = details.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), details.len(), "an event was read twice");
    let mut want = committed.clone();
    want.sort();
    assert_eq!(
        sorted, want,
        "read ≠ committed (lost, or a rolled-back one read)"
    );
    for (task, &job) in jobs.iter().enumerate() {
        let rounds: Vec<usize> = read
            .iter()
            .filter(|e| e.job_id == job)
            .map(|e| {
                e.event
                    .detail
                    .as_deref()
                    .unwrap()
                    .split(' ')
                    .nth(1)
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert!(
            rounds.windows(2).all(|w| w[0] < w[1]),
            "task {task} out of order: {rounds:?}"
        );
    }
    assert!(
        late > 0,
        "no event committed after a higher seq was read ({reads} reads)"
    );
    pool.close().await;
    db.cleanup().await;
}
