// The event stream (`Client.streamEvents`, `GET /v1/events`): the SSE
// parser on its own, then against a real server on each backend: a job's
// enqueued, claimed and succeeded with their fields; a consumer that breaks
// and resumes with `after` gets exactly the events that followed; filters;
// reconnection by itself after a dropped connection and a 503, with
// `Last-Event-ID`; the errors it throws (400, 401, 429) and its signal.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Client,
  InvalidArgument,
  WorkflowBuilder,
  TooManyRequests,
  TransportError,
  Unauthenticated,
  type EventKind,
  type FeedEventData,
  type Job,
  type StreamEvent,
  type StreamFilter,
  type StreamOptions,
} from "../src/index.js";
import { SseParser } from "../src/sse.js";
import { eventually, forEachBackend, queueName } from "./harness.js";

// ---------------------------------------------------------------- the parser

test("SseParser: fields, comments, multi-line data, ids that stick, every line ending, any chunking", () => {
  const text =
    ": a comment\n" +
    "id: 1\nevent: enqueued\ndata: {\"a\":1}\n\n" +
    "data: line one\r\ndata:line two\r\n\r\n" + // no event: "message"; the id sticks; one space stripped at most
    "event: x\rdata:  two spaces\r\r" +
    "id: 3\nevent: nothing\n\n" + // no data: not dispatched, but the id is set
    "retry: 2500\nretry: soon\nunknown: field\nid\ndata\n\n" + // `id` alone: an empty id; `data` alone: an empty line
    "id: 4\ndata: incomplete"; // never ends: never answered
  const want = [
    { event: "enqueued", data: '{"a":1}', id: "1" },
    { event: "message", data: "line one\nline two", id: "1" },
    { event: "x", data: " two spaces", id: "1" },
    { event: "message", data: "", id: "" },
  ];
  // Whole, character by character, and in every split in two.
  const whole = new SseParser();
  assert.deepEqual(whole.push(text), want);
  assert.equal(whole.retryMs, 2500);
  const bytewise = new SseParser();
  assert.deepEqual([...text].flatMap((c) => bytewise.push(c)), want);
  for (let i = 0; i <= text.length; i++) {
    const p = new SseParser();
    assert.deepEqual([...p.push(text.slice(0, i)), ...p.push(text.slice(i))], want, `split at ${i}`);
  }
});

test("a gap is a StreamGap, a silent connection is reopened, a body that is not JSON is thrown (no server)", async () => {
  const encoder = new TextEncoder();
  const seen: Array<string | null> = [];
  /** An event stream that sends `text` and then nothing, without ending. */
  const silent = (text: string, signal?: AbortSignal | null) =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(ctl) {
          ctl.enqueue(encoder.encode(text));
          signal?.addEventListener("abort", () => ctl.error(signal.reason));
        },
      }),
      { status: 200, headers: { "content-type": "text/event-stream" } },
    );
  const event = { cursor: "c.2", job_id: "j", workflow_id: null, queue: "q", kind: "k", event: "succeeded", at: "2026-01-01T00:00:00Z", attempt: 1, worker_id: "w", detail: null, state: "succeeded" };
  const f: typeof fetch = async (_input, init) => {
    seen.push(new Headers(init?.headers).get("last-event-id"));
    if (seen.length === 1) return silent(': hello\n\nid: c.1\nevent: gap\ndata: {"oldest":"c.1"}\n\n', init?.signal);
    return silent(`id: c.2\nevent: succeeded\ndata: ${JSON.stringify(event)}\n\n`, init?.signal);
  };
  const reconnects: unknown[] = [];
  const c = new Client({ url: "http://tether.invalid", key: "k", fetch: f });
  const items: StreamEvent[] = [];
  for await (const e of c.streamEvents({}, { idleTimeoutMs: 200, onReconnect: ({ error }) => reconnects.push(error) })) {
    items.push(e);
    if (items.length === 2) break;
  }
  assert.deepEqual(items, [{ event: "gap", oldest: "c.1", cursor: "c.1" }, event]);
  const gap = items[0]!;
  if (gap.event === "gap") assert.equal(gap.oldest, "c.1"); // the union narrows by `event`
  assert.deepEqual(seen, [null, "c.1"]);
  assert.equal(reconnects.length, 1);
  assert.ok(reconnects[0] instanceof TransportError && reconnects[0].reason === "timeout", String(reconnects[0]));

  const broken = new Client({ url: "http://tether.invalid", key: "k", fetch: async (_i, init) => silent("event: enqueued\ndata: {oops\n\n", init?.signal) });
  await assert.rejects(firstOf(broken.streamEvents()), (e: unknown) => e instanceof TransportError && e.reason === "decode");
  const notSse = new Client({ url: "http://tether.invalid", key: "k", fetch: async () => new Response("{}", { headers: { "content-type": "application/json" } }) });
  await assert.rejects(firstOf(notSse.streamEvents()), (e: unknown) => e instanceof TransportError && e.reason === "decode");
});

// ---------------------------------------------------------------- against a server

/** An open stream read item by item, with a time limit on each. */
class Tap {
  #it: AsyncGenerator<StreamEvent>;
  #ac = new AbortController();
  #pending: Promise<IteratorResult<StreamEvent>> | undefined;
  /** Connections the stream opened. */
  opens = 0;

  private constructor(c: Client, filter: StreamFilter, opts: StreamOptions, opened: () => void) {
    const signal = opts.signal ? AbortSignal.any([opts.signal, this.#ac.signal]) : this.#ac.signal;
    const onOpen = () => {
      this.opens += 1;
      opened();
    };
    this.#it = c.streamEvents(filter, { ...opts, signal, onOpen });
  }

  /** Opens a stream; resolves once the server has answered it (from then on, every event committed is delivered). */
  static async open(c: Client, filter: StreamFilter = {}, opts: StreamOptions = {}): Promise<Tap> {
    let opened!: () => void;
    const ready = new Promise<void>((r) => (opened = r));
    const tap = new Tap(c, filter, opts, () => opened());
    const first = tap.#it.next();
    tap.#pending = first;
    // A refused stream rejects its first item before it opens.
    await Promise.race([ready, first.then(() => ready)]);
    return tap;
  }

  async next(timeoutMs = 10_000): Promise<StreamEvent> {
    const p = this.#pending ?? this.#it.next();
    this.#pending = p; // until it settles, for close()
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no event within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const r = await Promise.race([p, late]);
      this.#pending = undefined;
      assert.ok(!r.done, "the stream ended");
      return r.value;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Items up to and including the first that `last` accepts. */
  async until(last: (e: StreamEvent) => boolean, max = 100): Promise<StreamEvent[]> {
    const out: StreamEvent[] = [];
    for (;;) {
      const e = await this.next();
      out.push(e);
      if (last(e)) return out;
      assert.ok(out.length < max, "too many events");
    }
  }

  /** The next `n` items. */
  async take(n: number): Promise<StreamEvent[]> {
    const out: StreamEvent[] = [];
    while (out.length < n) out.push(await this.next());
    return out;
  }

  /** Closes the stream by its signal. */
  async close(): Promise<void> {
    this.#ac.abort(new Error("closed by the test"));
    const p = this.#pending;
    this.#pending = undefined;
    if (p) await p.catch(() => undefined);
    await this.#it.return(undefined).catch(() => undefined);
  }
}

function feed(e: StreamEvent): FeedEventData {
  assert.notEqual(e.event, "gap", "an event, not a gap");
  return e as FeedEventData;
}

const brief = (e: StreamEvent) => (e.event === "gap" ? "gap" : `${e.job_id}:${e.event}`);

/** Each job's events in the order they came. */
function perJob(items: StreamEvent[]): Map<string, EventKind[]> {
  const m = new Map<string, EventKind[]>();
  for (const e of items.map(feed)) m.set(e.job_id, [...(m.get(e.job_id) ?? []), e.event]);
  return m;
}

const sorted = (xs: string[]) => [...xs].sort();

forEachBackend("streamEvents", (server) => {
  test("a job's enqueued, claimed and succeeded arrive with their fields", async () => {
    const c = server().admin;
    const queue = queueName();
    const tap = await Tap.open(c, { queue });
    try {
      const job = await c.enqueue({ queue, kind: "mail", payload: { to: "ada" } });
      const [claimed] = await c.claim(queue, { worker_id: "stream-worker" });
      await c.complete(job.id, { lease_token: claimed!.lease_token, result: "ok" });
      const [enq, cl, ok] = [feed(await tap.next()), feed(await tap.next()), feed(await tap.next())];
      assert.deepEqual([enq.event, cl.event, ok.event], ["enqueued", "claimed", "succeeded"]);
      for (const e of [enq, cl, ok]) {
        assert.deepEqual([e.job_id, e.queue, e.kind, e.workflow_id], [job.id, queue, "mail", null]);
        assert.equal(typeof e.cursor, "string");
        assert.ok(e.cursor.length > 0);
        assert.ok(!Number.isNaN(Date.parse(e.at)), e.at);
        assert.equal(e.detail, null);
      }
      assert.equal(new Set([enq.cursor, cl.cursor, ok.cursor]).size, 3, "each event has its own cursor");
      assert.deepEqual([enq.attempt, cl.attempt, ok.attempt], [0, 1, 1]);
      assert.deepEqual([cl.worker_id, ok.worker_id], ["stream-worker", "stream-worker"]);
      // `enqueued` sets no state: it carries the job's state when the stream read it.
      assert.ok(["queued", "running", "succeeded"].includes(enq.state), enq.state);
      assert.deepEqual([cl.state, ok.state], ["running", "succeeded"]);
      assert.ok(Date.parse(enq.at) <= Date.parse(cl.at) && Date.parse(cl.at) <= Date.parse(ok.at));

      // A workflow's job carries its workflow.
      const dead = await c.enqueue({ queue, kind: "other", max_attempts: 1 });
      const [cl2] = await c.claim(queue, { worker_id: "stream-worker" });
      await c.fail(dead.id, { lease_token: cl2!.lease_token, error: "no luck", fatal: true });
      const more = (await tap.until((e) => e.event === "failed")).map(feed);
      assert.deepEqual(more.map((e) => e.event), ["enqueued", "claimed", "failed"]);
      assert.deepEqual([more[2]!.state, more[2]!.detail, more[2]!.job_id], ["failed", "no luck", dead.id]);
    } finally {
      await tap.close();
    }
  });

  test("a consumer that breaks and resumes with `after` gets exactly the events that followed", async () => {
    const c = server().admin;
    const queue = queueName();
    const before = await cursorBefore(c, queue);
    const jobs: Job[] = [];
    for (let i = 0; i < 3; i++) jobs.push(await c.enqueue({ queue, kind: "k", payload: i }));

    // A `for await` that breaks after its first event: the others may already be read, but were never handed out.
    let stop: StreamEvent | undefined;
    for await (const e of c.streamEvents({ queue, after: before })) {
      stop = e;
      break;
    }
    assert.deepEqual(brief(stop!), `${jobs[0]!.id}:enqueued`);

    // More happens while nobody listens.
    const [claimed] = await c.claim(queue, { worker_id: "w" });
    await c.complete(claimed!.id, { lease_token: claimed!.lease_token });
    const late = await c.enqueue({ queue, kind: "k", payload: 3 });
    const sentinel = await c.enqueue({ queue, kind: "sentinel" });

    const resumed = await Tap.open(c, { queue, after: stop!.cursor });
    try {
      const got = await resumed.until((e) => feed(e).job_id === sentinel.id);
      const want = [
        `${jobs[1]!.id}:enqueued`,
        `${jobs[2]!.id}:enqueued`,
        `${claimed!.id}:claimed`,
        `${claimed!.id}:succeeded`,
        `${late.id}:enqueued`,
        `${sentinel.id}:enqueued`,
      ];
      assert.deepEqual(sorted(got.map(brief)), sorted(want));
      assert.deepEqual(perJob(got).get(claimed!.id), ["claimed", "succeeded"]);
      // Each came once: the cursors are all different and none is the one resumed from.
      assert.equal(new Set([stop!.cursor, ...got.map((e) => e.cursor)]).size, got.length + 1);
    } finally {
      await resumed.close();
    }
  });

  test("filters: jobId, event names, workflowId", async () => {
    const c = server().admin;
    const queue = queueName();
    // From a cursor taken before the jobs exist (a stream without one starts at about the moment it opens).
    const start = await cursorBefore(c, queue);
    const one = await c.enqueue({ queue, kind: "one" });
    const two = await c.enqueue({ queue, kind: "two" });
    const byJob = await Tap.open(c, { jobId: two.id, after: start });
    const byEvent = await Tap.open(c, { queue, events: ["succeeded", "replayed"], after: start });
    try {
      const claimed = await c.claim(queue, { worker_id: "w", limit: 2 });
      assert.equal(claimed.length, 2);
      for (const j of claimed) await c.complete(j.id, { lease_token: j.lease_token });
      await c.replay(one.id);
      await c.replay(two.id); // the last event of both streams
      const mine = (await byJob.until((e) => e.event === "replayed")).map(feed);
      assert.deepEqual(
        mine.map((e) => [e.job_id, e.event]),
        [
          [two.id, "enqueued"],
          [two.id, "claimed"],
          [two.id, "succeeded"],
          [two.id, "replayed"],
        ],
      );
      const picked = await byEvent.until((e) => e.event === "replayed" && feed(e).job_id === two.id);
      assert.deepEqual(sorted(picked.map(brief)), sorted([`${one.id}:succeeded`, `${two.id}:succeeded`, `${one.id}:replayed`, `${two.id}:replayed`]));
    } finally {
      await byJob.close();
      await byEvent.close();
    }

    // workflowId, from a cursor taken before: the job enqueued alone in between is left out.
    const before = await cursorBefore(c, queue);
    await c.enqueue({ queue, kind: "alone" });
    const builder = new WorkflowBuilder(queueName("wf"));
    const x = builder.add({ queue, kind: "x" });
    builder.add({ queue, kind: "y", after: [x] });
    const made = await c.enqueueWorkflow(builder);
    const byWorkflow = await Tap.open(c, { workflowId: made.workflowId, after: before });
    try {
      const got = (await byWorkflow.take(2)).map(feed);
      assert.deepEqual(sorted(got.map((e) => `${e.kind}:${e.event}:${e.workflow_id}`)), [
        `x:enqueued:${made.workflowId}`,
        `y:enqueued:${made.workflowId}`,
      ]);
    } finally {
      await byWorkflow.close();
    }
  });

  test("it reconnects by itself with Last-Event-ID after a dropped connection, a 503 and an ended stream", async () => {
    const { url, key } = server();
    const queue = queueName();
    const requests: Array<{ lastEventId: string | null; after: string | null }> = [];
    const encoder = new TextEncoder();
    /** The answer's first message whole, then (`reset`) half a message and a network error, or (`end`) its end. */
    const cut = (res: Response, how: "reset" | "end"): Response => {
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = "";
      const body = new ReadableStream<Uint8Array>({
        async pull(ctl) {
          for (;;) {
            const r = await reader.read();
            if (r.done) return ctl.close();
            text += decoder.decode(r.value, { stream: true });
            const data = text.indexOf("data:");
            const end = data < 0 ? -1 : text.indexOf("\n\n", data);
            if (end < 0) continue;
            void reader.cancel();
            if (how === "end") {
              ctl.enqueue(encoder.encode(text.slice(0, end + 2)));
              ctl.close();
            } else {
              ctl.enqueue(encoder.encode(text.slice(0, end + 2) + 'id: not-a-cursor\nevent: enqueued\ndata: {"cur'));
              ctl.error(new TypeError("terminated"));
            }
            return;
          }
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    const f: typeof fetch = async (input, init) => {
      const u = new URL(String(input));
      if (u.pathname !== "/v1/events") return fetch(input, init);
      requests.push({ lastEventId: new Headers(init?.headers).get("last-event-id"), after: u.searchParams.get("after") });
      const n = requests.length;
      if (n === 2) {
        return new Response(JSON.stringify({ error: { code: "unavailable", message: "try later" } }), {
          status: 503,
          headers: { "content-type": "application/json" },
        });
      }
      const res = await fetch(input, init);
      return n === 1 ? cut(res, "reset") : n === 3 ? cut(res, "end") : res;
    };
    const c = new Client({ url, key, fetch: f });
    const reconnects: Array<{ error: unknown; attempt: number }> = [];
    const tap = await Tap.open(c, { queue }, { onReconnect: (r) => reconnects.push(r) });
    try {
      const jobs: Job[] = [];
      for (let i = 0; i < 4; i++) jobs.push(await c.enqueue({ queue, kind: "k", payload: i }));
      const got = (await tap.take(4)).map(feed);
      assert.deepEqual(
        got.map(brief),
        jobs.map((j) => `${j.id}:enqueued`),
      );
      assert.deepEqual(requests, [
        { lastEventId: null, after: null },
        { lastEventId: got[0]!.cursor, after: null },
        { lastEventId: got[0]!.cursor, after: null },
        { lastEventId: got[1]!.cursor, after: null },
      ]);
      assert.equal(tap.opens, 3);
      assert.deepEqual(
        reconnects.map((r) => [r.attempt, r.error === undefined ? "end" : (r.error as Error).name]),
        [
          [1, "TransportError"],
          [2, "Unavailable"],
          [1, "end"],
        ],
      );
      // Nothing more: the next event is the next one committed.
      const sentinel = await c.enqueue({ queue, kind: "sentinel" });
      assert.equal(feed(await tap.next()).job_id, sentinel.id);
      assert.equal(requests.length, 4);
    } finally {
      await tap.close();
    }
  });

  test("errors: a bad filter or cursor, an unknown key, too many streams; a signal closes", async () => {
    const c = server().admin;
    await assert.rejects(firstOf(c.streamEvents({ jobId: "not-a-uuid" })), InvalidArgument);
    await assert.rejects(firstOf(c.streamEvents({ after: "nonsense" })), InvalidArgument);
    await assert.rejects(firstOf(c.streamEvents({ events: ["nope" as EventKind] })), InvalidArgument);
    await assert.rejects(firstOf(new Client({ url: server().url, key: "tth_nope" }).streamEvents()), Unauthenticated);

    // A tenant of its own, so other tests' streams do not count: 64 streams (the server's default), then 429.
    const t = await c.createTenant(queueName("streams"));
    const tc = new Client({ url: server().url, key: t.api_key });
    const taps = await Promise.all(Array.from({ length: 64 }, () => Tap.open(tc)));
    try {
      await assert.rejects(firstOf(tc.streamEvents()), (e: unknown) => {
        assert.ok(e instanceof TooManyRequests, String(e));
        assert.deepEqual([e.status, e.code], [429, "too_many_requests"]);
        return true;
      });
      // Closing one (here by its signal) gives its place back.
      await taps.pop()!.close();
      const again = await eventually("a place to be free again", async () => {
        try {
          return await Tap.open(tc);
        } catch (e) {
          if (e instanceof TooManyRequests) return undefined;
          throw e;
        }
      });
      taps.push(again);
    } finally {
      await Promise.all(taps.map((x) => x.close()));
    }

    // A signal ends the loop with its reason.
    const ac = new AbortController();
    const tap = await Tap.open(c, { queue: queueName() }, { signal: ac.signal });
    const pending = tap.next(10_000);
    ac.abort(new Error("stop listening"));
    await assert.rejects(pending, /stop listening/);
    await tap.close();
  });

  test("break closes the connection: the place is given back", async () => {
    const c = server().admin;
    const t = await c.createTenant(queueName("brk"));
    const tc = new Client({ url: server().url, key: t.api_key });
    const queue = queueName();
    // 63 streams, and a 64th (the server's most) that a loop breaks out of at its first event.
    const taps = await Promise.all(Array.from({ length: 63 }, () => Tap.open(tc)));
    try {
      let enqueued: Promise<unknown> | undefined;
      for await (const e of tc.streamEvents({ queue }, { onOpen: () => (enqueued = tc.enqueue({ queue, kind: "k" })) })) {
        assert.equal(e.event, "enqueued");
        break;
      }
      await enqueued;
      await eventually("a 64th stream to open after the break", async () => {
        try {
          taps.push(await Tap.open(tc));
          return true;
        } catch (e) {
          if (e instanceof TooManyRequests) return undefined;
          throw e;
        }
      });
    } finally {
      await Promise.all(taps.map((x) => x.close()));
    }
  });
});

/** The first item of a stream (then the loop breaks). */
async function firstOf(it: AsyncIterable<StreamEvent>): Promise<StreamEvent> {
  for await (const e of it) return e;
  throw new Error("the stream ended");
}

/** A cursor before anything of `queue` was committed: the first event of a throwaway job on another queue. */
async function cursorBefore(c: Client, queue: string): Promise<string> {
  const other = `${queue}-mark`;
  const tap = await Tap.open(c, { queue: other });
  try {
    await c.enqueue({ queue: other, kind: "mark" });
    return (await tap.next()).cursor;
  } finally {
    await tap.close();
  }
}
