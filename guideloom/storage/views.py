"""Dataset views: indexed, batched access to a committed dataset.

``DocumentDataset(storage)`` has one sample per document. ``StreamDataset(storage, L)`` cuts the
stream (every record of every shard, joined end to end in manifest order) into complete,
non-overlapping windows of ``L`` elements; window ``i`` is elements ``[i*L, (i+1)*L)``, windows
cross record and shard boundaries, and only the final partial window of the whole stream is
dropped. ``StreamWithMetaDataset`` reads the same windows and hands the format's ``align`` the
spans that overlap each window, clipped, in window coordinates.

All views support ``len``, ``ds[i]`` (negative ``i`` counts from the end) and
``ds.__getitems__(indexes)``, which reads a whole batch with one set of concurrent requests.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from guideloom.formats import StreamNumpyFormat, StreamWithMetaStorageFormat
from guideloom.storage import layout
from guideloom.storage.base import DocumentStorage, Storage, StreamStorage, StreamWithMetaStorage
from guideloom.storage.shards import ItemRequest, ShardAccess

__all__ = ["DocumentDataset", "StreamDataset", "StreamWithMetaDataset"]


class _View:
    storage_type: type[Storage]

    def __init__(self, storage: Storage) -> None:
        self._check_storage(storage)
        self.storage = storage
        self.manifest = storage.manifest
        self._access = ShardAccess(storage.location, self.manifest)
        self._len = 0

    @classmethod
    def _check_storage(cls, storage: Any) -> None:
        if not isinstance(storage, cls.storage_type):
            raise TypeError(
                f"{cls.__name__} reads a {cls.storage_type.__name__}, got "
                f"{type(storage).__name__}; the three layouts are not interchangeable readers "
                "(DocumentDataset <- DocumentStorage, StreamDataset <- StreamStorage, "
                "StreamWithMetaDataset <- StreamWithMetaStorage)"
            )

    def __len__(self) -> int:
        return self._len

    def _index(self, i: Any) -> int:
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"{type(self).__name__} indexes must be integers, got {type(i).__name__}") from None
        n = self._len
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {type(self).__name__} of length {n}")
        return i

    def __getitem__(self, i: int) -> Any:
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        raise NotImplementedError

    def __iter__(self):  # type: ignore[no-untyped-def]
        for start in range(0, self._len, 64):
            yield from self.__getitems__(range(start, min(self._len, start + 64)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.storage.url!r}, len={self._len})"


class DocumentDataset(_View):
    """One sample per document, decoded by the storage's format."""

    storage_type = DocumentStorage

    def __init__(self, storage: DocumentStorage) -> None:
        super().__init__(storage)
        counts = np.array([s.records for s in self.manifest.shards], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])[:-1] if len(counts) else counts
        self._len = int(counts.sum())

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        idx = np.array([self._index(i) for i in indexes], dtype=np.int64)
        if len(idx) == 0:
            return []
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shard_of]
        shards = [int(s) for s in shard_of]
        unique = sorted(set(shards))
        offset_tables = {
            s: table.view(layout.OFFSET_DTYPE) for s, table in zip(unique, self._access.whole(unique, "index"))
        }
        requests = []
        for s, j in zip(shards, local.tolist()):
            offsets = offset_tables[s]
            requests.append(ItemRequest(s, "data", int(offsets[j]), int(offsets[j + 1]), 1))
        blobs = self._access.read(requests)
        decode = self.storage.format.decode  # type: ignore[attr-defined]
        return [decode(b.data) for b in blobs]


class _Windows(_View):
    """Window arithmetic shared by the two stream views."""

    def __init__(self, storage: Storage, sequence_length: int, stream_format: StreamNumpyFormat) -> None:
        if isinstance(sequence_length, bool) or not isinstance(sequence_length, (int, np.integer)):
            raise TypeError(
                f"sequence_length must be a positive int (tokens per window), got {sequence_length!r}"
            )
        if sequence_length <= 0:
            raise ValueError(f"sequence_length must be a positive number of tokens, got {sequence_length}")
        super().__init__(storage)
        self.sequence_length = int(sequence_length)
        self.stream_format = stream_format
        tokens = np.array([s.tokens for s in self.manifest.shards], dtype=np.int64)
        self._shard_tokens = tokens
        self._starts = np.concatenate([[0], np.cumsum(tokens)])[:-1] if len(tokens) else tokens
        self.total_tokens = int(tokens.sum())
        self._len = self.total_tokens // self.sequence_length
        self._itemsize = stream_format.itemsize
        self._single = len(stream_format.fields) == 1

    def _pieces(self, window: int) -> list[tuple[int, int, int, int]]:
        """``(shard, start, stop, offset_in_window)`` pieces covering window ``window``."""
        length = self.sequence_length
        g0, g1 = window * length, (window + 1) * length
        shard = int(np.searchsorted(self._starts, g0, side="right")) - 1
        out = []
        pos = g0
        while pos < g1:
            start = pos - int(self._starts[shard])
            stop = min(int(self._shard_tokens[shard]), g1 - int(self._starts[shard]))
            if stop > start:
                out.append((shard, start, stop, pos - g0))
                pos += stop - start
            shard += 1
        return out

    def _plan(self, indexes: Sequence[int]) -> list[list[tuple[int, int, int, int]]]:
        """The pieces of each window, computed for the whole batch at once.

        Most windows lie inside one shard: those get their single piece from one vectorized
        ``searchsorted``; only windows that cross a shard boundary take the per-window path.
        """
        windows = [self._index(i) for i in indexes]
        if not windows:
            return []
        length = self.sequence_length
        g0 = np.asarray(windows, dtype=np.int64) * length
        first = np.searchsorted(self._starts, g0, side="right") - 1
        last = np.searchsorted(self._starts, g0 + (length - 1), side="right") - 1
        local = (g0 - self._starts[first]).tolist()
        return [
            [(s, a, a + length, 0)] if s == e else self._pieces(w)
            for w, s, e, a in zip(windows, first.tolist(), last.tolist(), local)
        ]

    def _token_requests(self, plans: list[list[tuple[int, int, int, int]]]) -> list[ItemRequest]:
        return [ItemRequest(s, "data", a, b, self._itemsize) for plan in plans for s, a, b, _ in plan]

    def _assemble(self, plans: list[list[tuple[int, int, int, int]]], blobs: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        fmt = self.stream_format
        batch = len(plans)
        length = self.sequence_length
        out = {name: np.empty((batch, length), dtype=dt) for name, dt in fmt.fields.items()}
        k = 0
        if self._single:
            (name, dt), = fmt.fields.items()
            target = out[name]
            for row, plan in enumerate(plans):
                for _, a, b, off in plan:
                    target[row, off : off + b - a] = blobs[k].view(dt)
                    k += 1
        else:
            for row, plan in enumerate(plans):
                for _, a, b, off in plan:
                    elements = blobs[k].view(fmt.dtype)
                    for name in fmt.fields:
                        out[name][row, off : off + b - a] = elements[name]
                    k += 1
        return out

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Windows ``indexes`` as ``{field: array of shape (len(indexes), sequence_length)}``."""
        plans = self._plan(indexes)
        return self._assemble(plans, self._access.read(self._token_requests(plans)))


class StreamDataset(_Windows):
    """Complete, non-overlapping windows of ``sequence_length`` stream elements.

    A sample is ``{field: array of sequence_length values}``.
    """

    storage_type = StreamStorage

    def __init__(self, storage: StreamStorage, sequence_length: int) -> None:
        self._check_storage(storage)
        super().__init__(storage, sequence_length, storage.format)  # type: ignore[arg-type]

    def __getitems__(self, indexes: Sequence[int]) -> list[dict[str, np.ndarray]]:
        batch = self.read_windows(indexes)
        return [{name: arr[row] for name, arr in batch.items()} for row in range(len(indexes))]


class StreamWithMetaDataset(_Windows):
    """Windows of a stream with metadata; each sample is ``format.align(window, spans)``."""

    storage_type = StreamWithMetaStorage

    def __init__(self, storage: StreamWithMetaStorage, sequence_length: int) -> None:
        self._check_storage(storage)
        fmt: StreamWithMetaStorageFormat = storage.format  # type: ignore[assignment]
        super().__init__(storage, sequence_length, fmt.stream_format)
        self.meta_format = fmt

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        plans = self._plan(indexes)
        shards = sorted({s for plan in plans for s, *_ in plan if self.manifest.shards[s].spans})
        tables = dict(zip(shards, (t.view(layout.SPAN_DTYPE) for t in self._access.whole(shards, "spans"))))
        requests = self._token_requests(plans)
        n_token_requests = len(requests)
        # For each piece: which spans overlap it, and the one byte range holding their annotations.
        piece_spans: list[tuple[np.ndarray, int]] = []
        for plan in plans:
            for s, a, b, _ in plan:
                table = tables.get(s)
                if table is None:
                    piece_spans.append((np.empty(0, layout.SPAN_DTYPE), -1))
                    continue
                lo = int(np.searchsorted(table["stop"], a, side="right"))
                hi = int(np.searchsorted(table["start"], b, side="left"))
                hit = table[lo:hi]
                if len(hit):
                    piece_spans.append((hit, len(requests)))
                    requests.append(
                        ItemRequest(s, "meta", int(hit["meta_start"][0]), int(hit["meta_stop"][-1]), 1)
                    )
                else:
                    piece_spans.append((hit, -1))
        blobs = self._access.read(requests)
        windows = self._assemble(plans, blobs[:n_token_requests])
        fmt = self.meta_format
        samples = []
        k = 0
        for row, plan in enumerate(plans):
            spans: list[tuple[int, int, Any]] = []
            for _, a, b, off in plan:
                hit, req = piece_spans[k]
                k += 1
                if req < 0:
                    continue
                blob = blobs[req]
                base = int(hit["meta_start"][0])
                for start, stop, m0, m1 in hit.tolist():
                    annotation = fmt.decode_meta(blob[m0 - base : m1 - base].data)
                    spans.append((max(start, a) - a + off, min(stop, b) - a + off, annotation))
            window = {name: arr[row] for name, arr in windows.items()}
            samples.append(fmt.align(window, spans))
        return samples
