"""Row ``open``: time to open a dataset of 10,000 shards (manifest read, first window) against 10.

Both datasets hold the same stream (``open_shards`` documents of 2,048 tokens); only the shard
count differs. One open is ``StreamStorage(url, format)`` (reads and validates the manifest) +
``StreamDataset(storage, 2048)`` + ``ds[0]``, each time from a new storage object, so nothing is
cached between repeats but the operating system's page cache.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.corpus import VOCAB, stream_format
from benchmarks.harness import Config, Row, interleaved

__all__ = ["open_rows"]

SMALL_SHARDS = 10
TOKENS_PER_DOCUMENT = 2048


def _write(url: str, documents: int, shards: int, seed: int) -> None:
    from guideloom import StreamStorage

    storage = StreamStorage(url, stream_format())
    rng = np.random.default_rng(seed)
    per_shard = -(-documents // shards)
    with storage.writer(overwrite=True, shard_size=per_shard * TOKENS_PER_DOCUMENT * 2) as writer:
        for _ in range(documents):
            writer.append({"tokens": rng.integers(0, VOCAB, TOKENS_PER_DOCUMENT, dtype=np.uint16)})


def _open_seconds(url: str, sequence_length: int) -> float:
    from guideloom import StreamDataset, StreamStorage

    t0 = time.perf_counter()
    storage = StreamStorage(url, stream_format())
    ds = StreamDataset(storage, sequence_length=sequence_length)
    ds[0]
    return time.perf_counter() - t0


def open_rows(cfg: Config) -> list[Row]:
    many, few = str(cfg.workdir / "open-many"), str(cfg.workdir / "open-few")
    t0 = time.perf_counter()
    _write(many, cfg.open_shards, cfg.open_shards, cfg.seed)
    write_s = time.perf_counter() - t0
    _write(few, cfg.open_shards, SMALL_SHARDS, cfg.seed)
    from guideloom import StreamStorage

    counts = (
        len(StreamStorage(many, stream_format()).manifest.shards),
        len(StreamStorage(few, stream_format()).manifest.shards),
    )
    g, b = interleaved(
        lambda: _open_seconds(many, cfg.sequence_length),
        lambda: _open_seconds(few, cfg.sequence_length),
        max(cfg.repeats, 3),
        warmup=not cfg.quick,
    )
    manifest_bytes = (cfg.workdir / "open-many" / "manifest.json").stat().st_size
    return [
        Row(
            "open",
            f"local, {counts[0]} shards vs {counts[1]}",
            "s",
            g,
            b,
            f"{counts[1]} shards",
            higher_is_better=False,
            target=2.0,
            extra={
                "shards": counts[0],
                "baseline_shards": counts[1],
                "manifest_bytes": manifest_bytes,
                "write_seconds": write_s,
            },
        )
    ]
