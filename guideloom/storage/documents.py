"""`DocumentDataset`: one sample per document, decoded by the storage's format.

A batch is planned as runs of documents that follow one another in one shard (a sequential
batch is one run per shard; a shuffled one mostly runs of one). Each run costs one read of its
offsets (``count + 1`` entries of the shard's index) and one read of its documents' bytes, which
are then cut at the offsets and decoded. The offsets come through `IndexFiles`: on local disk
straight from the file (the operating system caches it), elsewhere from index pages kept in a
bounded cache. The data reads of a batch are one call to the shard reader: on object storage
one round of merged, concurrent range requests.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np

import guideloom.layout as layout
from guideloom.formats import DocumentStorageFormat
from guideloom.storage.base import DocumentStorage
from guideloom.storage.indexfiles import IndexFiles
from guideloom.storage.view import View, run_lengths

__all__ = ["DocumentDataset"]

_OFFSET = layout.OFFSET_DTYPE.itemsize  # bytes of an entry of a document offset table
_OFFSET_PAIR = struct.Struct("<QQ")  # two entries (layout.OFFSET_DTYPE)


class DocumentDataset(View):
    """One sample per document, decoded by the storage's format.

    Document offsets are read by pages of the shard's index, kept in an LRU bounded by
    ``index_cache_bytes`` (default ``$GUIDELOOM_INDEX_CACHE_BYTES`` or 4 MiB per process): a
    batch costs one round of requests for the index pages it lacks plus one for the documents.
    """

    storage_type = DocumentStorage
    sequence_length: int | None = None  # documents are read whole
    small_batch = 128

    def __init__(self, storage: DocumentStorage, *, index_cache_bytes: int | None = None) -> None:
        """Open a view of the documents committed in `storage`.

        Args:
            storage: A `DocumentStorage` holding a committed dataset.
            index_cache_bytes: Bytes of document-offset pages kept in memory (an LRU); None
                takes `$GUIDELOOM_INDEX_CACHE_BYTES`, or 4 MiB.

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a `DocumentStorage`.
        """
        super().__init__(storage)
        self._access = IndexFiles(self.reader, cache_bytes=index_cache_bytes)
        counts = np.array(self.manifest.shard_table.records, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])[:-1] if len(counts) else counts
        self._starts_list: list[int] = self._starts.tolist()
        self._len = int(counts.sum())

    @property
    def sample_bytes(self) -> int:
        """Bytes of one document in storage, on average (the data files over the documents)."""
        return max(1, int(self.manifest.total_bytes) // max(1, self._len))

    def read_batch(self, indexes: Sequence[int]) -> list[Any]:
        """The batch as the loader's default collate takes it: `__getitems__`'s documents.

        Args:
            indexes: Document indexes, as for `__getitems__`.

        Returns:
            One decoded document per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.__getitems__(indexes)

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Documents `indexes`, decoded by the storage's format, read as one batch.

        Args:
            indexes: Document indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One decoded document per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        ahead = self._ahead  # a BatchOrder's read-ahead (guideloom.loading.read_ahead)
        if ahead is not None and ahead.active():
            return ahead.items(self, indexes)  # type: ignore[no-any-return]
        if len(indexes) <= self.small_batch:
            return self._read_small(indexes)
        idx = self._indexes(indexes)
        return self._read_large(idx) if len(idx) else []

    def _read_small(self, indexes: Sequence[int]) -> list[Any]:
        """A few documents, planned in Python ints: runs of documents that follow one another in
        a shard, each run's ``count + 1`` offsets (one index read per run), its bytes (one data
        read per run)."""
        starts, n, h = self._starts_list, self._len, layout.HEADER_SIZE
        shards: list[int] = []
        firsts: list[int] = []
        counts: list[int] = []
        last_shard = last_row = -2
        for i in indexes:
            if type(i) is not int or not 0 <= i < n:  # noqa: E721 - exactly int: the fast case
                i = self._index(i)
            s = bisect_right(starts, i) - 1
            row = i - starts[s]
            if s == last_shard and row == last_row + 1:
                counts[-1] += 1
            else:
                shards.append(s)
                firsts.append(row)
                counts.append(1)
            last_shard, last_row = s, row
        if len(shards) == len(indexes):  # no two documents in a row: each run is one document
            offsets = self._access.runs("index", shards, firsts, [a + 2 for a in firsts], _OFFSET)
            pairs = _OFFSET_PAIR.iter_unpack(offsets)
            return self._decode([(s, "data", h + a, h + b) for s, (a, b) in zip(shards, pairs)], {})
        offsets = self._access.runs(
            "index", shards, firsts, [a + c + 1 for a, c in zip(firsts, counts)], _OFFSET
        )
        requests: list[tuple[int, str, int, int]] = []
        several: dict[int, list[int]] = {}  # run -> its offsets, for runs of several documents
        pos = 0
        for k, (s, c) in enumerate(zip(shards, counts)):
            if c == 1:
                a, b = _OFFSET_PAIR.unpack_from(offsets, pos)
            else:
                several[k] = run = list(struct.unpack_from(f"<{c + 1}Q", offsets, pos))
                a, b = run[0], run[-1]
            requests.append((s, "data", h + a, h + b))
            pos += _OFFSET * (c + 1)
        return self._decode(requests, several)

    def _read_large(self, idx: np.ndarray) -> list[Any]:
        """The same for a larger batch, with whole-array operations: Python touches each run
        once, to decode its documents."""
        h, n = layout.HEADER_SIZE, len(idx)
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        row = idx - self._starts[shard]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(shard[1:], shard[:-1], out=new[1:])
        new[1:] |= row[1:] != row[:-1] + 1
        heads = new.nonzero()[0]
        if len(heads) == n:  # no two documents in a row: each run is one document
            pairs = np.frombuffer(self._access.runs("index", shard, row, row + 2, _OFFSET), "<u8") + h
            shards, starts, stops = shard.tolist(), pairs[0::2].tolist(), pairs[1::2].tolist()
            return self._decode(list(zip(shards, repeat("data"), starts, stops)), {})
        counts = run_lengths(heads, n)
        run_shard, first = shard[heads], row[heads]
        offsets = np.frombuffer(
            self._access.runs("index", run_shard, first, first + counts + 1, _OFFSET), "<u8"
        )
        at = np.cumsum(counts + 1) - (counts + 1)  # where each run's offsets begin
        requests = list(
            zip(
                run_shard.tolist(),
                repeat("data"),
                (offsets[at] + h).tolist(),
                (offsets[at + counts] + h).tolist(),
            )
        )
        several = {
            k: offsets[p : p + c + 1].tolist()
            for k, p, c in zip(*(x[counts > 1].tolist() for x in (np.arange(len(heads)), at, counts)))
        }
        return self._decode(requests, several)

    def _decode(self, requests: list[tuple[int, str, int, int]], several: dict[int, list[int]]) -> list[Any]:
        """Each run's bytes (one data read per run, in one call to the reader), cut at its
        offsets where it holds several documents, decoded in batch order. On local disk each
        read comes as its run is decoded, so the bytes are still in the CPU cache."""
        fmt = cast(DocumentStorageFormat, self.storage.format)
        decode = fmt.decode
        blobs = self.reader.read_iter(requests)
        if not several:
            return [decode(data) for data in blobs]
        out: list[Any] = []
        for k, data in enumerate(blobs):
            run = several.get(k)
            if run is None:
                out.append(decode(data))
            else:  # the run's records at once where the format can (MessagePack: in C)
                out.extend(fmt.decode_run(data, run))
        return out
