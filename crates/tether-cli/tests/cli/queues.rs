//! `tether queues`, `tether dlq` and `tether stats`.

use super::*;

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

/// `tether workers` lists who holds running jobs and who announced itself
/// (idle, with its SDK and host); `tether queues rm`
/// removes a queue only while it holds no job.
#[tokio::test]
async fn workers_and_removing_an_empty_queue() {
    let s = Setup::sqlite("cli-workers");
    let none = s.cli(&["workers", "--json"]).ok().json();
    assert_eq!(none["workers"], json!([]));
    s.cli(&["enqueue", "imports", "k"]).ok();
    let (status, claimed) = call(
        Method::POST,
        &s.server().url("/v1/queues/imports/claim"),
        &s.key,
        Some(json!({"worker_id": "importer-1"})),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let listed = s.cli(&["--json", "workers"]).ok().json();
    assert_eq!(listed["workers"][0]["worker_id"], "importer-1");
    assert_eq!(listed["workers"][0]["queues"], json!(["imports"]));
    assert_eq!(listed["workers"][0]["running"], 1);
    let table = s.cli(&["workers"]).ok().stdout;
    assert!(
        table.contains("WORKER") && table.contains("importer-1") && table.contains("imports"),
        "{table}"
    );
    let (status, body) = call(
        Method::PUT,
        &s.server().url("/v1/workers/idle-7"),
        &s.key,
        Some(
            json!({"queues": ["mail"], "concurrency": 8, "sdk": "python",
                    "version": "0.1.0", "host": "box", "pid": 31}),
        ),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let table = s.cli(&["workers"]).ok().stdout;
    let idle = table
        .lines()
        .find(|l| l.contains("idle-7"))
        .unwrap_or_default();
    for part in ["mail", " 0 ", " 8 ", "python 0.1.0", "box:31"] {
        assert!(idle.contains(part), "{part:?} in {table}");
    }

    // A name that never held a job: done, with a warning naming the known ones.
    let typo = s.cli(&["queues", "pause", "imprts"]).ok();
    assert!(
        typo.stderr.contains(
            "warning: queue 'imprts' has never held a job (a typo?); known queues: imports"
        ),
        "{}",
        typo.stderr
    );
    let known = s.cli(&["queues", "pause", "imports"]).ok();
    assert!(!known.stderr.contains("warning"), "{}", known.stderr);
    s.cli(&["queues", "resume", "imports"]).ok();
    s.cli(&["queues", "rm", "imprts"]).ok();
    // --url with /v1: refused with the base URL to use instead.
    let base = s.server().url("");
    let v1 = format!("{}/v1", base.trim_end_matches('/'));
    let hinted = s.cli(&["queues", "ls", "--url", &v1]).expect(2);
    assert!(
        hinted.stderr.contains(&format!(
            "--url is the server's base URL, without /v1 (try --url {})",
            base.trim_end_matches('/')
        )),
        "{}",
        hinted.stderr
    );
    let queues = s.cli(&["queues", "ls", "--json"]).ok().json();
    let names: Vec<&str> = queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["imports"]);
    let busy = s.cli(&["queues", "rm", "imports"]).expect(1);
    assert!(
        busy.stderr.starts_with("error: invalid_state: ") && busy.stderr.contains("1 job"),
        "{}",
        busy.stderr
    );
    let gone = s.cli(&["queues", "rm", "imprts"]).expect(1);
    assert!(
        gone.stderr.starts_with("error: not_found: "),
        "{}",
        gone.stderr
    );
}

/// `tether stats` calls a queue stuck when its oldest ready job has
/// waited past `--stuck-after` with none of its jobs running, and counts
/// in words ("1 queue").
#[tokio::test]
async fn stats_says_stuck_and_counts_in_words() {
    let s = Setup::sqlite("cli-stuck");
    s.cli(&["enqueue", "idle", "k"]).ok();
    let help = s.cli(&["stats", "--help"]).ok().stdout;
    assert!(help.contains("[default: 5m]"), "{help}");
    let fresh = s.cli(&["stats"]).ok().stdout;
    assert!(!fresh.contains("stuck"), "{fresh}");
    assert!(fresh.contains("1 queue: 1 queued"), "{fresh}");
    std::thread::sleep(std::time::Duration::from_millis(20));
    let stuck = s.cli(&["stats", "--stuck-after", "10ms"]).ok().stdout;
    assert!(stuck.contains("stuck"), "{stuck}");
    // A running job means someone is claiming: not stuck.
    s.cli(&["enqueue", "idle", "k"]).ok();
    let (status, _) = call(
        Method::POST,
        &s.server().url("/v1/queues/idle/claim"),
        &s.key,
        Some(json!({"worker_id": "w"})),
    )
    .await;
    assert_eq!(status, 200);
    let busy = s.cli(&["stats", "--stuck-after", "10ms"]).ok().stdout;
    assert!(!busy.contains("stuck"), "{busy}");
    s.cli(&["enqueue", "other", "k"]).ok();
    let two = s.cli(&["stats"]).ok().stdout;
    assert!(two.contains("2 queues: "), "{two}");
}

/// `queues throughput`: the API's JSON with --json; for people, one line
/// per outcome with its total and the percentiles; the window is bounded.
/// Also: the client flags before or after the subcommand read the same.
#[tokio::test]
async fn queues_throughput_and_flags_on_either_side() {
    let s = Setup::sqlite("cli-throughput");
    for _ in 0..2 {
        s.cli(&["enqueue", "tp", "k"]).ok();
    }
    assert_eq!(s.succeed_all("tp").await.len(), 2);
    s.cli(&["enqueue", "tp", "k"]).ok();
    assert_eq!(s.fail_all("tp", "boom").await.len(), 1);

    let doc = s
        .cli(&["queues", "throughput", "tp", "--minutes", "5", "--json"])
        .ok()
        .json();
    let minutes = doc["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 5, "{doc}");
    let total = |field: &str| -> u64 { minutes.iter().map(|m| m[field].as_u64().unwrap()).sum() };
    assert_eq!((total("succeeded"), total("failed")), (2, 1), "{doc}");
    assert!(doc["wait_ms"]["p50"].is_i64(), "{doc}");
    assert!(doc["run_ms"]["p99"].is_i64(), "{doc}");

    let text = s
        .cli(&["queues", "throughput", "tp", "--minutes", "5"])
        .ok()
        .stdout;
    assert!(text.starts_with("queue tp: 5 minutes from "), "{text}");
    assert!(text.contains("one mark a minute"), "{text}");
    let totals = |name: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        cells[cells.len() - 2].to_owned()
    };
    assert_eq!(totals("succeeded"), "2", "{text}");
    assert_eq!(totals("failed"), "1", "{text}");
    assert_eq!(totals("retried"), "0", "{text}");
    // The percentiles: a header, then wait and run with a duration each.
    let percentiles: Vec<Vec<&str>> = text
        .lines()
        .skip_while(|l| !l.contains("P50"))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(percentiles[0], ["P50", "P95", "P99"], "{text}");
    for (line, name) in percentiles[1..].iter().zip(["wait", "run"]) {
        assert_eq!((line[0], line.len()), (name, 4), "{text}");
        assert!(line[1..].iter().all(|d| d.ends_with('s')), "{text}");
    }
    // A day in one line: several minutes a mark.
    let day = s
        .cli(&["queues", "throughput", "tp", "--minutes", "1440"])
        .ok()
        .stdout;
    assert!(day.contains("one mark per 24 minutes"), "{day}");
    s.cli(&["queues", "throughput", "tp", "--minutes", "0"])
        .expect(2);
    s.cli(&["queues", "throughput", "tp", "--minutes", "1441"])
        .expect(2);
    let quiet = s.cli(&["queues", "throughput", "never-used"]).ok().stdout;
    assert!(quiet.contains("(no job finished in the window)"), "{quiet}");

    // Client flags before or after the subcommand.
    let before = s.cli(&["--json", "queues", "ls"]).ok().json();
    let after = s.cli(&["queues", "ls", "--json"]).ok().json();
    assert_eq!(before["queues"][0]["name"], "tp");
    assert_eq!(before, after);
    let url_first = tether(
        &["--url", &s.url, "--data-dir", s.dir(), "--json", "workers"],
        &[],
        None,
    )
    .ok()
    .json();
    assert_eq!(url_first["workers"], json!([]));
}
