//! Statements of `jobs.rs`: reading jobs and their history, cancel and
//! replay.

pub(crate) const SELECT_JOB: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether_jobs WHERE tenant = ?1 AND id = ?2"
);

/// One page of a job's history: ?3 the cursor (the `seq` of the previous
/// page's last event, NULL from the start), ?4 the page size. A job without
/// events past the cursor still gives one row, with NULL event columns, so
/// that "no such job" is told apart in the same snapshot.
pub(crate) const EVENTS: &str = "SELECT e.at AS at, e.event AS event, e.attempt AS attempt, \
     e.worker_id AS worker_id, e.detail AS detail, e.seq AS seq \
     FROM tether_jobs AS j LEFT JOIN tether_job_events AS e ON e.job_id = j.id \
     AND (?3 IS NULL OR e.seq > ?3) \
     WHERE j.tenant = ?1 AND j.id = ?2 ORDER BY e.seq LIMIT ?4";

pub(crate) const INSERT_EVENT: &str = "INSERT INTO tether_job_events \
     (job_id, tenant, at, event, attempt, worker_id, detail) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// Cancels a queued or waiting job (a waiting one waits no more; what
/// waits for it is moved by the trigger of migration 11).
pub(crate) const CANCEL_QUEUED: &str = concat!(
    "UPDATE tether_jobs SET state = 'cancelled', waiting_on = 0, finished_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_columns!()
);

pub(crate) const REQUEST_CANCEL: &str = concat!(
    "UPDATE tether_jobs SET cancel_requested = 1, updated_at = ",
    now_ms!(),
    " WHERE id = ?1 RETURNING ",
    job_columns!()
);

/// The unfinished job (waiting, queued or running) holding a unique key,
/// other than ?3.
pub(crate) const ACTIVE_HOLDER: &str =
    "SELECT id FROM tether_jobs WHERE tenant = ?1 AND unique_key = ?2 \
     AND state IN ('waiting', 'queued', 'running') AND id <> ?3 LIMIT 1";

/// Replays job ?1 with ?2 as its new `expires_at`.
pub(crate) const REPLAY: &str = concat!(
    replay_set!("?2"),
    "WHERE id = ?1 RETURNING ",
    job_columns!()
);

/// The candidates of a bulk replay (the statement it starts with, also run
/// alone to answer how far the round got): the first ?5 jobs matching the
/// filter with an id above the cursor ?6 (NULL: from the start).
macro_rules! replay_candidates {
    () => {
        concat!(
            "SELECT id, unique_key FROM tether_jobs ",
            "WHERE tenant = ?1 AND queue = ?2 AND state = ?3 AND (?4 IS NULL OR kind = ?4) ",
            "AND (?6 IS NULL OR id > ?6) ORDER BY id LIMIT ?5"
        )
    };
}

/// How many candidates a bulk replay has and the greatest id among them
/// (?1–?6 as in [`REPLAY_MANY`]), read under the same write lock first.
pub(crate) const REPLAY_SCAN: &str = concat!(
    "SELECT count(*) AS scanned, max(id) AS last FROM (",
    replay_candidates!(),
    ")"
);

/// Bulk replay: the oldest ?5 jobs matching the filter after the cursor ?6
/// are the candidates (as on PostgreSQL, the limit bounds the candidates,
/// not the jobs replayed); ?7 is their new `expires_at`. A candidate is skipped when its unique key is held by an
/// active job, or by an older candidate (replaying both would break the
/// active-unique index and abort the whole statement).
pub(crate) const REPLAY_MANY: &str = concat!(
    "WITH c AS MATERIALIZED (",
    replay_candidates!(),
    ") ",
    replay_set!("?7"),
    "WHERE id IN (SELECT c.id FROM c WHERE c.unique_key IS NULL OR (",
    "NOT EXISTS (SELECT 1 FROM tether_jobs AS a WHERE a.tenant = ?1 ",
    "AND a.unique_key = c.unique_key AND a.state IN ('waiting', 'queued', 'running')) ",
    "AND c.id = (SELECT min(o.id) FROM c AS o WHERE o.unique_key = c.unique_key))) ",
    "RETURNING id, state"
);

/// How many of the jobs ?1 (a JSON array of ids) are queued.
pub(crate) const COUNT_QUEUED: &str = "SELECT count(*) FROM tether_jobs \
     WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'queued'";

/// `replayed` events (?1: JSON array of ids).
pub(crate) const REPLAYED_EVENTS: &str = events_of_ids!("updated_at", "replayed", "NULL", "NULL");

/// The workers holding running jobs of tenant ?1 (queues as a JSON array).
/// Forgets tenant ?1's announced workers other than ?2 not seen for ?3 ms.
pub(crate) const FORGET_WORKERS: &str = concat!(
    "DELETE FROM tether_workers WHERE tenant = ?1 AND worker_id <> ?2 AND last_seen_at < ",
    now_ms!(),
    " - ?3"
);

/// How many workers other than ?2 tenant ?1 remembers, and whether ?2 is
/// one of its workers already.
pub(crate) const LIVE_WORKERS: &str = "SELECT \
     (SELECT count(*) FROM tether_workers WHERE tenant = ?1 AND worker_id <> ?2) AS others, \
     EXISTS (SELECT 1 FROM tether_workers WHERE tenant = ?1 AND worker_id = ?2) AS known";

/// Records worker ?2's announcement (?3 queues as JSON, ?4 concurrency, ?5
/// sdk, ?6 version, ?7 host, ?8 pid), seen now.
pub(crate) const ANNOUNCE_WORKER: &str = concat!(
    "INSERT INTO tether_workers (tenant, worker_id, queues, concurrency, sdk, version, host, ",
    "pid, last_seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ",
    now_ms!(),
    ") ON CONFLICT (tenant, worker_id) DO UPDATE SET queues = excluded.queues, ",
    "concurrency = excluded.concurrency, sdk = excluded.sdk, version = excluded.version, ",
    "host = excluded.host, pid = excluded.pid, last_seen_at = excluded.last_seen_at ",
    "RETURNING last_seen_at"
);

/// Marks announced worker ?2 seen now.
pub(crate) const TOUCH_WORKER: &str = concat!(
    "UPDATE tether_workers SET last_seen_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND worker_id = ?2"
);

/// Tenant ?1's announced workers seen within ?2 ms, by id.
pub(crate) const ANNOUNCED_WORKERS: &str = concat!(
    "SELECT worker_id, queues, concurrency, sdk, version, host, pid, last_seen_at ",
    "FROM tether_workers WHERE tenant = ?1 AND last_seen_at >= ",
    now_ms!(),
    " - ?2 ORDER BY worker_id"
);

pub(crate) const WORKERS: &str = "SELECT worker_id, \
     json_group_array(DISTINCT queue) AS queues, count(*) AS running, \
     max(coalesce(heartbeat_at, started_at)) AS last_heartbeat_at \
     FROM tether_jobs \
     WHERE tenant = ?1 AND state = 'running' AND worker_id IS NOT NULL \
     GROUP BY worker_id ORDER BY worker_id";
