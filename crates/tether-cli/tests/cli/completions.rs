//! What the parser itself prints: shell completion scripts and help.

use super::*;

/// `tether completions <shell>` prints a script that knows the commands;
/// bash parses its own.
#[test]
fn completions_for_bash_zsh_and_fish() {
    for shell in ["bash", "zsh", "fish"] {
        let run = tether(&["completions", shell], &[], None).ok();
        for command in ["enqueue", "workers", "schedules", "serve"] {
            assert!(run.stdout.contains(command), "{shell} lacks {command}");
        }
    }
    let script = tether(&["completions", "bash"], &[], None).ok().stdout;
    let dir = temp_dir("completions");
    let path = dir.join("tether.bash");
    std::fs::write(&path, script).unwrap();
    let parsed = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .status()
        .unwrap();
    assert!(parsed.success(), "bash -n refused the script");
    tether(&["completions", "tcsh"], &[], None).expect(2);
}

/// `enqueue --help` lists its positionals in their order under their own
/// heading, apart from the options and the server flags.
#[test]
fn enqueue_help_shows_its_arguments_in_order() {
    let help = tether(&["enqueue", "--help"], &[], None).ok().stdout;
    let at = |text: &str| {
        help.find(text)
            .unwrap_or_else(|| panic!("{text} not in:\n{help}"))
    };
    assert!(at("Arguments:") < at("  <QUEUE>"));
    assert!(at("  <QUEUE>") < at("  <KIND>"));
    assert!(at("  <KIND>") < at("  [PAYLOAD]"));
    assert!(at("  [PAYLOAD]") < at("Options:"));
    assert!(at("Options:") < at("Server and output:"));
    assert!(at("Server and output:") < at("--tenant"));
    assert!(at("--priority") < at("Server and output:"));
}
