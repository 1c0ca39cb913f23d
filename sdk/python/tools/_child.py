"""What the chaos and bench worker programs share: how a child process of
tether's test programs prints its lines, stops on a signal and dies with its
parent. Not part of the SDK."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, List

from tether_client import Worker

log = logging.getLogger("tether_client.tools")


def now_us() -> int:
    """Wall-clock microseconds since the Unix epoch: the clock the parent
    and PostgreSQL read too (one machine)."""
    return time.time_ns() // 1000


def emit(line: str) -> None:
    """Prints one protocol line in one write(2) straight to fd 1: no buffer
    for a SIGKILL to lose, and lines (far below PIPE_BUF) never interleave."""
    data = (line + "\n").encode()
    try:
        while data:
            data = data[os.write(1, data) :]
    except OSError:
        pass  # the parent is gone; the stdin watcher ends the process


def exit_with_parent() -> None:
    """The parent holds our stdin: when it closes (the parent died or gave
    up on us), exit at once with status 3, without any graceful stop."""

    def watch() -> None:
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        os._exit(3)

    threading.Thread(target=watch, name="stdin-watcher", daemon=True).start()


def setup_logging(name: str) -> None:
    """The worker's own log on stderr (inherited by the parent), errors only
    unless TETHER_WORKER_LOG names a level."""
    logging.basicConfig(
        level=os.environ.get("TETHER_WORKER_LOG", "ERROR").upper(),
        stream=sys.stderr,
        format=f"{name} %(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def serve(workers: List[Worker], ready: Callable[[], None]) -> int:
    """Runs ``workers`` on this event loop until SIGTERM or SIGINT, then stops
    them gracefully (their shutdown grace, then a hand-back). ``ready`` is
    called once they all run. Answers the exit status: 0, or 1 when a worker
    ended on its own (a wrong key, say)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(w.run_async(handle_signals=False)) for w in workers]
    # The tasks' first steps run before we resume: each worker is running
    # then (its loop is set), so a stop() from here on is never lost.
    await asyncio.sleep(0)
    ready()
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({stopping, *tasks}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    for w in workers:
        w.stop()
    status = 0
    for t, w in zip(tasks, workers):
        try:
            await t
        except Exception:
            log.exception("worker %s failed", w.worker_id)
            status = 1
    if not stop.is_set():
        status = 1  # a worker ended although nobody asked it to
    return status
