//! Statements of `enqueue.rs`.

use std::sync::OnceLock;

/// Rows per multi-row enqueue INSERT. A batch is cut into chunks of these
/// sizes, largest first (1 000 jobs: 31 × 32 + 1 × 8), all in the same
/// transaction, so it stays all-or-nothing. Each size is one prepared
/// statement, cached.
pub(crate) const INSERT_CHUNKS: [usize; 3] = [32, 8, 1];

/// Values bound per enqueued row (see `insert_jobs_sql`).
pub(crate) const ROW_PARAMS: usize = 19;

/// Values bound per row of a planned graph, after the [`ROW_PARAMS`]: the
/// state it enters, `waiting_on`, `has_dependents`, `dependency_failure`
/// and `depends_on` (see `insert_jobs_sql`).
pub(crate) const GRAPH_PARAMS: usize = 5;

/// Registers the queues of an enqueue batch (?2: JSON array of names).
pub(crate) const REGISTER_QUEUES: &str = concat!(
    "INSERT INTO tether_queues (tenant, name, paused, max_attempts, backoff_base_ms, ",
    "backoff_cap_ms, default_lease_ttl_ms, created_at, updated_at) ",
    "SELECT ?1, q.value, 0, ?3, ?4, ?5, ?6, ",
    now_ms!(),
    ", ",
    now_ms!(),
    " FROM json_each(?2) AS q WHERE true ON CONFLICT (tenant, name) DO NOTHING"
);

/// How many queue rows tenant ?1 has.
pub(crate) const COUNT_QUEUES: &str = "SELECT count(*) FROM tether_queues WHERE tenant = ?1";

/// The multi-row INSERT of `rows` enqueued jobs. Its parameters, in order:
/// the tenant, the default attempts/backoff (for a queue without a row),
/// [`ROW_PARAMS`] values per row bound by `bind_entry` (ordinal, id, queue,
/// kind, payload, priority, run_at, delay, max_attempts, backoff base, cap,
/// timeout, idempotency key, unique key, tags, expires_at, concurrency key,
/// workflow, headers), and the tenant
/// again. They are anonymous `?` on purpose: for numbered or named ones,
/// sqlx looks each name up with `sqlite3_bind_parameter_name`, a linear scan,
/// which makes binding 500 values quadratic.
///
/// With `graph` (a batch planned by `tether_core::GraphPlan`), each row
/// also binds [`GRAPH_PARAMS`] values, and is written in the state it
/// enters with its dependencies' counts.
///
/// Rows are inserted in batch order, so that of two entries with the same
/// key the first wins. Entries that hit the idempotency or active-unique
/// index are skipped by `ON CONFLICT DO NOTHING` and resolved afterwards.
/// Unset attempts/backoff come from the queue row. (`WHERE true` is SQLite's
/// required disambiguation of INSERT … SELECT … ON CONFLICT.) Values are
/// bound, not packed into JSON: a payload is stored exactly as serde_json
/// wrote it, without SQLite escaping and unescaping it.
pub(crate) fn insert_jobs_sql(rows: usize, graph: bool) -> &'static str {
    static SQL: [[OnceLock<String>; INSERT_CHUNKS.len()]; 2] =
        [const { [const { OnceLock::new() }; INSERT_CHUNKS.len()] }; 2];
    let slot = INSERT_CHUNKS
        .iter()
        .position(|&n| n == rows)
        .expect("enqueue chunks come from INSERT_CHUNKS");
    SQL[usize::from(graph)][slot].get_or_init(|| {
        let (columns, state, values, params) = if graph {
            (
                ", waiting_on, has_dependents, dependency_failure, depends_on",
                "v.column20",
                ", v.column21, v.column22, v.column23, v.column24",
                ROW_PARAMS + GRAPH_PARAMS,
            )
        } else {
            ("", "'queued'", "", ROW_PARAMS)
        };
        let mut sql = String::from(concat!(
            "INSERT INTO tether_jobs (id, tenant, queue, kind, payload, state, priority, ",
            "attempt, max_attempts, backoff_base_ms, backoff_cap_ms, run_at, created_at, ",
            "updated_at, idempotency_key, unique_key, tags, expires_at, timeout_ms, ",
            "cancel_requested, concurrency_key, workflow_id, headers"
        ));
        sql.push_str(columns);
        sql.push_str(") SELECT v.column2, ?, v.column3, v.column4, v.column5, ");
        sql.push_str(state);
        sql.push_str(concat!(
            ", v.column6, 0, ",
            "COALESCE(v.column9, q.max_attempts, ?), ",
            "COALESCE(v.column10, q.backoff_base_ms, ?), ",
            "COALESCE(v.column11, q.backoff_cap_ms, ?), ",
            "COALESCE(v.column7, ",
            now_ms!(),
            " + COALESCE(v.column8, 0)), ",
            now_ms!(),
            ", ",
            now_ms!(),
            ", v.column13, v.column14, v.column15, v.column16, v.column12, 0, v.column17, ",
            "v.column18, v.column19"
        ));
        sql.push_str(values);
        sql.push_str(" FROM (VALUES ");
        let row = format!("({})", vec!["?"; params].join(", "));
        sql.push_str(&vec![row; rows].join(", "));
        sql.push_str(concat!(
            ") AS v LEFT JOIN tether_queues AS q ON q.tenant = ? AND q.name = v.column3 ",
            "WHERE true ORDER BY v.column1 ON CONFLICT DO NOTHING RETURNING ",
            job_columns!()
        ));
        sql
    })
}

/// `enqueued` events of the jobs just created (?1: JSON array of ids).
pub(crate) const ENQUEUED_EVENTS: &str = events_of_ids!("created_at", "enqueued", "NULL", "NULL");

/// The candidates for each entry that was not inserted (?2: JSON array of
/// `{idx, ik, uk}`): the job holding its idempotency key (any state) and the
/// active job holding its unique key. Which one applies is decided in Rust
/// (see `enqueue`), because it depends on where the entry sits in the batch.
pub(crate) const DUPLICATE_CANDIDATES: &str = "SELECT e.value ->> 'idx' AS idx, \
     (SELECT k.id FROM tether_jobs AS k \
      WHERE k.tenant = ?1 AND k.idempotency_key = e.value ->> 'ik') AS ik_id, \
     (SELECT u.id FROM tether_jobs AS u WHERE u.tenant = ?1 AND u.unique_key = e.value ->> 'uk' \
      AND u.state IN ('waiting', 'queued', 'running')) AS uk_id \
     FROM json_each(?2) AS e";

/// Jobs by id (?1: JSON array of ids).
pub(crate) const SELECT_JOBS: &str = concat!(
    "SELECT ",
    job_columns!(),
    " FROM tether_jobs WHERE id IN (SELECT value FROM json_each(?1))"
);
