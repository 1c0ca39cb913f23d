"""Testing code that uses tether: a pytest plugin and :func:`run_until_empty`.

Installing ``tether-client`` registers this module as a pytest plugin (the
``pytest11`` entry point ``tether``), so its fixtures need no import:

- ``tether_server`` (session): a real ``tether serve`` on a temporary
  SQLite data directory and a free port, ready (``/readyz``) before the
  first test; ``.url`` and ``.key`` (its admin key). The binary is
  ``$TETHER_BIN``, else ``tether`` on ``PATH``.
- ``tether_tenant``: a new tenant's name, for each test.
- ``tether_client`` / ``tether_async_client``: a :class:`Client` /
  :class:`AsyncClient` acting for that tenant (the admin key with
  ``tenant=``): each test starts on a tenant of its own, without a job,
  queue or schedule of another test.

:func:`run_until_empty` (``await`` :func:`run_until_empty_async` in
asyncio code) runs a :class:`Worker` in-process until nothing of its
queues is due, and answers a :class:`RunSummary`::

    from tether_client.testing import run_until_empty

    def test_welcome(tether_client):
        worker = Worker(tether_client, "emails")
        worker.register("send_welcome", send_welcome)
        tether_client.enqueue("emails", "send_welcome", {"to": "ada@example.com"})
        assert run_until_empty(worker).succeeded == 1

Disable the plugin with ``pytest -p no:tether``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, List, Optional, Sequence, Union

import httpx
import pytest

from ._client import AsyncClient, Client
from ._duration import Duration, seconds
from ._handler import Fatal, JobContext, Outcome, Retry, RetryAfter, Snooze
from ._worker import Worker, _Ended

BANNER = re.compile(r"tether serve: listening on (http://\S+)")
"""The line ``tether serve`` prints on stdout once it listens."""
START_TIMEOUT = 30.0
"""Longest a server may take to listen and be ready (seconds)."""
CHECK_EVERY = 0.05
"""How often :func:`run_until_empty` looks whether anything is still due (seconds)."""
CLAIM_WAIT = 0.2
"""The longest claim :func:`run_until_empty` lets a worker make (seconds): a
claim in flight is never cut, so this is what stopping it may wait."""


def tether_binary() -> str:
    """The ``tether`` server binary: ``$TETHER_BIN``, else ``tether`` on
    ``PATH``; a ``RuntimeError`` saying how to get one otherwise."""
    path = os.environ.get("TETHER_BIN")
    if path:
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"TETHER_BIN={path} is not an executable tether binary")
        return path
    found = shutil.which("tether")
    if found is None:
        raise RuntimeError(
            "no tether server binary: set TETHER_BIN to its path or put `tether` on PATH "
            "(from a checkout of the tether repository: `cargo build --release`, "
            "then TETHER_BIN=target/release/tether)"
        )
    return found


class TetherServer:
    """A ``tether serve`` process that :func:`start_server` started: its
    ``url``, its admin ``key``, its ``data_dir`` and the ``process``.
    :meth:`stop` ends it."""

    def __init__(
        self,
        url: str,
        key: str,
        data_dir: str,
        process: subprocess.Popen[str],
        log_path: str,
        database_url: Optional[str] = None,
    ) -> None:
        self.url = url
        self.key = key
        self.data_dir = data_dir
        self.process = process
        self.log_path = log_path
        """Where the server's log (its stderr) goes."""
        self.database_url = database_url
        """The PostgreSQL database it runs on; None for SQLite in ``data_dir``."""

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgres"``."""
        return "sqlite" if self.database_url is None else "postgres"

    def stop(self) -> None:
        """Ends the server (SIGTERM, then SIGKILL after 10 s); its data stays."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __repr__(self) -> str:
        return f"TetherServer(url={self.url!r}, backend={self.backend!r})"


def start_server(
    data_dir: Union[str, Path],
    *,
    database_url: Optional[str] = None,
    listen: str = "127.0.0.1:0",
    args: Sequence[str] = (),
    log_path: Union[str, Path, None] = None,
) -> TetherServer:
    """Starts ``tether serve`` on ``data_dir`` (SQLite there, or PostgreSQL at
    ``database_url``), listening on ``listen`` (port 0: a free port), with
    its maintenance every 200 ms (retries and expiries come sooner than with
    the default second) and ``args`` added; answers once it answers
    ``/readyz``. Its admin key is the one it writes to ``data_dir``. No
    ``TETHER_*`` variable of this process reaches it (they would configure
    it); its log (``TETHER_LOG=warn``) goes to ``log_path`` (default: the
    data directory's name with ``.log``)."""
    data = str(data_dir)
    log_file = str(log_path) if log_path is not None else data.rstrip("/") + ".log"
    extra = [*args]
    if database_url is not None:
        extra += ["--database-url", database_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["TETHER_LOG"] = "warn"
    with open(log_file, "w") as log:
        process = subprocess.Popen(
            [tether_binary(), "serve", "--listen", listen, "--data-dir", data,
             "--maintenance-tick", "200ms", *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    try:
        url = _read_banner(process, log_file)
        key = Path(data, "admin.key").read_text().strip()
        _wait_ready(url, log_file)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return TetherServer(url, key, data, process, log_file, database_url)


def _read_banner(process: subprocess.Popen[str], log_file: str) -> str:
    """The URL of the banner, read from the server's stdout; the rest of
    its stdout is drained from then on, so it never blocks on it."""
    out: IO[str] = process.stdout  # type: ignore[assignment]
    lines: List[str] = []
    while True:
        line = out.readline()
        if not line:
            raise RuntimeError(
                "tether serve exited without listening:\n"
                + "".join(lines)
                + Path(log_file).read_text()
            )
        lines.append(line)
        found = BANNER.search(line)
        if found:
            threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
            return found.group(1)


def _wait_ready(url: str, log_file: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"tether serve at {url} was not ready within {START_TIMEOUT:g} s:\n"
                + Path(log_file).read_text()
            )
        time.sleep(0.05)


# ---- the pytest fixtures -----------------------------------------------------


@pytest.fixture(scope="session")
def tether_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TetherServer]:
    """A real ``tether serve`` for the test session, on SQLite in a temporary
    directory and a free port: ``.url`` and ``.key`` (the admin key)."""
    root = tmp_path_factory.mktemp("tether")
    server = start_server(root / "data", log_path=root / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tether_tenant(tether_server: TetherServer) -> str:
    """The name of a tenant made for this test alone."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    with Client(tether_server.url, tether_server.key) as admin:
        admin.create_tenant(name)
    return name


@pytest.fixture
def tether_client(tether_server: TetherServer, tether_tenant: str) -> Iterator[Client]:
    """A :class:`Client` of ``tether_server`` acting for this test's own
    tenant (the admin key with ``tenant=``)."""
    with Client(tether_server.url, tether_server.key, tenant=tether_tenant) as client:
        yield client


@pytest.fixture
def tether_async_client(tether_server: TetherServer, tether_tenant: str) -> Iterator[AsyncClient]:
    """An :class:`AsyncClient` of ``tether_server`` acting for this test's own
    tenant (the same as ``tether_client``'s), for use in the test's own
    event loop."""
    # Each test may run its own event loop, which is gone by the teardown:
    # without kept-alive connections the client holds none bound to it,
    # and closing it here is safe.
    transport = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    client = AsyncClient(
        tether_server.url, tether_server.key, tenant=tether_tenant, transport=transport
    )
    try:
        yield client
    finally:
        asyncio.run(client.aclose())


# ---- running a worker until nothing is due -----------------------------------


@dataclass
class RunSummary:
    """What :func:`run_until_empty` saw the worker do, one count per run of
    a job: ``succeeded``; ``failed`` for good (:class:`Fatal`, or a failure
    on the job's last attempt); ``retried`` (a failure or
    :class:`RetryAfter` with attempts left); ``snoozed``; ``cancelled``.
    ``errors`` are the unexpected exceptions, in the order they happened:
    what a handler (or a ``before`` hook) raised, other than the SDK's
    :class:`Retry`, :class:`RetryAfter`, :class:`Snooze` and
    :class:`Fatal`, and the ``TypeError`` of a result that is not JSON."""

    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    snoozed: int = 0
    cancelled: int = 0
    errors: List[BaseException] = field(default_factory=list)

    @property
    def runs(self) -> int:
        """How many runs of jobs ended."""
        return self.succeeded + self.failed + self.retried + self.snoozed + self.cancelled

    def _count(self, ctx: JobContext, ended: _Ended, outcome: Outcome) -> None:
        if outcome.status == "succeeded":
            self.succeeded += 1
        elif outcome.status in ("failed", "retry_after"):
            last = isinstance(outcome.error, Fatal) or ctx.attempt >= ctx.max_attempts
            if last:
                self.failed += 1
            else:
                self.retried += 1
        elif outcome.status == "snooze":
            self.snoozed += 1
        else:
            self.cancelled += 1
        how, value = ended
        outcomes = (Retry, RetryAfter, Snooze, Fatal)
        if how == "raised" and isinstance(value, Exception) and not isinstance(value, outcomes):
            self.errors.append(value)
        elif how == "not_json" and outcome.error is not None:
            self.errors.append(outcome.error)


def run_until_empty(
    worker: Worker,
    *,
    client: Union[Client, AsyncClient, None] = None,
    timeout: Duration = 30.0,
    raise_errors: bool = True,
) -> RunSummary:
    """Runs ``worker`` in this process (hooks, typed tasks and all) until
    nothing of its queues is due: no job ready now, none running, none of
    its own in flight; then stops it and answers a :class:`RunSummary`.
    Jobs due later (a retry's backoff, a delay) are left for later. With
    ``client``, the worker runs against that client's server, key and
    tenant (the ``tether_client`` fixture, for a worker your code built
    with a ``Client()`` of its own) for this call only.

    Unless ``raise_errors=False``, the first unexpected exception a
    handler raised (see :attr:`RunSummary.errors`) is raised here, with
    its own traceback, so a test fails where the handler did. Past
    ``timeout`` seconds with jobs still due, raises ``TimeoutError``
    saying what is left. Its claims long-poll at most 0.2 s meanwhile. In
    asyncio code, ``await`` :func:`run_until_empty_async`."""
    return asyncio.run(
        run_until_empty_async(worker, client=client, timeout=timeout, raise_errors=raise_errors)
    )


async def run_until_empty_async(
    worker: Worker,
    *,
    client: Union[Client, AsyncClient, None] = None,
    timeout: Duration = 30.0,
    raise_errors: bool = True,
) -> RunSummary:
    """:func:`run_until_empty` on the running event loop."""
    limit = seconds(timeout, "timeout")
    saved = (worker._url, worker._key, worker._tenant, worker._timeout, worker.claim_wait)
    if client is not None:
        worker._url, worker._key, worker._tenant = client.url, client.key, client.tenant
        worker._timeout = client.timeout
    worker.claim_wait = min(worker.claim_wait, CLAIM_WAIT)
    summary = RunSummary()
    worker._outcome_listener = summary._count
    loop = asyncio.get_running_loop()
    try:
        async with AsyncClient(worker._url, worker._key, tenant=worker._tenant) as probe:
            running = asyncio.ensure_future(worker.run_async(handle_signals=False))
            deadline = loop.time() + limit
            try:
                while True:
                    await asyncio.sleep(CHECK_EVERY)
                    if running.done():
                        break  # it failed (a wrong key: raised below), or was stopped
                    left = await _still_due(worker, probe)
                    if not left:
                        break
                    if loop.time() > deadline:
                        raise TimeoutError(
                            f"still due after {limit:g} s: {left}"
                            + (f" (first error: {summary.errors[0]!r})" if summary.errors else "")
                        )
            finally:
                worker.stop()
                await running
    finally:
        worker._outcome_listener = None
        worker._url, worker._key, worker._tenant, worker._timeout, worker.claim_wait = saved
    if raise_errors and summary.errors:
        raise summary.errors[0]
    return summary


async def _still_due(worker: Worker, probe: AsyncClient) -> str:
    """What is left to do on the worker's queues ('' when nothing is): its
    own jobs in flight, jobs ready now or running (claimed by anyone)."""
    if worker.jobs_in_flight:
        return f"{worker.jobs_in_flight} jobs in flight in the worker"
    left = []
    for name in worker.queues:
        q = await probe.get_queue(name)
        if q.ready or q.counts.running:
            left.append(f"queue {name}: {q.ready} ready, {q.counts.running} running")
    return "; ".join(left)
