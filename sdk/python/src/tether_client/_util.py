"""Small helpers shared by the clients."""

from __future__ import annotations

import enum
from datetime import datetime, timezone
from typing import Any, Dict, Final, Iterable, List, Mapping, Optional, Union
from urllib.parse import quote

from ._duration import Duration, opt_ms
from ._errors import TetherError, error_from
from ._models import (
    JSON,
    Backoff,
    ClaimedJob,
    ClaimResult,
    DependencyFailure,
    HeartbeatAck,
    ItemResult,
    Job,
    JobResult,
)


class _Unset(enum.Enum):
    """The type of :data:`UNSET`."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset.UNSET
"""Left out: no request body at all (as opposed to a JSON ``null``), or a
field to leave as it is where ``None`` means "clear it"."""

Time = Union[str, datetime]
"""An instant: an RFC 3339 string, or a ``datetime`` (naive ones are taken as UTC)."""


def time_str(t: Optional[Time]) -> Optional[str]:
    """RFC 3339 text for a time given as a string or ``datetime``."""
    if t is None or isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def pick(**fields: Any) -> Dict[str, Any]:
    """The fields that are not None."""
    return {k: v for k, v in fields.items() if v is not None}


def seg(value: str) -> str:
    """One URL path segment."""
    return quote(str(value), safe="")


def enqueue_body(
    queue: str,
    kind: str,
    payload: Any,
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
    depends_on: Optional[Iterable[Union[str, Job]]],
    depends_on_entries: Optional[Iterable[int]] = None,
    dependency_failure: Optional[DependencyFailure],
    workflow_id: Optional[str],
    headers: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    """The body of an enqueue (or one entry of a batch): durations as whole
    milliseconds, times as RFC 3339 text, jobs as their ids. (The trace
    context goes into ``headers`` when the body is sent: see ``_tracing``.)"""
    body: Dict[str, Any] = {"queue": queue, "kind": kind, "payload": payload}
    body.update(
        pick(
            priority=priority,
            run_at=time_str(run_at),
            delay_ms=opt_ms(delay, "delay"),
            max_attempts=max_attempts,
            timeout_ms=opt_ms(timeout, "timeout"),
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=None if tags is None else [str(t) for t in tags],
            expires_at=time_str(expires_at),
            backoff=None if backoff is None else backoff.to_dict(),
            concurrency_key=concurrency_key,
            depends_on=job_ids(depends_on),
            depends_on_entries=None if depends_on_entries is None else list(depends_on_entries),
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
            headers=None if headers is None else dict(headers),
        )
    )
    return body


def enqueued(data: Any) -> Job:
    """An enqueue's answer: the job, with ``created``."""
    job = Job.from_dict(data["job"])
    job.created = bool(data["created"])
    return job


def job_ids(jobs: Optional[Iterable[Union[str, Job]]]) -> Optional[List[str]]:
    """Job ids, from ids or :class:`Job` objects."""
    if jobs is None:
        return None
    return [j.id if isinstance(j, Job) else str(j) for j in jobs]


class BatchEntry:
    """One entry of ``enqueue_batch``, made by :func:`batch_entry`; ``body``
    is the entry as sent."""

    __slots__ = ("body",)

    def __init__(self, body: Dict[str, Any]) -> None:
        self.body = body

    def __repr__(self) -> str:
        return f"BatchEntry({self.body!r})"


def batch_entry(
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
    depends_on: Optional[Iterable[Union[str, Job]]] = None,
    depends_on_entries: Optional[Iterable[int]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
    workflow_id: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> BatchEntry:
    """One entry of ``enqueue_batch``, from the arguments of ``enqueue``
    (durations in seconds or ``timedelta``), plus ``depends_on_entries``:
    the indexes of earlier entries of the same batch this one waits for. (A
    graph that should be a workflow is easier to write with
    :class:`tether_client.WorkflowBuilder`.) A negative duration raises
    ``ValueError`` here."""
    return BatchEntry(
        enqueue_body(
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
            depends_on=depends_on,
            depends_on_entries=depends_on_entries,
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
            headers=headers,
        )
    )


def _item_error(r: Dict[str, Any]) -> TetherError:
    """The exception a failed item of a batch answer stands for."""
    err = r.get("error") or {}
    return error_from(str(err.get("code")), str(err.get("message", "")), 0)


def _item_result(r: Dict[str, Any], heartbeat: bool) -> ItemResult:
    if r.get("ok"):
        ack = HeartbeatAck.from_dict(r) if heartbeat else None
        return ItemResult(id=str(r["id"]), ok=True, ack=ack, raw=r)
    return ItemResult(id=str(r["id"]), ok=False, error=_item_error(r), raw=r)


def job_results(data: Any) -> List[JobResult]:
    """The per-job answers of a bulk cancel or replay."""
    return [
        JobResult(id=str(r["id"]), ok=True, job=Job.from_dict(r["job"]), raw=r)
        if r.get("ok")
        else JobResult(id=str(r["id"]), ok=False, error=_item_error(r), raw=r)
        for r in data["results"]
    ]


def item_results(data: Any, *, heartbeat: bool) -> List[ItemResult]:
    """The per-item answers of a batch heartbeat or complete."""
    return [_item_result(r, heartbeat) for r in data["results"]]


def claim_result(data: Any) -> ClaimResult:
    """A claim's answer: its jobs, and one answer per report it carried
    (``reports`` is absent when it carried none)."""
    return ClaimResult(
        [ClaimedJob.from_dict(j) for j in data["jobs"]],
        [_item_result(r, False) for r in data.get("reports") or ()],
    )
