//! `tether migrate`, `tether migrate status` and `tether serve
//! --no-migrate` as a user runs them: the real binary on a SQLite data
//! directory and on a PostgreSQL database.

use crate::common;

use std::path::Path;

use common::{temp_dir, tether, Run, Server};
use sqlx::Connection;

/// The newest SQLite migration (18: worker presence).
const LATEST_SQLITE: i64 = 18;

fn status(target: &[&str]) -> Run {
    let mut args = vec!["migrate", "status", "--json"];
    args.extend_from_slice(target);
    tether(&args, &[], None)
}

/// `tether serve` on `target` that is expected to refuse to start (so it
/// exits by itself).
fn serve_refused(target: &[&str], env: &[(&str, &str)]) -> Run {
    let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(target);
    let run = tether(&args, env, None);
    assert_ne!(run.code, 0, "serve started: {}", run.stdout);
    run
}

async fn sqlite_exec(path: &Path, sql: &str) {
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

#[tokio::test]
async fn sqlite_status_then_migrate_then_serve_without_migrating() {
    let dir = temp_dir("migrate-sqlite");
    let target = ["--data-dir", dir.to_str().unwrap()];

    // A new data directory: everything pending, and nothing is created.
    let before = status(&target).expect(3).json();
    assert_eq!(before["status"], "needs_migrate");
    assert_eq!(before["current_version"], 0);
    assert_eq!(before["latest_known"], LATEST_SQLITE);
    let pending: Vec<&str> = before["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(pending, vec!["pending"; LATEST_SQLITE as usize]);
    let text = tether(&["migrate", "status", target[0], target[1]], &[], None).expect(3);
    assert!(
        text.stdout.contains("run `tether migrate`"),
        "{}",
        text.stdout
    );

    // Refused without migrations, by flag or by environment, changing nothing.
    let run = serve_refused(&[target[0], target[1], "--no-migrate"], &[]);
    assert!(
        run.stderr.contains("run `tether migrate`"),
        "{}",
        run.stderr
    );
    let run = serve_refused(&target, &[("TETHER_NO_MIGRATE", "true")]);
    assert!(
        run.stderr.contains("run `tether migrate`"),
        "{}",
        run.stderr
    );
    assert!(!dir.join(tether_server::SQLITE_FILE).exists());

    let applied = tether(&["migrate", target[0], target[1]], &[], None).ok();
    assert!(
        applied
            .stdout
            .contains("migrations applied: 1, 2, 3, 4, 5, 6, 7"),
        "{}",
        applied.stdout
    );
    let again = tether(&["migrate", target[0], target[1]], &[], None).ok();
    assert!(again.stdout.contains("schema current"), "{}", again.stdout);

    let after = status(&target).ok().json();
    assert_eq!(after["status"], "current");
    assert_eq!(after["problem"], serde_json::Value::Null);
    for m in after["migrations"].as_array().unwrap() {
        assert_eq!(
            (&m["state"], &m["checksum"]),
            (&"applied".into(), &"ok".into())
        );
        assert_eq!(m["recorded_checksum"], m["expected_checksum"]);
    }

    // Current: serving without migrations starts.
    let server = Server::start(&dir, &[], &[("TETHER_NO_MIGRATE", "true")]);
    assert!(
        server.banner.contains("backend: sqlite"),
        "{}",
        server.banner
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_newer_sqlite_schema_is_reported_and_refused() {
    let dir = temp_dir("migrate-newer");
    let target = ["--data-dir", dir.to_str().unwrap()];
    tether(&["migrate", target[0], target[1]], &[], None).ok();
    sqlite_exec(
        &dir.join(tether_server::SQLITE_FILE),
        "INSERT INTO tether_migrations (version, name, applied_at, checksum)
         VALUES (99, 'from_the_future', 0, 'x')",
    )
    .await;

    let report = status(&target).expect(4).json();
    assert_eq!(report["status"], "refused");
    assert_eq!(report["current_version"], 99);
    assert_eq!(report["unknown"][0]["version"], 99);
    assert_eq!(report["unknown"][0]["name"], "from_the_future");
    let problem = report["problem"].as_str().unwrap();
    assert!(
        problem.contains("version 99")
            && problem.contains(&format!("up to {LATEST_SQLITE}"))
            && problem.contains("upgrade tether"),
        "{problem}"
    );
    let text = tether(&["migrate", "status", target[0], target[1]], &[], None).expect(4);
    assert!(
        text.stdout.contains("unknown to this tether (newer)"),
        "{}",
        text.stdout
    );

    // Refused migrating or not, by serve and by migrate.
    for extra in [&[][..], &["--no-migrate"][..]] {
        let mut args = target.to_vec();
        args.extend_from_slice(extra);
        let run = serve_refused(&args, &[]);
        assert!(run.stderr.contains("upgrade tether"), "{}", run.stderr);
    }
    let run = tether(&["migrate", target[0], target[1]], &[], None).expect(1);
    assert!(run.stderr.contains("upgrade tether"), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn postgres_status_migrate_and_an_edited_migration() {
    let admin_url = std::env::var("TETHER_TEST_DATABASE_URL")
        .unwrap_or_else(|_| tether_conformance::DEFAULT_DATABASE_URL.into());
    let name = format!(
        "{}cli_migrate_{}",
        tether_conformance::TEST_DB_PREFIX,
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
    sqlx::raw_sql(&format!("CREATE DATABASE \"{name}\""))
        .execute(&mut admin)
        .await
        .unwrap();
    let url = tether_postgres::url_with_database(&admin_url, &name);
    let dir = temp_dir("migrate-pg");
    let target = ["--database-url", &url, "--data-dir", dir.to_str().unwrap()];

    let before = status(&target).expect(3).json();
    assert_eq!(before["backend"], "postgres");
    assert_eq!(before["current_version"], 0);
    let latest = before["latest_known"].as_i64().unwrap();
    let mut args = vec!["migrate"];
    args.extend_from_slice(&target);
    tether(&args, &[], None).ok();
    let after = status(&target).ok().json();
    assert_eq!(after["current_version"], latest);

    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql("UPDATE tether.migrations SET checksum = 'edited' WHERE version = 3")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let edited = status(&target).expect(4).json();
    assert_eq!(edited["migrations"][2]["checksum"], "mismatch");
    assert_eq!(edited["migrations"][2]["recorded_checksum"], "edited");
    assert!(
        edited["problem"].as_str().unwrap().contains("was edited"),
        "{edited}"
    );
    let run = serve_refused(&target, &[]);
    assert!(run.stderr.contains("was edited"), "{}", run.stderr);

    sqlx::raw_sql(&format!("DROP DATABASE \"{name}\" WITH (FORCE)"))
        .execute(&mut admin)
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
