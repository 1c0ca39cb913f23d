-- The release and the cascade of migrations 13 and 15, once per statement
-- instead of once per ended job.
--
-- Per row, a statement that ended many jobs (a batch completion, a claim
-- carrying reports) locked their dependents one ended job at a time, in
-- the order it happened to end them, and held each lock while the rest of
-- its rows were processed: a job waiting on eight others was updated eight
-- times, two such statements that fed the same two dependents could lock
-- them in opposite orders (a deadlock PostgreSQL breaks after
-- `deadlock_timeout`), and concurrent completions queued behind each
-- other's locks (`tether-bench --only dag`). Now one statement-level
-- trigger reads what the statement ended from its transition tables,
-- cancels what must be cancelled, then locks every dependent it counts for
-- in id order and updates each once, by the number of its dependencies
-- that ended.
--
-- As in migration 15, every statement reaches edges by the primary key's
-- prefix and jobs by primary key, whatever the statistics say: edges one
-- ended job at a time, by a lateral subquery that `OFFSET 0` keeps the
-- planner from flattening into a join (which, with statistics taken while
-- the table was small, hashed a scan of every edge).
DROP TRIGGER jobs_dependency_ended ON tether.jobs;
DROP FUNCTION tether.dependency_ended();

CREATE FUNCTION tether.dependencies_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    candidates uuid[];
    ended_ids uuid[];
    ended_states text[];
    notified bigint;
BEGIN
    -- Most statements end no job that others wait for: one pass over the
    -- new rows tells.
    SELECT array_agg(n.id) INTO candidates
    FROM ended_after n
    WHERE n.has_dependents AND n.state IN ('succeeded', 'failed', 'cancelled');
    IF candidates IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id ORDER BY n.id), array_agg(n.state ORDER BY n.id)
    INTO ended_ids, ended_states
    FROM ended_after n JOIN ended_before o ON o.id = n.id
    WHERE n.id = ANY (candidates) AND o.state IS DISTINCT FROM n.state;
    IF ended_ids IS NULL THEN
        RETURN NULL;
    END IF;

    -- A failure or cancellation cancels the jobs that wait for it with
    -- `cancel` and, through one recursive query, all that wait with
    -- `cancel` downstream of them. Their own `run` dependents count them
    -- when this trigger fires again for the cancelling statement.
    IF 'failed' = ANY (ended_states) OR 'cancelled' = ANY (ended_states) THEN
        WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
            SELECT w.id, e.id, e.state
            FROM unnest(ended_ids, ended_states) AS e(id, state)
            CROSS JOIN LATERAL (
                SELECT job_id FROM tether.job_dependencies
                WHERE depends_on = e.id AND NOT met
                OFFSET 0
            ) d
            CROSS JOIN LATERAL (
                SELECT id FROM tether.jobs
                WHERE id = d.job_id
                  AND state || '' = 'waiting' AND dependency_failure = 'cancel'
            ) w
            WHERE e.state <> 'succeeded'
          UNION
            SELECT w.id, x.id, 'cancelled'
            FROM doomed x
            CROSS JOIN LATERAL (
                SELECT job_id FROM tether.job_dependencies
                WHERE depends_on = x.id AND NOT met
                OFFSET 0
            ) d
            CROSS JOIN LATERAL (
                SELECT id FROM tether.jobs
                WHERE id = d.job_id
                  AND state || '' = 'waiting' AND dependency_failure = 'cancel'
            ) w
        ),
        chosen AS MATERIALIZED (
            SELECT DISTINCT ON (id) * FROM doomed ORDER BY id, dependency
        ),
        locked AS MATERIALIZED (
            SELECT w.id FROM tether.jobs w
            WHERE w.id = ANY (ARRAY(SELECT id FROM chosen))
            ORDER BY w.id
            FOR NO KEY UPDATE
        ),
        cancelled AS (
            UPDATE tether.jobs w
            SET state = 'cancelled', waiting_on = 0, finished_at = now(), updated_at = now()
            FROM chosen x
            WHERE w.id = ANY (ARRAY(SELECT id FROM locked)) AND w.id = x.id
              AND w.state || '' = 'waiting'
            RETURNING w.id, w.tenant, w.attempt, w.updated_at, x.dependency, x.dependency_state
        )
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'cancelled', attempt,
               '{"dependency":"' || dependency || '","state":"' || dependency_state || '"}'
        FROM cancelled;
    END IF;

    -- Each waiting job that counts these ends (successes; any end with
    -- `run`) has that many dependencies fewer to wait for, and is queued
    -- (`released`) when none is left. Its row is locked first, in id
    -- order, so that two statements counting for the same jobs meet in
    -- one order and the second counts what the first left.
    WITH edges AS MATERIALIZED (
        SELECT e.id AS depends_on, d.job_id, e.state AS dependency_state
        FROM unnest(ended_ids, ended_states) AS e(id, state)
        CROSS JOIN LATERAL (
            SELECT job_id FROM tether.job_dependencies WHERE depends_on = e.id AND NOT met
            OFFSET 0
        ) d
    ),
    locked AS MATERIALIZED (
        SELECT w.id, w.dependency_failure FROM tether.jobs w
        WHERE w.id = ANY (ARRAY(SELECT DISTINCT job_id FROM edges))
          AND w.state || '' = 'waiting'
        ORDER BY w.id
        FOR NO KEY UPDATE
    ),
    counting AS MATERIALIZED (
        SELECT x.depends_on, x.job_id
        FROM edges x JOIN locked l ON l.id = x.job_id
        WHERE x.dependency_state = 'succeeded' OR l.dependency_failure = 'run'
    ),
    counted AS (
        UPDATE tether.job_dependencies d SET met = true
        WHERE d.depends_on = ANY (ended_ids)
          AND (d.depends_on, d.job_id) IN (SELECT depends_on, job_id FROM counting)
          AND NOT d.met
        RETURNING d.job_id
    ),
    tally AS MATERIALIZED (
        SELECT job_id, count(*)::int AS n FROM counted GROUP BY job_id
    ),
    moved AS (
        UPDATE tether.jobs w
        SET waiting_on = w.waiting_on - t.n,
            state = CASE WHEN w.waiting_on <= t.n THEN 'queued' ELSE 'waiting' END,
            updated_at = now()
        FROM tally t
        WHERE w.id = ANY (ARRAY(SELECT job_id FROM tally)) AND w.id = t.job_id
          AND w.state || '' = 'waiting'
        RETURNING w.id, w.tenant, w.queue, w.state, w.attempt, w.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'released', attempt FROM moved WHERE state = 'queued'
    )
    -- The wake-up hint (see notify.rs), delivered at commit.
    SELECT count(pg_notify('tether_jobs', r.tenant || ' ' || r.queue || ' ' || r.n))
    INTO notified
    FROM (SELECT tenant, queue, count(*) AS n FROM moved WHERE state = 'queued'
          GROUP BY tenant, queue) r;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_dependencies_ended
    AFTER UPDATE ON tether.jobs
    REFERENCING OLD TABLE AS ended_before NEW TABLE AS ended_after
    FOR EACH STATEMENT
    EXECUTE FUNCTION tether.dependencies_ended();
