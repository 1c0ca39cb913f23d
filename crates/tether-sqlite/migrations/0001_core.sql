-- tether's core schema on SQLite. It mirrors the PostgreSQL schema
-- (crates/tether-postgres/migrations/0001_core.sql) table for table and index
-- for index; every name is prefixed `tether_` because SQLite has no schemas
-- and an application may share the file.
--
-- Storage types: instants are INTEGER milliseconds since the Unix epoch, always
-- computed by SQLite itself for "now"; UUIDs are lowercase hyphenated TEXT (so
-- they sort like the UUIDs themselves and json_each can carry lists of them);
-- JSON values are TEXT. STRICT tables refuse a value of the wrong type instead
-- of silently storing it.

CREATE TABLE tether_jobs (
    id                TEXT    NOT NULL PRIMARY KEY,
    tenant            TEXT    NOT NULL,
    queue             TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    payload           TEXT    NOT NULL,
    result            TEXT,
    state             TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    priority          INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100),
    attempt           INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL,
    backoff_base_ms   INTEGER NOT NULL,
    backoff_cap_ms    INTEGER NOT NULL,
    run_at            INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    started_at        INTEGER,
    finished_at       INTEGER,
    updated_at        INTEGER NOT NULL,
    last_error        TEXT,
    unique_key        TEXT,
    idempotency_key   TEXT,
    tags              TEXT    NOT NULL DEFAULT '[]',
    expires_at        INTEGER,
    timeout_ms        INTEGER,
    cancel_requested  INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    worker_id         TEXT,
    lease_token       TEXT,
    lease_ttl_ms      INTEGER,
    lease_expires_at  INTEGER,
    heartbeat_at      INTEGER,
    progress          TEXT
) STRICT;

-- The claim: WHERE tenant, queue, state='queued', run_at <= now
-- ORDER BY priority DESC, run_at, id. The index walks in claim order, so a
-- claim reads only the rows it takes (plus any not yet due).
CREATE INDEX tether_jobs_claim ON tether_jobs (tenant, queue, priority DESC, run_at, id)
    WHERE state = 'queued';
-- The reaper and running counts (the running set is bounded by worker
-- concurrency, so scanning it is cheap).
CREATE INDEX tether_jobs_running ON tether_jobs (tenant, queue) WHERE state = 'running';
-- Expiry of queued jobs.
CREATE INDEX tether_jobs_expiry ON tether_jobs (expires_at)
    WHERE state = 'queued' AND expires_at IS NOT NULL;
-- Pruning of finished jobs.
CREATE INDEX tether_jobs_finished ON tether_jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
-- Listing (newest first) and per-queue counts.
CREATE INDEX tether_jobs_list ON tether_jobs (tenant, queue, state, id);
CREATE INDEX tether_jobs_tenant_state ON tether_jobs (tenant, state, id);
-- Listing without a state filter (SQLite-only additions). Without them SQLite
-- sorts every job of the tenant or queue to return a page of 50; with them it
-- walks the index newest first and stops. They cost nothing on transitions:
-- SQLite rewrites an index entry only when one of its columns changes, and
-- tenant, queue and id never do.
CREATE INDEX tether_jobs_tenant_id ON tether_jobs (tenant, id);
CREATE INDEX tether_jobs_queue_id ON tether_jobs (tenant, queue, id);
-- Invariant 6: the database, not a read-then-write, refuses duplicates.
CREATE UNIQUE INDEX tether_jobs_idempotency ON tether_jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX tether_jobs_unique_active ON tether_jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');

-- History: one row per transition. No foreign key: pruning deletes both.
-- AUTOINCREMENT, like the PostgreSQL identity column, never hands out a seq
-- twice, even after the newest rows were pruned.
CREATE TABLE tether_job_events (
    seq        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    job_id     TEXT    NOT NULL,
    tenant     TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    event      TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    worker_id  TEXT,
    detail     TEXT
) STRICT;
CREATE INDEX tether_job_events_job ON tether_job_events (job_id, seq);

-- Queues exist implicitly; a row holds their settings and pause flag.
CREATE TABLE tether_queues (
    tenant               TEXT    NOT NULL,
    name                 TEXT    NOT NULL,
    paused               INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    max_attempts         INTEGER NOT NULL DEFAULT 5,
    backoff_base_ms      INTEGER NOT NULL DEFAULT 1000,
    backoff_cap_ms       INTEGER NOT NULL DEFAULT 3600000,
    default_lease_ttl_ms INTEGER NOT NULL DEFAULT 30000,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT, WITHOUT ROWID;

-- Named leases (the maintenance leader): same fencing as job leases.
CREATE TABLE tether_leases (
    name        TEXT    NOT NULL PRIMARY KEY,
    holder      TEXT    NOT NULL,
    token       TEXT    NOT NULL,
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
