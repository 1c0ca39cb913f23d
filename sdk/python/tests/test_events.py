"""Waiting for results (``?wait_ms=``) and the event stream
(``GET /v1/events``) against a real server on each backend: waits that end
with the job and waits that time out; a job's history as it is committed,
with its fields and filters; a stream broken off and resumed with
``after``; reconnects after a cut, a 503 and an ended stream that lose
and repeat nothing; the errors that raise; and the server-sent events
decoder on its own.

Nothing here races the clock: a stream that must start before something
happens starts from a cursor taken first (``live_cursor``), so it reads the
events from the history whenever it connects."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any, AsyncIterator, Iterable, Iterator, List, Optional, Tuple

import httpx
import pytest

from conftest import Server
from tether_client import (
    AsyncClient,
    Client,
    EventStream,
    FeedEvent,
    FeedGap,
    FeedItem,
    InvalidArgument,
    Job,
    TetherError,
    TooManyRequests,
    Unauthenticated,
    WorkflowBuilder,
)
from tether_client._errors import error_from, error_from_body
from tether_client._stream import Message, SseDecoder, feed_item, item_id

# ---- helpers ------------------------------------------------------------------


def take(stream: Iterable[FeedItem], n: int, timeout: float = 20.0) -> List[FeedItem]:
    """The next ``n`` items of a stream, read on a thread so that a stream
    that never yields them fails the test instead of hanging it."""
    out: List[FeedItem] = []
    errors: List[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            if n:
                for item in stream:
                    out.append(item)
                    if len(out) == n:
                        break
        except BaseException as e:
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True).start()
    if not done.wait(timeout):
        raise AssertionError(f"{len(out)} of {n} stream items within {timeout} s: {out}")
    if errors:
        raise errors[0]
    return out


def live_cursor(client: Client) -> str:
    """A cursor no older than now: the first event a live stream of a queue
    of its own sees while marker jobs are enqueued into it. A stream from it
    (``after=``) reads every event committed afterwards, however late it
    connects."""
    marker = f"marker-{uuid.uuid4().hex[:12]}"
    with client.stream_events(queue=marker) as stream:
        got: List[FeedItem] = []
        reader = threading.Thread(target=lambda: got.extend(take(stream, 1)), daemon=True)
        reader.start()
        deadline = time.monotonic() + 20
        while reader.is_alive() and time.monotonic() < deadline:
            client.enqueue(marker, "marker")
            reader.join(0.05)
        assert got, "a live stream saw none of the marker jobs"
        assert isinstance(got[0], FeedEvent) and got[0].queue == marker
        return got[0].cursor


def claim_one(client: Client, queue: str, worker_id: str = "w1") -> Tuple[str, str]:
    [job] = client.claim(queue, worker_id, limit=1)
    return job.id, job.lease_token


def run_to_success(client: Client, queue: str, result: Any = None) -> Job:
    """Enqueues a job and completes it through the worker protocol."""
    job = client.enqueue(queue, "k", {"n": 1})
    job_id, token = claim_one(client, queue)
    assert job_id == job.id
    return client.complete(job_id, token, result)


def shape(items: Iterable[FeedItem]) -> List[Tuple[str, str, str]]:
    out = []
    for i in items:
        assert isinstance(i, FeedEvent), i
        out.append((i.cursor, i.job_id, i.event))
    return out


def read_until(client: Client, after: str, queue: str, sentinel: str) -> List[FeedEvent]:
    """Every event of ``queue`` after ``after`` up to the ``enqueued`` of job
    ``sentinel`` (included), read by a plain stream."""
    out: List[FeedEvent] = []
    with client.stream_events(queue=queue, after=after) as stream:
        while not out or out[-1].job_id != sentinel:
            [item] = take(stream, 1)
            assert isinstance(item, FeedEvent)
            out.append(item)
    return out


# ---- waiting for results ----------------------------------------------------------


def test_wait_answers_when_the_job_finishes(server: Server, client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    job_id, token = claim_one(client, queue)

    def finish() -> None:
        time.sleep(0.3)  # most likely while the wait below waits; either way works
        with Client(server.url, server.key) as w:
            w.complete(job_id, token, {"answer": 42})

    worker = threading.Thread(target=finish)
    worker.start()
    t0 = time.monotonic()
    # A wait far longer than any stall of the host: ending within a fifth
    # of it can only be the job's end.
    done = client.wait(job.id, timeout=600)
    took = time.monotonic() - t0
    worker.join()
    assert done.id == job.id and done.state == "succeeded"
    assert done.result == {"answer": 42}
    assert took < 120, "the wait ran out instead of ending with the job"
    # A finished job answers at once, whatever the wait.
    t0 = time.monotonic()
    assert client.wait(job.id, timeout=600).state == "succeeded"
    assert time.monotonic() - t0 < 120
    assert client.get(job.id, wait=20).state == "succeeded"


def test_a_wait_that_times_out_answers_the_unfinished_job(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    t0 = time.monotonic()
    got = client.wait(job.id, timeout=0.5)
    assert got.id == job.id and got.state == "queued"
    assert time.monotonic() - t0 >= 0.5
    # No time at all: one read, at once.
    assert client.wait(job.id, timeout=0).state == "queued"
    assert client.get(job.id, wait=0).state == "queued"
    with pytest.raises(InvalidArgument):
        client.get(job.id, wait=30.001)


def test_wait_for_a_cancelled_job_and_a_failed_one(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    client.cancel(job.id)
    assert client.wait(job.id, timeout=600).state == "cancelled"
    other = client.enqueue(queue, "k", max_attempts=1)
    job_id, token = claim_one(client, queue)
    assert job_id == other.id
    client.fail(job_id, token, "boom", fatal=True)
    failed = client.wait(other.id, timeout=600)
    assert failed.state == "failed" and failed.last_error == "boom"


def test_enqueue_and_wait(server: Server, client: Client, queue: str) -> None:
    def work() -> None:
        with Client(server.url, server.key) as w:
            [job] = w.claim(queue, "w1", wait=20)
            w.complete(job.id, job.lease_token, {"doubled": job.payload * 2})

    worker = threading.Thread(target=work)
    worker.start()
    done = client.enqueue_and_wait(queue, "double", 21, timeout=600, idempotency_key=queue)
    worker.join()
    assert done.state == "succeeded" and done.result == {"doubled": 42}
    assert done.created is True and done.idempotency_key == queue


def test_wait_workflow(server: Server, client: Client, queue: str) -> None:
    wf = WorkflowBuilder(f"wf-{queue}")
    first = wf.add(queue, "first")
    wf.add(queue, "second", after=[first])
    made = client.enqueue_workflow(wf)
    running = client.wait_workflow(made.workflow_id, timeout=0.3)
    assert running.id == made.workflow_id and running.state == "running"

    def work() -> None:
        # The second job is queued once the first succeeded.
        with Client(server.url, server.key) as w:
            for _ in range(2):
                [job] = w.claim(queue, "w1", wait=20)
                w.complete(job.id, job.lease_token)

    worker = threading.Thread(target=work)
    worker.start()
    done = client.wait_workflow(made.workflow_id, timeout=600)
    worker.join()
    assert done.state == "succeeded"
    assert sorted(j.state for j in done.jobs) == ["succeeded", "succeeded"]


# ---- the event stream ------------------------------------------------------------


def test_a_jobs_history_as_it_is_committed(client: Client, queue: str) -> None:
    start = live_cursor(client)
    job = client.enqueue(queue, "send", {"to": "ada"})
    other = client.enqueue(queue, "send")  # between the job's events
    job_id, token = claim_one(client, queue, "w-7")
    assert job_id == job.id
    client.complete(job.id, token, {"sent": True})

    with client.stream_events(job_id=job.id, after=start) as stream:
        assert isinstance(stream, EventStream) and stream.last_id == start
        enq, claimed, succeeded = take(stream, 3)
        assert stream.last_id == succeeded.cursor
    for item in (enq, claimed, succeeded):
        assert isinstance(item, FeedEvent)
        assert item.job_id == job.id and item.queue == queue and item.kind == "send"
        assert item.workflow_id is None and item.at.endswith("Z")
        assert item.raw["cursor"] == item.cursor
    assert isinstance(enq, FeedEvent) and isinstance(claimed, FeedEvent)
    assert isinstance(succeeded, FeedEvent)
    assert [enq.event, claimed.event, succeeded.event] == ["enqueued", "claimed", "succeeded"]
    assert len({enq.cursor, claimed.cursor, succeeded.cursor}) == 3
    assert (enq.attempt, enq.worker_id) == (0, None)
    assert (claimed.attempt, claimed.worker_id, claimed.state) == (1, "w-7", "running")
    assert (succeeded.attempt, succeeded.worker_id) == (1, "w-7")
    assert succeeded.state == "succeeded" and succeeded.detail is None

    # The queue's stream has the other job's `enqueued` between them.
    with client.stream_events(queue=queue, after=start) as stream:
        assert [(i.job_id, i.event) for i in take(stream, 4)] == [
            (job.id, "enqueued"), (other.id, "enqueued"),
            (job.id, "claimed"), (job.id, "succeeded"),
        ]
    # An event filter, as a list or as names separated by commas.
    for events in (["succeeded", "claimed"], "claimed,succeeded"):
        with client.stream_events(queue=queue, events=events, after=start) as stream:
            assert shape(take(stream, 2)) == shape([claimed, succeeded])


def test_breaking_off_and_resuming_after_reads_exactly_the_rest(
    client: Client, queue: str
) -> None:
    start = live_cursor(client)
    run_to_success(client, queue, 1)
    run_to_success(client, queue, 2)
    sentinel = client.enqueue(queue, "sentinel")
    everything = read_until(client, start, queue, sentinel.id)
    assert len(everything) == 7

    stream = client.stream_events(queue=queue, after=start)
    head = []
    for item in stream:
        head.append(item)
        if len(head) == 2:
            break
    resume_from = stream.last_id
    stream.close()
    assert resume_from == head[-1].cursor
    assert shape(head) == shape(everything[:2])
    rest = read_until(client, resume_from, queue, sentinel.id)
    assert shape(rest) == shape(everything[2:])


class _Cut(httpx.SyncByteStream):
    """A stream's bytes passed through; with a ``mode``, only up to the end
    of its first message, then ``cut`` (half a message, then a read error)
    or ``end`` (the stream ends)."""

    def __init__(self, inner: Any, mode: Optional[str]) -> None:
        self.inner = inner
        self.mode = mode
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        buf = b""
        for chunk in self.inner:
            if self.mode is None:
                yield chunk
                continue
            buf += chunk
            data = buf.find(b"data:")
            end = buf.find(b"\n\n", data) if data >= 0 else -1
            if end < 0:
                continue
            yield buf[: end + 2]
            if self.mode == "cut":
                yield b'id: s.999999\nevent: claimed\ndata: {"cursor": "s.9'
                raise httpx.ReadError("cut off by the test")
            return

    def close(self) -> None:
        self.closed = True
        self.inner.close()


class _AsyncCut(httpx.AsyncByteStream):
    def __init__(self, inner: Any, mode: Optional[str]) -> None:
        self.inner = inner
        self.mode = mode
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        buf = b""
        async for chunk in self.inner:
            if self.mode is None:
                yield chunk
                continue
            buf += chunk
            data = buf.find(b"data:")
            end = buf.find(b"\n\n", data) if data >= 0 else -1
            if end < 0:
                continue
            yield buf[: end + 2]
            if self.mode == "cut":
                yield b'id: s.999999\nevent: claimed\ndata: {"cursor": "s.9'
                raise httpx.ReadError("cut off by the test")
            return

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


UNAVAILABLE = {"error": {"code": "unavailable", "message": "the test says so"}}


class Interrupting(httpx.BaseTransport):
    """The real transport, but the event streams follow ``script``: each
    connection takes the next mode (``cut``, ``503``, ``end``), then they
    pass through. Records the requests and the streams."""

    def __init__(self, script: List[str]) -> None:
        self.inner = httpx.HTTPTransport()
        self.script = list(script)
        self.requests: List[httpx.Request] = []
        self.streams: List[_Cut] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/events":
            return self.inner.handle_request(request)
        self.requests.append(request)
        mode = self.script.pop(0) if self.script else None
        if mode == "503":
            return httpx.Response(503, json=UNAVAILABLE)
        resp = self.inner.handle_request(request)
        stream = _Cut(resp.stream, mode)
        self.streams.append(stream)
        return httpx.Response(
            resp.status_code, headers=resp.headers, stream=stream, extensions=resp.extensions
        )

    def close(self) -> None:
        self.inner.close()


class AsyncInterrupting(httpx.AsyncBaseTransport):
    def __init__(self, script: List[str]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.script = list(script)
        self.requests: List[httpx.Request] = []
        self.streams: List[_AsyncCut] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/events":
            return await self.inner.handle_async_request(request)
        self.requests.append(request)
        mode = self.script.pop(0) if self.script else None
        if mode == "503":
            return httpx.Response(503, json=UNAVAILABLE)
        resp = await self.inner.handle_async_request(request)
        stream = _AsyncCut(resp.stream, mode)
        self.streams.append(stream)
        return httpx.Response(
            resp.status_code, headers=resp.headers, stream=stream, extensions=resp.extensions
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


SCRIPT = ["cut", "503", "end"]


def check_reconnects(
    requests: List[httpx.Request], start: str, expected: List[FeedEvent]
) -> None:
    """The requests of a stream that met ``SCRIPT``: the first names its
    cursor as ``after``, each reconnect the last event it yielded as
    ``Last-Event-ID`` (never the id of the message cut in half)."""
    assert len(requests) == 4, [str(r.url) for r in requests]
    first, after_cut, after_503, after_end = requests
    assert first.url.params["after"] == start and "last-event-id" not in first.headers
    assert first.headers["accept"] == "text/event-stream"
    for r in (after_cut, after_503):
        assert "after" not in r.url.params
        assert r.headers["last-event-id"] == expected[0].cursor
    assert after_end.headers["last-event-id"] == expected[1].cursor
    for r in requests:
        assert r.url.params["queue"] == first.url.params["queue"]


def test_a_stream_reconnects_after_a_cut_a_503_and_an_end_losing_nothing(
    server: Server, client: Client, queue: str
) -> None:
    start = live_cursor(client)
    run_to_success(client, queue)
    run_to_success(client, queue)
    sentinel = client.enqueue(queue, "sentinel")
    expected = read_until(client, start, queue, sentinel.id)

    transport = Interrupting(SCRIPT)
    with Client(server.url, server.key, transport=transport) as flaky:
        with flaky.stream_events(queue=queue, after=start) as stream:
            got = take(stream, len(expected))
            assert stream.last_id == expected[-1].cursor
        assert shape(got) == shape(expected)
        check_reconnects(transport.requests, start, expected)
        assert all(s.closed for s in transport.streams), "a connection was left open"


def test_the_async_client_waits_and_streams(server: Server, client: Client, queue: str) -> None:
    start = live_cursor(client)

    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c:
            job = await c.enqueue(queue, "k", "x")
            assert (await c.wait(job.id, timeout=0.2)).state == "queued"
            [claimed] = await c.claim(queue, "w-async")

            async def finish() -> None:
                await asyncio.sleep(0.2)
                await c.complete(claimed.id, claimed.lease_token, "done")

            finisher = asyncio.ensure_future(finish())
            done = await c.wait(job.id, timeout=600)
            await finisher
            assert done.state == "succeeded" and done.result == "done"
            wf = WorkflowBuilder(f"wf-{queue}")
            wf.add(queue, "only")
            made = await c.enqueue_workflow(wf)
            assert (await c.wait_workflow(made.workflow_id, timeout=0)).state == "running"
            await c.cancel_workflow(made.workflow_id)
            assert (await c.wait_workflow(made.workflow_id, timeout=600)).state == "cancelled"

            got: List[FeedItem] = []
            async with c.stream_events(job_id=job.id, after=start) as stream:
                async for item in stream:
                    got.append(item)
                    if len(got) == 2:
                        break
                assert stream.last_id == got[-1].cursor
            async with c.stream_events(job_id=job.id, after=stream.last_id) as rest:
                got.append(await asyncio.wait_for(rest.__anext__(), 20))
            assert [(i.job_id, i.event) for i in got] == [
                (job.id, "enqueued"), (job.id, "claimed"), (job.id, "succeeded")
            ]
            with pytest.raises(InvalidArgument):
                async with c.stream_events(after="not a cursor") as bad:
                    await asyncio.wait_for(bad.__anext__(), 20)

    asyncio.run(main())


def test_the_async_stream_reconnects_losing_nothing(
    server: Server, client: Client, queue: str
) -> None:
    start = live_cursor(client)
    run_to_success(client, queue)
    run_to_success(client, queue)
    sentinel = client.enqueue(queue, "sentinel")
    expected = read_until(client, start, queue, sentinel.id)

    async def main() -> None:
        transport = AsyncInterrupting(SCRIPT)
        async with AsyncClient(server.url, server.key, transport=transport) as flaky:
            got: List[FeedItem] = []
            async with flaky.stream_events(queue=queue, after=start) as stream:
                while len(got) < len(expected):
                    got.append(await asyncio.wait_for(stream.__anext__(), 20))
            assert shape(got) == shape(expected)
            check_reconnects(transport.requests, start, expected)
            assert all(s.closed for s in transport.streams), "a connection was left open"

    asyncio.run(main())


def test_stream_errors_raise(server: Server, client: Client) -> None:
    for bad in (
        dict(after="not a cursor"),
        dict(job_id="not-a-uuid"),
        dict(events=["enqueued", "nonsense"]),
    ):
        with client.stream_events(**bad) as stream:
            with pytest.raises(InvalidArgument) as e:
                take(stream, 1)
            assert e.value.status == 400
    with Client(server.url, "tth_nope") as stranger, stranger.stream_events() as stream:
        with pytest.raises(Unauthenticated):
            take(stream, 1)


def test_too_many_streams_raise_too_many_requests(server: Server, client: Client) -> None:
    created = client.create_tenant(f"streams-{uuid.uuid4().hex[:10]}")
    headers = {"authorization": f"Bearer {created.api_key}", "accept": "text/event-stream"}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    with httpx.Client(base_url=server.url, limits=limits) as raw, contextlib.ExitStack() as open_:
        held = 0
        while held < 200:
            resp = open_.enter_context(raw.stream("GET", "/v1/events", headers=headers))
            if resp.status_code != 200:
                resp.read()
                assert resp.status_code == 429, resp.text
                break
            held += 1
        assert held == 64, "the server's default is 64 streams a tenant"
        with Client(server.url, created.api_key) as tenant, tenant.stream_events() as stream:
            with pytest.raises(TooManyRequests) as e:
                take(stream, 1)
        assert e.value.status == 429 and e.value.code == "too_many_requests"
        assert isinstance(e.value, TetherError)


def test_too_many_requests_is_its_own_class() -> None:
    body = {"error": {"code": "too_many_requests", "message": "close one first"}}
    err = error_from_body(429, body, "")
    assert type(err) is TooManyRequests and err.status == 429
    assert str(err) == "too_many_requests: close one first"
    assert type(error_from(None, "", 429)) is TooManyRequests


# ---- the decoder -----------------------------------------------------------------


def decode(*chunks: bytes) -> List[Message]:
    decoder = SseDecoder()
    out: List[Message] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


def test_the_decoder_reads_messages_however_they_are_cut() -> None:
    text = (
        "\ufeff: a comment\n"
        "id: s.1\nevent: enqueued\ndata: {\"a\":\n"
        "data: 1}\n\n"
        ":\n\n"  # a heartbeat: no message
        "retry: 10\nid: s.2\r\nevent: gap\r\ndata:{\"oldest\":\"s.2\"}\r\n\r\n"
        "data: caf\u00e9\rid: s.3\r\r"
        "event: empty\n\n"  # no data: dropped
        "id: s.4\ndata: half a message"
    )
    raw = text.encode()
    expected = [
        Message("s.1", "enqueued", '{"a":\n1}'),
        Message("s.2", "gap", '{"oldest":"s.2"}'),
        Message("s.3", "message", "caf\u00e9"),
    ]
    assert decode(raw) == expected
    # Byte by byte: CRLF and a UTF-8 character split between chunks.
    assert decode(*[raw[i : i + 1] for i in range(len(raw))]) == expected
    for cut in range(len(raw)):
        assert decode(raw[:cut], raw[cut:]) == expected, cut


def test_items_from_messages() -> None:
    data = (
        '{"cursor":"s.7","job_id":"j","workflow_id":"w","queue":"q","kind":"k",'
        '"event":"failed","at":"2026-01-01T00:00:00.000Z","attempt":2,"worker_id":"w1",'
        '"detail":"boom","state":"failed","newer":1}'
    )
    event = feed_item(Message("s.7", "failed", data))
    assert event == FeedEvent(
        cursor="s.7", job_id="j", workflow_id="w", queue="q", kind="k", event="failed",
        at="2026-01-01T00:00:00.000Z", attempt=2, worker_id="w1", detail="boom", state="failed",
    )
    assert event.raw["newer"] == 1
    assert item_id(Message(None, "failed", data), event) == "s.7"
    gap = feed_item(Message("s.3", "gap", '{"oldest":"s.3"}'))
    assert gap == FeedGap(oldest="s.3") and item_id(Message(None, "gap", "{}"), gap) == "s.3"
    with pytest.raises(TetherError) as e:
        feed_item(Message("s.1", "enqueued", "not json"))
    assert e.value.code == "decode"
