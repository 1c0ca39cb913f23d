//! Upgrading a database from before tenants could be suspended (PostgreSQL
//! 10, SQLite 8): the tenants already there are active, their keys
//! authenticate, their schedules keep their next runs; then one can be
//! suspended and resumed.

use tether_conformance::TestDb;
use tether_core::ScheduleSpec;
use uuid::Uuid;

const ACME: &str = "0190a000-0000-4000-8000-0000000000aa";

const PG_SEED: &str = "INSERT INTO tether.tenants (id, name, created_at)
    VALUES ('0190a000-0000-4000-8000-0000000000aa', 'acme', now());";
const SQLITE_SEED: &str = "INSERT INTO tether_tenants (id, name, created_at)
    VALUES ('0190a000-0000-4000-8000-0000000000aa', 'acme', 0);";

async fn old_tenants_are_active_and_can_be_suspended(db: TestDb) {
    let e = &db.engine;
    let acme = Uuid::parse_str(ACME).unwrap();
    let standing = e.find_tenant_status("acme").await.expect("acme");
    assert_eq!((standing.tenant.id, standing.suspended_at), (acme, None));
    let (_, key) = e.issue_api_key(acme, None, false).await.expect("key");
    assert_eq!(e.authenticate(&key).await.expect("active").tenant, "acme");
    let spec = ScheduleSpec::new("hourly", "0 * * * *", "q", "k");
    let s = e.create_schedule("acme", &spec).await.expect("schedule");
    assert!(s.next_run_at.is_some());

    let suspended = e.suspend_tenant(acme).await.expect("suspend");
    assert!(suspended.is_suspended());
    let refused = e.authenticate(&key).await.expect_err("suspended");
    assert_eq!(refused.code(), "permission_denied", "{refused}");
    let s2 = e.get_schedule("acme", s.id).await.expect("schedule");
    assert_eq!(s2.next_run_at, None);
    let resumed = e.resume_tenant(acme).await.expect("resume");
    assert!(!resumed.is_suspended());
    assert_eq!(e.authenticate(&key).await.expect("active").tenant, "acme");
    let s3 = e.get_schedule("acme", s.id).await.expect("schedule");
    assert_eq!(s3.next_run_at, s.next_run_at, "the same next hour");
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_database_from_schema_10_gains_suspension() {
    old_tenants_are_active_and_can_be_suspended(
        tether_conformance::postgres_upgraded_from(10, PG_SEED).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_from_schema_8_gains_suspension() {
    old_tenants_are_active_and_can_be_suspended(
        tether_conformance::sqlite_upgraded_from(8, SQLITE_SEED).await,
    )
    .await;
}
