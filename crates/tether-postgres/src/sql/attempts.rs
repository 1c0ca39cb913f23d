//! Statements of `attempts.rs`: the claim and the reports that end or
//! extend an attempt, each fenced by the lease token.

/// The CTEs `claimed` (leases the jobs of `picked` at `$now`, with the TTL
/// of `config`) and `history` (their `claimed` events). The picked ids are
/// looked up by primary key as an array: joined as a row set, whose size
/// the planner cannot know when the limit is a parameter or a subquery,
/// they were hashed against a sequential scan of the whole jobs table.
macro_rules! lease_picked {
    ($now:literal) => {
        lease_picked!($now, "$5", "", "", "")
    };
    // `$worker` the claimant's expression, `$from` more FROM items and
    // `$matching` how their rows match the job, `$returning` more columns.
    ($now:literal, $worker:literal, $from:literal, $matching:literal, $returning:literal) => {
        concat!(
            "
    claimed AS (
        UPDATE tether.jobs j
        SET state = 'running', attempt = j.attempt + 1, lease_token = gen_random_uuid(),
            lease_ttl_ms = config.ttl,
            lease_expires_at = ",
            $now,
            " + config.ttl * interval '1 millisecond',
            heartbeat_at = ",
            $now,
            ", started_at = ",
            $now,
            ", updated_at = ",
            $now,
            ",
            worker_id = ",
            $worker,
            ", progress = NULL
        FROM config",
            $from,
            "
        WHERE j.id = ANY (ARRAY(SELECT id FROM picked))",
            $matching,
            "
        RETURNING ",
            job_columns!(),
            ", j.lease_token",
            $returning,
            "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'claimed', attempt, worker_id FROM claimed
    )"
        )
    };
}

/// The claim of up to `$3` jobs from a queue that is not paused and has no
/// flow control (`max_running`, `rate_limit`, `key_max_running`, `fair`).
/// `$1` tenant, `$2` queue, `$4` lease TTL ms (NULL: the queue's, else
/// `tether_core::lifecycle::DEFAULT_LEASE_TTL_MS`, from its macro), `$5` worker
/// id. Always answers at least one row: the claimed jobs (in no particular
/// order; sorting the wide rows here cost more than the client's sort by
/// priority, run_at and id), each with `limited` false, or one row with
/// NULL job columns whose `limited` says whether the queue has flow control,
/// which this statement does not apply: the store then takes a turn on the
/// queue row (`LOCK_QUEUE_LIMITS`, then `RESERVE` and
/// `CLAIM_RESERVED`, or `CLAIM_BY_KEY`).
pub const CLAIM: &str = concat!(
    "WITH config AS (
        SELECT COALESCE(q.paused, false) AS paused,
               (q.max_running IS NOT NULL OR q.rate_limit_count IS NOT NULL
                OR q.key_max_running IS NOT NULL OR COALESCE(q.fair, false)) AS limited,
               COALESCE($4::bigint, q.default_lease_ttl_ms, ",
    tether_core::default_lease_ttl_ms!(),
    ") AS ttl
        FROM (SELECT 1) one
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = $2
    ),
    picked AS (
        SELECT j.id FROM tether.jobs j
        WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued' AND j.run_at <= now()
          AND (j.expires_at IS NULL OR j.expires_at > now())
          AND NOT (SELECT paused OR limited FROM config)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ),",
    lease_picked!("now()"),
    "
    SELECT c.*, config.limited FROM config LEFT JOIN claimed c ON true"
);

/// Locks the row of queue `$2` of tenant `$1` (the turns of its limited
/// claims then come one at a time) and reads its flow-control settings; and
/// deletes the queue's lapsed slot reservations (see [`RESERVE`]), waiting
/// for any claim that is taking one, so that the next statement of the turn
/// counts what that claim made `running` instead.
pub(crate) const LOCK_QUEUE_LIMITS: &str = "WITH q AS (
        SELECT max_running, rate_limit_count, key_max_running, fair FROM tether.queues
        WHERE tenant = $1 AND name = $2 FOR UPDATE
    ),
    lapsed AS (
        DELETE FROM tether.claim_reservations r
        WHERE r.tenant = $1 AND r.queue = $2 AND r.expires_at < now() AND EXISTS (SELECT 1 FROM q)
    )
    SELECT * FROM q";

/// The CTEs `config` (the queue's settings), `rate_window` (what the rate
/// limit's window holds now: logged claims and reservations) and `room`
/// (how many of `$3` jobs the limits leave: `max_running` less the running
/// jobs and the reserved slots; the rate limit's count less the window).
/// Part of a turn on the queue row, as a statement of its own after
/// [`LOCK_QUEUE_LIMITS`]: its snapshot is taken after the lock, so it counts
/// every job the queue's previous turns made `running` or reserved, and
/// every claim they logged. Counted from the rows themselves: a job frees
/// its slot when it ends or the reaper takes it back.
macro_rules! flow_room {
    () => {
        concat!("config AS (
        SELECT COALESCE(q.paused, false) AS paused, q.max_running,
               q.rate_limit_count AS rate_count, q.rate_limit_period_ms AS rate_period,
               q.key_max_running, COALESCE(q.fair, false) AS fair,
               COALESCE($4::bigint, q.default_lease_ttl_ms, ", tether_core::default_lease_ttl_ms!(), ") AS ttl
        FROM (SELECT 1) one
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = $2
    ),
    rate_window AS (
        SELECT COALESCE(sum(w.jobs), 0) AS used, min(w.at) AS oldest,
               (array_agg(w.jobs ORDER BY w.at))[1] AS oldest_jobs
        FROM (SELECT at, jobs FROM tether.queue_claims WHERE tenant = $1 AND queue = $2
              UNION ALL
              SELECT at, jobs FROM tether.claim_reservations WHERE tenant = $1 AND queue = $2) w,
             config c
        WHERE c.rate_count IS NOT NULL
          AND w.at > statement_timestamp() - c.rate_period * interval '1 millisecond'
    ),
    room AS (
        SELECT CASE WHEN c.paused THEN 0 ELSE LEAST($3::bigint,
            CASE WHEN c.max_running IS NULL THEN $3::bigint
                 ELSE GREATEST(0, c.max_running
                     - (SELECT count(*) FROM tether.jobs r
                        WHERE r.tenant = $1 AND r.queue = $2 AND r.state = 'running')
                     - (SELECT COALESCE(sum(v.jobs), 0) FROM tether.claim_reservations v
                        WHERE v.tenant = $1 AND v.queue = $2)) END,
            CASE WHEN c.rate_count IS NULL THEN $3::bigint
                 ELSE GREATEST(0, c.rate_count - (SELECT used FROM rate_window)) END) END AS n
        FROM config c
    ),
    trimmed AS (
        DELETE FROM tether.queue_claims w
        WHERE w.tenant = $1 AND w.queue = $2 AND w.at <= statement_timestamp() - interval '1 day'
    )")
    };
}

/// How many ready jobs (up to `$3` + 1) the queue has, as the CTE `ready`.
/// In claim order, which only `jobs_claim` gives without a sort: with
/// statistics that think most jobs queued, the planner otherwise scans the
/// whole table for a queue that has none ready.
macro_rules! ready_count {
    () => {
        "ready AS (
        SELECT count(*) AS n FROM (SELECT 1 FROM tether.jobs j
            WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
              AND j.run_at <= statement_timestamp()
              AND (j.expires_at IS NULL OR j.expires_at > statement_timestamp())
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT $3 + 1) x
    )"
    };
}

/// Columns of a turn's answer: whether the limits held the claim back
/// (`throttled`: fewer than asked while ready jobs were left, `$taken`
/// being what it took) and, when the rate limit is used up, in how many ms
/// its window frees a slot (`window_opens_ms`) and for how many jobs
/// (`window_opens_jobs`). Over the CTEs `config cf`, `rate_window w`,
/// `ready`.
macro_rules! turn_outcome {
    ($taken:literal) => {
        concat!(
            "(NOT cf.paused AND ",
            $taken,
            " < $3 AND ready.n > ",
            $taken,
            ") AS throttled,
           CASE WHEN cf.rate_count IS NOT NULL AND w.used + ",
            $taken,
            " >= cf.rate_count
                THEN GREATEST(0, ceil(extract(epoch FROM COALESCE(w.oldest, statement_timestamp())
                    + cf.rate_period * interval '1 millisecond' - statement_timestamp()) * 1000))::bigint
           END AS window_opens_ms,
           (CASE WHEN w.oldest IS NULL THEN ",
            $taken,
            " ELSE w.oldest_jobs END)::bigint AS window_opens_jobs"
        )
    };
}

/// The turn of a claim of a queue with `max_running` and/or `rate_limit`
/// only (no per-key limit, not fair): it reserves the slots the limits
/// leave — as many as `$3`, and no more than the queue has ready jobs — in
/// `claim_reservations` and commits, so the queue row is held only for
/// this count; the claim itself then runs beside other claims
/// ([`CLAIM_RESERVED`]). A reservation counts as running jobs and as
/// claims in the rate window until its claim replaces it with both; one
/// whose claim never came lapses after 10 s (see [`LOCK_QUEUE_LIMITS`]).
/// Answers the reservation (`reservation` NULL when none) and the turn's
/// outcome (see [`turn_outcome!`]).
pub(crate) const RESERVE: &str = concat!(
    "WITH ",
    flow_room!(),
    ",
    ",
    ready_count!(),
    ",
    reserved AS (
        INSERT INTO tether.claim_reservations (id, tenant, queue, at, jobs, expires_at)
        SELECT gen_random_uuid(), $1, $2, statement_timestamp(), LEAST(r.n, ready.n),
               statement_timestamp() + interval '10 seconds'
        FROM room r, ready WHERE LEAST(r.n, ready.n) > 0
        RETURNING id, jobs
    )
    SELECT res.id AS reservation, ",
    turn_outcome!("LEAST(room.n, ready.n)"),
    "
    FROM config cf CROSS JOIN room CROSS JOIN rate_window w CROSS JOIN ready
    LEFT JOIN reserved res ON true"
);

/// Claims the jobs of reservation `$3` (see [`RESERVE`]) and deletes it, in
/// one statement: up to its number of ready jobs in claim order, as any
/// claim does. It stamps them (`started_at`, the `claimed` event) with the
/// reservation's time, when their slots were taken, and logs them in the
/// rate window under that time. A reservation that lapsed and was deleted
/// claims nothing. `$1` tenant, `$2` queue, `$4` TTL, `$5` worker.
pub(crate) const CLAIM_RESERVED: &str = concat!(
    "WITH r AS (
        DELETE FROM tether.claim_reservations WHERE id = $3 AND tenant = $1 AND queue = $2
        RETURNING at, jobs
    ),
    config AS (
        SELECT q.rate_limit_count AS rate_count,
               COALESCE($4::bigint, q.default_lease_ttl_ms, ",
    tether_core::default_lease_ttl_ms!(),
    ") AS ttl
        FROM (SELECT 1) one
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = $2
    ),
    picked AS (
        SELECT j.id FROM tether.jobs j
        WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
          AND j.run_at <= (SELECT at FROM r)
          AND (j.expires_at IS NULL OR j.expires_at > (SELECT at FROM r))
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT (SELECT COALESCE(sum(jobs), 0) FROM r)
        FOR UPDATE SKIP LOCKED
    ),",
    lease_picked!("(SELECT at FROM r)"),
    ",
    logged AS (
        INSERT INTO tether.queue_claims (tenant, queue, at, jobs)
        SELECT $1, $2, (SELECT at FROM r), count(*) FROM claimed
        WHERE (SELECT rate_count FROM config) IS NOT NULL
        HAVING count(*) > 0
    )
    SELECT * FROM claimed"
);

/// The claim of a queue with `key_max_running` or `fair` (and possibly the
/// other limits), in its turn on the queue row (see [`flow_room!`]): the
/// per-key counts need the choice of jobs itself made in the turn. It walks the keys that have
/// queued jobs (a loose scan of `jobs_key_claim`, one probe per key) and
/// reads the head of each: as many ready jobs as the key's room under
/// `key_max_running` allows (jobs without a key form one more group, not
/// limited by it) and, when `fair`, no more than an equal share ⌈n/k⌉ of
/// the claim over the k groups that have queued jobs (so a fair claim hands
/// out fewer than it could when some groups hold fewer than their share;
/// the next claim takes more). Then it takes `room.n` of those heads:
/// by priority, then — when `fair` — round-robin over the groups (the
/// i-th job of every group before the (i+1)-th, groups in the order of
/// their oldest ready job), then `run_at`. A key at its limit is passed
/// over without reading its backlog.
///
/// A claim that is not fair first looks at the queue's first 4 × `$3` ready
/// jobs in claim order: the ones of them its keys' limits allow are the
/// first such jobs of the whole queue, so when there are enough of them it
/// takes those and walks no keys (the common case: keys mixed in the
/// backlog). Only a window mostly held by full keys sends it over the keys.
/// A fair claim without a per-key limit does the same when the window holds
/// as many keys as it takes jobs: it takes the first job of each of the
/// first keys to appear, which is what the walk (capped at one job a key
/// when there are that many keys) would take.
///
/// It claims for a group of claimants at once (the claims of one queue that
/// waited for the same turn): `$5` their worker ids and `$8` how many jobs
/// each asked for, `$3` the sum. The jobs are dealt out in claim order, the
/// first claimant's share first; each row answers its claimant's `slot`
/// (1-based). `$1` tenant, `$2` queue, `$4` lease TTL ms.
///
/// The walk visits at most `$7` keys (`tether_core::flow::walk_len`),
/// starting after `$6` (the last key the queue's previous walk visited,
/// `''` for the first) and wrapping around; `walked_to` answers where it
/// stopped (NULL when the window held the claim and nothing was walked).
pub(crate) const CLAIM_BY_KEY: &str = concat!(
    "WITH RECURSIVE ",
    flow_room!(),
    ",
    ",
    ready_count!(),
    ",
    -- The walk: at most $7 keys with queued jobs, the first after $6 (where
    -- the queue's previous walk stopped) and on, wrapping around to the
    -- first key; never all of them when there are more.
    keys_after AS (
        SELECT (SELECT j.concurrency_key FROM tether.jobs j
                WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                  AND j.concurrency_key > $6
                ORDER BY j.concurrency_key LIMIT 1) AS key, 1 AS n
        UNION ALL
        SELECT (SELECT j.concurrency_key FROM tether.jobs j
                WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                  AND j.concurrency_key > k.key
                ORDER BY j.concurrency_key LIMIT 1), k.n + 1
        FROM keys_after k WHERE k.key IS NOT NULL AND k.n < $7
    ),
    keys_before AS (
        SELECT (SELECT j.concurrency_key FROM tether.jobs j
                WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                  AND j.concurrency_key IS NOT NULL AND j.concurrency_key <= $6
                ORDER BY j.concurrency_key LIMIT 1) AS key,
               (SELECT count(*) FROM keys_after WHERE key IS NOT NULL) + 1 AS n
        UNION ALL
        SELECT (SELECT j.concurrency_key FROM tether.jobs j
                WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                  AND j.concurrency_key > k.key AND j.concurrency_key <= $6
                ORDER BY j.concurrency_key LIMIT 1), k.n + 1
        FROM keys_before k WHERE k.key IS NOT NULL AND k.n < $7
    ),
    keys AS (
        SELECT key, n FROM keys_after WHERE key IS NOT NULL
        UNION ALL
        SELECT key, n FROM keys_before WHERE key IS NOT NULL AND n <= $7
    ),
    key_running AS (
        SELECT r.concurrency_key AS key, count(*) AS n FROM tether.jobs r
        WHERE r.tenant = $1 AND r.queue = $2 AND r.state = 'running'
          AND r.concurrency_key IS NOT NULL
          AND (SELECT key_max_running FROM config) IS NOT NULL
        GROUP BY r.concurrency_key
    ),
    key_room AS (
        -- The room a key with running jobs has left (a key without any has
        -- all of key_max_running; without the limit, the whole claim).
        SELECT kr.key, GREATEST(0, c.key_max_running - kr.n) AS n
        FROM key_running kr, config c
    ),
    head_window AS (
        -- The queue's first ready jobs in claim order, each with its rank
        -- in its key so far: when they hold enough jobs the limits allow,
        -- those are exactly the jobs a claim in order would take.
        SELECT w.*, row_number() OVER (PARTITION BY w.key ORDER BY w.priority DESC, w.run_at, w.id) AS nth
        FROM (SELECT j.id, j.priority, j.run_at, j.concurrency_key AS key FROM tether.jobs j
              WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                AND j.run_at <= statement_timestamp()
                AND (j.expires_at IS NULL OR j.expires_at > statement_timestamp())
              ORDER BY j.priority DESC, j.run_at, j.id
              LIMIT $3 * 4) w
    ),
    window_heads AS (
        -- Joined, not a subquery per row: a scan of key_room for each of
        -- the window's jobs took most of the claim.
        SELECT w.id, w.priority, w.run_at, w.key FROM head_window w
        LEFT JOIN key_room r ON r.key = w.key
        WHERE w.key IS NULL
           OR w.nth <= COALESCE(r.n, (SELECT COALESCE(key_max_running, $3::bigint) FROM config))
    ),
    by_window AS (
        -- The window holds the claim: no walk over the keys. Not fair: the
        -- jobs the limits allow. Fair without a per-key limit: the first
        -- job of each of the first n keys to appear (the keys with the
        -- oldest heads, one job each, as the walk would take them when it
        -- finds n keys or more).
        SELECT NOT c.fair AND (SELECT count(*) FROM window_heads) >= r.n AS plain,
               c.fair AND c.key_max_running IS NULL
                   AND (SELECT count(*) FROM head_window WHERE nth = 1) >= r.n AS fair
        FROM config c, room r
    ),
    share AS (
        -- Each group's most: the whole room, or an equal share when fair
        -- (counting the keys only when the walk over them is needed).
        SELECT CASE WHEN (SELECT plain OR fair FROM by_window) THEN r.n
                    WHEN c.fair
                    THEN ceil(r.n::numeric / GREATEST(1, (SELECT count(*) FROM keys)
                        + (EXISTS (SELECT 1 FROM tether.jobs j
                                   WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
                                     AND j.concurrency_key IS NULL))::int))::bigint
                    ELSE r.n END AS n
        FROM room r, config c
    ),
    heads AS (
        SELECT w.id, w.priority, w.run_at, w.key FROM head_window w
        WHERE w.nth = 1 AND (SELECT fair FROM by_window)
        UNION ALL
        SELECT h.* FROM keys k
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.run_at, j.concurrency_key AS key FROM tether.jobs j
            WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
              AND j.concurrency_key = k.key
              AND j.run_at <= statement_timestamp()
              AND (j.expires_at IS NULL OR j.expires_at > statement_timestamp())
            ORDER BY j.priority DESC, j.run_at, j.id
            LIMIT LEAST((SELECT n FROM share),
                        COALESCE((SELECT n FROM key_room r WHERE r.key = k.key),
                                 (SELECT COALESCE(key_max_running, $3::bigint) FROM config)))
        ) h
        WHERE NOT (SELECT plain OR fair FROM by_window)
        UNION ALL
        (SELECT j.id, j.priority, j.run_at, NULL FROM tether.jobs j
         WHERE j.tenant = $1 AND j.queue = $2 AND j.state = 'queued'
           AND j.concurrency_key IS NULL
           AND j.run_at <= statement_timestamp()
           AND (j.expires_at IS NULL OR j.expires_at > statement_timestamp())
           AND NOT (SELECT plain OR fair FROM by_window)
         ORDER BY j.priority DESC, j.run_at, j.id
         LIMIT (SELECT n FROM share))
    ),
    ranked AS (
        SELECT h.*,
               row_number() OVER (PARTITION BY h.key, h.priority ORDER BY h.run_at, h.id) AS nth,
               min(h.run_at) OVER (PARTITION BY h.key, h.priority) AS group_head
        FROM heads h
    ),
    picked AS (
        SELECT j.id, j.priority, j.run_at FROM tether.jobs j
        WHERE j.id = ANY (ARRAY(
            -- The window held a claim that is not fair: the jobs its keys
            -- allow, in claim order, with nothing to rank.
            (SELECT w.id FROM window_heads w
             WHERE (SELECT plain FROM by_window)
             ORDER BY w.priority DESC, w.run_at, w.id
             LIMIT (SELECT n FROM room))
            UNION ALL
            (SELECT r.id FROM ranked r, config c
             WHERE NOT (SELECT plain FROM by_window)
             ORDER BY r.priority DESC,
                      CASE WHEN c.fair THEN r.nth ELSE 0 END,
                      CASE WHEN c.fair THEN r.group_head END,
                      CASE WHEN c.fair THEN r.key END,
                      r.run_at, r.id
             LIMIT (SELECT n FROM room))))
          AND j.state = 'queued'
        FOR UPDATE SKIP LOCKED
    ),
    -- The claimants of the group ($5 workers, $8 how many jobs each
    -- asked for, in the order they came): the picked jobs in claim order,
    -- dealt out in that order, each claimant's share in a row.
    claimants AS (
        SELECT c.worker, c.slot, sum(c.n) OVER (ORDER BY c.slot) - c.n AS after,
               sum(c.n) OVER (ORDER BY c.slot) AS upto
        FROM UNNEST($5::text[], $8::bigint[]) WITH ORDINALITY AS c(worker, n, slot)
    ),
    assigned AS (
        SELECT p.id, c.worker, c.slot
        FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS k
              FROM picked) p
        JOIN claimants c ON p.k > c.after AND p.k <= c.upto
    ),",
    lease_picked!(
        "statement_timestamp()",
        "a.worker",
        ", assigned a",
        " AND a.id = j.id",
        ", a.slot"
    ),
    ",
    logged AS (
        INSERT INTO tether.queue_claims (tenant, queue, at, jobs)
        SELECT $1, $2, statement_timestamp(), count(*) FROM claimed
        WHERE (SELECT rate_count FROM config) IS NOT NULL
        HAVING count(*) > 0
    )
    SELECT c.*, false AS limited, ",
    turn_outcome!("(SELECT count(*) FROM claimed)"),
    ",
           CASE WHEN NOT (SELECT plain OR fair FROM by_window)
                THEN (SELECT key FROM keys ORDER BY n DESC LIMIT 1) END AS walked_to
    FROM config cf CROSS JOIN rate_window w CROSS JOIN ready LEFT JOIN claimed c ON true"
);

/// Extends the leases of a batch: `$1` tenant, `$2` ids, `$3` tokens, `$4`
/// TTLs, `$5` progress. Rows are found by primary key (`id = ANY` without
/// a state condition, so no partial index over the tenant's running jobs can
/// be chosen, whatever the statistics say) and locked in id order. `$lock`
/// is the locking clause: [`HEARTBEAT_MANY`] skips rows another statement
/// holds (typically the completion of the same job) and names them `busy`,
/// so a heartbeat never waits while holding other rows and cannot take part
/// in a deadlock with a completion batch, whatever order that one locks in;
/// [`HEARTBEAT_ONE`] waits, for one job at a time. A job named by several
/// refused items gets one `lease_lost` event per batch (DISTINCT), so a
/// stale token repeated in a batch cannot grow the job's history by the
/// batch size. A heartbeat that carries the token the job still holds,
/// while the job is no longer running, comes after the attempt's own
/// report ended it (a completion, failure or snooze that overtook the
/// heartbeat): it is refused like any other, but records nothing, since no
/// lease was lost.
macro_rules! heartbeat_many {
    ($lock:literal) => {
        concat!(
            "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::uuid[], $4::bigint[], $5::jsonb[])
            AS t(id, token, ttl, progress)
    ),
    locked AS (
        SELECT j.id FROM tether.jobs j
        WHERE j.id = ANY($2::uuid[]) AND j.tenant = $1
        ORDER BY j.id
        FOR UPDATE OF j ",
            $lock,
            "
    ),
    done AS (
        UPDATE tether.jobs j
        SET lease_expires_at = now() + COALESCE(i.ttl, j.lease_ttl_ms) * interval '1 millisecond',
            heartbeat_at = now(), updated_at = now(), progress = COALESCE(i.progress, j.progress)
        FROM input i
        WHERE j.id = i.id AND j.lease_token = i.token AND j.state = 'running'
          AND j.id IN (SELECT id FROM locked)
        RETURNING j.id, i.token, j.lease_expires_at, j.cancel_requested
    ),
    named AS (
        SELECT x.id, x.tenant, x.attempt, x.id IN (SELECT id FROM locked) AS locked,
               EXISTS (SELECT 1 FROM input i WHERE i.id = x.id AND i.token = x.lease_token) AS own
        FROM (SELECT DISTINCT id FROM UNNEST($2::uuid[]) AS u(id)) u JOIN tether.jobs x ON x.id = u.id
        WHERE x.tenant = $1
    ),
    refused AS (
        SELECT * FROM named n WHERE n.locked AND n.id NOT IN (SELECT id FROM done)
    ),
    lost AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT r.id, r.tenant, now(), 'lease_lost', r.attempt, 'heartbeat'
        FROM refused r
        WHERE NOT r.own
    )
    SELECT id, token, lease_expires_at, cancel_requested, false AS busy FROM done
    UNION ALL
    SELECT id, NULL::uuid, NULL::timestamptz, NULL::boolean, false FROM refused
    UNION ALL
    SELECT id, NULL::uuid, NULL::timestamptz, NULL::boolean, true FROM named WHERE NOT locked"
        )
    };
}

/// See [`heartbeat_many!`]: skips the rows another statement holds.
pub(crate) const HEARTBEAT_MANY: &str = heartbeat_many!("SKIP LOCKED");
/// See [`heartbeat_many!`]: waits for its rows; for one job at a time (the
/// `busy` ones of [`HEARTBEAT_MANY`]), so it never holds a row while it
/// waits for another.
pub(crate) const HEARTBEAT_ONE: &str = heartbeat_many!("");

/// Completes job `$1` of tenant `$2` if token `$3` still owns it: result
/// `$4`, and `$5` the report's digest (`tether_core::lifecycle::Report`),
/// recorded beside the token that stays on the job. Answers the job, or no
/// row when the fence matched nothing ([`SETTLE`] then answers the report).
pub(crate) const COMPLETE: &str = concat!(
    "WITH done AS (
        UPDATE tether.jobs j
        SET state = 'succeeded', result = $4, finished_at = now(), updated_at = now(),
            lease_expires_at = NULL, report_digest = $5
        WHERE j.id = $1 AND j.tenant = $2 AND j.lease_token = $3 AND j.state = 'running'
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'succeeded', attempt, worker_id FROM done
    )
    SELECT * FROM done"
);

/// Completes a batch: `$1` tenant, `$2` ids, `$3` lease tokens, `$4` results,
/// `$5` the items' report digests; answers the `(id, token, digest, queue,
/// started_at, finished_at)` of each job it completed (the digest it
/// recorded, which tells the item that completed the job when a batch names
/// it twice; the times for the metrics' run-time histogram). Only the fenced
/// update touches the rows, so a job pays one new row version and no
/// separate lock. The state is tested as `state || ''` so that no partial
/// index (whose predicate names the state) can be chosen, whatever the
/// statistics say (on a large table the plan is a nested loop from the
/// input over the primary key). The caller sends the items in id order,
/// which such a plan keeps; whatever order the locks come in, a heartbeat
/// skips rows it finds held instead of waiting (`HEARTBEAT_MANY`), so the
/// two cannot deadlock. Items it did not complete go to `SETTLE`.
pub const COMPLETE_MANY: &str = "WITH done AS (
        UPDATE tether.jobs j
        SET state = 'succeeded', result = i.result, finished_at = now(), updated_at = now(),
            lease_expires_at = NULL, report_digest = i.digest
        FROM UNNEST($2::uuid[], $3::uuid[], $4::jsonb[], $5::text[]) AS i(id, token, result, digest)
        WHERE j.id = i.id AND j.tenant = $1 AND j.lease_token = i.token
          AND j.state || '' = 'running'
        RETURNING j.id, i.token, j.report_digest, j.tenant, j.queue, j.attempt, j.worker_id,
                  j.started_at, j.updated_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id)
        SELECT id, tenant, updated_at, 'succeeded', attempt, worker_id FROM done
    )
    SELECT id, token, report_digest, queue, started_at, updated_at AS finished_at FROM done";

/// Reports that their fenced statement did not apply ([`COMPLETE`],
/// [`FAIL`], [`SNOOZE`], the items [`COMPLETE_MANY`] did not complete), in a
/// statement of their own after it: `$1` tenant, `$2` ids, `$3` tokens, `$4`
/// the operation (history's `lease_lost` detail). The rows are read under
/// lock, in id order, so a report racing its own retry (or another item of
/// its batch) reads the outcome that one committed, not a snapshot from
/// before it: every report is exact. Answers each job of the tenant as it
/// stands, with the token it carries and the digest of the report that
/// ended that token's attempt, for `tether_core::lifecycle::Report::answer`;
/// a job that no item names by the token that ended its last attempt (it
/// carries another token, or none, or still runs) records `lease_lost`
/// once, which is the answer its items get.
pub(crate) const SETTLE: &str = concat!(
    "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::uuid[]) AS t(id, token)
    ),
    locked AS (
        SELECT ",
    job_columns!(),
    ", j.lease_token, j.report_digest FROM tether.jobs j
        WHERE j.id = ANY($2::uuid[]) AND j.tenant = $1
        ORDER BY j.id
        FOR UPDATE OF j
    ),
    lost AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, detail)
        SELECT l.id, l.tenant, now(), 'lease_lost', l.attempt, $4
        FROM locked l
        WHERE l.state = 'running'
           OR NOT EXISTS (SELECT 1 FROM input i WHERE i.id = l.id AND i.token = l.lease_token)
    )
    SELECT * FROM locked"
);

/// Fail routing mirrors `lifecycle::fail_outcome`; the retry delay mirrors
/// `lifecycle::backoff_delay_ms` (`$5` retry_after_ms, `$6` fatal,
/// `$7` cancelled, `$8` jitter). `$9` is the report's digest. Answers the
/// job, or no row when the fence matched nothing (see [`SETTLE`]).
pub(crate) const FAIL: &str = concat!(
    "WITH cur AS (
        SELECT id,
               CASE WHEN $7 OR (cancel_requested AND NOT $6) THEN 'cancelled'
                    WHEN $6 OR attempt >= max_attempts THEN 'failed'
                    ELSE 'queued' END AS next_state,
               COALESCE($5::bigint,
                        floor(LEAST(backoff_base_ms * power(2::float8, attempt - 1), backoff_cap_ms)
                              * $8::float8)::bigint) AS delay_ms
        FROM tether.jobs
        WHERE id = $1 AND tenant = $2 AND lease_token = $3 AND state = 'running'
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = cur.next_state,
            run_at = CASE WHEN cur.next_state = 'queued'
                          THEN now() + cur.delay_ms * interval '1 millisecond' ELSE j.run_at END,
            finished_at = CASE WHEN cur.next_state = 'queued' THEN NULL ELSE now() END,
            last_error = $4, lease_expires_at = NULL, updated_at = now(), report_digest = $9
        FROM cur
        WHERE j.id = cur.id
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'queued' THEN 'retry_scheduled' ELSE state END,
               attempt, worker_id, $4
        FROM done
    )
    SELECT * FROM done"
);

/// "Not now": job `$1` of tenant `$2`, if token `$3` still owns it, is
/// queued again after `$4` ms with its attempt given back (or cancelled, if
/// that was requested); `$5` is the report's digest. Answers the job, or no
/// row when the fence matched nothing (see [`SETTLE`]).
pub(crate) const SNOOZE: &str = concat!(
    "WITH cur AS (
        SELECT id, CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END AS next_state
        FROM tether.jobs
        WHERE id = $1 AND tenant = $2 AND lease_token = $3 AND state = 'running'
        FOR UPDATE
    ),
    done AS (
        UPDATE tether.jobs j
        SET state = cur.next_state,
            attempt = CASE WHEN cur.next_state = 'queued' THEN j.attempt - 1 ELSE j.attempt END,
            run_at = CASE WHEN cur.next_state = 'queued'
                          THEN now() + $4 * interval '1 millisecond' ELSE j.run_at END,
            finished_at = CASE WHEN cur.next_state = 'queued' THEN NULL ELSE now() END,
            lease_expires_at = NULL, updated_at = now(), report_digest = $5
        FROM cur
        WHERE j.id = cur.id
        RETURNING ",
    job_columns!(),
    "
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt, worker_id, detail)
        SELECT id, tenant, updated_at,
               CASE state WHEN 'queued' THEN 'snoozed' ELSE 'cancelled' END,
               attempt, worker_id, 'delay ' || $4 || ' ms'
        FROM done
    )
    SELECT * FROM done"
);
