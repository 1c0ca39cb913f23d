//! The claim: a plain one in one statement, a flow-controlled one in its
//! queue's turn, and a claim that carries the reports of the last batch.

use super::*;

pub(crate) async fn claim(
    store: &SqliteStore,
    tenant: &str,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedJob>> {
    // Look before taking the single writer: an empty queue answers from
    // a reader, so many idle claimers (long-polls woken by a hint another
    // claimer already took) do not queue up every writer of the file.
    // A job that becomes ready just after the look is found by the next
    // claim: its enqueue sends a hint after its commit.
    let any_ready: bool = sqlx::query_scalar(ANY_READY)
        .bind(tenant)
        .bind(&req.queue)
        .fetch_one(&store.reader)
        .await
        .db()?;
    if !any_ready {
        return Ok(Vec::new());
    }
    // A flow-controlled queue's claims take turns in the single writer
    // anyway; this process's wait for it in memory, one in the writer's
    // line at a time, so they do not crowd out other tenants' writes.
    let _turn = match store.limited.contains(tenant, &req.queue) {
        true => Some(store.limited.turn(tenant, &req.queue).await),
        false => None,
    };
    let mut tx = store.begin().await?;
    let claimed_rows = claim_in(store, &mut tx, tenant, req).await?;
    if claimed_rows.is_empty() {
        SqliteStore::finish_unchanged(tx).await?;
        return Ok(Vec::new());
    }
    tx.commit().await.db()?;
    decode_claimed(&claimed_rows)
}

pub(crate) async fn report_and_claim(
    store: &SqliteStore,
    tenant: &str,
    reports: &CarriedReports,
    jitters: &[f64],
    req: &ClaimRequest,
) -> Result<StoredClaim> {
    // No look for ready jobs first: the reports are written either way.
    let _turn = match store.limited.contains(tenant, &req.queue) {
        true => Some(store.limited.turn(tenant, &req.queue).await),
        false => None,
    };
    let mut tx = store.begin().await?;
    let mut released = Released::new();
    let (completed, mut ended) = match reports.complete.is_empty() {
        true => (Vec::new(), HashMap::new()),
        false => {
            complete_many_in(&mut tx, tenant, &reports.complete, &mut released)
                .await?
                .0
        }
    };
    let mut failed = Vec::with_capacity(reports.fail.len());
    for (item, jitter) in reports.fail.iter().zip(jitters) {
        let reported = fail_in(
            &mut tx,
            tenant,
            item.id,
            item.lease_token,
            &item.failure,
            *jitter,
            &mut released,
        )
        .await?
        .0;
        if let Ok(r) = &reported {
            *ended.entry(r.job.queue.clone()).or_default() += 1;
        }
        failed.push(reported);
    }
    // Completions first, so the slots they free (and the jobs they
    // released) count for the claim.
    let claimed_rows = claim_in(store, &mut tx, tenant, req).await?;
    tx.commit().await.db()?;
    for (queue, jobs) in ended {
        store.notify_freed(tenant, &queue, jobs);
    }
    store.notify_released(&released);
    for reported in failed.iter().flatten() {
        if reported.now {
            store.notify_when_due(tenant, &reported.job);
        }
    }
    Ok(StoredClaim {
        completed,
        failed,
        jobs: decode_claimed(&claimed_rows)?,
    })
}

/// The claim in the single writer's transaction `tx`: the claimed rows, with
/// their history written. The caller commits (or rolls back when none).
async fn claim_in(
    store: &SqliteStore,
    tx: &mut Tx,
    tenant: &str,
    req: &ClaimRequest,
) -> Result<Vec<sqlx::sqlite::SqliteRow>> {
    let tx = &mut *tx;
    // The single writer's transaction: nothing changes the running jobs or
    // the rate window between the counts below and the claim.
    let limits = read_limits(tx, tenant, &req.queue).await?;
    store.limited.mark(tenant, &req.queue, limits.any());
    let room = match limits.any() {
        true => room(tx, tenant, &req.queue, req.limit, &limits).await?,
        false => Room {
            n: req.limit,
            window: None,
        },
    };
    let claimed_rows = if limits.by_key() {
        let ids = pick_by_key(store, tx, tenant, &req.queue, room.n, &limits).await?;
        sqlx::query(CLAIM_IDS)
            .bind(tenant)
            .bind(&req.queue)
            .bind(req.lease_ttl_ms)
            .bind(&req.worker_id)
            .bind(id_array(ids.iter().map(String::as_str)))
            .bind(lifecycle::DEFAULT_LEASE_TTL_MS)
            .fetch_all(&mut **tx)
            .await
            .db()?
    } else {
        sqlx::query(CLAIM)
            .bind(tenant)
            .bind(&req.queue)
            .bind(req.lease_ttl_ms)
            .bind(&req.worker_id)
            .bind(i64::from(room.n))
            .bind(lifecycle::DEFAULT_LEASE_TTL_MS)
            .fetch_all(&mut **tx)
            .await
            .db()?
    };
    let taken = claimed_rows.len();
    if limits.any() && taken < req.limit as usize && !limits.paused {
        // Held back when ready jobs are left that the limits kept it from.
        let ready: i64 = sqlx::query_scalar(COUNT_READY)
            .bind(tenant)
            .bind(&req.queue)
            .bind(i64::from(req.limit) + 1)
            .fetch_one(&mut **tx)
            .await
            .db()?;
        // The claimed jobs are no longer ready: any ready job is one left.
        if ready > 0 {
            tether_core::counters::throttled(tenant, &req.queue);
        }
    }
    if let (Some(rate), Some(window)) = (limits.rate, room.window) {
        if taken > 0 {
            let at: i64 = claimed_rows[0].try_get("started_at").db()?;
            sqlx::query(LOG_CLAIM)
                .bind(tenant)
                .bind(&req.queue)
                .bind(at)
                .bind(taken as i64)
                .execute(&mut **tx)
                .await
                .db()?;
            sqlx::query(TRIM_CLAIMS)
                .bind(tenant)
                .bind(&req.queue)
                .execute(&mut **tx)
                .await
                .db()?;
        }
        if window.used + taken as i64 >= i64::from(rate.count) {
            // Used up: nothing ends to free a slot, the window's clock does.
            let (oldest, jobs) = window.oldest.unwrap_or((window.now, taken as i64));
            let after = (oldest + rate.period_ms - window.now).max(0) as u64;
            store.wakeups.notify_after(
                tenant,
                &req.queue,
                std::time::Duration::from_millis(after),
                jobs.max(1) as usize,
            );
        }
    }
    if claimed_rows.is_empty() {
        return Ok(claimed_rows);
    }
    let ids = claimed_rows
        .iter()
        .map(|row| row.try_get::<&str, _>("id"))
        .collect::<std::result::Result<Vec<_>, _>>()
        .db()?;
    sqlx::query(CLAIMED_EVENTS)
        .bind(id_array(ids))
        .execute(&mut **tx)
        .await
        .db()?;
    Ok(claimed_rows)
}

/// The claimed jobs of `claim_in`'s rows, decoded after the commit.
fn decode_claimed(claimed_rows: &[sqlx::sqlite::SqliteRow]) -> Result<Vec<ClaimedJob>> {
    // Decoding (JSON payloads included) happens after the commit, so the
    // writer is not held for it. A row that cannot be decoded is then an
    // error although the claim stands; its lease lapses and the reaper
    // hands the job out again.
    let mut claimed = claimed_rows
        .iter()
        .map(|row| {
            Ok(ClaimedJob {
                job: rows::job(row)?,
                lease_token: rows::lease_token(row)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // RETURNING has no defined order; hand the jobs out in claim order.
    ClaimedJob::sort_in_claim_order(&mut claimed);
    Ok(claimed)
}

/// A queue's flow-control settings, as its row has them.
#[derive(Debug, Default)]
struct QueueLimitsRow {
    paused: bool,
    max_running: Option<i64>,
    rate: Option<RateLimit>,
    key_max_running: Option<i64>,
    fair: bool,
}

impl QueueLimitsRow {
    fn any(&self) -> bool {
        self.max_running.is_some() || self.rate.is_some() || self.by_key()
    }

    fn by_key(&self) -> bool {
        self.key_max_running.is_some() || self.fair
    }
}

async fn read_limits(tx: &mut Tx, tenant: &str, queue: &str) -> Result<QueueLimitsRow> {
    let Some(row) = sqlx::query(QUEUE_LIMITS)
        .bind(tenant)
        .bind(queue)
        .fetch_optional(&mut **tx)
        .await
        .db()?
    else {
        return Ok(QueueLimitsRow::default());
    };
    let count: Option<i32> = row.try_get("rate_limit_count").db()?;
    let period_ms: Option<i64> = row.try_get("rate_limit_period_ms").db()?;
    Ok(QueueLimitsRow {
        paused: row.try_get("paused").db()?,
        max_running: row.try_get("max_running").db()?,
        rate: count
            .zip(period_ms)
            .map(|(count, period_ms)| RateLimit { count, period_ms }),
        key_max_running: row.try_get("key_max_running").db()?,
        fair: row.try_get("fair").db()?,
    })
}

/// How many jobs a claim may take, and the rate window it counted.
struct Room {
    n: u32,
    window: Option<RateWindow>,
}

/// The rate window at the claim: jobs handed out in it, its oldest claim
/// (time and jobs) and the clock, in ms.
struct RateWindow {
    used: i64,
    oldest: Option<(i64, i64)>,
    now: i64,
}

async fn room(
    tx: &mut Tx,
    tenant: &str,
    queue: &str,
    asked: u32,
    limits: &QueueLimitsRow,
) -> Result<Room> {
    if limits.paused {
        return Ok(Room { n: 0, window: None });
    }
    let mut n = i64::from(asked);
    if let Some(max) = limits.max_running {
        let running: i64 = sqlx::query_scalar(COUNT_RUNNING)
            .bind(tenant)
            .bind(queue)
            .fetch_one(&mut **tx)
            .await
            .db()?;
        n = n.min(max - running);
    }
    let mut window = None;
    if let Some(rate) = limits.rate {
        let row = sqlx::query(RATE_WINDOW)
            .bind(tenant)
            .bind(queue)
            .bind(rate.period_ms)
            .fetch_one(&mut **tx)
            .await
            .db()?;
        let used: i64 = row.try_get("used").db()?;
        let oldest: Option<i64> = row.try_get("oldest").db()?;
        let oldest_jobs: Option<i64> = row.try_get("oldest_jobs").db()?;
        n = n.min(i64::from(rate.count) - used);
        window = Some(RateWindow {
            used,
            oldest: oldest.zip(oldest_jobs),
            now: row.try_get("now").db()?,
        });
    }
    Ok(Room {
        n: n.clamp(0, i64::from(asked)) as u32,
        window,
    })
}

/// The jobs a key-limited or fair claim of `room` takes (see
/// `tether_core::flow`): the head of each key a walk over
/// `tether_jobs_key_claim` visits (at most `flow::walk_len`, in turn) and
/// of the jobs without a key, in claim order.
async fn pick_by_key(
    store: &SqliteStore,
    tx: &mut Tx,
    tenant: &str,
    queue: &str,
    room: u32,
    limits: &QueueLimitsRow,
) -> Result<Vec<String>> {
    if room == 0 {
        return Ok(Vec::new());
    }
    let mut running: HashMap<String, i64> = HashMap::new();
    if limits.key_max_running.is_some() {
        for row in sqlx::query(RUNNING_BY_KEY)
            .bind(tenant)
            .bind(queue)
            .fetch_all(&mut **tx)
            .await
            .db()?
        {
            running.insert(row.try_get("concurrency_key").db()?, row.try_get("n").db()?);
        }
    }
    let key_room = |key: &str| {
        limits.key_max_running.map(|max| {
            (max - running.get(key).copied().unwrap_or(0)).clamp(0, i64::from(u32::MAX)) as u32
        })
    };
    let head = |row: &sqlx::sqlite::SqliteRow| -> Result<flow::Head<String>> {
        Ok(flow::Head {
            id: row.try_get("id").db()?,
            key: row.try_get("concurrency_key").db()?,
            priority: row.try_get("priority").db()?,
            run_at: row.try_get("run_at").db()?,
        })
    };
    // Where the window can hold the claim (see `tether_core::flow`).
    if !limits.fair || limits.key_max_running.is_none() {
        let window = sqlx::query(HEAD_WINDOW)
            .bind(tenant)
            .bind(queue)
            .bind(i64::from(room) * 4)
            .fetch_all(&mut **tx)
            .await
            .db()?
            .iter()
            .map(head)
            .collect::<Result<Vec<_>>>()?;
        let ids = if limits.fair {
            flow::fair_from_window(&window, room as usize)
        } else {
            flow::from_window(&window, key_room, room as usize)
        };
        if let Some(ids) = ids {
            return Ok(ids);
        }
    }
    let walk_len = flow::walk_len(room);
    let from = store.limited.walk_from(tenant, queue);
    let mut keys: Vec<String> = sqlx::query_scalar(WALK_KEYS)
        .bind(tenant)
        .bind(queue)
        .bind(&from)
        .bind(i64::from(walk_len))
        .fetch_all(&mut **tx)
        .await
        .db()?;
    if keys.len() < walk_len as usize && !from.is_empty() {
        // Wrapped around: the keys up to where this walk started.
        let rest: Vec<String> = sqlx::query_scalar(WALK_KEYS_UPTO)
            .bind(tenant)
            .bind(queue)
            .bind("")
            .bind(i64::from(walk_len) - keys.len() as i64)
            .bind(&from)
            .fetch_all(&mut **tx)
            .await
            .db()?;
        keys.extend(rest);
    }
    if let Some(last) = keys.last() {
        store.limited.walked_to(tenant, queue, last.clone());
    }
    let unkeyed: bool = sqlx::query_scalar(ANY_UNKEYED)
        .bind(tenant)
        .bind(queue)
        .fetch_one(&mut **tx)
        .await
        .db()?;
    let groups = keys.len() + usize::from(unkeyed);
    let mut heads = Vec::new();
    for key in &keys {
        let cap = flow::group_cap(room, limits.fair, groups, key_room(key));
        if cap == 0 {
            continue;
        }
        for row in sqlx::query(KEY_HEAD)
            .bind(tenant)
            .bind(queue)
            .bind(key)
            .bind(i64::from(cap))
            .fetch_all(&mut **tx)
            .await
            .db()?
        {
            heads.push(head(&row)?);
        }
    }
    let cap = if unkeyed {
        flow::group_cap(room, limits.fair, groups, None)
    } else {
        0
    };
    for row in sqlx::query(UNKEYED_HEAD)
        .bind(tenant)
        .bind(queue)
        .bind(i64::from(cap))
        .fetch_all(&mut **tx)
        .await
        .db()?
    {
        heads.push(head(&row)?);
    }
    Ok(flow::claim_order(heads, limits.fair, room as usize))
}
