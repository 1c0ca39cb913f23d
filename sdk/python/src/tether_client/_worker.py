"""The worker: claims jobs of one or more queues and runs their handlers.

It behaves like tether's Rust worker runtime:

- **Claims** are long-polls sized to the free slots (a queue's concurrency
  minus its handlers running), so a job is never claimed without a slot to
  run it in. Each queue has its own slots and its own claim loop; the
  queues share the worker's connection pool, heartbeats, reports, stream
  of cancel requests and handlers. A claim in flight is never
  interrupted, so a shutdown may wait up to ``claim_wait`` before it
  starts draining.
- **Leases** are the queue's: a claim names a TTL only when ``lease_ttl``
  was given, so the lease the operator configured on the queue (its
  ``default_lease_ttl_ms``) is never overridden by a worker default.
- **Heartbeats** extend each held job every third of the lease its claim
  granted, in one batched request for the jobs due, carrying the progress
  handlers reported; an answer of ``cancel_requested`` sets the job's cancel
  event, and ``lease_lost`` marks the job lost (its outcome will be
  discarded) and sets the cancel event too. A job whose outcome is on its
  way is no longer heartbeated (after the report no lease is left).
  Progress does not wait for the jobs to be due: a heartbeat of the jobs
  with new progress goes within ``PROGRESS_EVERY`` (0.5 s) of the report,
  at most one per ``PROGRESS_EVERY`` however often handlers report.
- **Cancel requests are pushed**: while it runs, the worker holds one
  stream of the tenant's ``cancel_requested`` events (``GET /v1/events``);
  one naming a job it runs does what a heartbeat's ``cancel_requested``
  does, so the handler hears of it within moments, not at the next
  heartbeat (which still notices it, should the stream miss it). The
  worker claims once the stream is open, so no cancel of a job it claims
  comes before it. A refused stream (429: the tenant has too many open) or
  one that fails otherwise is logged once and tried again with backoff;
  the worker goes on with heartbeats meanwhile.
- **Reports ride claims**: completions and failures waiting when the worker
  next claims go in that claim (``complete`` and ``fail``, applied in the
  claim's transaction: one round trip and one commit for both); such a claim
  does not long-poll. What no claim takes within ``CARRY_WAIT`` (20 ms), or
  at once while no claim is coming (the worker long-polls, sleeps or stops),
  goes by its own route: completions batched in ``POST /v1/jobs/complete``,
  failures by ``POST /v1/jobs/{id}/fail``; so do the reports of a claim that
  failed or was refused. Snoozes use their own route; every
  :class:`Snooze`, however short, is reported, so the job's history shows
  ``snoozed`` and any worker may claim it when it is due.
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
  answer, every failed request (each try), every ``lease_lost`` answer and
  every request that carried reports (a claim or a report route).
- **Hooks** (``@worker.before``, ``@worker.after``, ``@worker.on_error``)
  run around every handler, in its context (its thread or its task), and
  a job whose headers carry W3C trace context runs them and the handler in
  a span of its own (``_tracing``).
- **Presence**: the worker announces itself (``PUT /v1/workers/{id}``) when
  it starts and every minute, so ``GET /v1/workers`` lists it while idle.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import json
import logging
import os
import random
import signal
import socket
import threading
import time
import traceback
import uuid
import warnings
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Callable,
    Deque,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypeVar,
    Union,
    overload,
)

from ._client import AsyncClient, Client, _worker_client, _worker_traffic
from ._duration import Duration, seconds
from ._errors import (
    DecodeError,
    Internal,
    InvalidArgument,
    LeaseLost,
    NotFound,
    TetherError,
    Unauthenticated,
    Unavailable,
)
from ._handler import (
    AfterHook,
    BeforeHook,
    ErrorHook,
    Fatal,
    Handler,
    JobContext,
    Outcome,
    Retry,
    RetryAfter,
    Snooze,
    WorkerObserver,
    _code_of,
    _granted_lease,
    _outcome_of,
)
from ._models import (
    ClaimedJob,
    CompleteItem,
    DependencyJob,
    FailItem,
    FeedEvent,
    HeartbeatItem,
    ItemResult,
    Job,
)
from ._task import Task, TaskHandler
from ._tracing import end_job_span, start_job_span
from ._version import VERSION

log = logging.getLogger("tether_client.worker")

T = TypeVar("T")
P = TypeVar("P")
R = TypeVar("R")
# A hook keeps its own type through the decorator that registers it.
B = TypeVar("B", bound=BeforeHook)
A = TypeVar("A", bound=AfterHook)
E = TypeVar("E", bound=ErrorHook)

DEFAULT_CONCURRENCY = 8
"""Handlers a worker runs at once per queue, unless told otherwise."""
MAX_BATCH = 1000
"""Most items in one claim, heartbeat or completion batch (the server's limit)."""
COMPLETION_BATCH = 250
"""Most completions in one request."""
COMPLETIONS_IN_FLIGHT = 4
"""Most completion requests in flight at once."""
CARRY_WAIT = 0.02
"""Longest a completion or failure waits for a claim to carry it (seconds)
before it is sent by its own route; while no claim is coming soon (the
worker long-polls, sleeps or stops) it is sent at once."""
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
READ_TRIES = 5
"""How often a handler's read (``ctx.dependencies()``) is tried while it meets
``unavailable`` or no answer, as a client's reads are (1 + its 4 retries)."""
HEARTBEAT_IDLE = 3600.0
"""Longest sleep of the heartbeater while it holds jobs (a job due sooner wakes it)."""
PROGRESS_EVERY = 0.5
"""Shortest time between a heartbeat and one sent for new progress (seconds):
progress reaches the server within it, and handlers reporting a thousand
times a second cost the worker at most two heartbeats a second."""
STREAM_OPEN_WAIT = 2.0
"""Longest the worker waits at start for its stream of cancel requests to
open before it claims anyway (seconds)."""
STREAM_RETRY_MIN = 1.0
STREAM_RETRY_MAX = 30.0
"""Backoff (seconds, jittered) before the stream of cancel requests is
tried again after a refusal or a failure it does not reconnect after itself."""
ANNOUNCE_EVERY = 60.0
"""How often a running worker announces itself (seconds): the server forgets
a worker it has not seen for 5 minutes."""
SDK_DIR = os.path.join(os.path.dirname(__file__), "")
"""This package's directory (as its code objects name their files): a
handler's traceback starts below its frames."""


Queues = Union[str, Sequence[str], Mapping[str, int]]
"""The queues a worker serves: one name, names, or names with their concurrency."""


class _QueueSlots:
    """One queue of a worker: its slots and the state of its claim loop."""

    def __init__(self, name: str, concurrency: int) -> None:
        self.name = name
        self.concurrency = concurrency
        self.free = concurrency
        """Slots without a handler running (or a claim in flight for them)."""
        self.slot_freed = asyncio.Event()
        self.claim_soon = False
        """Whether its claim loop will claim soon (it is not long-polling,
        sleeping or stopped), so a waiting report may ride that claim."""


def _queue_table(queues: Queues, concurrency: int) -> Dict[str, int]:
    """Each queue's concurrency: the mapping's, or ``concurrency`` for each name."""
    if isinstance(queues, str):
        table = {queues: concurrency}
    elif isinstance(queues, Mapping):
        table = dict(queues)
    else:
        names = list(queues)
        table = {name: concurrency for name in names}
        if len(table) != len(names):
            raise ValueError(f"a queue is named twice in {names!r}")
    if not table:
        raise ValueError("a worker needs at least one queue")
    for name, n in table.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a queue name must be a non-empty string, not {name!r}")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH:
            raise ValueError(f"the concurrency of queue {name!r} must be 1..1000, not {n!r}")
    return table


def _from_handler(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    """The traceback from the handler's frame on: the frames of this package
    that called it (the worker's thread, a typed task's decoding) are left
    out, so a job's error starts where the user's code does. A traceback
    that is all this package's (it raised itself) is kept whole."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename.startswith(SDK_DIR):
        start = start.tb_next
    return tb if start is None else start


def _error_text(error: BaseException) -> str:
    """A handler's exception as a job's error: the traceback from the
    handler's frame on, and its last ERROR_TAIL characters (what the server
    keeps)."""
    lines = traceback.format_exception(type(error), error, _from_handler(error.__traceback__))
    return "".join(lines)[-ERROR_TAIL:]


# How a job's run ended, before it is mapped to a report: ("returned",
# result), ("raised", exception), ("not_json", the encoding's error),
# ("no_handler", None), ("timed_out", timeout_ms), ("unanswered", None) (a
# cancel ignored for a whole lease) or ("abandoned", None) (the end of the
# shutdown grace).
_Ended = Tuple[str, Any]


def _returned(value: Any) -> _Ended:
    """A handler's return value as an ending: a result that is not JSON
    fails the attempt (checked where the handler ran, off the loop for a
    sync one)."""
    if value is not None:  # no result (the usual) needs no check
        try:
            json.dumps(value)
        except (TypeError, ValueError) as e:
            return ("not_json", e)
    return ("returned", value)


def outcome_of(ended: _Ended, cancel_requested: bool) -> Outcome:
    """What the worker reports for ``ended`` (see ``Worker._report``), as the
    hooks are told."""
    how, value = ended
    raised = value if how == "raised" else None
    if how == "abandoned":
        return Outcome("snooze", delay=0.0)
    if cancel_requested or how == "unanswered":
        return Outcome("cancelled", error=raised if isinstance(raised, Exception) else None)
    if how == "timed_out":
        return Outcome("failed", error=TimeoutError(f"timed out after {value} ms"))
    if how == "not_json":
        return Outcome("failed", error=TypeError(f"the handler's result is not JSON: {value}"))
    if how == "no_handler":
        return Outcome("failed", error=LookupError(value))
    if isinstance(raised, Snooze):
        return Outcome("snooze", error=raised, delay=raised.seconds)
    if isinstance(raised, RetryAfter):
        return Outcome("retry_after", error=raised, delay=raised.seconds)
    if raised is not None:
        return Outcome("failed", error=raised)
    return Outcome("succeeded", result=value)


def _hook_name(hook: Callable[..., Any]) -> str:
    return getattr(hook, "__qualname__", None) or repr(hook)


async def _context_after(awaitable: Awaitable[Any]) -> contextvars.Context:
    """Awaits ``awaitable`` and answers the context it ran in (with the
    context variables it set)."""
    await awaitable
    return contextvars.copy_context()


class _InFlight:
    def __init__(
        self, claimed: ClaimedJob, ctx: JobContext, lease_ttl: float, slots: _QueueSlots
    ) -> None:
        self.claimed = claimed
        self.slots = slots
        """The queue whose slot it holds."""
        self.token = claimed.lease_token
        self.ctx = ctx
        self.lease_ttl = lease_ttl
        """The lease its claim granted (seconds): heartbeated every third of it."""
        self.last_beat = time.monotonic()
        """When its last heartbeat was sent (at first: when the claim answered)."""
        self.abandon = asyncio.Event()
        self.give_up: Optional[Callable[[_Ended], None]] = None
        """While a handler runs: ends the worker's wait for it, with the
        ending the worker then reports (unless the handler ended first)."""
        self.cancel_requested = False
        self.lost = False
        self.reporting_since: Optional[float] = None
        # The handler's end (on its thread, or in its task) and the worker
        # giving up on it (on the loop: its timeout, a cancel it ignored,
        # the end of the shutdown grace) race; whichever comes first decides
        # the ending, under this lock, so the hooks are told what is reported.
        self.lock = threading.Lock()
        self.verdict: Optional[_Ended] = None
        """The ending the worker decided on when it gave up on the handler."""
        self.handler_ended = False
        """The handler ended first: its ending stands (the after hooks may
        still run), and the worker no longer gives up on it."""

    def decide(self, ending: _Ended) -> bool:
        """The worker gives up on the handler (on the loop) with ``ending``:
        True when that decides the run's ending, False when the handler
        ended first (or the worker already gave up)."""
        with self.lock:
            if self.handler_ended or self.verdict is not None:
                return False
            self.verdict = ending
            return True

    def handler_end(self, ending: _Ended) -> Tuple[_Ended, bool]:
        """The handler (or a before hook) ended with ``ending`` (where it
        ran): the run's ending, which is the worker's verdict if it gave up
        first, and whether a cancel was asked for by then."""
        with self.lock:
            if self.verdict is not None:
                return self.verdict, self.cancel_requested
            self.handler_ended = True
            return ending, self.cancel_requested

    def take_cancel_request(self) -> bool:
        """Marks the job's cancel as asked for (on the loop): False when it
        already was, or when the run's ending is decided (the handler ended,
        or the worker gave up on it): that ending stands."""
        with self.lock:
            if self.cancel_requested or self.handler_ended or self.verdict is not None:
                return False
            self.cancel_requested = True
            return True

    @property
    def interval(self) -> float:
        """Heartbeats run three times per lease, so one lost or slow one never
        costs it."""
        return self.lease_ttl / 3

    def beat_due(self) -> float:
        """When the next heartbeat is due (monotonic). Only for a job whose
        handler runs: once its outcome is on its way, it is not heartbeated
        (after the report there is no lease left to extend)."""
        return self.last_beat + self.interval


class _Report:
    """A completion or failure on its way: ``fut`` answers its outcome."""

    __slots__ = ("direct", "fut", "item", "since")

    def __init__(
        self, item: Union[CompleteItem, FailItem], fut: asyncio.Future[str], since: float
    ) -> None:
        self.item = item
        self.fut = fut
        self.since = since
        """When it was queued (the loop's clock)."""
        self.direct = False
        """Only by its own route: a claim that carried it failed or was refused."""

    @property
    def op(self) -> str:
        return "complete" if isinstance(self.item, CompleteItem) else "fail"

    def answer(self, outcome: str) -> None:
        if not self.fut.done():
            self.fut.set_result(outcome)


class Worker:
    """Runs handlers for the jobs of one or more queues.

    ``client`` gives the server's address, key and tenant (a :class:`Client`
    or an :class:`AsyncClient`; the worker opens its own connection pool).
    ``queues`` is a queue name, a sequence of names, or a mapping of names
    to their concurrency; with a name or names, each queue runs up to
    ``concurrency`` handlers at once (default 8; a mapping's numbers take
    its place). Each queue is claimed on its own, so a busy queue never
    holds up another; handlers are registered by kind and run jobs of that
    kind from any of the queues.

    Times are seconds (or ``timedelta``). ``lease_ttl`` (1 to 3600), when
    given, is the lease asked for at claim, overriding the queue's; left out
    (the default), claims name none and each job gets the lease configured
    on its queue (30 s unless the operator set another). Either way each job
    is heartbeated every third of the lease its claim granted.
    ``claim_wait`` is the long-poll of each claim (0 to 30);
    ``shutdown_grace`` how long running handlers may take to finish at
    shutdown; ``poll_interval`` the pause between claims when ``claim_wait``
    is 0. Every :class:`Snooze` is reported to the server
    (``max_in_process_snooze`` is accepted for old callers and ignored).
    ``observer`` (a :class:`WorkerObserver`) is told of every claim answer,
    failed request and ``lease_lost`` answer. :meth:`before`,
    :meth:`after` and :meth:`on_error` register hooks around every handler.
    """

    def __init__(
        self,
        client: Union[Client, AsyncClient],
        queues: Queues,
        concurrency: int = DEFAULT_CONCURRENCY,
        *,
        lease_ttl: Optional[Duration] = None,
        claim_wait: Duration = 5.0,
        shutdown_grace: Duration = 30.0,
        poll_interval: Duration = 1.0,
        max_in_process_snooze: Optional[float] = None,
        worker_id: Optional[str] = None,
        observer: Optional[WorkerObserver] = None,
    ) -> None:
        self.queues: Dict[str, int] = _queue_table(queues, concurrency)
        """Each queue served, with its concurrency (handlers at once)."""
        self.lease_ttl = None if lease_ttl is None else seconds(lease_ttl, "lease_ttl")
        if self.lease_ttl is not None and not 1.0 <= self.lease_ttl <= 3600.0:
            raise ValueError("lease_ttl must be 1..3600 seconds")
        self.claim_wait = seconds(claim_wait, "claim_wait")
        if self.claim_wait > 30.0:
            raise ValueError("claim_wait must be 0..30 seconds")
        self.shutdown_grace = seconds(shutdown_grace, "shutdown_grace")
        self.poll_interval = seconds(poll_interval, "poll_interval")
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
        self._tenant = client.tenant
        self._timeout = client.timeout
        self._handlers: Dict[str, Tuple[Handler, bool]] = {}
        """By kind: the handler, and whether it is ``async def``."""
        self._before: List[BeforeHook] = []
        self._after: List[AfterHook] = []
        self._on_error: List[ErrorHook] = []
        self._outcome_listener: Optional[Callable[[JobContext, _Ended, Outcome], None]] = None
        """Told of every job's ending as it is reported, on the loop (what
        ``tether_client.testing.run_until_empty`` counts)."""
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._running = False

    # ---- configuration -------------------------------------------------------

    def _use_server(
        self, *, url: Optional[str], key: Optional[str], tenant: Optional[str]
    ) -> None:
        """Points the worker elsewhere than its client did (the settings that
        are not None): the runner's flags and environment win over the code's."""
        if self._running:
            raise RuntimeError("the worker is running")
        self._url = self._url if url is None else url.rstrip("/")
        self._key = self._key if key is None else key
        self._tenant = self._tenant if tenant is None else tenant


    @overload
    def handler(self, kind: str) -> Callable[[Handler], Handler]: ...

    @overload
    def handler(
        self, kind: Task[P, R]
    ) -> Callable[[TaskHandler[P, R]], TaskHandler[P, R]]: ...

    def handler(self, kind: Union[str, Task[Any, Any]]) -> Callable[[Any], Any]:
        """Decorator: runs the function for jobs of ``kind`` (of any of the
        worker's queues). Plain functions run on a thread of their own;
        ``async def`` ones on the worker's event loop.

        ``kind`` is a kind name, and the function takes the
        :class:`JobContext`; or a typed :class:`Task`, and the function
        takes the context and the payload decoded as the task's payload type
        (a payload that does not fit fails the job for good, before the
        function runs) and returns the task's result type."""

        def register(fn: Any) -> Any:
            self.register(kind, fn)
            return fn

        return register

    @overload
    def register(self, kind: str, fn: Handler) -> None: ...

    @overload
    def register(self, kind: Task[P, R], fn: TaskHandler[P, R]) -> None: ...

    def register(self, kind: Union[str, Task[Any, Any]], fn: Any) -> None:
        """Registers ``fn`` as the handler of ``kind`` (what :meth:`handler` does)."""
        if isinstance(kind, Task):
            self._handlers[kind.kind] = kind._handler(fn)
        else:
            self._handlers[kind] = (fn, inspect.iscoroutinefunction(fn))

    # ---- hooks -------------------------------------------------------------------

    def before(self, fn: B) -> B:
        """Decorator: ``fn(ctx)`` runs before every handler of this worker, in
        the handler's own context (its thread for a plain handler, its task
        for an ``async def`` one), so context variables it sets (a log
        context, a database session) are seen by the handler. Plain or
        ``async def``; several run in the order they were registered. If
        one raises, the handler does not run and the job fails as if the
        handler had raised that exception (``on_error`` and ``after`` hooks
        still run)."""
        self._before.append(fn)
        return fn

    def after(self, fn: A) -> A:
        """Decorator: ``fn(ctx, outcome)`` runs once the handler has ended,
        whatever it did, in its context (and its trace span), before the job
        is reported; ``outcome`` (an :class:`Outcome`) says what is
        reported: ``succeeded`` (with ``result``), ``failed`` (with
        ``error``), ``retry_after``, ``snooze`` or ``cancelled``. Plain or
        ``async def``; several run in registration order. What one raises
        is logged with its traceback and changes nothing."""
        self._after.append(fn)
        return fn

    def on_error(self, fn: E) -> E:
        """Decorator: ``fn(ctx, error)`` runs when the run's outcome carries
        an exception: what the handler or a ``before`` hook raised (the
        SDK's own :class:`Retry`, :class:`RetryAfter`, :class:`Snooze` and
        :class:`Fatal` included: filter them by type where they are not
        errors to you), or the worker's ``TimeoutError`` when the job ran
        past its timeout. For error trackers (Sentry). Runs before the
        ``after`` hooks, in the handler's context; plain or ``async def``;
        several in registration order. What one raises is logged with its
        traceback and changes nothing."""
        self._on_error.append(fn)
        return fn

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

    def _saw_reports(self, via: str, completions: int, failures: int) -> None:
        if self.observer is not None:
            try:
                self.observer.on_reports_sent(via, completions, failures)
            except Exception:
                log.exception("worker observer: on_reports_sent raised")

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
        self._beat_sooner = asyncio.Event()
        self._beat_at: Optional[float] = None
        """When the heartbeater wakes next (None: it holds nothing)."""
        self._beat_sent = -PROGRESS_EVERY
        """When the last heartbeat request went (monotonic)."""
        self._progress_at: Optional[float] = None
        """When a heartbeat is due for new progress (None: none waits)."""
        self._listening = asyncio.Event()
        """Set once the stream of cancel requests opened or failed."""
        self._stream_opens = 0
        """How often the stream of cancel requests was answered as a stream."""
        self._slots = [_QueueSlots(name, n) for name, n in self.queues.items()]
        self._inflight: Dict[str, _InFlight] = {}
        self._jobs: Set[asyncio.Task[None]] = set()
        self._pending: Deque[_Report] = collections.deque()
        """Reports waiting for a claim to carry them, or for the completer."""
        self._direct = 0
        """How many of them must go by their own routes."""
        self._pending_changed = asyncio.Event()
        self._completer_timed = False
        """Whether the completer sleeps with a deadline (for the oldest report)."""
        self._carry = True
        """Whether claims carry reports (off for a server that refuses them)."""
        self._client = _worker_client(self._url, self._key, self._tenant, self._timeout)
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
        for slots in self._slots:
            slots.slot_freed.set()

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
        log.info(
            "worker %s started on %s",
            self.worker_id,
            ", ".join(f"queue {name} ({n} at once)" for name, n in self.queues.items()),
        )
        heartbeater = asyncio.ensure_future(self._heartbeat_loop())
        completer = asyncio.ensure_future(self._completer_loop())
        listener = asyncio.ensure_future(self._cancel_listener())
        announcer = asyncio.ensure_future(self._announce_loop())
        tasks = [heartbeater, completer, listener, announcer]
        try:
            # Claim once the stream of cancel requests is open: a cancel of a
            # job claimed before would come only with a heartbeat. A stream
            # slow to answer holds the claims up a moment at most.
            try:
                await asyncio.wait_for(self._listening.wait(), STREAM_OPEN_WAIT)
            except asyncio.TimeoutError:
                log.debug("the stream of cancel requests is not open yet: claiming anyway")
            fetchers = [asyncio.ensure_future(self._fetch_loop(s)) for s in self._slots]
            tasks.extend(fetchers)
            await self._stop.wait()
            log.info("worker %s shutting down: no more claims", self.worker_id)
            await asyncio.gather(*fetchers)
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
                        if fl.give_up is not None:
                            fl.give_up(("abandoned", None))
                while self._jobs:
                    await asyncio.wait(set(self._jobs))
            self._drained.set()
            listener.cancel()
            announcer.cancel()
            await completer
            await heartbeater
            await asyncio.gather(listener, announcer, return_exceptions=True)
            log.info("worker %s stopped", self.worker_id)
        finally:
            for t in tasks:
                t.cancel()

    async def _announce_loop(self) -> None:
        """Announces the worker (``PUT /v1/workers/{id}``) now and every
        ANNOUNCE_EVERY seconds until it is cancelled, so that ``GET
        /v1/workers`` lists it while it is idle: its queues, its concurrency
        in all, this SDK and its version, the host and the process. Presence
        is advisory: a failed announcement (an older server without the
        route, a blip) is logged at DEBUG and never stops the worker."""
        while True:
            try:
                await self._client.announce_worker(
                    self.worker_id,
                    queues=list(self.queues),
                    concurrency=sum(self.queues.values()),
                    sdk="python",
                    version=VERSION,
                    host=socket.gethostname(),
                    pid=os.getpid(),
                )
            except Exception as e:
                log.debug("worker %s: announcing itself failed: %r", self.worker_id, e)
            await asyncio.sleep(ANNOUNCE_EVERY)

    # ---- claiming --------------------------------------------------------------

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=max(0.0, seconds))
        except asyncio.TimeoutError:
            pass

    async def _fetch_loop(self, slots: _QueueSlots) -> None:
        try:
            await self._fetch(slots)
        finally:
            self._set_claim_soon(slots, False)
        log.debug("fetcher of queue %s stopped", slots.name)

    async def _fetch(self, slots: _QueueSlots) -> None:
        """Claims jobs of one queue as its slots free up. Each claim carries
        the completions and failures waiting then (of any queue's jobs), and
        is then no long-poll (``wait`` 0: the reports' answers come back only
        with the claim's); the next claim without reports long-polls."""
        backoff = MIN_BACKOFF
        target = max(1, min(slots.concurrency // 2, MAX_BATCH))
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            slots.claim_soon = True
            if slots.free <= 0:
                slots.slot_freed.clear()
                await slots.slot_freed.wait()
                continue
            if slots.free < target:
                deadline = loop.time() + FETCH_COOLDOWN
                while slots.free < target and not self._stop.is_set():
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    slots.slot_freed.clear()
                    try:
                        await asyncio.wait_for(slots.slot_freed.wait(), timeout=left)
                    except asyncio.TimeoutError:
                        break
            if self._stop.is_set():
                break
            limit = min(slots.free, MAX_BATCH)
            slots.free -= limit
            completions, failures = self._take_for_claim()
            carried = completions + failures  # the order of the answer's reports
            wait = 0.0 if carried else self.claim_wait
            if wait:
                self._set_claim_soon(slots, False)
            started = loop.time()
            try:
                try:
                    claimed = await self._client.claim(
                        slots.name,
                        self.worker_id,
                        limit=limit,
                        # Only a TTL the user set: otherwise the queue's applies.
                        lease_ttl=self.lease_ttl,
                        wait=wait,
                        completions=[
                            r.item for r in completions if isinstance(r.item, CompleteItem)
                        ],
                        failures=[r.item for r in failures if isinstance(r.item, FailItem)],
                    )
                finally:
                    if carried:
                        self._saw_reports("claim", len(completions), len(failures))
            except TetherError as e:
                slots.free += limit
                self._saw_error("claim", e)
                if carried:
                    # Resending is safe: each goes again by its own route,
                    # where a bad one is refused alone.
                    self._send_alone(carried)
                    if not isinstance(e, (Unavailable, Internal, DecodeError)):
                        if isinstance(e, InvalidArgument) and "unknown field" in e.message:
                            self._carry = False
                            log.warning(
                                "the server does not take reports with claims (%s): "
                                "reports go by their own routes",
                                e,
                            )
                        else:
                            log.warning(
                                "a claim carrying %d reports was refused (%s): sending "
                                "them by their own routes",
                                len(carried),
                                e,
                            )
                        continue  # claim again at once, without them
                log.warning(
                    "claim of queue %s failed (%s); trying again in %.1f s",
                    slots.name,
                    e,
                    backoff,
                )
                self._set_claim_soon(slots, False)
                await self._sleep_unless_stopped(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = MIN_BACKOFF
            if carried:
                self._answer_carried(carried, claimed.reports)
            self._saw_claim(claimed)
            if self._stop.is_set():
                slots.free += limit
                for c in claimed:
                    await self._hand_back_unstarted(c)
                break
            for c in claimed[:limit]:
                self._spawn(c, slots)
            for c in claimed[limit:]:
                log.warning("the server answered more jobs than asked for; handing %s back", c.id)
                await self._hand_back_unstarted(c)
            slots.free += limit - min(len(claimed), limit)
            elapsed = loop.time() - started
            if len(claimed) < limit:
                if self.claim_wait == 0:
                    self._set_claim_soon(slots, False)
                    await self._sleep_unless_stopped(self.poll_interval)
                elif not claimed and wait and elapsed + EARLY_SLACK < self.claim_wait:
                    # The server did not hold the long-poll: pause, don't spin.
                    self._set_claim_soon(slots, False)
                    await self._sleep_unless_stopped(min(self.claim_wait - elapsed, EARLY_PAUSE))

    async def _hand_back_unstarted(self, c: ClaimedJob) -> None:
        try:
            await self._retrying("snooze", lambda: self._client.snooze(c.id, c.lease_token, 0))
        except LeaseLost:
            self._saw_lost("snooze", c.id, c.lease_token)
        except TetherError as e:
            log.warning("could not hand back job %s claimed during shutdown (%s)", c.id, e)

    def _spawn(self, claimed: ClaimedJob, slots: _QueueSlots) -> None:
        loop = asyncio.get_running_loop()
        ctx = JobContext(claimed, self.worker_id, loop, read_dependencies=self._dependencies)
        ctx._on_progress = self._progress_reported
        fl = _InFlight(claimed, ctx, _granted_lease(claimed, self.lease_ttl), slots)
        self._inflight[claimed.id] = fl
        due = fl.beat_due()
        if self._beat_at is None or due < self._beat_at:
            self._beat_at = due
            self._beat_sooner.set()
        task = asyncio.ensure_future(self._run_job(fl))
        self._jobs.add(task)
        task.add_done_callback(self._jobs.discard)

    async def _dependencies(self, job_id: str) -> List[DependencyJob]:
        """A running job's dependencies, for its handler (``ctx.dependencies()``):
        a read, tried again with backoff on ``unavailable`` and transport
        errors (the worker's own client never retries)."""
        delay = MIN_BACKOFF
        tries = 0
        while True:
            tries += 1
            try:
                return await self._client.dependencies(job_id)
            except Unavailable as e:
                if tries >= READ_TRIES:
                    raise
                log.warning(
                    "reading the dependencies of job %s failed (%s); trying again", job_id, e
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    # ---- running one job ---------------------------------------------------------

    async def _run_job(self, fl: _InFlight) -> None:
        try:
            try:
                ended = await self._execute(fl)
            finally:
                # The handler is done: its slot frees now, not after the report.
                fl.slots.free += 1
                fl.slots.slot_freed.set()
            fl.reporting_since = time.monotonic()
            # A completion or failure is queued before this task first yields,
            # so the claim the freed slot lets out finds it waiting to ride.
            await self._report(fl, ended)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("job %s: unexpected worker error", fl.claimed.id)
        finally:
            self._inflight.pop(fl.claimed.id, None)

    def _start_run(self, fl: _InFlight, fn: Handler, is_async: bool) -> asyncio.Future[_Ended]:
        """Starts the job's run, the handler with its hooks: an ``async def``
        handler in a task of its own on the loop, a plain one on a thread of
        its own. The future answers the run's ending."""
        loop = asyncio.get_running_loop()
        if is_async:
            return loop.create_task(self._run_async(fl, fn))
        fut: asyncio.Future[_Ended] = loop.create_future()

        def settle(ended: _Ended) -> None:
            if not fut.done():
                fut.set_result(ended)

        def target() -> None:
            ended = self._run_sync(fl, fn, loop)
            try:
                loop.call_soon_threadsafe(settle, ended)
            except RuntimeError:
                pass  # the loop is gone (aborted): nobody waits for this job

        threading.Thread(target=target, name=f"tether-job-{fl.ctx.id[:8]}", daemon=True).start()
        return fut

    def _run_sync(
        self, fl: _InFlight, fn: Handler, loop: asyncio.AbstractEventLoop
    ) -> _Ended:
        """A plain handler's run, on its thread: its trace span, the before
        hooks, the handler, then the on_error and after hooks. An ``async
        def`` hook runs on the worker's loop, and the context variables it
        set are carried back to this thread (as if it had run here)."""
        ctx = fl.ctx

        def call(hook: Callable[..., Any], *args: Any) -> None:
            value = hook(ctx, *args)
            if inspect.isawaitable(value):
                done = asyncio.run_coroutine_threadsafe(_context_after(value), loop).result()
                for var, var_value in done.items():
                    var.set(var_value)

        span = start_job_span(ctx.job)
        outcome: Optional[Outcome] = None
        try:
            ended: Optional[_Ended] = None
            for hook in self._before:
                try:
                    call(hook)
                except BaseException as e:  # fails the job as the handler raising it would
                    ended = ("raised", e)
                    break
            if ended is None:
                try:
                    value = fn(ctx)
                    if inspect.isawaitable(value):
                        raise TypeError("a sync handler returned an awaitable; use async def")
                    ended = _returned(value)
                except BaseException as e:  # the handler's failure is the job's
                    ended = ("raised", e)
            ended, cancelled = fl.handler_end(ended)
            if span is not None or self._after or self._on_error:
                outcome = outcome_of(ended, cancelled)
                if outcome.error is not None:
                    for error_hook in self._on_error:
                        try:
                            call(error_hook, outcome.error)
                        except Exception:
                            self._hook_failed("on_error", error_hook, ctx)
                for after_hook in self._after:
                    try:
                        call(after_hook, outcome)
                    except Exception:
                        self._hook_failed("after", after_hook, ctx)
            return ended
        finally:
            if span is not None:
                end_job_span(span, outcome)

    async def _run_async(self, fl: _InFlight, fn: Handler) -> _Ended:
        """An ``async def`` handler's run, in its task: as :meth:`_run_sync`
        (plain hooks are called on the loop, like the handler: keep them
        quick)."""
        ctx = fl.ctx

        async def call(hook: Callable[..., Any], *args: Any) -> None:
            value = hook(ctx, *args)
            if inspect.isawaitable(value):
                await value

        span = start_job_span(ctx.job)
        outcome: Optional[Outcome] = None
        try:
            ended: Optional[_Ended] = None
            for hook in self._before:
                try:
                    await call(hook)
                except (Exception, asyncio.CancelledError) as e:
                    ended = ("raised", e)
                    break
            if ended is None:
                try:
                    ended = _returned(await fn(ctx))
                # A CancelledError is the worker giving up on it (its
                # verdict is then the ending) or the handler's own.
                except (Exception, asyncio.CancelledError) as e:
                    ended = ("raised", e)
            ended, cancelled = fl.handler_end(ended)
            if span is not None or self._after or self._on_error:
                outcome = outcome_of(ended, cancelled)
                if outcome.error is not None:
                    for error_hook in self._on_error:
                        try:
                            await call(error_hook, outcome.error)
                        except Exception:
                            self._hook_failed("on_error", error_hook, ctx)
                for after_hook in self._after:
                    try:
                        await call(after_hook, outcome)
                    except Exception:
                        self._hook_failed("after", after_hook, ctx)
            return ended
        finally:
            if span is not None:
                end_job_span(span, outcome)

    def _hook_failed(self, which: str, hook: Callable[..., Any], ctx: JobContext) -> None:
        """Logs (with its traceback) what an after or on_error hook raised:
        the job's outcome stands."""
        log.exception(
            "job %s: the %s hook %s raised (the job's outcome stands)",
            ctx.id,
            which,
            _hook_name(hook),
        )

    async def _execute(self, fl: _InFlight) -> _Ended:
        """Runs the handler (with its hooks) until it ends, times out,
        ignores a cancel for a whole lease, or is abandoned at shutdown. A
        :class:`Snooze` is an answer like any other: it is reported, never
        slept here."""
        handler = self._handlers.get(fl.claimed.kind)
        if handler is None:
            return ("no_handler", f"no handler for kind {fl.claimed.kind}")
        ctx = fl.ctx
        timeout_ms = fl.claimed.timeout_ms if fl.claimed.timeout_ms else None
        loop = asyncio.get_running_loop()
        run = self._start_run(fl, handler[0], handler[1])
        # One future, woken by whatever ends the wait first: the run, its
        # timeout, the end of the shutdown grace (fl.give_up) or a cancel it
        # ignored for a whole lease. Callbacks and timers, not a task per
        # condition: this is every job's path.
        woken: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        def give_up(ending: _Ended) -> None:
            # Only while the handler runs: once it ended, its after hooks
            # run to their end and its own outcome is reported.
            if fl.decide(ending):
                wake()

        timers: List[asyncio.TimerHandle] = []

        def unanswered() -> None:
            timers.append(loop.call_later(fl.lease_ttl, give_up, ("unanswered", None)))

        run.add_done_callback(wake)
        if timeout_ms is not None:
            timers.append(loop.call_later(timeout_ms / 1000, give_up, ("timed_out", timeout_ms)))
        fl.give_up = give_up
        ctx._on_cancel = unanswered
        if ctx.cancelled:
            unanswered()
        if fl.abandon.is_set():
            give_up(("abandoned", None))
        try:
            await woken
        finally:
            fl.give_up = None
            ctx._on_cancel = None
            for t in timers:
                t.cancel()
        if fl.verdict is None:  # the run ended: the handler first, then its hooks
            return run.result()
        ctx._cancel()
        run.cancel()
        return fl.verdict

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
        if self._outcome_listener is not None:
            try:
                self._outcome_listener(fl.ctx, ended, outcome_of(ended, fl.cancel_requested))
            except Exception:
                log.exception("job %s: the outcome listener raised", job.id)
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
            fail = {"error": f"{value} on worker {self.worker_id}"}
        elif how == "not_json":
            fail = {"error": f"the handler's result is not JSON: {value}"}
        elif how == "timed_out":
            fail = {"error": f"timed out after {value} ms"}
        elif how == "raised" and isinstance(value, Snooze):
            await self._snooze(fl, value.seconds, "snoozed")
            return
        elif how == "raised" and isinstance(value, RetryAfter):
            fail = {"error": value.message, "retry_after": value.seconds}
        elif how == "raised" and isinstance(value, Retry):
            fail = {"error": value.message}
        elif how == "raised" and isinstance(value, Fatal):
            fail = {"error": value.message, "fatal": True}
        elif how == "raised":
            fail = {"error": _error_text(value)}
        else:
            await self._complete(fl, value)
            return
        await self._fail(fl, fail)

    async def _fail(self, fl: _InFlight, fail: Dict[str, Any]) -> None:
        job = fl.claimed
        outcome = await self._submit(FailItem(job.id, fl.token, **fail))
        if outcome.startswith("done"):
            # "done:<state>" from the fail route; a claim answers no state.
            state = outcome[5:] or (
                "failed" if fail.get("fatal") else "cancelled" if fail.get("cancelled") else ""
            )
            if state in ("", "queued"):
                log.info(
                    "job %s: attempt failed%s: %s",
                    job.id,
                    ", retry scheduled" if state else "",
                    fail["error"][-200:],
                )
            else:
                log.warning("job %s: %s: %s", job.id, state, fail["error"][-200:])
        elif outcome == "lost":
            log.warning(
                "job %s: lease lost (another owner has the job): the failure is discarded", job.id
            )
        else:
            log.error(
                "job %s: could not report the failure (%s); the lease will lapse and the "
                "server requeue the job",
                job.id,
                outcome,
            )

    async def _snooze(self, fl: _InFlight, delay: float, what: str) -> None:
        job = fl.claimed
        try:
            answer = await self._retrying(
                "snooze", lambda: self._client.snooze(job.id, fl.token, delay)
            )
        except (LeaseLost, NotFound) as e:
            if isinstance(e, LeaseLost):
                self._saw_lost("snooze", job.id, fl.token)
            log.warning(
                "job %s: lease lost (another owner has the job): the snooze is discarded", job.id
            )
            return
        except TetherError as e:
            log.error(
                "job %s: could not snooze (%s); the lease will lapse and the server "
                "requeue the job",
                job.id,
                e,
            )
            return
        log.info("job %s: %s (now %s)", job.id, what, answer.state)

    async def _complete(self, fl: _InFlight, result: Any) -> None:
        job = fl.claimed
        outcome = await self._submit(CompleteItem(job.id, fl.token, result))
        if outcome == "done":
            log.debug("job %s succeeded", job.id)
        elif outcome == "lost":
            log.warning(
                "job %s: lease lost (another owner has the job): the result is discarded", job.id
            )
        elif outcome.startswith("rejected:"):
            log.warning("job %s: the result was refused; failing the attempt", job.id)
            await self._fail(fl, {"error": f"the result could not be stored: {outcome[9:]}"})
        else:
            log.error(
                "job %s: could not report the result (%s); the lease will lapse and the "
                "server requeue the job",
                job.id,
                outcome,
            )

    # ---- the reports waiting to be sent ----------------------------------------
    # A completion or failure waits in self._pending for the next claim to
    # carry it (one round trip and one commit for the report and the claim).
    # The completer sends what no claim takes soon by the report's own route:
    # a report older than CARRY_WAIT, every report while no claim is coming
    # soon (the fetcher long-polls, sleeps or has stopped), and the reports of
    # a claim that failed or was refused.

    def _submit(self, item: Union[CompleteItem, FailItem]) -> asyncio.Future[str]:
        """Queues a report; the future answers its outcome: ``done`` (a
        failure sent by its own route: ``done:<state>``), ``lost``,
        ``rejected:<why>`` or ``gave up: <why>``."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        was_empty = not self._pending
        self._pending.append(_Report(item, fut, loop.time()))
        if not self._carrying() or (was_empty and not self._completer_timed):
            self._pending_changed.set()
        return fut

    def _carrying(self) -> bool:
        """Whether a claim (of any queue) is coming soon to carry what is waiting."""
        return (
            self._carry
            and not self._stop.is_set()
            and any(slots.claim_soon for slots in self._slots)
        )

    def _set_claim_soon(self, slots: _QueueSlots, soon: bool) -> None:
        slots.claim_soon = soon
        if not soon and self._pending and not self._carrying():
            self._pending_changed.set()

    def _send_alone(self, reports: List[_Report]) -> None:
        """Hands ``reports`` to the completer, for their own routes."""
        for r in reports:
            if not r.fut.done():
                r.direct = True
                self._direct += 1
                self._pending.append(r)
        self._pending_changed.set()

    def _take_for_claim(self) -> Tuple[List[_Report], List[_Report]]:
        """The waiting completions and failures a claim may carry (at most
        MAX_BATCH in all), taken out of the queue."""
        if not self._carry or not self._pending:
            return [], []
        completions: List[_Report] = []
        failures: List[_Report] = []
        keep: Deque[_Report] = collections.deque()
        for r in self._pending:
            if r.direct or len(completions) + len(failures) >= MAX_BATCH:
                keep.append(r)
            elif isinstance(r.item, CompleteItem):
                completions.append(r)
            else:
                failures.append(r)
        self._pending = keep
        return completions, failures

    def _take_due(self, now: float) -> Tuple[List[_Report], List[_Report]]:
        """For the completer: nothing while a claim may still carry what
        waits; else up to COMPLETION_BATCH completions and every failure."""
        if not self._pending or (
            self._carrying() and self._direct == 0 and self._pending[0].since + CARRY_WAIT > now
        ):
            return [], []
        completions: List[_Report] = []
        failures: List[_Report] = []
        keep: Deque[_Report] = collections.deque()
        for r in self._pending:
            if isinstance(r.item, FailItem):
                failures.append(r)
            elif len(completions) < COMPLETION_BATCH:
                completions.append(r)
            else:
                keep.append(r)
        self._pending = keep
        self._direct = sum(1 for r in keep if r.direct)
        return completions, failures

    def _answer_carried(self, carried: List[_Report], results: List[ItemResult]) -> None:
        """Settles the reports a claim carried from its answer's ``reports``
        (in the same order); one the server answered with a transient error,
        or did not answer, goes again by its own route (resending is safe)."""
        again: List[_Report] = []
        for i, r in enumerate(carried):
            res = results[i] if i < len(results) else None
            if res is None or res.id != r.item.id:
                again.append(r)
            elif res.ok:
                r.answer("done")
            else:
                error = res.error or TetherError("the server gave no reason")
                self._saw_item(r.op, r.item.id, r.item.lease_token, error)
                if isinstance(error, (Unavailable, Internal)):
                    again.append(r)
                else:
                    r.answer(_outcome_of(error))
        if again:
            if not results:
                # A server that ignores the fields: carrying only costs.
                self._carry = False
                log.warning(
                    "the server answered none of the %d reports a claim carried: "
                    "reports go by their own routes",
                    len(carried),
                )
            elif len(results) < len(carried):
                log.warning(
                    "a claim answered %d of the %d reports it carried: sending the "
                    "others by their own routes",
                    len(results),
                    len(carried),
                )
            self._send_alone(again)

    async def _completer_loop(self) -> None:
        """Sends the reports no claim carries (see above): completions in
        batches of up to COMPLETION_BATCH, at most COMPLETIONS_IN_FLIGHT
        batches at once; failures each by the fail route. Ends once the
        worker is drained and nothing waits."""
        loop = asyncio.get_running_loop()
        batches: Set[asyncio.Task[None]] = set()
        fails: Set[asyncio.Task[None]] = set()
        drained = asyncio.ensure_future(self._drained.wait())

        def track(tasks: Set[asyncio.Task[None]], coro: Awaitable[None]) -> None:
            t = asyncio.ensure_future(coro)
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        try:
            while True:
                while len(batches) >= COMPLETIONS_IN_FLIGHT:
                    await asyncio.wait(set(batches), return_when=asyncio.FIRST_COMPLETED)
                completions, failures = self._take_due(loop.time())
                if completions:
                    track(batches, self._complete_batch(completions))
                for r in failures:
                    track(fails, self._fail_alone(r))
                if completions or failures:
                    continue
                if self._drained.is_set() and not self._pending:
                    break
                self._pending_changed.clear()
                timeout: Optional[float] = None
                if self._pending:
                    timeout = max(0.0, self._pending[0].since + CARRY_WAIT - loop.time())
                self._completer_timed = timeout is not None
                changed = asyncio.ensure_future(self._pending_changed.wait())
                try:
                    await asyncio.wait(
                        {changed, drained}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    changed.cancel()
                    self._completer_timed = False
            if batches or fails:
                await asyncio.wait(batches | fails)
        finally:
            drained.cancel()
            for r in self._pending:
                r.answer("gave up: the completer stopped")

    async def _fail_alone(self, r: _Report) -> None:
        """One failure by ``POST /v1/jobs/{id}/fail``, retried on transient errors."""
        item = r.item
        assert isinstance(item, FailItem)

        async def once() -> Job:
            try:
                return await self._client.fail(
                    item.id,
                    item.lease_token,
                    item.error,
                    retry_after=item.retry_after,
                    fatal=item.fatal,
                    cancelled=item.cancelled,
                )
            finally:
                self._saw_reports("fail", 0, 1)

        try:
            answer = await self._retrying("fail", once)
        except TetherError as e:
            if isinstance(e, LeaseLost):
                self._saw_lost("fail", item.id, item.lease_token)
            r.answer(_outcome_of(e))
        else:
            r.answer(f"done:{answer.state}")
        finally:
            r.answer("gave up: the completer stopped")

    def _completer_of(self, item: CompleteItem) -> Callable[[], Awaitable[List[ItemResult]]]:
        async def once() -> List[ItemResult]:
            try:
                return await self._client.complete_batch([item])
            finally:
                self._saw_reports("complete", 1, 0)

        return once

    async def _complete_batch(self, batch: List[_Report]) -> None:
        """Completions by ``POST /v1/jobs/complete``: the batch, retried on
        transient errors; one by one when it is refused whole."""
        items = [r.item for r in batch if isinstance(r.item, CompleteItem)]

        async def once() -> List[ItemResult]:
            try:
                return await self._client.complete_batch(items)
            finally:
                self._saw_reports("complete", len(items), 0)

        try:
            try:
                results = await self._retrying("complete", once)
            except TetherError as e:
                if isinstance(e, (Unavailable, Internal)) or len(batch) == 1:
                    for r in batch:
                        r.answer(_outcome_of(e))
                    return
                # Refused whole (one oversize result refuses them all): one by one.
                for r in batch:
                    item = r.item
                    assert isinstance(item, CompleteItem)
                    try:
                        one = await self._retrying("complete", self._completer_of(item))
                        res = one[0]
                        if not res.ok:
                            self._saw_item(
                                "complete", item.id, item.lease_token, res.error or Exception("?")
                            )
                        r.answer("done" if res.ok else _outcome_of(res.error or Exception("?")))
                    except TetherError as e1:
                        r.answer(_outcome_of(e1))
                return
            for i, r in enumerate(batch):
                if i >= len(results):
                    r.answer("gave up: the server answered fewer items than it was given")
                elif results[i].ok:
                    r.answer("done")
                else:
                    error = results[i].error or Exception("unknown error")
                    self._saw_item("complete", r.item.id, r.item.lease_token, error)
                    r.answer(_outcome_of(error))
        finally:
            for r in batch:
                r.answer("gave up: the completer stopped")

    # ---- cancel requests -------------------------------------------------------

    def _cancel_requested(self, fl: _InFlight) -> None:
        """Someone asked for the job to stop (a heartbeat's answer or the
        event stream said so, whichever came first): its handler is asked
        to stop, once, and the job will end ``cancelled``."""
        if not fl.take_cancel_request():
            return
        log.info("job %s: cancel requested: asking the handler to stop", fl.claimed.id)
        fl.ctx._cancel()

    def _cancel_pushed(self, event: FeedEvent) -> None:
        """A ``cancel_requested`` event of the stream: for a job whose handler
        runs here, and this attempt of it (not an earlier run's), the
        request is this worker's."""
        fl = self._inflight.get(event.job_id)
        if (
            fl is not None
            and event.event == "cancel_requested"
            and event.attempt == fl.claimed.attempt
            and fl.reporting_since is None
        ):
            self._cancel_requested(fl)

    def _stream_opened(self) -> None:
        self._stream_opens += 1
        self._listening.set()

    async def _cancel_listener(self) -> None:
        """Holds one stream of the tenant's ``cancel_requested`` events (of
        every queue: the key walls it to the tenant) until it is cancelled
        once the worker has drained. The stream reconnects by itself after
        a drop; whatever else ends it (a refusal, 429 when the tenant holds
        too many streams open) is logged once and it is opened again after a
        backoff. It never fails the worker: heartbeats bring cancels anyway."""
        # This task only reads the stream: httpx logs none of its requests.
        _worker_traffic.set(True)
        delay = STREAM_RETRY_MIN
        warned = False
        while True:
            opens = self._stream_opens
            stream = self._client.stream_events(events="cancel_requested")
            stream._on_open = self._stream_opened
            try:
                async for item in stream:
                    if isinstance(item, FeedEvent):
                        self._cancel_pushed(item)
            except Exception as e:  # whatever it is, heartbeats still bring cancels
                if self._stream_opens > opens:  # it had worked: a new run of failures
                    delay = STREAM_RETRY_MIN
                    warned = False
                log.log(
                    logging.DEBUG if warned else logging.WARNING,
                    "the stream of cancel requests failed (%s): cancels reach handlers "
                    "at heartbeats until it is back; opening it again in about %.1f s",
                    e if isinstance(e, TetherError) else repr(e),
                    delay,
                )
                warned = True
            finally:
                await stream.aclose()
            self._listening.set()  # claims are not held up for a stream that fails
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, STREAM_RETRY_MAX)

    # ---- heartbeats ------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Heartbeats every held job every third of its own lease: wakes when
        the first job is due and takes along every job due within the
        shortest interval among them, so jobs of one lease share a batch."""
        backoff = MIN_BACKOFF
        retry_at: Optional[float] = None
        while not self._drained.is_set():
            due = min(
                (fl.beat_due() for fl in self._inflight.values() if fl.reporting_since is None),
                default=None,
            )
            if self._progress_at is not None and (due is None or self._progress_at < due):
                due = self._progress_at
            # After a failure, the retry's time alone: the jobs it failed for
            # are overdue, and waking for them at once would try again as fast
            # as the errors come back. The retry comes within the interval.
            self._beat_at = due if retry_at is None else retry_at
            self._beat_sooner.clear()
            wait = HEARTBEAT_IDLE if self._beat_at is None else self._beat_at - time.monotonic()
            drained = asyncio.ensure_future(self._drained.wait())
            sooner = asyncio.ensure_future(self._beat_sooner.wait())
            try:
                await asyncio.wait(
                    {drained, sooner},
                    timeout=max(0.0, wait),
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

    def _progress_reported(self) -> None:
        """A handler reported progress while none of its own waited to be sent:
        a heartbeat carries it at once, or PROGRESS_EVERY after the last one
        if that went less than PROGRESS_EVERY ago."""
        if self._progress_at is not None:
            return
        self._progress_at = max(time.monotonic(), self._beat_sent + PROGRESS_EVERY)
        if self._beat_at is None or self._progress_at < self._beat_at:
            self._beat_sooner.set()

    async def _heartbeat_cycle(self) -> Optional[float]:
        """Heartbeats the jobs due now or within the shortest interval among
        the held ones, and those with new progress when a heartbeat is due
        for it; answers the shortest interval of a batch that failed, if one
        did."""
        now = time.monotonic()
        for_progress = self._progress_at is not None and self._progress_at <= now
        if for_progress:
            self._progress_at = None
        # A job whose outcome is on its way is not heartbeated: after its
        # report there is no lease left to extend.
        held = [fl for fl in self._inflight.values() if fl.reporting_since is None]
        if not held:
            return None
        # Progress alone takes only the jobs with progress along; a job due
        # takes along every job due within the shortest interval.
        due = any(fl.beat_due() <= now for fl in held)
        window = min(fl.interval for fl in held) if due else 0.0
        held = [
            fl
            for fl in held
            if fl.beat_due() <= now + window or (for_progress and fl.ctx._has_progress())
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
            self._beat_sent = sent
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
                        # Due again at once: the retry (after the backoff) takes it.
                        self._progress_at = time.monotonic()
                continue
            for fl in chunk:
                fl.last_beat = sent
            for fl, r in zip(chunk, results):
                if r.ok:
                    if r.ack is not None and r.ack.cancel_requested:
                        self._cancel_requested(fl)
                    continue
                if fl.reporting_since is not None and isinstance(r.error, (LeaseLost, NotFound)):
                    # Its report got there first: no lease left, nothing lost.
                    continue
                self._saw_item("heartbeat", fl.claimed.id, fl.token, r.error or Exception("?"))
                if isinstance(r.error, (LeaseLost, NotFound)):
                    if fl.reporting_since is None and not fl.lost:
                        fl.lost = True
                        log.warning(
                            "job %s: heartbeat: lease lost to another owner; stopping the handler",
                            fl.claimed.id,
                        )
                        fl.ctx._cancel()
                else:
                    log.warning("job %s: heartbeat refused: %s", fl.claimed.id, r.error)
        return failed
