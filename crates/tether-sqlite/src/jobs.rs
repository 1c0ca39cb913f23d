//! Jobs as an operator sees them: one job, a page of jobs, a job's
//! history, and the two operator transitions, cancel and replay.

use chrono::{DateTime, Utc};
use sqlx::{Row, SqliteConnection};
use tether_core::{
    BulkReplayed, Error, EventCursor, EventKind, EventPage, Job, JobFilter, JobPage, JobState,
    ReplayFilter, Result, WorkerAnnouncement, WorkerPresence, WorkerSummary,
    WORKER_FORGET_AFTER_MS,
};
use uuid::Uuid;

use crate::rows::{self, id_array, is_unique_violation, Db};
use crate::sql::jobs::{
    ACTIVE_HOLDER, ANNOUNCED_WORKERS, ANNOUNCE_WORKER, CANCEL_QUEUED, COUNT_QUEUED, EVENTS,
    FORGET_WORKERS, INSERT_EVENT, LIVE_WORKERS, REPLAY, REPLAYED_EVENTS, REPLAY_MANY, REPLAY_SCAN,
    REQUEST_CANCEL, SELECT_JOB, TOUCH_WORKER, WORKERS,
};
use crate::workflows::{self, take_released, take_released_after, Released};
use crate::SqliteStore;

/// Page size of a listing that does not set one.
const DEFAULT_PAGE: u32 = 50;

/// Size of a bulk replay that does not set one.
const DEFAULT_REPLAY: u32 = 1_000;

pub(crate) async fn get(store: &SqliteStore, tenant: &str, id: Uuid) -> Result<Job> {
    let mut conn = store.reader.acquire().await.db()?;
    fetch_job(&mut conn, tenant, id).await
}

pub(crate) async fn list(store: &SqliteStore, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
    let limit = filter.limit.unwrap_or(DEFAULT_PAGE);
    // The filters present pick the statement (each shape is prepared and
    // cached once), so every shape can use its index; `(? IS NULL OR …)`
    // would defeat SQLite's index selection.
    let mut sql = String::from(concat!(
        "SELECT ",
        job_columns!(),
        " FROM tether_jobs WHERE tenant = ?"
    ));
    let mut binds: Vec<String> = vec![tenant.to_owned()];
    if let Some(queue) = &filter.queue {
        sql.push_str(" AND queue = ?");
        binds.push(queue.clone());
    }
    if let Some(state) = filter.state {
        sql.push_str(" AND state = ?");
        binds.push(state.as_str().to_owned());
    }
    if let Some(kind) = &filter.kind {
        sql.push_str(" AND kind = ?");
        binds.push(kind.clone());
    }
    if let Some(tag) = &filter.tag {
        sql.push_str(" AND EXISTS (SELECT 1 FROM json_each(tags) WHERE value = ?)");
        binds.push(tag.clone());
    }
    if let Some(workflow) = filter.workflow_id {
        // Through the partial index of a workflow's jobs.
        sql.push_str(" AND workflow_id = ?");
        binds.push(workflow.to_string());
    }
    if let Some(dependency) = filter.depends_on {
        // Its direct dependents, through the primary key of the edges.
        sql.push_str(
            " AND id IN (SELECT d.job_id FROM tether_job_dependencies AS d WHERE d.depends_on = ?)",
        );
        binds.push(dependency.to_string());
    }
    if let Some(cursor) = filter.cursor {
        sql.push_str(" AND id < ?");
        binds.push(cursor.to_string());
    }
    if let Some(prefix) = &filter.id_prefix {
        // Ids are stored hyphenated and lowercase: the prefix's range of
        // ids is a range of strings, which the primary key answers.
        let (low, high) = prefix.bounds();
        sql.push_str(" AND id BETWEEN ? AND ?");
        binds.push(low.to_string());
        binds.push(high.to_string());
    }
    let mut times = Vec::new();
    if let Some(after) = filter.created_after {
        sql.push_str(" AND created_at >= ?");
        times.push(after.timestamp_millis());
    }
    if let Some(before) = filter.created_before {
        sql.push_str(" AND created_at < ?");
        times.push(before.timestamp_millis());
    }
    sql.push_str(" ORDER BY id DESC LIMIT ?");
    let mut query = sqlx::query(&sql);
    for value in binds {
        query = query.bind(value);
    }
    for value in times {
        query = query.bind(value);
    }
    let mut conn = store.reader.acquire().await.db()?;
    let found = query
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let jobs = found.iter().map(rows::job).collect::<Result<Vec<_>>>()?;
    Ok(JobPage::of(jobs, limit as usize))
}

pub(crate) async fn events(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    cursor: Option<EventCursor>,
    limit: u32,
) -> Result<EventPage> {
    let mut conn = store.reader.acquire().await.db()?;
    // One statement: the job's existence in the tenant and its history
    // come from the same snapshot.
    let found = sqlx::query(EVENTS)
        .bind(tenant)
        .bind(id.to_string())
        .bind(cursor.map(|c| c.0))
        .bind(i64::from(limit))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    if found.is_empty() {
        return Err(Error::JobNotFound(id));
    }
    // The job's row comes without an event when its page is past the end.
    let mut events = Vec::with_capacity(found.len());
    for row in &found {
        let seq: Option<i64> = row.try_get("seq").db()?;
        if let Some(seq) = seq {
            events.push((EventCursor(seq), rows::event(row)?));
        }
    }
    Ok(EventPage::of(events, limit as usize))
}

pub(crate) async fn cancel(store: &SqliteStore, tenant: &str, id: Uuid) -> Result<Job> {
    let mut tx = store.begin().await?;
    let job = fetch_job(&mut tx, tenant, id).await?;
    let (sql, event) = match job.state {
        JobState::Queued | JobState::Waiting => (CANCEL_QUEUED, EventKind::Cancelled),
        JobState::Running if !job.cancel_requested => (REQUEST_CANCEL, EventKind::CancelRequested),
        // Already asked: the request is recorded once.
        JobState::Running => {
            SqliteStore::finish_unchanged(tx).await?;
            return Ok(job);
        }
        state => return Err(Error::not_cancellable(id, state)),
    };
    let row = sqlx::query(sql)
        .bind(id.to_string())
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let job = rows::job(&row)?;
    // A cancelled job that others wait for cancels or releases them.
    let mut released = Released::new();
    if job.state == JobState::Cancelled {
        take_released_after(&mut tx, std::slice::from_ref(&row), &mut released).await?;
    }
    record(&mut tx, &job, event, job.worker_id.as_deref(), None).await?;
    tx.commit().await.db()?;
    store.notify_released(&released);
    Ok(job)
}

pub(crate) async fn replay(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Job> {
    let mut tx = store.begin().await?;
    let job = fetch_job(&mut tx, tenant, id).await?;
    if !job.state.is_terminal() {
        return Err(Error::not_replayable(id, job.state));
    }
    if let Some(key) = &job.unique_key {
        let holder: Option<String> = sqlx::query_scalar(ACTIVE_HOLDER)
            .bind(tenant)
            .bind(key)
            .bind(id.to_string())
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        if holder.is_some() {
            return Err(Error::replay_unique_key_held(id));
        }
    }
    let row = sqlx::query(REPLAY)
        .bind(id.to_string())
        .bind(expires_at.map(|at| at.timestamp_millis()))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            // Belt and braces: the index, not the check above, is the rule.
            if is_unique_violation(&e) {
                Error::replay_unique_key_held(id)
            } else {
                rows::db_err(e)
            }
        })?;
    let mut job = rows::job(&row)?;
    record(&mut tx, &job, EventKind::Replayed, None, None).await?;
    if job.state == JobState::Waiting {
        workflows::settle(&mut tx, &[id.to_string()]).await?;
        // Anything settling moved in turn is this job only (see `attach`).
        take_released(&mut tx, &mut Released::new()).await?;
        job = fetch_job(&mut tx, tenant, id).await?;
    }
    tx.commit().await.db()?;
    if job.state == JobState::Queued {
        store.notify(tenant, &job.queue, 1);
    }
    Ok(job)
}

pub(crate) async fn replay_many(
    store: &SqliteStore,
    tenant: &str,
    filter: &ReplayFilter,
) -> Result<BulkReplayed> {
    let limit = filter.limit.unwrap_or(DEFAULT_REPLAY);
    let cursor = filter.cursor.map(|id| id.to_string());
    let mut tx = store.begin().await?;
    let scan = sqlx::query(REPLAY_SCAN)
        .bind(tenant)
        .bind(&filter.queue)
        .bind(filter.state.as_str())
        .bind(filter.kind.as_deref())
        .bind(i64::from(limit))
        .bind(cursor.as_deref())
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let scanned: i64 = scan.try_get("scanned").db()?;
    let last: Option<String> = scan.try_get("last").db()?;
    let replayed = sqlx::query(REPLAY_MANY)
        .bind(tenant)
        .bind(&filter.queue)
        .bind(filter.state.as_str())
        .bind(filter.kind.as_deref())
        .bind(i64::from(limit))
        .bind(cursor.as_deref())
        .bind(filter.expires_at.map(|at| at.timestamp_millis()))
        .fetch_all(&mut *tx)
        .await
        .db()?;
    let mut waiting = Vec::new();
    for row in &replayed {
        if row.try_get::<&str, _>("state").db()? == JobState::Waiting.as_str() {
            waiting.push(row.try_get::<String, _>("id").db()?);
        }
    }
    let mut ready = replayed.len() - waiting.len();
    if !waiting.is_empty() {
        // Settled after the `replayed` events, so that a job cancelled at
        // once for a failed dependency has its `cancelled` event after them.
        let ids: Vec<String> = replayed
            .iter()
            .map(|row| row.try_get::<String, _>("id"))
            .collect::<std::result::Result<_, _>>()
            .db()?;
        sqlx::query(REPLAYED_EVENTS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .execute(&mut *tx)
            .await
            .db()?;
        workflows::settle(&mut tx, &waiting).await?;
        // What settling moved in turn is among these jobs (see `attach`).
        take_released(&mut tx, &mut Released::new()).await?;
        let queued: i64 = sqlx::query_scalar(COUNT_QUEUED)
            .bind(id_array(waiting.iter().map(String::as_str)))
            .fetch_one(&mut *tx)
            .await
            .db()?;
        ready += queued as usize;
        tx.commit().await.db()?;
    } else {
        SqliteStore::finish_bulk(tx, &replayed, REPLAYED_EVENTS).await?;
    }
    let n = replayed.len() as u64;
    if ready > 0 {
        store.notify(tenant, &filter.queue, ready);
    }
    let next_cursor = match last {
        Some(last) if scanned == i64::from(limit) => Some(rows::uuid(&last)?),
        _ => None,
    };
    Ok(BulkReplayed {
        replayed: n,
        next_cursor,
    })
}

/// Runs a "select the job, then decide" operation's first step.
pub(crate) async fn fetch_job(conn: &mut SqliteConnection, tenant: &str, id: Uuid) -> Result<Job> {
    let row = sqlx::query(SELECT_JOB)
        .bind(tenant)
        .bind(id.to_string())
        .fetch_optional(conn)
        .await
        .db()?;
    match row {
        Some(row) => rows::job(&row),
        None => Err(Error::JobNotFound(id)),
    }
}

/// Inserts one history event for `job` at its `updated_at` (the instant of
/// the transition that was just written).
pub(crate) async fn record(
    conn: &mut SqliteConnection,
    job: &Job,
    event: EventKind,
    worker_id: Option<&str>,
    detail: Option<&str>,
) -> Result<()> {
    sqlx::query(INSERT_EVENT)
        .bind(job.id.to_string())
        .bind(&job.tenant)
        .bind(job.updated_at.timestamp_millis())
        .bind(event.as_str())
        .bind(job.attempt)
        .bind(worker_id)
        .bind(detail)
        .execute(conn)
        .await
        .db()?;
    Ok(())
}

pub(crate) async fn list_workers(store: &SqliteStore, tenant: &str) -> Result<Vec<WorkerSummary>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(WORKERS)
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut workers = Vec::with_capacity(found.len());
    for row in &found {
        let queues: &str = row.try_get("queues").db()?;
        let mut queues: Vec<String> = serde_json::from_str(queues)
            .map_err(|e| Error::Storage(format!("a worker's queues: {e}").into()))?;
        queues.sort();
        let running: i64 = row.try_get("running").db()?;
        let last: Option<i64> = row.try_get("last_heartbeat_at").db()?;
        workers.push(WorkerSummary {
            worker_id: row.try_get("worker_id").db()?,
            queues,
            running: running as u64,
            last_heartbeat_at: last.map(rows::ts).transpose()?,
            presence: None,
        });
    }
    Ok(workers)
}

pub(crate) async fn announce_worker(
    store: &SqliteStore,
    tenant: &str,
    worker_id: &str,
    a: &WorkerAnnouncement,
    max_live: u32,
) -> Result<DateTime<Utc>> {
    let queues = serde_json::to_string(&a.queues).map_err(|e| Error::Storage(Box::new(e)))?;
    let mut tx = store.begin().await?;
    sqlx::query(FORGET_WORKERS)
        .bind(tenant)
        .bind(worker_id)
        .bind(WORKER_FORGET_AFTER_MS)
        .execute(&mut *tx)
        .await
        .db()?;
    let live = sqlx::query(LIVE_WORKERS)
        .bind(tenant)
        .bind(worker_id)
        .fetch_one(&mut *tx)
        .await
        .db()?;
    let (others, known): (i64, bool) = (live.try_get("others").db()?, live.try_get("known").db()?);
    if !known && others >= i64::from(max_live) {
        tx.commit().await.db()?;
        return Err(Error::too_many_workers(max_live));
    }
    let seen: i64 = sqlx::query_scalar(ANNOUNCE_WORKER)
        .bind(tenant)
        .bind(worker_id)
        .bind(queues)
        .bind(i64::from(a.concurrency))
        .bind(a.sdk.as_deref())
        .bind(a.version.as_deref())
        .bind(a.host.as_deref())
        .bind(a.pid.map(i64::from))
        .fetch_one(&mut *tx)
        .await
        .db()?;
    tx.commit().await.db()?;
    rows::ts(seen)
}

pub(crate) async fn touch_worker(store: &SqliteStore, tenant: &str, worker_id: &str) -> Result<()> {
    let mut tx = store.begin().await?;
    sqlx::query(TOUCH_WORKER)
        .bind(tenant)
        .bind(worker_id)
        .execute(&mut *tx)
        .await
        .db()?;
    tx.commit().await.db()?;
    Ok(())
}

pub(crate) async fn announced_workers(
    store: &SqliteStore,
    tenant: &str,
) -> Result<Vec<(String, WorkerPresence)>> {
    let mut conn = store.reader.acquire().await.db()?;
    let found = sqlx::query(ANNOUNCED_WORKERS)
        .bind(tenant)
        .bind(WORKER_FORGET_AFTER_MS)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut workers = Vec::with_capacity(found.len());
    for row in &found {
        let queues: &str = row.try_get("queues").db()?;
        let queues: Vec<String> = serde_json::from_str(queues)
            .map_err(|e| Error::Storage(format!("a worker's queues: {e}").into()))?;
        let concurrency: i64 = row.try_get("concurrency").db()?;
        let pid: Option<i64> = row.try_get("pid").db()?;
        workers.push((
            row.try_get("worker_id").db()?,
            WorkerPresence {
                announcement: WorkerAnnouncement {
                    queues,
                    concurrency: concurrency as u32,
                    sdk: row.try_get("sdk").db()?,
                    version: row.try_get("version").db()?,
                    host: row.try_get("host").db()?,
                    pid: pid.map(|p| p as u32),
                },
                last_seen_at: rows::ts(row.try_get("last_seen_at").db()?)?,
            },
        ));
    }
    Ok(workers)
}
