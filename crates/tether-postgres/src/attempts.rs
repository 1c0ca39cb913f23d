//! What a worker does with a job: claim it, heartbeat it, and end the
//! attempt with complete, fail or snooze. Every report is fenced by the
//! lease token in the same statement that applies it (see `sql::attempts`);
//! a report repeated after its answer was lost is answered like the first.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::lifecycle::Report;
use tether_core::{
    ClaimRequest, ClaimedJob, Completion, Error, Failure, Heartbeat, HeartbeatAck, Job, JobState,
    LeaseToken, Result,
};
use uuid::Uuid;

use crate::rows::{self, Db};
use crate::sql::attempts::{CLAIM, COMPLETE, COMPLETE_MANY, FAIL, HEARTBEAT_MANY, SNOOZE};
use crate::PgStore;

pub(crate) async fn claim(
    store: &PgStore,
    tenant: &str,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedJob>> {
    sqlx::query(CLAIM)
        .bind(tenant)
        .bind(&req.queue)
        .bind(i64::from(req.limit))
        .bind(req.lease_ttl_ms)
        .bind(&req.worker_id)
        .try_map(|row: PgRow| {
            Ok(ClaimedJob {
                job: rows::job(&row)?,
                lease_token: rows::lease_token(&row)?,
            })
        })
        .fetch_all(&store.pool)
        .await
        .db()
}

pub(crate) async fn heartbeat_many(
    store: &PgStore,
    tenant: &str,
    items: &[Heartbeat],
) -> Result<Vec<Result<HeartbeatAck>>> {
    let ids: Vec<Uuid> = items.iter().map(|h| h.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|h| h.lease_token.0).collect();
    let ttls: Vec<Option<i64>> = items.iter().map(|h| h.lease_ttl_ms).collect();
    let progress: Vec<Option<&Value>> = items.iter().map(|h| h.progress.as_ref()).collect();
    let rows = sqlx::query(HEARTBEAT_MANY)
        .bind(tenant)
        .bind(&ids)
        .bind(&tokens)
        .bind(&ttls)
        .bind(&progress)
        .fetch_all(&store.pool)
        .await
        .db()?;
    // Extended leases carry the token that extended them and the new
    // expiry; lost ones carry neither; any other id is not a job of this
    // tenant. An item is answered by its own token (see `complete_many`).
    let mut extended: HashMap<(Uuid, Uuid), HeartbeatAck> = HashMap::with_capacity(rows.len());
    let mut known: HashSet<Uuid> = HashSet::with_capacity(rows.len());
    for row in &rows {
        let id: Uuid = row.try_get("id").db()?;
        let token: Option<Uuid> = row.try_get("token").db()?;
        let expires: Option<chrono::DateTime<chrono::Utc>> =
            row.try_get("lease_expires_at").db()?;
        if let (Some(token), Some(lease_expires_at)) = (token, expires) {
            let ack = HeartbeatAck {
                lease_expires_at,
                cancel_requested: row.try_get("cancel_requested").db()?,
            };
            extended.insert((id, token), ack);
        }
        known.insert(id);
    }
    Ok(items
        .iter()
        .map(|h| match extended.get(&(h.id, h.lease_token.0)) {
            Some(ack) => Ok(*ack),
            None if known.contains(&h.id) => Err(Error::LeaseLost(h.id)),
            None => Err(Error::JobNotFound(h.id)),
        })
        .collect())
}

pub(crate) async fn complete(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    result: Option<&Value>,
) -> Result<Job> {
    let row = sqlx::query(COMPLETE)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(result)
        .bind(Report::Complete.outcome_names())
        .fetch_one(&store.pool)
        .await
        .db()?;
    fenced_job(row, id)
}

pub(crate) async fn complete_many(
    store: &PgStore,
    tenant: &str,
    items: &[Completion],
) -> Result<Vec<Result<()>>> {
    let ids: Vec<Uuid> = items.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|c| c.lease_token.0).collect();
    let results: Vec<Option<&Value>> = items.iter().map(|c| c.result.as_ref()).collect();
    let rows = sqlx::query(COMPLETE_MANY)
        .bind(tenant)
        .bind(&ids)
        .bind(&tokens)
        .bind(&results)
        .fetch_all(&store.pool)
        .await
        .db()?;
    // The statement names the completed jobs with the token that did it
    // and the ones whose lease was lost (no token); any other id is not
    // a job of this tenant. An item is answered by its own token, so a
    // wrong token beside the right one for the same job is refused.
    let mut done: HashSet<(Uuid, Uuid)> = HashSet::with_capacity(rows.len());
    let mut known: HashSet<Uuid> = HashSet::with_capacity(rows.len());
    for row in &rows {
        let id: Uuid = row.try_get("id").db()?;
        if let Some(token) = row.try_get::<Option<Uuid>, _>("token").db()? {
            done.insert((id, token));
        }
        known.insert(id);
    }
    Ok(items
        .iter()
        .map(|c| {
            if done.contains(&(c.id, c.lease_token.0)) {
                Ok(())
            } else if known.contains(&c.id) {
                Err(Error::LeaseLost(c.id))
            } else {
                Err(Error::JobNotFound(c.id))
            }
        })
        .collect())
}

pub(crate) async fn fail(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    failure: &Failure,
    jitter: f64,
) -> Result<Job> {
    let row = sqlx::query(FAIL)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(&failure.error)
        .bind(failure.retry_after_ms)
        .bind(failure.fatal)
        .bind(failure.cancelled)
        .bind(jitter)
        .bind(Report::Fail.outcome_names())
        .fetch_one(&store.pool)
        .await
        .db()?;
    fenced_job(row, id)
}

pub(crate) async fn snooze(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    delay_ms: i64,
) -> Result<Job> {
    let row = sqlx::query(SNOOZE)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(delay_ms)
        .bind(Report::Snooze.outcome_names())
        .fetch_one(&store.pool)
        .await
        .db()?;
    let job = fenced_job(row, id)?;
    if delay_ms == 0 && job.state == JobState::Queued {
        // Handed back (e.g. by a worker shutting down): others may take it now.
        store.notify(tenant, &job.queue, 1);
    }
    Ok(job)
}

/// Interprets the answer of a fenced statement that returns the job's
/// columns (NULL when the fence failed) and a `lost` count.
fn fenced_job(row: PgRow, id: Uuid) -> Result<Job> {
    let found: Option<Uuid> = row.try_get("id").db()?;
    if found.is_some() {
        return rows::job(&row).db();
    }
    let lost: i64 = row.try_get("lost").db()?;
    Err(if lost > 0 {
        Error::LeaseLost(id)
    } else {
        Error::JobNotFound(id)
    })
}
