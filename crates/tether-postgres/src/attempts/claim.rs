//! The claim: a plain one in one statement, a flow-controlled one in its
//! queue's turn, and a claim that carries the reports of the last batch.

use super::*;

pub(crate) async fn claim(
    store: &PgStore,
    tenant: &str,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedJob>> {
    // A queue this store's last claim found limited goes straight to the
    // limited claim (which also serves a queue whose limits were removed).
    if store.limited.contains(tenant, &req.queue) {
        let jobs = limited_claim(store, tenant, req).await?;
        return Ok(in_claim_order(jobs));
    }
    let outcome = run_claim(&store.db, tenant, req).await?;
    let jobs = match outcome.limited {
        true => limited_claim(store, tenant, req).await?,
        false => {
            store.limited.mark(tenant, &req.queue, false);
            outcome.jobs
        }
    };
    Ok(in_claim_order(jobs))
}

pub(crate) async fn report_and_claim(
    store: &PgStore,
    tenant: &str,
    reports: &CarriedReports,
    jitters: &[f64],
    req: &ClaimRequest,
) -> Result<StoredClaim> {
    let (applied, jobs) = if store.limited.contains(tenant, &req.queue) {
        // A flow-controlled queue's claims take turns; the reports are
        // applied before the turn, each statement on its own, so the turns
        // stay short. The slots they free count for the claim all the same:
        // they are committed before the turn's counts are read.
        let applied = apply_reports(&mut Runner::Pool(&store.db), tenant, reports, jitters).await?;
        applied.notify(store, tenant);
        (applied, limited_claim(store, tenant, req).await?)
    } else {
        let mut tx = store.begin().await?;
        let (applied, outcome) = {
            let mut conn = Runner::Conn(tx.conn());
            let applied = apply_reports(&mut conn, tenant, reports, jitters).await?;
            (applied, run_claim(&mut conn, tenant, req).await?)
        };
        tx.commit().await.db()?;
        applied.notify(store, tenant);
        let jobs = match outcome.limited {
            // Found limited only now: the reports are in (committed with
            // the plain claim, which took nothing); the claim takes its
            // turn like any other of the queue.
            true => limited_claim(store, tenant, req).await?,
            false => {
                store.limited.mark(tenant, &req.queue, false);
                outcome.jobs
            }
        };
        (applied, jobs)
    };
    Ok(StoredClaim {
        completed: applied.completed,
        failed: applied.failed,
        jobs: in_claim_order(jobs),
    })
}

/// The claim order (see `CLAIM`, which answers in no order).
fn in_claim_order(mut claimed: Vec<ClaimedJob>) -> Vec<ClaimedJob> {
    ClaimedJob::sort_in_claim_order(&mut claimed);
    claimed
}

/// A flow-controlled queue's claim: its claims take turns on the queue row,
/// each counting the running jobs, reserved slots and the rate window after
/// the previous turn committed. This process's claims of the queue wait for
/// their turn here, in memory, so that at most one of them holds a pooled
/// connection while it waits for the row. A queue whose last turn claimed
/// per key serves the claims that waited for the same turn together
/// ([`KeyGroups`]).
async fn limited_claim(
    store: &PgStore,
    tenant: &str,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedJob>> {
    if store.key_groups.contains(tenant, &req.queue) {
        return group_claim(store, tenant, req).await;
    }
    let turn = store.limited.turn(tenant, &req.queue).await;
    let mut tx = store.begin().await?;
    let limits = lock_queue_limits(&mut tx, tenant, &req.queue).await?;
    let outcome = if limits.by_key {
        store.key_groups.mark(tenant, &req.queue, true);
        let claimants = [(req.worker_id.clone(), req.limit)];
        let (outcome, _) = claim_by_key(
            store,
            &mut tx,
            tenant,
            &req.queue,
            req.lease_ttl_ms,
            &claimants,
        )
        .await?;
        tx.commit().await.db()?;
        drop(turn);
        outcome
    } else {
        // The turn only reserves slots; the claim runs beside others.
        let row = sqlx::query(RESERVE)
            .bind(tenant)
            .bind(&req.queue)
            .bind(i64::from(req.limit))
            .bind(req.lease_ttl_ms)
            .fetch_one(&mut tx.conn())
            .await
            .db()?;
        tx.commit().await.db()?;
        drop(turn);
        let mut outcome = ClaimOutcome::default();
        outcome.read_turn(&row).db()?;
        if let Some(reservation) = row.try_get::<Option<Uuid>, _>("reservation").db()? {
            let rows = sqlx::query(CLAIM_RESERVED)
                .bind(tenant)
                .bind(&req.queue)
                .bind(reservation)
                .bind(req.lease_ttl_ms)
                .bind(&req.worker_id)
                .fetch_all(&store.db)
                .await
                .db()?;
            for row in &rows {
                outcome.jobs.push(ClaimedJob {
                    job: rows::job(row).db()?,
                    lease_token: rows::lease_token(row).db()?,
                });
            }
        }
        outcome
    };
    after_turn(store, tenant, &req.queue, &limits, &outcome);
    Ok(outcome.jobs)
}

/// Takes the queue row's lock (the turn in the database) and reads which
/// flow control the queue has.
async fn lock_queue_limits(tx: &mut crate::Tx, tenant: &str, queue: &str) -> Result<Limits> {
    let settings = sqlx::query(LOCK_QUEUE_LIMITS)
        .bind(tenant)
        .bind(queue)
        .fetch_optional(&mut tx.conn())
        .await
        .db()?;
    match &settings {
        Some(row) => Limits::of(row).db(),
        None => Ok(Limits::default()),
    }
}

/// What a turn leaves for later: whether the queue is limited, the
/// throttle counter, and a wake-up when the rate window opens.
fn after_turn(store: &PgStore, tenant: &str, queue: &str, limits: &Limits, outcome: &ClaimOutcome) {
    store.limited.mark(tenant, queue, limits.any);
    if !limits.by_key {
        store.key_groups.mark(tenant, queue, false);
    }
    if outcome.throttled {
        tether_core::counters::throttled(tenant, queue);
    }
    if let Some((after, jobs)) = outcome.window_opens {
        // Nothing ends to free a rate-limit slot: the window's clock does.
        store.wake_after(tenant, queue, after, jobs);
    }
}

/// `CLAIM_BY_KEY` for `claimants` (worker id, jobs asked for) in the turn
/// held by `tx`: the outcome, and each job's claimant (an index into
/// `claimants`). Per-key counts need the choice of jobs made in the turn.
async fn claim_by_key(
    store: &PgStore,
    tx: &mut crate::Tx,
    tenant: &str,
    queue: &str,
    lease_ttl_ms: Option<i64>,
    claimants: &[(String, u32)],
) -> Result<(ClaimOutcome, Vec<usize>)> {
    let total: u32 = claimants.iter().map(|(_, n)| n).sum();
    let workers: Vec<&str> = claimants.iter().map(|(w, _)| w.as_str()).collect();
    let limits: Vec<i64> = claimants.iter().map(|(_, n)| i64::from(*n)).collect();
    let from = store.limited.walk_from(tenant, queue);
    let rows = sqlx::query(CLAIM_BY_KEY)
        .bind(tenant)
        .bind(queue)
        .bind(i64::from(total))
        .bind(lease_ttl_ms)
        .bind(&workers)
        .bind(&from)
        .bind(i64::from(tether_core::flow::walk_len(total)))
        .bind(&limits)
        .fetch_all(&mut tx.conn())
        .await
        .db()?;
    let mut out = read_claim(&rows, true)?;
    let mut slots = Vec::with_capacity(out.jobs.len());
    for row in rows
        .iter()
        .filter(|r| matches!(r.try_get::<Option<Uuid>, _>("id"), Ok(Some(_))))
    {
        let slot: i64 = row.try_get("slot").db()?;
        slots.push(usize::try_from(slot - 1).unwrap_or(0));
    }
    if let Some(last) = out.walked_to.take() {
        store.limited.walked_to(tenant, queue, last);
    }
    Ok((out, slots))
}

/// The per-key claims of each queue that wait for this process's turn at
/// it. One task per queue serves them: in each turn it takes every claim
/// that waits (of one lease TTL, up to 1,000 jobs) and makes them in one
/// statement and one commit, each claimant getting its own jobs under its
/// own worker id. The claims of a key-limited queue take turns on its row
/// anyway; made one by one, four claimers left a core idle while each
/// turn's commit went by, and the fixed cost of a turn (its lock, round
/// trips and commit) was paid per claim instead of per group.
///
/// The task, not the claimants, does the work, so a claimant that goes
/// away (its client disconnected) cannot cancel the others' claim; the jobs
/// it would have got go back to the queue when their lease lapses, as a
/// claim's answer lost on the way would.
#[derive(Debug, Default)]
pub(crate) struct KeyGroups {
    queues: std::sync::Mutex<HashMap<(String, String), Waiting>>,
}

/// One queue's waiting per-key claims.
#[derive(Debug, Default)]
struct Waiting {
    /// The last turn found per-key limits: claims go through the group.
    by_key: bool,
    /// A task serves the queue's group.
    serving: bool,
    claims: Vec<Pending>,
}

/// A claim waiting in a group.
#[derive(Debug)]
struct Pending {
    req: ClaimRequest,
    answer: tokio::sync::oneshot::Sender<Result<Vec<ClaimedJob>>>,
}

/// Most jobs one group claims (the most one claim may ask for).
const GROUP_JOBS: u32 = 1_000;

impl KeyGroups {
    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Waiting>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `queue`'s claims go through its group.
    fn contains(&self, tenant: &str, queue: &str) -> bool {
        let queues = self.queues();
        !queues.is_empty()
            && queues
                .get(&(tenant.to_owned(), queue.to_owned()))
                .is_some_and(|w| w.by_key)
    }

    /// Records whether `queue`'s last turn found per-key limits.
    fn mark(&self, tenant: &str, queue: &str, by_key: bool) {
        let mut queues = self.queues();
        let key = (tenant.to_owned(), queue.to_owned());
        match queues.get_mut(&key) {
            Some(w) => w.by_key = by_key,
            None if by_key => {
                queues.insert(
                    key,
                    Waiting {
                        by_key,
                        ..Waiting::default()
                    },
                );
            }
            None => {}
        }
    }

    /// Adds a claim to its queue's group; true when no task serves the
    /// queue yet (the caller starts one).
    fn join(&self, tenant: &str, claim: Pending) -> bool {
        let mut queues = self.queues();
        let w = queues
            .entry((tenant.to_owned(), claim.req.queue.clone()))
            .or_default();
        w.claims.push(claim);
        !std::mem::replace(&mut w.serving, true)
    }

    /// The next group of `queue`: the first waiting claim and those after
    /// it with its lease TTL, up to [`GROUP_JOBS`]. None (and the queue's
    /// task ends) when nothing waits.
    fn next(&self, tenant: &str, queue: &str) -> Option<Vec<Pending>> {
        let mut queues = self.queues();
        let key = (tenant.to_owned(), queue.to_owned());
        let w = queues.get_mut(&key)?;
        if w.claims.is_empty() {
            w.serving = false;
            if !w.by_key {
                queues.remove(&key);
            }
            return None;
        }
        let ttl = w.claims[0].req.lease_ttl_ms;
        let mut jobs = 0;
        let mut group = Vec::new();
        let mut rest = Vec::new();
        for claim in w.claims.drain(..) {
            if claim.req.lease_ttl_ms == ttl && jobs + claim.req.limit <= GROUP_JOBS {
                jobs += claim.req.limit;
                group.push(claim);
            } else {
                rest.push(claim);
            }
        }
        w.claims = rest;
        Some(group)
    }
}

/// A claim of a queue whose last turn claimed per key: it joins the
/// queue's group and waits for its answer.
async fn group_claim(store: &PgStore, tenant: &str, req: &ClaimRequest) -> Result<Vec<ClaimedJob>> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let claim = Pending {
        req: req.clone(),
        answer,
    };
    if store.key_groups.join(tenant, claim) {
        tokio::spawn(serve_groups(
            store.clone(),
            tenant.to_owned(),
            req.queue.clone(),
        ));
    }
    answered.await.unwrap_or_else(|_| {
        Err(Error::Unavailable(
            "the claim's group ended without an answer".into(),
        ))
    })
}

/// Serves `queue`'s groups, one turn each, until no claim waits.
async fn serve_groups(store: PgStore, tenant: String, queue: String) {
    let mut serving = Serving {
        groups: &store.key_groups,
        key: (tenant.clone(), queue.clone()),
        done: false,
    };
    while let Some(group) = store.key_groups.next(&tenant, &queue) {
        match claim_group(&store, &tenant, &queue, &group).await {
            Ok(Some(mut shares)) => {
                for (claim, jobs) in group.into_iter().zip(shares.drain(..)) {
                    let _ = claim.answer.send(Ok(jobs));
                }
            }
            // The queue no longer has per-key limits: each claim takes
            // the queue's other way (the mark is cleared).
            Ok(None) => {
                for claim in group {
                    let (store, tenant) = (store.clone(), tenant.clone());
                    tokio::spawn(async move {
                        let claimed = limited_claim_boxed(store, tenant, claim.req.clone()).await;
                        let _ = claim.answer.send(claimed.map(in_claim_order));
                    });
                }
            }
            Err(e) if group.len() == 1 => {
                let _ = group.into_iter().next().map(|c| c.answer.send(Err(e)));
            }
            // One failure must not become every claimant's: each is made
            // again alone and gets its own answer.
            Err(_) => {
                for claim in group {
                    let alone = std::slice::from_ref(&claim);
                    let claimed = claim_group(&store, &tenant, &queue, alone).await;
                    let answer = match claimed {
                        Ok(Some(mut shares)) => Ok(shares.pop().unwrap_or_default()),
                        Ok(None) => {
                            limited_claim_boxed(store.clone(), tenant.clone(), claim.req.clone())
                                .await
                                .map(in_claim_order)
                        }
                        Err(e) => Err(e),
                    };
                    let _ = claim.answer.send(answer);
                }
            }
        }
    }
    serving.done = true;
}

/// The task serving a queue's groups; should it end early (a panic), the
/// claims waiting get an error and the next claim starts a new task.
struct Serving<'a> {
    groups: &'a KeyGroups,
    key: (String, String),
    done: bool,
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(w) = self.groups.queues().get_mut(&self.key) {
                w.serving = false;
                w.claims.clear();
            }
        }
    }
}

/// [`limited_claim`], boxed: the group's task calls it, and it can start
/// that task (an async cycle needs a box).
fn limited_claim_boxed(
    store: PgStore,
    tenant: String,
    req: ClaimRequest,
) -> futures_util::future::BoxFuture<'static, Result<Vec<ClaimedJob>>> {
    Box::pin(async move { limited_claim(&store, &tenant, &req).await })
}

/// One turn for `group`: its claimants' jobs, in claim order, or None when
/// the queue has no per-key limits any more (nothing was claimed).
async fn claim_group(
    store: &PgStore,
    tenant: &str,
    queue: &str,
    group: &[Pending],
) -> Result<Option<Vec<Vec<ClaimedJob>>>> {
    let turn = store.limited.turn(tenant, queue).await;
    let mut tx = store.begin().await?;
    let limits = lock_queue_limits(&mut tx, tenant, queue).await?;
    if !limits.by_key {
        drop(tx);
        drop(turn);
        store.key_groups.mark(tenant, queue, false);
        return Ok(None);
    }
    let claimants: Vec<(String, u32)> = group
        .iter()
        .map(|c| (c.req.worker_id.clone(), c.req.limit))
        .collect();
    let ttl = group.first().and_then(|c| c.req.lease_ttl_ms);
    let (mut outcome, slots) = claim_by_key(store, &mut tx, tenant, queue, ttl, &claimants).await?;
    tx.commit().await.db()?;
    drop(turn);
    let mut shares: Vec<Vec<ClaimedJob>> = group.iter().map(|_| Vec::new()).collect();
    for (job, slot) in std::mem::take(&mut outcome.jobs).into_iter().zip(slots) {
        if let Some(share) = shares.get_mut(slot) {
            share.push(job);
        }
    }
    after_turn(store, tenant, queue, &limits, &outcome);
    Ok(Some(shares.into_iter().map(in_claim_order).collect()))
}

/// What a claim's carried reports did, to answer them and, after the
/// commit, to hint the queues they freed slots in or scheduled retries of.
struct Applied {
    completed: Vec<Result<Completed>>,
    failed: Vec<Result<Reported>>,
    /// Jobs ended, per queue.
    freed: HashMap<String, usize>,
}

impl Applied {
    /// After the commit: the hints a complete or fail route would send.
    fn notify(&self, store: &PgStore, tenant: &str) {
        for (queue, jobs) in &self.freed {
            store.notify_freed(tenant, queue, *jobs);
        }
        for reported in self.failed.iter().flatten() {
            if reported.now {
                store.notify_when_due(tenant, &reported.job);
            }
        }
    }
}

/// Applies a claim's carried reports on `db` (the claim's transaction):
/// the completions as one batch, then each failure.
async fn apply_reports(
    db: &mut Runner<'_>,
    tenant: &str,
    reports: &CarriedReports,
    jitters: &[f64],
) -> Result<Applied> {
    let (completed, mut freed) = match reports.complete.is_empty() {
        true => (Vec::new(), HashMap::new()),
        false => complete_many_on(db, tenant, &reports.complete).await?,
    };
    let mut failed = Vec::with_capacity(reports.fail.len());
    for (item, jitter) in reports.fail.iter().zip(jitters) {
        let reported = fail_on(
            db,
            tenant,
            item.id,
            item.lease_token,
            &item.failure,
            *jitter,
        )
        .await;
        if let Ok(r) = &reported {
            *freed.entry(r.job.queue.clone()).or_default() += 1;
        }
        failed.push(reported);
    }
    Ok(Applied {
        completed,
        failed,
        freed,
    })
}

/// Which flow control a queue's row has.
#[derive(Debug, Default)]
struct Limits {
    /// Any setting at all.
    any: bool,
    /// `key_max_running` or `fair`: the claim reads per key.
    by_key: bool,
}

impl Limits {
    /// From the row of `LOCK_QUEUE_LIMITS`.
    fn of(row: &PgRow) -> std::result::Result<Limits, sqlx::Error> {
        let by_key = row.try_get::<Option<i32>, _>("key_max_running")?.is_some()
            || row.try_get::<bool, _>("fair")?;
        Ok(Limits {
            any: by_key
                || row.try_get::<Option<i32>, _>("max_running")?.is_some()
                || row.try_get::<Option<i32>, _>("rate_limit_count")?.is_some(),
            by_key,
        })
    }
}

/// What one claim statement answered.
#[derive(Debug, Default)]
struct ClaimOutcome {
    jobs: Vec<ClaimedJob>,
    /// `CLAIM` found flow control it does not apply.
    limited: bool,
    /// The limits held the claim back.
    throttled: bool,
    /// The rate limit is used up: in how long its window frees how many slots.
    window_opens: Option<(std::time::Duration, usize)>,
    /// The last key `CLAIM_BY_KEY`'s walk visited, when it walked.
    walked_to: Option<String>,
}

impl ClaimOutcome {
    /// Reads a turn's outcome columns (see `sql::attempts::turn_outcome!`).
    fn read_turn(&mut self, row: &PgRow) -> std::result::Result<(), sqlx::Error> {
        self.throttled = row.try_get("throttled")?;
        let opens: Option<i64> = row.try_get("window_opens_ms")?;
        let jobs: i64 = row.try_get("window_opens_jobs")?;
        self.window_opens = opens.map(|ms| {
            (
                std::time::Duration::from_millis(ms.max(0) as u64),
                jobs.max(1) as usize,
            )
        });
        Ok(())
    }
}

/// Runs `CLAIM` for one claimant.
async fn run_claim<'c, E>(conn: E, tenant: &str, req: &ClaimRequest) -> Result<ClaimOutcome>
where
    E: sqlx::PgExecutor<'c>,
{
    let rows = sqlx::query(CLAIM)
        .bind(tenant)
        .bind(&req.queue)
        .bind(i64::from(req.limit))
        .bind(req.lease_ttl_ms)
        .bind(&req.worker_id)
        .fetch_all(conn)
        .await
        .db()?;
    read_claim(&rows, false)
}

/// A claim statement's rows; `turn`: they repeat the turn's outcome
/// (`CLAIM_BY_KEY`; there is one).
fn read_claim(rows: &[PgRow], turn: bool) -> Result<ClaimOutcome> {
    let mut out = ClaimOutcome {
        jobs: Vec::with_capacity(rows.len()),
        ..ClaimOutcome::default()
    };
    if let (true, Some(row)) = (turn, rows.first()) {
        out.read_turn(row).db()?;
        out.walked_to = row.try_get("walked_to").db()?;
    }
    for row in rows {
        // No job claimed: one row of NULLs that says whether the queue is limited.
        if row.try_get::<Option<Uuid>, _>("id").db()?.is_none() {
            out.limited = row.try_get("limited").db()?;
            continue;
        }
        out.jobs.push(ClaimedJob {
            job: rows::job(row).db()?,
            lease_token: rows::lease_token(row).db()?,
        });
    }
    Ok(out)
}
