//! Statements of `workflows.rs`: a job's dependencies as it enters
//! `waiting`, and what a handler reads of them. What happens when a
//! dependency ends is the trigger of migration 11
//! (`tether_jobs_dependency_ended`), so that every statement that ends a job
//! releases or cancels what waits for it in the same transaction.
//!
//! No locks as on PostgreSQL: every write holds SQLite's write lock from
//! its `BEGIN IMMEDIATE`, so no dependency can end between these
//! statements and the commit.

/// The jobs among ?2 (a JSON array of ids) that tenant ?1 has, each with
/// its state.
pub(crate) const FIND_JOBS: &str = "SELECT id, state FROM tether_jobs \
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

/// Writes the judged edges of a planned graph (?1: a flat JSON array
/// `[job, dependency, met, ...]`, `met` 0 or 1).
pub(crate) const INSERT_PLANNED_EDGES: &str = concat!(
    "INSERT INTO tether_job_dependencies (depends_on, job_id, met) SELECT e.dep, e.job, e.met FROM (",
    unpack!("?1", "3", ["0" => "job", "1" => "dep", "2" => "met"]),
    ") AS e"
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
           WHERE d.job_id IN (SELECT value FROM json_each(?1)) AND +w.state = 'waiting') AS x \
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
         WHERE d.job_id IN (SELECT value FROM json_each(?1)) AND +w.state = 'waiting' \
         AND w.dependency_failure = 'cancel' AND p.state IN ('failed', 'cancelled') \
         GROUP BY d.job_id) AS x \
     JOIN tether_jobs AS p ON p.id = x.dep \
     WHERE true ON CONFLICT (id) DO NOTHING";

/// Third step: how many dependencies each job waits for. No state changes
/// here, so that every job of the set has its count before the fourth step
/// can fire the trigger for any of them (a batch's job cancelled there
/// meets the edges of the jobs of the batch that wait for it with `run`,
/// and releases those with none left unmet).
pub(crate) const SETTLE_COUNTS: &str = "UPDATE tether_jobs SET waiting_on = \
     (SELECT count(*) FROM tether_job_dependencies AS d WHERE d.job_id = tether_jobs.id AND d.met = 0) \
     WHERE id IN (SELECT value FROM json_each(?1)) AND +state = 'waiting'";

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
    " WHERE id IN (SELECT value FROM json_each(?1)) AND +state = 'waiting'"
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

/// Creates workflow ?1 of tenant ?2 named ?3 with key ?4; no row when the
/// key is taken ([`WORKFLOW_BY_KEY`] then finds the holder).
///
/// Its `finished_by` is `''` until [`FINISHED_AT_CREATION`]: a job its
/// batch ends at once must not announce it before `workflow_created`.
pub(crate) const INSERT_WORKFLOW: &str = concat!(
    "INSERT INTO tether_workflows (id, tenant, name, idempotency_key, created_at, finished_by) ",
    "VALUES (?1, ?2, ?3, ?4, ",
    now_ms!(),
    ", '') ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING ",
    "RETURNING id"
);

/// Lets workflow ?1's finish be announced from now on, and marks it
/// finished by job ?2 if every job of it has already ended (a batch whose
/// jobs were all cancelled at enqueue by a failed dependency): the next
/// event of ?2, [`WORKFLOW_CREATED`], then announces it (migration 16).
pub(crate) const FINISHED_AT_CREATION: &str = concat!(
    "UPDATE tether_workflows SET finished_by = CASE WHEN EXISTS (",
    "SELECT 1 FROM tether_jobs j WHERE j.workflow_id = ?1 ",
    "AND j.state IN ('waiting', 'queued', 'running')) THEN NULL ELSE ?2 END ",
    "WHERE id = ?1"
);

/// Writes `workflow_created` (detail: its name ?2) as an event of job ?3,
/// the first of the batch that created workflow ?1, after its `enqueued`.
pub(crate) const WORKFLOW_CREATED: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT id, tenant, ",
    now_ms!(),
    ", 'workflow_created', attempt, NULL, ?2 FROM tether_jobs WHERE id = ?3 AND workflow_id = ?1"
);

/// The workflow of tenant ?1 that holds idempotency key ?2.
pub(crate) const WORKFLOW_BY_KEY: &str =
    "SELECT id FROM tether_workflows WHERE tenant = ?1 AND idempotency_key = ?2";

/// Workflow ?1 of tenant ?2. (No lock as PostgreSQL's `LOCK_WORKFLOW`: a
/// cancel or retry runs under the write lock, alone.)
pub(crate) const WORKFLOW: &str = "SELECT id, name, idempotency_key, created_at \
     FROM tether_workflows WHERE id = ?1 AND tenant = ?2";

/// The graph of workflow ?1 of tenant ?2: its first ?3 jobs, oldest first,
/// with what each waits for and when it finished.
pub(crate) const WORKFLOW_GRAPH: &str =
    "SELECT id, kind, state, depends_on, finished_at FROM tether_jobs \
     WHERE workflow_id = ?1 AND tenant = ?2 ORDER BY id LIMIT ?3";

/// The jobs of workflow ?1 of tenant ?2, whole, oldest first (the answer of
/// a batch whose key led to an existing workflow).
pub(crate) const WORKFLOW_JOBS: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether_jobs WHERE workflow_id = ?1 AND tenant = ?2 ORDER BY id LIMIT ?3"
);

/// A page of tenant ?1's workflows, newest first (the filters present
/// are spliced in by [`list_workflows_sql`]), each with its jobs' counts
/// per state and their latest `finished_at`.
macro_rules! list_workflows {
    ($filters:literal) => {
        concat!(
            "SELECT w.id AS id, w.name AS name, w.idempotency_key AS idempotency_key, ",
            "w.created_at AS created_at, ",
            "count(j.id) FILTER (WHERE j.state = 'waiting') AS waiting, ",
            "count(j.id) FILTER (WHERE j.state = 'queued') AS queued, ",
            "count(j.id) FILTER (WHERE j.state = 'running') AS running, ",
            "count(j.id) FILTER (WHERE j.state = 'succeeded') AS succeeded, ",
            "count(j.id) FILTER (WHERE j.state = 'failed') AS failed, ",
            "count(j.id) FILTER (WHERE j.state = 'cancelled') AS cancelled, ",
            "max(j.finished_at) AS last_finished_at ",
            "FROM (SELECT id, name, idempotency_key, created_at FROM tether_workflows ",
            "WHERE tenant = ?1",
            $filters,
            " ORDER BY id DESC LIMIT ?4) AS w ",
            "LEFT JOIN tether_jobs AS j ON j.workflow_id = w.id ",
            "GROUP BY w.id ORDER BY w.id DESC"
        )
    };
}

/// [`list_workflows!`] with the filters present: named ?2, with ids below
/// ?3 (each shape its own statement, so that it can use its index;
/// `(?2 IS NULL OR …)` would defeat SQLite's index selection).
pub(crate) fn list_workflows_sql(named: bool, after: bool) -> &'static str {
    match (named, after) {
        (false, false) => list_workflows!(""),
        (true, false) => list_workflows!(" AND name = ?2"),
        (false, true) => list_workflows!(" AND id < ?3"),
        (true, true) => list_workflows!(" AND name = ?2 AND id < ?3"),
    }
}

/// The workflows ?2 (a JSON array of ids) of tenant ?1 that jobs are about
/// to join, each with how many jobs it holds and whether one is unfinished.
/// (Under the write lock: no cancel or retry can overlap the append.)
pub(crate) const CHECK_APPENDS: &str = "SELECT w.id AS id, \
     (SELECT count(*) FROM tether_jobs AS j WHERE j.workflow_id = w.id) AS jobs, \
     EXISTS (SELECT 1 FROM tether_jobs AS j WHERE j.workflow_id = w.id \
             AND j.state IN ('waiting', 'queued', 'running')) AS open \
     FROM tether_workflows AS w \
     WHERE w.tenant = ?1 AND w.id IN (SELECT value FROM json_each(?2))";

/// Cancelling workflow ?1 of tenant ?2, first step: marks met every edge
/// into its waiting jobs, which the second step cancels anyway. So the
/// trigger, as the second step's rows end one by one, neither cancels
/// (with a `cancelled` event naming a dependency) nor releases a job of
/// the workflow that the statement has not reached yet: each of them is
/// cancelled by the workflow's cancel, as on PostgreSQL, whose trigger
/// runs after the whole statement. What waits for them outside the
/// workflow is still moved by the trigger. (Entering `waiting` again, by a
/// replay, sets every edge of a job afresh.)
pub(crate) const CANCEL_WORKFLOW_EDGES: &str = "UPDATE tether_job_dependencies SET met = 1 \
     WHERE met = 0 AND job_id IN (SELECT id FROM tether_jobs \
     WHERE workflow_id = ?1 AND tenant = ?2 AND state = 'waiting')";

/// Second step: cancels the unfinished jobs of the workflow, waiting and
/// queued ones at once, running ones are asked to stop (once), as
/// `jobs::CANCEL_QUEUED` and `jobs::REQUEST_CANCEL` do one job. Answers
/// each job moved, its new state and whether others wait for it.
pub(crate) const CANCEL_WORKFLOW: &str = concat!(
    "UPDATE tether_jobs SET ",
    "state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END, ",
    "cancel_requested = (state = 'running'), ",
    "finished_at = CASE WHEN state = 'running' THEN finished_at ELSE ",
    now_ms!(),
    " END, waiting_on = 0, updated_at = ",
    now_ms!(),
    " WHERE workflow_id = ?1 AND tenant = ?2 AND (state IN ('waiting', 'queued') ",
    "OR (state = 'running' AND cancel_requested = 0)) ",
    "RETURNING id, state, has_dependents"
);

/// Third step: the events of the jobs the second moved (?1: a JSON array
/// of ids), `cancelled` or `cancel_requested`.
pub(crate) const CANCEL_WORKFLOW_EVENTS: &str = concat!(
    "INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail) ",
    "SELECT id, tenant, updated_at, CASE state WHEN 'cancelled' THEN 'cancelled' ",
    "ELSE 'cancel_requested' END, attempt, worker_id, NULL ",
    "FROM tether_jobs WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id"
);

/// Replays the failed jobs of workflow ?1 of tenant ?2 and, when ?3, every
/// finished job of the workflow downstream of them (through finished jobs
/// only): each goes back as a replay puts a job back (`jobs::REPLAY`,
/// `expires_at` cleared), to `waiting` when it has dependencies (then
/// settled, `workflows::settle`). Answers the jobs put back with their new
/// state.
pub(crate) const RETRY_WORKFLOW: &str = concat!(
    "WITH RECURSIVE picked (id) AS (",
    "SELECT id FROM tether_jobs WHERE workflow_id = ?1 AND tenant = ?2 AND state = 'failed' ",
    "UNION ",
    "SELECT d.job_id FROM picked AS p ",
    "JOIN tether_job_dependencies AS d ON d.depends_on = p.id ",
    "JOIN tether_jobs AS j ON j.id = d.job_id ",
    "WHERE ?3 AND j.workflow_id = ?1 AND j.state IN ('succeeded', 'failed', 'cancelled')) ",
    replay_set!("NULL"),
    "WHERE id IN (SELECT id FROM picked) AND state IN ('succeeded', 'failed', 'cancelled') ",
    "RETURNING id, queue, state"
);

/// How many of the jobs ?1 (a JSON array of ids) are queued, per queue
/// (the wake-ups of a retry).
pub(crate) const QUEUED_BY_QUEUE: &str = "SELECT queue, count(*) AS n FROM tether_jobs \
     WHERE id IN (SELECT value FROM json_each(?1)) AND state = 'queued' GROUP BY queue";
