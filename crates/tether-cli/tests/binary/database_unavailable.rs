//! A PostgreSQL database that cannot serve now is answered `503
//! unavailable` and logged as a warning, never `500 internal` logged as an
//! error: one that refuses connections (`ALLOW_CONNECTIONS false`, its
//! sessions ended: PostgreSQL refuses each new one with a FATAL 55000), and
//! one whose new sessions are read-only (as a standby after a failover: a
//! write fails with 25006). Nothing is written meanwhile, and the server
//! serves again once the database does. The real `tether serve` on a
//! PostgreSQL database of the test's own.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{call, temp_dir, Server};
use reqwest::Method;
use serde_json::{json, Value};
use tether_conformance::TestDb;

const KEY: &str = "unavailable-admin-key-0123456789";

/// A server on a fresh PostgreSQL database, its log in a file, and an
/// admin connection (to the `postgres` database) to change that database.
struct Setup {
    server: Option<Server>,
    db: Option<TestDb>,
    admin: sqlx::PgPool,
    database: String,
    dir: PathBuf,
    log: PathBuf,
}

impl Setup {
    async fn start(tag: &str) -> Setup {
        let db = tether_conformance::postgres().await;
        let url = db.postgres_url().unwrap();
        let database = url.rsplit('/').next().unwrap().to_owned();
        let admin_url = std::env::var("TETHER_TEST_DATABASE_URL")
            .unwrap_or_else(|_| tether_conformance::DEFAULT_DATABASE_URL.to_owned());
        let admin = sqlx::PgPool::connect(&admin_url).await.unwrap();
        let dir = temp_dir(tag);
        let log = dir.join("serve.log");
        let server = Server::start_logging_to(
            &dir,
            &["--database-url", &url],
            &[("TETHER_ADMIN_KEY", KEY), ("TETHER_LOG_FORMAT", "json")],
            &log,
        );
        Setup {
            server: Some(server),
            db: Some(db),
            admin,
            database,
            dir,
            log,
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.as_ref().unwrap().url(path)
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        call(method, &self.url(path), KEY, body).await
    }

    /// Runs `sql` on the admin connection.
    async fn admin(&self, sql: &str) {
        sqlx::raw_sql(sql).execute(&self.admin).await.unwrap();
    }

    /// `ALTER DATABASE <the test's> <change>`.
    async fn alter(&self, change: &str) {
        self.admin(&format!("ALTER DATABASE \"{}\" {change}", self.database))
            .await;
    }

    /// Ends every session of the test's database (the server's pool and
    /// its LISTEN connection), as a restart or a failover would.
    async fn end_sessions(&self) {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(&self.database)
        .execute(&self.admin)
        .await
        .unwrap();
    }

    /// Asserts the answer is `503 unavailable`.
    #[track_caller]
    fn assert_unavailable(what: &str, (status, body): &(u16, Value)) {
        assert_eq!(*status, 503, "{what}: {body}");
        assert_eq!(body["error"]["code"], "unavailable", "{what}: {body}");
    }

    /// The ids of the jobs of queue `q`.
    async fn jobs(&self) -> Vec<String> {
        let (status, body) = self.call(Method::GET, "/v1/jobs?queue=q", None).await;
        assert_eq!(status, 200, "{body}");
        body["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Waits (up to 30 s) for `GET path` to answer 200.
    async fn until_ok(&self, path: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (status, body) = self.call(Method::GET, path, None).await;
            if status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "GET {path} still answers {status}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the server; answers its log lines, checked: none at ERROR,
    /// and the refusals logged as warnings.
    async fn stop_and_check_log(mut self) {
        let mut server = self.server.take().unwrap();
        server.signal("TERM");
        server.wait_exit(Duration::from_secs(30));
        let log = std::fs::read_to_string(&self.log).unwrap();
        let lines: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let errors: Vec<&Value> = lines.iter().filter(|l| l["level"] == "ERROR").collect();
        assert!(errors.is_empty(), "logged at ERROR: {errors:#?}");
        assert!(
            lines
                .iter()
                .any(|l| l["level"] == "WARN" && l["message"] == "database unavailable"),
            "no warning that the database is unavailable in:\n{log}"
        );
        self.admin.close().await;
        self.db.take().unwrap().cleanup().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_refusing_connections_is_answered_503_and_served_again() {
    let s = Setup::start("unavailable-refused").await;
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/jobs",
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_owned();

    s.alter("ALLOW_CONNECTIONS false").await;
    s.end_sessions().await;
    // Twice each: the first may meet a pooled connection that was ended,
    // the second needs a new one, which PostgreSQL refuses (FATAL 55000).
    for _ in 0..2 {
        for (method, path, body) in [
            (Method::GET, format!("/v1/jobs/{id}"), None),
            (Method::GET, "/v1/queues".to_owned(), None),
            (
                Method::POST,
                "/v1/jobs".to_owned(),
                Some(json!({"queue": "q", "kind": "k"})),
            ),
        ] {
            let what = format!("{method} {path}");
            Setup::assert_unavailable(&what, &s.call(method, &path, body).await);
        }
    }
    let (status, body) = s.call(Method::GET, "/readyz", None).await;
    assert_eq!(status, 503, "{body}");

    s.alter("ALLOW_CONNECTIONS true").await;
    s.until_ok(&format!("/v1/jobs/{id}")).await;
    assert_eq!(s.jobs().await, [id], "nothing was written meanwhile");
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/jobs",
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    s.stop_and_check_log().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_read_only_database_are_answered_503_and_served_again() {
    let s = Setup::start("unavailable-read-only").await;
    let (status, body) = s
        .call(
            Method::POST,
            "/v1/jobs",
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_owned();

    // New sessions are read-only, as on a standby; the server's sessions
    // are ended, so its next ones are new.
    s.alter("SET default_transaction_read_only = on").await;
    s.end_sessions().await;
    // Reads are served (so the server has working connections again)...
    s.until_ok(&format!("/v1/jobs/{id}")).await;
    // ...and each write fails with 25006 read_only_sql_transaction.
    for (method, path, body) in [
        (
            Method::POST,
            "/v1/jobs".to_owned(),
            Some(json!({"queue": "q", "kind": "k"})),
        ),
        (Method::POST, format!("/v1/jobs/{id}/cancel"), None),
        (Method::POST, "/v1/queues/q/pause".to_owned(), None),
    ] {
        let what = format!("{method} {path}");
        Setup::assert_unavailable(&what, &s.call(method, &path, body).await);
    }
    assert_eq!(
        s.jobs().await,
        std::slice::from_ref(&id),
        "nothing was written"
    );
    let (status, job) = s.call(Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!((status, &job["job"]["state"]), (200, &json!("queued")));

    s.alter("RESET default_transaction_read_only").await;
    s.end_sessions().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = s
            .call(
                Method::POST,
                "/v1/jobs",
                Some(json!({"queue": "q", "kind": "k"})),
            )
            .await;
        if status == 201 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            Instant::now() < deadline,
            "writes are still refused: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.stop_and_check_log().await;
}
