//! Statements of `maintenance.rs`: bounded passes over every tenant, and
//! the named leases.

/// Queue rows that hold nothing, at most ?1 (all tenants): no job in any
/// state, not paused, every setting at its default (?2–?5), no flow control. The write lock
/// of the transaction keeps an enqueue from slipping a job in between.
pub(crate) const PRUNE_EMPTY_QUEUES: &str = "DELETE FROM tether_queues WHERE (tenant, name) IN (\
     SELECT c.tenant, c.name FROM tether_queues AS c \
     WHERE c.paused = 0 AND c.max_attempts = ?2 AND c.backoff_base_ms = ?3 \
     AND c.backoff_cap_ms = ?4 AND c.default_lease_ttl_ms = ?5 AND c.max_running IS NULL \
     AND c.rate_limit_count IS NULL AND c.key_max_running IS NULL AND c.fair = 0 \
     AND NOT EXISTS (SELECT 1 FROM tether_jobs AS j WHERE j.tenant = c.tenant AND j.queue = c.name) \
     LIMIT ?1)";

/// The reaper, one statement for up to ?1 lapsed leases (all tenants). The
/// new state is decided per row in one CASE, cancel first, then an exhausted
/// budget, so an exhausted job can never slip back to `queued` (invariants
/// 4 and 5; mirrors `tether_core::lifecycle::lapse_outcome`). SQLite
/// evaluates every SET expression against the old row.
pub(crate) const REAP: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN cancel_requested = 1 THEN 'cancelled' ",
    "WHEN attempt >= max_attempts THEN 'failed' ELSE 'queued' END, ",
    "run_at = CASE WHEN cancel_requested = 0 AND attempt < max_attempts THEN ",
    now_ms!(),
    " ELSE run_at END, ",
    "finished_at = CASE WHEN cancel_requested = 1 OR attempt >= max_attempts THEN ",
    now_ms!(),
    " ELSE NULL END, ",
    "last_error = 'lease expired: worker ' || COALESCE(worker_id, '?') ",
    "|| ' stopped heartbeating during attempt ' || attempt || ' of ' || max_attempts, ",
    "lease_token = NULL, lease_expires_at = NULL, updated_at = ",
    now_ms!(),
    " WHERE id IN (SELECT id FROM tether_jobs WHERE state = 'running' AND lease_expires_at < ",
    now_ms!(),
    " ORDER BY lease_expires_at LIMIT ?1) ",
    "RETURNING id, state, tenant, queue, has_dependents"
);

/// `lease_expired` events, detail = the new state (?1: JSON array of ids).
pub(crate) const LEASE_EXPIRED_EVENTS: &str =
    events_of_ids!("updated_at", "lease_expired", "worker_id", "state");

pub(crate) const EXPIRE: &str = concat!(
    "UPDATE tether_jobs SET state = 'failed', last_error = ?2, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE id IN (SELECT id FROM tether_jobs WHERE state = 'queued' ",
    "AND expires_at IS NOT NULL AND expires_at < ",
    now_ms!(),
    " ORDER BY expires_at LIMIT ?1) RETURNING id, has_dependents"
);

/// `expired` events, detail = the instant missed, as ISO 8601 UTC with
/// milliseconds (?1: JSON array of ids).
pub(crate) const EXPIRED_EVENTS: &str = events_of_ids!(
    "updated_at",
    "expired",
    "NULL",
    "'not claimed before ' || strftime('%Y-%m-%dT%H:%M:%fZ', expires_at / 1000.0, 'unixepoch')"
);

/// Up to ?2 jobs that finished at least ?1 ms ago, oldest first: found on
/// the `tether_jobs_finished` index (which holds the rowid) and deleted by
/// rowid, with no walk of the primary key per row.
pub(crate) const PRUNE: &str = concat!(
    "DELETE FROM tether_jobs WHERE rowid IN (SELECT rowid FROM tether_jobs ",
    "WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at <= ",
    now_ms!(),
    " - ?1 ORDER BY finished_at LIMIT ?2) RETURNING id"
);

/// Keeps the newest `seq` of the history of pruned jobs ?1 (a JSON array
/// of ids) for the feed's readers (see `feed.rs`); before `PRUNE_EVENTS`.
pub(crate) const PRUNE_ANNOUNCE: &str = "UPDATE tether_feed_pruned SET seq = max(seq, \
     COALESCE((SELECT max(e.seq) FROM tether_job_events e \
               WHERE e.job_id IN (SELECT value FROM json_each(?1))), 0))";

pub(crate) const PRUNE_EVENTS: &str =
    "DELETE FROM tether_job_events WHERE job_id IN (SELECT value FROM json_each(?1))";

/// The edges of pruned jobs ?1 (a JSON array of ids) to what they waited
/// for. Edges from them to their dependents stay: a dependency pruned
/// counts as met (`sql::workflows::SETTLE_EDGES`).
pub(crate) const PRUNE_EDGES: &str =
    "DELETE FROM tether_job_dependencies WHERE job_id IN (SELECT value FROM json_each(?1))";

/// Takes a named lease if it is free or lapsed, in one statement: the
/// upsert's WHERE leaves a live holder's row alone (and returns nothing).
pub(crate) const ACQUIRE_LEASE: &str = concat!(
    "INSERT INTO tether_leases (name, holder, token, acquired_at, expires_at) VALUES (?1, ?2, ",
    new_token!(),
    ", ",
    now_ms!(),
    ", ",
    now_ms!(),
    " + ?3) ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = excluded.token, ",
    "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at ",
    "WHERE tether_leases.expires_at < excluded.acquired_at ",
    "RETURNING name, holder, token, expires_at"
);

/// Whether the lease ?1 still carries the token ?2 and has not expired:
/// the maintenance fence, read in the pass's own write transaction.
pub(crate) const LEASE_HOLDS: &str = concat!(
    "SELECT EXISTS (SELECT 1 FROM tether_leases WHERE name = ?1 AND token = ?2 AND expires_at > ",
    now_ms!(),
    ")"
);

/// Renews with the token, lapsed or not: only a new holder fences the old.
pub(crate) const RENEW_LEASE: &str = concat!(
    "UPDATE tether_leases SET expires_at = ",
    now_ms!(),
    " + ?3 WHERE name = ?1 AND token = ?2 RETURNING name, holder, token, expires_at"
);

pub(crate) const RELEASE_LEASE: &str = "DELETE FROM tether_leases WHERE name = ?1 AND token = ?2";
