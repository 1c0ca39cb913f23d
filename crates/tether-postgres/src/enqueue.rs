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

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use tether_core::{
    Backoff, Enqueued, Error, GraphPlan, Job, JobState, Limits, NewJob, NewJobRef, Result, RunAt,
};
use uuid::Uuid;

use crate::exec::Conn;
use crate::rows::{self, Db};
use crate::sql::enqueue::{
    COUNT_QUEUES, DUPLICATE_CANDIDATES, INSERT_GRAPH, INSERT_JOBS, INSERT_KEYED_JOBS,
    REGISTER_QUEUES,
};
use crate::sql::LOCK_TENANT;
use crate::{notify, PgStore};

/// First key of the per-tenant advisory lock (second key: the hash of the
/// tenant's name) that enqueues hold shared and the removal of empty queue
/// rows holds exclusively.
pub(crate) const QUEUE_ROWS_LOCK: i32 = 0x7465_7401;

/// First key of the per-tenant advisory lock that serialises the creation
/// of queue rows, so that the count against the limit is exact.
pub(crate) const QUEUE_CREATE_LOCK: i32 = 0x7465_7402;

// 0x7465_7403 is `schedules::SCHEDULE_CREATE_LOCK`; 0x7465_7404 (written
// 1952805892) is taken in SQL by `tether.announce_finished_workflows`
// (migration 19), per workflow.

/// How often a batch retries the entries whose conflicting job vanished
/// between the insert and the lookup (it finished, or was pruned).
const MAX_ROUNDS: usize = 8;

/// See `Store::enqueue`: one statement where one is enough (see below), a
/// transaction otherwise; the hints go out after it.
pub(crate) async fn enqueue(
    store: &PgStore,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    max_queues: u32,
) -> Result<Vec<Enqueued>> {
    // Without idempotency or unique keys no entry can lose to another job,
    // so the jobs are written by exactly one statement (later rounds only
    // run if the first wrote nothing; creating queue rows is a transaction
    // of its own before), which is all-or-nothing without a transaction:
    // two round trips fewer. A single job is the same with keys.
    // Dependencies take more statements (see `workflows::attach`).
    let one_statement = jobs
        .iter()
        .all(|r| r.job.depends_on.is_empty() && r.job.workflow_id.is_none())
        && (jobs.len() == 1
            || jobs
                .iter()
                .all(|r| r.job.idempotency_key.is_none() && r.job.unique_key.is_none()));
    let answers = if one_statement && !store.db.pooled() {
        // (Behind a transaction pooler every statement needs one.)
        let mut conn = store.db.raw().acquire().await.db()?;
        enqueue_on(&mut Conn::direct(&mut conn), tenant, jobs, Some(max_queues)).await?
    } else {
        // A batch may take several rounds when it races with other
        // enqueues; the transaction keeps it all-or-nothing across them.
        let mut tx = store.begin().await?;
        let out = async {
            crate::workflows::check_appends(&mut tx.conn(), tenant, jobs).await?;
            enqueue_on(&mut tx.conn(), tenant, jobs, Some(max_queues)).await
        }
        .await;
        tx.finish(out).await?
    };
    store.notify_created(tenant, &answers);
    Ok(answers)
}

/// Enqueues jobs on the caller's own connection or transaction, so that on
/// a transaction the jobs exist if and only if it commits (the business write
/// and its jobs stand or fall together).
///
/// Validates exactly as [`tether_core::Engine::enqueue_many`] does. The
/// wake-up hint is a `pg_notify` inside the same transaction, which
/// PostgreSQL delivers only at commit; workers also poll, so a rolled-back or
/// missed hint costs at most one poll interval.
pub async fn enqueue_in(
    conn: &mut PgConnection,
    tenant: &str,
    jobs: &[NewJob],
    limits: &Limits,
) -> Result<Vec<Enqueued>> {
    tether_core::validate::name("tenant", tenant)?;
    tether_core::validate::new_jobs(jobs, limits)?;
    let mut conn = Conn::direct(conn);
    let jobs = NewJobRef::mint(jobs);
    crate::workflows::check_appends(&mut conn, tenant, &jobs).await?;
    let answers = enqueue_on(&mut conn, tenant, &jobs, Some(limits.max_queues_per_tenant)).await?;
    notify::notify_in(&mut conn, tenant, &answers).await?;
    Ok(answers)
}

/// Creates the rows of `names` in one (sub)transaction on `conn`, holding
/// the tenant's [`QUEUE_CREATE_LOCK`] so that the count is exact; with
/// `max`, `LimitReached` (and nothing created) if the tenant would have more
/// than `max` queue rows. On a connection inside a transaction the lock is
/// held until that transaction ends.
pub(crate) async fn register_queues(
    conn: &mut Conn<'_>,
    tenant: &str,
    names: &[&str],
    max: Option<u32>,
) -> Result<()> {
    let mut tx = conn.begin().await.db()?;
    sqlx::query(LOCK_TENANT)
        .bind(QUEUE_CREATE_LOCK)
        .bind(tenant)
        .execute(&mut tx.conn())
        .await
        .db()?;
    if let Some(max) = max {
        let row = sqlx::query(COUNT_QUEUES)
            .bind(tenant)
            .bind(names)
            .fetch_one(&mut tx.conn())
            .await
            .db()?;
        let existing: i64 = row.try_get("existing").db()?;
        let missing: i64 = row.try_get("missing").db()?;
        if missing > 0 && existing + missing > i64::from(max) {
            return Err(Error::too_many_queues(max));
        }
    }
    sqlx::query(REGISTER_QUEUES)
        .bind(tenant)
        .bind(names)
        .execute(&mut tx.conn())
        .await
        .db()?;
    tx.commit().await.db()
}

/// Enqueues validated jobs on `conn`, which may be inside the caller's own
/// transaction: the jobs then exist if and only if that transaction commits.
/// New queues are created within `max_queues` (`None`: a schedule's run,
/// bounded by the schedule limit instead).
pub(crate) async fn enqueue_on(
    conn: &mut Conn<'_>,
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
    // A graph without keys is judged first and written once (every entry
    // creates its job, so no later round applies the plan to fewer).
    let plan = if GraphPlan::applies(jobs) {
        let existing = GraphPlan::existing(jobs);
        let found = crate::workflows::lock_dependencies(conn, tenant, &existing).await?;
        GraphPlan::of(jobs, &found)?
    } else {
        None
    };
    for _ in 0..MAX_ROUNDS {
        let batch: Vec<NewJobRef<'_>> = pending.iter().map(|&i| jobs[i]).collect();
        let (inserted, missing) = insert(conn, tenant, &batch, plan.as_ref()).await?;
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
        let existing: Vec<Job> = sqlx::query(DUPLICATE_CANDIDATES)
            .bind(tenant)
            .bind(&idempotency)
            .bind(&unique)
            .try_map(|row| rows::job(&row))
            .fetch_all(&mut *conn)
            .await
            .db()?;
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
    let mut answers: Vec<Enqueued> = answers.into_iter().map(|a| a.expect("resolved")).collect();
    match plan {
        Some(plan) => {
            for (answer, planned) in answers.iter_mut().zip(plan.jobs) {
                answer.job.state = planned.state;
                answer.job.depends_on = planned.depends_on;
            }
        }
        None => crate::workflows::attach(conn, tenant, jobs, &mut answers).await?,
    }
    Ok(answers)
}

/// One INSERT round: the jobs created, or (nothing written) the queues of
/// the batch that have no row. With `plan` (for exactly these `jobs`), each
/// job is written in the state it enters, with its edges.
async fn insert(
    conn: &mut Conn<'_>,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    plan: Option<&GraphPlan>,
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
    let mut keys = Vec::with_capacity(n);
    let mut workflows: Vec<Option<Uuid>> = Vec::with_capacity(n);
    let mut headers: Vec<Option<Value>> = Vec::with_capacity(n);
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
        keys.push(job.concurrency_key.as_deref());
        workflows.push(job.workflow_id);
        headers.push(headers_json(&job.headers));
    }
    let keyed = jobs
        .iter()
        .any(|r| r.job.idempotency_key.is_some() || r.job.unique_key.is_some());
    let statement = match (plan, keyed) {
        (Some(_), _) => INSERT_GRAPH,
        (None, true) => INSERT_KEYED_JOBS,
        (None, false) => INSERT_JOBS,
    };
    let query = sqlx::query(statement)
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
        .bind(&keys)
        .bind(&workflows)
        .bind(&headers);
    let query = match plan {
        Some(plan) => {
            debug_assert_eq!(plan.jobs.len(), n, "a plan covers the whole batch");
            let waiting_on: Vec<i32> = plan.jobs.iter().map(|p| p.waiting_on as i32).collect();
            let depended: Vec<bool> = plan.jobs.iter().map(|p| p.has_dependents).collect();
            let rules: Vec<&str> = jobs
                .iter()
                .map(|r| r.job.dependency_failure.as_str())
                .collect();
            let edge_jobs: Vec<Uuid> = plan.edges.iter().map(|e| e.job).collect();
            let edge_deps: Vec<Uuid> = plan.edges.iter().map(|e| e.depends_on).collect();
            let edge_met: Vec<bool> = plan.edges.iter().map(|e| e.met).collect();
            query
                .bind(waiting_on)
                .bind(depended)
                .bind(rules)
                .bind(edge_jobs)
                .bind(edge_deps)
                .bind(edge_met)
        }
        None => query,
    };
    let rows = query.fetch_all(&mut *conn).await.db()?;
    let by_id: HashMap<Uuid, &NewJobRef<'_>> = jobs.iter().map(|r| (r.id, r)).collect();
    let mut created = Vec::with_capacity(rows.len());
    let mut missing = Vec::new();
    for row in &rows {
        if let Some(queue) = row.try_get::<Option<String>, _>("missing_queue").db()? {
            missing.push(queue);
            continue;
        }
        let id: Uuid = row.try_get("id").db()?;
        let new = by_id.get(&id).ok_or(sqlx::Error::RowNotFound).db()?;
        created.push(created_job(tenant, new, row).db()?);
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
        concurrency_key: job.concurrency_key.clone(),
        timeout_ms: job.timeout_ms,
        cancel_requested: false,
        worker_id: None,
        lease_expires_at: None,
        heartbeat_at: None,
        progress: None,
        depends_on: Vec::new(),
        dependency_failure: job.dependency_failure,
        workflow_id: job.workflow_id,
        headers: job.headers.clone(),
    })
}

/// A job's headers as stored: a JSON object, NULL for none (most jobs:
/// nothing stored).
fn headers_json(headers: &BTreeMap<String, String>) -> Option<Value> {
    if headers.is_empty() {
        return None;
    }
    Some(Value::Object(
        headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    ))
}
