//! Schedules (invariant 11): the timetables and their runs.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction. A scheduler pass is
//! one, set-based whatever its size: the compare-and-sets on `next_run_at`
//! of all its fires in one statement under the write lock (so of two nodes,
//! or two processes on the file, that read the same `next_run_at`, the
//! second finds it moved), then the enqueue of their jobs with the fires'
//! idempotency keys (one per tenant) and the runs' records.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{Row, Sqlite, SqliteConnection};
use tether_core::schedule::{distinct_schedules, Fire, FireOutcome, FireRef};
use tether_core::{
    Enqueued, Error, Job, NewJobRef, Overlap, Result, RunOutcome, Schedule, ScheduleRun,
    ScheduleSpec,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::rows::{self, is_unique_violation, to_json_text, Db};
use crate::sql::schedules::{
    ACTIVE_JOBS, ADVANCE_SCHEDULES, COUNT_SCHEDULES, CREATE_SCHEDULE, DB_NOW, DELETE_SCHEDULE,
    DELETE_SCHEDULE_RUNS, DUE_SCHEDULES, INSERT_SCHEDULE_RUN, INSERT_SCHEDULE_RUNS, LIST_SCHEDULES,
    NEXT_SCHEDULE_DUE, PRUNE_SCHEDULE_RUNS, RECENT_SCHEDULE_RUNS, SCHEDULE_BY_NAME, SCHEDULE_RUNS,
    SELECT_SCHEDULE, SET_LAST_JOB, SET_LAST_JOBS, TRIGGER_SCHEDULE, UPDATE_SCHEDULE,
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

pub(crate) async fn find_schedule(
    store: &SqliteStore,
    tenant: &str,
    name: &str,
) -> Result<Option<Schedule>> {
    let mut conn = store.reader.acquire().await.db()?;
    let row = sqlx::query(SCHEDULE_BY_NAME)
        .bind(tenant)
        .bind(name)
        .fetch_optional(&mut *conn)
        .await
        .db()?;
    row.as_ref().map(rows::schedule).transpose()
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

pub(crate) async fn fire_schedules(
    store: &SqliteStore,
    fires: &[FireRef<'_>],
) -> Result<Vec<FireOutcome>> {
    distinct_schedules(fires)?;
    let mut outcomes = vec![FireOutcome::Raced; fires.len()];
    if fires.is_empty() {
        return Ok(outcomes);
    }
    let mut advance = Vec::with_capacity(fires.len() * 5);
    for f in fires {
        let fire = f.fire;
        advance.extend([
            json!(fire.schedule_id.to_string()),
            json!(fire.tenant),
            json!(fire.expected_next_run_at.timestamp_millis()),
            json!(fire.fire_at.timestamp_millis()),
            json!(fire.next_run_at.map(|at| at.timestamp_millis())),
        ]);
    }
    let Some(mut tx) = crate::maintenance::begin_fenced(store).await? else {
        return Ok(outcomes);
    };
    // 1. The compare-and-sets, under the write lock: of two nodes (or two
    // processes on the file) that read the same `next_run_at`, the second
    // finds it moved.
    let moved = sqlx::query(ADVANCE_SCHEDULES)
        .bind(Value::Array(advance).to_string())
        .fetch_all(&mut *tx)
        .await
        .db()?;
    if moved.is_empty() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(outcomes);
    }
    let mut last_jobs: HashMap<Uuid, Option<Uuid>> = HashMap::with_capacity(moved.len());
    for row in &moved {
        let id = rows::uuid(row.try_get("id").db()?)?;
        let last: Option<&str> = row.try_get("last_job_id").db()?;
        last_jobs.insert(id, last.map(rows::uuid).transpose()?);
    }

    // 2. Overlap `skip`: nothing to enqueue while the last run's job is
    // unfinished (a job pruned since counts as finished).
    let mut asked = Vec::new();
    for f in fires {
        if f.fire.overlap == Overlap::Skip {
            if let Some(Some(last)) = last_jobs.get(&f.fire.schedule_id) {
                asked.extend([json!(f.fire.tenant), json!(last.to_string())]);
            }
        }
    }
    let mut active = HashSet::new();
    if !asked.is_empty() {
        let found = sqlx::query(ACTIVE_JOBS)
            .bind(Value::Array(asked).to_string())
            .fetch_all(&mut *tx)
            .await
            .db()?;
        for row in &found {
            active.insert(rows::uuid(row.try_get("id").db()?)?);
        }
    }

    // 3. The jobs, by their fire keys, one enqueue per tenant: a job that
    // exists already is its run's job and nothing new is made.
    let mut runs = Vec::new();
    let mut by_tenant: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in fires.iter().enumerate() {
        let fire = f.fire;
        let Some(last) = last_jobs.get(&fire.schedule_id) else {
            continue;
        };
        if fire.overlap == Overlap::Skip && last.is_some_and(|job| active.contains(&job)) {
            outcomes[i] = FireOutcome::Ran(RunOutcome::Skipped, None);
            runs.extend(run_record(fire, None, RunOutcome::Skipped));
        } else {
            by_tenant.entry(fire.tenant.as_str()).or_default().push(i);
        }
    }
    let mut created = Vec::with_capacity(by_tenant.len());
    let mut last = Vec::new();
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
        let answers = enqueue_on(&mut tx, tenant, &jobs, None).await?;
        for (&i, answer) in idx.iter().zip(&answers) {
            let fire = fires[i].fire;
            let job_id = answer.job.id;
            outcomes[i] = FireOutcome::Ran(RunOutcome::Enqueued, Some(job_id));
            runs.extend(run_record(fire, Some(job_id), RunOutcome::Enqueued));
            last.extend([
                json!(fire.schedule_id.to_string()),
                json!(job_id.to_string()),
            ]);
        }
        created.push((tenant, answers));
    }

    // 4. The runs, and each enqueued job as its schedule's last.
    sqlx::query(INSERT_SCHEDULE_RUNS)
        .bind(Value::Array(runs).to_string())
        .execute(&mut *tx)
        .await
        .db()?;
    if !last.is_empty() {
        sqlx::query(SET_LAST_JOBS)
            .bind(Value::Array(last).to_string())
            .execute(&mut *tx)
            .await
            .db()?;
    }
    tx.commit().await.db()?;
    for (tenant, answers) in &created {
        store.notify_created(tenant, answers);
    }
    Ok(outcomes)
}

/// One run of a pass as the five values of [`INSERT_SCHEDULE_RUNS`].
fn run_record(fire: &Fire, job: Option<Uuid>, outcome: RunOutcome) -> [Value; 5] {
    [
        json!(fire.schedule_id.to_string()),
        json!(fire.tenant),
        json!(fire.fire_at.timestamp_millis()),
        json!(job.map(|id| id.to_string())),
        json!(outcome.as_str()),
    ]
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
    let Some(mut tx) = crate::maintenance::begin_fenced(store).await? else {
        return Ok(0);
    };
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

/// Enqueues a triggered run's job on the trigger's open transaction; an
/// existing job with the same idempotency key is the run's job. Returns the
/// answer (the caller commits, then hints).
async fn enqueue_run(tx: &mut Tx, tenant: &str, job: NewJobRef<'_>) -> Result<Enqueued> {
    // A schedule's run is not refused for the queue limit: the schedule
    // limit bounds the queues schedules can make.
    enqueue_on(tx, tenant, std::slice::from_ref(&job), None)
        .await?
        .pop()
        .ok_or_else(|| rows::corrupt("an enqueue of one job gave no answer"))
}

/// Records an `enqueued` run of `job_id` stamped `fire_at` and makes the job
/// the schedule's `last_job_id` (on the trigger's open transaction).
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
    sqlx::query(INSERT_SCHEDULE_RUN)
        .bind(schedule_id.to_string())
        .bind(tenant)
        .bind(fire_at)
        .bind(job_id.to_string())
        .bind(RunOutcome::Enqueued.as_str())
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

pub(crate) async fn recent_schedule_runs(
    store: &SqliteStore,
    tenant: &str,
    limit: u32,
) -> Result<Vec<(Uuid, ScheduleRun)>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(RECENT_SCHEDULE_RUNS)
        .bind(tenant)
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    found
        .iter()
        .map(|row| {
            let id: &str = row.try_get("schedule_id").db()?;
            Ok((rows::uuid(id)?, rows::schedule_run(row)?))
        })
        .collect()
}
