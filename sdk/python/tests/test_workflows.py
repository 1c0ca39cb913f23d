"""Workflows against a real server on each backend: a graph written with
WorkflowBuilder runs to ``succeeded`` and reads back whole; its idempotency
key answers the first workflow; a failure fails it and a retry runs it
again; cancel and the state filter; a handler that adds jobs to its own
workflow."""

from __future__ import annotations

import asyncio
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Iterator, List

import pytest

from conftest import Server, wait_for
from tether_client import (
    AsyncClient,
    Client,
    EnqueuedWorkflow,
    Fatal,
    InvalidArgument,
    InvalidState,
    JobContext,
    NotFound,
    Worker,
    Workflow,
    WorkflowBuilder,
    WorkflowDetail,
)


@contextmanager
def running(worker: Worker) -> Iterator[Worker]:
    errors: List[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(worker.run_async(handle_signals=False))
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=main, daemon=True)
    t.start()
    wait_for(lambda: worker._loop is not None or not t.is_alive())
    try:
        yield worker
    finally:
        worker.stop()
        t.join(30)
        assert not t.is_alive(), "the worker did not stop"
        if errors:
            raise errors[0]


def unique(prefix: str = "wf") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ended(client: Client, workflow_id: str, state: str) -> WorkflowDetail:
    """Waits until the workflow is in ``state``."""

    def check() -> Any:
        wf = client.get_workflow(workflow_id)
        return wf if wf.state == state else None

    result: WorkflowDetail = wait_for(check, timeout=20)
    return result


def events(client: Client, job_id: str) -> List[str]:
    return [e.event for e in client.iter_events(job_id)]


def test_a_diamond_runs_to_succeeded_and_reads_back_whole(client: Client, queue: str) -> None:
    name = unique()
    wf = WorkflowBuilder(name)
    top = wf.add(queue, "step", "top")
    left = wf.add(queue, "step", "left", after=[top])
    right = wf.add(queue, "step", "right", after=[top])
    bottom = wf.add(queue, "join", after=[left, right])
    assert len(wf) == 4 and wf.entries == [top, left, right, bottom]
    done = client.enqueue_workflow(wf)
    assert isinstance(done, EnqueuedWorkflow) and done.created
    assert [done.job(e).state for e in wf] == ["queued", "waiting", "waiting", "waiting"]
    assert done[left].depends_on == [done[top].id]
    assert done[bottom].depends_on == [done[left].id, done[right].id]
    assert {j.workflow_id for j in done.jobs} == {done.workflow_id}
    assert [r.job.id for r in done.results] == [done[e].id for e in wf]

    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)

    @worker.handler("step")
    def step(ctx: JobContext) -> Any:
        assert ctx.workflow_id == done.workflow_id
        return ctx.payload

    @worker.handler("join")
    def join(ctx: JobContext) -> Any:
        return sorted(d.result for d in ctx.dependencies())

    with running(worker):
        detail = ended(client, done.workflow_id, "succeeded")
    assert isinstance(detail, WorkflowDetail)
    assert (detail.id, detail.name, detail.idempotency_key) == (done.workflow_id, name, None)
    assert detail.finished_at is not None and detail.created_at
    assert (detail.counts.succeeded, detail.counts.waiting, detail.counts.failed) == (4, 0, 0)
    assert [(j.id, j.kind, j.state, j.depends_on) for j in detail.jobs] == [
        (done[e].id, e.kind, "succeeded", done[e].depends_on) for e in wf
    ]
    assert client.get(done[bottom].id).result == ["left", "right"]
    assert {j.id for j in client.iter_jobs(workflow_id=done.workflow_id)} == {
        done[e].id for e in wf
    }
    [listed] = client.iter_workflows(name=name)
    assert isinstance(listed, Workflow) and not isinstance(listed, WorkflowDetail)
    assert (listed.id, listed.state, listed.counts.succeeded) == (done.workflow_id, "succeeded", 4)
    assert listed.finished_at == detail.finished_at


def test_the_idempotency_key_answers_the_first_workflow_and_writes_nothing(
    client: Client, queue: str
) -> None:
    name, key = unique(), unique("key")
    existing = client.enqueue(queue, "before")

    def build() -> Any:
        wf = WorkflowBuilder(name, idempotency_key=key)
        a = wf.add(queue, "a", {"n": 1})
        # An existing job by id (or Job) and an entry: depends_on lists the
        # existing jobs first, then the entries.
        b = wf.add(queue, "b", after=[a, existing])
        return wf, a, b

    wf, a, b = build()
    first = client.enqueue_workflow(wf)
    assert first.created and first[b].depends_on == [existing.id, first[a].id]
    again_wf, again_a, again_b = build()
    again = client.enqueue_workflow(again_wf)
    assert not again.created and again.workflow_id == first.workflow_id
    assert [r.created for r in again.results] == [False, False]
    assert (again[again_a].id, again[again_b].id) == (first[a].id, first[b].id)
    # Nothing more was written.
    assert len(list(client.iter_jobs(queue=queue))) == 3
    assert [w.id for w in client.iter_workflows(name=name)] == [first.workflow_id]
    assert client.get_workflow(first.workflow_id).idempotency_key == key

    # The key used for another graph: the first workflow is answered, and its
    # jobs are not this builder's.
    other = WorkflowBuilder(name, idempotency_key=key)
    x = other.add(queue, "something-else")
    answer = client.enqueue_workflow(other)
    assert answer.workflow_id == first.workflow_id and not answer.created
    assert [j.id for j in answer.jobs] == [first[a].id, first[b].id]
    with pytest.raises(LookupError, match="idempotency key"):
        answer.job(x)
    with pytest.raises(LookupError, match="not an entry"):
        first.job(x)


def test_a_failure_fails_the_workflow_and_a_retry_runs_it_again(
    client: Client, queue: str
) -> None:
    wf = WorkflowBuilder(unique())
    flaky = wf.add(queue, "flaky")
    middle = wf.add(queue, "step", after=[flaky])
    last = wf.add(queue, "step", after=[middle])
    side = wf.add(queue, "step")  # not downstream: left alone by the retries
    done = client.enqueue_workflow(wf)
    fixed = threading.Event()

    worker = Worker(client, queue, concurrency=2, claim_wait=0.5)

    @worker.handler("flaky")
    def flaky_handler(ctx: JobContext) -> Any:
        if not fixed.is_set():
            raise Fatal("not yet")
        return "fixed"

    @worker.handler("step")
    def step(ctx: JobContext) -> Any:
        return "ok"

    with running(worker):
        detail = ended(client, done.workflow_id, "failed")
        states = {j.id: j.state for j in detail.jobs}
        assert [states[done[e].id] for e in wf] == ["failed", "cancelled", "cancelled", "succeeded"]
        assert (detail.counts.failed, detail.counts.cancelled, detail.counts.succeeded) == (1, 2, 1)
        assert detail.finished_at is not None

        # `failed`: only the failed job goes back (and fails again).
        assert client.retry_workflow(done.workflow_id, "failed").replayed == 1
        wait_for(lambda: events(client, done[flaky].id).count("failed") == 2, timeout=20)
        detail = ended(client, done.workflow_id, "failed")
        assert client.get(done[middle].id).state == "cancelled"

        # `failed_and_downstream`: what its failure cancelled waits for it again.
        fixed.set()
        assert client.retry_workflow(done.workflow_id, "failed_and_downstream").replayed == 3
        detail = ended(client, done.workflow_id, "succeeded")
    assert detail.counts.succeeded == 4
    assert client.get(done[flaky].id).result == "fixed"
    assert events(client, done[last].id).count("replayed") == 1
    assert events(client, done[side].id) == ["enqueued", "claimed", "succeeded"]
    with pytest.raises(InvalidArgument):
        client.retry_workflow(done.workflow_id, "everything")  # type: ignore[arg-type]


def test_cancel_ends_every_unfinished_job_and_a_finished_workflow_takes_no_more(
    client: Client, queue: str
) -> None:
    wf = WorkflowBuilder(unique())
    first = wf.add(queue, "a", priority=10)
    wf.add(queue, "b", after=[first])
    wf.add(queue, "c")
    done = client.enqueue_workflow(wf)
    [claimed] = client.claim(queue, "w", limit=1)
    assert claimed.id == done[first].id and claimed.workflow_id == done.workflow_id

    cancel = client.cancel_workflow(done.workflow_id)
    assert (cancel.cancelled, cancel.cancel_requested) == (2, 1)
    assert client.get(claimed.id).cancel_requested
    assert client.get_workflow(done.workflow_id).state == "running"
    client.fail(claimed.id, claimed.lease_token, "stopped", cancelled=True)
    detail = client.get_workflow(done.workflow_id)
    assert detail.state == "cancelled" and detail.counts.cancelled == 3
    again = client.cancel_workflow(done.workflow_id)
    assert (again.cancelled, again.cancel_requested) == (0, 0)

    # A finished workflow takes no more jobs; an unknown one is a bad argument.
    with pytest.raises(InvalidState):
        client.enqueue(queue, "late", workflow_id=done.workflow_id)
    with pytest.raises(InvalidArgument, match="workflow_id"):
        client.enqueue(queue, "late", workflow_id=str(uuid.uuid4()))
    for call in (client.get_workflow, client.cancel_workflow):
        with pytest.raises(NotFound):
            call(str(uuid.uuid4()))
    with pytest.raises(NotFound):
        client.retry_workflow(str(uuid.uuid4()), "failed")


def test_workflows_are_listed_newest_first_and_by_state(client: Client, queue: str) -> None:
    name = unique()
    ids = []
    for i in range(3):
        wf = WorkflowBuilder(name)
        wf.add(queue, "k", i)
        ids.append(client.enqueue_workflow(wf).workflow_id)
    client.cancel_workflow(ids[1])

    assert [w.id for w in client.iter_workflows(name=name)] == ids[::-1]
    assert [w.id for w in client.iter_workflows(name=name, limit=1)] == ids[::-1]
    page = client.list_workflows(name=name, limit=2)
    assert [w.id for w in page.workflows] == [ids[2], ids[1]] and page.next_cursor
    rest = client.list_workflows(name=name, limit=2, cursor=page.next_cursor)
    assert [w.id for w in rest.workflows] == [ids[0]]
    assert [w.id for w in client.iter_workflows(name=name, state="running")] == [ids[2], ids[0]]
    [cancelled] = client.iter_workflows(name=name, state="cancelled")
    assert (cancelled.id, cancelled.state, cancelled.counts.cancelled) == (ids[1], "cancelled", 1)
    assert list(client.iter_workflows(name=name, state="succeeded")) == []
    with pytest.raises(InvalidArgument):
        client.list_workflows(state="sleeping")  # type: ignore[arg-type]


def test_a_handler_adds_jobs_to_its_own_workflow(client: Client, queue: str) -> None:
    wf = WorkflowBuilder(unique())
    root = wf.add(queue, "split", 3)
    done = client.enqueue_workflow(wf)
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)

    @worker.handler("split")
    def split(ctx: JobContext) -> Any:
        assert ctx.workflow_id is not None and ctx.workflow_id == ctx.job.workflow_id
        parts = [
            client.enqueue(queue, "part", i, workflow_id=ctx.workflow_id)
            for i in range(ctx.payload)
        ]
        total = client.enqueue(
            queue, "sum", workflow_id=ctx.workflow_id, depends_on=[ctx.id, *parts]
        )
        return {"sum": total.id}

    @worker.handler("part")
    def part(ctx: JobContext) -> Any:
        return ctx.payload * 10

    @worker.handler("sum")
    def total(ctx: JobContext) -> Any:
        return sum(d.result for d in ctx.dependencies() if d.kind == "part")

    with running(worker):
        detail = ended(client, done.workflow_id, "succeeded")
    assert [j.kind for j in detail.jobs] == ["split", "part", "part", "part", "sum"]
    assert detail.counts.succeeded == 5
    sum_id = client.get(done[root].id).result["sum"]
    assert client.get(sum_id).result == 30
    assert client.get(sum_id).workflow_id == done.workflow_id
    assert detail.jobs[-1].depends_on[0] == done[root].id


def test_the_builder_refuses_what_the_server_would(client: Client, queue: str) -> None:
    wf = WorkflowBuilder(unique(), idempotency_key="k")
    a = wf.add(queue, "a")
    existing = client.enqueue(queue, "before")
    b = wf.add(queue, "b", {"x": 1}, after=[a, existing.id], dependency_failure="run", tags=["t"])
    assert (a.index, b.index, b.queue, b.kind) == (0, 1, queue, "b")
    body = wf.to_request()
    assert body["workflow"] == {"name": wf.name, "idempotency_key": "k"}
    assert body["jobs"][1] == {
        "queue": queue,
        "kind": "b",
        "payload": {"x": 1},
        "tags": ["t"],
        "depends_on": [existing.id],
        "depends_on_entries": [0],
        "dependency_failure": "run",
    }
    with pytest.raises(ValueError, match="another WorkflowBuilder"):
        WorkflowBuilder("other").add(queue, "c", after=[a])
    # Not keywords of add(): `after` names what an entry waits for, and the
    # batch makes the workflow.
    with pytest.raises(TypeError, match="depends_on"):
        wf.add(queue, "c", depends_on=[existing.id])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="workflow_id"):
        wf.add(queue, "c", workflow_id=str(uuid.uuid4()))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        wf.add(queue, "c", after=[1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="no jobs"):
        client.enqueue_workflow(WorkflowBuilder("empty"))

    # 1000 entries is one batch; the 1001st is refused before any request.
    big = WorkflowBuilder(unique())
    entries = [big.add(queue, "n", i) for i in range(1000)]
    with pytest.raises(ValueError, match="1000"):
        big.add(queue, "one-too-many")
    assert len(big) == 1000
    done = client.enqueue_workflow(big)
    assert done.created and done[entries[-1]].payload == 999
    assert client.get_workflow(done.workflow_id).counts.queued == 1000
    client.cancel_workflow(done.workflow_id)


def test_the_async_client_enqueues_reads_retries_and_cancels(server: Server, queue: str) -> None:
    name = unique()

    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c:
            wf = WorkflowBuilder(name, idempotency_key=unique("key"))
            a = wf.add(queue, "a")
            b = wf.add(queue, "b", after=[a], dependency_failure="run")
            done = await c.enqueue_workflow(wf)
            assert done.created and done[b].state == "waiting"
            assert [w.id async for w in c.iter_workflows(name=name)] == [done.workflow_id]
            page = await c.list(workflow_id=done.workflow_id)
            assert {j.id for j in page.jobs} == {done[a].id, done[b].id}

            [ca] = await c.claim(queue, "w", limit=5)
            await c.fail(ca.id, ca.lease_token, "broken", fatal=True)
            [cb] = await c.claim(queue, "w", limit=5)  # `run`: released anyway
            assert cb.id == done[b].id
            await c.complete(cb.id, cb.lease_token, "summary")
            detail = await c.get_workflow(done.workflow_id)
            assert detail.state == "failed" and detail.counts.failed == 1

            assert (await c.retry_workflow(done.workflow_id, "failed")).replayed == 1
            assert (await c.get_workflow(done.workflow_id)).state == "running"
            cancel = await c.cancel_workflow(done.workflow_id)
            assert (cancel.cancelled, cancel.cancel_requested) == (1, 0)
            detail = await c.get_workflow(done.workflow_id)
            assert detail.state == "cancelled"
            assert [j.state for j in detail.jobs] == ["cancelled", "succeeded"]
            assert (await c.enqueue_workflow(wf)).workflow_id == done.workflow_id

    asyncio.run(main())
