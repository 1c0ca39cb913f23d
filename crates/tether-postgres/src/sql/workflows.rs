//! Statements of `workflows.rs`: a job's dependencies as it enters
//! `waiting`, and what a handler reads of them. What happens when a
//! dependency ends is the trigger of migration 13 (`dependency_ended`), so
//! that every statement that ends a job releases or cancels what waits for
//! it in the same transaction.

/// Locks the existing jobs `$2` of tenant `$1` that new or replayed jobs
/// are about to wait for, and marks them `has_dependents`; answers the ids
/// it found, each with its state. Held until the transaction ends: a dependency cannot end
/// between this and the commit, so its end (the trigger) sees the edges
/// written meanwhile, and [`SETTLE_WAITING`], a later statement, sees every
/// end that came before. In id order, so two of these cannot deadlock; the
/// flag is written only where it is not set yet.
pub(crate) const LOCK_DEPENDENCIES: &str = "WITH locked AS (
        SELECT id, state, has_dependents FROM tether.jobs
        WHERE id = ANY($2::uuid[]) AND tenant = $1
        ORDER BY id
        FOR NO KEY UPDATE
    ),
    flagged AS (
        UPDATE tether.jobs j SET has_dependents = true
        FROM locked l WHERE j.id = l.id AND NOT l.has_dependents
    )
    SELECT id, state FROM locked";

/// Writes the edges of new jobs (`$2` the waiting jobs, `$3` what each
/// waits for, one pair per edge, in the order given) and makes those jobs
/// `waiting` with their rules (`$4` the jobs again, once each, `$5` their
/// `dependency_failure`); `$6` the batch's new jobs that others of the
/// batch wait for, marked `has_dependents` (existing ones were marked by
/// [`LOCK_DEPENDENCIES`]). `$1` tenant.
pub(crate) const ATTACH_DEPENDENCIES: &str = "WITH edges AS (
        SELECT * FROM UNNEST($2::uuid[], $3::uuid[]) WITH ORDINALITY AS e(job_id, depends_on, ord)
    ),
    added AS (
        INSERT INTO tether.job_dependencies (depends_on, job_id)
        SELECT depends_on, job_id FROM edges
        ON CONFLICT DO NOTHING
    ),
    lists AS (
        SELECT job_id, array_agg(depends_on ORDER BY ord) AS ids FROM edges GROUP BY job_id
    ),
    waiting AS (
        SELECT r.id, r.rule, l.ids
        FROM UNNEST($4::uuid[], $5::text[]) AS r(id, rule) JOIN lists l ON l.job_id = r.id
    ),
    depended AS (
        SELECT DISTINCT id FROM UNNEST($6::uuid[]) AS d(id)
    ),
    changes AS (
        SELECT COALESCE(w.id, d.id) AS id, w.rule, w.ids, d.id IS NOT NULL AS depended
        FROM waiting w FULL JOIN depended d ON d.id = w.id
    )
    UPDATE tether.jobs j
    SET has_dependents = j.has_dependents OR c.depended,
        state = CASE WHEN c.rule IS NULL THEN j.state ELSE 'waiting' END,
        dependency_failure = COALESCE(c.rule, j.dependency_failure),
        depends_on = COALESCE(c.ids, j.depends_on)
    FROM changes c
    WHERE j.id = c.id AND j.tenant = $1";

/// Settles jobs `$1` that just entered `waiting` (enqueued, or replayed)
/// against their dependencies as they stand now (locked by
/// [`LOCK_DEPENDENCIES`]): each edge is met when its dependency succeeded
/// (or, with `run`, ended at all); a job with a failed or cancelled
/// dependency and `cancel` is cancelled at once (the trigger then cancels
/// what waits for it), one with nothing left to wait for is queued, the
/// rest wait until none of their edges is left unmet (the release of
/// migration 17; `waiting_on` keeps how many were unmet here, and nothing
/// reads it). A dependency pruned meanwhile
/// counts as met. Answers each job's id, queue and new state. Jobs are
/// reached by primary key only, and the state tested as an expression, so
/// that no plan walks every waiting job (see migration 15).
pub(crate) const SETTLE_WAITING: &str = r#"WITH deps AS (
        SELECT d.job_id, d.depends_on, COALESCE(p.state, 'succeeded') AS dep_state,
               w.dependency_failure AS rule
        FROM tether.job_dependencies d
        JOIN tether.jobs w ON w.id = d.job_id
        LEFT JOIN tether.jobs p ON p.id = d.depends_on
        WHERE d.job_id = ANY($1::uuid[]) AND w.state || '' = 'waiting'
    ),
    judged AS (
        SELECT *, dep_state = 'succeeded'
                  OR (rule = 'run' AND dep_state IN ('failed', 'cancelled')) AS met,
               rule = 'cancel' AND dep_state IN ('failed', 'cancelled') AS fatal
        FROM deps
    ),
    marked AS (
        UPDATE tether.job_dependencies d SET met = x.met
        FROM judged x WHERE d.job_id = x.job_id AND d.depends_on = x.depends_on
    ),
    verdict AS (
        SELECT job_id, count(*) FILTER (WHERE NOT met) AS unmet,
               (array_agg(depends_on ORDER BY depends_on) FILTER (WHERE fatal))[1] AS failed_dep,
               (array_agg(dep_state ORDER BY depends_on) FILTER (WHERE fatal))[1] AS failed_state
        FROM judged GROUP BY job_id
    ),
    moved AS (
        UPDATE tether.jobs w
        SET state = CASE WHEN v.failed_dep IS NOT NULL THEN 'cancelled'
                         WHEN v.unmet = 0 THEN 'queued' ELSE 'waiting' END,
            waiting_on = CASE WHEN v.failed_dep IS NOT NULL THEN 0 ELSE v.unmet END,
            finished_at = CASE WHEN v.failed_dep IS NOT NULL THEN now() ELSE w.finished_at END,
            updated_at = now()
        FROM verdict v
        WHERE w.id = v.job_id AND w.state || '' = 'waiting'
        RETURNING w.id, w.tenant, w.queue, w.state, w.attempt, w.updated_at,
                  v.failed_dep, v.failed_state
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'cancelled', attempt,
               '{"dependency":"' || failed_dep || '","state":"' || failed_state || '"}'
        FROM moved WHERE state = 'cancelled'
    )
    SELECT id, queue, state FROM moved"#;

/// The dependencies of job `$1` of tenant `$2`, in the order it names them.
pub(crate) const DEPENDENCIES: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs w
      CROSS JOIN LATERAL UNNEST(w.depends_on) WITH ORDINALITY AS d(id, ord)
      JOIN tether.jobs j ON j.id = d.id AND j.tenant = w.tenant
      WHERE w.id = $1 AND w.tenant = $2
      ORDER BY d.ord"
);

/// What jobs `$1` wait for, once each, in id order (for
/// [`LOCK_DEPENDENCIES`] before they are settled again).
pub(crate) const WAITING_DEPENDENCIES: &str =
    "SELECT DISTINCT d.id FROM tether.jobs j CROSS JOIN LATERAL UNNEST(j.depends_on) AS d(id)
    WHERE j.id = ANY($1::uuid[]) ORDER BY d.id";

/// Creates workflow `$1` of tenant `$2` named `$3` with key `$4`; no row
/// when the key is taken ([`WORKFLOW_BY_KEY`] then finds the holder). Its
/// finish is not announced until [`WORKFLOW_CREATED`] is written (a job
/// its batch ends at once must not announce it before).
pub(crate) const INSERT_WORKFLOW: &str = "WITH made AS (
        INSERT INTO tether.workflows (id, tenant, name, idempotency_key, created_at)
        VALUES ($1, $2, $3, $4, now())
        ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING id
    ),
    quiet AS (
        INSERT INTO tether.workflow_finishes (workflow_id) SELECT id FROM made
    )
    SELECT id FROM made";

/// Writes `workflow_created` (detail: its name `$2`) as an event of job
/// `$3`, the first of the batch that created workflow `$1`, after its
/// `enqueued`, and lets the workflow's finish be announced from now on.
pub(crate) const WORKFLOW_CREATED: &str = "WITH announcing AS (
        DELETE FROM tether.workflow_finishes WHERE workflow_id = $1
    )
    INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
    SELECT j.id, j.tenant, now(), 'workflow_created', j.attempt, $2
    FROM tether.jobs j WHERE j.id = $3 AND j.workflow_id = $1";

/// Announces workflow `$1` finished, as an event of job `$2`, if every job
/// of it has already ended (a batch whose jobs were all cancelled at
/// enqueue by a failed dependency): migration 19.
pub(crate) const ANNOUNCE_IF_FINISHED: &str =
    "SELECT tether.announce_finished_workflows(ARRAY[$1::uuid], ARRAY[$2::uuid])";

/// The workflow of tenant `$1` that holds idempotency key `$2`.
pub(crate) const WORKFLOW_BY_KEY: &str =
    "SELECT id FROM tether.workflows WHERE tenant = $1 AND idempotency_key = $2";

/// Workflow `$1` of tenant `$2`.
pub(crate) const WORKFLOW: &str = "SELECT id, name, idempotency_key, created_at
    FROM tether.workflows WHERE id = $1 AND tenant = $2";

/// Workflow `$1` of tenant `$2`, locked until the transaction ends, so that
/// a cancel or a retry of it runs alone and an append does not overlap it.
pub(crate) const LOCK_WORKFLOW: &str = "SELECT id, name, idempotency_key, created_at
    FROM tether.workflows WHERE id = $1 AND tenant = $2 FOR UPDATE";

/// The graph of workflow `$1` of tenant `$2`: its first `$3` jobs, oldest
/// first, with what each waits for and when it finished.
pub(crate) const WORKFLOW_GRAPH: &str =
    "SELECT id, kind, state, depends_on, finished_at FROM tether.jobs
    WHERE workflow_id = $1 AND tenant = $2 ORDER BY id LIMIT $3";

/// The jobs of workflow `$1` of tenant `$2`, whole, oldest first (the
/// answer of a batch whose key led to an existing workflow).
pub(crate) const WORKFLOW_JOBS: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs j WHERE j.workflow_id = $1 AND j.tenant = $2 ORDER BY j.id LIMIT $3"
);

/// A page of tenant `$1`'s workflows, newest first: named `$2` (NULL: any),
/// with ids below `$3` (NULL: from the newest), at most `$4`; each with its
/// jobs' counts per state and their latest `finished_at`.
pub(crate) const LIST_WORKFLOWS: &str = "SELECT w.id, w.name, w.idempotency_key, w.created_at, c.*
    FROM tether.workflows w
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE state = 'waiting') AS waiting,
               count(*) FILTER (WHERE state = 'queued') AS queued,
               count(*) FILTER (WHERE state = 'running') AS running,
               count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE state = 'failed') AS failed,
               count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
               max(finished_at) AS last_finished_at
        FROM tether.jobs j WHERE j.workflow_id = w.id
    ) c
    WHERE w.tenant = $1 AND ($2::text IS NULL OR w.name = $2)
      AND ($3::uuid IS NULL OR w.id < $3)
    ORDER BY w.id DESC
    LIMIT $4";

/// The workflows `$2` of tenant `$1` that jobs are about to join, locked
/// in share mode until the transaction ends (a cancel or retry of one of
/// them waits for the append, and the other way round): each with how many
/// jobs it holds and whether one is unfinished.
pub(crate) const CHECK_APPENDS: &str = "SELECT w.id,
        (SELECT count(*) FROM tether.jobs j WHERE j.workflow_id = w.id) AS jobs,
        EXISTS (SELECT 1 FROM tether.jobs j
                WHERE j.workflow_id = w.id AND j.state IN ('waiting', 'queued', 'running')) AS open
    FROM tether.workflows w
    WHERE w.tenant = $1 AND w.id = ANY($2::uuid[])
    ORDER BY w.id
    FOR SHARE OF w";

/// Cancels the unfinished jobs of workflow `$1` of tenant `$2` (locked by
/// [`LOCK_WORKFLOW`]): waiting and queued ones at once, running ones are
/// asked to stop, as `jobs::CANCEL` does one job. Answers how many of each.
pub(crate) const CANCEL_WORKFLOW: &str = "WITH cur AS (
        SELECT id, state, cancel_requested FROM tether.jobs
        WHERE workflow_id = $1 AND tenant = $2 AND state IN ('waiting', 'queued', 'running')
        ORDER BY id
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN cur.state = 'running' THEN j.state ELSE 'cancelled' END,
            cancel_requested = (cur.state = 'running'),
            finished_at = CASE WHEN cur.state = 'running' THEN j.finished_at ELSE now() END,
            waiting_on = 0, updated_at = now()
        FROM cur
        WHERE j.id = cur.id AND (cur.state <> 'running' OR NOT cur.cancel_requested)
        RETURNING j.id, j.tenant, j.state, j.attempt, j.worker_id, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'cancelled' THEN 'cancelled' ELSE 'cancel_requested' END,
               attempt, worker_id
        FROM done
    )
    SELECT count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE state = 'running') AS cancel_requested
    FROM done";

/// Replays the failed jobs of workflow `$1` of tenant `$2` (locked by
/// [`LOCK_WORKFLOW`]) and, when `$3`, every finished job of the workflow
/// downstream of them (through finished jobs only): each goes back as a
/// replay puts a job back (`jobs::REPLAY`), to `waiting` when it has
/// dependencies. Answers the jobs put back with their new state.
pub(crate) const RETRY_WORKFLOW: &str = "WITH RECURSIVE picked (id) AS (
        SELECT id FROM tether.jobs
        WHERE workflow_id = $1 AND tenant = $2 AND state = 'failed'
      UNION
        SELECT d.job_id FROM picked p
        JOIN tether.job_dependencies d ON d.depends_on = p.id
        JOIN tether.jobs j ON j.id = d.job_id
        WHERE $3 AND j.workflow_id = $1 AND j.state IN ('succeeded', 'failed', 'cancelled')
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = CASE WHEN j.depends_on IS NULL THEN 'queued' ELSE 'waiting' END,
            attempt = 0, run_at = now(), cancel_requested = false,
            finished_at = NULL, result = NULL, lease_token = NULL, lease_expires_at = NULL,
            progress = NULL, expires_at = NULL, updated_at = now()
        WHERE j.id IN (SELECT id FROM picked) AND j.state IN ('succeeded', 'failed', 'cancelled')
        RETURNING j.id, j.tenant, j.queue, j.state, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'replayed', 0 FROM done
    )
    SELECT id, queue, state FROM done ORDER BY id";
