"""The HTTP clients: :class:`Client` (blocking) and :class:`AsyncClient`."""

from __future__ import annotations

import asyncio
import contextvars
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
    Mapping,
    Optional,
    TypeVar,
    Union,
    overload,
)

import httpx

from ._duration import Duration, seconds
from ._errors import DecodeError, TetherError, TransportError, Unavailable, error_from_body
from ._models import (
    JSON,
    Backoff,
    DependencyFailure,
    FeedItem,
    Job,
    JobEvent,
    JobPage,
    Workflow,
    WorkflowDetail,
    WorkflowState,
)
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
from ._task import TaskJob
from ._util import UNSET, Time
from ._version import VERSION

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
USER_AGENT = f"tether-client-python/{VERSION}"

TENANT_HEADER = "x-tether-tenant"

log = logging.getLogger("tether_client.events")

_worker_traffic: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tether_worker_traffic", default=False
)
"""True while a worker's own client sends a request (see :class:`_QuietWorkerTraffic`)."""


class _QuietWorkerTraffic(logging.Filter):
    """Drops httpx's ``HTTP Request: ...`` INFO lines of a worker's own
    requests (its claims, heartbeats, reports and event stream): an idle
    worker long-polls every few seconds, and an application logging at INFO
    would see little else. The requests of the application's own clients
    still log as httpx logs them. Installed on the ``httpx`` logger when
    this module is imported; it drops a record only while a worker's request
    is being sent (``_worker_traffic``), so nothing else changes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _worker_traffic.get()


def _worker_client(
    url: str, key: Optional[str], tenant: Optional[str], timeout: float
) -> AsyncClient:
    """A worker's own client: it never retries (the worker retries its
    protocol calls itself), and httpx does not log its requests."""
    client = AsyncClient(url, key, tenant=tenant, timeout=timeout, retries=0)
    client._config.quiet = True
    return client


logging.getLogger("httpx").addFilter(_QuietWorkerTraffic())


def _env(value: Optional[str], name: str) -> Optional[str]:
    return value if value is not None else os.environ.get(name)


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
        tenant: Optional[str],
        timeout: Duration,
        retries: int,
    ) -> None:
        self.url = (url or os.environ.get("TETHER_URL") or DEFAULT_URL).rstrip("/")
        self.key = _env(key, "TETHER_KEY")
        self.tenant = _env(tenant, "TETHER_TENANT")
        self.timeout = seconds(timeout, "timeout")
        self.retries = retries
        self.quiet = False
        """Whether this is a worker's own client, whose requests httpx does
        not log (see :class:`_QuietWorkerTraffic`)."""

    def headers(self) -> Dict[str, str]:
        h = {"user-agent": USER_AGENT, "accept": "application/json"}
        if self.key:
            h["authorization"] = f"Bearer {self.key}"
        if self.tenant:
            h[TENANT_HEADER] = self.tenant
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
    def tenant(self) -> Optional[str]:
        """The tenant an admin key acts for (``X-Tether-Tenant``), if any."""
        return self._config.tenant

    @property
    def timeout(self) -> float:
        """The timeout of a request, in seconds."""
        return self._config.timeout


class Client(_Configured, SyncRoutes):
    """A blocking client of a tether server.

    ``url``, ``key`` and ``tenant`` default to the ``TETHER_URL``,
    ``TETHER_KEY`` and ``TETHER_TENANT`` environment variables (and
    ``http://127.0.0.1:7070``). With ``tenant`` (a name or id), an admin key
    acts for that tenant: every request carries ``X-Tether-Tenant`` and
    reads and writes that tenant's jobs, queues and schedules (any other
    key is refused with ``PermissionDenied``). ``timeout`` is per request,
    in seconds (or a ``timedelta``). Requests that are
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
        tenant: Optional[str] = None,
        timeout: Duration = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self._config = _Config(url, key, tenant, timeout, retries)
        self._http = httpx.Client(
            base_url=self._config.url,
            headers=self._config.headers(),
            timeout=self._config.timeout,
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

    def iter_jobs(
        self,
        *,
        queue: Optional[str] = None,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        tag: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        depends_on: Optional[str] = None,
        workflow_id: Optional[str] = None,
        id_prefix: Optional[str] = None,
        created_after: Optional[Time] = None,
        created_before: Optional[Time] = None,
    ) -> Iterator[Job]:
        """Every job matching the filters of :meth:`list`, page after page
        (``limit`` is the size of a page)."""
        while True:
            page: JobPage = self.list(
                queue=queue,
                state=state,
                kind=kind,
                tag=tag,
                limit=limit,
                cursor=cursor,
                depends_on=depends_on,
                workflow_id=workflow_id,
                id_prefix=id_prefix,
                created_after=created_after,
                created_before=created_before,
            )
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
        read: Callable[[float], T],
        finished: Callable[[T], bool],
        timeout: Optional[Duration],
    ) -> T:
        deadline = None if timeout is None else time.monotonic() + seconds(timeout, "timeout")
        early = 0
        while True:
            started = time.monotonic()
            wait_ms = wait_ms_for(deadline, started)
            found = read(wait_ms / 1000)
            now = time.monotonic()
            if finished(found) or (deadline is not None and now >= deadline):
                return found
            if answered_early(started, now, wait_ms):
                early += 1
                pause = _backoff(early)
                time.sleep(pause if deadline is None else min(pause, deadline - now))
            else:
                early = 0

    @overload
    def wait(self, job: TaskJob[R], *, timeout: Optional[Duration] = None) -> TaskJob[R]: ...

    @overload
    def wait(self, job: Union[str, Job], *, timeout: Optional[Duration] = None) -> Job: ...

    def wait(self, job: Union[str, Job], *, timeout: Optional[Duration] = None) -> Job:
        """The job (an id or a :class:`Job`) once it has finished
        (``succeeded``, ``failed`` or ``cancelled``), or as it is when
        ``timeout`` has passed: check its ``state``. ``timeout`` is in
        **seconds** (or a ``timedelta``; ``None``: as long as it takes; 0:
        one read at once). Asks
        ``GET /v1/jobs/{id}?wait_ms=`` again every 30 s at most (the server's
        longest wait), so the server answers as soon as the job ends, without
        polling. A typed task's job (:class:`TaskJob`) is answered as one,
        its ``result`` read as the task's result type."""
        job_id = job.id if isinstance(job, Job) else job
        found = self._wait(
            lambda wait: self.get(job_id, wait=wait),
            lambda j: j.state in FINISHED_JOB_STATES,
            timeout,
        )
        if isinstance(job, TaskJob) and job.task is not None:
            return TaskJob.of(found, job.task)
        return found

    def wait_workflow(
        self, workflow_id: str, *, timeout: Optional[Duration] = None
    ) -> WorkflowDetail:
        """The workflow and its graph once it has finished (any state but
        ``running``), or as it is when ``timeout`` (in **seconds**; ``None``:
        no limit) has passed; as :meth:`wait`, over
        ``GET /v1/workflows/{id}?wait_ms=``."""
        return self._wait(
            lambda wait: self.get_workflow(workflow_id, wait=wait),
            lambda wf: wf.state != "running",
            timeout,
        )

    def enqueue_and_wait(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timeout: Optional[Duration] = None,
        priority: Optional[int] = None,
        run_at: Optional[Time] = None,
        delay: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        job_timeout: Optional[Duration] = None,
        idempotency_key: Optional[str] = None,
        unique_key: Optional[str] = None,
        tags: Optional[Iterable[str]] = None,
        expires_at: Optional[Time] = None,
        backoff: Optional[Backoff] = None,
        concurrency_key: Optional[str] = None,
        depends_on: Optional[Iterable[Union[str, Job]]] = None,
        dependency_failure: Optional[DependencyFailure] = None,
        workflow_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Job:
        """Enqueues a job (the arguments of :meth:`enqueue`, but the job's own
        ``timeout`` is ``job_timeout``) and waits for it (:meth:`wait`) up to
        ``timeout`` (seconds or a ``timedelta``; ``None``: no limit): the
        finished job with its ``result``, or the job as it is then. Its
        ``created`` is the enqueue's."""
        job = self.enqueue(
            queue,
            kind,
            payload,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            timeout=job_timeout,
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=tags,
            expires_at=expires_at,
            backoff=backoff,
            concurrency_key=concurrency_key,
            depends_on=depends_on,
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
            headers=headers,
        )
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
        tenant: Optional[str] = None,
        timeout: Duration = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self._config = _Config(url, key, tenant, timeout, retries)
        self._http = httpx.AsyncClient(
            base_url=self._config.url,
            headers=self._config.headers(),
            timeout=self._config.timeout,
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
                quiet = _worker_traffic.set(self._config.quiet)
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
                finally:
                    _worker_traffic.reset(quiet)
                return _decode(resp, parse)
            except TetherError as e:
                if attempt >= tries or not _retryable(e):
                    raise
            await asyncio.sleep(_backoff(attempt))

    async def iter_jobs(
        self,
        *,
        queue: Optional[str] = None,
        state: Optional[str] = None,
        kind: Optional[str] = None,
        tag: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        depends_on: Optional[str] = None,
        workflow_id: Optional[str] = None,
        id_prefix: Optional[str] = None,
        created_after: Optional[Time] = None,
        created_before: Optional[Time] = None,
    ) -> AsyncIterator[Job]:
        """Every job matching the filters of :meth:`list`, page after page
        (``limit`` is the size of a page)."""
        while True:
            page: JobPage = await self.list(
                queue=queue,
                state=state,
                kind=kind,
                tag=tag,
                limit=limit,
                cursor=cursor,
                depends_on=depends_on,
                workflow_id=workflow_id,
                id_prefix=id_prefix,
                created_after=created_after,
                created_before=created_before,
            )
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
        read: Callable[[float], Awaitable[T]],
        finished: Callable[[T], bool],
        timeout: Optional[Duration],
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + seconds(timeout, "timeout")
        early = 0
        while True:
            started = loop.time()
            wait_ms = wait_ms_for(deadline, started)
            found = await read(wait_ms / 1000)
            now = loop.time()
            if finished(found) or (deadline is not None and now >= deadline):
                return found
            if answered_early(started, now, wait_ms):
                early += 1
                pause = _backoff(early)
                await asyncio.sleep(pause if deadline is None else min(pause, deadline - now))
            else:
                early = 0

    @overload
    async def wait(
        self, job: TaskJob[R], *, timeout: Optional[Duration] = None
    ) -> TaskJob[R]: ...

    @overload
    async def wait(self, job: Union[str, Job], *, timeout: Optional[Duration] = None) -> Job: ...

    async def wait(self, job: Union[str, Job], *, timeout: Optional[Duration] = None) -> Job:
        """The job (an id or a :class:`Job`) once it has finished
        (``succeeded``, ``failed`` or ``cancelled``), or as it is when
        ``timeout`` (in **seconds** or a ``timedelta``; ``None``: no limit)
        has passed: see :meth:`Client.wait` (a :class:`TaskJob` is answered
        as one)."""
        job_id = job.id if isinstance(job, Job) else job
        found = await self._wait(
            lambda wait: self.get(job_id, wait=wait),
            lambda j: j.state in FINISHED_JOB_STATES,
            timeout,
        )
        if isinstance(job, TaskJob) and job.task is not None:
            return TaskJob.of(found, job.task)
        return found

    async def wait_workflow(
        self, workflow_id: str, *, timeout: Optional[Duration] = None
    ) -> WorkflowDetail:
        """The workflow and its graph once it has finished (any state but
        ``running``), or as it is when ``timeout`` (in **seconds**; ``None``:
        no limit) has passed."""
        return await self._wait(
            lambda wait: self.get_workflow(workflow_id, wait=wait),
            lambda wf: wf.state != "running",
            timeout,
        )

    async def enqueue_and_wait(
        self,
        queue: str,
        kind: str,
        payload: JSON = None,
        *,
        timeout: Optional[Duration] = None,
        priority: Optional[int] = None,
        run_at: Optional[Time] = None,
        delay: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        job_timeout: Optional[Duration] = None,
        idempotency_key: Optional[str] = None,
        unique_key: Optional[str] = None,
        tags: Optional[Iterable[str]] = None,
        expires_at: Optional[Time] = None,
        backoff: Optional[Backoff] = None,
        concurrency_key: Optional[str] = None,
        depends_on: Optional[Iterable[Union[str, Job]]] = None,
        dependency_failure: Optional[DependencyFailure] = None,
        workflow_id: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Job:
        """Enqueues a job (the arguments of :meth:`enqueue`, but the job's own
        ``timeout`` is ``job_timeout``) and waits for it up to ``timeout``
        (seconds or a ``timedelta``; ``None``: no limit); its ``created`` is
        the enqueue's."""
        job = await self.enqueue(
            queue,
            kind,
            payload,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            timeout=job_timeout,
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=tags,
            expires_at=expires_at,
            backoff=backoff,
            concurrency_key=concurrency_key,
            depends_on=depends_on,
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
            headers=headers,
        )
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
