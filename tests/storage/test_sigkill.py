"""Appending jobs killed with SIGKILL at random moments, then re-run: a real process dies, not a
simulated one (`test_snapshots.py` stops a commit after each storage write in process).

A child process runs a fixed list of append jobs, each two parts then `commit(..., append=True)`
under its own run name, the way ingestion appends. The test kills it with SIGKILL at a random
point, checks what a reader sees (a whole number of jobs, in order, every file verified), re-runs
the same child to the end, and checks that every job landed exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

ROOT = Path(__file__).resolve().parents[2]
FMT = StreamNumpyFormat(fields={"tokens": "uint16"})
JOBS = 12
RECORDS = 3  # per part; two parts per job
WINDOW = 5

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from guideloom import StreamNumpyFormat, StreamStorage

    url, options, jobs, records = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    fmt = StreamNumpyFormat(fields={"tokens": "uint16"})

    def part_records(job, part):
        base = 1000 * job + 100 * part
        return [np.arange(base + 10 * r, base + 10 * r + 7, dtype=np.uint16) for r in range(records)]

    storage = StreamStorage(url, fmt, storage_options=options)
    if not storage.exists():
        with storage.writer(shard_size=64) as w:
            w.append({"tokens": np.arange(7, dtype=np.uint16)})
    print("ready", flush=True)
    for job in range(jobs):
        run = f"job-{job}"
        storage.refresh()
        for part in range(2):
            if storage.part_complete(part, run=run):
                continue  # written before a crash: only the commit is left
            with storage.writer(part=part, run=run, shard_size=64, append=True) as w:
                for tokens in part_records(job, part):
                    w.append({"tokens": tokens})
        storage.commit(num_parts=2, run=run, append=True)
        print("committed", job, flush=True)
    """
)


def _expected(jobs: int) -> np.ndarray:
    """The stream after the seed write and the first ``jobs`` jobs, each exactly once."""
    pieces = [np.arange(7, dtype=np.uint16)]
    for job in range(jobs):
        for part in range(2):
            base = 1000 * job + 100 * part
            pieces += [np.arange(base + 10 * r, base + 10 * r + 7, dtype=np.uint16) for r in range(RECORDS)]
    return np.concatenate(pieces)


def _stream(url: str, options: dict) -> np.ndarray:
    storage = StreamStorage(url, FMT, storage_options=options)
    ds = StreamDataset(storage, WINDOW)
    windows = ds.read_windows(list(range(len(ds))))["tokens"]
    return windows.reshape(-1)


def _child(url: str, options: dict) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, url, json.dumps(options), str(JOBS), str(RECORDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _kill_at_random(
    url: str, options: dict, rng: random.Random, first: int, per_job: float
) -> tuple[int, bool]:
    """Start the child and SIGKILL it at a random moment of a random job from ``first`` on (after
    the child reports the job before it committed, a random fraction of a job's time later): the
    jobs it reported committed, and whether the kill came before it finished."""
    child = _child(url, options)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "ready", child.stderr.read() if child.stderr else line
    target = rng.randrange(first, JOBS)
    seen = 0
    while seen < target:  # the jobs before the target (landed ones re-commit as no-ops)
        line = child.stdout.readline()
        if not line:
            break
        seen += line.startswith("committed")
    time.sleep(rng.uniform(0, per_job))
    child.send_signal(signal.SIGKILL)
    out, err = child.communicate(timeout=60)
    assert child.returncode in (0, -signal.SIGKILL), err
    return seen + sum(1 for ln in out.splitlines() if ln.startswith("committed")), child.returncode != 0


def _whole_jobs(stream: np.ndarray) -> int:
    """How many whole jobs ``stream`` holds, asserting it is exactly the seed plus those jobs."""
    per_job = 2 * RECORDS * 7
    tokens = stream.size
    # windows drop a last partial window; the stream holds 7 + per_job * k tokens before that
    for k in range(JOBS + 1):
        if (7 + per_job * k) // WINDOW * WINDOW == tokens:
            assert np.array_equal(stream, _expected(k)[:tokens]), f"not the first {k} jobs in order"
            return k
    raise AssertionError(f"{tokens} tokens is not a whole number of jobs")


def _seconds_per_job(url: str, options: dict) -> float:
    """Seconds one job takes in a whole uninterrupted run of the child (into a throwaway
    dataset), from its ready line to its end."""
    child = _child(url, options)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    start = time.monotonic()
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    return (time.monotonic() - start) / JOBS


def _check_kill_and_rerun(url: str, options: dict, trials: int, per_job: float, seed: int) -> None:
    rng = random.Random(seed)
    landed_before = 0
    kills = 0
    for _ in range(trials):
        reported, killed = _kill_at_random(url, options, rng, min(landed_before, JOBS - 1), per_job)
        kills += killed
        storage = StreamStorage(url, FMT, storage_options=options)
        bad = [(shard, err) for shard, err in storage.verify(checksums=True) if err is not None]
        assert not bad, bad
        jobs = _whole_jobs(_stream(url, options))
        # every job the child saw committed is there (each child goes through the jobs from the
        # first, re-committing landed ones as no-ops), and an earlier trial's; at most one more
        # (killed after its commit landed, before it could say so)
        floor = max(reported, landed_before)
        assert floor <= jobs <= floor + 1, (reported, landed_before, jobs)
        landed_before = jobs
        ops = [s.operation for s in storage.snapshots()]
        assert ops[0] == "write" and set(ops[1:]) <= {"append"} and len(ops) == 1 + jobs
    assert kills >= trials - 1, f"only {kills} of {trials} children were killed before they finished"
    rerun = _child(url, options)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert _whole_jobs(_stream(url, options)) == JOBS
    storage = StreamStorage(url, FMT, storage_options=options)
    assert [s.operation for s in storage.snapshots()] == ["write"] + ["append"] * JOBS
    assert storage.manifest.total_records == 1 + JOBS * 2 * RECORDS


@pytest.mark.slow
def test_appends_killed_at_random_moments_land_once_each_on_local_disk(tmp_path):
    per_job = _seconds_per_job(str(tmp_path / "timing"), {})
    _check_kill_and_rerun(str(tmp_path / "ds"), {}, trials=6, per_job=per_job, seed=1)


@pytest.mark.s3
@pytest.mark.slow
def test_appends_killed_at_random_moments_land_once_each_on_s3(s3_bucket, s3_options, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "JOBS", 6)  # each commit is a few requests here
    options = dict(s3_options)
    per_job = _seconds_per_job(f"s3://{s3_bucket}/timing", options)
    _check_kill_and_rerun(f"s3://{s3_bucket}/ds", options, trials=3, per_job=per_job, seed=2)
