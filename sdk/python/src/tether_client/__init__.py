"""Python client and worker for tether, a durable background-job queue.

:class:`Client` (blocking) and :class:`AsyncClient` speak tether's HTTP API:
enqueue jobs, read and manage them, wait for their results, follow the
history as it is committed (``stream_events``), queues, schedules, tenants
and keys.
:class:`Worker` claims jobs of a queue and runs your handlers with the same
guarantees as tether's Rust worker: batched heartbeats at a third of the
lease, fenced results, retry-after vs snooze, cooperative cancel, and a
graceful hand-back on SIGTERM.

    from tether_client import Client, Worker

    client = Client("http://127.0.0.1:7070", key)
    client.enqueue("emails", "send_welcome", {"to": "ada@example.com"})

    worker = Worker(client, "emails", concurrency=8)

    @worker.handler("send_welcome")
    def send_welcome(job):
        return {"sent": True}

    worker.run()
"""

from ._client import AsyncClient, AsyncEventStream, Client, EventStream
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
from ._handler import Fatal, JobContext, Retry, RetryAfter, Snooze, WorkerObserver
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
    Queue,
    RetryMode,
    Schedule,
    ScheduleRun,
    StateCounts,
    Tenant,
    WhoAmI,
    Workflow,
    WorkflowCancel,
    WorkflowDetail,
    WorkflowJob,
    WorkflowPage,
    WorkflowRetry,
    WorkflowState,
)
from ._util import batch_entry
from ._worker import Worker
from ._workflow import EnqueuedWorkflow, WorkflowBuilder, WorkflowEntry

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "ApiKey",
    "AsyncClient",
    "AsyncEventStream",
    "Backoff",
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
    "EnqueueResult",
    "EnqueuedWorkflow",
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
    "LeaseLost",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "Queue",
    "Retry",
    "RetryAfter",
    "RetryMode",
    "Schedule",
    "ScheduleRun",
    "Snooze",
    "StateCounts",
    "Tenant",
    "TetherError",
    "TooManyRequests",
    "TransportError",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "WhoAmI",
    "Worker",
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
]
