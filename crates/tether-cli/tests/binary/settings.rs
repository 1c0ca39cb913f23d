//! `tether serve` configured by environment variables alone, as a container
//! or a unit file does it, and `tether serve --help` naming every variable.

use crate::common;

use common::{call, temp_dir, tether, Server};
use serde_json::json;

#[tokio::test]
async fn serve_takes_its_settings_from_the_environment_alone() {
    let dir = temp_dir("settings-env");
    let key = "settings-admin-key-0123456789";
    let server = Server::start_from_env(&[
        ("TETHER_LISTEN", "127.0.0.1:0"),
        ("TETHER_DATA_DIR", dir.to_str().unwrap()),
        ("TETHER_ADMIN_KEY", key),
        ("TETHER_MAX_BODY_BYTES", "600"),
        ("TETHER_MAX_CLAIM_WAIT", "1500ms"),
        ("TETHER_REQUEST_TIMEOUT", "5s"),
        ("TETHER_NO_MAINTENANCE", "true"),
        ("TETHER_MAX_EVENT_STREAMS_PER_TENANT", "1"),
    ]);
    assert!(
        server.banner.contains("backend: sqlite"),
        "{}",
        server.banner
    );
    assert!(
        dir.join(tether_server::SQLITE_FILE).exists(),
        "TETHER_DATA_DIR was used"
    );

    // The body limit: a job whose body is just under 600 bytes is taken, one
    // just over is 413.
    let job = |size: usize| json!({"queue": "mail", "kind": "send", "payload": "x".repeat(size)});
    let under = job(600 - job(0).to_string().len());
    assert_eq!(under.to_string().len(), 600);
    let (status, body) = call(
        reqwest::Method::POST,
        &server.url("/v1/jobs"),
        key,
        Some(under),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let over = job(601 - job(0).to_string().len());
    let (status, body) = call(
        reqwest::Method::POST,
        &server.url("/v1/jobs"),
        key,
        Some(over),
    )
    .await;
    assert_eq!(status, 413, "{body}");

    // The longest claim wait: 1 500 ms is the cap, 1 501 is refused.
    let claim = |wait: u32| json!({"worker_id": "w", "limit": 1, "wait_ms": wait});
    let url = server.url("/v1/queues/mail/claim");
    let (status, body) = call(reqwest::Method::POST, &url, key, Some(claim(1501))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("between 0 and 1500"), "{body}");
    let (status, body) = call(reqwest::Method::POST, &url, key, Some(claim(1500))).await;
    assert_eq!(
        (status, body["jobs"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{body}"
    );

    // One event stream per tenant: a second is 429 while the first is open.
    let events = server.url("/v1/events");
    let first = reqwest::Client::new()
        .get(&events)
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let (status, body) = call(reqwest::Method::GET, &events, key, None).await;
    assert_eq!(status, 429, "{body}");
    drop(first);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_claim_wait_at_or_above_the_request_timeout_is_refused_at_start() {
    let dir = temp_dir("settings-wait");
    let run = tether(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.to_str().unwrap(),
        ],
        &[
            ("TETHER_MAX_CLAIM_WAIT", "60s"),
            ("TETHER_REQUEST_TIMEOUT", "60s"),
        ],
        None,
    );
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("below the request timeout"),
        "{}",
        run.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_help_shows_every_variable_and_default() {
    let help = tether(&["serve", "--help"], &[], None).ok().stdout;
    for (var, default) in [
        ("TETHER_LISTEN", Some("127.0.0.1:7070")),
        ("TETHER_DATA_DIR", Some("./tether-data")),
        ("TETHER_DATABASE_URL", None),
        ("TETHER_DATABASE_POOL_SIZE", Some("16")),
        ("TETHER_TRANSACTION_POOLER", None),
        ("TETHER_LISTEN_DATABASE_URL", None),
        ("TETHER_NO_MIGRATE", None),
        ("TETHER_MAX_BODY_BYTES", Some("1048576")),
        ("TETHER_MAX_CLAIM_WAIT", Some("30s")),
        ("TETHER_MAX_LONG_POLLS", Some("1024")),
        ("TETHER_REQUEST_TIMEOUT", Some("60s")),
        ("TETHER_MAX_CONNECTIONS", Some("2048")),
        ("TETHER_HEADER_READ_TIMEOUT", Some("10s")),
        ("TETHER_IDLE_TIMEOUT", Some("60s")),
        ("TETHER_RETENTION", Some("7d")),
        ("TETHER_MAINTENANCE_TICK", Some("1s")),
        ("TETHER_NO_MAINTENANCE", None),
        ("TETHER_MAX_QUEUES_PER_TENANT", Some("1000")),
        ("TETHER_MAX_SCHEDULES_PER_TENANT", Some("10000")),
        ("TETHER_METRICS_MAX_QUEUES", Some("1000")),
        ("TETHER_LOG_FORMAT", Some("text")),
    ] {
        // clap prints `[env: NAME=value]` (or `[env: NAME]` when hidden).
        let at = help
            .find(&format!("[env: {var}"))
            .unwrap_or_else(|| panic!("{var} is not in serve --help:\n{help}"));
        if let Some(default) = default {
            let rest = &help[at..];
            let end = rest
                .find("\n      --")
                .or_else(|| rest.find("\n  -h"))
                .unwrap_or(rest.len());
            assert!(
                rest[..end].contains(&format!("[default: {default}]")),
                "{var}: no default {default} in {}",
                &rest[..end]
            );
        }
    }
}
