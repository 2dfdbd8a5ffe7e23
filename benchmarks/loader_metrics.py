"""Row ``metrics``: what ``loader.metrics()`` costs (issue 35 item 2: <= 1 % of a batch).

The same loader over the same local stream (tokens and a ``loss_mask``, so every batch's mask is
counted), once counting (the default: two clock reads and one ``count_nonzero`` per batch, and
``metrics()`` called every 50 batches as a logging callback would) and once with the meter
replaced by `guideloom.loading.metrics.Uncounted` (the batch path without any counting). Local
disk with ``num_workers=0`` is the cheapest batch GuideLoom makes, so the share is largest there.

``extra`` also gives the time the training loop's thread spends counting per batch, measured
alone (``loop_thread_us``: with ``num_workers=0`` it counts each ``loss_mask`` itself; with
workers it only queues the count the worker made), and its share of the median batch time.
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


def _pass(loader: Any, call_metrics: bool) -> tuple[float, int]:
    """Seconds and batches of one whole pass (every batch's tokens touched, as a loop would)."""
    began = time.perf_counter()
    batches = tokens = 0
    for batch in loader:
        tokens += count_tokens(batch)
        batches += 1
        if call_metrics and batches % EVERY == 0:
            loader.metrics()
    return time.perf_counter() - began, batches


def _loop_thread_us(loader: Any, workers: int) -> float:
    """Microseconds per batch the training loop's thread spends on counting, measured alone over
    one pass's batches held in memory (20 rounds): with ``num_workers=0`` counting each batch's
    ``loss_mask`` there, with workers only queueing the count a worker made, popping it and the
    clock reads."""
    from guideloom.loading.metrics import LoaderMeter, counted

    batches = list(loader)
    rounds = 20
    meter = LoaderMeter(0, 1)
    if workers:
        pairs = [counted(b) for b in batches]  # what the workers hand over
        began = time.perf_counter()
        for _ in range(rounds):
            for _ in meter.taking(iter(pairs)):
                t = time.perf_counter()
                meter.received(time.perf_counter() - t)
    else:
        began = time.perf_counter()
        for _ in range(rounds):
            for _ in meter.counted(iter(batches)):
                t = time.perf_counter()
                meter.received(time.perf_counter() - t)
    return (time.perf_counter() - began) / (rounds * len(batches)) * 1e6


def metrics_rows(cfg: Config) -> list[Row]:
    from guideloom import StatefulDataLoader
    from guideloom.loading.metrics import Uncounted

    storage = _corpus(cfg)
    rows = []
    for shuffle, workers in ((True, 0), (True, 2)):

        def make() -> Any:
            return StatefulDataLoader.from_storage(
                storage, sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=shuffle,  # noqa: B023
                seed=cfg.seed, num_workers=workers,  # noqa: B023
            )  # fmt: skip

        on, off = make(), make()
        off._meter = Uncounted(0, 1)  # the batch path without counting
        seconds: dict[str, list[float]] = {"on": [], "off": []}
        count = {"on": 0}

        def timed(loader: Any, key: str, call: bool) -> float:
            s, n = _pass(loader, call)
            seconds[key].append(s / n)  # noqa: B023
            count["on"] = n  # noqa: B023
            return n / s  # batches per second

        g, b = interleaved(
            lambda: timed(on, "on", True),  # noqa: B023
            lambda: timed(off, "off", False),  # noqa: B023
            cfg.repeats,
            warmup=not cfg.quick,
        )
        alone = _loop_thread_us(make(), workers)
        batch_us = float(np.median(seconds["on"])) * 1e6
        rows.append(
            Row(
                "metrics",
                f"shuffle={'full' if shuffle else 'off'} workers={workers} metrics() every {EVERY}",
                "batches/s",
                g,
                b,
                "same loader, not counting",
                target=0.99,
                extra={
                    "batch_us": round(batch_us, 1),
                    "loop_thread_us": round(alone, 2),
                    "loop_thread_share": round(alone / batch_us, 5),
                    "batches": count["on"],
                },
                checks={"loop's thread <= 1% of a batch": alone / batch_us <= 0.01},
            )
        )
    return rows
