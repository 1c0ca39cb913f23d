"""The worker against a real server: the guarantees tether's Rust worker gives."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import httpx
import pytest

import tether_client
import tether_client._worker as worker_module
from conftest import Server, wait_for
from tether_client import (
    AsyncClient,
    ClaimedJob,
    Client,
    Fatal,
    InvalidArgument,
    Job,
    JobContext,
    NotFound,
    PermissionDenied,
    Retry,
    RetryAfter,
    Snooze,
    TransportError,
    Unauthenticated,
    Worker,
    WorkerObserver,
    batch_entry,
)
from tether_client.testing import TetherServer, start_server

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "worker.py"


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


def events(client: Client, job_id: str) -> List[str]:
    return [e.event for e in client.iter_events(job_id)]


def settled(client: Client, job_id: str, event: str) -> Any:
    """Waits until the job's history has ``event`` and it is not running."""

    def check() -> Any:
        job = client.get(job_id)
        return job if job.state != "running" and event in events(client, job_id) else None

    return wait_for(check, timeout=15)


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_sync_and_async_handlers(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)
    threads: List[str] = []

    @worker.handler("sync")
    def sync(job: JobContext) -> Dict[str, Any]:
        threads.append(threading.current_thread().name)
        return {"double": job.payload * 2, "attempt": job.attempt}

    @worker.handler("async")
    async def async_(job: JobContext) -> Any:
        await asyncio.sleep(0.01)
        return [job.kind, job.payload]

    ids = [client.enqueue(queue, "sync" if i % 2 else "async", i).id for i in range(10)]
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 10, timeout=15)
    for i, job_id in enumerate(ids):
        job = client.get(job_id)
        assert job.state == "succeeded" and job.attempt == 1
        assert job.result == ({"double": i * 2, "attempt": 1} if i % 2 else ["async", i])
        assert job.worker_id == worker.worker_id
    assert threads and all(name.startswith("tether-job-") for name in threads)


def test_claims_never_exceed_free_slots(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=2, claim_wait=0.5)
    release = threading.Event()
    peak = [0]
    now = [0]
    lock = threading.Lock()

    @worker.handler("block")
    def block(job: JobContext) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        release.wait(10)
        with lock:
            now[0] -= 1

    for i in range(6):
        client.enqueue(queue, "block", i)
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.running == 2)
        time.sleep(0.5)
        q = client.get_queue(queue)
        assert q.counts.running == 2 and q.counts.queued == 4
        release.set()
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 6, timeout=15)
    assert peak[0] == 2


def test_heartbeats_keep_a_job_beyond_its_lease_and_carry_progress(
    client: Client, queue: str
) -> None:
    worker = Worker(client, queue, concurrency=1, lease_ttl=1.0, claim_wait=0.5)

    @worker.handler("long")
    def long(job: JobContext) -> str:
        for i in range(7):
            job.progress({"step": i})
            job.cancel_event.wait(0.5)
        return "done"

    job = client.enqueue(queue, "long")
    with running(worker):
        seen = wait_for(lambda: client.get(job.id).progress, timeout=5)
        assert seen["step"] >= 0
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
    done = client.get(job.id)
    assert done.result == "done" and done.attempt == 1
    assert done.progress == {"step": 6} or done.progress["step"] >= 4
    # 3.5 s of work on a 1 s lease, never lost.
    assert ts(done.finished_at or "") > ts(done.started_at or "")
    assert (ts(done.finished_at or "") - ts(done.started_at or "")).total_seconds() > 3
    history = events(client, job.id)
    assert "lease_expired" not in history and "lease_lost" not in history
    assert history == ["enqueued", "claimed", "succeeded"]


def lease_ms(job: Any) -> int:
    """The lease the job's claim (or last heartbeat) granted, in ms."""
    return round((ts(job.lease_expires_at) - ts(job.heartbeat_at)).total_seconds() * 1000)


@pytest.mark.parametrize("style", ["sync", "async"])
def test_a_short_snooze_is_reported_to_the_server(
    client: Client, queue: str, style: str
) -> None:
    # However short, a snooze goes to the server: the history shows it, the
    # attempt is given back, and the job is claimed again when due. The old
    # in-process limit is accepted (with a warning) and hides nothing.
    with pytest.warns(DeprecationWarning, match="max_in_process_snooze"):
        worker = Worker(client, queue, concurrency=2, claim_wait=0.5, max_in_process_snooze=5.0)
    calls: List[Any] = []

    def body(job: JobContext) -> str:
        calls.append((time.monotonic(), job.attempt))
        if len(calls) == 1:
            raise Snooze(0.1)
        return "done"

    if style == "sync":
        worker.register("later", body)
    else:

        async def later(job: JobContext) -> str:
            return body(job)

        worker.register("later", later)

    job = client.enqueue(queue, "later")
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
    assert [attempt for _, attempt in calls] == [1, 1]
    assert calls[1][0] - calls[0][0] >= 0.1
    done = client.get(job.id)
    assert done.attempt == 1 and done.result == "done"
    assert events(client, job.id) == ["enqueued", "claimed", "snoozed", "claimed", "succeeded"]


@pytest.mark.parametrize("style", ["sync", "async"])
def test_the_queues_lease_applies_and_is_heartbeated_at_a_third(
    client: Client, queue: str, style: str
) -> None:
    # A worker given no lease_ttl names none at claim: the job gets the 2 s
    # lease configured on its queue (not a worker default of 30 s), and is
    # heartbeated every third of it, so a 3 s handler keeps it while the
    # server reaps lapsed leases every 200 ms.
    client.configure(queue, default_lease_ttl=2)
    source: Any = client if style == "sync" else AsyncClient(client.url, client.key)
    worker = Worker(source, queue, concurrency=1, claim_wait=0.5)
    assert worker.lease_ttl is None
    claimed: List[int] = []
    if style == "sync":

        @worker.handler("long")
        def long(job: JobContext) -> str:
            claimed.append(lease_ms(job.job))
            job.cancel_event.wait(3.0)
            return "done"

    else:

        @worker.handler("long")
        async def long_async(job: JobContext) -> str:
            claimed.append(lease_ms(job.job))
            await asyncio.sleep(3.0)
            return "done"

    job = client.enqueue(queue, "long")
    leases: List[int] = []
    beats = set()

    def watch() -> bool:
        j = client.get(job.id)
        if j.state == "running" and j.lease_expires_at and j.heartbeat_at:
            leases.append(lease_ms(j))
            beats.add(j.heartbeat_at)
        return j.state not in ("queued", "running")

    with running(worker):
        wait_for(watch, timeout=20, interval=0.1)
    assert claimed == [2000], "the claim granted the queue's lease"
    assert leases and all(lease == 2000 for lease in leases), leases
    # Heartbeats moved the lease on (about every 0.67 s over a 3 s run).
    assert len(beats) >= 2, beats
    done = client.get(job.id)
    assert done.state == "succeeded" and done.attempt == 1 and done.result == "done"
    assert events(client, job.id) == ["enqueued", "claimed", "succeeded"]


def test_an_explicit_lease_ttl_wins_over_the_queues(client: Client, queue: str) -> None:
    client.configure(queue, default_lease_ttl=2)
    worker = Worker(client, queue, concurrency=1, lease_ttl=5.0, claim_wait=0.5)
    claimed: List[int] = []

    @worker.handler("k")
    def k(job: JobContext) -> None:
        claimed.append(lease_ms(job.job))

    job = client.enqueue(queue, "k")
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
    assert claimed == [5000]


def test_retry_after_snooze_fatal_and_errors(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)

    @worker.handler("outcome")
    def outcome(job: JobContext) -> None:
        mode = job.payload
        if mode == "retry_after":
            raise RetryAfter(30, "upstream said 30 s")
        if mode == "snooze":
            raise Snooze(30)
        if mode == "fatal":
            raise Fatal("no such user")
        if mode == "retry":
            raise Retry("upstream answered 502, exactly this")
        if mode == "not_json":
            return object()  # type: ignore[return-value]
        if mode == "too_large":
            return "x" * (1 << 20)  # type: ignore[return-value]
        raise ValueError("boom")

    ids = {m: client.enqueue(queue, "outcome", m, max_attempts=5).id
           for m in ("retry_after", "snooze", "fatal", "retry", "error", "not_json", "too_large")}
    nohandler = client.enqueue(queue, "unknown-kind", max_attempts=5)
    with running(worker):
        ra = settled(client, ids["retry_after"], "retry_scheduled")
        sn = settled(client, ids["snooze"], "snoozed")
        fa = settled(client, ids["fatal"], "failed")
        rt = settled(client, ids["retry"], "retry_scheduled")
        er = settled(client, ids["error"], "retry_scheduled")
        nh = settled(client, nohandler.id, "retry_scheduled")
        nj = settled(client, ids["not_json"], "retry_scheduled")
        tl = settled(client, ids["too_large"], "retry_scheduled")
    # RetryAfter: the attempt counts, and the retry is exactly 30 s later.
    assert ra.state == "queued" and ra.attempt == 1 and ra.last_error == "upstream said 30 s"
    assert abs((ts(ra.run_at) - ts(ra.updated_at)).total_seconds() - 30) < 1
    # Snooze: the attempt is given back.
    assert sn.state == "queued" and sn.attempt == 0
    assert abs((ts(sn.run_at) - ts(sn.updated_at)).total_seconds() - 30) < 1
    # Fatal: no more attempts, though 4 were left.
    assert fa.state == "failed" and fa.attempt == 1 and fa.last_error == "no such user"
    # Retry: a retryable failure with exactly the message, no traceback.
    assert rt.state == "queued" and rt.attempt == 1
    assert rt.last_error == "upstream answered 502, exactly this"
    detail = [e.detail for e in client.iter_events(rt.id) if e.event == "retry_scheduled"]
    assert detail == ["upstream answered 502, exactly this"]
    # Anything else: a retryable failure carrying the traceback's tail.
    assert er.state == "queued" and er.attempt == 1
    assert er.last_error and "ValueError: boom" in er.last_error and "Traceback" in er.last_error
    assert nh.state == "queued" and "no handler for kind unknown-kind" in (nh.last_error or "")
    # A result that is not JSON, or that the server refuses, fails the attempt.
    assert nj.state == "queued" and "not JSON" in (nj.last_error or "")
    assert tl.state == "queued" and "could not be stored" in (tl.last_error or "")


def test_cancel_reaches_a_running_handler(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=2, lease_ttl=1.5, claim_wait=0.5)
    noticed: Dict[str, float] = {}

    @worker.handler("async")
    async def wait_async(job: JobContext) -> str:
        await asyncio.wait_for(job.wait_cancelled(), 20)
        noticed["async"] = time.monotonic()
        return "stopped"

    @worker.handler("sync")
    def wait_sync(job: JobContext) -> str:
        assert job.cancel_event.wait(20)
        assert job.cancelled
        noticed["sync"] = time.monotonic()
        return "stopped"

    a = client.enqueue(queue, "async")
    s = client.enqueue(queue, "sync")
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.running == 2)
        asked = time.monotonic()
        client.cancel(a.id)
        client.cancel(s.id)
        ja = settled(client, a.id, "cancelled")
        js = settled(client, s.id, "cancelled")
    assert ja.state == js.state == "cancelled"
    # The worker's event stream (or a heartbeat, every 0.5 s) carried the request.
    assert set(noticed) == {"async", "sync"}
    assert max(noticed.values()) - asked < 3


def test_a_handler_that_ignores_a_cancel_is_reported_after_a_lease(
    client: Client, queue: str
) -> None:
    worker = Worker(client, queue, concurrency=1, lease_ttl=1.0, claim_wait=0.5)
    finished = threading.Event()

    @worker.handler("deaf")
    async def deaf(job: JobContext) -> str:
        await asyncio.sleep(30)  # never looks at job.cancelled
        finished.set()
        return "too late"

    job = client.enqueue(queue, "deaf")
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "running")
        asked = time.monotonic()
        client.cancel(job.id)
        done = settled(client, job.id, "cancelled")
        # The stream (or a heartbeat) brings the request, then one lease TTL.
        assert 0.9 < time.monotonic() - asked < 5
    assert done.state == "cancelled" and not finished.is_set()


# ---- cancels and progress within moments ----------------------------------
# A 300 s lease is heartbeated every 100 s: what reaches the handler or the
# server within the bounds below (generous, so a stalled host cannot fail
# them) came by the worker's event stream or its progress heartbeat.

LONG_LEASE = 300.0


@pytest.mark.parametrize("style", ["sync", "async"])
def test_a_cancel_reaches_the_handler_without_waiting_for_a_heartbeat(
    client: Client, queue: str, style: str
) -> None:
    worker = Worker(client, queue, concurrency=1, lease_ttl=LONG_LEASE, claim_wait=0.5)
    started = threading.Event()
    noticed: List[float] = []

    if style == "sync":

        def handler(job: JobContext) -> str:
            started.set()
            assert job.cancel_event.wait(LONG_LEASE)
            noticed.append(time.monotonic())
            return "stopped"

        worker.register("k", handler)
    else:

        async def handler_async(job: JobContext) -> str:
            started.set()
            await asyncio.wait_for(job.wait_cancelled(), LONG_LEASE)
            noticed.append(time.monotonic())
            return "stopped"

        worker.register("k", handler_async)

    job = client.enqueue(queue, "k")
    with running(worker):
        assert started.wait(30)
        asked = time.monotonic()
        client.cancel(job.id)
        wait_for(lambda: noticed, timeout=60)
        done = settled(client, job.id, "cancelled")
    assert noticed[0] - asked < 60  # a heartbeat would take 100 s
    assert done.state == "cancelled" and done.attempt == 1
    assert events(client, job.id) == ["enqueued", "claimed", "cancel_requested", "cancelled"]


def test_progress_reaches_the_server_within_moments_in_few_heartbeats(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two handlers (sync and async) report progress a thousand times a
    # second: heartbeats carry it at most every PROGRESS_EVERY (0.5 s), the
    # jobs' progress together in one batch.
    real_beat = AsyncClient.heartbeat_batch
    beats: List[Tuple[float, int]] = []

    async def heartbeat_batch(self: AsyncClient, items: Any) -> Any:
        items = list(items)
        beats.append((time.monotonic(), len(items)))
        return await real_beat(self, items)

    monkeypatch.setattr(AsyncClient, "heartbeat_batch", heartbeat_batch)
    worker = Worker(client, queue, concurrency=2, lease_ttl=LONG_LEASE, claim_wait=0.5)
    go = threading.Event()
    release = threading.Event()
    bursts: Dict[str, Tuple[float, float]] = {}

    @worker.handler("sync")
    def report_sync(job: JobContext) -> str:
        job.progress({"step": "first"})
        assert go.wait(60)
        t0 = time.monotonic()
        for i in range(1000):
            job.progress({"step": i})
            time.sleep(0.001)
        bursts["sync"] = (t0, time.monotonic())
        job.progress({"step": "last"})
        assert release.wait(60)
        return "ok"

    @worker.handler("async")
    async def report_async(job: JobContext) -> str:
        job.progress({"step": "first"})
        while not go.is_set():
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        for i in range(1000):
            job.progress({"step": i})
            await asyncio.sleep(0.001)
        bursts["async"] = (t0, time.monotonic())
        job.progress({"step": "last"})
        while not release.is_set():
            await asyncio.sleep(0.01)
        return "ok"

    def progress_is(step: Any) -> bool:
        return all(client.get(j.id).progress == {"step": step} for j in jobs)

    jobs = [client.enqueue(queue, "sync"), client.enqueue(queue, "async")]
    with running(worker):
        wait_for(lambda: progress_is("first"), timeout=60)  # a heartbeat: 100 s
        go.set()
        wait_for(lambda: len(bursts) == 2, timeout=60)
        wait_for(lambda: progress_is("last"), timeout=60)
        release.set()
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 2, timeout=30)
    start = min(t0 for t0, _ in bursts.values())
    end = max(t1 for _, t1 in bursts.values())
    during = [n for at, n in beats if start <= at <= end]
    # At most one heartbeat per 0.5 s (and one at the start of the burst):
    # never one per report, nor one per job. A stalled host sends fewer.
    assert len(during) <= (end - start) / 0.5 + 2, (during, end - start)
    assert max(n for _, n in beats) == 2  # both jobs' progress in one batch
    for j in jobs:
        assert client.get(j.id).progress == {"step": "last"}


@contextmanager
def every_stream_taken(server: Server) -> Iterator[Callable[[], None]]:
    """Holds as many event streams of the tenant open as the server allows
    (it refuses the next with 429 ``too_many_requests``); answers what
    closes them."""
    with ExitStack() as held:
        http = held.enter_context(
            httpx.Client(
                base_url=server.url,
                headers={"authorization": f"Bearer {server.key}"},
                limits=httpx.Limits(max_connections=None),
                timeout=10,
            )
        )
        for _ in range(1000):
            resp = held.enter_context(http.stream("GET", "/v1/events"))
            if resp.status_code == 429:
                break
            assert resp.status_code == 200
        else:
            raise AssertionError("the server never refused an event stream")
        yield held.close


def stream_refusals(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if "stream of cancel requests failed" in r.getMessage()]


def test_a_refused_event_stream_leaves_the_worker_on_heartbeats(
    server: Server,
    client: Client,
    queue: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The tenant holds every stream the server allows: the worker's is
    # refused (429), which it logs once and tries again (every 0.2 s here)
    # while it runs jobs and hears of cancels at heartbeats. Once a stream
    # is free, it opens its own and cancels come by it again.
    monkeypatch.setattr(worker_module, "STREAM_RETRY_MIN", 0.2)
    monkeypatch.setattr(worker_module, "STREAM_RETRY_MAX", 0.2)
    worker = Worker(client, queue, concurrency=2, claim_wait=0.5)
    started: Dict[str, threading.Event] = {}

    @worker.handler("quick")
    def quick(job: JobContext) -> int:
        return int(job.payload) * 2

    @worker.handler("stoppable")
    def stoppable(job: JobContext) -> str:
        started[job.payload].set()
        assert job.cancel_event.wait(LONG_LEASE)
        return "stopped"

    def cancel_running(name: str, lease: float) -> float:
        """Runs a job (on the queue's ``lease``) until it is cancelled;
        answers how long it took from the cancel to the job's end."""
        client.configure(queue, default_lease_ttl=lease)
        started[name] = threading.Event()
        job = client.enqueue(queue, "stoppable", name)
        assert started[name].wait(30)
        asked = time.monotonic()
        client.cancel(job.id)
        assert settled(client, job.id, "cancelled").state == "cancelled"
        return time.monotonic() - asked

    with caplog.at_level("DEBUG", logger="tether_client.worker"):
        with every_stream_taken(server) as free_them, running(worker):
            ids = [client.enqueue(queue, "quick", i).id for i in range(6)]
            wait_for(lambda: client.get_queue(queue).counts.succeeded == 6, timeout=30)
            assert [client.get(i).result for i in ids] == [0, 2, 4, 6, 8, 10]
            # A 1 s lease: a heartbeat every third of a second brings it.
            cancel_running("by heartbeat", 1.0)
            wait_for(lambda: len(stream_refusals(caplog)) >= 3, timeout=30)
            assert worker._stream_opens == 0
            free_them()
            wait_for(lambda: worker._stream_opens > 0, timeout=30)
            assert cancel_running("by the stream", LONG_LEASE) < 60  # a heartbeat: 100 s
    warned = [r for r in stream_refusals(caplog) if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "too_many_requests" in warned[0].getMessage()


def test_reports_survive_a_server_outage(tmp_path: Path) -> None:
    """The server goes away while a handler runs: the worker keeps its result,
    retries the report until the server is back, and claims again after."""
    data = str(tmp_path / "data")
    first_server = start_server(data, log_path=tmp_path / "1.log")
    url, key = first_server.url, first_server.key
    port = url.rsplit(":", 1)[1]
    release = threading.Event()
    second_server: Optional[TetherServer] = None
    try:
        with Client(url, key) as client:
            worker = Worker(client, "outage", concurrency=2, lease_ttl=30, claim_wait=0.5)

            @worker.handler("k")
            def handler(job: JobContext) -> str:
                if job.payload == "first":
                    release.wait(20)
                return f"done {job.payload}"

            first = client.enqueue("outage", "k", "first")
            with running(worker):
                wait_for(lambda: client.get(first.id).state == "running")
                first_server.process.terminate()
                assert first_server.process.wait(10) == 0
                release.set()
                time.sleep(1.0)  # the report fails meanwhile, and is retried
                second_server = start_server(
                    data, listen=f"127.0.0.1:{port}", log_path=tmp_path / "2.log"
                )
                done = wait_for(
                    lambda: client.get(first.id).state == "succeeded" and client.get(first.id),
                    timeout=20,
                )
                assert done.result == "done first" and done.attempt == 1
                second = client.enqueue("outage", "k", "second")
                wait_for(lambda: client.get(second.id).state == "succeeded", timeout=10)
    finally:
        release.set()
        for started in (first_server, second_server):
            if started is not None:
                started.stop()


def test_failing_heartbeats_back_off(tmp_path: Path) -> None:
    """While the server is down, an overdue heartbeat is tried again after
    the backoff (at most its interval), not as fast as connections are
    refused. A stalled host makes fewer tries, never more."""

    class Heartbeats(WorkerObserver):
        def __init__(self) -> None:
            self.failed = 0

        def on_error(self, op: str, code: str, error: BaseException) -> None:
            if op == "heartbeat":
                self.failed += 1

    data = str(tmp_path / "data")
    first_server = start_server(data, log_path=tmp_path / "1.log")
    url, key = first_server.url, first_server.key
    port = url.rsplit(":", 1)[1]
    release = threading.Event()
    seen = Heartbeats()
    second_server: Optional[TetherServer] = None
    try:
        with Client(url, key) as client:
            # A heartbeat every third of a second.
            worker = Worker(client, "beats", lease_ttl=1, claim_wait=0.5, observer=seen)

            @worker.handler("k")
            def handler(job: JobContext) -> str:
                release.wait(20)
                return "done"

            job = client.enqueue("beats", "k")
            with running(worker):
                wait_for(lambda: client.get(job.id).state == "running")
                first_server.process.terminate()
                assert first_server.process.wait(10) == 0
                before = seen.failed
                # From the first failure on: a stalled host cannot end the
                # outage untried.
                wait_for(lambda: seen.failed > before, timeout=30)
                time.sleep(2.0)
                tries = seen.failed - before
                # 0.1 s doubling, capped at the 1/3 s interval: about 8 in 2 s.
                assert 1 <= tries <= 40, f"{tries} failed heartbeats in 2 s of outage"
                second_server = start_server(
                    data, listen=f"127.0.0.1:{port}", log_path=tmp_path / "2.log"
                )
                release.set()
                wait_for(lambda: client.get(job.id).state == "succeeded", timeout=20)
    finally:
        release.set()
        for started in (first_server, second_server):
            if started is not None:
                started.stop()


def test_a_wrong_key_fails_at_start(server: Server, queue: str) -> None:
    with Client(server.url, "tth_wrong") as bad:
        worker = Worker(bad, queue)
        with pytest.raises(Unauthenticated):
            worker.run()


def test_job_timeout(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=1, claim_wait=0.5)

    @worker.handler("slow")
    async def slow(job: JobContext) -> None:
        await asyncio.sleep(30)

    job = client.enqueue(queue, "slow", timeout=0.3, max_attempts=1)
    with running(worker):
        done = settled(client, job.id, "failed")
    assert done.state == "failed" and done.last_error == "timed out after 300 ms"


def test_lease_lost_discards_the_result(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=1, lease_ttl=1.0, claim_wait=0.5)
    release = threading.Event()
    returned = threading.Event()

    async def no_heartbeats() -> None:
        await asyncio.sleep(0.05)  # nothing sent: the jobs stay due

    worker._heartbeat_cycle = no_heartbeats  # type: ignore[method-assign]

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        release.wait(20)
        returned.set()
        return "stale"

    job = client.enqueue(queue, "k")
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "running")
        # Without heartbeats the lease lapses and the reaper requeues the job:
        # a new owner takes it.
        thief = wait_for(lambda: client.claim(queue, "thief", wait=1), timeout=15)[0]
        assert thief.id == job.id
        release.set()
        assert returned.wait(10)
        wait_for(lambda: "lease_lost" in events(client, job.id), timeout=10)
        time.sleep(0.3)
        stolen = client.get(job.id)
        assert stolen.state == "running" and stolen.worker_id == "thief"
        assert stolen.result is None
    assert client.complete(job.id, thief.lease_token, "fresh").result == "fresh"
    assert events(client, job.id).count("succeeded") == 1


def test_shutdown_lets_running_handlers_finish(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=2, claim_wait=0.5, shutdown_grace=10)
    started = threading.Event()

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        started.set()
        time.sleep(1.0)
        return "finished"

    job = client.enqueue(queue, "k")
    with running(worker):
        assert started.wait(10)
    # The worker returned only after the job was reported.
    done = client.get(job.id)
    assert done.state == "succeeded" and done.result == "finished"


def test_sigterm_hands_back_unfinished_jobs(server: Server, client: Client, queue: str) -> None:
    env = dict(os.environ)
    env.update(
        TETHER_URL=server.url, TETHER_KEY=server.key, TETHER_QUEUE=queue,
        TETHER_CONCURRENCY="4", TETHER_SHUTDOWN_GRACE="2", TETHER_CLAIM_WAIT="1",
    )
    long_ids = [client.enqueue(queue, "sleep", {"seconds": 60}).id for _ in range(2)]
    short = client.enqueue(queue, "sleep", {"seconds": 1.0})
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(lambda: client.get_queue(queue).counts.running == 3, timeout=15)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert elapsed < 10, out
    # The short job finished within the grace period.
    assert client.get(short.id).state == "succeeded"
    # The others were handed back: queued again, attempt given back, history says so.
    for job_id in long_ids:
        job = client.get(job_id)
        assert job.state == "queued" and job.attempt == 0, out
        assert events(client, job_id) == ["enqueued", "claimed", "snoozed"]
    q = client.get_queue(queue)
    assert q.counts.running == 0 and q.counts.queued == 2


def test_second_signal_aborts_without_handing_back(
    server: Server, client: Client, queue: str
) -> None:
    env = dict(os.environ)
    env.update(
        TETHER_URL=server.url, TETHER_KEY=server.key, TETHER_QUEUE=queue,
        TETHER_SHUTDOWN_GRACE="60", TETHER_CLAIM_WAIT="1",
    )
    job = client.enqueue(queue, "sleep", {"seconds": 60})
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLE)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(lambda: client.get(job.id).state == "running", timeout=15)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "aborting" in out
    # Nothing was handed back: the job stays with the dead worker until its
    # lease lapses.
    assert client.get(job.id).state == "running"
    assert "snoozed" not in events(client, job.id)


def test_worker_in_an_asyncio_program(server: Server, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.key) as client:
            worker = Worker(client, queue, concurrency=3, claim_wait=0.5)

            @worker.handler("k")
            async def handler(job: JobContext) -> int:
                return int(job.payload) + 1

            jobs = [await client.enqueue(queue, "k", i) for i in range(5)]
            run = asyncio.ensure_future(worker.run_async(handle_signals=False))
            for j in jobs:
                for _ in range(200):
                    got = await client.get(j.id)
                    if got.state == "succeeded":
                        break
                    await asyncio.sleep(0.05)
                assert got.state == "succeeded" and got.result == got.payload + 1
            worker.stop()
            await asyncio.wait_for(run, 10)

    asyncio.run(main())


class Recorder(WorkerObserver):
    """Keeps every observer call, in order, with what happened around them."""

    def __init__(self) -> None:
        self.calls: List[Any] = []
        self.lock = threading.Lock()

    def add(self, *call: Any) -> None:
        with self.lock:
            self.calls.append(call)

    def on_claim(self, worker_id: str, jobs: List[ClaimedJob]) -> None:
        self.add("claim", worker_id, [(j.id, j.lease_token, j.attempt) for j in jobs])

    def on_error(self, op: str, code: str, error: BaseException) -> None:
        self.add("error", op, code, type(error).__name__)

    def on_lease_lost(self, op: str, job_id: str, lease_token: str) -> None:
        self.add("lost", op, job_id, lease_token)

    def on_reports_sent(self, via: str, completions: int, failures: int) -> None:
        self.add("sent", via, completions, failures)

    def sent(self, via: str) -> List[Any]:
        """(completions, failures) of each request ``via`` that carried reports."""
        return [(c, f) for v, c, f in self.of("sent") if v == via]

    def of(self, kind: str) -> List[Any]:
        with self.lock:
            return [c[1:] for c in self.calls if c[0] == kind]


def test_observer_sees_each_claim_before_its_handler_starts(client: Client, queue: str) -> None:
    seen = Recorder()
    worker = Worker(client, queue, concurrency=3, claim_wait=0.5, observer=seen)

    @worker.handler("k")
    def handler(job: JobContext) -> None:
        seen.add("start", job.id)

    ids = {client.enqueue(queue, "k", i).id for i in range(6)}
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 6, timeout=15)
    claims = seen.of("claim")
    assert claims and all(worker_id == worker.worker_id for worker_id, _ in claims)
    claimed = [job for _, jobs in claims for job in jobs]
    # Each job once, with the token the server recorded (attempt 1)...
    assert sorted(j[0] for j in claimed) == sorted(ids)
    assert all(attempt == 1 and token for _, token, attempt in claimed)
    # ...and reported before its handler started.
    started = {c[1]: i for i, c in enumerate(seen.calls) if c[0] == "start"}
    for i, c in enumerate(seen.calls):
        if c[0] == "claim":
            assert all(i < started[job_id] for job_id, _, _ in c[2])
    assert seen.of("error") == [] and seen.of("lost") == []


def test_observer_sees_every_lease_lost_report(client: Client, queue: str) -> None:
    # Without heartbeats the leases lapse and a thief takes the jobs: the
    # complete, fail and snooze the worker then sends each answer lease_lost.
    seen = Recorder()
    worker = Worker(client, queue, concurrency=3, lease_ttl=1.0, claim_wait=0.5, observer=seen)
    release = threading.Event()

    async def no_heartbeats() -> None:
        await asyncio.sleep(0.05)  # nothing sent: the jobs stay due

    worker._heartbeat_cycle = no_heartbeats  # type: ignore[method-assign]

    @worker.handler("k")
    async def handler(job: JobContext) -> str:
        while not release.is_set():
            await asyncio.sleep(0.02)
        if job.payload == "fail":
            raise Retry("too late")
        if job.payload == "snooze":
            raise Snooze(30)
        return "stale"

    ids = {client.enqueue(queue, "k", how).id: how for how in ("complete", "fail", "snooze")}
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.running == 3)
        stolen: List[Any] = []
        wait_for(lambda: stolen.extend(client.claim(queue, "thief", limit=3, wait=0.5))
                 or len(stolen) == 3, timeout=15)
        release.set()
        wait_for(lambda: len(seen.of("lost")) == 3, timeout=15)
    tokens = {job_id: token for _, jobs in seen.of("claim") for job_id, token, _ in jobs}
    assert sorted(seen.of("lost")) == sorted(
        (how, job_id, tokens[job_id]) for job_id, how in ids.items()
    )
    assert sorted(seen.of("error")) == sorted(
        (how, "lease_lost", "LeaseLost") for how in ("complete", "fail", "snooze")
    )
    # The thief's tokens still own the jobs: nothing the worker sent counted.
    for job in stolen:
        assert client.get(job.id).worker_id == "thief"


def test_observer_sees_a_heartbeat_lease_lost_in_an_asyncio_program(
    server: Server, queue: str
) -> None:
    seen = Recorder()

    async def main() -> None:
        async with AsyncClient(server.url, server.key) as client:
            worker = Worker(client, queue, concurrency=1, lease_ttl=1.0, claim_wait=0.5,
                            observer=seen)
            real_cycle = worker._heartbeat_cycle
            paused = [True]

            async def cycle() -> Optional[float]:
                if paused[0]:
                    await asyncio.sleep(0.05)  # nothing sent: the job stays due
                    return None
                return await real_cycle()

            worker._heartbeat_cycle = cycle  # type: ignore[method-assign]

            @worker.handler("k")
            async def handler(job: JobContext) -> str:
                await asyncio.wait_for(job.wait_cancelled(), 20)
                return "stale"

            job = await client.enqueue(queue, "k")
            run = asyncio.ensure_future(worker.run_async(handle_signals=False))
            for _ in range(200):
                if (await client.get(job.id)).worker_id == worker.worker_id:
                    break
                await asyncio.sleep(0.05)
            thief: List[Any] = []
            for _ in range(300):
                thief = await client.claim(queue, "thief", wait=0.1)
                if thief:
                    break
            assert thief and thief[0].id == job.id
            paused[0] = False  # the next heartbeat hears of it
            for _ in range(200):
                if seen.of("lost"):
                    break
                await asyncio.sleep(0.05)
            worker.stop()
            await asyncio.wait_for(run, 10)
            assert (await client.get(job.id)).worker_id == "thief"

    asyncio.run(main())
    token = seen.of("claim")[0][1][0][1]
    lost = seen.of("lost")
    assert lost == [("heartbeat", lost[0][1], token)]
    assert ("heartbeat", "lease_lost", "LeaseLost") in seen.of("error")


def test_observer_sees_transport_errors_and_cannot_break_the_worker(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on a port just closed: every claim try fails.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    seen = Recorder()
    with Client(f"http://127.0.0.1:{port}", "tth_nobody", timeout=2) as dead:
        worker = Worker(dead, queue, claim_wait=0.5, observer=seen)
        with running(worker):
            wait_for(lambda: len(seen.of("error")) >= 2, timeout=10)
    assert set(seen.of("error")) == {("claim", "transport", TransportError.__name__)}

    class Broken(WorkerObserver):
        def on_claim(self, worker_id: str, jobs: List[ClaimedJob]) -> None:
            raise RuntimeError("observer bug")

        def on_error(self, op: str, code: str, error: BaseException) -> None:
            raise RuntimeError("observer bug")

    worker = Worker(client, queue, concurrency=2, claim_wait=0.5, observer=Broken())

    @worker.handler("k")
    def handler(job: JobContext) -> int:
        return int(job.payload)

    ids = [client.enqueue(queue, "k", i).id for i in range(4)]
    with caplog.at_level("ERROR", logger="tether_client.worker"), running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 4, timeout=15)
    assert [client.get(i).result for i in ids] == [0, 1, 2, 3]
    assert "on_claim raised" in caplog.text


# ---- reports ride claims ------------------------------------------------------


def http_requests(client: Client, route: str) -> int:
    """Requests the server has answered on ``route`` (a route template), read
    from its Prometheus histogram ``tether_http_request_duration_seconds``."""
    total = 0
    for line in client.metrics().splitlines():
        if line.startswith("tether_http_request_duration_seconds_count{") and (
            f'route="{route}"' in line
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def carrying(kwargs: Dict[str, Any]) -> bool:
    return bool(kwargs.get("completions") or kwargs.get("failures"))


def test_the_worker_sends_its_reports_with_its_claims(client: Client, queue: str) -> None:
    # Slots free as handlers end, and the claim that fills them carries their
    # completions and failures: far fewer requests than a report route each.
    seen = Recorder()
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5, observer=seen)

    @worker.handler("k")
    async def handler(job: JobContext) -> int:
        if job.payload % 10 == 0:
            raise Fatal("a tenth fail")
        return int(job.payload)

    n = 200
    client.enqueue_batch([batch_entry(queue, "k", i) for i in range(n)])
    complete_before = http_requests(client, "/v1/jobs/complete")
    fail_before = http_requests(client, "/v1/jobs/{id}/fail")
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == n - n // 10, timeout=60)
        wait_for(lambda: client.get_queue(queue).counts.failed == n // 10, timeout=10)
    carried = seen.sent("claim")
    alone_complete = seen.sent("complete")
    alone_fail = seen.sent("fail")
    # Each report went once (no errors, nothing resent), by a claim or alone.
    assert seen.of("error") == [] and seen.of("lost") == []
    assert sum(c for c, _ in carried) + sum(c for c, _ in alone_complete) == n - n // 10
    assert sum(f for _, f in carried) + sum(f for _, f in alone_fail) == n // 10
    # Most rode claims: without carrying, 4 slots make at least 45 complete requests.
    assert sum(c for c, _ in carried) >= (n - n // 10) // 2, seen.of("sent")
    assert sum(f for _, f in carried) >= 1, seen.of("sent")
    assert len(alone_complete) < n // 20, seen.of("sent")
    # The server saw the same: only the reports no claim took used their routes.
    assert http_requests(client, "/v1/jobs/complete") - complete_before == len(alone_complete)
    assert http_requests(client, "/v1/jobs/{id}/fail") - fail_before == len(alone_fail)
    for job in client.iter_jobs(queue=queue):
        assert job.attempt == 1
        assert job.result == (None if job.payload % 10 == 0 else job.payload)
        assert events(client, job.id) == [
            "enqueued", "claimed", "failed" if job.payload % 10 == 0 else "succeeded"
        ]


def test_a_report_does_not_wait_for_a_long_poll(client: Client, queue: str) -> None:
    # The worker long-polls (5 s) with a free slot when the job ends: no claim
    # is coming soon, so the completion goes at once by its own route.
    seen = Recorder()
    worker = Worker(client, queue, concurrency=2, claim_wait=5.0, observer=seen)
    ended: List[float] = []

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        time.sleep(0.2)  # the worker's next claim is a long-poll by now
        ended.append(time.monotonic())
        return "ok"

    with running(worker):
        time.sleep(0.3)
        job = client.enqueue(queue, "k")
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=10, interval=0.01)
        took = time.monotonic() - ended[0]
    # Waiting for the long-poll would take most of its 5 s; a stalled host
    # may take a second or two without that fault.
    assert took < 4.0, took
    assert seen.sent("complete") == [(1, 0)] and seen.sent("claim") == []


def test_a_report_waits_only_moments_for_a_slow_claim(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A claim carrying a report is slow (3 s): a report made meanwhile does
    # not wait for it, it goes by its own route after CARRY_WAIT.
    real_claim = AsyncClient.claim

    async def claim(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        if carrying(kwargs):
            await asyncio.sleep(5.0)
        return await real_claim(self, *args, **kwargs)

    monkeypatch.setattr(AsyncClient, "claim", claim)
    seen = Recorder()
    worker = Worker(client, queue, concurrency=2, claim_wait=0.5, observer=seen)
    ended: Dict[str, float] = {}

    @worker.handler("k")
    async def handler(job: JobContext) -> str:
        await asyncio.sleep(job.payload)
        ended[job.id] = time.monotonic()
        return "ok"

    quick = client.enqueue(queue, "k", 0)
    slow = client.enqueue(queue, "k", 0.5)
    with running(worker):
        wait_for(lambda: client.get(slow.id).state == "succeeded", timeout=15, interval=0.01)
        took = time.monotonic() - ended[slow.id]
        wait_for(lambda: client.get(quick.id).state == "succeeded", timeout=15)
    # Waiting for the slow claim would take up to its 5 s; a stalled host
    # may take a second or two without that fault.
    assert took < 3.5, took
    assert (1, 0) in seen.sent("claim") and (1, 0) in seen.sent("complete")
    assert seen.of("error") == []


@pytest.mark.parametrize("report", ["complete", "fail"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_the_reports_of_a_claim_lost_in_transit_are_sent_again(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch, report: str, when: str
) -> None:
    # The claim carrying the report gets no answer: it was lost before the
    # server saw it, or after the server applied it. Either way the report
    # goes again (by its own route: resending is safe) and counts once.
    real_claim = AsyncClient.claim
    cut: List[Dict[str, Any]] = []

    async def claim(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        if carrying(kwargs) and not cut:
            cut.append(kwargs)
            if when == "after":
                await real_claim(self, *args, **kwargs)
            raise TransportError("connection reset (test)")
        return await real_claim(self, *args, **kwargs)

    monkeypatch.setattr(AsyncClient, "claim", claim)
    seen = Recorder()
    worker = Worker(client, queue, concurrency=1, claim_wait=0.5, observer=seen)

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        if report == "fail":
            raise Fatal("it fails")
        return "ok"

    job = client.enqueue(queue, "k")
    end = "succeeded" if report == "complete" else "failed"
    with running(worker):
        wait_for(lambda: client.get(job.id).state == end, timeout=15)
        time.sleep(0.3)
    assert len(cut) == 1
    assert seen.of("error") == [("claim", "transport", "TransportError")]
    assert seen.sent(report) == [(1, 0) if report == "complete" else (0, 1)]
    assert seen.of("lost") == []
    done = client.get(job.id)
    assert done.attempt == 1 and done.result == ("ok" if report == "complete" else None)
    assert events(client, job.id) == ["enqueued", "claimed", end]


def test_a_server_that_refuses_reports_with_claims_gets_them_alone(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An older server refuses the claim's unknown fields (400): the reports
    # go by their own routes and the worker stops carrying reports.
    real_claim = AsyncClient.claim

    async def claim(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        if carrying(kwargs):
            raise InvalidArgument(
                "malformed JSON body: unknown field `complete`, expected one of "
                "`worker_id`, `limit`, `lease_ttl_ms`, `wait_ms`", status=400,
            )
        return await real_claim(self, *args, **kwargs)

    monkeypatch.setattr(AsyncClient, "claim", claim)
    seen = Recorder()
    worker = Worker(client, queue, concurrency=1, claim_wait=0.5, observer=seen)

    @worker.handler("k")
    def handler(job: JobContext) -> int:
        return int(job.payload)

    ids = [client.enqueue(queue, "k", i).id for i in range(4)]
    with running(worker):
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 4, timeout=15)
    assert [client.get(i).result for i in ids] == [0, 1, 2, 3]
    assert seen.sent("claim") == [(1, 0)]
    assert sum(c for c, _ in seen.sent("complete")) == 4
    assert seen.of("error") == [("claim", "invalid_argument", "InvalidArgument")]


def test_a_claim_refused_for_its_reports_loses_none(client: Client, queue: str) -> None:
    # The result is too large for a request: the claim carrying it is
    # refused whole (413). Its report goes alone, is refused alone, and the
    # attempt fails naming why; the worker goes on claiming.
    seen = Recorder()
    worker = Worker(client, queue, concurrency=1, claim_wait=0.5, observer=seen)

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        return "x" * (1 << 20) if job.payload == "big" else "small"

    big = client.enqueue(queue, "k", "big", max_attempts=1)
    with running(worker):
        # Claimed: the handler returns at once, so "running" may be over
        # before a poll sees it.
        wait_for(lambda: client.get(big.id).state in ("running", "failed"))
        small = client.enqueue(queue, "k", "small")
        wait_for(lambda: client.get(big.id).state == "failed", timeout=15)
        wait_for(lambda: client.get(small.id).state == "succeeded", timeout=15)
    failed = client.get(big.id)
    assert failed.result is None
    assert (failed.last_error or "").startswith("the result could not be stored")
    assert ("claim", "payload_too_large", "PayloadTooLarge") in seen.of("error")
    assert ("complete", "payload_too_large", "PayloadTooLarge") in seen.of("error")
    assert client.get(small.id).result == "small"
    assert events(client, big.id) == ["enqueued", "claimed", "failed"]


def test_a_job_whose_report_is_on_its_way_is_not_heartbeated(
    client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 3 s lease is heartbeated every second while the handler runs; the
    # claim carrying its completion takes 1.5 s, and no heartbeat for the
    # job goes out meanwhile (after the report there is no lease to extend).
    real_claim = AsyncClient.claim
    real_beat = AsyncClient.heartbeat_batch
    beats: List[Tuple[float, List[str]]] = []

    async def claim(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        if carrying(kwargs):
            await asyncio.sleep(1.5)
        return await real_claim(self, *args, **kwargs)

    async def heartbeat_batch(self: AsyncClient, items: Any) -> Any:
        items = list(items)
        beats.append((time.monotonic(), [i.id for i in items]))
        return await real_beat(self, items)

    monkeypatch.setattr(AsyncClient, "claim", claim)
    monkeypatch.setattr(AsyncClient, "heartbeat_batch", heartbeat_batch)
    seen = Recorder()
    worker = Worker(client, queue, concurrency=1, lease_ttl=3.0, claim_wait=0.5, observer=seen)
    ended: List[float] = []

    @worker.handler("k")
    def handler(job: JobContext) -> str:
        job.cancel_event.wait(2.5)
        ended.append(time.monotonic())
        return "ok"

    job = client.enqueue(queue, "k")
    with running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
    assert ended and any(job.id in ids for _, ids in beats), beats
    assert all(at < ended[0] for at, ids in beats if job.id in ids), (beats, ended)
    assert seen.sent("claim") == [(1, 0)] and seen.of("error") == []
    assert events(client, job.id) == ["enqueued", "claimed", "succeeded"]


def test_a_handler_reads_its_dependencies_results(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=4, claim_wait=0.5)
    seen: Dict[str, Any] = {}

    @worker.handler("parent")
    def parent(job: JobContext) -> Any:
        seen["parent"] = job.dependencies()  # none: answered without a request
        return {"n": job.payload * 10}

    @worker.handler("sync_child")
    def sync_child(job: JobContext) -> Any:
        deps = job.dependencies()
        seen["sync_child"] = deps
        return sum(d.result["n"] for d in deps)

    @worker.handler("async_child")
    async def async_child(job: JobContext) -> Any:
        try:
            job.dependencies()  # would block the worker's loop
        except RuntimeError as e:
            seen["blocking"] = str(e)
        deps = await job.dependencies_async()
        seen["async_child"] = deps
        return [d.id for d in deps]

    a = client.enqueue(queue, "parent", 1)
    b = client.enqueue(queue, "parent", 2)
    sync_job = client.enqueue(queue, "sync_child", depends_on=[a, b])
    async_job = client.enqueue(queue, "async_child", depends_on=[b.id])
    assert client.get(sync_job.id).state == "waiting"
    with running(worker):
        for job_id in (sync_job.id, async_job.id):
            settled(client, job_id, "succeeded")
    assert client.get(sync_job.id).result == 30
    assert client.get(async_job.id).result == [b.id]
    assert seen["parent"] == []
    assert [(d.id, d.state, d.result) for d in seen["sync_child"]] == [
        (a.id, "succeeded", {"n": 10}),
        (b.id, "succeeded", {"n": 20}),
    ]
    assert "dependencies_async" in seen["blocking"]
    assert [e for e in events(client, sync_job.id)][:3] == ["enqueued", "released", "claimed"]


def test_a_failed_dependency_never_runs_a_cancel_dependent(client: Client, queue: str) -> None:
    worker = Worker(client, queue, concurrency=2, claim_wait=0.5)
    ran: List[str] = []

    @worker.handler("parent")
    def parent(job: JobContext) -> None:
        raise Fatal("no luck")

    @worker.handler("child")
    def child(job: JobContext) -> Any:
        ran.append(job.id)
        return [(d.state, d.last_error) for d in job.dependencies()]

    a = client.enqueue(queue, "parent")
    cancel = client.enqueue(queue, "child", depends_on=[a.id])
    run = client.enqueue(queue, "child", depends_on=[a.id], dependency_failure="run")
    with running(worker):
        settled(client, run.id, "succeeded")
    assert client.get(a.id).state == "failed"
    assert client.get(cancel.id).state == "cancelled"
    assert ran == [run.id]
    assert client.get(run.id).result == [["failed", "no luck"]]


def test_httpx_logs_none_of_the_worker_traffic(
    server: Server, client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """At INFO, httpx logs every request; the worker's own (claims, idle
    long-polls, heartbeats, reports, its event stream) are left out, while
    the application's requests, a handler's included, still log."""
    caplog.set_level(logging.INFO)
    worker = Worker(client, queue, concurrency=2, lease_ttl=1.0, claim_wait=0.3)

    @worker.handler("slow")
    async def slow(job: JobContext) -> str:
        async with AsyncClient(server.url, server.key) as own:
            await own.get_queue(queue)  # the handler's own request logs
        await asyncio.sleep(1.2)  # heartbeats every third of the 1 s lease
        return "done"

    with running(worker):
        job = client.enqueue(queue, "slow")
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
        time.sleep(1.0)  # a few idle long-polls
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert any(f"/v1/queues/{queue} " in line for line in lines), lines  # the handler's
    assert any("POST" in line and line.split()[3].endswith("/v1/jobs") for line in lines)
    for route in ("/claim", "/heartbeat", "/v1/jobs/complete", "/fail", "/v1/events"):
        assert not [line for line in lines if route in line], route


def test_a_failure_is_stored_with_the_traceback_from_the_handler_on(
    client: Client, queue: str
) -> None:
    worker = Worker(client, queue, concurrency=2, claim_wait=0.3)

    def parse(payload: Any) -> int:
        return int(payload["n"])

    @worker.handler("sync")
    def sync(job: JobContext) -> int:
        return parse(job.payload)

    @worker.handler("async")
    async def async_(job: JobContext) -> int:
        await asyncio.sleep(0)
        return parse(job.payload)

    jobs = [client.enqueue(queue, kind, {"n": "x"}, max_attempts=1) for kind in ("sync", "async")]
    with running(worker):
        for job in jobs:
            wait_for(lambda: client.get(job.id).state == "failed", timeout=15)  # noqa: B023
    for job, fn in zip(jobs, ("sync", "async_")):
        error = client.get(job.id).last_error or ""
        frames = [line for line in error.splitlines() if line.startswith('  File "')]
        assert "tether_client/_worker.py" not in error and "/tether_client/" not in error, error
        assert error.startswith("Traceback (most recent call last):\n"), error
        assert frames[0].startswith(f'  File "{__file__}"') and frames[0].endswith(f"in {fn}")
        assert frames[-1].endswith("in parse"), error
        assert error.rstrip().endswith("ValueError: invalid literal for int() with base 10: 'x'")


def test_one_worker_serves_several_queues_each_with_its_slots(client: Client) -> None:
    qa, qb = (f"q-{os.urandom(6).hex()}" for _ in range(2))
    worker = Worker(client, {qa: 1, qb: 3}, claim_wait=0.3)
    assert worker.queues == {qa: 1, qb: 3}
    release = threading.Event()
    seen: List[str] = []

    @worker.handler("block")
    def block(job: JobContext) -> str:
        seen.append(job.queue)
        release.wait(15)
        return job.queue

    for q in (qa, qb):
        for i in range(5):
            client.enqueue(q, "block", i)
    with running(worker):
        wait_for(lambda: (client.get_queue(qa).counts.running, client.get_queue(qb).counts.running)
                 == (1, 3))
        time.sleep(0.5)  # no queue takes another's slots
        assert (client.get_queue(qa).counts.running, client.get_queue(qb).counts.running) == (1, 3)
        [me] = [w for w in client.workers() if w.worker_id == worker.worker_id]
        assert sorted(me.queues) == sorted([qa, qb]) and me.running == 4
        release.set()
        wait_for(lambda: client.get_queue(qa).counts.succeeded == 5
                 and client.get_queue(qb).counts.succeeded == 5, timeout=20)
    assert sorted(seen) == sorted([qa] * 5 + [qb] * 5)
    for job in client.iter_jobs(queue=qb):
        assert job.result == qb and job.worker_id == worker.worker_id


def test_a_list_of_queues_gets_concurrency_each_and_a_busy_one_holds_up_none(
    client: Client,
) -> None:
    busy, free = (f"q-{os.urandom(6).hex()}" for _ in range(2))
    worker = Worker(client, [busy, free], concurrency=2, claim_wait=0.3)
    assert worker.queues == {busy: 2, free: 2}
    release = threading.Event()

    @worker.handler("block")
    def block(job: JobContext) -> None:
        release.wait(15)

    @worker.handler("quick")
    async def quick(job: JobContext) -> int:
        return int(job.payload) + 1

    for i in range(4):
        client.enqueue(busy, "block", i)
    with running(worker):
        wait_for(lambda: client.get_queue(busy).counts.running == 2)
        # Both of `busy`'s slots are taken: `free` is claimed all the same,
        # and a handler serves its kind on any of the worker's queues.
        jobs = [client.enqueue(free, "quick", i) for i in range(6)]
        jobs.append(client.enqueue(busy, "quick", 10))
        for job in jobs[:6]:
            assert client.wait(job, timeout=15).result == int(job.payload) + 1
        assert client.get(jobs[6].id).state == "queued"  # behind busy's blocked slots
        release.set()
        assert client.wait(jobs[6], timeout=15).result == 11
    with pytest.raises(ValueError, match="twice"):
        Worker(client, [busy, busy])
    with pytest.raises(ValueError, match="at least one"):
        Worker(client, [])
    with pytest.raises(ValueError, match=r"1\.\.1000"):
        Worker(client, {busy: 0})


def test_shutdown_drains_every_queue(client: Client) -> None:
    qa, qb = (f"q-{os.urandom(6).hex()}" for _ in range(2))
    worker = Worker(client, [qa, qb], concurrency=1, claim_wait=0.3, shutdown_grace=0.5)
    started = threading.Event()
    count = [0]

    @worker.handler("finish")
    def finish(job: JobContext) -> str:
        count[0] += 1
        if count[0] == 2:
            started.set()
        time.sleep(0.2)
        return "finished"

    @worker.handler("stuck")
    def stuck(job: JobContext) -> None:
        job.cancel_event.wait(30)

    a = client.enqueue(qa, "finish")
    b = client.enqueue(qb, "finish")
    c = client.enqueue(qa, "stuck")
    d = client.enqueue(qb, "stuck")
    with running(worker):
        started.wait(15)
        wait_for(lambda: {client.get(c.id).state, client.get(d.id).state} == {"running"})
    # Finished within the grace on both queues; the rest handed back on both.
    assert client.get(a.id).state == client.get(b.id).state == "succeeded"
    for job in (c, d):
        back = client.get(job.id)
        assert back.state == "queued" and back.attempt == 0, back
        assert events(client, job.id)[-1] == "snoozed"


def test_an_admin_key_acting_for_a_tenant_enqueues_and_works_there(
    server: Server, client: Client, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = client.create_tenant(f"t-{os.urandom(5).hex()}")
    acting = Client(server.url, server.key, tenant=made.tenant.name)
    own = Client(server.url, made.api_key)
    try:
        assert acting.tenant == made.tenant.name
        assert acting.whoami().tenant.id == made.tenant.id
        job = acting.enqueue(queue, "k", {"x": 1})
        assert own.get(job.id).payload == {"x": 1}  # the tenant's job
        with pytest.raises(NotFound):
            client.get(job.id)  # not the admin's own tenant's
        worker = Worker(acting, queue, claim_wait=0.3)

        @worker.handler("k")
        async def k(ctx: JobContext) -> Any:
            return ctx.payload

        with running(worker):
            done = own.wait(job.id, timeout=15)
        assert done.state == "succeeded" and done.result == {"x": 1}
        assert done.worker_id == worker.worker_id
        # By id as well as by name, and from the environment.
        monkeypatch.setenv("TETHER_TENANT", made.tenant.id)
        with Client(server.url, server.key) as env:
            assert env.tenant == made.tenant.id and env.get(job.id).state == "succeeded"
        # Only an admin key may act for a tenant.
        with Client(server.url, made.api_key, tenant=made.tenant.name) as refused:
            with pytest.raises(PermissionDenied):
                refused.get(job.id)
    finally:
        acting.close()
        own.close()


def test_an_async_client_acts_for_a_tenant(server: Server, client: Client) -> None:
    made = client.create_tenant(f"t-{os.urandom(5).hex()}")

    async def main() -> Job:
        async with AsyncClient(server.url, server.key, tenant=made.tenant.name) as acting:
            assert (await acting.whoami()).tenant.id == made.tenant.id
            return await acting.enqueue("q", "k")

    job = asyncio.run(main())
    with Client(server.url, made.api_key) as own:
        assert own.get(job.id).queue == "q"


def test_a_started_idle_worker_is_listed_with_what_it_announced(
    client: Client, queue: str
) -> None:
    worker = Worker(client, {queue: 3, f"{queue}-b": 2}, claim_wait=0.5)
    with running(worker):
        [me] = wait_for(
            lambda: [w for w in client.workers() if w.worker_id == worker.worker_id]
        )
        assert me.running == 0 and sorted(me.queues) == sorted([queue, f"{queue}-b"])
        assert (me.sdk, me.version, me.concurrency) == ("python", tether_client.__version__, 5)
        assert (me.host, me.pid) == (socket.gethostname(), os.getpid())
        assert me.last_seen_at


def test_a_failed_announcement_never_stops_the_worker(
    client: Client, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The server refuses an announcement of more than 100 queues.
    worker = Worker(client, [f"{queue}-{i}" for i in range(101)], concurrency=1, claim_wait=0.5)
    worker.register("k", lambda job: "done")
    job = client.enqueue(f"{queue}-100", "k")
    with caplog.at_level(logging.DEBUG, logger="tether_client.worker"), running(worker):
        wait_for(lambda: client.get(job.id).state == "succeeded", timeout=15)
    assert worker.worker_id not in [w.worker_id for w in client.workers()]
    failed = [r for r in caplog.records if "announcing itself failed" in r.getMessage()]
    assert failed and all(r.levelno == logging.DEBUG for r in failed)
    assert "InvalidArgument" in failed[0].getMessage()


def test_a_handler_reads_the_headers_of_its_job(client: Client, queue: str) -> None:
    worker = Worker(client, queue, claim_wait=0.5)
    seen: List[Dict[str, str]] = []
    worker.register("k", lambda job: seen.append(job.headers))
    client.enqueue(queue, "k", headers={"x-request-id": "r-7"})
    client.enqueue(queue, "k")
    with running(worker):
        wait_for(lambda: len(seen) == 2)
    assert sorted(seen, key=len) == [{}, {"x-request-id": "r-7"}]
