"""tether_client.sql as mypy sees it with psycopg's own types: checked by
``mypy --strict`` (scripts/test), never run. psycopg's connections and
cursors fit the module's protocols; each ``# type: ignore[...]`` line is a
mistake mypy must report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List

import psycopg
from psycopg.rows import dict_row

from tether_client import batch_entry, sql, task


@dataclass
class Receipt:
    order: int


send = task("send-receipt", queue="emails", payload=Receipt)


def blocking(conn: psycopg.Connection[Any]) -> List[sql.SqlEnqueued]:
    one = sql.enqueue(conn, "acme", "emails", "k", {"order": 1}, delay=5, timeout=1.5)
    cur = conn.cursor(row_factory=dict_row)
    many = sql.enqueue_many(cur, "acme", [batch_entry("emails", "k")])
    typed = sql.enqueue_task(conn, "acme", send, Receipt(1), idempotency_key="r:1")
    sql.enqueue_task(conn, "acme", send, {"order": 1})  # type: ignore[misc]
    sql.enqueue(conn, "acme", "emails", "k", depends_on=[one.id])  # type: ignore[call-arg]
    return [one, *many, typed]


async def asyncio(aconn: psycopg.AsyncConnection[Any]) -> sql.SqlEnqueued:
    await sql.enqueue_many_async(aconn.cursor(), "acme", [batch_entry("emails", "k")])
    await sql.enqueue_task_async(aconn, "acme", send, Receipt(2))
    sql.enqueue(aconn, "acme", "emails", "k")  # type: ignore[arg-type]
    return await sql.enqueue_async(aconn, "acme", "emails", "k", priority=5)
