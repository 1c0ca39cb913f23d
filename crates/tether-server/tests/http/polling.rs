//! Long polls, the request time limit and an unreachable database.

use super::*;

tether_conformance::both_backends!(
    long_poll_wakes_on_enqueue,
    long_poll_times_out_empty,
    long_polls_beyond_the_cap_answer_at_once,
    one_tenant_cannot_take_every_waiting_place,
    a_waiting_claim_is_woken_when_a_retry_or_snooze_comes_due,
    requests_past_the_time_limit_are_503,
);

async fn long_poll_wakes_on_enqueue(db: &TestDb) {
    let c = setup(db).await;
    let app = c.app.clone();
    let admin = c.admin.clone();
    let poller = tokio::spawn(async move {
        let c = Ctx {
            app,
            admin,
            other: String::new(),
            other_id: String::new(),
        };
        let start = Instant::now();
        let a = c
            .post(
                "/v1/queues/lp/claim",
                json!({"worker_id": "w", "wait_ms": 5000}),
            )
            .await;
        (a, start.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let id = c.enqueue("lp", "k").await;
    let (a, elapsed) = poller.await.unwrap();
    let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 1, "{}", a.body);
    assert_eq!(jobs[0]["id"], id.as_str());
    assert!(
        elapsed >= Duration::from_millis(150),
        "returned before the enqueue: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(2500),
        "woke too late: {elapsed:?}"
    );
}

async fn long_poll_times_out_empty(db: &TestDb) {
    let c = setup(db).await;
    let start = Instant::now();
    let a = c
        .post(
            "/v1/queues/empty/claim",
            json!({"worker_id": "w", "wait_ms": 300}),
        )
        .await;
    let elapsed = start.elapsed();
    assert_eq!(a.expect(200), &json!({"jobs": []}));
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3000), "{elapsed:?}");
}

async fn long_polls_beyond_the_cap_answer_at_once(db: &TestDb) {
    let c = std::sync::Arc::new(
        setup_with(
            db,
            ServerConfig {
                max_long_polls: 1,
                ..ServerConfig::default()
            },
        )
        .await,
    );
    let first = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(
                "/v1/queues/capped/claim",
                json!({"worker_id": "a", "wait_ms": 1500}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let second = c
        .post(
            "/v1/queues/capped/claim",
            json!({"worker_id": "b", "wait_ms": 1500}),
        )
        .await;
    let elapsed = start.elapsed();
    assert_eq!(second.expect(200), &json!({"jobs": []}));
    assert!(
        elapsed < Duration::from_millis(1000),
        "the second claim waited: {elapsed:?}"
    );
    assert_eq!(first.await.unwrap().expect(200), &json!({"jobs": []}));
    // The place is free again once the first wait ended.
    let start = Instant::now();
    let third = c
        .post(
            "/v1/queues/capped/claim",
            json!({"worker_id": "c", "wait_ms": 300}),
        )
        .await;
    assert_eq!(third.expect(200), &json!({"jobs": []}));
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "the third claim did not wait"
    );
}

/// With 4 waiting places and 2 per tenant, a tenant's third waiting claim
/// answers at once, and the places it could not take are left to another
/// tenant, whose claim waits for its job.
async fn one_tenant_cannot_take_every_waiting_place(db: &TestDb) {
    let c = std::sync::Arc::new(
        setup_with(
            db,
            ServerConfig {
                max_long_polls: 4,
                max_long_polls_per_tenant: 2,
                ..ServerConfig::default()
            },
        )
        .await,
    );
    // The admin's tenant fills its share of the places, and asks for more.
    let mut holders = Vec::new();
    for i in 0..4 {
        let c = c.clone();
        holders.push(tokio::spawn(async move {
            let start = Instant::now();
            let a = c
                .post(
                    &format!("/v1/queues/hog{i}/claim"),
                    json!({"worker_id": "hog", "wait_ms": 4000}),
                )
                .await;
            (a, start.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The other tenant's claim still gets a place: it waits until its job
    // comes.
    let other = {
        let c = c.clone();
        tokio::spawn(async move {
            let key = c.other.clone();
            c.call(
                "POST",
                "/v1/queues/mine/claim",
                Some(&key),
                Some(json!({"worker_id": "w", "wait_ms": 20000})),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !other.is_finished(),
        "the other tenant's claim answered at once"
    );
    let key = c.other.clone();
    c.call(
        "POST",
        "/v1/jobs",
        Some(&key),
        Some(json!({"queue": "mine", "kind": "k"})),
    )
    .await
    .expect(201);
    let got = other.await.unwrap();
    assert_eq!(got.expect(200)["jobs"].as_array().unwrap().len(), 1);
    // Two of the admin tenant's four claims had no place and answered at
    // once (well before their 4 s wait); two waited theirs out.
    let mut quick = 0;
    for h in holders {
        let (a, elapsed) = h.await.unwrap();
        assert_eq!(a.expect(200), &json!({"jobs": []}));
        if elapsed < Duration::from_millis(3500) {
            quick += 1;
        }
    }
    assert_eq!(
        quick, 2,
        "two claims beyond the tenant's share answered at once"
    );
}

/// A job snoozed for 1 s, then failed with a retry after 1 s: each time, a
/// claim already waiting on its queue (up to 30 s) gets it when it comes
/// due, not when its wait ends. (Before, nothing hinted a job that became
/// ready by time alone, and the claim waited its 30 s out.)
async fn a_waiting_claim_is_woken_when_a_retry_or_snooze_comes_due(db: &TestDb) {
    let c = std::sync::Arc::new(setup(db).await);
    let id = c.enqueue("later", "k").await;
    let (_, token) = c.claim_one("later").await;
    let waiting_claim = || {
        let c = c.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let a = c
                .post(
                    "/v1/queues/later/claim",
                    json!({"worker_id": "w", "wait_ms": 30000}),
                )
                .await;
            (a, start.elapsed())
        })
    };
    c.post(
        &format!("/v1/jobs/{id}/snooze"),
        json!({"lease_token": token, "delay_ms": 1000}),
    )
    .await
    .expect(200);
    let (a, elapsed) = waiting_claim().await.unwrap();
    let jobs = a.expect(200)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 1, "the snoozed job, once due");
    assert!(elapsed < Duration::from_secs(25), "waited out: {elapsed:?}");
    let token = jobs[0]["lease_token"].as_str().unwrap().to_owned();
    c.post(
        &format!("/v1/jobs/{id}/fail"),
        json!({"lease_token": token, "error": "later", "retry_after_ms": 1000}),
    )
    .await
    .expect(200);
    let (a, elapsed) = waiting_claim().await.unwrap();
    assert_eq!(a.expect(200)["jobs"].as_array().unwrap().len(), 1);
    assert!(elapsed < Duration::from_secs(25), "waited out: {elapsed:?}");
}

async fn requests_past_the_time_limit_are_503(db: &TestDb) {
    let c = setup_with(
        db,
        ServerConfig {
            request_timeout: Duration::from_millis(200),
            ..ServerConfig::default()
        },
    )
    .await;
    let start = Instant::now();
    c.post(
        "/v1/queues/slow/claim",
        json!({"worker_id": "w", "wait_ms": 5000}),
    )
    .await
    .expect_error(503, "unavailable");
    assert!(
        start.elapsed() < Duration::from_millis(2000),
        "{:?}",
        start.elapsed()
    );
    // Quick requests are unaffected.
    c.get("/v1/queues").await.expect(200);
}

// Not through `both_backends!`: sqlx's connect future is not `Send` for
// every lifetime, which the harness's boxed behaviour future needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_503_postgres() {
    let db = tether_conformance::postgres().await;
    unreachable_database(db.postgres_url()).await;
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_database_is_503_sqlite() {
    unreachable_database(None).await;
}

/// A second store on the same backend, closed after bootstrap: every query
/// then fails as "database unavailable".
async fn unreachable_database(url: Option<String>) {
    let dir = std::env::temp_dir().join(format!("tether-server-503-{}", uuid::Uuid::new_v4()));
    type Close = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
    let (store, close): (std::sync::Arc<dyn tether_core::Store>, Close) = match url {
        Some(url) => {
            let pg = tether_postgres::PgStore::connect(&url).await.unwrap();
            let pool = pg.pool().clone();
            (
                std::sync::Arc::new(pg),
                Box::pin(async move { pool.close().await }),
            )
        }
        None => {
            std::fs::create_dir_all(&dir).unwrap();
            let lite = tether_sqlite::SqliteStore::open(dir.join("db.sqlite"))
                .await
                .unwrap();
            let handle = lite.clone();
            (
                std::sync::Arc::new(lite),
                Box::pin(async move { handle.close().await }),
            )
        }
    };
    let engine = tether_core::Engine::new(store);
    let tenant = engine.ensure_tenant("default").await.unwrap();
    let (_, key) = engine.issue_api_key(tenant.id, None, true).await.unwrap();
    let c = Ctx {
        app: tether_server::router(tether_server::AppState::new(
            engine,
            ServerConfig::default(),
        )),
        admin: key,
        other: String::new(),
        other_id: String::new(),
    };
    c.call("GET", "/readyz", None, None).await.expect(200);
    close.await;
    c.call("GET", "/readyz", None, None)
        .await
        .expect_error(503, "unavailable");
    c.call("GET", "/healthz", None, None).await.expect(200);
    c.get("/v1/jobs").await.expect_error(503, "unavailable");
    let _ = std::fs::remove_dir_all(&dir);
}
