"""What a handler sees and raises: its job's context, the outcomes it can
ask for (retry after a delay, snooze, fail for good), and the observer a
worker reports to. The worker that runs handlers is in ``_worker``.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Literal,
    Optional,
    Tuple,
)

from ._duration import Duration, seconds
from ._errors import (
    Internal,
    LeaseLost,
    NotFound,
    TetherError,
    Unavailable,
)
from ._models import JSON, ClaimedJob, DependencyJob, Job

DEFAULT_LEASE_TTL = 30.0
"""The server's lease (seconds) when neither the worker nor the queue sets one;
assumed only for a claimed job that does not show its lease."""


class RetryAfter(Exception):
    """Raise from a handler to fail the attempt and retry exactly ``delay``
    later (seconds or a ``timedelta``: the upstream said when), instead of
    the queue's backoff. ``seconds`` is the delay in seconds."""

    def __init__(self, delay: Duration, message: Optional[str] = None) -> None:
        self.seconds = seconds(delay, "RetryAfter delay")
        self.message = message or f"retry after {self.seconds:g} s"
        super().__init__(self.message)


class Snooze(Exception):
    """Raise from a handler to put the job back for ``delay`` (seconds or a
    ``timedelta``) without counting the attempt: "not now, not my fault" (a
    rate limit, a busy resource). Always reported to the server, however
    short: the job's history shows ``snoozed`` and any worker may claim it
    when it is due. ``seconds`` is the delay in seconds."""

    def __init__(self, delay: Duration = 0.0) -> None:
        self.seconds = seconds(delay, "Snooze delay")
        super().__init__(f"snooze {self.seconds:g} s")


class Retry(Exception):
    """Raise from a handler to fail the attempt retryably with exactly
    ``message`` as the job's error (no traceback appended); the job is
    retried with the queue's backoff, or ``failed`` when out of attempts."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Fatal(Exception):
    """Raise from a handler to fail the job for good: no more attempts."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


OutcomeStatus = Literal["succeeded", "failed", "retry_after", "snooze", "cancelled"]
"""What a handler's run comes to (see :class:`Outcome`)."""


@dataclass(frozen=True)
class Outcome:
    """What a job's run came to, as an ``@worker.after`` hook is told: the
    report the worker sends for it.

    - ``succeeded``: the handler returned ``result`` (JSON).
    - ``failed``: the attempt failed (``error``: what the handler or a
      ``before`` hook raised, a ``TimeoutError`` when the job ran past its
      timeout, a ``TypeError`` when the result is not JSON); the job is
      retried with backoff, or ``failed`` for good when it raised
      :class:`Fatal` or was on its last attempt.
    - ``retry_after``: it raised :class:`RetryAfter` (``error``); it is
      retried ``delay`` seconds later.
    - ``snooze``: it raised :class:`Snooze` (``error``), or was handed back
      at shutdown (no ``error``, ``delay`` 0): queued again ``delay``
      seconds later, the attempt given back.
    - ``cancelled``: a cancel was asked for while it ran; ``error`` is what
      it raised, if it raised.
    """

    status: OutcomeStatus
    result: JSON = None
    error: Optional[BaseException] = None
    delay: Optional[float] = None
    """Seconds, for ``retry_after`` and ``snooze``."""

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class WorkerObserver:
    """What a :class:`Worker` sees on the wire, for metrics and logging.

    Subclass it and override the methods you need (each does nothing here),
    then pass an instance as ``Worker(..., observer=...)``. The methods are
    called synchronously on the worker's event loop, so they must be quick
    and must not block; an exception raised in one is logged and swallowed,
    never breaking the worker.

    ``op`` is the request: ``"claim"``, ``"heartbeat"``, ``"complete"``,
    ``"fail"`` or ``"snooze"``.
    """

    def on_claim(self, worker_id: str, jobs: List[ClaimedJob]) -> None:
        """A claim answered ``jobs`` (never empty; each with its
        ``lease_token``), called as soon as the answer arrives, before any
        of their handlers starts."""

    def on_error(self, op: str, code: str, error: BaseException) -> None:
        """A request failed: every try (retried ones too), and every failed
        item of a batch answer. ``code`` is the API error code
        (``"unavailable"``, ``"lease_lost"``, ...), ``"transport"`` when no
        answer came, ``"timeout"`` when the worker gave up waiting for a
        heartbeat, ``"decode"`` for an answer it could not read; ``error``
        is the exception."""

    def on_lease_lost(self, op: str, job_id: str, lease_token: str) -> None:
        """The server answered ``lease_lost`` for ``job_id`` (a batch item,
        or a fail or snooze): the token presented no longer owns the job and
        the outcome is discarded. Comes after the matching :meth:`on_error`."""

    def on_reports_sent(self, via: str, completions: int, failures: int) -> None:
        """A request that carried completions or failures was answered or
        failed (every try): ``via`` is ``"claim"`` when they rode a claim,
        ``"complete"`` (``POST /v1/jobs/complete``) or ``"fail"`` (``POST
        /v1/jobs/{id}/fail``) when they went by their own routes. Snoozes,
        which have only their own route, are not counted."""


def _code_of(error: BaseException) -> str:
    """The code :meth:`WorkerObserver.on_error` is given for ``error``."""
    if isinstance(error, TetherError):
        return error.code
    if isinstance(error, asyncio.TimeoutError):
        return "timeout"
    return type(error).__name__


def _outcome_of(error: BaseException) -> str:
    """What a report that was answered ``error`` comes to (see ``_submit``)."""
    if isinstance(error, (LeaseLost, NotFound)):
        return "lost"
    if isinstance(error, (Unavailable, Internal)):
        return f"gave up: {error}"
    return f"rejected:{error}"


def _instant(text: Optional[str]) -> Optional[datetime]:
    """An RFC 3339 time as the server writes it (``...Z``), or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None


def _granted_lease(job: Job, asked: Optional[float]) -> float:
    """The lease (seconds) a claim granted ``job``: ``lease_expires_at`` minus
    ``heartbeat_at``, both set by the claim on the server's clock; else what
    the worker asked for, else the server's default (30 s)."""
    expires = _instant(job.lease_expires_at)
    since = _instant(job.heartbeat_at or job.started_at)
    if expires is not None and since is not None:
        seconds = (expires - since).total_seconds()
        if 1.0 <= seconds <= 3600.0:
            return seconds
    return asked if asked is not None else DEFAULT_LEASE_TTL


class JobContext:
    """What a handler gets: the job, progress reporting and cancellation.

    ``id``, ``queue``, ``kind``, ``payload``, ``attempt``, ``max_attempts``,
    ``workflow_id`` and ``headers`` are the claimed job's; ``job`` is the whole
    :class:`Job`. :meth:`dependencies` (or ``await``
    :meth:`dependencies_async`) reads the jobs it waited for, with their
    results. A handler fans out into its own workflow with
    ``client.enqueue(..., workflow_id=ctx.workflow_id, depends_on=[...])``.
    """

    def __init__(
        self,
        job: ClaimedJob,
        worker_id: str,
        loop: asyncio.AbstractEventLoop,
        *,
        read_dependencies: Optional[Callable[[str], Awaitable[List[DependencyJob]]]] = None,
    ) -> None:
        self.job: Job = job
        self.id: str = job.id
        self.queue: str = job.queue
        self.kind: str = job.kind
        self.payload: JSON = job.payload
        self.attempt: int = job.attempt
        self.max_attempts: int = job.max_attempts
        self.workflow_id: Optional[str] = job.workflow_id
        """The workflow the job belongs to (None outside one)."""
        self.headers: Dict[str, str] = job.headers
        """The string headers the job was enqueued with (``{}`` when none)."""
        self.worker_id: str = worker_id
        # Made on first use: most handlers never look (and a threading.Event
        # costs more than the rest of this object).
        self._cancel_event: Optional[threading.Event] = None
        self._async_cancel = asyncio.Event()
        self._on_cancel: Optional[Callable[[], None]] = None
        """Called at the first cancel (the worker's watch of a handler that
        ignores it)."""
        self._on_progress: Optional[Callable[[], None]] = None
        """Called on the event loop when progress is reported and none was
        waiting to be sent (the worker then sends it soon)."""
        self._loop = loop
        self._read_dependencies = read_dependencies
        self._lock = threading.Lock()
        self._progress: Tuple[bool, JSON] = (False, None)

    @property
    def cancel_event(self) -> threading.Event:
        """Set when the job should stop (a cancel request, a lost lease, the
        timeout, the end of the shutdown grace). Sync handlers can
        ``job.cancel_event.wait(seconds)`` instead of ``time.sleep``."""
        with self._lock:
            if self._cancel_event is None:
                self._cancel_event = threading.Event()
                if self._async_cancel.is_set():
                    self._cancel_event.set()
            return self._cancel_event

    @property
    def cancelled(self) -> bool:
        """Whether the handler has been asked to stop."""
        return self._async_cancel.is_set()

    async def wait_cancelled(self) -> None:
        """Returns once the handler has been asked to stop (for async handlers)."""
        await self._async_cancel.wait()

    def dependencies(self) -> List[DependencyJob]:
        """The jobs this one waited for, in the order it named them, with their
        ``state`` and ``result`` (``GET /v1/jobs/{id}/dependencies``): how a
        handler uses its parents' results. Empty for a job without
        dependencies. Blocks: call it from a plain (sync) handler; an
        ``async def`` handler awaits :meth:`dependencies_async` instead.
        Retried on ``unavailable`` and transport errors, like a client's reads."""
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError(
                "ctx.dependencies() blocks the worker's event loop: "
                "in an async def handler, use await ctx.dependencies_async()"
            )
        if not self.job.depends_on:
            return []
        if self._loop.is_closed():
            raise RuntimeError("the worker has stopped")
        return asyncio.run_coroutine_threadsafe(self.dependencies_async(), self._loop).result()

    async def dependencies_async(self) -> List[DependencyJob]:
        """:meth:`dependencies` for ``async def`` handlers (on the worker's loop)."""
        if not self.job.depends_on:
            return []
        if self._read_dependencies is None:
            raise RuntimeError("this JobContext was not made by a Worker: it cannot read")
        return await self._read_dependencies(self.id)

    def progress(self, value: JSON) -> None:
        """Records progress (any JSON); the worker sends it within about half
        a second (the latest value, when it is reported faster). Thread-safe."""
        with self._lock:
            fresh = not self._progress[0]
            self._progress = (True, value)
        # Only the first value since the last send wakes the worker: a handler
        # reporting in a tight loop costs a lock per call, not a loop callback.
        if fresh and self._on_progress is not None:
            try:
                self._loop.call_soon_threadsafe(self._on_progress)
            except RuntimeError:
                pass  # the worker's loop is gone (it was aborted)

    def _has_progress(self) -> bool:
        with self._lock:
            return self._progress[0]

    def _take_progress(self) -> Tuple[bool, JSON]:
        with self._lock:
            p, self._progress = self._progress, (False, None)
            return p

    def _restore_progress(self, value: JSON) -> None:
        with self._lock:
            if not self._progress[0]:
                self._progress = (True, value)

    def _cancel(self) -> None:
        """Called on the event loop's thread."""
        first = not self._async_cancel.is_set()
        with self._lock:  # against a cancel_event being made now
            self._async_cancel.set()
            event = self._cancel_event
        if event is not None:
            event.set()
        if first and self._on_cancel is not None:
            self._on_cancel()

    def __repr__(self) -> str:
        return f"JobContext(id={self.id!r}, kind={self.kind!r}, attempt={self.attempt})"


Handler = Callable[[JobContext], Any]
"""A handler: takes the job's context, answers its result (or an awaitable of it)."""

BeforeHook = Callable[[JobContext], Any]
"""An ``@worker.before`` hook: takes the job's context (sync, or ``async def``)."""
AfterHook = Callable[[JobContext, Outcome], Any]
"""An ``@worker.after`` hook: takes the job's context and its :class:`Outcome`."""
ErrorHook = Callable[[JobContext, BaseException], Any]
"""An ``@worker.on_error`` hook: takes the job's context and the exception."""
