//! Schedules (invariant 11): the timetables and their runs.
//!
//! Definitions are read and written by one statement each. A fire is one
//! transaction: a compare-and-set on `next_run_at` (which also takes the
//! schedule's row lock, so concurrent fires of the same instant queue up
//! behind the winner and then find the timetable moved), then the enqueue
//! with the fire's idempotency key and the run's record. A trigger locks the
//! row first, so it and a fire of the same schedule never interleave.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use tether_core::schedule::{Fire, FireOutcome};
use tether_core::{
    Enqueued, Error, Job, NewJobRef, Overlap, Result, RunOutcome, Schedule, ScheduleRun,
    ScheduleSpec,
};
use uuid::Uuid;

use crate::enqueue::enqueue_on;
use crate::rows::{self, schedule_columns};
use crate::{db_error, PgStore};

/// The unique constraint on `(tenant, name)`.
const NAME_CONSTRAINT: &str = "schedules_tenant_name";

/// First key of the per-tenant advisory lock (second key: the hash of the
/// tenant's name) under which a schedule is counted and created.
const SCHEDULE_CREATE_LOCK: i32 = 0x7465_7403;

/// How many schedules tenant `$1` has.
const COUNT: &str = "SELECT count(*) FROM tether.schedules WHERE tenant = $1";

/// Creates a schedule unless the tenant uses the name already: `$1` id,
/// `$2` tenant, `$3`–`$10` the definition, `$11` next run (kept only when
/// enabled). No row: the name is taken.
const CREATE: &str = concat!(
    "INSERT INTO tether.schedules AS s (id, tenant, name, cron, timezone, queue, kind, payload,
        enabled, overlap, next_run_at, created_at, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
            CASE WHEN $9 THEN $11::timestamptz END, now(), now())
    ON CONFLICT ON CONSTRAINT schedules_tenant_name DO NOTHING
    RETURNING ",
    schedule_columns!()
);

const GET: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether.schedules s WHERE s.id = $1 AND s.tenant = $2"
);

/// Byte order of names, as on SQLite.
const LIST: &str = concat!(
    "SELECT ",
    schedule_columns!(),
    " FROM tether.schedules s WHERE s.tenant = $1 ORDER BY s.name COLLATE \"C\""
);

/// Replaces a definition: parameters as in [`CREATE`]. No row: not found; a
/// unique violation on [`NAME_CONSTRAINT`]: the new name is taken.
const UPDATE: &str = concat!(
    "UPDATE tether.schedules s
    SET name = $3, cron = $4, timezone = $5, queue = $6, kind = $7, payload = $8,
        enabled = $9, overlap = $10, next_run_at = CASE WHEN $9 THEN $11::timestamptz END,
        updated_at = now()
    WHERE s.id = $1 AND s.tenant = $2
    RETURNING ",
    schedule_columns!()
);

/// Its runs go with it (`ON DELETE CASCADE`).
const DELETE: &str = "DELETE FROM tether.schedules WHERE id = $1 AND tenant = $2";

/// A schedule's newest `$3` runs: no row when the tenant `$2` has no
/// schedule `$1`, one row of NULLs when it has no runs.
const RUNS: &str = "WITH s AS (
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
const DUE: &str = concat!(
    "SELECT n.db_now, ",
    schedule_columns!(),
    " FROM (SELECT now() AS db_now) n
    LEFT JOIN LATERAL (
        SELECT * FROM tether.schedules x
        WHERE x.enabled AND x.next_run_at IS NOT NULL AND x.next_run_at <= n.db_now
        ORDER BY x.next_run_at, x.id
        LIMIT $1
    ) s ON true
    ORDER BY s.next_run_at, s.id"
);

/// The earliest due instant of any tenant (an aggregate: always one row).
const NEXT_DUE: &str = "SELECT now() AS db_now, min(next_run_at) AS next_run_at
    FROM tether.schedules WHERE enabled AND next_run_at IS NOT NULL";

/// The first step of a fire: the compare-and-set that advances the
/// timetable (`$1` id, `$2` tenant, `$3` expected next run, `$4` new next
/// run, `$5` fire instant) and, with `$6` (overlap `skip`) while the last
/// run's job is still queued or running, the `skipped` run. No row: raced.
const ADVANCE: &str = "WITH s AS (
        UPDATE tether.schedules
        SET next_run_at = $4::timestamptz, last_run_at = $5::timestamptz, updated_at = now()
        WHERE id = $1 AND tenant = $2 AND enabled AND next_run_at = $3::timestamptz
        RETURNING id, tenant, last_job_id
    ),
    busy AS (
        SELECT s.id, s.tenant FROM s
        WHERE $6::boolean AND EXISTS (
            SELECT 1 FROM tether.jobs j
            WHERE j.id = s.last_job_id AND j.tenant = s.tenant
              AND j.state IN ('queued', 'running'))
    ),
    skipped AS (
        INSERT INTO tether.schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, recorded_at)
        SELECT id, tenant, $5::timestamptz, NULL, 'skipped', now() FROM busy
    )
    SELECT EXISTS (SELECT 1 FROM busy) AS skipped FROM s";

/// Locks a schedule for a trigger: `$1` id, `$2` tenant. No row: not found.
const LOCK: &str =
    "SELECT id FROM tether.schedules WHERE id = $1 AND tenant = $2 FOR NO KEY UPDATE";

/// Records an `enqueued` run of job `$3` stamped `$4` (NULL: the
/// transaction's `now()`) and makes it the schedule's last run.
const RECORD_ENQUEUED: &str = "WITH s AS (
        UPDATE tether.schedules
        SET last_run_at = COALESCE($4::timestamptz, now()), last_job_id = $3, updated_at = now()
        WHERE id = $1 AND tenant = $2
        RETURNING id, tenant
    )
    INSERT INTO tether.schedule_runs (schedule_id, tenant, fire_at, job_id, outcome, recorded_at)
    SELECT id, tenant, COALESCE($4::timestamptz, now()), $3, 'enqueued', now() FROM s";

/// Deletes at most `$2` runs recorded more than `$1` ms ago.
const PRUNE_RUNS: &str = "WITH old AS (
        SELECT id FROM tether.schedule_runs
        WHERE recorded_at <= now() - $1::bigint * interval '1 millisecond'
        ORDER BY recorded_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    ),
    done AS (
        DELETE FROM tether.schedule_runs r USING old WHERE r.id = old.id RETURNING 1
    )
    SELECT count(*) FROM done";

/// Retention beyond which nothing can have been recorded (1,000 years):
/// longer ones are clamped to it, since `now()` minus them is outside the
/// range of an interval or a timestamp.
const MAX_RETENTION_MS: i64 = 1_000 * 365 * 24 * 3_600 * 1_000;

/// Whether a driver error is the unique violation of [`NAME_CONSTRAINT`].
fn is_name_taken(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.code().as_deref() == Some("23505") && db.constraint() == Some(NAME_CONSTRAINT))
}

fn run_row(row: &PgRow) -> Result<Option<ScheduleRun>, sqlx::Error> {
    let Some(outcome) = row.try_get::<Option<String>, _>("outcome")? else {
        return Ok(None);
    };
    Ok(Some(ScheduleRun {
        fire_at: row.try_get("fire_at")?,
        job_id: row.try_get("job_id")?,
        outcome: RunOutcome::parse(&outcome).ok_or_else(|| {
            sqlx::Error::Decode(format!("unknown schedule run outcome {outcome:?}").into())
        })?,
    }))
}

/// The schedule of a row whose schedule columns may all be NULL (outer join).
fn optional_schedule(row: &PgRow) -> Result<Option<Schedule>, sqlx::Error> {
    match row.try_get::<Option<Uuid>, _>("id")? {
        Some(_) => rows::schedule(row).map(Some),
        None => Ok(None),
    }
}

impl PgStore {
    /// See [`tether_core::Store::create_schedule`].
    pub(crate) async fn schedule_create(
        &self,
        tenant: &str,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
        max_schedules: u32,
    ) -> Result<Schedule> {
        // The count and the insert under the tenant's advisory lock, so
        // that concurrent creations cannot pass the limit together.
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(SCHEDULE_CREATE_LOCK)
            .bind(tenant)
            .execute(&mut *tx)
            .await
            .map_err(db_error)?;
        let n: i64 = sqlx::query_scalar(COUNT)
            .bind(tenant)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error)?;
        if n >= i64::from(max_schedules) {
            return Err(Error::too_many_schedules(max_schedules));
        }
        let schedule = sqlx::query(CREATE)
            .bind(Uuid::now_v7())
            .bind(tenant)
            .bind(&spec.name)
            .bind(&spec.cron)
            .bind(&spec.timezone)
            .bind(&spec.queue)
            .bind(&spec.kind)
            .bind(&spec.payload)
            .bind(spec.enabled)
            .bind(spec.overlap.as_str())
            .bind(next_run_at)
            .try_map(|row| rows::schedule(&row))
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::schedule_name_taken(&spec.name))?;
        tx.commit().await.map_err(db_error)?;
        Ok(schedule)
    }

    /// See [`tether_core::Store::get_schedule`].
    pub(crate) async fn schedule_get(&self, tenant: &str, id: Uuid) -> Result<Schedule> {
        sqlx::query(GET)
            .bind(id)
            .bind(tenant)
            .try_map(|row| rows::schedule(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::schedule_not_found(id))
    }

    /// See [`tether_core::Store::list_schedules`].
    pub(crate) async fn schedule_list(&self, tenant: &str) -> Result<Vec<Schedule>> {
        sqlx::query(LIST)
            .bind(tenant)
            .try_map(|row| rows::schedule(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)
    }

    /// See [`tether_core::Store::update_schedule`].
    pub(crate) async fn schedule_update(
        &self,
        tenant: &str,
        id: Uuid,
        spec: &ScheduleSpec,
        next_run_at: Option<DateTime<Utc>>,
    ) -> Result<Schedule> {
        sqlx::query(UPDATE)
            .bind(id)
            .bind(tenant)
            .bind(&spec.name)
            .bind(&spec.cron)
            .bind(&spec.timezone)
            .bind(&spec.queue)
            .bind(&spec.kind)
            .bind(&spec.payload)
            .bind(spec.enabled)
            .bind(spec.overlap.as_str())
            .bind(next_run_at)
            .try_map(|row| rows::schedule(&row))
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| {
                if is_name_taken(&e) {
                    Error::schedule_name_taken(&spec.name)
                } else {
                    db_error(e)
                }
            })?
            .ok_or_else(|| Error::schedule_not_found(id))
    }

    /// See [`tether_core::Store::delete_schedule`].
    pub(crate) async fn schedule_delete(&self, tenant: &str, id: Uuid) -> Result<()> {
        let done = sqlx::query(DELETE)
            .bind(id)
            .bind(tenant)
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::schedule_not_found(id));
        }
        Ok(())
    }

    /// See [`tether_core::Store::schedule_runs`].
    pub(crate) async fn schedule_runs_of(
        &self,
        tenant: &str,
        id: Uuid,
        limit: u32,
    ) -> Result<Vec<ScheduleRun>> {
        let runs = sqlx::query(RUNS)
            .bind(id)
            .bind(tenant)
            .bind(i64::from(limit))
            .try_map(|row| run_row(&row))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        if runs.is_empty() {
            return Err(Error::schedule_not_found(id));
        }
        Ok(runs.into_iter().flatten().collect())
    }

    /// See [`tether_core::Store::due_schedules`].
    pub(crate) async fn schedules_due(&self, limit: u32) -> Result<(DateTime<Utc>, Vec<Schedule>)> {
        let rows = sqlx::query(DUE)
            .bind(i64::from(limit))
            .try_map(|row: PgRow| Ok((row.try_get("db_now")?, optional_schedule(&row)?)))
            .fetch_all(&self.pool)
            .await
            .map_err(db_error)?;
        let now = rows
            .first()
            .map(|(now, _)| *now)
            .ok_or_else(|| Error::Storage("the due-schedule scan returned no row".into()))?;
        Ok((now, rows.into_iter().filter_map(|(_, s)| s).collect()))
    }

    /// See [`tether_core::Store::next_schedule_due`].
    pub(crate) async fn schedule_next_due(&self) -> Result<(DateTime<Utc>, Option<DateTime<Utc>>)> {
        sqlx::query(NEXT_DUE)
            .try_map(|row: PgRow| Ok((row.try_get("db_now")?, row.try_get("next_run_at")?)))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)
    }

    /// See [`tether_core::Store::fire_schedule`].
    pub(crate) async fn schedule_fire(&self, fire: &Fire, job_id: Uuid) -> Result<FireOutcome> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let skipped: Option<bool> = sqlx::query_scalar(ADVANCE)
            .bind(fire.schedule_id)
            .bind(&fire.tenant)
            .bind(fire.expected_next_run_at)
            .bind(fire.next_run_at)
            .bind(fire.fire_at)
            .bind(fire.overlap == Overlap::Skip)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        match skipped {
            None => {
                tx.rollback().await.map_err(db_error)?;
                return Ok(FireOutcome::Raced);
            }
            Some(true) => {
                tx.commit().await.map_err(db_error)?;
                return Ok(FireOutcome::Ran(RunOutcome::Skipped, None));
            }
            Some(false) => {}
        }
        // An existing job with the fire's idempotency key (an earlier
        // attempt at this very fire) comes back instead of a second one.
        let job = NewJobRef {
            id: job_id,
            job: &fire.job,
        };
        let enqueued = enqueue_one(&mut tx, &fire.tenant, job).await?;
        record_enqueued(
            &mut tx,
            fire.schedule_id,
            &fire.tenant,
            enqueued.job.id,
            Some(fire.fire_at),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        self.poke_created(&fire.tenant, &enqueued);
        Ok(FireOutcome::Ran(
            RunOutcome::Enqueued,
            Some(enqueued.job.id),
        ))
    }

    /// See [`tether_core::Store::trigger_schedule`].
    pub(crate) async fn schedule_trigger(
        &self,
        tenant: &str,
        id: Uuid,
        job: NewJobRef<'_>,
    ) -> Result<Job> {
        let mut tx = self.pool.begin().await.map_err(db_error)?;
        let locked: Option<Uuid> = sqlx::query_scalar(LOCK)
            .bind(id)
            .bind(tenant)
            .fetch_optional(&mut *tx)
            .await
            .map_err(db_error)?;
        if locked.is_none() {
            tx.rollback().await.map_err(db_error)?;
            return Err(Error::schedule_not_found(id));
        }
        let enqueued = enqueue_one(&mut tx, tenant, job).await?;
        record_enqueued(&mut tx, id, tenant, enqueued.job.id, None).await?;
        tx.commit().await.map_err(db_error)?;
        self.poke_created(tenant, &enqueued);
        Ok(enqueued.job)
    }

    /// See [`tether_core::Store::prune_schedule_runs`].
    pub(crate) async fn schedule_runs_prune(&self, retention_ms: i64, batch: u32) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(PRUNE_RUNS)
            .bind(retention_ms.clamp(0, MAX_RETENTION_MS))
            .bind(i64::from(batch))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(n as u64)
    }

    /// After commit: the wake-up hint for a job the fire or trigger created
    /// (like every enqueue of the store, never a NOTIFY inside the
    /// transaction, see `notify`).
    fn poke_created(&self, tenant: &str, enqueued: &Enqueued) {
        if enqueued.created {
            self.notifications
                .poke(&self.pool, tenant, &enqueued.job.queue, 1);
        }
    }
}

/// Enqueues one job inside the fire's or trigger's transaction.
async fn enqueue_one(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    job: NewJobRef<'_>,
) -> Result<Enqueued> {
    // A schedule's run is not refused for the queue limit: the schedule
    // limit bounds the queues schedules can make.
    enqueue_on(conn, tenant, &[job], None)
        .await?
        .pop()
        .ok_or_else(|| Error::Storage("enqueue answered nothing for one job".into()))
}

/// Records an `enqueued` run of `job_id` stamped `fire_at` (`None`: the
/// transaction's `now()`) on a schedule the transaction has locked.
async fn record_enqueued(
    conn: &mut sqlx::PgConnection,
    id: Uuid,
    tenant: &str,
    job_id: Uuid,
    fire_at: Option<DateTime<Utc>>,
) -> Result<()> {
    let done = sqlx::query(RECORD_ENQUEUED)
        .bind(id)
        .bind(tenant)
        .bind(job_id)
        .bind(fire_at)
        .execute(conn)
        .await
        .map_err(db_error)?;
    if done.rows_affected() != 1 {
        // Cannot happen while the row is locked; refuse rather than
        // commit a job without its run.
        return Err(Error::schedule_not_found(id));
    }
    Ok(())
}
