#!/usr/bin/env python3
"""A small tether worker.

    TETHER_URL=http://127.0.0.1:7070 TETHER_KEY=... python examples/worker.py

or, the same worker through the SDK's runner (from examples/):

    python -m tether_client worker worker:worker --url http://127.0.0.1:7070 --key ...

Settings (environment): TETHER_QUEUE (default ``emails``),
TETHER_CONCURRENCY (8), TETHER_SHUTDOWN_GRACE (seconds, 30),
TETHER_CLAIM_WAIT (seconds, 5), TETHER_LEASE_TTL (seconds; unset: the
queue's lease, 30 s unless the operator configured another).
Stop it with SIGTERM or Ctrl-C: it stops claiming, lets running handlers
finish within the grace period and hands the rest back to the queue.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, Dict

from tether_client import Client, Fatal, JobContext, RetryAfter, Snooze, Worker

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

client = Client()  # TETHER_URL, TETHER_KEY
worker = Worker(
    client,
    os.environ.get("TETHER_QUEUE", "emails"),
    concurrency=int(os.environ.get("TETHER_CONCURRENCY", "8")),
    shutdown_grace=float(os.environ.get("TETHER_SHUTDOWN_GRACE", "30")),
    claim_wait=float(os.environ.get("TETHER_CLAIM_WAIT", "5")),
    # Unset, the worker names no lease and each job gets its queue's.
    lease_ttl=float(os.environ["TETHER_LEASE_TTL"]) if os.environ.get("TETHER_LEASE_TTL") else None,
)


@worker.handler("send_welcome")
def send_welcome(job: JobContext) -> Dict[str, Any]:
    to = job.payload.get("to") if isinstance(job.payload, dict) else None
    if not to:
        raise Fatal("payload needs a 'to' address")
    if to.endswith("@busy.example"):
        raise Snooze(30)  # not now, not our fault: the attempt is given back
    if to.endswith("@limited.example"):
        raise RetryAfter(60, "the mail provider asked us to wait a minute")
    return {"sent": True, "to": to}


@worker.handler("sleep")
def sleep(job: JobContext) -> Dict[str, Any]:
    """Sleeps ``payload.seconds`` without looking at cancellation (so a
    shutdown has to hand it back)."""
    seconds = float(job.payload.get("seconds", 1)) if isinstance(job.payload, dict) else 1.0
    time.sleep(seconds)
    return {"slept": seconds}


@worker.handler("countdown")
async def countdown(job: JobContext) -> Dict[str, Any]:
    """Counts down ``payload.steps`` tenths of a second, reporting progress
    and stopping early when cancelled."""
    steps = int(job.payload.get("steps", 10)) if isinstance(job.payload, dict) else 10
    for i in range(steps):
        if job.cancelled:
            return {"stopped_at": i}
        job.progress({"done": i, "of": steps})
        await asyncio.sleep(0.1)
    return {"done": steps}


if __name__ == "__main__":
    worker.run()
