-- The release trigger of migration 13, planned from the ended job's edges.
-- Written as joins with `state = 'waiting'`, its statements could start
-- from the partial index of waiting jobs: with statistics taken before any
-- job waited, PostgreSQL probed every waiting job for every dependency that
-- ended, and graphs slowed as they piled up (`tether-bench --only dag`).
-- Now each statement starts from the edges (the primary key's prefix) and
-- reaches jobs by primary key, an id array; the state is tested as an
-- expression no index matches, so no statistics can lead it elsewhere.
CREATE OR REPLACE FUNCTION tether.dependency_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    waiting uuid[];
    notified bigint;
BEGIN
    -- The jobs that wait for it and have not counted its end.
    SELECT array_agg(job_id) INTO waiting
    FROM tether.job_dependencies
    WHERE depends_on = NEW.id AND NOT met;
    IF waiting IS NULL THEN
        RETURN NULL;
    END IF;

    IF NEW.state <> 'succeeded' THEN
        WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
            SELECT w.id, NEW.id, NEW.state
            FROM tether.jobs w
            WHERE w.id = ANY (waiting)
              AND w.state || '' = 'waiting' AND w.dependency_failure = 'cancel'
          UNION
            SELECT w.id, x.id, 'cancelled'
            FROM doomed x
            JOIN tether.job_dependencies d ON d.depends_on = x.id
            JOIN tether.jobs w ON w.id = d.job_id
            WHERE NOT d.met
              AND w.state || '' = 'waiting' AND w.dependency_failure = 'cancel'
        ),
        chosen AS MATERIALIZED (
            SELECT DISTINCT ON (id) * FROM doomed ORDER BY id
        ),
        cancelled AS (
            UPDATE tether.jobs w
            SET state = 'cancelled', waiting_on = 0, finished_at = now(), updated_at = now()
            FROM chosen x
            WHERE w.id = ANY (ARRAY(SELECT id FROM chosen)) AND w.id = x.id
              AND w.state || '' = 'waiting'
            RETURNING w.id, w.tenant, w.attempt, w.updated_at, x.dependency, x.dependency_state
        )
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'cancelled', attempt,
               '{"dependency":"' || dependency || '","state":"' || dependency_state || '"}'
        FROM cancelled;
    END IF;

    WITH counting AS MATERIALIZED (
        SELECT w.id FROM tether.jobs w
        WHERE w.id = ANY (waiting) AND w.state || '' = 'waiting'
          AND (NEW.state = 'succeeded' OR w.dependency_failure = 'run')
    ),
    counted AS (
        UPDATE tether.job_dependencies d SET met = true
        WHERE d.depends_on = NEW.id AND d.job_id = ANY (ARRAY(SELECT id FROM counting))
          AND NOT d.met
        RETURNING d.job_id
    ),
    moved AS (
        UPDATE tether.jobs w
        SET waiting_on = w.waiting_on - 1,
            state = CASE WHEN w.waiting_on <= 1 THEN 'queued' ELSE 'waiting' END,
            updated_at = now()
        WHERE w.id = ANY (ARRAY(SELECT job_id FROM counted)) AND w.state || '' = 'waiting'
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
