"""W3C trace context through job headers, and a span per job run, with
OpenTelemetry's SDK and its in-memory exporter, against a real server; and
the SDK without OpenTelemetry at all."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Dict, List, Optional

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    StatusCode,
    TraceFlags,
    TraceState,
)

from conftest import Server, wait_for
from test_worker import running, settled
from tether_client import (
    Client,
    JobContext,
    Outcome,
    Worker,
    WorkflowBuilder,
    batch_entry,
    task,
)

_exporter: Optional[InMemorySpanExporter] = None


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """The spans this process finished, from this test on. A process has
    one tracer provider: the first test sets it up, the others clear it."""
    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    return _exporter


def job_spans(exporter: InMemorySpanExporter, job_id: str) -> List[ReadableSpan]:
    return [
        s for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("tether.job.id") == job_id
    ]


@pytest.mark.parametrize("handler_kind", ["sync", "async"])
def test_a_job_enqueued_in_a_span_runs_in_a_child_of_it(
    client: Client, queue: str, exporter: InMemorySpanExporter, handler_kind: str
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    current: Dict[str, int] = {}

    def note(where: str) -> None:
        current[where] = trace.get_current_span().get_span_context().span_id

    worker.before(lambda ctx: note("before"))
    worker.after(lambda ctx, outcome: note("after"))
    if handler_kind == "sync":
        worker.register("k", lambda ctx: note("handler"))
    else:

        async def handler(ctx: JobContext) -> None:
            note("handler")

        worker.register("k", handler)
    with trace.get_tracer("test").start_as_current_span("POST /signup") as parent:
        job = client.enqueue(queue, "k")
    assert job.headers["traceparent"].split("-")[2] == f"{parent.get_span_context().span_id:016x}"
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded")
        [span] = wait_for(lambda: job_spans(exporter, job.id))
    assert span.name == "tether.job k" and span.kind == SpanKind.CONSUMER
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert span.parent.span_id == parent.get_span_context().span_id
    assert dict(span.attributes or {}) == {
        "tether.job.id": job.id,
        "tether.job.kind": "k",
        "tether.job.queue": queue,
        "tether.job.attempt": 1,
        "messaging.system": "tether",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job.id,
    }
    assert span.status.status_code == StatusCode.UNSET
    # The hooks and the handler ran in it.
    assert current == dict.fromkeys(("before", "handler", "after"), span.context.span_id)


def test_a_failed_attempt_records_its_exception_on_an_error_span(
    client: Client, queue: str, exporter: InMemorySpanExporter
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)

    @worker.handler("k")
    async def boom(ctx: JobContext) -> None:
        raise ValueError("no such account")

    with trace.get_tracer("test").start_as_current_span("cron tick"):
        job = client.enqueue(queue, "k", max_attempts=1)
    with running(worker):
        settled(client, job.id, "failed")
        [span] = wait_for(lambda: job_spans(exporter, job.id))
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "no such account"
    [event] = span.events
    assert event.name == "exception" and event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "no such account"


def test_a_job_enqueued_outside_any_span_carries_no_trace_context(
    client: Client, queue: str, exporter: InMemorySpanExporter
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    outcomes: List[Outcome] = []
    worker.register("k", lambda ctx: trace.get_current_span().get_span_context().is_valid)
    worker.after(lambda ctx, outcome: outcomes.append(outcome))
    job = client.enqueue(queue, "k", headers={"x-request-id": "r-1"})
    assert job.headers == {"x-request-id": "r-1"}
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded")
        wait_for(lambda: outcomes)
    assert client.get(job.id).result is False  # no span was current in the handler
    assert job_spans(exporter, job.id) == []


def test_every_enqueue_path_carries_the_current_trace_context(
    client: Client, queue: str, exporter: InMemorySpanExporter
) -> None:
    state = TraceState([("vendor", "v1")])
    parent = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=state,
    )
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    expected = {"traceparent": traceparent, "tracestate": "vendor=v1"}
    typed = task("typed", queue=queue, payload=int)
    wf = WorkflowBuilder("traced")
    entry = wf.add(queue, "k", headers={"step": "1"})
    given = "00-11111111111111111111111111111111-2222222222222222-01"
    with trace.use_span(NonRecordingSpan(parent)):
        plain = client.enqueue(queue, "k")
        waited = client.enqueue_and_wait(queue, "k", timeout=0)
        batch = client.enqueue_batch([batch_entry(queue, "k"), batch_entry(queue, "k")])
        graph = client.enqueue_workflow(wf)
        typed_job = typed.enqueue(client, 1)
        # A traceparent the caller sets wins, and the trace context is its own.
        own = client.enqueue(queue, "k", headers={"traceparent": given})
    assert plain.headers == expected and waited.headers == expected
    assert [r.job.headers for r in batch] == [expected, expected]
    assert graph[entry].headers == {"step": "1", **expected}
    assert typed_job.headers == expected
    assert own.headers == {"traceparent": given}
    # The builder's entry itself was not changed: sent outside the span, no context.
    assert wf.to_request()["jobs"][0]["headers"] == {"step": "1"}


def test_without_opentelemetry_nothing_of_it_runs(server: Server, queue: str) -> None:
    """In a process where OpenTelemetry cannot be imported, enqueues carry no
    trace context and a job that carries one runs as any other; importing
    the SDK never imports OpenTelemetry where it is installed."""
    script = textwrap.dedent(
        f"""
        import sys
        from importlib.abc import MetaPathFinder

        class NoOpenTelemetry(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("no opentelemetry here")
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from tether_client import Client, Worker
        from tether_client.testing import run_until_empty

        client = Client({server.url!r}, {server.key!r})
        plain = client.enqueue({queue!r}, "k")
        parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        traced = client.enqueue({queue!r}, "k", headers={{"traceparent": parent}})
        worker = Worker(client, {queue!r})
        worker.register("k", lambda ctx: ctx.headers)
        assert run_until_empty(worker).succeeded == 2
        assert client.get(plain.id).result == {{}}
        assert client.get(traced.id).result == {{"traceparent": parent}}
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
    check = "import sys, tether_client; print([m for m in sys.modules if 'opentelemetry' in m])"
    imported = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60
    )
    assert imported.stdout.strip() == "[]", imported.stderr


def test_spans_of_concurrent_jobs_do_not_mix(
    client: Client, queue: str, exporter: InMemorySpanExporter
) -> None:
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)
    barrier = threading.Barrier(4, timeout=10)

    @worker.handler("k")
    def k(ctx: JobContext) -> str:
        barrier.wait()  # all four run at once
        return f"{trace.get_current_span().get_span_context().trace_id:032x}"

    tracer = trace.get_tracer("test")
    jobs = {}
    for i in range(4):
        with tracer.start_as_current_span(f"request {i}") as parent:
            jobs[client.enqueue(queue, "k").id] = parent.get_span_context().trace_id
    with running(worker):
        for job_id in jobs:
            wait_for(lambda job_id=job_id: client.get(job_id).state == "succeeded", timeout=15)
    for job_id, trace_id in jobs.items():
        assert client.get(job_id).result == f"{trace_id:032x}"
