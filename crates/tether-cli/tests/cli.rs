//! The operator commands as a user runs them: the real `tether` binary
//! against a real `tether serve` (SQLite, and one PostgreSQL smoke test).
//! Every assertion about an effect reads the server's state back over HTTP.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{call, temp_dir, tether, Run, Server};
use reqwest::Method;
use serde_json::{json, Value};

/// A server on a fresh SQLite data directory, and the CLI pointed at it.
struct Setup {
    server: Option<Server>,
    dir: PathBuf,
    key: String,
    url: String,
}

impl Setup {
    fn sqlite(tag: &str) -> Setup {
        let dir = temp_dir(tag);
        let server = Server::start(&dir, &[], &[]);
        let key =
            tether_server::admin_key::read_key_file(&dir).expect("the first start saves the key");
        let url = format!("http://{}", server.addr);
        Setup {
            server: Some(server),
            dir,
            key,
            url,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().unwrap()
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    /// `tether <args>` with TETHER_URL and TETHER_DATA_DIR pointing at the
    /// server (so the key comes from its admin.key).
    fn cli(&self, args: &[&str]) -> Run {
        self.cli_stdin(args, None)
    }

    fn cli_stdin(&self, args: &[&str], stdin: Option<&str>) -> Run {
        tether(
            args,
            &[("TETHER_URL", &self.url), ("TETHER_DATA_DIR", self.dir())],
            stdin,
        )
    }

    /// `GET path` with the admin key; the status and body.
    async fn get(&self, path: &str) -> (u16, Value) {
        call(Method::GET, &self.server().url(path), &self.key, None).await
    }

    async fn job(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body["job"].clone()
    }

    async fn queue(&self, name: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/queues/{name}")).await;
        assert_eq!(status, 200, "{body}");
        body["queue"].clone()
    }

    /// Claims every ready job of `queue` and fails each for good; answers
    /// their ids.
    async fn fail_all(&self, queue: &str, error: &str) -> Vec<String> {
        let (status, claimed) = call(
            Method::POST,
            &self.server().url(&format!("/v1/queues/{queue}/claim")),
            &self.key,
            Some(json!({"worker_id": "test-worker", "limit": 100})),
        )
        .await;
        assert_eq!(status, 200, "{claimed}");
        let mut ids = Vec::new();
        for job in claimed["jobs"].as_array().unwrap() {
            let id = job["id"].as_str().unwrap().to_owned();
            let (status, body) = call(
                Method::POST,
                &self.server().url(&format!("/v1/jobs/{id}/fail")),
                &self.key,
                Some(json!({"lease_token": job["lease_token"], "error": error, "fatal": true})),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["job"]["state"], "failed");
            ids.push(id);
        }
        ids
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        drop(self.server.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ids(list: &Value, field: &str) -> Vec<String> {
    list[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} array in {list}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn enqueue_takes_every_option_and_payloads_from_argument_file_and_stdin() {
    let s = Setup::sqlite("cli-enqueue");
    let expires = (Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let before = Utc::now();
    let out = s
        .cli(&[
            "enqueue",
            "emails",
            "send_welcome",
            r#"{"to": "ada@example.com"}"#,
            "--priority",
            "-7",
            "--delay",
            "5m",
            "--max-attempts",
            "3",
            "--timeout",
            "30s",
            "--idempotency-key",
            "welcome:ada",
            "--unique-key",
            "u:ada",
            "--tag",
            "signup",
            "--tag",
            "vip",
            "--expires-at",
            &expires,
            "--backoff-base",
            "2s",
            "--backoff-cap",
            "1m",
            "--json",
        ])
        .ok();
    let answer = out.json();
    assert_eq!(answer["created"], true, "{answer}");
    let id = answer["job"]["id"].as_str().unwrap().to_owned();

    // The server stored what the options said.
    let job = s.job(&id).await;
    assert_eq!(job["queue"], "emails");
    assert_eq!(job["kind"], "send_welcome");
    assert_eq!(job["payload"], json!({"to": "ada@example.com"}));
    assert_eq!(job["priority"], -7);
    assert_eq!(job["max_attempts"], 3);
    assert_eq!(job["timeout_ms"], 30_000);
    assert_eq!(job["idempotency_key"], "welcome:ada");
    assert_eq!(job["unique_key"], "u:ada");
    assert_eq!(job["tags"], json!(["signup", "vip"]));
    let run_at: DateTime<Utc> = job["run_at"].as_str().unwrap().parse().unwrap();
    let delay = (run_at - before).num_seconds();
    assert!(
        (295..=305).contains(&delay),
        "run_at {run_at} is not ~5m out"
    );
    let stored_expiry: DateTime<Utc> = job["expires_at"].as_str().unwrap().parse().unwrap();
    let wanted: DateTime<Utc> = expires.parse().unwrap();
    assert!((stored_expiry - wanted).num_milliseconds().abs() < 1_000);

    // The same idempotency key returns the existing job, and says so.
    let again = s
        .cli(&[
            "enqueue",
            "emails",
            "send_welcome",
            "{}",
            "--idempotency-key",
            "welcome:ada",
        ])
        .ok();
    assert!(again.stdout.contains("existing job"), "{}", again.stdout);
    assert!(again.stdout.contains(&id), "{}", again.stdout);

    // --run-at, and the payload from stdin (`-`).
    let out = s
        .cli_stdin(
            &[
                "enqueue",
                "reports",
                "build",
                "-",
                "--run-at",
                "2030-01-02T03:04:05Z",
                "--json",
            ],
            Some("{\"month\": \"2030-01\", \"lines\": [1, 2, 3]}\n"),
        )
        .ok();
    let job = s.job(out.json()["job"]["id"].as_str().unwrap()).await;
    assert_eq!(
        job["payload"],
        json!({"month": "2030-01", "lines": [1, 2, 3]})
    );
    let run_at: DateTime<Utc> = job["run_at"].as_str().unwrap().parse().unwrap();
    assert_eq!(
        run_at,
        "2030-01-02T03:04:05Z".parse::<DateTime<Utc>>().unwrap()
    );

    // --payload-file, and the human answer.
    let file = s.dir.join("payload.json");
    std::fs::write(&file, r#"[true, null, "x"]"#).unwrap();
    let out = s
        .cli(&[
            "enqueue",
            "reports",
            "build",
            "--payload-file",
            file.to_str().unwrap(),
        ])
        .ok();
    assert!(out.stdout.starts_with("enqueued job "), "{}", out.stdout);
    let id = out.stdout.split_whitespace().nth(2).unwrap();
    assert_eq!(s.job(id).await["payload"], json!([true, null, "x"]));

    // No payload at all is a null payload.
    let out = s.cli(&["enqueue", "reports", "noop", "--json"]).ok();
    assert_eq!(out.json()["job"]["payload"], Value::Null);

    // Usage errors exit 2 and write nothing.
    let count = |v: Value| v["jobs"].as_array().unwrap().len();
    let (_, all) = s.get("/v1/jobs?limit=500").await;
    let n = count(all);
    let bad_json = s.cli(&["enqueue", "q", "k", "{not json"]).expect(2);
    assert!(
        bad_json
            .stderr
            .starts_with("error: the payload in the payload argument is not valid JSON"),
        "{}",
        bad_json.stderr
    );
    let bad_stdin = s
        .cli_stdin(&["enqueue", "q", "k", "-"], Some("nope"))
        .expect(2);
    assert!(bad_stdin.stderr.contains("stdin"), "{}", bad_stdin.stderr);
    s.cli(&[
        "enqueue",
        "q",
        "k",
        "--delay",
        "5m",
        "--run-at",
        "2030-01-01T00:00:00Z",
    ])
    .expect(2);
    s.cli(&["enqueue", "q", "k", "--delay", "5 minutes"])
        .expect(2);
    s.cli(&["enqueue", "q"]).expect(2);
    let (_, all) = s.get("/v1/jobs?limit=500").await;
    assert_eq!(count(all), n, "a refused command enqueued something");

    // The server's refusal: exit 1 with its code and message.
    let refused = s.cli(&["enqueue", "q", "k", "--priority", "500"]).expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_argument: "),
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains("Api {"), "{}", refused.stderr);
}

#[tokio::test]
async fn jobs_ls_show_events_cancel_and_replay() {
    let s = Setup::sqlite("cli-jobs");
    let mut made = Vec::new();
    for (queue, kind, tag) in [
        ("emails", "send", "a"),
        ("emails", "send", "b"),
        ("emails", "digest", "a"),
        ("reports", "build", "a"),
    ] {
        let out = s
            .cli(&[
                "enqueue",
                queue,
                kind,
                r#"{"n": 1}"#,
                "--tag",
                tag,
                "--json",
            ])
            .ok();
        made.push(out.json()["job"]["id"].as_str().unwrap().to_owned());
    }

    // ls: every job, newest first; the filters; the table.
    let all = s.cli(&["jobs", "ls", "--json"]).ok().json();
    let mut newest_first = made.clone();
    newest_first.reverse();
    assert_eq!(ids(&all, "jobs"), newest_first);
    assert_eq!(all["next_cursor"], Value::Null);
    let emails = s
        .cli(&["jobs", "ls", "--queue", "emails", "--json"])
        .ok()
        .json();
    assert_eq!(ids(&emails, "jobs").len(), 3);
    let sends = s
        .cli(&[
            "jobs", "ls", "--queue", "emails", "--kind", "send", "--tag", "a", "--json",
        ])
        .ok()
        .json();
    assert_eq!(ids(&sends, "jobs"), vec![made[0].clone()]);
    let table = s.cli(&["jobs", "ls"]).ok().stdout;
    let header = table.lines().next().unwrap();
    for col in [
        "ID",
        "QUEUE",
        "KIND",
        "STATE",
        "ATTEMPTS",
        "AGE",
        "LAST ERROR",
    ] {
        assert!(header.contains(col), "{header}");
    }
    for id in &made {
        assert!(table.contains(id.as_str()), "{table}");
    }
    assert!(
        table.contains("just now") || table.contains("s ago"),
        "{table}"
    );
    s.cli(&["jobs", "ls", "--state", "bogus"]).expect(2);

    // Pages: one at a time with --cursor, or all with --all.
    let page = s.cli(&["jobs", "ls", "--limit", "3", "--json"]).ok().json();
    assert_eq!(ids(&page, "jobs").len(), 3);
    let cursor = page["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    let next = s
        .cli(&["jobs", "ls", "--limit", "3", "--cursor", &cursor, "--json"])
        .ok()
        .json();
    assert_eq!(ids(&next, "jobs"), vec![made[0].clone()]);
    let hinted = s.cli(&["jobs", "ls", "--limit", "3"]).ok();
    assert!(hinted.stderr.contains(&cursor), "{}", hinted.stderr);
    let every = s
        .cli(&["jobs", "ls", "--limit", "1", "--all", "--json"])
        .ok()
        .json();
    assert_eq!(ids(&every, "jobs"), newest_first);
    assert_eq!(every["next_cursor"], Value::Null);

    // show: fields, payload and history; --json is {job, events}.
    let id = made[3].as_str();
    let shown = s.cli(&["jobs", "show", id]).ok().stdout;
    for want in [
        id, "reports", "build", "queued", "payload:", "\"n\": 1", "history:", "enqueued",
    ] {
        assert!(shown.contains(want), "no {want:?} in:\n{shown}");
    }
    let doc = s.cli(&["jobs", "show", id, "--json"]).ok().json();
    assert_eq!(doc["job"]["id"], id);
    assert_eq!(doc["job"]["payload"], json!({"n": 1}));
    assert_eq!(doc["events"][0]["event"], "enqueued");

    // cancel, then cancel again (a terminal job: 409), then replay.
    let out = s.cli(&["jobs", "cancel", id]).ok();
    assert!(out.stdout.contains("cancelled job"), "{}", out.stdout);
    assert_eq!(s.job(id).await["state"], "cancelled");
    let twice = s.cli(&["jobs", "cancel", id]).expect(1);
    assert!(
        twice.stderr.starts_with("error: invalid_state: "),
        "{}",
        twice.stderr
    );
    let replayed = s.cli(&["jobs", "replay", id, "--json"]).ok().json();
    assert_eq!(replayed["job"]["state"], "queued");
    assert_eq!(s.job(id).await["state"], "queued");

    // events: oldest first, the whole story.
    let events = s.cli(&["jobs", "events", id, "--json"]).ok().json();
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"enqueued"), "{events}");
    assert!(kinds.contains(&"cancelled"), "{events}");
    assert_eq!(kinds.last(), Some(&"replayed"), "{events}");
    let table = s.cli(&["jobs", "events", id]).ok().stdout;
    assert!(
        table.contains("EVENT") && table.contains("replayed"),
        "{table}"
    );

    // A job that does not exist: exit 1, the server's code and message.
    let missing = uuid::Uuid::now_v7();
    let out = s.cli(&["jobs", "show", &missing.to_string()]).expect(1);
    assert_eq!(
        out.stderr,
        format!("error: not_found: job {missing} not found\n")
    );
    assert!(out.stdout.is_empty());
    s.cli(&["jobs", "replay", &missing.to_string()]).expect(1);
    // Not an id, an unknown subcommand, a missing argument: usage, exit 2.
    s.cli(&["jobs", "show", "not-a-uuid"]).expect(2);
    s.cli(&["jobs", "frobnicate"]).expect(2);
    s.cli(&["jobs", "cancel"]).expect(2);
    tether(&["no-such-command"], &[], None).expect(2);
}

#[tokio::test]
async fn queues_dlq_replay_and_stats() {
    let s = Setup::sqlite("cli-queues");
    for i in 0..5 {
        s.cli(&["enqueue", "payments", "charge", &format!("{{\"n\": {i}}}")])
            .ok();
    }
    s.cli(&["enqueue", "emails", "send"]).ok();
    let long_error = format!("card declined by the upstream gateway: {}", "x".repeat(300));
    let failed = s.fail_all("payments", &long_error).await;
    assert_eq!(failed.len(), 5);

    // dlq ls: the failed jobs with their (truncated) last error.
    let dlq = s.cli(&["dlq", "ls", "--json"]).ok().json();
    let mut listed = ids(&dlq, "jobs");
    listed.sort();
    let mut want = failed.clone();
    want.sort();
    assert_eq!(listed, want);
    assert!(dlq["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|j| j["state"] == "failed" && j["last_error"] == long_error.as_str()));
    let table = s.cli(&["dlq", "ls", "--queue", "payments"]).ok().stdout;
    assert!(table.contains("card declined by the upstream"), "{table}");
    assert!(table.contains('…'), "the error is truncated: {table}");
    assert!(
        table.lines().all(|l| l.chars().count() < 200),
        "rows stay short: {table}"
    );
    let none = s
        .cli(&["dlq", "ls", "--queue", "emails", "--json"])
        .ok()
        .json();
    assert!(ids(&none, "jobs").is_empty());
    let none = s
        .cli(&["dlq", "ls", "--kind", "refund", "--json"])
        .ok()
        .json();
    assert!(ids(&none, "jobs").is_empty());

    // stats: the queue, its counts and what needs attention.
    let stats = s.cli(&["stats"]).ok().stdout;
    let row = stats
        .lines()
        .find(|l| l.starts_with("payments"))
        .unwrap_or_else(|| panic!("no payments row:\n{stats}"));
    assert!(row.contains("dead letters"), "{row}");
    assert!(
        stats.contains("OLDEST READY") && stats.contains("EXPIRED LEASES"),
        "{stats}"
    );
    assert!(stats.contains("emails"), "{stats}");
    let doc = s.cli(&["stats", "--json"]).ok().json();
    let payments = doc["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "payments")
        .expect("payments in stats --json")
        .clone();
    assert_eq!(payments["counts"]["failed"], 5);
    assert_eq!(payments["ready"], 0);
    let one = s.cli(&["stats", "emails", "--json"]).ok().json();
    assert_eq!(one["queues"].as_array().unwrap().len(), 1);
    assert_eq!(one["queues"][0]["ready"], 1);

    // queues ls / show.
    let queues = s.cli(&["queues", "ls", "--json"]).ok().json();
    let names: Vec<&str> = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"payments") && names.contains(&"emails"),
        "{queues}"
    );
    let table = s.cli(&["queues", "ls"]).ok().stdout;
    assert!(table.lines().any(|l| l.starts_with("payments")), "{table}");
    let shown = s.cli(&["queues", "show", "emails"]).ok().stdout;
    assert!(shown.contains("1 ready"), "{shown}");
    let shown = s.cli(&["queues", "show", "emails", "--json"]).ok().json();
    assert_eq!(shown["queue"]["counts"]["queued"], 1);

    // pause / resume.
    s.cli(&["queues", "pause", "emails"]).ok();
    assert_eq!(s.queue("emails").await["paused"], true);
    let stats = s.cli(&["stats"]).ok().stdout;
    let row = stats.lines().find(|l| l.starts_with("emails")).unwrap();
    assert!(row.contains("paused"), "{row}");
    let resumed = s.cli(&["queues", "resume", "emails", "--json"]).ok().json();
    assert_eq!(resumed["queue"]["paused"], false);
    assert_eq!(s.queue("emails").await["paused"], false);

    // config: set what is given, keep the rest (the cap of the backoff too).
    s.cli(&[
        "queues",
        "config",
        "emails",
        "--max-attempts",
        "9",
        "--backoff-base",
        "2s",
        "--lease-ttl",
        "45s",
    ])
    .ok();
    let q = s.queue("emails").await;
    assert_eq!(q["max_attempts"], 9);
    assert_eq!(q["backoff"], json!({"base_ms": 2000, "cap_ms": 3_600_000}));
    assert_eq!(q["default_lease_ttl_ms"], 45_000);
    let shown = s.cli(&["queues", "config", "emails"]).ok().stdout;
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("max attempts:") && l.ends_with(" 9")),
        "{shown}"
    );
    s.cli(&["queues", "config", "emails", "--lease-ttl", "forever"])
        .expect(2);
    let refused = s
        .cli(&["queues", "config", "emails", "--max-attempts", "0"])
        .expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_argument: "),
        "{}",
        refused.stderr
    );

    // dlq replay: one round of 2, then --all in rounds of 2 until none is left.
    let one_round = s
        .cli(&["dlq", "replay", "payments", "--limit", "2", "--json"])
        .ok()
        .json();
    assert_eq!(one_round["replayed"], 2);
    assert_eq!(s.queue("payments").await["counts"]["failed"], 3);
    let out = s
        .cli(&["dlq", "replay", "payments", "--all", "--limit", "2"])
        .ok();
    assert!(
        out.stdout
            .contains("replayed 3 failed jobs of queue payments"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains('\r') && !out.stderr.contains('\r'),
        "no bar off a TTY"
    );
    let q = s.queue("payments").await;
    assert_eq!(q["counts"]["failed"], 0, "{q}");
    assert_eq!(q["counts"]["queued"], 5, "{q}");
    for id in &failed {
        let job = s.job(id).await;
        assert_eq!(job["state"], "queued");
        assert_eq!(job["attempt"], 0);
    }
    let dlq = s.cli(&["dlq", "ls"]).ok().stdout;
    assert!(dlq.contains("empty"), "{dlq}");
    let nothing = s
        .cli(&["dlq", "replay", "payments", "--all", "--json"])
        .ok()
        .json();
    assert_eq!(nothing["replayed"], 0);

    // --kind replays only that kind.
    s.cli(&["enqueue", "mixed", "a"]).ok();
    s.cli(&["enqueue", "mixed", "b"]).ok();
    s.fail_all("mixed", "boom").await;
    let out = s
        .cli(&["dlq", "replay", "mixed", "--kind", "a", "--all", "--json"])
        .ok()
        .json();
    assert_eq!(out["replayed"], 1);
    let left = s
        .cli(&["dlq", "ls", "--queue", "mixed", "--json"])
        .ok()
        .json();
    assert_eq!(left["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(left["jobs"][0]["kind"], "b");
}

/// `dlq replay --all` takes each job that was failed when it began once:
/// expired jobs replayed in rounds are queued for good (the replay clears
/// their old `expires_at`), and jobs that fail again while the replay runs
/// (a worker failing each at once) are neither replayed nor counted a
/// second time, and the CLI says they are failed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_replay_all_counts_each_job_once() {
    let s = Setup::sqlite("cli-replay-once");
    // 30 jobs that expire before anyone claims them.
    let past = (Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    for _ in 0..30 {
        s.cli(&["enqueue", "expiring", "k", "--expires-at", &past])
            .ok();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.queue("expiring").await["counts"]["failed"] != 30 {
        assert!(Instant::now() < deadline, "maintenance did not expire them");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = s
        .cli(&[
            "dlq", "replay", "expiring", "--all", "--limit", "10", "--json",
        ])
        .ok()
        .json();
    assert_eq!(out["replayed"], 30, "{out}");
    assert_eq!(out["failed_after"], 0, "{out}");
    // Several maintenance ticks later they are still queued, without expiry.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let q = s.queue("expiring").await;
    assert_eq!(q["counts"]["failed"], 0, "{q}");
    assert_eq!(q["counts"]["queued"], 30, "{q}");
    let (_, listed) = s.get("/v1/jobs?queue=expiring&limit=500").await;
    for job in listed["jobs"].as_array().unwrap() {
        assert_eq!(job["expires_at"], Value::Null, "{job}");
    }

    // 50 failed jobs, and a worker that fails every job it can claim.
    for _ in 0..50 {
        s.cli(&["enqueue", "flaky", "k"]).ok();
    }
    assert_eq!(s.fail_all("flaky", "boom").await.len(), 50);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (url, key) = (s.server().url("/v1"), s.key.clone());
    let worker = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut failed_again = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (_, claimed) = call(
                    Method::POST,
                    &format!("{url}/queues/flaky/claim"),
                    &key,
                    Some(json!({"worker_id": "failing", "limit": 100})),
                )
                .await;
                for job in claimed["jobs"].as_array().cloned().unwrap_or_default() {
                    let id = job["id"].as_str().unwrap();
                    call(
                        Method::POST,
                        &format!("{url}/jobs/{id}/fail"),
                        &key,
                        Some(json!({"lease_token": job["lease_token"], "error": "again", "fatal": true})),
                    )
                    .await;
                    failed_again += 1;
                }
            }
            failed_again
        })
    };
    let (cli_url, cli_dir) = (s.url.clone(), s.dir().to_owned());
    let run = tokio::task::spawn_blocking(move || {
        tether(
            &["dlq", "replay", "flaky", "--all", "--limit", "5"],
            &[("TETHER_URL", &cli_url), ("TETHER_DATA_DIR", &cli_dir)],
            None,
        )
    })
    .await
    .unwrap()
    .ok();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let failed_again = worker.await.unwrap();
    assert!(
        run.stdout
            .contains("replayed 50 failed jobs of queue flaky in 11 rounds"),
        "each job once, whatever the worker did ({failed_again} failed again):\n{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(failed_again > 0, "the worker failed nothing");
    assert!(
        run.stderr.contains("failed while the replay ran"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn stats_watch_refreshes_until_interrupted() {
    let s = Setup::sqlite("cli-watch");
    s.cli(&["enqueue", "watched", "tick"]).ok();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["stats", "--watch", "200ms"])
        .env("TETHER_URL", &s.url)
        .env("TETHER_DATA_DIR", s.dir())
        .env_remove("TETHER_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Two snapshots, each with the queue; a job enqueued between them shows.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut frames = 0;
    let mut saw_two = false;
    while Instant::now() < deadline && !saw_two {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) else {
            break;
        };
        if line.starts_with("tether stats") {
            frames += 1;
            if frames == 1 {
                s.cli(&["enqueue", "watched", "tock"]).ok();
            }
        }
        if line.starts_with("watched") {
            let queued: Vec<&str> = line.split_whitespace().collect();
            if queued.get(2) == Some(&"2") {
                saw_two = true;
            }
        }
    }
    // SIGINT ends it with exit code 0.
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // Bounded: a watcher that ignored the interrupt must fail the test, not
    // hang it.
    let until = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tether stats --watch did not stop on SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(frames >= 2, "only {frames} frames");
    assert!(saw_two, "the refresh never showed the second job");
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
async fn schedules_add_ls_preview_trigger_runs_enable_disable_rm() {
    let s = Setup::sqlite("cli-schedules");
    let out = s
        .cli(&[
            "schedules",
            "add",
            "nightly-report",
            "0 3 * * *",
            "reports",
            "build_report",
            "--timezone",
            "Europe/Berlin",
            "--payload",
            r#"{"format": "pdf"}"#,
            "--overlap",
            "skip",
            "--json",
        ])
        .ok()
        .json();
    let id = out["schedule"]["id"].as_str().unwrap().to_owned();
    let (status, body) = s.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let sched = &body["schedule"];
    assert_eq!(sched["name"], "nightly-report");
    assert_eq!(sched["cron"], "0 3 * * *");
    assert_eq!(sched["timezone"], "Europe/Berlin");
    assert_eq!(sched["queue"], "reports");
    assert_eq!(sched["kind"], "build_report");
    assert_eq!(sched["payload"], json!({"format": "pdf"}));
    assert_eq!(sched["overlap"], "skip");
    assert_eq!(sched["enabled"], true);

    // A disabled one, and refusals.
    s.cli(&[
        "schedules",
        "add",
        "paused-one",
        "*/5 * * * *",
        "q",
        "k",
        "--disabled",
    ])
    .ok();
    let dup = s
        .cli(&["schedules", "add", "nightly-report", "0 4 * * *", "q", "k"])
        .expect(1);
    assert!(
        dup.stderr.starts_with("error: already_exists: "),
        "{}",
        dup.stderr
    );
    let bad = s
        .cli(&["schedules", "add", "bad", "61 * * * *", "q", "k"])
        .expect(1);
    assert!(
        bad.stderr.starts_with("error: invalid_argument: "),
        "{}",
        bad.stderr
    );
    s.cli(&[
        "schedules",
        "add",
        "x",
        "* * * * *",
        "q",
        "k",
        "--overlap",
        "sometimes",
    ])
    .expect(2);

    // ls.
    let list = s.cli(&["schedules", "ls", "--json"]).ok().json();
    let mut names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["nightly-report", "paused-one"]);
    let table = s.cli(&["schedules", "ls"]).ok().stdout;
    assert!(
        table.contains("nightly-report") && table.contains("Europe/Berlin"),
        "{table}"
    );

    // preview: the scheduler's own instants, across a DST gap.
    let preview = s
        .cli(&[
            "schedules",
            "preview",
            "30 2 * * *",
            "--timezone",
            "America/New_York",
            "--from",
            "2026-03-07T12:00:00Z",
            "--count",
            "3",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        preview["times"],
        json!([
            "2026-03-08T07:00:00Z",
            "2026-03-09T06:30:00Z",
            "2026-03-10T06:30:00Z"
        ])
    );
    let human = s
        .cli(&[
            "schedules",
            "preview",
            "30 2 * * *",
            "--timezone",
            "America/New_York",
            "--from",
            "2026-03-07T12:00:00Z",
            "--count",
            "3",
        ])
        .ok()
        .stdout;
    assert!(
        human.contains("2026-03-08T07:00:00Z  2026-03-08 03:00:00 EDT"),
        "{human}"
    );
    let bad = s.cli(&["schedules", "preview", "not cron"]).expect(1);
    assert!(
        bad.stderr.starts_with("error: invalid_argument: "),
        "{}",
        bad.stderr
    );

    // trigger (by name) and runs (by id).
    let triggered = s
        .cli(&["schedules", "trigger", "nightly-report", "--json"])
        .ok()
        .json();
    let job_id = triggered["job"]["id"].as_str().unwrap().to_owned();
    let job = s.job(&job_id).await;
    assert_eq!(job["queue"], "reports");
    assert_eq!(job["payload"], json!({"format": "pdf"}));
    let runs = s.cli(&["schedules", "runs", &id, "--json"]).ok().json();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["job_id"], job_id.as_str());
    assert_eq!(runs[0]["outcome"], "enqueued");
    let table = s.cli(&["schedules", "runs", "nightly-report"]).ok().stdout;
    assert!(
        table.contains(&job_id) && table.contains("enqueued"),
        "{table}"
    );

    // disable / enable.
    s.cli(&["schedules", "disable", &id]).ok();
    let (_, body) = s.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(body["schedule"]["enabled"], false);
    assert_eq!(body["schedule"]["next_run_at"], Value::Null);
    let enabled = s
        .cli(&["schedules", "enable", "nightly-report", "--json"])
        .ok()
        .json();
    assert_eq!(enabled["schedule"]["enabled"], true);
    let (_, body) = s.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(body["schedule"]["enabled"], true);
    assert!(body["schedule"]["next_run_at"].is_string());

    // rm; a second rm finds nothing.
    s.cli(&["schedules", "rm", &id]).ok();
    let (status, _) = s.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(status, 404);
    let again = s.cli(&["schedules", "rm", &id]).expect(1);
    assert!(
        again.stderr.starts_with("error: not_found: "),
        "{}",
        again.stderr
    );
    let by_name = s.cli(&["schedules", "rm", "nightly-report"]).expect(1);
    assert!(
        by_name.stderr.starts_with("error: not_found: "),
        "{}",
        by_name.stderr
    );
}

#[tokio::test]
async fn tenants_and_keys_need_an_admin_key() {
    let s = Setup::sqlite("cli-admin");
    let created = s.cli(&["tenants", "create", "acme", "--json"]).ok().json();
    let tenant_id = created["tenant"]["id"].as_str().unwrap().to_owned();
    let acme_key = created["api_key"].as_str().unwrap().to_owned();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &acme_key, None).await;
    assert_eq!(status, 200, "the new tenant's key works");

    let list = s.cli(&["tenants", "ls", "--json"]).ok().json();
    let names: Vec<&str> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"acme") && names.contains(&"default"),
        "{list}"
    );
    let table = s.cli(&["tenants", "ls"]).ok().stdout;
    assert!(table.contains(&tenant_id), "{table}");
    let dup = s.cli(&["tenants", "create", "acme"]).expect(1);
    assert!(
        dup.stderr.starts_with("error: already_exists: "),
        "{}",
        dup.stderr
    );

    // keys create (by tenant name and by id), then revoke.
    let key = s
        .cli(&["keys", "create", "acme", "--name", "ci", "--json"])
        .ok()
        .json();
    let key_id = key["key_id"].as_str().unwrap().to_owned();
    let ci_key = key["api_key"].as_str().unwrap().to_owned();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &ci_key, None).await;
    assert_eq!(status, 200);
    let human = s.cli(&["keys", "create", &tenant_id]).ok().stdout;
    assert!(human.contains("api key (shown once): tth_"), "{human}");
    let refused = s.cli(&["keys", "create", "acme", "--admin"]).expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_argument: "),
        "{}",
        refused.stderr
    );
    s.cli(&["keys", "revoke", &key_id]).ok();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &ci_key, None).await;
    assert_eq!(status, 401, "a revoked key authenticates nothing");

    // keys ls: one tenant (by name or id), or every tenant; never a secret.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let listed = loop {
        let listed = s
            .cli(&["keys", "ls", "--tenant", "acme", "--json"])
            .ok()
            .json();
        // The first key's use is recorded in the background.
        if !listed["keys"][0]["last_used_at"].is_null() {
            break listed;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let keys = listed["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{listed}");
    assert!(keys.iter().all(|k| k["tenant"] == "acme"), "{listed}");
    assert_eq!(
        (&keys[1]["id"], &keys[1]["name"]),
        (&json!(key_id), &json!("ci"))
    );
    assert!(keys[1]["revoked_at"].is_string(), "{listed}");
    assert!(keys[2]["last_used_at"].is_null(), "{listed}");
    let by_id = s
        .cli(&["keys", "ls", "--tenant", &tenant_id, "--json"])
        .ok()
        .json();
    assert_eq!(by_id, listed);
    let table = s.cli(&["keys", "ls"]).ok().stdout;
    for text in [
        "TENANT",
        "LAST USED",
        "default",
        "acme",
        &key_id,
        "ci",
        "never",
        "yes",
    ] {
        assert!(table.contains(text), "{text:?} missing:\n{table}");
    }
    for secret in [&acme_key, &ci_key] {
        let tail = secret.rsplit('_').next().unwrap();
        assert!(!table.contains(tail) && !listed.to_string().contains(tail));
    }
    let unknown = s.cli(&["keys", "ls", "--tenant", "nope"]).expect(1);
    assert!(
        unknown.stderr.starts_with("error: not_found: "),
        "{}",
        unknown.stderr
    );

    // A tenant's own key has no admin scope.
    let denied = tether(
        &["tenants", "ls", "--url", &s.url, "--key", &acme_key],
        &[],
        None,
    )
    .expect(1);
    assert!(
        denied.stderr.starts_with("error: permission_denied: "),
        "{}",
        denied.stderr
    );
    // And it sees only its own tenant's jobs.
    tether(
        &[
            "enqueue", "private", "k", "--url", &s.url, "--key", &acme_key,
        ],
        &[],
        None,
    )
    .ok();
    let mine = tether(
        &["jobs", "ls", "--json", "--url", &s.url, "--key", &acme_key],
        &[],
        None,
    )
    .ok()
    .json();
    assert_eq!(mine["jobs"].as_array().unwrap().len(), 1);
    let admins = s
        .cli(&["jobs", "ls", "--queue", "private", "--json"])
        .ok()
        .json();
    assert!(admins["jobs"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn the_key_comes_from_the_flag_the_environment_or_admin_key_under_the_data_dir() {
    let s = Setup::sqlite("cli-keys");
    // --data-dir: admin.key found there, nothing else given.
    let out = tether(
        &[
            "enqueue",
            "found",
            "k",
            "--url",
            &s.url,
            "--data-dir",
            s.dir(),
            "--json",
        ],
        &[],
        None,
    )
    .ok();
    let id = out.json()["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.job(&id).await["queue"], "found");
    // --data-dir given before the subcommand's own arguments works too.
    tether(
        &["jobs", "--url", &s.url, "--data-dir", s.dir(), "show", &id],
        &[],
        None,
    )
    .ok();
    // TETHER_KEY and --key win over the file.
    let out = tether(
        &["jobs", "ls", "--json"],
        &[
            ("TETHER_URL", &s.url),
            ("TETHER_KEY", &s.key),
            ("TETHER_DATA_DIR", "/nonexistent"),
        ],
        None,
    )
    .ok();
    assert_eq!(ids(&out.json(), "jobs"), vec![id.clone()]);
    let wrong = tether(
        &[
            "jobs",
            "ls",
            "--url",
            &s.url,
            "--key",
            "tth_not_a_real_key",
            "--data-dir",
            s.dir(),
        ],
        &[],
        None,
    )
    .expect(1);
    assert!(
        wrong.stderr.starts_with("error: unauthenticated: "),
        "{}",
        wrong.stderr
    );

    // No key anywhere: a usage error that says what to do.
    let empty = temp_dir("cli-nokey");
    let none = tether(
        &[
            "jobs",
            "ls",
            "--url",
            &s.url,
            "--data-dir",
            empty.to_str().unwrap(),
        ],
        &[],
        None,
    )
    .expect(2);
    assert!(
        none.stderr.starts_with("error: no API key"),
        "{}",
        none.stderr
    );
    assert!(none.stderr.contains("admin.key"), "{}", none.stderr);
    let _ = std::fs::remove_dir_all(&empty);

    // Nobody listening: exit 1, says where it tried.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}");
    let out = tether(&["stats", "--url", &url, "--key", "k"], &[], None).expect(1);
    assert!(
        out.stderr.starts_with(&format!(
            "error: the server could not be reached at {url}: "
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    // A URL that is no URL: usage.
    tether(&["stats", "--url", "not a url", "--key", "k"], &[], None).expect(2);
}

#[tokio::test]
async fn postgres_smoke() {
    let db = tether_conformance::postgres().await;
    let database_url = db.postgres_url().unwrap();
    let dir = temp_dir("cli-pg");
    let key = "cli-postgres-admin-key-0123456789";
    let server = Server::start(
        &dir,
        &["--database-url", &database_url],
        &[("TETHER_ADMIN_KEY", key)],
    );
    assert!(server.banner.contains("postgres"), "{}", server.banner);
    let url = format!("http://{}", server.addr);
    let env = [("TETHER_URL", url.as_str()), ("TETHER_KEY", key)];
    let out = tether(
        &["enqueue", "pg", "work", r#"{"a": 1}"#, "--json"],
        &env,
        None,
    )
    .ok();
    let id = out.json()["job"]["id"].as_str().unwrap().to_owned();
    let listed = tether(&["jobs", "ls", "--queue", "pg", "--json"], &env, None)
        .ok()
        .json();
    assert_eq!(ids(&listed, "jobs"), vec![id.clone()]);

    // Fail it, see it in the DLQ and the stats, replay it.
    let (status, claimed) = call(
        Method::POST,
        &server.url("/v1/queues/pg/claim"),
        key,
        Some(json!({"worker_id": "w"})),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let token = claimed["jobs"][0]["lease_token"].clone();
    let (status, _) = call(
        Method::POST,
        &server.url(&format!("/v1/jobs/{id}/fail")),
        key,
        Some(json!({"lease_token": token, "error": "nope", "fatal": true})),
    )
    .await;
    assert_eq!(status, 200);
    let dlq = tether(&["dlq", "ls", "--json"], &env, None).ok().json();
    assert_eq!(ids(&dlq, "jobs"), vec![id.clone()]);
    let stats = tether(&["stats"], &env, None).ok().stdout;
    assert!(stats.lines().any(|l| l.starts_with("pg ")), "{stats}");
    let replayed = tether(&["dlq", "replay", "pg", "--all", "--json"], &env, None)
        .ok()
        .json();
    assert_eq!(replayed["replayed"], 1);
    let (_, job) = call(
        Method::GET,
        &server.url(&format!("/v1/jobs/{id}")),
        key,
        None,
    )
    .await;
    assert_eq!(job["job"]["state"], "queued");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
