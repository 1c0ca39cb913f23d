//! The SQL statements, one file per module of the store (`sql::attempts`
//! holds what `attempts.rs` runs), and the fragments they share.
//!
//! A transition is one statement: a chain of CTEs that changes the job and
//! writes its history row, so it is atomic without a transaction and costs
//! one round trip. Parameters are `$1`, `$2`, ...; the statements live in
//! the `tether` schema.

/// The maintenance fence (see `tether_core::MaintenanceFence`): true when
/// the statement runs unfenced (`$tok` NULL) or the lease `$name` still
/// carries the token `$tok` and has not expired as the statement runs
/// (`clock_timestamp()`: a statement that reaches the server after the
/// lease lapsed, however long ago it was sent, changes nothing).
macro_rules! maintenance_fence {
    ($name:literal, $tok:literal) => {
        concat!(
            "(",
            $tok,
            "::uuid IS NULL OR EXISTS (SELECT 1 FROM tether.leases fence WHERE fence.name = ",
            $name,
            " AND fence.token = ",
            $tok,
            " AND fence.expires_at > clock_timestamp()))"
        )
    };
}

/// The job columns every query returns, in this order.
macro_rules! job_columns {
    () => {
        "j.id, j.tenant, j.queue, j.kind, j.payload, j.result, j.state, j.priority, j.attempt, \
         j.max_attempts, j.backoff_base_ms, j.backoff_cap_ms, j.run_at, j.created_at, j.started_at, \
         j.finished_at, j.updated_at, j.last_error, j.unique_key, j.idempotency_key, j.tags, \
         j.expires_at, j.timeout_ms, j.cancel_requested, j.worker_id, j.lease_expires_at, \
         j.heartbeat_at, j.progress, j.concurrency_key, j.depends_on, j.dependency_failure, \
         j.workflow_id, j.headers"
    };
}

/// The schedule columns every schedule query returns, in this order.
macro_rules! schedule_columns {
    () => {
        "s.id, s.tenant, s.name, s.cron, s.timezone, s.queue, s.kind, s.payload, s.enabled, \
         s.overlap, s.next_run_at, s.last_run_at, s.last_job_id, s.created_at, s.updated_at"
    };
}

/// Whether queue `q.name` of tenant `q.tenant` holds a job in any state.
/// Each state is asked on its own, as a literal, so that each branch reads
/// that state's partial index (no index covers every state; see migration
/// 5).
macro_rules! queue_holds_jobs {
    () => {
        "(EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = q.tenant AND j.queue = q.name AND j.state = 'queued')
          OR EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = q.tenant AND j.queue = q.name AND j.state = 'waiting')
          OR EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = q.tenant AND j.queue = q.name AND j.state = 'running')
          OR EXISTS (SELECT 1 FROM tether.jobs j WHERE j.tenant = q.tenant AND j.queue = q.name
                     AND j.state IN ('succeeded', 'failed', 'cancelled')))"
    };
}

/// Takes a per-tenant advisory lock until the transaction ends: `$1` the
/// lock's first key (what it guards), `$2` the tenant (hashed).
pub(crate) const LOCK_TENANT: &str = "SELECT pg_advisory_xact_lock($1, hashtext($2))";

/// [`LOCK_TENANT`] if it is free now; whether it was taken.
pub(crate) const TRY_LOCK_TENANT: &str = "SELECT pg_try_advisory_xact_lock($1, hashtext($2))";

pub(crate) mod attempts;
pub(crate) mod enqueue;
pub(crate) mod feed;
pub(crate) mod jobs;
pub(crate) mod maintenance;
#[cfg(test)]
mod plans;
pub(crate) mod queues;
pub(crate) mod schedules;
pub(crate) mod tenants;
pub(crate) mod workflows;
