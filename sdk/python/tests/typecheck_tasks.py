"""Typed tasks as mypy sees them: checked by ``mypy --strict`` (scripts/test),
never run. Each ``# type: ignore[...]`` line is a mistake mypy must report:
with ``warn_unused_ignores`` (part of --strict) the check fails the day one
of them stops being an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, TypedDict

from pydantic import BaseModel

from tether_client import AsyncClient, Client, JobContext, TaskJob, Worker, task


@dataclass
class EmailIn:
    to: str
    subject: str = ""


@dataclass
class EmailOut:
    message_id: str


class Resize(TypedDict):
    url: str
    width: int


class Invoice(BaseModel):
    number: int
    lines: List[str]


send_email = task(
    "send-email", queue="emails", payload=EmailIn, result=EmailOut, max_attempts=5, timeout=60
)
resize = task("resize", queue="images", payload=Resize)
bill = task("bill", queue="billing", payload=Invoice, result=int)


def produce(client: Client) -> Optional[EmailOut]:
    job: TaskJob[EmailOut] = send_email.enqueue(client, EmailIn(to="ada@example.com"), delay=5)
    resize.enqueue(client, {"url": "https://example.com/a.png", "width": 64})
    bill.enqueue(client, Invoice(number=1, lines=["tea"]), queue="other")
    done = client.wait(job, timeout=30)
    out: Optional[EmailOut] = done.result
    # A payload of the wrong type, or not of the task's shape.
    send_email.enqueue(client, {"to": "ada@example.com"})  # type: ignore[call-overload]
    resize.enqueue(client, {"url": "https://example.com/a.png"})  # type: ignore[call-overload]
    bill.enqueue(client, EmailIn(to="x"))  # type: ignore[call-overload]
    # The result is the task's result type.
    wrong: Optional[int] = done.result  # type: ignore[assignment]
    nothing: None = resize.enqueue(client, {"url": "u", "width": 1}).result
    return out if wrong is None and nothing is None else None


async def produce_async(client: AsyncClient) -> int:
    job = await bill.enqueue(client, Invoice(number=2, lines=[]))
    done = await client.wait(job)
    total: int = done.result or 0
    await bill.enqueue(client, {"number": 2, "lines": []})  # type: ignore[call-overload]
    return total


def register(worker: Worker) -> None:
    @worker.handler(send_email)
    def run(ctx: JobContext, p: EmailIn) -> EmailOut:
        return EmailOut(message_id=f"{ctx.id}:{p.to}")

    @worker.handler(send_email)
    async def run_async(ctx: JobContext, p: EmailIn) -> EmailOut:
        return EmailOut(message_id=p.to)

    @worker.handler(resize)
    def resize_it(ctx: JobContext, p: Resize) -> None:
        print(p["width"])

    @worker.handler(send_email)  # type: ignore[arg-type]
    def takes_another_payload(ctx: JobContext, p: Resize) -> EmailOut:
        return EmailOut(message_id="")

    @worker.handler(send_email)  # type: ignore[arg-type]
    def answers_another_result(ctx: JobContext, p: EmailIn) -> int:
        return 1

    worker.register(bill, lambda ctx, p: p.number)
    worker.register(bill, lambda ctx, p: p.missing)  # type: ignore[attr-defined]
