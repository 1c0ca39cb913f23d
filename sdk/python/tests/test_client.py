"""Every client method against a real server, and every error class we can provoke."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from conftest import Server, wait_for
from tether_client import (
    AlreadyExists,
    AsyncClient,
    Backoff,
    ClaimResult,
    Client,
    CompleteItem,
    DecodeError,
    FailItem,
    HeartbeatItem,
    InvalidArgument,
    InvalidState,
    LeaseLost,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    TetherError,
    TransportError,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    WorkflowBuilder,
    __version__,
    batch_entry,
    task,
)
from tether_client._errors import error_from_body


def test_env_defaults(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_URL", server.url)
    monkeypatch.setenv("TETHER_KEY", server.key)
    with Client() as c:
        assert c.url == server.url
        assert c.whoami().admin is True


def test_whoami(client: Client) -> None:
    me = client.whoami()
    assert me.tenant.name == "default"
    assert me.admin is True
    assert uuid.UUID(me.key_id)
    assert uuid.UUID(me.tenant.id)


def test_enqueue_get_and_idempotency(client: Client, queue: str) -> None:
    run_at = datetime.now(timezone.utc) + timedelta(hours=1)
    job = client.enqueue(
        queue, "send", {"to": "ada"}, idempotency_key=f"{queue}:1", priority=5,
        run_at=run_at, max_attempts=3, timeout=5, tags=["a", "b"],
        backoff=Backoff(base=2, cap=timedelta(seconds=4)), unique_key=f"u:{queue}",
    )
    assert job.created is True
    assert job.state == "queued" and job.kind == "send" and job.payload == {"to": "ada"}
    assert job.priority == 5 and job.max_attempts == 3 and job.timeout_ms == 5000
    assert job.tags == ["a", "b"]
    assert job.run_at.startswith(run_at.strftime("%Y-%m-%dT%H:%M"))
    again = client.enqueue(queue, "send", {"to": "other"}, idempotency_key=f"{queue}:1")
    assert again.created is False and again.id == job.id and again.payload == {"to": "ada"}
    got = client.get(job.id)
    assert got.id == job.id and got.created is None
    assert got.raw["id"] == job.id
    with pytest.raises(InvalidArgument):
        client.enqueue(queue, "send", run_at=run_at, delay=5)


def test_enqueue_batch_list_and_paging(client: Client, queue: str) -> None:
    results = client.enqueue_batch(
        [batch_entry(queue, "a" if i % 2 else "b", i, tags=["t"]) for i in range(7)]
    )
    assert [r.created for r in results] == [True] * 7
    assert [r.job.payload for r in results] == list(range(7))
    page = client.list(queue=queue, limit=3)
    assert len(page.jobs) == 3 and page.next_cursor
    every = list(client.iter_jobs(queue=queue, limit=3))
    assert sorted(j.payload for j in every) == list(range(7))
    assert {j.kind for j in client.iter_jobs(queue=queue, kind="a")} == {"a"}
    assert len(list(client.iter_jobs(queue=queue, tag="t", state="queued"))) == 7
    with pytest.raises(InvalidArgument):
        client.enqueue_batch([batch_entry(queue, "ok"), batch_entry("bad name", "x")])
    assert len(list(client.iter_jobs(queue=queue))) == 7


def test_events_paging(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    [c] = client.claim(queue, "w")
    client.snooze(c.id, c.lease_token, 0)
    [c] = client.claim(queue, "w")
    client.complete(c.id, c.lease_token, {"done": 1})
    page = client.events(job.id, limit=2)
    assert [e.event for e in page.events] == ["enqueued", "claimed"] and page.next_cursor
    names = [e.event for e in client.iter_events(job.id, limit=2)]
    assert names == ["enqueued", "claimed", "snoozed", "claimed", "succeeded"]
    assert [e.event for e in client.iter_events(job.id)] == names


def test_cancel_and_replay(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    assert client.cancel(job.id).state == "cancelled"
    with pytest.raises(InvalidState):
        client.cancel(job.id)
    expires = datetime.now(timezone.utc) + timedelta(days=1)
    replayed = client.replay(job.id, expires_at=expires)
    assert replayed.state == "queued" and replayed.attempt == 0 and replayed.expires_at
    with pytest.raises(InvalidState):
        client.replay(job.id)
    # A running job is asked to stop.
    [c] = client.claim(queue, "w")
    assert client.cancel(c.id).cancel_requested is True
    assert client.heartbeat(c.id, c.lease_token).cancel_requested is True
    assert client.fail(c.id, c.lease_token, "stopped", cancelled=True).state == "cancelled"


def test_replay_queue(client: Client, queue: str) -> None:
    for i in range(3):
        client.enqueue(queue, "k", i, max_attempts=1)
    for c in client.claim(queue, "w", limit=3):
        assert client.fail(c.id, c.lease_token, "boom").state == "failed"
    assert len(list(client.iter_jobs(queue=queue, state="failed"))) == 3
    r = client.replay_queue(queue, limit=2)
    assert r.replayed == 2 and r.next_cursor
    r2 = client.replay_queue(queue, cursor=r.next_cursor)
    assert r2.replayed == 1 and r2.next_cursor is None
    assert client.get_queue(queue).counts.queued == 3


def test_queues_pause_resume_configure(client: Client, queue: str) -> None:
    client.enqueue(queue, "k")
    q = client.get_queue(queue)
    assert q.name == queue and q.counts.queued == 1 and q.ready == 1 and not q.paused
    assert queue in [x.name for x in client.queues()]
    assert client.pause(queue).paused is True
    assert client.claim(queue, "w") == []
    assert client.resume(queue).paused is False
    q = client.configure(
        queue, max_attempts=9, backoff=Backoff(1.5, 9), default_lease_ttl=4
    )
    assert q.max_attempts == 9 and q.backoff == Backoff(1.5, 9)
    assert q.backoff.raw == {"base_ms": 1500, "cap_ms": 9000}
    assert q.default_lease_ttl_ms == 4000
    assert client.enqueue(queue, "k").max_attempts == 9
    with pytest.raises(InvalidArgument):
        client.configure(queue, max_attempts=0)


def test_worker_protocol(client: Client, queue: str) -> None:
    a = client.enqueue(queue, "k", 1)
    b = client.enqueue(queue, "k", 2)
    c3 = client.enqueue(queue, "k", 3, max_attempts=5)
    claimed_elsewhere = client.enqueue(queue, "k", 4)
    claimed = client.claim(queue, "w1", limit=3, lease_ttl=5)
    assert {c.id for c in claimed} == {a.id, b.id, c3.id}
    assert all(c.lease_token and c.state == "running" and c.worker_id == "w1" for c in claimed)
    by = {c.id: c for c in claimed}
    ack = client.heartbeat(a.id, by[a.id].lease_token, lease_ttl=8, progress={"p": 50})
    assert ack.cancel_requested is False and ack.lease_expires_at
    assert client.get(a.id).progress == {"p": 50}
    acks = client.heartbeat_batch(
        [HeartbeatItem(c.id, c.lease_token, progress=i) for i, c in enumerate(claimed)]
        + [HeartbeatItem(claimed_elsewhere.id, str(uuid.uuid4()))]
    )
    assert [r.ok for r in acks] == [True, True, True, False]
    assert isinstance(acks[3].error, LeaseLost)
    assert acks[0].ack is not None and acks[0].ack.lease_expires_at
    done = client.complete(a.id, by[a.id].lease_token, {"r": 1})
    assert done.state == "succeeded" and done.result == {"r": 1}
    results = client.complete_batch(
        [
            CompleteItem(b.id, by[b.id].lease_token, "two"),
            CompleteItem(claimed_elsewhere.id, str(uuid.uuid4())),
        ]
    )
    assert results[0].ok and not results[1].ok and isinstance(results[1].error, LeaseLost)
    assert client.get(b.id).result == "two"
    failed = client.fail(c3.id, by[c3.id].lease_token, "later", retry_after=60)
    assert failed.state == "queued" and failed.attempt == 1 and failed.last_error == "later"
    # Exactly retry_after_ms later.
    run_at = datetime.fromisoformat(failed.run_at.replace("Z", "+00:00"))
    updated = datetime.fromisoformat(failed.updated_at.replace("Z", "+00:00"))
    assert abs((run_at - updated).total_seconds() - 60) < 1.0


def test_a_claim_carries_completions_and_failures(client: Client, queue: str) -> None:
    # The previous batch's reports ride the next claim: each is answered on
    # its own (completions first, then failures, each in order), a refused
    # one does not fail the claim, and the claim takes jobs in the same answer.
    a, b, c = (client.enqueue(queue, "k", i, max_attempts=3) for i in range(3))
    first = client.claim(queue, "w", limit=3)
    assert isinstance(first, ClaimResult) and first.reports == []
    token = {j.id: j.lease_token for j in first}
    assert set(token) == {a.id, b.id, c.id}
    d = client.enqueue(queue, "k", 3)
    nobody, nothing = str(uuid.uuid4()), str(uuid.uuid4())
    answer = client.claim(
        queue, "w", limit=5,
        completions=[
            CompleteItem(a.id, token[a.id], {"r": 1}),
            CompleteItem(b.id, str(uuid.uuid4()), "wrong token"),
            CompleteItem(nobody, str(uuid.uuid4())),
        ],
        failures=[
            FailItem(c.id, token[c.id], "later", retry_after=60),
            FailItem(nothing, str(uuid.uuid4()), "nobody's"),
        ],
    )
    assert [j.id for j in answer] == [d.id] and answer.jobs[0].lease_token
    assert [r.id for r in answer.reports] == [a.id, b.id, nobody, c.id, nothing]
    assert [r.ok for r in answer.reports] == [True, False, False, True, False]
    assert isinstance(answer.reports[1].error, LeaseLost)
    assert isinstance(answer.reports[2].error, NotFound)
    assert isinstance(answer.reports[4].error, NotFound)
    done = client.get(a.id)
    assert done.state == "succeeded" and done.result == {"r": 1}
    assert [e.event for e in client.iter_events(a.id)] == ["enqueued", "claimed", "succeeded"]
    # The wrong token changed nothing: b still runs under its claim.
    assert client.get(b.id).state == "running"
    failed = client.get(c.id)
    assert failed.state == "queued" and failed.attempt == 1 and failed.last_error == "later"
    # The same reports again (an answer lost in transit) are answered like
    # the first and change nothing; a claim without reports answers none.
    again = client.claim(
        queue, "w",
        completions=[CompleteItem(a.id, token[a.id], {"r": 1})],
        failures=[FailItem(c.id, token[c.id], "later", retry_after=60)],
    )
    assert again == [] and [(r.id, r.ok) for r in again.reports] == [(a.id, True), (c.id, True)]
    assert client.get(a.id).result == {"r": 1} and client.get(c.id).attempt == 1
    # A different report with a spent token is refused alone (invalid_state).
    other = client.claim(queue, "w", completions=[CompleteItem(a.id, token[a.id], "other")])
    assert [type(r.error).__name__ for r in other.reports] == ["InvalidState"]
    assert client.get(a.id).result == {"r": 1}
    assert client.claim(queue, "w").reports == []


def test_a_claim_refused_as_a_whole_changes_nothing(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    [c] = client.claim(queue, "w")
    ready = client.enqueue(queue, "k")
    mine = CompleteItem(c.id, c.lease_token, "done")
    strangers = [CompleteItem(str(uuid.uuid4()), str(uuid.uuid4())) for _ in range(1000)]
    with pytest.raises(InvalidArgument):
        client.claim(queue, "w", completions=[mine, *strangers])  # 1001 reports
    with pytest.raises(InvalidArgument):
        client.claim(
            queue, "w", completions=[mine, *strangers[:500]],
            failures=[FailItem(str(uuid.uuid4()), str(uuid.uuid4()), "x") for _ in range(500)],
        )
    with pytest.raises(InvalidArgument):  # a malformed item: the token is no uuid
        client.claim(queue, "w", completions=[mine, CompleteItem(str(uuid.uuid4()), "nope")])
    # Nothing was applied and nothing claimed.
    assert client.get(job.id).state == "running" and client.get(ready.id).state == "queued"
    assert [e.event for e in client.iter_events(job.id)] == ["enqueued", "claimed"]
    # Exactly 1000 is allowed.
    answer = client.claim(queue, "w", completions=[mine, *strangers[:999]])
    assert len(answer.reports) == 1000 and answer.reports[0].ok
    assert not any(r.ok for r in answer.reports[1:])
    assert [j.id for j in answer] == [ready.id]
    assert client.get(job.id).result == "done"


def test_fencing_stale_worker_gets_lease_lost(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    [stale] = client.claim(queue, "old", lease_ttl=1)
    # The reaper requeues the lapsed lease; a new owner claims it.
    fresh = wait_for(lambda: client.claim(queue, "new", wait=1), timeout=15)
    assert fresh[0].id == job.id and fresh[0].lease_token != stale.lease_token
    with pytest.raises(LeaseLost):
        client.complete(job.id, stale.lease_token, "stale")
    with pytest.raises(LeaseLost):
        client.fail(job.id, stale.lease_token, "stale")
    with pytest.raises(LeaseLost):
        client.snooze(job.id, stale.lease_token, 0)
    with pytest.raises(LeaseLost):
        client.heartbeat(job.id, stale.lease_token)
    assert client.complete(job.id, fresh[0].lease_token, "fresh").result == "fresh"
    assert "lease_lost" in [e.event for e in client.iter_events(job.id)]


def test_repeated_reports_are_answered_like_the_first(client: Client, queue: str) -> None:
    # A report resent with the same token (its answer was lost) gets the
    # first outcome back, changes nothing and records no lease_lost; another
    # report with that token is invalid_state and changes nothing (invariant 20).
    client.enqueue(queue, "k")
    [c] = client.claim(queue, "w")
    first = client.complete(c.id, c.lease_token, {"x": 1})
    again = client.complete(c.id, c.lease_token, {"x": 1})
    assert again.state == first.state == "succeeded" and again.result == {"x": 1}
    with pytest.raises(InvalidState):
        client.complete(c.id, c.lease_token, {"x": 2})
    with pytest.raises(InvalidState):
        client.fail(c.id, c.lease_token, "not the report that ended it")
    assert client.get(c.id).result == {"x": 1}
    client.enqueue(queue, "k")
    [c] = client.claim(queue, "w")
    snoozed = client.snooze(c.id, c.lease_token, 60_000)
    assert client.snooze(c.id, c.lease_token, 60_000).attempt == snoozed.attempt == 0
    assert [e.event for e in client.iter_events(c.id)].count("lease_lost") == 0


def test_snooze_gives_the_attempt_back(client: Client, queue: str) -> None:
    job = client.enqueue(queue, "k")
    [c] = client.claim(queue, "w")
    assert c.attempt == 1
    snoozed = client.snooze(c.id, c.lease_token, 0)
    assert snoozed.state == "queued" and snoozed.attempt == 0
    [c] = client.claim(queue, "w")
    assert c.attempt == 1 and c.id == job.id


def test_schedules(client: Client, queue: str) -> None:
    name = f"s-{queue}"
    s = client.create_schedule(name, "0 3 * * *", queue, "nightly", {"n": 1},
                               timezone="Europe/Paris", overlap="skip")
    assert s.name == name and s.timezone == "Europe/Paris" and s.overlap == "skip"
    assert s.enabled and s.next_run_at
    with pytest.raises(AlreadyExists):
        client.create_schedule(name, "0 3 * * *", queue, "nightly")
    with pytest.raises(InvalidArgument):
        client.create_schedule(f"{name}-bad", "not cron", queue, "nightly")
    assert client.get_schedule(s.id).id == s.id
    assert name in [x.name for x in client.list_schedules()]
    patched = client.patch_schedule(s.id, enabled=False, payload=None)
    assert patched.enabled is False and patched.next_run_at is None and patched.payload is None
    job = client.trigger_schedule(s.id)
    assert job.queue == queue and job.kind == "nightly"
    runs = client.schedule_runs(s.id)
    assert runs[0].job_id == job.id and runs[0].outcome == "enqueued"
    client.delete_schedule(s.id)
    with pytest.raises(NotFound):
        client.get_schedule(s.id)


def test_ensure_schedule_creates_updates_or_leaves_a_schedule_by_name(
    client: Client, queue: str
) -> None:
    name = f"declared-{queue}"
    first = client.ensure_schedule(name, "0 3 * * *", queue, "nightly", {"n": 1},
                                   timezone="Europe/Paris")
    assert first.outcome == "created"
    s = first.schedule
    assert (s.name, s.cron, s.queue, s.kind, s.payload) == (name, "0 3 * * *", queue, "nightly",
                                                            {"n": 1})
    assert s.timezone == "Europe/Paris" and s.enabled and s.overlap == "allow"
    # The same declaration on the next deploy writes nothing.
    again = client.ensure_schedule(name, "0 3 * * *", queue, "nightly", {"n": 1},
                                   timezone="Europe/Paris")
    assert again.outcome == "unchanged" and again.schedule.id == s.id
    assert again.schedule.updated_at == s.updated_at
    job = client.trigger_schedule(s.id)
    # A changed one keeps its id and runs; what is left out is the default.
    changed = client.ensure_schedule(name, "0 4 * * *", queue, "nightly", enabled=False,
                                     overlap="skip")
    assert changed.outcome == "updated" and changed.schedule.id == s.id
    c = changed.schedule
    assert (c.cron, c.timezone, c.payload, c.enabled, c.overlap) == ("0 4 * * *", "UTC", None,
                                                                     False, "skip")
    assert [r.job_id for r in client.schedule_runs(s.id)] == [job.id]
    with pytest.raises(InvalidArgument):
        client.ensure_schedule(name, "not cron", queue, "nightly")
    assert client.get_schedule(s.id).cron == "0 4 * * *"  # a bad one changed nothing

    async def main() -> None:
        async with AsyncClient(client.url, client.key) as c:
            answer = await c.ensure_schedule(f"{name}-a", "@daily", queue, "nightly")
            assert answer.outcome == "created" and answer.schedule.cron == "@daily"
            answer = await c.ensure_schedule(f"{name}-a", "@daily", queue, "nightly")
            assert answer.outcome == "unchanged"

    asyncio.run(main())


def test_headers_travel_with_the_job_on_every_enqueue(client: Client, queue: str) -> None:
    sent = {"x-request-id": "r-42", "locale": "fr_FR"}
    job = client.enqueue(queue, "k", headers=sent)
    assert job.headers == sent and client.get(job.id).headers == sent
    assert client.enqueue(queue, "k").headers == {}
    [one, two] = client.enqueue_batch([
        batch_entry(queue, "k", 1, headers={"n": "1"}),
        batch_entry(queue, "k", 2),
    ])
    assert one.job.headers == {"n": "1"} and two.job.headers == {}
    wf = WorkflowBuilder("with-headers")
    entry = wf.add(queue, "k", headers={"step": "a"})
    assert client.enqueue_workflow(wf)[entry].headers == {"step": "a"}
    typed = task("typed", queue=queue, payload=int)
    assert typed.enqueue(client, 3, headers={"t": "3"}).headers == {"t": "3"}
    waited = client.enqueue_and_wait(queue, "k", headers={"w": "1"}, timeout=0)
    assert waited.headers == {"w": "1"}
    claimed = client.claim(queue, "w-headers", limit=10)
    assert {c.id: c.headers for c in claimed}[job.id] == sent
    with pytest.raises(InvalidArgument):
        client.enqueue(queue, "k", headers={"bad name": "x"})

    async def main() -> None:
        async with AsyncClient(client.url, client.key) as c:
            answer = await c.enqueue(queue, "k", headers={"a": "1"})
            assert answer.headers == {"a": "1"}

    asyncio.run(main())


def test_announce_worker_lists_an_idle_worker(client: Client, queue: str) -> None:
    worker_id = f"w-announced-{queue}"
    client.announce_worker(worker_id, queues=[queue, f"{queue}-b"], concurrency=12,
                           sdk="python", version=__version__, host="box-1", pid=4242)
    [me] = [w for w in client.workers() if w.worker_id == worker_id]
    assert sorted(me.queues) == sorted([queue, f"{queue}-b"]) and me.running == 0
    assert (me.concurrency, me.sdk, me.version, me.host, me.pid) == (
        12, "python", __version__, "box-1", 4242
    )
    assert me.last_seen_at and me.last_heartbeat_at is None
    # Announcing again replaces what it said.
    client.announce_worker(worker_id, queues=[queue], concurrency=1)
    [me] = [w for w in client.workers() if w.worker_id == worker_id]
    assert me.queues == [queue] and me.concurrency == 1 and me.sdk is None
    with pytest.raises(InvalidArgument):
        client.announce_worker(worker_id, queues=[], concurrency=1)

    async def main() -> None:
        async with AsyncClient(client.url, client.key) as c:
            await c.announce_worker(f"{worker_id}-a", queues=[queue], concurrency=2)
            assert f"{worker_id}-a" in [w.worker_id for w in await c.workers()]

    asyncio.run(main())


def test_cron_preview(client: Client) -> None:
    times = client.cron_preview(
        "30 2 * * *", timezone="America/New_York", start="2026-03-07T12:00:00Z", count=2
    )
    assert times == ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert client.cron_preview("0 0 * * *", start=start, count=1) == ["2026-01-02T00:00:00.000Z"]
    with pytest.raises(InvalidArgument):
        client.cron_preview("0 0 30 2 *")


def test_tenants_and_keys(client: Client, server: Server, queue: str) -> None:
    created = client.create_tenant(f"t-{queue}")
    assert created.tenant.name == f"t-{queue}" and created.api_key
    with pytest.raises(AlreadyExists):
        client.create_tenant(f"t-{queue}")
    assert created.tenant.id in [t.id for t in client.list_tenants()]
    key = client.create_key(created.tenant.id, name="ci")
    with pytest.raises(InvalidArgument):
        client.create_key(created.tenant.id, admin=True)
    keys = client.list_keys(created.tenant.id)
    assert key.key_id in [k.id for k in keys] and len(keys) == 2
    with Client(server.url, key.api_key) as tenant:
        me = tenant.whoami()
        assert me.tenant.id == created.tenant.id and me.admin is False and me.key_id == key.key_id
        # Tenants see only their own jobs.
        mine = client.enqueue(queue, "k")
        with pytest.raises(NotFound):
            tenant.get(mine.id)
        with pytest.raises(PermissionDenied):
            tenant.list_tenants()
        client.revoke_key(key.key_id)
        with pytest.raises(Unauthenticated):
            tenant.whoami()
    revoked = [k for k in client.list_keys(created.tenant.id) if k.id == key.key_id]
    assert revoked[0].revoked_at is not None
    with pytest.raises(NotFound):
        client.list_keys(str(uuid.uuid4()))


def test_suspend_and_resume_tenant(client: Client, server: Server, queue: str) -> None:
    created = client.create_tenant(f"s-{queue}")
    assert created.tenant.suspended_at is None
    with Client(server.url, created.api_key, retries=0) as tenant:
        assert tenant.whoami().tenant.id == created.tenant.id
        suspended = client.suspend_tenant(created.tenant.id)
        assert suspended.id == created.tenant.id and suspended.suspended_at is not None
        datetime.fromisoformat(suspended.suspended_at.replace("Z", "+00:00"))
        with pytest.raises(PermissionDenied) as e:
            tenant.queues()
        assert e.value.status == 403 and e.value.code == "permission_denied"
        assert "suspended" in str(e.value)
        # Suspending again keeps the first instant; the listing shows it.
        assert client.suspend_tenant(created.tenant.id).suspended_at == suspended.suspended_at
        listed = [t for t in client.list_tenants() if t.id == created.tenant.id]
        assert listed[0].suspended_at == suspended.suspended_at
        with pytest.raises(InvalidArgument):
            client.suspend_tenant(client.whoami().tenant.id)
        with pytest.raises(NotFound):
            client.suspend_tenant(str(uuid.uuid4()))
        with pytest.raises(PermissionDenied):
            tenant.resume_tenant(created.tenant.id)
        resumed = client.resume_tenant(created.tenant.id)
        assert resumed.suspended_at is None
        assert isinstance(tenant.queues(), list)
        assert client.resume_tenant(created.tenant.id).suspended_at is None

    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c, \
                AsyncClient(server.url, created.api_key, retries=0) as t:
            assert (await c.suspend_tenant(created.tenant.id)).suspended_at is not None
            with pytest.raises(PermissionDenied):
                await t.queues()
            assert (await c.resume_tenant(created.tenant.id)).suspended_at is None
            assert isinstance(await t.queues(), list)

    asyncio.run(main())


def test_errors(client: Client, server: Server, queue: str) -> None:
    with pytest.raises(NotFound) as e:
        client.get(str(uuid.uuid4()))
    assert e.value.status == 404 and e.value.code == "not_found"
    with pytest.raises(NotFound):
        client.get("not-a-uuid")
    with pytest.raises(InvalidArgument):
        client.enqueue("bad queue name", "k")
    with pytest.raises(InvalidArgument):
        client.list(limit=100_000)
    with pytest.raises(PayloadTooLarge):
        client.enqueue(queue, "k", "x" * (1 << 20))
    with pytest.raises(Unauthenticated):
        Client(server.url, "tth_nope").queues()
    with pytest.raises(MethodNotAllowed):
        client._call("PUT", "/v1/jobs", lambda d: d)
    with pytest.raises(NotFound):
        client._call("GET", "/v1/nowhere", lambda d: d)
    r = httpx.post(f"{server.url}/v1/jobs", content=b"q", headers={
        "authorization": f"Bearer {server.key}", "content-type": "text/plain"})
    assert isinstance(error_from_body(r.status_code, r.json(), r.text), UnsupportedMediaType)
    assert all(isinstance(x, TetherError) for x in (LeaseLost("x"), Unavailable("y")))
    # A success answer that is not what the route documents: a DecodeError
    # (a TetherError callers catch), never a bare KeyError or ValueError.
    with pytest.raises(DecodeError) as bad:
        client._call("GET", "/healthz", lambda d: d["jobs"][0])
    assert bad.value.code == "decode" and bad.value.status == 200
    with pytest.raises(DecodeError):
        client._call("GET", "/metrics", lambda d: d["jobs"])


def test_transport_errors_are_retried_only_when_safe(server: Server) -> None:
    # Nobody listens on this port: every try fails without an answer.
    with Client("http://127.0.0.1:9", "k", retries=2) as c:
        t0 = time.monotonic()
        with pytest.raises(TransportError) as e:
            c.queues()
        retried = time.monotonic() - t0
        assert isinstance(e.value, Unavailable)
        t0 = time.monotonic()
        with pytest.raises(TransportError):
            c.enqueue("q", "k")  # no idempotency key: never retried
        once = time.monotonic() - t0
    assert retried >= 0.1 and once < retried


def test_outside_v1(client: Client) -> None:
    assert isinstance(client.healthz(), dict)
    client.readyz()
    assert "tether_queue_jobs" in client.metrics() or "tether_jobs" in client.metrics()
    assert "/v1/jobs" in client.openapi()["paths"]


def test_async_client(server: Server, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c:
            assert (await c.whoami()).admin
            jobs = [await c.enqueue(queue, "k", i) for i in range(3)]
            ids = [j.id async for j in c.iter_jobs(queue=queue, limit=2)]
            assert sorted(ids) == sorted(j.id for j in jobs)
            claimed = await c.claim(queue, "aw", limit=3)
            res = await c.complete_batch(
                [CompleteItem(x.id, x.lease_token, 1) for x in claimed[1:]]
            )
            assert all(r.ok for r in res)
            # The last report rides a claim.
            carried = await c.claim(
                queue, "aw", completions=[CompleteItem(claimed[0].id, claimed[0].lease_token, 1)]
            )
            assert carried == [] and [(r.id, r.ok) for r in carried.reports] == [
                (claimed[0].id, True)
            ]
            events = [e.event async for e in c.iter_events(jobs[0].id, limit=1)]
            assert events == ["enqueued", "claimed", "succeeded"]
            assert (await c.get_queue(queue)).counts.succeeded == 3
            with pytest.raises(NotFound):
                await c.get(str(uuid.uuid4()))

    asyncio.run(main())


# ---- jobs that wait for other jobs ------------------------------------------------


def test_a_dependent_waits_until_its_dependency_succeeds(client: Client, queue: str) -> None:
    a = client.enqueue(queue, "a", 1)
    # A Job stands for its id.
    b = client.enqueue(queue, "b", 2, depends_on=[a])
    assert b.state == "waiting" and b.depends_on == [a.id] and b.dependency_failure == "cancel"
    assert a.depends_on == [] and a.dependency_failure == "cancel"
    counts = client.get_queue(queue).counts
    assert (counts.waiting, counts.queued) == (1, 1)
    assert [j.id for j in client.list(depends_on=a.id).jobs] == [b.id]
    assert [j.id for j in client.iter_jobs(queue=queue, state="waiting")] == [b.id]
    assert client.list(depends_on=b.id).jobs == []
    [dep] = client.dependencies(b.id)
    assert (dep.id, dep.kind, dep.state, dep.result) == (a.id, "a", "queued", None)
    assert dep.finished_at is None and dep.raw["id"] == a.id
    assert client.dependencies(a.id) == []

    # Only A can be claimed; its completion releases B in the same transaction.
    claimed = client.claim(queue, "w", limit=10)
    assert [c.id for c in claimed] == [a.id]
    client.complete(a.id, claimed[0].lease_token, {"sum": 41})
    b = client.get(b.id)
    assert b.state == "queued"
    assert [e.event for e in client.iter_events(b.id)] == ["enqueued", "released"]
    [dep] = client.dependencies(b.id)
    assert dep.state == "succeeded" and dep.result == {"sum": 41} and dep.finished_at
    assert client.get_queue(queue).counts.waiting == 0

    # A dependency that already succeeded counts at once.
    c = client.enqueue(queue, "c", depends_on=[a.id, b.id], dependency_failure="run")
    assert c.state == "waiting" and c.depends_on == [a.id, b.id]
    assert c.dependency_failure == "run"
    d = client.enqueue(queue, "d", depends_on=[a.id])
    assert d.state == "queued"


def test_a_failed_dependency_cancels_a_cancel_dependent(client: Client, queue: str) -> None:
    a = client.enqueue(queue, "a", max_attempts=1)
    cancel = client.enqueue(queue, "b", depends_on=[a.id])
    grandchild = client.enqueue(queue, "c", depends_on=[cancel.id])
    run = client.enqueue(queue, "d", depends_on=[a.id], dependency_failure="run")
    [c] = client.claim(queue, "w", limit=10)
    assert c.id == a.id
    assert client.fail(a.id, c.lease_token, "boom").state == "failed"
    # `cancel` dependents are cancelled through the whole graph; `run` ones run.
    for job_id in (cancel.id, grandchild.id):
        job = client.get(job_id)
        assert job.state == "cancelled", job
        last = list(client.iter_events(job_id))[-1]
        assert last.event == "cancelled" and last.detail is not None
    assert a.id in str(list(client.iter_events(cancel.id))[-1].detail)
    assert client.get(run.id).state == "queued"
    [dep] = client.dependencies(run.id)
    assert dep.state == "failed" and dep.last_error == "boom"
    # A dependency failed already applies the rule at enqueue.
    assert client.enqueue(queue, "e", depends_on=[a.id]).state == "cancelled"


def test_an_unknown_dependency_is_an_invalid_argument(client: Client, queue: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        client.enqueue(queue, "b", depends_on=[str(uuid.uuid4())])
    assert "depends_on" in str(e.value)
    with pytest.raises(InvalidArgument):
        client.enqueue(queue, "b", depends_on=["not-a-uuid"])
    with pytest.raises(InvalidArgument):
        client.enqueue(queue, "b", dependency_failure="later")  # type: ignore[arg-type]
    assert client.list(queue=queue).jobs == []
    with pytest.raises(NotFound):
        client.dependencies(str(uuid.uuid4()))


def test_a_batch_enqueues_a_graph(client: Client, queue: str) -> None:
    results = client.enqueue_batch(
        [
            batch_entry(queue, "thumb", 0),
            batch_entry(queue, "thumb", 1),
            batch_entry(queue, "publish", depends_on_entries=[0, 1]),
            batch_entry(queue, "summary", depends_on_entries=[2], dependency_failure="run"),
        ]
    )
    t0, t1, publish, summary = (r.job for r in results)
    assert [t0.state, t1.state, publish.state, summary.state] == [
        "queued", "queued", "waiting", "waiting"]
    assert publish.depends_on == [t0.id, t1.id] and summary.depends_on == [publish.id]
    assert summary.dependency_failure == "run"
    # Job objects stand for their ids.
    more = client.enqueue_batch([batch_entry(queue, "x", depends_on=[t0])])
    assert more[0].job.depends_on == [t0.id] and more[0].job.state == "waiting"
    with pytest.raises(InvalidArgument) as e:
        # An entry may wait only for earlier entries (so a graph has no cycle).
        client.enqueue_batch(
            [batch_entry(queue, "a", depends_on_entries=[1]), batch_entry(queue, "b")]
        )
    assert "depends_on_entries" in str(e.value)
    assert len(list(client.iter_jobs(queue=queue))) == 5


def test_the_async_client_reads_dependencies(server: Server, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c:
            a = await c.enqueue(queue, "a")
            b = await c.enqueue(queue, "b", depends_on=[a.id], dependency_failure="run")
            assert b.state == "waiting"
            assert [j.id for j in (await c.list(depends_on=a.id)).jobs] == [b.id]
            [dep] = await c.dependencies(b.id)
            assert dep.id == a.id and dep.state == "queued"
            assert [j.id async for j in c.iter_jobs(depends_on=a.id)] == [b.id]

    asyncio.run(main())


def test_bulk_cancel_and_replay(client: Client, queue: str) -> None:
    a, b = client.enqueue(queue, "k"), client.enqueue(queue, "k")
    [running] = client.claim(queue, "w", limit=1)  # `a`, or `b`
    unknown = str(uuid.uuid4())
    results = client.cancel_jobs([a, b.id, unknown])
    assert [r.id for r in results] == [a.id, b.id, unknown]
    assert results[0].ok and results[0].job is not None
    # The running one is asked to stop; the queued one is cancelled.
    by_id = {r.id: r for r in results}
    assert by_id[running.id].job is not None and by_id[running.id].job.cancel_requested
    other = b.id if running.id == a.id else a.id
    assert by_id[other].ok and by_id[other].job is not None
    assert by_id[other].job.state == "cancelled"
    assert not results[2].ok and isinstance(results[2].error, NotFound)
    assert results[2].job is None
    expires = datetime.now(timezone.utc) + timedelta(days=2)
    replayed = client.replay_jobs([other, running.id], expires_at=expires)
    assert replayed[0].ok and replayed[0].job is not None
    assert replayed[0].job.state == "queued" and replayed[0].job.expires_at
    assert not replayed[1].ok and isinstance(replayed[1].error, InvalidState)
    with pytest.raises(InvalidArgument):
        client.cancel_jobs([])


def test_delete_queue(client: Client, queue: str) -> None:
    client.enqueue(queue, "k")
    with pytest.raises(InvalidState):
        client.delete_queue(queue)  # it holds a job
    other = f"{queue}-empty"
    client.pause(other)
    assert other in [q.name for q in client.queues()]
    client.delete_queue(other)
    assert other not in [q.name for q in client.queues()]
    with pytest.raises(NotFound):
        client.delete_queue(other)


def test_throughput_and_workers(client: Client, queue: str) -> None:
    for i in range(3):
        client.enqueue(queue, "k", i, max_attempts=2)
    claimed = client.claim(queue, "w-through", limit=3)
    assert [w.running for w in client.workers() if w.worker_id == "w-through"] == [3]
    [me] = [w for w in client.workers() if w.worker_id == "w-through"]
    assert me.queues == [queue] and me.last_heartbeat_at
    client.complete(claimed[0].id, claimed[0].lease_token, 1)
    client.fail(claimed[1].id, claimed[1].lease_token, "again")
    client.fail(claimed[2].id, claimed[2].lease_token, "no", fatal=True)
    t = client.throughput(queue, minutes=5)
    assert len(t.minutes) == 5 and t.minutes[-1].at
    total = (
        sum(m.succeeded for m in t.minutes),
        sum(m.failed for m in t.minutes),
        sum(m.retried for m in t.minutes),
    )
    assert total == (1, 1, 1)
    assert t.wait_ms is not None and t.run_ms is not None
    assert 0 <= t.wait_ms.p50 <= t.wait_ms.p99 and 0 <= t.run_ms.p50 <= t.run_ms.p99
    assert client.throughput(f"{queue}-idle").run_ms is None
    # It holds no running job any more: not listed.
    assert "w-through" not in [w.worker_id for w in client.workers()]
    with pytest.raises(InvalidArgument):
        client.throughput(queue, minutes=0)


def test_the_async_client_has_the_bulk_and_queue_routes(server: Server, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, server.key) as c:
            job = await c.enqueue(queue, "k")
            [r] = await c.cancel_jobs([job])
            assert r.ok and r.job is not None and r.job.state == "cancelled"
            [r] = await c.replay_jobs([job.id])
            assert r.ok and r.job is not None and r.job.state == "queued"
            assert len((await c.throughput(queue, minutes=2)).minutes) == 2
            await c.claim(queue, "w-async")
            assert "w-async" in [w.worker_id for w in await c.workers()]
            await c.pause(f"{queue}-x")
            await c.delete_queue(f"{queue}-x")

    asyncio.run(main())
