//! SQL fragments shared by the statements. They are macros (not consts) so
//! that whole statements can be assembled with `concat!` at compile time and
//! stay `&'static str`, which sqlx caches as prepared statements.

/// SQLite's clock as integer milliseconds since the Unix epoch.
///
/// Invariant 3 (server clock): "now" is never computed in Rust. SQLite keeps
/// `'now'` fixed for the whole of one `sqlite3_step`, so every row an UPDATE
/// touches (and its RETURNING values) sees the same instant. `ROUND` guards
/// against `x.9999` from the floating-point seconds.
macro_rules! now_ms {
    () => {
        "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)"
    };
}

/// A random version-4 UUID in lowercase hyphenated form, made by SQLite.
///
/// Every call of `randomblob`/`random` is evaluated per row, so a claim of N
/// jobs mints N independent tokens in one statement. `random() & 3` picks the
/// RFC 4122 variant digit (8, 9, a or b) without the overflow `abs()` can hit.
macro_rules! new_token {
    () => {
        "(lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' \
         || substr(lower(hex(randomblob(2))), 2) || '-' \
         || substr('89ab', 1 + (random() & 3), 1) || substr(lower(hex(randomblob(2))), 2) \
         || '-' || lower(hex(randomblob(6))))"
    };
}

/// The columns [`crate::rows::job`] reads, plus the lease token for claims.
macro_rules! job_cols {
    () => {
        "id, tenant, queue, kind, payload, result, state, priority, attempt, max_attempts, \
         backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at, finished_at, \
         updated_at, last_error, unique_key, idempotency_key, tags, expires_at, timeout_ms, \
         cancel_requested, worker_id, lease_token, lease_expires_at, heartbeat_at, progress"
    };
}

/// The columns [`crate::rows::schedule`] reads.
macro_rules! schedule_cols {
    () => {
        "id, tenant, name, cron, timezone, queue, kind, payload, enabled, overlap, next_run_at, \
         last_run_at, last_job_id, created_at, updated_at"
    };
}

/// The per-queue figures of [`crate::rows::stats`], for the queue named by the
/// SQL expressions `$tenant` and `$queue`, measured against `s.now`.
///
/// Each figure is a separate scalar subquery so that each uses the index made
/// for it: the counts are covered by `tether_jobs_list`, the ready figures by
/// the claim index, the lapsed leases by the running index.
macro_rules! stats_cols {
    ($tenant:literal, $queue:literal) => {
        concat!(
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
            "c.default_lease_ttl_ms AS default_lease_ttl_ms"
        )
    };
}

/// One history row per job whose id is in the JSON array `?1`, read from the
/// job row just written: `$at` the timestamp column, `$event` the event
/// name, `$worker` and `$detail` SQL expressions.
macro_rules! events_of_ids {
    ($at:literal, $event:literal, $worker:literal, $detail:literal) => {
        concat!(
            "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
            "SELECT id, tenant, ",
            $at,
            ", '",
            $event,
            "', attempt, ",
            $worker,
            ", ",
            $detail,
            " FROM tether_jobs WHERE id IN (SELECT value FROM json_each(?1))"
        )
    };
}
