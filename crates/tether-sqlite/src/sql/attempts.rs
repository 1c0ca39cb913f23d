//! Statements of `attempts.rs`: the claim and the reports that end or
//! extend an attempt, each fenced by the lease token.

/// Whether a claim could find anything: a ready job in the queue (?1 tenant,
/// ?2 queue). Read on a reader connection, without the write lock.
pub(crate) const ANY_READY: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM tether_jobs ",
    "WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND run_at <= ",
    now_ms!(),
    " AND (expires_at IS NULL OR expires_at > ",
    now_ms!(),
    "))"
);

/// How many jobs a claim of ?5 may take from queue ?2 of tenant ?1: ?5, or
/// fewer when the queue's `max_running` leaves less room (never below 0: a
/// negative LIMIT is no limit in SQLite). The claim runs in the single
/// writer's transaction, so the count of running jobs cannot change under it.
macro_rules! claim_limit {
    () => {
        "(SELECT CASE WHEN m.max_running IS NULL THEN ?5 \
         ELSE MAX(0, MIN(?5, m.max_running - (SELECT count(*) FROM tether_jobs \
             WHERE tenant = ?1 AND queue = ?2 AND state = 'running'))) END \
         FROM (SELECT (SELECT max_running FROM tether_queues \
             WHERE tenant = ?1 AND name = ?2) AS max_running) AS m)"
    };
}

/// The claim, in one statement: pick up to ?5 ready jobs in claim order from
/// an unpaused queue and lease each with its own fresh token. The lease TTL
/// is the request's (?3), else the queue's, else ?6.
/// Takes fewer when the queue's `max_running` leaves less room.
/// Whether queue ?2 of tenant ?1 has a `max_running`.
pub(crate) const IS_LIMITED: &str = "SELECT EXISTS (SELECT 1 FROM tether_queues \
     WHERE tenant = ?1 AND name = ?2 AND max_running IS NOT NULL)";

pub(crate) const CLAIM: &str = concat!(
    "UPDATE tether_jobs SET state = 'running', attempt = attempt + 1, lease_token = ",
    new_token!(),
    ", lease_ttl_ms = COALESCE(?3, (SELECT default_lease_ttl_ms FROM tether_queues ",
    "WHERE tenant = ?1 AND name = ?2), ?6), ",
    "lease_expires_at = ",
    now_ms!(),
    " + COALESCE(?3, (SELECT default_lease_ttl_ms FROM tether_queues ",
    "WHERE tenant = ?1 AND name = ?2), ?6), ",
    "heartbeat_at = ",
    now_ms!(),
    ", started_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", worker_id = ?4, progress = NULL ",
    "WHERE id IN (SELECT id FROM tether_jobs ",
    "WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND run_at <= ",
    now_ms!(),
    " AND (expires_at IS NULL OR expires_at > ",
    now_ms!(),
    ") AND NOT EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2 AND paused = 1) ",
    "ORDER BY priority DESC, run_at, id LIMIT ",
    claim_limit!(),
    ") RETURNING ",
    job_columns!()
);

/// `claimed` events of the jobs just claimed (?1: JSON array of ids).
pub(crate) const CLAIMED_EVENTS: &str =
    events_of_ids!("started_at", "claimed", "worker_id", "NULL");

/// The fence every worker operation matches on.
macro_rules! fenced {
    () => {
        " WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3 AND state = 'running' "
    };
}

/// Extends a lease by the given TTL (?4), else the claim's.
pub(crate) const HEARTBEAT: &str = concat!(
    "UPDATE tether_jobs SET lease_expires_at = ",
    now_ms!(),
    " + COALESCE(?4, lease_ttl_ms, ?6), heartbeat_at = ",
    now_ms!(),
    ", progress = COALESCE(?5, progress), updated_at = ",
    now_ms!(),
    fenced!(),
    "RETURNING lease_expires_at, cancel_requested"
);

pub(crate) const COMPLETE: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = ?4, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    // The token stays until the next claim: a repeated report is told by it.
    ", lease_expires_at = NULL",
    fenced!(),
    "RETURNING ",
    job_columns!()
);

/// Unpacks a flat JSON array holding `$n` scalars per record (`json_each`
/// over scalars is cheap; over objects, SQLite re-renders and re-parses the
/// object text on every field access) into rows numbered `idx`, with the
/// listed columns in order. Rows come out grouped by `key / $n`.
macro_rules! unpack {
    ($param:literal, $n:literal, [$($i:literal => $col:literal),+ $(,)?]) => {
        concat!(
            "SELECT key / ", $n, " AS idx",
            $(", max(CASE key % ", $n, " WHEN ", $i, " THEN value END) AS ", $col,)+
            " FROM json_each(", $param, ") GROUP BY key / ", $n
        )
    };
}

/// Completes a batch (?2: flat JSON array `[id, token, result, ...]`) in one
/// statement. The unary `+` keeps SQLite from driving the join from the
/// (tenant, state) index, which would scan every running job of the tenant
/// once per item: the plan walks the batch and looks each job up by primary
/// key.
pub(crate) const COMPLETE_MANY: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = c.r, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", lease_expires_at = NULL FROM (",
    unpack!("?2", "3", ["0" => "id", "1" => "t", "2" => "r"]),
    ") AS c WHERE tether_jobs.id = c.id AND +tether_jobs.tenant = ?1 ",
    "AND tether_jobs.lease_token = c.t AND +tether_jobs.state = 'running' ",
    "RETURNING id, queue"
);

/// `succeeded` events of the jobs just completed (?1: JSON array of ids).
pub(crate) const SUCCEEDED_EVENTS: &str =
    events_of_ids!("finished_at", "succeeded", "worker_id", "NULL");

/// The succeeded jobs among ?2 (a JSON array of ids) of tenant ?1, with the
/// token that completed each.
pub(crate) const SUCCEEDED_TOKENS: &str = "SELECT id, lease_token FROM tether_jobs \
     WHERE tenant = ?1 AND state = 'succeeded' AND id IN (SELECT value FROM json_each(?2))";

/// What `fail` needs to route the failure, read under the write lock.
pub(crate) const FAIL_READ: &str = concat!(
    "SELECT attempt, max_attempts, cancel_requested, backoff_base_ms, backoff_cap_ms ",
    "FROM tether_jobs",
    fenced!()
);

/// Applies a routed failure: ?2 the new state, ?4 the retry delay (NULL for
/// a terminal outcome).
pub(crate) const FAIL_WRITE: &str = concat!(
    "UPDATE tether_jobs SET state = ?2, last_error = ?3, ",
    "run_at = CASE WHEN ?4 IS NULL THEN run_at ELSE ",
    now_ms!(),
    " + ?4 END, ",
    "finished_at = CASE WHEN ?2 = 'queued' THEN NULL ELSE ",
    now_ms!(),
    " END, ",
    "lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_columns!()
);

/// "Not now": back to `queued` after ?4 ms with the attempt given back, or
/// `cancelled` if cancellation was requested meanwhile (the attempt is then
/// kept: it was spent, and the job will not run again).
pub(crate) const SNOOZE: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN cancel_requested = 1 THEN 'cancelled' ELSE 'queued' END, ",
    "attempt = CASE WHEN cancel_requested = 1 THEN attempt ELSE attempt - 1 END, ",
    "run_at = CASE WHEN cancel_requested = 1 THEN run_at ELSE ",
    now_ms!(),
    " + ?4 END, ",
    "finished_at = CASE WHEN cancel_requested = 1 THEN ",
    now_ms!(),
    " ELSE NULL END, ",
    "lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    fenced!(),
    "RETURNING ",
    job_columns!()
);

/// The job (?2 of tenant ?1) if the token ?3 ended its last attempt and it
/// stands in one of the states ?4 (a JSON array): a repeated report (see
/// `tether_core::lifecycle::Report`).
pub(crate) const REPEATED_REPORT: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether_jobs WHERE tenant = ?1 AND id = ?2 AND lease_token = ?3 ",
    "AND state IN (SELECT value FROM json_each(?4))"
);

/// Records that a stale token tried operation ?3 on a job of the tenant;
/// inserts nothing when the job does not exist there.
pub(crate) const LEASE_LOST: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT id, tenant, ",
    now_ms!(),
    ", 'lease_lost', attempt, NULL, ?3 FROM tether_jobs WHERE tenant = ?1 AND id = ?2"
);

/// `lease_lost` events for the items of a batch that did not complete
/// (?2: JSON array of ids); returns the ids that exist in the tenant.
pub(crate) const LEASE_LOST_MANY: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT t.id, t.tenant, ",
    now_ms!(),
    ", 'lease_lost', t.attempt, NULL, ?3 ",
    "FROM json_each(?2) AS c JOIN tether_jobs AS t ON t.id = c.value AND t.tenant = ?1 ",
    "RETURNING job_id"
);
