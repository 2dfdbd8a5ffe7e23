"""Row ``rebuilt``: a plain torchdata loader built from GuideLoom's pieces against ``from_storage``.

What a framework (accelerate, Lightning) or a user does: ``torchdata.StatefulDataLoader(view,
batch_sampler=BatchOrder(view, batch_size, shuffle=..., seed=...), num_workers=2)``, the
DataLoader's own default collate, one ``view.__getitems__`` per batch. Measured against
``StatefulDataLoader.from_storage`` with the same settings (same batches, same order), which
groups consecutive batches into one read (read-ahead, sized by bytes) and hands a worker's group
over as one item. The plain loader has no read-ahead: each worker fetches one batch per read,
``prefetch_factor`` (2) batches in flight per worker; the row says how many batches one read of
``from_storage`` fetches (``read_ahead_batches``). Local disk and the S3 server; target 0.9x.
"""

from __future__ import annotations

import warnings
from typing import Any

from benchmarks.corpus import stream_format, write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.local import local_stream
from benchmarks.loops import count_tokens, timed_pass
from benchmarks.s3env import fresh_bucket, running_endpoint

__all__ = ["rebuilt_rows"]

WORKERS = 2
CASES = ("full", "block")  # the shuffles a training run uses


def _pair(storage: Any, cfg: Config, shuffle: str) -> tuple[Any, Any, int]:
    """(the plain torchdata loader over the pieces, from_storage's loader, batches per read of the latter)."""
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    from guideloom import BatchOrder, StatefulDataLoader
    from guideloom.storage import open_view

    ours = StatefulDataLoader.from_storage(
        storage, sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=shuffle,
        seed=cfg.seed, num_workers=WORKERS,
    )  # fmt: skip
    view = open_view(storage, cfg.sequence_length)
    order = BatchOrder(view, cfg.batch_size, shuffle=shuffle, seed=cfg.seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        plain = TorchdataLoader(view, batch_sampler=order, num_workers=WORKERS)
    return plain, ours, ours._grouping.size


def _rows(kind: str, storage: Any, cfg: Config, extra: dict[str, Any]) -> list[Row]:
    rows = []
    for shuffle in CASES:
        plain, ours, group = _pair(storage, cfg, shuffle)
        g, b = interleaved(
            lambda: timed_pass(plain, count_tokens).rate,  # noqa: B023 - called right here
            lambda: timed_pass(ours, count_tokens).rate,  # noqa: B023
            cfg.repeats,
            warmup=not cfg.quick,
        )
        rows.append(
            Row(
                "rebuilt",
                f"{kind} shuffle={shuffle} workers={WORKERS}: torchdata(view, batch_sampler=BatchOrder)",
                "tokens/s",
                g,
                b,
                "from_storage's loader",
                target=0.9,
                extra={**extra, "read_ahead_batches": group, "plain_read_ahead_batches": 1},
            )
        )
    return rows


def rebuilt_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    storage, _ = local_stream(cfg)
    rows = _rows("local", storage, cfg, {"tokens": storage.manifest.total_tokens})
    with running_endpoint(endpoint) as (ep, note), fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        remote = write_stream(
            f"s3://{bucket}/stream", cfg.s3_tokens, cfg.seed, cfg.shard_size, storage_options=options
        )
        from guideloom import StreamStorage

        remote = StreamStorage(remote.url, stream_format(), storage_options=options)
        extra: dict[str, Any] = {"tokens": remote.manifest.total_tokens, "server": ep.backend}
        if note:
            extra["server_note"] = note
        rows += _rows("s3", remote, cfg, extra)
    return rows
