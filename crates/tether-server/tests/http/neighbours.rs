//! Invariant 19, tenants do not slow each other: what one tenant does with
//! its own key holds no shared resource (a pooled connection, a waiting
//! place) that another tenant's requests need. (How long another tenant
//! waits under such load is measured by the benchmark program,
//! `noisy_neighbour_p95_ms`, not asserted here.)

use super::*;
use sqlx::Connection;

// Not through `both_backends!`: it holds a queue's row from a connection of
// its own, which only PostgreSQL has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_waiting_for_a_queue_turn_leave_the_pool_to_others_postgres() {
    let db = tether_conformance::postgres().await;
    claims_waiting_for_a_queue_turn(&db).await;
    db.cleanup().await;
}

/// Forty claims of one tenant's fair, key-limited queue wait for the
/// queue's turn (its row is held by another session, as a slow turn would
/// hold it): the pool's 16 connections are not theirs to hold, so another
/// tenant's requests are answered meanwhile; and when the row is free
/// they all get their answer, within the queue's limits.
async fn claims_waiting_for_a_queue_turn(db: &TestDb) {
    let c = std::sync::Arc::new(setup(db).await);
    for key in ["a", "b", "c"] {
        for _ in 0..3 {
            c.post(
                "/v1/jobs",
                json!({"queue": "turns", "kind": "k", "concurrency_key": key}),
            )
            .await
            .expect(201);
        }
    }
    c.call(
        "PATCH",
        "/v1/queues/turns",
        Some(&c.admin),
        Some(json!({"fair": true, "key_max_running": 1})),
    )
    .await
    .expect(200);
    // One claim first, so this process knows the queue is limited.
    let first = c
        .post(
            "/v1/queues/turns/claim",
            json!({"worker_id": "w", "limit": 1}),
        )
        .await;
    assert_eq!(first.expect(200)["jobs"].as_array().unwrap().len(), 1);

    let url = db.postgres_url().unwrap();
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT 1 FROM tether.queues WHERE name = 'turns' FOR UPDATE")
        .execute(&mut holder)
        .await
        .unwrap();
    let claims: Vec<_> = (0..40)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.post(
                    "/v1/queues/turns/claim",
                    json!({"worker_id": format!("w{i}"), "limit": 1}),
                )
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Before the turns, 16 of the 40 held every pooled connection here and
    // this waited until the row was let go.
    let other_key = c.other.clone();
    let listed = tokio::time::timeout(
        Duration::from_secs(20),
        c.call("GET", "/v1/queues", Some(&other_key), None),
    )
    .await
    .expect("another tenant's request waited for this tenant's claims");
    listed.expect(200);
    let enqueued = tokio::time::timeout(
        Duration::from_secs(20),
        c.call(
            "POST",
            "/v1/jobs",
            Some(&other_key),
            Some(json!({"queue": "own", "kind": "k"})),
        ),
    )
    .await
    .expect("another tenant's enqueue waited for this tenant's claims");
    enqueued.expect(201);
    assert!(
        claims.iter().all(|h| !h.is_finished()),
        "the claims wait for the queue's row"
    );

    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let mut claimed = 0;
    for h in claims {
        claimed += h.await.unwrap().expect(200)["jobs"]
            .as_array()
            .unwrap()
            .len();
    }
    assert_eq!(claimed, 2, "one running job per key: b and c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_aggregate_reads_holds_two_connections_postgres() {
    let db = tether_conformance::postgres().await;
    a_burst_of_aggregate_reads(&db).await;
    db.cleanup().await;
}

/// Eight throughput reports of one tenant at once, each held up inside the
/// database (the history table is locked by another session, as a day of
/// history takes long to read): two of them hold a connection, the other
/// six wait their turn without one; all are answered once the table is
/// free. (Before the turns, all eight held one.)
async fn a_burst_of_aggregate_reads(db: &TestDb) {
    let c = std::sync::Arc::new(setup(db).await);
    c.enqueue("busy", "k").await;
    let url = db.postgres_url().unwrap();
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE tether.job_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut holder)
        .await
        .unwrap();
    // Each report with a key of its own, so that nothing shared by one
    // key's requests (its lookup) lines them up before the engine does.
    let tenant = db.engine.ensure_tenant("default").await.unwrap();
    let mut reads = Vec::new();
    for i in 0..8 {
        let (_, key) = db
            .engine
            .issue_api_key(tenant.id, Some(&format!("reader-{i}")), false)
            .await
            .unwrap();
        let c = c.clone();
        reads.push(tokio::spawn(async move {
            c.call(
                "GET",
                "/v1/queues/busy/throughput?minutes=1440",
                Some(&key),
                None,
            )
            .await
        }));
    }
    // They come to wait for the lock; give all eight the time to come, if
    // they could, and see how many ever wait there at once.
    let mut most = lock_waiters_reach(&mut holder, 1).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        most = most.max(lock_waiters(&mut holder).await);
    }
    assert!(
        (1..=2).contains(&most),
        "at most two of the tenant's eight reports hold a connection, {most} did"
    );
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    for h in reads {
        h.await.unwrap().expect(200);
    }
}

/// Sessions of this test's database waiting for a lock (whatever their
/// `state` says: a statement waiting while it is parsed shows as `idle`).
async fn lock_waiters(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}

/// [`lock_waiters`] once it reaches `n` (or what it is after 20 s).
async fn lock_waiters_reach(conn: &mut sqlx::PgConnection, n: i64) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = lock_waiters(conn).await;
        if seen >= n || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
