//! The statements of `feed.rs`.

/// The newest `seq` drawn (0 before the first event).
pub(crate) const HEAD: &str =
    "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tether_job_events'), 0)";

/// Up to ?7 events after `seq` ?1 passing the filter (?2 tenant, ?3 queue,
/// ?4 job, ?5 workflow, ?6 a JSON array of event names; each NULL for
/// any), in `seq` order; with the newest `seq` drawn and the newest one
/// retention removed, in every row (one row of NULL events when none is
/// found). One statement, so one read snapshot: every event up to that
/// newest `seq` is committed and in it.
pub(crate) const READ: &str = "SELECT \
     COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'tether_job_events'), 0) AS head, \
     (SELECT p.seq FROM tether_feed_pruned p) AS pruned, f.* \
     FROM (SELECT 1) LEFT JOIN ( \
         SELECT e.seq AS seq, e.job_id AS job_id, e.tenant AS tenant, e.at AS at, \
                e.event AS event, e.attempt AS attempt, e.worker_id AS worker_id, \
                e.detail AS detail, j.queue AS queue, j.kind AS kind, \
                j.workflow_id AS workflow_id, j.state AS state, \
                j.depends_on IS NOT NULL AS has_dependencies \
         FROM tether_job_events e CROSS JOIN tether_jobs j \
         WHERE j.id = e.job_id AND e.seq > ?1 \
           AND (?2 IS NULL OR e.tenant = ?2) AND (?3 IS NULL OR j.queue = ?3) \
           AND (?4 IS NULL OR e.job_id = ?4) AND (?5 IS NULL OR j.workflow_id = ?5) \
           AND (?6 IS NULL OR e.event IN (SELECT value FROM json_each(?6))) \
         ORDER BY e.seq LIMIT ?7 \
     ) AS f ON true ORDER BY f.seq";
