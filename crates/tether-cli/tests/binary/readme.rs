//! The README's HTTP quick start works as written: its shell block runs
//! against a real `tether serve` (on a free port instead of 7070) and
//! completes a job.

use crate::common;

use std::process::Command;

use common::{temp_dir, Server};

/// The first `sh` block after the "Quick start over HTTP" heading.
fn quick_start_block() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let section = &readme[readme
        .find("## Quick start over HTTP")
        .expect("README has the HTTP quick start")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + section[start..].find("```").expect("the block ends");
    section[start..end].to_owned()
}

#[test]
fn the_readme_http_quick_start_completes_a_job() {
    let block = quick_start_block();
    assert!(block.contains("localhost:7070"), "{block}");
    let dir = temp_dir("readme");
    let server = Server::start(&dir.join("tether-data"), &[], &[]);
    let script = block.replace("localhost:7070", &server.addr);
    let out = Command::new("bash")
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(&script)
        .current_dir(&dir)
        .output()
        .expect("bash and curl are needed to run the README's quick start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the quick start failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The complete answer and the history (the last line) show success.
    assert!(stdout.contains(r#""state":"succeeded""#), "{stdout}");
    let history = stdout.lines().last().unwrap_or_default();
    let events: serde_json::Value = serde_json::from_str(history).expect("events JSON");
    let kinds: Vec<&str> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["enqueued", "claimed", "succeeded"], "{history}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
