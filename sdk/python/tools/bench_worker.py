#!/usr/bin/env python3
"""tether's bench worker, in Python: what tether-bench runs to measure the
Python SDK's worker (docs/BENCHMARKS.md, ``py_*`` figures).

    bench_worker.py <base-url> <key> <queue> <concurrency> <pickup|throughput|cancel> [--hooks]

One Worker on ``<queue>`` with ``<concurrency>`` slots (default lease,
long-poll 5 s) and a handler of kind ``noop`` that does nothing and returns
no result. In ``pickup`` mode the handler first prints
``START <job-id> <unix-µs>``. In ``cancel`` mode it prints that line too,
then waits until the worker tells it the job was cancelled, prints
``CANCELLED <job-id> <unix-µs>`` and returns (the job ends ``cancelled``):
the parent cancels the running job and times how long the news took.
Prints ``READY`` as the worker starts. SIGTERM or SIGINT stops it
gracefully (exit 0); stdin's end (the parent is gone) exits at once with
status 3.

``--hooks`` measures what hooks and tracing cost: it registers one no-op
``before``, ``after`` and ``on_error`` hook each and, when OpenTelemetry is
importable, sets a tracer provider without an exporter, so that a job
whose headers carry a ``traceparent`` runs in a (recorded, never exported)
span. Without the flag the worker is exactly as before.
"""

from __future__ import annotations

import asyncio
import sys
from typing import List

from _child import emit, exit_with_parent, now_us, serve, setup_logging
from tether_client import AsyncClient, JobContext, Outcome, Worker

KIND = "noop"
CLAIM_WAIT = 5.0


async def noop(job: JobContext) -> None:
    return None


async def noop_timed(job: JobContext) -> None:
    emit(f"START {job.id} {now_us()}")


async def until_cancelled(job: JobContext) -> None:
    emit(f"START {job.id} {now_us()}")
    await job.wait_cancelled()
    emit(f"CANCELLED {job.id} {now_us()}")
    # Returning is how a handler stops when asked: the job ends cancelled.


HANDLERS = {"pickup": noop_timed, "throughput": noop, "cancel": until_cancelled}


async def before(job: JobContext) -> None:
    return None


async def after(job: JobContext, outcome: Outcome) -> None:
    return None


async def on_error(job: JobContext, error: BaseException) -> None:
    return None


def add_hooks(worker: Worker) -> bool:
    """One no-op hook of each kind, and tracing on when OpenTelemetry is
    importable (a tracer provider that records spans and exports none);
    answers whether tracing is on."""
    worker.before(before)
    worker.after(after)
    worker.on_error(on_error)
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return False
    trace.set_tracer_provider(TracerProvider())
    return True


async def run(
    base_url: str, key: str, queue: str, concurrency: int, mode: str, hooks: bool
) -> int:
    async with AsyncClient(base_url, key) as client:
        worker = Worker(client, queue, concurrency, claim_wait=CLAIM_WAIT)
        worker.register(KIND, HANDLERS[mode])
        if hooks:
            add_hooks(worker)
        return await serve([worker], lambda: emit("READY"))


def main(argv: List[str]) -> int:
    hooks = "--hooks" in argv
    args = [a for a in argv if a != "--hooks"]
    if len(args) != 5 or not args[3].isdigit() or args[4] not in HANDLERS:
        print(
            "usage: bench_worker.py <base-url> <key> <queue> <concurrency> "
            "<pickup|throughput|cancel> [--hooks]",
            file=sys.stderr,
        )
        return 2
    exit_with_parent()
    setup_logging("bench-worker")
    return asyncio.run(run(args[0], args[1], args[2], int(args[3]), args[4], hooks))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
