-- Workflows, mirroring crates/tether-postgres/migrations/0014_workflows.sql:
-- a named graph of jobs enqueued as one batch, which jobs can join later
-- (appends). A workflow's state is not stored: it is derived from its jobs
-- when read (`WorkflowState::of`), so ending a job never writes to a row
-- shared with the other jobs of its workflow.
CREATE TABLE tether_workflows (
    id              TEXT    NOT NULL PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    idempotency_key TEXT,
    created_at      INTEGER NOT NULL
) STRICT;
-- Listing, newest first, and by name.
CREATE INDEX tether_workflows_tenant ON tether_workflows (tenant, id);
CREATE INDEX tether_workflows_name ON tether_workflows (tenant, name, id);
-- A second batch with the same key answers the existing workflow.
CREATE UNIQUE INDEX tether_workflows_idempotency ON tether_workflows (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- A nullable column without a default: added in place, no rebuild (the
-- CHECKs and triggers of migration 11 are untouched).
ALTER TABLE tether_jobs ADD COLUMN workflow_id TEXT;
-- A workflow's jobs (its graph, counts and state); jobs outside any
-- workflow take no entry.
CREATE INDEX tether_jobs_workflow ON tether_jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- A waiting job is work to come: it holds its unique key as a queued or
-- running one does (an enqueue with the key answers it).
DROP INDEX tether_jobs_unique_active;
CREATE UNIQUE INDEX tether_jobs_unique_active ON tether_jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('waiting', 'queued', 'running');
