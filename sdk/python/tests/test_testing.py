"""tether_client.testing: its fixtures (here on this suite's two servers,
and as a user's pytest gets them from the entry point) and run_until_empty."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tether_client import (
    AsyncClient,
    Client,
    Fatal,
    JobContext,
    RetryAfter,
    Snooze,
    Worker,
    batch_entry,
)
from tether_client.testing import (
    RunSummary,
    run_until_empty,
    run_until_empty_async,
    tether_binary,
)

README = Path(__file__).resolve().parents[1] / "README.md"


def test_each_test_starts_on_a_tenant_of_its_own(
    tether_client: Client, tether_tenant: str, client: Client
) -> None:
    assert tether_client.tenant == tether_tenant
    assert tether_client.whoami().tenant.name == tether_tenant
    assert tether_client.queues() == [] and tether_client.list_schedules() == []
    job = tether_client.enqueue("emails", "k")
    assert [q.name for q in tether_client.queues()] == ["emails"]
    assert [j.id for j in tether_client.list(queue="emails").jobs] == [job.id]
    # Not the default tenant's job.
    assert job.id not in [j.id for j in client.list(queue="emails").jobs]


def test_run_until_empty_works_the_queues_until_nothing_is_due(tether_client: Client) -> None:
    worker = Worker(tether_client, ["shop", "mail"])
    worker.register("charge", lambda job: {"charged": job.payload})
    worker.register("receipt", lambda job: [d.result for d in job.dependencies()])

    @worker.handler("later")
    def later(job: JobContext) -> None:
        raise RetryAfter(3600, "the provider is busy")

    @worker.handler("refused")
    def refused(job: JobContext) -> None:
        raise Fatal("bad address")

    @worker.handler("busy")
    def busy(job: JobContext) -> None:
        raise Snooze(3600)

    [charge, receipt] = tether_client.enqueue_batch([
        batch_entry("shop", "charge", 42),
        batch_entry("mail", "receipt", depends_on_entries=[0]),
    ])
    later_job = tether_client.enqueue("mail", "later")
    tether_client.enqueue("mail", "refused")
    tether_client.enqueue("mail", "busy")
    summary = run_until_empty(worker)
    assert summary == RunSummary(succeeded=2, failed=1, retried=1, snoozed=1)
    # The receipt waited for the charge, then ran; the retry is due later.
    assert tether_client.get(charge.job.id).state == "succeeded"
    assert tether_client.get(receipt.job.id).result == [{"charged": 42}]
    assert tether_client.get(later_job.id).state == "queued"
    assert worker.claim_wait == 5.0  # what it was given is back
    assert run_until_empty(worker) == RunSummary()  # nothing is due now


def test_a_failing_handler_raises_its_exception_in_the_test(tether_client: Client) -> None:
    worker = Worker(tether_client, "emails")

    def send_welcome(job: JobContext) -> None:
        job.payload["address"]  # a bug: the field is "to"

    worker.register("send_welcome", send_welcome)
    tether_client.enqueue("emails", "send_welcome", {"to": "ada@example.com"}, max_attempts=2)
    with pytest.raises(KeyError, match="address") as raised:
        run_until_empty(worker)
    # Its own traceback: the frame of the handler that raised it.
    assert raised.traceback[-1].name == "send_welcome"
    # Told not to, it answers the summary, the errors in it.
    tether_client.enqueue("emails", "send_welcome", {"to": "bob@example.com"}, max_attempts=1)
    summary = run_until_empty(worker, raise_errors=False)
    assert isinstance(summary, RunSummary) and summary.failed >= 1
    assert [type(e) for e in summary.errors] == [KeyError] * len(summary.errors)


def test_a_result_that_is_not_json_is_raised_too(tether_client: Client) -> None:
    worker = Worker(tether_client, "q")
    worker.register("k", lambda job: {1, 2})
    tether_client.enqueue("q", "k", max_attempts=1)
    with pytest.raises(TypeError, match="the handler's result is not JSON"):
        run_until_empty(worker)


def test_run_until_empty_runs_a_worker_against_the_test_client(
    tether_client: Client, tether_async_client: AsyncClient
) -> None:
    """A worker an application built with a Client() of its own runs against
    the test's server and tenant for the call, in asyncio code too."""
    with Client("http://127.0.0.1:9", "tth_not_this_one") as elsewhere:
        worker = Worker(elsewhere, "emails", claim_wait=2)

    @worker.handler("send")
    async def send(job: JobContext) -> str:
        return f"sent to {job.payload}"

    async def main() -> RunSummary:
        job = await tether_async_client.enqueue("emails", "send", "ada")
        summary = await run_until_empty_async(worker, client=tether_async_client)
        assert (await tether_async_client.get(job.id)).result == "sent to ada"
        return summary

    assert asyncio.run(main()).succeeded == 1
    assert (worker._url, worker._key, worker.claim_wait) == (
        "http://127.0.0.1:9", "tth_not_this_one", 2
    )
    tether_client.enqueue("emails", "send", "bob")
    assert run_until_empty(worker, client=tether_client).succeeded == 1


def test_run_until_empty_gives_up_on_jobs_nobody_takes(tether_client: Client) -> None:
    worker = Worker(tether_client, "emails")
    worker.register("k", lambda job: None)
    tether_client.pause("emails")  # its jobs are due, and nobody gets them
    tether_client.enqueue("emails", "k")
    with pytest.raises(TimeoutError, match="queue emails: 1 ready, 0 running"):
        run_until_empty(worker, timeout=0.5)


def test_the_server_binary_comes_from_tether_bin_or_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TETHER_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="set TETHER_BIN to its path or put `tether` on PATH"):
        tether_binary()
    on_path = tmp_path / "tether"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(on_path.stat().st_mode | stat.S_IXUSR)
    assert tether_binary() == str(on_path)
    monkeypatch.setenv("TETHER_BIN", str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="is not an executable tether binary"):
        tether_binary()


def test_the_readme_example_runs_with_the_plugin_alone(tmp_path: Path) -> None:
    """The SDK README's pytest example, as a user's test file: no conftest,
    the fixtures from the installed entry point, a server of its own."""
    section = README.read_text(encoding="utf-8").split("\n## Testing your handlers", 1)[1]
    [example] = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], re.S)[:1]
    (tmp_path / "test_emails.py").write_text(example, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_emails.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout
