"""Typed tasks against a real server: declared once, enqueued with their
defaults, their payloads decoded before the handler runs and their results
read back as the declared type; sync and asyncio."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, List, Literal, Optional, Tuple, TypedDict

import pytest

from conftest import Server
from test_worker import running
from tether_client import (
    AsyncClient,
    Backoff,
    Client,
    DecodeError,
    DoesNotFit,
    JobContext,
    Task,
    TaskJob,
    Worker,
    task,
)
from tether_client._task import decode, encode


@dataclass
class Address:
    email: str
    name: Optional[str] = None


@dataclass
class EmailIn:
    to: Address
    subject: str
    cc: List[Address] = field(default_factory=list)
    urgency: Literal["low", "high"] = "low"


@dataclass
class EmailOut:
    message_id: str
    recipients: int


class Resize(TypedDict):
    url: str
    sizes: List[int]


def email_task(queue: str) -> Task[EmailIn, EmailOut]:
    return task(
        "send-email",
        queue=queue,
        payload=EmailIn,
        result=EmailOut,
        max_attempts=5,
        timeout=60,
        priority=3,
        tags=["mail"],
        backoff=Backoff(base=2, cap=60),
    )


def test_decoding_checks_the_shape_and_the_types() -> None:
    data = {"to": {"email": "a@x"}, "subject": "hi", "cc": [{"email": "b@x", "name": "B"}]}
    assert decode(EmailIn, data) == EmailIn(Address("a@x"), "hi", [Address("b@x", "B")])
    assert encode(decode(EmailIn, data)) == data | {"to": {"email": "a@x", "name": None},
                                                    "urgency": "low"}
    assert decode(Resize, {"url": "u", "sizes": [1, 2]}) == {"url": "u", "sizes": [1, 2]}
    assert decode(Dict[str, Tuple[int, float]], {"a": [1, 2]}) == {"a": (1, 2.0)}
    assert decode(Optional[int], None) is None and decode(float, 3) == 3.0
    for tp, bad, why in (
        (EmailIn, {"to": {"email": "a@x"}}, "missing field 'subject' of EmailIn"),
        (EmailIn, {"to": {"email": 5}, "subject": "s"}, "payload.to.email: expected str, got int"),
        (EmailIn, {"to": {"email": "a"}, "subject": "s", "bcc": []}, "unknown field 'bcc'"),
        (EmailIn, {"to": {"email": "a"}, "subject": "s", "urgency": "now"}, "one of"),
        (EmailIn, [1], "expected an object (EmailIn), got list"),
        (Resize, {"url": "u"}, "missing field 'sizes' of Resize"),
        (Resize, {"url": "u", "sizes": [1, "2"]}, "payload.sizes[1]: expected int, got str"),
        (int, True, "expected int, got bool"),
    ):
        with pytest.raises(DoesNotFit, match=why.replace("[", r"\[").replace("(", r"\(")
                           .replace(")", r"\)")):
            decode(tp, bad, "payload")


def test_a_typed_task_round_trip(client: Client, queue: str) -> None:
    send_email = email_task(queue)
    worker = Worker(client, queue, claim_wait=0.3)
    seen: List[EmailIn] = []

    @worker.handler(send_email)
    def run(ctx: JobContext, p: EmailIn) -> EmailOut:
        seen.append(p)
        return EmailOut(message_id=f"m-{ctx.id}", recipients=1 + len(p.cc))

    payload = EmailIn(Address("ada@example.com", "Ada"), "welcome", [Address("b@example.com")])
    job = send_email.enqueue(client, payload)
    assert isinstance(job, TaskJob) and job.result is None
    # The task's defaults.
    assert (job.queue, job.kind, job.max_attempts, job.timeout_ms, job.priority, job.tags) == (
        queue, "send-email", 5, 60_000, 3, ["mail"])
    assert job.payload == {
        "to": {"email": "ada@example.com", "name": "Ada"},
        "subject": "welcome",
        "cc": [{"email": "b@example.com", "name": None}],
        "urgency": "low",
    }
    # Overridden per call.
    other = send_email.enqueue(client, payload, max_attempts=2, timeout=timedelta(seconds=5),
                               priority=-1, tags=[], delay=3600)
    assert (other.max_attempts, other.timeout_ms, other.priority, other.tags) == (2, 5000, -1, [])
    with running(worker):
        done = client.wait(job, timeout=20)
    assert isinstance(done, TaskJob) and done.state == "succeeded"
    assert done.result == EmailOut(message_id=f"m-{job.id}", recipients=2)
    assert done.raw["result"] == {"message_id": f"m-{job.id}", "recipients": 2}
    assert seen == [payload]
    # An untyped read of the same job is a plain Job with the JSON.
    assert client.wait(job.id).result == {"message_id": f"m-{job.id}", "recipients": 2}


def test_a_payload_that_does_not_fit_fails_its_job_for_good(client: Client, queue: str) -> None:
    send_email = email_task(queue)
    worker = Worker(client, queue, claim_wait=0.3)
    ran: List[Any] = []

    @worker.handler(send_email)
    def run(ctx: JobContext, p: EmailIn) -> EmailOut:
        ran.append(p)
        return EmailOut("never", 0)

    bad = client.enqueue(queue, "send-email", {"to": {"email": 5}, "subject": "s"})
    with running(worker):
        failed = client.wait(bad, timeout=20)
    assert failed.state == "failed" and failed.attempt == 1 and not ran
    assert failed.last_error == (
        "the payload does not fit send-email's EmailIn: payload.to.email: expected str, got int 5"
    )


def test_a_result_that_does_not_fit_is_a_decode_error(client: Client, queue: str) -> None:
    send_email = email_task(queue)
    worker = Worker(client, queue, claim_wait=0.3)

    @worker.handler(send_email)
    def run(ctx: JobContext, p: EmailIn) -> Any:
        return {"id": 1}  # not an EmailOut: only the type checker could tell

    job = send_email.enqueue(client, EmailIn(Address("a@x"), "s"))
    with running(worker), pytest.raises(DecodeError, match="unknown field 'id' for EmailOut"):
        client.wait(job, timeout=20)
    assert client.get(job.id).result == {"id": 1}


def test_a_typeddict_task_without_a_result(client: Client, queue: str) -> None:
    resize = task("resize", queue=queue, payload=Resize)
    worker = Worker(client, queue, claim_wait=0.3)
    got: List[Resize] = []

    @worker.handler(resize)
    async def run(ctx: JobContext, p: Resize) -> None:
        got.append(p)

    job = resize.enqueue(client, {"url": "https://example.com/a.png", "sizes": [64, 512]})
    with running(worker):
        done = client.wait(job, timeout=20)
    assert done.state == "succeeded" and done.result is None
    assert got == [{"url": "https://example.com/a.png", "sizes": [64, 512]}]


def test_a_pydantic_task(client: Client, queue: str) -> None:
    pydantic = pytest.importorskip("pydantic")

    class Invoice(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        number: int
        total_cents: int

    class Receipt(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        number: int
        paid: bool

    bill: Task[Any, Any] = task("bill", queue=queue, payload=Invoice, result=Receipt)
    worker = Worker(client, queue, claim_wait=0.3)

    @worker.handler(bill)
    def run(ctx: JobContext, p: Any) -> Any:
        assert isinstance(p, Invoice)
        return Receipt(number=p.number, paid=p.total_cents > 0)

    job = bill.enqueue(client, Invoice(number=7, total_cents=1999))
    assert job.payload == {"number": 7, "total_cents": 1999}
    bad = client.enqueue(queue, "bill", {"number": "seven"})
    with running(worker):
        done = client.wait(job, timeout=20)
        failed = client.wait(bad, timeout=20)
    assert done.result == Receipt(number=7, paid=True)
    assert failed.state == "failed" and failed.attempt == 1
    assert "the payload does not fit bill's Invoice: payload: not a valid Invoice" in (
        failed.last_error or "")


def test_a_typed_task_with_asyncio(server: Server, queue: str) -> None:
    send_email = email_task(queue)

    async def main() -> Tuple[TaskJob[EmailOut], TaskJob[EmailOut]]:
        async with AsyncClient(server.url, server.key) as client:
            worker = Worker(client, queue, claim_wait=0.3)

            @worker.handler(send_email)
            async def run(ctx: JobContext, p: EmailIn) -> EmailOut:
                await asyncio.sleep(0)
                return EmailOut(message_id=p.subject, recipients=1)

            job = await send_email.enqueue(client, EmailIn(Address("a@x"), "async"), queue=queue)
            runner = asyncio.ensure_future(worker.run_async(handle_signals=False))
            try:
                done = await client.wait(job, timeout=20)
            finally:
                worker.stop()
                await runner
            return job, done

    job, done = asyncio.run(main())
    assert job.max_attempts == 5 and done.result == EmailOut(message_id="async", recipients=1)
