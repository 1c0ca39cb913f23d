"""The HTTP clients: :class:`Client` (blocking) and :class:`AsyncClient`."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from typing import (
    Any,
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Iterable,
    Iterator,
    Optional,
    TypeVar,
    Union,
)

import httpx

from ._errors import DecodeError, TetherError, TransportError, Unavailable, error_from_body
from ._models import JSON, FeedItem, Job, JobEvent, Workflow, WorkflowDetail, WorkflowState
from ._routes_async import AsyncRoutes
from ._routes_sync import SyncRoutes
from ._stream import (
    FINISHED_JOB_STATES,
    SseDecoder,
    answered_early,
    feed_item,
    item_id,
    reconnects_after,
    stream_error,
    stream_headers,
    stream_params,
    stream_timeout,
    wait_ms_for,
)
from ._util import UNSET

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
USER_AGENT = "tether-client-python/0.1.0"

log = logging.getLogger("tether_client.events")


def _settings(url: Optional[str], key: Optional[str]) -> tuple[str, Optional[str]]:
    url = url or os.environ.get("TETHER_URL") or DEFAULT_URL
    key = key if key is not None else os.environ.get("TETHER_KEY")
    return url.rstrip("/"), key


def _backoff(attempt: int) -> float:
    """Jittered delay before retry number ``attempt`` (1-based): 0.1 s
    doubling up to 5 s, each scaled by a random factor in [0.5, 1.5)."""
    base: float = min(0.1 * (2 ** (attempt - 1)), 5.0)
    return base * (0.5 + random.random())


def _decode(resp: httpx.Response, parse: Callable[[Any], T]) -> T:
    if resp.status_code >= 400:
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        raise error_from_body(resp.status_code, body, resp.text)
    # A body that does not parse would otherwise escape as a bare
    # ValueError/KeyError, which callers (the worker's loops) do not expect.
    try:
        if resp.status_code == 204 or not resp.content:
            return parse(None)
        ctype = resp.headers.get("content-type", "")
        if "json" not in ctype:
            return parse(resp.text)
        return parse(resp.json())
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DecodeError(
            f"HTTP {resp.status_code}: unexpected answer body ({e!r})", status=resp.status_code
        ) from e


def _retryable(e: TetherError) -> bool:
    return isinstance(e, Unavailable)


class _Config:
    def __init__(
        self,
        url: Optional[str],
        key: Optional[str],
        timeout: float,
        retries: int,
    ) -> None:
        self.url, self.key = _settings(url, key)
        self.timeout = timeout
        self.retries = retries

    def headers(self) -> Dict[str, str]:
        h = {"user-agent": USER_AGENT, "accept": "application/json"}
        if self.key:
            h["authorization"] = f"Bearer {self.key}"
        return h


class _Configured:
    """What both clients say about where they point (from their ``_Config``)."""

    _config: _Config

    @property
    def url(self) -> str:
        return self._config.url

    @property
    def key(self) -> Optional[str]:
        return self._config.key

    @property
    def timeout(self) -> float:
        return self._config.timeout


class Client(_Configured, SyncRoutes):
    """A blocking client of a tether server.

    ``url`` and ``key`` default to the ``TETHER_URL`` and ``TETHER_KEY``
    environment variables (and ``http://127.0.0.1:7070``). Requests that are
    safe to repeat (reads, queue settings, an enqueue with an idempotency
    key) are retried up to ``retries`` times with jittered backoff when no
    answer comes or the server answers ``unavailable``; others raise at once.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self._config = _Config(url, key, timeout, retries)
        self._http = httpx.Client(
            base_url=self._config.url,
            headers=self._config.headers(),
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        parse: Callable[[Any], T],
        *,
        json: Any = UNSET,
        params: Optional[Dict[str, Any]] = None,
        retry: bool = False,
        timeout: Optional[float] = None,
    ) -> T:
        tries = self._config.retries + 1 if retry else 1
        attempt = 0
        while True:
            attempt += 1
            try:
                try:
                    resp = self._http.request(
                        method,
                        path,
                        params=params,
                        json=None if json is UNSET else json,
                        timeout=timeout if timeout is not None else self._config.timeout,
                    )
                except httpx.TransportError as e:
                    raise TransportError(f"{method} {path}: {e!r}") from e
                return _decode(resp, parse)
            except TetherError as e:
                if attempt >= tries or not _retryable(e):
                    raise
            time.sleep(_backoff(attempt))

    def iter_jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job matching ``filters`` (those of :meth:`list`), page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.list(cursor=cursor, **filters)
            yield from page.jobs
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def iter_workflows(
        self,
        *,
        state: Optional[WorkflowState] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Iterator[Workflow]:
        """Every workflow matching the filters of :meth:`list_workflows`, newest
        first, page after page (with ``state``, some pages may be short or empty)."""
        while True:
            page = self.list_workflows(state=state, name=name, limit=limit, cursor=cursor)
            yield from page.workflows
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def iter_events(self, job_id: str, *, limit: Optional[int] = None) -> Iterator[JobEvent]:
        """A job's whole history, oldest first, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.events(job_id, limit=limit, cursor=cursor)
            yield from page.events
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # ---- waiting for results ---------------------------------------------

    def _wait(
        self,
        read: Callable[[int], T],
        finished: Callable[[T], bool],
        timeout: Optional[float],
    ) -> T:
        deadline = None if timeout is None else time.monotonic() + timeout
        early = 0
        while True:
            started = time.monotonic()
            wait_ms = wait_ms_for(deadline, started)
            found = read(wait_ms)
            now = time.monotonic()
            if finished(found) or (deadline is not None and now >= deadline):
                return found
            if answered_early(started, now, wait_ms):
                early += 1
                pause = _backoff(early)
                time.sleep(pause if deadline is None else min(pause, deadline - now))
            else:
                early = 0

    def wait(self, job_id: str, *, timeout: Optional[float] = None) -> Job:
        """The job once it has finished (``succeeded``, ``failed`` or
        ``cancelled``), or as it is when ``timeout`` has passed: check its
        ``state``. ``timeout`` is in **seconds**, like the client's own
        (``None``: as long as it takes; 0: one read at once). Asks
        ``GET /v1/jobs/{id}?wait_ms=`` again every 30 s at most (the server's
        longest wait), so the server answers as soon as the job ends, without
        polling."""
        return self._wait(
            lambda ms: self.get(job_id, wait_ms=ms),
            lambda job: job.state in FINISHED_JOB_STATES,
            timeout,
        )

    def wait_workflow(
        self, workflow_id: str, *, timeout: Optional[float] = None
    ) -> WorkflowDetail:
        """The workflow and its graph once it has finished (any state but
        ``running``), or as it is when ``timeout`` (in **seconds**; ``None``:
        no limit) has passed; as :meth:`wait`, over
        ``GET /v1/workflows/{id}?wait_ms=``."""
        return self._wait(
            lambda ms: self.get_workflow(workflow_id, wait_ms=ms),
            lambda wf: wf.state != "running",
            timeout,
        )

    def enqueue_and_wait(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> Job:
        """Enqueues a job (``options``: those of :meth:`enqueue`) and waits for
        it (:meth:`wait`) up to ``timeout`` seconds (``None``: no limit): the
        finished job with its ``result``, or the job as it is then. Its
        ``created`` is the enqueue's."""
        job = self.enqueue(queue, kind, payload, **options)
        done = self.wait(job.id, timeout=timeout)
        done.created = job.created
        return done

    # ---- the event stream ----------------------------------------------------

    def stream_events(
        self,
        *,
        queue: Optional[str] = None,
        job_id: Optional[str] = None,
        workflow_id: Optional[str] = None,
        events: Union[str, Iterable[str], None] = None,
        after: Optional[str] = None,
    ) -> EventStream:
        """The tenant's history as it is committed (``GET /v1/events``): an
        iterator of :class:`FeedEvent` (and :class:`FeedGap` when retention
        removed events before the stream read them), which blocks until the
        next one. The filters narrow it (``events``: event names). It starts
        right after the cursor ``after`` (a ``FeedEvent.cursor``), or with
        what is committed from now on.

        When the connection drops (no answer, a read silent for 45 s, 503,
        the server ending the stream) it reconnects by itself, with jittered
        backoff and as long as it takes, resuming after the last item it
        yielded (``Last-Event-ID``): the reader sees every committed event
        exactly once. (Until the first item of a stream started without
        ``after`` there is nothing to resume from: a reconnect then starts
        from now again.) Other errors raise: ``InvalidArgument`` (a bad
        filter or cursor), ``Unauthenticated``, ``PermissionDenied``,
        ``TooManyRequests`` (the tenant has too many streams open).

        Breaking out of a ``for`` loop over it closes the connection once
        the stream is dropped; ``with client.stream_events() as s:`` or
        ``s.close()`` closes it at once. ``s.last_id`` is the cursor to
        resume from later."""
        return EventStream(self, stream_params(queue, job_id, workflow_id, events), after)


class AsyncClient(_Configured, AsyncRoutes):
    """The asyncio twin of :class:`Client`: the same methods, awaited."""

    def __init__(
        self,
        url: Optional[str] = None,
        key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self._config = _Config(url, key, timeout, retries)
        self._http = httpx.AsyncClient(
            base_url=self._config.url,
            headers=self._config.headers(),
            timeout=timeout,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        parse: Callable[[Any], T],
        *,
        json: Any = UNSET,
        params: Optional[Dict[str, Any]] = None,
        retry: bool = False,
        timeout: Optional[float] = None,
    ) -> T:
        tries = self._config.retries + 1 if retry else 1
        attempt = 0
        while True:
            attempt += 1
            try:
                try:
                    resp = await self._http.request(
                        method,
                        path,
                        params=params,
                        json=None if json is UNSET else json,
                        timeout=timeout if timeout is not None else self._config.timeout,
                    )
                except httpx.TransportError as e:
                    raise TransportError(f"{method} {path}: {e!r}") from e
                return _decode(resp, parse)
            except TetherError as e:
                if attempt >= tries or not _retryable(e):
                    raise
            await asyncio.sleep(_backoff(attempt))

    async def iter_jobs(self, **filters: Any) -> AsyncIterator[Job]:
        """Every job matching ``filters`` (those of :meth:`list`), page after page."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.list(cursor=cursor, **filters)
            for job in page.jobs:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def iter_workflows(
        self,
        *,
        state: Optional[WorkflowState] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> AsyncIterator[Workflow]:
        """Every workflow matching the filters of :meth:`list_workflows`, newest
        first, page after page (with ``state``, some pages may be short or empty)."""
        while True:
            page = await self.list_workflows(state=state, name=name, limit=limit, cursor=cursor)
            for workflow in page.workflows:
                yield workflow
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def iter_events(
        self, job_id: str, *, limit: Optional[int] = None
    ) -> AsyncIterator[JobEvent]:
        """A job's whole history, oldest first, page after page."""
        cursor: Optional[str] = None
        while True:
            page = await self.events(job_id, limit=limit, cursor=cursor)
            for event in page.events:
                yield event
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # ---- waiting for results ---------------------------------------------

    async def _wait(
        self,
        read: Callable[[int], Awaitable[T]],
        finished: Callable[[T], bool],
        timeout: Optional[float],
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        early = 0
        while True:
            started = loop.time()
            wait_ms = wait_ms_for(deadline, started)
            found = await read(wait_ms)
            now = loop.time()
            if finished(found) or (deadline is not None and now >= deadline):
                return found
            if answered_early(started, now, wait_ms):
                early += 1
                pause = _backoff(early)
                await asyncio.sleep(pause if deadline is None else min(pause, deadline - now))
            else:
                early = 0

    async def wait(self, job_id: str, *, timeout: Optional[float] = None) -> Job:
        """The job once it has finished (``succeeded``, ``failed`` or
        ``cancelled``), or as it is when ``timeout`` (in **seconds**;
        ``None``: no limit) has passed: see :meth:`Client.wait`."""
        return await self._wait(
            lambda ms: self.get(job_id, wait_ms=ms),
            lambda job: job.state in FINISHED_JOB_STATES,
            timeout,
        )

    async def wait_workflow(
        self, workflow_id: str, *, timeout: Optional[float] = None
    ) -> WorkflowDetail:
        """The workflow and its graph once it has finished (any state but
        ``running``), or as it is when ``timeout`` (in **seconds**; ``None``:
        no limit) has passed."""
        return await self._wait(
            lambda ms: self.get_workflow(workflow_id, wait_ms=ms),
            lambda wf: wf.state != "running",
            timeout,
        )

    async def enqueue_and_wait(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timeout: Optional[float] = None,
        **options: Any,
    ) -> Job:
        """Enqueues a job (``options``: those of :meth:`enqueue`) and waits
        for it up to ``timeout`` seconds (``None``: no limit); its
        ``created`` is the enqueue's."""
        job = await self.enqueue(queue, kind, payload, **options)
        done = await self.wait(job.id, timeout=timeout)
        done.created = job.created
        return done

    # ---- the event stream ----------------------------------------------------

    def stream_events(
        self,
        *,
        queue: Optional[str] = None,
        job_id: Optional[str] = None,
        workflow_id: Optional[str] = None,
        events: Union[str, Iterable[str], None] = None,
        after: Optional[str] = None,
    ) -> AsyncEventStream:
        """The tenant's history as it is committed (``GET /v1/events``), as
        an async iterator: ``async for item in client.stream_events(...)``.
        It reconnects and resumes by itself like :meth:`Client.stream_events`.
        ``async with client.stream_events() as s:`` (or ``await s.aclose()``)
        closes the connection as soon as you are done."""
        return AsyncEventStream(self, stream_params(queue, job_id, workflow_id, events), after)


class EventStream(Iterator[FeedItem]):
    """What :meth:`Client.stream_events` answers: an iterator of
    :class:`FeedEvent` and :class:`FeedGap` over ``GET /v1/events`` that
    reconnects by itself. The connection opens at the first ``next()``.
    ``last_id`` is the cursor of the last item yielded (or the ``after`` it
    started from): what the stream resumes from, and what a later stream
    takes as ``after``. ``close()`` (or leaving a ``with`` block) closes the
    connection."""

    def __init__(self, client: Client, params: Dict[str, str], after: Optional[str]) -> None:
        self._client = client
        self._params = params
        self.last_id: Optional[str] = after
        self._on_open: Optional[Callable[[], None]] = None
        """Called each time a connection is answered as a stream (the worker
        claims once its stream of cancel requests is open)."""
        self._items: Generator[FeedItem, None, None] = self._run()

    def __next__(self) -> FeedItem:
        return next(self._items)

    def close(self) -> None:
        """Closes the connection; the iterator then ends."""
        self._items.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> Generator[FeedItem, None, None]:
        http = self._client._http
        timeout = stream_timeout(self._client._config.timeout)
        # The first request names its cursor as `after` (a bad one is
        # refused by that name); reconnects as `Last-Event-ID`.
        params = dict(self._params)
        if self.last_id is not None:
            params["after"] = self.last_id
        headers = stream_headers(None)
        failures = 0
        while True:
            alive = False
            reason = ""
            try:
                try:
                    with http.stream(
                        "GET", "/v1/events", params=params, headers=headers, timeout=timeout
                    ) as resp:
                        if resp.status_code != 200:
                            resp.read()
                        error = stream_error(resp)
                        if error is not None:
                            raise error
                        if self._on_open is not None:
                            self._on_open()
                        decoder = SseDecoder()
                        for chunk in resp.iter_bytes():
                            alive = True
                            for msg in decoder.feed(chunk):
                                item = feed_item(msg)
                                self.last_id = item_id(msg, item)
                                yield item
                except httpx.TransportError as e:
                    raise TransportError(f"GET /v1/events: {e!r}") from e
            except TetherError as e:
                if not reconnects_after(e):
                    raise
                reason = str(e)
            failures = 1 if alive else failures + 1
            delay = _backoff(failures)
            log.log(
                logging.WARNING if reason else logging.INFO,
                "event stream: %s; reconnecting in %.2f s after %s",
                reason or "the server ended the stream",
                delay,
                self.last_id or "(no cursor yet: from now)",
            )
            params = dict(self._params)
            headers = stream_headers(self.last_id)
            time.sleep(delay)


class AsyncEventStream(AsyncIterator[FeedItem]):
    """What :meth:`AsyncClient.stream_events` answers: the async twin of
    :class:`EventStream` (``async for``, ``await aclose()``,
    ``async with``)."""

    def __init__(
        self, client: AsyncClient, params: Dict[str, str], after: Optional[str]
    ) -> None:
        self._client = client
        self._params = params
        self.last_id: Optional[str] = after
        self._on_open: Optional[Callable[[], None]] = None
        """As :class:`EventStream`'s."""
        self._items: AsyncGenerator[FeedItem, None] = self._run()

    async def __anext__(self) -> FeedItem:
        return await self._items.__anext__()

    async def aclose(self) -> None:
        """Closes the connection; the iterator then ends."""
        await self._items.aclose()

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self) -> AsyncGenerator[FeedItem, None]:
        http = self._client._http
        timeout = stream_timeout(self._client._config.timeout)
        params = dict(self._params)
        if self.last_id is not None:
            params["after"] = self.last_id
        headers = stream_headers(None)
        failures = 0
        while True:
            alive = False
            reason = ""
            try:
                try:
                    async with http.stream(
                        "GET", "/v1/events", params=params, headers=headers, timeout=timeout
                    ) as resp:
                        if resp.status_code != 200:
                            await resp.aread()
                        error = stream_error(resp)
                        if error is not None:
                            raise error
                        if self._on_open is not None:
                            self._on_open()
                        decoder = SseDecoder()
                        async for chunk in resp.aiter_bytes():
                            alive = True
                            for msg in decoder.feed(chunk):
                                item = feed_item(msg)
                                self.last_id = item_id(msg, item)
                                yield item
                except httpx.TransportError as e:
                    raise TransportError(f"GET /v1/events: {e!r}") from e
            except TetherError as e:
                if not reconnects_after(e):
                    raise
                reason = str(e)
            failures = 1 if alive else failures + 1
            delay = _backoff(failures)
            log.log(
                logging.WARNING if reason else logging.INFO,
                "event stream: %s; reconnecting in %.2f s after %s",
                reason or "the server ended the stream",
                delay,
                self.last_id or "(no cursor yet: from now)",
            )
            params = dict(self._params)
            headers = stream_headers(self.last_id)
            await asyncio.sleep(delay)
