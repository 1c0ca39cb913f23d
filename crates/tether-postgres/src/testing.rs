//! Clock controls for the behaviour suite (cargo feature `testing`).

use sqlx::PgPool;
use tether_core::Result;
use uuid::Uuid;

use crate::rows::Db;
use crate::PgStore;

/// Clock controls: they move a job or lease forward in time instead of
/// making the test wait. Not for production use.
impl PgStore {
    /// Testing aid: moves a running job's lease expiry into the past, as if
    /// its TTL had passed without a heartbeat.
    pub async fn lapse_lease(&self, id: Uuid) -> Result<()> {
        sqlx::query(
            "UPDATE tether.jobs SET lease_expires_at = now() - interval '1 millisecond'
             WHERE id = $1 AND state = 'running'",
        )
        .bind(id)
        .execute(&self.db)
        .await
        .db()?;
        Ok(())
    }

    /// Testing aid: lets a named lease lapse, as if its holder had died.
    pub async fn lapse_named_lease(&self, name: &str) -> Result<()> {
        sqlx::query(
            "UPDATE tether.leases SET expires_at = now() - interval '1 millisecond' WHERE name = $1",
        )
        .bind(name)
        .execute(&self.db)
        .await
        .db()?;
        Ok(())
    }

    /// Testing aid: moves an announced worker's `last_seen_at` `ms` into
    /// the past, as if it had not been seen since.
    pub async fn age_worker(&self, tenant: &str, worker_id: &str, ms: i64) -> Result<()> {
        sqlx::query(
            "UPDATE tether.workers SET last_seen_at = last_seen_at - $3 * interval '1 millisecond'
             WHERE tenant = $1 AND worker_id = $2",
        )
        .bind(tenant)
        .bind(worker_id)
        .bind(ms)
        .execute(&self.db)
        .await
        .db()?;
        Ok(())
    }

    /// Testing aid: makes a queued job due now, as if its delay had passed.
    pub async fn make_due(&self, id: Uuid) -> Result<()> {
        sqlx::query("UPDATE tether.jobs SET run_at = now() WHERE id = $1 AND state = 'queued'")
            .bind(id)
            .execute(&self.db)
            .await
            .db()?;
        Ok(())
    }
}

/// Testing aid: applies tether's migrations up to `version` only, leaving
/// the database as an older tether would have, so that upgrade tests can
/// seed it with old rows before [`PgStore::connect`] applies the rest.
pub async fn migrate_up_to(pool: &PgPool, version: i64) -> Result<()> {
    crate::migrate::run_up_to(&crate::exec::Pool::new(pool.clone(), false), version).await
}

/// Testing aid: like [`migrate_up_to`], but as a tether from before
/// migration checksums did it (no `checksum` column), for the tests of
/// the upgrade that records them.
pub async fn migrate_up_to_without_checksums(pool: &PgPool, version: i64) -> Result<()> {
    crate::migrate::run_up_to_without_checksums(
        &crate::exec::Pool::new(pool.clone(), false),
        version,
    )
    .await
}
