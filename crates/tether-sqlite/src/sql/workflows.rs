//! Statements of `workflows.rs`: a job's dependencies as it enters
//! `waiting`, and what a handler reads of them. What happens when a
//! dependency ends is the trigger of migration 11
//! (`tether_jobs_dependency_ended`), so that every statement that ends a job
//! releases or cancels what waits for it in the same transaction.
//!
//! No locks as on PostgreSQL: every write holds SQLite's write lock from
//! its `BEGIN IMMEDIATE`, so no dependency can end between these
//! statements and the commit.

/// The jobs among ?2 (a JSON array of ids) that tenant ?1 has.
pub(crate) const FIND_JOBS: &str = "SELECT id FROM tether_jobs \
     WHERE tenant = ?1 AND id IN (SELECT value FROM json_each(?2))";

/// Marks the jobs ?1 (a JSON array of ids) as waited for, so that their
/// end fires the trigger; written only where not set yet.
pub(crate) const MARK_DEPENDED: &str = "UPDATE tether_jobs SET has_dependents = 1 \
     WHERE id IN (SELECT value FROM json_each(?1)) AND has_dependents = 0";

/// Writes the edges ?1 (a flat JSON array `[job, dependency, ...]`).
pub(crate) const INSERT_EDGES: &str = concat!(
    "INSERT INTO tether_job_dependencies (depends_on, job_id) SELECT e.dep, e.job FROM (",
    unpack!("?1", "2", ["0" => "job", "1" => "dep"]),
    ") AS e WHERE true ON CONFLICT DO NOTHING"
);

/// Makes new jobs `waiting` with their rules and dependencies (?1: a flat
/// JSON array `[id, rule, depends_on as JSON text, ...]`).
pub(crate) const ENTER_WAITING: &str = concat!(
    "UPDATE tether_jobs SET state = 'waiting', dependency_failure = w.rule, depends_on = w.deps ",
    "FROM (",
    unpack!("?1", "3", ["0" => "id", "1" => "rule", "2" => "deps"]),
    ") AS w WHERE tether_jobs.id = w.id"
);

/// Settling jobs ?1 (a JSON array of ids) that just entered `waiting`
/// (enqueued, or replayed), first step: each edge against its dependency
/// as it stands now, met when the dependency succeeded or, with `run`,
/// ended at all. A dependency pruned meanwhile counts as succeeded.
pub(crate) const SETTLE_EDGES: &str = "UPDATE tether_job_dependencies SET met = CASE \
     WHEN x.dep_state = 'succeeded' THEN 1 \
     WHEN x.dep_state IN ('failed', 'cancelled') AND x.rule = 'run' THEN 1 \
     ELSE 0 END \
     FROM (SELECT d.job_id AS job_id, d.depends_on AS depends_on, \
           COALESCE(p.state, 'succeeded') AS dep_state, w.dependency_failure AS rule \
           FROM tether_job_dependencies AS d JOIN tether_jobs AS w ON w.id = d.job_id \
           LEFT JOIN tether_jobs AS p ON p.id = d.depends_on \
           WHERE d.job_id IN (SELECT value FROM json_each(?1)) AND w.state = 'waiting') AS x \
     WHERE tether_job_dependencies.job_id = x.job_id \
     AND tether_job_dependencies.depends_on = x.depends_on";

/// Second step: the jobs with `cancel` and a failed or cancelled
/// dependency, each with the first such dependency by id (named in its
/// `cancelled` event, see `tether_jobs_dependency_cancelled`), to be
/// cancelled by the fourth step. Root '' (see migration 11).
pub(crate) const SETTLE_FATAL: &str = "INSERT INTO tether_job_cascade \
     (id, root, dependency, dependency_state) \
     SELECT x.job_id, '', x.dep, p.state FROM ( \
         SELECT d.job_id AS job_id, min(d.depends_on) AS dep \
         FROM tether_job_dependencies AS d JOIN tether_jobs AS w ON w.id = d.job_id \
         JOIN tether_jobs AS p ON p.id = d.depends_on \
         WHERE d.job_id IN (SELECT value FROM json_each(?1)) AND w.state = 'waiting' \
         AND w.dependency_failure = 'cancel' AND p.state IN ('failed', 'cancelled') \
         GROUP BY d.job_id) AS x \
     JOIN tether_jobs AS p ON p.id = x.dep \
     WHERE true ON CONFLICT (id) DO NOTHING";

/// Third step: how many dependencies each job waits for. No state changes
/// here, so that every job of the set has its count before the fourth step
/// can fire the trigger for any of them (a batch's job cancelled there
/// counts down the jobs of the batch that wait for it with `run`).
pub(crate) const SETTLE_COUNTS: &str = "UPDATE tether_jobs SET waiting_on = \
     (SELECT count(*) FROM tether_job_dependencies AS d WHERE d.job_id = tether_jobs.id AND d.met = 0) \
     WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'waiting'";

/// Fourth step: a job of the second step is cancelled (its `cancelled`
/// event is the trigger `tether_jobs_dependency_cancelled`;
/// `tether_jobs_dependency_ended` then cancels what waits for it), one
/// with nothing left to wait for is queued, the rest stay. Every value is
/// read from the row as it is when its turn comes, so a job that an
/// earlier row's cascade already moved stays where that put it.
pub(crate) const SETTLE_STATES: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN state <> 'waiting' THEN state ",
    "WHEN id IN (SELECT c.id FROM tether_job_cascade AS c WHERE c.root = '') THEN 'cancelled' ",
    "WHEN waiting_on <= 0 THEN 'queued' ELSE state END, ",
    "waiting_on = CASE WHEN state = 'waiting' AND id IN (SELECT c.id FROM tether_job_cascade AS c ",
    "WHERE c.root = '') THEN 0 ELSE waiting_on END, ",
    "finished_at = CASE WHEN state = 'waiting' AND id IN (SELECT c.id FROM tether_job_cascade AS c ",
    "WHERE c.root = '') THEN ",
    now_ms!(),
    " ELSE finished_at END, updated_at = CASE WHEN state = 'waiting' THEN ",
    now_ms!(),
    " ELSE updated_at END",
    " WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'waiting'"
);

/// Last step: empties the scratch rows of the second.
pub(crate) const SETTLE_DONE: &str = "DELETE FROM tether_job_cascade WHERE root = ''";

/// Takes the wake-up hints of the jobs the trigger released in this
/// transaction (see migration 11).
pub(crate) const TAKE_RELEASES: &str = "DELETE FROM tether_job_releases RETURNING tenant, queue";

/// The dependencies of job ?1 of tenant ?2, in the order it names them;
/// one removed by retention is left out.
pub(crate) const DEPENDENCIES: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether_jobs JOIN (SELECT key AS ord, value AS dep FROM json_each(",
    "(SELECT w.depends_on FROM tether_jobs AS w WHERE w.id = ?1 AND w.tenant = ?2))) AS d ",
    "ON tether_jobs.id = d.dep WHERE tether_jobs.tenant = ?2 ORDER BY d.ord"
);
