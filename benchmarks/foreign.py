"""Row ``foreign``: windows from a Megatron ``.bin``/``.idx`` pair read in place (issue 33).

The same tokens (the local corpus's documents, one Megatron sequence each) are written twice: as
a GuideLoom stream and as a Megatron pair. Cases:

- ``local``: GuideLoom's loader over the pair (``guideloom.open(PREFIX.idx)``) against the same
  loader over the native stream (target >= 0.9x), full shuffle, ``num_workers`` 0;
- ``local vs megatron-core``: the same loader against megatron-core's own ``IndexedDataset``
  reading the same windows with ``get(sequence, offset, length)`` per piece of a window (as its
  ``GPTDataset`` stitches a sample from several documents), in a plain DataLoader with the same
  batches; only where megatron-core imports (``pip install megatron-core``: the dev extra);
- ``s3``: the pair and the stream on the S3 server (block shuffle, 2 workers), target >= 0.9x.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from benchmarks.corpus import _documents, write_stream
from benchmarks.harness import Config, Row, interleaved
from benchmarks.local import local_stream
from benchmarks.loops import count_tokens, raw_loader, timed_pass
from benchmarks.s3env import fresh_bucket, running_endpoint

__all__ = ["foreign_rows"]

WORKERS = 2


def _megatron_pair(prefix: str, tokens: int, seed: int, options: dict[str, Any] | None = None) -> None:
    from guideloom.storage.foreign.export import write_megatron

    write_megatron(prefix, _documents(tokens, seed), np.uint16, storage_options=options)


def _loader(storage: Any, cfg: Config, shuffle: Any, workers: int) -> Any:
    from guideloom import StatefulDataLoader

    return StatefulDataLoader.from_storage(
        storage,
        sequence_length=cfg.sequence_length,
        batch_size=cfg.batch_size,
        shuffle=shuffle,
        seed=cfg.seed,
        num_workers=workers,
    )


class MegatronCoreWindows:
    """Baseline: windows of ``length`` tokens across documents, read with megatron-core's
    ``IndexedDataset.get(sequence, offset, length)`` for each document a window touches."""

    def __init__(self, prefix: str, length: int) -> None:
        self.prefix, self.length = prefix, length
        self._ds: Any = None
        self._pid = -1

    def _open(self) -> Any:
        if self._ds is None or self._pid != os.getpid():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # megatron-core warns that Apex / TE are absent
                from megatron.core.datasets.indexed_dataset import IndexedDataset

            self._ds, self._pid = IndexedDataset(self.prefix), os.getpid()
            self._starts = np.concatenate([[0], np.cumsum(self._ds.sequence_lengths, dtype=np.int64)])
        return self._ds

    def __len__(self) -> int:
        self._open()
        return int(self._starts[-1]) // self.length

    def __getitems__(self, indexes: Any) -> Any:
        import torch

        ds = self._open()
        starts = self._starts
        out = np.empty((len(indexes), self.length), np.int32)
        for row, i in enumerate(indexes):
            g0 = int(i) * self.length
            seq = int(np.searchsorted(starts, g0, side="right")) - 1
            pos = 0
            while pos < self.length:
                offset = g0 + pos - int(starts[seq])
                take = min(self.length - pos, int(starts[seq + 1]) - int(starts[seq]) - offset)
                out[row, pos : pos + take] = ds.get(seq, offset=offset, length=take)
                pos += take
                seq += 1
        return torch.from_numpy(out)


def _race(ours: Any, theirs: Any, cfg: Config) -> tuple[Any, Any]:
    return interleaved(
        lambda: timed_pass(ours, count_tokens).rate,
        lambda: timed_pass(theirs, count_tokens).rate,
        cfg.repeats,
        warmup=not cfg.quick,
    )


def foreign_rows(cfg: Config, endpoint: Any = None) -> list[Row]:
    import guideloom

    rows = []
    native, _ = local_stream(cfg)
    prefix = str(cfg.workdir / "megatron" / "text_document")
    if not os.path.exists(prefix + ".idx"):
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        _megatron_pair(prefix, cfg.tokens, cfg.seed)
    pair = guideloom.open(prefix + ".idx")
    if pair.manifest.total_tokens != native.manifest.total_tokens:
        raise RuntimeError(
            f"{prefix}: {pair.manifest.total_tokens} tokens, the stream has {native.manifest.total_tokens}"
        )
    ours = _loader(pair, cfg, True, 0)
    g, b = _race(ours, _loader(native, cfg, True, 0), cfg)
    extra = {"tokens": native.manifest.total_tokens, "idx_bytes": os.path.getsize(prefix + ".idx")}
    rows.append(
        Row(
            "foreign",
            "megatron local shuffle=full workers=0",
            "tokens/s",
            g,
            b,
            "native stream, same tokens",
            target=0.9,
            extra=extra,
        )
    )
    try:
        theirs = MegatronCoreWindows(prefix, cfg.sequence_length)
        len(theirs)
    except ImportError as err:
        extra["megatron_core"] = f"not measured: {err} (pip install megatron-core)"
    else:
        g2, mc = _race(ours, raw_loader(theirs, cfg.batch_size, True, cfg.seed, 0), cfg)  # type: ignore[arg-type]
        rows.append(
            Row(
                "foreign", "megatron local shuffle=full workers=0 vs megatron-core", "tokens/s", g2, mc,
                "megatron-core IndexedDataset.get", extra=extra,
            )
        )  # fmt: skip
    with running_endpoint(endpoint) as (ep, note), fresh_bucket(ep.storage_options()) as bucket:
        options = ep.storage_options()
        remote_prefix = f"s3://{bucket}/megatron/text_document"
        _megatron_pair(remote_prefix, cfg.s3_tokens, cfg.seed, options)
        stream = write_stream(
            f"s3://{bucket}/stream", cfg.s3_tokens, cfg.seed, cfg.shard_size, storage_options=options
        )
        remote_pair = guideloom.open(remote_prefix + ".idx", storage_options=options)
        g3, b3 = _race(
            _loader(remote_pair, cfg, "block", WORKERS), _loader(stream, cfg, "block", WORKERS), cfg
        )
        rows.append(
            Row(
                "foreign", f"megatron s3 shuffle=block workers={WORKERS}", "tokens/s", g3, b3,
                "native stream on S3, same tokens", target=0.9,
                extra={"tokens": stream.manifest.total_tokens, "server": ep.backend, **({"server_note": note} if note else {})},
            )
        )  # fmt: skip
    return rows
