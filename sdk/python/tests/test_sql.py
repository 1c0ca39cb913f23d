"""tether_client.sql: enqueueing in the caller's own psycopg 3 transaction
(``tether.enqueue`` / ``tether.enqueue_many``), against the PostgreSQL
database of the suite's PostgreSQL server, with a worker of that server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Dict, Iterator, List

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.rows import dict_row

from conftest import Server, wait_for
from test_tracing import exporter, job_spans  # noqa: F401 (exporter: a fixture)
from test_worker import running
from tether_client import (
    Backoff,
    Client,
    InvalidArgument,
    JobContext,
    NotFound,
    Worker,
    batch_entry,
    sql,
    task,
)

# The suite's PostgreSQL server only (its database is where the functions are).
on_postgres = pytest.mark.parametrize("server", ["postgres"], indirect=True)


@pytest.fixture
def conn(server: Server) -> Iterator[psycopg.Connection[Any]]:
    assert server.database_url is not None
    with psycopg.connect(server.database_url) as c:
        yield c


@pytest.fixture
def orders(conn: psycopg.Connection[Any]) -> Iterator[str]:
    """A table of the test's own, for the writes its transactions make."""
    name = f"orders_{uuid.uuid4().hex[:12]}"
    conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, total int NOT NULL)")
    conn.commit()
    yield name
    conn.rollback()
    conn.execute(f"DROP TABLE {name}")
    conn.commit()


def count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def refusal(client: Client, queue: str, **kwargs: Any) -> str:
    """The message of the HTTP API's refusal of an enqueue."""
    with pytest.raises(InvalidArgument) as refused:
        client.enqueue(queue, "k", **kwargs)
    return refused.value.message


@on_postgres
def test_a_committed_enqueue_exists_with_the_rows_and_wakes_a_worker(
    conn: psycopg.Connection[Any], orders: str, tether_client: Client, tether_tenant: str,
    queue: str,
) -> None:
    worker = Worker(tether_client, queue, claim_wait=5)
    done: Dict[str, float] = {}

    @worker.handler("send_receipt")
    def send_receipt(ctx: JobContext) -> Any:
        done[ctx.id] = time.monotonic()
        return ctx.payload

    with running(worker):
        with conn.transaction():
            conn.execute(f"INSERT INTO {orders} (id, total) VALUES (%s, %s)", (42, 1999))
            job = sql.enqueue(conn, tether_tenant, queue, "send_receipt", {"order": 42})
            assert job.created and uuid.UUID(job.id)
            # Not committed: nobody else sees it, and the worker is waiting
            # in a claim (its long-poll is 5 s).
            with pytest.raises(NotFound):
                tether_client.get(job.id)
            time.sleep(1.0)
            assert not done
            committed = time.monotonic()
        wait_for(lambda: tether_client.get(job.id).state == "succeeded", timeout=10)
    # Woken at commit, not found by the end of its long-poll.
    assert done[job.id] - committed < 2.0, done[job.id] - committed
    got = tether_client.get(job.id)
    assert (got.queue, got.kind, got.payload, got.result) == (
        queue, "send_receipt", {"order": 42}, {"order": 42},
    )
    assert count(conn, orders) == 1


@on_postgres
def test_a_rolled_back_transaction_enqueues_nothing(
    conn: psycopg.Connection[Any], orders: str, tether_client: Client, tether_tenant: str,
    queue: str,
) -> None:
    conn.execute(f"INSERT INTO {orders} (id, total) VALUES (%s, %s)", (7, 100))
    job = sql.enqueue(conn, tether_tenant, queue, "k", {"order": 7})
    [other] = sql.enqueue_many(conn, tether_tenant, [batch_entry(queue, "k")])
    conn.rollback()
    for job_id in (job.id, other.id):
        with pytest.raises(NotFound):
            tether_client.get(job_id)
    assert tether_client.list(queue=queue).jobs == []
    assert count(conn, orders) == 0


@on_postgres
def test_an_idempotency_key_answers_the_job_holding_it(
    conn: psycopg.Connection[Any], tether_client: Client, tether_tenant: str, queue: str
) -> None:
    # A cursor with dict rows does as well as the connection.
    cur = conn.cursor(row_factory=dict_row)
    first = sql.enqueue(cur, tether_tenant, queue, "k", 1, idempotency_key="receipt:42")
    # The same transaction sees its own earlier enqueue.
    again = sql.enqueue(cur, tether_tenant, queue, "k", 2, idempotency_key="receipt:42")
    conn.commit()
    later = sql.enqueue(conn, tether_tenant, queue, "k", 3, idempotency_key="receipt:42")
    conn.commit()
    assert first == sql.SqlEnqueued(first.id, True)
    assert again == later == sql.SqlEnqueued(first.id, False)
    # And over HTTP, the same key is the same job.
    http = tether_client.enqueue(queue, "k", 4, idempotency_key="receipt:42")
    assert (http.id, http.created, http.payload) == (first.id, False, 1)


@on_postgres
def test_the_keywords_mean_what_they_mean_to_client_enqueue(
    conn: psycopg.Connection[Any], tether_client: Client, tether_tenant: str, queue: str
) -> None:
    """The same arguments make the same job over SQL as over HTTP: seconds
    and timedeltas, times, names."""
    expires = datetime.now(timezone.utc) + timedelta(hours=1)
    kwargs: Dict[str, Any] = dict(
        priority=7,
        delay=timedelta(minutes=5),
        max_attempts=4,
        timeout=1.5,
        tags=["a", "b"],
        expires_at=expires,
        backoff=Backoff(0.25, 60),
        concurrency_key="acct-1",
        headers={"x-request-id": "r-1"},
        unique_key=None,
    )
    before = datetime.now(timezone.utc) - timedelta(milliseconds=1)  # times are in ms
    by_sql = sql.enqueue(conn, tether_tenant, queue, "k", {"n": 1}, **kwargs)
    conn.commit()
    by_http = tether_client.enqueue(queue, "k", {"n": 1}, **kwargs)
    a, b = tether_client.get(by_sql.id), tether_client.get(by_http.id)
    fields = ("queue", "kind", "payload", "state", "priority", "max_attempts", "tags",
              "expires_at", "timeout_ms", "concurrency_key", "headers")
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}
    # The job object does not show its backoff: the table does.
    backoffs = conn.execute(
        "SELECT backoff_base_ms, backoff_cap_ms FROM tether.jobs WHERE id = ANY(%s::uuid[])",
        ([a.id, b.id],),
    ).fetchall()
    assert backoffs == [(250, 60000), (250, 60000)]
    assert (a.timeout_ms, a.state, a.priority) == (1500, "queued", 7)
    run_at = datetime.fromisoformat(a.run_at.replace("Z", "+00:00"))
    assert timedelta(minutes=5) <= run_at - before < timedelta(minutes=5, seconds=10)
    # A negative duration is refused before anything is sent, as by the client.
    with pytest.raises(ValueError, match="delay"):
        sql.enqueue(conn, tether_tenant, queue, "k", delay=-1)


@on_postgres
@pytest.mark.parametrize(
    "bad",
    [{"priority": 500}, {"headers": {"bad name": "x"}}, {"max_attempts": 0}],
    ids=["priority", "header", "max_attempts"],
)
def test_a_refusal_is_invalid_argument_with_the_api_message(
    conn: psycopg.Connection[Any], orders: str, tether_client: Client, tether_tenant: str,
    queue: str, bad: Dict[str, Any],
) -> None:
    conn.execute(f"INSERT INTO {orders} (id, total) VALUES (%s, %s)", (1, 1))
    with pytest.raises(InvalidArgument) as refused:
        sql.enqueue(conn, tether_tenant, queue, "k", **bad)
    assert refused.value.message == refusal(tether_client, queue, **bad)
    assert refused.value.code == "invalid_argument"
    cause = refused.value.__cause__
    assert isinstance(cause, psycopg.errors.InvalidParameterValue)
    assert cause.sqlstate == "22023"
    # The transaction is aborted: it rolls back, the connection goes on.
    conn.rollback()
    assert count(conn, orders) == 0
    assert sql.enqueue(conn, tether_tenant, queue, "k").created
    conn.commit()
    assert [j.kind for j in tether_client.list(queue=queue).jobs] == ["k"]


@on_postgres
def test_enqueue_many_is_all_or_nothing(
    conn: psycopg.Connection[Any], tether_client: Client, tether_tenant: str, queue: str
) -> None:
    entries = [
        batch_entry(queue, "a", 1),
        batch_entry(queue, "b", 2, delay=60),
        batch_entry(queue, "c", 3, priority=500),
    ]
    with pytest.raises(InvalidArgument) as refused:
        sql.enqueue_many(conn, tether_tenant, entries)
    with pytest.raises(InvalidArgument) as over_http:
        tether_client.enqueue_batch(entries)
    assert refused.value.message == over_http.value.message
    assert "jobs[2]" in refused.value.message and "priority" in refused.value.message
    conn.rollback()
    assert tether_client.list(queue=queue).jobs == []

    entries[2] = batch_entry(queue, "c", 3, idempotency_key="c")
    entries.append(batch_entry(queue, "d", 4, idempotency_key="c"))
    results = sql.enqueue_many(conn, tether_tenant, entries)
    conn.commit()
    assert [r.created for r in results] == [True, True, True, False]
    assert results[3].id == results[2].id
    jobs = [tether_client.get(r.id) for r in results[:3]]
    assert [(j.kind, j.payload) for j in jobs] == [("a", 1), ("b", 2), ("c", 3)]
    assert [j.state for j in jobs] == ["queued", "queued", "queued"]
    assert jobs[1].run_at > jobs[0].run_at
    # What the functions do not do is refused, as is an empty batch.
    for refused_entries in (
        [batch_entry(queue, "x", depends_on=[results[0].id])],
        [batch_entry(queue, "x", workflow_id=str(uuid.uuid4()))],
        [],
    ):
        with pytest.raises(InvalidArgument):
            sql.enqueue_many(conn, tether_tenant, refused_entries)
        conn.rollback()
    with pytest.raises(TypeError, match="batch_entry"):
        sql.enqueue_many(conn, tether_tenant, [{"queue": queue, "kind": "x"}])  # type: ignore[list-item]


@on_postgres
def test_headers_and_the_trace_context_reach_the_handler(
    conn: psycopg.Connection[Any], tether_client: Client, tether_tenant: str, queue: str,
    exporter: InMemorySpanExporter,  # noqa: F811 (the fixture imported above)
) -> None:
    worker = Worker(tether_client, queue, claim_wait=0.5)
    worker.register("k", lambda ctx: ctx.headers)
    with trace.get_tracer("test").start_as_current_span("POST /orders") as parent:
        job = sql.enqueue(conn, tether_tenant, queue, "k", headers={"x-order": "42"})
        [batched] = sql.enqueue_many(
            conn, tether_tenant, [batch_entry(queue, "k", headers={"x-order": "43"})]
        )
    conn.commit()
    with running(worker):
        wait_for(lambda: tether_client.get(job.id).state == "succeeded")
        wait_for(lambda: tether_client.get(batched.id).state == "succeeded")
        [span] = wait_for(lambda: job_spans(exporter, job.id))
    context = parent.get_span_context()
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert tether_client.get(job.id).result == {"x-order": "42", "traceparent": traceparent}
    assert tether_client.get(batched.id).result == {"x-order": "43", "traceparent": traceparent}
    # The handler's span continues the trace that enqueued it.
    assert span.parent is not None and span.parent.span_id == context.span_id


@dataclass
class Receipt:
    order: int
    email: str


@dataclass
class Sent:
    message_id: str


@on_postgres
def test_a_typed_task_enqueued_in_a_transaction_decodes_in_its_handler(
    conn: psycopg.Connection[Any], tether_client: Client, tether_tenant: str, queue: str
) -> None:
    # dependency_failure: a default of the task's HTTP enqueues with
    # dependencies, left out here (the functions refuse it).
    send = task("send-receipt", queue=queue, payload=Receipt, result=Sent, max_attempts=3,
                timeout=30, dependency_failure="run")
    worker = Worker(tether_client, queue, claim_wait=0.5)
    seen: List[Receipt] = []

    @worker.handler(send)
    def run(ctx: JobContext, p: Receipt) -> Sent:
        seen.append(p)
        return Sent(message_id=f"m-{p.order}")

    job = sql.enqueue_task(conn, tether_tenant, send, Receipt(42, "ada@example.com"),
                           priority=3)
    conn.commit()
    with running(worker):
        done = tether_client.wait(job.id, timeout=15)
    assert seen == [Receipt(42, "ada@example.com")]
    assert done.state == "succeeded" and done.result == {"message_id": "m-42"}
    assert (done.kind, done.max_attempts, done.timeout_ms, done.priority) == (
        "send-receipt", 3, 30000, 3,
    )
    assert send.decode_result(done.result) == Sent("m-42")


@on_postgres
def test_the_async_functions_on_an_async_connection(
    server: Server, tether_client: Client, tether_tenant: str, queue: str
) -> None:
    send = task("send-receipt", queue=queue, payload=Receipt)

    async def main() -> List[sql.SqlEnqueued]:
        assert server.database_url is not None
        async with await psycopg.AsyncConnection.connect(server.database_url) as aconn:
            async with aconn.transaction():
                one = await sql.enqueue_async(aconn, tether_tenant, queue, "k", {"n": 1},
                                              timeout=2, idempotency_key="one")
                again = await sql.enqueue_async(aconn, tether_tenant, queue, "k",
                                                idempotency_key="one")
                many = await sql.enqueue_many_async(
                    aconn, tether_tenant, [batch_entry(queue, "k", 2), batch_entry(queue, "k", 3)]
                )
                typed = await sql.enqueue_task_async(aconn, tether_tenant, send,
                                                     Receipt(1, "a@example.com"))
            with pytest.raises(InvalidArgument, match="priority"):
                async with aconn.transaction():
                    await sql.enqueue_async(aconn, tether_tenant, queue, "k", priority=500)
            async with aconn.transaction():  # rolled back: nothing
                await sql.enqueue_async(aconn, tether_tenant, queue, "k", {"n": 9})
                raise psycopg.Rollback()
            return [one, again, *many, typed]

    one, again, two, three, typed = asyncio.run(main())
    assert one.created and (again.id, again.created) == (one.id, False)
    assert tether_client.get(one.id).timeout_ms == 2000
    assert [tether_client.get(r.id).payload for r in (two, three)] == [2, 3]
    assert tether_client.get(typed.id).payload == {"order": 1, "email": "a@example.com"}
    assert len(tether_client.list(queue=queue).jobs) == 4


def test_importing_the_module_imports_no_psycopg() -> None:
    check = "import sys, tether_client.sql; print([m for m in sys.modules if 'psycopg' in m])"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "[]", done.stderr


README = Path(__file__).resolve().parents[1] / "README.md"


@on_postgres
def test_the_readme_examples_enqueue_the_same_job(
    server: Server, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """The README's example as written, then its plain psycopg twin: the
    same idempotency key, so the same job."""
    section = README.read_text(encoding="utf-8").split(
        "\n## Enqueue in your own transaction (PostgreSQL)", 1
    )[1].split("\n## ", 1)[0]
    with_sdk, plain = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    with Client(server.url, server.key) as admin:
        if "acme" not in [t.name for t in admin.list_tenants()]:
            admin.create_tenant("acme")  # for the admin key to read its jobs
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total int NOT NULL)")
    conn.commit()
    env = dict(os.environ, DATABASE_URL=str(server.database_url))
    try:
        script = tmp_path / "receipt.py"
        script.write_text(with_sdk, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        match = re.fullmatch(r"enqueued (\S+) True\n", done.stdout)
        assert match, done.stdout
        with Client(server.url, server.key, tenant="acme") as acme:
            job = acme.get(match.group(1))
        assert (job.queue, job.kind, job.payload, job.timeout_ms) == (
            "emails", "send_receipt", {"order": 42}, 60000,
        )
        assert count(conn, "orders") == 1
        conn.execute("DELETE FROM orders")
        conn.commit()
        script.write_text(
            "import os\n\nimport psycopg\n\n" + plain + "print(job_id, created)\n",
            encoding="utf-8",
        )
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout == f"{job.id} False\n"
    finally:
        conn.rollback()
        conn.execute("DROP TABLE orders")
        conn.commit()
