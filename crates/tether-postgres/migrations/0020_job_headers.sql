-- Job headers: string pairs set at enqueue (W3C trace context, say),
-- carried unchanged and handed to the worker with each claim. NULL when a
-- job has none, so jobs without headers store nothing more, and the
-- column is added without rewriting the table.
ALTER TABLE tether.jobs ADD COLUMN headers jsonb;
