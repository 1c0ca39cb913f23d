"""Fixtures: a real `tether serve` on SQLite and on PostgreSQL (never a mock),
started by the SDK's own pytest plugin (tether_client.testing), whose
fixtures (tether_client, tether_async_client, ...) run here on both."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlsplit, urlunsplit

import pytest

from tether_client import Client
from tether_client.testing import TetherServer, start_server

REPO = Path(__file__).resolve().parents[3]
TOOLS = Path(__file__).resolve().parents[1] / "tools"
# The chaos and bench worker programs are scripts, not a package: their
# tests import them (and their shared _child module) from tools/.
sys.path.insert(0, str(TOOLS))
# Run from a checkout without TETHER_BIN, the tests use the debug build.
os.environ.setdefault("TETHER_BIN", str(REPO / "target" / "debug" / "tether"))

Server = TetherServer


def _psql(url: str, sql: str) -> None:
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql], check=True,
                   capture_output=True, text=True)


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    backend: str = request.param
    tmp = tempfile.mkdtemp(prefix=f"tether-py-{backend}-")
    database_url: Optional[str] = None
    drop = None
    if backend == "postgres":
        base = os.environ.get(
            "TETHER_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"
        )
        name = f"tether_test_{os.getpid()}_{random.randrange(1 << 30):x}"
        _psql(base, f'CREATE DATABASE "{name}"')
        database_url = urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
        drop = (base, name)
    started = None
    try:
        started = start_server(
            os.path.join(tmp, "data"),
            database_url=database_url,
            log_path=os.path.join(tmp, "server.log"),
        )
        yield started
    finally:
        if started is not None:
            started.stop()
        if drop is not None:
            _psql(drop[0], f'DROP DATABASE IF EXISTS "{drop[1]}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def tether_server(server: Server) -> Server:
    """The plugin's fixtures (tether_client, ...) on this suite's servers:
    both backends, and no third server."""
    return server


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
