-- Fewer writes per released job (as PostgreSQL's migration 17). The
-- release of migration 13 marked each counted edge twice (3, then 1, so
-- that its later statements could tell which jobs this end counted),
-- counted a waiting job down once per dependency that ended (a sink
-- waiting for eight jobs was rewritten eight times), and ran five
-- statements per ended job with dependents, the two inserts each joining
-- the marked edges again. Now an end marks its counted edges met once, and
-- a waiting job that it counts is released when none of its edges is left
-- unmet: written once, when it is queued. `waiting_on` keeps the count a
-- job entered `waiting` with (the enqueue and the settle write it); the
-- release sets it to 0.
--
-- "Ready" below is: a waiting job that waits for this one, with no unmet
-- edge left. It is the same set in the three statements that use it (the
-- first two write no job; the third queues exactly those), so the events
-- and the wake-up hints name exactly the jobs queued. A job whose edges
-- were all met before (by an earlier end of this job, before a replay) is
-- ready too, rightly: nothing is left for it to wait for.
DROP TRIGGER tether_jobs_dependency_ended;

CREATE TRIGGER tether_jobs_dependency_ended
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN NEW.has_dependents = 1 AND OLD.state <> NEW.state
     AND NEW.state IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE tether_job_dependencies SET met = 1
    WHERE depends_on = NEW.id AND met = 0
      AND EXISTS (SELECT 1 FROM tether_jobs w WHERE w.id = tether_job_dependencies.job_id
                  AND +w.state = 'waiting'
                  AND (NEW.state = 'succeeded' OR w.dependency_failure = 'run'));

    INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail)
    SELECT w.id, w.tenant, CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER),
           'released', w.attempt, NULL, NULL
    FROM tether_job_dependencies d CROSS JOIN tether_jobs w
    WHERE d.depends_on = NEW.id AND d.met = 1 AND w.id = d.job_id AND +w.state = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM tether_job_dependencies u
                      WHERE u.job_id = w.id AND u.met = 0);

    INSERT INTO tether_job_releases (tenant, queue)
    SELECT w.tenant, w.queue
    FROM tether_job_dependencies d CROSS JOIN tether_jobs w
    WHERE d.depends_on = NEW.id AND d.met = 1 AND w.id = d.job_id AND +w.state = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM tether_job_dependencies u
                      WHERE u.job_id = w.id AND u.met = 0);

    UPDATE tether_jobs
    SET state = 'queued', waiting_on = 0,
        updated_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)
    WHERE id IN (SELECT job_id FROM tether_job_dependencies
                 WHERE depends_on = NEW.id AND met = 1)
      AND +state = 'waiting'
      AND NOT EXISTS (SELECT 1 FROM tether_job_dependencies u
                      WHERE u.job_id = tether_jobs.id AND u.met = 0);
END;
