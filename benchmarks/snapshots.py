"""Row ``snapshots``: what an append commit costs as a dataset grows, and what opening costs as
its history grows.

* Append cost: a dataset of 1k / 10k / 100k shards (a synthetic snapshot: one shard table
  piece of n rows; no shard file is read by an append commit), then 10 parts of one real shard
  each are written and ``commit(num_parts=10, append=True)`` is timed. Bytes written = the new
  files under ``snapshots/`` plus the ``manifest.json`` copy. The growth exponent is
  ``log(cost(100k) / cost(1k)) / log(100)`` (0: independent of n; 1: proportional).
* Open cost: a dataset after 1 / 100 / 1,000 single-writer appends of one shard each
  (``--quick``: 1 / 10 / 100) against the same shards written at once; one open is
  ``StreamStorage(url, fmt).manifest`` from a new storage object (best of 5). The exponent is
  that of the ratio in the number of snapshots (0: history costs nothing at open).
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.harness import Config, Row, stats

__all__ = ["snapshot_rows"]

FMT_FIELDS = {"tokens": np.uint16}
TOKENS = 16  # per synthetic shard


def _synthetic(url: Path, shards: int) -> None:
    """A committed dataset of ``shards`` shards (table only: an append never reads them)."""
    from guideloom import StreamNumpyFormat
    from guideloom._version import __version__
    from guideloom.io import Location
    from guideloom.manifest import FileColumn, FormatSpecModel, ShardTable
    from guideloom.manifest.snapshots import Snapshot, SnapshotSummary, snapshot_id
    from guideloom.storage.history import History

    table = ShardTable(
        part=[0] * shards,
        index=list(range(shards)),
        records=[1] * shards,
        tokens=[TOKENS] * shards,
        spans=[0] * shards,
        prefix=["shards/w-synthetic"],
        prefix_id=[0] * shards,
        files={
            "data": FileColumn(
                kind="tokens", size=[32 + 2 * TOKENS] * shards, checksum=["xxh3_64:0000000000000000"] * shards
            )
        },
    )
    history = History(Location(str(url)))
    piece = history.write_piece(table, 1)
    snap = Snapshot(
        id=snapshot_id(1, "5e7e71c0"),  # 8 hex digits, as every snapshot id
        sequence=1,
        parent=None,
        time="2026-01-01T00:00:00+00:00",
        operation="write",
        summary=SnapshotSummary(
            records=shards,
            tokens=shards * TOKENS,
            shards=shards,
            bytes=shards * (32 + 2 * TOKENS),
            added_shards=shards,
            removed_shards=0,
            added_records=shards,
            added_tokens=shards * TOKENS,
        ),
        storage_class="StreamStorage",
        format=FormatSpecModel(**StreamNumpyFormat(FMT_FIELDS).spec()),
        num_parts=1,
        guideloom_version=__version__,
        pieces=(piece,),
    )
    assert history.create(snap)


def _metadata_files(url: Path) -> dict[str, int]:
    files = {str(p): p.stat().st_size for p in (url / "snapshots").rglob("*.json")}
    return files


def _append_cost(url: Path, shards: int) -> tuple[float, int]:
    from guideloom import StreamNumpyFormat, StreamStorage

    shutil.rmtree(url, ignore_errors=True)
    _synthetic(url, shards)
    storage = StreamStorage(url, StreamNumpyFormat(FMT_FIELDS))
    for k in range(10):
        with storage.writer(part=k, run="bench", append=True) as w:
            w.append({"tokens": np.arange(TOKENS, dtype=np.uint16)})
    before = _metadata_files(url)
    t0 = time.perf_counter()
    storage.commit(num_parts=10, run="bench", append=True)
    seconds = time.perf_counter() - t0
    after = _metadata_files(url)
    written = sum(size for path, size in after.items() if path not in before)
    written += (url / "manifest.json").stat().st_size
    assert storage.manifest.num_shards == shards + 10
    return seconds, written


def _open_after(url: Path, appends: int, one_shot: bool = False) -> float:
    """Open time of a dataset of ``appends`` one-shard commits (``one_shot``: the same shards
    written by one writer, the baseline: opening it reads the same shard table in one piece)."""
    from guideloom import StreamNumpyFormat, StreamStorage

    shutil.rmtree(url, ignore_errors=True)
    fmt = StreamNumpyFormat(FMT_FIELDS)
    storage = StreamStorage(url, fmt)
    if one_shot:
        with storage.writer(shard_size=1) as w:  # every record closes its shard
            for _ in range(appends):
                w.append({"tokens": np.arange(TOKENS, dtype=np.uint16)})
    else:
        with storage.writer() as w:
            w.append({"tokens": np.arange(TOKENS, dtype=np.uint16)})
        for _ in range(appends - 1):
            with storage.writer(append=True) as w:
                w.append({"tokens": np.arange(TOKENS, dtype=np.uint16)})
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        opened = StreamStorage(url, fmt)
        _ = opened.manifest
        samples.append(time.perf_counter() - t0)
    assert opened.manifest.num_shards == appends
    return min(samples)


def _exponent(small: float, large: float, span: float) -> float:
    return math.log(large / small) / math.log(span) if small > 0 and large > 0 else float("nan")


def snapshot_rows(cfg: Config) -> list[Row]:
    root = cfg.workdir / "snapshots"
    root.mkdir(parents=True, exist_ok=True)
    sizes = (1_000, 10_000, 100_000)
    cost = {n: _append_cost(root / f"append-{n}", n) for n in sizes}
    counts = (1, 10, 100) if cfg.quick else (1, 100, 1_000)
    opens = {k: _open_after(root / f"open-{k}", k) for k in counts}
    flat = {k: _open_after(root / f"flat-{k}", k, one_shot=True) for k in counts}
    ratios = {k: opens[k] / flat[k] for k in counts}
    lo, hi = sizes[0], sizes[-1]
    bytes_exp = _exponent(cost[lo][1], cost[hi][1], hi / lo)
    time_exp = _exponent(cost[lo][0], cost[hi][0], hi / lo)
    open_exp = _exponent(ratios[counts[0]], ratios[counts[-1]], counts[-1] / counts[0])
    extra_append = {
        "bytes_written": {str(n): cost[n][1] for n in sizes},
        "seconds": {str(n): round(cost[n][0], 5) for n in sizes},
        "bytes_exponent": round(bytes_exp, 3),
        "time_exponent": round(time_exp, 3),
    }
    extra_open = {
        "open_seconds": {str(k): round(opens[k], 5) for k in counts},
        "one_shot_open_seconds": {str(k): round(flat[k], 5) for k in counts},
        "ratio_exponent": round(open_exp, 3),
    }
    return [
        Row(
            "snapshots",
            f"append 10 parts: bytes written at {hi} shards vs {lo}",
            "bytes",
            stats([cost[hi][1]]),
            stats([cost[lo][1]]),
            f"{lo} shards",
            higher_is_better=False,
            target=1.5,
            extra=extra_append,
            checks={"bytes exponent <= 0.1": bytes_exp <= 0.1},
        ),
        Row(
            "snapshots",
            f"open after {counts[-1]} one-shard appends vs the same shards written at once",
            "s",
            stats([opens[counts[-1]]]),
            stats([flat[counts[-1]]]),
            "one snapshot",
            higher_is_better=False,
            extra=extra_open,
            checks={"ratio exponent in the number of snapshots <= 0.3": open_exp <= 0.3},
        ),
    ]
