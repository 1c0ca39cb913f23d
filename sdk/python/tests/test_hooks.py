"""Hooks around handlers (``@worker.before``, ``@worker.after``,
``@worker.on_error``) against a real server."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import wait_for
from test_worker import running, settled
from tether_client import (
    Client,
    Fatal,
    JobContext,
    Outcome,
    RetryAfter,
    Snooze,
    Worker,
)

# What an application's hooks set for its handlers: a log context (by a
# plain hook) and a session (by an async one).
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")
session: contextvars.ContextVar[str] = contextvars.ContextVar("session", default="-")


def test_before_hooks_set_context_the_handler_and_its_after_hooks_see(
    client: Client, queue: str
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    seen: Dict[str, Tuple[str, str]] = {}
    after: Dict[str, Tuple[str, str]] = {}

    @worker.before
    def log_context(ctx: JobContext) -> None:
        request_id.set(f"req-{ctx.payload}")

    @worker.before
    async def open_session(ctx: JobContext) -> None:
        await asyncio.sleep(0)
        session.set(f"session-{ctx.payload}")

    @worker.handler("sync")
    def sync_handler(ctx: JobContext) -> None:
        seen[ctx.payload] = (request_id.get(), session.get())

    @worker.handler("async")
    async def async_handler(ctx: JobContext) -> None:
        seen[ctx.payload] = (request_id.get(), session.get())

    @worker.after
    async def close_session(ctx: JobContext, outcome: Outcome) -> None:
        after[ctx.payload] = (request_id.get(), session.get())

    for kind in ("sync", "async"):
        for i in range(3):
            client.enqueue(queue, kind, f"{kind}{i}")
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 6, timeout=15)
    expected = {
        f"{kind}{i}": (f"req-{kind}{i}", f"session-{kind}{i}")
        for kind in ("sync", "async")
        for i in range(3)
    }
    assert seen == expected and after == expected
    # Nothing leaks out of a job's context into the worker's.
    assert (request_id.get(), session.get()) == ("-", "-")


def test_hooks_run_in_registration_order_around_the_handler(client: Client, queue: str) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    calls: List[str] = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            calls.append(what)

    worker.before(lambda ctx: note("before 1"))
    worker.before(lambda ctx: note("before 2"))
    worker.on_error(lambda ctx, error: note(f"on_error 1 {type(error).__name__}"))
    worker.on_error(lambda ctx, error: note("on_error 2"))
    worker.after(lambda ctx, outcome: note(f"after 1 {outcome.status}"))
    worker.after(lambda ctx, outcome: note("after 2"))

    @worker.handler("boom")
    def boom(ctx: JobContext) -> None:
        note("handler")
        raise KeyError("missing")

    job = client.enqueue(queue, "boom", max_attempts=1)
    with running(worker):
        settled(client, job.id, "failed")
    assert calls == [
        "before 1", "before 2", "handler", "on_error 1 KeyError", "on_error 2",
        "after 1 failed", "after 2",
    ]


def test_after_is_told_every_outcome(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=8, claim_wait=0.5)
    outcomes: Dict[str, Outcome] = {}
    errors: Dict[str, BaseException] = {}
    started = threading.Event()

    @worker.after
    def record(ctx: JobContext, outcome: Outcome) -> None:
        outcomes[ctx.kind] = outcome

    @worker.on_error
    async def report(ctx: JobContext, error: BaseException) -> None:
        errors[ctx.kind] = error

    worker.register("ok", lambda ctx: {"n": 1})

    @worker.handler("later")
    def later(ctx: JobContext) -> None:
        raise RetryAfter(60, "busy")

    @worker.handler("fails")
    def fails(ctx: JobContext) -> None:
        raise ValueError("bad input")

    @worker.handler("snoozes")
    async def snoozes(ctx: JobContext) -> None:
        raise Snooze(120)

    @worker.handler("slow")
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(10)

    @worker.handler("waits")
    def waits(ctx: JobContext) -> str:
        started.set()
        ctx.cancel_event.wait(10)
        return "stopped"

    ids = {
        kind: client.enqueue(
            queue, kind, max_attempts=1, timeout=0.3 if kind == "slow" else None
        ).id
        for kind in ("ok", "later", "fails", "snoozes", "slow", "waits")
    }
    with running(worker):
        assert started.wait(10)
        client.cancel(ids["waits"])
        wait_for(lambda: len(outcomes) == 6, timeout=15)
    assert outcomes["ok"] == Outcome("succeeded", result={"n": 1})
    assert outcomes["later"].status == "retry_after" and outcomes["later"].delay == 60
    assert isinstance(outcomes["later"].error, RetryAfter)
    fails_error = outcomes["fails"].error
    assert outcomes["fails"].status == "failed" and isinstance(fails_error, ValueError)
    assert outcomes["snoozes"].status == "snooze" and outcomes["snoozes"].delay == 120
    assert outcomes["slow"].status == "failed"
    assert isinstance(outcomes["slow"].error, TimeoutError)
    assert str(outcomes["slow"].error) == "timed out after 300 ms"
    assert outcomes["waits"].status == "cancelled" and outcomes["waits"].error is None
    # on_error: every outcome that carries an exception, the same one.
    assert set(errors) == {"later", "fails", "snoozes", "slow"}
    assert errors["fails"] is fails_error
    assert client.get(ids["waits"]).state == "cancelled"


@pytest.mark.parametrize("handler_kind", ["sync", "async"])
def test_a_raising_before_fails_the_job_as_the_handler_would(
    client: Client, queue: str, handler_kind: str
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    ran: List[Any] = []
    errors: List[BaseException] = []
    outcomes: List[Outcome] = []

    @worker.before
    async def check(ctx: JobContext) -> None:
        if ctx.payload == "no-session":
            raise ConnectionError("the database is down")
        if ctx.payload == "fatal":
            raise Fatal("refused for good")

    if handler_kind == "sync":
        worker.register("k", lambda ctx: ran.append(ctx.payload))
    else:

        async def handler(ctx: JobContext) -> None:
            ran.append(ctx.payload)

        worker.register("k", handler)
    worker.on_error(lambda ctx, error: errors.append(error))
    worker.after(lambda ctx, outcome: outcomes.append(outcome))
    down = client.enqueue(queue, "k", "no-session", max_attempts=1)
    fatal = client.enqueue(queue, "k", "fatal", max_attempts=5)
    fine = client.enqueue(queue, "k", "fine")
    with running(worker):
        failed = settled(client, down.id, "failed")
        refused = settled(client, fatal.id, "failed")
        wait_for(lambda: client.get(fine.id).state == "succeeded")
        wait_for(lambda: len(outcomes) == 3)
    assert ran == ["fine"]
    assert failed.state == "failed"
    # The error is the traceback from the hook's frame on, as a handler's.
    assert "ConnectionError: the database is down" in (failed.last_error or "")
    assert "in check" in (failed.last_error or "")
    assert refused.state == "failed" and refused.attempt == 1
    assert refused.last_error == "refused for good"
    assert sorted(type(e).__name__ for e in errors) == ["ConnectionError", "Fatal"]
    assert sorted(o.status for o in outcomes) == ["failed", "failed", "succeeded"]


def test_what_an_after_or_on_error_hook_raises_is_logged_and_changes_nothing(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    later: List[Optional[str]] = []

    @worker.after
    def broken(ctx: JobContext, outcome: Outcome) -> None:
        raise RuntimeError("the metrics backend is down")

    @worker.after
    async def still_runs(ctx: JobContext, outcome: Outcome) -> None:
        later.append(outcome.status)

    @worker.on_error
    def broken_too(ctx: JobContext, error: BaseException) -> None:
        raise RuntimeError("sentry is down")

    worker.register("ok", lambda ctx: "done")

    @worker.handler("fails")
    async def fails(ctx: JobContext) -> None:
        raise ValueError("bad")

    ok = client.enqueue(queue, "ok")
    failing = client.enqueue(queue, "fails", max_attempts=1)
    with caplog.at_level(logging.ERROR, logger="tether_client.worker"), running(worker):
        wait_for(lambda: client.get(ok.id).state == "succeeded")
        settled(client, failing.id, "failed")
        wait_for(lambda: len(later) == 2)
    assert client.get(ok.id).result == "done"
    assert "ValueError: bad" in (client.get(failing.id).last_error or "")
    assert sorted(later) == ["failed", "succeeded"]
    logged = [r for r in caplog.records if "hook" in r.getMessage()]
    assert len(logged) == 3, [r.getMessage() for r in logged]
    assert all(r.exc_info is not None for r in logged)
    texts = sorted(str(r.exc_info[1]) for r in logged if r.exc_info)
    assert texts == ["sentry is down", "the metrics backend is down",
                     "the metrics backend is down"]
    assert any("the after hook" in r.getMessage() and "broken" in r.getMessage()
               for r in logged)
