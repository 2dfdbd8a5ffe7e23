"""Row ``rebuilt``: a plain torchdata loader built from GuideLoom's pieces against ``from_storage``.

What a framework (accelerate, Lightning) or a user does: ``torchdata.StatefulDataLoader(view,
batch_sampler=BatchOrder(view, batch_size, shuffle=..., seed=...), num_workers=2)``, the
DataLoader's own default collate, one ``view.__getitems__`` per batch. Measured against
``StatefulDataLoader.from_storage`` with the same settings (same batches, same order), which
groups consecutive batches into one read (read-ahead, sized by bytes) and hands a worker's group
over as one item. The plain loader has no read-ahead: each worker fetches one batch per read,
``prefetch_factor`` (2) batches in flight per worker; the row says how many batches one read of
``from_storage`` fetches (``read_ahead_batches``). Local disk and the S3 server; target 0.9x
against ``from_storage`` at the plain loader's read-ahead (``read_ahead=0``), the default
read-ahead's lead shown beside it (no target: it is what grouping batches buys).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from benchmarks.corpus import stream_format, write_stream
from benchmarks.harness import Config, Row, Stats, stats
from benchmarks.local import local_stream
from benchmarks.loops import count_tokens, timed_pass
from benchmarks.s3env import fresh_bucket, running_endpoint

__all__ = ["rebuilt_rows"]

WORKERS = 2
CASES = ("full", "block")  # the shuffles a training run uses


def _plain(storage: Any, cfg: Config, shuffle: str, read_ahead: bool) -> Any:
    """The plain torchdata loader over a view and its BatchOrder; without ``read_ahead`` the
    view's read-ahead is taken off again (one read per batch: the loader before it had one)."""
    from torchdata.stateful_dataloader import StatefulDataLoader as TorchdataLoader

    from guideloom import BatchOrder
    from guideloom.storage import open_view

    view: Any = open_view(storage, cfg.sequence_length)
    order = BatchOrder(view, cfg.batch_size, shuffle=shuffle, seed=cfg.seed)
    if not read_ahead:
        view._ahead = order._ahead = None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*set_vital.*")
        return TorchdataLoader(view, batch_sampler=order, num_workers=WORKERS)


def _three(runs: list[Callable[[], float]], repeats: int, warmup: bool) -> list[Stats]:
    """Each measurement ``repeats`` times, the order rotated each round (the machine is noisy)."""
    if warmup:
        for run in runs:
            run()
    samples: list[list[float]] = [[] for _ in runs]
    for k in range(repeats):
        for j in range(len(runs)):
            i = (j + k) % len(runs)
            samples[i].append(runs[i]())
    return [stats(s) for s in samples]


def _rows(kind: str, storage: Any, cfg: Config, extra: dict[str, Any]) -> list[Row]:
    """Per shuffle, in one interleaved run: the plain loader with the view's read-ahead (what it
    does now), the same without it (one read and one worker-pipe trip per batch: before), and
    from_storage's loader at its default read-ahead (batches grouped into one read, up to 4 MiB)."""
    from guideloom import StatefulDataLoader

    rows = []
    for shuffle in CASES:
        after = _plain(storage, cfg, shuffle, read_ahead=True)
        before = _plain(storage, cfg, shuffle, read_ahead=False)
        ours = StatefulDataLoader.from_storage(
            storage, sequence_length=cfg.sequence_length, batch_size=cfg.batch_size, shuffle=shuffle,
            seed=cfg.seed, num_workers=WORKERS,
        )  # fmt: skip
        group = ours._grouping
        a, b, o = _three(
            [
                lambda: timed_pass(after, count_tokens).rate,  # noqa: B023 - called right here
                lambda: timed_pass(before, count_tokens).rate,  # noqa: B023
                lambda: timed_pass(ours, count_tokens).rate,  # noqa: B023
            ],
            cfg.repeats,
            warmup=not cfg.quick,
        )
        reads = "a window a read" if group.windows else f"up to {group.size} batches a read"
        for label, mine, target in (("view read-ahead", a, 0.9), ("no read-ahead (before)", b, None)):
            rows.append(
                Row(
                    "rebuilt",
                    f"{kind} shuffle={shuffle} workers={WORKERS}: torchdata(view, batch_sampler=BatchOrder), "
                    f"{label}",
                    "tokens/s",
                    mine,
                    o,
                    f"from_storage's loader, default read-ahead ({reads})",
                    target=target,
                    extra={
                        **extra,
                        "read_ahead_batches": group.size,
                        "plain_read_ahead": (
                            (
                                "a window's batches of this worker a read"
                                if group.windows
                                else f"up to {group.size} of this worker's batches a read"
                            )
                            if target
                            else "1 batch a read"
                        ),
                    },
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
