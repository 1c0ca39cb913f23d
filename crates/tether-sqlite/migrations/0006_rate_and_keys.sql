-- Flow control, second part: a rate limit, a limit per concurrency key and
-- fair claims (mirrors PostgreSQL's migration 7). Every existing queue keeps
-- claiming as before (all unset).
ALTER TABLE tether_queues
    ADD COLUMN rate_limit_count INTEGER CHECK (rate_limit_count BETWEEN 1 AND 100000);
ALTER TABLE tether_queues
    ADD COLUMN rate_limit_period_ms INTEGER
        CHECK (rate_limit_period_ms BETWEEN 1000 AND 86400000);
ALTER TABLE tether_queues
    ADD COLUMN key_max_running INTEGER CHECK (key_max_running BETWEEN 1 AND 100000);
ALTER TABLE tether_queues
    ADD COLUMN fair INTEGER NOT NULL DEFAULT 0 CHECK (fair IN (0, 1));

ALTER TABLE tether_jobs ADD COLUMN concurrency_key TEXT;

-- The queued jobs of each key (jobs without a key as one more group), in
-- claim order: a key-limited or fair claim walks the keys that have queued
-- jobs and reads only the head of each.
CREATE INDEX tether_jobs_key_claim
    ON tether_jobs (tenant, queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'queued';

-- The rate limit's window: one row per claim of a rate-limited queue,
-- written in the claim's transaction. Rows older than the longest period
-- are deleted by the claims.
CREATE TABLE tether_queue_claims (
    tenant TEXT    NOT NULL,
    queue  TEXT    NOT NULL,
    at     INTEGER NOT NULL,
    jobs   INTEGER NOT NULL CHECK (jobs > 0)
) STRICT;
CREATE INDEX tether_queue_claims_window ON tether_queue_claims (tenant, queue, at);
