"""The HTTP clients: :class:`Client` (blocking) and :class:`AsyncClient`."""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Optional, TypeVar

import httpx

from ._errors import DecodeError, TetherError, TransportError, Unavailable, error_from_body
from ._models import Job, JobEvent, Workflow, WorkflowState
from ._routes_async import AsyncRoutes
from ._routes_sync import SyncRoutes
from ._util import UNSET

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 4
USER_AGENT = "tether-client-python/0.1.0"


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
