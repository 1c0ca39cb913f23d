-- Fewer writes per released job: the release of migration 16, measured
-- with `tether-bench --only dag` (a root, eight jobs after it, a sink after
-- those), wrote 62 % more WAL per job than as many independent jobs. Three
-- changes; the trigger stays, its function is replaced:
--
-- 1. A waiting job's row is no longer counted down by each dependency's
--    end. The end marks the job's edges met, under the job's row lock as
--    before, and the job is released when none of its edges is left unmet
--    (read in a second statement, whose snapshot sees every edge marked
--    by whoever held the lock before). A sink waiting for eight jobs was
--    rewritten eight times, each a new row version with a new entry in
--    the primary key and in `jobs_waiting`; now it is written once, when
--    it is released. `waiting_on` keeps the count a job entered `waiting`
--    with (the enqueue and workflow retry write it); it is 0 once released.
-- 2. The counted edges are updated by their row addresses (`ctid`), taken
--    by the lookup that found them. The UPDATE named them as
--    `depends_on = ANY (ended jobs) AND (depends_on, job_id) IN (pairs)`,
--    which PostgreSQL ran as one primary-key scan for every ended job for
--    every pair (18 to 39 index scans per job of the bench). An edge that
--    another transaction changed since the lookup is followed to its
--    newest version and checked again (`NOT met`), as any UPDATE under
--    READ COMMITTED does.
-- 3. Half of each new page of edges is left free (below), so that marking
--    an edge met is a heap-only update, which writes no index entry.
CREATE OR REPLACE FUNCTION tether.dependencies_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    candidates uuid[];
    ended_ids uuid[];
    ended_states text[];
    marked uuid[];
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
    -- `run`) has its edges from them marked met. Its row is locked first,
    -- in id order, so that two statements counting for the same jobs meet
    -- in one order, and the second sees what the first marked.
    WITH edges AS MATERIALIZED (
        SELECT d.edge, d.job_id, e.state AS dependency_state
        FROM unnest(ended_ids, ended_states) AS e(id, state)
        CROSS JOIN LATERAL (
            SELECT ctid AS edge, job_id FROM tether.job_dependencies
            WHERE depends_on = e.id AND NOT met
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
        SELECT x.edge
        FROM edges x JOIN locked l ON l.id = x.job_id
        WHERE x.dependency_state = 'succeeded' OR l.dependency_failure = 'run'
    ),
    counted AS (
        UPDATE tether.job_dependencies d SET met = true
        WHERE d.ctid = ANY (ARRAY(SELECT edge FROM counting))
          AND NOT d.met
        RETURNING d.job_id
    )
    SELECT array_agg(DISTINCT job_id) INTO marked FROM counted;
    IF marked IS NULL THEN
        RETURN NULL;
    END IF;

    -- Those with no unmet edge left are queued (`released`). A new
    -- statement, so a new snapshot: taken while this transaction holds
    -- their locks, it sees every edge that another transaction marked
    -- before it let go of them.
    WITH ready AS MATERIALIZED (
        SELECT w.id
        FROM unnest(marked) AS m(id)
        CROSS JOIN LATERAL (
            SELECT id FROM tether.jobs WHERE id = m.id AND state || '' = 'waiting'
        ) w
        LEFT JOIN LATERAL (
            SELECT 1 AS one FROM tether.job_dependencies
            WHERE job_id = w.id AND NOT met
            LIMIT 1 OFFSET 0
        ) unmet ON true
        WHERE unmet.one IS NULL
    ),
    moved AS (
        UPDATE tether.jobs w
        SET waiting_on = 0, state = 'queued', updated_at = now()
        WHERE w.id = ANY (ARRAY(SELECT id FROM ready))
          AND w.state || '' = 'waiting'
        RETURNING w.id, w.tenant, w.queue, w.attempt, w.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, updated_at, 'released', attempt FROM moved
    )
    -- The wake-up hint (see notify.rs), delivered at commit.
    SELECT count(pg_notify('tether_jobs', r.tenant || ' ' || r.queue || ' ' || r.n))
    INTO notified
    FROM (SELECT tenant, queue, count(*) AS n FROM moved GROUP BY tenant, queue) r;
    RETURN NULL;
END
$fn$;


-- An edge is written twice: inserted with its job, marked `met` when its
-- dependency ends. `met` is in no index, so the mark can be a heap-only
-- update that writes no index entry, but only where the edge's page has
-- room for the new version; edges are inserted a graph at a time into
-- full pages, so two in three marks wrote a new entry into both indexes.
-- Half of each new page is now left for the marks.
ALTER TABLE tether.job_dependencies SET (fillfactor = 50);
