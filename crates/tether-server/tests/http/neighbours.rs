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
        .post("/v1/queues/turns/claim", json!({"worker_id": "w", "limit": 1}))
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
        claimed += h.await.unwrap().expect(200)["jobs"].as_array().unwrap().len();
    }
    assert_eq!(claimed, 2, "one running job per key: b and c");
}
