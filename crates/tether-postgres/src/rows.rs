//! Decoding rows into the model.

use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::{Backoff, Job, JobState, Overlap, Schedule, ScheduleSpec};

/// The job columns every query returns, in this order.
macro_rules! job_columns {
    () => {
        "j.id, j.tenant, j.queue, j.kind, j.payload, j.result, j.state, j.priority, j.attempt, \
         j.max_attempts, j.backoff_base_ms, j.backoff_cap_ms, j.run_at, j.created_at, j.started_at, \
         j.finished_at, j.updated_at, j.last_error, j.unique_key, j.idempotency_key, j.tags, \
         j.expires_at, j.timeout_ms, j.cancel_requested, j.worker_id, j.lease_expires_at, \
         j.heartbeat_at, j.progress"
    };
}
pub(crate) use job_columns;

/// Decodes a row that carries [`job_columns!`].
pub(crate) fn job(row: &PgRow) -> Result<Job, sqlx::Error> {
    let state: String = row.try_get("state")?;
    Ok(Job {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        queue: row.try_get("queue")?,
        kind: row.try_get("kind")?,
        payload: row.try_get("payload")?,
        result: row.try_get("result")?,
        state: state
            .parse::<JobState>()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        priority: row.try_get("priority")?,
        attempt: row.try_get("attempt")?,
        max_attempts: row.try_get("max_attempts")?,
        backoff: Backoff {
            base_ms: row.try_get("backoff_base_ms")?,
            cap_ms: row.try_get("backoff_cap_ms")?,
        },
        run_at: row.try_get("run_at")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        updated_at: row.try_get("updated_at")?,
        last_error: row.try_get("last_error")?,
        unique_key: row.try_get("unique_key")?,
        idempotency_key: row.try_get("idempotency_key")?,
        tags: row.try_get("tags")?,
        expires_at: row.try_get("expires_at")?,
        timeout_ms: row.try_get("timeout_ms")?,
        cancel_requested: row.try_get("cancel_requested")?,
        worker_id: row.try_get("worker_id")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        heartbeat_at: row.try_get("heartbeat_at")?,
        progress: row.try_get("progress")?,
    })
}

/// The schedule columns every schedule query returns, in this order.
macro_rules! schedule_columns {
    () => {
        "s.id, s.tenant, s.name, s.cron, s.timezone, s.queue, s.kind, s.payload, s.enabled, \
         s.overlap, s.next_run_at, s.last_run_at, s.last_job_id, s.created_at, s.updated_at"
    };
}
pub(crate) use schedule_columns;

/// Decodes a row that carries [`schedule_columns!`].
pub(crate) fn schedule(row: &PgRow) -> Result<Schedule, sqlx::Error> {
    let overlap: String = row.try_get("overlap")?;
    Ok(Schedule {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        spec: ScheduleSpec {
            name: row.try_get("name")?,
            cron: row.try_get("cron")?,
            timezone: row.try_get("timezone")?,
            queue: row.try_get("queue")?,
            kind: row.try_get("kind")?,
            payload: row.try_get("payload")?,
            enabled: row.try_get("enabled")?,
            overlap: Overlap::parse(&overlap).ok_or_else(|| {
                sqlx::Error::Decode(format!("unknown schedule overlap {overlap:?}").into())
            })?,
        },
        next_run_at: row.try_get("next_run_at")?,
        last_run_at: row.try_get("last_run_at")?,
        last_job_id: row.try_get("last_job_id")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}
