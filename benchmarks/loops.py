"""Driving a DataLoader for one timed pass, and the raw baselines' datasets.

Throughput is measured from the first batch received to the last, so the one-off start (worker
processes, first connection) is reported separately as time to first batch instead of diluting
tokens/s. Baselines go through a plain ``torch.utils.data.DataLoader`` with the same batch size,
order kind and ``num_workers``; their datasets implement ``__getitems__`` so one call fetches a
whole batch, as GuideLoom's loader does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

__all__ = ["Pass", "RawS3Windows", "RawWindows", "RawDocuments", "raw_loader", "timed_pass", "count_tokens"]


@dataclass
class Pass:
    first_batch_s: float  # iter() to the first batch
    items: int  # tokens (or records) received after the first batch
    seconds: float  # from the first batch to the end

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("inf")


def count_tokens(batch: Any) -> int:
    """Tokens in a stream batch: a (B, L) tensor or a dict of them (first field)."""
    if isinstance(batch, dict):
        batch = batch["tokens"]
    return int(batch.numel())


def count_records(batch: Any) -> int:
    return len(batch)


def timed_pass(loader: Any, count: Callable[[Any], int], max_batches: int | None = None) -> Pass:
    """One pass over ``loader`` (an epoch, or its first ``max_batches`` batches)."""
    t0 = time.perf_counter()
    it = iter(loader)
    try:
        next(it)
        t1 = time.perf_counter()
        items = 0
        done = 1
        for batch in it:
            items += count(batch)
            done += 1
            if max_batches is not None and done >= max_batches:
                break
        t2 = time.perf_counter()
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        del it
    return Pass(t1 - t0, items, t2 - t1)


def _identity(batch: Any) -> Any:
    return batch


def raw_loader(dataset: Dataset, batch_size: int, shuffle: bool, seed: int, num_workers: int) -> DataLoader:
    """A plain DataLoader over ``dataset``: whole batches of indexes to ``__getitems__``."""
    if shuffle:
        sampler: Any = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))  # type: ignore[arg-type]
    else:
        sampler = SequentialSampler(dataset)  # type: ignore[arg-type]
    return DataLoader(
        dataset,
        batch_sampler=BatchSampler(sampler, batch_size=batch_size, drop_last=False),
        num_workers=num_workers,
        collate_fn=_identity,
    )


class RawWindows(Dataset):  # type: ignore[type-arg]
    """Baseline: windows gathered from one flat raw token file with ``np.memmap``.

    Each batch is copied once into an array of the dtype GuideLoom's loader hands out (``int32``
    for ``uint16`` tokens: what ``nn.Embedding`` takes), then ``torch.from_numpy``.
    """

    def __init__(self, path: str, sequence_length: int, dtype: Any, out_dtype: Any) -> None:
        self.path = path
        self.sequence_length = sequence_length
        self.dtype = np.dtype(dtype)
        self.out_dtype = np.dtype(out_dtype)
        self.n = os.path.getsize(path) // self.dtype.itemsize // sequence_length
        self._mm: np.ndarray | None = None
        self._pid = -1

    def __len__(self) -> int:
        return self.n

    def _map(self) -> np.ndarray:
        if self._mm is None or self._pid != os.getpid():
            self._mm, self._pid = np.memmap(self.path, dtype=self.dtype, mode="r"), os.getpid()
        return self._mm

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> torch.Tensor:
        mm = self._map()
        length = self.sequence_length
        out = np.empty((len(indexes), length), dtype=self.out_dtype)
        for row, i in enumerate(indexes):
            out[row] = mm[i * length : (i + 1) * length]
        return torch.from_numpy(out)


class RawDocuments(Dataset):  # type: ignore[type-arg]
    """Baseline: records decoded straight out of a memory map of the encoded records."""

    def __init__(self, path: str, offsets: np.ndarray, decode: Callable[[Any], Any]) -> None:
        self.path = path
        self.offsets = offsets
        self.decode = decode
        self._mm: np.ndarray | None = None
        self._pid = -1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        if self._mm is None or self._pid != os.getpid():
            self._mm, self._pid = np.memmap(self.path, dtype=np.uint8, mode="r"), os.getpid()
        mm, offsets, decode = self._mm, self.offsets, self.decode
        return [decode(mm[offsets[i] : offsets[i + 1]].data) for i in indexes]


class RawS3Windows(Dataset):  # type: ignore[type-arg]
    """Baseline: the byte ranges of a batch's windows fetched with one ``fs.cat_ranges`` call.

    The ranges are exactly the windows' bytes in the shard files (a window crossing shards is
    two ranges; touching ranges of one file are merged, as any reader would), so the baseline
    moves the same bytes with the same per-batch concurrency as GuideLoom, with nothing else.
    The filesystem is created lazily in each worker process (s3fs is not fork-safe).
    """

    def __init__(
        self,
        storage_options: dict[str, Any],
        paths: list[str],
        shard_tokens: np.ndarray,
        header_size: int,
        itemsize: int,
        sequence_length: int,
        out_dtype: Any,
        dtype: Any,
    ) -> None:
        self.storage_options = storage_options
        self.paths = paths
        self.shard_tokens = np.asarray(shard_tokens, dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(self.shard_tokens)])
        self.header_size = header_size
        self.itemsize = itemsize
        self.sequence_length = sequence_length
        self.out_dtype = np.dtype(out_dtype)
        self.dtype = np.dtype(dtype)
        self.n = int(self.shard_starts[-1]) // sequence_length
        self._fs: Any = None
        self._pid = -1

    def __len__(self) -> int:
        return self.n

    protocol = "s3"  # the fsspec protocol of ``paths`` (the gs/az rows set "gs" or "az")

    def fs(self) -> Any:
        if self._fs is None or self._pid != os.getpid():
            import fsspec

            self._fs = fsspec.filesystem(
                self.protocol, **{**self.storage_options, "skip_instance_cache": True}
            )
            self._pid = os.getpid()
        return self._fs

    def ranges(self, indexes: Sequence[int]) -> list[tuple[int, int, int, int, int]]:
        """``(shard, byte_start, byte_end, row, offset_in_row)`` pieces of the windows."""
        length = self.sequence_length
        out = []
        for row, i in enumerate(indexes):
            g0, g1 = i * length, (i + 1) * length
            shard = int(np.searchsorted(self.shard_starts, g0, side="right")) - 1
            pos = g0
            while pos < g1:
                base = int(self.shard_starts[shard])
                stop = min(int(self.shard_starts[shard + 1]), g1)
                if stop > pos:
                    a = self.header_size + (pos - base) * self.itemsize
                    b = self.header_size + (stop - base) * self.itemsize
                    out.append((shard, a, b, row, pos - g0))
                    pos = stop
                shard += 1
        return out

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> torch.Tensor:
        pieces = self.ranges(indexes)
        # Merge touching ranges of one file into one request.
        order = sorted(range(len(pieces)), key=lambda k: (pieces[k][0], pieces[k][1]))
        requests: list[list[int]] = []
        where: list[tuple[int, int]] = [(0, 0)] * len(pieces)
        for k in order:
            shard, a, b, _, _ = pieces[k]
            if requests and requests[-1][0] == shard and requests[-1][2] == a:
                where[k] = (len(requests) - 1, a - requests[-1][1])
                requests[-1][2] = b
            else:
                requests.append([shard, a, b])
                where[k] = (len(requests) - 1, 0)
        blobs = self.fs().cat_ranges(
            [self.paths[s] for s, _, _ in requests], [a for _, a, _ in requests], [b for _, _, b in requests]
        )
        out = np.empty((len(indexes), self.sequence_length), dtype=self.out_dtype)
        for (_shard, a, b, row, off), (req, rel) in zip(pieces, where):
            tokens = np.frombuffer(blobs[req], dtype=self.dtype, count=(b - a) // self.itemsize, offset=rel)
            out[row, off : off + len(tokens)] = tokens
        return torch.from_numpy(out)
