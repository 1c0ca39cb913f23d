"""``python -m tether_client worker module:attr``: runs a worker defined in
your code until SIGTERM or SIGINT, then drains it.

    python -m tether_client worker app.jobs:worker [--url URL] [--key KEY] [--tenant T]

``attr`` names a :class:`Worker`, or a function called without arguments
that returns one (a factory). The server's address, key and tenant come
from the flags, else from ``TETHER_URL``, ``TETHER_KEY`` and
``TETHER_TENANT``; the flags are put in the environment before the module
is imported (so a ``Client()`` made there reads them), and whichever of the
three is set this way wins over what the worker's client was given.
Exit status: 0 after a graceful stop, 1 when the worker failed (a wrong
key, say), 2 for a bad command line or target.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import List, Optional

from ._errors import TetherError
from ._worker import Worker

log = logging.getLogger("tether_client.runner")


class TargetError(Exception):
    """The ``module:attr`` given does not name a worker."""


def load_worker(target: str) -> Worker:
    """The :class:`Worker` ``target`` (``module:attr``, ``attr`` possibly
    dotted) names: the attribute itself, or what it returns when called
    without arguments."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise TargetError(f"expected module:attr (e.g. app.jobs:worker), got {target!r}")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as e:
        raise TargetError(f"cannot import {module_name!r}: {e}") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, Worker) and callable(obj):
        obj = obj()
    if not isinstance(obj, Worker):
        raise TargetError(
            f"{target} is a {type(obj).__name__}, not a tether_client.Worker "
            "(or a function returning one)"
        )
    return obj


def main(argv: Optional[List[str]] = None) -> int:
    """The command line; answers the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m tether_client",
        description="Runs a tether worker defined in your code.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "worker",
        help="run a Worker until SIGTERM or SIGINT, then drain it",
        description="Runs the Worker module:attr names (or that a function it names returns) "
        "until SIGTERM or SIGINT, then drains it: no more claims, running handlers get the "
        "worker's shutdown grace, the rest is handed back.",
    )
    run.add_argument("target", metavar="module:attr", help="e.g. app.jobs:worker")
    run.add_argument("--url", help="the server (default: TETHER_URL)")
    run.add_argument("--key", "--api-key", dest="key", help="the API key (default: TETHER_KEY)")
    run.add_argument(
        "--tenant", help="with an admin key, act for this tenant (default: TETHER_TENANT)"
    )
    run.add_argument("--log-level", default="INFO", help="of the worker's log (default INFO)")
    args = parser.parse_args(argv)

    for name, value in (
        ("TETHER_URL", args.url),
        ("TETHER_KEY", args.key),
        ("TETHER_TENANT", args.tenant),
    ):
        if value is not None:
            os.environ[name] = value
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The module is the user's program: as `python app/jobs.py` would, find
    # it from the current directory.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        worker = load_worker(args.target)
    except TargetError as e:
        parser.error(str(e))
    worker._use_server(
        url=os.environ.get("TETHER_URL"),
        key=os.environ.get("TETHER_KEY"),
        tenant=os.environ.get("TETHER_TENANT"),
    )
    try:
        worker.run()
    except TetherError as e:
        log.error("worker %s failed: %s", worker.worker_id, e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
