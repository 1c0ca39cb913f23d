//! The statements of `feed.rs`.

/// The snapshot the feed's head stands at.
pub(crate) const HEAD: &str = "SELECT pg_current_snapshot()::text";

/// Up to `$9` events that snapshot `$1` did not see and snapshot `$2` (or,
/// when NULL, this statement's own) does, after `seq` `$3`, passing the
/// filter (`$4` tenant, `$5` queue, `$6` job, `$7` workflow, `$8` event
/// names; each NULL for any), in `seq` order; with, in every row (one row
/// of NULL events when none is found), the batch's snapshot, whether
/// retention removed events of a transaction `$1` did not see (exactly, but
/// for the folded `floor`: migration 18), and the newest transaction it
/// removed events of.
///
/// The events `$1` did not see are those of transactions at or past its
/// `xmax` and those in its in-progress list: two lookups on `job_events_xid`,
/// so an old transaction left open costs a lookup of its own events, not a
/// scan of everything written since it began. `pg_current_snapshot()` is
/// the statement's own snapshot, the one its reads see.
pub(crate) const READ: &str = "
    WITH batch AS (
        SELECT COALESCE($2::text::pg_snapshot, pg_current_snapshot()) AS snap
    ),
    unseen AS (
        SELECT e.* FROM tether.job_events e
        WHERE e.xid >= pg_snapshot_xmax($1::text::pg_snapshot)
      UNION ALL
        SELECT e.* FROM tether.job_events e
        WHERE e.xid = ANY (ARRAY(SELECT pg_snapshot_xip($1::text::pg_snapshot)))
    ),
    found AS (
        SELECT e.seq, e.job_id, e.tenant, e.at, e.event, e.attempt, e.worker_id, e.detail,
               j.queue, j.kind, j.workflow_id, j.state, j.has_dependencies
        FROM unseen e
        CROSS JOIN batch b
        CROSS JOIN LATERAL (
            SELECT j.queue, j.kind, j.workflow_id, j.state,
                   cardinality(j.depends_on) > 0 AS has_dependencies
            FROM tether.jobs j WHERE j.id = e.job_id LIMIT 1
        ) j
        WHERE pg_visible_in_snapshot(e.xid, b.snap)
          AND e.seq > $3
          AND ($4::text IS NULL OR e.tenant = $4)
          AND ($5::text IS NULL OR j.queue = $5)
          AND ($6::uuid IS NULL OR e.job_id = $6)
          AND ($7::uuid IS NULL OR j.workflow_id = $7)
          AND ($8::text[] IS NULL OR e.event = ANY ($8))
        ORDER BY e.seq
        LIMIT $9
    )
    SELECT b.snap::text AS batch,
           COALESCE(
               (SELECT p.floor >= pg_snapshot_xmin($1::text::pg_snapshot) FROM tether.feed_pruned p)
               OR EXISTS (SELECT 1 FROM tether.feed_pruned_xids x
                          WHERE x.xid >= pg_snapshot_xmax($1::text::pg_snapshot))
               OR EXISTS (SELECT 1 FROM tether.feed_pruned_xids x
                          WHERE x.xid = ANY (ARRAY(SELECT pg_snapshot_xip($1::text::pg_snapshot)))),
               false) AS gap,
           GREATEST((SELECT p.floor FROM tether.feed_pruned p),
                    (SELECT max(x.xid) FROM tether.feed_pruned_xids x))::text AS pruned,
           f.*
    FROM batch b LEFT JOIN found f ON true
    ORDER BY f.seq";
