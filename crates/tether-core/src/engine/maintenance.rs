//! The maintenance passes (reaper, expiry, pruning) and their named
//! leases.

use super::*;

impl Engine {
    /// Runs the maintenance passes under the named lease `lease` (name,
    /// token) from now on, or (`None`) unfenced: see
    /// [`Store::fence_maintenance`].
    pub fn fence_maintenance(&self, lease: Option<(&str, LeaseToken)>) {
        self.store.fence_maintenance(lease)
    }

    /// One reaper pass (the maintenance leader runs this).
    pub async fn reap_lapsed_leases(&self, batch: u32) -> Result<ReapReport> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let report = self.store.reap_lapsed_leases(batch).await?;
        counters::reaped(&report);
        Ok(report)
    }

    /// One expiry pass.
    pub async fn expire_jobs(&self, batch: u32) -> Result<u64> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let n = self.store.expire_jobs(batch).await?;
        counters::expired(n);
        Ok(n)
    }

    /// One pass that deletes queue rows holding nothing (no job, no
    /// settings): at most `batch` of them, all tenants.
    pub async fn prune_empty_queues(&self, batch: u32) -> Result<u64> {
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        self.store.prune_empty_queues(batch).await
    }

    /// One pruning pass.
    pub async fn prune_finished(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        validate::millis("retention_ms", retention_ms, 0..=i64::MAX)?;
        validate::batch_len("batch", batch as usize, validate::MAX_REPLAY as usize)?;
        let n = self.store.prune_finished(retention_ms, batch).await?;
        counters::pruned(n);
        Ok(n)
    }

    /// Tries to take a named lease (e.g. [`lifecycle::MAINTENANCE_LEASE`]).
    pub async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: i64,
    ) -> Result<Option<Lease>> {
        validate::name("lease", name)?;
        validate::worker_id("holder", holder)?;
        validate::millis("ttl_ms", ttl_ms, validate::LEASE_TTL_RANGE)?;
        self.store.acquire_lease(name, holder, ttl_ms).await
    }

    /// Extends a held lease.
    pub async fn renew_lease(&self, name: &str, token: LeaseToken, ttl_ms: i64) -> Result<Lease> {
        validate::name("lease", name)?;
        validate::millis("ttl_ms", ttl_ms, validate::LEASE_TTL_RANGE)?;
        self.store.renew_lease(name, token, ttl_ms).await
    }

    /// Gives a lease up.
    pub async fn release_lease(&self, name: &str, token: LeaseToken) -> Result<()> {
        validate::name("lease", name)?;
        self.store.release_lease(name, token).await
    }
}
