"""The worker: claims jobs of one queue and runs their handlers.

It behaves like tether's Rust worker runtime:

- **Claims** are long-polls sized to the free slots (``concurrency`` minus the
  handlers running), so a job is never claimed without a slot to run it in.
  A claim in flight is never interrupted, so a shutdown may wait up to
  ``claim_wait`` before it starts draining.
- **Leases** are the queue's: a claim names a TTL only when ``lease_ttl``
  was given, so the lease the operator configured on the queue (its
  ``default_lease_ttl_ms``) is never overridden by a worker default.
- **Heartbeats** extend each held job every third of the lease its claim
  granted, in one batched request for the jobs due, carrying the progress
  handlers reported; an answer of ``cancel_requested`` sets the job's cancel
  event, and ``lease_lost`` marks the job lost (its outcome will be
  discarded) and sets the cancel event too.
- **Completions** are batched: whatever successes are waiting go in one
  ``POST /v1/jobs/complete``. Failures and snoozes use their own routes;
  every :class:`Snooze`, however short, is reported, so the job's history
  shows ``snoozed`` and any worker may claim it when it is due.
  Every report is retried on transport errors and ``unavailable``
  (resending is safe: a repeated report with the same token whose outcome
  already stands is answered like the first). A ``lease_lost`` answer means
  another owner has the job: the outcome is dropped and logged.
- **Shutdown** (SIGTERM/SIGINT, or :meth:`Worker.stop`): no more claims,
  running handlers get ``shutdown_grace`` seconds to finish, handlers still
  running after that are asked to stop and their jobs handed back with a
  snooze of 0 (the attempt is given back). A second signal aborts at once
  without handing anything back (the leases lapse and the server requeues
  the jobs).
- **Observing**: an optional :class:`WorkerObserver` is told of every claim
  answer, every failed request (each try) and every ``lease_lost`` answer.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
import uuid
import warnings
from datetime import datetime
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Set,
    Tuple,
    TypeVar,
    Union,
)

from ._client import AsyncClient, Client
from ._errors import Internal, LeaseLost, NotFound, TetherError, Unauthenticated, Unavailable
from ._models import JSON, ClaimedJob, CompleteItem, HeartbeatItem, ItemResult, Job

log = logging.getLogger("tether_client.worker")

T = TypeVar("T")

MAX_BATCH = 1000
"""Most items in one claim, heartbeat or completion batch (the server's limit)."""
COMPLETION_BATCH = 250
"""Most completions in one request."""
COMPLETIONS_IN_FLIGHT = 4
"""Most completion requests in flight at once."""
REPORT_TRIES = 8
"""How often a report (complete, fail, snooze) is tried before the worker gives
up on it; giving up is safe, the lease lapses and the server requeues the job."""
MIN_BACKOFF = 0.1
MAX_BACKOFF = 5.0
EARLY_SLACK = 0.25
EARLY_PAUSE = 1.0
FETCH_COOLDOWN = 0.005
ERROR_TAIL = 2000
"""The server keeps the last 2 000 characters of an error message."""
DEFAULT_LEASE_TTL = 30.0
"""The server's lease (seconds) when neither the worker nor the queue sets one;
assumed only for a claimed job that does not show its lease."""
HEARTBEAT_IDLE = 3600.0
"""Longest sleep of the heartbeater while it holds jobs (a job due sooner wakes it)."""


class RetryAfter(Exception):
    """Raise from a handler to fail the attempt and retry exactly ``seconds``
    later (the upstream said when), instead of the queue's backoff."""

    def __init__(self, seconds: float, message: Optional[str] = None) -> None:
        super().__init__(message or f"retry after {seconds} s")
        self.seconds = seconds
        self.message = message or f"retry after {seconds} s"


class Snooze(Exception):
    """Raise from a handler to put the job back for ``seconds`` without
    counting the attempt: "not now, not my fault" (a rate limit, a busy
    resource). Always reported to the server, however short: the job's
    history shows ``snoozed`` and any worker may claim it when it is due."""

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__(f"snooze {seconds} s")
        self.seconds = seconds


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


def _code_of(error: BaseException) -> str:
    """The code :meth:`WorkerObserver.on_error` is given for ``error``."""
    if isinstance(error, TetherError):
        return error.code
    if isinstance(error, asyncio.TimeoutError):
        return "timeout"
    return type(error).__name__


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


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

    ``id``, ``queue``, ``kind``, ``payload``, ``attempt`` and ``max_attempts``
    are the claimed job's; ``job`` is the whole :class:`Job`.
    """

    def __init__(self, job: ClaimedJob, worker_id: str, loop: asyncio.AbstractEventLoop) -> None:
        self.job: Job = job
        self.id: str = job.id
        self.queue: str = job.queue
        self.kind: str = job.kind
        self.payload: JSON = job.payload
        self.attempt: int = job.attempt
        self.max_attempts: int = job.max_attempts
        self.worker_id: str = worker_id
        # Made on first use: most handlers never look (and a threading.Event
        # costs more than the rest of this object).
        self._cancel_event: Optional[threading.Event] = None
        self._async_cancel = asyncio.Event()
        self._on_cancel: Optional[Callable[[], None]] = None
        """Called at the first cancel (the worker's watch of a handler that
        ignores it)."""
        self._loop = loop
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

    def progress(self, value: JSON) -> None:
        """Records progress (any JSON); the next heartbeat sends it. Thread-safe."""
        with self._lock:
            self._progress = (True, value)

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


class _InFlight:
    def __init__(self, claimed: ClaimedJob, ctx: JobContext, lease_ttl: float) -> None:
        self.claimed = claimed
        self.token = claimed.lease_token
        self.ctx = ctx
        self.lease_ttl = lease_ttl
        """The lease its claim granted (seconds): heartbeated every third of it."""
        self.last_beat = time.monotonic()
        """When its last heartbeat was sent (at first: when the claim answered)."""
        self.abandon = asyncio.Event()
        self.wake: Optional[Callable[[str], None]] = None
        """While a handler runs: ends the worker's wait for it, with why."""
        self.cancel_requested = False
        self.lost = False
        self.reporting_since: Optional[float] = None

    @property
    def interval(self) -> float:
        """Heartbeats run three times per lease, so one lost or slow one never
        costs it."""
        return self.lease_ttl / 3

    def beat_due(self) -> float:
        """When the next heartbeat is due (monotonic). A job whose outcome is
        being reported is left alone for one interval (a heartbeat racing the
        report would only record a spurious ``lease_lost``)."""
        due = self.last_beat + self.interval
        if self.reporting_since is not None:
            return max(due, self.reporting_since + self.interval)
        return due


# How a handler run ended, before it is mapped to a report.
_Ended = Tuple[str, Any]


class Worker:
    """Runs handlers for the jobs of one queue.

    ``client`` gives the server's address and key (a :class:`Client` or an
    :class:`AsyncClient`; the worker opens its own connection pool). Times
    are in seconds. ``lease_ttl`` (1 to 3600), when given, is the lease asked
    for at claim, overriding the queue's; left out (the default), claims name
    none and each job gets the lease configured on its queue (30 s unless the
    operator set another). Either way each job is heartbeated every third of
    the lease its claim granted. ``claim_wait`` is the long-poll of each
    claim (0 to 30); ``shutdown_grace`` how long running handlers may take
    to finish at shutdown. Every :class:`Snooze` is reported to the server
    (``max_in_process_snooze`` is accepted for old callers and ignored).
    ``observer`` (a :class:`WorkerObserver`) is told of every claim answer,
    failed request and ``lease_lost`` answer.
    """

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        queue: str,
        concurrency: int = 8,
        *,
        lease_ttl: Optional[float] = None,
        claim_wait: float = 5.0,
        shutdown_grace: float = 30.0,
        poll_interval: float = 1.0,
        max_in_process_snooze: Optional[float] = None,
        worker_id: Optional[str] = None,
        observer: Optional[WorkerObserver] = None,
    ) -> None:
        if not 1 <= concurrency <= MAX_BATCH:
            raise ValueError("concurrency must be 1..1000")
        if lease_ttl is not None and not 1.0 <= lease_ttl <= 3600.0:
            raise ValueError("lease_ttl must be 1..3600 seconds")
        if not 0.0 <= claim_wait <= 30.0:
            raise ValueError("claim_wait must be 0..30 seconds")
        self.queue = queue
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.claim_wait = claim_wait
        self.shutdown_grace = shutdown_grace
        self.poll_interval = poll_interval
        if max_in_process_snooze is not None:
            warnings.warn(
                "max_in_process_snooze has no effect: every Snooze is reported to the server",
                DeprecationWarning,
                stacklevel=2,
            )
        self.worker_id = worker_id or (
            f"py:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        )
        self.observer = observer
        self._url = client.url
        self._key = client.key
        self._timeout = client.timeout
        self._handlers: Dict[str, Tuple[Handler, bool]] = {}
        """By kind: the handler, and whether it is ``async def``."""
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._running = False

    # ---- configuration -------------------------------------------------------

    def handler(self, kind: str) -> Callable[[Handler], Handler]:
        """Decorator: runs the function for jobs of ``kind``. Plain functions run
        on a thread of their own; ``async def`` ones on the worker's event loop."""

        def register(fn: Handler) -> Handler:
            self.register(kind, fn)
            return fn

        return register

    def register(self, kind: str, fn: Handler) -> None:
        """Registers ``fn`` as the handler of ``kind`` (what :meth:`handler` does)."""
        self._handlers[kind] = (fn, inspect.iscoroutinefunction(fn))

    @property
    def jobs_in_flight(self) -> int:
        """Jobs held now (running, or waiting for their outcome to be acknowledged)."""
        return len(getattr(self, "_inflight", {}))

    # ---- observing -------------------------------------------------------------
    # The observer is the user's code: whatever it raises is logged, never
    # allowed to break a loop of the worker.

    def _saw_claim(self, jobs: List[ClaimedJob]) -> None:
        if self.observer is not None and jobs:
            try:
                self.observer.on_claim(self.worker_id, jobs)
            except Exception:
                log.exception("worker observer: on_claim raised")

    def _saw_error(self, op: str, error: BaseException) -> None:
        if self.observer is not None:
            try:
                self.observer.on_error(op, _code_of(error), error)
            except Exception:
                log.exception("worker observer: on_error raised")

    def _saw_lost(self, op: str, job_id: str, token: str) -> None:
        if self.observer is not None:
            try:
                self.observer.on_lease_lost(op, job_id, token)
            except Exception:
                log.exception("worker observer: on_lease_lost raised")

    def _saw_item(self, op: str, job_id: str, token: str, error: BaseException) -> None:
        """A failed item of a batch answer: an error of ``op``, and a lost
        lease when it says so."""
        self._saw_error(op, error)
        if isinstance(error, LeaseLost):
            self._saw_lost(op, job_id, token)

    # ---- running -------------------------------------------------------------

    def run(self) -> None:
        """Runs until SIGTERM or SIGINT (or :meth:`stop`), then drains and returns."""
        asyncio.run(self.run_async())

    def stop(self) -> None:
        """Begins a graceful shutdown (from any thread); ``run`` returns when done."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._request_stop)
            except RuntimeError:
                pass

    def abort(self) -> None:
        """Stops at once without reporting or handing back anything (from any thread)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._abort.set)
            except RuntimeError:
                pass

    async def run_async(self, *, handle_signals: bool = True) -> None:
        """Runs on the current event loop until a signal (when ``handle_signals``
        and on the main thread), :meth:`stop` or :meth:`abort`."""
        if self._running:
            raise RuntimeError("this worker is already running")
        self._running = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        self._abort = asyncio.Event()
        self._drained = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._beat_sooner = asyncio.Event()
        self._beat_at: Optional[float] = None
        """When the heartbeater wakes next (None: it holds nothing)."""
        self._free = self.concurrency
        self._inflight: Dict[str, _InFlight] = {}
        self._jobs: Set[asyncio.Task[None]] = set()
        self._completions: asyncio.Queue[Tuple[CompleteItem, asyncio.Future[str]]] = (
            asyncio.Queue()
        )
        self._client = AsyncClient(self._url, self._key, timeout=self._timeout, retries=0)
        installed = self._install_signals(loop) if handle_signals else []
        main = asyncio.ensure_future(self._main())
        aborted = asyncio.ensure_future(self._abort.wait())
        try:
            await asyncio.wait({main, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not main.done():
                log.warning("worker %s aborted: nothing is handed back", self.worker_id)
                main.cancel()
                for t in list(self._jobs):
                    t.cancel()
                await asyncio.gather(main, *self._jobs, return_exceptions=True)
                for fl in self._inflight.values():
                    fl.ctx._cancel()
            else:
                main.result()
        finally:
            aborted.cancel()
            for sig in installed:
                try:
                    loop.remove_signal_handler(sig)
                except (NotImplementedError, RuntimeError):
                    pass
            await self._client.aclose()
            self._running = False
            self._loop = None

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> List[int]:
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: List[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
        return installed

    def _on_signal(self, sig: int) -> None:
        if self._stop.is_set():
            log.warning("second signal: aborting without handing jobs back")
            self._abort.set()
        else:
            log.info("signal %s received: shutting down", sig)
            self._request_stop()

    def _request_stop(self) -> None:
        self._stop.set()
        self._slot_freed.set()

    async def _check_key(self) -> None:
        """Fails fast on a wrong key; anything else (an older server without
        ``/v1/whoami``, a server not up yet) is left to the claim loop."""
        try:
            me = await self._client.whoami()
        except Unauthenticated:
            raise
        except TetherError as e:
            log.debug("whoami: %s", e)
            return
        log.info("worker %s: tenant %s, key %s", self.worker_id, me.tenant.name, me.key_id)

    async def _main(self) -> None:
        await self._check_key()
        log.info("worker %s started on queue %s", self.worker_id, self.queue)
        heartbeater = asyncio.ensure_future(self._heartbeat_loop())
        completer = asyncio.ensure_future(self._completer_loop())
        fetcher = asyncio.ensure_future(self._fetch_loop())
        try:
            await self._stop.wait()
            log.info("worker %s shutting down: no more claims", self.worker_id)
            await fetcher
            if self._jobs:
                _, pending = await asyncio.wait(set(self._jobs), timeout=self.shutdown_grace)
                if pending:
                    log.warning(
                        "%d handlers still running after the shutdown grace: "
                        "asking them to stop and handing their jobs back",
                        len(pending),
                    )
                    for fl in list(self._inflight.values()):
                        fl.ctx._cancel()
                        fl.abandon.set()
                        if fl.wake is not None:
                            fl.wake("abandoned")
                while self._jobs:
                    await asyncio.wait(set(self._jobs))
            self._drained.set()
            await completer
            await heartbeater
            log.info("worker %s stopped", self.worker_id)
        finally:
            for t in (fetcher, completer, heartbeater):
                t.cancel()

    # ---- claiming --------------------------------------------------------------

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass

    async def _fetch_loop(self) -> None:
        backoff = MIN_BACKOFF
        target = max(1, min(self.concurrency // 2, MAX_BATCH))
        wait_ms = _ms(self.claim_wait)
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            if self._free <= 0:
                self._slot_freed.clear()
                await self._slot_freed.wait()
                continue
            if self._free < target:
                deadline = loop.time() + FETCH_COOLDOWN
                while self._free < target and not self._stop.is_set():
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    self._slot_freed.clear()
                    try:
                        await asyncio.wait_for(self._slot_freed.wait(), timeout=left)
                    except asyncio.TimeoutError:
                        break
            if self._stop.is_set():
                break
            limit = min(self._free, MAX_BATCH)
            self._free -= limit
            started = loop.time()
            try:
                claimed = await self._client.claim(
                    self.queue,
                    self.worker_id,
                    limit=limit,
                    # Only a TTL the user set: otherwise the queue's applies.
                    lease_ttl_ms=None if self.lease_ttl is None else _ms(self.lease_ttl),
                    wait_ms=wait_ms,
                )
            except TetherError as e:
                self._free += limit
                self._saw_error("claim", e)
                log.warning("claim failed (%s); trying again in %.1f s", e, backoff)
                await self._sleep_unless_stopped(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = MIN_BACKOFF
            self._saw_claim(claimed)
            if self._stop.is_set():
                self._free += limit
                for c in claimed:
                    await self._hand_back_unstarted(c)
                break
            for c in claimed[:limit]:
                self._spawn(c)
            for c in claimed[limit:]:
                log.warning("the server answered more jobs than asked for; handing %s back", c.id)
                await self._hand_back_unstarted(c)
            self._free += limit - min(len(claimed), limit)
            elapsed = loop.time() - started
            if len(claimed) < limit:
                if wait_ms == 0:
                    await self._sleep_unless_stopped(self.poll_interval)
                elif not claimed and elapsed + EARLY_SLACK < self.claim_wait:
                    # The server did not hold the long-poll: pause, don't spin.
                    await self._sleep_unless_stopped(min(self.claim_wait - elapsed, EARLY_PAUSE))
        log.debug("fetcher stopped")

    async def _hand_back_unstarted(self, c: ClaimedJob) -> None:
        try:
            await self._retrying("snooze", lambda: self._client.snooze(c.id, c.lease_token, 0))
        except LeaseLost:
            self._saw_lost("snooze", c.id, c.lease_token)
        except TetherError as e:
            log.warning("could not hand back job %s claimed during shutdown (%s)", c.id, e)

    def _spawn(self, claimed: ClaimedJob) -> None:
        loop = asyncio.get_running_loop()
        ctx = JobContext(claimed, self.worker_id, loop)
        fl = _InFlight(claimed, ctx, _granted_lease(claimed, self.lease_ttl))
        self._inflight[claimed.id] = fl
        due = fl.beat_due()
        if self._beat_at is None or due < self._beat_at:
            self._beat_at = due
            self._beat_sooner.set()
        task = asyncio.ensure_future(self._run_job(fl))
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    # ---- running one job ---------------------------------------------------------

    async def _run_job(self, fl: _InFlight) -> None:
        try:
            try:
                ended = await self._execute(fl)
            finally:
                # The handler is done: its slot frees now, not after the report.
                self._free += 1
                self._slot_freed.set()
            fl.reporting_since = time.monotonic()
            await self._report(fl, ended)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s: unexpected worker error", fl.claimed.id)
        finally:
            self._inflight.pop(fl.claimed.id, None)

    def _start_handler(self, fn: Handler, is_async: bool, ctx: JobContext) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        if is_async:
            return loop.create_task(fn(ctx))
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if fut.done():
                return
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)

        def target() -> None:
            try:
                value = fn(ctx)
                if inspect.isawaitable(value):
                    raise TypeError("a sync handler returned an awaitable; use async def")
                ok, out = True, value
            except BaseException as e:  # the handler's failure is the job's
                ok, out = False, e
            try:
                loop.call_soon_threadsafe(settle, ok, out)
            except RuntimeError:
                pass  # the loop is gone (aborted): nobody waits for this job

        threading.Thread(
            target=target, name=f"tether-job-{ctx.id[:8]}", daemon=True
        ).start()
        return fut

    async def _execute(self, fl: _InFlight) -> _Ended:
        """Runs the handler until it ends, times out, ignores a cancel for a
        whole lease, or is abandoned at shutdown. A :class:`Snooze` is an
        answer like any other: it is reported, never slept here."""
        handler = self._handlers.get(fl.claimed.kind)
        if handler is None:
            return ("no_handler", None)
        ctx = fl.ctx
        timeout_ms = fl.claimed.timeout_ms if fl.claimed.timeout_ms else None
        loop = asyncio.get_running_loop()
        run = self._start_handler(handler[0], handler[1], ctx)
        # One future, woken by whatever ends the wait first: the handler, its
        # timeout, the end of the shutdown grace (fl.wake) or a cancel it
        # ignored for a whole lease. Callbacks and timers, not a task per
        # condition: this is every job's path.
        woken: asyncio.Future[str] = loop.create_future()

        def wake(why: str) -> None:
            if not woken.done():
                woken.set_result(why)

        timers: List[asyncio.TimerHandle] = []

        def unanswered() -> None:
            timers.append(loop.call_later(fl.lease_ttl, wake, "unanswered"))

        run.add_done_callback(lambda _: wake("finished"))
        if timeout_ms is not None:
            timers.append(loop.call_later(timeout_ms / 1000, wake, "timed_out"))
        fl.wake = wake
        ctx._on_cancel = unanswered
        if ctx.cancelled:
            unanswered()
        if fl.abandon.is_set():
            wake("abandoned")
        try:
            why = await woken
        finally:
            fl.wake = None
            ctx._on_cancel = None
            for t in timers:
                t.cancel()
        if run.done():  # the handler's end wins over a timer that fired with it
            exc = run.exception()
            if exc is None:
                return ("returned", run.result())
            return ("raised", exc)
        ctx._cancel()
        run.cancel()
        if why == "timed_out":
            return ("timed_out", timeout_ms)
        return (why, None)

    # ---- reporting -------------------------------------------------------------

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, tried again on ``unavailable``, ``internal`` and
        transport errors; every failed try is shown to the observer as an
        error of ``what``."""
        delay = MIN_BACKOFF
        tries = 0
        while True:
            tries += 1
            try:
                return await call()
            except TetherError as e:
                self._saw_error(what, e)
                if not isinstance(e, (Unavailable, Internal)) or tries >= REPORT_TRIES:
                    raise
                log.warning("%s failed (%s); trying again in %.1f s", what, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    async def _report(self, fl: _InFlight, ended: _Ended) -> None:
        job = fl.claimed
        how, value = ended
        if fl.lost:
            log.warning(
                "job %s: lease lost while the handler ran (another owner has the job): "
                "its outcome is discarded",
                job.id,
            )
            return
        if how == "abandoned":
            await self._snooze(fl, 0, "handed back at shutdown (attempt given back)")
            return
        fail: Dict[str, Any]
        if fl.cancel_requested:
            fail = {"error": "cancelled on request", "cancelled": True}
        elif how == "unanswered":
            fail = {"error": "cancelled: the handler did not stop when asked", "cancelled": True}
        elif how == "no_handler":
            fail = {"error": f"no handler for kind {job.kind} on worker {self.worker_id}"}
        elif how == "timed_out":
            fail = {"error": f"timed out after {value} ms"}
        elif how == "raised" and isinstance(value, Snooze):
            await self._snooze(fl, _ms(value.seconds), "snoozed")
            return
        elif how == "raised" and isinstance(value, RetryAfter):
            fail = {"error": value.message, "retry_after_ms": _ms(value.seconds)}
        elif how == "raised" and isinstance(value, Retry):
            fail = {"error": value.message}
        elif how == "raised" and isinstance(value, Fatal):
            fail = {"error": value.message, "fatal": True}
        elif how == "raised":
            text = "".join(traceback.format_exception(type(value), value, value.__traceback__))
            fail = {"error": text[-ERROR_TAIL:]}
        else:
            try:
                if value is not None:  # no result (the usual) needs no check
                    json.dumps(value)
            except (TypeError, ValueError) as e:
                fail = {"error": f"the handler's result is not JSON: {e}"}
            else:
                await self._complete(fl, value)
                return
        await self._fail(fl, fail)

    async def _fail(self, fl: _InFlight, fail: Dict[str, Any]) -> None:
        job = fl.claimed
        try:
            answer = await self._retrying(
                "fail", lambda: self._client.fail(job.id, fl.token, **fail)
            )
        except (LeaseLost, NotFound) as e:
            if isinstance(e, LeaseLost):
                self._saw_lost("fail", job.id, fl.token)
            log.warning("job %s: lease lost (another owner has the job): the failure is discarded",
                        job.id)
            return
        except TetherError as e:
            log.error("job %s: could not report the failure (%s); the lease will lapse and the "
                      "server requeue the job", job.id, e)
            return
        if answer.state == "queued":
            log.info("job %s: attempt failed, retry scheduled: %s", job.id, fail["error"][-200:])
        else:
            log.warning("job %s: %s: %s", job.id, answer.state, fail["error"][-200:])

    async def _snooze(self, fl: _InFlight, delay_ms: int, what: str) -> None:
        job = fl.claimed
        try:
            answer = await self._retrying(
                "snooze", lambda: self._client.snooze(job.id, fl.token, delay_ms)
            )
        except (LeaseLost, NotFound) as e:
            if isinstance(e, LeaseLost):
                self._saw_lost("snooze", job.id, fl.token)
            log.warning("job %s: lease lost (another owner has the job): the snooze is discarded",
                        job.id)
            return
        except TetherError as e:
            log.error("job %s: could not snooze (%s); the lease will lapse and the server "
                      "requeue the job", job.id, e)
            return
        log.info("job %s: %s (now %s)", job.id, what, answer.state)

    async def _complete(self, fl: _InFlight, result: Any) -> None:
        job = fl.claimed
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._completions.put_nowait((CompleteItem(job.id, fl.token, result), fut))
        outcome = await fut
        if outcome == "done":
            log.debug("job %s succeeded", job.id)
        elif outcome == "lost":
            log.warning("job %s: lease lost (another owner has the job): the result is discarded",
                        job.id)
        elif outcome.startswith("rejected:"):
            log.warning("job %s: the result was refused; failing the attempt", job.id)
            await self._fail(fl, {"error": f"the result could not be stored: {outcome[9:]}"})
        else:
            log.error("job %s: could not report the result (%s); the lease will lapse and the "
                      "server requeue the job", job.id, outcome)

    async def _completer_loop(self) -> None:
        in_flight: Set[asyncio.Task[None]] = set()
        drained = asyncio.ensure_future(self._drained.wait())
        try:
            while True:
                while len(in_flight) >= COMPLETIONS_IN_FLIGHT:
                    await asyncio.wait(set(in_flight), return_when=asyncio.FIRST_COMPLETED)
                if self._completions.empty():
                    get = asyncio.ensure_future(self._completions.get())
                    done, _ = await asyncio.wait(
                        {get, drained}, return_when=asyncio.FIRST_COMPLETED
                    )
                    if get not in done:
                        get.cancel()
                        break
                    batch = [get.result()]
                else:
                    batch = [self._completions.get_nowait()]
                while len(batch) < COMPLETION_BATCH and not self._completions.empty():
                    batch.append(self._completions.get_nowait())
                t = asyncio.ensure_future(self._complete_batch(batch))
                in_flight.add(t)
                t.add_done_callback(in_flight.discard)
            if in_flight:
                await asyncio.wait(set(in_flight))
        finally:
            drained.cancel()

    def _completer_of(self, item: CompleteItem) -> Callable[[], Awaitable[List[ItemResult]]]:
        return lambda: self._client.complete_batch([item])

    async def _complete_batch(self, batch: List[Tuple[CompleteItem, asyncio.Future[str]]]) -> None:
        items = [item for item, _ in batch]

        def answer(fut: asyncio.Future[str], outcome: str) -> None:
            if not fut.done():
                fut.set_result(outcome)

        def outcome_of(e: BaseException) -> str:
            if isinstance(e, (LeaseLost, NotFound)):
                return "lost"
            if isinstance(e, (Unavailable, Internal)):
                return f"gave up: {e}"
            return f"rejected:{e}"

        try:
            try:
                results = await self._retrying(
                    "complete", lambda: self._client.complete_batch(items)
                )
            except TetherError as e:
                if isinstance(e, (Unavailable, Internal)) or len(batch) == 1:
                    for _, fut in batch:
                        answer(fut, outcome_of(e))
                    return
                # Refused whole (one oversize result refuses them all): one by one.
                for item, fut in batch:
                    try:
                        one = await self._retrying("complete", self._completer_of(item))
                        r = one[0]
                        if not r.ok:
                            self._saw_item("complete", item.id, item.lease_token,
                                           r.error or Exception("?"))
                        answer(fut, "done" if r.ok else outcome_of(r.error or Exception("?")))
                    except TetherError as e1:
                        answer(fut, outcome_of(e1))
                return
            for i, (item, fut) in enumerate(batch):
                if i >= len(results):
                    answer(fut, "gave up: the server answered fewer items than it was given")
                elif results[i].ok:
                    answer(fut, "done")
                else:
                    error = results[i].error or Exception("unknown error")
                    self._saw_item("complete", item.id, item.lease_token, error)
                    answer(fut, outcome_of(error))
        finally:
            for _, fut in batch:
                answer(fut, "gave up: the completer stopped")

    # ---- heartbeats ------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Heartbeats every held job every third of its own lease: wakes when
        the first job is due and takes along every job due within the
        shortest interval among them, so jobs of one lease share a batch."""
        backoff = MIN_BACKOFF
        retry_at: Optional[float] = None
        while not self._drained.is_set():
            due = min((fl.beat_due() for fl in self._inflight.values()), default=None)
            self._beat_at = due if retry_at is None or due is None else min(due, retry_at)
            self._beat_sooner.clear()
            wait = HEARTBEAT_IDLE if self._beat_at is None else self._beat_at - time.monotonic()
            drained = asyncio.ensure_future(self._drained.wait())
            sooner = asyncio.ensure_future(self._beat_sooner.wait())
            try:
                await asyncio.wait(
                    {drained, sooner}, timeout=max(0.0, wait),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                drained.cancel()
                sooner.cancel()
            if self._drained.is_set():
                break
            if self._beat_sooner.is_set():
                continue
            failed = await self._heartbeat_cycle()
            if failed is None:
                backoff = MIN_BACKOFF
                retry_at = None
            else:
                # Try again soon: two more misses would cost the leases.
                retry_at = time.monotonic() + min(backoff, failed)
                backoff = min(backoff * 2, MAX_BACKOFF)
        log.debug("heartbeater stopped")

    async def _heartbeat_cycle(self) -> Optional[float]:
        """Heartbeats the jobs due now or within the shortest interval among
        the held ones; answers the shortest interval of a batch that failed,
        if one did."""
        held = list(self._inflight.values())
        if not held:
            return None
        now = time.monotonic()
        window = min(fl.interval for fl in held)
        held = [
            fl
            for fl in held
            if (fl.beat_due() <= now + window if fl.reporting_since is None
                # Reporting: only once the report has taken a whole interval.
                else now - fl.reporting_since >= fl.interval)
        ]
        failed: Optional[float] = None
        for start in range(0, len(held), MAX_BATCH):
            chunk = held[start : start + MAX_BATCH]
            progress = [fl.ctx._take_progress() for fl in chunk]
            items = [
                HeartbeatItem(fl.claimed.id, fl.token, progress=p[1] if p[0] else None)
                for fl, p in zip(chunk, progress)
            ]
            interval = min(fl.interval for fl in chunk)
            sent = time.monotonic()
            try:
                # A stuck round trip must not cost the leases: give up after a
                # third of the lease, so the next cycle comes in time.
                results = await asyncio.wait_for(
                    self._client.heartbeat_batch(items), timeout=max(interval, 1.0)
                )
            except (TetherError, asyncio.TimeoutError) as e:
                failed = interval if failed is None else min(failed, interval)
                self._saw_error("heartbeat", e)
                log.warning("heartbeat of %d jobs failed: %r", len(chunk), e)
                for fl, p in zip(chunk, progress):
                    if p[0]:
                        fl.ctx._restore_progress(p[1])
                continue
            for fl in chunk:
                fl.last_beat = sent
            for fl, r in zip(chunk, results):
                if r.ok:
                    if r.ack is not None and r.ack.cancel_requested and not fl.cancel_requested:
                        fl.cancel_requested = True
                        log.info("job %s: cancel requested: asking the handler to stop",
                                 fl.claimed.id)
                        fl.ctx._cancel()
                    continue
                self._saw_item("heartbeat", fl.claimed.id, fl.token, r.error or Exception("?"))
                if isinstance(r.error, (LeaseLost, NotFound)):
                    if fl.reporting_since is None and not fl.lost:
                        fl.lost = True
                        log.warning("job %s: heartbeat: lease lost to another owner; "
                                    "stopping the handler", fl.claimed.id)
                        fl.ctx._cancel()
                else:
                    log.warning("job %s: heartbeat refused: %s", fl.claimed.id, r.error)
        return failed
