// Enqueueing inside the caller's own PostgreSQL transaction: the server's
// SQL functions `tether.enqueue` and `tether.enqueue_many` (docs/API.md,
// "Enqueueing from your own PostgreSQL transaction") called on the caller's
// node-postgres client, so the job exists if and only if that transaction
// commits. No dependency on `pg`: the client is typed by the one method used.

import { InvalidArgument } from "./errors.js";
import type { EnqueueRequest } from "./types.js";
import type { Task, TaskEnqueueOptions, TaskPayload } from "./task.js";
import { activeTraceHeaders, withTraceHeaders, type TracingApi } from "./tracing.js";

/**
 * A PostgreSQL connection that runs parameterized queries the way node-postgres does: a `pg.Client`, or a
 * `pg.PoolClient` checked out of a pool (the one whose transaction is open: not the pool itself, whose each
 * query may go to another connection).
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/** Options of the enqueues made in a transaction. */
export interface InTransactionOptions {
  /**
   * OpenTelemetry's API (`import * as api from "@opentelemetry/api"`): the jobs carry the active trace
   * context in their headers, as with a `Client`'s `tracing` (a `traceparent` the request sets wins).
   */
  tracing?: TracingApi;
}

/** The answer of an enqueue in a transaction: the job's id, and whether it was made (false: an existing job holds its key). */
export interface InTransactionResult {
  id: string;
  /** False when an existing job holds the idempotency key (any state) or the unique key (unfinished): `id` is that job. */
  created: boolean;
}

/** SQLSTATE `invalid_parameter_value`: the functions' refusal of a bad input, with the HTTP API's message. */
const INVALID_PARAMETER_VALUE = "22023";

/** Runs a query of the functions; their refusal of the input becomes an {@link InvalidArgument}. */
async function run(pg: PgQueryable, text: string, values: unknown[]): Promise<Array<Record<string, unknown>>> {
  try {
    return (await pg.query(text, values)).rows as Array<Record<string, unknown>>;
  } catch (e) {
    const err = e as { code?: unknown; message?: unknown } | null;
    if (err?.code === INVALID_PARAMETER_VALUE && typeof err.message === "string") {
      throw new InvalidArgument(err.message, "invalid_argument", 0, { cause: e });
    }
    throw e;
  }
}

function answer(row: Record<string, unknown> | undefined): InTransactionResult {
  if (!row || typeof row.id !== "string" || typeof row.created !== "boolean") {
    throw new TypeError(`tether.enqueue answered an unexpected row: ${JSON.stringify(row)}`);
  }
  return { id: row.id, created: row.created };
}

/**
 * Enqueues a job with SQL on `pg`, in the transaction open there (`BEGIN` … `COMMIT`), by
 * `tether.enqueue(tenant, queue, kind, payload, options)`: the job exists if and only if that transaction
 * commits, and at commit the workers waiting on its queue are woken. `tenant` is the tenant's name (the
 * function trusts the database role: it checks no key). `request` is what `client.enqueue` takes (the
 * wire's names: `delay_ms`, `idempotency_key`, …), except dependencies and workflows, which the function
 * refuses. Answers the job's id (read the job over HTTP once committed) and whether it was made.
 *
 * A refused input throws {@link InvalidArgument} with the API's message (node-postgres's error, SQLSTATE
 * 22023, as its `cause`) before anything is written; the transaction is then aborted and can only roll
 * back. Other database errors are thrown as node-postgres raised them.
 */
export async function enqueueInTransaction(pg: PgQueryable, tenant: string, request: EnqueueRequest, options: InTransactionOptions = {}): Promise<InTransactionResult> {
  const traced = withTraceHeaders(request, options.tracing ? activeTraceHeaders(options.tracing) : undefined);
  const { queue, kind, payload, ...rest } = traced;
  const rows = await run(pg, "SELECT id::text AS id, created FROM tether.enqueue($1, $2, $3, $4::jsonb, $5::jsonb)", [
    tenant,
    queue,
    kind,
    // node-postgres would send a JavaScript array as a PostgreSQL array: JSON goes as text.
    JSON.stringify(payload ?? null),
    JSON.stringify(rest),
  ]);
  return answer(rows[0]);
}

/**
 * Enqueues 1–1000 jobs with SQL on `pg`, in the transaction open there, by `tether.enqueue_many(tenant,
 * jobs)`: all or nothing, each request as `client.enqueue` takes it (later entries see earlier ones'
 * keys). Answers one {@link InTransactionResult} per request, in order. Errors as
 * {@link enqueueInTransaction}'s (the message names the entry: `invalid jobs[3].run_at: …`).
 */
export async function enqueueManyInTransaction(
  pg: PgQueryable,
  tenant: string,
  requests: readonly EnqueueRequest[],
  options: InTransactionOptions = {},
): Promise<InTransactionResult[]> {
  const found = options.tracing ? activeTraceHeaders(options.tracing) : undefined;
  const jobs = requests.map((r) => withTraceHeaders(r, found));
  const rows = await run(pg, "SELECT ord, id::text AS id, created FROM tether.enqueue_many($1, $2::jsonb) ORDER BY ord", [tenant, JSON.stringify(jobs)]);
  if (rows.length !== requests.length) throw new TypeError(`tether.enqueue_many answered ${rows.length} rows for ${requests.length} jobs`);
  return rows.map(answer);
}

/**
 * {@link enqueueInTransaction} for a typed task (see `defineTask`): its queue and defaults, each overridden
 * by `taskOptions` (camelCase, as `client.enqueueTask` takes them), and `payload`, which the compiler
 * checks against the task's payload type.
 */
export function enqueueTaskInTransaction<T extends Task<unknown, unknown>>(
  pg: PgQueryable,
  tenant: string,
  task: T,
  payload: TaskPayload<T>,
  taskOptions?: TaskEnqueueOptions,
  options: InTransactionOptions = {},
): Promise<InTransactionResult> {
  return enqueueInTransaction(pg, tenant, task.request(payload, taskOptions), options);
}
