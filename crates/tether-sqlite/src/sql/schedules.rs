//! Statements of `schedules.rs`.

/// How many schedules tenant ?1 has.
pub(crate) const COUNT_SCHEDULES: &str = "SELECT count(*) FROM tether_schedules WHERE tenant = ?1";

/// Creates a schedule unless the tenant already uses its name (the UNIQUE
/// (tenant, name) constraint decides; no row comes back then). ?1 tenant,
/// ?2 id, ?3–?11 the definition (see `bind_spec`); the next run ?11 is
/// kept only when the schedule is enabled.
pub(crate) const CREATE_SCHEDULE: &str = concat!(
    "INSERT INTO tether_schedules (tenant, id, name, cron, timezone, queue, kind, payload, ",
    "enabled, overlap, next_run_at, created_at, updated_at) ",
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, CASE WHEN ?9 THEN ?11 END, ",
    now_ms!(),
    ", ",
    now_ms!(),
    ") ON CONFLICT (tenant, name) DO NOTHING RETURNING ",
    schedule_columns!()
);

pub(crate) const SELECT_SCHEDULE: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether_schedules WHERE tenant = ?1 AND id = ?2"
);

/// The tenant's schedule of a name (names are unique per tenant).
pub(crate) const SCHEDULE_BY_NAME: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether_schedules WHERE tenant = ?1 AND name = ?2"
);

pub(crate) const LIST_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether_schedules WHERE tenant = ?1 ORDER BY name"
);

/// Replaces a schedule's definition and `next_run_at` (same parameters as
/// [`CREATE_SCHEDULE`]); `last_*` and the runs stay.
pub(crate) const UPDATE_SCHEDULE: &str = concat!(
    "UPDATE tether_schedules SET name = ?3, cron = ?4, timezone = ?5, queue = ?6, kind = ?7, ",
    "payload = ?8, enabled = ?9, overlap = ?10, next_run_at = CASE WHEN ?9 THEN ?11 END, updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND id = ?2 RETURNING ",
    schedule_columns!()
);

pub(crate) const DELETE_SCHEDULE: &str =
    "DELETE FROM tether_schedules WHERE tenant = ?1 AND id = ?2";

/// The runs go with their schedule by `ON DELETE CASCADE` (every connection
/// enables foreign keys); deleting them by hand as well keeps that true on a
/// connection that does not.
pub(crate) const DELETE_SCHEDULE_RUNS: &str =
    "DELETE FROM tether_schedule_runs WHERE schedule_id = ?1";

/// A schedule's newest ?3 runs, in one statement so that "does the tenant
/// have it" and its runs come from the same snapshot: one row with NULL run
/// columns for a schedule without runs, no row for no schedule.
pub(crate) const SCHEDULE_RUNS: &str =
    "SELECT r.id AS run_id, r.fire_at AS fire_at, r.job_id AS job_id, \
     r.outcome AS outcome \
     FROM tether_schedules AS s LEFT JOIN tether_schedule_runs AS r ON r.schedule_id = s.id \
     WHERE s.tenant = ?1 AND s.id = ?2 ORDER BY r.fire_at DESC, r.id DESC LIMIT ?3";

/// The database's clock.
pub(crate) const DB_NOW: &str = concat!("SELECT ", now_ms!());

/// Up to ?2 schedules of every tenant due by ?1 (the database's clock, read
/// just before), earliest first: a walk of the partial index that stops at
/// the batch. (`enabled = 1 AND next_run_at IS NOT NULL` spelled as in the
/// index, which SQLite requires to use it. The clock is bound rather than
/// computed in the statement because SQLite's `'now'` is fixed for one
/// `sqlite3_step`, i.e. one row of a SELECT, not for the whole statement.)
pub(crate) const DUE_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether_schedules WHERE enabled = 1 AND next_run_at IS NOT NULL ",
    "AND next_run_at <= ?1 ",
    "AND NOT EXISTS (SELECT 1 FROM tether_tenants t ",
    "WHERE t.name = tether_schedules.tenant AND t.suspended_at IS NOT NULL) ",
    "ORDER BY next_run_at, id LIMIT ?2"
);

pub(crate) const NEXT_SCHEDULE_DUE: &str = concat!(
    "SELECT ",
    now_ms!(),
    " AS now, (SELECT min(next_run_at) FROM tether_schedules ",
    "WHERE enabled = 1 AND next_run_at IS NOT NULL ",
    "AND NOT EXISTS (SELECT 1 FROM tether_tenants t ",
    "WHERE t.name = tether_schedules.tenant AND t.suspended_at IS NOT NULL)) AS next"
);

/// A pass's compare-and-sets in one statement (?1: flat JSON array
/// `[id, tenant, expected, fire_at, next, ...]`, five per fire): each
/// schedule moves from the `next_run_at` the scheduler read (`expected`) to
/// `next` and is stamped `fire_at`, only if that is still the stored one on
/// an enabled schedule. Returns each moved schedule's id and previous run's
/// job (`last_job_id` is not changed here; RETURNING cannot name the FROM
/// table, so the caller matches by id). A schedule without a row here was
/// moved first by another node, or a patch. The unary `+`s keep SQLite
/// from driving the join from the due or tenant index: it walks the pass and
/// looks each schedule up by primary key.
pub(crate) const ADVANCE_SCHEDULES: &str = concat!(
    "UPDATE tether_schedules SET next_run_at = f.next_at, last_run_at = f.fire_at, updated_at = ",
    now_ms!(),
    " FROM (",
    unpack!("?1", "5", ["0" => "id", "1" => "tenant", "2" => "expected", "3" => "fire_at", "4" => "next_at"]),
    ") AS f WHERE tether_schedules.id = f.id AND +tether_schedules.tenant = f.tenant ",
    "AND +tether_schedules.enabled = 1 AND +tether_schedules.next_run_at = f.expected ",
    "RETURNING id, last_job_id"
);

/// A triggered run: stamps `last_run_at` with now and returns the stamp, so
/// that the run recorded with it carries the very same instant.
pub(crate) const TRIGGER_SCHEDULE: &str = concat!(
    "UPDATE tether_schedules SET last_run_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " WHERE tenant = ?1 AND id = ?2 RETURNING last_run_at"
);

/// A triggered run's job becomes the schedule's last: ?1 schedule, ?2 job.
pub(crate) const SET_LAST_JOB: &str = "UPDATE tether_schedules SET last_job_id = ?2 WHERE id = ?1";

/// A pass's jobs become their schedules' last (?1: flat JSON array
/// `[schedule, job, ...]`), looked up by primary key.
pub(crate) const SET_LAST_JOBS: &str = concat!(
    "UPDATE tether_schedules SET last_job_id = c.job FROM (",
    unpack!("?1", "2", ["0" => "id", "1" => "job"]),
    ") AS c WHERE tether_schedules.id = c.id"
);

/// Which of the jobs ?1 (flat JSON array `[tenant, id, ...]`) are unfinished
/// (overlap `skip`), each looked up by primary key.
pub(crate) const ACTIVE_JOBS: &str = concat!(
    "SELECT j.id AS id FROM (",
    unpack!("?1", "2", ["0" => "tenant", "1" => "id"]),
    ") AS c JOIN tether_jobs AS j ON j.id = c.id AND +j.tenant = c.tenant ",
    "WHERE +j.state IN ('queued', 'running')"
);

/// ?1 schedule, ?2 tenant, ?3 fire_at, ?4 job (NULL when skipped), ?5 outcome.
pub(crate) const INSERT_SCHEDULE_RUN: &str = concat!(
    "INSERT INTO tether_schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, ",
    "recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ",
    now_ms!(),
    ")"
);

/// A pass's runs, in order (?1: flat JSON array `[schedule, tenant,
/// fire_at, job, outcome, ...]`, `job` null when skipped).
pub(crate) const INSERT_SCHEDULE_RUNS: &str = concat!(
    "INSERT INTO tether_schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, ",
    "recorded_at) SELECT id, tenant, fire_at, job, outcome, ",
    now_ms!(),
    " FROM (",
    unpack!("?1", "5", ["0" => "id", "1" => "tenant", "2" => "fire_at", "3" => "job", "4" => "outcome"]),
    ") ORDER BY idx"
);

/// Up to ?2 runs recorded at least ?1 ms ago, oldest first (`<=` like the
/// pruning of jobs, so a retention of 0 takes every run).
pub(crate) const PRUNE_SCHEDULE_RUNS: &str = concat!(
    "DELETE FROM tether_schedule_runs WHERE id IN (SELECT id FROM tether_schedule_runs ",
    "WHERE recorded_at <= ",
    now_ms!(),
    " - ?1 ORDER BY recorded_at LIMIT ?2)"
);

/// The newest ?2 runs of each schedule of tenant ?1.
pub(crate) const RECENT_SCHEDULE_RUNS: &str = "SELECT schedule_id, fire_at, job_id, outcome \
     FROM (SELECT r.schedule_id, r.fire_at, r.job_id, r.outcome, \
           row_number() OVER (PARTITION BY r.schedule_id ORDER BY r.fire_at DESC, r.id DESC) AS nth \
           FROM tether_schedule_runs r WHERE r.tenant = ?1) \
     WHERE nth <= ?2 ORDER BY schedule_id, fire_at DESC";
