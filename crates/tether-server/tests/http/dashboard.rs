//! The dashboard at `/`: its static routes and their headers, a static check
//! of the script, and the whole page driven in Debian's Chromium by
//! `tests/browser/dashboard.mjs` (playwright-core) against the real router
//! on a loopback port over a seeded SQLite database.
//!
//! The browser test never skips: without `/usr/bin/chromium` or
//! `tests/browser/node_modules` it fails with the command that installs them
//! (`scripts/test` installs both).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, Response};
use serde_json::{json, Value};
use tether_conformance::TestDb;
use tower::ServiceExt;

const BROWSER_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser");
const DASHBOARD_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboard");
const CHROMIUM: &str = "/usr/bin/chromium";
/// Longest the browser script may run before the test fails as hung.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(300);

/// The SVG namespace URI, which `document.createElementNS` needs to draw the
/// throughput chart: the one URL the dashboard's script may spell.
const SVG_NAMESPACE: &str = "'http://www.w3.org/2000/svg'";

/// A payload that would run script if the page ever parsed job data as HTML.
const HOSTILE_HTML: &str = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>";

async fn fetch(app: &axum::Router, method: &str, uri: &str) -> (Response<Body>, String) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        Response::from_parts(parts, Body::empty()),
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_files_are_served_without_a_key_with_strict_headers() {
    tether_conformance::run(tether_conformance::sqlite, |db| Box::pin(static_files(db))).await;
}

async fn static_files(db: &TestDb) {
    let c = common::setup(db).await;
    for (uri, content_type, marker) in [
        (
            "/",
            "text/html; charset=utf-8",
            "<script src=\"/assets/app.js\"",
        ),
        (
            "/assets/app.js",
            "text/javascript; charset=utf-8",
            "'use strict';",
        ),
        ("/assets/style.css", "text/css; charset=utf-8", ":root"),
    ] {
        let (resp, body) = fetch(&c.app, "GET", uri).await;
        assert_eq!(resp.status(), 200, "{uri}");
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .unwrap_or_else(|| panic!("{uri} lacks {name}"))
                .to_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(header("content-type"), content_type, "{uri}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{uri}");
        let csp = header("content-security-policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{uri}: {directive} not in {csp}");
        }
        assert!(!csp.contains("unsafe"), "{uri}: {csp}");
        assert!(body.contains(marker), "{uri} is not the expected file");
    }
    // Not API routes: other methods and other assets are the API's errors.
    let (resp, body) = fetch(&c.app, "POST", "/").await;
    assert_eq!(resp.status(), 405, "{body}");
    let (resp, body) = fetch(&c.app, "GET", "/assets/other.js").await;
    assert_eq!(resp.status(), 404, "{body}");
    // The API behind it still wants a key.
    let (resp, _) = fetch(&c.app, "GET", "/v1/queues").await;
    assert_eq!(resp.status(), 401);
}

/// A cheap guard behind the browser test: the files never hand data to an
/// HTML parser or a code evaluator, and load nothing from elsewhere.
#[test]
fn the_dashboard_never_parses_data_as_html_and_loads_nothing_from_elsewhere() {
    for name in ["index.html", "app.js", "style.css"] {
        let mut text = std::fs::read_to_string(Path::new(DASHBOARD_DIR).join(name)).unwrap();
        if name == "app.js" {
            // The SVG namespace is a name that is never fetched
            // (createElementNS needs it): this one string, once, in the
            // script; any other URL still fails below.
            assert_eq!(
                text.matches(SVG_NAMESPACE).count(),
                1,
                "app.js: {SVG_NAMESPACE}"
            );
            text = text.replacen(SVG_NAMESPACE, "", 1);
        }
        for banned in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "http://",
            "https://",
            "//cdn",
            "@import",
        ] {
            assert!(!text.contains(banned), "dashboard/{name} contains {banned}");
        }
    }
    let html = std::fs::read_to_string(Path::new(DASHBOARD_DIR).join("index.html")).unwrap();
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "inline script or style would be blocked by the Content-Security-Policy"
    );
}

/// Fails loudly, with the install commands, when the browser or the driver
/// is missing: this test never skips.
fn require_browser() {
    let mut missing = Vec::new();
    if !Path::new(CHROMIUM).exists() {
        missing.push(format!("Debian's Chromium at {CHROMIUM}"));
    }
    if !Path::new(BROWSER_DIR)
        .join("node_modules/playwright-core")
        .exists()
    {
        missing.push(format!("playwright-core in {BROWSER_DIR}/node_modules"));
    }
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        missing.push("node on PATH".to_owned());
    }
    assert!(
        missing.is_empty(),
        "\n\n\
         ******************************************************************\n\
         *  The dashboard browser test cannot run; missing: {}.\n\
         *  `scripts/test` (what CI runs) installs them; by hand:\n\
         *    apt-get install -y chromium nodejs npm\n\
         *    npm ci --prefix crates/tether-server/tests/browser\n\
         *  This test never skips.\n\
         ******************************************************************\n",
        missing.join(", ")
    );
}

/// `<target>/test-output/dashboard`, where the screenshots go.
fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("test-output/dashboard");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_a_real_browser() {
    require_browser();
    let db = tether_conformance::sqlite().await;
    browser(&db).await;
    db.cleanup().await;
}

async fn browser(db: &TestDb) {
    let c = common::setup(db).await;
    let id = |v: &Value, at: &str| v[at]["id"].as_str().unwrap().to_owned();

    // emails: 4 ready (one with the hostile payload) and 1 scheduled.
    for i in 0..3 {
        let job = json!({"queue": "emails", "kind": "send_email",
            "payload": {"to": format!("user{i}@example.com")}, "tags": ["welcome"]});
        c.post("/v1/jobs", job).await.expect(201);
    }
    let later = json!({"queue": "emails", "kind": "send_email", "delay_ms": 3_600_000});
    c.post("/v1/jobs", later).await.expect(201);
    let hostile = json!({"queue": "emails", "kind": "render", "payload": {"html": HOSTILE_HTML}});
    let xss_job = id(c.post("/v1/jobs", hostile).await.expect(201), "job");

    // reports: one failed for good (its one attempt used), one running.
    let doomed = json!({"queue": "reports", "kind": "build_report", "max_attempts": 1,
        "payload": {"report": "weekly"}});
    let failed_job = id(c.post("/v1/jobs", doomed).await.expect(201), "job");
    let (claimed, token) = c.claim_one("reports").await;
    assert_eq!(claimed, failed_job);
    let fail = json!({"lease_token": token,
        "error": "upstream said 503 <img src=x onerror=window.__pwned=3>"});
    let answer = c.post(&format!("/v1/jobs/{failed_job}/fail"), fail).await;
    assert_eq!(answer.expect(200)["job"]["state"], "failed");
    let running_job = c.enqueue("reports", "build_report").await;
    // A history longer than the page the dashboard reads at once (1 000):
    // 520 claims and snoozes, so 1 042 events with the last claim.
    for _ in 0..520 {
        let (claimed, token) = c.claim_one("reports").await;
        assert_eq!(claimed, running_job);
        let snooze = json!({"lease_token": token, "delay_ms": 0});
        c.post(&format!("/v1/jobs/{running_job}/snooze"), snooze)
            .await
            .expect(200);
    }
    let (claimed, token) = c.claim_one("reports").await;
    assert_eq!(claimed, running_job);
    let hb = json!({"lease_token": token, "progress": {"done": 3, "of": 10}});
    c.post(&format!("/v1/jobs/{running_job}/heartbeat"), hb)
        .await
        .expect(200);

    // reports has a limit: the overview shows running against it.
    let admin = c.admin.clone();
    let limit = json!({"max_running": 3});
    c.call("PATCH", "/v1/queues/reports", Some(&admin), Some(limit))
        .await
        .expect(200);

    // billing: a fatal failure, for "replay all matching".
    let failed_job2 = c.enqueue("billing", "charge").await;
    let (_, token) = c.claim_one("billing").await;
    let fail = json!({"lease_token": token, "error": "card declined", "fatal": true});
    c.post(&format!("/v1/jobs/{failed_job2}/fail"), fail)
        .await
        .expect(200);

    // images: a known history for the throughput chart, one job per outcome
    // but failure (1 succeeded, 1 retried, now waiting out its backoff, and
    // 1 cancelled), each finished before the next starts.
    let succeeded_job = c.enqueue("images", "resize").await;
    let (claimed, token) = c.claim_one("images").await;
    assert_eq!(claimed, succeeded_job);
    let done = json!({"lease_token": token, "result": {"width": 640}});
    let answer = c
        .post(&format!("/v1/jobs/{succeeded_job}/complete"), done)
        .await;
    assert_eq!(answer.expect(200)["job"]["state"], "succeeded");
    let retried_job = c.enqueue("images", "resize").await;
    let (claimed, token) = c.claim_one("images").await;
    assert_eq!(claimed, retried_job);
    let again = json!({"lease_token": token, "error": "timeout", "retry_after_ms": 3_600_000});
    let answer = c.post(&format!("/v1/jobs/{retried_job}/fail"), again).await;
    assert_eq!(answer.expect(200)["job"]["state"], "queued");
    let cancelled_job = c.enqueue("images", "resize").await;
    c.post_empty(&format!("/v1/jobs/{cancelled_job}/cancel"))
        .await
        .expect(200);

    // pipeline: a job queued, and one waiting for it (dependencies).
    let parent = json!({"queue": "pipeline", "kind": "render"});
    let parent_job = id(c.post("/v1/jobs", parent).await.expect(201), "job");
    let child = json!({"queue": "pipeline", "kind": "publish", "depends_on": [parent_job]});
    let waiting = c.post("/v1/jobs", child).await;
    assert_eq!(waiting.expect(201)["job"]["state"], "waiting");
    let waiting_job = id(waiting.expect(201), "job");

    // A schedule with one run (its job lands in reports, queued).
    let schedule = json!({"name": "nightly-report", "cron": "0 3 * * *",
        "timezone": "Europe/Berlin", "queue": "reports", "kind": "build_report",
        "overlap": "skip"});
    let schedule_id = id(
        c.post("/v1/schedules", schedule).await.expect(201),
        "schedule",
    );
    c.post_empty(&format!("/v1/schedules/{schedule_id}/trigger"))
        .await
        .expect(201);

    // Tenant `other` (setup's second tenant) has a queue of its own, which
    // the admin sees only after switching to it.
    let theirs = json!({"queue": "other-queue", "kind": "theirs"});
    let other_job = id(
        c.call("POST", "/v1/jobs", Some(&c.other.clone()), Some(theirs))
            .await
            .expect(201),
        "job",
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = c.app.clone();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let out = screenshot_dir();
    let envs = vec![
        ("TETHER_URL", url),
        ("TETHER_KEY", c.admin.clone()),
        ("FAILED_JOB", failed_job),
        ("FAILED_JOB2", failed_job2),
        ("RUNNING_JOB", running_job),
        ("XSS_JOB", xss_job),
        ("SCHEDULE_ID", schedule_id),
        ("SUCCEEDED_JOB", succeeded_job),
        ("RETRIED_JOB", retried_job),
        ("CANCELLED_JOB", cancelled_job),
        ("PARENT_JOB", parent_job),
        ("WAITING_JOB", waiting_job),
        ("OTHER_TENANT", "other".to_owned()),
        ("OTHER_QUEUE", "other-queue".to_owned()),
        ("OTHER_JOB", other_job),
        ("OTHER_KEY", c.other.clone()),
        ("SCREENSHOT_DIR", out.display().to_string()),
    ];
    let (ok, log) = tokio::task::spawn_blocking(move || run_script(envs, &out))
        .await
        .unwrap();
    server.abort();
    println!("{log}");
    assert!(ok, "the browser test failed; its output:\n{log}");
}

/// Runs `dashboard.mjs` with `envs`, its output in a log file beside the
/// screenshots; returns whether it passed and the log.
fn run_script(envs: Vec<(&'static str, String)>, out: &Path) -> (bool, String) {
    let log_path = out.join("browser.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new("node")
        .arg("dashboard.mjs")
        .current_dir(BROWSER_DIR)
        .envs(envs)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("cannot start node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut text = std::fs::read_to_string(&log_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => (true, text),
        Some(s) => {
            text.push_str(&format!("\n(node exited with {s})"));
            (false, text)
        }
        None => {
            text.push_str(&format!("\n(killed after {BROWSER_TIMEOUT:?})"));
            (false, text)
        }
    }
}
