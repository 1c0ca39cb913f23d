-- Every index a job's row is in takes a new entry at each transition (a
-- state change cannot be a HOT update), so an index over all rows costs
-- every enqueue, claim and completion one more entry. The two that covered
-- every state (jobs_list, jobs_tenant_state) go; each state gets its own
-- partial index in id order instead, so a transition writes only to the
-- index of the state the job enters. Listings, counts and the empty-queue
-- check name the state they read (one branch per state), and a listing
-- across queues walks the tenant's queue rows, which every job's queue has.
DROP INDEX tether.jobs_list;
DROP INDEX tether.jobs_tenant_state;
DROP INDEX tether.jobs_running;

-- Listing queued jobs newest first (the claim keeps jobs_claim).
CREATE INDEX jobs_queued ON tether.jobs (tenant, queue, id) WHERE state = 'queued';
-- The reaper, running counts and listing.
CREATE INDEX jobs_running ON tether.jobs (tenant, queue, id) WHERE state = 'running';
-- Listing, counts and bulk replay of finished jobs (pruning keeps jobs_finished).
CREATE INDEX jobs_done ON tether.jobs (tenant, queue, state, id)
    WHERE state IN ('succeeded', 'failed', 'cancelled');

-- A listing across queues reads the queue rows; every queue that holds a
-- job has had one since enqueue registers queues, but make sure.
INSERT INTO tether.queues (tenant, name)
SELECT DISTINCT tenant, queue FROM tether.jobs
ON CONFLICT DO NOTHING;
