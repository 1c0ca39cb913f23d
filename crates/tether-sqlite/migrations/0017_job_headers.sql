-- Job headers: string pairs set at enqueue (W3C trace context, say),
-- carried unchanged and handed to the worker with each claim, as a JSON
-- object; NULL when a job has none.
ALTER TABLE tether_jobs ADD COLUMN headers TEXT;
