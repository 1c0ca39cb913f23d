//! Enqueue: one multi-row INSERT from arrays (UNNEST), whose duplicates are
//! refused by the partial unique indexes and then resolved to the jobs that
//! hold their keys.
//!
//! Queue rows and their limit: the INSERT adds jobs only to queues that
//! have a row. A batch naming a queue without one writes nothing and names
//! the missing queues; [`register_queues`] then creates them, counting the
//! tenant's queues under a per-tenant advisory lock so that concurrent
//! enqueues cannot pass the limit together, and the INSERT runs again. The
//! hot path (every queue known) costs no extra statement.
//!
//! Against the removal of empty queue rows (`prune_empty_queues`), the
//! INSERT holds the tenant's [`QUEUE_ROWS_LOCK`] in shared mode until its
//! transaction ends, and the removal holds it exclusively while it deletes:
//! a removal never sees a queue as empty while an enqueue is adding jobs to
//! it. An enqueue whose snapshot still showed a row that a removal deleted
//! meanwhile puts the row back (the `registered` step).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, Row};
use tether_core::{Backoff, Enqueued, Error, Job, JobState, NewJobRef, Result, RunAt};
use uuid::Uuid;

use crate::db_error;
use crate::rows::{self, job_columns};

/// First key of the per-tenant advisory lock (second key: the hash of the
/// tenant's name) that enqueues hold shared and the removal of empty queue
/// rows holds exclusively.
pub(crate) const QUEUE_ROWS_LOCK: i32 = 0x7465_7401;
/// First key of the per-tenant advisory lock that serialises the creation
/// of queue rows, so that the count against the limit is exact.
pub(crate) const QUEUE_CREATE_LOCK: i32 = 0x7465_7402;

/// Inserts a batch whose queues all have rows; otherwise inserts nothing
/// and answers the missing queues (rows with only `missing_queue` set).
/// `$17` is [`QUEUE_ROWS_LOCK`]. The lock is taken before any row is
/// written: both writes join `lk`.
const INSERT: &str = "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::smallint[],
                             $7::timestamptz[], $8::bigint[], $9::int[], $10::bigint[], $11::bigint[],
                             $12::bigint[], $13::text[], $14::text[], $15::jsonb[], $16::timestamptz[])
            WITH ORDINALITY
            AS t(id, queue, kind, payload, priority, run_at, delay_ms, max_attempts,
                 backoff_base_ms, backoff_cap_ms, timeout_ms, idempotency_key, unique_key,
                 tags, expires_at, ord)
    ),
    missing AS (
        SELECT DISTINCT i.queue FROM input i
        WHERE NOT EXISTS (SELECT 1 FROM tether.queues q WHERE q.tenant = $1 AND q.name = i.queue)
    ),
    lk AS (
        SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock_shared($17, hashtext($1))) l
        WHERE NOT EXISTS (SELECT 1 FROM missing)
    ),
    registered AS (
        INSERT INTO tether.queues (tenant, name)
        SELECT $1, q.name FROM tether.queues q CROSS JOIN lk
        WHERE q.tenant = $1 AND q.name IN (SELECT queue FROM input)
        ON CONFLICT DO NOTHING
    ),
    inserted AS (
        INSERT INTO tether.jobs AS j (id, tenant, queue, kind, payload, state, priority, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
            unique_key, idempotency_key, tags, expires_at, timeout_ms)
        SELECT i.id, $1, i.queue, i.kind, i.payload, 'queued', i.priority, 0,
            COALESCE(i.max_attempts, q.max_attempts, 5),
            COALESCE(i.backoff_base_ms, q.backoff_base_ms, 1000),
            COALESCE(i.backoff_cap_ms, q.backoff_cap_ms, 3600000),
            COALESCE(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
            now(), now(), i.unique_key, i.idempotency_key,
            ARRAY(SELECT jsonb_array_elements_text(i.tags)), i.expires_at, i.timeout_ms
        FROM input i
        CROSS JOIN lk
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = i.queue
        ORDER BY i.ord
        ON CONFLICT DO NOTHING
        -- Only what the database decided: the rest of the job is the input,
        -- and sending the payload back would cost a JSON parse per job.
        RETURNING j.id, j.tenant, j.max_attempts, j.backoff_base_ms, j.backoff_cap_ms, j.run_at,
                  j.created_at, j.expires_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, created_at, 'enqueued', 0 FROM inserted
    )
    SELECT id, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, expires_at,
           NULL::text AS missing_queue
    FROM inserted
    UNION ALL
    SELECT NULL::uuid, NULL::int, NULL::bigint, NULL::bigint, NULL::timestamptz,
           NULL::timestamptz, NULL::timestamptz, queue
    FROM missing";

/// How many queue rows tenant `$1` has, and how many of the names `$2` have
/// none.
const COUNT_QUEUES: &str = "SELECT
        (SELECT count(*) FROM tether.queues WHERE tenant = $1) AS existing,
        (SELECT count(*) FROM UNNEST($2::text[]) AS n(name)
         WHERE NOT EXISTS (SELECT 1 FROM tether.queues q WHERE q.tenant = $1 AND q.name = n.name))
            AS missing";

/// Creates the rows of queues `$2` of tenant `$1` (default settings).
const CREATE_QUEUES: &str = "INSERT INTO tether.queues (tenant, name)
    SELECT $1, name FROM UNNEST($2::text[]) AS n(name)
    ON CONFLICT DO NOTHING";

/// Creates the rows of `names` in one (sub)transaction on `conn`, holding
/// the tenant's [`QUEUE_CREATE_LOCK`] so that the count is exact; with
/// `max`, `LimitReached` (and nothing created) if the tenant would have more
/// than `max` queue rows. On a connection inside a transaction the lock is
/// held until that transaction ends.
pub(crate) async fn register_queues(
    conn: &mut PgConnection,
    tenant: &str,
    names: &[&str],
    max: Option<u32>,
) -> Result<()> {
    let mut tx = conn.begin().await.map_err(db_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(QUEUE_CREATE_LOCK)
        .bind(tenant)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    if let Some(max) = max {
        let row = sqlx::query(COUNT_QUEUES)
            .bind(tenant)
            .bind(names)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        let existing: i64 = row.try_get("existing").map_err(db_error)?;
        let missing: i64 = row.try_get("missing").map_err(db_error)?;
        if missing > 0 && existing + missing > i64::from(max) {
            return Err(Error::too_many_queues(max));
        }
    }
    sqlx::query(CREATE_QUEUES)
        .bind(tenant)
        .bind(names)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)
}

const EXISTING: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs j
      WHERE j.tenant = $1
        AND (j.idempotency_key = ANY($2)
             OR (j.unique_key = ANY($3) AND j.state IN ('queued', 'running')))"
);

/// How often a batch retries the entries whose conflicting job vanished
/// between the insert and the lookup (it finished, or was pruned).
const MAX_ROUNDS: usize = 8;

/// Enqueues validated jobs on `conn`, which may be inside the caller's own
/// transaction: the jobs then exist if and only if that transaction commits.
/// New queues are created within `max_queues` (`None`: a schedule's run,
/// bounded by the schedule limit instead).
pub(crate) async fn enqueue_on(
    conn: &mut PgConnection,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    max_queues: Option<u32>,
) -> Result<Vec<Enqueued>> {
    let mut answers: Vec<Option<Enqueued>> = vec![None; jobs.len()];
    let mut pending: Vec<usize> = (0..jobs.len()).collect();
    // Which entry created which job: an entry behaves as if enqueued after
    // the entries before it, so it may resolve to a job created by an earlier
    // entry of the batch, never by a later one.
    let created_by: HashMap<Uuid, usize> =
        jobs.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
    for _ in 0..MAX_ROUNDS {
        let batch: Vec<NewJobRef<'_>> = pending.iter().map(|&i| jobs[i]).collect();
        let (inserted, missing) = insert(conn, tenant, &batch).await?;
        if !missing.is_empty() {
            // Nothing was written: create the queues, then go again.
            let names: Vec<&str> = missing.iter().map(String::as_str).collect();
            register_queues(conn, tenant, &names, max_queues).await?;
            continue;
        }
        let mut by_id: HashMap<Uuid, Job> = inserted.into_iter().map(|j| (j.id, j)).collect();
        pending.retain(|&i| match by_id.remove(&jobs[i].id) {
            Some(job) => {
                answers[i] = Some(Enqueued { job, created: true });
                false
            }
            None => true,
        });
        if pending.is_empty() {
            break;
        }
        // Each remaining entry lost to a key held by an existing job (or by
        // an earlier entry of this batch): return that job.
        let idempotency: Vec<&str> = pending
            .iter()
            .filter_map(|&i| jobs[i].job.idempotency_key.as_deref())
            .collect();
        let unique: Vec<&str> = pending
            .iter()
            .filter_map(|&i| jobs[i].job.unique_key.as_deref())
            .collect();
        let existing: Vec<Job> = sqlx::query(EXISTING)
            .bind(tenant)
            .bind(&idempotency)
            .bind(&unique)
            .try_map(|row| rows::job(&row))
            .fetch_all(&mut *conn)
            .await
            .map_err(db_error)?;
        pending.retain(|&i| {
            let new = jobs[i].job;
            let visible = |j: &&Job| created_by.get(&j.id).is_none_or(|&k| k < i);
            let by_key = new.idempotency_key.as_deref().and_then(|key| {
                existing
                    .iter()
                    .filter(visible)
                    .find(|j| j.idempotency_key.as_deref() == Some(key))
            });
            let by_unique = || {
                new.unique_key.as_deref().and_then(|key| {
                    existing
                        .iter()
                        .filter(visible)
                        .find(|j| j.unique_key.as_deref() == Some(key) && !j.state.is_terminal())
                })
            };
            match by_key.or_else(by_unique) {
                Some(job) => {
                    answers[i] = Some(Enqueued {
                        job: job.clone(),
                        created: false,
                    });
                    false
                }
                None => true,
            }
        });
        if pending.is_empty() {
            break;
        }
    }
    if !pending.is_empty() {
        return Err(Error::enqueue_kept_racing(pending.len()));
    }
    Ok(answers.into_iter().map(|a| a.expect("resolved")).collect())
}

/// One INSERT round: the jobs created, or (nothing written) the queues of
/// the batch that have no row.
async fn insert(
    conn: &mut PgConnection,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
) -> Result<(Vec<Job>, Vec<String>)> {
    let n = jobs.len();
    let mut ids = Vec::with_capacity(n);
    let mut queues = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut payloads: Vec<&Value> = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut run_ats: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(n);
    let mut delays: Vec<i64> = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut bases = Vec::with_capacity(n);
    let mut caps = Vec::with_capacity(n);
    let mut timeouts = Vec::with_capacity(n);
    let mut idempotency = Vec::with_capacity(n);
    let mut unique = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut expires = Vec::with_capacity(n);
    for r in jobs {
        let job = r.job;
        ids.push(r.id);
        queues.push(job.queue.as_str());
        kinds.push(job.kind.as_str());
        payloads.push(&job.payload);
        priorities.push(job.priority);
        let (at, delay) = match job.run_at {
            RunAt::Now => (None, 0),
            RunAt::At(at) => (Some(at), 0),
            RunAt::Delay(ms) => (None, ms),
        };
        run_ats.push(at);
        delays.push(delay);
        max_attempts.push(job.max_attempts);
        bases.push(job.backoff.map(|b| b.base_ms));
        caps.push(job.backoff.map(|b| b.cap_ms));
        timeouts.push(job.timeout_ms);
        idempotency.push(job.idempotency_key.as_deref());
        unique.push(job.unique_key.as_deref());
        tags.push(Value::from(job.tags.clone()));
        expires.push(job.expires_at);
    }
    let rows = sqlx::query(INSERT)
        .bind(tenant)
        .bind(&ids)
        .bind(&queues)
        .bind(&kinds)
        .bind(&payloads)
        .bind(&priorities)
        .bind(&run_ats)
        .bind(&delays)
        .bind(&max_attempts)
        .bind(&bases)
        .bind(&caps)
        .bind(&timeouts)
        .bind(&idempotency)
        .bind(&unique)
        .bind(&tags)
        .bind(&expires)
        .bind(QUEUE_ROWS_LOCK)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_error)?;
    let by_id: HashMap<Uuid, &NewJobRef<'_>> = jobs.iter().map(|r| (r.id, r)).collect();
    let mut created = Vec::with_capacity(rows.len());
    let mut missing = Vec::new();
    for row in &rows {
        if let Some(queue) = row
            .try_get::<Option<String>, _>("missing_queue")
            .map_err(db_error)?
        {
            missing.push(queue);
            continue;
        }
        let id: Uuid = row.try_get("id").map_err(db_error)?;
        let new = by_id
            .get(&id)
            .ok_or(sqlx::Error::RowNotFound)
            .map_err(db_error)?;
        created.push(created_job(tenant, new, row).map_err(db_error)?);
    }
    Ok((created, missing))
}

/// The job an insert created: the input plus what the database decided.
fn created_job(tenant: &str, new: &NewJobRef<'_>, row: &PgRow) -> Result<Job, sqlx::Error> {
    let job = new.job;
    let created_at: DateTime<Utc> = row.try_get("created_at")?;
    Ok(Job {
        id: new.id,
        tenant: tenant.to_owned(),
        queue: job.queue.clone(),
        kind: job.kind.clone(),
        payload: job.payload.clone(),
        result: None,
        state: JobState::Queued,
        priority: job.priority,
        attempt: 0,
        max_attempts: row.try_get("max_attempts")?,
        backoff: Backoff {
            base_ms: row.try_get("backoff_base_ms")?,
            cap_ms: row.try_get("backoff_cap_ms")?,
        },
        run_at: row.try_get("run_at")?,
        created_at,
        started_at: None,
        finished_at: None,
        updated_at: created_at,
        last_error: None,
        unique_key: job.unique_key.clone(),
        idempotency_key: job.idempotency_key.clone(),
        tags: job.tags.clone(),
        expires_at: row.try_get("expires_at")?,
        timeout_ms: job.timeout_ms,
        cancel_requested: false,
        worker_id: None,
        lease_expires_at: None,
        heartbeat_at: None,
        progress: None,
    })
}
