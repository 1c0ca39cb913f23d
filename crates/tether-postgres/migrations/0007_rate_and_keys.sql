-- Flow control, second part: a rate limit, a limit per concurrency key and
-- fair claims. Every existing queue keeps claiming as before (all unset).
ALTER TABLE tether.queues
    ADD COLUMN rate_limit_count integer CHECK (rate_limit_count BETWEEN 1 AND 100000),
    ADD COLUMN rate_limit_period_ms bigint
        CHECK (rate_limit_period_ms BETWEEN 1000 AND 86400000),
    ADD COLUMN key_max_running integer CHECK (key_max_running BETWEEN 1 AND 100000),
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT queues_rate_limit_whole
        CHECK ((rate_limit_count IS NULL) = (rate_limit_period_ms IS NULL));

ALTER TABLE tether.jobs ADD COLUMN concurrency_key text;

-- The queued jobs of each key (jobs without a key as one more group), in
-- claim order: a key-limited or fair claim walks the keys that have queued
-- jobs and reads only the head of each, so a key with a large backlog is
-- passed over without being read. It costs every enqueue one more index
-- entry; claims and completions write none (the index holds queued jobs).
CREATE INDEX jobs_key_claim ON tether.jobs (tenant, queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'queued';

-- The rate limit's window: one row per claim statement of a rate-limited
-- queue, written in the claim's transaction (so it cannot drift from the
-- claims). Rows older than the longest period are deleted by the claims.
CREATE TABLE tether.queue_claims (
    tenant text NOT NULL,
    queue text NOT NULL,
    at timestamptz NOT NULL,
    jobs integer NOT NULL CHECK (jobs > 0)
);
CREATE INDEX queue_claims_window ON tether.queue_claims (tenant, queue, at);
