//! Enqueue: the queues' rows first (so the INSERT can read their
//! settings), then multi-row INSERTs in chunks of prepared sizes, whose
//! duplicates are skipped by the unique indexes and then resolved to the
//! jobs that hold their keys; all in one write transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Value};
use sqlx::{Row, Sqlite, SqliteConnection};
use tether_core::{
    Enqueued, Error, GraphPlan, Job, NewJobRef, PlannedJob, QueueConfig, Result, RunAt,
};
use uuid::Uuid;

use crate::rows::{self, id_array, to_json_text, Db};
use crate::sql::enqueue::{
    insert_jobs_sql, COUNT_QUEUES, DUPLICATE_CANDIDATES, ENQUEUED_EVENTS, INSERT_CHUNKS,
    REGISTER_QUEUES, SELECT_JOBS,
};
use crate::{SqliteStore, Tx};

/// See `Store::enqueue`: one write transaction; the hints go out after it.
pub(crate) async fn enqueue(
    store: &SqliteStore,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    max_queues: u32,
) -> Result<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = store.begin().await?;
    crate::workflows::check_appends(&mut tx, tenant, jobs).await?;
    let out = enqueue_on(&mut tx, tenant, jobs, Some(max_queues)).await?;
    tx.commit().await.db()?;
    store.notify_created(tenant, &out);
    Ok(out)
}

/// Enqueues on an open write transaction: the whole of `Store::enqueue`
/// except the commit and the wake-up hints, so that a schedule can record a
/// run and enqueue its job atomically. The caller commits, then sends the
/// hints (see [`SqliteStore::notify_created`]).
///
/// New queue rows are refused (with the whole enqueue) when they would give
/// the tenant more than `max_queues`; `None` (a schedule's run, bounded by
/// the schedule limit instead) registers without limit.
pub(crate) async fn enqueue_on(
    tx: &mut Tx,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    max_queues: Option<u32>,
) -> Result<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let conn: &mut SqliteConnection = tx;
    let defaults = QueueConfig::default();
    let queues: BTreeSet<&str> = jobs.iter().map(|r| r.job.queue.as_str()).collect();
    let queues = id_array(queues);

    // Register the queues first so the INSERT can read their defaults.
    let registered = sqlx::query(REGISTER_QUEUES)
        .bind(tenant)
        .bind(queues)
        .bind(defaults.max_attempts)
        .bind(defaults.backoff.base_ms)
        .bind(defaults.backoff.cap_ms)
        .bind(defaults.default_lease_ttl_ms)
        .execute(&mut *conn)
        .await
        .db()?;
    // Counted only when a queue is new (never on the hot path), under the
    // write lock, so concurrent enqueues cannot pass the limit together;
    // the caller's transaction rolls the rows back with the error.
    if let Some(max) = max_queues {
        if registered.rows_affected() > 0 {
            check_queue_count(conn, tenant, max).await?;
        }
    }
    // A graph without keys is judged first and written once (every entry
    // creates its job); see `tether_core::GraphPlan`.
    let plan = if GraphPlan::applies(jobs) {
        let existing: Vec<String> = GraphPlan::existing(jobs)
            .iter()
            .map(Uuid::to_string)
            .collect();
        let found = crate::workflows::find_dependencies(conn, tenant, &existing).await?;
        GraphPlan::of(jobs, &found)?
    } else {
        None
    };
    let mut created: HashMap<Uuid, Job> = HashMap::with_capacity(jobs.len());
    let mut next = 0;
    while next < jobs.len() {
        let rows = INSERT_CHUNKS
            .into_iter()
            .find(|&n| n <= jobs.len() - next)
            .unwrap_or(1);
        let mut query = sqlx::query(insert_jobs_sql(rows, plan.is_some()))
            .bind(tenant)
            .bind(defaults.max_attempts)
            .bind(defaults.backoff.base_ms)
            .bind(defaults.backoff.cap_ms);
        for (ordinal, entry) in jobs.iter().enumerate().skip(next).take(rows) {
            query = bind_entry(query, ordinal, entry)?;
            if let Some(plan) = &plan {
                query = bind_planned(query, &plan.jobs[ordinal], entry);
            }
        }
        let inserted = query.bind(tenant).fetch_all(&mut *conn).await.db()?;
        for row in &inserted {
            let job = rows::job(row)?;
            created.insert(job.id, job);
        }
        next += rows;
    }
    if !created.is_empty() {
        let ids: Vec<String> = created.keys().map(Uuid::to_string).collect();
        sqlx::query(ENQUEUED_EVENTS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .execute(&mut *conn)
            .await
            .db()?;
    }

    // The entry that created each new job, to judge duplicates in batch
    // order.
    let created_by: HashMap<Uuid, usize> = jobs
        .iter()
        .enumerate()
        .filter(|(_, entry)| created.contains_key(&entry.id))
        .map(|(idx, entry)| (entry.id, idx))
        .collect();
    let mut out: Vec<Option<Enqueued>> = Vec::with_capacity(jobs.len());
    let mut duplicates = Vec::new();
    for (idx, entry) in jobs.iter().enumerate() {
        match created.remove(&entry.id) {
            Some(job) => out.push(Some(Enqueued { job, created: true })),
            None => {
                out.push(None);
                duplicates.push(json!({
                    "idx": idx,
                    "ik": entry.job.idempotency_key,
                    "uk": entry.job.unique_key,
                }));
            }
        }
    }
    if !duplicates.is_empty() {
        let candidates = sqlx::query(DUPLICATE_CANDIDATES)
            .bind(tenant)
            .bind(Value::Array(duplicates).to_string())
            .fetch_all(&mut *conn)
            .await
            .db()?;
        // Each entry resolves against the jobs that existed when its turn
        // came (the batch is inserted in order): a job this batch created
        // from a *later* entry does not count. The idempotency key wins
        // over the unique key.
        let mut resolved: Vec<(usize, Uuid)> = Vec::with_capacity(candidates.len());
        for row in &candidates {
            let idx: i64 = row.try_get("idx").db()?;
            let idx = usize::try_from(idx)
                .map_err(|_| rows::corrupt(format!("duplicate resolution index {idx}")))?;
            let existed_then = |id: Option<&str>| -> Result<Option<Uuid>> {
                let Some(id) = id else { return Ok(None) };
                let id = rows::uuid(id)?;
                Ok(match created_by.get(&id) {
                    Some(&creator) if creator > idx => None,
                    _ => Some(id),
                })
            };
            let by_idempotency = existed_then(row.try_get("ik_id").db()?)?;
            let found = match by_idempotency {
                Some(id) => Some(id),
                None => existed_then(row.try_get("uk_id").db()?)?,
            };
            if let Some(id) = found {
                resolved.push((idx, id));
            }
        }
        let ids: Vec<String> = resolved.iter().map(|(_, id)| id.to_string()).collect();
        let existing = sqlx::query(SELECT_JOBS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .fetch_all(&mut *conn)
            .await
            .db()?;
        let existing: HashMap<Uuid, Job> = existing
            .iter()
            .map(|row| rows::job(row).map(|job| (job.id, job)))
            .collect::<Result<_>>()?;
        for (idx, id) in resolved {
            if let (Some(slot), Some(job)) = (out.get_mut(idx), existing.get(&id)) {
                *slot = Some(Enqueued {
                    job: job.clone(),
                    created: false,
                });
            }
        }
    }
    // Every entry must have an answer before anything is committed.
    let mut out = out
        .into_iter()
        .zip(jobs)
        .map(|(answer, entry)| {
            answer.ok_or_else(|| {
                rows::corrupt(format!(
                    "job {} was neither inserted nor matched an existing job",
                    entry.id
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    match plan {
        Some(plan) => crate::workflows::attach_planned(conn, jobs, &plan).await?,
        None => crate::workflows::attach(conn, tenant, jobs, &mut out).await?,
    }
    Ok(out)
}

/// Binds the [`GRAPH_PARAMS`] of a planned row (see `insert_jobs_sql`).
fn bind_planned<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    planned: &PlannedJob,
    entry: &'q NewJobRef<'q>,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    let depends_on = (!planned.depends_on.is_empty()).then(|| {
        let ids: Vec<String> = planned.depends_on.iter().map(Uuid::to_string).collect();
        id_array(ids.iter().map(String::as_str))
    });
    query
        .bind(planned.state.as_str())
        .bind(i64::from(planned.waiting_on))
        .bind(planned.has_dependents)
        .bind(entry.job.dependency_failure.as_str())
        .bind(depends_on)
}

/// Binds one enqueued row's `ROW_PARAMS` values (see `insert_jobs_sql`).
fn bind_entry<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    ordinal: usize,
    entry: &'q NewJobRef<'q>,
) -> Result<sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>> {
    let job = entry.job;
    let (run_at, delay) = match job.run_at {
        RunAt::Now => (None, None),
        RunAt::At(at) => (Some(at.timestamp_millis()), None),
        RunAt::Delay(ms) => (None, Some(ms)),
    };
    let tags = serde_json::to_string(&job.tags).map_err(|e| Error::Storage(Box::new(e)))?;
    Ok(query
        .bind(ordinal as i64)
        .bind(entry.id.to_string())
        .bind(job.queue.as_str())
        .bind(job.kind.as_str())
        .bind(to_json_text(&job.payload)?)
        .bind(job.priority)
        .bind(run_at)
        .bind(delay)
        .bind(job.max_attempts)
        .bind(job.backoff.map(|b| b.base_ms))
        .bind(job.backoff.map(|b| b.cap_ms))
        .bind(job.timeout_ms)
        .bind(job.idempotency_key.as_deref())
        .bind(job.unique_key.as_deref())
        .bind(tags)
        .bind(job.expires_at.map(|at| at.timestamp_millis()))
        .bind(job.concurrency_key.as_deref())
        .bind(job.workflow_id.map(|id| id.to_string()))
        .bind(headers_text(&job.headers)?))
}

/// A job's headers as stored: a JSON object, NULL for none.
fn headers_text(headers: &BTreeMap<String, String>) -> Result<Option<String>> {
    if headers.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(headers)
        .map(Some)
        .map_err(|e| Error::Storage(Box::new(e)))
}

/// `LimitReached` if tenant has more than `max` queue rows (counted on the
/// open write transaction, after its inserts).
async fn check_queue_count(conn: &mut SqliteConnection, tenant: &str, max: u32) -> Result<()> {
    let n: i64 = sqlx::query_scalar(COUNT_QUEUES)
        .bind(tenant)
        .fetch_one(conn)
        .await
        .db()?;
    if n > i64::from(max) {
        return Err(Error::too_many_queues(max));
    }
    Ok(())
}
