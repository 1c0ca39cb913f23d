-- Jobs that wait for other jobs, mirroring
-- crates/tether-postgres/migrations/0013_dependencies.sql (docs/DESIGN.md,
-- invariant 16).
--
-- A job with unfinished dependencies is `waiting`. Its edges live in
-- tether_job_dependencies; `waiting_on` counts the ones not yet met.
-- `has_dependents` marks a job that something waits for: the trigger below
-- fires only for those, so the transitions of every other job pay nothing
-- but its WHEN test. `depends_on` is the JSON array of the job's
-- dependencies in the order given (NULL: none).
--
-- SQLite cannot change a CHECK constraint in place, and `state` must now
-- allow 'waiting': the table is rebuilt as https://sqlite.org/lang_altertable.html
-- ("Making Other Kinds Of Table Schema Changes") describes: create the new
-- table, copy the rows, drop the old one, rename the new one, and create
-- again every index of the old table (migrations 1 and 6). No trigger, view
-- or foreign key refers to tether_jobs, so there is nothing else to redo.
-- The migration runs in one transaction: a failure leaves the old table.

CREATE TABLE tether_jobs_new (
    id                 TEXT    NOT NULL PRIMARY KEY,
    tenant             TEXT    NOT NULL,
    queue              TEXT    NOT NULL,
    kind               TEXT    NOT NULL,
    payload            TEXT    NOT NULL,
    result             TEXT,
    state              TEXT    NOT NULL CHECK (state IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled')),
    priority           INTEGER NOT NULL DEFAULT 0 CHECK (priority BETWEEN -100 AND 100),
    attempt            INTEGER NOT NULL DEFAULT 0,
    max_attempts       INTEGER NOT NULL,
    backoff_base_ms    INTEGER NOT NULL,
    backoff_cap_ms     INTEGER NOT NULL,
    run_at             INTEGER NOT NULL,
    created_at         INTEGER NOT NULL,
    started_at         INTEGER,
    finished_at        INTEGER,
    updated_at         INTEGER NOT NULL,
    last_error         TEXT,
    unique_key         TEXT,
    idempotency_key    TEXT,
    tags               TEXT    NOT NULL DEFAULT '[]',
    expires_at         INTEGER,
    timeout_ms         INTEGER,
    cancel_requested   INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    worker_id          TEXT,
    lease_token        TEXT,
    lease_ttl_ms       INTEGER,
    lease_expires_at   INTEGER,
    heartbeat_at       INTEGER,
    progress           TEXT,
    concurrency_key    TEXT,
    report_digest      TEXT,
    depends_on         TEXT,
    dependency_failure TEXT    NOT NULL DEFAULT 'cancel'
        CHECK (dependency_failure IN ('cancel', 'run')),
    waiting_on         INTEGER NOT NULL DEFAULT 0,
    has_dependents     INTEGER NOT NULL DEFAULT 0 CHECK (has_dependents IN (0, 1))
) STRICT;

INSERT INTO tether_jobs_new (
    id, tenant, queue, kind, payload, result, state, priority, attempt, max_attempts,
    backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at, finished_at, updated_at,
    last_error, unique_key, idempotency_key, tags, expires_at, timeout_ms, cancel_requested,
    worker_id, lease_token, lease_ttl_ms, lease_expires_at, heartbeat_at, progress,
    concurrency_key, report_digest)
SELECT
    id, tenant, queue, kind, payload, result, state, priority, attempt, max_attempts,
    backoff_base_ms, backoff_cap_ms, run_at, created_at, started_at, finished_at, updated_at,
    last_error, unique_key, idempotency_key, tags, expires_at, timeout_ms, cancel_requested,
    worker_id, lease_token, lease_ttl_ms, lease_expires_at, heartbeat_at, progress,
    concurrency_key, report_digest
FROM tether_jobs;

DROP TABLE tether_jobs;
ALTER TABLE tether_jobs_new RENAME TO tether_jobs;

-- The indexes of migration 1, as they were (see there for each one's use).
CREATE INDEX tether_jobs_claim ON tether_jobs (tenant, queue, priority DESC, run_at, id)
    WHERE state = 'queued';
CREATE INDEX tether_jobs_running ON tether_jobs (tenant, queue) WHERE state = 'running';
CREATE INDEX tether_jobs_expiry ON tether_jobs (expires_at)
    WHERE state = 'queued' AND expires_at IS NOT NULL;
CREATE INDEX tether_jobs_finished ON tether_jobs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX tether_jobs_list ON tether_jobs (tenant, queue, state, id);
CREATE INDEX tether_jobs_tenant_state ON tether_jobs (tenant, state, id);
CREATE INDEX tether_jobs_tenant_id ON tether_jobs (tenant, id);
CREATE INDEX tether_jobs_queue_id ON tether_jobs (tenant, queue, id);
CREATE UNIQUE INDEX tether_jobs_idempotency ON tether_jobs (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX tether_jobs_unique_active ON tether_jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'running');
-- The index of migration 6.
CREATE INDEX tether_jobs_key_claim
    ON tether_jobs (tenant, queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'queued';
-- Listing and counting waiting jobs, as PostgreSQL has one partial index
-- per state.
CREATE INDEX tether_jobs_waiting ON tether_jobs (tenant, queue, id) WHERE state = 'waiting';

-- One row per edge: `job_id` waits for `depends_on`. No foreign key:
-- pruning deletes a job's edges with it. `met` says the dependency's end
-- was counted for the job's current wait (1; 0 not yet); 3 marks the
-- edges being counted, only inside one run of
-- `tether_jobs_dependency_ended`. Entering `waiting` (enqueue, replay)
-- sets every edge of the job afresh.
CREATE TABLE tether_job_dependencies (
    depends_on TEXT    NOT NULL,
    job_id     TEXT    NOT NULL,
    met        INTEGER NOT NULL DEFAULT 0 CHECK (met IN (0, 1, 3)),
    PRIMARY KEY (depends_on, job_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX tether_job_dependencies_job ON tether_job_dependencies (job_id);

-- The wake-up hints of released jobs, one row per job queued by the
-- trigger below. PostgreSQL's trigger sends them with pg_notify; SQLite's
-- hints are in-process (`SqliteStore::notify`), so the write that ended a
-- job with dependents drains this table in its transaction and sends them
-- after the commit (see `workflows.rs`). Empty between transactions.
CREATE TABLE tether_job_releases (
    tenant TEXT NOT NULL,
    queue  TEXT NOT NULL
) STRICT;

-- Scratch tables of the cascade, empty between statements.
-- The dependency whose failure or cancellation is being cascaded (one row
-- at a time): what `tether_jobs_doomed` starts from, as SQLite has no
-- parameters for views.
CREATE TABLE tether_job_cascade_seed (
    id    TEXT NOT NULL PRIMARY KEY,
    state TEXT NOT NULL
) STRICT, WITHOUT ROWID;
-- The waiting jobs being cancelled for a dependency, each once, with the
-- dependency it is cancelled for (and that one's state) for its event's
-- detail; `root` is the job whose end cancels them ('' for jobs that
-- `workflows::settle` cancels as they enter `waiting`).
CREATE TABLE tether_job_cascade (
    id               TEXT NOT NULL PRIMARY KEY,
    root             TEXT NOT NULL,
    dependency       TEXT NOT NULL,
    dependency_state TEXT NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX tether_job_cascade_root ON tether_job_cascade (root);

-- Every waiting job with `cancel` that the failure or cancellation of the
-- seed dooms, directly or through others such jobs, with the job through
-- which it comes (the seed itself, with its state, for the first level;
-- a doomed job, 'cancelled', below). Jobs already being cancelled are left
-- out. A view, because a trigger may not hold a WITH clause itself, but
-- may read a view that does: so the trigger cancels the whole cascade in
-- one statement instead of firing itself once per level (SQLite stops
-- triggers nested 1 000 deep, which a chain of jobs could reach).
CREATE VIEW tether_jobs_doomed AS
WITH RECURSIVE doomed (id, dependency, dependency_state) AS (
    SELECT d.job_id, s.id, s.state
    FROM tether_job_cascade_seed s
    JOIN tether_job_dependencies d ON d.depends_on = s.id
    JOIN tether_jobs w ON w.id = d.job_id
    WHERE d.met = 0 AND w.state = 'waiting' AND w.dependency_failure = 'cancel'
      AND w.id NOT IN (SELECT c.id FROM tether_job_cascade c)
  UNION
    SELECT d.job_id, x.id, 'cancelled'
    FROM doomed x
    JOIN tether_job_dependencies d ON d.depends_on = x.id
    JOIN tether_jobs w ON w.id = d.job_id
    WHERE d.met = 0 AND w.state = 'waiting' AND w.dependency_failure = 'cancel'
      AND w.id NOT IN (SELECT c.id FROM tether_job_cascade c)
)
SELECT id, dependency, dependency_state FROM doomed;

-- A dependency's final transition, by whatever statement (complete, batch
-- complete, fail, snooze of a job asked to cancel, reaper, expiry, cancel,
-- a dependent cancelled by this trigger or by `workflows::settle`): the
-- jobs waiting for it move in the same transaction.
--
-- A failure or cancellation cancels the jobs that wait for it with
-- `cancel` and all that wait with `cancel` downstream of them, in one
-- UPDATE (`tether_jobs_doomed`); each gets its `cancelled` event from
-- `tether_jobs_dependency_cancelled` as its row changes, so a job reached
-- by two paths still gets exactly one. Those cancellations fire this
-- trigger again (every connection sets PRAGMA recursive_triggers = ON), one
-- level down only: what waits for them with `cancel` is being cancelled
-- already, so they find nothing more to cancel and only count the end for
-- their `run` dependents.
--
-- Then each waiting job that counts this end (a success, or any end with
-- `run`) has one dependency fewer to wait for, and is queued (`released`)
-- when it was the last. Its edge is marked 3 first, so that exactly the
-- jobs counted now are moved.
CREATE TRIGGER tether_jobs_dependency_ended
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN NEW.has_dependents = 1 AND OLD.state <> NEW.state
     AND NEW.state IN ('succeeded', 'failed', 'cancelled')
BEGIN
    INSERT INTO tether_job_cascade_seed (id, state)
    SELECT NEW.id, NEW.state WHERE NEW.state <> 'succeeded';

    INSERT INTO tether_job_cascade (id, root, dependency, dependency_state)
    SELECT id, NEW.id, dependency, dependency_state FROM tether_jobs_doomed
    WHERE true ON CONFLICT (id) DO NOTHING;

    DELETE FROM tether_job_cascade_seed WHERE id = NEW.id;

    UPDATE tether_jobs
    SET state = 'cancelled', waiting_on = 0,
        finished_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER),
        updated_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)
    WHERE state = 'waiting'
      AND id IN (SELECT c.id FROM tether_job_cascade c WHERE c.root = NEW.id);

    DELETE FROM tether_job_cascade WHERE root = NEW.id;

    UPDATE tether_job_dependencies SET met = 3
    WHERE depends_on = NEW.id AND met = 0
      AND EXISTS (SELECT 1 FROM tether_jobs w WHERE w.id = tether_job_dependencies.job_id
                  AND w.state = 'waiting'
                  AND (NEW.state = 'succeeded' OR w.dependency_failure = 'run'));

    UPDATE tether_jobs
    SET waiting_on = waiting_on - 1,
        state = CASE WHEN waiting_on <= 1 THEN 'queued' ELSE 'waiting' END,
        updated_at = CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)
    WHERE state = 'waiting'
      AND id IN (SELECT job_id FROM tether_job_dependencies
                 WHERE depends_on = NEW.id AND met = 3);

    INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail)
    SELECT w.id, w.tenant, w.updated_at, 'released', w.attempt, NULL, NULL
    FROM tether_job_dependencies d JOIN tether_jobs w ON w.id = d.job_id
    WHERE d.depends_on = NEW.id AND d.met = 3 AND w.state = 'queued';

    INSERT INTO tether_job_releases (tenant, queue)
    SELECT w.tenant, w.queue
    FROM tether_job_dependencies d JOIN tether_jobs w ON w.id = d.job_id
    WHERE d.depends_on = NEW.id AND d.met = 3 AND w.state = 'queued';

    UPDATE tether_job_dependencies SET met = 1 WHERE depends_on = NEW.id AND met = 3;
END;

-- The `cancelled` event of a waiting job cancelled for a dependency (by the
-- trigger above, or by `workflows::settle` as it enters `waiting` after a
-- dependency failed): detail names the dependency and its state, as
-- {"dependency":"<id>","state":"failed"}; read from tether_job_cascade,
-- written as the job's row changes. A waiting job cancelled by an operator
-- is not there: its event is the operator's.
CREATE TRIGGER tether_jobs_dependency_cancelled
AFTER UPDATE OF state ON tether_jobs
FOR EACH ROW
WHEN OLD.state = 'waiting' AND NEW.state = 'cancelled'
BEGIN
    INSERT INTO tether_job_events (job_id, tenant, at, event, attempt, worker_id, detail)
    SELECT NEW.id, NEW.tenant, NEW.updated_at, 'cancelled', NEW.attempt, NULL,
           json_object('dependency', c.dependency, 'state', c.dependency_state)
    FROM tether_job_cascade c
    WHERE c.id = NEW.id;
END;
