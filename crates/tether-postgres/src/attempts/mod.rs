//! What a worker does with a job: claim it, heartbeat it, and end the
//! attempt with complete, fail or snooze. Every report is fenced by the
//! lease token in the same statement that applies it (see `sql::attempts`);
//! one it did not apply is answered by `SETTLE`, which reads the job under
//! lock: a repeat of the report that ended the attempt is answered like the
//! first, a different report is a conflict, and `lease_lost` means another
//! owner took the job.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::lifecycle::{Report, Standing};
use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completed, Completion, Error, Failure, Heartbeat,
    HeartbeatAck, JobState, LeaseToken, Reported, Result, StoredClaim,
};
use uuid::Uuid;

use crate::exec::Runner;
use crate::rows::{self, Db};
use crate::sql::attempts::{
    CLAIM, CLAIM_BY_KEY, CLAIM_RESERVED, COMPLETE, COMPLETE_MANY, FAIL, HEARTBEAT_MANY,
    HEARTBEAT_ONE, LOCK_QUEUE_LIMITS, RESERVE, SETTLE, SNOOZE,
};
use crate::PgStore;

mod claim;

pub(crate) use claim::{claim, report_and_claim, KeyGroups};

pub(crate) async fn heartbeat_many(
    store: &PgStore,
    tenant: &str,
    items: &[Heartbeat],
) -> Result<Vec<Result<HeartbeatAck>>> {
    let mut extended: HashMap<(Uuid, Uuid), HeartbeatAck> = HashMap::with_capacity(items.len());
    let mut known: HashSet<Uuid> = HashSet::with_capacity(items.len());
    let busy = extend_leases(
        store,
        HEARTBEAT_MANY,
        tenant,
        items,
        &mut extended,
        &mut known,
    )
    .await?;
    // Jobs another statement held (their completion, a cancel request):
    // each again on its own, waiting for its row this time.
    for id in busy {
        let mine: Vec<Heartbeat> = items.iter().filter(|h| h.id == id).cloned().collect();
        extend_leases(
            store,
            HEARTBEAT_ONE,
            tenant,
            &mine,
            &mut extended,
            &mut known,
        )
        .await?;
    }
    // Extended leases carry the token that extended them and the new
    // expiry; lost ones carry neither; any other id is not a job of this
    // tenant. An item is answered by its own token (see `complete_many`).
    Ok(items
        .iter()
        .map(|h| match extended.get(&(h.id, h.lease_token.0)) {
            Some(ack) => Ok(*ack),
            None if known.contains(&h.id) => Err(Error::LeaseLost(h.id)),
            None => Err(Error::JobNotFound(h.id)),
        })
        .collect())
}

/// Runs `sql` (`HEARTBEAT_MANY` or `HEARTBEAT_ONE`) over `items`, adding
/// what it answered to `extended` and `known`; answers the busy ids.
async fn extend_leases(
    store: &PgStore,
    sql: &str,
    tenant: &str,
    items: &[Heartbeat],
    extended: &mut HashMap<(Uuid, Uuid), HeartbeatAck>,
    known: &mut HashSet<Uuid>,
) -> Result<Vec<Uuid>> {
    let ids: Vec<Uuid> = items.iter().map(|h| h.id).collect();
    let tokens: Vec<Uuid> = items.iter().map(|h| h.lease_token.0).collect();
    let ttls: Vec<Option<i64>> = items.iter().map(|h| h.lease_ttl_ms).collect();
    let progress: Vec<Option<&Value>> = items.iter().map(|h| h.progress.as_ref()).collect();
    let rows = sqlx::query(sql)
        .bind(tenant)
        .bind(&ids)
        .bind(&tokens)
        .bind(&ttls)
        .bind(&progress)
        .fetch_all(&store.db)
        .await
        .db()?;
    let mut busy = Vec::new();
    for row in &rows {
        let id: Uuid = row.try_get("id").db()?;
        if row.try_get::<bool, _>("busy").db()? {
            busy.push(id);
            continue;
        }
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
    Ok(busy)
}

pub(crate) async fn complete(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    result: Option<&Value>,
) -> Result<Reported> {
    let report = Report::Complete(result);
    let row = sqlx::query(COMPLETE)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(result)
        .bind(report.digest())
        .fetch_optional(&store.db)
        .await
        .db()?;
    let reported = match row {
        Some(row) => Reported {
            job: rows::job(&row).db()?,
            now: true,
        },
        None => settle(&mut Runner::Pool(&store.db), tenant, id, token, report).await?,
    };
    store.notify_freed(tenant, &reported.job.queue, 1);
    Ok(reported)
}

pub(crate) async fn complete_many(
    store: &PgStore,
    tenant: &str,
    items: &[Completion],
) -> Result<Vec<Result<Completed>>> {
    let (answers, ended) = complete_many_on(&mut Runner::Pool(&store.db), tenant, items).await?;
    for (queue, jobs) in ended {
        store.notify_freed(tenant, &queue, jobs);
    }
    Ok(answers)
}

/// Completes a batch on `db`; answers each item and how many jobs of each
/// queue it ended (for the caller's hints after the commit).
async fn complete_many_on(
    db: &mut Runner<'_>,
    tenant: &str,
    items: &[Completion],
) -> Result<(Vec<Result<Completed>>, HashMap<String, usize>)> {
    // In id order, so the fenced update locks its rows in that order (see
    // `COMPLETE_MANY`); the answers follow the caller's order below.
    let mut sorted: Vec<&Completion> = items.iter().collect();
    sorted.sort_by_key(|c| c.id);
    let ids: Vec<Uuid> = sorted.iter().map(|c| c.id).collect();
    let tokens: Vec<Uuid> = sorted.iter().map(|c| c.lease_token.0).collect();
    let results: Vec<Option<&Value>> = sorted.iter().map(|c| c.result.as_ref()).collect();
    let digests: Vec<String> = sorted
        .iter()
        .map(|c| Report::Complete(c.result.as_ref()).digest())
        .collect();
    let rows = sqlx::query(COMPLETE_MANY)
        .bind(tenant)
        .bind(&ids)
        .bind(&tokens)
        .bind(&results)
        .bind(&digests)
        .fetch_all(&mut *db)
        .await
        .db()?;
    // The jobs the batch completed now, as they stand, and what the item
    // that completed each answers (the first item that repeats it gets it).
    let mut done: HashMap<Uuid, (Standing, Option<Completed>)> = HashMap::with_capacity(rows.len());
    let mut ended: HashMap<String, usize> = HashMap::new();
    for row in &rows {
        let queue: String = row.try_get("queue").db()?;
        *ended.entry(queue.clone()).or_default() += 1;
        let standing = Standing {
            state: JobState::Succeeded,
            lease_token: Some(LeaseToken(row.try_get("token").db()?)),
            report_digest: row.try_get("report_digest").db()?,
        };
        let now = Completed::Now {
            queue,
            started_at: row.try_get("started_at").db()?,
            finished_at: row.try_get("finished_at").db()?,
        };
        done.insert(row.try_get("id").db()?, (standing, Some(now)));
    }
    // Jobs the batch did not complete (a lost lease, a repeated report, a
    // wrong tenant): settled apart, which the happy path never pays for.
    let rest: Vec<&Completion> = sorted
        .into_iter()
        .filter(|c| !done.contains_key(&c.id))
        .collect();
    let mut settled = HashMap::new();
    if !rest.is_empty() {
        let ids: Vec<Uuid> = rest.iter().map(|c| c.id).collect();
        let tokens: Vec<Uuid> = rest.iter().map(|c| c.lease_token.0).collect();
        settled = settle_rows(db, tenant, &ids, &tokens, "complete").await?;
    }
    // Each item is answered by its own token and result.
    let answers = items
        .iter()
        .map(|c| {
            let report = Report::Complete(c.result.as_ref());
            match done.get_mut(&c.id) {
                Some((standing, now)) => report
                    .answer(c.id, c.lease_token, Some(standing))
                    .map(|()| now.take().unwrap_or(Completed::Repeated)),
                None => report
                    .answer(c.id, c.lease_token, settled.get(&c.id).map(|(_, s)| s))
                    .map(|()| Completed::Repeated),
            }
        })
        .collect();
    Ok((answers, ended))
}

pub(crate) async fn fail(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    failure: &Failure,
    jitter: f64,
) -> Result<Reported> {
    let reported = fail_on(
        &mut Runner::Pool(&store.db),
        tenant,
        id,
        token,
        failure,
        jitter,
    )
    .await?;
    store.notify_freed(tenant, &reported.job.queue, 1);
    if reported.now {
        store.notify_when_due(tenant, &reported.job);
    }
    Ok(reported)
}

/// Ends an attempt with a failure on `db`, or settles the report.
async fn fail_on(
    db: &mut Runner<'_>,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    failure: &Failure,
    jitter: f64,
) -> Result<Reported> {
    let report = Report::Fail(failure);
    let row = sqlx::query(FAIL)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(&failure.error)
        .bind(failure.retry_after_ms)
        .bind(failure.fatal)
        .bind(failure.cancelled)
        .bind(jitter)
        .bind(report.digest())
        .fetch_optional(&mut *db)
        .await
        .db()?;
    match row {
        Some(row) => Ok(Reported {
            job: rows::job(&row).db()?,
            now: true,
        }),
        None => settle(db, tenant, id, token, report).await,
    }
}

pub(crate) async fn snooze(
    store: &PgStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    delay_ms: i64,
) -> Result<Reported> {
    let report = Report::Snooze(delay_ms);
    let row = sqlx::query(SNOOZE)
        .bind(id)
        .bind(tenant)
        .bind(token.0)
        .bind(delay_ms)
        .bind(report.digest())
        .fetch_optional(&store.db)
        .await
        .db()?;
    let reported = match row {
        Some(row) => Reported {
            job: rows::job(&row).db()?,
            now: true,
        },
        None => settle(&mut Runner::Pool(&store.db), tenant, id, token, report).await?,
    };
    let job = &reported.job;
    store.notify_freed(tenant, &job.queue, 1);
    if reported.now {
        // Handed back now (e.g. by a worker shutting down) or later: the
        // claims waiting on its queue hear of it when it is claimable.
        store.notify_when_due(tenant, job);
    }
    Ok(reported)
}

/// Answers a single report that its fenced statement did not apply, from
/// the job as `SETTLE` reads it under lock (see `Report::answer`): a repeat
/// is the job as it stands, `now` false.
async fn settle(
    db: &mut Runner<'_>,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    report: Report<'_>,
) -> Result<Reported> {
    let mut rows = settle_rows(db, tenant, &[id], &[token.0], report.as_str()).await?;
    report.answer(id, token, rows.get(&id).map(|(_, s)| s))?;
    let (job, _) = rows
        .remove(&id)
        .ok_or_else(|| Error::Storage("SETTLE answered no row for a repeat".into()))?;
    Ok(Reported { job, now: false })
}

/// Runs `SETTLE` over reports (`ids` with their `tokens`, ids in order)
/// that `op` did not apply: each job of the tenant as it stands.
async fn settle_rows(
    db: &mut Runner<'_>,
    tenant: &str,
    ids: &[Uuid],
    tokens: &[Uuid],
    op: &str,
) -> Result<HashMap<Uuid, (tether_core::Job, Standing)>> {
    let rows = sqlx::query(SETTLE)
        .bind(tenant)
        .bind(ids)
        .bind(tokens)
        .bind(op)
        .fetch_all(&mut *db)
        .await
        .db()?;
    let mut out = HashMap::with_capacity(rows.len());
    for row in &rows {
        let job = rows::job(row).db()?;
        let standing = Standing {
            state: job.state,
            lease_token: row
                .try_get::<Option<Uuid>, _>("lease_token")
                .db()?
                .map(LeaseToken),
            report_digest: row.try_get("report_digest").db()?,
        };
        out.insert(job.id, (job, standing));
    }
    Ok(out)
}
