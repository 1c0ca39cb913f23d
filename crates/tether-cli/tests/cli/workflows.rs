//! `tether workflows ls | show | cancel | retry`, `enqueue --workflow` and
//! `jobs ls --workflow`, on SQLite and on PostgreSQL.

use super::*;

#[tokio::test]
async fn workflows_on_sqlite() {
    let s = Setup::sqlite("cli-workflows");
    workflows(&s).await;
}

#[tokio::test]
async fn workflows_on_postgres() {
    let db = tether_conformance::postgres().await;
    let s = Setup::postgres("cli-workflows-pg", &db.postgres_url().unwrap());
    workflows(&s).await;
    drop(s);
    db.cleanup().await;
}

impl Setup {
    /// `POST path` with the admin key; answers the body, which must be 200.
    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, body) = call(
            Method::POST,
            &self.server().url(path),
            &self.key,
            Some(body),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Claims the ready jobs of `queue`; fails `fail` for good and
    /// completes the others.
    async fn settle(&self, queue: &str, fail: &[&str]) {
        for (id, lease_token) in self.claim_all(queue).await {
            let (path, body) = if fail.contains(&id.as_str()) {
                (
                    format!("/v1/jobs/{id}/fail"),
                    json!({"lease_token": lease_token, "error": "no luck", "fatal": true}),
                )
            } else {
                (
                    format!("/v1/jobs/{id}/complete"),
                    json!({"lease_token": lease_token}),
                )
            };
            self.post(&path, body).await;
        }
    }
}

/// The line of `drawn` (a `workflows show` graph) about the job whose
/// kind is `kind`: its tree lead, short id, and the rest of its words.
fn line_of<'a>(drawn: &'a str, kind: &str) -> (&'a str, &'a str, Vec<&'a str>) {
    let line = drawn
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == kind))
        .unwrap_or_else(|| panic!("no {kind} in:\n{drawn}"));
    let body = line.trim_start_matches(|c: char| " │├└─".contains(c));
    let lead = &line[..line.len() - body.len()];
    let mut words = body.split_whitespace();
    let short = words.next().unwrap();
    (lead, short, words.collect())
}

async fn workflows(s: &Setup) {
    // A diamond: fetch, then resize and thumb, then publish after both.
    let made = s
        .post(
            "/v1/jobs/batch",
            json!({"workflow": {"name": "publish-post", "idempotency_key": "post-7"}, "jobs": [
                {"queue": "wf", "kind": "fetch"},
                {"queue": "wf", "kind": "resize", "depends_on_entries": [0]},
                {"queue": "wf", "kind": "thumb", "depends_on_entries": [0]},
                {"queue": "wf", "kind": "publish", "depends_on_entries": [1, 2]},
            ]}),
        )
        .await;
    let w = made["workflow_id"].as_str().unwrap().to_owned();
    let job = |i: usize| made["results"][i]["job"]["id"].as_str().unwrap().to_owned();
    let (fetch, resize, thumb, publish) = (job(0), job(1), job(2), job(3));

    // ls: the page as the API answers it, and the table.
    let listed = s.cli(&["workflows", "ls", "--json"]).ok().json();
    assert_eq!(ids(&listed, "workflows"), vec![w.clone()]);
    assert_eq!(listed["workflows"][0]["state"], "running");
    assert_eq!(listed["workflows"][0]["counts"]["waiting"], 3);
    assert_eq!(listed["next_cursor"], Value::Null);
    let table = s.cli(&["workflows", "ls"]).ok().stdout;
    let row = table
        .lines()
        .find(|l| l.starts_with(&w))
        .unwrap_or_else(|| panic!("no row of {w}:\n{table}"));
    for part in ["publish-post", "running", " 4 ", "3 waiting, 1 queued"] {
        assert!(row.contains(part), "{part:?} not in {row}");
    }
    assert!(table.starts_with("ID "), "{table}");

    // fetch runs and fans out: a job joins the workflow at run time.
    s.settle("wf", &[]).await;
    let out = s
        .cli(&[
            "enqueue",
            "wf",
            "notify",
            "--workflow",
            &w,
            "--after",
            &publish,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(out["job"]["workflow_id"], w);
    assert_eq!(out["job"]["state"], "waiting");
    let notify = out["job"]["id"].as_str().unwrap().to_owned();
    let human = s
        .cli(&["enqueue", "other", "ping", "--workflow", &w])
        .ok()
        .stdout;
    assert!(human.contains(&format!("in workflow {w})")), "{human}");
    let ping = human.split_whitespace().nth(2).unwrap().to_owned();

    // show: the fields and the graph, each job once with its short id,
    // kind and state; publish under one parent, naming the other.
    let shown = s.cli(&["workflows", "show", &w]).ok().stdout;
    for part in [
        format!("id:               {w}"),
        "name:             publish-post".to_owned(),
        "idempotency key:  post-7".to_owned(),
        "state:            running".to_owned(),
        "jobs:             6: 2 waiting, 3 queued, 1 succeeded".to_owned(),
    ] {
        assert!(shown.contains(&part), "{part:?} not in:\n{shown}");
    }
    let drawn = shown
        .split("graph (6 jobs, each under the job it waits for; ↑ names its other dependencies):\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no graph in:\n{shown}"));
    let drawn = drawn.split("\n\n").next().unwrap();
    assert_eq!(drawn.lines().count(), 6, "{drawn}");
    let expect = [
        (&fetch, "fetch", "succeeded"),
        (&resize, "resize", "queued"),
        (&thumb, "thumb", "queued"),
        (&publish, "publish", "waiting"),
        (&notify, "notify", "waiting"),
        (&ping, "ping", "queued"),
    ];
    for (id, kind, state) in expect {
        let (_, short, rest) = line_of(drawn, kind);
        let tail = short.strip_prefix('…').unwrap();
        assert!(
            id.ends_with(tail) && tail.len() >= 8,
            "{short} {id}:\n{drawn}"
        );
        assert_eq!(rest[0..2], [kind, state], "{drawn}");
    }
    let (lead, _, _) = line_of(drawn, "fetch");
    assert_eq!(lead, "  ", "{drawn}");
    let (lead, _, rest) = line_of(drawn, "publish");
    assert!(lead.ends_with("└─ "), "{drawn}");
    let others = rest[2..].join(" ");
    let (_, resize_short, _) = line_of(drawn, "resize");
    let (_, thumb_short, _) = line_of(drawn, "thumb");
    assert!(
        others == format!("↑ also after {resize_short}")
            || others == format!("↑ also after {thumb_short}"),
        "{drawn}"
    );
    let (publish_lead, _, _) = line_of(drawn, "publish");
    let (notify_lead, _, _) = line_of(drawn, "notify");
    assert!(
        notify_lead.ends_with("└─ ") && notify_lead.len() > publish_lead.len(),
        "notify is drawn under publish:\n{drawn}"
    );
    assert!(
        shown.contains(&format!(
            "whole ids: tether jobs ls --workflow {w}; a job's details: tether jobs show <id>"
        )),
        "{shown}"
    );
    // --json is the API's document.
    let doc = s.cli(&["workflows", "show", &w, "--json"]).ok().json();
    let (status, api) = s.get(&format!("/v1/workflows/{w}")).await;
    assert_eq!(status, 200);
    assert_eq!(doc, api);
    assert_eq!(doc["jobs"].as_array().unwrap().len(), 6);

    // A job's page names its workflow; jobs ls lists the workflow's jobs.
    let job_shown = s.cli(&["jobs", "show", &notify]).ok().stdout;
    let line = job_shown
        .lines()
        .find(|l| l.starts_with("workflow:"))
        .unwrap_or_else(|| panic!("no workflow in:\n{job_shown}"));
    assert!(
        line.contains(&format!("{w} (tether workflows show {w})")),
        "{line}"
    );
    let of_it = s
        .cli(&["jobs", "ls", "--workflow", &w, "--json"])
        .ok()
        .json();
    let mut listed = ids(&of_it, "jobs");
    listed.sort();
    let mut all = vec![
        fetch.clone(),
        resize.clone(),
        thumb.clone(),
        publish.clone(),
        notify.clone(),
        ping.clone(),
    ];
    all.sort();
    assert_eq!(listed, all);

    // A second workflow; the filters and the pages.
    let second = s
        .post(
            "/v1/jobs/batch",
            json!({"workflow": {"name": "nightly"}, "jobs": [{"queue": "nightly", "kind": "k"}]}),
        )
        .await;
    let w2 = second["workflow_id"].as_str().unwrap().to_owned();
    let ls = |args: &[&str]| {
        let mut all = vec!["workflows", "ls", "--json"];
        all.extend_from_slice(args);
        ids(&s.cli(&all).ok().json(), "workflows")
    };
    assert_eq!(ls(&[]), vec![w2.clone(), w.clone()]);
    assert_eq!(ls(&["--name", "nightly"]), vec![w2.clone()]);
    assert_eq!(ls(&["--state", "succeeded"]), Vec::<String>::new());
    let first = s.cli(&["workflows", "ls", "--limit", "1"]).ok();
    assert!(
        first.stdout.contains(&w2) && !first.stdout.contains(&w),
        "{}",
        first.stdout
    );
    assert!(
        first.stderr.contains("more workflows: add --cursor "),
        "{}",
        first.stderr
    );
    assert_eq!(ls(&["--limit", "1", "--all"]), vec![w2.clone(), w.clone()]);
    s.settle("nightly", &[]).await;
    assert_eq!(ls(&["--state", "succeeded"]), vec![w2.clone()]);

    // resize fails for good, thumb succeeds: publish and notify are
    // cancelled; the workflow failed.
    s.settle("other", &[]).await;
    s.settle("wf", &[&resize]).await;
    assert_eq!(ls(&["--state", "failed"]), vec![w.clone()]);
    let shown = s.cli(&["workflows", "show", &w]).ok().stdout;
    for (kind, state) in [
        ("resize", "failed"),
        ("thumb", "succeeded"),
        ("publish", "cancelled"),
        ("notify", "cancelled"),
    ] {
        assert_eq!(line_of(&shown, kind).2[1], state, "{shown}");
    }
    let table = s.cli(&["workflows", "ls", "--state", "failed"]).ok().stdout;
    assert!(
        table.contains("3 succeeded, 1 failed, 2 cancelled"),
        "{table}"
    );

    // retry: the failed job only, then with what is downstream.
    let out = s.cli(&["workflows", "retry", &w]).ok().stdout;
    assert_eq!(
        out,
        format!("workflow {w}: put back 1 job (the failed jobs)\n")
    );
    assert_eq!(s.job(&resize).await["state"], "queued");
    assert_eq!(s.job(&publish).await["state"], "cancelled");
    s.settle("wf", &[&resize]).await;
    let out = s
        .cli(&["workflows", "retry", &w, "--downstream", "--json"])
        .ok()
        .json();
    assert_eq!(out, json!({"replayed": 3}));
    assert_eq!(s.job(&publish).await["state"], "waiting");
    assert_eq!(s.job(&notify).await["state"], "waiting");
    let out = s.cli(&["workflows", "retry", &w]).ok().stdout;
    assert_eq!(out, format!("workflow {w}: no failed job to retry\n"));

    // cancel: every unfinished job at once; then there is nothing to do.
    let out = s.cli(&["workflows", "cancel", &w, "--json"]).ok().json();
    assert_eq!(out, json!({"cancelled": 3, "cancel_requested": 0}));
    let out = s.cli(&["workflows", "cancel", &w]).ok().stdout;
    assert!(out.contains("nothing to cancel"), "{out}");
    assert_eq!(ls(&["--state", "cancelled"]), vec![w.clone()]);
    // A finished workflow takes no more jobs (the server's 409, exit 1).
    let refused = s
        .cli(&["enqueue", "wf", "late", "--workflow", &w])
        .expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_state: "),
        "{}",
        refused.stderr
    );

    // Refusals: not an id or a state (usage, exit 2); no such workflow
    // (the server's 404, exit 1).
    for args in [
        &["workflows", "show", "nope"][..],
        &["workflows", "cancel", &w[..8]],
        &["workflows", "ls", "--state", "done"],
        &["enqueue", "q", "k", "--workflow", "nope"],
        &["jobs", "ls", "--workflow", "nope"],
    ] {
        let run = s.cli(args).expect(2);
        assert!(run.stderr.contains("error"), "{args:?}: {}", run.stderr);
    }
    let missing = uuid::Uuid::now_v7().to_string();
    let run = s.cli(&["workflows", "show", &missing]).expect(1);
    assert!(
        run.stderr.starts_with("error: not_found: "),
        "{}",
        run.stderr
    );
}

/// `tether jobs wait`, `tether workflows wait` (exit 0 once succeeded, 1
/// while unfinished at the timeout or when it failed) and `tether events`
/// (a line per event as it is committed), on SQLite.
#[tokio::test]
async fn waiting_and_tailing_events() {
    let s = Setup::sqlite("cli-wait");
    let made = s
        .post(
            "/v1/jobs/batch",
            json!({"workflow": {"name": "w"}, "jobs": [
                {"queue": "wait", "kind": "one"},
                {"queue": "wait", "kind": "two", "depends_on_entries": [0]},
            ]}),
        )
        .await;
    let w = made["workflow_id"].as_str().unwrap().to_owned();
    let first = made["results"][0]["job"]["id"].as_str().unwrap().to_owned();

    let early = s
        .cli(&["workflows", "wait", &w, "--timeout", "200ms"])
        .expect(1);
    assert!(
        early.stderr.contains("still running after 200ms"),
        "{}",
        early.stderr
    );
    let job = s
        .cli(&["jobs", "wait", &first, "--timeout", "100ms", "--json"])
        .expect(1);
    assert_eq!(job.json()["job"]["state"], "queued");

    // Tail the stream in a child process while the jobs run.
    let mut tail = std::process::Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "events",
            "--json",
            "--queue",
            "wait",
            "--event",
            "succeeded,enqueued",
        ])
        .env_clear()
        .env("TETHER_URL", &s.url)
        .env("TETHER_DATA_DIR", s.dir())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = tail.stdout.take().unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if lines.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    // It shows what is committed once it has connected: markers are
    // enqueued until it shows one (their `enqueued`), so what follows is
    // surely after that.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let marker = json!({"queue": "wait", "kind": "marker"});
        let (status, body) = call(
            Method::POST,
            &s.server().url("/v1/jobs"),
            &s.key,
            Some(marker),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        if seen.recv_timeout(Duration::from_millis(100)).is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tether events showed nothing in 120 s"
        );
    }
    s.settle("wait", &[]).await;
    s.settle("wait", &[]).await;

    let done = s.cli(&["workflows", "wait", &w, "--timeout", "10m"]).ok();
    assert!(done.stdout.contains("succeeded"), "{}", done.stdout);
    s.cli(&["jobs", "wait", &first, "--timeout", "10m"]).ok();
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        let line = seen
            .recv_timeout(Duration::from_secs(120))
            .expect("the jobs' events within 120 s");
        let doc: Value = serde_json::from_str(&line).unwrap();
        let event = &doc["event"];
        if event["event"] == "succeeded" && event["kind"] != "marker" {
            kinds.push(event["kind"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(kinds, ["one", "two"]);
    let _ = tail.kill();
    let _ = tail.wait();
}
