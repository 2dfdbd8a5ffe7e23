"""Streams cut into windows: `StreamDataset`, and the reader of windows every stream view uses.

A stream is every record of every shard joined end to end in manifest order; ``StreamDataset(
storage, L)`` cuts it into complete, non-overlapping windows of ``L`` elements: window ``i`` is
elements ``[i*L, (i+1)*L)``. Windows cross record and shard boundaries; only the final partial
window of the whole stream is dropped.

`WindowReader` reads the windows of a batch, of one stream view or of several (a mixture's
sources), into one ``(rows, L)`` array of stream elements: all shards lie on one token axis, so
one lookup finds every window's shard; windows that lie back to back in one shard file make one
request (a *run*), read into one buffer when they are also consecutive rows of the output (a
sequential batch, a run of a block shuffle), else into several rows at once (a mixture's batch
interleaves its sources). A window across a shard boundary is one request per piece. The
requests go to the views' shard readers in one call per view: on local disk one ``preadv`` per
run straight into the output, elsewhere one round of merged, concurrent range requests. The
same plan serves both.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Sequence
from functools import cached_property
from itertools import repeat

import numpy as np

import guideloom.layout as layout
from guideloom.formats import StreamNumpyFormat
from guideloom.storage.base import Storage, StreamStorage
from guideloom.storage.indexfiles import IndexFiles
from guideloom.storage.view import View, run_lengths

__all__ = ["StreamDataset", "WindowReader", "Windows", "window_pieces"]

Piece = tuple[int, int, int, int]  # (shard, start, stop, offset in the window), in tokens
# Windows of several views: up to this many are planned in Python ints.
_SMALL_MIXED = 128
_FEW_PIECES = 24  # record-start lookups of at most this many shard pieces go piece by piece


def window_pieces(starts: Sequence[int], tokens: Sequence[int], window: int, length: int) -> list[Piece]:
    """``(shard, start, stop, offset_in_window)`` pieces covering window ``window`` of ``length``
    tokens, over shards that start at token ``starts[s]`` and hold ``tokens[s]`` tokens."""
    g0, g1 = window * length, (window + 1) * length
    shard = bisect_right(starts, g0) - 1
    out = []
    pos = g0
    while pos < g1:
        start = pos - starts[shard]
        stop = min(tokens[shard], g1 - starts[shard])
        if stop > start:
            out.append((shard, start, stop, pos - g0))
            pos += stop - start
        shard += 1
    return out


class Windows(View):
    """Window arithmetic shared by the two stream views (`StreamDataset`, `StreamWithMetaDataset`).

    Public for the readers built on them: `shard_starts` (each shard's first token on the
    stream's token axis), `shard_tokens`, `total_tokens`, and the view's `reader`.
    """

    sequence_length: int
    small_batch = 128

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
        self.shard_tokens = tokens
        self.shard_starts = np.concatenate([[0], np.cumsum(tokens)])[:-1] if len(tokens) else tokens
        self.total_tokens = int(tokens.sum())
        self._len = self.total_tokens // self.sequence_length
        self._itemsize = stream_format.itemsize

    @cached_property
    def _windows(self) -> WindowReader:
        """The reader of this view's windows, built on the first read (opening stays cheap)."""
        return WindowReader([self])

    @cached_property
    def _shard_lists(self) -> tuple[list[int], list[int]]:
        """Shard starts and token counts as Python ints, for `pieces` (bisection per call)."""
        return self.shard_starts.tolist(), self.shard_tokens.tolist()

    @property
    def _starts(self) -> np.ndarray:  # the name tests and older callers use for `shard_starts`
        return self.shard_starts

    @property
    def sample_bytes(self) -> int:
        """Bytes of one window in storage: ``sequence_length`` elements of the stream's fields."""
        return self.sequence_length * self.stream_format.itemsize

    def pieces(self, window: int) -> list[Piece]:
        """Where window ``window``'s tokens are: one piece per shard it touches.

        Args:
            window: A window number in `0 .. len(self) - 1`.

        Returns:
            `(shard, start, stop, offset)` per piece, in window order: tokens `[start, stop)` of
            shard `shard` (a row of the manifest's shard table) are the window's tokens from
            `offset` on.
        """
        starts, tokens = self._shard_lists
        return window_pieces(starts, tokens, window, self.sequence_length)

    # -- record starts ----------------------------------------------------------------------

    @property
    def has_record_starts(self) -> bool:
        """Whether the dataset stores record starts (written by GuideLoom with manifest version
        3 on; older streams have none: use their end-of-document token or a field instead)."""
        return "starts" in self.manifest.shard_table.files

    @property
    def _start_maps(self) -> dict[int, np.ndarray]:
        """Memory maps of local record-start files, by shard, in this process only."""
        maps = self.__dict__.get("_start_maps_")
        if maps is None or self.__dict__.get("_start_maps_pid") != os.getpid():
            maps = self.__dict__["_start_maps_"] = {}
            self.__dict__["_start_maps_pid"] = os.getpid()
        return maps  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.pop("_start_maps_", None)  # maps stay with the process that made them
        state.pop("_start_maps_pid", None)
        return state

    @cached_property
    def _start_index(self) -> IndexFiles:
        """Pages of the record-start files, cached like the document index (bounded in bytes)."""
        return IndexFiles(self.reader)

    def record_starts(self, window: int) -> np.ndarray:
        """Where records start inside window ``window``: sorted, distinct positions in
        ``0 .. sequence_length - 1`` (``int64``), relative to the window's first token. A record
        that began in an earlier window is not listed (its tokens continue from position 0).

        Args:
            window: A window number in `0 .. len(self) - 1`.

        Returns:
            The positions, sorted.

        Raises:
            IndexError: ``window`` is out of range.
            ValueError: The dataset has no record starts (see `has_record_starts`).
        """
        positions, counts = self.record_starts_batch([window])
        return positions

    def record_starts_batch(self, indexes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`record_starts` of many windows in one round of reads: ``(positions, counts)``, the
        positions of window ``indexes[j]`` being ``positions[sum(counts[:j]) : sum(counts[:j + 1])]``.

        Args:
            indexes: Window numbers.

        Returns:
            ``(positions, counts)``, both ``int64``.

        Raises:
            IndexError: An index is out of range.
            ValueError: The dataset has no record starts (see `has_record_starts`).
        """
        if not self.has_record_starts:
            raise ValueError(
                f"{self.url} has no record starts (it was written before GuideLoom stored them, "
                "manifest version < 3); rewrite it with this GuideLoom, or find document "
                "boundaries from an end-of-document token id or a field such as doc_index"
            )
        idx = np.asarray(self._indexes(indexes), dtype=np.int64)  # type: ignore[arg-type]
        length = self.sequence_length
        g0 = idx * length
        g1 = g0 + length
        starts = self.shard_starts
        s0 = np.searchsorted(starts, g0, side="right") - 1
        s1 = np.searchsorted(starts, g1 - 1, side="right") - 1
        per = s1 - s0 + 1  # shards each window touches (zero-token shards included)
        heads = np.cumsum(per) - per
        window_of = np.repeat(np.arange(len(idx)), per)
        shard = np.repeat(s0, per) + np.arange(int(per.sum())) - np.repeat(heads, per)
        a = np.maximum(g0[window_of] - starts[shard], 0)
        b = np.minimum(g1[window_of] - starts[shard], self.shard_tokens[shard])
        if self.reader.local:
            return self._local_record_starts(idx, shard, window_of, a, b, g0)
        records = np.asarray(self.manifest.shard_table.records, dtype=np.int64)[shard]
        tokens = np.maximum(self.shard_tokens[shard], 1)
        n = len(shard)
        both = np.concatenate([a, b])
        found = self._start_index.search(
            "starts",
            np.concatenate([shard, shard]),
            both,
            words=[0] * (2 * n),
            sides=["left"] * (2 * n),
            itemsize=layout.RECORD_START_DTYPE.itemsize,
            counts=np.concatenate([records, records]),
            guesses=np.concatenate([records, records]) * both // np.concatenate([tokens, tokens]),
        )
        lo, hi = found[:n], found[n:]
        keep = hi > lo
        if keep.any():
            raw = self._start_index.runs(
                "starts", shard[keep], lo[keep], hi[keep], layout.RECORD_START_DTYPE.itemsize
            )
            values = np.frombuffer(raw, layout.RECORD_START_DTYPE).astype(np.int64)
        else:
            values = np.empty(0, np.int64)
        return self._window_positions(values, hi - lo, keep, shard, window_of, g0, len(idx))

    def _local_record_starts(
        self,
        idx: np.ndarray,
        shard: np.ndarray,
        window_of: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        g0: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """On local disk: each shard's record starts memory-mapped (the OS page cache holds
        them; nothing is copied into the process), searched with ``np.searchsorted``."""
        n = len(shard)
        if n <= _FEW_PIECES:
            lo, hi, values = self._few_starts(shard, a, b)
        else:
            lo, hi, values = self._many_starts(shard, a, b)
        return self._window_positions(values, hi - lo, hi > lo, shard, window_of, g0, len(idx))

    def _starts_of(self, shard: int) -> np.ndarray:
        starts = self._start_maps.get(shard)
        if starts is None:
            starts = self._start_maps[shard] = self._map_starts(shard)
        return starts

    def _few_starts(self, shard: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
        """Record starts in ``[a[j], b[j])`` of shard ``shard[j]``, piece by piece (a few pieces:
        fewer NumPy calls than `_many_starts`)."""
        lo = np.empty(len(shard), np.int64)
        hi = np.empty(len(shard), np.int64)
        chunks = []
        for k, s in enumerate(shard.tolist()):
            starts = self._starts_of(s)
            lo[k], hi[k] = starts.searchsorted((a[k], b[k]), side="left")
            chunks.append(starts[lo[k] : hi[k]])
        values = np.concatenate(chunks).astype(np.int64) if chunks else np.empty(0, np.int64)
        return lo, hi, values

    def _many_starts(self, shard: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
        """`_few_starts` for many pieces (a read-ahead group): one search and one gather per
        shard touched, not per piece."""
        present = np.unique(shard).tolist()
        n = len(shard)
        lo = np.empty(n, np.int64)
        hi = np.empty(n, np.int64)
        for s in present:
            sel = slice(None) if len(present) == 1 else shard == s
            found = self._starts_of(s).searchsorted(np.concatenate((a[sel], b[sel])), side="left")
            k = len(found) // 2
            lo[sel], hi[sel] = found[:k], found[k:]
        counts = hi - lo
        piece = np.repeat(np.arange(n), counts)
        # Piece j's starts are its shard's [lo[j], hi[j]): their places in that shard's array.
        source = np.arange(len(piece), dtype=np.int64) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
        values = np.empty(len(piece), np.int64)
        if len(present) == 1:
            values[:] = self._starts_of(present[0])[source]
        else:
            shard_of = shard[piece]
            for s in present:
                mine = shard_of == s
                values[mine] = self._starts_of(s)[source[mine]]
        return lo, hi, values

    def _map_starts(self, shard: int) -> np.ndarray:
        mapped = self.reader.map_file(shard, "starts")  # size-checked; None: not on local disk
        if mapped is None:
            raise RuntimeError(f"{self.url}: record starts are mapped only from local disk (reader.local)")
        if self.manifest.shard_table.records[shard] == 0:
            return np.empty(0, layout.RECORD_START_DTYPE)
        return np.frombuffer(mapped, layout.RECORD_START_DTYPE, offset=layout.HEADER_SIZE)

    def _window_positions(
        self,
        values: np.ndarray,
        sizes: np.ndarray,
        keep: np.ndarray,
        shard: np.ndarray,
        window_of: np.ndarray,
        g0: np.ndarray,
        windows: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        starts = self.shard_starts
        piece_counts = sizes[keep]
        owner = np.repeat(window_of[keep], piece_counts)
        positions = values + np.repeat((starts[shard] - g0[window_of])[keep], piece_counts)
        # Empty records repeat a position (and a shard's end meets the next one's start): one each.
        distinct = np.ones(len(positions), bool)
        distinct[1:] = (positions[1:] != positions[:-1]) | (owner[1:] != owner[:-1])
        positions, owner = positions[distinct], owner[distinct]
        return positions, np.bincount(owner, minlength=windows).astype(np.int64)

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
        return self.stream_format.split_fields(self._windows.read(self._batch(indexes)))


class WindowReader:
    """Windows of one or more stream views of one element dtype and window length, read into
    one ``(rows, sequence_length)`` array in the rows' order (see the module docstring)."""

    def __init__(self, views: Sequence[Windows]) -> None:
        self.views = list(views)
        first = self.views[0]
        self.sequence_length = first.sequence_length
        self.dtype = first.stream_format.dtype
        self.itemsize = first.stream_format.itemsize
        totals = [v.total_tokens for v in self.views]
        base = np.concatenate([[0], np.cumsum(totals)[:-1]]).astype(np.int64)
        self._token_base = base
        self._shard_starts = np.concatenate(
            [v.shard_starts + b for v, b in zip(self.views, base.tolist())]
        ).astype(np.int64)
        self._shard_stops = self._shard_starts + np.concatenate([v.shard_tokens for v in self.views])
        owner = [i for i, v in enumerate(self.views) for _ in range(len(v.shard_starts))]
        shard_of = [j for v in self.views for j in range(len(v.shard_starts))]
        self._owner = np.array(owner, dtype=np.int64)
        self._shard_of = np.array(shard_of, dtype=np.int64)
        # The same as Python lists, for small batches and for the pieces of crossing windows.
        self._base_l: list[int] = base.tolist()
        self._starts_l: list[int] = self._shard_starts.tolist()
        self._stops_l: list[int] = self._shard_stops.tolist()
        self._owner_l, self._shard_of_l = owner, shard_of

    def read(
        self, local: Sequence[int] | np.ndarray, src: Sequence[int] | np.ndarray | None = None
    ) -> np.ndarray:
        """Window ``local[r]`` of view ``src[r]`` (of view 0 when ``src`` is None) as row ``r``;
        indexes must be in range (the views check them)."""
        out, requests, buffers = self.plan(local, src)
        for view, reqs, bufs in zip(self.views, requests, buffers):
            if reqs:
                view.reader.read_into(reqs, bufs)
        return out

    def plan(
        self, local: Sequence[int] | np.ndarray, src: Sequence[int] | np.ndarray | None = None
    ) -> tuple[np.ndarray, list[list[tuple[int, str, int, int]]], list[list[list[memoryview]]]]:
        """``(out, requests, buffers)``: the output array, and per view the requests and the
        buffers (slices of ``out``) `read` hands its reader. A caller may add requests of its
        own to a view's lists before reading them (one round of I/O for all)."""
        n = len(local)
        out = np.empty((n, self.sequence_length), dtype=self.dtype)
        requests: list[list[tuple[int, str, int, int]]] = [[] for _ in self.views]
        buffers: list[list[list[memoryview]]] = [[] for _ in self.views]
        if n:
            flat = out.view(np.uint8).reshape(-1).data
            one = src is None or len(self.views) == 1
            if n <= (self.views[0].small_batch if one else _SMALL_MIXED):
                self._plan_small(local, src, flat, requests, buffers)
            else:
                self._plan_large(np.asarray(local, dtype=np.int64), src, flat, requests, buffers)
        return out, requests, buffers

    # -- planning -------------------------------------------------------------------------------

    def _plan_small(
        self,
        local: Sequence[int] | np.ndarray,
        src: Sequence[int] | np.ndarray | None,
        flat: memoryview,
        requests: list[list[tuple[int, str, int, int]]],
        buffers: list[list[list[memoryview]]],
    ) -> None:
        """A few windows: the same plan as `_plan_large`, in Python ints."""
        length, isz, h = self.sequence_length, self.itemsize, layout.HEADER_SIZE
        width = length * isz
        starts, stops, owner = self._starts_l, self._stops_l, self._owner_l
        windows = local.tolist() if isinstance(local, np.ndarray) else list(local)
        if src is None or len(self.views) == 1:
            self._plan_small_one(windows, flat, requests[0], buffers[0])
            return
        src_a = np.asarray(src, dtype=np.int64)
        rows = np.argsort(src_a, kind="stable").tolist()  # each view's rows together, in order
        base = self._base_l
        g0 = [base[v] + w * length for v, w in zip(src_a.tolist(), windows)]
        runs: list[tuple[int, int, list[int]]] = []  # (shard, first byte, rows) back to back
        run_shard = run_end = -1
        rows_of_run: list[int] = []
        for r in rows:
            g = g0[r]
            s = bisect_right(starts, g) - 1
            if g + length > stops[s]:  # crosses into the next shard: a request per piece
                self._pieces(windows[r], owner[s], r, flat, requests, buffers)
                continue
            begin = h + (g - starts[s]) * isz
            if s == run_shard and begin == run_end:
                rows_of_run.append(r)
                run_end += width
                continue
            rows_of_run = [r]
            runs.append((s, begin, rows_of_run))
            run_shard, run_end = s, begin + width
        shard_of = self._shard_of_l
        for s, begin, run in runs:
            v = owner[s]
            requests[v].append((shard_of[s], "data", begin, begin + len(run) * width))
            if run[-1] - run[0] == len(run) - 1:  # consecutive output rows too: one buffer
                buffers[v].append([flat[run[0] * width : (run[-1] + 1) * width]])
            else:
                buffers[v].append([flat[y * width : (y + 1) * width] for y in run])

    def _plan_small_one(
        self,
        windows: list[int],
        flat: memoryview,
        requests: list[tuple[int, str, int, int]],
        buffers: list[list[memoryview]],
    ) -> None:
        """`_plan_small` for the windows of one view: output rows follow the windows, so a run
        is always one buffer."""
        length, isz, h = self.sequence_length, self.itemsize, layout.HEADER_SIZE
        width = length * isz
        starts, stops, shard_of = self._starts_l, self._stops_l, self._shard_of_l
        run_shard = run_begin = run_end = run_row = -1
        for r, w in enumerate(windows):
            g = w * length
            s = bisect_right(starts, g) - 1
            begin = h + (g - starts[s]) * isz
            if s == run_shard and begin == run_end and g + length <= stops[s]:
                run_end += width
                continue
            if run_shard >= 0:
                requests.append((shard_of[run_shard], "data", run_begin, run_end))
                buffers.append([flat[run_row * width : r * width]])
            if g + length > stops[s]:  # crosses into the next shard: a request per piece
                self._pieces(w, 0, r, flat, [requests], [buffers])
                run_shard = -1
                continue
            run_shard, run_begin, run_end, run_row = s, begin, begin + width, r
        if run_shard >= 0:
            requests.append((shard_of[run_shard], "data", run_begin, run_end))
            buffers.append([flat[run_row * width : len(windows) * width]])

    def _plan_large(
        self,
        local: np.ndarray,
        src: Sequence[int] | np.ndarray | None,
        flat: memoryview,
        requests: list[list[tuple[int, str, int, int]]],
        buffers: list[list[list[memoryview]]],
    ) -> None:
        """Many windows: runs found with whole-array operations; Python touches each run once."""
        length, isz = self.sequence_length, self.itemsize
        width = length * isz
        n = len(local)
        many = src is not None and len(self.views) > 1
        if many:
            src_a = np.asarray(src, dtype=np.int64)
            rows = np.argsort(src_a, kind="stable")  # each view's windows together, in row order
            g0 = self._token_base[src_a[rows]] + local[rows] * length
        else:
            g0 = local * length
        shard = np.searchsorted(self._shard_starts, g0, side="right") - 1
        begin = (g0 - self._shard_starts[shard]) * isz + layout.HEADER_SIZE
        crossing = g0 + length > self._shard_stops[shard]
        any_crossing = bool(crossing.any())
        # A run starts where the shard changes, the bytes do not follow on, or a crossing window
        # stands (it is a run of its own, read piece by piece).
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(shard[1:], shard[:-1], out=new[1:])
        new[1:] |= begin[1:] != begin[:-1] + width
        if any_crossing:
            new |= crossing
            new[1:] |= crossing[:-1]
        heads = new.nonzero()[0]
        counts = run_lengths(heads, n)
        if any_crossing:
            cross = crossing[heads]
            for k in heads[cross].tolist():
                r = int(rows[k]) if many else k
                self._pieces(int(local[r]), self._owner_l[int(shard[k])], r, flat, requests, buffers)
            keep = ~cross
            heads, counts = heads[keep], counts[keep]
        if not len(heads):
            return
        run_shard = shard[heads]
        first_byte = begin[heads]
        if many:
            first_row = rows[heads]
            together = rows[heads + counts - 1] - first_row == counts - 1
        else:
            first_row = heads
        out_begin = (first_row * width).tolist()
        out_end = ((first_row + counts) * width).tolist()
        reqs = list(
            zip(
                self._shard_of[run_shard].tolist(),
                repeat("data"),
                first_byte.tolist(),
                (first_byte + counts * width).tolist(),
            )
        )
        bufs = [[flat[a:b]] for a, b in zip(out_begin, out_end)]
        if many:
            for j in np.flatnonzero(~together).tolist():  # rows apart in the output: one buffer each
                h, c = int(heads[j]), int(counts[j])
                bufs[j] = [flat[y * width : (y + 1) * width] for y in rows[h : h + c].tolist()]
            owner = self._owner[run_shard]
            cuts = np.searchsorted(owner, np.arange(len(self.views) + 1)).tolist()
            for v in range(len(self.views)):
                requests[v].extend(reqs[cuts[v] : cuts[v + 1]])
                buffers[v].extend(bufs[cuts[v] : cuts[v + 1]])
        else:
            requests[0].extend(reqs)
            buffers[0].extend(bufs)

    def _pieces(
        self,
        window: int,
        v: int,
        row: int,
        flat: memoryview,
        requests: list[list[tuple[int, str, int, int]]],
        buffers: list[list[list[memoryview]]],
    ) -> None:
        """The requests of window ``window`` of view ``v`` (one that crosses a shard boundary),
        one per piece, into row ``row`` of the output."""
        view = self.views[v]
        isz, h = self.itemsize, layout.HEADER_SIZE
        at = row * self.sequence_length * isz
        for s, a, b, off in view.pieces(window):
            requests[v].append((s, "data", h + a * isz, h + b * isz))
            buffers[v].append([flat[at + off * isz : at + (off + b - a) * isz]])


class StreamDataset(Windows):
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

    def read_batch(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """The batch as the loader's default collate takes it: `read_windows`'s arrays.

        Args:
            indexes: Window indexes, as for `read_windows`.

        Returns:
            `{field: array of shape (len(indexes), sequence_length)}`.

        Raises:
            IndexError: An index is out of range.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.read_windows(indexes)

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
