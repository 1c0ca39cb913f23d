//! Database URLs naming several hosts: the store connects to the first one
//! that answers and takes writes, and refuses to start when none does. (The
//! move to a promoted standby mid-run is proven by `tether-chaos
//! --failover`, which runs a real primary and standby.)

use sqlx::Connection as _;
use tether_core::{NewJob, NewJobRef, Store};
use tether_postgres::PgStore;

/// `url` (one host) with `first` put before its host in the host list.
fn with_host_before(url: &str, first: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, rest) = match rest.rfind('@') {
        Some(i) => (&rest[..=i], &rest[i + 1..]),
        None => ("", rest),
    };
    format!("{scheme}://{userinfo}{first},{rest}")
}

/// A port on loopback where nothing listens (bound, then released).
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_first_host_is_passed_over() {
    let db = tether_conformance::postgres().await;
    let url = with_host_before(
        &db.postgres_url().unwrap(),
        &format!("127.0.0.1:{}", dead_port()),
    );
    let store = PgStore::connect(&url)
        .await
        .expect("connects to the live host");
    let jobs = [NewJob::new("q", "k", serde_json::json!({}))];
    let enqueued = store
        .enqueue(tether_core::DEFAULT_TENANT, &NewJobRef::mint(&jobs), 10)
        .await
        .expect("writes");
    assert_eq!(enqueued.len(), 1);
    drop(store);
    db.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_servers_are_refused_until_one_takes_writes() {
    let db = tether_conformance::postgres().await;
    let direct = db.postgres_url().unwrap();
    let database = direct.rsplit('/').next().unwrap().to_owned();
    // Every new session of this database is read-only, as on a standby.
    // One session, begun before that, undoes it: a pool could open its
    // next connection after the ALTER, read-only, and fail the RESET.
    let mut admin = sqlx::PgConnection::connect(&direct).await.unwrap();
    sqlx::raw_sql(&format!(
        "ALTER DATABASE \"{database}\" SET default_transaction_read_only = on"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let url = with_host_before(&direct, "localhost:5432");
    let url = format!("{url}?target_session_attrs=read-write");
    let err = PgStore::connect(&url)
        .await
        .expect_err("no host takes writes");
    assert!(err.to_string().contains("read-only"), "{err}");
    sqlx::raw_sql(&format!(
        "ALTER DATABASE \"{database}\" RESET default_transaction_read_only"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    PgStore::connect(&url)
        .await
        .expect("a writable host is found");
    admin.close().await.unwrap();
    db.cleanup().await;
}

/// A pooled connection idle for a second or more is pinged before use
/// (`failover::pool_options`), so connections the server ended while the
/// pool was quiet (a restart, an administrator) are replaced, not handed to
/// a statement that would fail. (Busy connections are not pinged: a
/// statement on one that died fails as `unavailable`, and callers retry.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_ended_while_idle_are_replaced_before_use() {
    let db = tether_conformance::postgres().await;
    let url = db.postgres_url().unwrap();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let store = PgStore::connect(&url).await.expect("connects");
    let jobs = [NewJob::new("q", "k", serde_json::json!({}))];
    let tenant = tether_core::DEFAULT_TENANT;
    store
        .enqueue(tenant, &NewJobRef::mint(&jobs), 10)
        .await
        .expect("writes");

    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid()) t",
    )
    .bind(&database)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(ended > 0, "the store's connections were ended");
    // Longer than the ping's threshold; a slower host only makes it longer.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;

    store
        .enqueue(tenant, &NewJobRef::mint(&jobs), 10)
        .await
        .expect("the dead connection was replaced before the statement");
    admin.close().await;
    drop(store);
    db.cleanup().await;
}
