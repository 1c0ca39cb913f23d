//! `tether completions`: shell completion scripts made from the parser.

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
