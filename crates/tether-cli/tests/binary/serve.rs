//! `tether serve` as a real process: first-start admin key, TETHER_ADMIN_KEY
//! (rotation, upgrade from the old storage), the server secret, metrics,
//! graceful shutdown with a waiting claim, maintenance failover between
//! replicas on one PostgreSQL database, and a private data directory.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{call, http, temp_dir, tether, Server};
use serde_json::json;

#[tokio::test]
async fn first_start_generates_an_admin_key_once() {
    let dir = temp_dir("first");
    let mut s = Server::start(&dir, &[], &[]);
    assert!(s.banner.contains("backend: sqlite"), "{}", s.banner);
    let dashboard = format!("dashboard: http://{}/", s.addr);
    assert!(s.banner.contains(&dashboard), "{}", s.banner);
    let printed = s
        .banner
        .lines()
        .find_map(|l| l.trim().strip_prefix("tth_").map(|k| format!("tth_{k}")))
        .expect("the first start prints the key");
    let saved = tether_server::admin_key::read_key_file(&dir).unwrap();
    assert_eq!(printed, saved);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("admin.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let (status, body) = call(reqwest::Method::GET, &s.url("/v1/tenants"), &saved, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tenants"][0]["name"], "default");
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(10)).success());

    // The second start finds the key and shows nothing secret.
    let s = Server::start(&dir, &[], &[]);
    assert!(!s.banner.contains("tth_"), "{}", s.banner);
    assert!(s.banner.contains("admin.key"), "{}", s.banner);
    let (status, _) = call(reqwest::Method::GET, &s.url("/v1/tenants"), &saved, None).await;
    assert_eq!(status, 200);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn tether_admin_key_is_the_admin_key() {
    let dir = temp_dir("envkey");
    let key = "an-operator-chosen-admin-key-1234";
    let s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", key)]);
    assert!(s.banner.contains("TETHER_ADMIN_KEY"), "{}", s.banner);
    assert!(
        !dir.join("admin.key").exists(),
        "no key file with TETHER_ADMIN_KEY"
    );
    let (status, body) = call(
        reqwest::Method::POST,
        &s.url("/v1/tenants"),
        key,
        Some(json!({"name": "acme"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, _) = call(
        reqwest::Method::GET,
        &s.url("/v1/tenants"),
        "an-operator-chosen-admin-key-1235",
        None,
    )
    .await;
    assert_eq!(status, 401);
    drop(s);

    // A weak key is refused at start, loudly.
    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .env("TETHER_ADMIN_KEY", "short")
        .env("TETHER_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("TETHER_ADMIN_KEY"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn metrics_need_an_admin_key_and_show_queues_and_counters() {
    let dir = temp_dir("metrics");
    let key = "metrics-admin-key-0123456789";
    let s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", key)]);
    let (status, _) = call(
        reqwest::Method::POST,
        &s.url("/v1/jobs"),
        key,
        Some(json!({"queue": "mail", "kind": "send"})),
    )
    .await;
    assert_eq!(status, 201);
    // A claim that flow control holds back (a rate limit of one job a
    // minute, two jobs ready) is counted.
    let (status, _) = call(
        reqwest::Method::POST,
        &s.url("/v1/jobs"),
        key,
        Some(json!({"queue": "mail", "kind": "send"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(
        reqwest::Method::PATCH,
        &s.url("/v1/queues/mail"),
        key,
        Some(json!({"rate_limit": {"count": 1, "period_ms": 60000}})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, claimed) = call(
        reqwest::Method::POST,
        &s.url("/v1/queues/mail/claim"),
        key,
        Some(json!({"worker_id": "w", "limit": 10})),
    )
    .await;
    assert_eq!(
        (status, claimed["jobs"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let (status, tenant) = call(
        reqwest::Method::POST,
        &s.url("/v1/tenants"),
        key,
        Some(json!({"name": "acme"})),
    )
    .await;
    assert_eq!(status, 201);
    let acme_key = tenant["api_key"].as_str().unwrap().to_owned();

    let resp = http()
        .get(s.url("/metrics"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = resp.text().await.unwrap();
    for line in [
        "tether_queue_jobs{tenant=\"default\",queue=\"mail\",state=\"queued\"} 1",
        "tether_queue_jobs{tenant=\"default\",queue=\"mail\",state=\"running\"} 1",
        "tether_claims_throttled_total{tenant=\"default\",queue=\"mail\"} 1",
        "tether_queue_oldest_ready_age_seconds{tenant=\"default\",queue=\"mail\"}",
        "tether_queue_expired_leases{tenant=\"default\",queue=\"mail\"} 0",
        "tether_jobs_enqueued_total{tenant=\"default\",queue=\"mail\"} 2",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    let (status, body) = call(reqwest::Method::GET, &s.url("/metrics"), &acme_key, None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("permission_denied"))
    );
    let resp = http().get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn sigterm_answers_waiting_claims_and_exits_zero() {
    let dir = temp_dir("sigterm");
    let key = "sigterm-admin-key-0123456789";
    let mut s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", key)]);
    let url = s.url("/v1/queues/idle/claim");
    let waiting = tokio::spawn({
        let key = key.to_owned();
        async move {
            call(
                reqwest::Method::POST,
                &url,
                &key,
                Some(json!({"worker_id": "w", "wait_ms": 25000})),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "the claim waits");
    let sent = Instant::now();
    s.signal("TERM");
    let (status, body) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting claim is answered during shutdown")
        .unwrap();
    assert_eq!((status, body), (200, json!({"jobs": []})));
    let exit = s.wait_exit(Duration::from_secs(10));
    assert!(exit.success(), "{exit}");
    assert!(
        sent.elapsed() < Duration::from_secs(10),
        "the shutdown did not wait out the long-poll"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The holder of the maintenance lease, if it is live.
async fn maintenance_holder(pool: &sqlx::PgPool) -> Option<String> {
    sqlx::query_scalar::<_, String>(
        "SELECT holder FROM tether.leases WHERE name = 'maintenance' AND expires_at > now()",
    )
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// The pid in a holder id `serve:<pid>:<random>`.
fn holder_pid(holder: &str) -> u32 {
    holder.split(':').nth(1).unwrap().parse().unwrap()
}

async fn wait_for_holder(
    pool: &sqlx::PgPool,
    among: &[u32],
    not: Option<u32>,
    within: Duration,
) -> u32 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(h) = maintenance_holder(pool).await {
            let pid = holder_pid(&h);
            if among.contains(&pid) && Some(pid) != not {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no replica among {among:?} (other than {not:?}) took the maintenance lease within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn replicas_on_postgres_elect_one_maintainer_and_fail_over() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let key = "replica-admin-key-0123456789";
    let dirs: Vec<PathBuf> = (0..3).map(|i| temp_dir(&format!("replica{i}"))).collect();
    // Replicas in their own data directories share one server secret.
    let secret = "5e".repeat(32);
    let env = [("TETHER_ADMIN_KEY", key), ("TETHER_SERVER_SECRET", &secret)];
    // Tick 300 ms: the leader lease lasts 1 s (the minimum).
    let args = [
        "--database-url",
        url.as_str(),
        "--maintenance-tick",
        "300ms",
    ];
    // Started all at once, as an orchestrator would.
    let mut servers: Vec<Server> = std::thread::scope(|scope| {
        let starting: Vec<_> = dirs
            .iter()
            .map(|d| scope.spawn(|| Server::start(d, &args, &env)))
            .collect();
        starting.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let pids: Vec<u32> = servers.iter().map(Server::pid).collect();

    // Started at once with the same key, no replica revoked another's: it
    // is one operator key, valid on every replica.
    for server in &servers {
        assert!(!server.banner.contains("revoked"), "{}", server.banner);
        let (status, _) = call(reqwest::Method::GET, &server.url("/v1/tenants"), key, None).await;
        assert_eq!(status, 200);
    }
    let operator_keys: Vec<(bool,)> =
        sqlx::query_as("SELECT revoked_at IS NULL FROM tether.api_keys WHERE operator")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(operator_keys, vec![(true,)]);
    let leader = wait_for_holder(&pool, &pids, None, Duration::from_secs(10)).await;

    // For a while, exactly that replica keeps the lease (no flapping).
    for _ in 0..10 {
        let h = maintenance_holder(&pool).await.expect("a live lease");
        assert_eq!(holder_pid(&h), leader);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A job whose worker vanished: claimed with a 1 s lease, never finished.
    let api = &servers[0];
    let (status, _) = call(
        reqwest::Method::POST,
        &api.url("/v1/jobs"),
        key,
        Some(json!({"queue": "q", "kind": "k", "max_attempts": 3})),
    )
    .await;
    assert_eq!(status, 201);

    // Kill the leader outright: another replica takes over once the lease
    // (1 s) lapses, and keeps reaping.
    let idx = pids.iter().position(|p| *p == leader).unwrap();
    let mut dead = servers.remove(idx);
    dead.signal("KILL");
    dead.wait_exit(Duration::from_secs(5));
    let killed_at = Instant::now();
    let survivors: Vec<u32> = servers.iter().map(Server::pid).collect();
    let next = wait_for_holder(&pool, &survivors, Some(leader), Duration::from_secs(10)).await;
    let took = killed_at.elapsed();
    assert!(
        took < Duration::from_millis(1_000 + 2 * 300 + 2_000),
        "takeover took {took:?}, expected about one lease TTL"
    );

    let api = &servers[0];
    let (status, claimed) = call(
        reqwest::Method::POST,
        &api.url("/v1/queues/q/claim"),
        key,
        Some(json!({"worker_id": "vanishing", "lease_ttl_ms": 1000})),
    )
    .await;
    assert_eq!(status, 200);
    let id = claimed["jobs"][0]["id"]
        .as_str()
        .expect("claimed")
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, job) = call(
            reqwest::Method::GET,
            &api.url(&format!("/v1/jobs/{id}")),
            key,
            None,
        )
        .await;
        if job["job"]["state"] == "queued" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new leader did not reap: {job}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A graceful stop hands the lease over at once (released, not lapsed).
    let idx = survivors.iter().position(|p| *p == next).unwrap();
    let mut stopping = servers.remove(idx);
    stopping.signal("TERM");
    assert!(stopping.wait_exit(Duration::from_secs(10)).success());
    let last = servers[0].pid();
    wait_for_holder(&pool, &[last], None, Duration::from_secs(5)).await;

    drop(servers);
    pool.close().await;
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `tether serve` with the given options in `dir`, expected to refuse to
/// start: its exit code and stderr.
fn refused_start(dir: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(extra)
        .env_remove("TETHER_ADMIN_KEY")
        .env_remove("TETHER_SERVER_SECRET")
        .env_remove("TETHER_DATABASE_URL")
        .env("TETHER_LOG", "off");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Starting with a new `TETHER_ADMIN_KEY` revokes the operator key of the
/// old one, and the banner says so; the old value coming back stays revoked
/// and leaves the new one alone. The key is stored as an HMAC under the
/// secret in `server.secret`.
#[tokio::test]
async fn a_new_tether_admin_key_revokes_the_old_one() {
    let dir = temp_dir("rotate");
    let (old, new) = (
        "the-first-operator-key-0123",
        "the-second-operator-key-0123",
    );
    let tenants = |s: &Server| s.url("/v1/tenants");
    let mut s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", old)]);
    assert!(!s.banner.contains("revoked"), "{}", s.banner);
    assert_eq!(
        call(reqwest::Method::GET, &tenants(&s), old, None).await.0,
        200
    );
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(10)).success());

    let mut s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", new)]);
    assert!(
        s.banner
            .contains("admin key: from TETHER_ADMIN_KEY (new: revoked the earlier one: "),
        "{}",
        s.banner
    );
    assert_eq!(
        call(reqwest::Method::GET, &tenants(&s), old, None).await.0,
        401
    );
    let (status, body) = call(reqwest::Method::GET, &tenants(&s), new, None).await;
    assert_eq!(status, 200);
    // The listing shows both operator keys, the old one revoked.
    let default_id = body["tenants"][0]["id"].as_str().unwrap().to_owned();
    let keys_url = s.url(&format!("/v1/tenants/{default_id}/keys"));
    let (status, body) = call(reqwest::Method::GET, &keys_url, new, None).await;
    assert_eq!(status, 200, "{body}");
    let keys = body["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{body}");
    assert!(keys
        .iter()
        .all(|k| k["name"] == "TETHER_ADMIN_KEY" && k["admin"] == true));
    assert!(keys[0]["revoked_at"].is_string() && keys[1]["revoked_at"].is_null());
    assert!(
        s.banner.contains(keys[0]["id"].as_str().unwrap()),
        "{}",
        s.banner
    );
    s.signal("TERM");
    assert!(s.wait_exit(Duration::from_secs(10)).success());

    // What is stored: HMACs under the secret beside the data, never a hash
    // of the key alone.
    let secret = std::fs::read_to_string(dir.join("server.secret")).unwrap();
    let secret = tether_core::ServerSecret::from_hex(&secret).unwrap();
    let (id, expected) = tether_core::ApiKeySecret::operator(new, &secret).unwrap();
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", dir.join("tether.db").display()))
        .await
        .unwrap();
    let (stored, revoked): (Vec<u8>, bool) = sqlx::query_as(
        "SELECT hash, revoked_at IS NOT NULL FROM tether_api_keys WHERE id = ?1 AND operator = 1",
    )
    .bind(id.to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((stored, revoked), (expected.hash().to_vec(), false));
    pool.close().await;

    // The old value again (say, a replica not yet updated): it stays
    // revoked, and the new one keeps working.
    let s = Server::start(&dir, &[], &[("TETHER_ADMIN_KEY", old)]);
    assert!(
        s.banner.contains("TETHER_ADMIN_KEY was revoked"),
        "{}",
        s.banner
    );
    assert_eq!(
        call(reqwest::Method::GET, &tenants(&s), old, None).await.0,
        401
    );
    assert_eq!(
        call(reqwest::Method::GET, &tenants(&s), new, None).await.0,
        200
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replicas that each made their own server secret cannot serve one
/// database once an operator key is stored under one of them: the second
/// is refused at start (with or without TETHER_ADMIN_KEY), saying what to
/// do; given the first one's secret through TETHER_SERVER_SECRET, it
/// starts, and a bad TETHER_SERVER_SECRET is refused. Before any operator
/// key, replicas need not share a secret.
#[tokio::test]
async fn a_replica_with_another_server_secret_is_refused() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let (a, b, c) = (
        temp_dir("secret-a"),
        temp_dir("secret-b"),
        temp_dir("secret-c"),
    );
    let key = "secret-admin-key-0123456789";
    let args = ["--database-url", url.as_str()];
    drop(Server::start(&c, &args, &[]));
    let first = Server::start(&a, &args, &[("TETHER_ADMIN_KEY", key)]);
    let (code, err) = refused_start(&c, &args, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("TETHER_SERVER_SECRET"), "{err}");

    let (code, err) = refused_start(&b, &args, &[("TETHER_ADMIN_KEY", key)]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("is not the one this database was first served with")
            && err.contains("TETHER_SERVER_SECRET"),
        "{err}"
    );
    let (status, _) = call(reqwest::Method::GET, &first.url("/v1/tenants"), key, None).await;
    assert_eq!(status, 200, "the refused replica revoked nothing");

    let (code, err) = refused_start(&b, &args, &[("TETHER_SERVER_SECRET", "0123")]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("TETHER_SERVER_SECRET is not a server secret"),
        "{err}"
    );

    let secret = std::fs::read_to_string(a.join("server.secret")).unwrap();
    let env = [
        ("TETHER_ADMIN_KEY", key),
        ("TETHER_SERVER_SECRET", secret.trim()),
    ];
    let second = Server::start(&b, &args, &env);
    assert!(!second.banner.contains("revoked"), "{}", second.banner);
    for s in [&first, &second] {
        let (status, _) = call(reqwest::Method::GET, &s.url("/v1/tenants"), key, None).await;
        assert_eq!(status, 200);
    }
    drop((first, second));
    db.cleanup().await;
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The data directory is 0700 and the files in it 0600 from the first
/// start, whatever the umask; a directory and files made wider (by hand, or
/// by an older tether) are tightened at the next start.
#[cfg(unix)]
#[tokio::test]
async fn the_data_directory_and_its_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("private");
    let set = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set(&dir, 0o755);
    let files = [
        "tether.db",
        "tether.db-wal",
        "tether.db-shm",
        "admin.key",
        "server.secret",
    ];
    let check = |when: &str| {
        let mode = |name: &str| {
            std::fs::metadata(dir.join(name))
                .unwrap_or_else(|e| panic!("{when}: {name}: {e}"))
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(""), 0o700, "{when}: the data directory");
        for name in files {
            assert_eq!(mode(name), 0o600, "{when}: {name}");
        }
    };
    for round in ["first start", "after loosening"] {
        let mut s = Server::start(&dir, &[], &[]);
        let key = tether_server::admin_key::read_key_file(&dir).unwrap();
        let (status, _) = call(
            reqwest::Method::POST,
            &s.url("/v1/jobs"),
            &key,
            Some(json!({"queue": "q", "kind": "k"})),
        )
        .await;
        assert_eq!(status, 201);
        check(round);
        // Killed, so the -wal and -shm files stay; then loosened.
        s.signal("KILL");
        s.wait_exit(Duration::from_secs(5));
        set(&dir, 0o755);
        for name in files {
            set(&dir.join(name), 0o644);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file left by an older tether (schema 3), whose operator key was stored
/// the old way: after the upgrade, `tether serve` with the same
/// TETHER_ADMIN_KEY stores it anew and it works; the old row is revoked.
#[tokio::test]
async fn an_operator_key_stored_the_old_way_keeps_working_after_the_upgrade() {
    let key = "an-operator-key-from-schema-3";
    let (default_id, legacy_id) = (uuid::Uuid::new_v4(), legacy_operator_id(key));
    let seed = format!(
        "INSERT INTO tether_tenants (id, name, created_at) VALUES ('{default_id}', 'default', 0);
         INSERT INTO tether_api_keys (id, tenant_id, name, hash, admin, created_at)
         VALUES ('{legacy_id}', '{default_id}', 'TETHER_ADMIN_KEY', X'{}', 1, 0);",
        hex(&sha256(key.as_bytes()))
    );
    let db = tether_conformance::sqlite_upgraded_from(3, &seed).await;
    let path = db.sqlite_path().unwrap();
    let dir = temp_dir("upgrade");
    let url = format!("sqlite://{}", path.display());
    let s = Server::start(
        &dir,
        &["--database-url", &url],
        &[("TETHER_ADMIN_KEY", key)],
    );
    assert!(
        s.banner.contains("admin key: from TETHER_ADMIN_KEY"),
        "{}",
        s.banner
    );
    let (status, body) = call(reqwest::Method::GET, &s.url("/v1/tenants"), key, None).await;
    assert_eq!(status, 200, "{body}");
    let keys = db.engine.list_api_keys(default_id).await.unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for k in &keys {
        assert_eq!(k.is_revoked(), k.id == legacy_id, "{k:?}");
    }
    drop(s);
    db.cleanup().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The key id an older tether derived for an operator key: a plain SHA-256.
fn legacy_operator_id(key: &str) -> uuid::Uuid {
    let mut input = b"tether operator key id\0".to_vec();
    input.extend_from_slice(key.as_bytes());
    let digest = sha256(&input);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(id).into_uuid()
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tenant limits and the bound on the per-queue gauges are `tether
/// serve` options (flag or environment variable), listed in its help, and
/// in force: a second queue or schedule is 409 at a limit of one, and the
/// gauges show one queue and count the other.
#[tokio::test]
async fn tenant_limits_and_the_metrics_bound_are_options() {
    let help = tether(&["serve", "--help"], &[], None).ok().stdout;
    for option in [
        "--max-queues-per-tenant",
        "TETHER_MAX_QUEUES_PER_TENANT",
        "--max-schedules-per-tenant",
        "TETHER_MAX_SCHEDULES_PER_TENANT",
        "--metrics-max-queues",
        "TETHER_METRICS_MAX_QUEUES",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }

    let dir = temp_dir("limits");
    let key = "limits-admin-key-0123456789";
    let s = Server::start(
        &dir,
        &["--max-queues-per-tenant", "1"],
        &[
            ("TETHER_ADMIN_KEY", key),
            ("TETHER_MAX_SCHEDULES_PER_TENANT", "1"),
            ("TETHER_METRICS_MAX_QUEUES", "1"),
        ],
    );
    let post = |path: &str, body: serde_json::Value| {
        let url = s.url(path);
        async move { call(reqwest::Method::POST, &url, key, Some(body)).await }
    };
    assert_eq!(
        post("/v1/jobs", json!({"queue": "a", "kind": "k"})).await.0,
        201
    );
    let (status, body) = post("/v1/jobs", json!({"queue": "b", "kind": "k"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "invalid_state");
    let schedule =
        |name: &str| json!({"name": name, "cron": "0 * * * *", "queue": "a", "kind": "k"});
    assert_eq!(post("/v1/schedules", schedule("s1")).await.0, 201);
    assert_eq!(post("/v1/schedules", schedule("s2")).await.0, 409);

    let (status, tenant) = post("/v1/tenants", json!({"name": "acme"})).await;
    assert_eq!(status, 201);
    let acme = tenant["api_key"].as_str().unwrap().to_owned();
    let (status, _) = call(
        reqwest::Method::POST,
        &s.url("/v1/jobs"),
        &acme,
        Some(json!({"queue": "c", "kind": "k"})),
    )
    .await;
    assert_eq!(status, 201);
    let text = http()
        .get(s.url("/metrics"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let paused: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tether_queue_paused{"))
        .collect();
    assert_eq!(paused.len(), 1, "{text}");
    assert!(text.contains("\ntether_queue_series_omitted 1\n"), "{text}");
}
