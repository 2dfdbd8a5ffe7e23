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
import os
import struct
from bisect import bisect_right
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np

import guideloom.layout as layout
from guideloom.errors import ShardCorruptError
from guideloom.formats import StreamNumpyFormat, StreamWithMetaStorageFormat
from guideloom.formats.meta import Span, SpanBatch
from guideloom.storage.base import DocumentStorage, Storage, StreamStorage, StreamWithMetaStorage
from guideloom.storage.pagecache import PageCache
from guideloom.storage.shards import _MAX_OPEN_FILES, ItemRequest, ShardAccess

__all__ = ["DocumentDataset", "StreamDataset", "StreamWithMetaDataset"]

_OFFSET_PAIR = struct.Struct("<QQ")  # two entries of a document offset table (layout.OFFSET_DTYPE)

_IOV_MAX = 1024  # buffers of one preadv (the POSIX limit on Linux)
_FDS_PER_READ = min(64, _MAX_OPEN_FILES)  # descriptors LocalWindows.read keeps at hand
_DIR_FIRST = struct.Struct("<Q8xQ8x")  # layout.SPAN_DIR_DTYPE: first, meta_first
_DIR_AFTER = struct.Struct("<8xQ8xQ")  # layout.SPAN_DIR_DTYPE: after, meta_after


class _View:
    storage_type: type[Storage]

    def __init__(self, storage: Storage, *, index_cache_bytes: int | None = None) -> None:
        self._check_storage(storage)
        self.storage = storage
        self.manifest = storage.manifest
        self._access = ShardAccess(storage.location, self.manifest, cache_bytes=index_cache_bytes)
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
        """The number of samples: documents (`DocumentDataset`) or complete windows of
        `sequence_length` tokens (the stream views; the final partial window is dropped).

        Returns:
            The number of samples; indexes run from `0` to `len(ds) - 1`.
        """
        return self._len

    def _index(self, i: Any) -> int:
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(
                f"{type(self).__name__} indexes must be integers, got {type(i).__name__}"
            ) from None
        n = self._len
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {type(self).__name__} of length {n}")
        return i

    def _indexes(self, indexes: Sequence[int]) -> np.ndarray:
        """``indexes`` as int64 with negatives counted from the end; IndexError if out of range."""
        idx = np.asarray(indexes)
        if idx.size == 0:
            return np.empty(0, np.int64)
        if idx.ndim != 1 or idx.dtype.kind not in "iu":
            return np.array([self._index(i) for i in indexes], dtype=np.int64)
        idx = idx.astype(np.int64, copy=False)
        n = self._len
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -n or hi >= n:
            bad = next(int(i) for i in idx if not -n <= i < n)
            raise IndexError(f"index {bad} out of range for {type(self).__name__} of length {n}")
        return idx + n * (idx < 0) if lo < 0 else idx

    def __getitem__(self, i: int) -> Any:
        """Sample `i`: `ds[i]`, read as a batch of one (see `__getitems__`).

        Args:
            i: A sample index in `-len(ds) .. len(ds) - 1`; a negative one counts from the end.

        Returns:
            One sample: the decoded document (`DocumentDataset`), `{field: array of
            sequence_length values}` (`StreamDataset`) or what the format's `align` returns
            (`StreamWithMetaDataset`).

        Raises:
            IndexError: `i` is out of range.
            TypeError: `i` is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.__getitems__([i])[0]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Samples `indexes`, read as one batch: one round of concurrent range requests.

        Args:
            indexes: Sample indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One sample per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        raise NotImplementedError

    def __iter__(self):  # type: ignore[no-untyped-def]
        """Every sample in index order (`0 .. len(ds) - 1`, as `ds[i]` returns them), read 64
        at a time.

        Raises:
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        for start in range(0, self._len, 64):
            yield from self.__getitems__(range(start, min(self._len, start + 64)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.storage.url!r}, len={self._len})"


class DocumentDataset(_View):
    """One sample per document, decoded by the storage's format.

    Document offsets are read by pages of the shard's index, kept in an LRU bounded by
    ``index_cache_bytes`` (default ``$GUIDELOOM_INDEX_CACHE_BYTES`` or 4 MiB per process): a
    batch costs one round of requests for the index pages it lacks plus one for the documents.
    """

    storage_type = DocumentStorage

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
        super().__init__(storage, index_cache_bytes=index_cache_bytes)
        counts = np.array(self.manifest.shard_table.records, dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)])[:-1] if len(counts) else counts
        self._starts_list: list[int] = self._starts.tolist()
        self._len = int(counts.sum())

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
        decode = self.storage.format.decode  # type: ignore[attr-defined]
        access = self._access
        if access.local and len(indexes) <= 64:
            # A batch of a few documents: Python ints and bisection cost less than array calls.
            shards, rows = [], []
            starts = self._starts_list
            for i in indexes:
                i = self._index(i)
                s = bisect_right(starts, i) - 1
                shards.append(s)
                rows.append(i - starts[s])
            return self._read_local(shards, rows, decode)
        idx = self._indexes(indexes)
        if len(idx) == 0:
            return []
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        local = idx - self._starts[shard_of]
        if access.local:
            return self._read_local(shard_of.tolist(), local.tolist(), decode)
        n_idx = len(idx)
        # Offsets i and i + 1 of each document, from the index pages that hold them.
        entries = access.gather(
            "index",
            np.concatenate([shard_of, shard_of]),
            np.concatenate([local, local + 1]),
            layout.OFFSET_DTYPE.itemsize,
        ).view(layout.OFFSET_DTYPE)[:, 0]
        begin, end = entries[:n_idx].astype(np.int64), entries[n_idx:].astype(np.int64)
        requests = [
            ItemRequest(s, "data", a, b, 1)
            for s, a, b in zip(shard_of.tolist(), begin.tolist(), end.tolist())
        ]
        return [decode(b.data) for b in access.read(requests)]

    def _read_local(self, shards: list[int], rows: list[int], decode: Any) -> list[Any]:
        """The local-disk path: per run of consecutive documents of one shard, one positioned
        read of their offsets and one of their bytes. The operating system's page cache holds
        the index, so no page of it is kept (or looked up) in the process."""
        access, h, n = self._access, layout.HEADER_SIZE, len(shards)
        pread = os.pread
        fds: dict[int, tuple[int, int]] = {}  # shard -> (index, data) descriptors, once a batch
        out: list[Any] = []
        row = 0
        while row < n:
            s, first, hi = shards[row], rows[row], row + 1
            while hi < n and shards[hi] == s and rows[hi] == rows[hi - 1] + 1:
                hi += 1
            fd = fds.get(s)
            if fd is None:
                fd = fds[s] = (access.fd(s, "index"), access.fd(s, "data"))
            count = hi - row + 1
            index = pread(fd[0], 8 * count, h + 8 * first)
            if len(index) != 8 * count:
                access.read([ItemRequest(s, "index", first, first + count, 8)])  # names the file
            if count == 2:
                base, stop = _OFFSET_PAIR.unpack(index)
                data = pread(fd[1], stop - base, h + base)
                if len(data) != stop - base:
                    access.read([ItemRequest(s, "data", base, stop, 1)])
                out.append(decode(data))
            else:
                offsets = np.frombuffer(index, layout.OFFSET_DTYPE).tolist()
                base = offsets[0]
                data = pread(fd[1], offsets[-1] - base, h + base)
                if len(data) != offsets[-1] - base:
                    access.read([ItemRequest(s, "data", base, offsets[-1], 1)])
                view = memoryview(data)
                out.extend(decode(view[a - base : b - base]) for a, b in zip(offsets, offsets[1:]))
            row = hi
        return out


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
        tokens = np.array(self.manifest.shard_table.tokens, dtype=np.int64)
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
        idx = self._indexes(indexes)
        if not len(idx):
            return []
        windows = idx.tolist()
        length = self.sequence_length
        g0 = idx * length
        first = np.searchsorted(self._starts, g0, side="right") - 1
        last = np.searchsorted(self._starts, g0 + (length - 1), side="right") - 1
        local = (g0 - self._starts[first]).tolist()
        return [
            [(s, a, a + length, 0)] if s == e else self._pieces(w)
            for w, s, e, a in zip(windows, first.tolist(), last.tolist(), local)
        ]

    def _token_requests(self, plans: list[list[tuple[int, int, int, int]]]) -> list[ItemRequest]:
        return [ItemRequest(s, "data", a, b, self._itemsize) for plan in plans for s, a, b, _ in plan]

    def _elements(
        self, plans: list[list[tuple[int, int, int, int]]], blobs: Sequence[np.ndarray]
    ) -> np.ndarray:
        """The windows as one ``(batch, sequence_length)`` array of stream elements, assembled
        from the fetched ``blobs`` (one per piece, in plan order)."""
        isz = self._itemsize
        out = np.empty((len(plans), self.sequence_length), dtype=self.stream_format.dtype)
        raw = out.view(np.uint8).reshape(len(plans), self.sequence_length * isz)
        k = 0
        for row, plan in enumerate(plans):
            for _, a, b, off in plan:
                raw[row, off * isz : (off + b - a) * isz] = blobs[k]
                k += 1
        return out

    def _split(self, elements: np.ndarray) -> dict[str, np.ndarray]:
        """Structured elements -> ``{field: (batch, sequence_length) array}``."""
        fields = self.stream_format.fields
        if self._single:
            ((name, dt),) = fields.items()
            return {name: elements.view(dt)}  # one packed field: the same bytes, no copy
        return {name: np.ascontiguousarray(elements[name]) for name in fields}

    def read_windows(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Windows ``indexes`` as ``{field: array of shape (len(indexes), sequence_length)}``.

        One batch is one round of merged, concurrent range requests on remote storage (positioned
        reads on local disk).

        Args:
            indexes: Window numbers, each in `0 .. len(self) - 1` (negative numbers count from the
                end), in any order; repeats allowed.

        Returns:
            One array per stream field, row `j` holding window `indexes[j]`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        if self._access.local:
            return self._split(self._read_local(self._indexes(indexes)))
        plans = self._plan(indexes)
        return self._split(self._elements(plans, self._access.read(self._token_requests(plans))))

    def _read_local(self, idx: np.ndarray) -> np.ndarray:
        """The hot path on local disk: windows read straight into the output (`LocalWindows`)."""
        return self._local_windows.read(idx)

    @cached_property
    def _local_windows(self) -> LocalWindows:
        return LocalWindows([self])


class LocalWindows:
    """Windows of one or more local stream views of one dtype, read with ``preadv`` straight
    into one ``(rows, sequence_length)`` output, in the rows' order.

    The hot path of a local stream, and of a mixture of local streams: the shards of all views
    lie on one token axis, so one vectorized lookup finds every window's shard; windows that lie
    back to back in one shard file take one positioned read, into one buffer when they are also
    consecutive rows of the output (a sequential batch, a run of a block shuffle), else into
    several rows at once (a mixture's batch interleaves its sources). A window across a shard
    boundary is read piece by piece. A short read is re-read row by row through the view's
    shard access, whose error names the damaged shard.
    """

    def __init__(self, views: Sequence[_Windows]) -> None:
        self.views = list(views)
        first = self.views[0]
        self.sequence_length = first.sequence_length
        self.dtype = first.stream_format.dtype
        self._itemsize = first._itemsize
        tokens = [int(v._shard_tokens.sum()) for v in self.views]
        self._token_base = np.concatenate([[0], np.cumsum(tokens)[:-1]]).astype(np.int64)
        self._shard_starts = np.concatenate(
            [v._starts + base for v, base in zip(self.views, self._token_base.tolist())]
        ).astype(np.int64)
        self._owner = [i for i, v in enumerate(self.views) for _ in range(len(v._starts))]
        self._shard_of = [j for v in self.views for j in range(len(v._starts))]

    def read(self, local: np.ndarray, src: np.ndarray | None = None) -> np.ndarray:
        """Window ``local[r]`` of view ``src[r]`` (all of view 0 when ``src`` is None) as row ``r``."""
        views, length, isz = self.views, self.sequence_length, self._itemsize
        width = length * isz
        out = np.empty((len(local), length), dtype=self.dtype)
        if not len(local):
            return out
        flat = out.view(np.uint8).reshape(-1).data
        g0 = local * length if src is None else self._token_base[src] + local * length
        first = np.searchsorted(self._shard_starts, g0, side="right") - 1
        last = np.searchsorted(self._shard_starts, g0 + (length - 1), side="right") - 1
        begin = (g0 - self._shard_starts[first]) * isz + layout.HEADER_SIZE
        if src is None or len(views) == 1:  # Python ints: cheaper than array items per row
            r, f, b = list(range(len(local))), first.tolist(), begin.tolist()
            crossing = (first != last).tolist()
        else:  # each view's windows together, in row order
            rows = np.argsort(src, kind="stable")
            r, f, b = rows.tolist(), first[rows].tolist(), begin[rows].tolist()
            crossing = (first != last)[rows].tolist()
        owner, shard_of = self._owner, self._shard_of
        # global shard -> descriptor, for this read: safe while fewer than a view's LRU of open
        # files (the descriptors used last are never the ones it closes)
        fds: dict[int, int] = {}
        n, k = len(r), 0
        while k < n:
            s, x = f[k], r[k]
            if crossing[k]:  # a window that crosses a shard boundary: piece by piece
                view = views[owner[s]]
                for shard, a2, b2, off in view._pieces(int(local[x])):
                    piece = flat[x * width + off * isz : x * width + (off + b2 - a2) * isz]
                    view._access.read_into(shard, "data", a2 * isz, np.frombuffer(piece, np.uint8))
                k += 1
                continue
            fd = fds.get(s)
            if fd is None:
                if len(fds) >= _FDS_PER_READ:
                    fds.clear()  # descriptors the views' LRU may since have closed
                fd = fds[s] = views[owner[s]]._access.fd(shard_of[s], "data")
            # the run: windows back to back in this shard file
            hi, following = k + 1, b[k] + width
            while hi < n and hi - k < _IOV_MAX and f[hi] == s and not crossing[hi] and b[hi] == following:
                hi, following = hi + 1, following + width
            if r[hi - 1] - x == hi - 1 - k:  # consecutive output rows too: one buffer
                buffers = [flat[x * width : (x + hi - k) * width]]
            else:
                buffers = [flat[y * width : (y + 1) * width] for y in r[k:hi]]
            if os.preadv(fd, buffers, b[k]) != width * (hi - k):
                access = views[owner[s]]._access
                for y, at in zip(r[k:hi], b[k:hi]):  # one by one, to name the damaged shard
                    row = np.frombuffer(flat[y * width : (y + 1) * width], np.uint8)
                    access.read_into(shard_of[s], "data", at - layout.HEADER_SIZE, row)
            k = hi
        return out


class StreamDataset(_Windows):
    """Complete, non-overlapping windows of ``sequence_length`` stream elements.

    A sample is ``{field: array of sequence_length values}``.
    """

    storage_type = StreamStorage

    def __init__(self, storage: StreamStorage, sequence_length: int) -> None:
        """Open a view of the stream committed in `storage`, cut into windows.

        Args:
            storage: A `StreamStorage` holding a committed dataset.
            sequence_length: Tokens per window (a positive int). A stream of `n` tokens has
                `n // sequence_length` windows.

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a `StreamStorage`, or `sequence_length` is not an int.
            ValueError: `sequence_length` is not positive.
        """
        self._check_storage(storage)
        super().__init__(storage, sequence_length, storage.format)  # type: ignore[arg-type]

    def __getitems__(self, indexes: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """Windows `indexes`, one dict per window (`read_windows` gives them as one array per
        field instead, without the split).

        Args:
            indexes: Window indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One `{field: array of sequence_length values}` per index, in the order of `indexes`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        batch = self.read_windows(indexes)
        return [{name: arr[row] for name, arr in batch.items()} for row in range(len(indexes))]


class StreamWithMetaDataset(_Windows):
    """Windows of a stream with metadata; each sample is ``format.align(window, spans)``."""

    storage_type = StreamWithMetaStorage

    def __init__(
        self, storage: StreamWithMetaStorage, sequence_length: int, *, index_cache_bytes: int | None = None
    ) -> None:
        """Open a view of the annotated stream committed in `storage`, cut into windows.

        Args:
            storage: A `StreamWithMetaStorage` holding a committed dataset.
            sequence_length: Tokens per window (a positive int).
            index_cache_bytes: Bytes of span-table pages kept in memory (an LRU); None takes
                `$GUIDELOOM_INDEX_CACHE_BYTES`, or 4 MiB.

        Raises:
            DatasetNotFoundError: No dataset is committed at the storage's URL.
            ManifestError: The manifest is unreadable, of an unknown version or invalid.
            StorageAccessError: The storage refused a request or could not be reached.
            TypeError: `storage` is not a `StreamWithMetaStorage`, or `sequence_length` is not
                an int.
            ValueError: `sequence_length` is not positive.
        """
        self._check_storage(storage)
        fmt: StreamWithMetaStorageFormat = storage.format  # type: ignore[assignment]
        super().__init__(storage, sequence_length, fmt.stream_format)
        self.meta_format = fmt
        if index_cache_bytes is not None:
            self._access.cache = PageCache(index_cache_bytes)
        table = self.manifest.shard_table
        self._span_counts = np.array(table.spans, dtype=np.int64)
        # Datasets written since manifest version 2 have a span directory per shard: a window's
        # span rows are then found with one read of it. Older ones are searched (`_span_rows`).
        self._has_dir = "span_dir" in table.files
        if self._has_dir:
            self._blocks = layout.span_block_tokens(self._shard_tokens, self._span_counts)
            expected = layout.HEADER_SIZE + layout.SPAN_DIR_DTYPE.itemsize * layout.span_dir_entries(
                self._shard_tokens, self._span_counts
            )
            bad = np.flatnonzero(np.asarray(table.files["span_dir"].size, dtype=np.int64) != expected)
            if len(bad):
                i = int(bad[0])
                raise ShardCorruptError(
                    f"{table.shard_name(i)}: the manifest records a {table.files['span_dir'].size[i]}-"
                    f"byte span directory, but its counts (tokens={table.tokens[i]}, "
                    f"spans={table.spans[i]}) need {int(expected[i])} bytes; the manifest was "
                    "altered. Rewrite the dataset"
                )

    def _span_rows(self, pieces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Datasets without a span directory (manifest version 1): for each piece ``(shard,
        start, stop, offset)`` (a row of ``pieces``), the rows ``[lo, hi)`` of its shard's span
        table whose spans overlap tokens ``[start, stop)``. Two searches per piece (first span
        ending after ``start``, first span starting at or after ``stop``), probing the span
        table's pages first where a uniform spread of spans over the shard's tokens puts them;
        very uneven spans can take a few rounds."""
        n = len(pieces)
        shard, start, stop = pieces[:, 0], pieces[:, 1], pieces[:, 2]
        counts = self._span_counts[shard]
        density = counts / np.maximum(self._shard_tokens[shard], 1)
        guess_lo = (start * density).astype(np.int64)
        guess_hi = (stop * density).astype(np.int64)
        # The pages between the two guesses hold the spans gathered next: read them in the
        # search's first round (at most a few per piece, so a bad guess costs little).
        per = max(1, self._access.page_bytes // layout.SPAN_DTYPE.itemsize)
        prefetch = [
            (s, p)
            for s, a, b, c in zip(shard.tolist(), guess_lo.tolist(), guess_hi.tolist(), counts.tolist())
            if c
            for p in range(min(a, c - 1) // per + 1, min(b, c - 1, a + 8 * per) // per)
        ]
        bounds = self._access.search(
            "spans",
            np.concatenate([shard, shard]),
            np.concatenate([start, stop]),
            words=[1] * n + [0] * n,  # stop column (word 1), then start column (word 0)
            sides=["right"] * n + ["left"] * n,
            itemsize=layout.SPAN_DTYPE.itemsize,
            counts=np.concatenate([counts, counts]),
            guesses=np.concatenate([guess_lo, guess_hi]),
            prefetch=prefetch,
        )
        return bounds[:n], bounds[n:]

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        """Windows `indexes` with their spans, shaped by the format's `align_batch`.

        Args:
            indexes: Window indexes, each in `-len(ds) .. len(ds) - 1`, in any order; repeats
                allowed.

        Returns:
            One sample per index, in the order of `indexes`: by default `{field: array,
            "spans": [(start, stop, annotation), ...]}` with spans clipped to the window, in
            window coordinates.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.meta_format.align_batch(*self._windows_and_spans(indexes))

    def read_aligned(self, indexes: Sequence[int]) -> Any:
        """What the loader reads for the default collate: `__getitems__`'s samples, except that
        a format with the default `align` gets a `SpanBatch` (the batch's arrays and each row's
        spans, without a dict per row), which the default collate turns into the same batch.

        Args:
            indexes: Window indexes, as for `__getitems__`.

        Returns:
            A `guideloom.formats.meta.SpanBatch` (`windows`: `{field: (batch, sequence_length)
            array}`, `spans`: each row's spans), or what
            `__getitems__` returns when the format has its own `align` or `align_batch`.

        Raises:
            IndexError: An index is out of range.
            TypeError: An index is not an integer.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        fmt = type(self.meta_format)
        if fmt.align is StreamWithMetaStorageFormat.align and (
            fmt.align_batch is StreamWithMetaStorageFormat.align_batch
        ):
            return SpanBatch(*self._windows_and_spans(indexes))
        return self.__getitems__(indexes)

    def _windows_and_spans(self, indexes: Sequence[int]) -> tuple[dict[str, np.ndarray], list[list[Span]]]:
        """``({field: (batch, sequence_length) array}, spans of each row)`` for ``indexes``."""
        local = self._access.local
        if local and self._has_dir:
            return self._read_local_meta(self._indexes(indexes))
        plans = self._plan(indexes)
        requests = [] if local else self._token_requests(plans)
        n_tokens = len(requests)
        n = sum(len(plan) for plan in plans)
        flat = np.array([piece for plan in plans for piece in plan], dtype=np.int64).reshape(n, 4)
        shard, start, stop, offset = flat.T
        rows_of_piece = np.repeat(np.arange(len(plans)), [len(plan) for plan in plans])
        span_bytes = layout.SPAN_DTYPE.itemsize
        if self._has_dir:
            # One round of index reads: the directory entries at both ends of every piece bound
            # its span rows and their meta bytes; those are then read with the tokens.
            k0, k1 = layout.span_candidates(start, stop, self._blocks[shard])
            ends = self._access.gather(
                "span_dir",
                np.concatenate([shard, shard]),
                np.concatenate([k0, k1]),
                layout.SPAN_DIR_DTYPE.itemsize,
            ).view("<u8")
            lo, hi = ends[:n, 0].astype(np.int64), ends[n:, 1].astype(np.int64)
            m0, m1 = ends[:n, 2].astype(np.int64), ends[n:, 3].astype(np.int64)
            has = np.flatnonzero(hi > lo)
            first_span = len(requests)
            requests.extend(
                ItemRequest(s_, "spans", a, b, span_bytes)
                for s_, a, b in zip(shard[has].tolist(), lo[has].tolist(), hi[has].tolist())
            )
        else:
            lo, hi = self._span_rows(flat) if n else (np.empty(0, np.int64), np.empty(0, np.int64))
            has = np.flatnonzero(hi > lo)
        lengths = (hi - lo)[has]
        total = int(lengths.sum())
        if not self._has_dir:
            # Every overlapping span of the batch: one gather (its pages were read by the search).
            first = np.cumsum(lengths) - lengths
            rows = np.arange(total, dtype=np.int64) - np.repeat(first - lo[has], lengths)
            table = self._access.gather("spans", np.repeat(shard[has], lengths), rows, span_bytes)
            table = table.view("<u8").reshape(total, 4)
            ends_at = np.cumsum(lengths) - 1
            m0 = np.zeros(n, np.int64)
            m1 = np.zeros(n, np.int64)
            m0[has], m1[has] = table[first, 2], table[ends_at, 3]
        first_meta = len(requests)
        requests.extend(
            ItemRequest(s_, "meta", a, b, 1)
            for s_, a, b in zip(shard[has].tolist(), m0[has].tolist(), m1[has].tolist())
        )
        blobs = self._access.read(requests)
        if self._has_dir:
            spans_blobs = blobs[first_span:first_meta]
            table = (
                np.concatenate(spans_blobs).view("<u8").reshape(total, 4)
                if total
                else (np.empty((0, 4), np.uint64))
            )
        if local:
            windows = self._split(self._read_local(self._indexes(indexes)))
        else:
            windows = self._split(self._elements(plans, blobs[:n_tokens]))
        return windows, self._batch_spans(
            len(plans), rows_of_piece[has], flat[has], lengths, table, m0[has], blobs[first_meta:]
        )

    def _read_local_meta(self, idx: np.ndarray) -> tuple[dict[str, np.ndarray], list[list[Span]]]:
        """The local-disk path with a span directory, for the whole batch at once.

        The batch's window pieces are sorted by shard and position and grouped into runs whose
        directory entries touch (consecutive windows, or windows a block apart). A run costs
        three positioned reads: its directory entries, its span rows and their meta bytes (the
        operating system caches them; nothing is kept in the process). Which rows overlap which
        piece, clipping and the shift to window coordinates are then array operations over the
        batch; Python only decodes the annotations."""
        windows = self._split(self._read_local(idx))
        length, n = self.sequence_length, len(idx)
        if not n:
            return windows, []
        g0 = idx * length
        first = np.searchsorted(self._starts, g0, side="right") - 1
        last = np.searchsorted(self._starts, g0 + (length - 1), side="right") - 1
        row = np.arange(n, dtype=np.int64)
        shard, start = first, g0 - self._starts[first]
        stop, off = start + length, np.zeros(n, np.int64)
        crossing = np.flatnonzero(first != last)
        if len(crossing):  # windows across a shard boundary: one piece per shard they touch
            keep = first == last
            extra = [(r, *piece) for r in crossing.tolist() for piece in self._pieces(int(idx[r]))]
            x = np.array(extra, dtype=np.int64).reshape(-1, 5)
            row, shard, start, stop, off = (
                np.concatenate([col[keep], x[:, c]]) for c, col in enumerate((row, shard, start, stop, off))
            )
        order = np.lexsort((start, shard))
        row, shard, start, stop, off = row[order], shard[order], start[order], stop[order], off[order]
        block = self._blocks[shard]
        k0, k1 = layout.span_candidates(start, stop, block)
        # A new run where the shard changes or the directory entries do not touch the last's.
        new = np.ones(len(shard), bool)
        new[1:] = (shard[1:] != shard[:-1]) | (k0[1:] > np.maximum.accumulate(k1)[:-1])
        heads = np.flatnonzero(new)
        run_of_piece = np.cumsum(new) - 1
        run_k1 = np.maximum.reduceat(k1, heads)
        access, h, pread = self._access, layout.HEADER_SIZE, os.pread
        row_bytes: list[bytes] = []
        meta_bytes: list[bytes] = []
        meta_first: list[int] = []
        for s_, a_, b_ in zip(shard[heads].tolist(), k0[heads].tolist(), run_k1.tolist()):
            entries = pread(access.fd(s_, "span_dir"), (b_ - a_ + 1) * 32, h + a_ * 32)
            if len(entries) != (b_ - a_ + 1) * 32:
                access.read([ItemRequest(s_, "span_dir", a_, b_ + 1, 32)])  # names the file
            lo, m0 = _DIR_FIRST.unpack_from(entries, 0)
            hi, m1 = _DIR_AFTER.unpack_from(entries, len(entries) - 32)
            rows = pread(access.fd(s_, "spans"), (hi - lo) * 32, h + lo * 32) if hi > lo else b""
            meta = pread(access.fd(s_, "meta"), m1 - m0, h + m0) if m1 > m0 else b""
            if len(rows) != max(hi - lo, 0) * 32 or len(meta) != max(m1 - m0, 0):
                access.read([ItemRequest(s_, "spans", lo, hi, 32), ItemRequest(s_, "meta", m0, m1, 1)])
            row_bytes.append(rows)
            meta_bytes.append(meta)
            meta_first.append(m0)
        counts = np.array([len(r) // 32 for r in row_bytes], dtype=np.int64)
        table = np.frombuffer(b"".join(row_bytes), "<u8").reshape(-1, 4).view(np.int64)
        # Rows of all runs in one sorted key space (run << 44 | token): one search per bound.
        run_key = np.repeat(np.arange(len(heads), dtype=np.int64) << 44, counts)
        piece_key = run_of_piece << 44
        r0 = np.searchsorted(run_key | table[:, 1], piece_key | start, side="right")
        r1 = np.searchsorted(run_key | table[:, 0], piece_key | stop, side="left")
        lengths = np.maximum(r1 - r0, 0)
        piece = np.repeat(np.arange(len(row), dtype=np.int64), lengths)
        span = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(
            r0 - (np.cumsum(lengths) - lengths), lengths
        )
        p_start, shift = start[piece], (off - start)[piece]
        x = np.maximum(table[span, 0], p_start) + shift
        y = np.minimum(table[span, 1], stop[piece]) + shift
        # Meta bytes of the batch joined end to end: run j's begin at cut[j].
        sizes = np.array([len(m) for m in meta_bytes], dtype=np.int64)
        cut = (np.cumsum(sizes) - sizes - np.array(meta_first, dtype=np.int64))[run_of_piece[piece]]
        q0, q1 = table[span, 2] + cut, table[span, 3] + cut
        # Spans in row order, and by position within each row.
        rows_of_span = row[piece]
        by_row = np.lexsort((x, rows_of_span))
        joined = memoryview(b"".join(meta_bytes))
        notes = self.meta_format.decode_meta_batch(joined, q0[by_row].tolist(), q1[by_row].tolist())
        spans = list(zip(x[by_row].tolist(), y[by_row].tolist(), notes))
        bounds = np.searchsorted(rows_of_span[by_row], np.arange(n + 1)).tolist()
        return windows, [spans[bounds[r] : bounds[r + 1]] for r in range(n)]

    def _batch_spans(
        self,
        batch: int,
        rows_of_piece: np.ndarray,
        pieces: np.ndarray,
        lengths: np.ndarray,
        table: np.ndarray,
        meta_base: np.ndarray,
        metas: Sequence[np.ndarray],
    ) -> list[list[Span]]:
        """Each row's spans, clipped to its window and in window coordinates, from the span rows
        read for the batch's pieces (``lengths[k]`` rows of ``table`` for piece ``pieces[k]``,
        possibly some that do not overlap it) and each piece's meta bytes (``metas[k]``, which
        start at meta offset ``meta_base[k]`` of its shard). Whole-batch array work; Python only
        decodes the annotations."""
        out: list[list[Span]] = [[] for _ in range(batch)]
        if not len(table):
            return out
        piece = np.repeat(np.arange(len(lengths)), lengths)
        shard_, start, stop, offset = (pieces[:, c][piece] for c in range(4))
        s0, s1 = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        keep = np.flatnonzero((s1 > start) & (s0 < stop))
        piece, start, stop, offset = piece[keep], start[keep], stop[keep], offset[keep]
        shift = offset - start
        w0 = (np.maximum(s0[keep], start) + shift).tolist()
        w1 = (np.minimum(s1[keep], stop) + shift).tolist()
        # Meta bytes of the batch joined end to end: piece k's begin at cut[k].
        cut = np.cumsum([0] + [len(m) for m in metas[:-1]]) - meta_base
        joined = (np.concatenate(metas) if len(metas) > 1 else metas[0]).data
        a = (table[keep, 2].astype(np.int64) + cut[piece]).tolist()
        b = (table[keep, 3].astype(np.int64) + cut[piece]).tolist()
        spans = list(zip(w0, w1, self.meta_format.decode_meta_batch(joined, a, b)))
        rows = rows_of_piece[piece]
        bounds = np.searchsorted(rows, np.arange(batch + 1)).tolist()
        for r in range(batch):
            if bounds[r] < bounds[r + 1]:
                out[r] = spans[bounds[r] : bounds[r + 1]]
        return out
