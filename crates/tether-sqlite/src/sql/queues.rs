//! Statements of `queues.rs`.

/// The per-queue figures of [`crate::rows::queue_stats`], for the queue named by the
/// SQL expressions `$tenant` and `$queue`, measured against `s.now`.
///
/// Each figure is a separate scalar subquery so that each uses the index made
/// for it: the counts are covered by `tether_jobs_list`, the ready figures by
/// the claim index, the lapsed leases by the running index.
macro_rules! stats_columns {
    ($tenant:literal, $queue:literal) => {
        concat!(
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'waiting') AS n_waiting, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'queued') AS n_queued, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'running') AS n_running, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'succeeded') AS n_succeeded, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'failed') AS n_failed, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'cancelled') AS n_cancelled, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'queued' AND j.run_at <= s.now) AS n_ready, ",
            "(SELECT min(j.run_at) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'queued' AND j.run_at <= s.now) AS oldest_ready, ",
            "(SELECT count(*) FROM tether_jobs j WHERE j.tenant = ",
            $tenant,
            " AND j.queue = ",
            $queue,
            " AND j.state = 'running' AND j.lease_expires_at < s.now) AS n_lapsed, ",
            "s.now AS now, c.paused AS paused, c.max_attempts AS max_attempts, ",
            "c.backoff_base_ms AS backoff_base_ms, c.backoff_cap_ms AS backoff_cap_ms, ",
            "c.default_lease_ttl_ms AS default_lease_ttl_ms, c.max_running AS max_running, ",
            "c.rate_limit_count AS rate_limit_count, c.rate_limit_period_ms AS rate_limit_period_ms, ",
            "c.key_max_running AS key_max_running, c.fair AS fair"
        )
    };
}

/// Stats of one queue, whether or not it has a row.
pub(crate) const QUEUE_STATS: &str = concat!(
    "SELECT ?2 AS name, ",
    stats_columns!("?1", "?2"),
    " FROM (SELECT ",
    now_ms!(),
    " AS now) AS s LEFT JOIN tether_queues AS c ON c.tenant = ?1 AND c.name = ?2"
);

/// Stats of every queue of the tenant that has a row, by name.
pub(crate) const LIST_QUEUES: &str = concat!(
    "SELECT c.name AS name, ",
    stats_columns!("c.tenant", "c.name"),
    " FROM (SELECT ",
    now_ms!(),
    " AS now) AS s JOIN tether_queues AS c ON c.tenant = ?1 ORDER BY c.name"
);

/// Whether queue ?2 of tenant ?1 has a row.
pub(crate) const QUEUE_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2)";

pub(crate) const SET_PAUSED: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO UPDATE SET paused = excluded.paused, ",
    "updated_at = excluded.updated_at"
);

/// Resumes a queue that has a row; a queue without one is not paused.
pub(crate) const RESUME: &str = concat!(
    "UPDATE tether_queues SET paused = 0, updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND name = ?2 AND paused = 1"
);

/// Upserts queue settings: patch fields ?3–?6 where set, else the current
/// value (or the default ?7–?10 for a new row); each flow-control setting
/// becomes its new value (NULL: no limit) when its flag is set:
/// `max_running` ?12 when ?11, the rate limit ?14/?15 when ?13,
/// `key_max_running` ?17 when ?16; `fair` becomes ?18 unless NULL.
pub(crate) const CONFIGURE_QUEUE: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, max_running, rate_limit_count, ",
    "rate_limit_period_ms, key_max_running, fair, created_at, updated_at) ",
    "VALUES (?1, ?2, 0, COALESCE(?3, ?7), COALESCE(?4, ?8), COALESCE(?5, ?9), ",
    "COALESCE(?6, ?10), CASE WHEN ?11 THEN ?12 END, CASE WHEN ?13 THEN ?14 END, ",
    "CASE WHEN ?13 THEN ?15 END, CASE WHEN ?16 THEN ?17 END, COALESCE(?18, 0), ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO UPDATE SET ",
    "max_attempts = COALESCE(?3, max_attempts), ",
    "backoff_base_ms = COALESCE(?4, backoff_base_ms), ",
    "backoff_cap_ms = COALESCE(?5, backoff_cap_ms), ",
    "default_lease_ttl_ms = COALESCE(?6, default_lease_ttl_ms), ",
    "max_running = CASE WHEN ?11 THEN ?12 ELSE max_running END, ",
    "rate_limit_count = CASE WHEN ?13 THEN ?14 ELSE rate_limit_count END, ",
    "rate_limit_period_ms = CASE WHEN ?13 THEN ?15 ELSE rate_limit_period_ms END, ",
    "key_max_running = CASE WHEN ?16 THEN ?17 ELSE key_max_running END, ",
    "fair = COALESCE(?18, fair), ",
    "updated_at = excluded.updated_at"
);

/// Removes an empty queue's row (?1 tenant, ?2 queue); one row when it did.
/// In the writer's transaction, so no enqueue runs between check and delete.
pub(crate) const DELETE_EMPTY_QUEUE: &str = "DELETE FROM tether_queues \
     WHERE tenant = ?1 AND name = ?2 \
     AND NOT EXISTS (SELECT 1 FROM tether_jobs WHERE tenant = ?1 AND queue = ?2) \
     RETURNING 1";

/// How many jobs a queue holds, and whether it has a row.
pub(crate) const QUEUE_HOLDS: &str = "SELECT \
     (SELECT count(*) FROM tether_jobs WHERE tenant = ?1 AND queue = ?2) AS jobs, \
     EXISTS (SELECT 1 FROM tether_queues WHERE tenant = ?1 AND name = ?2) AS has_row";

/// Outcome events of a queue's jobs per minute (ms of the minute's start)
/// since ?3.
pub(crate) const THROUGHPUT_EVENTS: &str = "SELECT (e.at / 60000) * 60000 AS minute, \
     e.event AS event, count(*) AS n \
     FROM tether_job_events e JOIN tether_jobs j ON j.id = e.job_id \
     WHERE e.at >= ?3 AND e.tenant = ?1 AND j.tenant = ?1 AND j.queue = ?2 \
     AND e.event IN ('succeeded', 'failed', 'retry_scheduled', 'cancelled') \
     GROUP BY 1, 2";

/// Wait and run times (ms) of the last attempt of the queue's jobs that
/// finished since ?3; the percentiles are taken from them.
pub(crate) const THROUGHPUT_TIMES: &str = "SELECT max(0, started_at - run_at) AS wait, \
     max(0, finished_at - started_at) AS run \
     FROM tether_jobs \
     WHERE tenant = ?1 AND queue = ?2 AND state IN ('succeeded', 'failed') \
     AND finished_at >= ?3 AND started_at IS NOT NULL";
