"""Row ``metrics``: what ``loader.metrics()`` costs (issue 35 item 2: <= 1 % of a batch).

The same loader over the same local stream (tokens and a ``loss_mask``, so every batch's mask is
counted), once counting (the default, and ``metrics()`` called every 50 batches as a logging
callback would) and once with the meter replaced by `guideloom.loading.metrics.Uncounted` (the
batch path without any counting), with ``num_workers=0``, two thread workers and two worker
processes. Local disk with ``num_workers=0`` is the cheapest batch GuideLoom makes, and there
the loop's own thread counts the masks, so the share is largest there.

``extra`` also gives the time the training loop's thread spends counting per batch, measured
alone (``loop_thread_us``, see `_loop_thread_us`) and its share of the median batch time
(``loop_thread_share``: the row's check), and what a worker spends counting per batch
(``worker_count_us``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchmarks.harness import Config, Row, interleaved
from benchmarks.loops import count_tokens

__all__ = ["metrics_rows"]

EVERY = 50  # batches between two metrics() calls (a logging interval)


def _corpus(cfg: Config) -> Any:
    from guideloom import StreamNumpyFormat, StreamStorage

    fmt = StreamNumpyFormat({"tokens": np.uint16, "loss_mask": np.uint8})
    url = str(cfg.workdir / "masked-stream")
    storage = StreamStorage(url, fmt)
    if not storage.exists():
        rng = np.random.default_rng(cfg.seed)
        total, written = min(cfg.tokens, 8_000_000), 0
        with storage.writer(overwrite=True, shard_size=cfg.shard_size) as writer:
            while written < total:
                n = int(rng.integers(200, 4000))
                writer.append(
                    {"tokens": rng.integers(0, 50_000, n, dtype=np.uint16), "loss_mask": rng.random(n) < 0.6}
                )
                written += n
    return StreamStorage(url, fmt)


PASSES = 5  # whole passes per measurement: one pass at num_workers=0 is about 20 ms, too short


def _pass(loader: Any, call_metrics: bool, passes: int = PASSES) -> tuple[float, int, float]:
    """Seconds and batches of ``passes`` whole passes (every batch's tokens touched, as a loop
    would), and the CPU seconds of the loop's thread in them (unlike the wall clock, not
    stretched by other processes of a busy machine)."""
    began, cpu = time.perf_counter(), time.thread_time()
    batches = tokens = 0
    for _ in range(passes):
        for batch in loader:
            tokens += count_tokens(batch)
            batches += 1
            if call_metrics and batches % EVERY == 0:
                loader.metrics()
    return time.perf_counter() - began, batches, time.thread_time() - cpu


def _loop_thread_us(loader: Any, workers: int, threads: bool) -> tuple[float, float]:
    """Microseconds per batch the training loop's thread spends on counting, measured alone
    (the median of 20 rounds over one pass's groups, each group read just before, untimed, so
    its arrays are as warm as right after a real read), and the microseconds per batch a worker spends counting the
    ``loss_mask`` (0 for ``num_workers=0``, where the loop's thread does it and it is in the
    first figure). The loop's thread, per batch: the two clock reads of the wait and two sums;
    with ``num_workers=0`` also its share of the one ``count_nonzero`` over the group's
    ``loss_mask`` (`LoaderMeter.parts`); with thread workers queueing the count a
    worker made of the group; with worker processes queueing each group's counts."""
    from guideloom.loading.collate import collate_windows
    from guideloom.loading.metrics import LoaderMeter, column_masks, counted_group
    from guideloom.loading.passes import Progress

    source = loader.dataset
    groups = list(loader._groups())
    batches = sum(len(g) for g in groups)
    rounds = 20
    meter = LoaderMeter(0, 1)
    clock, cpu = time.perf_counter, time.thread_time  # cpu: this thread's, whatever else runs
    loops, works = [], []
    for _ in range(rounds):
        loop = work = 0.0
        progress = Progress()
        meter.start_pass(progress)
        for group in groups:
            parts = source.read_group(group)  # untimed: read as the loop would, just before
            if workers and threads:
                t = cpu()
                column_masks(parts)
                work += cpu() - t
                finished, made = counted_group(parts, collate_windows, True)
                t = cpu()
                meter.group(made)  # as the loop takes a thread's group
                received: Any = finished
            elif workers:
                counts = [int(np.count_nonzero(p["loss_mask"])) for p in parts]  # as a process sends
                t = cpu()
                meter.expect(counts)
                received = parts
            else:
                t = cpu()
                meter.parts(parts)
                received = parts
            for _ in received:  # the loop's side of each batch: the wait's clock reads and sums
                began = clock()
                progress.received += 1
                progress.wait_s += clock() - began
            loop += cpu() - t
        loops.append(loop)
        works.append(work)
    # the median round: a busy machine's other processes stretch some rounds, not the median
    return float(np.median(loops)) / batches * 1e6, float(np.median(works)) / batches * 1e6


def metrics_rows(cfg: Config) -> list[Row]:
    from guideloom import StatefulDataLoader
    from guideloom.loading.metrics import Uncounted

    storage = _corpus(cfg)
    rows = []
    for shuffle, workers, threads in ((True, 0, False), (True, 2, True), (True, 2, False)):
        kind: dict[str, Any] = {"parallel_method": "thread"} if threads else {}

        def make() -> Any:
            return StatefulDataLoader.from_storage(
                storage, sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=shuffle,  # noqa: B023
                seed=cfg.seed, num_workers=workers, **kind,  # noqa: B023
            )  # fmt: skip

        on, off = make(), make()
        off._meter = Uncounted(0, 1)  # the batch path without counting
        seconds: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        count = {"on": 0}

        def timed(loader: Any, key: str, call: bool) -> float:
            s, n, c = _pass(loader, call, 1 if cfg.quick else PASSES)
            seconds[key].append(s / n)  # noqa: B023
            cpu[key].append(c / n)  # noqa: B023
            count["on"] = n  # noqa: B023  (batches of the measurement's passes)
            return n / s  # batches per second

        g, b = interleaved(
            lambda: timed(on, "on", True),  # noqa: B023
            lambda: timed(off, "off", False),  # noqa: B023
            cfg.repeats,
            warmup=not cfg.quick,
        )
        alone, worker_us = _loop_thread_us(make(), workers, threads)
        batch_us = float(np.median(seconds["on"])) * 1e6
        rows.append(
            Row(
                "metrics",
                f"shuffle={'full' if shuffle else 'off'} workers={workers}{' threads' if threads else ''} "
                f"metrics() every {EVERY}",
                "batches/s",
                g,
                b,
                "same loader, not counting",
                target=0.99,
                extra={
                    "batch_us": round(batch_us, 1),
                    "loop_thread_us": round(alone, 2),
                    "loop_thread_share": round(alone / batch_us, 5),
                    "worker_count_us": round(worker_us, 2),
                    "off_batch_us": round(float(np.median(seconds["off"])) * 1e6, 1),
                    # the loop thread's CPU per batch, counting and not: robust on a busy machine
                    "cpu_on_us": round(float(np.median(cpu["on"])) * 1e6, 2),
                    "cpu_off_us": round(float(np.median(cpu["off"])) * 1e6, 2),
                    "cpu_on_off": round(float(np.median(cpu["on"]) / np.median(cpu["off"])), 4),
                    "batches": count["on"],
                },
                checks={"loop's thread <= 1% of a batch": alone / batch_us <= 0.01},
            )
        )
    return rows
