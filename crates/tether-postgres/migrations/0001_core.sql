-- tether's core schema. Everything lives in the `tether` schema so that an
-- application sharing the database keeps its own names and migrations.

CREATE TABLE tether.jobs (
    id                uuid        PRIMARY KEY,
    tenant            text        NOT NULL,
    queue             text        NOT NULL,
    kind              text        NOT NULL,
    payload           jsonb       NOT NULL,
    result            jsonb,
    state             text        NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    priority          smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100),
    attempt           integer     NOT NULL DEFAULT 0,
    max_attempts      integer     NOT NULL,
    backoff_base_ms   bigint      NOT NULL,
    backoff_cap_ms    bigint      NOT NULL,
    run_at            timestamptz NOT NULL,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    updated_at        timestamptz NOT NULL,
    last_error        text,
    unique_key        text,
    idempotency_key   text,
    tags              text[]      NOT NULL DEFAULT '{}',
    expires_at        timestamptz,
    timeout_ms        bigint,
    cancel_requested  boolean     NOT NULL DEFAULT false,
    worker_id         text,
    lease_token       uuid,
    lease_ttl_ms      bigint,
    lease_expires_at  timestamptz,
    heartbeat_at      timestamptz,
    progress          jsonb
) WITH (
    -- Room on each page so that heartbeats (which touch no indexed column)
    -- stay HOT updates, and aggressive vacuum because every transition is
    -- an UPDATE and dead tuples slow the claim.
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim: WHERE tenant, queue, state='queued', run_at <= now()
-- ORDER BY priority DESC, run_at, id.
CREATE INDEX jobs_claim ON tether.jobs (tenant, queue, priority DESC, run_at, id)
    WHERE state = 'queued';
-- The reaper and running counts. Deliberately not keyed on lease_expires_at:
-- a heartbeat then updates no indexed column and can stay HOT. The running
-- set is bounded by worker concurrency, so scanning it is cheap.
CREATE INDEX jobs_running ON tether.jobs (tenant, queue) WHERE state = 'running';
-- Expiry of queued jobs.
CREATE INDEX jobs_expiry ON tether.jobs (expires_at)
    WHERE state = 'queued' AND expires_at IS NOT NULL;
-- Pruning of finished jobs.
CREATE INDEX jobs_finished ON tether.jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
-- Listing (newest first) and per-queue counts.
CREATE INDEX jobs_list ON tether.jobs (tenant, queue, state, id);
CREATE INDEX jobs_tenant_state ON tether.jobs (tenant, state, id);
-- Invariant 6: the database, not a read-then-write, refuses duplicates.
CREATE UNIQUE INDEX jobs_idempotency ON tether.jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX jobs_unique_active ON tether.jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');

-- History: one row per transition. No foreign key: pruning deletes both.
CREATE TABLE tether.job_events (
    job_id     uuid        NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    tenant     text        NOT NULL,
    at         timestamptz NOT NULL,
    event      text        NOT NULL,
    attempt    integer     NOT NULL,
    worker_id  text,
    detail     text,
    PRIMARY KEY (job_id, seq)
);

-- Queues exist implicitly; a row holds their settings and pause flag.
CREATE TABLE tether.queues (
    tenant               text        NOT NULL,
    name                 text        NOT NULL,
    paused               boolean     NOT NULL DEFAULT false,
    max_attempts         integer     NOT NULL DEFAULT 5,
    backoff_base_ms      bigint      NOT NULL DEFAULT 1000,
    backoff_cap_ms       bigint      NOT NULL DEFAULT 3600000,
    default_lease_ttl_ms bigint      NOT NULL DEFAULT 30000,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, name)
);

-- Named leases (the maintenance leader): same fencing as job leases.
CREATE TABLE tether.leases (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    token       uuid        NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
