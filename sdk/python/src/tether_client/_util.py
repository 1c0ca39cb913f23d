"""Small helpers shared by the clients."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union
from urllib.parse import quote

from ._errors import error_from
from ._models import (
    JSON,
    Backoff,
    ClaimedJob,
    ClaimResult,
    DependencyFailure,
    HeartbeatAck,
    ItemResult,
    Job,
)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""No request body at all (as opposed to a JSON ``null``)."""

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


def backoff_dict(b: Union[Backoff, Dict[str, int], None]) -> Optional[Dict[str, int]]:
    if b is None:
        return None
    if isinstance(b, Backoff):
        return b.to_dict()
    return dict(b)


def enqueue_body(
    queue: str,
    kind: str,
    payload: Any,
    *,
    priority: Optional[int],
    run_at: Optional[Time],
    delay_ms: Optional[int],
    max_attempts: Optional[int],
    timeout_ms: Optional[int],
    idempotency_key: Optional[str],
    unique_key: Optional[str],
    tags: Optional[Iterable[str]],
    expires_at: Optional[Time],
    backoff: Union[Backoff, Dict[str, int], None],
    concurrency_key: Optional[str] = None,
    depends_on: Optional[Iterable[Union[str, Job]]] = None,
    depends_on_entries: Optional[Iterable[int]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
    workflow_id: Optional[str] = None,
    extra: Mapping[str, Any],
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"queue": queue, "kind": kind, "payload": payload}
    body.update(
        pick(
            priority=priority,
            run_at=time_str(run_at),
            delay_ms=delay_ms,
            max_attempts=max_attempts,
            timeout_ms=timeout_ms,
            idempotency_key=idempotency_key,
            unique_key=unique_key,
            tags=None if tags is None else [str(t) for t in tags],
            expires_at=time_str(expires_at),
            backoff=backoff_dict(backoff),
            concurrency_key=concurrency_key,
            depends_on=job_ids(depends_on),
            depends_on_entries=None if depends_on_entries is None else list(depends_on_entries),
            dependency_failure=dependency_failure,
            workflow_id=workflow_id,
        )
    )
    body.update(extra)
    return body


def job_ids(jobs: Optional[Iterable[Union[str, Job]]]) -> Optional[List[str]]:
    """Job ids, from ids or :class:`Job` objects."""
    if jobs is None:
        return None
    return [j.id if isinstance(j, Job) else str(j) for j in jobs]


def batch_entry(
    queue: str,
    kind: str,
    payload: JSON = None,
    *,
    priority: Optional[int] = None,
    run_at: Optional[Time] = None,
    delay_ms: Optional[int] = None,
    max_attempts: Optional[int] = None,
    timeout_ms: Optional[int] = None,
    idempotency_key: Optional[str] = None,
    unique_key: Optional[str] = None,
    tags: Optional[Iterable[str]] = None,
    expires_at: Optional[Time] = None,
    backoff: Union[Backoff, Dict[str, int], None] = None,
    concurrency_key: Optional[str] = None,
    depends_on: Optional[Iterable[Union[str, Job]]] = None,
    depends_on_entries: Optional[Iterable[int]] = None,
    dependency_failure: Optional[DependencyFailure] = None,
    workflow_id: Optional[str] = None,
    **extra: Any,
) -> Dict[str, Any]:
    """One entry of ``enqueue_batch``, from the arguments of ``enqueue``
    (typed), plus ``depends_on_entries``: the indexes of earlier entries of
    the same batch this one waits for. (A graph that should be a workflow
    is easier to write with :class:`tether_client.WorkflowBuilder`.)"""
    return enqueue_body(
        queue,
        kind,
        payload,
        priority=priority,
        run_at=run_at,
        delay_ms=delay_ms,
        max_attempts=max_attempts,
        timeout_ms=timeout_ms,
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
        extra=extra,
    )


def batch_entries(jobs: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The entries of a batch enqueue as sent: times as RFC 3339 text, a
    ``Backoff`` as its dict, ``depends_on`` as job ids."""
    entries = []
    for j in jobs:
        entry: Dict[str, Any] = {}
        for k, v in j.items():
            if k in ("run_at", "expires_at"):
                v = time_str(v)
            elif k == "backoff" and isinstance(v, Backoff):
                v = v.to_dict()
            elif k == "depends_on" and v is not None:
                v = job_ids(v)
            entry[k] = v
        entries.append(entry)
    return entries


def _item_result(r: Dict[str, Any], heartbeat: bool) -> ItemResult:
    if r.get("ok"):
        ack = HeartbeatAck.from_dict(r) if heartbeat else None
        return ItemResult(id=str(r["id"]), ok=True, ack=ack, raw=r)
    err = r.get("error") or {}
    exc = error_from(str(err.get("code")), str(err.get("message", "")), 0)
    return ItemResult(id=str(r["id"]), ok=False, error=exc, raw=r)


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
