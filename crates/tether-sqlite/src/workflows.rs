//! Jobs that wait for other jobs: the edges of new jobs, jobs entering
//! `waiting`, the wake-ups of jobs released, and a job's dependencies as
//! its handler reads them. A dependency's end releases or cancels what
//! waits for it by the triggers of migration 11, in the transaction of
//! whatever statement ended it.
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

use std::collections::{BTreeMap, HashSet};

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};
use tether_core::{Dependency, DependencyJob, Enqueued, Error, NewJobRef, Result};
use uuid::Uuid;

use crate::rows::{self, id_array, Db};
use crate::sql::enqueue::SELECT_JOBS;
use crate::sql::workflows::{
    DEPENDENCIES, ENTER_WAITING, FIND_JOBS, INSERT_EDGES, MARK_DEPENDED, SETTLE_COUNTS,
    SETTLE_DONE, SETTLE_EDGES, SETTLE_FATAL, SETTLE_STATES, TAKE_RELEASES,
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
    let mut existing: Vec<(Uuid, usize)> = Vec::new();
    for (i, (new, answer)) in jobs.iter().zip(answers.iter()).enumerate() {
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
                existing.push((id, i));
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
    let mut asked: Vec<String> = existing.iter().map(|(id, _)| id.to_string()).collect();
    asked.sort_unstable();
    asked.dedup();
    if !asked.is_empty() {
        let found: HashSet<String> = sqlx::query_scalar(FIND_JOBS)
            .bind(tenant)
            .bind(id_array(asked.iter().map(String::as_str)))
            .fetch_all(&mut *conn)
            .await
            .db()?
            .into_iter()
            .collect();
        if let Some((id, i)) = existing
            .iter()
            .find(|(id, _)| !found.contains(&id.to_string()))
        {
            let field = match jobs.len() {
                1 => "depends_on".to_owned(),
                _ => format!("jobs[{i}].depends_on"),
            };
            return Err(Error::invalid(field, format!("no job {id}")));
        }
    }
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
