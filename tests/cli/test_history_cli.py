"""`guideloom log`, `guideloom rollback` and `guideloom expire`, run as a user would (a subprocess)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from guideloom import StreamNumpyFormat, StreamStorage

FMT = StreamNumpyFormat({"tokens": np.uint16})


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guideloom.cli", *args], capture_output=True, text=True)


@pytest.fixture
def grown(tmp_path):
    storage = StreamStorage(tmp_path / "ds", FMT)
    with storage.writer() as w:
        w.append({"tokens": np.arange(10)})
    for i in range(3):
        with storage.writer(append=True) as w:
            w.append({"tokens": np.arange(5) + i})
    return storage


def test_log_prints_the_history_oldest_first_and_marks_the_current(grown):
    out = run_cli("log", grown.location.url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    ids = [s.id for s in grown.snapshots()]
    assert [ids[k] in lines[k] for k in range(4)] == [True] * 4
    assert lines[-1].startswith("* ") and "append" in lines[-1] and "records=4 tokens=25" in lines[-1]
    assert "write" in lines[0] and "parent=-" in lines[0]
    rows = [json.loads(line) for line in run_cli("log", "--json", grown.location.url).stdout.splitlines()]
    assert [r["id"] for r in rows] == ids and rows[1]["parent"] == ids[0]


def test_rollback_then_expire(grown):
    url = grown.location.url
    first = grown.snapshots()[0].id
    out = run_cli("rollback", url, first)
    assert out.returncode == 0, out.stderr
    assert "rollback" in out.stdout and "records=1 tokens=10" in out.stdout
    # the first snapshot's one shard is kept, the three appended ones go (not "+1 -4")
    assert "(+0 -3)" in out.stdout and f"restores={first}" in out.stdout
    assert f"restores={first}" in run_cli("log", url).stdout.splitlines()[-1]
    assert StreamStorage(url, FMT).manifest.total_tokens == 10
    out = run_cli("expire", url, "--keep-last", "4")
    assert out.returncode == 0, out.stderr
    assert "1 snapshot expired" in out.stdout and "younger than --grace 1d stay" in out.stdout
    out = run_cli("expire", url, "--keep-last", "2", "--grace", "0s")  # the fix the line gives
    assert out.returncode == 0, out.stderr
    assert "2 snapshots expired" in out.stdout and "stay" not in out.stdout
    assert len(StreamStorage(url, FMT).snapshots()) == 2
    assert StreamStorage(url, FMT).manifest.total_tokens == 10


def test_bad_input_exits_2_with_the_cause_and_the_fix(grown, tmp_path):
    url = grown.location.url
    out = run_cli("rollback", url, "00000042-abc")
    assert out.returncode == 2 and "has no snapshot '00000042-abc'" in out.stderr
    assert grown.snapshots()[-1].id in out.stderr and "guideloom log" in out.stderr
    out = run_cli("expire", url, "--keep-last", "0")
    assert out.returncode == 2 and "keep_last must be at least 1" in out.stderr
    out = run_cli("expire", url, "--older-than", "soon")
    assert out.returncode == 2 and "like 12h or 7d" in out.stderr
    out = run_cli("log", str(tmp_path / "nothing"))
    assert out.returncode == 2 and "no dataset" in out.stderr


def test_expire_says_how_much_the_grace_period_keeps(grown, tmp_path):
    """#37 (5): the files expire leaves for the grace period are counted with their bytes, and
    they are exactly what the fix it gives (--grace 0s) then deletes (main gave no figure)."""
    url = grown.location.url
    root = tmp_path / "ds"
    assert run_cli("rollback", url, grown.snapshots()[0].id).returncode == 0  # 3 shards unused
    out = run_cli("expire", url, "--keep-last", "1")
    assert out.returncode == 0, out.stderr
    found = re.search(r"stay \(([\d,]+) files?, ([\d,]+) bytes;", out.stdout)
    assert found, out.stdout
    files, size = (int(g.replace(",", "")) for g in found.groups())
    before = {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}
    assert run_cli("expire", url, "--keep-last", "1", "--grace", "0s").returncode == 0
    gone = [p for p in before if not p.exists()]
    assert files == len(gone) >= 3 and size == sum(before[p] for p in gone) > 0
    assert StreamStorage(url, FMT).manifest.total_tokens == 10
