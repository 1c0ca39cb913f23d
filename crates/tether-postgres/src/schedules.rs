//! Schedules (invariant 11): the timetables and their runs.
//!
//! Definitions are read and written by one statement each. A scheduler
//! pass is one transaction of set-based steps whatever its size: one
//! statement for the compare-and-sets on `next_run_at` of all its fires and
//! their runs' records (it also takes the schedules' row locks, in id order,
//! so a concurrent pass over the same instants queues up behind the winner
//! and then finds the timetables moved), then the enqueue of their jobs
//! with the fires' idempotency keys (one multi-row insert per tenant). A
//! trigger locks the row first, so it and a fire of the same schedule never
//! interleave.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::schedule::{distinct_schedules, FireOutcome, FireRef};
use tether_core::{
    Enqueued, Error, Job, NewJobRef, Overlap, Result, RunOutcome, Schedule, ScheduleRun,
    ScheduleSpec,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::exec::Conn;
use crate::rows::{self, Db};
use crate::sql::schedules::{
    ADVANCE_SCHEDULES, COUNT_SCHEDULES, CREATE_SCHEDULE, DELETE_SCHEDULE, DUE_SCHEDULES,
    LIST_SCHEDULES, LOCK_SCHEDULE, NAME_CONSTRAINT, NEXT_SCHEDULE_DUE, PRUNE_SCHEDULE_RUNS,
    RECENT_SCHEDULE_RUNS, RECORD_ENQUEUED, RECORD_EXISTING_JOBS, SCHEDULE_BY_NAME, SCHEDULE_RUNS,
    SELECT_SCHEDULE, UPDATE_SCHEDULE,
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
        .execute(&mut tx.conn())
        .await
        .db()?;
    let n: i64 = sqlx::query_scalar(COUNT_SCHEDULES)
        .bind(tenant)
        .fetch_one(&mut tx.conn())
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
        .fetch_optional(&mut tx.conn())
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
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::schedule_not_found(id))
}

pub(crate) async fn find_schedule(
    store: &PgStore,
    tenant: &str,
    name: &str,
) -> Result<Option<Schedule>> {
    sqlx::query(SCHEDULE_BY_NAME)
        .bind(tenant)
        .bind(name)
        .try_map(|row| rows::schedule(&row))
        .fetch_optional(&store.db)
        .await
        .db()
}

pub(crate) async fn list_schedules(store: &PgStore, tenant: &str) -> Result<Vec<Schedule>> {
    sqlx::query(LIST_SCHEDULES)
        .bind(tenant)
        .try_map(|row| rows::schedule(&row))
        .fetch_all(&store.db)
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
        .fetch_optional(&store.db)
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
        .execute(&store.db)
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
        .fetch_all(&store.db)
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
        .fetch_all(&store.db)
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
        .fetch_one(&store.db)
        .await
        .db()
}

pub(crate) async fn fire_schedules(
    store: &PgStore,
    fires: &[FireRef<'_>],
) -> Result<Vec<FireOutcome>> {
    distinct_schedules(fires)?;
    let mut outcomes = vec![FireOutcome::Raced; fires.len()];
    if fires.is_empty() {
        return Ok(outcomes);
    }
    let n = fires.len();
    let mut ids = Vec::with_capacity(n);
    let mut tenants = Vec::with_capacity(n);
    let mut expected = Vec::with_capacity(n);
    let mut next = Vec::with_capacity(n);
    let mut fire_at = Vec::with_capacity(n);
    let mut skip = Vec::with_capacity(n);
    let mut job_ids = Vec::with_capacity(n);
    for f in fires {
        let fire = f.fire;
        ids.push(fire.schedule_id);
        tenants.push(fire.tenant.as_str());
        expected.push(fire.expected_next_run_at);
        next.push(fire.next_run_at);
        fire_at.push(fire.fire_at);
        skip.push(fire.overlap == Overlap::Skip);
        job_ids.push(f.job_id);
    }
    let (fence_name, fence_token) = crate::maintenance::fence_params(store);
    let mut tx = store.begin().await?;
    let moved: HashMap<Uuid, bool> = sqlx::query(ADVANCE_SCHEDULES)
        .bind(&ids)
        .bind(&tenants)
        .bind(&expected)
        .bind(&next)
        .bind(&fire_at)
        .bind(&skip)
        .bind(&job_ids)
        .bind(fence_name)
        .bind(fence_token)
        .try_map(|row: PgRow| Ok((row.try_get("id")?, row.try_get("skipped")?)))
        .fetch_all(&mut tx.conn())
        .await
        .db()?
        .into_iter()
        .collect();
    if moved.is_empty() {
        tx.rollback().await.db()?;
        return Ok(outcomes);
    }
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in fires.iter().enumerate() {
        match moved.get(&f.fire.schedule_id) {
            None => {}
            Some(true) => outcomes[i] = FireOutcome::Ran(RunOutcome::Skipped, None),
            Some(false) => by_tenant.entry(f.fire.tenant.as_str()).or_default().push(i),
        }
    }
    // One enqueue per tenant. An existing job with a fire's idempotency key
    // (an earlier attempt at this very fire) comes back instead of a second
    // one, and becomes the run's job in place of the id recorded above.
    let mut created = Vec::with_capacity(by_tenant.len());
    let (mut existing_of, mut minted, mut existing) = (Vec::new(), Vec::new(), Vec::new());
    for (tenant, idx) in by_tenant {
        let jobs: Vec<NewJobRef<'_>> = idx
            .iter()
            .map(|&i| NewJobRef {
                id: fires[i].job_id,
                job: &fires[i].fire.job,
            })
            .collect();
        // A schedule's run is not refused for the queue limit: the schedule
        // limit bounds the queues schedules can make.
        let answers = enqueue_on(&mut tx.conn(), tenant, &jobs, None).await?;
        for (&i, answer) in idx.iter().zip(&answers) {
            outcomes[i] = FireOutcome::Ran(RunOutcome::Enqueued, Some(answer.job.id));
            if answer.job.id != fires[i].job_id {
                existing_of.push(fires[i].fire.schedule_id);
                minted.push(fires[i].job_id);
                existing.push(answer.job.id);
            }
        }
        created.push((tenant, answers));
    }
    if !existing.is_empty() {
        let done = sqlx::query(RECORD_EXISTING_JOBS)
            .bind(&existing_of)
            .bind(&minted)
            .bind(&existing)
            .execute(&mut tx.conn())
            .await
            .db()?;
        if done.rows_affected() != existing.len() as u64 {
            // Cannot happen while the rows are locked; refuse rather than
            // commit a run that names a job that does not exist.
            return Err(rows::corrupt(format!(
                "{} of {} runs took the existing job of their fire",
                done.rows_affected(),
                existing.len()
            )));
        }
    }
    tx.commit().await.db()?;
    for (tenant, answers) in &created {
        store.notify_created(tenant, answers);
    }
    Ok(outcomes)
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
        .fetch_optional(&mut tx.conn())
        .await
        .db()?;
    if locked.is_none() {
        tx.rollback().await.db()?;
        return Err(Error::schedule_not_found(id));
    }
    let enqueued = enqueue_run(&mut tx.conn(), tenant, job).await?;
    record_enqueued(&mut tx.conn(), id, tenant, enqueued.job.id).await?;
    tx.commit().await.db()?;
    store.notify_created(tenant, std::slice::from_ref(&enqueued));
    Ok(enqueued.job)
}

pub(crate) async fn prune_schedule_runs(
    store: &PgStore,
    retention_ms: i64,
    batch: u32,
) -> Result<u64> {
    let (fence_name, fence_token) = crate::maintenance::fence_params(store);
    let n: i64 = sqlx::query_scalar(PRUNE_SCHEDULE_RUNS)
        .bind(retention_ms.clamp(0, MAX_RETENTION_MS))
        .bind(i64::from(batch))
        .bind(fence_name)
        .bind(fence_token)
        .fetch_one(&store.db)
        .await
        .db()?;
    Ok(n as u64)
}

/// Enqueues a triggered run's job inside the trigger's transaction.
async fn enqueue_run(conn: &mut Conn<'_>, tenant: &str, job: NewJobRef<'_>) -> Result<Enqueued> {
    // A schedule's run is not refused for the queue limit: the schedule
    // limit bounds the queues schedules can make.
    enqueue_on(conn, tenant, &[job], None)
        .await?
        .pop()
        .ok_or_else(|| rows::corrupt("an enqueue of one job gave no answer"))
}

/// Records a triggered `enqueued` run of `job_id`, stamped with the
/// transaction's `now()`, on a schedule the transaction has locked.
async fn record_enqueued(conn: &mut Conn<'_>, id: Uuid, tenant: &str, job_id: Uuid) -> Result<()> {
    let done = sqlx::query(RECORD_ENQUEUED)
        .bind(id)
        .bind(tenant)
        .bind(job_id)
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

pub(crate) async fn recent_schedule_runs(
    store: &PgStore,
    tenant: &str,
    limit: u32,
) -> Result<Vec<(Uuid, ScheduleRun)>> {
    let found = sqlx::query(RECENT_SCHEDULE_RUNS)
        .bind(tenant)
        .bind(i64::from(limit))
        .try_map(|row: sqlx::postgres::PgRow| {
            let id: Uuid = row.try_get("schedule_id")?;
            Ok(rows::schedule_run(&row)?.map(|run| (id, run)))
        })
        .fetch_all(&store.db)
        .await
        .db()?;
    Ok(found.into_iter().flatten().collect())
}
