#!/usr/bin/env python3
"""tether's chaos worker, in Python: the port of the Rust chaos program's
``__worker`` (crates/tether-chaos/src/worker.rs), so that a chaos run proves
the Python SDK's worker keeps tether's promises.

    tether-chaos --quick --worker-cmd "target/py-venv/bin/python sdk/python/tools/chaos_worker.py"

runs it as ``chaos_worker.py <base-url> <key> <seed> <name>``: three workers
in this process on one event loop (queue ``chaos`` as ``<name>.m``, queue
``chaos-slow`` as ``<name>.s``, and queue ``chaos-limited``, which the run
gives flow-control limits, as ``<name>.l``) whose handler does what each job's plan
(plan.rs, ported below) says, and which print on stdout every claim, every
error and every ``lease_lost`` their observer sees (obs.rs's lines). SIGTERM
or SIGINT stops them gracefully (exit 0); stdin's end (the parent is gone)
exits at once with status 3.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, List, Literal, Optional, Set, Tuple

from _child import emit, exit_with_parent, now_us, serve, setup_logging
from tether_client import (
    AsyncClient,
    ClaimedJob,
    Fatal,
    JobContext,
    Retry,
    RetryAfter,
    Snooze,
    Worker,
    WorkerObserver,
)

# plan.rs's constants.
QUEUE = "chaos"
SLOW_QUEUE = "chaos-slow"
LIMITED_QUEUE = "chaos-limited"
KIND = "chaos"
LEASE = 4.0
SLOW_LEASE = 2.0
CONCURRENCY = 16
SLOW_CONCURRENCY = 10
LIMITED_CONCURRENCY = 4
LIMITED_LEASE = LEASE
UNMOVED_SLACK_MS = 50
FATAL_MESSAGE = "chaos: planned fatal failure"
# worker.rs's settings.
CLAIM_WAIT = 2.0
POLL_INTERVAL = 0.5
SHUTDOWN_GRACE = 5.0
CLIENT_TIMEOUT = 10.0

U64 = (1 << 64) - 1
"""Python integers do not wrap: every step of SplitMix64 is masked to 64 bits."""

PlanKind = Literal[
    "ok", "flaky", "always_retry", "fatal", "snooze_queue", "snooze_in_process", "slow"
]


@dataclass(frozen=True)
class Plan:
    """What a job's handler does (plan.rs's ``Plan``; the fields a kind does
    not use stay 0/None)."""

    kind: PlanKind
    sleep_ms: int = 0
    """ok, slow: handler time."""
    fails: int = 0
    """flaky: failed attempts before the success."""
    retry_after_ms: Optional[int] = None
    """flaky: the upstream's Retry-After, if any."""
    delay_ms: int = 0
    """snooze_queue, snooze_in_process: the snooze."""

    def failure_on(self, attempt: int) -> Optional[Tuple[bool, str]]:
        """How the handler fails ``attempt`` (``(fatal, message)``), or None."""
        if (self.kind == "flaky" and attempt <= self.fails) or self.kind == "always_retry":
            return (False, retry_message(attempt))
        if self.kind == "fatal":
            return (True, FATAL_MESSAGE)
        return None

    def canonical(self) -> str:
        """One line naming the plan and its numbers (for comparing ports)."""
        if self.kind in ("ok", "slow"):
            return f"{self.kind} {self.sleep_ms}"
        if self.kind == "flaky":
            ra = "-" if self.retry_after_ms is None else str(self.retry_after_ms)
            return f"flaky {self.fails} {ra}"
        if self.kind in ("snooze_queue", "snooze_in_process"):
            return f"{self.kind} {self.delay_ms}"
        return self.kind


def retry_message(attempt: int) -> str:
    return f"chaos: planned failure on attempt {attempt}"


def mix(x: int) -> int:
    """SplitMix64 with Rust's wrapping u64 arithmetic."""
    x = (x + 0x9E3779B97F4A7C15) & U64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & U64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & U64
    return x ^ (x >> 31)


def plan(seed: int, n: int) -> Plan:
    """The plan of job ``n`` in a run seeded ``seed`` (both u64)."""
    h = mix((seed & U64) ^ mix((n + 0x5EED) & U64))
    roll = h % 1000
    r = (h >> 16) % 1000
    if roll <= 549:
        return Plan("ok", sleep_ms=r % 25)
    if roll <= 669:
        return Plan("flaky", fails=1 + r % 2, retry_after_ms=150 + r % 100 if r % 3 == 0 else None)
    if roll <= 699:
        return Plan("always_retry")
    if roll <= 729:
        return Plan("fatal")
    if roll <= 829:
        return Plan("snooze_queue", delay_ms=300 + r % 500)
    if roll <= 899:
        return Plan("snooze_in_process", delay_ms=20 + r % 60)
    if roll <= 914:
        return Plan("slow", sleep_ms=2_600 + r % 900)
    return Plan("ok", sleep_ms=100 + r % 200)


def _instant(s: str) -> datetime:
    # The server writes RFC 3339 with a Z; fromisoformat takes +00:00 (3.9+).
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def moved_ms(created_at: str, run_at: str) -> int:
    """``run_at - created_at`` in whole milliseconds, truncated toward zero
    like chrono's ``num_milliseconds``."""
    return int((_instant(run_at) - _instant(created_at)) / timedelta(milliseconds=1))


class Chaos:
    """The handler (worker.rs's ``handle``), shared by the workers."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.snoozed: Set[Tuple[str, int]] = set()
        """(job id, attempt) that already snoozed in this process."""

    async def handle(self, job: JobContext) -> Dict[str, Any]:
        n = job.payload.get("n") if isinstance(job.payload, dict) else None
        # serde's as_u64: an integer (not a bool, not a float) in u64's range.
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= U64:
            raise Fatal("chaos: payload without n")
        p = plan(self.seed, n)
        failure = p.failure_on(job.attempt)
        if failure is not None:
            fatal, message = failure
            if fatal:
                raise Fatal(message)
            if p.kind == "flaky" and p.retry_after_ms is not None:
                raise RetryAfter(p.retry_after_ms / 1000, message)
            raise Retry(message)
        if p.kind in ("ok", "slow"):
            await asyncio.sleep(p.sleep_ms / 1000)
        elif p.kind == "snooze_queue":
            if moved_ms(job.job.created_at, job.job.run_at) < UNMOVED_SLACK_MS:
                raise Snooze(p.delay_ms / 1000)
        elif p.kind == "snooze_in_process":
            # A short snooze, once per (job, attempt) in this process. Like
            # every snooze it goes to the server (the attempt is given back,
            # so a claim here again sees the same attempt and succeeds).
            key = (job.id, job.attempt)
            if key not in self.snoozed:
                self.snoozed.add(key)
                raise Snooze(p.delay_ms / 1000)
        return {"n": n, "by": job.worker_id, "attempt": job.attempt}


class Lines(WorkerObserver):
    """Prints what the workers saw as obs.rs's lines."""

    def on_claim(self, worker_id: str, jobs: List[ClaimedJob]) -> None:
        at = now_us()
        for c in jobs:
            emit(f"CLAIM {c.id} {c.attempt} {c.lease_token} {worker_id} {at}")

    def on_error(self, op: str, code: str, error: BaseException) -> None:
        emit(f"ERR {op} {code}")

    def on_lease_lost(self, op: str, job_id: str, lease_token: str) -> None:
        emit(f"LOST {op} {job_id} {lease_token} {now_us()}")


async def run(base_url: str, key: str, seed: int, name: str) -> int:
    chaos = Chaos(seed)
    lines = Lines()
    async with AsyncClient(base_url, key, timeout=CLIENT_TIMEOUT) as client:

        def build(suffix: str, queue: str, concurrency: int, lease: float) -> Worker:
            w = Worker(
                client,
                queue,
                concurrency,
                lease_ttl=lease,
                claim_wait=CLAIM_WAIT,
                shutdown_grace=SHUTDOWN_GRACE,
                poll_interval=POLL_INTERVAL,
                worker_id=f"{name}.{suffix}",
                observer=lines,
            )
            w.register(KIND, chaos.handle)
            return w

        workers = [
            build("m", QUEUE, CONCURRENCY, LEASE),
            build("s", SLOW_QUEUE, SLOW_CONCURRENCY, SLOW_LEASE),
            build("l", LIMITED_QUEUE, LIMITED_CONCURRENCY, LIMITED_LEASE),
        ]
        return await serve(workers, lambda: emit("READY"))


def main(argv: List[str]) -> int:
    if len(argv) != 4 or not argv[2].isdigit() or int(argv[2]) > U64:
        print("usage: chaos_worker.py <base-url> <key> <seed> <name>", file=sys.stderr)
        return 2
    base_url, key, seed, name = argv[0], argv[1], int(argv[2]), argv[3]
    exit_with_parent()
    setup_logging(name)
    return asyncio.run(run(base_url, key, seed, name))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
