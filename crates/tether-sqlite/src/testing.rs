//! Clock controls for the behaviour suite (cargo feature `testing`).

use tether_core::Result;

use crate::rows::{self, Db};
use crate::SqliteStore;

/// Clock controls: they move a job or lease forward in time instead of
/// making the test wait. Not for production use.
impl SqliteStore {
    /// Makes a running job's lease lapse now (`lease_expires_at = now − 1 ms`),
    /// as if its TTL had passed without a heartbeat.
    pub async fn lapse_lease(&self, id: uuid::Uuid) -> Result<()> {
        self.testing_update(
            concat!(
                "UPDATE tether_jobs SET lease_expires_at = ",
                now_ms!(),
                " - 1 WHERE id = ?1 AND state = 'running'"
            ),
            id,
        )
        .await
    }

    /// Makes a named lease lapse now (`expires_at = now − 1 ms`).
    pub async fn lapse_named_lease(&self, name: &str) -> Result<()> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(concat!(
            "UPDATE tether_leases SET expires_at = ",
            now_ms!(),
            " - 1 WHERE name = ?1"
        ))
        .bind(name)
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        if done.rows_affected() == 0 {
            return Err(tether_core::Error::invalid(
                "name",
                format!("no lease named {name:?} is held"),
            ));
        }
        Ok(())
    }

    /// Moves an announced worker's `last_seen_at` `ms` into the past, as if
    /// it had not been seen since.
    pub async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) -> Result<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE tether_workers SET last_seen_at = last_seen_at - ?3 \
             WHERE tenant = ?1 AND worker_id = ?2",
        )
        .bind(tenant)
        .bind(worker_id)
        .bind(ms)
        .execute(&mut *tx)
        .await
        .db()?;
        tx.commit().await.db()?;
        Ok(())
    }

    /// Makes a queued job due now (`run_at = now`), as if its delay had passed.
    pub async fn make_due(&self, id: uuid::Uuid) -> Result<()> {
        self.testing_update(
            concat!(
                "UPDATE tether_jobs SET run_at = ",
                now_ms!(),
                " WHERE id = ?1 AND state = 'queued'"
            ),
            id,
        )
        .await
    }

    /// Runs a one-job clock update; `JobNotFound` if no such job exists,
    /// `InvalidState` if it exists in a state the update does not apply to.
    async fn testing_update(&self, sql: &'static str, id: uuid::Uuid) -> Result<()> {
        let mut tx = self.begin().await?;
        let done = sqlx::query(sql)
            .bind(id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        if done.rows_affected() == 0 {
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM tether_jobs WHERE id = ?1")
                    .bind(id.to_string())
                    .fetch_optional(&mut *tx)
                    .await
                    .db()?;
            return Err(match state {
                None => tether_core::Error::JobNotFound(id),
                Some(state) => tether_core::Error::InvalidState {
                    id,
                    state: state.parse().map_err(rows::corrupt)?,
                    message: "the job is not in the state this clock control applies to".into(),
                },
            });
        }
        tx.commit().await.db()?;
        Ok(())
    }
}

/// Testing aid: creates the file at `path` (if missing) and applies tether's
/// migrations up to `version` only, leaving it as an older tether would
/// have, so that upgrade tests can seed it with old rows before
/// [`SqliteStore::open`] applies the rest.
pub async fn migrate_up_to(path: impl AsRef<std::path::Path>, version: i64) -> Result<()> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path.as_ref())
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(rows::db_err)?;
    let done = crate::migrate::run_up_to(&pool, version).await;
    pool.close().await;
    done
}

/// Testing aid: like [`migrate_up_to`], but as a tether from before
/// migration checksums did it (no `checksum` column), for the tests of
/// the upgrade that records them.
pub async fn migrate_up_to_without_checksums(
    path: impl AsRef<std::path::Path>,
    version: i64,
) -> Result<()> {
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path.as_ref())
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .map_err(rows::db_err)?;
    let done = crate::migrate::run_up_to_without_checksums(&pool, version).await;
    pool.close().await;
    done
}
