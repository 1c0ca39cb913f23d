//! What a worker does with a job: claim it, heartbeat it, and end the
//! attempt with complete, fail or snooze. Every report is fenced by the
//! lease token (see `sql::attempts`); one the fence did not apply is
//! answered in the same transaction from the job as it stands: a repeat of
//! the report that ended the attempt is answered like the first, a
//! different report is a conflict, and `lease_lost` means another owner
//! took the job.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::Value;
use sqlx::{Row, SqliteConnection};
use tether_core::flow;
use tether_core::lifecycle::{self, FailOutcome, Report, Standing};
use tether_core::{
    CarriedReports, ClaimRequest, ClaimedJob, Completed, Completion, Error, EventKind, Failure,
    Heartbeat, HeartbeatAck, JobState, LeaseToken, RateLimit, Reported, Result, StoredClaim,
};
use uuid::Uuid;

use crate::jobs::record;
use crate::rows::{self, id_array, to_json_text, Db};
use crate::sql::attempts::{
    ANY_READY, ANY_UNKEYED, CLAIM, CLAIMED_EVENTS, CLAIM_IDS, COMPLETE, COMPLETE_MANY, COUNT_READY,
    COUNT_RUNNING, FAIL_READ, FAIL_WRITE, HEAD_WINDOW, HEARTBEAT, KEY_HEAD, LEASE_LOST,
    LEASE_LOST_MANY, LEASE_TOKEN, LOG_CLAIM, QUEUE_LIMITS, RATE_WINDOW, RUNNING_BY_KEY, SNOOZE,
    STANDING, STANDING_MANY, SUCCEEDED_EVENTS, TRIM_CLAIMS, UNKEYED_HEAD, WALK_KEYS,
    WALK_KEYS_UPTO,
};
use crate::workflows::{take_released_after, Released};
use crate::{SqliteStore, Tx};

mod claim;

pub(crate) use claim::{claim, report_and_claim};

pub(crate) async fn heartbeat_many(
    store: &SqliteStore,
    tenant: &str,
    items: &[Heartbeat],
) -> Result<Vec<Result<HeartbeatAck>>> {
    let progress = items
        .iter()
        .map(|hb| hb.progress.as_ref().map(to_json_text).transpose())
        .collect::<Result<Vec<_>>>()?;
    let mut tx = store.begin().await?;
    let mut answers = Vec::with_capacity(items.len());
    // Jobs whose `lease_lost` this batch recorded already, with the
    // answer: one event per job and batch, however often it is named.
    let mut lost: HashMap<Uuid, bool> = HashMap::new();
    for (hb, progress) in items.iter().zip(progress) {
        let row = sqlx::query(HEARTBEAT)
            .bind(tenant)
            .bind(hb.id.to_string())
            .bind(hb.lease_token.0.to_string())
            .bind(hb.lease_ttl_ms)
            .bind(progress)
            .bind(lifecycle::DEFAULT_LEASE_TTL_MS)
            .fetch_optional(&mut *tx)
            .await
            .db()?;
        answers.push(match row {
            Some(row) => Ok(HeartbeatAck {
                lease_expires_at: rows::ts(row.try_get("lease_expires_at").db()?)?,
                cancel_requested: row.try_get("cancel_requested").db()?,
            }),
            None => {
                let exists = match lost.get(&hb.id) {
                    Some(&exists) => exists,
                    None => {
                        let exists = heartbeat_refused(&mut tx, tenant, hb).await?;
                        lost.insert(hb.id, exists);
                        exists
                    }
                };
                Err(if exists {
                    Error::LeaseLost(hb.id)
                } else {
                    Error::JobNotFound(hb.id)
                })
            }
        });
    }
    tx.commit().await.db()?;
    Ok(answers)
}

pub(crate) async fn complete(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    result: Option<&Value>,
) -> Result<Reported> {
    let report = Report::Complete(result);
    let result = result.map(to_json_text).transpose()?;
    let mut tx = store.begin().await?;
    let row = sqlx::query(COMPLETE)
        .bind(tenant)
        .bind(id.to_string())
        .bind(token.0.to_string())
        .bind(result)
        .bind(report.digest())
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(row) = row else {
        return settle_unfenced(tx, tenant, id, token, report).await;
    };
    let job = rows::job(&row)?;
    let mut released = Released::new();
    take_released_after(&mut tx, std::slice::from_ref(&row), &mut released).await?;
    record(
        &mut tx,
        &job,
        EventKind::Succeeded,
        job.worker_id.as_deref(),
        None,
    )
    .await?;
    tx.commit().await.db()?;
    store.notify_freed(tenant, &job.queue, 1);
    store.notify_released(&released);
    Ok(Reported { job, now: true })
}

pub(crate) async fn complete_many(
    store: &SqliteStore,
    tenant: &str,
    items: &[Completion],
) -> Result<Vec<Result<Completed>>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = store.begin().await?;
    let mut released = Released::new();
    let (answers, changed) = complete_many_in(&mut tx, tenant, items, &mut released).await?;
    if changed {
        tx.commit().await.db()?;
    } else {
        SqliteStore::finish_unchanged(tx).await?;
    }
    for (queue, jobs) in answers.1 {
        store.notify_freed(tenant, &queue, jobs);
    }
    store.notify_released(&released);
    Ok(answers.0)
}

/// Answers to a batch's items, and how many jobs of each queue it ended.
type BatchAnswers = (Vec<Result<Completed>>, HashMap<String, usize>);

/// Completes a batch in the write transaction `tx`; answers its items and
/// whether it wrote anything (the caller commits, or rolls back if not),
/// and adds the jobs the completions released to `released` (to hint after
/// the commit).
async fn complete_many_in(
    tx: &mut Tx,
    tenant: &str,
    items: &[Completion],
    released: &mut Released,
) -> Result<(BatchAnswers, bool)> {
    let mut batch = Vec::with_capacity(items.len() * 4);
    for item in items {
        batch.push(Value::from(item.id.to_string()));
        batch.push(Value::from(item.lease_token.0.to_string()));
        batch.push(Value::from(
            item.result.as_ref().map(to_json_text).transpose()?,
        ));
        batch.push(Value::from(Report::Complete(item.result.as_ref()).digest()));
    }
    let tx = &mut *tx;
    let done = sqlx::query(COMPLETE_MANY)
        .bind(tenant)
        .bind(Value::Array(batch).to_string())
        .fetch_all(&mut **tx)
        .await
        .db()?;
    // Each job the batch names, as it stands: the ones it completed now
    // (with what the item that completed each answers), then the others.
    let mut jobs: HashMap<Uuid, (Standing, Option<Completed>)> =
        HashMap::with_capacity(items.len());
    let mut ended: HashMap<String, usize> = HashMap::new();
    for row in &done {
        let queue: String = row.try_get("queue").db()?;
        *ended.entry(queue.clone()).or_default() += 1;
        let standing = Standing {
            state: JobState::Succeeded,
            lease_token: Some(rows::lease_token(row)?),
            report_digest: row.try_get("report_digest").db()?,
        };
        let now = Completed::Now {
            queue,
            started_at: rows::opt_ts(row.try_get("started_at").db()?)?,
            finished_at: rows::ts(row.try_get("finished_at").db()?)?,
        };
        jobs.insert(rows::uuid(row.try_get("id").db()?)?, (standing, Some(now)));
    }
    if !done.is_empty() {
        take_released_after(tx, &done, released).await?;
        let ids: Vec<String> = jobs.keys().map(Uuid::to_string).collect();
        sqlx::query(SUCCEEDED_EVENTS)
            .bind(id_array(ids.iter().map(String::as_str)))
            .execute(&mut **tx)
            .await
            .db()?;
    }
    // Jobs the update did not complete (a repeat of an earlier complete, a
    // conflicting report, a stale token, a wrong tenant), read in the same
    // transaction. The usual batch (fresh tokens) needs no read.
    let rest: BTreeSet<String> = items
        .iter()
        .filter(|item| !jobs.contains_key(&item.id))
        .map(|item| item.id.to_string())
        .collect();
    if !rest.is_empty() {
        let rows = sqlx::query(STANDING_MANY)
            .bind(tenant)
            .bind(id_array(rest.iter().map(String::as_str)))
            .fetch_all(&mut **tx)
            .await
            .db()?;
        for row in &rows {
            let id = rows::uuid(row.try_get("id").db()?)?;
            jobs.insert(id, (standing(row)?, None));
        }
    }
    // Each item is answered by its own token and result.
    let answers: Vec<Result<Completed>> = items
        .iter()
        .map(|item| {
            let report = Report::Complete(item.result.as_ref());
            match jobs.get_mut(&item.id) {
                Some((standing, now)) => report
                    .answer(item.id, item.lease_token, Some(standing))
                    .map(|()| now.take().unwrap_or(Completed::Repeated)),
                None => report
                    .answer(item.id, item.lease_token, None)
                    .map(|()| Completed::Repeated),
            }
        })
        .collect();
    // One `lease_lost` per job and batch, for a job no item of which
    // presented the token that ended its attempt (every item of it is
    // answered `lease_lost`), however often the batch names it; as on
    // PostgreSQL (`SETTLE`).
    let (lost, others): (Vec<_>, Vec<_>) = items
        .iter()
        .zip(&answers)
        .partition(|(_, answer)| matches!(answer, Err(Error::LeaseLost(_))));
    let presented: HashSet<Uuid> = others.iter().map(|(item, _)| item.id).collect();
    let lost_ids: BTreeSet<String> = lost
        .iter()
        .filter(|(item, _)| !presented.contains(&item.id))
        .map(|(item, _)| item.id.to_string())
        .collect();
    if !lost_ids.is_empty() {
        sqlx::query(LEASE_LOST_MANY)
            .bind(tenant)
            .bind(id_array(lost_ids.iter().map(String::as_str)))
            .bind("complete")
            .fetch_all(&mut **tx)
            .await
            .db()?;
    }
    let changed = !done.is_empty() || !lost_ids.is_empty();
    Ok(((answers, ended), changed))
}

/// A job as a report that did not apply finds it, from a row holding
/// `state`, `lease_token` and `report_digest`.
fn standing(row: &sqlx::sqlite::SqliteRow) -> Result<Standing> {
    let state: &str = row.try_get("state").db()?;
    let token: Option<&str> = row.try_get("lease_token").db()?;
    Ok(Standing {
        state: state.parse().map_err(rows::corrupt)?,
        lease_token: token.map(rows::uuid).transpose()?.map(LeaseToken),
        report_digest: row.try_get("report_digest").db()?,
    })
}

pub(crate) async fn fail(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    failure: &Failure,
    jitter: f64,
) -> Result<Reported> {
    let mut tx = store.begin().await?;
    let mut released = Released::new();
    let (reported, changed) =
        fail_in(&mut tx, tenant, id, token, failure, jitter, &mut released).await?;
    if changed {
        tx.commit().await.db()?;
    } else {
        SqliteStore::finish_unchanged(tx).await?;
    }
    store.notify_released(&released);
    let reported = reported?;
    if reported.now {
        store.notify_freed(tenant, &reported.job.queue, 1);
        store.notify_when_due(tenant, &reported.job);
    }
    Ok(reported)
}

/// Ends an attempt with a failure in the write transaction `tx`, or settles
/// the report; answers it and whether it wrote anything (the caller
/// commits, or rolls back if not). A failure that ended the job adds what
/// it released (`run` dependents) to `released`.
#[allow(clippy::too_many_arguments)]
async fn fail_in(
    tx: &mut Tx,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    failure: &Failure,
    jitter: f64,
    released: &mut Released,
) -> Result<(Result<Reported>, bool)> {
    let report = Report::Fail(failure);
    let error = lifecycle::error_tail(&failure.error);
    // Reading then writing is atomic here: BEGIN IMMEDIATE holds the
    // write lock for the whole transaction.
    let row = sqlx::query(FAIL_READ)
        .bind(tenant)
        .bind(id.to_string())
        .bind(token.0.to_string())
        .fetch_optional(&mut **tx)
        .await
        .db()?;
    let Some(row) = row else {
        return settle_in(tx, tenant, id, token, report).await;
    };
    let attempt: i32 = row.try_get("attempt").db()?;
    let max_attempts: i32 = row.try_get("max_attempts").db()?;
    let cancel_requested: bool = row.try_get("cancel_requested").db()?;
    let backoff = tether_core::Backoff {
        base_ms: row.try_get("backoff_base_ms").db()?,
        cap_ms: row.try_get("backoff_cap_ms").db()?,
    };
    let outcome = lifecycle::fail_outcome(attempt, max_attempts, cancel_requested, failure);
    let (delay, event) = match outcome {
        FailOutcome::Retry => (
            Some(
                failure
                    .retry_after_ms
                    .unwrap_or_else(|| lifecycle::backoff_delay_ms(backoff, attempt, jitter)),
            ),
            EventKind::RetryScheduled,
        ),
        FailOutcome::Failed => (None, EventKind::Failed),
        FailOutcome::Cancelled => (None, EventKind::Cancelled),
    };
    let row = sqlx::query(FAIL_WRITE)
        .bind(id.to_string())
        .bind(outcome.state().as_str())
        .bind(&error)
        .bind(delay)
        .bind(report.digest())
        .fetch_one(&mut **tx)
        .await
        .db()?;
    let job = rows::job(&row)?;
    take_released_after(tx, std::slice::from_ref(&row), released).await?;
    record(tx, &job, event, job.worker_id.as_deref(), Some(&error)).await?;
    Ok((Ok(Reported { job, now: true }), true))
}

pub(crate) async fn snooze(
    store: &SqliteStore,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    delay_ms: i64,
) -> Result<Reported> {
    let report = Report::Snooze(delay_ms);
    let mut tx = store.begin().await?;
    let row = sqlx::query(SNOOZE)
        .bind(tenant)
        .bind(id.to_string())
        .bind(token.0.to_string())
        .bind(delay_ms)
        .bind(report.digest())
        .fetch_optional(&mut *tx)
        .await
        .db()?;
    let Some(row) = row else {
        return settle_unfenced(tx, tenant, id, token, report).await;
    };
    let job = rows::job(&row)?;
    // Cancelled (asked while it ran): what waits for it moved.
    let mut released = Released::new();
    take_released_after(&mut tx, std::slice::from_ref(&row), &mut released).await?;
    let event = if job.state == JobState::Cancelled {
        EventKind::Cancelled
    } else {
        EventKind::Snoozed
    };
    let detail = format!("delay {delay_ms} ms");
    record(
        &mut tx,
        &job,
        event,
        job.worker_id.as_deref(),
        Some(&detail),
    )
    .await?;
    tx.commit().await.db()?;
    store.notify_freed(tenant, &job.queue, 1);
    store.notify_released(&released);
    // Handed back now (e.g. by a worker shutting down) or later: the claims
    // waiting on its queue hear of it when it is claimable.
    store.notify_when_due(tenant, &job);
    Ok(Reported { job, now: true })
}

/// A heartbeat's fence did not match: whether the job exists in the
/// tenant. Records `lease_lost` unless the job still holds the heartbeat's
/// token: then the attempt's own report (a completion, failure or snooze
/// that overtook the heartbeat) ended it, and no lease was lost.
async fn heartbeat_refused(tx: &mut Tx, tenant: &str, hb: &Heartbeat) -> Result<bool> {
    let held: Option<Option<String>> = sqlx::query_scalar(LEASE_TOKEN)
        .bind(tenant)
        .bind(hb.id.to_string())
        .fetch_optional(&mut **tx)
        .await
        .db()?;
    Ok(match held {
        None => false,
        Some(Some(token)) if token == hb.lease_token.0.to_string() => true,
        Some(_) => matches!(
            lease_lost(tx, tenant, hb.id, "heartbeat").await?,
            Error::LeaseLost(_)
        ),
    })
}

/// The fence did not match: records `lease_lost` (detail = the operation) if
/// the job exists in the tenant and returns the error to report. The caller
/// commits (so the event is kept) and returns the error.
async fn lease_lost(
    conn: &mut SqliteConnection,
    tenant: &str,
    id: Uuid,
    op: &str,
) -> Result<Error> {
    let done = sqlx::query(LEASE_LOST)
        .bind(tenant)
        .bind(id.to_string())
        .bind(op)
        .execute(conn)
        .await
        .db()?;
    Ok(if done.rows_affected() > 0 {
        Error::LeaseLost(id)
    } else {
        Error::JobNotFound(id)
    })
}

/// Ends a report whose fence matched nothing, from the job as it stands in
/// the same transaction (see `Report::answer`): a repeat of the report that
/// ended the attempt is answered with the job and changes nothing; a
/// conflicting report changes nothing either and is refused; `lease_lost`
/// is recorded (committed) and refused.
async fn settle_unfenced(
    mut tx: Tx,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    report: Report<'_>,
) -> Result<Reported> {
    let (reported, changed) = settle_in(&mut tx, tenant, id, token, report).await?;
    if changed {
        tx.commit().await.db()?;
    } else {
        SqliteStore::finish_unchanged(tx).await?;
    }
    reported
}

/// `settle_unfenced` in a transaction the caller ends: answers the report
/// and whether it wrote anything (a `lease_lost` event, to be committed).
async fn settle_in(
    tx: &mut Tx,
    tenant: &str,
    id: Uuid,
    token: LeaseToken,
    report: Report<'_>,
) -> Result<(Result<Reported>, bool)> {
    let row = sqlx::query(STANDING)
        .bind(tenant)
        .bind(id.to_string())
        .fetch_optional(&mut **tx)
        .await
        .db()?;
    let standing = row.as_ref().map(standing).transpose()?;
    Ok(match report.answer(id, token, standing.as_ref()) {
        Ok(()) => {
            let job = rows::job(row.as_ref().expect("a repeat has a row"))?;
            (Ok(Reported { job, now: false }), false)
        }
        Err(Error::LeaseLost(_)) => {
            let err = lease_lost(tx, tenant, id, report.as_str()).await?;
            (Err(err), true)
        }
        Err(e) => (Err(e), false),
    })
}
