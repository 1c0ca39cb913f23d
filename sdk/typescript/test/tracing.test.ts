// W3C trace context through jobs, with OpenTelemetry (a devDependency of
// the tests only: the SDK is given the API as its `tracing` option) and an
// in-memory exporter, against a real server on each backend: every enqueue
// path carries the active context in the job's headers (a traceparent the
// caller set wins; none without an active span, or without `tracing`), and
// the worker runs hooks and handler in a `tether.job <kind>` CONSUMER span
// whose parent is that context, its error recorded on failure.

import { test, beforeEach } from "node:test";
import assert from "node:assert/strict";
import * as api from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { Client, defineTask, Worker, WorkflowBuilder, type Job } from "../src/index.js";
import { eventually, forEachBackend, memoryLogger, queueName, startWorker } from "./harness.js";

// What an application's OpenTelemetry setup does (NodeSDK does the same): a provider, a context manager
// that follows async calls, and the W3C trace context propagator.
const exporter = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = api.trace.getTracer("tether-client-tests");

/** Runs `f` inside a new active span `name`; answers what `f` answered and the span's context. */
async function inSpan<T>(name: string, f: () => Promise<T>): Promise<{ value: T; span: api.SpanContext }> {
  return tracer.startActiveSpan(name, async (span) => {
    try {
      return { value: await f(), span: span.spanContext() };
    } finally {
      span.end();
    }
  });
}

function traceparentOf(sc: api.SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-0${sc.traceFlags}`;
}

/** The finished span of job `id`'s run, once it is exported. */
async function jobSpan(id: string): Promise<ReadableSpan> {
  return eventually(`the span of job ${id}`, async () => exporter.getFinishedSpans().find((s) => s.attributes["tether.job.id"] === id));
}

async function finished(c: Client, id: string): Promise<Job> {
  return eventually("the job to finish", async () => {
    const j = await c.get(id);
    return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
  });
}

beforeEach(() => exporter.reset());

forEachBackend("tracing", (server) => {
  const traced = () => new Client({ url: server().url, key: server().key, tracing: api });

  test("every enqueue path carries the active trace context; the caller's own traceparent wins", async () => {
    const c = traced();
    const queue = queueName();
    const task = defineTask<{ n: number }>({ kind: "task", queue });
    const { value, span } = await inSpan("produce", async () => {
      const single = await c.enqueue({ queue, kind: "one" });
      const batch = await c.enqueueBatch([{ queue, kind: "b1" }, { queue, kind: "b2", headers: { tenant: "acme" } }]);
      const wf = new WorkflowBuilder("traced");
      wf.add({ queue, kind: "w1" });
      const workflow = await c.enqueueWorkflow(wf);
      const typed = await c.enqueueTask(task, { n: 1 });
      const own = await c.enqueue({ queue, kind: "own", headers: { TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" } });
      return { jobs: [single, ...batch.map((r) => r.job), ...workflow.jobs!, typed], own };
    });
    for (const job of value.jobs) {
      assert.equal(job.headers.traceparent, traceparentOf(span), `${job.kind} carries the producer's span`);
      assert.ok(!("tracestate" in job.headers), "no tracestate without one in the context");
    }
    assert.equal(value.jobs[2]!.headers.tenant, "acme", "the caller's other headers stay");
    assert.deepEqual(value.own.headers, { TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }, "a traceparent set by the caller wins, whole");

    // A tracestate in the context goes along.
    const remote = api.trace.setSpanContext(api.ROOT_CONTEXT, {
      traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
      spanId: "00f067aa0ba902b7",
      traceFlags: api.TraceFlags.SAMPLED,
      isRemote: true,
      traceState: api.createTraceState("vendor=abc,other=1"),
    });
    const withState = await api.context.with(remote, () => c.enqueue({ queue, kind: "state" }));
    assert.deepEqual(withState.headers, { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "vendor=abc,other=1" });

    // No active span: no header. A client without `tracing`: none either, even inside a span.
    assert.deepEqual((await c.enqueue({ queue, kind: "none" })).headers, {});
    const plain = new Client({ url: server().url, key: server().key });
    const untraced = await inSpan("produce", () => plain.enqueue({ queue, kind: "none" }));
    assert.deepEqual(untraced.value.headers, {});
  });

  test("the handler and its hooks run in a CONSUMER span whose parent is the enqueuer's span", async () => {
    const c = traced();
    const queue = queueName();
    const seen: Record<string, string | undefined> = {};
    const spanId = () => api.trace.getActiveSpan()?.spanContext().spanId;
    // The worker takes the client's `tracing`.
    const worker = new Worker(c, { queue, claimWaitMs: 200, handleSignals: false })
      .before(() => void (seen.before = spanId()))
      .after(() => void (seen.after = spanId()));
    worker.handle("send", async () => {
      seen.handler = spanId();
      // A span the handler makes is a child of the job's.
      await tracer.startActiveSpan("send mail", async (s) => s.end());
      return { ok: true };
    });
    const { value: job, span: producer } = await inSpan("HTTP POST /signup", () => c.enqueue({ queue, kind: "send" }));
    void startWorker(worker);
    assert.equal((await finished(c, job.id)).state, "succeeded");
    const span = await jobSpan(job.id);
    assert.equal(span.name, "tether.job send");
    assert.equal(span.kind, api.SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, producer.traceId, "the same trace");
    assert.equal(span.parentSpanContext?.spanId, producer.spanId, "the enqueuer's span is its parent");
    assert.equal(span.parentSpanContext?.isRemote, true);
    assert.equal(span.status.code, api.SpanStatusCode.UNSET);
    assert.deepEqual(
      {
        id: span.attributes["tether.job.id"],
        kind: span.attributes["tether.job.kind"],
        queue: span.attributes["tether.job.queue"],
        attempt: span.attributes["tether.job.attempt"],
      },
      { id: job.id, kind: "send", queue, attempt: 1 },
    );
    const own = span.spanContext().spanId;
    assert.deepEqual(seen, { before: own, handler: own, after: own }, "hooks and handler run in the job's span");
    const child = exporter.getFinishedSpans().find((s) => s.name === "send mail");
    assert.equal(child?.parentSpanContext?.spanId, own);
  });

  test("a failed attempt's span has the error recorded and status error; a job without trace context gets a root span", async () => {
    const c = traced();
    const queue = queueName();
    const { logger } = memoryLogger();
    const worker = new Worker(c, { queue, claimWaitMs: 200, handleSignals: false, logger });
    worker.handle("boom", () => {
      throw new TypeError("the template is missing");
    });
    worker.handle("fine", () => null);
    const { value: bad } = await inSpan("produce", () => c.enqueue({ queue, kind: "boom", max_attempts: 1 }));
    const plain = await c.enqueue({ queue, kind: "fine" });
    assert.deepEqual(plain.headers, {});
    void startWorker(worker);
    assert.equal((await finished(c, bad.id)).state, "failed");
    const span = await jobSpan(bad.id);
    assert.equal(span.status.code, api.SpanStatusCode.ERROR);
    assert.equal(span.status.message, "the template is missing");
    const exception = span.events.find((e) => e.name === "exception");
    assert.equal(exception?.attributes?.["exception.type"], "TypeError");
    assert.equal(exception?.attributes?.["exception.message"], "the template is missing");
    assert.equal((await finished(c, plain.id)).state, "succeeded");
    const root = await jobSpan(plain.id);
    assert.equal(root.parentSpanContext, undefined, "no trace context in its headers: a new trace");
    assert.equal(root.status.code, api.SpanStatusCode.UNSET);
  });

  test("a worker without tracing makes no span", async () => {
    const plain = new Client({ url: server().url, key: server().key });
    const queue = queueName();
    const worker = new Worker(plain, { queue, claimWaitMs: 200, handleSignals: false });
    let active: api.Span | undefined;
    worker.handle("k", () => void (active = api.trace.getActiveSpan()));
    const { value: job } = await inSpan("produce", () => traced().enqueue({ queue, kind: "k" }));
    void startWorker(worker);
    assert.equal((await finished(plain, job.id)).state, "succeeded");
    assert.equal(active, undefined);
    assert.ok(!exporter.getFinishedSpans().some((s) => s.attributes["tether.job.id"] === job.id));
  });
});
