-- History by time, outcomes only: the per-minute throughput reads only a
-- queue's outcome events (succeeded, failed, retry_scheduled, cancelled),
-- yet the index on every event's time took an entry, and its share of the
-- write-ahead log, from every enqueue and claim as well. The partial index
-- serves the same read; enqueues and claims no longer write to it.
CREATE INDEX job_events_outcome_at ON tether.job_events (at)
    WHERE event IN ('succeeded', 'failed', 'retry_scheduled', 'cancelled');
DROP INDEX tether.job_events_at;
