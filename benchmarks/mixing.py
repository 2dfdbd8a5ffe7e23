"""Row ``mix``: a weighted mixture of three local streams against one stream of the same total size.

The corpus of the ``local`` row (``cfg.tokens`` tokens) is written a second time as three streams
of 60 %, 30 % and 10 % of it, mixed with weights proportional to their sizes, so one mixture
epoch reads every window about once, like one epoch of the single stream. Both loaders shuffle
fully, with ``num_workers=0`` and the same batch size, interleaved in one run: the ratio is the
cost of the mixture's order arithmetic and of reading each batch from several sources.

Besides the wall-clock ratio, each case reports ``cpu_ratio``: tokens per CPU second
(``time.process_time``, over the same passes) of the mixture over the single stream's. On a shared machine it moves
far less than wall-clock throughput, since time spent waiting for other processes' turns on
the cores does not count.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.corpus import stream_format, write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.local import local_stream
from benchmarks.loops import count_tokens, timed_pass

__all__ = ["mix_rows"]

SPLIT = (0.6, 0.3, 0.1)  # shares of the corpus in each source


def _sources(cfg: Config) -> list[Any]:
    from guideloom import StreamStorage

    out = []
    for k, share in enumerate(SPLIT):
        url = str(cfg.workdir / f"mix-{k}")
        storage = StreamStorage(url, stream_format())
        if not storage.exists():
            write_stream(url, int(cfg.tokens * share), cfg.seed + 1 + k, cfg.shard_size)
        out.append(StreamStorage(url, stream_format()))
    return out


def mix_rows(cfg: Config) -> list[Row]:
    from guideloom import Mixture, StatefulDataLoader

    single, _ = local_stream(cfg)
    sources = _sources(cfg)
    mixture = Mixture({f"source {k}": (s, share) for k, (s, share) in enumerate(zip(sources, SPLIT))})
    settings: dict[str, Any] = dict(
        sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=True, seed=cfg.seed
    )
    rows = []

    def measured(loader: Any, cpu: list[float]) -> Callable[[], float]:
        def one_pass() -> float:
            t0 = time.process_time()
            rate = timed_pass(loader, count_tokens).rate
            cpu.append(time.process_time() - t0)
            return rate

        return one_pass

    # defaults (both read ahead by bytes), then both with a fixed group of 8 batches
    for case, read_ahead in (("defaults", None), ("both read_ahead=7", 7)):
        ours = StatefulDataLoader.from_storage(mixture, read_ahead=read_ahead, **settings)
        theirs = StatefulDataLoader.from_storage(single, read_ahead=read_ahead, **settings)
        cpu_ours: list[float] = []
        cpu_theirs: list[float] = []
        g, b = interleaved(
            measured(ours, cpu_ours), measured(theirs, cpu_theirs), cfg.repeats, warmup=not cfg.quick
        )
        # tokens per CPU second, ours over theirs, over the timed passes (a warm-up came first)
        per_cpu = [
            windows / statistics.median(cpu[0 if cfg.quick else 1 :])  # every pass but the warm-up
            for windows, cpu in ((ours.view.plan.epoch_length, cpu_ours), (len(theirs.view), cpu_theirs))
        ]
        cpu_ratio = per_cpu[0] / per_cpu[1]
        plan = ours.view.plan
        rows.append(
            Row(
                "mix",
                f"3 sources, shuffle=full workers=0, {case}",
                "tokens/s",
                g,
                b,
                "one stream of the same size",
                target=0.9,
                extra={
                    "epoch_windows": plan.epoch_length,
                    "single_windows": len(theirs.view),
                    "repeats": [round(r, 3) for r in plan.repeats],
                    "cpu_ratio": round(cpu_ratio, 3),
                },
            )
        )
    return rows
