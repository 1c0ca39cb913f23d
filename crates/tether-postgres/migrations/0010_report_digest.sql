-- Every report is exact (invariant 20): the transition that ends an attempt
-- (complete, fail, snooze) records a digest of the report beside the lease
-- token that stays on the job, so a report sent again with that token is
-- told apart: the same report is a repeat, a different one a conflict. See
-- tether_core::lifecycle::Report::digest. NULL on jobs that ended before
-- this migration (a repeat is then judged by the state alone) and on jobs
-- no report ended. A nullable column without a default: adding it rewrites
-- nothing.
ALTER TABLE tether.jobs ADD COLUMN report_digest text;
