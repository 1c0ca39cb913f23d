"""The repository README's Python examples (a worker, and a workflow whose
job reads its parents' results), run as written against a real server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from conftest import Server, wait_for
from tether_client import Client

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Using it from Python", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the README's Python section has a python block"
    return str(blocks[0])


def test_the_readme_example_finishes_its_job(
    server: Server, client: Client, tmp_path: Path
) -> None:
    script = tmp_path / "welcome.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = dict(os.environ, TETHER_URL=server.url, TETHER_KEY=server.key)
    proc = subprocess.Popen(
        [sys.executable, str(script)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"enqueued (\S+)", first)
        assert match, first
        job_id = match.group(1)
        wait_for(lambda: client.get(job_id).state == "succeeded", timeout=20)
        assert client.get(job_id).result == {"sent": True}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "sending to ada@example.com" in out, out


def test_the_readme_workflow_example_runs_to_succeeded(
    server: Server, client: Client, tmp_path: Path
) -> None:
    section = README.read_text(encoding="utf-8").split("\n### From Python", 1)[1]
    section = section.split("\n## ", 1)[0].split("\n### ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "the README's graph example from Python has a python block"
    script = tmp_path / "publish.py"
    script.write_text(str(blocks[0]), encoding="utf-8")
    env = dict(os.environ, TETHER_URL=server.url, TETHER_KEY=server.key)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    match = re.search(r"workflow (\S+) publish \S+ waiting", proc.stdout)
    assert match, proc.stdout
    graph = client.get_workflow(match.group(1))
    assert graph.state == "succeeded", graph
    assert sorted(j.kind for j in graph.jobs) == ["notify", "notify", "publish", "thumbnail",
                                                 "thumbnail"]
    assert "succeeded [" in proc.stdout
