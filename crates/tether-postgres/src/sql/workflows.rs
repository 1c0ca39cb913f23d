//! Statements of `workflows.rs`: a job's dependencies as it enters
//! `waiting`, and what a handler reads of them. What happens when a
//! dependency ends is the trigger of migration 13 (`dependency_ended`), so
//! that every statement that ends a job releases or cancels what waits for
//! it in the same transaction.

/// Locks the existing jobs `$2` of tenant `$1` that new or replayed jobs
/// are about to wait for, and marks them `has_dependents`; answers the ids
/// it found. Held until the transaction ends: a dependency cannot end
/// between this and the commit, so its end (the trigger) sees the edges
/// written meanwhile, and [`SETTLE_WAITING`], a later statement, sees every
/// end that came before. In id order, so two of these cannot deadlock; the
/// flag is written only where it is not set yet.
pub(crate) const LOCK_DEPENDENCIES: &str = "WITH locked AS (
        SELECT id, has_dependents FROM tether.jobs
        WHERE id = ANY($2::uuid[]) AND tenant = $1
        ORDER BY id
        FOR NO KEY UPDATE
    ),
    flagged AS (
        UPDATE tether.jobs j SET has_dependents = true
        FROM locked l WHERE j.id = l.id AND NOT l.has_dependents
    )
    SELECT id FROM locked";

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
    )
    UPDATE tether.jobs j
    SET has_dependents = j.has_dependents OR j.id = ANY($6::uuid[]),
        state = CASE WHEN r.rule IS NULL THEN j.state ELSE 'waiting' END,
        dependency_failure = COALESCE(r.rule, j.dependency_failure),
        depends_on = CASE WHEN r.rule IS NULL THEN j.depends_on
                          ELSE ARRAY(SELECT e.depends_on FROM edges e
                                     WHERE e.job_id = j.id ORDER BY e.ord) END
    FROM (SELECT id FROM UNNEST($4::uuid[]) AS w(id) UNION SELECT UNNEST($6::uuid[])) a
    LEFT JOIN UNNEST($4::uuid[], $5::text[]) AS r(id, rule) ON r.id = a.id
    WHERE j.id = a.id AND j.tenant = $1";

/// Settles jobs `$1` that just entered `waiting` (enqueued, or replayed)
/// against their dependencies as they stand now (locked by
/// [`LOCK_DEPENDENCIES`]): each edge is met when its dependency succeeded
/// (or, with `run`, ended at all); a job with a failed or cancelled
/// dependency and `cancel` is cancelled at once (the trigger then cancels
/// what waits for it), one with nothing left to wait for is queued, the
/// rest wait for `waiting_on` more ends. A dependency pruned meanwhile
/// counts as met. Answers each job's id, queue and new state.
pub(crate) const SETTLE_WAITING: &str = r#"WITH deps AS (
        SELECT d.job_id, d.depends_on, COALESCE(p.state, 'succeeded') AS dep_state,
               w.dependency_failure AS rule
        FROM tether.job_dependencies d
        JOIN tether.jobs w ON w.id = d.job_id
        LEFT JOIN tether.jobs p ON p.id = d.depends_on
        WHERE d.job_id = ANY($1::uuid[]) AND w.state = 'waiting'
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
        WHERE w.id = v.job_id AND w.state = 'waiting'
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
