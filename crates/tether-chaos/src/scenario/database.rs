//! The run's own database: created, opened, and dropped afterwards (with
//! those of earlier runs whose process is gone).

use super::*;

/// The run's own connections to its database: a pool on the URL, or with
/// `--failover` the pool of a tether store opened on the multi-host URL,
/// which follows the primary (the store is kept with it: dropping it would
/// stop that).
pub(super) struct RunDb {
    pub(super) pool: PgPool,
    _store: Option<tether_postgres::PgStore>,
}

impl RunDb {
    /// Connects to the run's database (see [`RunDb`]).
    pub(super) async fn open(url: &str, failover: bool) -> Result<RunDb, String> {
        if failover {
            let options = tether_postgres::PgOptions {
                max_connections: 4,
                ..Default::default()
            };
            let store = connect_store(url.to_owned(), options).await?;
            return Ok(RunDb {
                pool: store.pool().clone(),
                _store: Some(store),
            });
        }
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        Ok(RunDb { pool, _store: None })
    }
}

/// Opens a store on a blocking thread. (rustc cannot prove the future of
/// `PgStore::connect_with` `Send` for every lifetime, so it cannot be
/// awaited inside the spawned run; `block_on` needs no `Send`.)
pub(super) async fn connect_store(
    url: String,
    options: tether_postgres::PgOptions,
) -> Result<tether_postgres::PgStore, String> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        runtime
            .block_on(tether_postgres::PgStore::connect_with(&url, &options))
            .map_err(|e| format!("cannot connect to {url}: {e}"))
    })
    .await
    .map_err(|e| format!("connecting panicked: {e}"))?
}

pub(super) async fn connect(url: &str) -> Result<sqlx::PgConnection, sqlx::Error> {
    let mut last = None;
    for _ in 0..10 {
        match sqlx::PgConnection::connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(last.expect("tried"))
}

/// Drops the databases of earlier runs whose process is gone.
pub(super) async fn drop_stale_databases(admin: &mut sqlx::PgConnection) {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database WHERE datname LIKE 'tether\\_chaos\\_%'",
    )
    .fetch_all(&mut *admin)
    .await
    .unwrap_or_default();
    for name in names {
        let pid = name.trim_start_matches("tether_chaos_").parse::<u32>();
        if pid.is_ok_and(|pid| !procs::alive(pid)) {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .execute(&mut *admin)
                .await;
        }
    }
}

/// Drops the run's database, trying for a while (PostgreSQL may be
/// restarting when a run is interrupted).
pub(super) async fn drop_database(admin_url: &str, database: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = async {
            let mut c = sqlx::PgConnection::connect(admin_url).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
                .execute(&mut c)
                .await?;
            let _ = c.close().await;
            Ok::<_, sqlx::Error>(())
        };
        match attempt.await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(format!("could not drop the database {database}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}
