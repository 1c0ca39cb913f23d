//! `tether.enqueue` and `tether.enqueue_many` (migration 22): a service in
//! any language enqueues on its own connection, inside its own transaction,
//! and the job exists if and only if that transaction commits.
//!
//! The behaviours run against a fresh database each; the last test keeps
//! the SQL validation and the server's in agreement over random bodies.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Map, Value};
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{Connection, PgConnection, PgPool, Row};
use tether_conformance::TestDb;
use tether_core::{
    validate, Backoff, ClaimRequest, Error, EventKind, JobState, Limits, NewJob, QueueConfigPatch,
    RunAt,
};
use uuid::Uuid;

/// The tenant of these tests.
const T: &str = "acme";
/// Longest delay, timeout or backoff (366 days).
const MAX_MS: i64 = 31_622_400_000;

async fn connect(db: &TestDb) -> PgConnection {
    PgConnection::connect(&db.postgres_url().expect("a PostgreSQL database"))
        .await
        .expect("connect")
}

/// `tether.enqueue(T, queue, kind, payload, options)` on `conn`.
async fn enqueue(
    conn: &mut PgConnection,
    queue: &str,
    kind: &str,
    payload: Value,
    options: Value,
) -> Result<(Uuid, bool), (String, String)> {
    sqlx::query_as("SELECT id, created FROM tether.enqueue($1, $2, $3, $4, $5)")
        .bind(T)
        .bind(queue)
        .bind(kind)
        .bind(Json(payload))
        .bind(Json(options))
        .fetch_one(conn)
        .await
        .map_err(refusal)
}

/// `tether.enqueue_many(T, jobs)` on `conn`: (ord, id, created) per entry.
async fn enqueue_many(
    conn: &mut PgConnection,
    jobs: &Value,
) -> Result<Vec<(i32, Uuid, bool)>, (String, String)> {
    sqlx::query_as("SELECT ord, id, created FROM tether.enqueue_many($1, $2)")
        .bind(T)
        .bind(Json(jobs))
        .fetch_all(conn)
        .await
        .map_err(refusal)
}

/// A database error's SQLSTATE and message.
fn refusal(e: sqlx::Error) -> (String, String) {
    match e {
        sqlx::Error::Database(d) => (
            d.code().map(|c| c.into_owned()).unwrap_or_default(),
            d.message().to_owned(),
        ),
        other => panic!("not a database error: {other}"),
    }
}

/// How many rows of tenant `T` the table holds.
async fn rows(conn: &mut PgConnection, table: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM tether.{table} WHERE tenant = $1"
    ))
    .bind(T)
    .fetch_one(conn)
    .await
    .expect("count")
}

async fn nothing_written(conn: &mut PgConnection) {
    for table in ["jobs", "queues", "job_events"] {
        assert_eq!(rows(conn, table).await, 0, "tether.{table} has rows");
    }
}

fn claim(queue: &str) -> ClaimRequest {
    ClaimRequest {
        queue: queue.to_owned(),
        worker_id: "w1".to_owned(),
        limit: 10,
        lease_ttl_ms: Some(60_000),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_enqueue_is_a_job_like_any_other() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    sqlx::raw_sql("CREATE TABLE public.orders (id int PRIMARY KEY)")
        .execute(&mut conn)
        .await
        .unwrap();

    let mut tx = conn.begin().await.unwrap();
    sqlx::query("INSERT INTO public.orders VALUES (42)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let (id, created) = enqueue(
        &mut tx,
        "emails",
        "send_receipt",
        json!({"order": 42}),
        json!({
            "priority": 7, "tags": ["billing"], "timeout_ms": 5000,
            "concurrency_key": "customer:9", "idempotency_key": "receipt:42",
            "expires_at": "2999-01-01T00:00:00Z",
            "headers": {"traceparent": traceparent, "locale": "de"},
        }),
    )
    .await
    .expect("enqueued");
    assert!(created);
    // Not visible to anyone else before the commit.
    assert!(matches!(
        db.engine.get(T, id).await,
        Err(Error::JobNotFound(_))
    ));
    tx.commit().await.unwrap();

    let job = db.engine.get(T, id).await.expect("the job exists");
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(
        (job.queue.as_str(), job.kind.as_str()),
        ("emails", "send_receipt")
    );
    assert_eq!(job.payload, json!({"order": 42}));
    assert_eq!(job.priority, 7);
    assert_eq!(job.tags, vec!["billing".to_owned()]);
    assert_eq!(job.timeout_ms, Some(5000));
    assert_eq!(job.concurrency_key.as_deref(), Some("customer:9"));
    assert_eq!(job.idempotency_key.as_deref(), Some("receipt:42"));
    assert_eq!(
        job.expires_at,
        Some("2999-01-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap())
    );
    assert_eq!((job.max_attempts, job.backoff), (5, Backoff::default()));
    assert!(job.run_at <= Utc::now() && job.run_at == job.created_at);
    // UUID v7: version 7, and its time is the job's (to the millisecond).
    assert_eq!(id.get_version_num(), 7);
    let (secs, nanos) = id.get_timestamp().expect("a v7 timestamp").to_unix();
    let minted = DateTime::from_timestamp(secs as i64, nanos).unwrap();
    assert!((minted - job.created_at).num_milliseconds().abs() < 5_000);

    let history = db.engine.events(T, id).await.unwrap();
    let kinds: Vec<EventKind> = history.iter().map(|e| e.event).collect();
    assert_eq!(kinds, vec![EventKind::Enqueued]);
    assert_eq!(history[0].at, job.created_at);

    let claimed = db.engine.claim(T, &claim("emails")).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job.id, id);
    let headers: BTreeMap<String, String> = [("traceparent", traceparent), ("locale", "de")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert_eq!(claimed[0].job.headers, headers);
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_enqueue_leaves_nothing() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let mut tx = conn.begin().await.unwrap();
    let (id, _) = enqueue(&mut tx, "fresh", "k", Value::Null, json!({}))
        .await
        .unwrap();
    let batch = enqueue_many(&mut tx, &json!([{"queue": "other", "kind": "k"}]))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert!(matches!(
        db.engine.get(T, id).await,
        Err(Error::JobNotFound(_))
    ));
    assert!(matches!(
        db.engine.get(T, batch[0].1).await,
        Err(Error::JobNotFound(_))
    ));
    nothing_written(&mut conn).await;
    assert!(db
        .engine
        .claim(T, &claim("fresh"))
        .await
        .unwrap()
        .is_empty());
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_workers_wake_at_commit_and_not_before() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let mut conn = connect(&db).await;

    // What goes over the channel, straight from PostgreSQL.
    let mut listener = PgListener::connect(&url).await.unwrap();
    listener.listen("tether_jobs").await.unwrap();
    let (sent, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let listening = tokio::spawn(async move {
        while let Ok(n) = listener.recv().await {
            if sent.send(n.payload().to_owned()).is_err() {
                return;
            }
        }
    });
    // A worker of the engine waiting for `q` (the store's LISTEN
    // connection). Its listener wakes every subscriber once it listens.
    let mut wakeup = db.engine.subscribe(T, "q").unwrap();
    tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
        .await
        .expect("the listener's start-up hint");

    let quiet = Duration::from_millis(400);
    let mut tx = conn.begin().await.unwrap();
    enqueue_many(
        &mut tx,
        &json!([
            {"queue": "q", "kind": "k"},
            {"queue": "q", "kind": "k", "run_at": "2020-01-01T00:00:00Z"},
            {"queue": "q", "kind": "k", "delay_ms": 600000},
            {"queue": "q2", "kind": "k", "delay_ms": 0},
        ]),
    )
    .await
    .unwrap();
    assert!(
        tokio::time::timeout(quiet, wakeup.hinted()).await.is_err(),
        "a worker was woken before the commit"
    );
    assert!(tokio::time::timeout(quiet, heard.recv()).await.is_err());
    tx.commit().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), wakeup.hinted())
        .await
        .expect("the worker is woken at commit");
    // One hint per queue for the jobs ready now (the delayed one is not).
    let mut payloads = Vec::new();
    for _ in 0..2 {
        let p = tokio::time::timeout(Duration::from_secs(5), heard.recv())
            .await
            .expect("a notification")
            .unwrap();
        payloads.push(p);
    }
    assert_eq!(payloads, vec!["acme q 2", "acme q2 1"]);

    // A rollback sends nothing. (Another queue: the hint for two jobs may
    // have left `q`'s waiters a second wake-up.)
    let mut waiting = db.engine.subscribe(T, "r").unwrap();
    let mut tx = conn.begin().await.unwrap();
    enqueue(&mut tx, "r", "k", Value::Null, json!({}))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(tokio::time::timeout(quiet, heard.recv()).await.is_err());
    assert!(tokio::time::timeout(quiet, waiting.hinted()).await.is_err());

    listening.abort();
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_answers_the_first_job() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let key = json!({"idempotency_key": "invoice:7"});

    let mut tx = conn.begin().await.unwrap();
    let (first, created) = enqueue(&mut tx, "q", "k", json!(1), key.clone())
        .await
        .unwrap();
    assert!(created);
    // Same transaction, another payload: the same job, unchanged.
    let again = enqueue(&mut tx, "q", "k", json!(2), key.clone())
        .await
        .unwrap();
    assert_eq!(again, (first, false));
    // Entries of a batch see earlier entries and earlier jobs.
    let batch = enqueue_many(
        &mut tx,
        &json!([
            {"queue": "q", "kind": "k", "idempotency_key": "invoice:8"},
            {"queue": "q", "kind": "k", "idempotency_key": "invoice:8"},
            {"queue": "other", "kind": "k", "idempotency_key": "invoice:7"},
        ]),
    )
    .await
    .unwrap();
    assert_eq!(batch[0].0, 0);
    assert!(batch[0].2);
    assert_eq!(batch[1], (1, batch[0].1, false));
    assert_eq!(batch[2], (2, first, false));
    tx.commit().await.unwrap();

    // Another transaction: still the same job.
    let mut tx = conn.begin().await.unwrap();
    let later = enqueue(&mut tx, "q", "k", json!(3), key).await.unwrap();
    assert_eq!(later, (first, false));
    tx.commit().await.unwrap();

    assert_eq!(rows(&mut conn, "jobs").await, 2);
    assert_eq!(rows(&mut conn, "job_events").await, 2);
    assert_eq!(db.engine.get(T, first).await.unwrap().payload, json!(1));
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_key_answers_the_active_holder() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let unique = json!({"unique_key": "sync:9"});
    let (holder, created) = enqueue(&mut conn, "q", "k", Value::Null, unique.clone())
        .await
        .unwrap();
    assert!(created);
    let again = enqueue(&mut conn, "q", "k", Value::Null, unique.clone())
        .await
        .unwrap();
    assert_eq!(again, (holder, false));

    // Once the holder has finished, the key is free again.
    let c = db.engine.claim(T, &claim("q")).await.unwrap().remove(0);
    db.engine
        .complete(T, c.job.id, c.lease_token, None)
        .await
        .unwrap();
    let (next, created) = enqueue(&mut conn, "q", "k", Value::Null, unique)
        .await
        .unwrap();
    assert!(created && next != holder);

    // The idempotency key wins when both match.
    let (by_key, _) = enqueue(
        &mut conn,
        "q",
        "k",
        Value::Null,
        json!({"idempotency_key": "i1"}),
    )
    .await
    .unwrap();
    let both = enqueue(
        &mut conn,
        "q",
        "k",
        Value::Null,
        json!({"idempotency_key": "i1", "unique_key": "sync:9"}),
    )
    .await
    .unwrap();
    assert_eq!(both, (by_key, false));
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_field_as_the_api_does_and_write_nothing() {
    let db = tether_conformance::postgres().await;
    let paused = db.engine.ensure_tenant("paused-co").await.unwrap();
    db.engine.suspend_tenant(paused.id).await.unwrap();
    let mut conn = connect(&db).await;
    let fields = "`queue`, `kind`, `payload`, `priority`, `run_at`, `delay_ms`, \
                  `max_attempts`, `timeout_ms`, `idempotency_key`, `unique_key`, `tags`, \
                  `expires_at`, `backoff`, `concurrency_key`, `depends_on`, \
                  `depends_on_entries`, `dependency_failure`, `workflow_id`, `headers`";
    let many_tags: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
    let many_headers: Map<String, Value> = (0..33).map(|i| (format!("h{i}"), json!("v"))).collect();
    let big_headers: Map<String, Value> = (0..5)
        .map(|i| (format!("h{i}"), json!("v".repeat(1000))))
        .collect();
    let no_sql = "dependencies and workflows cannot be enqueued from SQL; use the HTTP API \
                  (POST /v1/jobs, POST /v1/jobs/batch)";
    let cases: Vec<(&str, &str, &str, Value, Value, String)> = vec![
        (T, "q", "k", json!(null), json!([]),
         "invalid options: invalid type: sequence, expected a map".into()),
        ("", "q", "k", json!(null), json!({}),
         "invalid tenant: must be 1 to 128 characters, got 0".into()),
        ("a b", "q", "k", json!(null), json!({}),
         r#"invalid tenant: "a b" contains ' '; allowed are A-Z a-z 0-9 . _ : -"#.into()),
        ("paused-co", "q", "k", json!(null), json!({}),
         r#"invalid tenant: tenant "paused-co" is suspended: nothing is enqueued for it until an admin resumes it"#.into()),
        (T, ".", "k", json!(null), json!({}),
         r#"invalid queue: "." cannot be used: it is a dot-segment in a URL path"#.into()),
        (T, "q", "ü", json!(null), json!({}),
         r#"invalid kind: "ü" contains 'ü'; allowed are A-Z a-z 0-9 . _ : -"#.into()),
        (T, "q", "k", json!(null), json!({"queue": "x"}),
         "invalid queue: is an argument of tether.enqueue, not one of its options".into()),
        (T, "q", "k", json!("x".repeat(1 << 20)), json!({}),
         "payload is 1048578 bytes, above the limit of 1048576 bytes".into()),
        (T, "q", "k", json!(null), json!({"priority": 101}),
         "invalid priority: must be between -100 and 100, got 101".into()),
        (T, "q", "k", json!(null), json!({"priority": "high"}),
         r#"invalid priority: invalid type: string "high", expected i16"#.into()),
        (T, "q", "k", json!(null), json!({"priority": 1.5}),
         "invalid priority: invalid type: floating point `1.5`, expected i16".into()),
        (T, "q", "k", json!(null), json!({"priority": 40000}),
         "invalid priority: invalid value: integer `40000`, expected i16".into()),
        (T, "q", "k", json!(null), json!({"delay_ms": -1}),
         "invalid delay_ms: must not be negative, got -1".into()),
        (T, "q", "k", json!(null), json!({"delay_ms": MAX_MS + 1}),
         "invalid delay_ms: must be between 0 and 31622400000 ms, got 31622400001".into()),
        (T, "q", "k", json!(null), json!({"delay_ms": 5, "run_at": "2030-01-01T00:00:00Z"}),
         "invalid run_at: run_at and delay_ms are mutually exclusive".into()),
        (T, "q", "k", json!(null), json!({"run_at": "2026-01-01T00:00:00"}),
         r#"invalid run_at: not an RFC 3339 time (premature end of input): "2026-01-01T00:00:00""#.into()),
        (T, "q", "k", json!(null), json!({"run_at": "+2026-01-01T00:00:00Z"}),
         r#"invalid run_at: not an RFC 3339 time (it starts with a four-digit year): "+2026-01-01T00:00:00Z""#.into()),
        (T, "q", "k", json!(null), json!({"run_at": "2026-02-30T00:00:00Z"}),
         r#"invalid run_at: not an RFC 3339 time (input is out of range): "2026-02-30T00:00:00Z""#.into()),
        (T, "q", "k", json!(null), json!({"run_at": "2026-01-01T00:00:00.1234567Z"}),
         r#"invalid run_at: "2026-01-01T00:00:00.1234567Z" has 7 digits of a second; at most 6 (microseconds) are kept, so round it first"#.into()),
        (T, "q", "k", json!(null), json!({"run_at": "1969-12-31T23:59:59.5Z"}),
         "invalid run_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z, got 1969-12-31T23:59:59.500Z".into()),
        (T, "q", "k", json!(null), json!({"expires_at": "9999-12-31T23:30:00-01:00"}),
         "invalid expires_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z, got +10000-01-01T00:30:00Z".into()),
        (T, "q", "k", json!(null), json!({"max_attempts": 0}),
         "invalid max_attempts: must be between 1 and 1000, got 0".into()),
        (T, "q", "k", json!(null), json!({"backoff": {"base_ms": 5, "cap_ms": 1}}),
         "invalid backoff: base_ms (5) must not exceed cap_ms (1)".into()),
        (T, "q", "k", json!(null), json!({"backoff": {"base_ms": 5}}),
         "invalid backoff: missing field `cap_ms`".into()),
        (T, "q", "k", json!(null), json!({"backoff": {"base_ms": -5, "cap_ms": 1}}),
         "invalid backoff.base_ms: must not be negative, got -5".into()),
        (T, "q", "k", json!(null), json!({"timeout_ms": 0}),
         "invalid timeout_ms: must be between 1 and 31622400000 ms, got 0".into()),
        (T, "q", "k", json!(null), json!({"idempotency_key": ""}),
         "invalid idempotency_key: must be 1 to 255 characters".into()),
        (T, "q", "k", json!(null), json!({"unique_key": "a\nb"}),
         "invalid unique_key: must not contain control characters".into()),
        (T, "q", "k", json!(null), json!({"concurrency_key": "a/b"}),
         r#"invalid concurrency_key: "a/b" contains '/'; allowed are A-Z a-z 0-9 . _ : -"#.into()),
        (T, "q", "k", json!(null), json!({"tags": many_tags}),
         "invalid tags: at most 32 tags, got 33".into()),
        (T, "q", "k", json!(null), json!({"tags": ["ok", "no way"]}),
         r#"invalid tags[1]: "no way" contains ' '; allowed are A-Z a-z 0-9 . _ : -"#.into()),
        (T, "q", "k", json!(null), json!({"tags": "ok"}),
         r#"invalid tags: invalid type: string "ok", expected a sequence"#.into()),
        (T, "q", "k", json!(null), json!({"headers": many_headers}),
         "invalid headers: at most 32 headers, got 33".into()),
        (T, "q", "k", json!(null), json!({"headers": {"bad name": "x"}}),
         r#"invalid headers: header name "bad name" contains ' '; allowed are A-Z a-z 0-9 . _ -"#.into()),
        (T, "q", "k", json!(null), json!({"headers": {"a": "x".repeat(1025)}}),
         "invalid headers.a: must be at most 1024 bytes, got 1025".into()),
        (T, "q", "k", json!(null), json!({"headers": {"a": "x\u{1b}[2J"}}),
         r"invalid headers.a: contains the control character '\u{1b}'".into()),
        (T, "q", "k", json!(null), json!({"headers": big_headers}),
         "invalid headers: names and values must be at most 4096 bytes in all, got 5010".into()),
        (T, "q", "k", json!(null), json!({"headers": {"a": 1}}),
         "invalid headers.a: invalid type: integer `1`, expected a string".into()),
        (T, "q", "k", json!(null), json!({"priorty": 1}),
         format!("invalid priorty: unknown field `priorty`, expected one of {fields}")),
        (T, "q", "k", json!(null), json!({"depends_on": [Uuid::nil()]}),
         format!("invalid depends_on: {no_sql}")),
        (T, "q", "k", json!(null), json!({"workflow_id": Uuid::nil()}),
         format!("invalid workflow_id: {no_sql}")),
    ];
    for (tenant, queue, kind, payload, options, message) in cases {
        let mut tx = conn.begin().await.unwrap();
        let out = sqlx::query("SELECT * FROM tether.enqueue($1, $2, $3, $4, $5)")
            .bind(tenant)
            .bind(queue)
            .bind(kind)
            .bind(Json(&payload))
            .bind(Json(&options))
            .fetch_all(&mut *tx)
            .await;
        let Err(e) = out else {
            panic!("accepted, expected {message}");
        };
        let (code, got) = refusal(e);
        assert_eq!((code.as_str(), got.as_str()), ("22023", message.as_str()));
        // The caller's transaction is aborted: nothing of it can commit.
        let next = sqlx::query("SELECT 1").execute(&mut *tx).await;
        assert_eq!(refusal(next.unwrap_err()).0, "25P02");
        tx.rollback().await.unwrap();
    }
    // Accepted at the edges of the same rules.
    let edges = [
        json!({"priority": -100, "delay_ms": MAX_MS, "max_attempts": 1000, "timeout_ms": 1}),
        json!({"run_at": "9999-12-31T23:59:59.999Z", "expires_at": "1970-01-01T00:00:00Z"}),
        json!({"priority": null, "tags": null, "headers": null, "depends_on": [], "workflow_id": null}),
        json!({"idempotency_key": "é".repeat(255), "tags": vec!["a"; 32]}),
    ];
    let mut tx = conn.begin().await.unwrap();
    for options in edges {
        enqueue(&mut tx, "q", "k", Value::Null, options.clone())
            .await
            .unwrap_or_else(|e| panic!("{options} refused: {e:?}"));
    }
    tx.rollback().await.unwrap();
    nothing_written(&mut conn).await;
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_all_or_nothing() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let refused = [
        (
            json!([
                {"queue": "q1", "kind": "k"},
                {"queue": "q2", "kind": "k", "headers": {"traceparent": "x"}},
                {"queue": "q3", "kind": "k", "priority": 500},
            ]),
            "invalid jobs[2].priority: must be between -100 and 100, got 500".to_owned(),
        ),
        (
            json!([{"queue": "q", "kind": "k"}, {"queue": "q"}]),
            "invalid jobs[1]: missing field `kind`".to_owned(),
        ),
        (
            json!({"queue": "q", "kind": "k"}),
            "invalid jobs: invalid type: map, expected a sequence".to_owned(),
        ),
        (
            json!([]),
            "invalid jobs: must hold 1 to 1000 items, got 0".to_owned(),
        ),
        (
            Value::Array(vec![json!({"queue": "q", "kind": "k"}); 1001]),
            "invalid jobs: must hold 1 to 1000 items, got 1001".to_owned(),
        ),
        (
            json!([{"queue": "q", "kind": "k", "depends_on_entries": [0]}]),
            "invalid jobs[0].depends_on_entries: dependencies and workflows cannot be \
             enqueued from SQL; use the HTTP API (POST /v1/jobs, POST /v1/jobs/batch)"
                .to_owned(),
        ),
    ];
    for (jobs, message) in refused {
        let mut tx = conn.begin().await.unwrap();
        let err = enqueue_many(&mut tx, &jobs).await.unwrap_err();
        assert_eq!(err, ("22023".to_owned(), message));
        tx.rollback().await.unwrap();
    }
    nothing_written(&mut conn).await;

    // Accepted: in order, with time-ordered ids.
    let jobs: Vec<Value> = (0..50)
        .map(|i| json!({"queue": format!("q{}", i % 3), "kind": "k", "payload": i}))
        .collect();
    let out = enqueue_many(&mut conn, &Value::Array(jobs)).await.unwrap();
    assert_eq!(out.len(), 50);
    for (i, (ord, _, created)) in out.iter().enumerate() {
        assert_eq!((*ord, *created), (i as i32, true));
    }
    assert!(out.windows(2).all(|w| w[0].1 < w[1].1), "ids increase");
    let job = db.engine.get(T, out[7].1).await.unwrap();
    assert_eq!((job.queue.as_str(), &job.payload), ("q1", &json!(7)));
    assert_eq!(rows(&mut conn, "queues").await, 3);
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_copy_their_queues_settings_and_new_queues_are_counted() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let patch = QueueConfigPatch {
        max_attempts: Some(9),
        backoff: Some(Backoff {
            base_ms: 10,
            cap_ms: 20,
        }),
        ..QueueConfigPatch::default()
    };
    db.engine.configure_queue(T, "tuned", &patch).await.unwrap();
    let (a, _) = enqueue(&mut conn, "tuned", "k", Value::Null, json!({}))
        .await
        .unwrap();
    let (b, _) = enqueue(
        &mut conn,
        "tuned",
        "k",
        Value::Null,
        json!({"max_attempts": 3, "backoff": {"base_ms": 1, "cap_ms": 2}}),
    )
    .await
    .unwrap();
    let (a, b) = (
        db.engine.get(T, a).await.unwrap(),
        db.engine.get(T, b).await.unwrap(),
    );
    assert_eq!(
        (a.max_attempts, a.backoff.base_ms, a.backoff.cap_ms),
        (9, 10, 20)
    );
    assert_eq!(
        (b.max_attempts, b.backoff.base_ms, b.backoff.cap_ms),
        (3, 1, 2)
    );

    // The default limit of 1 000 queues per tenant: room for no new one.
    sqlx::query(
        "INSERT INTO tether.queues (tenant, name) SELECT $1, 'filler-' || g FROM generate_series(1, 999) g",
    )
    .bind(T)
    .execute(&mut conn)
    .await
    .unwrap();
    enqueue(&mut conn, "filler-5", "k", Value::Null, json!({}))
        .await
        .expect("an existing queue takes jobs");
    let err = enqueue(&mut conn, "one-too-many", "k", Value::Null, json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.0, "54000");
    assert_eq!(
        err.1,
        Error::too_many_queues(Limits::default().max_queues_per_tenant).to_string()
    );
    drop(conn);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_roles_granted_execute_may_enqueue() {
    let db = tether_conformance::postgres().await;
    let mut conn = connect(&db).await;
    let role = format!(
        "tether_sql_enqueue_{}",
        &Uuid::new_v4().simple().to_string()[..12]
    );
    sqlx::raw_sql(&format!("CREATE ROLE {role}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let as_role = |sql: &'static str| format!("SET ROLE {role}; {sql}; RESET ROLE");
    let call = "SELECT * FROM tether.enqueue('acme', 'q', 'k')";

    let denied = sqlx::raw_sql(&as_role(call)).execute(&mut conn).await;
    let code = refusal(denied.unwrap_err()).0;
    assert_eq!(code, "42501", "insufficient_privilege");
    sqlx::raw_sql("RESET ROLE")
        .execute(&mut conn)
        .await
        .unwrap();

    sqlx::raw_sql(&format!(
        "GRANT USAGE ON SCHEMA tether TO {role};
         GRANT EXECUTE ON FUNCTION tether.enqueue(text, text, text, jsonb, jsonb),
                                   tether.enqueue_many(text, jsonb) TO {role}"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql(&as_role(call))
        .execute(&mut conn)
        .await
        .expect("a granted role enqueues");
    sqlx::raw_sql(&as_role(
        "SELECT * FROM tether.enqueue_many('acme', '[{\"queue\": \"q\", \"kind\": \"k\"}]')",
    ))
    .execute(&mut conn)
    .await
    .expect("and enqueues many");
    // With no privilege on the tables themselves.
    let read = sqlx::raw_sql(&as_role("SELECT * FROM tether.jobs"))
        .execute(&mut conn)
        .await;
    assert_eq!(refusal(read.unwrap_err()).0, "42501");
    sqlx::raw_sql(&format!(
        "RESET ROLE; DROP OWNED BY {role}; DROP ROLE {role}"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    assert_eq!(rows(&mut conn, "jobs").await, 2);
    drop(conn);
    db.cleanup().await;
}

// ---------------------------------------------------------------------------
// The SQL validation and the server's agree.

/// Decodes a body as `tether-server`'s `parse_json` does; the error is its
/// message without serde's line and column.
macro_rules! decode {
    ($body:expr) => {
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice($body)).map_err(
            |e| {
                let path = e.path().to_string();
                let inner = e.into_inner().to_string();
                let inner = match inner.rfind(" at line ") {
                    Some(at) => inner[..at].to_owned(),
                    None => inner,
                };
                if path.is_empty() || path == "." {
                    format!("malformed JSON body: {inner}")
                } else {
                    format!("invalid {path}: {inner}")
                }
            },
        )
    };
}

/// The server's answer to `POST /v1/jobs/batch` with these `jobs`, up to
/// the writes: decoded as its JSON extractor does (field paths, serde's
/// messages without their line and column), converted, then validated
/// with the default limits. The jobs, or the error's message.
fn server_batch(jobs: &Value) -> Result<Vec<NewJob>, String> {
    let body = serde_json::to_vec(&json!({ "jobs": jobs })).unwrap();
    let req: tether_api::BatchEnqueueRequest = decode!(&body)?;
    let jobs = req
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, j)| j.into_new_job(&format!("jobs[{i}]")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    validate::name("tenant", T).map_err(|e| e.to_string())?;
    validate::new_jobs(&jobs, &Limits::default()).map_err(|e| e.to_string())?;
    Ok(jobs)
}

/// The server's answer to `POST /v1/jobs` with this body (see [`server_batch`]).
fn server_single(body: &Value) -> Result<NewJob, String> {
    let req: tether_api::EnqueueRequest = decode!(&serde_json::to_vec(body).unwrap())?;
    let job = req.into_new_job("").map_err(|e| e.to_string())?;
    validate::new_job("", &job, &Limits::default()).map_err(|e| e.to_string())?;
    Ok(job)
}

/// What the database stored for a job the SQL created is what the server
/// would have stored for the same input.
async fn stored_as_the_server_would(
    conn: &mut PgConnection,
    id: Uuid,
    job: &NewJob,
) -> Result<(), String> {
    let row = sqlx::query(
        "SELECT queue, kind, payload, priority, max_attempts, backoff_base_ms, backoff_cap_ms,
                run_at, expires_at, timeout_ms, idempotency_key, unique_key, tags,
                concurrency_key, headers, state
         FROM tether.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(conn)
    .await
    .map_err(|e| e.to_string())?;
    let micros = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_micros());
    let backoff = job.backoff.unwrap_or_default();
    let headers: Option<Json<BTreeMap<String, String>>> = row.get("headers");
    let run_at: DateTime<Utc> = row.get("run_at");
    let stored = (
        (row.get::<String, _>("queue"), row.get::<String, _>("kind")),
        row.get::<Json<Value>, _>("payload").0,
        row.get::<i16, _>("priority"),
        (
            row.get::<i32, _>("max_attempts"),
            row.get::<i64, _>("backoff_base_ms"),
            row.get::<i64, _>("backoff_cap_ms"),
        ),
        micros(row.get("expires_at")),
        row.get::<Option<i64>, _>("timeout_ms"),
        (
            row.get::<Option<String>, _>("idempotency_key"),
            row.get::<Option<String>, _>("unique_key"),
            row.get::<Option<String>, _>("concurrency_key"),
        ),
        row.get::<Vec<String>, _>("tags"),
        headers.map(|h| h.0).unwrap_or_default(),
        row.get::<String, _>("state"),
    );
    let expected = (
        (job.queue.clone(), job.kind.clone()),
        job.payload.clone(),
        job.priority,
        (
            job.max_attempts.unwrap_or(5),
            backoff.base_ms,
            backoff.cap_ms,
        ),
        micros(job.expires_at),
        job.timeout_ms,
        (
            job.idempotency_key.clone(),
            job.unique_key.clone(),
            job.concurrency_key.clone(),
        ),
        job.tags.clone(),
        job.headers.clone(),
        "queued".to_owned(),
    );
    if stored != expected {
        return Err(format!("stored {stored:?}\nexpected {expected:?}"));
    }
    if let RunAt::At(at) = job.run_at {
        if run_at.timestamp_micros() != at.timestamp_micros() {
            return Err(format!("run_at stored {run_at}, expected {at}"));
        }
    }
    Ok(())
}

/// One random batch through both: the same verdict, the same message, and
/// for accepted jobs the same stored fields. Entries of one element also go
/// through `tether.enqueue` against the single-job route. Rolled back.
async fn agree(pool: &PgPool, jobs: &Value) -> Result<bool, String> {
    let server = server_batch(jobs);
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let sql = enqueue_many(&mut tx, jobs).await;
    match (&server, &sql) {
        (Err(want), Err((code, got))) if code == "22023" && got == want => {}
        (Ok(new), Ok(out)) if new.len() == out.len() => {
            for (job, (_, id, created)) in new.iter().zip(out) {
                if *created {
                    stored_as_the_server_would(&mut tx, *id, job).await?;
                }
            }
        }
        _ => return Err(format!("server: {server:?}\nSQL: {sql:?}")),
    }
    tx.rollback().await.map_err(|e| e.to_string())?;

    let accepted = server.is_ok();
    let [Value::Object(entry)] = jobs.as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Ok(accepted);
    };
    let (Some(Value::String(queue)), Some(Value::String(kind))) =
        (entry.get("queue"), entry.get("kind"))
    else {
        return Ok(accepted);
    };
    let server = server_single(&Value::Object(entry.clone()));
    let mut options = entry.clone();
    options.remove("queue");
    options.remove("kind");
    let payload = options.remove("payload").unwrap_or(Value::Null);
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let sql = enqueue(&mut tx, queue, kind, payload, Value::Object(options)).await;
    match (&server, &sql) {
        (Err(want), Err((code, got))) if code == "22023" && got == want => {}
        (Ok(job), Ok((id, true))) => stored_as_the_server_would(&mut tx, *id, job).await?,
        _ => return Err(format!("single job: server: {server:?}\nSQL: {sql:?}")),
    }
    tx.rollback().await.map_err(|e| e.to_string())?;
    Ok(accepted)
}

/// Characters a name, key or header may not hold, and some it may.
fn odd_char() -> impl Strategy<Value = char> {
    prop::sample::select(vec![
        ' ', '/', ':', '"', '\'', '\\', '\n', '\t', '\r', '\u{1}', '\u{1b}', '\u{7f}', '\u{85}',
        '\u{9f}', '\u{a0}', '\u{ad}', 'é', '€', '😀', '\u{300}', '\u{200b}', '\u{2028}',
        '\u{feff}', '@', '%', '?', '#',
    ])
}

fn with_odd_char() -> impl Strategy<Value = String> {
    ("[a-z]{0,3}", odd_char(), "[a-z]{0,3}").prop_map(|(a, c, b)| format!("{a}{c}{b}"))
}

/// A name: mostly valid, sometimes at or past an edge.
fn name() -> BoxedStrategy<String> {
    prop_oneof![
        100 => "[A-Za-z0-9._:-]{1,10}",
        1 => Just(String::new()),
        1 => Just(".".to_owned()),
        1 => Just("..".to_owned()),
        1 => Just("n".repeat(128)),
        1 => Just("n".repeat(129)),
        1 => Just("é".repeat(64)),
        3 => with_odd_char(),
    ]
    .boxed()
}

fn key() -> BoxedStrategy<String> {
    prop_oneof![
        20 => "[a-z0-9:]{1,16}",
        1 => Just(String::new()),
        1 => Just("k".repeat(255)),
        1 => Just("k".repeat(256)),
        1 => Just("é".repeat(255)),
        1 => Just("é".repeat(256)),
        3 => with_odd_char(),
    ]
    .boxed()
}

fn millis() -> BoxedStrategy<i64> {
    prop_oneof![
        24 => 0..100_000i64,
        1 => -3..3i64,
        1 => Just(MAX_MS),
        1 => Just(MAX_MS + 1),
        1 => 0..=MAX_MS,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
    ]
    .boxed()
}

/// A time the server reads (RFC 3339, at most six digits of a second),
/// mostly within 1970..9999.
fn time() -> BoxedStrategy<String> {
    let date = prop_oneof![
        24 => (2000i32..2100, 1u32..=12, 1u32..=28),
        2 => (0i32..10_000, 1u32..=12, 1u32..=28),
        1 => Just((9999, 12, 31)),
        1 => Just((1970, 1, 1)),
        1 => Just((1969, 12, 31)),
        1 => Just((0, 1, 1)),
        1 => Just((2024, 2, 29)),
    ];
    let clock = (
        0u32..24,
        0u32..60,
        prop_oneof![20 => 0u32..60, 1 => Just(60u32)],
    );
    let fraction = proptest::option::of(
        (1u32..=6, 0u64..1_000_000)
            .prop_map(|(n, v)| format!(".{:0w$}", v % 10u64.pow(n), w = n as usize)),
    );
    let separator = prop::sample::select(vec!['T', 't', ' ']);
    let offset = prop_oneof![
        3 => Just("Z".to_owned()),
        1 => Just("z".to_owned()),
        3 => (prop::sample::select(vec!["+", "-", "\u{2212}"]), 0u32..24, 0u32..60)
            .prop_map(|(s, h, m)| format!("{s}{h:02}:{m:02}")),
    ];
    (date, separator, clock, fraction, offset)
        .prop_map(|((y, mo, d), sep, (h, mi, s), fraction, offset)| {
            let fraction = fraction.unwrap_or_default();
            format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{fraction}{offset}")
        })
        .boxed()
}

/// A string the server may not read as a time (and some it does).
fn bad_time() -> BoxedStrategy<String> {
    prop_oneof![
        (time(), any::<prop::sample::Index>()).prop_map(|(s, i)| {
            let cuts: Vec<usize> = s.char_indices().map(|(at, _)| at).collect();
            s[..cuts[i.index(cuts.len())]].to_owned()
        }),
        (time(), "[a Z:0-9.+-]").prop_map(|(s, t)| format!("{s}{t}")),
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt x][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,11})?([Zz]|[+\u{2212}-][0-9]{1,2}(:[0-9]{0,3})?)?",
        "[a-zA-Z +_-][ -~]{0,24}",
        "[0-9][ -~]{0,30}",
    ]
    .boxed()
}

fn payload() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i32..1000).prop_map(|n| json!(f64::from(n) + 0.5)),
        "[ -~é€\n\t]{0,12}".prop_map(Value::from),
    ];
    let tree = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z ,:\"\\\\]{0,5}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // Near the limit of 1 MiB of compact JSON, with strings holding what
    // the measure must not count (", " and ": " inside them, escapes).
    let big = (1_048_556usize..1_048_597).prop_map(|size| {
        let mut filler = "a, \"b\": \\c ".repeat(size / 16);
        let mut payload = json!({"s": "", "t": [1, 2, {"u": null}]});
        payload["s"] = json!(filler);
        let short = size - serde_json::to_vec(&payload).unwrap().len();
        filler.push_str(&"x".repeat(short));
        payload["s"] = json!(filler);
        payload
    });
    prop_oneof![60 => tree, 1 => big].boxed()
}

fn tags() -> BoxedStrategy<Vec<String>> {
    prop_oneof![
        20 => prop::collection::vec("[a-z0-9]{1,6}", 0..4),
        1 => prop::collection::vec("[a-z]{1,3}", 31..35),
        2 => prop::collection::vec(name(), 1..3),
    ]
    .boxed()
}

fn headers() -> BoxedStrategy<BTreeMap<String, String>> {
    let header_name = prop_oneof![
        60 => "[A-Za-z0-9_.-]{1,10}",
        1 => Just(String::new()),
        1 => Just("h".repeat(64)),
        1 => Just("h".repeat(65)),
        3 => with_odd_char(),
    ];
    let value = prop_oneof![
        60 => "[ -~é]{0,20}",
        1 => Just("v".repeat(1024)),
        1 => Just("v".repeat(1025)),
        1 => Just("é".repeat(513)),
        3 => with_odd_char(),
    ];
    prop_oneof![
        20 => prop::collection::btree_map(header_name, value, 0..4),
        1 => prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,3}", 31..35),
        1 => prop::collection::btree_map("[a-z]{2,8}", Just("w".repeat(1000)), 4..6),
    ]
    .boxed()
}

/// Something the server's decoding refuses in one field (or, rarely, does
/// not): at most one per entry, so that which error comes first cannot
/// depend on the order of an object's keys.
#[derive(Debug, Clone)]
enum Defect {
    Set(String, Value),
    Remove(&'static str),
}

const FIELDS: [&str; 19] = [
    "queue",
    "kind",
    "payload",
    "priority",
    "run_at",
    "delay_ms",
    "max_attempts",
    "timeout_ms",
    "idempotency_key",
    "unique_key",
    "tags",
    "expires_at",
    "backoff",
    "concurrency_key",
    "depends_on",
    "depends_on_entries",
    "dependency_failure",
    "workflow_id",
    "headers",
];

fn not_a_string() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i32>().prop_map(Value::from),
        Just(json!(1.5)),
        any::<bool>().prop_map(Value::from),
        Just(json!([])),
        Just(json!(["x"])),
        Just(json!({"a": 1})),
        Just(Value::Null),
    ]
    .boxed()
}

fn not_an_int(bits: u32) -> BoxedStrategy<Value> {
    let out_of_range: BoxedStrategy<Value> = match bits {
        16 => prop_oneof![
            (32_768i64..100_000).prop_map(Value::from),
            (-100_000i64..-32_768).prop_map(Value::from),
        ]
        .boxed(),
        32 => prop_oneof![
            (2_147_483_648i64..1 << 40).prop_map(Value::from),
            (-(1i64 << 40)..-2_147_483_648).prop_map(Value::from),
        ]
        .boxed(),
        _ => ((i64::MAX as u64 + 1)..=u64::MAX)
            .prop_map(Value::from)
            .boxed(),
    };
    prop_oneof![
        3 => out_of_range,
        1 => "[0-9]{1,3}".prop_map(Value::from),
        1 => (-50i32..50).prop_map(|n| json!(f64::from(n) + 0.25)),
        1 => Just(json!(100.0)),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(json!([1])),
        1 => Just(json!({})),
    ]
    .boxed()
}

fn defect() -> BoxedStrategy<Defect> {
    let strings = prop::sample::select(vec![
        "queue",
        "kind",
        "idempotency_key",
        "unique_key",
        "concurrency_key",
    ]);
    let wrong_element = prop_oneof![
        Just(json!(1)),
        Just(Value::Null),
        Just(json!(true)),
        Just(json!([])),
        Just(json!({}))
    ];
    prop_oneof![
        (strings, not_a_string()).prop_map(|(f, v)| Defect::Set(f.into(), v)),
        prop::sample::select(vec!["queue", "kind"]).prop_map(Defect::Remove),
        not_an_int(16).prop_map(|v| Defect::Set("priority".into(), v)),
        not_an_int(32).prop_map(|v| Defect::Set("max_attempts".into(), v)),
        (
            prop::sample::select(vec!["delay_ms", "timeout_ms"]),
            not_an_int(64)
        )
            .prop_map(|(f, v)| Defect::Set(f.into(), v)),
        (
            prop::sample::select(vec!["run_at", "expires_at"]),
            prop_oneof![
                3 => bad_time().prop_map(Value::from),
                1 => not_a_string(),
            ]
        )
            .prop_map(|(f, v)| Defect::Set(f.into(), v)),
        prop_oneof![
            Just(json!("a")),
            Just(json!({})),
            Just(json!(3)),
            (
                prop::collection::vec("[a-z]{1,3}", 0..3),
                wrong_element.clone()
            )
                .prop_map(|(mut tags, bad)| {
                    let mut tags: Vec<Value> = tags.drain(..).map(Value::from).collect();
                    tags.push(bad);
                    Value::Array(tags)
                }),
        ]
        .prop_map(|v| Defect::Set("tags".into(), v)),
        prop_oneof![
            Just(json!([])),
            Just(json!("a")),
            Just(json!(5)),
            wrong_element.prop_map(|bad| json!({"a": "ok", "b": bad})),
        ]
        .prop_map(|v| Defect::Set("headers".into(), v)),
        prop_oneof![
            Just(json!(5)),
            Just(json!("x")),
            Just(json!({})),
            Just(json!({"base_ms": 1})),
            Just(json!({"cap_ms": 1})),
            Just(json!({"base_ms": 1, "cap_ms": 2, "x": 3})),
            Just(json!({"base_ms": "1", "cap_ms": 2})),
            Just(json!({"base_ms": 1, "cap_ms": 1.5})),
        ]
        .prop_map(|v| Defect::Set("backoff".into(), v)),
        "[a-z_]{1,12}"
            .prop_filter("an unknown field", |f| !FIELDS.contains(&f.as_str()))
            .prop_map(|f| Defect::Set(f, json!(1))),
    ]
    .boxed()
}

fn entry() -> BoxedStrategy<Value> {
    use proptest::option::weighted;
    let backoff = (millis(), millis()).prop_map(|(b, c)| json!({"base_ms": b, "cap_ms": c}));
    let priority = prop_oneof![
        20 => -100i16..=100,
        2 => -150i16..150,
        1 => Just(i16::MIN),
        1 => Just(i16::MAX),
    ];
    let attempts = prop_oneof![
        20 => 1i32..=1000,
        2 => -2i32..1003,
        1 => Just(i32::MIN),
        1 => Just(i32::MAX),
    ];
    let optional =
        |p: f64, s: BoxedStrategy<Value>| weighted(p, prop_oneof![12 => s, 1 => Just(Value::Null)]);
    (
        (name(), name(), weighted(0.5, payload())),
        (
            optional(0.3, priority.prop_map(Value::from).boxed()),
            optional(0.25, time().prop_map(Value::from).boxed()),
            optional(0.2, millis().prop_map(Value::from).boxed()),
            optional(0.25, attempts.prop_map(Value::from).boxed()),
        ),
        (
            optional(0.2, backoff.boxed()),
            optional(0.2, millis().prop_map(Value::from).boxed()),
            optional(0.25, key().prop_map(Value::from).boxed()),
            optional(0.2, key().prop_map(Value::from).boxed()),
        ),
        (
            optional(0.3, tags().prop_map(Value::from).boxed()),
            optional(0.2, time().prop_map(Value::from).boxed()),
            optional(0.2, name().prop_map(Value::from).boxed()),
            optional(0.3, headers().prop_map(|h| json!(h)).boxed()),
        ),
        weighted(0.15, defect()),
    )
        .prop_map(|(head, times, limits, labels, defect)| {
            let (queue, kind, payload) = head;
            let (priority, run_at, delay_ms, max_attempts) = times;
            let (backoff, timeout_ms, idempotency_key, unique_key) = limits;
            let (tags, expires_at, concurrency_key, headers) = labels;
            let mut m = Map::new();
            m.insert("queue".into(), queue.into());
            m.insert("kind".into(), kind.into());
            for (field, value) in [
                ("payload", payload),
                ("priority", priority),
                ("run_at", run_at),
                ("delay_ms", delay_ms),
                ("max_attempts", max_attempts),
                ("backoff", backoff),
                ("timeout_ms", timeout_ms),
                ("idempotency_key", idempotency_key),
                ("unique_key", unique_key),
                ("tags", tags),
                ("expires_at", expires_at),
                ("concurrency_key", concurrency_key),
                ("headers", headers),
            ] {
                if let Some(v) = value {
                    m.insert(field.into(), v);
                }
            }
            match defect {
                Some(Defect::Set(field, v)) => {
                    m.insert(field, v);
                }
                Some(Defect::Remove(field)) => {
                    m.remove(field);
                }
                None => {}
            }
            Value::Object(m)
        })
        .boxed()
}

/// Random batches (valid and not: out-of-range numbers, bad names and
/// keys, too many tags and headers, wrong types, unreadable times, unknown
/// and missing fields) through `tether.enqueue_many` and the server's
/// decoding and validation: one accepts exactly what the other does, with
/// the same message when it refuses, and stores the same job. Cases:
/// `TETHER_SQL_ENQUEUE_CASES` (default 400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_and_server_agree_on_random_bodies() {
    let db = tether_conformance::postgres().await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&db.postgres_url().unwrap())
        .await
        .unwrap();
    let cases = std::env::var("TETHER_SQL_ENQUEUE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    });
    let batches = prop_oneof![
        1 => Just(Vec::new()),
        30 => prop::collection::vec(entry(), 1..=1),
        10 => prop::collection::vec(entry(), 2..=3),
    ]
    .prop_map(Value::Array);
    let handle = tokio::runtime::Handle::current();
    let verdicts = [AtomicU32::new(0), AtomicU32::new(0)];
    let result = tokio::task::block_in_place(|| {
        runner.run(&batches, |jobs| {
            let accepted = handle
                .block_on(agree(&pool, &jobs))
                .map_err(|e| TestCaseError::fail(format!("{e}\njobs: {jobs}")))?;
            verdicts[usize::from(accepted)].fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("the SQL enqueue and the server disagree:\n{e}");
    }
    // Both verdicts are well represented.
    let [refused, accepted] = verdicts.map(AtomicU32::into_inner);
    assert!(
        refused >= cases / 5 && accepted >= cases / 5,
        "{accepted} accepted, {refused} refused of {cases}"
    );
    let mut conn = connect(&db).await;
    nothing_written(&mut conn).await;
    drop(conn);
    pool.close().await;
    db.cleanup().await;
}
