//! Jobs as an operator sees them: one job, a page of jobs, a job's
//! history, and the two operator transitions, cancel and replay.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::{QueryBuilder, Row};
use tether_core::{
    BulkReplayed, Error, EventCursor, EventPage, Job, JobEvent, JobFilter, JobPage, JobState,
    ReplayFilter, Result, WorkerAnnouncement, WorkerPresence, WorkerSummary,
    WORKER_FORGET_AFTER_MS,
};
use uuid::Uuid;

use crate::rows::{self, is_unique_violation, Db};
use crate::sql::jobs::{
    ANNOUNCED_WORKERS, ANNOUNCE_WORKER, CANCEL, EVENTS, REPLAY, REPLAY_MANY, SELECT_JOB,
    TOUCH_WORKER, WORKERS,
};
use crate::{workflows, PgStore};

/// Page size of a listing that does not set one.
const DEFAULT_PAGE: u32 = 50;
/// Size of a bulk replay that does not set one.
const DEFAULT_REPLAY: u32 = 1_000;

pub(crate) async fn get(store: &PgStore, tenant: &str, id: Uuid) -> Result<Job> {
    sqlx::query(SELECT_JOB)
        .bind(id)
        .bind(tenant)
        .try_map(|row| rows::job(&row))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or(Error::JobNotFound(id))
}

/// A page of jobs, newest first. No index covers every state (each state
/// has its own partial index in id order; see migration 5), so the page is
/// the merge of one branch per state asked for, each reading its state's
/// index newest first and stopping at the page size; without a queue, each
/// branch walks the tenant's queue rows (every queue holding a job has one).
pub(crate) async fn list(store: &PgStore, tenant: &str, filter: &JobFilter) -> Result<JobPage> {
    let limit = filter.limit.unwrap_or(DEFAULT_PAGE) as usize;
    let states: &[JobState] = match &filter.state {
        Some(state) => std::slice::from_ref(state),
        None => &JobState::ALL,
    };
    let mut q = QueryBuilder::new("SELECT * FROM (");
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            q.push(" UNION ALL ");
        }
        q.push("(SELECT j.* FROM ");
        match &filter.queue {
            Some(queue) => {
                q.push("(SELECT ")
                    .push_bind(tenant)
                    .push("::text AS tenant, ");
                q.push_bind(queue).push("::text AS name) qs");
            }
            None => {
                q.push("tether.queues qs");
            }
        }
        q.push(concat!(
            " CROSS JOIN LATERAL (SELECT ",
            job_columns!(),
            " FROM tether.jobs j WHERE j.tenant = qs.tenant AND j.queue = qs.name"
        ));
        // A literal, not a parameter: the planner must see which partial
        // index applies. `as_str` is one of six fixed words.
        q.push(" AND j.state = '").push(state.as_str()).push("'");
        if let Some(kind) = &filter.kind {
            q.push(" AND j.kind = ").push_bind(kind);
        }
        if let Some(tag) = &filter.tag {
            q.push(" AND j.tags @> ARRAY[")
                .push_bind(tag)
                .push("]::text[]");
        }
        if let Some(cursor) = filter.cursor {
            q.push(" AND j.id < ").push_bind(cursor);
        }
        if let Some(prefix) = &filter.id_prefix {
            let (low, high) = prefix.bounds();
            q.push(" AND j.id BETWEEN ")
                .push_bind(low)
                .push(" AND ")
                .push_bind(high);
        }
        if let Some(after) = filter.created_after {
            q.push(" AND j.created_at >= ").push_bind(after);
        }
        if let Some(before) = filter.created_before {
            q.push(" AND j.created_at < ").push_bind(before);
        }
        if let Some(workflow) = filter.workflow_id {
            q.push(" AND j.workflow_id = ").push_bind(workflow);
        }
        if let Some(dependency) = filter.depends_on {
            q.push(" AND j.id IN (SELECT d.job_id FROM tether.job_dependencies d WHERE d.depends_on = ")
                .push_bind(dependency)
                .push(")");
        }
        q.push(" ORDER BY j.id DESC LIMIT ").push_bind(limit as i64);
        q.push(") j");
        if filter.queue.is_none() {
            q.push(" WHERE qs.tenant = ").push_bind(tenant);
        }
        q.push(")");
    }
    q.push(") j ORDER BY j.id DESC LIMIT ")
        .push_bind(limit as i64);
    let jobs: Vec<Job> = q
        .build()
        .try_map(|row| rows::job(&row))
        .fetch_all(&store.db)
        .await
        .db()?;
    Ok(JobPage::of(jobs, limit))
}

pub(crate) async fn events(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    cursor: Option<EventCursor>,
    limit: u32,
) -> Result<EventPage> {
    let found: Vec<(i64, JobEvent)> = sqlx::query(EVENTS)
        .bind(id)
        .bind(tenant)
        .bind(cursor.map(|c| c.0))
        .bind(i64::from(limit))
        .try_map(|row: PgRow| Ok((row.try_get("seq")?, rows::event(&row)?)))
        .fetch_all(&store.db)
        .await
        .db()?;
    if found.is_empty() {
        // Every job has at least its `enqueued` event, but a page past
        // the end has none: tell "no such job" apart.
        get(store, tenant, id).await?;
    }
    let found = found
        .into_iter()
        .map(|(seq, e)| (EventCursor(seq), e))
        .collect();
    Ok(EventPage::of(found, limit as usize))
}

pub(crate) async fn cancel(store: &PgStore, tenant: &str, id: Uuid) -> Result<Job> {
    let row = sqlx::query(CANCEL)
        .bind(id)
        .bind(tenant)
        .fetch_optional(&store.db)
        .await
        .db()?;
    match prior_state_and_job(row, id)? {
        (Some(job), _) => Ok(job),
        (None, JobState::Running) => get(store, tenant, id).await,
        (None, state) => Err(Error::not_cancellable(id, state)),
    }
}

pub(crate) async fn replay(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Job> {
    // A transaction: a job with dependencies is settled against them
    // before the replay commits.
    let mut tx = store.begin().await?;
    let out: Result<Job> = async {
        let row = sqlx::query(REPLAY)
            .bind(id)
            .bind(tenant)
            .bind(expires_at)
            .fetch_optional(&mut tx.conn())
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::replay_unique_key_held(id)
                } else {
                    rows::db_err(e)
                }
            })?;
        match prior_state_and_job(row, id)? {
            (Some(mut job), _) => {
                if job.state == JobState::Waiting {
                    let settled = workflows::enter_waiting(&mut tx.conn(), tenant, &[id]).await?;
                    if let Some((_, state)) = settled.last() {
                        job.state = *state;
                    }
                }
                Ok(job)
            }
            (None, state) => Err(Error::not_replayable(id, state)),
        }
    }
    .await;
    let job = tx.finish(out).await?;
    if job.state == JobState::Queued {
        store.notify(tenant, &job.queue, 1);
    }
    Ok(job)
}

pub(crate) async fn replay_many(
    store: &PgStore,
    tenant: &str,
    filter: &ReplayFilter,
) -> Result<BulkReplayed> {
    let limit = filter.limit.unwrap_or(DEFAULT_REPLAY);
    let mut tx = store.begin().await?;
    let out: Result<(i64, i64, Option<Uuid>)> = async {
        let row = sqlx::query(REPLAY_MANY)
            .bind(tenant)
            .bind(&filter.queue)
            .bind(filter.state.as_str())
            .bind(filter.kind.as_deref())
            .bind(i64::from(limit))
            .bind(filter.cursor)
            .bind(filter.expires_at)
            .fetch_one(&mut tx.conn())
            .await
            .map_err(|e| {
                if is_unique_violation(&e) {
                    Error::replay_raced()
                } else {
                    rows::db_err(e)
                }
            })?;
        let waiting: Vec<Uuid> = row.try_get("waiting").db()?;
        workflows::enter_waiting(&mut tx.conn(), tenant, &waiting).await?;
        Ok((
            row.try_get("replayed").db()?,
            row.try_get("scanned").db()?,
            row.try_get("last").db()?,
        ))
    }
    .await;
    let (replayed, scanned, last) = tx.finish(out).await?;
    if replayed > 0 {
        store.notify(tenant, &filter.queue, replayed as usize);
    }
    Ok(BulkReplayed {
        replayed: replayed as u64,
        next_cursor: if scanned == i64::from(limit) {
            last
        } else {
            None
        },
    })
}

/// Interprets the answer of cancel/replay: the job's state before the
/// statement and the updated job (`None` when the operation did not apply).
fn prior_state_and_job(row: Option<PgRow>, id: Uuid) -> Result<(Option<Job>, JobState)> {
    let row = row.ok_or(Error::JobNotFound(id))?;
    let prior: String = row.try_get("prior_state").db()?;
    let prior = prior.parse::<JobState>().map_err(rows::corrupt)?;
    let updated: Option<Uuid> = row.try_get("id").db()?;
    let job = match updated {
        Some(_) => Some(rows::job(&row).db()?),
        None => None,
    };
    Ok((job, prior))
}

pub(crate) async fn list_workers(store: &PgStore, tenant: &str) -> Result<Vec<WorkerSummary>> {
    sqlx::query(WORKERS)
        .bind(tenant)
        .try_map(|row: PgRow| {
            let running: i64 = row.try_get("running")?;
            Ok(WorkerSummary {
                worker_id: row.try_get("worker_id")?,
                queues: row.try_get("queues")?,
                running: running as u64,
                last_heartbeat_at: row.try_get("last_heartbeat_at")?,
                presence: None,
            })
        })
        .fetch_all(&store.db)
        .await
        .db()
}

pub(crate) async fn announce_worker(
    store: &PgStore,
    tenant: &str,
    worker_id: &str,
    a: &WorkerAnnouncement,
    max_live: u32,
) -> Result<DateTime<Utc>> {
    sqlx::query_scalar(ANNOUNCE_WORKER)
        .bind(tenant)
        .bind(worker_id)
        .bind(&a.queues)
        .bind(a.concurrency as i32)
        .bind(a.sdk.as_deref())
        .bind(a.version.as_deref())
        .bind(a.host.as_deref())
        .bind(a.pid.map(i64::from))
        .bind(WORKER_FORGET_AFTER_MS)
        .bind(i64::from(max_live))
        .fetch_optional(&store.db)
        .await
        .db()?
        .ok_or_else(|| Error::too_many_workers(max_live))
}

pub(crate) async fn touch_worker(store: &PgStore, tenant: &str, worker_id: &str) -> Result<()> {
    sqlx::query(TOUCH_WORKER)
        .bind(tenant)
        .bind(worker_id)
        .execute(&store.db)
        .await
        .db()?;
    Ok(())
}

pub(crate) async fn announced_workers(
    store: &PgStore,
    tenant: &str,
) -> Result<Vec<(String, WorkerPresence)>> {
    sqlx::query(ANNOUNCED_WORKERS)
        .bind(tenant)
        .bind(WORKER_FORGET_AFTER_MS)
        .try_map(|row: PgRow| {
            let concurrency: i32 = row.try_get("concurrency")?;
            let pid: Option<i64> = row.try_get("pid")?;
            Ok((
                row.try_get("worker_id")?,
                WorkerPresence {
                    announcement: WorkerAnnouncement {
                        queues: row.try_get("queues")?,
                        concurrency: concurrency as u32,
                        sdk: row.try_get("sdk")?,
                        version: row.try_get("version")?,
                        host: row.try_get("host")?,
                        pid: pid.map(|p| p as u32),
                    },
                    last_seen_at: row.try_get("last_seen_at")?,
                },
            ))
        })
        .fetch_all(&store.db)
        .await
        .db()
}
