//! Jobs that wait for other jobs: the edges of new jobs, jobs entering
//! `waiting`, the wake-ups of jobs released, and a job's dependencies as
//! its handler reads them. A dependency's end releases or cancels what
//! waits for it by the triggers of migration 11 (as migrations 13 and 14
//! last wrote them), in the transaction of whatever statement ended it.
//!
//! Wake-ups: PostgreSQL's trigger sends `pg_notify` for the jobs it
//! releases; SQLite's hints are in-process (`SqliteStore::notify`), which a
//! trigger cannot reach. So the trigger writes one row per released job to
//! `tether_job_releases`, and the write that ended jobs drains it
//! ([`take_released`]) before its commit and sends the hints after (not
//! before: a claim looks for ready jobs on a reader connection first, which
//! would not see them yet). Only a write that may have released something
//! drains: the statements that end jobs return `has_dependents` (in
//! `job_columns!`, or beside their ids), so the hot path of jobs nobody
//! waits for runs no statement more. (sqlx's update hook could tell the
//! same without the column, but it is called for every row every write
//! changes, and is lost whenever the pool reopens the connection.)
//!
//! Workflows: a new workflow's batch, appends to an unfinished one, its
//! graph, listing, cancel and retry. A workflow's state is derived from its
//! jobs when read (migration 12 says why).

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, Row, SqliteConnection};
use tether_core::{
    AppendTarget, Dependency, DependencyJob, Enqueued, Error, GraphPlan, JobState, NewJobRef,
    NewWorkflow, Result, RetryMode, StateCounts, Workflow, WorkflowCancelled, WorkflowEnqueued,
    WorkflowFilter, WorkflowGraph, WorkflowJob, WorkflowPage, MAX_WORKFLOW_JOBS,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::rows::{self, id_array, Db};
use crate::sql::enqueue::SELECT_JOBS;
use crate::sql::jobs::REPLAYED_EVENTS;
use crate::sql::workflows::{
    list_workflows_sql, CANCEL_WORKFLOW, CANCEL_WORKFLOW_EDGES, CANCEL_WORKFLOW_EVENTS,
    CHECK_APPENDS, DEPENDENCIES, ENTER_WAITING, FIND_JOBS, FINISHED_AT_CREATION, INSERT_EDGES,
    INSERT_PLANNED_EDGES, INSERT_WORKFLOW, MARK_DEPENDED, QUEUED_BY_QUEUE, RETRY_WORKFLOW,
    SETTLE_COUNTS, SETTLE_DONE, SETTLE_EDGES, SETTLE_FATAL, SETTLE_STATES, TAKE_RELEASES, WORKFLOW,
    WORKFLOW_BY_KEY, WORKFLOW_CREATED, WORKFLOW_GRAPH, WORKFLOW_JOBS,
};
use crate::SqliteStore;

/// Jobs released in a transaction, by tenant and queue: the hints to send
/// after its commit ([`SqliteStore::notify_released`]).
pub(crate) type Released = BTreeMap<(String, String), usize>;

/// Gives the jobs an enqueue just created (on `conn`, inside its write
/// transaction) their dependencies: checks that the existing jobs they
/// name are the tenant's (an unknown one fails the whole enqueue, which the
/// caller then rolls back), writes the edges and settles the new jobs
/// against what their dependencies are now. Updates `answers` to the jobs
/// as they then stand. Does nothing for jobs without dependencies, or that
/// an existing job answered for.
pub(crate) async fn attach(
    conn: &mut SqliteConnection,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
    answers: &mut [Enqueued],
) -> Result<()> {
    if jobs.iter().all(|r| r.job.depends_on.is_empty()) {
        return Ok(());
    }
    let created: HashSet<Uuid> = answers
        .iter()
        .filter(|a| a.created)
        .map(|a| a.job.id)
        .collect();
    let mut edges: Vec<String> = Vec::new();
    let mut entering: Vec<serde_json::Value> = Vec::new();
    let mut waiting: Vec<String> = Vec::new();
    let mut depended: Vec<String> = Vec::new();
    let mut existing: Vec<Uuid> = Vec::new();
    for (new, answer) in jobs.iter().zip(answers.iter()) {
        if !answer.created || new.job.depends_on.is_empty() {
            continue;
        }
        let job = answer.job.id.to_string();
        let mut deps: Vec<Uuid> = Vec::with_capacity(new.job.depends_on.len());
        for dep in &new.job.depends_on {
            // An earlier entry stands for the job it resolved to: the one
            // it created, or the existing one its key led to.
            let id = match *dep {
                Dependency::Job(id) => id,
                Dependency::Entry(e) => answers[e].job.id,
            };
            // A job and an entry that resolved to it are one dependency.
            if deps.contains(&id) {
                continue;
            }
            deps.push(id);
            if !created.contains(&id) {
                existing.push(id);
            }
            depended.push(id.to_string());
            edges.push(job.clone());
            edges.push(id.to_string());
        }
        let dep_ids: Vec<String> = deps.iter().map(Uuid::to_string).collect();
        let deps_text = id_array(dep_ids.iter().map(String::as_str));
        entering.push(job.clone().into());
        entering.push(new.job.dependency_failure.as_str().into());
        entering.push(deps_text.into());
        waiting.push(job);
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let mut asked: Vec<String> = existing.iter().map(Uuid::to_string).collect();
    asked.sort_unstable();
    asked.dedup();
    let found = find_dependencies(conn, tenant, &asked).await?;
    // Entries that resolved to existing jobs were found by their keys.
    tether_core::check_found(
        jobs,
        |i| answers[i].created,
        |id| created.contains(&id) || found.contains_key(&id),
    )?;
    depended.sort_unstable();
    depended.dedup();
    sqlx::query(MARK_DEPENDED)
        .bind(id_array(depended.iter().map(String::as_str)))
        .execute(&mut *conn)
        .await
        .db()?;
    sqlx::query(INSERT_EDGES)
        .bind(serde_json::to_string(&edges).map_err(|e| Error::Storage(Box::new(e)))?)
        .execute(&mut *conn)
        .await
        .db()?;
    sqlx::query(ENTER_WAITING)
        .bind(serde_json::Value::Array(entering).to_string())
        .execute(&mut *conn)
        .await
        .db()?;
    settle(conn, &waiting).await?;
    // Whatever the settling released is a job of this batch, answered
    // below (and hinted as created): the rows are not needed.
    take_released(conn, &mut Released::new()).await?;
    // Read back: settling (and what it cancelled in turn) moved them.
    let rows = sqlx::query(SELECT_JOBS)
        .bind(id_array(waiting.iter().map(String::as_str)))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    for row in &rows {
        let job = rows::job(row)?;
        if let Some(answer) = answers.iter_mut().find(|a| a.created && a.job.id == job.id) {
            answer.job = job;
        }
    }
    Ok(())
}

/// The jobs among `ids` that `tenant` has, each with its state (no lock
/// needed: the caller's write transaction holds SQLite's write lock, so
/// none can end before it commits).
pub(crate) async fn find_dependencies(
    conn: &mut SqliteConnection,
    tenant: &str,
    ids: &[String],
) -> Result<HashMap<Uuid, JobState>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(FIND_JOBS)
        .bind(tenant)
        .bind(id_array(ids.iter().map(String::as_str)))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    rows.iter()
        .map(|row| {
            let id = rows::uuid(row.try_get("id").db()?)?;
            let state: &str = row.try_get("state").db()?;
            Ok((id, state.parse().map_err(rows::corrupt)?))
        })
        .collect()
}

/// Writes the edges of a batch inserted by `plan` (its jobs already in the
/// states they enter), and marks the existing jobs they wait for as
/// waited for.
pub(crate) async fn attach_planned(
    conn: &mut SqliteConnection,
    jobs: &[NewJobRef<'_>],
    plan: &GraphPlan,
) -> Result<()> {
    let existing: Vec<String> = GraphPlan::existing(jobs)
        .iter()
        .map(Uuid::to_string)
        .collect();
    if !existing.is_empty() {
        sqlx::query(MARK_DEPENDED)
            .bind(id_array(existing.iter().map(String::as_str)))
            .execute(&mut *conn)
            .await
            .db()?;
    }
    let mut edges: Vec<serde_json::Value> = Vec::with_capacity(plan.edges.len() * 3);
    for edge in &plan.edges {
        edges.push(edge.job.to_string().into());
        edges.push(edge.depends_on.to_string().into());
        edges.push(i64::from(edge.met).into());
    }
    sqlx::query(INSERT_PLANNED_EDGES)
        .bind(serde_json::Value::Array(edges).to_string())
        .execute(&mut *conn)
        .await
        .db()?;
    Ok(())
}

/// Settles jobs `ids` that just entered `waiting` (enqueued, or replayed)
/// against their dependencies as they stand now: see `SETTLE_EDGES`,
/// `SETTLE_FATAL`, `SETTLE_COUNTS`, `SETTLE_STATES`. The caller reads where
/// they ended.
pub(crate) async fn settle(conn: &mut SqliteConnection, ids: &[String]) -> Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let ids = id_array(ids.iter().map(String::as_str));
    for sql in [SETTLE_EDGES, SETTLE_FATAL, SETTLE_COUNTS, SETTLE_STATES] {
        sqlx::query(sql).bind(&ids).execute(&mut *conn).await.db()?;
    }
    sqlx::query(SETTLE_DONE).execute(&mut *conn).await.db()?;
    Ok(())
}

/// Adds the jobs the trigger released in this transaction to `released`,
/// and empties `tether_job_releases` (see the module's comment). Call it
/// before the commit of a write that ended a job with dependents.
pub(crate) async fn take_released(
    conn: &mut SqliteConnection,
    released: &mut Released,
) -> Result<()> {
    let rows = sqlx::query(TAKE_RELEASES)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    for row in &rows {
        let tenant: String = row.try_get("tenant").db()?;
        let queue: String = row.try_get("queue").db()?;
        *released.entry((tenant, queue)).or_default() += 1;
    }
    Ok(())
}

/// [`take_released`] when any of `ended` (rows of jobs a statement just
/// ended, holding `has_dependents`) is of a job others wait for; nothing
/// otherwise: the hot path.
pub(crate) async fn take_released_after(
    conn: &mut SqliteConnection,
    ended: &[SqliteRow],
    released: &mut Released,
) -> Result<()> {
    for row in ended {
        if rows::has_dependents(row)? {
            return take_released(conn, released).await;
        }
    }
    Ok(())
}

impl SqliteStore {
    /// After commit: hints the queues of the jobs `released` (see
    /// [`take_released`]).
    pub(crate) fn notify_released(&self, released: &Released) {
        for ((tenant, queue), jobs) in released {
            self.notify(tenant, queue, *jobs);
        }
    }
}

/// See `Store::dependencies`.
pub(crate) async fn dependencies(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
) -> Result<Vec<DependencyJob>> {
    let mut conn = store.reader.acquire().await.db()?;
    let rows = sqlx::query(DEPENDENCIES)
        .bind(id.to_string())
        .bind(tenant)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let found = rows
        .iter()
        .map(|row| rows::job(row).map(DependencyJob::from))
        .collect::<Result<Vec<_>>>()?;
    if found.is_empty() {
        // Tell "no dependencies" from "no such job" (same connection, but
        // not the same snapshot: a job pruned in between reads as gone).
        crate::jobs::fetch_job(&mut conn, tenant, id).await?;
    }
    Ok(found)
}

/// Checks, on `conn` inside the enqueue's write transaction, that the
/// workflows the jobs join exist in the tenant, are unfinished and have
/// room (the write lock holds them so until the commit). Errors name the
/// first job that joins the workflow at fault.
pub(crate) async fn check_appends(
    conn: &mut SqliteConnection,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
) -> Result<()> {
    let ids = tether_core::appended_workflows(jobs);
    if ids.is_empty() {
        return Ok(());
    }
    let texts: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    let rows = sqlx::query(CHECK_APPENDS)
        .bind(tenant)
        .bind(id_array(texts.iter().map(String::as_str)))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut found = HashMap::with_capacity(rows.len());
    for row in &rows {
        let held: i64 = row.try_get("jobs").db()?;
        let target = AppendTarget {
            jobs: held.max(0) as u64,
            open: row.try_get("open").db()?,
        };
        found.insert(rows::uuid(row.try_get("id").db()?)?, target);
    }
    tether_core::check_appends(jobs, &found)
}

/// See `Store::enqueue_workflow`.
pub(crate) async fn enqueue_workflow(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    workflow: &NewWorkflow,
    jobs: &[NewJobRef<'_>],
    max_queues: u32,
) -> Result<WorkflowEnqueued> {
    let mut tx = store.begin().await?;
    let inserted: Option<String> = sqlx::query_scalar(INSERT_WORKFLOW)
        .bind(id.to_string())
        .bind(tenant)
        .bind(&workflow.name)
        .bind(workflow.idempotency_key.as_deref())
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    if inserted.is_none() {
        // The key is taken: answer that workflow, write nothing.
        let existing: String = sqlx::query_scalar(WORKFLOW_BY_KEY)
            .bind(tenant)
            .bind(workflow.idempotency_key.as_deref())
            .fetch_one(&mut *tx)
            .await
            .db()?;
        let found = sqlx::query(WORKFLOW_JOBS)
            .bind(&existing)
            .bind(tenant)
            .bind(MAX_WORKFLOW_JOBS as i64)
            .fetch_all(&mut *tx)
            .await
            .db()?;
        let found = found.iter().map(rows::job).collect::<Result<Vec<_>>>()?;
        let graph = read_graph(&mut tx, tenant, rows::uuid(&existing)?).await?;
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(WorkflowEnqueued {
            workflow: graph.workflow,
            jobs: found
                .into_iter()
                .map(|job| Enqueued {
                    job,
                    created: false,
                })
                .collect(),
            created: false,
        });
    }
    let answers = enqueue_on(&mut tx, tenant, jobs, Some(max_queues)).await?;
    // The first job the batch created in the workflow carries its history
    // events (a job an idempotency key answered is another's).
    let first = answers
        .iter()
        .find(|a| a.created && a.job.workflow_id == Some(id));
    if let Some(first) = first {
        sqlx::query(FINISHED_AT_CREATION)
            .bind(id.to_string())
            .bind(first.job.id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
        sqlx::query(WORKFLOW_CREATED)
            .bind(id.to_string())
            .bind(&workflow.name)
            .bind(first.job.id.to_string())
            .execute(&mut *tx)
            .await
            .db()?;
    }
    let graph = read_graph(&mut tx, tenant, id).await?;
    tx.commit().await.db()?;
    store.notify_created(tenant, &answers);
    Ok(WorkflowEnqueued {
        workflow: graph.workflow,
        jobs: answers,
        created: true,
    })
}

/// See `Store::get_workflow`: one read transaction, so the workflow and
/// its graph come from one snapshot.
pub(crate) async fn get_workflow(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
) -> Result<WorkflowGraph> {
    let mut conn = store.reader.acquire().await.db()?;
    let mut tx = conn.begin().await.db()?;
    let graph = read_graph(&mut tx, tenant, id).await?;
    tx.rollback().await.db()?;
    Ok(graph)
}

/// The workflow and its graph, read on `conn`.
async fn read_graph(conn: &mut SqliteConnection, tenant: &str, id: Uuid) -> Result<WorkflowGraph> {
    let key = id.to_string();
    let row = sqlx::query(WORKFLOW)
        .bind(&key)
        .bind(tenant)
        .fetch_optional(&mut *conn)
        .await
        .db()?
        .ok_or_else(|| Error::NotFound(format!("workflow {id}")))?;
    let jobs = sqlx::query(WORKFLOW_GRAPH)
        .bind(&key)
        .bind(tenant)
        .bind(MAX_WORKFLOW_JOBS as i64)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut counts = StateCounts::default();
    let mut last: Option<DateTime<Utc>> = None;
    let mut graph = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let state: &str = job.try_get("state").db()?;
        let state = state.parse::<JobState>().map_err(rows::corrupt)?;
        counts.add(state, 1);
        last = last.max(rows::opt_ts(job.try_get("finished_at").db()?)?);
        graph.push(WorkflowJob {
            id: rows::uuid(job.try_get("id").db()?)?,
            kind: job.try_get("kind").db()?,
            state,
            depends_on: rows::id_list(job.try_get("depends_on").db()?)?,
        });
    }
    Ok(WorkflowGraph {
        workflow: workflow_of(&row, counts, last)?,
        jobs: graph,
    })
}

/// A workflow from its row (`id`, `name`, `idempotency_key`,
/// `created_at`), its jobs' counts and their latest end.
fn workflow_of(
    row: &SqliteRow,
    counts: StateCounts,
    last_finished_at: Option<DateTime<Utc>>,
) -> Result<Workflow> {
    Ok(Workflow::judged(
        rows::uuid(row.try_get("id").db()?)?,
        row.try_get("name").db()?,
        row.try_get("idempotency_key").db()?,
        rows::ts(row.try_get("created_at").db()?)?,
        counts,
        last_finished_at,
    ))
}

/// See `Store::list_workflows`: reads what `WorkflowFilter::scan` says,
/// newest first, and `WorkflowPage::of` makes the page.
pub(crate) async fn list_workflows(
    store: &SqliteStore,
    tenant: &str,
    filter: &WorkflowFilter,
) -> Result<WorkflowPage> {
    let sql = list_workflows_sql(filter.name.is_some(), filter.cursor.is_some());
    let mut conn = store.reader.acquire().await.db()?;
    let rows = sqlx::query(sql)
        .bind(tenant)
        .bind(filter.name.as_deref())
        .bind(filter.cursor.map(|id| id.to_string()))
        .bind(i64::from(filter.scan()))
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut scanned = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut counts = StateCounts::default();
        for state in JobState::ALL {
            let n: i64 = row.try_get(state.as_str()).db()?;
            counts.add(state, n);
        }
        let last = rows::opt_ts(row.try_get("last_finished_at").db()?)?;
        scanned.push(workflow_of(row, counts, last)?);
    }
    Ok(WorkflowPage::of(filter, scanned))
}

/// See `Store::cancel_workflow`: what waits for the jobs cancelled outside
/// the workflow is moved by the trigger (see `CANCEL_WORKFLOW_EDGES`), and
/// hinted after the commit when released.
pub(crate) async fn cancel_workflow(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
) -> Result<WorkflowCancelled> {
    let mut tx = store.begin().await?;
    find_workflow(&mut tx, tenant, id).await?;
    let key = id.to_string();
    sqlx::query(CANCEL_WORKFLOW_EDGES)
        .bind(&key)
        .bind(tenant)
        .execute(&mut *tx)
        .await
        .db()?;
    let moved = sqlx::query(CANCEL_WORKFLOW)
        .bind(&key)
        .bind(tenant)
        .fetch_all(&mut *tx)
        .await
        .db()?;
    if moved.is_empty() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(WorkflowCancelled::default());
    }
    let mut done = WorkflowCancelled::default();
    let mut ids = Vec::with_capacity(moved.len());
    let mut depended = false;
    for row in &moved {
        if row.try_get::<&str, _>("state").db()? == JobState::Cancelled.as_str() {
            done.cancelled += 1;
            depended |= rows::has_dependents(row)?;
        } else {
            done.cancel_requested += 1;
        }
        ids.push(row.try_get::<String, _>("id").db()?);
    }
    sqlx::query(CANCEL_WORKFLOW_EVENTS)
        .bind(id_array(ids.iter().map(String::as_str)))
        .execute(&mut *tx)
        .await
        .db()?;
    let mut released = Released::new();
    if depended {
        take_released(&mut tx, &mut released).await?;
    }
    tx.commit().await.db()?;
    store.notify_released(&released);
    Ok(done)
}

/// See `Store::retry_workflow`.
pub(crate) async fn retry_workflow(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    mode: RetryMode,
) -> Result<u64> {
    let mut tx = store.begin().await?;
    find_workflow(&mut tx, tenant, id).await?;
    let replayed = sqlx::query(RETRY_WORKFLOW)
        .bind(id.to_string())
        .bind(tenant)
        .bind(mode == RetryMode::FailedAndDownstream)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| {
            if rows::is_unique_violation(&e) {
                Error::Conflict(format!(
                    "a job of workflow {id} has a unique key that another active job holds; \
                     nothing was retried"
                ))
            } else {
                rows::db_err(e)
            }
        })?;
    if replayed.is_empty() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(0);
    }
    let mut ids = Vec::with_capacity(replayed.len());
    let mut waiting = Vec::new();
    for row in &replayed {
        let job: String = row.try_get("id").db()?;
        if row.try_get::<&str, _>("state").db()? == JobState::Waiting.as_str() {
            waiting.push(job.clone());
        }
        ids.push(job);
    }
    let ids = id_array(ids.iter().map(String::as_str));
    // Settled after the `replayed` events, so that a job cancelled at once
    // for a failed dependency has its `cancelled` event after them.
    sqlx::query(REPLAYED_EVENTS)
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .db()?;
    if !waiting.is_empty() {
        settle(&mut tx, &waiting).await?;
        // What settling moved in turn is among these jobs (see `attach`):
        // counted below.
        take_released(&mut tx, &mut Released::new()).await?;
    }
    let ready = sqlx::query(QUEUED_BY_QUEUE)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await
        .db()?;
    tx.commit().await.db()?;
    for row in &ready {
        let queue: &str = row.try_get("queue").db()?;
        let n: i64 = row.try_get("n").db()?;
        store.notify(tenant, queue, n as usize);
    }
    Ok(replayed.len() as u64)
}

/// Workflow `id` of the tenant, before a cancel or retry (under the write
/// lock, which PostgreSQL's `LOCK_WORKFLOW` stands for); `NotFound` if
/// there is none.
async fn find_workflow(conn: &mut SqliteConnection, tenant: &str, id: Uuid) -> Result<()> {
    sqlx::query(WORKFLOW)
        .bind(id.to_string())
        .bind(tenant)
        .fetch_optional(&mut *conn)
        .await
        .db()?
        .ok_or_else(|| Error::NotFound(format!("workflow {id}")))?;
    Ok(())
}
