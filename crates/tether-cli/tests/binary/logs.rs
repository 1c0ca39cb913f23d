//! The logs of the real `tether` binary: `TETHER_LOG_FORMAT=json` (or
//! `--log-format json`) writes only JSON lines, every line of a request
//! names its request id, one access line per request reports method, route
//! template, status, latency and tenant, and no key, header or payload is
//! ever written.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use common::{call, http, temp_dir, tether};
use serde_json::{json, Value};

const ADMIN_KEY: &str = "logs-admin-key-SECRET-0123456789";
const PAYLOAD_MARKER: &str = "payload-marker-3b9f";
const RESULT_MARKER: &str = "result-marker-77c1";
const WRONG_KEY: &str = "wrong-key-SECRET-5e2d";

/// `tether serve` with stderr written to `log` (read once it has exited);
/// answers the child and its address.
fn serve(dir: &Path, log: &Path, env: &[(&str, &str)]) -> (Child, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env_remove("TETHER_SERVER_SECRET")
        .env_remove("TETHER_DATABASE_URL")
        .env_remove("RUST_LOG")
        .env("TETHER_ADMIN_KEY", ADMIN_KEY)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn tether serve");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut addr = None;
    for line in stdout.lines() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("tether serve: listening on http://") {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    let addr = addr.expect("the banner names the address");
    (child, addr)
}

/// Stops the server with SIGTERM, waits for it, and answers its stderr.
fn stop(mut child: Child, log: &Path) -> String {
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    std::fs::read_to_string(log).unwrap()
}

/// Every line of `text` as a JSON object with the fields every line has.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\nall:\n{text}"));
            for field in ["timestamp", "level", "target", "message"] {
                assert!(v[field].is_string(), "no {field}: {line}");
            }
            v
        })
        .collect()
}

/// Sends one request; answers the status, the echoed request id and the
/// body.
async fn send(
    method: reqwest::Method,
    url: &str,
    key: &str,
    request_id: Option<&str>,
    body: Option<Value>,
) -> (u16, String, Value) {
    let mut req = http().request(method, url).bearer_auth(key);
    if let Some(id) = request_id {
        req = req.header("x-request-id", id);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let echoed = resp.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, echoed, body)
}

/// The access lines (target `tether::access`) of the request `id`.
fn access_of<'a>(lines: &'a [Value], id: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["target"] == "tether::access" && l["span"]["request_id"] == id)
        .collect()
}

#[tokio::test]
async fn json_logs_name_the_request_and_never_hold_secrets() {
    let dir = temp_dir("logs-json");
    let log = dir.join("stderr.log");
    let (child, addr) = serve(
        &dir.join("data"),
        &log,
        &[
            ("TETHER_LOG_FORMAT", "json"),
            // Debug lines of the server (a bad query string) and the access
            // lines at their usual levels.
            ("TETHER_LOG", "info,tether_server=debug"),
        ],
    );
    let url = |path: &str| format!("http://{addr}{path}");
    let post = reqwest::Method::POST;
    let get = reqwest::Method::GET;

    // With a client request id: kept and echoed.
    let (status, echoed, job) = send(
        post.clone(),
        &url("/v1/jobs"),
        ADMIN_KEY,
        Some("req-enqueue-1"),
        Some(json!({"queue": "mail", "kind": "send", "payload": {"to": PAYLOAD_MARKER}})),
    )
    .await;
    assert_eq!((status, echoed.as_str()), (201, "req-enqueue-1"), "{job}");
    let job_id = job["job"]["id"].as_str().unwrap().to_owned();

    // Without one: a fresh UUID, echoed.
    let (status, fresh_id, _) = send(
        get.clone(),
        &url(&format!("/v1/jobs/{job_id}")),
        ADMIN_KEY,
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(uuid::Uuid::parse_str(&fresh_id).is_ok(), "{fresh_id}");

    // An id that could break a line is replaced.
    let (status, replaced, _) = send(
        get.clone(),
        &url("/v1/queues"),
        ADMIN_KEY,
        Some("two words"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert!(uuid::Uuid::parse_str(&replaced).is_ok(), "{replaced}");

    // Claimed and completed with a result.
    let (status, _, claimed) = send(
        post.clone(),
        &url("/v1/queues/mail/claim"),
        ADMIN_KEY,
        Some("req-claim"),
        Some(json!({"worker_id": "w1", "limit": 1})),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let lease = claimed["jobs"][0]["lease_token"]
        .as_str()
        .expect("a lease token")
        .to_owned();
    let (status, _, done) = send(
        post.clone(),
        &url(&format!("/v1/jobs/{job_id}/complete")),
        ADMIN_KEY,
        Some("req-complete"),
        Some(json!({"lease_token": lease, "result": {"note": RESULT_MARKER}})),
    )
    .await;
    assert_eq!(status, 200, "{done}");

    // A wrong key: 401, no tenant.
    let (status, _, _) = send(
        get.clone(),
        &url("/v1/jobs"),
        WRONG_KEY,
        Some("req-401"),
        None,
    )
    .await;
    assert_eq!(status, 401);

    // Another tenant's key names that tenant.
    let (status, tenant) = call(
        post.clone(),
        &url("/v1/tenants"),
        ADMIN_KEY,
        Some(json!({"name": "acme"})),
    )
    .await;
    assert_eq!(status, 201);
    let acme_key = tenant["api_key"].as_str().unwrap().to_owned();
    let (status, _, _) = send(
        get.clone(),
        &url("/v1/jobs"),
        &acme_key,
        Some("req-acme"),
        None,
    )
    .await;
    assert_eq!(status, 200);

    // A query string that does not parse: a DEBUG line inside the request.
    let (status, _, _) = send(
        get.clone(),
        &url("/v1/jobs?queue=a&queue=b"),
        ADMIN_KEY,
        Some("req-bad-query"),
        None,
    )
    .await;
    assert_eq!(status, 400);

    // No route; and a probe, which logs at DEBUG only.
    let (status, _, _) = send(
        get.clone(),
        &url("/no/such/route"),
        ADMIN_KEY,
        Some("req-404"),
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _, _) = send(
        get.clone(),
        &url("/healthz"),
        ADMIN_KEY,
        Some("req-probe"),
        None,
    )
    .await;
    assert_eq!(status, 200);

    let text = stop(child, &log);
    let lines = json_lines(&text);

    // Nothing secret, anywhere: not the keys, the lease token or the
    // header, not what the bodies held.
    let lower = text.to_lowercase();
    for secret in [
        ADMIN_KEY,
        acme_key.as_str(),
        WRONG_KEY,
        lease.as_str(),
        PAYLOAD_MARKER,
        RESULT_MARKER,
    ] {
        assert!(!text.contains(secret), "{secret} is in the log:\n{text}");
    }
    for word in ["bearer", "authorization"] {
        assert!(!lower.contains(word), "{word} is in the log:\n{text}");
    }

    // Every access line names its request; ids and query strings are never
    // in the route.
    let access: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "tether::access")
        .collect();
    assert_eq!(
        access.len(),
        10,
        "one per request, the probe left out:\n{text}"
    );
    for line in &access {
        let id = line["span"]["request_id"].as_str();
        assert!(id.is_some_and(|id| !id.is_empty()), "{line}");
        assert_eq!(line["message"], "answered", "{line}");
        assert!(
            line["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0),
            "{line}"
        );
        let route = line["route"].as_str().unwrap();
        assert!(!route.contains(&job_id) && !route.contains('?'), "{line}");
    }

    let one = |id: &str| {
        let found = access_of(&lines, id);
        assert_eq!(found.len(), 1, "{id}:\n{text}");
        found[0].clone()
    };
    let line = one("req-enqueue-1");
    assert_eq!(
        (
            &line["level"],
            &line["method"],
            &line["route"],
            &line["status"],
            &line["tenant"],
            &line["span"]["tenant"],
        ),
        (
            &json!("INFO"),
            &json!("POST"),
            &json!("/v1/jobs"),
            &json!(201),
            &json!("default"),
            &json!("default"),
        ),
        "{line}"
    );
    let line = one(&fresh_id);
    assert_eq!(
        (&line["method"], &line["route"], &line["status"]),
        (&json!("GET"), &json!("/v1/jobs/{id}"), &json!(200)),
        "{line}"
    );
    assert_eq!(one(&replaced)["route"], "/v1/queues");
    assert!(access_of(&lines, "two words").is_empty());
    assert_eq!(one("req-claim")["route"], "/v1/queues/{queue}/claim");
    let line = one("req-complete");
    assert_eq!(
        (&line["route"], &line["status"]),
        (&json!("/v1/jobs/{id}/complete"), &json!(200)),
        "{line}"
    );
    let line = one("req-401");
    assert_eq!(line["status"], 401, "{line}");
    assert!(
        line["tenant"].is_null() && line["span"]["tenant"].is_null(),
        "{line}"
    );
    let line = one("req-acme");
    assert_eq!(
        (&line["tenant"], &line["span"]["tenant"]),
        (&json!("acme"), &json!("acme")),
        "{line}"
    );
    assert_eq!(one("req-bad-query")["status"], 400);
    let line = one("req-404");
    assert_eq!(
        (&line["route"], &line["status"]),
        (&json!("unmatched"), &json!(404)),
        "{line}"
    );
    assert!(access_of(&lines, "req-probe").is_empty(), "{text}");

    // A line logged inside a request (not the access line) names it too.
    let inside: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "bad query string")
        .collect();
    assert_eq!(inside.len(), 1, "{text}");
    assert_eq!(
        inside[0]["span"]["request_id"], "req-bad-query",
        "{}",
        inside[0]
    );
    assert_eq!(inside[0]["level"], "DEBUG");

    // Lines outside requests carry no request span.
    let started = lines
        .iter()
        .find(|l| l["message"] == "tether serve started")
        .expect("the start line");
    assert!(started.get("span").is_none(), "{started}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn probes_log_at_debug_and_access_lines_can_be_turned_off() {
    let dir = temp_dir("logs-filter");
    let log = dir.join("stderr.log");
    // The flag instead of the variable; probes at DEBUG shown.
    let (child, addr) = {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tether"));
        cmd.args([
            "serve",
            "--log-format",
            "json",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir.join("data"))
        .env_remove("TETHER_SERVER_SECRET")
        .env_remove("TETHER_DATABASE_URL")
        .env_remove("TETHER_LOG_FORMAT")
        .env("TETHER_ADMIN_KEY", ADMIN_KEY)
        .env("TETHER_LOG", "warn,tether::access=debug")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let addr = stdout
            .lines()
            .map_while(Result::ok)
            .find_map(|l| {
                l.strip_prefix("tether serve: listening on http://")
                    .map(|a| a.trim().to_owned())
            })
            .unwrap();
        (child, addr)
    };
    let (status, _, _) = send(
        reqwest::Method::GET,
        &format!("http://{addr}/healthz"),
        ADMIN_KEY,
        Some("req-probe"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let text = stop(child, &log);
    let lines = json_lines(&text);
    let probe = access_of(&lines, "req-probe");
    assert_eq!(probe.len(), 1, "{text}");
    assert_eq!(
        (&probe[0]["level"], &probe[0]["route"], &probe[0]["status"]),
        (&json!("DEBUG"), &json!("/healthz"), &json!(200))
    );
    // The `info` lines of the start are filtered out by `warn`.
    assert!(
        lines.iter().all(|l| l["target"] == "tether::access"
            || ["WARN", "ERROR"].contains(&l["level"].as_str().unwrap())),
        "{text}"
    );

    // Access lines off, everything else at info.
    let log = dir.join("stderr2.log");
    let (child, addr) = serve(
        &dir.join("data"),
        &log,
        &[
            ("TETHER_LOG_FORMAT", "json"),
            ("TETHER_LOG", "info,tether::access=warn"),
        ],
    );
    let (status, _, _) = send(
        reqwest::Method::GET,
        &format!("http://{addr}/v1/jobs"),
        ADMIN_KEY,
        Some("req-quiet"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let text = stop(child, &log);
    let lines = json_lines(&text);
    assert!(lines.iter().any(|l| l["message"] == "tether serve started"));
    assert!(
        lines.iter().all(|l| l["target"] != "tether::access"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_filter_and_a_failed_start_are_json_lines_too() {
    let dir = temp_dir("logs-bad");
    // A data directory that is a file: the migration cannot start.
    let not_a_dir = dir.join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let not_a_dir = not_a_dir.to_str().unwrap();
    let run = tether(
        &["migrate", "--log-format", "json", "--data-dir", not_a_dir],
        &[("TETHER_LOG", "info,tether=nonsense"), ("RUST_LOG", "")],
        None,
    )
    .expect(1);
    let lines = json_lines(&run.stderr);
    assert!(
        lines.iter().any(|l| l["level"] == "WARN"
            && l["message"] == "ignoring the log filter; logging at info"
            && l["filter"] == "info,tether=nonsense"),
        "{}",
        run.stderr
    );
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["level"], &last["message"]),
        (&json!("ERROR"), &json!("stopped")),
        "{last}"
    );
    assert!(
        last["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{last}"
    );
    // The text format is not JSON (so the check above can tell them apart).
    let run = tether(
        &["migrate", "--data-dir", not_a_dir],
        &[("TETHER_LOG_FORMAT", "text")],
        None,
    )
    .expect(1);
    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
    assert!(serde_json::from_str::<Value>(run.stderr.lines().next().unwrap()).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
