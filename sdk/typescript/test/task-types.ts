// The types of typed tasks, checked by `tsc --strict` as `npm test` compiles
// the tests: each `@ts-expect-error` line must fail to compile (else tsc
// reports the directive unused and the build fails), and every other line
// must compile. Nothing here runs: the functions are never called.

import { Client, defineTask, Worker, type Job, type TaskJob, type TaskPayload, type TaskResult } from "../src/index.js";

interface EmailIn {
  to: string;
  cc?: string[];
}
interface EmailOut {
  messageId: string;
}

const sendEmail = defineTask<EmailIn, EmailOut>({ kind: "send-email", queue: "emails", maxAttempts: 5, timeoutMs: 60_000 });

/** A validator's answer is the payload type: no explicit type arguments needed for it. */
const resize = defineTask({
  kind: "resize",
  queue: "images",
  validate: (x: unknown) => {
    const w = (x as { width?: unknown } | null)?.width;
    if (typeof w !== "number") throw new TypeError("width must be a number");
    return { width: w };
  },
});

/** Exact types, both ways: `Is<A, B>` is `true` only when A and B are the same type. */
type Is<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const inferred: [Is<TaskPayload<typeof sendEmail>, EmailIn>, Is<TaskResult<typeof sendEmail>, EmailOut>, Is<TaskPayload<typeof resize>, { width: number }>] = [true, true, true];
void inferred;

export function handlers(worker: Worker): void {
  // The payload is the task's, the result is checked against the task's.
  worker.handle(sendEmail, async (payload, ctx) => {
    const to: string = payload.to;
    const attempt: number = ctx.job.attempt;
    return { messageId: `${to}:${attempt}` };
  });
  worker.handle(sendEmail, (payload) => ({ messageId: payload.to }));
  worker.handle(resize, ({ width }) => width * 2);

  // @ts-expect-error: a result without the task's required field
  worker.handle(sendEmail, async () => ({ sent: true }));
  // @ts-expect-error: a result of the wrong type
  worker.handle(sendEmail, () => ({ messageId: 42 }));
  // @ts-expect-error: no result where the task has one
  worker.handle(sendEmail, async () => {});
  // @ts-expect-error: the payload has no such field
  worker.handle(sendEmail, (payload) => ({ messageId: payload.subject }));
  // @ts-expect-error: a handler that takes the payload as another type
  worker.handle(sendEmail, (payload: { to: number }) => ({ messageId: String(payload.to) }));

  // The untyped API stays: a kind and a handler of the job.
  worker.handle("send-email", (job: Job) => job.payload);
}

export async function producers(client: Client): Promise<void> {
  const job = await client.enqueueTask(sendEmail, { to: "ada@example.com" }, { delayMs: 1_000, maxAttempts: 2 });
  const typed: TaskJob<EmailIn, EmailOut> = job;
  const to: string = job.payload.to;
  const out: EmailOut = await client.waitResult(job, { timeoutMs: 10_000 });
  const id: string = out.messageId;
  void [typed, to, id];
  await client.enqueueTask(resize, { width: 64 });

  // @ts-expect-error: a payload without the required field
  await client.enqueueTask(sendEmail, { cc: ["b@example.com"] });
  // @ts-expect-error: a payload field of the wrong type
  await client.enqueueTask(sendEmail, { to: 42 });
  // @ts-expect-error: a payload field the type does not have
  await client.enqueueTask(sendEmail, { to: "ada@example.com", subject: "hi" });
  // @ts-expect-error: another task's payload
  await client.enqueueTask(resize, { to: "ada@example.com" });
  // @ts-expect-error: an option of the wire's name (the task API takes camelCase)
  await client.enqueueTask(sendEmail, { to: "ada@example.com" }, { max_attempts: 2 });

  // @ts-expect-error: the result is the task's, not another type
  const wrong: { sent: boolean } = await client.waitResult(job);
  void wrong;

  // An untyped job's result is JSON.
  const plain = await client.enqueue({ queue: "emails", kind: "send-email", payload: { to: "ada@example.com" } });
  const json = await client.waitResult(plain);
  void json;
}
