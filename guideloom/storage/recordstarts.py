"""Where records start inside stream windows (``record_starts``): a mixin of the stream views.

Record starts are a small per-shard index file (``starts``, written since manifest version 3).
Where the view's shard reader maps files (local disk: `ShardReader.map_file`), each shard's
index is mapped once per process and searched in memory; elsewhere it is read by pages through
`IndexFiles` (cached, one round of requests per batch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import numpy as np

import guideloom.layout as layout
from guideloom.manifest import Manifest
from guideloom.storage.indexfiles import IndexFiles
from guideloom.types import ShardReader

__all__ = ["RecordStarts", "WindowShardPieces", "window_shard_pieces"]

_FEW_PIECES = 24  # record-start lookups of at most this many shard pieces go piece by piece


class WindowShardPieces(NamedTuple):
    """The shard pieces of a batch of windows: piece ``j`` is tokens ``[a[j], b[j])`` of shard
    ``shard[j]``, in window ``window_of[j]``, whose first token is ``g0`` (stream positions)."""

    g0: np.ndarray
    shard: np.ndarray
    window_of: np.ndarray
    a: np.ndarray
    b: np.ndarray


def window_shard_pieces(
    shard_starts: np.ndarray, shard_tokens: np.ndarray, windows: np.ndarray, length: int
) -> WindowShardPieces:
    """Which tokens of which shards windows ``windows`` (of ``length`` tokens) cover, as arrays
    (every shard a window touches, zero-token shards included), for record-start lookups.

    Args:
        shard_starts: Each shard's first token on the stream (ascending).
        shard_tokens: Each shard's tokens.
        windows: Window numbers (``int64``).
        length: Tokens per window.

    Returns:
        The pieces, window by window, shards in order.
    """
    g0 = windows * length
    g1 = g0 + length
    s0 = np.searchsorted(shard_starts, g0, side="right") - 1
    s1 = np.searchsorted(shard_starts, g1 - 1, side="right") - 1
    per = s1 - s0 + 1
    heads = np.cumsum(per) - per
    window_of = np.repeat(np.arange(len(windows)), per)
    shard = np.repeat(s0, per) + np.arange(int(per.sum())) - np.repeat(heads, per)
    a = np.maximum(g0[window_of] - shard_starts[shard], 0)
    b = np.minimum(g1[window_of] - shard_starts[shard], shard_tokens[shard])
    return WindowShardPieces(g0, shard, window_of, a, b)


class RecordStarts:
    """`record_starts` and `record_starts_batch` of a stream view (`Windows`)."""

    # Set by the view (`guideloom.storage.windows.Windows`, `guideloom.storage.view.View`).
    manifest: Manifest
    reader: ShardReader
    url: str
    sequence_length: int
    shard_starts: np.ndarray
    shard_tokens: np.ndarray

    if TYPE_CHECKING:

        def _indexes(self, indexes: Any) -> np.ndarray: ...  # `View._indexes`

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
            self._no_starts()
        idx = np.asarray(self._indexes(indexes), dtype=np.int64)  # type: ignore[arg-type]
        p = window_shard_pieces(self.shard_starts, self.shard_tokens, idx, self.sequence_length)
        units = self._start_units(p.shard)
        a, b = (p.a, p.b) if units is None else (p.a * units, p.b * units)
        if self.reader.local and self._maps_starts:
            # On local disk: each shard's record starts memory-mapped (the OS page cache holds
            # them; nothing is copied into the process), searched with ``np.searchsorted``.
            lo, hi, values = (self._few_starts if len(p.shard) <= _FEW_PIECES else self._many_starts)(
                p.shard, a, b
            )
        else:
            lo, hi, values = self._paged_starts(p, a, b)
        if units is not None:
            values = values // np.repeat(units, hi - lo)
        return self._window_positions(values, hi - lo, hi > lo, p.shard, p.window_of, p.g0, len(idx))

    def _no_starts(self) -> NoReturn:
        raise ValueError(
            f"{self.url} has no record starts (it was written before GuideLoom stored them, "
            "manifest version < 3); rewrite it with this GuideLoom, or find document "
            "boundaries from an end-of-document token id or a field such as doc_index"
        )

    def _start_units(self, shard: np.ndarray) -> np.ndarray | None:
        """What one token is in the unit of shard ``shard[j]``'s start file (a view whose files
        hold byte pointers says its item size); None: every start file holds token positions."""
        return None

    @property
    def _maps_starts(self) -> bool:
        """Whether local start files are memory-mapped and searched (else read by pages)."""
        return True

    def _paged_starts(self, p: WindowShardPieces, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
        """`_few_starts` through `IndexFiles` pages (remote storage): ``(lo, hi, values)``, one
        round of requests for the pages not cached. ``a``, ``b``: in the start files' units."""
        item = layout.RECORD_START_DTYPE
        records = np.asarray(self.manifest.shard_table.records, dtype=np.int64)[p.shard]
        tokens = np.maximum(self.shard_tokens[p.shard], 1)
        n = len(p.shard)
        twice = np.concatenate([records, records])
        found = self._start_index.search(
            "starts",
            np.concatenate([p.shard, p.shard]),
            np.concatenate([a, b]),
            words=[0] * (2 * n),
            sides=["left"] * (2 * n),
            itemsize=item.itemsize,
            counts=twice,
            guesses=twice * np.concatenate([p.a, p.b]) // np.concatenate([tokens, tokens]),
        )
        lo, hi = found[:n], found[n:]
        keep = hi > lo
        if keep.any():
            raw = self._start_index.runs("starts", p.shard[keep], lo[keep], hi[keep], item.itemsize)
            values = np.frombuffer(raw, item).astype(np.int64)
        else:
            values = np.empty(0, np.int64)
        return lo, hi, values

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
