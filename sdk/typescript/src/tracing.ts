// W3C trace context through job headers, with OpenTelemetry when the user
// passes its API (`tracing: api`, where `import * as api from
// "@opentelemetry/api"`): this package depends on nothing, so it is given
// the API rather than importing it. Enqueues put the active context's
// `traceparent` (and `tracestate`) into the job's headers; a worker runs
// each job's hooks and handler in a `tether.job <kind>` span (kind
// CONSUMER) whose parent is the context those headers carry.

import type { EnqueueRequest, Job } from "./types.js";
import type { JobOutcome } from "./handler.js";

/** An OpenTelemetry context, as far as this package handles one (it only passes them around). */
export interface TracingContext {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): TracingContext;
  deleteValue(key: symbol): TracingContext;
}

/** The parts of an OpenTelemetry span this package uses. */
export interface TracingSpan {
  setAttribute(key: string, value: string | number): unknown;
  recordException(exception: Error | string): void;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}

/** The parts of an OpenTelemetry tracer this package uses. */
export interface TracingTracer {
  startSpan(name: string, options?: { kind?: number; attributes?: Record<string, string | number> }, context?: TracingContext): TracingSpan;
}

/**
 * The parts of OpenTelemetry's API (`@opentelemetry/api`, 1.x) that this package uses, typed structurally
 * so that it needs no dependency: pass the module itself, `import * as api from "@opentelemetry/api"`, as
 * the `tracing` option of a `Client` or a `Worker`.
 */
export interface TracingApi {
  readonly context: {
    active(): TracingContext;
    with<R>(context: TracingContext, fn: () => R): R;
  };
  readonly propagation: {
    inject(context: TracingContext, carrier: Record<string, string>): void;
    extract(context: TracingContext, carrier: Record<string, string>): TracingContext;
  };
  readonly trace: {
    getTracer(name: string, version?: string): TracingTracer;
    setSpan(context: TracingContext, span: TracingSpan): TracingContext;
  };
  readonly SpanKind: { readonly CONSUMER: number };
  readonly SpanStatusCode: { readonly ERROR: number };
  readonly ROOT_CONTEXT: TracingContext;
}

/** The headers of the W3C trace context, the only ones this package carries (never `baggage`, say). */
const TRACEPARENT = "traceparent";
const TRACESTATE = "tracestate";

/**
 * `traceparent` (and `tracestate`) of the active context, as the registered propagator writes them; none
 * without an active span (or without a W3C trace context propagator registered). Whatever else the
 * propagator writes (`baggage`) is left out: it could exceed what a job's headers may hold.
 */
export function activeTraceHeaders(api: TracingApi): Record<string, string> | undefined {
  const carrier: Record<string, string> = {};
  api.propagation.inject(api.context.active(), carrier);
  const traceparent = carrier[TRACEPARENT];
  if (typeof traceparent !== "string" || traceparent === "") return undefined;
  const found: Record<string, string> = { [TRACEPARENT]: traceparent };
  const tracestate = carrier[TRACESTATE];
  if (typeof tracestate === "string" && tracestate !== "") found[TRACESTATE] = tracestate;
  return found;
}

/**
 * `req` with `found` added to its headers, unless the caller set a `traceparent` (in any case) itself: then
 * the trace context is the caller's, whole (a `tracestate` of another trace would not belong with it).
 * A new object; `req` is left as it is.
 */
export function withTraceHeaders<R extends Pick<EnqueueRequest, "headers">>(req: R, found: Record<string, string> | undefined): R {
  if (!found) return req;
  const headers = req.headers ?? {};
  if (Object.keys(headers).some((name) => name.toLowerCase() === TRACEPARENT)) return req;
  return { ...req, headers: { ...found, ...headers } };
}

/** The tracer of this package, per API object (a proxy until the application registers a provider). */
const tracers = new WeakMap<TracingApi, TracingTracer>();

/** A job's span: started, and the context it is active in. */
export interface JobSpan {
  span: TracingSpan;
  context: TracingContext;
}

/**
 * Starts the span a job's hooks and handler run in: `tether.job <kind>`, kind CONSUMER, child of the
 * context the job's headers carry (a root span when they carry none), with the job's id, kind, queue and
 * attempt as attributes (and OpenTelemetry's messaging attributes).
 */
export function startJobSpan(api: TracingApi, version: string, job: Job): JobSpan {
  let tracer = tracers.get(api);
  if (!tracer) tracers.set(api, (tracer = api.trace.getTracer("tether-client", version)));
  const parent = api.propagation.extract(api.ROOT_CONTEXT, { ...(job.headers ?? {}) });
  const span = tracer.startSpan(
    `tether.job ${job.kind}`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: {
        "tether.job.id": job.id,
        "tether.job.kind": job.kind,
        "tether.job.queue": job.queue,
        "tether.job.attempt": job.attempt,
        "messaging.system": "tether",
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
      },
    },
    parent,
  );
  return { span, context: api.trace.setSpan(parent, span) };
}

/**
 * Ends a job's span with what the run came to: a failed attempt (`failed`, `retryAfter`) records its
 * error as an exception and sets the status to error.
 */
export function endJobSpan(api: TracingApi, span: TracingSpan, outcome: JobOutcome): void {
  try {
    span.setAttribute("tether.job.outcome", outcome.status);
    if (outcome.status === "failed" || outcome.status === "retryAfter") {
      const e = outcome.error;
      const message = e instanceof Error ? e.message : typeof e === "string" ? e : JSON.stringify(e) ?? String(e);
      span.recordException(e instanceof Error ? e : message);
      span.setStatus({ code: api.SpanStatusCode.ERROR, message });
    }
  } finally {
    span.end();
  }
}
