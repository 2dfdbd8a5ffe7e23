"""Row ``trace``: `guideloom.trace_arrays` of 10,000, 100,000 and 1,000,000 steps (issue 21).

A stream of the local corpus's size is written once (shuffled order, batch 8, 2048-token
windows); the state of a fresh loader over it is traced for each step count, with no data read.
The row reports the seconds for a million steps and the growth exponent of the time over the two
orders of magnitude (1 is linear: the order is closed form, no loader is replayed).
"""

from __future__ import annotations

import shutil
import time

import numpy as np

from benchmarks.corpus import stream_format
from benchmarks.harness import Config, Row, stats
from benchmarks.scale import exponent

__all__ = ["trace_rows"]

STEPS = (10_000, 100_000, 1_000_000)


def trace_rows(cfg: Config) -> list[Row]:
    import guideloom
    from guideloom import StatefulDataLoader, StreamStorage

    target = cfg.workdir / "trace-stream"
    shutil.rmtree(target, ignore_errors=True)
    storage = StreamStorage(str(target), stream_format())
    rng = np.random.default_rng(cfg.seed)
    with storage.writer(shard_size=cfg.shard_size) as writer:
        for _ in range(64):
            writer.append({"tokens": rng.integers(0, 50_000, 2048 * 64, dtype=np.uint16)})
    loader = StatefulDataLoader.from_storage(
        StreamStorage(str(target), stream_format()), sequence_length=2048, batch_size=8, shuffle=True
    )
    state = loader.state_dict()
    steps = STEPS[:2] if cfg.quick else STEPS
    seconds: list[float] = []
    for n in steps:
        runs = []
        for _ in range(max(1, cfg.repeats)):
            t = time.perf_counter()
            arrays = guideloom.trace_arrays(state, storage, steps=range(n))
            runs.append(time.perf_counter() - t)
            assert len(arrays) == 8 * n
        seconds.append(min(runs))
    shutil.rmtree(target, ignore_errors=True)
    growth = exponent(steps, seconds)
    last = stats([steps[-1] / seconds[-1]])
    return [
        Row(
            "trace",
            f"trace_arrays of {steps[-1]:,} steps (8 rows each), growth over {steps[0]:,}..{steps[-1]:,}",
            "steps/s",
            last,
            stats([steps[0] / seconds[0]]),
            f"{steps[0]:,} steps",
            extra={"seconds": dict(zip(map(str, steps), seconds)), "growth_exponent": round(growth, 3)},
        )
    ]
