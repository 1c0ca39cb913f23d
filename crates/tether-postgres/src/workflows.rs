//! Jobs that wait for other jobs: the edges of new jobs, jobs entering
//! `waiting`, and a job's dependencies as its handler reads them. A
//! dependency's end releases or cancels what waits for it by the trigger of
//! migration 13, in the transaction of whatever statement ended it.

use std::collections::HashSet;

use sqlx::Row;
use tether_core::{Dependency, DependencyJob, Enqueued, Error, JobState, NewJobRef, Result};
use uuid::Uuid;

use crate::exec::Conn;
use crate::rows::{self, Db};
use crate::sql::workflows::{
    ATTACH_DEPENDENCIES, DEPENDENCIES, LOCK_DEPENDENCIES, SETTLE_WAITING, WAITING_DEPENDENCIES,
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
    let found: HashSet<Uuid> = sqlx::query_scalar(LOCK_DEPENDENCIES)
        .bind(tenant)
        .bind(&asked)
        .fetch_all(&mut *conn)
        .await
        .db()?
        .into_iter()
        .collect();
    if let Some((id, i)) = existing.iter().find(|(id, _)| !found.contains(id)) {
        let field = match jobs.len() {
            1 => "depends_on".to_owned(),
            _ => format!("jobs[{i}].depends_on"),
        };
        return Err(Error::invalid(field, format!("no job {id}")));
    }
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
    sqlx::query(LOCK_DEPENDENCIES)
        .bind(tenant)
        .bind(&deps)
        .execute(&mut *conn)
        .await
        .db()?;
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
        .map(|row| {
            let state: String = row.try_get("state").db()?;
            let state = state
                .parse::<JobState>()
                .map_err(|e| rows::corrupt(format!("job state: {e}")))?;
            Ok((row.try_get("id").db()?, state))
        })
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
