"""Where `guideloom ingest` runs and how it stops: a dead cluster address fails fast, Ctrl-C
cancels cleanly (exit 130, one line, no Ray crash text) and a re-run finishes the dataset; the
command is always listed (a user's own `workers` package changes nothing) and says how to install
the `ray` extra when it is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ingest_hooks import hooks_env

from guideloom.workers.ingest import ingest_dataset

REPO = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", **extra})
    return env


def _cli(*args: str, env: dict[str, str], timeout: float = 120, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "guideloom.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _dead_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("how", ["env", "flag"])
def test_a_dead_cluster_address_fails_fast_and_says_how_to_run_locally(tmp_path, how):
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    address = f"127.0.0.1:{_dead_port()}"
    args = ["ingest", str(data), "--output", str(tmp_path / "o"), "--quiet"]
    env = _env(RAY_ADDRESS=address) if how == "env" else _env()
    if how == "flag":
        args += ["--ray-address", address]
    started = time.monotonic()
    run = _cli(*args, env=env, timeout=60)
    assert time.monotonic() - started < 30
    assert run.returncode == 1, run.stderr
    source = "RAY_ADDRESS" if how == "env" else "--ray-address"
    assert f"no Ray cluster answers at {address} ({source} {address})" in run.stderr
    assert "to run on a local Ray" in run.stderr and "Traceback" not in run.stderr


def test_a_stale_session_file_with_auto_fails_fast(tmp_path):
    """`ray start` left /tmp/ray/ray_current_cluster behind and the cluster is gone; and `auto`
    with no session file at all (never "any Ray process running here")."""
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    args = ["ingest", str(data), "--output", str(tmp_path / "o"), "--ray-address", "auto"]
    run = _cli(*args, env=_env(RAY_TMPDIR=str(tmp_path)), timeout=60)
    assert run.returncode == 1 and "--ray-address auto: no running cluster recorded in" in run.stderr
    assert "a cluster started with `ray start --temp-dir DIR` records its address in" in run.stderr
    (tmp_path / "ray").mkdir()
    dead = f"127.0.0.1:{_dead_port()}"
    (tmp_path / "ray" / "ray_current_cluster").write_text(dead)
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    run = _cli(
        "ingest",
        str(data),
        "--output",
        str(tmp_path / "o"),
        "--ray-address",
        "auto",
        env=_env(RAY_TMPDIR=str(tmp_path)),
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    recorded = tmp_path / "ray" / "ray_current_cluster"
    assert (
        f"no Ray cluster answers at {dead} (--ray-address auto, recorded in {recorded} {dead})" in run.stderr
    )
    # the cause a --temp-dir cluster gives, and the address to pass instead
    assert (
        'DIR/ray_current_cluster, not here: give it as --ray-address "$(cat DIR/ray_current_cluster)"'
        in run.stderr
    )


def test_a_dashboard_address_is_explained(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    run = _cli(
        "ingest", str(data), "--output", str(tmp_path / "o"), env=_env(RAY_ADDRESS="http://127.0.0.1:8265")
    )
    assert run.returncode == 1 and "is a dashboard (Jobs API) address: submit the command with" in run.stderr


@pytest.mark.ray
@pytest.mark.slow
def test_ctrl_c_cancels_prints_one_line_exits_130_and_a_rerun_finishes(tmp_path, ray_local):
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(400)))
    out = tmp_path / "ds"
    args = [str(data), "--output", str(out), "--part-size", "8KiB", "--num-workers", "2", "--quiet"]
    log = tmp_path / "driver.log"
    with log.open("w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, "-m", "guideloom.cli", "ingest", *args],
            env=_env(**hooks_env(part_delay_s=1)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its own terminal group
        )
    try:
        deadline = time.monotonic() + 120
        while not list((out / "parts").glob("r-*/part-*.json")):  # a part's completion record
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no part completed in time"
            time.sleep(0.1)
        os.killpg(driver.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        assert driver.wait(timeout=60) == 130, log.read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    text = log.read_text()
    lines = [line for line in text.splitlines() if "interrupted:" in line]
    assert len(lines) == 1 and "parts are written and kept; run the same command again" in lines[0], text
    for crash in ("task_manager", "bug in Ray", "Traceback", "SIGINT received", "KeyboardInterrupt"):
        assert crash not in text, text[-3000:]
    assert not (out / "manifest.json").exists()
    resumed = ingest_dataset(config=None, inputs=[str(data)], output=str(out), part_size=8192)
    reference = ingest_dataset(inputs=[str(data)], output=str(tmp_path / "ref"), part_size=8192)
    assert [(s.files["data"].checksum, s.size) for s in resumed.manifest.shards] == [
        (s.files["data"].checksum, s.size) for s in reference.manifest.shards
    ]
    assert resumed.documents == 400 and not resumed.already_committed


def test_a_users_own_workers_package_changes_nothing(tmp_path):
    own = tmp_path / "workers"
    own.mkdir()
    (own / "__init__.py").write_text("raise ImportError('this is the user\\'s own workers package')\n")
    (own / "cli.py").write_text("def register(app):\n    pass\n")
    env = _env(PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    run = _cli("--help", env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    for command in ("inspect", "verify", "ingest"):
        assert command in run.stdout, run.stdout
    run = _cli("ingest", "--help", env=env, cwd=tmp_path)
    assert run.returncode == 0 and "--num-workers" in run.stdout


def test_without_the_ray_extra_the_command_says_how_to_install_it(tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n')
    code = (
        "import sys; sys.modules['ray'] = None  # as if ray were not installed\n"
        "from guideloom.cli import main; sys.argv = ['guideloom', *sys.argv[1:]]; main()"
    )
    help_run = subprocess.run(
        [sys.executable, "-c", code, "--help"], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert "ingest" in help_run.stdout
    run = subprocess.run(
        [sys.executable, "-c", code, "ingest", str(data), "--output", str(tmp_path / "o")],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1
    assert 'guideloom ingest needs the ray extra: pip install "guideloom[ray]"' in run.stderr
    assert "missing module 'ray'" in run.stderr and "Traceback" not in run.stderr
