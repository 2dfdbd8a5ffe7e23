"""`StreamWithMetaDataset`: windows of a stream with the annotated spans that overlap them.

It reads the same windows as `StreamDataset` and hands the format's ``align_batch`` the spans
overlapping each window, clipped, in window coordinates. A batch is one round of index reads
(to find which span rows and annotation bytes its windows need) and then one read, through the
shard reader, of its tokens, those span rows and those annotations together.

Datasets written since manifest version 2 have a span directory per shard (`guideloom.layout`):
the batch's window pieces are sorted by shard and position and grouped into runs whose
directory entries touch; the two ends of a run's entries bound its span rows and their
annotation bytes. Which rows overlap which piece, clipping and the shift to window coordinates
are then array operations over the whole batch; Python only decodes the annotations. Older
datasets have no directory: their span tables are searched by pages (`IndexFiles.search`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import guideloom.layout as layout
from guideloom.errors import ShardCorruptError
from guideloom.formats import StreamWithMetaStorageFormat
from guideloom.formats.meta import Span, SpanBatch
from guideloom.storage.base import StreamWithMetaStorage
from guideloom.storage.indexfiles import IndexFiles
from guideloom.storage.windows import Windows

__all__ = ["StreamWithMetaDataset"]

_SPAN = layout.SPAN_DTYPE.itemsize  # bytes of a span row: start, stop, meta_start, meta_stop
_DIR = layout.SPAN_DIR_DTYPE.itemsize  # bytes of a directory entry: first, after, meta_first, meta_after

Requests = list[tuple[int, str, int, int]]
Buffers = list[list[memoryview]]


class StreamWithMetaDataset(Windows):
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
        self._access = IndexFiles(self.reader, cache_bytes=index_cache_bytes)
        table = self.manifest.shard_table
        self._span_counts = np.array(table.spans, dtype=np.int64)
        # Datasets written since manifest version 2 have a span directory per shard: a window's
        # span rows are then found with one read of it. Older ones are searched (`_span_rows`).
        self._has_dir = "span_dir" in table.files
        if self._has_dir:
            self._blocks = layout.span_block_tokens(self.shard_tokens, self._span_counts)
            expected = layout.HEADER_SIZE + _DIR * layout.span_dir_entries(
                self.shard_tokens, self._span_counts
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

    def read_batch(self, indexes: Sequence[int]) -> Any:
        """The batch as the loader's default collate takes it: `read_aligned`'s result.

        Args:
            indexes: Window indexes, as for `__getitems__`.

        Returns:
            A `guideloom.formats.meta.SpanBatch`, or the samples where the format has its own
            `align` or `align_batch` (see `read_aligned`).

        Raises:
            IndexError: An index is out of range.
            ShardNotFoundError: A shard file the manifest lists is missing.
            ShardCorruptError: A shard file is shorter than the manifest records.
            StorageAccessError: The storage refused a request or could not be reached.
        """
        return self.read_aligned(indexes)

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
        ahead = self._ahead  # a BatchOrder's read-ahead (guideloom.loading.read_ahead)
        if ahead is not None and ahead.active():
            return ahead.items(self, indexes)  # type: ignore[no-any-return]
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

    # -- one batch ------------------------------------------------------------------------------

    def _windows_and_spans(self, indexes: Sequence[int]) -> tuple[dict[str, np.ndarray], list[list[Span]]]:
        """``({field: (batch, sequence_length) array}, spans of each row)`` for ``indexes``."""
        batch = self._batch(indexes)
        out, requests, buffers = self._windows.plan(batch)
        n = len(batch)
        if not n:
            return self.stream_format.split_fields(out), []
        row, shard, start, stop, off = self._batch_pieces(np.asarray(batch, dtype=np.int64))
        if self._has_dir:
            spans = self._directory_spans(n, row, shard, start, stop, off, requests[0], buffers[0])
        else:
            spans = self._searched_spans(n, row, shard, start, stop, off, requests[0], buffers[0])
        return self.stream_format.split_fields(out), spans

    def _batch_pieces(self, idx: np.ndarray) -> tuple[np.ndarray, ...]:
        """``(row, shard, start, stop, offset)`` of every piece of the batch's windows, in row
        order (a window inside one shard is one piece; one across a boundary, one per shard)."""
        length, n = self.sequence_length, len(idx)
        g0 = idx * length
        shard = np.searchsorted(self.shard_starts, g0, side="right") - 1
        start = g0 - self.shard_starts[shard]
        columns = (np.arange(n, dtype=np.int64), shard, start, start + length, np.zeros(n, np.int64))
        crossing = np.flatnonzero(start + length > self.shard_tokens[shard])
        if not len(crossing):
            return columns
        keep = np.ones(n, dtype=bool)
        keep[crossing] = False
        extra = [(r, *piece) for r in crossing.tolist() for piece in self.pieces(int(idx[r]))]
        x = np.array(extra, dtype=np.int64).reshape(-1, 5)
        joined = [np.concatenate([col[keep], x[:, c]]) for c, col in enumerate(columns)]
        order = np.argsort(joined[0], kind="stable")  # a window's pieces stay in window order
        return tuple(col[order] for col in joined)

    def _directory_spans(
        self,
        n: int,
        row: np.ndarray,
        shard: np.ndarray,
        start: np.ndarray,
        stop: np.ndarray,
        off: np.ndarray,
        requests: Requests,
        buffers: Buffers,
    ) -> list[list[Span]]:
        """Spans of each row through the span directory: one round of directory reads, then
        the batch's tokens, span rows and annotation bytes in one read."""
        order = np.lexsort((start, shard))
        row, shard, start, stop, off = row[order], shard[order], start[order], stop[order], off[order]
        k0, k1 = layout.span_candidates(start, stop, self._blocks[shard])
        # A new run where the shard changes or the directory entries do not touch the last's.
        new = np.ones(len(shard), bool)
        new[1:] = (shard[1:] != shard[:-1]) | (k0[1:] > np.maximum.accumulate(k1)[:-1])
        heads = np.flatnonzero(new)
        run_of_piece = np.cumsum(new) - 1
        run_shard = shard[heads]
        first, last = self._access.run_ends(
            "span_dir", run_shard, k0[heads], np.maximum.reduceat(k1, heads), _DIR
        )
        # Per run: its first span row and first meta byte (from its first entry), one past its
        # last span row and last meta byte (from its last entry).
        ends = np.concatenate((first, last), axis=1).view("<u8").astype(np.int64)
        lo, m0 = ends[:, 0], ends[:, 2]
        counts, sizes = np.maximum(ends[:, 5] - lo, 0), np.maximum(ends[:, 7] - m0, 0)
        rows_buf = np.empty(int(counts.sum()) * _SPAN, np.uint8)
        meta_buf = np.empty(int(sizes.sum()), np.uint8)
        rows_view, meta_view, h = rows_buf.data, meta_buf.data, layout.HEADER_SIZE
        at_row = at_meta = 0
        for s, a, c, m, z in zip(
            run_shard.tolist(), lo.tolist(), counts.tolist(), m0.tolist(), sizes.tolist()
        ):
            if c:  # the run's span rows, then their annotations (runs without spans read none)
                requests.append((s, "spans", h + a * _SPAN, h + (a + c) * _SPAN))
                buffers.append([rows_view[at_row : at_row + c * _SPAN]])
                at_row += c * _SPAN
            if z:
                requests.append((s, "meta", h + m, h + m + z))
                buffers.append([meta_view[at_meta : at_meta + z]])
                at_meta += z
        self.reader.read_into(requests, buffers)
        table = rows_buf.view("<u8").reshape(-1, 4).view(np.int64)
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
        cut = (np.cumsum(sizes) - sizes - m0)[run_of_piece[piece]]
        q0, q1 = table[span, 2] + cut, table[span, 3] + cut
        # Spans in row order, and by position within each row.
        rows_of_span = row[piece]
        by_row = np.lexsort((x, rows_of_span))
        notes = self.meta_format.decode_meta_batch(meta_buf.data, q0[by_row].tolist(), q1[by_row].tolist())
        spans = list(zip(x[by_row].tolist(), y[by_row].tolist(), notes))
        bounds = np.searchsorted(rows_of_span[by_row], np.arange(n + 1)).tolist()
        return [spans[bounds[r] : bounds[r + 1]] for r in range(n)]

    def _searched_spans(
        self,
        n: int,
        row: np.ndarray,
        shard: np.ndarray,
        start: np.ndarray,
        stop: np.ndarray,
        off: np.ndarray,
        requests: Requests,
        buffers: Buffers,
    ) -> list[list[Span]]:
        """Spans of each row without a directory (manifest version 1): the span rows found by a
        search of the span table's pages, then the batch's tokens and annotations in one read."""
        lo, hi = self._span_rows(shard, start, stop)
        has = np.flatnonzero(hi > lo)
        lengths = (hi - lo)[has]
        total = int(lengths.sum())
        # Every overlapping span of the batch: one gather (its pages were read by the search).
        first = np.cumsum(lengths) - lengths
        rows = np.arange(total, dtype=np.int64) - np.repeat(first - lo[has], lengths)
        table = self._access.gather("spans", np.repeat(shard[has], lengths), rows, _SPAN)
        table = table.view("<u8").reshape(total, 4).astype(np.int64)
        m0, m1 = table[first, 2], table[np.cumsum(lengths) - 1, 3]
        sizes = m1 - m0
        meta_buf = np.empty(int(sizes.sum()), np.uint8)
        _add_reads(requests, buffers, shard[has], "meta", m0, sizes, meta_buf)
        self.reader.read_into(requests, buffers)
        out: list[list[Span]] = [[] for _ in range(n)]
        if not total:
            return out
        # Each row's spans, clipped to its window and in window coordinates: the rows read for
        # piece k may include some that do not overlap it.
        piece = np.repeat(np.arange(len(lengths)), lengths)
        p_start, p_stop, p_off = start[has][piece], stop[has][piece], off[has][piece]
        s0, s1 = table[:, 0], table[:, 1]
        keep = np.flatnonzero((s1 > p_start) & (s0 < p_stop))
        piece, p_start, p_stop, p_off = piece[keep], p_start[keep], p_stop[keep], p_off[keep]
        shift = p_off - p_start
        w0 = (np.maximum(s0[keep], p_start) + shift).tolist()
        w1 = (np.minimum(s1[keep], p_stop) + shift).tolist()
        # Meta bytes of the batch joined end to end: piece k's begin at cut[k].
        cut = np.cumsum(sizes) - sizes - m0
        a = (table[keep, 2] + cut[piece]).tolist()
        b = (table[keep, 3] + cut[piece]).tolist()
        spans = list(zip(w0, w1, self.meta_format.decode_meta_batch(meta_buf.data, a, b)))
        rows_of_span = row[has][piece]
        bounds = np.searchsorted(rows_of_span, np.arange(n + 1)).tolist()
        for r in range(n):
            if bounds[r] < bounds[r + 1]:
                out[r] = spans[bounds[r] : bounds[r + 1]]
        return out

    def _span_rows(
        self, shard: np.ndarray, start: np.ndarray, stop: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Datasets without a span directory (manifest version 1): for each piece (tokens
        ``[start, stop)`` of shard ``shard``), the rows ``[lo, hi)`` of its shard's span table
        whose spans overlap it. Two searches per piece (first span ending after ``start``, first
        span starting at or after ``stop``), probing the span table's pages first where a uniform
        spread of spans over the shard's tokens puts them; very uneven spans can take a few rounds."""
        n = len(shard)
        counts = self._span_counts[shard]
        density = counts / np.maximum(self.shard_tokens[shard], 1)
        guess_lo = (start * density).astype(np.int64)
        guess_hi = (stop * density).astype(np.int64)
        # The pages between the two guesses hold the spans gathered next: read them in the
        # search's first round (at most a few per piece, so a bad guess costs little).
        per = max(1, self._access.page_bytes // _SPAN)
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
            itemsize=_SPAN,
            counts=np.concatenate([counts, counts]),
            guesses=np.concatenate([guess_lo, guess_hi]),
            prefetch=prefetch,
        )
        return bounds[:n], bounds[n:]


def _add_reads(
    requests: Requests,
    buffers: Buffers,
    shards: np.ndarray,
    file: str,
    starts: np.ndarray,
    sizes: np.ndarray,
    into: np.ndarray,
) -> None:
    """Requests for ``sizes[k]`` bytes at item offset ``starts[k]`` (from the end of the header)
    of file ``file`` of shard ``shards[k]``, read end to end into ``into``; empty ones are left
    out."""
    has = np.flatnonzero(sizes > 0)
    if not len(has):
        return
    where = np.cumsum(sizes) - sizes
    flat = into.data
    a = (starts[has] + layout.HEADER_SIZE).tolist()
    for s, begin, size, at in zip(shards[has].tolist(), a, sizes[has].tolist(), where[has].tolist()):
        requests.append((s, file, begin, begin + size))
        buffers.append([flat[at : at + size]])
