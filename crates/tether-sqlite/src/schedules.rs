//! Schedules (invariant 11): the timetables and their runs.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction. A fire is a
//! compare-and-set on `next_run_at` under the write lock (so of two nodes,
//! or two processes on the file, that read the same `next_run_at`, the
//! second finds it moved), then the enqueue with the fire's idempotency key
//! and the run's record, in the same transaction.

use chrono::{DateTime, Utc};
use sqlx::{Row, Sqlite, SqliteConnection};
use tether_core::schedule::{Fire, FireOutcome};
use tether_core::{
    Enqueued, Error, Job, NewJobRef, Overlap, Result, RunOutcome, Schedule, ScheduleRun,
    ScheduleSpec,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::rows::{self, is_unique_violation, to_json_text, Db};
use crate::sql::schedules::{
    ADVANCE_SCHEDULE, COUNT_SCHEDULES, CREATE_SCHEDULE, DB_NOW, DELETE_SCHEDULE,
    DELETE_SCHEDULE_RUNS, DUE_SCHEDULES, INSERT_SCHEDULE_RUN, JOB_ACTIVE, LIST_SCHEDULES,
    NEXT_SCHEDULE_DUE, PRUNE_SCHEDULE_RUNS, SCHEDULE_RUNS, SELECT_SCHEDULE, SET_LAST_JOB,
    TRIGGER_SCHEDULE, UPDATE_SCHEDULE,
};
use crate::{SqliteStore, Tx};

pub(crate) async fn create_schedule(
    store: &SqliteStore,
    tenant: &str,
    spec: &ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
    max_schedules: u32,
) -> Result<Schedule> {
    let query = sqlx::query(CREATE_SCHEDULE)
        .bind(tenant)
        .bind(Uuid::now_v7().to_string());
    let query = bind_spec(query, spec, next_run_at)?;
    let mut tx = store.begin().await?;
    // Counted under the write lock: concurrent creations cannot pass
    // the limit together.
    let n: i64 = sqlx::query_scalar(COUNT_SCHEDULES)
        .bind(tenant)
        .fetch_one(&mut *tx)
        .await
        .db()?;
    if n >= i64::from(max_schedules) {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::too_many_schedules(max_schedules));
    }
    let row = query.fetch_optional(&mut *tx).await.db()?;
    let Some(row) = row else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::schedule_name_taken(&spec.name));
    };
    let schedule = rows::schedule(&row)?;
    tx.commit().await.db()?;
    Ok(schedule)
}

pub(crate) async fn get_schedule(store: &SqliteStore, tenant: &str, id: Uuid) -> Result<Schedule> {
    let mut conn = store.reader.acquire().await.db()?;
    let row = sqlx::query(SELECT_SCHEDULE)
        .bind(tenant)
        .bind(id.to_string())
        .fetch_optional(&mut *conn)
        .await
        .db()?;
    row.as_ref()
        .map(rows::schedule)
        .transpose()?
        .ok_or_else(|| Error::schedule_not_found(id))
}

pub(crate) async fn list_schedules(store: &SqliteStore, tenant: &str) -> Result<Vec<Schedule>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(LIST_SCHEDULES)
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    found.iter().map(rows::schedule).collect()
}

pub(crate) async fn update_schedule(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    spec: &ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
) -> Result<Schedule> {
    let query = sqlx::query(UPDATE_SCHEDULE)
        .bind(tenant)
        .bind(id.to_string());
    let query = bind_spec(query, spec, next_run_at)?;
    let mut tx = store.begin().await?;
    let row = query.fetch_optional(&mut *tx).await.map_err(|e| {
        // The id does not change, so the only UNIQUE rule an update
        // can break is the (tenant, name) one.
        if is_unique_violation(&e) {
            Error::schedule_name_taken(&spec.name)
        } else {
            rows::db_err(e)
        }
    })?;
    let Some(row) = row else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::schedule_not_found(id));
    };
    let schedule = rows::schedule(&row)?;
    tx.commit().await.db()?;
    Ok(schedule)
}

pub(crate) async fn delete_schedule(store: &SqliteStore, tenant: &str, id: Uuid) -> Result<()> {
    let mut tx = store.begin().await?;
    let done = sqlx::query(DELETE_SCHEDULE)
        .bind(tenant)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::schedule_not_found(id));
    }
    sqlx::query(DELETE_SCHEDULE_RUNS)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    tx.commit().await.db()?;
    Ok(())
}

pub(crate) async fn schedule_runs(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    limit: u32,
) -> Result<Vec<ScheduleRun>> {
    let mut conn = store.reader.acquire().await.db()?;
    // At least one row, so that a schedule is told from no schedule even
    // when no runs are asked for.
    let found = sqlx::query(SCHEDULE_RUNS)
        .bind(tenant)
        .bind(id.to_string())
        .bind(i64::from(limit.max(1)))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    if found.is_empty() {
        return Err(Error::schedule_not_found(id));
    }
    let mut runs = Vec::with_capacity(found.len());
    for row in found.iter().take(limit as usize) {
        let run_id: Option<i64> = row.try_get("run_id").db()?;
        if run_id.is_some() {
            runs.push(rows::schedule_run(row)?);
        }
    }
    Ok(runs)
}

pub(crate) async fn due_schedules(
    store: &SqliteStore,
    limit: u32,
) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
    let mut conn = store.reader.acquire().await.db()?;
    let now: i64 = sqlx::query_scalar(DB_NOW)
        .fetch_one(&mut *conn)
        .await
        .db()?;
    let found = sqlx::query(DUE_SCHEDULES)
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let due = found.iter().map(rows::schedule).collect::<Result<_>>()?;
    Ok((rows::ts(now)?, due))
}

pub(crate) async fn next_schedule_due(
    store: &SqliteStore,
) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    let mut conn = store.reader.acquire().await.db()?;
    let row = sqlx::query(NEXT_SCHEDULE_DUE)
        .fetch_one(&mut *conn)
        .await
        .db()?;
    Ok((
        rows::ts(row.try_get("now").db()?)?,
        rows::opt_ts(row.try_get("next").db()?)?,
    ))
}

pub(crate) async fn fire_schedule(
    store: &SqliteStore,
    fire: &Fire,
    job_id: Uuid,
) -> Result<FireOutcome> {
    let tenant = fire.tenant.as_str();
    let fire_at = fire.fire_at.timestamp_millis();
    let mut tx = store.begin().await?;
    // 1. The compare-and-set: under the write lock, so of two nodes (or
    // two processes on the file) that read the same `next_run_at`, the
    // second finds it moved.
    let moved = sqlx::query(ADVANCE_SCHEDULE)
        .bind(tenant)
        .bind(fire.schedule_id.to_string())
        .bind(fire.expected_next_run_at.timestamp_millis())
        .bind(fire_at)
        .bind(fire.next_run_at.map(|at| at.timestamp_millis()))
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(moved) = moved else {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(FireOutcome::Raced);
    };
    let last_job: Option<&str> = moved.try_get("last_job_id").db()?;
    let last_job = last_job.map(rows::uuid).transpose()?;

    // 2. Overlap `skip`: nothing to enqueue while the last run's job is
    // unfinished (a job pruned since counts as finished).
    if fire.overlap == Overlap::Skip {
        if let Some(last_job) = last_job {
            let active: bool = sqlx::query_scalar(JOB_ACTIVE)
                .bind(tenant)
                .bind(last_job.to_string())
                .fetch_one(&mut *tx)
                .await
                .db()?;
            if active {
                record_run(
                    &mut tx,
                    fire.schedule_id,
                    tenant,
                    fire_at,
                    None,
                    RunOutcome::Skipped,
                )
                .await?;
                tx.commit().await.db()?;
                return Ok(FireOutcome::Ran(RunOutcome::Skipped, None));
            }
        }
    }

    // 3. The job, by its fire key: if it exists already, it is this
    // run's job and nothing new is made.
    let job = NewJobRef {
        id: job_id,
        job: &fire.job,
    };
    let answer = enqueue_run(&mut tx, tenant, job).await?;
    record_enqueued(&mut tx, fire.schedule_id, tenant, answer.job.id, fire_at).await?;
    tx.commit().await.db()?;
    let job_id = answer.job.id;
    store.notify_created(tenant, std::slice::from_ref(&answer));
    Ok(FireOutcome::Ran(RunOutcome::Enqueued, Some(job_id)))
}

pub(crate) async fn trigger_schedule(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    job: NewJobRef<'_>,
) -> Result<Job> {
    let mut tx = store.begin().await?;
    let stamped: Option<i64> = sqlx::query_scalar(TRIGGER_SCHEDULE)
        .bind(tenant)
        .bind(id.to_string())
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(fire_at) = stamped else {
        SqliteStore::finish_unchanged(tx).await?;
        return Err(Error::schedule_not_found(id));
    };
    let answer = enqueue_run(&mut tx, tenant, job).await?;
    record_enqueued(&mut tx, id, tenant, answer.job.id, fire_at).await?;
    tx.commit().await.db()?;
    store.notify_created(tenant, std::slice::from_ref(&answer));
    Ok(answer.job)
}

pub(crate) async fn prune_schedule_runs(
    store: &SqliteStore,
    retention_ms: i64,
    batch: u32,
) -> Result<u64> {
    let mut tx = store.begin().await?;
    let done = sqlx::query(PRUNE_SCHEDULE_RUNS)
        .bind(retention_ms)
        .bind(i64::from(batch))
        .execute(&mut *tx)
        .await
        .db()?;
    if done.rows_affected() == 0 {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(0);
    }
    tx.commit().await.db()?;
    Ok(done.rows_affected())
}

/// Binds a schedule definition and its `next_run_at` as ?3–?11 (after the
/// tenant and the id).
fn bind_spec<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    spec: &'q ScheduleSpec,
    next_run_at: Option<DateTime<Utc>>,
) -> Result<sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
    Ok(query
        .bind(spec.name.as_str())
        .bind(spec.cron.as_str())
        .bind(spec.timezone.as_str())
        .bind(spec.queue.as_str())
        .bind(spec.kind.as_str())
        .bind(to_json_text(&spec.payload)?)
        .bind(spec.enabled)
        .bind(spec.overlap.as_str())
        .bind(next_run_at.map(|at| at.timestamp_millis())))
}

/// Records a run of a schedule (on the open transaction of the fire or
/// trigger), stamped `fire_at`.
async fn record_run(
    conn: &mut SqliteConnection,
    schedule_id: Uuid,
    tenant: &str,
    fire_at: i64,
    job_id: Option<Uuid>,
    outcome: RunOutcome,
) -> Result<()> {
    sqlx::query(INSERT_SCHEDULE_RUN)
        .bind(schedule_id.to_string())
        .bind(tenant)
        .bind(fire_at)
        .bind(job_id.map(|id| id.to_string()))
        .bind(outcome.as_str())
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

/// Enqueues a schedule's job on the open transaction of the fire or
/// trigger; an existing job with the same idempotency key is the run's job.
/// Returns the answer (the caller commits, then hints).
async fn enqueue_run(tx: &mut Tx, tenant: &str, job: NewJobRef<'_>) -> Result<Enqueued> {
    // A schedule's run is not refused for the queue limit: the schedule
    // limit bounds the queues schedules can make.
    enqueue_on(tx, tenant, std::slice::from_ref(&job), None)
        .await?
        .pop()
        .ok_or_else(|| rows::corrupt("an enqueue of one job gave no answer"))
}

/// Records an `enqueued` run of `job_id` stamped `fire_at` and makes the job
/// the schedule's `last_job_id` (on the open transaction of the fire or
/// trigger).
async fn record_enqueued(
    conn: &mut SqliteConnection,
    schedule_id: Uuid,
    tenant: &str,
    job_id: Uuid,
    fire_at: i64,
) -> Result<()> {
    sqlx::query(SET_LAST_JOB)
        .bind(schedule_id.to_string())
        .bind(job_id.to_string())
        .execute(&mut *conn)
        .await
        .db()?;
    record_run(
        conn,
        schedule_id,
        tenant,
        fire_at,
        Some(job_id),
        RunOutcome::Enqueued,
    )
    .await
}
