-- Workflow events, mirroring crates/tether-postgres/migrations/0019_workflow_events.sql:
-- `workflow_created`, written with the batch that creates a workflow, and
-- `workflow_finished`, written when the end of a job leaves none of its
-- workflow's jobs unfinished, as an event of that job after its own end's
-- event. One writer at a time: no two ends race here.
--
-- A job's end updates its row before its event is written, so the finish
-- is seen by the first trigger below, which marks the workflow with the
-- job (`finished_by`), and written by the second, when that job's next
-- event (its end's) is inserted.
ALTER TABLE tether_workflows ADD COLUMN finished_by TEXT;
CREATE INDEX tether_workflows_finished_by ON tether_workflows (finished_by)
    WHERE finished_by IS NOT NULL;

-- The unfinished jobs of each workflow: "is any left" is one index probe
-- however many of its jobs have ended. Jobs outside workflows take no
-- entry.
CREATE INDEX tether_jobs_workflow_unfinished ON tether_jobs (workflow_id)
    WHERE workflow_id IS NOT NULL AND state IN ('waiting', 'queued', 'running');

CREATE TRIGGER tether_jobs_workflow_ended
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN NEW.workflow_id IS NOT NULL
     AND NEW.state IN ('succeeded', 'failed', 'cancelled')
     AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled')
     AND NOT EXISTS (SELECT 1 FROM tether_jobs j
                     WHERE j.workflow_id = NEW.workflow_id
                       AND j.state IN ('waiting', 'queued', 'running'))
BEGIN
    -- `''` while the workflow's batch is being written: not announced
    -- before its `workflow_created`.
    UPDATE tether_workflows SET finished_by = NEW.id
    WHERE id = NEW.workflow_id AND finished_by IS NULL;
END;

CREATE TRIGGER tether_job_events_workflow_finished
AFTER INSERT ON tether_job_events
FOR EACH ROW
WHEN NEW.event <> 'workflow_finished'
     AND EXISTS (SELECT 1 FROM tether_workflows WHERE finished_by = NEW.job_id)
BEGIN
    INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail)
    SELECT NEW.job_id, NEW.tenant, NEW.at, 'workflow_finished', NEW.attempt, NULL,
           (SELECT CASE WHEN max(k.state = 'failed') THEN 'failed'
                        WHEN max(k.state = 'cancelled') THEN 'cancelled'
                        ELSE 'succeeded' END
            FROM tether_jobs k WHERE k.workflow_id = w.id)
    FROM tether_workflows w WHERE w.finished_by = NEW.job_id;
    UPDATE tether_workflows SET finished_by = NULL WHERE finished_by = NEW.job_id;
END;
