"""Enqueue inside your own PostgreSQL transaction, with psycopg 3.

When tether's store is PostgreSQL, the database has two functions,
``tether.enqueue`` and ``tether.enqueue_many`` (docs/API.md, "Enqueueing
from your own PostgreSQL transaction"), that enqueue on the caller's
connection: the job exists if and only if the caller's transaction commits,
and at commit the workers waiting on its queue are woken. This module calls
them with the arguments of :meth:`tether_client.Client.enqueue` (seconds
for durations, the same names, the same checks, and the current W3C trace
context in ``headers``), on the connection you pass::

    import psycopg
    from tether_client import sql

    with psycopg.connect(DATABASE_URL) as conn, conn.transaction():
        conn.execute("INSERT INTO orders (id, total) VALUES (%s, %s)", (42, 1999))
        job = sql.enqueue(conn, "acme", "emails", "send_receipt", {"order": 42},
                          idempotency_key="receipt:42")
    # committed: job.id is a job of tenant acme, and a worker is woken

``conn`` is a psycopg 3 ``Connection`` or ``Cursor`` (``AsyncConnection``
or ``AsyncCursor`` for the ``*_async`` functions): anything whose
``execute(query, params)`` takes ``%s`` placeholders and answers a cursor.
The SDK imports nothing of psycopg (``pip install tether-client[postgres]``
brings it). The transaction is yours: these functions neither commit nor
roll back.

A refusal (a priority out of range, a bad header name, an empty batch, a
tenant that is not a valid name or is suspended) raises
:class:`tether_client.InvalidArgument` with the HTTP API's message (the
database's error as its ``__cause__``); the transaction is then aborted
and can only roll back. Other database errors are psycopg's own
(``40001``: retry the whole transaction; ``42501``: the role may not
execute the functions). Dependencies and workflows (``depends_on``,
``workflow_id``) are not offered: the functions refuse them.

The functions trust the database role: no key is checked, and ``tenant``
can be any tenant. Grant EXECUTE on them only to roles allowed to enqueue
for every tenant.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
)

from ._duration import Duration
from ._errors import InvalidArgument
from ._models import JSON, Backoff
from ._tracing import traced, traced_all
from ._util import BatchEntry, Time, enqueue_body

if TYPE_CHECKING:
    from ._task import Task

P = TypeVar("P")

__all__ = [
    "AsyncSqlConnection",
    "AsyncSqlCursor",
    "SqlConnection",
    "SqlCursor",
    "SqlEnqueued",
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "enqueue_task",
    "enqueue_task_async",
]

INVALID_PARAMETER_VALUE = "22023"
"""The SQLSTATE of the functions' refusals."""

_ONE = "SELECT id::text AS id, created FROM tether.enqueue(%s, %s, %s, %s::jsonb, %s::jsonb)"
_MANY = (
    "SELECT ord, id::text AS id, created FROM tether.enqueue_many(%s, %s::jsonb) ORDER BY ord"
)
_ARGUMENTS = ("queue", "kind", "payload")
"""The fields of an enqueue body that ``tether.enqueue`` takes as arguments,
not options."""


class SqlCursor(Protocol):
    """What this module reads of the cursor ``execute`` answers (psycopg's
    ``Cursor``); rows may be tuples or mappings (``dict_row``)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Any: ...


class SqlConnection(Protocol):
    """What this module calls on a connection: psycopg's ``Connection`` (or
    ``Cursor``), or anything whose ``execute(query, params)`` takes ``%s``
    placeholders and answers a :class:`SqlCursor`."""

    def execute(self, query: str, params: Sequence[Any], /) -> SqlCursor: ...


class AsyncSqlCursor(Protocol):
    """:class:`SqlCursor`, awaited (psycopg's ``AsyncCursor``)."""

    async def fetchone(self) -> Any: ...

    async def fetchall(self) -> Any: ...


class AsyncSqlConnection(Protocol):
    """:class:`SqlConnection`, awaited (psycopg's ``AsyncConnection`` or
    ``AsyncCursor``)."""

    async def execute(self, query: str, params: Sequence[Any], /) -> AsyncSqlCursor: ...


@dataclass(frozen=True)
class SqlEnqueued:
    """A job enqueued in the caller's transaction: its ``id``, and whether
    it is new (``created`` False: an existing job holds its idempotency
    key, or its unique key while active, and ``id`` is that job). The job
    can be read (``client.get(id)``) once the transaction has committed."""

    id: str
    created: bool


# ---- the request: bodies as Client.enqueue makes them -----------------------


def _body(
    queue: str,
    kind: str,
    payload: JSON,
    *,
    priority: Optional[int],
    run_at: Optional[Time],
    delay: Optional[Duration],
    max_attempts: Optional[int],
    timeout: Optional[Duration],
    idempotency_key: Optional[str],
    unique_key: Optional[str],
    tags: Optional[Iterable[str]],
    expires_at: Optional[Time],
    backoff: Optional[Backoff],
    concurrency_key: Optional[str],
    headers: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    """The body ``Client.enqueue`` sends for these arguments (the SDK's one
    ``enqueue_body``), without what the SQL functions refuse."""
    return enqueue_body(
        queue,
        kind,
        payload,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        depends_on=None,
        dependency_failure=None,
        workflow_id=None,
        headers=headers,
    )


def _task_body(
    task: Task[P, Any],
    payload: P,
    *,
    queue: Optional[str],
    priority: Optional[int],
    run_at: Optional[Time],
    delay: Optional[Duration],
    max_attempts: Optional[int],
    timeout: Optional[Duration],
    idempotency_key: Optional[str],
    unique_key: Optional[str],
    tags: Optional[Iterable[str]],
    expires_at: Optional[Time],
    backoff: Optional[Backoff],
    concurrency_key: Optional[str],
    headers: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    """The body ``task.enqueue(client, ...)`` sends, without what the SQL
    functions refuse: the task's ``dependency_failure`` default concerns
    jobs with dependencies, which they do not make."""
    body = task._body(
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        depends_on=None,
        dependency_failure=None,
        workflow_id=None,
        headers=headers,
    )
    body.pop("dependency_failure", None)
    return body


def _json(value: Any) -> str:
    """``value`` as JSON text, as the client sends it (compact; NaN and
    infinities raise ``ValueError``, other non-JSON values ``TypeError``)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _one(tenant: str, body: Dict[str, Any]) -> Tuple[str, Tuple[Any, ...]]:
    """The query of ``tether.enqueue`` for an enqueue body, with the current
    trace context in its headers."""
    body = traced(body)
    options = {k: v for k, v in body.items() if k not in _ARGUMENTS}
    return _ONE, (tenant, body["queue"], body["kind"], _json(body["payload"]), _json(options))


def _many(tenant: str, entries: Iterable[BatchEntry]) -> Tuple[str, Tuple[Any, ...]]:
    """The query of ``tether.enqueue_many`` for ``batch_entry(...)`` items,
    each with the current trace context in its headers."""
    bodies = []
    for e in entries:
        if not isinstance(e, BatchEntry):
            raise TypeError(f"enqueue_many takes batch_entry(...) items, not {e!r}")
        bodies.append(e.body)
    return _MANY, (tenant, _json(traced_all(bodies)))


# ---- the answer ---------------------------------------------------------------


def _field(row: Any, name: str, index: int) -> Any:
    if isinstance(row, Mapping):
        return row[name]
    if isinstance(row, Sequence):
        return row[index]
    return getattr(row, name)  # a row factory's object (class_row)


def _enqueued(row: Any, offset: int = 0) -> SqlEnqueued:
    """An answer row (``id, created``, after ``ord`` when ``offset`` is 1)."""
    if row is None:
        raise RuntimeError("tether.enqueue answered no row")
    return SqlEnqueued(
        id=str(_field(row, "id", offset)), created=bool(_field(row, "created", offset + 1))
    )


@contextmanager
def _refusals() -> Iterator[None]:
    """Raises the functions' refusal (SQLSTATE 22023) met inside as
    :class:`InvalidArgument`, with the API's message and the database's
    error as its cause; any other error as it is."""
    try:
        yield
    except Exception as e:
        if getattr(e, "sqlstate", None) != INVALID_PARAMETER_VALUE:
            raise
        # psycopg's str() adds CONTEXT lines: the primary message is the API's.
        message = getattr(getattr(e, "diag", None), "message_primary", None) or str(e)
        raise InvalidArgument(str(message)) from e


# ---- blocking -----------------------------------------------------------------


def _run_one(conn: SqlConnection, tenant: str, body: Dict[str, Any]) -> SqlEnqueued:
    query, params = _one(tenant, body)
    with _refusals():
        row = conn.execute(query, params).fetchone()
    return _enqueued(row)


def enqueue(
    conn: SqlConnection,
    tenant: str,
    queue: str,
    kind: str,
    payload: JSON = None,
    *,
    priority: Optional[int] = None,
    run_at: Optional[Time] = None,
    delay: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    idempotency_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    tags: Optional[Iterable[str]] = None,
    expires_at: Optional[Time] = None,
    backoff: Optional[Backoff] = None,
    concurrency_key: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> SqlEnqueued:
    """Enqueues a job of ``tenant`` in ``conn``'s current transaction
    (``tether.enqueue``): it exists once that transaction commits, and
    never if it rolls back. The keywords are those of
    :meth:`tether_client.Client.enqueue` (durations in seconds or
    ``timedelta``), less ``depends_on``, ``dependency_failure`` and
    ``workflow_id``; the current trace context goes into ``headers`` as
    there. A refusal raises :class:`tether_client.InvalidArgument`."""
    body = _body(
        queue,
        kind,
        payload,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        headers=headers,
    )
    return _run_one(conn, tenant, body)


def enqueue_many(
    conn: SqlConnection, tenant: str, entries: Iterable[BatchEntry]
) -> List[SqlEnqueued]:
    """Enqueues 1 to 1000 jobs of ``tenant`` in ``conn``'s current
    transaction (``tether.enqueue_many``), all or nothing; each entry is
    made by :func:`tether_client.batch_entry`, without dependencies or a
    workflow (refused). Answers one :class:`SqlEnqueued` per entry, in
    order. A refusal raises :class:`tether_client.InvalidArgument` and
    enqueues nothing."""
    query, params = _many(tenant, entries)
    with _refusals():
        rows = conn.execute(query, params).fetchall()
    return [_enqueued(r, 1) for r in rows]


def enqueue_task(
    conn: SqlConnection,
    tenant: str,
    task: Task[P, Any],
    payload: P,
    *,
    queue: Optional[str] = None,
    priority: Optional[int] = None,
    run_at: Optional[Time] = None,
    delay: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    idempotency_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    tags: Optional[Iterable[str]] = None,
    expires_at: Optional[Time] = None,
    backoff: Optional[Backoff] = None,
    concurrency_key: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> SqlEnqueued:
    """:func:`enqueue` of a typed task's job: ``payload`` encoded and the
    task's defaults taken as ``task.enqueue(client, payload, ...)`` does;
    its handler (``@worker.handler(task)``) gets it decoded."""
    body = _task_body(
        task,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        headers=headers,
    )
    return _run_one(conn, tenant, body)


# ---- asyncio ------------------------------------------------------------------


async def _run_one_async(
    conn: AsyncSqlConnection, tenant: str, body: Dict[str, Any]
) -> SqlEnqueued:
    query, params = _one(tenant, body)
    with _refusals():
        row = await (await conn.execute(query, params)).fetchone()
    return _enqueued(row)


async def enqueue_async(
    conn: AsyncSqlConnection,
    tenant: str,
    queue: str,
    kind: str,
    payload: JSON = None,
    *,
    priority: Optional[int] = None,
    run_at: Optional[Time] = None,
    delay: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    idempotency_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    tags: Optional[Iterable[str]] = None,
    expires_at: Optional[Time] = None,
    backoff: Optional[Backoff] = None,
    concurrency_key: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> SqlEnqueued:
    """:func:`enqueue` on an ``AsyncConnection``."""
    body = _body(
        queue,
        kind,
        payload,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        headers=headers,
    )
    return await _run_one_async(conn, tenant, body)


async def enqueue_many_async(
    conn: AsyncSqlConnection, tenant: str, entries: Iterable[BatchEntry]
) -> List[SqlEnqueued]:
    """:func:`enqueue_many` on an ``AsyncConnection``."""
    query, params = _many(tenant, entries)
    with _refusals():
        rows = await (await conn.execute(query, params)).fetchall()
    return [_enqueued(r, 1) for r in rows]


async def enqueue_task_async(
    conn: AsyncSqlConnection,
    tenant: str,
    task: Task[P, Any],
    payload: P,
    *,
    queue: Optional[str] = None,
    priority: Optional[int] = None,
    run_at: Optional[Time] = None,
    delay: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    timeout: Optional[Duration] = None,
    idempotency_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    tags: Optional[Iterable[str]] = None,
    expires_at: Optional[Time] = None,
    backoff: Optional[Backoff] = None,
    concurrency_key: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> SqlEnqueued:
    """:func:`enqueue_task` on an ``AsyncConnection``."""
    body = _task_body(
        task,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        max_attempts=max_attempts,
        timeout=timeout,
        idempotency_key=idempotency_key,
        unique_key=unique_key,
        tags=tags,
        expires_at=expires_at,
        backoff=backoff,
        concurrency_key=concurrency_key,
        headers=headers,
    )
    return await _run_one_async(conn, tenant, body)
