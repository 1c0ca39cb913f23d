//! `tether enqueue` and `tether jobs`.

use super::*;

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
            "--header",
            "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "--header",
            "x-request-id=a=b",
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
    assert_eq!(
        job["headers"],
        json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
               "x-request-id": "a=b"})
    );
    let shown = s.cli(&["jobs", "show", &id]).ok().stdout;
    assert!(shown.contains("x-request-id=a=b"), "{shown}");
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
    s.cli(&["enqueue", "q", "k", "--delay", "five minutes"])
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

/// A job is named by the first hex digits of its id when they name one
/// job; too few digits, none matching, or several matching are refused
/// with the reason.
#[tokio::test]
async fn jobs_are_named_by_an_id_prefix() {
    let s = Setup::sqlite("cli-prefix");
    let mut ids = Vec::new();
    for _ in 0..3 {
        let made = s.cli(&["enqueue", "q", "k", "--json"]).ok().json();
        ids.push(made["job"]["id"].as_str().unwrap().to_owned());
    }
    // Time-ordered ids made in a row share their first digits; the full id
    // without its last digits names one job.
    let target = &ids[1];
    let unique = &target[..target.len() - 4];
    let shown = s.cli(&["jobs", "show", unique, "--json"]).ok().json();
    assert_eq!(shown["job"]["id"], target.as_str());
    let cancelled = s.cli(&["jobs", "cancel", unique, "--json"]).ok().json();
    assert_eq!(cancelled["job"]["state"], "cancelled");
    let replayed = s.cli(&["jobs", "replay", unique, "--json"]).ok().json();
    assert_eq!(replayed["job"]["state"], "queued");
    let shared = &target[..6];
    assert!(ids.iter().all(|id| id.starts_with(shared)), "{ids:?}");
    let ambiguous = s.cli(&["jobs", "show", shared]).expect(2);
    assert!(
        ambiguous
            .stderr
            .contains(&format!("ambiguous id prefix {shared}: it matches ")),
        "{}",
        ambiguous.stderr
    );
    let none = s.cli(&["jobs", "show", "ffffffff"]).expect(1);
    assert!(
        none.stderr.contains("no job id starts with ffffffff"),
        "{}",
        none.stderr
    );
    let short = s.cli(&["jobs", "show", "01a"]).expect(2);
    assert!(
        short.stderr.contains("4 or more hex digits"),
        "{}",
        short.stderr
    );
    let listed = s
        .cli(&["jobs", "ls", "--id-prefix", unique, "--json"])
        .ok()
        .json();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1);
    // By creation time: a duration ago, or an instant.
    let count = |args: &[&str]| {
        let mut all = vec!["jobs", "ls", "--json"];
        all.extend_from_slice(args);
        s.cli(&all).ok().json()["jobs"].as_array().unwrap().len()
    };
    assert_eq!(count(&["--created-after", "1h"]), 3);
    assert_eq!(count(&["--created-before", "1h"]), 0);
    assert_eq!(count(&["--created-after", "2999-01-01T00:00:00Z"]), 0);
    s.cli(&["jobs", "ls", "--created-after", "yesterday-ish"])
        .expect(2);
}

/// `jobs cancel --queue` and `jobs replay --queue --state` act on every
/// job they select, in batches; more than one needs --yes when nobody can
/// be asked; the summary counts what was done.
#[tokio::test]
async fn jobs_are_cancelled_and_replayed_in_bulk() {
    let s = Setup::sqlite("cli-bulk");
    for _ in 0..3 {
        s.cli(&["enqueue", "bulk", "k"]).ok();
    }
    s.cli(&["enqueue", "bulk", "other-kind"]).ok();
    s.cli(&["enqueue", "elsewhere", "k"]).ok();
    let asked = s.cli(&["jobs", "cancel", "--queue", "bulk"]).expect(2);
    assert!(
        asked
            .stderr
            .contains("this would cancel 4 jobs: pass --yes"),
        "{}",
        asked.stderr
    );
    let state = |queue: &str, state: &str| {
        let listed = s
            .cli(&["jobs", "ls", "--queue", queue, "--state", state, "--json"])
            .ok()
            .json();
        listed["jobs"].as_array().unwrap().len()
    };
    assert_eq!(state("bulk", "queued"), 4, "asking changed nothing");
    let one = s
        .cli(&["jobs", "cancel", "--queue", "bulk", "--kind", "other-kind"])
        .ok();
    assert_eq!(
        one.stdout,
        "cancelled 1 job, 0 skipped (already finished)\n"
    );
    let done = s.cli(&["jobs", "cancel", "--queue", "bulk", "--yes"]).ok();
    assert_eq!(
        done.stdout,
        "cancelled 3 jobs, 0 skipped (already finished)\n"
    );
    assert_eq!(state("bulk", "cancelled"), 4);
    assert_eq!(state("elsewhere", "queued"), 1);
    let replayed = s
        .cli(&[
            "jobs",
            "replay",
            "--queue",
            "bulk",
            "--state",
            "cancelled",
            "-y",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(replayed["done"], 4);
    assert_eq!(replayed["skipped"], json!([]));
    assert_eq!(replayed["failed"], json!([]));
    assert_eq!(state("bulk", "queued"), 4);
    // An id and a selection together are refused by the parser.
    s.cli(&["jobs", "cancel", "0000", "--queue", "bulk"])
        .expect(2);
    s.cli(&["jobs", "cancel"]).expect(2);
}

/// A bulk replay of succeeded jobs runs them again; a selection by tag
/// acts on those jobs only; jobs the action does not fit are counted as
/// skipped, not as errors.
#[tokio::test]
async fn succeeded_jobs_are_replayed_in_bulk_and_unfit_ones_skipped() {
    let s = Setup::sqlite("cli-bulk-succeeded");
    for _ in 0..2 {
        s.cli(&["enqueue", "reports", "build"]).ok();
    }
    let done = s.succeed_all("reports").await;
    assert_eq!(done.len(), 2);
    s.cli(&["enqueue", "reports", "build", "--tag", "urgent"])
        .ok();
    s.cli(&["enqueue", "reports", "build", "--tag", "urgent"])
        .ok();
    s.cli(&["enqueue", "reports", "build"]).ok();

    // Cancelling succeeded jobs: each is refused as finished, a skip.
    let unfit = s
        .cli(&[
            "jobs",
            "cancel",
            "--queue",
            "reports",
            "--state",
            "succeeded",
            "--yes",
        ])
        .ok();
    assert_eq!(
        unfit.stdout,
        "cancelled 0 jobs, 2 skipped (already finished)\n"
    );
    let replayed = s
        .cli(&[
            "jobs",
            "replay",
            "--queue",
            "reports",
            "--state",
            "succeeded",
            "--yes",
        ])
        .ok();
    assert_eq!(
        replayed.stdout,
        "replayed 2 jobs, 0 skipped (not finished)\n"
    );
    for id in &done {
        let job = s.job(id).await;
        assert_eq!(job["state"], "queued", "{job}");
        assert_eq!(job["attempt"], 0, "{job}");
        assert!(job["result"].is_null(), "{job}");
    }
    // By tag: only the two tagged jobs of the five queued ones.
    let tagged = s
        .cli(&[
            "jobs", "cancel", "--queue", "reports", "--tag", "urgent", "--yes",
        ])
        .ok();
    assert_eq!(
        tagged.stdout,
        "cancelled 2 jobs, 0 skipped (already finished)\n"
    );
    let (_, queued) = s.get("/v1/jobs?queue=reports&state=queued").await;
    assert_eq!(queued["jobs"].as_array().unwrap().len(), 3, "{queued}");
    let (_, cancelled) = s.get("/v1/jobs?queue=reports&state=cancelled").await;
    for job in cancelled["jobs"].as_array().unwrap() {
        assert_eq!(job["tags"], json!(["urgent"]), "{job}");
    }
}

/// Dependencies: `enqueue --after` (repeatable, by id or prefix) and
/// `--dependency-failure`, `jobs ls --depends-on` and `--state waiting`,
/// `jobs show` with what a job waits for and what waits for it, and the
/// waiting count of `queues show` and `stats`.
#[tokio::test]
async fn jobs_wait_for_other_jobs() {
    let s = Setup::sqlite("cli-deps");
    let enqueue = |args: &[&str]| {
        let mut all = vec!["enqueue", "pipeline"];
        all.extend_from_slice(args);
        all.push("--json");
        s.cli(&all).ok().json()["job"].clone()
    };
    let a = enqueue(&["render"]);
    let a_id = a["id"].as_str().unwrap().to_owned();
    assert_eq!(a["state"], "queued");
    let b = enqueue(&["publish", "--after", &a_id]);
    let b_id = b["id"].as_str().unwrap().to_owned();
    assert_eq!(b["state"], "waiting");
    assert_eq!(b["depends_on"], json!([a_id]));
    assert_eq!(b["dependency_failure"], "cancel");
    let c = enqueue(&[
        "summary",
        "--after",
        &a_id,
        "--after",
        &b_id,
        "--dependency-failure",
        "run",
    ]);
    let c_id = c["id"].as_str().unwrap().to_owned();
    assert_eq!(c["state"], "waiting");
    assert_eq!(c["depends_on"], json!([a_id, b_id]));
    assert_eq!(c["dependency_failure"], "run");
    // The human answer says what it waits for; a prefix names the job.
    let prefix = &c_id[..c_id.len() - 4];
    let out = s
        .cli(&["enqueue", "other", "notify", "--after", prefix])
        .ok();
    assert!(
        out.stdout.contains("(kind notify, waiting for 1 job)"),
        "{}",
        out.stdout
    );
    let d_id = out.stdout.split_whitespace().nth(2).unwrap().to_owned();
    assert_eq!(s.job(&d_id).await["depends_on"], json!([c_id]));

    // Refusals: a rule that is not one, a rule without --after (usage,
    // exit 2); a job that does not exist (the server's 400, exit 1).
    let bad = s
        .cli(&[
            "enqueue",
            "q",
            "k",
            "--after",
            &a_id,
            "--dependency-failure",
            "maybe",
        ])
        .expect(2);
    assert!(bad.stderr.contains("use cancel or run"), "{}", bad.stderr);
    s.cli(&["enqueue", "q", "k", "--dependency-failure", "run"])
        .expect(2);
    let missing = uuid::Uuid::now_v7().to_string();
    let refused = s.cli(&["enqueue", "q", "k", "--after", &missing]).expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_argument: ")
            && refused.stderr.contains("depends_on"),
        "{}",
        refused.stderr
    );

    // ls: the jobs that wait for one, and the waiting state.
    let waiters = s
        .cli(&["jobs", "ls", "--depends-on", &a_id, "--json"])
        .ok()
        .json();
    assert_eq!(ids(&waiters, "jobs"), vec![c_id.clone(), b_id.clone()]);
    let waiting = s
        .cli(&["jobs", "ls", "--state", "waiting", "--json"])
        .ok()
        .json();
    assert_eq!(
        ids(&waiting, "jobs"),
        vec![d_id.clone(), c_id.clone(), b_id.clone()]
    );
    let table = s.cli(&["jobs", "ls", "--depends-on", &b_id]).ok().stdout;
    assert!(
        table.contains(&c_id) && table.contains("waiting") && !table.contains(&a_id),
        "{table}"
    );
    s.cli(&["jobs", "ls", "--depends-on", "nope"]).expect(2);

    // show: what C waits for, in its order, with states; what waits for A.
    let shown = s.cli(&["jobs", "show", &c_id]).ok().stdout;
    let waits = shown
        .split("waits for (runs anyway if one fails):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no dependencies in:\n{shown}"));
    let waits = waits.split("\n\n").next().unwrap();
    let lines: Vec<&str> = waits.lines().collect();
    assert!(lines[0].contains("STATE"), "{waits}");
    assert!(
        lines[1].contains(&a_id) && lines[1].contains("render") && lines[1].contains("queued"),
        "{waits}"
    );
    assert!(
        lines[2].contains(&b_id) && lines[2].contains("publish") && lines[2].contains("waiting"),
        "{waits}"
    );
    assert!(shown.contains("waited for by:"), "{shown}");
    assert!(shown.contains(&d_id), "{shown}");
    let shown = s.cli(&["jobs", "show", &a_id]).ok().stdout;
    assert!(!shown.contains("waits for ("), "{shown}");
    let by = shown
        .split("waited for by:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no dependents in:\n{shown}"));
    let by = by.split("\n\n").next().unwrap();
    assert!(by.contains(&b_id) && by.contains(&c_id), "{by}");
    let shown = s.cli(&["jobs", "show", &b_id]).ok().stdout;
    assert!(
        shown.contains("waits for (cancelled if one fails):"),
        "{shown}"
    );
    let doc = s.cli(&["jobs", "show", &c_id, "--json"]).ok().json();
    let deps = doc["dependencies"].as_array().unwrap();
    let states: Vec<(&str, &str)> = deps
        .iter()
        .map(|d| (d["id"].as_str().unwrap(), d["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        [(a_id.as_str(), "queued"), (b_id.as_str(), "waiting")]
    );
    assert_eq!(ids(&doc, "dependents"), vec![d_id.clone()]);
    assert_eq!(doc["events"][0]["event"], "enqueued");
    let doc = s.cli(&["jobs", "show", &d_id, "--json"]).ok().json();
    assert_eq!(doc["dependents"], json!([]));

    // Counts: the waiting jobs of a queue, in queues show and stats.
    let queue = s.cli(&["queues", "show", "pipeline"]).ok().stdout;
    let line = queue
        .lines()
        .find(|l| l.starts_with("waiting"))
        .unwrap_or_else(|| panic!("no waiting count in:\n{queue}"));
    assert!(line.ends_with(" 2"), "{line}");
    let stats = s.cli(&["stats"]).ok().stdout;
    assert!(stats.contains("WAITING"), "{stats}");
    assert!(stats.contains(", 3 waiting,"), "{stats}");

    // A succeeds: B is released, C still waits for B (A shows succeeded).
    assert_eq!(s.succeed_all("pipeline").await, vec![a_id.clone()]);
    assert_eq!(s.job(&b_id).await["state"], "queued");
    let doc = s.cli(&["jobs", "show", &c_id, "--json"]).ok().json();
    assert_eq!(doc["dependencies"][0]["state"], "succeeded");
    assert_eq!(doc["dependencies"][0]["result"], json!({"ok": true}));
    assert_eq!(doc["dependencies"][1]["state"], "queued");
    assert_eq!(doc["job"]["state"], "waiting");
}
