"""Fixtures: a real `tether serve` on SQLite and on PostgreSQL (never a mock)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, List, NamedTuple
from urllib.parse import urlsplit, urlunsplit

import pytest

from tether_client import Client

REPO = Path(__file__).resolve().parents[3]
TOOLS = Path(__file__).resolve().parents[1] / "tools"
# The chaos and bench worker programs are scripts, not a package: their
# tests import them (and their shared _child module) from tools/.
sys.path.insert(0, str(TOOLS))
BANNER = re.compile(r"tether serve: listening on (http://\S+)")


def tether_bin() -> str:
    path = os.environ.get("TETHER_BIN") or str(REPO / "target" / "debug" / "tether")
    if not os.access(path, os.X_OK):
        raise RuntimeError(
            f"no tether binary at {path}: build it (cargo build) or set TETHER_BIN"
        )
    return path


class Server(NamedTuple):
    url: str
    key: str
    backend: str
    data_dir: str


def _start(
    extra: List[str], data_dir: str, log_path: str, listen: str = "127.0.0.1:0"
) -> tuple[subprocess.Popen[str], str]:
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [tether_bin(), "serve", "--listen", listen, "--data-dir", data_dir,
         "--maintenance-tick", "200ms", *extra],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
        | {"TETHER_LOG": "warn"},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    url = None
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = BANNER.search(line)
        if m:
            url = m.group(1)
            break
    if url is None:
        proc.kill()
        raise RuntimeError(
            "tether serve printed no banner:\n" + "".join(lines) + Path(log_path).read_text()
        )
    # Keep the pipe drained so the server never blocks on stdout.
    out = proc.stdout
    threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
    return proc, url


def _psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], check=True,
                   capture_output=True, text=True)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    backend: str = request.param
    tmp = tempfile.mkdtemp(prefix=f"tether-py-{backend}-")
    data_dir = os.path.join(tmp, "data")
    extra: List[str] = []
    drop = None
    if backend == "postgres":
        base = os.environ.get(
            "TETHER_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        )
        name = f"tether_test_{os.getpid()}_{random.randrange(1 << 30):x}"
        _psql(base, f'CREATE DATABASE "{name}"')
        parts = urlsplit(base)
        extra = ["--database-url", urlunsplit(parts._replace(path=f"/{name}"))]
        drop = (base, name)
    proc = None
    try:
        proc, url = _start(extra, data_dir, os.path.join(tmp, "server.log"))
        key = Path(data_dir, "admin.key").read_text().strip()
        yield Server(url, key, backend, data_dir)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if drop is not None:
            _psql(drop[0], f'DROP DATABASE IF EXISTS "{drop[1]}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, server.key) as c:
        yield c


@pytest.fixture
def queue() -> str:
    """A queue name of this test alone."""
    return f"q-{uuid.uuid4().hex[:12]}"


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Polls ``predicate`` until it answers something truthy; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)
