"""Python client and worker for tether, a durable background-job queue.

:class:`Client` (blocking) and :class:`AsyncClient` speak tether's HTTP API:
enqueue jobs, read and manage them, wait for their results, follow the
history as it is committed (``stream_events``), queues, schedules, tenants
and keys.
:class:`Worker` claims jobs of one or more queues and runs your handlers
with the same guarantees as tether's Rust worker: batched heartbeats at a
third of the lease, fenced results, retry-after vs snooze, cooperative
cancel, and a graceful hand-back on SIGTERM; hooks run around its
handlers, and with OpenTelemetry installed a job's handler continues the
trace that enqueued it. :func:`task` declares a typed job kind once, for
its enqueues and its handler. ``python -m tether_client worker
module:attr`` runs a worker. ``tether_client.testing`` is a pytest plugin
(a real server per session, a tenant per test) with ``run_until_empty``.
``tether_client.sql`` enqueues inside your own PostgreSQL transaction
(psycopg 3), when tether's store is PostgreSQL.
Every duration is seconds (or a ``timedelta``).

    from tether_client import Client, Worker

    client = Client("http://127.0.0.1:7070", key)
    client.enqueue("emails", "send_welcome", {"to": "ada@example.com"}, timeout=60)

    worker = Worker(client, "emails")  # 8 handlers at once

    @worker.handler("send_welcome")
    def send_welcome(job):
        return {"sent": True}

    worker.run()
"""

from ._client import AsyncClient, AsyncEventStream, Client, EventStream
from ._duration import Duration
from ._errors import (
    AlreadyExists,
    DecodeError,
    Internal,
    InvalidArgument,
    InvalidState,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    TetherError,
    TooManyRequests,
    TransportError,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
)
from ._handler import (
    Fatal,
    JobContext,
    Outcome,
    OutcomeStatus,
    Retry,
    RetryAfter,
    Snooze,
    WorkerObserver,
)
from ._models import (
    ApiKey,
    Backoff,
    BulkReplay,
    ClaimedJob,
    ClaimResult,
    CompleteItem,
    CreatedKey,
    CreatedTenant,
    DependencyFailure,
    DependencyJob,
    EnqueueResult,
    EnsuredSchedule,
    EventPage,
    FailItem,
    FeedEvent,
    FeedGap,
    FeedItem,
    HeartbeatAck,
    HeartbeatItem,
    ItemResult,
    Job,
    JobEvent,
    JobPage,
    JobResult,
    Percentiles,
    Queue,
    RateLimit,
    RetryMode,
    Schedule,
    ScheduleOutcome,
    ScheduleRun,
    StateCounts,
    Tenant,
    Throughput,
    ThroughputMinute,
    WhoAmI,
    WorkerInfo,
    Workflow,
    WorkflowCancel,
    WorkflowDetail,
    WorkflowJob,
    WorkflowPage,
    WorkflowRetry,
    WorkflowState,
)
from ._task import DoesNotFit, Task, TaskHandler, TaskJob, task
from ._util import BatchEntry, batch_entry
from ._version import VERSION
from ._worker import Worker
from ._workflow import EnqueuedWorkflow, WorkflowBuilder, WorkflowEntry

__version__ = VERSION

__all__ = [
    "AlreadyExists",
    "ApiKey",
    "AsyncClient",
    "AsyncEventStream",
    "Backoff",
    "BatchEntry",
    "BulkReplay",
    "ClaimResult",
    "ClaimedJob",
    "Client",
    "CompleteItem",
    "CreatedKey",
    "CreatedTenant",
    "DecodeError",
    "DependencyFailure",
    "DependencyJob",
    "DoesNotFit",
    "Duration",
    "EnqueueResult",
    "EnqueuedWorkflow",
    "EnsuredSchedule",
    "EventPage",
    "EventStream",
    "FailItem",
    "Fatal",
    "FeedEvent",
    "FeedGap",
    "FeedItem",
    "HeartbeatAck",
    "HeartbeatItem",
    "Internal",
    "InvalidArgument",
    "InvalidState",
    "ItemResult",
    "Job",
    "JobContext",
    "JobEvent",
    "JobPage",
    "JobResult",
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "Outcome",
    "OutcomeStatus",
    "PayloadTooLarge",
    "Percentiles",
    "PermissionDenied",
    "Queue",
    "RateLimit",
    "Retry",
    "RetryAfter",
    "RetryMode",
    "Schedule",
    "ScheduleOutcome",
    "ScheduleRun",
    "Snooze",
    "StateCounts",
    "Task",
    "TaskHandler",
    "TaskJob",
    "Tenant",
    "TetherError",
    "Throughput",
    "ThroughputMinute",
    "TooManyRequests",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "WhoAmI",
    "Worker",
    "WorkerInfo",
    "WorkerObserver",
    "Workflow",
    "WorkflowBuilder",
    "WorkflowCancel",
    "WorkflowDetail",
    "WorkflowEntry",
    "WorkflowJob",
    "WorkflowPage",
    "WorkflowRetry",
    "WorkflowState",
    "batch_entry",
    "task",
]
