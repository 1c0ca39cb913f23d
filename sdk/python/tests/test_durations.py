"""Every duration the SDK takes is seconds (an int or float) or a timedelta,
sent to the server as whole milliseconds: the conversion, and what the
server stores for each keyword that takes one."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

import pytest

from conftest import Server
from tether_client import (
    AsyncClient,
    Backoff,
    Client,
    FailItem,
    HeartbeatItem,
    RateLimit,
    RetryAfter,
    Snooze,
    Worker,
    WorkflowBuilder,
    batch_entry,
)
from tether_client._duration import seconds, to_ms


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def between(start: Any, end: Any) -> float:
    """Seconds from one RFC 3339 time to another."""
    return (ts(end) - ts(start)).total_seconds()


def test_durations_become_whole_milliseconds_exactly() -> None:
    assert to_ms(30, "d") == 30_000
    assert to_ms(0.25, "d") == 250
    # Half up from the value written, not from the float's binary value.
    assert to_ms(0.0015, "d") == 2 and to_ms(0.0025, "d") == 3 and to_ms(1.0004, "d") == 1000
    assert to_ms(timedelta(minutes=2), "d") == 120_000
    assert to_ms(timedelta(microseconds=1500), "d") == 2
    assert to_ms(timedelta(microseconds=1499), "d") == 1
    assert to_ms(366 * 86400, "d") == 31_622_400_000
    assert seconds(timedelta(milliseconds=1500), "d") == 1.5
    for bad in (-1, -0.0001, timedelta(microseconds=-1)):
        with pytest.raises(ValueError, match="must not be negative"):
            to_ms(bad, "delay")
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match="finite"):
            to_ms(bad, "delay")
    for wrong in (True, "5", None):
        with pytest.raises(TypeError, match="seconds"):
            to_ms(wrong, "delay")  # type: ignore[arg-type]


def test_the_classes_users_make_take_seconds() -> None:
    assert Backoff(base=1, cap=3600).to_dict() == {"base_ms": 1000, "cap_ms": 3_600_000}
    b = Backoff(timedelta(milliseconds=1500), 9)
    assert (b.base, b.cap) == (1.5, 9.0) and b == Backoff(1.5, 9)
    assert Backoff.from_dict({"base_ms": 250, "cap_ms": 1000}) == Backoff(0.25, 1)
    assert RateLimit(10, timedelta(minutes=1)).to_dict() == {"count": 10, "period_ms": 60_000}
    assert FailItem("j", "t", "e", retry_after=1.5).to_dict()["retry_after_ms"] == 1500
    assert HeartbeatItem("j", "t", lease_ttl=timedelta(seconds=8)).to_dict()["lease_ttl_ms"] == 8000
    assert RetryAfter(timedelta(seconds=1.5)).seconds == 1.5
    assert RetryAfter(60).message == "retry after 60 s"
    assert Snooze(timedelta(minutes=1)).seconds == 60.0
    with pytest.raises(ValueError):
        Backoff(base=-1)
    with pytest.raises(ValueError):
        Snooze(-5)
    with pytest.raises(ValueError):
        RetryAfter(-0.5)


def test_enqueue_takes_seconds(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k", delay=30, timeout=timedelta(minutes=2))
    assert job.timeout_ms == 120_000
    assert between(job.created_at, job.run_at) == pytest.approx(30, abs=0.1)
    job = client.enqueue(queue, "k", delay=timedelta(milliseconds=1500), timeout=0.25)
    assert job.timeout_ms == 250
    assert between(job.created_at, job.run_at) == pytest.approx(1.5, abs=0.05)
    # Refused before anything is sent.
    for bad in ({"delay": -1}, {"timeout": -0.001}):
        with pytest.raises(ValueError):
            client.enqueue(queue, "k", **bad)
    assert len(client.list(queue=queue).jobs) == 2


def test_batches_and_workflows_take_seconds(client: Client, queue: str) -> None:
    [r] = client.enqueue_batch([batch_entry(queue, "k", delay=60, timeout=1.5)])
    assert r.job.timeout_ms == 1500
    assert between(r.job.created_at, r.job.run_at) == pytest.approx(60, abs=0.1)
    wf = WorkflowBuilder("units")
    entry = wf.add(queue, "k", timeout=timedelta(seconds=3), delay=0.5)
    assert wf.to_request()["jobs"][0]["timeout_ms"] == 3000
    assert client.enqueue_workflow(wf).job(entry).timeout_ms == 3000
    with pytest.raises(ValueError):
        batch_entry(queue, "k", delay=-1)
    with pytest.raises(TypeError, match="batch_entry"):
        client.enqueue_batch([{"queue": queue, "kind": "k"}])  # type: ignore[list-item]


def test_queue_settings_take_seconds(client: Client, queue: str) -> None:
    q = client.configure(
        queue,
        backoff=Backoff(base=2, cap=timedelta(minutes=5)),
        default_lease_ttl=timedelta(seconds=45),
        max_running=3,
        rate_limit=RateLimit(10, timedelta(minutes=1)),
        key_max_running=2,
        fair=True,
    )
    assert q.backoff == Backoff(2, 300) and q.backoff.raw == {"base_ms": 2000, "cap_ms": 300_000}
    assert q.default_lease_ttl_ms == 45_000
    assert (q.max_running, q.key_max_running, q.fair) == (3, 2, True)
    assert q.rate_limit == RateLimit(10, 60)
    # Left out: as it is. None: the limit is removed.
    q = client.configure(queue, max_attempts=4)
    kept = (q.max_attempts, q.max_running, q.rate_limit, q.key_max_running)
    assert kept == (4, 3, RateLimit(10, 60), 2)
    q = client.configure(queue, max_running=None, rate_limit=None, key_max_running=None, fair=False)
    assert (q.max_running, q.rate_limit, q.key_max_running, q.fair) == (None, None, None, False)
    with pytest.raises(ValueError):
        client.configure(queue, default_lease_ttl=-1)


def test_the_worker_protocol_takes_seconds(client: Client, queue: str) -> None:
    client.enqueue(queue, "k")
    [c] = client.claim(queue, "w", lease_ttl=timedelta(seconds=5), wait=0.5)
    assert between(c.heartbeat_at, c.lease_expires_at) == 5
    ack = client.heartbeat(c.id, c.lease_token, lease_ttl=7.5)
    assert between(client.get(c.id).heartbeat_at, ack.lease_expires_at) == 7.5
    snoozed = client.snooze(c.id, c.lease_token, timedelta(seconds=90))
    assert between(snoozed.updated_at, snoozed.run_at) == pytest.approx(90, abs=0.1)


def test_the_worker_takes_seconds_and_runs_eight_at_once_by_default(
    server: Server, client: Client, queue: str
) -> None:
    worker = Worker(client, queue, lease_ttl=timedelta(seconds=20), claim_wait=timedelta(0))
    assert worker.queues == {queue: 8}
    assert (worker.lease_ttl, worker.claim_wait) == (20.0, 0.0)
    with pytest.raises(ValueError):
        Worker(client, queue, shutdown_grace=-1)
    with pytest.raises(ValueError):
        Worker(client, queue, lease_ttl=timedelta(hours=2))
    slow = AsyncClient(server.url, server.key, timeout=timedelta(seconds=12))
    assert slow.timeout == 12.0


def test_waits_take_seconds(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    t0 = datetime.now()
    got: Any = client.wait(job, timeout=timedelta(milliseconds=300))
    assert got.state == "queued" and (datetime.now() - t0).total_seconds() >= 0.29
    assert client.get(job.id, wait=timedelta(milliseconds=50)).state == "queued"
