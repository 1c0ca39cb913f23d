// Workflows written in code: a WorkflowBuilder collects jobs and the edges
// between them, `client.enqueueWorkflow(builder)` sends them as one batch
// that makes a new workflow, and the EnqueuedWorkflow it answers maps the
// jobs back to the builder's entries.

import type { BatchEnqueueRequest, BatchEnqueueResponse, EnqueueRequest, EnqueueResponse, Job } from "./types.js";

/** How many jobs one batch, hence one {@link WorkflowBuilder}, may hold. A workflow grows past it only at run time. */
export const MAX_WORKFLOW_ENTRIES = 1000;

/** What `after` names: an entry of the same builder, or an existing job (its id, or the {@link Job}). */
export type WorkflowDependency = WorkflowEntry | string | Job;

/**
 * One job of a workflow: the fields of an enqueue, with `after` instead of `depends_on` and
 * `depends_on_entries` (and no `workflow_id`: the batch makes the workflow).
 */
export type WorkflowStep = Omit<EnqueueRequest, "depends_on" | "depends_on_entries" | "workflow_id"> & {
  /** Earlier entries of the same builder, and existing jobs, this one waits for. */
  after?: readonly WorkflowDependency[];
};

/** Options of a {@link WorkflowBuilder}: the wire's `workflow` object, but its `name`. */
export interface WorkflowOptions {
  /** Sending a builder with a key already used answers the workflow it made first, and writes nothing. */
  idempotency_key?: string | null;
}

/** The builder each entry came from (entries carry no reference a caller could change). */
const owners = new WeakMap<WorkflowEntry, WorkflowBuilder>();

/**
 * One job of a {@link WorkflowBuilder}, as `add` answered it: name it in a later `add({ …, after: [entry] })`
 * to wait for it, and give it to {@link EnqueuedWorkflow.job} for the job it became.
 */
export class WorkflowEntry {
  /** Its position in the batch. */
  readonly index: number;
  readonly queue: string;
  readonly kind: string;

  /** Made by {@link WorkflowBuilder.add}. */
  constructor(index: number, queue: string, kind: string) {
    this.index = index;
    this.queue = queue;
    this.kind = kind;
  }
}

/**
 * A graph of jobs to enqueue as one new workflow.
 *
 * ```ts
 * const wf = new WorkflowBuilder("publish", { idempotency_key: "post:42" });
 * const a = wf.add({ queue: "media", kind: "thumbnail", payload: { size: 64 } });
 * const b = wf.add({ queue: "media", kind: "thumbnail", payload: { size: 512 } });
 * const publish = wf.add({ queue: "media", kind: "publish", after: [a, b] });
 * const done = await client.enqueueWorkflow(wf);
 * done.workflowId; done.job(publish).state; // "waiting"
 * ```
 *
 * `after` lists entries of this builder (made by earlier `add` calls, so the graph has no cycle) and
 * existing jobs (ids or {@link Job}s); they become the entry's `depends_on_entries` and `depends_on` (its
 * job's `depends_on` then lists the existing jobs first, then the entries, each in the order given). At most
 * 1000 entries (a `RangeError` past that): a workflow grows further only at run time, by enqueues with
 * `workflow_id`.
 */
export class WorkflowBuilder {
  readonly name: string;
  readonly idempotency_key: string | null;
  readonly #entries: WorkflowEntry[] = [];
  readonly #bodies: EnqueueRequest[] = [];
  /** Per entry, what its job's `depends_on` will be: existing ids, then entry indexes (the server's order). */
  readonly #after: Array<Array<string | number>> = [];

  constructor(name: string, options: WorkflowOptions = {}) {
    this.name = name;
    this.idempotency_key = options.idempotency_key ?? null;
  }

  /** Adds a job that waits for everything in `after`; answers its entry. */
  add(step: WorkflowStep): WorkflowEntry {
    if (this.#entries.length >= MAX_WORKFLOW_ENTRIES) {
      throw new RangeError(
        `workflow ${JSON.stringify(this.name)} already has ${MAX_WORKFLOW_ENTRIES} jobs, the most one batch holds: ` +
          "add more at run time with enqueue({ …, workflow_id })",
      );
    }
    const { after = [], ...fields } = step;
    const named = ["depends_on", "depends_on_entries", "workflow_id"].filter((k) => k in fields);
    if (named.length > 0) {
      throw new TypeError(`WorkflowBuilder.add() takes after: [...] instead of ${named.join(", ")} (the workflow_id is the one the batch makes)`);
    }
    const ids: string[] = [];
    const entries: number[] = [];
    for (const dep of after) {
      if (dep instanceof WorkflowEntry) {
        if (owners.get(dep) !== this) throw new RangeError(`entry ${dep.index} (${dep.kind}) belongs to another WorkflowBuilder`);
        entries.push(dep.index);
      } else if (typeof dep === "string") {
        ids.push(dep);
      } else if (dep !== null && typeof dep === "object" && typeof dep.id === "string") {
        ids.push(dep.id);
      } else {
        throw new TypeError("after takes entries of this builder, job ids and jobs");
      }
    }
    const body: EnqueueRequest = { ...fields };
    if (ids.length > 0) body.depends_on = ids;
    if (entries.length > 0) body.depends_on_entries = entries;
    const entry = new WorkflowEntry(this.#entries.length, step.queue, step.kind);
    owners.set(entry, this);
    this.#entries.push(entry);
    this.#bodies.push(body);
    this.#after.push([...ids, ...entries]);
    return entry;
  }

  /** The entries, in the order they were added (the batch's order). */
  get entries(): readonly WorkflowEntry[] {
    return [...this.#entries];
  }

  /** How many entries it holds. */
  get size(): number {
    return this.#entries.length;
  }

  /** The body of `POST /v1/jobs/batch` that makes this workflow. */
  toRequest(): BatchEnqueueRequest {
    const workflow = this.idempotency_key === null ? { name: this.name } : { name: this.name, idempotency_key: this.idempotency_key };
    return { jobs: this.#bodies.map((b) => ({ ...b })), workflow };
  }

  /**
   * Maps the answer to {@link toRequest}'s batch back to the entries (what `client.enqueueWorkflow` answers).
   * When the key led to an existing workflow, its jobs (oldest first) are this builder's only if each has its
   * entry's queue, kind and dependencies; otherwise `job(entry)` throws.
   */
  resolve(answer: BatchEnqueueResponse): EnqueuedWorkflow {
    if (!answer.workflow_id) throw new TypeError("the answer names no workflow_id: not the answer of a workflow batch");
    const created = answer.results.some((r) => r.created);
    let jobs: Job[] | undefined = answer.results.map((r) => r.job);
    if (!created || jobs.length !== this.#entries.length) jobs = this.#match(jobs);
    return new EnqueuedWorkflow(answer.workflow_id, created, answer.results, this, jobs);
  }

  #match(results: Job[]): Job[] | undefined {
    if (results.length < this.#entries.length) return undefined;
    const jobs = results.slice(0, this.#entries.length);
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i];
      const body = this.#bodies[i];
      const want = this.#after[i].map((d) => (typeof d === "string" ? d : jobs[d].id));
      if (job.queue !== body.queue || job.kind !== body.kind || job.depends_on.length !== want.length || job.depends_on.some((id, k) => id !== want[k])) {
        return undefined;
      }
    }
    return jobs;
  }
}

/**
 * What `client.enqueueWorkflow` answers: the workflow's id, whether this request made it (`false`: its
 * idempotency key led to the workflow it made before, and nothing was written), the batch's `results`, and
 * {@link job} for the job each entry became.
 */
export class EnqueuedWorkflow {
  readonly workflowId: string;
  readonly created: boolean;
  /**
   * One per entry, in the builder's order; when the key led to an existing workflow, that workflow's jobs,
   * oldest first (jobs added at run time included).
   */
  readonly results: EnqueueResponse[];
  readonly #builder: WorkflowBuilder;
  readonly #byEntry: Job[] | undefined;

  constructor(workflowId: string, created: boolean, results: EnqueueResponse[], builder: WorkflowBuilder, byEntry: Job[] | undefined) {
    this.workflowId = workflowId;
    this.created = created;
    this.results = results;
    this.#builder = builder;
    this.#byEntry = byEntry;
  }

  /** The jobs of {@link results}. */
  get jobs(): Job[] {
    return this.results.map((r) => r.job);
  }

  /** The job `entry` became (or, on an idempotent resend, had become). */
  job(entry: WorkflowEntry): Job {
    if (owners.get(entry) !== this.#builder) throw new RangeError(`entry ${entry.index} (${entry.kind}) is not an entry of the builder this workflow came from`);
    if (!this.#byEntry) {
      throw new RangeError(
        `workflow ${this.workflowId} was made before, by another graph with the same idempotency key: its jobs do not match this builder's entries (see results)`,
      );
    }
    const job = this.#byEntry.at(entry.index);
    if (!job) throw new RangeError(`entry ${entry.index} (${entry.kind}) was added after this workflow was enqueued`);
    return job;
  }
}
