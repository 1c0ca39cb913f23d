"""The chaos and bench worker programs of tools/: the plan port against the
Rust original's values, and both programs run against a real server."""

from __future__ import annotations

import hashlib
import os
import queue as queues
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any, Dict, List, Optional

import pytest

import chaos_worker
from chaos_worker import FATAL_MESSAGE, Plan, mix, moved_ms, plan, retry_message
from conftest import TOOLS, Server, wait_for
from tether_client import Backoff, Client, Job, batch_entry

# Reference values printed by a copy of crates/tether-chaos/src/plan.rs's
# `mix` and `plan` compiled with rustc (wrapping u64 arithmetic).
MIX = {
    0: 16294208416658607535,
    1: 10451216379200822465,
    0xFFFF_FFFF_FFFF_FFFF: 16490336266968443936,
    0x5EED: 716632666546416052,
}
PLANS = {
    (1, 0): "always_retry",
    (1, 1): "flaky 2 -",
    (1, 2): "ok 9",
    (1, 5): "snooze_in_process 49",
    (1, 6): "snooze_queue 303",
    (1, 10): "ok 202",
    (1, 11): "slow 3203",
    (1, 13): "flaky 1 244",
    (1, 30): "fatal",
    (7, 42): "flaky 2 -",
    (12345, 999_999): "ok 17",
    (2**64 - 1, 2**64 - 1): "slow 2715",
}
# sha256 of the canonical lines of plan(1, n) for n in 0..5000 (a --quick
# run's jobs), one per line, from the same Rust program.
DIGEST_SEED1_5000 = "e22faa3d679edf9ccf816adc09763f5b869abd9c3c026403c92e2113ad76f0b9"
COUNTS_SEED7_10000 = {
    "always_retry": 295, "fatal": 281, "flaky": 1200, "ok": 6381, "slow": 147,
    "snooze_in_process": 675, "snooze_queue": 1021,
}


def test_the_plan_port_matches_the_rust_original() -> None:
    assert {x: mix(x) for x in MIX} == MIX
    assert {k: plan(*k).canonical() for k in PLANS} == PLANS
    lines = "".join(plan(1, n).canonical() + "\n" for n in range(5000))
    assert hashlib.sha256(lines.encode()).hexdigest() == DIGEST_SEED1_5000
    counts: Dict[str, int] = {}
    for n in range(10_000):
        kind = plan(7, n).kind
        counts[kind] = counts.get(kind, 0) + 1
    assert counts == COUNTS_SEED7_10000


def test_failures_follow_the_plan() -> None:
    flaky = Plan("flaky", fails=2)
    assert flaky.failure_on(2) == (False, "chaos: planned failure on attempt 2")
    assert flaky.failure_on(3) is None
    assert Plan("always_retry").failure_on(9) == (False, retry_message(9))
    assert Plan("fatal").failure_on(4) == (True, FATAL_MESSAGE)
    assert Plan("ok").failure_on(1) is None and Plan("snooze_queue").failure_on(1) is None
    assert moved_ms("2030-01-01T00:00:00.000Z", "2030-01-01T00:00:00.049Z") == 49
    assert moved_ms("2030-01-01T00:00:00.000Z", "2030-01-01T00:00:01.300Z") == 1300


class Child:
    """A tools/ program as tether's test programs run it: stdin held, stdout
    read line by line, stderr inherited."""

    def __init__(self, script: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(TOOLS / script), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.lines: queues.Queue[str] = queues.Queue()
        self.seen: List[str] = []
        out = self.proc.stdout
        assert out is not None
        threading.Thread(target=lambda: [self.lines.put(line) for line in out],
                         daemon=True).start()

    def next_line(self, timeout: float = 15.0) -> str:
        line = self.lines.get(timeout=timeout).rstrip("\n")
        self.seen.append(line)
        return line

    def rest(self) -> List[str]:
        while True:
            try:
                self.next_line(timeout=0.5)
            except queues.Empty:
                return self.seen

    def stop(self, sig: Optional[int] = signal.SIGTERM) -> int:
        """Sends ``sig`` (or closes stdin when None) and answers the exit status."""
        if sig is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        else:
            self.proc.send_signal(sig)
        return self.proc.wait(15)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_the_chaos_worker_runs_each_plan(server: Server, client: Client) -> None:
    name = f"t{os.getpid()}"
    backoff = Backoff(0.1, 1)
    ns = [0, 1, 2, 5, 6, 10, 11, 13, 30]
    jobs: Dict[Any, Job] = {}
    for n in ns:
        p = plan(1, n)
        jobs[n] = client.enqueue(
            "chaos-slow" if p.kind == "slow" else "chaos", "chaos", {"n": n},
            max_attempts=3 if p.kind == "always_retry" else 5, backoff=backoff,
        )
    jobs["none"] = client.enqueue("chaos", "chaos", {"m": 1}, max_attempts=5, backoff=backoff)
    child = Child("chaos_worker.py", server.url, server.key, "1", name)
    try:
        assert child.next_line() == "READY"
        wait_for(lambda: all(client.get(j.id).state in ("succeeded", "failed")
                             for j in jobs.values()), timeout=30)
        lines = child.rest()[1:]
        assert child.stop() == 0
    finally:
        child.kill()

    got = {k: client.get(j.id) for k, j in jobs.items()}
    history = {k: list(client.iter_events(j.id)) for k, j in jobs.items()}

    def details(k: Any, event: str) -> List[Optional[str]]:
        return [e.detail for e in history[k] if e.event == event]

    def succeeded(k: Any, attempt: int, by: str = "m") -> None:
        job = got[k]
        assert job.state == "succeeded", (k, job)
        assert job.result == {"n": k, "by": f"{name}.{by}", "attempt": attempt}

    succeeded(2, 1)
    succeeded(10, 1)
    succeeded(11, 1, by="s")  # 3.2 s on a 2 s lease: heartbeats kept it
    assert "lease_expired" not in [e.event for e in history[11]]
    succeeded(1, 3)
    assert details(1, "retry_scheduled") == [retry_message(1), retry_message(2)]
    succeeded(13, 2)
    assert details(13, "retry_scheduled") == [retry_message(1)]
    retried = next(e for e in history[13] if e.event == "retry_scheduled")
    again = [e for e in history[13] if e.event == "claimed"][1]
    assert (ts(again.at) - ts(retried.at)).total_seconds() >= 0.244
    assert got[0].state == "failed" and got[0].attempt == 3
    assert got[0].last_error == retry_message(3)
    assert got[30].state == "failed" and got[30].attempt == 1
    assert got[30].last_error == FATAL_MESSAGE
    assert got["none"].state == "failed" and got["none"].last_error == "chaos: payload without n"
    succeeded(6, 1)  # snoozed back to the queue once
    assert len(details(6, "snoozed")) == 1
    succeeded(5, 1)  # a short snooze: reported like any other, attempt given back
    assert [e.event for e in history[5]] == [
        "enqueued", "claimed", "snoozed", "claimed", "succeeded"
    ]

    # What it printed: one CLAIM per claim in the histories (stamped after
    # the server recorded it), each with its own token, nothing else.
    ids = {j.id: k for k, j in jobs.items()}
    recorded = sorted((str(k), e.attempt, e.worker_id or "", ts(e.at).timestamp() * 1e6)
                      for k in jobs for e in history[k] if e.event == "claimed")
    printed = []
    for line in lines:
        f = line.split()
        assert f[0] == "CLAIM" and len(f) == 6, line
        printed.append((str(ids[f[1]]), int(f[2]), f[4], int(f[5]), f[3]))
    printed.sort()
    assert [p[:3] for p in printed] == [r[:3] for r in recorded]
    assert all(r[3] <= p[3] + 20_000 for r, p in zip(recorded, printed))
    assert len({p[4] for p in printed}) == len(printed)


def test_the_chaos_worker_dies_with_its_parent(server: Server) -> None:
    child = Child("chaos_worker.py", server.url, server.key, "1", f"d{os.getpid()}")
    try:
        assert child.next_line() == "READY"
        t0 = time.monotonic()
        assert child.stop(None) == 3
        assert time.monotonic() - t0 < 2
    finally:
        child.kill()


def test_the_chaos_worker_refuses_bad_arguments() -> None:
    assert chaos_worker.main(["http://x", "k", "-1", "w"]) == 2
    assert chaos_worker.main(["http://x", "k", str(2**64), "w"]) == 2


@pytest.mark.parametrize("mode", ["pickup", "throughput", "cancel"])
def test_the_bench_worker(server: Server, client: Client, queue: str, mode: str) -> None:
    child = Child("bench_worker.py", server.url, server.key, queue, "8", mode)
    try:
        assert child.next_line() == "READY"
        if mode == "pickup":
            sent = time.time_ns() // 1000
            job = client.enqueue(queue, "noop")
            f = child.next_line().split()
            assert f[:2] == ["START", job.id] and len(f) == 3
            assert sent <= int(f[2]) < sent + 5_000_000
            wait_for(lambda: client.get(job.id).state == "succeeded")
            assert client.get(job.id).result is None
            assert child.stop() == 0
        elif mode == "cancel":
            job = client.enqueue(queue, "noop")
            f = child.next_line().split()
            assert f[:2] == ["START", job.id] and len(f) == 3
            asked = time.time_ns() // 1000
            client.cancel(job.id)
            f = child.next_line(timeout=60).split()
            assert f[:2] == ["CANCELLED", job.id] and len(f) == 3
            assert int(f[2]) >= asked
            wait_for(lambda: client.get(job.id).state == "cancelled", timeout=15)
            assert child.stop() == 0
        else:
            client.enqueue_batch([batch_entry(queue, "noop", i) for i in range(300)])
            wait_for(lambda: client.get_queue(queue).counts.succeeded == 300, timeout=30)
            assert child.rest() == ["READY"]  # no START lines in this mode
            assert child.stop(None) == 3
    finally:
        child.kill()


def test_the_bench_worker_with_hooks_and_tracing(
    server: Server, client: Client, queue: str
) -> None:
    """``--hooks``: the same worker with a no-op hook of each kind and
    tracing on; jobs with trace context (a span each) and without both run."""
    child = Child("bench_worker.py", server.url, server.key, queue, "8", "throughput", "--hooks")
    parent = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    try:
        assert child.next_line() == "READY"
        client.enqueue_batch(
            [batch_entry(queue, "noop", i, headers=parent if i % 2 else None) for i in range(200)]
        )
        wait_for(lambda: client.get_queue(queue).counts.succeeded == 200, timeout=30)
        assert child.rest() == ["READY"]
        assert child.stop() == 0
    finally:
        child.kill()


def test_the_bench_worker_refuses_bad_arguments() -> None:
    import bench_worker

    assert bench_worker.main(["http://x", "k", "q", "8", "bogus", "--hooks"]) == 2
    assert bench_worker.main(["http://x", "k", "q", "8", "throughput", "--other"]) == 2
