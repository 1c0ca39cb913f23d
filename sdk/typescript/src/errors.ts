// Errors of the tether client: one class per API error code, all extending
// TetherError, plus TransportError for requests that got no answer.

import type { ErrorCode, Job } from "./types.js";

/** Any error of this package. `code` is the API's error code, or "transport". */
export class TetherError extends Error {
  /** The API error code (`not_found`, `lease_lost`, …) or `transport`. */
  readonly code: ErrorCode | "transport";
  /** HTTP status of the answer (0 when there was none). */
  readonly status: number;

  constructor(message: string, code: ErrorCode | "transport", status: number, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
  }
}

/** 400: malformed JSON, unknown field, bad value. */
export class InvalidArgument extends TetherError {}
/** 401: missing, unknown or revoked key. */
export class Unauthenticated extends TetherError {}
/** 403: the key lacks the scope (e.g. admin routes). */
export class PermissionDenied extends TetherError {}
/** 404: no such job, schedule, tenant or key in this tenant; unknown route. */
export class NotFound extends TetherError {}
/** 405: known route, wrong method. */
export class MethodNotAllowed extends TetherError {}
/** 409: a name that is taken. */
export class AlreadyExists extends TetherError {}
/** 409: the lease token no longer owns the job (another owner took it). */
export class LeaseLost extends TetherError {}
/** 409: the job (or tenant) is not in a state that allows this. */
export class InvalidState extends TetherError {}
/** 413: body, payload or result above the server's limit. */
export class PayloadTooLarge extends TetherError {}
/** 415: a body that is not JSON. */
export class UnsupportedMediaType extends TetherError {}
/** 429: the tenant already holds as many event streams (`GET /v1/events`) open as the server allows. */
export class TooManyRequests extends TetherError {}
/** 503: the database is unreachable or the request timed out; safe to retry. */
export class Unavailable extends TetherError {}
/** 500: an unexpected storage failure (details in the server's log). */
export class Internal extends TetherError {}
/** Why a request got no usable answer. */
export type TransportReason = "network" | "timeout" | "decode";

/** No answer at all: connection refused or reset, timeout, unreadable body. */
export class TransportError extends TetherError {
  /** `network` (refused, reset, …), `timeout` (no answer within the time limit) or `decode` (a success answer that is not JSON). */
  readonly reason: TransportReason;
  constructor(message: string, code: "transport", status: number, options?: { cause?: unknown; reason?: TransportReason }) {
    super(message, code, status, options);
    this.reason = options?.reason ?? "network";
  }
}

/** The class for each API error code. */
export const ERROR_CLASSES: Record<ErrorCode, new (message: string, code: ErrorCode, status: number) => TetherError> = {
  invalid_argument: InvalidArgument,
  unauthenticated: Unauthenticated,
  permission_denied: PermissionDenied,
  not_found: NotFound,
  method_not_allowed: MethodNotAllowed,
  already_exists: AlreadyExists,
  lease_lost: LeaseLost,
  invalid_state: InvalidState,
  payload_too_large: PayloadTooLarge,
  unsupported_media_type: UnsupportedMediaType,
  too_many_requests: TooManyRequests,
  unavailable: Unavailable,
  internal: Internal,
};

/** Builds the error for an API error answer. Unknown codes become a plain TetherError. */
export function errorFromApi(status: number, code: string, message: string): TetherError {
  const cls = (ERROR_CLASSES as Record<string, (typeof ERROR_CLASSES)[ErrorCode] | undefined>)[code];
  if (cls) return new cls(message, code as ErrorCode, status);
  return new TetherError(message, code as ErrorCode, status);
}

/**
 * What `client.waitResult` throws when the job has no result to give: it `failed` (its `last_error` is in
 * the message), was `cancelled`, or had not finished when the wait ran out. `job` is the job as it was then.
 */
export class JobNotSucceeded extends Error {
  readonly job: Job;
  constructor(job: Job, waitedMs: number) {
    const why =
      job.state === "failed"
        ? `failed: ${job.last_error ?? "no error recorded"}`
        : job.state === "cancelled"
          ? "was cancelled"
          : `has not finished after ${waitedMs} ms (it is ${job.state})`;
    super(`job ${job.id} (${job.kind}) ${why}`);
    this.name = "JobNotSucceeded";
    this.job = job;
  }
}

// ---- what a handler throws to steer the outcome of its job ----

/**
 * Thrown by a handler: the attempt failed and the job should run again
 * exactly `ms` milliseconds from now (the upstream said when). The attempt
 * counts; once attempts run out the job fails.
 */
export class RetryAfter extends Error {
  readonly ms: number;
  constructor(ms: number, message?: string) {
    super(message ?? `retry after ${ms} ms`);
    this.name = "RetryAfter";
    this.ms = Math.max(0, Math.round(ms));
  }
}

/**
 * Thrown by a handler: not now, not my fault (a rate limit, a busy
 * resource). The job goes back to the queue for `ms` milliseconds and the
 * attempt is given back.
 */
export class Snooze extends Error {
  readonly ms: number;
  constructor(ms: number) {
    super(`snooze ${ms} ms`);
    this.name = "Snooze";
    this.ms = Math.max(0, Math.round(ms));
  }
}

/**
 * Thrown by a handler: the attempt failed and the job should run again after
 * the queue's backoff. Unlike any other error, the stored error is exactly
 * `message` (no stack appended). The attempt counts; once attempts run out
 * the job fails.
 */
export class Retry extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Retry";
  }
}

/** Thrown by a handler: the job can never succeed; fail it now, without retries. */
export class Fatal extends Error {
  constructor(message: string) {
    super(message);
    this.name = "Fatal";
  }
}
