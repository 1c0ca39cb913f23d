//! `tether schedules`.

use super::*;

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

/// `schedules edit` changes only the fields given (a nickname too); with
/// none it is a usage error and changes nothing.
#[tokio::test]
async fn schedules_are_edited_field_by_field() {
    let s = Setup::sqlite("cli-sched-edit");
    s.cli(&[
        "schedules",
        "add",
        "cleanup",
        "@daily",
        "maintenance",
        "purge",
    ])
    .ok();
    let edited = s
        .cli(&[
            "schedules",
            "edit",
            "cleanup",
            "--cron",
            "@hourly",
            "--kind",
            "sweep",
            "--json",
        ])
        .ok()
        .json();
    let sched = &edited["schedule"];
    assert_eq!(
        (
            &sched["cron"],
            &sched["kind"],
            &sched["queue"],
            &sched["timezone"]
        ),
        (
            &json!("@hourly"),
            &json!("sweep"),
            &json!("maintenance"),
            &json!("UTC")
        )
    );
    let next = sched["next_run_at"].as_str().unwrap();
    assert!(
        next.ends_with(":00:00Z") || next.ends_with(":00:00.000Z"),
        "{next}"
    );
    let nothing = s.cli(&["schedules", "edit", "cleanup"]).expect(2);
    assert!(
        nothing.stderr.contains("nothing to change"),
        "{}",
        nothing.stderr
    );
    let missing = s
        .cli(&["schedules", "edit", "nope", "--cron", "@weekly"])
        .expect(1);
    assert!(
        missing.stderr.starts_with("error: not_found: "),
        "{}",
        missing.stderr
    );
}

/// `schedules add --replace`: a new name is created; a taken one is made
/// the given schedule in every field (defaults for the options left out)
/// and keeps its id; without --replace it stays a conflict.
#[tokio::test]
async fn schedules_add_replace_creates_or_replaces_by_name() {
    let s = Setup::sqlite("cli-sched-replace");
    let first = s
        .cli(&[
            "schedules",
            "add",
            "digest",
            "@weekly",
            "mail",
            "send_digest",
            "--replace",
            "--timezone",
            "Europe/Paris",
            "--payload",
            r#"{"v": 1}"#,
            "--overlap",
            "skip",
        ])
        .ok();
    assert!(
        first.stdout.starts_with("created schedule digest ("),
        "{}",
        first.stdout
    );
    let (_, listed) = s.get("/v1/schedules").await;
    let id = listed["schedules"][0]["id"].as_str().unwrap().to_owned();

    let replaced = s
        .cli(&[
            "schedules",
            "add",
            "digest",
            "@hourly",
            "mail2",
            "send",
            "--replace",
            "--disabled",
        ])
        .ok();
    assert!(
        replaced
            .stdout
            .starts_with(&format!("updated schedule digest ({id})")),
        "{}",
        replaced.stdout
    );
    let (status, body) = s.get(&format!("/v1/schedules/{id}")).await;
    assert_eq!(status, 200, "{body}");
    let sched = &body["schedule"];
    assert_eq!(sched["cron"], "@hourly");
    assert_eq!(sched["queue"], "mail2");
    assert_eq!(sched["kind"], "send");
    assert_eq!(sched["timezone"], "UTC", "the default, not the old zone");
    assert_eq!(
        sched["payload"],
        Value::Null,
        "the default, not the old payload"
    );
    assert_eq!(sched["overlap"], "allow");
    assert_eq!(sched["enabled"], false);
    let (_, listed) = s.get("/v1/schedules").await;
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1, "{listed}");

    let dup = s
        .cli(&["schedules", "add", "digest", "@daily", "mail", "send"])
        .expect(1);
    assert!(
        dup.stderr.starts_with("error: already_exists: "),
        "{}",
        dup.stderr
    );
    // The help names the nicknames.
    let help = s.cli(&["schedules", "add", "--help"]).ok().stdout;
    assert!(
        help.contains("@hourly") && help.contains("@weekly"),
        "{help}"
    );
}

/// `schedules apply FILE`: each declared schedule is created, updated or
/// left unchanged by name; `--prune` deletes the undeclared; a malformed
/// file (unknown field, a name twice) sends nothing; `-` reads stdin.
#[tokio::test]
async fn schedules_apply_makes_the_declared_schedules_exist() {
    let s = Setup::sqlite("cli-sched-apply");
    let file = s.dir.join("schedules.json");
    let path = file.to_str().unwrap();
    let declare =
        |entries: Value| std::fs::write(&file, json!({"schedules": entries}).to_string()).unwrap();

    s.cli(&["schedules", "add", "stray", "@daily", "q", "k"])
        .ok();
    declare(json!([
        {"name": "digest", "cron": "0 8 * * 1", "queue": "mail", "kind": "digest",
         "timezone": "Europe/Berlin"},
        {"name": "cleanup", "cron": "@hourly", "queue": "maint", "kind": "purge",
         "payload": {"older_than": "7d"}},
    ]));
    let first = s.cli(&["schedules", "apply", path]).ok();
    let lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", first.stdout);
    assert!(
        lines[0].starts_with("created schedule digest ("),
        "{}",
        first.stdout
    );
    assert!(
        lines[1].starts_with("created schedule cleanup ("),
        "{}",
        first.stdout
    );

    // Again, one entry changed: the other is left alone.
    declare(json!([
        {"name": "digest", "cron": "0 8 * * 1", "queue": "mail", "kind": "digest",
         "timezone": "Europe/Berlin"},
        {"name": "cleanup", "cron": "@daily", "queue": "maint", "kind": "purge"},
    ]));
    let second = s
        .cli(&["schedules", "apply", path, "--prune", "--json"])
        .ok();
    let doc: Value = serde_json::from_str(&second.stdout).unwrap();
    let outcomes: Vec<(&str, &str)> = doc["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["name"].as_str().unwrap(), l["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("digest", "unchanged"),
            ("cleanup", "updated"),
            ("stray", "deleted")
        ]
    );
    let (_, listed) = s.get("/v1/schedules").await;
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.get("name").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(names, ["cleanup", "digest"]);
    assert_eq!(
        listed["schedules"][0]["payload"],
        Value::Null,
        "as declared"
    );

    // A malformed file sends nothing.
    for bad in [
        json!({"schedules": [{"name": "x", "cron": "@daily", "queue": "q", "kind": "k", "cron_tz": "UTC"}]}),
        json!({"schedules": [
            {"name": "x", "cron": "@daily", "queue": "q", "kind": "k"},
            {"name": "x", "cron": "@hourly", "queue": "q", "kind": "k"}]}),
        json!({"jobs": []}),
    ] {
        std::fs::write(&file, bad.to_string()).unwrap();
        let run = s.cli(&["schedules", "apply", path]).expect(2);
        assert!(run.stderr.contains("schedules"), "{}", run.stderr);
    }
    let (_, after) = s.get("/v1/schedules").await;
    assert_eq!(after, listed, "nothing sent");

    // From standard input.
    let stdin = json!({"schedules": [{"name": "x", "cron": "@daily", "queue": "q", "kind": "k"}]});
    let piped = s
        .cli_stdin(&["schedules", "apply", "-"], Some(&stdin.to_string()))
        .ok();
    assert!(
        piped.stdout.starts_with("created schedule x ("),
        "{}",
        piped.stdout
    );
}

/// A cron expression or time zone holding anything but printable ASCII (a
/// carriage return, a vertical tab, U+0085, an escape) is refused by the
/// schedule routes, create and update, as a 400 `invalid_argument` naming
/// the field, and changes nothing; the command exits 1 with the message.
#[tokio::test]
async fn cron_text_outside_printable_ascii_is_refused() {
    let s = Setup::sqlite("cli-sched-ascii");
    let url = s.server().url("/v1/schedules");
    for (cron, timezone, field) in [
        ("0 3 * * *\r", "UTC", "cron"),
        ("0\u{b}3 * * *", "UTC", "cron"),
        ("0 3 * * *\u{85}", "UTC", "cron"),
        ("0 3 * * *\u{1b}[2J", "UTC", "cron"),
        ("0 3 * * *", "UTC\r", "timezone"),
    ] {
        let body =
            json!({"name": "n", "cron": cron, "timezone": timezone, "queue": "q", "kind": "k"});
        let (status, answer) = call(Method::POST, &url, &s.key, Some(body)).await;
        assert_eq!(status, 400, "{cron:?} {timezone:?}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_argument");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("invalid {field}: must be printable ASCII")),
            "{message}"
        );
    }
    let (_, listed) = s.get("/v1/schedules").await;
    assert_eq!(listed["schedules"], json!([]), "nothing was created");

    let created = s
        .cli(&["schedules", "add", "n", "0 3 * * *", "q", "k", "--json"])
        .ok()
        .json();
    let id = created["schedule"]["id"].as_str().unwrap().to_owned();
    let (status, answer) = call(
        Method::PATCH,
        &format!("{url}/{id}"),
        &s.key,
        Some(json!({"cron": "0 4 * * *\r"})),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_argument");
    let refused = s
        .cli(&["schedules", "edit", "n", "--timezone", "UTC\u{85}"])
        .expect(1);
    assert!(
        refused
            .stderr
            .starts_with("error: invalid_argument: invalid timezone: must be printable ASCII"),
        "{}",
        refused.stderr
    );
    let (_, now) = s.get(&format!("/v1/schedules/{id}")).await;
    for field in ["cron", "timezone", "updated_at"] {
        assert_eq!(
            now["schedule"][field], created["schedule"][field],
            "a refused update changes nothing: {now}"
        );
    }
}
