-- The release trigger of migration 11, planned from the ended job's edges
-- (as PostgreSQL's migration 15). Its statements could start from the index
-- of waiting (or queued) jobs, and its cascade view from a scan of every
-- edge, on every dependency's end, successes included: graphs slowed as
-- jobs piled up (`tether-bench --only dag`). Now the cascade is a trigger
-- of its own that fires only on a failure or cancellation; every statement
-- goes from the edges (the primary key's prefix) to the jobs by primary key
-- (CROSS JOIN fixes SQLite's join order), and `+state` keeps any index on
-- the state out of the plan.
DROP TRIGGER tether_jobs_dependency_ended;
DROP VIEW tether_jobs_doomed;

CREATE VIEW tether_jobs_doomed AS
WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
    SELECT d.job_id, s.id, s.state
    FROM tether_job_cascade_seed s
    CROSS JOIN tether_job_dependencies d
    CROSS JOIN tether_jobs w
    WHERE d.depends_on = s.id AND w.id = d.job_id AND d.met = 0
      AND +w.state = 'waiting' AND w.dependency_failure = 'cancel'
      AND w.id NOT IN (SELECT c.id FROM tether_job_cascade c)
  UNION
    SELECT d.job_id, x.id, 'cancelled'
    FROM doomed x
    CROSS JOIN tether_job_dependencies d
    CROSS JOIN tether_jobs w
    WHERE d.depends_on = x.id AND w.id = d.job_id AND d.met = 0
      AND +w.state = 'waiting' AND w.dependency_failure = 'cancel'
      AND w.id NOT IN (SELECT c.id FROM tether_job_cascade c)
)
SELECT id, dependency, dependency_state FROM doomed;

-- A failure or cancellation cancels what waits for it with `cancel`, and
-- everything that waits with `cancel` downstream, in one UPDATE (see
-- migration 11 for the events and the recursion).
CREATE TRIGGER tether_jobs_dependency_failed
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN NEW.has_dependents = 1 AND OLD.state <> NEW.state
     AND NEW.state IN ('failed', 'cancelled')
BEGIN
    INSERT INTO tether_job_cascade_seed (id, state) VALUES (NEW.id, NEW.state);

    INSERT INTO tether_job_cascade (id, root, dependency, dependency_state)
    SELECT id, NEW.id, dependency, dependency_state FROM tether_jobs_doomed
    WHERE true ON CONFLICT (id) DO NOTHING;

    DELETE FROM tether_job_cascade_seed WHERE id = NEW.id;

    UPDATE tether_jobs
    SET state = 'cancelled', waiting_on = 0,
        finished_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER),
        updated_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)
    WHERE id IN (SELECT c.id FROM tether_job_cascade c WHERE c.root = NEW.id)
      AND +state = 'waiting';

    DELETE FROM tether_job_cascade WHERE root = NEW.id;
END;

-- Every final transition: each waiting job that counts this end (a
-- success, or any end with `run`) has one dependency fewer to wait for,
-- and is queued (`released`) when it was the last. Its edge is marked 3
-- first, so that exactly the jobs counted now are moved. (With `cancel`, a
-- failure's waiting jobs are the other trigger's: the two touch different
-- jobs, so their order does not matter.)
CREATE TRIGGER tether_jobs_dependency_ended
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN NEW.has_dependents = 1 AND OLD.state <> NEW.state
     AND NEW.state IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE tether_job_dependencies SET met = 3
    WHERE depends_on = NEW.id AND met = 0
      AND EXISTS (SELECT 1 FROM tether_jobs w WHERE w.id = tether_job_dependencies.job_id
                  AND +w.state = 'waiting'
                  AND (NEW.state = 'succeeded' OR w.dependency_failure = 'run'));

    UPDATE tether_jobs
    SET waiting_on = waiting_on - 1,
        state = CASE WHEN waiting_on <= 1 THEN 'queued' ELSE 'waiting' END,
        updated_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)
    WHERE id IN (SELECT job_id FROM tether_job_dependencies
                 WHERE depends_on = NEW.id AND met = 3)
      AND +state = 'waiting';

    INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail)
    SELECT w.id, w.tenant, w.updated_at, 'released', w.attempt, NULL, NULL
    FROM tether_job_dependencies d CROSS JOIN tether_jobs w
    WHERE d.depends_on = NEW.id AND d.met = 3 AND w.id = d.job_id AND +w.state = 'queued';

    INSERT INTO tether_job_releases (tenant, queue)
    SELECT w.tenant, w.queue
    FROM tether_job_dependencies d CROSS JOIN tether_jobs w
    WHERE d.depends_on = NEW.id AND d.met = 3 AND w.id = d.job_id AND +w.state = 'queued';

    UPDATE tether_job_dependencies SET met = 1 WHERE depends_on = NEW.id AND met = 3;
END;
