"""Rows ``local``, ``documents`` and ``meta``: reading from local disk through the loader.

- ``local``: loader tokens/s over a stream, shuffle off and on, ``num_workers`` 0 and 2, against a
  raw ``np.memmap`` gather of the same windows through a plain DataLoader with the same settings.
- ``documents``: loader records/s against decoding the same encoded records out of a memory map.
- ``threads``: 2 thread workers against ``num_workers=0`` and against 2 process workers.
- ``meta``: a stream with metadata (one annotated span per document) against the same windows
  read as a plain stream; both through GuideLoom.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.corpus import write_documents, write_meta_stream, write_stream
from benchmarks.harness import Config, Row, Stats, interleaved
from benchmarks.loops import (
    RawDocuments,
    RawWindows,
    count_records,
    count_tokens,
    raw_loader,
    timed_pass,
)

__all__ = ["boundaries_rows", "documents_rows", "local_stream", "local_rows", "meta_rows", "thread_rows"]

LOCAL_CASES = [(False, 0), (True, 0), (False, 2), (True, 2)]  # (shuffle, num_workers)


def local_stream(cfg: Config) -> tuple[Any, str]:
    """The local stream corpus and its raw copy (written once per run)."""
    url = str(cfg.workdir / "stream")
    raw = cfg.workdir / "stream.u16"
    if not raw.exists():
        write_stream(url, cfg.tokens, cfg.seed, cfg.shard_size, raw_path=raw)
    from benchmarks.corpus import stream_format
    from guideloom import StreamStorage

    return StreamStorage(url, stream_format()), str(raw)


def _loader(storage: Any, cfg: Config, shuffle: Any, num_workers: int, **kwargs: Any) -> Any:
    from guideloom import StatefulDataLoader

    seq = None if storage.layout == "documents" else cfg.sequence_length
    return StatefulDataLoader.from_storage(
        storage,
        sequence_length=seq,
        batch_size=cfg.batch_size,
        shuffle=shuffle,
        seed=cfg.seed,
        num_workers=num_workers,
        **kwargs,
    )


def _case(shuffle: Any, workers: int) -> str:
    name = {False: "off", True: "full"}.get(shuffle, shuffle)
    return f"shuffle={name} workers={workers}"


def _race(ours: Any, theirs: Any, count: Callable[[Any], int], cfg: Config) -> tuple[Stats, Stats]:
    """Whole passes of two loaders, interleaved; each figure is items per second."""
    return interleaved(
        lambda: timed_pass(ours, count).rate,
        lambda: timed_pass(theirs, count).rate,
        cfg.repeats,
        warmup=not cfg.quick,
    )


def local_rows(cfg: Config) -> list[Row]:
    storage, raw = local_stream(cfg)
    rows = []
    for shuffle, workers in LOCAL_CASES:
        ours_loader = _loader(storage, cfg, shuffle, workers)
        raw_ds = RawWindows(raw, cfg.sequence_length, np.uint16, np.int32)
        theirs_loader = raw_loader(raw_ds, cfg.batch_size, shuffle, cfg.seed, workers)
        first: dict[str, list[float]] = {"guideloom": [], "baseline": []}

        def ours() -> float:
            p = timed_pass(ours_loader, count_tokens)  # noqa: B023 - called within this iteration
            first["guideloom"].append(p.first_batch_s)  # noqa: B023 - called within this iteration
            return p.rate

        def theirs() -> float:
            p = timed_pass(theirs_loader, count_tokens)  # noqa: B023 - called within this iteration
            first["baseline"].append(p.first_batch_s)  # noqa: B023 - called within this iteration
            return p.rate

        g, b = interleaved(ours, theirs, cfg.repeats, warmup=not cfg.quick)
        rows.append(
            Row(
                "local",
                _case(shuffle, workers),
                "tokens/s",
                g,
                b,
                "raw np.memmap gather",
                target=0.8,
                extra={
                    "first_batch_s": float(np.median(first["guideloom"])),
                    "baseline_first_batch_s": float(np.median(first["baseline"])),
                    "tokens": storage.manifest.total_tokens,
                },
            )
        )
    return rows


def documents_rows(cfg: Config) -> list[Row]:
    from guideloom import DocumentMsgpackFormat

    url = str(cfg.workdir / "documents")
    storage, raw = write_documents(url, cfg.workdir / "raw-docs", cfg.documents, cfg.seed, cfg.shard_size)
    decode = DocumentMsgpackFormat().decode
    rows = []
    for shuffle, workers in LOCAL_CASES:
        ours_loader = _loader(storage, cfg, shuffle, workers)
        theirs_loader = raw_loader(
            RawDocuments(str(raw.data_path), raw.offsets, decode), cfg.batch_size, shuffle, cfg.seed, workers
        )
        g, b = _race(ours_loader, theirs_loader, count_records, cfg)
        rows.append(
            Row(
                "documents",
                _case(shuffle, workers),
                "records/s",
                g,
                b,
                "raw decode from np.memmap",
                target=0.8,
                extra={"records": storage.manifest.total_records},
            )
        )
    return rows


def meta_rows(cfg: Config) -> list[Row]:
    plain, _ = local_stream(cfg)
    meta = write_meta_stream(str(cfg.workdir / "meta"), cfg.tokens, cfg.seed, cfg.shard_size)
    rows = []
    for shuffle, workers in [(False, 0), (True, 0)]:
        ours_loader = _loader(meta, cfg, shuffle, workers)
        theirs_loader = _loader(plain, cfg, shuffle, workers)
        g, b = _race(ours_loader, theirs_loader, count_tokens, cfg)
        rows.append(
            Row(
                "meta",
                _case(shuffle, workers),
                "tokens/s",
                g,
                b,
                "same windows, plain stream",
                extra={"spans": meta.manifest.total_records},
            )
        )
    return rows


THREAD_CASES = [False, True]  # shuffle off / full, 2 workers


def thread_rows(cfg: Config) -> list[Row]:
    """Row ``threads``: 2 thread workers against ``num_workers=0`` and against 2 process workers.

    All three are GuideLoom's loader over the local stream corpus, same batches; only the kind
    of worker differs. Targets (issue 14): >= 1.5x of ``num_workers=0`` and >= 2x of processes.
    """
    storage, _ = local_stream(cfg)
    rows = []
    for shuffle in THREAD_CASES:
        threads = _loader(storage, cfg, shuffle, 2, parallel_method="thread")
        for name, other, target in (
            ("num_workers=0", _loader(storage, cfg, shuffle, 0), 1.5),
            ("2 process workers", _loader(storage, cfg, shuffle, 2), 2.0),
        ):
            g, b = _race(threads, other, count_tokens, cfg)
            rows.append(
                Row(
                    "threads",
                    f"shuffle={'full' if shuffle else 'off'} 2 threads vs {name}",
                    "tokens/s",
                    g,
                    b,
                    f"GuideLoom, {name}",
                    target=target,
                    extra={"tokens": storage.manifest.total_tokens},
                )
            )
    return rows


def boundaries_rows(cfg: Config) -> list[Row]:
    """Row ``boundaries``: the loader with ``boundaries="records", labels=True`` (position ids,
    labels, cu_seqlens from the stored record starts) against the same loader without, over the
    local stream corpus, same batches. Target (issue 21): >= 0.9x. Also the size of the
    record-start index against the stream's token bytes (issue 20: at most 2 %)."""
    storage, _ = local_stream(cfg)
    table = storage.manifest.shard_table
    starts = sum(table.files["starts"].size) if "starts" in table.files else 0
    share = starts / max(1, sum(table.files["data"].size))
    rows = []
    for shuffle, workers in ((True, 0), (True, 2)):
        marked = _loader(storage, cfg, shuffle, workers, boundaries="records", labels=True)
        plain = _loader(storage, cfg, shuffle, workers)
        g, b = _race(marked, plain, count_tokens, cfg)
        rows.append(
            Row(
                "boundaries",
                _case(shuffle, workers) + ' boundaries="records" labels=True',
                "tokens/s",
                g,
                b,
                "same loader, no boundaries",
                target=0.9,
                extra={
                    "records": storage.manifest.total_records,
                    "record_start_bytes_share": round(share, 5),
                },
                checks={"record starts <= 2% of token bytes": share <= 0.02},
            )
        )
    return rows
