//! Text a tenant's worker wrote (a failure's error, its worker id, a
//! payload) reaches the operator's terminal as visible escapes, never as
//! the control sequences it holds: `dlq ls`, `jobs show` and `jobs events`
//! print no raw ESC, BEL, C1 CSI or bidirectional override, and their
//! `--json` is still JSON with the same values, with those characters
//! escaped. On SQLite and on PostgreSQL.

use super::*;

/// Clears the screen, sets the window title, writes the clipboard (OSC
/// 52), then a C1 CSI (U+009B, which some terminals obey like ESC [), a
/// tab and DEL.
const HOSTILE_ERROR: &str = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\u{9b}31mred\tx\u{7f}";
/// How the error is shown.
const SHOWN_ERROR: &str = r"\x1b[2J\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07\u{9b}31mred\tx\x7f";
/// A worker id with a right-to-left override (allowed: it is no control
/// character).
const HOSTILE_WORKER: &str = "w\u{202e}1-live";
const SHOWN_WORKER: &str = r"w\u{202e}1-live";

/// Panics if `text` holds a character a terminal could obey (line feeds
/// aside), naming it.
#[track_caller]
fn assert_no_raw_controls(what: &str, text: &str) {
    for c in text.chars() {
        let bad = (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        assert!(!bad, "{what} printed {c:?} raw:\n{text}");
    }
}

/// Fails a job the hostile way on the server at `url` (with `key`), then
/// runs the commands with `env` (which points them at it).
async fn hostile_text_is_shown_not_obeyed(url: &str, key: &str, env: &[(&str, &str)]) {
    let (status, body) = call(
        Method::POST,
        &format!("{url}/v1/jobs"),
        key,
        Some(json!({
            "queue": "evil",
            "kind": "k",
            "payload": {"note": "\u{9b}1m\u{202e}", "bell": "\x07"},
        })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["job"]["id"].as_str().unwrap().to_owned();
    let (status, claimed) = call(
        Method::POST,
        &format!("{url}/v1/queues/evil/claim"),
        key,
        Some(json!({"worker_id": HOSTILE_WORKER})),
    )
    .await;
    assert_eq!(status, 200, "{claimed}");
    let token = claimed["jobs"][0]["lease_token"].clone();
    let (status, body) = call(
        Method::POST,
        &format!("{url}/v1/jobs/{id}/fail"),
        key,
        Some(json!({"lease_token": token, "error": HOSTILE_ERROR, "fatal": true})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["job"]["last_error"], HOSTILE_ERROR, "stored as sent");

    // dlq ls: the error is cut to fit (60 columns in a pipe), shown.
    let dlq = tether(&["dlq", "ls"], env, None).ok();
    assert_no_raw_controls("dlq ls", &dlq.stdout);
    assert_no_raw_controls("dlq ls (stderr)", &dlq.stderr);
    assert!(
        dlq.stdout.contains(r"\x1b[2J\x1b]0;pwned\x07\x1b]52;c;"),
        "{}",
        dlq.stdout
    );

    // jobs show: every field whole, the payload as JSON escapes.
    let show = tether(&["jobs", "show", &id], env, None).ok();
    assert_no_raw_controls("jobs show", &show.stdout);
    assert!(show.stdout.contains(SHOWN_ERROR), "{}", show.stdout);
    assert!(show.stdout.contains(SHOWN_WORKER), "{}", show.stdout);
    assert!(
        show.stdout.contains(r#""note": "\u009b1m\u202e""#),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains(r#""bell": "\u0007""#),
        "{}",
        show.stdout
    );

    // jobs events: the worker and the failure's detail.
    let events = tether(&["jobs", "events", &id], env, None).ok();
    assert_no_raw_controls("jobs events", &events.stdout);
    assert!(events.stdout.contains(SHOWN_WORKER), "{}", events.stdout);
    assert!(
        events.stdout.contains(r"\x1b[2J\x1b]0;pwned\x07"),
        "{}",
        events.stdout
    );

    // --json: no raw control either, and still the very same values.
    for args in [
        &["dlq", "ls", "--json"][..],
        &["jobs", "show", &id, "--json"],
        &["jobs", "events", &id, "--json"],
    ] {
        let run = tether(args, env, None).ok();
        assert_no_raw_controls(&args.join(" "), &run.stdout);
        assert!(run.stdout.contains(r"\u009b31m"), "{}", run.stdout);
        let doc = run.json();
        let text = doc.to_string();
        assert!(
            text.contains(&serde_json::to_string(HOSTILE_ERROR).unwrap()[1..20]),
            "{args:?}: {text}"
        );
    }
    let shown = tether(&["jobs", "show", &id, "--json"], env, None)
        .ok()
        .json();
    assert_eq!(shown["job"]["last_error"], HOSTILE_ERROR);
    assert_eq!(
        shown["job"]["payload"],
        json!({"note": "\u{9b}1m\u{202e}", "bell": "\x07"})
    );
    let events = tether(&["jobs", "events", &id, "--json"], env, None)
        .ok()
        .json();
    assert!(
        events["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["worker_id"] == HOSTILE_WORKER),
        "{events}"
    );

    // An API error's message is shown, not obeyed, too (it echoes the
    // queue name refused).
    let refused = tether(&["jobs", "ls", "--queue", "a\x1b[2Jb"], env, None);
    assert_ne!(refused.code, 0, "{refused:?}");
    assert_no_raw_controls("an API error", &refused.stderr);
}

#[tokio::test]
async fn hostile_text_is_shown_not_obeyed_on_sqlite() {
    let s = Setup::sqlite("cli-terminal");
    hostile_text_is_shown_not_obeyed(
        &s.url,
        &s.key,
        &[("TETHER_URL", &s.url), ("TETHER_DATA_DIR", s.dir())],
    )
    .await;
}

#[tokio::test]
async fn hostile_text_is_shown_not_obeyed_on_postgres() {
    let db = tether_conformance::postgres().await;
    let database_url = db.postgres_url().unwrap();
    let dir = temp_dir("cli-terminal-pg");
    let key = "cli-terminal-admin-key-0123456789";
    let server = Server::start(
        &dir,
        &["--database-url", &database_url],
        &[("TETHER_ADMIN_KEY", key)],
    );
    let url = format!("http://{}", server.addr);
    hostile_text_is_shown_not_obeyed(&url, key, &[("TETHER_URL", &url), ("TETHER_KEY", key)]).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    db.cleanup().await;
}
