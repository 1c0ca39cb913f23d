"""Typed results of the API: dataclasses read from the server's JSON.

Every object keeps the JSON it was read from in ``raw``, so fields that a
newer server adds are never lost; times stay RFC 3339 strings as the server
wrote them (UTC, millisecond precision).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import (
    Any,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Literal,
    Optional,
    Type,
    TypeVar,
    Union,
)

from ._duration import Duration, opt_ms, seconds, to_ms

T = TypeVar("T")

JSON = Any
"""Any JSON value: what payloads, results and progress are."""

DependencyFailure = Literal["cancel", "run"]
"""What a waiting job does when a dependency ends ``failed`` or ``cancelled``:
``"cancel"`` (it is cancelled, and so is everything waiting for it with
``cancel``) or ``"run"`` (it runs once every dependency has ended)."""

WorkflowState = Literal["running", "succeeded", "failed", "cancelled"]
"""Where a workflow is, derived from its jobs when read: ``"running"`` while
any job is unfinished, then ``"succeeded"`` if every job succeeded,
``"failed"`` if any failed, else ``"cancelled"``."""

RetryMode = Literal["failed", "failed_and_downstream"]
"""Which jobs a workflow retry puts back: ``"failed"`` (its failed jobs), or
``"failed_and_downstream"`` (also every finished job of the workflow
downstream of them: what their failure cancelled or ran anyway)."""


_FIELDS: Dict[type, FrozenSet[str]] = {}
"""Each dataclass's field names but ``raw`` (a worker reads thousands of jobs
a second: ``dataclasses.fields`` each time would cost more than the rest)."""


def _build(cls: Type[T], data: Dict[str, Any], **nested: Any) -> T:
    names = _FIELDS.get(cls)
    if names is None:
        names = frozenset(f.name for f in dataclasses.fields(cls)) - {"raw"}  # type: ignore[arg-type]
        _FIELDS[cls] = names
    if not nested and data.keys() <= names:
        # The usual case (every field known, none replaced): no copy.
        return cls(raw=data, **data)  # type: ignore[call-arg]
    kwargs = {k: v for k, v in data.items() if k in names}
    kwargs.update(nested)
    return cls(raw=data, **kwargs)  # type: ignore[call-arg]


@dataclass(init=False)
class Backoff:
    """Retry backoff: the delay doubles from ``base`` up to ``cap``, in
    seconds (``float`` or ``timedelta`` given; kept as float seconds; sent
    as whole milliseconds)."""

    base: float
    cap: float
    raw: Dict[str, Any] = field(repr=False, compare=False)

    def __init__(
        self, base: Duration = 1.0, cap: Duration = 3600.0, *, raw: Optional[Dict[str, Any]] = None
    ) -> None:
        self.base = seconds(base, "backoff base")
        self.cap = seconds(cap, "backoff cap")
        self.raw = {} if raw is None else raw

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Backoff:
        """From the server's ``{base_ms, cap_ms}``."""
        return cls(data.get("base_ms", 1000) / 1000, data.get("cap_ms", 3_600_000) / 1000, raw=data)

    def to_dict(self) -> Dict[str, int]:
        """The server's ``{base_ms, cap_ms}``."""
        return {
            "base_ms": to_ms(self.base, "backoff base"),
            "cap_ms": to_ms(self.cap, "backoff cap"),
        }


@dataclass(init=False)
class RateLimit:
    """A queue's rate limit: at most ``count`` claims in any ``period``
    (seconds, or a ``timedelta``; sent as ``period_ms``)."""

    count: int
    period: float
    raw: Dict[str, Any] = field(repr=False, compare=False)

    def __init__(
        self, count: int, period: Duration, *, raw: Optional[Dict[str, Any]] = None
    ) -> None:
        self.count = count
        self.period = seconds(period, "rate limit period")
        self.raw = {} if raw is None else raw

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> RateLimit:
        """From the server's ``{count, period_ms}``."""
        return cls(int(data["count"]), data["period_ms"] / 1000, raw=data)

    def to_dict(self) -> Dict[str, int]:
        """The server's ``{count, period_ms}``."""
        return {"count": self.count, "period_ms": to_ms(self.period, "rate limit period")}


@dataclass
class Job:
    """A job as the server shows it (never with its lease token)."""

    id: str = ""
    queue: str = ""
    kind: str = ""
    payload: JSON = None
    result: JSON = None
    state: str = ""
    priority: int = 0
    attempt: int = 0
    max_attempts: int = 0
    run_at: str = ""
    created_at: str = ""
    started_at: Optional[str] = None
    finished_at: Optional[str] = None
    updated_at: str = ""
    last_error: Optional[str] = None
    unique_key: Optional[str] = None
    idempotency_key: Optional[str] = None
    tags: List[str] = field(default_factory=list)
    expires_at: Optional[str] = None
    timeout_ms: Optional[int] = None
    cancel_requested: bool = False
    worker_id: Optional[str] = None
    lease_expires_at: Optional[str] = None
    heartbeat_at: Optional[str] = None
    progress: JSON = None
    depends_on: List[str] = field(default_factory=list)
    """The jobs it waits (or waited) for, in the order given at enqueue."""
    concurrency_key: Optional[str] = None
    dependency_failure: DependencyFailure = "cancel"
    """What it does when a dependency ends ``failed`` or ``cancelled``:
    ``cancel`` (it is cancelled too) or ``run`` (it runs once they all ended)."""
    workflow_id: Optional[str] = None
    """The workflow it belongs to, if any: a handler passes it as
    ``enqueue(..., workflow_id=...)`` to add jobs to its own workflow."""
    headers: Dict[str, str] = field(default_factory=dict)
    """The string headers it was enqueued with (``{}`` when none): W3C trace
    context (``traceparent``, ``tracestate``), a request id, ..."""
    created: Optional[bool] = None
    """Only on enqueue answers: whether this request made the job (False: an
    existing job with the same idempotency or unique key was answered)."""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Job:
        return _build(cls, data)


@dataclass
class ClaimedJob(Job):
    """A claimed job: the job plus the lease token that proves ownership."""

    lease_token: str = ""

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ClaimedJob:
        return _build(cls, data)


@dataclass
class EnqueueResult:
    """One answer of a batch enqueue, in request order."""

    job: Job
    created: bool
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> EnqueueResult:
        job = Job.from_dict(data["job"])
        job.created = bool(data["created"])
        return _build(cls, data, job=job)


@dataclass
class JobPage:
    """One page of ``GET /v1/jobs`` (newest first)."""

    jobs: List[Job]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> JobPage:
        return _build(cls, data, jobs=[Job.from_dict(j) for j in data["jobs"]])


@dataclass
class DependencyJob:
    """One dependency of a job (``GET /v1/jobs/{id}/dependencies``), as its
    handler reads it: its state, and its ``result`` once it succeeded (or
    ``last_error`` once it failed)."""

    id: str = ""
    kind: str = ""
    state: str = ""
    result: JSON = None
    last_error: Optional[str] = None
    finished_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> DependencyJob:
        return _build(cls, data)


@dataclass
class JobEvent:
    """One entry of a job's history."""

    at: str = ""
    event: str = ""
    attempt: int = 0
    worker_id: Optional[str] = None
    detail: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> JobEvent:
        return _build(cls, data)


@dataclass
class EventPage:
    """One page of a job's history (oldest first)."""

    events: List[JobEvent]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> EventPage:
        return _build(cls, data, events=[JobEvent.from_dict(e) for e in data["events"]])


@dataclass
class FeedEvent:
    """One history event of ``GET /v1/events`` (what
    :meth:`tether_client.Client.stream_events` yields): the job's event with
    its queue, kind and workflow, and ``state``, the state it left the job in
    (for ``enqueued``, ``replayed`` and ``lease_lost``, which set none, the
    job's state when the stream read the event). ``cursor`` is where a
    reader stands once it has the event (the message's ``id``): pass it as
    ``after`` to resume right after it."""

    cursor: str = ""
    job_id: str = ""
    workflow_id: Optional[str] = None
    queue: str = ""
    kind: str = ""
    event: str = ""
    at: str = ""
    attempt: int = 0
    worker_id: Optional[str] = None
    detail: Optional[str] = None
    state: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> FeedEvent:
        return _build(cls, data)


@dataclass
class FeedGap:
    """A ``gap`` message of ``GET /v1/events``: retention removed events
    after the reader's cursor before the stream read them; they are lost,
    and the stream goes on from ``oldest`` (a cursor, as ``FeedEvent.cursor``)."""

    oldest: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> FeedGap:
        return _build(cls, data)


FeedItem = Union[FeedEvent, FeedGap]
"""What an event stream yields: a :class:`FeedEvent`, or a :class:`FeedGap`
when events were lost to retention."""


@dataclass
class StateCounts:
    """How many jobs of a queue (or a workflow) are in each state
    (``waiting``: for their dependencies)."""

    waiting: int = 0
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> StateCounts:
        return _build(cls, data)


@dataclass
class Workflow:
    """A workflow as listed (``GET /v1/workflows``): a named graph of jobs,
    its ``state`` derived from theirs (see :data:`WorkflowState`) and
    ``counts`` its jobs per state. ``finished_at`` is the last job's, once
    every job has finished."""

    id: str = ""
    name: str = ""
    idempotency_key: Optional[str] = None
    state: WorkflowState = "running"
    created_at: str = ""
    finished_at: Optional[str] = None
    counts: StateCounts = field(default_factory=StateCounts)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Workflow:
        return _build(cls, data, counts=StateCounts.from_dict(data.get("counts") or {}))


@dataclass
class WorkflowJob:
    """One job of a workflow's graph: its id, kind, state, and the jobs it
    waits (or waited) for."""

    id: str = ""
    kind: str = ""
    state: str = ""
    depends_on: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkflowJob:
        return _build(cls, data)


@dataclass
class WorkflowDetail(Workflow):
    """A workflow with its whole graph (``GET /v1/workflows/{id}``): ``jobs``
    oldest first, jobs added at run time included."""

    jobs: List[WorkflowJob] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkflowDetail:
        return _build(
            cls,
            data,
            counts=StateCounts.from_dict(data.get("counts") or {}),
            jobs=[WorkflowJob.from_dict(j) for j in data.get("jobs") or ()],
        )


@dataclass
class WorkflowPage:
    """One page of ``GET /v1/workflows`` (newest first). With a ``state``
    filter a page may hold fewer than ``limit`` (even none) and still have a
    ``next_cursor``."""

    workflows: List[Workflow]
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkflowPage:
        return _build(cls, data, workflows=[Workflow.from_dict(w) for w in data["workflows"]])


@dataclass
class WorkflowCancel:
    """What cancelling a workflow did: ``cancelled`` jobs at once (waiting or
    queued), ``cancel_requested`` running ones asked to stop."""

    cancelled: int = 0
    cancel_requested: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkflowCancel:
        return _build(cls, data)


@dataclass
class WorkflowRetry:
    """What retrying a workflow did: ``replayed`` jobs put back (``queued``,
    or ``waiting`` for their dependencies)."""

    replayed: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkflowRetry:
        return _build(cls, data)


@dataclass
class Queue:
    """A queue's settings and counts."""

    name: str = ""
    paused: bool = False
    counts: StateCounts = field(default_factory=StateCounts)
    ready: int = 0
    scheduled: int = 0
    oldest_ready_age_ms: int = 0
    expired_leases: int = 0
    max_attempts: int = 0
    backoff: Backoff = field(default_factory=Backoff)
    default_lease_ttl_ms: int = 0
    max_running: Optional[int] = None
    rate_limit: Optional[RateLimit] = None
    key_max_running: Optional[int] = None
    fair: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Queue:
        return _build(
            cls,
            data,
            counts=StateCounts.from_dict(data.get("counts") or {}),
            backoff=Backoff.from_dict(data.get("backoff") or {}),
            rate_limit=None if data.get("rate_limit") is None else RateLimit.from_dict(
                data["rate_limit"]
            ),
        )


@dataclass
class HeartbeatAck:
    """A heartbeat's answer: the new lease expiry and whether a cancel was asked."""

    lease_expires_at: str = ""
    cancel_requested: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> HeartbeatAck:
        return _build(cls, data)


@dataclass
class ItemResult:
    """One item's answer in a batch heartbeat or complete, in request order.

    ``ok`` tells whether it went through; if not, ``error`` is the exception
    the item would have raised alone (``LeaseLost``, ...). For heartbeats,
    ``ack`` carries the new lease.
    """

    id: str
    ok: bool
    error: Optional[Exception] = None
    ack: Optional[HeartbeatAck] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class Schedule:
    """A cron schedule that enqueues a job at every fire time."""

    id: str = ""
    name: str = ""
    cron: str = ""
    timezone: str = "UTC"
    queue: str = ""
    kind: str = ""
    payload: JSON = None
    enabled: bool = True
    overlap: str = "allow"
    next_run_at: Optional[str] = None
    last_run_at: Optional[str] = None
    created_at: str = ""
    updated_at: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Schedule:
        return _build(cls, data)


ScheduleOutcome = Literal["created", "updated", "unchanged"]
"""What ``ensure_schedule`` did: ``created`` the schedule, ``updated`` its
definition (its id and runs kept), or nothing (``unchanged``: it already
was exactly this)."""


@dataclass
class EnsuredSchedule:
    """What ``ensure_schedule`` answers (``PUT /v1/schedules/{name}``): the
    schedule as it now stands, and the ``outcome``."""

    schedule: Schedule
    outcome: ScheduleOutcome
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> EnsuredSchedule:
        return _build(cls, data, schedule=Schedule.from_dict(data["schedule"]))


@dataclass
class ScheduleRun:
    """One run of a schedule: ``outcome`` is ``enqueued`` or ``skipped``."""

    fire_at: str = ""
    job_id: Optional[str] = None
    outcome: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ScheduleRun:
        return _build(cls, data)


@dataclass
class Tenant:
    """A tenant: the owner of jobs, queues, schedules and keys."""

    id: str = ""
    name: str = ""
    created_at: Optional[str] = None
    #: When an admin suspended it (RFC 3339); ``None`` while it is active (and
    #: where the answer does not carry it, as in ``whoami``).
    suspended_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Tenant:
        return _build(cls, data)


@dataclass
class CreatedTenant:
    """A new tenant and its first API key (shown only this once)."""

    tenant: Tenant
    api_key: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> CreatedTenant:
        return _build(cls, data, tenant=Tenant.from_dict(data["tenant"]))


@dataclass
class ApiKey:
    """A key as listed (never its secret)."""

    id: str = ""
    name: Optional[str] = None
    admin: bool = False
    created_at: str = ""
    last_used_at: Optional[str] = None
    revoked_at: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ApiKey:
        return _build(cls, data)


@dataclass
class CreatedKey:
    """A new key: its id and its secret (shown only this once)."""

    key_id: str = ""
    api_key: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> CreatedKey:
        return _build(cls, data)


@dataclass
class WhoAmI:
    """Who the client's key is: its tenant, its id, and whether it is admin."""

    tenant: Tenant
    key_id: str = ""
    admin: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WhoAmI:
        return _build(cls, data, tenant=Tenant.from_dict(data["tenant"]))


@dataclass
class BulkReplay:
    """A bulk replay round: how many jobs were replayed, and where to go on."""

    replayed: int = 0
    next_cursor: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> BulkReplay:
        return _build(cls, data)


@dataclass
class JobResult:
    """One job's answer in a bulk cancel or replay (``cancel_jobs``,
    ``replay_jobs``), in request order: ``ok`` and the ``job`` as it is now,
    or ``error``, the exception the single route would have raised for it
    (``InvalidState``, ``NotFound``, ...)."""

    id: str
    ok: bool
    job: Optional[Job] = None
    error: Optional[Exception] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass
class ThroughputMinute:
    """One minute of a queue's history (``throughput``): ``at`` is the
    minute's start; the counts are of jobs that succeeded, failed for good,
    were scheduled again (``retried``) or were cancelled in it."""

    at: str = ""
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> ThroughputMinute:
        return _build(cls, data)


@dataclass
class Percentiles:
    """The 50th, 95th and 99th percentiles of some durations, in milliseconds
    (as the server answers them)."""

    p50: int = 0
    p95: int = 0
    p99: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Percentiles:
        return _build(cls, data)


@dataclass
class Throughput:
    """A queue's recent history (``GET /v1/queues/{queue}/throughput``):
    ``minutes``, oldest first (the last is the current, partial minute), and
    over the jobs that finished in the window, ``wait_ms`` (ready to
    claimed) and ``run_ms`` (claimed to finished) of their last attempt;
    None when none finished."""

    minutes: List[ThroughputMinute] = field(default_factory=list)
    wait_ms: Optional[Percentiles] = None
    run_ms: Optional[Percentiles] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> Throughput:
        def pct(value: Any) -> Optional[Percentiles]:
            return None if value is None else Percentiles.from_dict(value)

        return _build(
            cls,
            data,
            minutes=[ThroughputMinute.from_dict(m) for m in data["minutes"]],
            wait_ms=pct(data.get("wait_ms")),
            run_ms=pct(data.get("run_ms")),
        )


@dataclass
class WorkerInfo:
    """A worker of the tenant (``GET /v1/workers``): one holding running jobs
    now, or one that announced itself (``PUT /v1/workers/{id}``, as every
    :class:`tether_client.Worker` does) and was seen within the last 5
    minutes, idle or not. ``queues`` are the queues it announced and those
    of its running jobs; ``running`` how many jobs it holds (0 when idle);
    ``last_heartbeat_at`` its latest heartbeat on any of them (its claim,
    before the first). ``last_seen_at`` (its last announcement or claim)
    and what it announced (``concurrency``, ``sdk``, ``version``, ``host``,
    ``pid``) are None for a worker that never announced itself."""

    worker_id: str = ""
    queues: List[str] = field(default_factory=list)
    running: int = 0
    last_heartbeat_at: Optional[str] = None
    last_seen_at: Optional[str] = None
    concurrency: Optional[int] = None
    sdk: Optional[str] = None
    version: Optional[str] = None
    host: Optional[str] = None
    pid: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> WorkerInfo:
        return _build(cls, data)


@dataclass
class HeartbeatItem:
    """One job of a batch heartbeat. ``lease_ttl`` (seconds or a
    ``timedelta``) and ``progress`` are sent only when not None."""

    id: str
    lease_token: str
    lease_ttl: Optional[Duration] = None
    progress: JSON = None

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"id": self.id, "lease_token": self.lease_token}
        if self.lease_ttl is not None:
            d["lease_ttl_ms"] = to_ms(self.lease_ttl, "lease_ttl")
        if self.progress is not None:
            d["progress"] = self.progress
        return d


@dataclass
class CompleteItem:
    """One job of a batch complete."""

    id: str
    lease_token: str
    result: JSON = None

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"id": self.id, "lease_token": self.lease_token}
        if self.result is not None:
            d["result"] = self.result
        return d


@dataclass
class FailItem:
    """One failure a claim carries (``claim(..., failures=[...])``): the
    fields of ``fail`` for one job (``retry_after`` in seconds or a
    ``timedelta``). Optional fields are sent only when not None."""

    id: str
    lease_token: str
    error: str
    retry_after: Optional[Duration] = None
    fatal: Optional[bool] = None
    cancelled: Optional[bool] = None

    def to_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"id": self.id, "lease_token": self.lease_token, "error": self.error}
        retry_after_ms = opt_ms(self.retry_after, "retry_after")
        if retry_after_ms is not None:
            d["retry_after_ms"] = retry_after_ms
        if self.fatal is not None:
            d["fatal"] = self.fatal
        if self.cancelled is not None:
            d["cancelled"] = self.cancelled
        return d


class ClaimResult(List[ClaimedJob]):
    """What a claim answers: the claimed jobs (it *is* the list of
    :class:`ClaimedJob`, in claim order, as a claim always answered) and
    ``reports``, one :class:`ItemResult` per report the claim carried
    (completions first, then failures, each in request order; empty when it
    carried none). A refused report (``ok=False``, ``error`` e.g.
    ``LeaseLost``) never fails the claim."""

    reports: List[ItemResult]

    def __init__(
        self, jobs: Iterable[ClaimedJob] = (), reports: Optional[List[ItemResult]] = None
    ) -> None:
        super().__init__(jobs)
        self.reports = [] if reports is None else reports

    @property
    def jobs(self) -> List[ClaimedJob]:
        """The claimed jobs as a plain list."""
        return list(self)

    def __repr__(self) -> str:
        return f"ClaimResult({list.__repr__(self)}, reports={self.reports!r})"
