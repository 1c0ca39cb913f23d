//! Statements of `schedules.rs`.

/// The unique constraint on `(tenant, name)`.
pub(crate) const NAME_CONSTRAINT: &str = "schedules_tenant_name";

/// How many schedules tenant `$1` has.
pub(crate) const COUNT_SCHEDULES: &str = "SELECT count(*) FROM tether.schedules WHERE tenant = $1";

/// Creates a schedule unless the tenant uses the name already: `$1` id,
/// `$2` tenant, `$3`–`$10` the definition, `$11` next run (kept only when
/// enabled). No row: the name is taken.
pub(crate) const CREATE_SCHEDULE: &str = concat!(
    "INSERT INTO tether.schedules AS s (id, tenant, name, cron, timezone, queue, kind, payload,
        enabled, overlap, next_run_at, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
            CASE WHEN $9 THEN $11::timestamptz END, now(), now())
    ON CONFLICT ON CONSTRAINT schedules_tenant_name DO NOTHING
    RETURNING ",
    schedule_columns!()
);

pub(crate) const SELECT_SCHEDULE: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether.schedules s WHERE s.id = $1 AND s.tenant = $2"
);

/// The tenant's schedule of a name (names are unique per tenant).
pub(crate) const SCHEDULE_BY_NAME: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether.schedules s WHERE s.tenant = $1 AND s.name = $2"
);

/// Byte order of names, as on SQLite.
pub(crate) const LIST_SCHEDULES: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether.schedules s WHERE s.tenant = $1 ORDER BY s.name COLLATE \"C\""
);

/// Replaces a definition: parameters as in [`CREATE_SCHEDULE`]. No row: not found; a
/// unique violation on [`NAME_CONSTRAINT`]: the new name is taken.
pub(crate) const UPDATE_SCHEDULE: &str = concat!(
    "UPDATE tether.schedules s
    SET name = $3, cron = $4, timezone = $5, queue = $6, kind = $7, payload = $8,
        enabled = $9, overlap = $10, next_run_at = CASE WHEN $9 THEN $11::timestamptz END,
        updated_at = now()
    WHERE s.id = $1 AND s.tenant = $2
    RETURNING ",
    schedule_columns!()
);

/// Its runs go with it (`ON DELETE CASCADE`).
pub(crate) const DELETE_SCHEDULE: &str =
    "DELETE FROM tether.schedules WHERE id = $1 AND tenant = $2";

/// A schedule's newest `$3` runs: no row when the tenant `$2` has no
/// schedule `$1`, one row of NULLs when it has no runs.
pub(crate) const SCHEDULE_RUNS: &str = "WITH s AS (
        SELECT id, tenant FROM tether.schedules WHERE id = $1 AND tenant = $2
    )
    SELECT r.fire_at, r.job_id, r.outcome
    FROM s
    LEFT JOIN LATERAL (
        SELECT x.id, x.fire_at, x.job_id, x.outcome FROM tether.schedule_runs x
        WHERE x.schedule_id = s.id AND x.tenant = s.tenant
        ORDER BY x.fire_at DESC, x.id DESC
        LIMIT $3
    ) r ON true
    ORDER BY r.fire_at DESC, r.id DESC";

/// Due schedules of every tenant, earliest first, at most `$1`, each with
/// the database's time; one row of NULLs (and the time) when none is due.
pub(crate) const DUE_SCHEDULES: &str = concat!(
    "SELECT n.db_now, ",
    schedule_columns!(),
    " FROM (SELECT now() AS db_now) n
    LEFT JOIN LATERAL (
        SELECT * FROM tether.schedules x
        WHERE x.enabled AND x.next_run_at IS NOT NULL AND x.next_run_at <= n.db_now
          AND NOT EXISTS (SELECT 1 FROM tether.tenants t
                          WHERE t.name = x.tenant AND t.suspended_at IS NOT NULL)
        ORDER BY x.next_run_at, x.id
        LIMIT $1
    ) s ON true
    ORDER BY s.next_run_at, s.id"
);

/// The earliest due instant of any tenant that is not suspended (an
/// aggregate: always one row).
pub(crate) const NEXT_SCHEDULE_DUE: &str =
    "SELECT now() AS db_now, min(x.next_run_at) AS next_run_at
    FROM tether.schedules x WHERE x.enabled AND x.next_run_at IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM tether.tenants t
                      WHERE t.name = x.tenant AND t.suspended_at IS NOT NULL)";

/// The first step of a pass: the compare-and-sets that advance the
/// timetables and record the runs, set-based (`$1` ids, `$2` tenants, `$3`
/// expected next runs, `$4` new next runs, `$5` fire instants, `$6` overlap
/// `skip`, `$7` the ids the fires' jobs get if created; one element per
/// fire). A schedule advances only if it is enabled and its `next_run_at` is
/// still the expected one. With overlap `skip` while its last run's job is
/// still queued or running its run is `skipped`; otherwise it is `enqueued`
/// with the job id `$7`, which also becomes the schedule's last job (the
/// caller then enqueues the jobs, and corrects the few whose fire key
/// already held a job with [`RECORD_EXISTING_JOBS`]). One row per advanced
/// schedule, saying whether it was skipped; a fire without a row raced.
///
/// The rows are locked in id order before they are written, so that two
/// passes racing on the same schedules cannot deadlock: the later one waits
/// for the earlier one's commit, then finds those timetables moved (the
/// lock rechecks `next_run_at` on the row's newest version). Fenced by
/// `$8`, `$9` (a pass of a lapsed maintenance leader advances nothing, so
/// it enqueues nothing).
pub(crate) const ADVANCE_SCHEDULES: &str = concat!(
    "WITH input AS (
        SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::timestamptz[], $4::timestamptz[],
                             $5::timestamptz[], $6::boolean[], $7::uuid[])
            AS t(id, tenant, expected, next_at, fire_at, skip_busy, job_id)
    ),
    locked AS (
        SELECT s.id, s.tenant, s.last_job_id, i.next_at, i.fire_at, i.skip_busy, i.job_id
        FROM tether.schedules s
        JOIN input i ON i.id = s.id AND i.tenant = s.tenant
        WHERE ",
    maintenance_fence!("$8", "$9"),
    " AND s.enabled AND s.next_run_at = i.expected
        ORDER BY s.id
        FOR NO KEY UPDATE OF s
    ),
    checked AS (
        SELECT l.id, l.next_at, l.fire_at, l.job_id,
               l.skip_busy AND EXISTS (
                   SELECT 1 FROM tether.jobs j
                   WHERE j.id = l.last_job_id AND j.tenant = l.tenant
                     AND j.state IN ('queued', 'running')) AS busy
        FROM locked l
    ),
    moved AS (
        UPDATE tether.schedules s
        SET next_run_at = c.next_at, last_run_at = c.fire_at,
            last_job_id = CASE WHEN c.busy THEN s.last_job_id ELSE c.job_id END,
            updated_at = now()
        FROM checked c
        WHERE s.id = c.id
        RETURNING s.id, s.tenant, c.fire_at, c.job_id, c.busy
    ),
    runs AS (
        INSERT INTO tether.schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, recorded_at)
        SELECT id, tenant, fire_at,
               CASE WHEN busy THEN NULL ELSE job_id END,
               CASE WHEN busy THEN 'skipped' ELSE 'enqueued' END,
               now()
        FROM moved
    )
    SELECT id, busy AS skipped FROM moved"
);

/// Locks a schedule for a trigger: `$1` id, `$2` tenant. No row: not found.
pub(crate) const LOCK_SCHEDULE: &str =
    "SELECT id FROM tether.schedules WHERE id = $1 AND tenant = $2 FOR NO KEY UPDATE";

/// Records a trigger's `enqueued` run of job `$3`, stamped with the
/// transaction's `now()`, and makes it the schedule's last run.
pub(crate) const RECORD_ENQUEUED: &str = "WITH s AS (
        UPDATE tether.schedules
        SET last_run_at = now(), last_job_id = $3, updated_at = now()
        WHERE id = $1 AND tenant = $2
        RETURNING id, tenant
    )
    INSERT INTO tether.schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, recorded_at)
    SELECT id, tenant, now(), $3, 'enqueued', now() FROM s";

/// Corrects a pass's runs whose fire key already held a job (an earlier
/// attempt at the very fire): `$1` schedules, `$2` the job ids
/// [`ADVANCE_SCHEDULES`] recorded, `$3` the jobs that hold the keys. The
/// runs and the schedules' last jobs name the existing jobs. Answers the
/// runs corrected.
pub(crate) const RECORD_EXISTING_JOBS: &str = "WITH input AS (
        SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::uuid[]) AS t(id, minted, job_id)
    ),
    last AS (
        UPDATE tether.schedules s SET last_job_id = i.job_id
        FROM input i
        WHERE s.id = i.id AND s.last_job_id = i.minted
    )
    UPDATE tether.schedule_runs r SET job_id = i.job_id
    FROM input i
    WHERE r.schedule_id = i.id AND r.job_id = i.minted";

/// Deletes at most `$2` runs recorded more than `$1` ms ago; fenced by
/// `$3`, `$4`.
pub(crate) const PRUNE_SCHEDULE_RUNS: &str = concat!(
    "WITH old AS (
        SELECT id FROM tether.schedule_runs
        WHERE ",
    maintenance_fence!("$3", "$4"),
    " AND recorded_at <= now() - $1::bigint * interval '1 millisecond'
        ORDER BY recorded_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    done AS (
        DELETE FROM tether.schedule_runs r USING old WHERE r.id = old.id RETURNING 1
    )
    SELECT count(*) FROM done"
);

/// The newest `$2` runs of each schedule of tenant `$1`.
pub(crate) const RECENT_SCHEDULE_RUNS: &str = "SELECT schedule_id, fire_at, job_id, outcome
    FROM (SELECT r.schedule_id, r.fire_at, r.job_id, r.outcome,
                 row_number() OVER (PARTITION BY r.schedule_id ORDER BY r.fire_at DESC, r.id DESC) AS nth
          FROM tether.schedule_runs r WHERE r.tenant = $1) x
    WHERE nth <= $2
    ORDER BY schedule_id, fire_at DESC";
