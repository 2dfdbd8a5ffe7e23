"""Row ``foreign``: windows from a Megatron ``.bin``/``.idx`` pair read in place (issue 33).

The same tokens (the local corpus's documents, one Megatron sequence each) are written twice: as
a GuideLoom stream and as a Megatron pair. Cases:

- ``local``: GuideLoom's loader over the pair (``guideloom.open(PREFIX.idx)``) against the same
  loader over the native stream (target >= 0.9x), full shuffle, ``num_workers`` 0;
- ``local vs megatron-core``: the same loader against megatron-core's own ``IndexedDataset``
  reading the same windows with ``get(sequence, offset, length)`` per piece of a window (as its
  ``GPTDataset`` stitches a sample from several documents), in a plain DataLoader with the same
  batches; only where megatron-core imports (``pip install megatron-core``: the dev extra);
- ``s3``: the pair and the stream on the S3 server (block shuffle, 2 workers), target >= 0.9x;
- ``s3 1e+07 sequences``: a pair of ten million sequences (an .idx of about 200 MB) on the S3
  server, opened and its first shuffled batch taken: at most 16 MiB read and less than 64 MiB of
  resident memory added (the index is read in pages as the order needs it, never whole).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from benchmarks.corpus import _documents, write_stream
from benchmarks.harness import Config, Row, interleaved, stats
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


BIG_SEQUENCES = 10**7  # the lazy-index case: an .idx of about 200 MB
BIG_LENGTH = 4  # tokens per sequence


def _big_megatron_pair(prefix: str, sequences: int, length: int) -> None:
    """A Megatron pair of ``sequences`` documents of ``length`` tokens, written with NumPy
    (the layout of megatron-core's ``IndexedDataset``: header, lengths, byte pointers, document
    indices)."""
    import struct

    lengths = np.full(sequences, length, dtype=np.int32)
    pointers = np.arange(sequences, dtype=np.int64) * (length * 2)
    documents = np.arange(sequences + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
        f.write(struct.pack("<Q", sequences) + struct.pack("<Q", len(documents)))
        for array in (lengths, pointers, documents):
            f.write(array.tobytes())
    tokens = (np.arange(sequences * length, dtype=np.int64) % 50_000).astype(np.uint16)
    tokens.tofile(prefix + ".bin")


def _rss() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def _lazy_index_row(cfg: Config, bucket: str, options: dict[str, Any]) -> Row:
    """Open a Megatron pair of `BIG_SEQUENCES` sequences on S3 and take its first shuffled
    batch: the index bytes fetched (`io_stats`, every byte the process read from S3 meanwhile)
    and the growth of this process's resident memory, against the .idx's size."""
    import tempfile

    import fsspec

    import guideloom
    from guideloom.io.stats import io_stats, subtract_stats

    sequences = 10**5 if cfg.quick else BIG_SEQUENCES  # smoke runs: the same path, smaller
    local = tempfile.mkdtemp(prefix="gl-bench-megatron-")
    prefix = os.path.join(local, "big")
    _big_megatron_pair(prefix, sequences, BIG_LENGTH)
    idx_size = os.path.getsize(prefix + ".idx")
    remote = f"s3://{bucket}/big/text_document"
    fs = fsspec.filesystem("s3", **options)
    for suffix in (".idx", ".bin"):
        fs.put_file(prefix + suffix, remote + suffix)
        os.remove(prefix + suffix)
    os.rmdir(local)
    rss, before = _rss(), io_stats()
    pair = guideloom.open(remote + ".idx", storage_options=options)
    batch = next(iter(_loader(pair, cfg, True, 0)))
    fetched = sum(e["bytes_read"] for e in subtract_stats(io_stats(), before).values())
    grown = _rss() - rss
    mib = 2**20
    return Row(
        "foreign",
        f"megatron s3 {sequences:.0e} sequences: open + first batch",
        "MiB read",
        stats([fetched / mib]),
        stats([idx_size / mib]),
        "the .idx's size (what a whole download reads)",
        higher_is_better=False,
        extra={"rss_growth_mib": round(grown / mib, 1), "batch_tokens": int(batch["tokens"].numel())},
        checks={"read <= 16 MiB": fetched <= 16 * mib, "memory growth < 64 MiB": grown < 64 * mib},
    )


def _gets(loader: Any) -> tuple[int, int]:
    """(GETs, windows) of one pass of ``loader`` (no workers: this process sends every request)."""
    from guideloom.io.stats import io_stats, subtract_stats

    before, windows = io_stats(), 0
    for batch in loader:
        windows += int(batch["tokens"].shape[0])
    spent = subtract_stats(io_stats(), before)
    return sum(e["requests"].get("GET", 0) for e in spent.values()), windows


def _gets_row(cfg: Config, bucket: str, options: dict[str, Any]) -> Row:
    """GETs per window of one block-shuffled epoch of a Megatron pair of 10^5 sequences on S3
    (20 tokens each) against the same tokens converted to a native stream on
    S3 (``guideloom convert``'s function), same loader settings (target: within 1.2x)."""
    import tempfile

    import fsspec

    import guideloom
    from guideloom.storage.foreign.convert import convert_foreign

    sequences = 10**4 if cfg.quick else 10**5
    local = tempfile.mkdtemp(prefix="gl-bench-megatron-")
    prefix = os.path.join(local, "gets")
    _big_megatron_pair(prefix, sequences, 20)
    remote = f"s3://{bucket}/gets/text_document"
    fs = fsspec.filesystem("s3", **options)
    for suffix in (".idx", ".bin"):
        fs.put_file(prefix + suffix, remote + suffix)
        os.remove(prefix + suffix)
    os.rmdir(local)
    pair = guideloom.open(remote + ".idx", storage_options=options)
    convert_foreign(pair, f"s3://{bucket}/gets-native", storage_options=options)
    native = guideloom.open(f"s3://{bucket}/gets-native", storage_options=options)
    ours, ours_windows = _gets(_loader(pair, cfg, "block", 0))
    theirs, theirs_windows = _gets(_loader(native, cfg, "block", 0))
    return Row(
        "foreign",
        f"megatron s3 {sequences:.0e} sequences shuffle=block: GETs per window",
        "GETs/window",
        stats([ours / max(1, ours_windows)]),
        stats([theirs / max(1, theirs_windows)]),
        "the same tokens converted to a native stream on S3",
        higher_is_better=False,
        target=1.2,
        extra={"gets": ours, "native_gets": theirs, "windows": ours_windows},
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
        rows.append(_lazy_index_row(cfg, bucket, options))
        rows.append(_gets_row(cfg, bucket, options))
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
