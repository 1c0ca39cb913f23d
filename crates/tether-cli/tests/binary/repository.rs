//! The repository stands on its own: no tracked file refers to a path
//! outside it. A reader who clones tether must find every document a README,
//! a doc or a code comment points to, so this fails, naming `file:line`, on
//!
//! - the sibling directory of shared notes the project started from (and
//!   the names of its files),
//! - the absolute path of the machine it was developed on, and
//! - a markdown link `](…)` whose `..` segments climb above the repository
//!   root from the file it is in (`](../x)` is fine in `docs/a.md`, not in
//!   `README.md`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Text that names a place outside the repository. Spelled in two pieces so
/// that this file does not match itself.
const FORBIDDEN: [&str; 6] = [
    concat!("..", "/shared"),
    concat!("/wo", "rk/"),
    concat!("shared", "/API.md"),
    concat!("shared", "/DESIGN.md"),
    concat!("shared", "/TARGETS.md"),
    concat!("shared", "/FIELD-NOTES"),
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every tracked file, relative to the root.
fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8(p.to_vec()).expect("a UTF-8 path"))
        .collect()
}

/// The targets of markdown links (`[text](target)`) on one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after
            .find(|c: char| c == ')' || c.is_whitespace())
            .unwrap_or(after.len());
        targets.push(&after[..end]);
        rest = &after[end..];
    }
    targets
}

/// Whether a relative link `target`, written in a file `depth` directories
/// below the root, leads above the root.
fn climbs_out(depth: usize, target: &str) -> bool {
    if target.contains("://") || target.starts_with('#') || target.starts_with('/') {
        return false;
    }
    let path = target.split(['#', '?']).next().unwrap_or("");
    let mut depth = depth as isize;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// Every offending `file:line: text` of one file's contents.
fn offences(file: &str, text: &str) -> Vec<String> {
    let depth = file.matches('/').count();
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = FORBIDDEN.iter().any(|f| line.contains(f))
            || link_targets(line).iter().any(|t| climbs_out(depth, t));
        if bad {
            found.push(format!("{file}:{}: {}", n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn no_tracked_file_refers_outside_the_repository() {
    let root = workspace_root();
    let files = tracked_files(&root);
    assert!(
        files.iter().any(|f| f == "README.md"),
        "git ls-files at {} does not list README.md",
        root.display()
    );
    let mut found = Vec::new();
    for file in &files {
        let Ok(bytes) = std::fs::read(root.join(file)) else {
            continue; // listed but absent (deleted in the work tree)
        };
        if bytes.contains(&0) {
            continue; // binary
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        found.extend(offences(file, &text));
    }
    assert!(
        found.is_empty(),
        "tracked files refer to paths outside the repository:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_catches_what_it_should() {
    let shared = concat!("..", "/shared", "/API.md");
    assert_eq!(
        offences("README.md", &format!("see `{shared}`\nfine")).len(),
        1
    );
    assert_eq!(
        offences("crates/x/src/lib.rs", concat!("//! see /wo", "rk/notes")).len(),
        1
    );
    // A link may climb as far as the root, not past it.
    assert!(offences("docs/a.md", "[b](../README.md)").is_empty());
    assert_eq!(offences("docs/a.md", "[b](../../elsewhere.md)").len(), 1);
    assert_eq!(offences("README.md", "[b](../x.md#part)").len(), 1);
    assert_eq!(offences("README.md", "[b](docs/../../x.md)").len(), 1);
    assert!(offences("README.md", "[b](docs/API.md) [c](https://x.org/../y)").is_empty());
    assert!(offences("src/a.rs", "let s = &v[..](1);").is_empty());
}
