//! Jobs that wait for other jobs: the edges of new jobs, jobs entering
//! `waiting`, and a job's dependencies as its handler reads them. A
//! dependency's end releases or cancels what waits for it by the
//! statement-level trigger of migration 16 (its function as migration 17
//! last wrote it), in the transaction of whatever statement ended it.
//!
//! Workflows: a new workflow's batch, appends to an unfinished one, its
//! graph, listing, cancel and retry. A workflow's state is derived from its
//! jobs when read (migration 14 says why).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::{
    AppendTarget, Dependency, DependencyJob, Enqueued, Error, JobState, NewJobRef, NewWorkflow,
    Result, RetryMode, StateCounts, Workflow, WorkflowCancelled, WorkflowEnqueued, WorkflowFilter,
    WorkflowGraph, WorkflowJob, WorkflowPage, MAX_WORKFLOW_JOBS,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::exec::Conn;
use crate::rows::{self, Db};
use crate::sql::workflows::{
    ANNOUNCE_IF_FINISHED, ATTACH_DEPENDENCIES, CANCEL_WORKFLOW, CHECK_APPENDS, DEPENDENCIES,
    INSERT_WORKFLOW, LIST_WORKFLOWS, LOCK_DEPENDENCIES, LOCK_WORKFLOW, RETRY_WORKFLOW,
    SETTLE_WAITING, WAITING_DEPENDENCIES, WORKFLOW, WORKFLOW_BY_KEY, WORKFLOW_CREATED,
    WORKFLOW_GRAPH, WORKFLOW_JOBS,
};
use crate::PgStore;

/// Gives the jobs an enqueue just created (on `conn`, inside its
/// transaction) their dependencies: locks the existing jobs they name
/// (an unknown one fails the whole enqueue), writes the edges and settles
/// the new jobs against what their dependencies are now. Updates
/// `answers` to the jobs' states. Does nothing for jobs without
/// dependencies, or that an existing job answered for.
pub(crate) async fn attach(
    conn: &mut Conn<'_>,
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
    let (mut edge_jobs, mut edge_deps) = (Vec::new(), Vec::new());
    let (mut waiting, mut rules) = (Vec::new(), Vec::new());
    let mut depended: Vec<Uuid> = Vec::new();
    let mut existing: Vec<(Uuid, usize)> = Vec::new();
    for (i, (new, answer)) in jobs.iter().zip(answers.iter()).enumerate() {
        if !answer.created || new.job.depends_on.is_empty() {
            continue;
        }
        for dep in &new.job.depends_on {
            // An earlier entry stands for the job it resolved to: the one
            // it created, or the existing one its key led to.
            let id = match *dep {
                Dependency::Job(id) => id,
                Dependency::Entry(e) => answers[e].job.id,
            };
            // An id and an entry may name the same job: one edge.
            if edge_jobs
                .iter()
                .zip(&edge_deps)
                .any(|(job, dep)| *job == answer.job.id && *dep == id)
            {
                continue;
            }
            if created.contains(&id) {
                depended.push(id);
            } else {
                existing.push((id, i));
            }
            edge_jobs.push(answer.job.id);
            edge_deps.push(id);
        }
        waiting.push(answer.job.id);
        rules.push(new.job.dependency_failure.as_str());
    }
    if waiting.is_empty() {
        return Ok(());
    }
    let mut asked: Vec<Uuid> = existing.iter().map(|(id, _)| *id).collect();
    asked.sort_unstable();
    asked.dedup();
    let found = lock_dependencies(conn, tenant, &asked).await?;
    // Entries that resolved to existing jobs were found by their keys.
    tether_core::check_found(
        jobs,
        |i| answers[i].created,
        |id| created.contains(&id) || found.contains_key(&id),
    )?;
    depended.sort_unstable();
    depended.dedup();
    sqlx::query(ATTACH_DEPENDENCIES)
        .bind(tenant)
        .bind(&edge_jobs)
        .bind(&edge_deps)
        .bind(&waiting)
        .bind(&rules)
        .bind(&depended)
        .execute(&mut *conn)
        .await
        .db()?;
    let settled = settle_on(conn, &waiting).await?;
    for answer in answers.iter_mut().filter(|a| a.created) {
        let id = answer.job.id;
        if let Some((_, state)) = settled.iter().find(|(job, _)| *job == id) {
            answer.job.state = *state;
        }
        answer.job.depends_on = edge_jobs
            .iter()
            .zip(&edge_deps)
            .filter(|(job, _)| **job == id)
            .map(|(_, dep)| *dep)
            .collect();
    }
    Ok(())
}

/// Locks the existing jobs `ids` (in id order) that new or replayed jobs of
/// `tenant` are about to wait for, until the transaction ends (see
/// `LOCK_DEPENDENCIES`); answers the state of each one found.
pub(crate) async fn lock_dependencies(
    conn: &mut Conn<'_>,
    tenant: &str,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, JobState>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(LOCK_DEPENDENCIES)
        .bind(tenant)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    rows.iter()
        .map(|row| Ok((row.try_get("id").db()?, rows::state(row)?)))
        .collect()
}

/// Settles jobs `ids` that a replay put back in `waiting`, on `conn` in
/// the replay's transaction: locks what they wait for, then settles them.
pub(crate) async fn enter_waiting(
    conn: &mut Conn<'_>,
    tenant: &str,
    ids: &[Uuid],
) -> Result<Vec<(Uuid, JobState)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let deps: Vec<Uuid> = sqlx::query_scalar(WAITING_DEPENDENCIES)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    lock_dependencies(conn, tenant, &deps).await?;
    settle_on(conn, ids).await
}

/// Settles jobs that just entered `waiting` (see `SETTLE_WAITING`), after
/// their dependencies were locked; answers each one's new state.
pub(crate) async fn settle_on(conn: &mut Conn<'_>, ids: &[Uuid]) -> Result<Vec<(Uuid, JobState)>> {
    let rows = sqlx::query(SETTLE_WAITING)
        .bind(ids)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    rows.iter()
        .map(|row| Ok((row.try_get("id").db()?, rows::state(row)?)))
        .collect()
}

/// See `Store::dependencies`.
pub(crate) async fn dependencies(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
) -> Result<Vec<DependencyJob>> {
    let found: Vec<DependencyJob> = sqlx::query(DEPENDENCIES)
        .bind(id)
        .bind(tenant)
        .try_map(|row| rows::job(&row))
        .fetch_all(&store.db)
        .await
        .db()?
        .into_iter()
        .map(DependencyJob::from)
        .collect();
    if found.is_empty() {
        // Tell "no dependencies" from "no such job".
        crate::jobs::get(store, tenant, id).await?;
    }
    Ok(found)
}

/// Checks, on `conn` inside the enqueue's transaction, that the workflows
/// the jobs join exist in the tenant, are unfinished and have room, and
/// holds them (share lock) until it ends. Errors name the first job that
/// joins the workflow at fault.
pub(crate) async fn check_appends(
    conn: &mut Conn<'_>,
    tenant: &str,
    jobs: &[NewJobRef<'_>],
) -> Result<()> {
    let ids = tether_core::appended_workflows(jobs);
    if ids.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query(CHECK_APPENDS)
        .bind(tenant)
        .bind(&ids)
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
        found.insert(row.try_get::<Uuid, _>("id").db()?, target);
    }
    tether_core::check_appends(jobs, &found)
}

/// See `Store::enqueue_workflow`.
pub(crate) async fn enqueue_workflow(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    workflow: &NewWorkflow,
    jobs: &[NewJobRef<'_>],
    max_queues: u32,
) -> Result<WorkflowEnqueued> {
    let mut tx = store.begin().await?;
    let out: Result<WorkflowEnqueued> = async {
        let inserted: Option<Uuid> = sqlx::query_scalar(INSERT_WORKFLOW)
            .bind(id)
            .bind(tenant)
            .bind(&workflow.name)
            .bind(workflow.idempotency_key.as_deref())
            .fetch_optional(&mut tx.conn())
            .await
            .db()?;
        if inserted.is_none() {
            // The key is taken: answer that workflow, write nothing.
            let existing: Uuid = sqlx::query_scalar(WORKFLOW_BY_KEY)
                .bind(tenant)
                .bind(workflow.idempotency_key.as_deref())
                .fetch_one(&mut tx.conn())
                .await
                .db()?;
            let found = sqlx::query(WORKFLOW_JOBS)
                .bind(existing)
                .bind(tenant)
                .bind(MAX_WORKFLOW_JOBS as i64)
                .try_map(|row| rows::job(&row))
                .fetch_all(&mut tx.conn())
                .await
                .db()?;
            let graph = read_graph(&mut tx.conn(), tenant, existing).await?;
            let jobs = found
                .into_iter()
                .map(|job| Enqueued {
                    job,
                    created: false,
                })
                .collect();
            return Ok(WorkflowEnqueued {
                workflow: graph.workflow,
                jobs,
                created: false,
            });
        }
        let answers = enqueue_on(&mut tx.conn(), tenant, jobs, Some(max_queues)).await?;
        // The first job the batch created in the workflow carries its
        // history events (a job an idempotency key answered is another's).
        let first = answers
            .iter()
            .find(|a| a.created && a.job.workflow_id == Some(id));
        if let Some(first) = first {
            sqlx::query(WORKFLOW_CREATED)
                .bind(id)
                .bind(&workflow.name)
                .bind(first.job.id)
                .execute(&mut tx.conn())
                .await
                .db()?;
            sqlx::query(ANNOUNCE_IF_FINISHED)
                .bind(id)
                .bind(first.job.id)
                .execute(&mut tx.conn())
                .await
                .db()?;
        }
        let graph = read_graph(&mut tx.conn(), tenant, id).await?;
        Ok(WorkflowEnqueued {
            workflow: graph.workflow,
            jobs: answers,
            created: true,
        })
    }
    .await;
    let out = tx.finish(out).await?;
    if out.created {
        store.notify_created(tenant, &out.jobs);
    }
    Ok(out)
}

/// See `Store::get_workflow`.
pub(crate) async fn get_workflow(store: &PgStore, tenant: &str, id: Uuid) -> Result<WorkflowGraph> {
    let mut tx = store.begin().await?;
    let out = read_graph(&mut tx.conn(), tenant, id).await;
    tx.finish(out).await
}

/// The workflow and its graph, read on `conn`.
async fn read_graph(conn: &mut Conn<'_>, tenant: &str, id: Uuid) -> Result<WorkflowGraph> {
    let row = sqlx::query(WORKFLOW)
        .bind(id)
        .bind(tenant)
        .fetch_optional(&mut *conn)
        .await
        .db()?
        .ok_or_else(|| Error::NotFound(format!("workflow {id}")))?;
    let jobs = sqlx::query(WORKFLOW_GRAPH)
        .bind(id)
        .bind(tenant)
        .bind(MAX_WORKFLOW_JOBS as i64)
        .fetch_all(&mut *conn)
        .await
        .db()?;
    let mut counts = StateCounts::default();
    let mut last: Option<DateTime<Utc>> = None;
    let mut graph = Vec::with_capacity(jobs.len());
    for job in &jobs {
        let state: String = job.try_get("state").db()?;
        let state = state.parse::<JobState>().map_err(rows::corrupt)?;
        counts.add(state, 1);
        let finished: Option<DateTime<Utc>> = job.try_get("finished_at").db()?;
        last = last.max(finished);
        graph.push(WorkflowJob {
            id: job.try_get("id").db()?,
            kind: job.try_get("kind").db()?,
            state,
            depends_on: job
                .try_get::<Option<Vec<Uuid>>, _>("depends_on")
                .db()?
                .unwrap_or_default(),
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
    row: &PgRow,
    counts: StateCounts,
    last_finished_at: Option<DateTime<Utc>>,
) -> Result<Workflow> {
    Ok(Workflow::judged(
        row.try_get("id").db()?,
        row.try_get("name").db()?,
        row.try_get("idempotency_key").db()?,
        row.try_get("created_at").db()?,
        counts,
        last_finished_at,
    ))
}

/// See `Store::list_workflows`: reads what `WorkflowFilter::scan` says,
/// newest first, and `WorkflowPage::of` makes the page.
pub(crate) async fn list_workflows(
    store: &PgStore,
    tenant: &str,
    filter: &WorkflowFilter,
) -> Result<WorkflowPage> {
    let rows = sqlx::query(LIST_WORKFLOWS)
        .bind(tenant)
        .bind(filter.name.as_deref())
        .bind(filter.cursor)
        .bind(i64::from(filter.scan()))
        .fetch_all(&store.db)
        .await
        .db()?;
    let mut scanned = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut counts = StateCounts::default();
        for state in JobState::ALL {
            let n: i64 = row.try_get(state.as_str()).db()?;
            counts.add(state, n);
        }
        scanned.push(workflow_of(
            row,
            counts,
            row.try_get("last_finished_at").db()?,
        )?);
    }
    Ok(WorkflowPage::of(filter, scanned))
}

/// See `Store::cancel_workflow`.
pub(crate) async fn cancel_workflow(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
) -> Result<WorkflowCancelled> {
    let mut tx = store.begin().await?;
    let out: Result<(i64, i64)> = async {
        lock_workflow(&mut tx.conn(), tenant, id).await?;
        let row = sqlx::query(CANCEL_WORKFLOW)
            .bind(id)
            .bind(tenant)
            .fetch_one(&mut tx.conn())
            .await
            .db()?;
        Ok((
            row.try_get("cancelled").db()?,
            row.try_get("cancel_requested").db()?,
        ))
    }
    .await;
    let (cancelled, cancel_requested) = tx.finish(out).await?;
    Ok(WorkflowCancelled {
        cancelled: cancelled as u64,
        cancel_requested: cancel_requested as u64,
    })
}

/// See `Store::retry_workflow`.
pub(crate) async fn retry_workflow(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    mode: RetryMode,
) -> Result<u64> {
    let mut tx = store.begin().await?;
    let out: Result<Vec<(Uuid, String)>> = async {
        lock_workflow(&mut tx.conn(), tenant, id).await?;
        let rows = sqlx::query(RETRY_WORKFLOW)
            .bind(id)
            .bind(tenant)
            .bind(mode == RetryMode::FailedAndDownstream)
            .fetch_all(&mut tx.conn())
            .await
            .map_err(|e| {
                if rows::is_unique_violation(&e) {
                    Error::Conflict(format!(
                        "a job of workflow {id} has a unique key that another active job \
                         holds; nothing was retried"
                    ))
                } else {
                    rows::db_err(e)
                }
            })?;
        let mut back = Vec::with_capacity(rows.len());
        let mut waiting = Vec::new();
        for row in &rows {
            let job: Uuid = row.try_get("id").db()?;
            let state: String = row.try_get("state").db()?;
            if state == JobState::Waiting.as_str() {
                waiting.push(job);
            }
            back.push((job, row.try_get("queue").db()?));
        }
        enter_waiting(&mut tx.conn(), tenant, &waiting).await?;
        Ok(back)
    }
    .await;
    let back = tx.finish(out).await?;
    let mut queues: Vec<&str> = back.iter().map(|(_, queue)| queue.as_str()).collect();
    queues.sort_unstable();
    queues.dedup();
    for queue in queues {
        store.notify(tenant, queue, back.len());
    }
    Ok(back.len() as u64)
}

/// Locks workflow `id` of the tenant for a cancel or retry; `NotFound` if
/// there is none.
async fn lock_workflow(conn: &mut Conn<'_>, tenant: &str, id: Uuid) -> Result<()> {
    sqlx::query(LOCK_WORKFLOW)
        .bind(id)
        .bind(tenant)
        .fetch_optional(&mut *conn)
        .await
        .db()?
        .ok_or_else(|| Error::NotFound(format!("workflow {id}")))?;
    Ok(())
}
