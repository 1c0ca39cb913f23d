//! Migrations under control, the same cases on both backends: checksums
//! recorded and a database from before them upgraded in place, an edited
//! migration and a schema newer than the build refused (migrating or not),
//! and opening without migrations refusing anything but the current schema
//! while changing nothing.
//!
//! The cases need the raw database (to build an old one, edit a recorded
//! checksum, add a version from the future), which the behaviour suite's
//! engine does not give; so each runs here once per backend.

use std::path::PathBuf;
use std::sync::Arc;

use sqlx::Connection;
use tether_core::migrations::{ChecksumState, MigrationState, SchemaError, SchemaStatus};
use tether_core::{Engine, Error, Store};
use tether_postgres::{PgOptions, PgStore};
use tether_sqlite::{SqliteOptions, SqliteStore};

/// A throw-away database, not yet migrated.
enum Db {
    Postgres {
        admin_url: String,
        name: String,
        url: String,
    },
    Sqlite {
        dir: PathBuf,
        path: PathBuf,
    },
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Postgres,
    Sqlite,
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}{}_{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

impl Db {
    async fn new(backend: Backend) -> Db {
        match backend {
            Backend::Postgres => {
                let admin_url = std::env::var("TETHER_TEST_DATABASE_URL")
                    .unwrap_or_else(|_| tether_conformance::DEFAULT_DATABASE_URL.into());
                let name = unique(tether_conformance::TEST_DB_PREFIX);
                let mut admin = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .expect("PostgreSQL is reachable");
                sqlx::raw_sql(&format!("CREATE DATABASE \"{name}\""))
                    .execute(&mut admin)
                    .await
                    .expect("create database");
                admin.close().await.expect("close");
                let url = tether_postgres::url_with_database(&admin_url, &name);
                Db::Postgres {
                    admin_url,
                    name,
                    url,
                }
            }
            Backend::Sqlite => {
                let dir = std::env::temp_dir().join(unique("tether-test-").replace('_', "-"));
                std::fs::create_dir_all(&dir).expect("create dir");
                let path = dir.join("db.sqlite");
                Db::Sqlite { dir, path }
            }
        }
    }

    /// The newest version this build knows.
    fn latest(&self) -> i64 {
        match self {
            Db::Postgres { .. } => PgStore::schema_version(),
            Db::Sqlite { .. } => SqliteStore::schema_version(),
        }
    }

    /// Migrates up to `version` as a tether from before checksums did.
    async fn migrate_before_checksums(&self, version: i64) {
        match self {
            Db::Postgres { url, .. } => {
                let pool = sqlx::PgPool::connect(url).await.expect("connect");
                tether_postgres::migrate_up_to_without_checksums(&pool, version)
                    .await
                    .expect("old migrations");
                pool.close().await;
            }
            Db::Sqlite { path, .. } => {
                tether_sqlite::migrate_up_to_without_checksums(path, version)
                    .await
                    .expect("old migrations")
            }
        }
    }

    /// Runs `sql` on the database directly.
    async fn exec(&self, sql: &str) {
        match self {
            Db::Postgres { url, .. } => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
                sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
                conn.close().await.expect("close");
            }
            Db::Sqlite { path, .. } => {
                let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
                let mut conn = sqlx::SqliteConnection::connect_with(&options)
                    .await
                    .expect("connect");
                sqlx::raw_sql(sql).execute(&mut conn).await.expect(sql);
                conn.close().await.expect("close");
            }
        }
    }

    /// Opens the store, applying migrations or not.
    async fn open(&self, migrate: bool) -> Result<Arc<dyn Store>, Error> {
        Ok(match self {
            Db::Postgres { url, .. } => {
                let options = PgOptions {
                    migrate,
                    max_connections: 2,
                    ..PgOptions::default()
                };
                Arc::new(PgStore::connect_with(url, &options).await?)
            }
            Db::Sqlite { path, .. } => {
                Arc::new(SqliteStore::open_with(path, &SqliteOptions { migrate }).await?)
            }
        })
    }

    async fn status(&self) -> SchemaStatus {
        match self {
            Db::Postgres { url, .. } => PgStore::schema_status(url, &PgOptions::default()).await,
            Db::Sqlite { path, .. } => SqliteStore::schema_status(path).await,
        }
        .expect("schema status")
    }

    /// SQL that records `version` as applied, as a newer tether would.
    fn record_future_version(&self, version: i64) -> String {
        match self {
            Db::Postgres { .. } => format!(
                "INSERT INTO tether.migrations (version, name, checksum) VALUES ({version}, 'future', 'x')"
            ),
            Db::Sqlite { .. } => format!(
                "INSERT INTO tether_migrations (version, name, applied_at, checksum) VALUES ({version}, 'future', 0, 'x')"
            ),
        }
    }

    /// SQL that changes the checksum recorded for `version`.
    fn edit_checksum(&self, version: i64) -> String {
        let table = match self {
            Db::Postgres { .. } => "tether.migrations",
            Db::Sqlite { .. } => "tether_migrations",
        };
        format!("UPDATE {table} SET checksum = 'edited' WHERE version = {version}")
    }

    /// SQL of a configured queue (max_attempts 9) in the schema before
    /// flow control (PostgreSQL 5, SQLite 4), which both seed versions have.
    fn queue_seed(&self) -> &'static str {
        match self {
            Db::Postgres { .. } => {
                "INSERT INTO tether.queues (tenant, name, paused, max_attempts)
                 VALUES ('default', 'mail', false, 9);"
            }
            Db::Sqlite { .. } => {
                "INSERT INTO tether_queues (tenant, name, paused, max_attempts,
                     backoff_base_ms, backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at)
                 VALUES ('default', 'mail', 0, 9, 1000, 3600000, 30000, 0, 0);"
            }
        }
    }

    /// The version the upgrade test starts from: before flow control.
    fn old_version(&self) -> i64 {
        match self {
            Db::Postgres { .. } => 5,
            Db::Sqlite { .. } => 4,
        }
    }

    /// Whether the migrations table exists (SQLite: whether the file does).
    async fn was_touched(&self) -> bool {
        match self {
            Db::Postgres { url, .. } => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
                let exists: bool =
                    sqlx::query_scalar("SELECT to_regclass('tether.migrations') IS NOT NULL")
                        .fetch_one(&mut conn)
                        .await
                        .expect("query");
                conn.close().await.expect("close");
                exists
            }
            Db::Sqlite { path, .. } => path.exists(),
        }
    }

    async fn cleanup(self) {
        match self {
            Db::Postgres {
                admin_url, name, ..
            } => {
                let mut admin = sqlx::PgConnection::connect(&admin_url)
                    .await
                    .expect("connect");
                sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .expect("drop database");
                let _ = admin.close().await;
            }
            Db::Sqlite { dir, .. } => {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
}

fn schema_error(result: Result<Arc<dyn Store>, Error>) -> SchemaError {
    match result {
        Err(Error::Schema(e)) => e,
        Err(other) => panic!("expected a schema error, got {other:?}"),
        Ok(_) => panic!("expected a schema error, the store opened"),
    }
}

async fn upgrades_a_database_from_before_checksums(backend: Backend) {
    let db = Db::new(backend).await;
    let old = db.old_version();
    db.migrate_before_checksums(old).await;
    db.exec(db.queue_seed()).await;
    let before = db.status().await;
    assert_eq!(before.current_version(), old);
    for m in &before.migrations {
        if m.version <= old {
            assert_eq!(m.checksum, Some(ChecksumState::NotRecorded), "{m:?}");
        } else {
            assert_eq!(m.state, MigrationState::Pending, "{m:?}");
        }
    }
    // Without migrating, the old schema is refused and left as it is.
    assert!(matches!(
        schema_error(db.open(false).await),
        SchemaError::ChecksumsNotRecorded { .. }
    ));
    assert_eq!(db.status().await, before);

    let store = db.open(true).await.expect("the upgrade");
    let after = db.status().await;
    assert_eq!(after.current_version(), db.latest());
    assert!(after.unknown.is_empty());
    for m in &after.migrations {
        assert_eq!(m.state, MigrationState::Applied, "{m:?}");
        assert_eq!(m.checksum, Some(ChecksumState::Matches), "{m:?}");
        assert_eq!(m.recorded_checksum.as_ref(), Some(&m.expected_checksum));
    }
    assert_eq!(after.require_current(), Ok(()));
    let engine = Engine::new(store);
    let queue = engine.queue_stats("default", "mail").await.expect("stats");
    assert_eq!(queue.config.max_attempts, 9, "the old data is kept");
    drop(engine);
    // Now current: opening without migrations works.
    db.open(false).await.expect("open without migrating");
    db.cleanup().await;
}

async fn an_edited_migration_refuses_to_start(backend: Backend) {
    let db = Db::new(backend).await;
    drop(db.open(true).await.expect("fresh"));
    db.exec(&db.edit_checksum(2)).await;
    for migrate in [true, false] {
        let err = schema_error(db.open(migrate).await);
        match &err {
            SchemaError::ChecksumMismatch {
                version, recorded, ..
            } => assert_eq!((*version, recorded.as_str()), (2, "edited")),
            other => panic!("migrate {migrate}: {other:?}"),
        }
        assert!(err.to_string().contains("was edited"), "{err}");
    }
    let status = db.status().await;
    assert_eq!(status.migrations[1].checksum, Some(ChecksumState::Differs));
    db.cleanup().await;
}

async fn a_newer_schema_refuses_to_start(backend: Backend) {
    let db = Db::new(backend).await;
    drop(db.open(true).await.expect("fresh"));
    let latest = db.latest();
    db.exec(&db.record_future_version(latest + 1)).await;
    for migrate in [true, false] {
        let err = schema_error(db.open(migrate).await);
        assert_eq!(
            err,
            SchemaError::Newer {
                found: latest + 1,
                known: latest
            },
            "migrate {migrate}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&format!("version {}", latest + 1))
                && message.contains(&format!("up to {latest}"))
                && message.contains("upgrade tether"),
            "{message}"
        );
    }
    let status = db.status().await;
    assert_eq!(status.unknown.len(), 1);
    assert_eq!(status.unknown[0].version, latest + 1);
    db.cleanup().await;
}

async fn without_migrating_a_new_database_is_refused_untouched(backend: Backend) {
    let db = Db::new(backend).await;
    let err = schema_error(db.open(false).await);
    let all: Vec<i64> = (1..=db.latest()).collect();
    assert_eq!(err, SchemaError::Pending { versions: all });
    assert!(err.to_string().contains("run `tether migrate`"), "{err}");
    assert!(!db.was_touched().await, "nothing was created");
    db.cleanup().await;
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::Backend::Sqlite).await;
                }
            )*
        }
    };
}

on_both_backends!(
    upgrades_a_database_from_before_checksums,
    an_edited_migration_refuses_to_start,
    a_newer_schema_refuses_to_start,
    without_migrating_a_new_database_is_refused_untouched,
);

/// Through PgBouncer in transaction mode, where every statement may land on
/// another server connection: refusing, migrating and reading the status
/// work the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_behind_pgbouncer_migrates_and_reports() {
    let db = Db::new(Backend::Postgres).await;
    let Db::Postgres { name, .. } = &db else {
        unreachable!()
    };
    let bouncer = std::env::var("TETHER_TEST_PGBOUNCER_URL")
        .unwrap_or_else(|_| tether_conformance::DEFAULT_PGBOUNCER_URL.into());
    let url = tether_postgres::url_with_database(&bouncer, name);
    let options = |migrate| PgOptions {
        migrate,
        transaction_pooler: true,
        max_connections: 2,
        ..PgOptions::default()
    };
    match PgStore::connect_with(&url, &options(false)).await {
        Err(Error::Schema(SchemaError::Pending { .. })) => {}
        other => panic!("expected pending migrations, got {:?}", other.map(|_| ())),
    }
    let status = PgStore::schema_status(&url, &options(true))
        .await
        .expect("status (is PgBouncer running? scripts/pgbouncer starts one)");
    assert_eq!(status.current_version(), 0);
    drop(
        PgStore::connect_with(&url, &options(true))
            .await
            .expect("migrate"),
    );
    let status = PgStore::schema_status(&url, &options(true))
        .await
        .expect("status");
    assert_eq!(status.require_current(), Ok(()));
    assert_eq!(status, db.status().await, "the same as read directly");
    drop(
        PgStore::connect_with(&url, &options(false))
            .await
            .expect("current: opens without migrating"),
    );
    db.cleanup().await;
}
