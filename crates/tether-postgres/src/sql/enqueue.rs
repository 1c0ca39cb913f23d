//! Statements of `enqueue.rs`.

/// The insert of a batch, with `$on_conflict` after the jobs' `INSERT`
/// (see [`INSERT_JOBS`] and [`INSERT_KEYED_JOBS`]).
macro_rules! insert_jobs {
    ($on_conflict:literal) => {
        insert_jobs!($on_conflict, "", "", "", "'queued'", "", "", "")
    };
    (graph) => {
        insert_jobs!(
            "",
            ", $21::int[], $22::bool[], $23::text[]",
            ", waiting_on, has_dependents, dependency_failure",
            ",
            waiting_on, has_dependents, dependency_failure, depends_on",
            "CASE WHEN i.waiting_on > 0 THEN 'waiting' ELSE 'queued' END",
            ",
            i.waiting_on, i.has_dependents, i.dependency_failure, l.ids",
            "
        LEFT JOIN lists l ON l.job_id = i.id",
            "
    edges AS (
        SELECT * FROM UNNEST($24::uuid[], $25::uuid[], $26::bool[]) WITH ORDINALITY
            AS e(job_id, depends_on, met, ord)
    ),
    lists AS (
        SELECT job_id, array_agg(depends_on ORDER BY ord) AS ids FROM edges GROUP BY job_id
    ),
    added AS (
        INSERT INTO tether.job_dependencies (depends_on, job_id, met)
        SELECT e.depends_on, e.job_id, e.met FROM edges e CROSS JOIN lk
    ),"
        )
    };
    ($on_conflict:literal, $graph_arrays:literal, $graph_names:literal, $graph_columns:literal,
     $state:literal, $graph_values:literal, $graph_join:literal, $graph_ctes:literal) => {
        concat!(
    "WITH input AS (
        SELECT * FROM UNNEST($2::uuid[], $3::text[], $4::text[], $5::jsonb[], $6::smallint[],
                             $7::timestamptz[], $8::bigint[], $9::int[], $10::bigint[], $11::bigint[],
                             $12::bigint[], $13::text[], $14::text[], $15::jsonb[], $16::timestamptz[],
                             $18::text[], $19::uuid[], $20::jsonb[]",
    $graph_arrays,
    ")
            WITH ORDINALITY
            AS t(id, queue, kind, payload, priority, run_at, delay_ms, max_attempts,
                 backoff_base_ms, backoff_cap_ms, timeout_ms, idempotency_key, unique_key,
                 tags, expires_at, concurrency_key, workflow_id, headers",
    $graph_names,
    ", ord)
    ),
    missing AS (
        SELECT DISTINCT i.queue FROM input i
        WHERE NOT EXISTS (SELECT 1 FROM tether.queues q WHERE q.tenant = $1 AND q.name = i.queue)
    ),
    lk AS (
        SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock_shared($17, hashtext($1))) l
        WHERE NOT EXISTS (SELECT 1 FROM missing)
    ),
    registered AS (
        INSERT INTO tether.queues (tenant, name)
        SELECT $1, q.name FROM tether.queues q CROSS JOIN lk
        WHERE q.tenant = $1 AND q.name IN (SELECT queue FROM input)
        ON CONFLICT DO NOTHING
    ),",
    $graph_ctes,
    "
    inserted AS (
        INSERT INTO tether.jobs AS j (id, tenant, queue, kind, payload, state, priority, attempt,
            max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, updated_at,
            unique_key, idempotency_key, tags, expires_at, timeout_ms, concurrency_key,
            workflow_id, headers",
    $graph_columns,
    ")
        SELECT i.id, $1, i.queue, i.kind, i.payload, ",
    $state,
    ", i.priority, 0,
            COALESCE(i.max_attempts, q.max_attempts, ",
    tether_core::default_max_attempts!(),
    "),
            COALESCE(i.backoff_base_ms, q.backoff_base_ms, ",
    tether_core::default_backoff_base_ms!(),
    "),
            COALESCE(i.backoff_cap_ms, q.backoff_cap_ms, ",
    tether_core::default_backoff_cap_ms!(),
    "),
            COALESCE(i.run_at, now() + i.delay_ms * interval '1 millisecond'),
            now(), now(), i.unique_key, i.idempotency_key,
            ARRAY(SELECT jsonb_array_elements_text(i.tags)), i.expires_at, i.timeout_ms,
            i.concurrency_key, i.workflow_id, i.headers",
    $graph_values,
    "
        FROM input i
        CROSS JOIN lk
        LEFT JOIN tether.queues q ON q.tenant = $1 AND q.name = i.queue",
    $graph_join,
    "
        ORDER BY i.ord
        ",
    $on_conflict,
    "
        -- Only what the database decided: the rest of the job is the input,
        -- and sending the payload back would cost a JSON parse per job.
        RETURNING j.id, j.tenant, j.max_attempts, j.backoff_base_ms, j.backoff_cap_ms, j.run_at,
                  j.created_at, j.expires_at
    ),
    history AS (
        INSERT INTO tether.job_events (job_id, tenant, at, event, attempt)
        SELECT id, tenant, created_at, 'enqueued', 0 FROM inserted
    )
    SELECT id, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, expires_at,
           NULL::text AS missing_queue
    FROM inserted
    UNION ALL
    SELECT NULL::uuid, NULL::int, NULL::bigint, NULL::bigint, NULL::timestamptz,
           NULL::timestamptz, NULL::timestamptz, queue
    FROM missing"
        )
    };
}

/// Inserts a batch whose queues all have rows; otherwise inserts nothing
/// and answers the missing queues (rows with only `missing_queue` set).
/// `$17` is `QUEUE_ROWS_LOCK`; `$18` the concurrency keys; `$19` the
/// workflows the jobs join; `$20` their headers (NULL for none). The lock is taken before any row is
/// written: both writes join `lk`. Unset attempts/backoff come from the
/// queue row, else the defaults of `tether_core::lifecycle` (from its `default_*!` macros).
/// For a batch with no idempotency or unique key: nothing can conflict
/// (the ids are new), and an `ON CONFLICT` clause would make every row a
/// speculative insert, with a confirmation record of 48 bytes of WAL each
/// (`tether-bench --wal`).
pub(crate) const INSERT_JOBS: &str = insert_jobs!("");

/// [`INSERT_JOBS`] for a batch with idempotency or unique keys: a job
/// whose key is taken is not inserted (`DUPLICATE_CANDIDATES` then finds
/// what holds it).
pub(crate) const INSERT_KEYED_JOBS: &str = insert_jobs!("ON CONFLICT DO NOTHING");

/// [`INSERT_JOBS`] for a batch planned by `tether_core::GraphPlan`: each
/// job is written once in the state it enters, with `$21` how many of its
/// edges are unmet (`waiting` when any), `$22` whether a later entry waits
/// for it, `$23` its `dependency_failure`; and its edges, `$24` the job,
/// `$25` what it waits for, `$26` whether that is met already, one per edge
/// in the order named (its `depends_on`).
pub(crate) const INSERT_GRAPH: &str = insert_jobs!(graph);

/// How many queue rows tenant `$1` has, and how many of the names `$2` have
/// none.
pub(crate) const COUNT_QUEUES: &str = "SELECT
        (SELECT count(*) FROM tether.queues WHERE tenant = $1) AS existing,
        (SELECT count(*) FROM UNNEST($2::text[]) AS n(name)
         WHERE NOT EXISTS (SELECT 1 FROM tether.queues q WHERE q.tenant = $1 AND q.name = n.name))
            AS missing";

/// Creates the rows of queues `$2` of tenant `$1` (default settings).
pub(crate) const REGISTER_QUEUES: &str = "INSERT INTO tether.queues (tenant, name)
    SELECT $1, name FROM UNNEST($2::text[]) AS n(name)
    ON CONFLICT DO NOTHING";

pub(crate) const DUPLICATE_CANDIDATES: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether.jobs j
      WHERE j.tenant = $1
        AND (j.idempotency_key = ANY($2)
             OR (j.unique_key = ANY($3) AND j.state IN ('waiting', 'queued', 'running')))"
);
