-- Schedules (invariant 11) on SQLite: a cron timetable per tenant and the
-- record of its runs. Like every tether table the rows are filed under the
-- tenant's name, and every statement on them filters by it (invariant 13).
--
-- Storage types as in 0001: instants are INTEGER milliseconds since the Unix
-- epoch (SQLite's clock for "now"), UUIDs lowercase hyphenated TEXT, JSON TEXT
-- ('null' for a null payload).

CREATE TABLE tether_schedules (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    cron        TEXT    NOT NULL,
    timezone    TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    enabled     INTEGER NOT NULL CHECK (enabled IN (0, 1)),
    overlap     TEXT    NOT NULL CHECK (overlap IN ('allow', 'skip')),
    -- The compare-and-set of a fire matches on it; NULL while disabled.
    next_run_at INTEGER,
    last_run_at INTEGER,
    last_job_id TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    -- A taken name is refused by the database, not by a read-then-write;
    -- it also serves the listing by name.
    UNIQUE (tenant, name)
) STRICT;

-- The scheduler's scan (all tenants): enabled schedules by next_run_at, ties
-- (common: many schedules fire on the hour) by id, so that a pass walks the
-- index in order and stops at its batch without sorting every due row.
-- Queries must spell the predicate the same way (`enabled = 1`) for SQLite
-- to use this partial index.
CREATE INDEX tether_schedules_due ON tether_schedules (next_run_at, id)
    WHERE enabled = 1 AND next_run_at IS NOT NULL;

-- One row per run of a schedule. The id only orders runs with the same
-- fire_at; a new row's id is above every id in the table, so no AUTOINCREMENT.
CREATE TABLE tether_schedule_runs (
    id          INTEGER NOT NULL PRIMARY KEY,
    schedule_id TEXT    NOT NULL REFERENCES tether_schedules (id) ON DELETE CASCADE,
    tenant      TEXT    NOT NULL,
    fire_at     INTEGER NOT NULL,
    job_id      TEXT,
    outcome     TEXT    NOT NULL CHECK (outcome IN ('enqueued', 'skipped')),
    recorded_at INTEGER NOT NULL
) STRICT;
-- A schedule's runs, newest first (also the index the cascade deletes by).
CREATE INDEX tether_schedule_runs_schedule
    ON tether_schedule_runs (schedule_id, fire_at DESC, id DESC);
-- Pruning of old runs.
CREATE INDEX tether_schedule_runs_recorded ON tether_schedule_runs (recorded_at);
