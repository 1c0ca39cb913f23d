"""``python -m tether_client worker module:attr``, run as a subprocess
against a real server: it runs the worker the module defines, and stops
cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

from conftest import Server
from tether_client import Client

MODULE = """
from tether_client import Client, JobContext, Worker

QUEUE = {queue!r}


def make() -> Worker:
    worker = Worker(Client({client_url!r}), QUEUE, claim_wait=0.5)

    @worker.handler("greet")
    def greet(job: JobContext) -> str:
        return "hello " + job.payload

    return worker


worker = make()
"""


def start(tmp_path: Path, queue: str, args: List[str], env: Dict[str, str],
          client_url: str = "http://127.0.0.1:1") -> subprocess.Popen[str]:
    """The runner in ``tmp_path``, whose module ``jobs`` has a worker made
    with a client pointing at ``client_url`` (by default nowhere: the
    runner's settings must win)."""
    (tmp_path / "jobs.py").write_text(
        textwrap.dedent(MODULE.format(queue=queue, client_url=client_url)), encoding="utf-8"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tether_client", "worker", *args],
        cwd=tmp_path, env=clean | env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out


def test_the_runner_runs_a_worker_until_sigterm(
    server: Server, client: Client, queue: str, tmp_path: Path
) -> None:
    proc = start(tmp_path, queue, ["jobs:worker", "--url", server.url, "--key", server.key], {})
    try:
        job = client.enqueue(queue, "greet", "ada")
        done = client.wait(job, timeout=30)
    finally:
        out = stop(proc)
    assert done.state == "succeeded" and done.result == "hello ada", out
    assert proc.returncode == 0, out
    assert f"started on queue {queue}" in out and "stopped" in out, out
    assert "HTTP Request" not in out, out  # the worker's traffic is not logged


def test_the_runner_takes_a_factory_and_its_settings_from_the_environment(
    server: Server, client: Client, queue: str, tmp_path: Path
) -> None:
    made = client.create_tenant(f"r-{queue}")
    env = {"TETHER_URL": server.url, "TETHER_KEY": server.key, "TETHER_TENANT": made.tenant.name}
    proc = start(tmp_path, queue, ["jobs:make"], env)
    try:
        with Client(server.url, made.api_key) as own:
            job = own.enqueue(queue, "greet", "bob")  # in the tenant it acts for
            done = own.wait(job, timeout=30)
    finally:
        out = stop(proc)
    assert done.result == "hello bob", out
    assert proc.returncode == 0, out


def test_the_runner_refuses_what_is_not_a_worker(
    server: Server, queue: str, tmp_path: Path
) -> None:
    for target, why in (
        ("jobs", "expected module:attr"),
        ("nowhere:worker", "cannot import 'nowhere'"),
        ("jobs:missing", "no attribute 'missing'"),
        ("jobs:QUEUE", "is a str, not a tether_client.Worker"),
    ):
        proc = start(tmp_path, queue, [target, "--url", server.url, "--key", server.key], {})
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 2 and why in out, out
    proc = start(tmp_path, queue, ["jobs:worker", "--url", server.url, "--key", "wrong"], {})
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1, out
    assert "failed: unauthenticated" in out, out
