#!/usr/bin/env python3
"""Writes a wheel that carries a built `tether` binary: `tether_server`.

    python3 packaging/pypi/build_wheel.py BINARY OUTDIR [--version V]

`pip install OUTDIR/tether_server-<version>-py3-none-<platform>.whl` then
puts `tether` on the environment's PATH (a console script that execs the
bundled binary) and makes `python -m tether_server serve` work; no Rust is
needed where it is installed. The wheel is a zip written here with the
standard library alone (the format is PEP 427 plus the binary distribution
format spec), so no build backend or network is involved.

The version defaults to the workspace version in the Cargo.toml at the root
of the repository, which is also what the binary reports with `--version`.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIST = "tether_server"  # the distribution name, normalised for file names
# Every entry gets this time, so that one binary always gives the same wheel.
ZIP_TIME = (1980, 1, 1, 0, 0, 0)

SUMMARY = "The tether server (a durable background-job queue) as a prebuilt binary"

INIT_PY = '''\
"""The `tether` server binary, prebuilt for this platform.

tether is a durable background-job queue whose system of record is the
database (PostgreSQL, or one embedded SQLite file). This package carries only
the server and operator CLI, so that `pip install` brings `tether serve` to
a machine without Rust; the installed `tether` command (or
`python -m tether_server`) runs it. To talk to the server from Python, use
the SDK (`tether_client`). `binary()` gives the executable's path, e.g. to
start a server from tests:

    subprocess.Popen([str(tether_server.binary()), "serve", "--listen", "127.0.0.1:0"])
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["binary", "__version__"]

__version__ = "{version}"


def binary() -> Path:
    """The path of the bundled `tether` executable."""
    name = "tether.exe" if sys.platform == "win32" else "tether"
    path = Path(__file__).resolve().parent / "bin" / name
    if not path.is_file():
        raise FileNotFoundError(f"no tether binary in this install: {{path}}")
    return path
'''

MAIN_PY = '''\
"""`python -m tether_server ARGS` and the `tether` console script: run the
bundled binary with ARGS, in place of this process."""

from __future__ import annotations

import os
import subprocess
import sys

from tether_server import binary


def main() -> None:
    path = str(binary())
    args = [path, *sys.argv[1:]]
    if sys.platform == "win32":
        # No real exec on Windows: run it and pass its exit status on.
        sys.exit(subprocess.call(args))
    os.execv(path, args)


if __name__ == "__main__":
    main()
'''

README = """\
# tether-server

The `tether` binary (the server of tether, a durable background-job queue,
and its operator CLI), prebuilt for one platform. After `pip install`,
`tether serve` runs the service on an embedded SQLite file under
`./tether-data`; `tether --help` lists every command. `python -m
tether_server` does the same, and `tether_server.binary()` gives the
executable's path. The Python SDK to enqueue and work on jobs is a separate
package (`tether_client`).
"""


def workspace_version() -> str:
    """`version` of `[workspace.package]` in the root Cargo.toml."""
    text = (REPO / "Cargo.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[workspace\.package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        sys.exit(f"build_wheel.py: no version in [workspace.package] of {REPO}/Cargo.toml")
    return match.group(1)


def platform_tag() -> str:
    # The platform this runs on, e.g. linux_x86_64 or macosx_11_0_arm64: the
    # binary must have been built for it. Good for installing from a local
    # file; publishing to PyPI would need manylinux/musllinux tags, checked
    # by auditwheel against the glibc/musl the binary links to.
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def digest(data: bytes) -> str:
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def build(binary: Path, outdir: Path, version: str) -> Path:
    tag = f"py3-none-{platform_tag()}"
    dist_info = f"{DIST}-{version}.dist-info"
    exe = "tether.exe" if binary.suffix == ".exe" else "tether"
    metadata = (
        "Metadata-Version: 2.4\n"
        "Name: tether-server\n"
        f"Version: {version}\n"
        f"Summary: {SUMMARY}\n"
        "License-Expression: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + README
    )
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: tether packaging/pypi/build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )
    entry_points = "[console_scripts]\ntether = tether_server.__main__:main\n"
    files: list[tuple[str, bytes, int]] = [
        (f"{DIST}/__init__.py", INIT_PY.format(version=version).encode(), 0o644),
        (f"{DIST}/__main__.py", MAIN_PY.encode(), 0o644),
        (f"{DIST}/py.typed", b"", 0o644),
        (f"{DIST}/bin/{exe}", binary.read_bytes(), 0o755),
        (f"{dist_info}/METADATA", metadata.encode(), 0o644),
        (f"{dist_info}/WHEEL", wheel.encode(), 0o644),
        (f"{dist_info}/entry_points.txt", entry_points.encode(), 0o644),
    ]
    record_path = f"{dist_info}/RECORD"
    record = "".join(f"{name},{digest(data)},{len(data)}\n" for name, data, _ in files)
    record += f"{record_path},,\n"
    files.append((record_path, record.encode(), 0o644))

    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{DIST}-{version}-{tag}.whl"
    tmp = path.with_suffix(".whl.part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so that the mode below is read
            info.external_attr = (0o100000 | mode) << 16  # a regular file, with its mode
            zf.writestr(info, data)
    tmp.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary", type=Path, help="the tether binary (e.g. target/release/tether)")
    parser.add_argument("outdir", type=Path, help="where the wheel goes")
    parser.add_argument(
        "--version", help="the wheel's version (default: the workspace version in Cargo.toml)"
    )
    args = parser.parse_args()
    if not args.binary.is_file():
        sys.exit(f"build_wheel.py: no binary at {args.binary}")
    print(build(args.binary, args.outdir, args.version or workspace_version()))


if __name__ == "__main__":
    main()
