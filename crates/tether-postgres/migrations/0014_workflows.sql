-- Workflows: a named graph of jobs enqueued as one batch, which jobs can
-- join later (appends). A workflow's state is not stored: it is derived
-- from its jobs when read (`WorkflowState::of`), so ending a job never
-- writes to a row shared with the other jobs of its workflow (no lock for
-- concurrent completions to queue on, no deadlock between batches that
-- complete jobs of several workflows).
CREATE TABLE tether.workflows (
    id              uuid        PRIMARY KEY,
    tenant          text        NOT NULL,
    name            text        NOT NULL,
    idempotency_key text,
    created_at      timestamptz NOT NULL
);
-- Listing, newest first, and by name.
CREATE INDEX workflows_tenant ON tether.workflows (tenant, id);
CREATE INDEX workflows_name ON tether.workflows (tenant, name, id);
-- A second batch with the same key answers the existing workflow.
CREATE UNIQUE INDEX workflows_idempotency ON tether.workflows (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE tether.jobs ADD COLUMN workflow_id uuid;
-- A workflow's jobs (its graph, counts and state); jobs outside any
-- workflow take no entry.
CREATE INDEX jobs_workflow ON tether.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- A waiting job is work to come: it holds its unique key as a queued or
-- running one does (an enqueue with the key answers it).
DROP INDEX tether.jobs_unique_active;
CREATE UNIQUE INDEX jobs_unique_active ON tether.jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('waiting', 'queued', 'running');
