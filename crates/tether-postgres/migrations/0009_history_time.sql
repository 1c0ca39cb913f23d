-- History by time: a queue's per-minute throughput (GET
-- /v1/queues/{queue}/throughput) reads the last minutes of history. Rows
-- arrive in time order, so the index grows at its right edge only.
CREATE INDEX job_events_at ON tether.job_events (at);
