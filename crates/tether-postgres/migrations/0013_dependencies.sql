-- Jobs that wait for other jobs (docs/DESIGN.md, invariant 16).
--
-- A job with unfinished dependencies is `waiting`. Its edges live in
-- job_dependencies; `waiting_on` counts the ones not yet met, so that two
-- dependencies ending in two transactions at once meet on the waiting job's
-- row lock and release it exactly once. `has_dependents` marks a job that
-- something waits for: the trigger below fires only for those, so the
-- transitions of every other job pay nothing but its WHEN test.
ALTER TABLE tether.jobs
    DROP CONSTRAINT jobs_state_check,
    ADD CONSTRAINT jobs_state_check
        CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled')),
    ADD COLUMN depends_on uuid[],
    ADD COLUMN dependency_failure text NOT NULL DEFAULT 'cancel'
        CHECK (dependency_failure IN ('cancel', 'run')),
    ADD COLUMN waiting_on integer NOT NULL DEFAULT 0,
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;

-- Listing and counting waiting jobs (one partial index per state, as
-- migration 5 explains).
CREATE INDEX jobs_waiting ON tether.jobs (tenant, queue, id) WHERE state = 'waiting';

-- One row per edge: `job_id` waits for `depends_on`. `met` says the
-- dependency's end was counted for the job's current wait. No foreign key:
-- pruning deletes a job's edges with it.
CREATE TABLE tether.job_dependencies (
    depends_on uuid    NOT NULL,
    job_id     uuid    NOT NULL,
    met        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (depends_on, job_id)
);
CREATE INDEX job_dependencies_job ON tether.job_dependencies (job_id);

-- A dependency's final transition, by whatever statement (complete, batch
-- complete, fail, reaper, expiry, cancel, bulk cancel): the jobs waiting
-- for it move in the same transaction. A failure or cancellation cancels
-- the jobs that wait with `cancel` and, through one recursive query, all
-- that wait with `cancel` downstream of them (no trigger recursion, however
-- deep the graph); then each waiting job that counts this end (success, or
-- any end with `run`) has one dependency fewer to wait for, and is queued
-- (`released`) when it was the last. The cancellations fire this trigger
-- again for their own `run` dependents, one level down.
CREATE FUNCTION tether.dependency_ended() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    notified bigint;
BEGIN
    IF NEW.state <> 'succeeded' THEN
        WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
            SELECT d.job_id, NEW.id, NEW.state
            FROM tether.job_dependencies d JOIN tether.jobs w ON w.id = d.job_id
            WHERE d.depends_on = NEW.id AND NOT d.met
              AND w.state = 'waiting' AND w.dependency_failure = 'cancel'
          UNION
            SELECT d.job_id, x.id, 'cancelled'
            FROM doomed x
            JOIN tether.job_dependencies d ON d.depends_on = x.id
            JOIN tether.jobs w ON w.id = d.job_id
            WHERE NOT d.met AND w.state = 'waiting' AND w.dependency_failure = 'cancel'
        ),
        cancelled AS (
            UPDATE tether.jobs w
            SET state = 'cancelled', waiting_on = 0, finished_at = now(), updated_at = now()
            FROM (SELECT DISTINCT ON (id) * FROM doomed ORDER BY id) x
            WHERE w.id = x.id AND w.state = 'waiting'
            RETURNING w.id, w.tenant, w.attempt, w.updated_at, x.dependency, x.dependency_state
        )
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT id, tenant, updated_at, 'cancelled', attempt,
               '{"dependency":"' || dependency || '","state":"' || dependency_state || '"}'
        FROM cancelled;
    END IF;

    WITH counted AS (
        UPDATE tether.job_dependencies d SET met = true
        FROM tether.jobs w
        WHERE d.depends_on = NEW.id AND NOT d.met AND w.id = d.job_id AND w.state = 'waiting'
          AND (NEW.state = 'succeeded' OR w.dependency_failure = 'run')
        RETURNING d.job_id
    ),
    moved AS (
        UPDATE tether.jobs w
        SET waiting_on = w.waiting_on - 1,
            state = CASE WHEN w.waiting_on <= 1 THEN 'queued' ELSE 'waiting' END,
            updated_at = now()
        FROM counted c
        WHERE w.id = c.job_id AND w.state = 'waiting'
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

CREATE TRIGGER jobs_dependency_ended
    AFTER UPDATE OF state ON tether.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents AND OLD.state IS DISTINCT FROM NEW.state
          AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION tether.dependency_ended();
