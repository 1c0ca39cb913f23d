//! Schedules (invariant 11): the timetables and their runs.
//!
//! Definitions are read and written by one statement each. A fire is one
//! transaction: a compare-and-set on `next_run_at` (which also takes the
//! schedule's row lock, so concurrent fires of the same instant queue up
//! behind the winner and then find the timetable moved), then the enqueue
//! with the fire's idempotency key and the run's record. A trigger locks the
//! row first, so it and a fire of the same schedule never interleave.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::schedule::{Fire, FireOutcome};
use tether_core::{
    Enqueued, Error, Job, NewJobRef, Overlap, Result, RunOutcome, Schedule, ScheduleRun,
    ScheduleSpec,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::rows::{self, Db};
use crate::sql::schedules::{
    ADVANCE_SCHEDULE, COUNT_SCHEDULES, CREATE_SCHEDULE, DELETE_SCHEDULE, DUE_SCHEDULES,
    LIST_SCHEDULES, LOCK_SCHEDULE, NAME_CONSTRAINT, NEXT_SCHEDULE_DUE, PRUNE_SCHEDULE_RUNS,
    RECORD_ENQUEUED, SCHEDULE_RUNS, SELECT_SCHEDULE, UPDATE_SCHEDULE,
};
use crate::sql::LOCK_TENANT;
use crate::PgStore;

/// First key of the per-tenant advisory lock (second key: the hash of the
/// tenant's name) under which a schedule is counted and created.
const SCHEDULE_CREATE_LOCK: i32 = 0x7465_7403;

/// Retention beyond which nothing can have been recorded (1,000 years):
/// longer ones are clamped to it, since `now()` minus them is outside the
/// range of an interval or a timestamp.
const MAX_RETENTION_MS: i64 = 1_000 * 365 * 24 * 3_600 * 1_000;

pub(crate) async fn create_schedule(
    store: &PgStore,
    tenant: &str,
    spec: &ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
    max_schedules: u32,
) -> Result<Schedule> {
    // The count and the insert under the tenant's advisory lock, so
    // that concurrent creations cannot pass the limit together.
    let mut tx = store.begin().await?;
    sqlx::query(LOCK_TENANT)
        .bind(SCHEDULE_CREATE_LOCK)
        .bind(tenant)
        .execute(&mut *tx)
        .await
        .db()?;
    let n: i64 = sqlx::query_scalar(COUNT_SCHEDULES)
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .db()?;
    if n >= i64::from(max_schedules) {
        return Err(Error::too_many_schedules(max_schedules));
    }
    let schedule = sqlx::query(CREATE_SCHEDULE)
        .bind(Uuid::now_v7())
        .bind(tenant)
        .bind(&spec.name)
        .bind(&spec.cron)
        .bind(&spec.timezone)
        .bind(&spec.queue)
        .bind(&spec.kind)
        .bind(&spec.payload)
        .bind(spec.enabled)
        .bind(spec.overlap.as_str())
        .bind(next_run_at)
        .try_map(|row| rows::schedule(&row))
        .fetch_optional(&mut *tx)
        .await
        .db()?
        .ok_or_else(|| Error::schedule_name_taken(&spec.name))?;
    tx.commit().await.db()?;
    Ok(schedule)
}

pub(crate) async fn get_schedule(store: &PgStore, tenant: &str, id: Uuid) -> Result<Schedule> {
    sqlx::query(SELECT_SCHEDULE)
        .bind(id)
        .bind(tenant)
        .try_map(|row| rows::schedule(&row))
        .fetch_optional(&store.pool)
        .await
        .db()?
        .ok_or_else(|| Error::schedule_not_found(id))
}

pub(crate) async fn list_schedules(store: &PgStore, tenant: &str) -> Result<Vec<Schedule>> {
    sqlx::query(LIST_SCHEDULES)
        .bind(tenant)
        .try_map(|row| rows::schedule(&row))
        .fetch_all(&store.pool)
        .await
        .db()
}

pub(crate) async fn update_schedule(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    spec: &ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
) -> Result<Schedule> {
    sqlx::query(UPDATE_SCHEDULE)
        .bind(id)
        .bind(tenant)
        .bind(&spec.name)
        .bind(&spec.cron)
        .bind(&spec.timezone)
        .bind(&spec.queue)
        .bind(&spec.kind)
        .bind(&spec.payload)
        .bind(spec.enabled)
        .bind(spec.overlap.as_str())
        .bind(next_run_at)
        .try_map(|row| rows::schedule(&row))
        .fetch_optional(&store.pool)
        .await
        .map_err(|e| {
            if is_name_taken(&e) {
                Error::schedule_name_taken(&spec.name)
            } else {
                rows::db_err(e)
            }
        })?
        .ok_or_else(|| Error::schedule_not_found(id))
}

pub(crate) async fn delete_schedule(store: &PgStore, tenant: &str, id: Uuid) -> Result<()> {
    let done = sqlx::query(DELETE_SCHEDULE)
        .bind(id)
        .bind(tenant)
        .execute(&store.pool)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        return Err(Error::schedule_not_found(id));
    }
    Ok(())
}

pub(crate) async fn schedule_runs(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    limit: u32,
) -> Result<Vec<ScheduleRun>> {
    let runs = sqlx::query(SCHEDULE_RUNS)
        .bind(id)
        .bind(tenant)
        .bind(i64::from(limit))
        .try_map(|row| rows::schedule_run(&row))
        .fetch_all(&store.pool)
        .await
        .db()?;
    if runs.is_empty() {
        return Err(Error::schedule_not_found(id));
    }
    Ok(runs.into_iter().flatten().collect())
}

pub(crate) async fn due_schedules(
    store: &PgStore,
    limit: u32,
) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
    let rows = sqlx::query(DUE_SCHEDULES)
        .bind(i64::from(limit))
        .try_map(|row: PgRow| Ok((row.try_get("db_now")?, rows::optional_schedule(&row)?)))
        .fetch_all(&store.pool)
        .await
        .db()?;
    let now = rows
        .first()
        .map(|(now, _)| *now)
        .ok_or_else(|| rows::corrupt("the due-schedule scan returned no row"))?;
    Ok((now, rows.into_iter().filter_map(|(_, s)| s).collect()))
}

pub(crate) async fn next_schedule_due(
    store: &PgStore,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    sqlx::query(NEXT_SCHEDULE_DUE)
        .try_map(|row: PgRow| Ok((row.try_get("db_now")?, row.try_get("next_run_at")?)))
        .fetch_one(&store.pool)
        .await
        .db()
}

pub(crate) async fn fire_schedule(
    store: &PgStore,
    fire: &Fire,
    job_id: Uuid,
) -> Result<FireOutcome> {
    let mut tx = store.begin().await?;
    let skipped: Option<bool> = sqlx::query_scalar(ADVANCE_SCHEDULE)
        .bind(fire.schedule_id)
        .bind(&fire.tenant)
        .bind(fire.expected_next_run_at)
        .bind(fire.next_run_at)
        .bind(fire.fire_at)
        .bind(fire.overlap == Overlap::Skip)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    match skipped {
        None => {
            tx.rollback().await.db()?;
            return Ok(FireOutcome::Raced);
        }
        Some(true) => {
            tx.commit().await.db()?;
            return Ok(FireOutcome::Ran(RunOutcome::Skipped, None));
        }
        Some(false) => {}
    }
    // An existing job with the fire's idempotency key (an earlier
    // attempt at this very fire) comes back instead of a second one.
    let job = NewJobRef {
        id: job_id,
        job: &fire.job,
    };
    let enqueued = enqueue_run(&mut tx, &fire.tenant, job).await?;
    record_enqueued(
        &mut tx,
        fire.schedule_id,
        &fire.tenant,
        enqueued.job.id,
        Some(fire.fire_at),
    )
    .await?;
    tx.commit().await.db()?;
    store.notify_created(&fire.tenant, std::slice::from_ref(&enqueued));
    Ok(FireOutcome::Ran(
        RunOutcome::Enqueued,
        Some(enqueued.job.id),
    ))
}

pub(crate) async fn trigger_schedule(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    job: NewJobRef<'_>,
) -> Result<Job> {
    let mut tx = store.begin().await?;
    let locked: Option<Uuid> = sqlx::query_scalar(LOCK_SCHEDULE)
        .bind(id)
        .bind(tenant)
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    if locked.is_none() {
        tx.rollback().await.db()?;
        return Err(Error::schedule_not_found(id));
    }
    let enqueued = enqueue_run(&mut tx, tenant, job).await?;
    record_enqueued(&mut tx, id, tenant, enqueued.job.id, None).await?;
    tx.commit().await.db()?;
    store.notify_created(tenant, std::slice::from_ref(&enqueued));
    Ok(enqueued.job)
}

pub(crate) async fn prune_schedule_runs(
    store: &PgStore,
    retention_ms: i64,
    batch: u32,
) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(PRUNE_SCHEDULE_RUNS)
        .bind(retention_ms.clamp(0, MAX_RETENTION_MS))
        .bind(i64::from(batch))
        .fetch_one(&store.pool)
        .await
        .db()?;
    Ok(n as u64)
}

/// Enqueues a schedule's job inside the fire's or trigger's transaction.
async fn enqueue_run(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    job: NewJobRef<'_>,
) -> Result<Enqueued> {
    // A schedule's run is not refused for the queue limit: the schedule
    // limit bounds the queues schedules can make.
    enqueue_on(conn, tenant, &[job], None)
        .await?
        .pop()
        .ok_or_else(|| rows::corrupt("an enqueue of one job gave no answer"))
}

/// Records an `enqueued` run of `job_id` stamped `fire_at` (`None`: the
/// transaction's `now()`) on a schedule the transaction has locked.
async fn record_enqueued(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    tenant: &str,
    job_id: Uuid,
    fire_at: Option<DateTime<Utc>>,
) -> Result<()> {
    let done = sqlx::query(RECORD_ENQUEUED)
        .bind(id)
        .bind(tenant)
        .bind(job_id)
        .bind(fire_at)
        .execute(conn)
        .await
        .db()?;
    if done.rows_affected() != 1 {
        // Cannot happen while the row is locked; refuse rather than
        // commit a job without its run.
        return Err(Error::schedule_not_found(id));
    }
    Ok(())
}

/// Whether a driver error is the unique violation of `NAME_CONSTRAINT`.
fn is_name_taken(err: &sqlx::Error) -> bool {
    rows::is_unique_violation(err)
        && matches!(err, sqlx::Error::Database(db) if db.constraint() == Some(NAME_CONSTRAINT))
}
