//! docs/cli.md's examples are commands this `tether` accepts: each
//! `tether ...` of its `sh` blocks is parsed by the real binary with
//! `--help` added (so nothing runs, but an unknown flag or a value that
//! does not parse is refused).

use super::*;

/// The `tether` commands of the `sh` blocks of docs/cli.md, as the shell
/// would split them into words; redirections, pipes' left sides and
/// comments dropped.
fn doc_commands() -> Vec<Vec<String>> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md"))
        .expect("docs/cli.md");
    let mut commands = Vec::new();
    let mut in_sh = false;
    for line in doc.lines() {
        match line {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            _ if in_sh => {
                let line = line.split(" # ").next().unwrap_or_default();
                for command in line.split("; ") {
                    let command = command.rsplit(" | ").next().unwrap_or_default();
                    let command = command.split(" > ").next().unwrap_or_default();
                    let command = command.trim();
                    if let Some(rest) = command.strip_prefix("tether ") {
                        commands.push(shell_words(rest));
                    } else if let Some(rest) = command.strip_prefix("TETHER_TENANT=acme tether ") {
                        commands.push(shell_words(rest));
                    }
                }
            }
            _ => {}
        }
    }
    commands
}

/// `text` split into words by bash itself (quotes honoured, no globbing).
fn shell_words(text: &str) -> Vec<String> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -f; printf '%s\\0' {text}"))
        .output()
        .expect("bash");
    assert!(out.status.success(), "{text}");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_example_of_docs_cli_md_parses() {
    let commands = doc_commands();
    assert!(commands.len() > 50, "{commands:?}");
    let mut names: Vec<&str> = commands
        .iter()
        .map(|c| c.iter().find(|w| !w.starts_with('-')).unwrap().as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    for command in [
        "enqueue",
        "jobs",
        "workflows",
        "events",
        "queues",
        "dlq",
        "schedules",
        "tenants",
        "keys",
        "stats",
        "workers",
        "completions",
    ] {
        assert!(
            names.contains(&command),
            "docs/cli.md has no {command} example"
        );
    }
    for words in &commands {
        let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
        args.push("--help");
        let run = tether(&args, &[], None);
        assert_eq!(run.code, 0, "tether {}: {}", words.join(" "), run.stderr);
    }
    // The check refuses what it should.
    assert_ne!(
        tether(&["jobs", "ls", "--nope", "--help"], &[], None).code,
        0
    );
    assert_ne!(
        tether(
            &["jobs", "ls", "--created-after", "soon", "--help"],
            &[],
            None
        )
        .code,
        0
    );
}
