"""Reading the windows of stream views: one ``(rows, sequence_length)`` array per batch.

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

from bisect import bisect_right
from collections.abc import Sequence
from itertools import repeat
from typing import Protocol

import numpy as np

import guideloom.layout as layout
from guideloom.formats import StreamNumpyFormat
from guideloom.storage.view import run_lengths
from guideloom.types import ShardReader

__all__ = ["Piece", "WindowReader", "WindowSource", "window_pieces"]

Piece = tuple[int, int, int, int]  # (shard, start, stop, offset in the window), in tokens
# Windows of several views: up to this many are planned in Python ints.
_SMALL_MIXED = 128


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


class WindowSource(Protocol):
    """What `WindowReader` reads of a stream view (a `guideloom.storage.windows.Windows`)."""

    sequence_length: int
    stream_format: StreamNumpyFormat
    shard_starts: np.ndarray
    shard_tokens: np.ndarray
    total_tokens: int

    @property
    def small_batch(self) -> int: ...

    @property
    def reader(self) -> ShardReader: ...

    def pieces(self, window: int) -> list[Piece]: ...


class WindowReader:
    """Windows of one or more stream views of one element dtype and window length, read into
    one ``(rows, sequence_length)`` array in the rows' order (see the module docstring)."""

    def __init__(self, views: Sequence[WindowSource]) -> None:
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
