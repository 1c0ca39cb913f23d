-- Schedules (invariant 11): a cron timetable per tenant and the record of
-- its runs. Like every tether table the rows are filed under the tenant's
-- name, and every statement on them filters by it (invariant 13).

CREATE TABLE tether.schedules (
    id          uuid        PRIMARY KEY,
    tenant      text        NOT NULL,
    name        text        NOT NULL,
    cron        text        NOT NULL,
    timezone    text        NOT NULL,
    queue       text        NOT NULL,
    kind        text        NOT NULL,
    -- A null payload is the JSON value null, never SQL NULL.
    payload     jsonb       NOT NULL,
    enabled     boolean     NOT NULL,
    overlap     text        NOT NULL CHECK (overlap IN ('allow', 'skip')),
    -- The compare-and-set of a fire matches on it; NULL while disabled.
    next_run_at timestamptz,
    last_run_at timestamptz,
    -- No foreign key: the job may be pruned long before the schedule goes.
    last_job_id uuid,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    -- A taken name is refused by the database, not by a read-then-write;
    -- the store recognises this constraint by name.
    CONSTRAINT schedules_tenant_name UNIQUE (tenant, name),
    CONSTRAINT schedules_disabled_never_due CHECK (enabled OR next_run_at IS NULL)
);

-- The scheduler's scan and the earliest due instant (all tenants).
CREATE INDEX schedules_due ON tether.schedules (next_run_at, id)
    WHERE enabled AND next_run_at IS NOT NULL;

-- One row per run of a schedule. The id orders runs with the same fire_at.
CREATE TABLE tether.schedule_runs (
    id          bigserial   PRIMARY KEY,
    schedule_id uuid        NOT NULL REFERENCES tether.schedules (id) ON DELETE CASCADE,
    tenant      text        NOT NULL,
    fire_at     timestamptz NOT NULL,
    job_id      uuid,
    outcome     text        NOT NULL CHECK (outcome IN ('enqueued', 'skipped')),
    recorded_at timestamptz NOT NULL
);
-- A schedule's runs, newest first (also the index the cascade deletes by).
CREATE INDEX schedule_runs_schedule ON tether.schedule_runs (schedule_id, fire_at DESC, id DESC);
-- Pruning of old runs.
CREATE INDEX schedule_runs_recorded ON tether.schedule_runs (recorded_at);
