//! The README's Rust graph example is `examples/checkout.rs` as written,
//! and it runs: on SQLite and on PostgreSQL.

#[allow(dead_code)]
#[path = "../examples/checkout.rs"]
mod checkout;

use std::time::Duration;

const README: &str = include_str!("../../../README.md");

/// How long the example may take before the test calls it stuck: it polls
/// until the receipt job ends, so a lost release would otherwise hang the
/// suite. Generous, so that a stalled host is not taken for a fault.
const DEADLINE: Duration = Duration::from_secs(120);
const EXAMPLE: &str = include_str!("../examples/checkout.rs");

#[test]
fn the_readme_shows_the_example_as_written() {
    let section = README
        .split("\n### From Rust")
        .nth(1)
        .expect("the README has a \"### From Rust\" graph example");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a rust block");
    let code = &EXAMPLE[EXAMPLE.find("\nuse ").expect("the example has a use") + 1..];
    assert_eq!(
        block, code,
        "the README block and examples/checkout.rs differ"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_sends_the_receipt_with_the_charge_on_sqlite() {
    let dir = std::env::temp_dir().join(format!("tether-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("jobs.db");
    let run = checkout::checkout(path.to_str().expect("utf-8"), 42);
    let sent = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("the example finishes")
        .expect("the example runs");
    assert_eq!(sent, "receipt for order 42 (charge ch_42)");
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_sends_the_receipt_with_the_charge_on_postgres() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().expect("postgres url");
    let sent = tokio::time::timeout(DEADLINE, checkout::checkout(&url, 7))
        .await
        .expect("the example finishes")
        .expect("the example runs");
    assert_eq!(sent, "receipt for order 7 (charge ch_7)");
    db.cleanup().await;
}
