"""The local two-node cluster steps of docs/ingestion-with-ray.md, run as written with bash from
the repository root (only the bucket name replaced by the session's): activate the venv, free
ports, a temp dir of its own, `ray job submit` of the documented ingest, and the stop of that one
cluster by its own process groups. Beside it, the messages around it: a busy port named, and
`--ray-address auto` against a cluster with its own `--temp-dir`."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from guideloom.storage.checks import read_manifest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "ingestion-with-ray.md"
MARK = "<!-- not-runnable: a two-node cluster; tests/workers/test_cluster_docs.py runs it as written -->"


def _steps() -> str:
    text = PAGE.read_text()
    after = text[text.index(MARK) + len(MARK) :]
    block = re.search(r"```bash\n(.*?)```", after, re.S)
    assert block is not None
    return block.group(1)


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.s3
def test_the_documented_cluster_steps_run_as_written(s3_endpoint, s3_bucket, s3_options, tmp_path):
    script = _steps()
    assert script.startswith(". .venv/bin/activate") and "ray stop" not in script
    env = {k: v for k, v in os.environ.items() if k not in {"RAY_ADDRESS", "GUIDELOOM_TEST_S3_ENDPOINT"}}
    env.update(
        AWS_ENDPOINT_URL=s3_endpoint.url,
        AWS_ACCESS_KEY_ID=s3_endpoint.key,
        AWS_SECRET_ACCESS_KEY=s3_endpoint.secret,
        AWS_DEFAULT_REGION="us-east-1",
        PYTHONPATH=str(REPO),  # this worktree's guideloom (a fresh clone's venv has it installed)
        PATH="/usr/bin:/bin",  # nothing of the venv on PATH until the block activates it
    )
    script = script.replace("s3://my-bucket/", f"s3://{s3_bucket}/")
    run = subprocess.run(
        ["bash", "-e", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=400
    )
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    assert "running on the Ray cluster at" in log
    manifest = read_manifest(f"s3://{s3_bucket}/kjv-bytes", s3_options)[1]
    assert manifest.shards and sum(s.records for s in manifest.shards) > 0
    temp = re.findall(r"/tmp/gl-ray-\w+", log)
    assert all(not Path(t).exists() for t in temp)  # the block removed its temp dir


def test_a_busy_port_is_named_with_the_fix():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        run = subprocess.run(
            [sys.executable, "-m", "guideloom.workers.ports", "--check", str(port)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 1
    assert f"port {port} on 127.0.0.1 is in use" in run.stderr
    assert "Session name ... does not match persisted value" in run.stderr
    fix = re.search(r"`(python -m guideloom.workers.ports \d+)`", run.stderr)
    assert fix is not None
    free = subprocess.run(
        [sys.executable, *fix.group(1).split()[1:]],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    (new,) = (int(p) for p in free.stdout.split())
    assert new != port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", new))  # the port it printed is free
