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

/// The claim's update of the jobs that match `$which`: lease each with its
/// own fresh token. The lease TTL is the request's (?3), else
/// the queue's, else ?6; ?4 the worker.
macro_rules! lease_jobs {
    ($which:expr) => {
        concat!(
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
            "WHERE ",
            $which,
            " RETURNING ",
            job_columns!()
        )
    };
}

/// `$columns` of the ready jobs of queue ?2 of tenant ?1 that also match
/// `$and`, in claim order.
macro_rules! ready_jobs {
    ($columns:literal, $and:literal) => {
        concat!(
            "SELECT ",
            $columns,
            " FROM tether_jobs ",
            "WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND run_at <= ",
            now_ms!(),
            " AND (expires_at IS NULL OR expires_at > ",
            now_ms!(),
            ")",
            $and,
            " ORDER BY priority DESC, run_at, id"
        )
    };
}

/// The queue's flow-control settings (no row: none) and whether it is paused.
pub(crate) const QUEUE_LIMITS: &str = "SELECT paused, max_running, rate_limit_count, \
     rate_limit_period_ms, key_max_running, fair FROM tether_queues WHERE tenant = ?1 AND name = ?2";

/// The claim, in one statement: up to ?5 ready jobs in claim order from an
/// unpaused queue (the store has already brought ?5 down to the room its
/// limits leave).
pub(crate) const CLAIM: &str = lease_jobs!(concat!(
    "id IN (",
    ready_jobs!(
        "id",
        " AND NOT EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2 AND paused = 1)"
    ),
    " LIMIT ?5)"
));

/// The claim of the jobs ?5 (a JSON array of ids) a key-limited or fair
/// claim chose, still queued.
pub(crate) const CLAIM_IDS: &str =
    lease_jobs!("id IN (SELECT value FROM json_each(?5)) AND state = 'queued'");

/// The running jobs of queue ?2 of tenant ?1.
pub(crate) const COUNT_RUNNING: &str =
    "SELECT count(*) FROM tether_jobs WHERE tenant = ?1 AND queue = ?2 AND state = 'running'";

/// The running jobs of each concurrency key of queue ?2 of tenant ?1.
pub(crate) const RUNNING_BY_KEY: &str = "SELECT concurrency_key, count(*) AS n FROM tether_jobs \
     WHERE tenant = ?1 AND queue = ?2 AND state = 'running' AND concurrency_key IS NOT NULL \
     GROUP BY concurrency_key";

/// The rate window of queue ?2 of tenant ?1 with period ?3 ms: jobs handed
/// out in it, and the time and jobs of its oldest claim.
pub(crate) const RATE_WINDOW: &str = concat!(
    "SELECT COALESCE(sum(jobs), 0) AS used, min(at) AS oldest, ",
    "(SELECT w2.jobs FROM tether_queue_claims w2 WHERE w2.tenant = ?1 AND w2.queue = ?2 ",
    "AND w2.at > ",
    now_ms!(),
    " - ?3 ORDER BY w2.at LIMIT 1) AS oldest_jobs, ",
    now_ms!(),
    " AS now FROM tether_queue_claims WHERE tenant = ?1 AND queue = ?2 AND at > ",
    now_ms!(),
    " - ?3"
);

/// Logs a claim of ?4 jobs at ?3 in queue ?2's rate window, and trims the
/// log of claims older than the longest period (one day).
pub(crate) const LOG_CLAIM: &str =
    "INSERT INTO tether_queue_claims (tenant, queue, at, jobs) VALUES (?1, ?2, ?3, ?4)";
/// See [`LOG_CLAIM`].
pub(crate) const TRIM_CLAIMS: &str = concat!(
    "DELETE FROM tether_queue_claims WHERE tenant = ?1 AND queue = ?2 AND at <= ",
    now_ms!(),
    " - 86400000"
);

/// A walk over `tether_jobs_key_claim`: the concurrency keys with queued
/// jobs in queue ?2 of tenant ?1, in order, after ?3 ('' for the first),
/// at most ?4 of them; `$upto` bounds them from above (or is empty).
macro_rules! walk_keys {
    ($upto:literal) => {
        concat!(
            "WITH RECURSIVE walk(key, n) AS (
                SELECT (SELECT concurrency_key FROM tether_jobs
                        WHERE tenant = ?1 AND queue = ?2 AND state = 'queued'
                          AND concurrency_key > ?3 ",
            $upto,
            " ORDER BY concurrency_key LIMIT 1), 1
                UNION ALL
                SELECT (SELECT concurrency_key FROM tether_jobs
                        WHERE tenant = ?1 AND queue = ?2 AND state = 'queued'
                          AND concurrency_key > walk.key ",
            $upto,
            " ORDER BY concurrency_key LIMIT 1), walk.n + 1
                FROM walk WHERE walk.key IS NOT NULL AND walk.n < ?4
            )
            SELECT key FROM walk WHERE key IS NOT NULL ORDER BY n"
        )
    };
}

/// The walk's first part: keys after where the queue's previous walk
/// stopped (see `tether_core::flow::walk_len`).
pub(crate) const WALK_KEYS: &str = walk_keys!("");

/// The walk's second part, wrapped around: keys from the first up to ?5
/// (where the first part started).
pub(crate) const WALK_KEYS_UPTO: &str = walk_keys!("AND concurrency_key <= ?5");

/// The first ?3 ready jobs of the queue (the columns of a head), in claim
/// order: where a claim that is not fair looks first.
pub(crate) const HEAD_WINDOW: &str = concat!(
    ready_jobs!("id, priority, run_at, concurrency_key", ""),
    " LIMIT ?3"
);

/// The first ?4 ready jobs of key ?3 (the columns of a head), in claim order.
pub(crate) const KEY_HEAD: &str = concat!(
    ready_jobs!(
        "id, priority, run_at, concurrency_key",
        " AND concurrency_key = ?3"
    ),
    " LIMIT ?4"
);

/// The first ?3 ready jobs without a key (the columns of a head).
pub(crate) const UNKEYED_HEAD: &str = concat!(
    ready_jobs!(
        "id, priority, run_at, concurrency_key",
        " AND concurrency_key IS NULL"
    ),
    " LIMIT ?3"
);

/// Whether queue ?2 of tenant ?1 has queued jobs without a key.
pub(crate) const ANY_UNKEYED: &str = "SELECT EXISTS (SELECT 1 FROM tether_jobs \
     WHERE tenant = ?1 AND queue = ?2 AND state = 'queued' AND concurrency_key IS NULL)";

/// How many ready jobs (up to ?3) queue ?2 of tenant ?1 has.
pub(crate) const COUNT_READY: &str =
    concat!("SELECT count(*) FROM (", ready_jobs!("1", ""), " LIMIT ?3)");

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

/// Completes job ?2 of tenant ?1 if token ?3 still owns it: result ?4, and
/// ?5 the report's digest (`tether_core::lifecycle::Report`).
pub(crate) const COMPLETE: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = ?4, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    // The token stays until the next claim: with the digest beside it, a
    // repeated report is told from a different one.
    ", lease_expires_at = NULL, report_digest = ?5",
    fenced!(),
    "RETURNING ",
    job_columns!()
);

/// Completes a batch (?2: flat JSON array `[id, token, result, digest,
/// ...]`) in one statement; answers each completed job's id, the token and
/// digest it recorded (which tell the item that completed it when the batch
/// names the job twice), queue and attempt times (for the metrics), and
/// whether others wait for it (`workflows::take_released_after`). The unary `+` keeps SQLite from driving the join from the
/// (tenant, state) index, which would scan every running job of the tenant
/// once per item: the plan walks the batch and looks each job up by primary
/// key.
pub(crate) const COMPLETE_MANY: &str = concat!(
    "UPDATE tether_jobs SET state = 'succeeded', result = c.r, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    ", lease_expires_at = NULL, report_digest = c.d FROM (",
    unpack!("?2", "4", ["0" => "id", "1" => "t", "2" => "r", "3" => "d"]),
    ") AS c WHERE tether_jobs.id = c.id AND +tether_jobs.tenant = ?1 ",
    "AND tether_jobs.lease_token = c.t AND +tether_jobs.state = 'running' ",
    "RETURNING id, lease_token, report_digest, queue, started_at, finished_at, has_dependents"
);

/// `succeeded` events of the jobs just completed (?1: JSON array of ids).
pub(crate) const SUCCEEDED_EVENTS: &str =
    events_of_ids!("finished_at", "succeeded", "worker_id", "NULL");

/// The jobs among ?2 (a JSON array of ids) of tenant ?1 as a report that
/// did not apply finds them (`tether_core::lifecycle::Standing`): state,
/// token and the digest of the report that ended that token's attempt.
pub(crate) const STANDING_MANY: &str = "SELECT id, state, lease_token, report_digest \
     FROM tether_jobs WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))";

/// What `fail` needs to route the failure, read under the write lock.
pub(crate) const FAIL_READ: &str = concat!(
    "SELECT attempt, max_attempts, cancel_requested, backoff_base_ms, backoff_cap_ms ",
    "FROM tether_jobs",
    fenced!()
);

/// Applies a routed failure: ?2 the new state, ?4 the retry delay (NULL for
/// a terminal outcome), ?5 the report's digest.
pub(crate) const FAIL_WRITE: &str = concat!(
    "UPDATE tether_jobs SET state = ?2, last_error = ?3, report_digest = ?5, ",
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
/// kept: it was spent, and the job will not run again). ?5 is the report's
/// digest.
pub(crate) const SNOOZE: &str = concat!(
    "UPDATE tether_jobs SET report_digest = ?5, ",
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

/// Job ?2 of tenant ?1 as a report that did not apply finds it (see
/// `tether_core::lifecycle::Report::answer`): its columns and the digest of
/// the report that ended the attempt of the token it carries.
pub(crate) const STANDING: &str = concat!(
    "SELECT ",
    job_columns!(),
    ", report_digest FROM tether_jobs WHERE tenant = ?1 AND id = ?2"
);

/// The lease token job ?2 of tenant ?1 holds (NULL when none); no row when
/// the job does not exist there.
pub(crate) const LEASE_TOKEN: &str =
    "SELECT lease_token FROM tether_jobs WHERE tenant = ?1 AND id = ?2";

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
