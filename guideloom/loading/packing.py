"""Packing whole records into windows: ``StatefulDataLoader.from_storage(..., pack="whole")``.

Plain stream windows (`guideloom.StreamDataset`) cut the stream every ``L`` tokens, so a window
may start in the middle of a conversation. A `PackedView` instead fills each window of ``L``
tokens with *whole* records and pads the rest:

- the records (or, for a record longer than ``L``, its pieces: see `Packing.too_long`) are taken
  in the stream's order, or in an order shuffled by ``seed`` when the loader shuffles;
- each run of `Packing.buffer` consecutive records of that order is packed on its own by best
  fit decreasing (longest first, each into the window it fills the most, a new window when none
  has room), so planning looks at one buffer of record lengths at a time;
- a window's records keep their order in the stream; the rest of the window is padding:
  ``tokens`` = `Packing.pad_id`, every other stream field 0, ``loss_mask`` 0, ``labels`` -100.

A batch holds ``tokens`` and the stream's other fields, ``loss_mask`` (the stream's, or 1 on
every real token when the stream has none), ``position_ids`` (0 at each record start and at the
padding's start), ``labels`` (the next token of the same record; -100 at each record's last
token, where the target's ``loss_mask`` is 0, and on the padding) and, per batch,
``cu_seqlens`` / ``max_seqlen`` (`guideloom.loading.boundaries`): the padding is a segment of
its own, so no real token attends to it.

The plan depends on the dataset (its snapshot), `Packing` and the loader's ``seed`` (when
shuffling) only, not on the epoch: the packed windows are the view's samples, and the loader's
order shuffles *them* each epoch by ``(seed, epoch)``. So ``len(loader)`` is the same every
epoch, and a state resumes exactly and elastically (another ``num_workers`` or world size)
like any other view's, in O(1). What the plan keeps is O(records) small integers (a start and a
length per record piece, an offset per window); token data is read batch by batch.

Why our own code: TRL's ``pack_dataset`` packs a whole in-memory ``datasets`` table at once
(its best fit decreasing needs every length together and rewrites the table); here the plan has
to be bounded by a buffer, seeded, and read back by byte ranges from sharded storage.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import guideloom.layout as layout
from guideloom.loading.boundaries import IGNORE_INDEX, boundary_arrays
from guideloom.storage.wrapped import WrappedView
from guideloom.types import STREAM, DatasetView, as_mixture, stream_view

__all__ = ["Packing", "PackedView", "PackStats", "best_fit_decreasing", "pack_view", "packing_efficiency"]

_TOO_LONG = ("split", "drop")


@dataclass(frozen=True)
class Packing:
    """How `PackedView` packs records (``from_storage(..., pack=Packing(...))``; ``pack="whole"``
    is ``Packing()``).

    Args:
        buffer: Records packed together by best fit decreasing (a run of this many records of the
            order); larger packs tighter and plans slower. At least 1.
        pad_id: The token id of padding (give your tokenizer's pad id).
        too_long: A record longer than the window: ``"split"`` cuts it into window-sized pieces,
            each packed as a record of its own (its position ids restart at 0 in each piece);
            ``"drop"`` leaves it out. Either way `PackedView.stats` counts them.
    """

    buffer: int = 1024
    pad_id: int = 0
    too_long: str = "split"

    def __post_init__(self) -> None:
        if isinstance(self.buffer, bool) or not isinstance(self.buffer, int) or self.buffer < 1:
            raise ValueError(f"Packing(buffer={self.buffer!r}): give a positive number of records")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int) or self.pad_id < 0:
            raise ValueError(f"Packing(pad_id={self.pad_id!r}): give a token id (an int >= 0)")
        if self.too_long not in _TOO_LONG:
            raise ValueError(
                f"Packing(too_long={self.too_long!r}): records longer than the window are "
                "'split' (cut into window-sized pieces) or 'drop' (left out)"
            )


@dataclass(frozen=True)
class PackStats:
    """What one plan packed (`PackedView.stats`; ``efficiency`` is real tokens over window
    tokens, 1.0 meaning no padding).

    Attributes:
        records: Records of the dataset (empty ones included).
        tokens: Real tokens packed (dropped records' left out).
        windows: Packed windows: the view's samples.
        sequence_length: Tokens per window.
        split: Records longer than the window, cut into pieces (``too_long="split"``).
        dropped: Records longer than the window, left out (``too_long="drop"``).
        dropped_tokens: The tokens of the dropped records.
        empty: Records without tokens (nothing to pack).
    """

    records: int
    tokens: int
    windows: int
    sequence_length: int
    split: int
    dropped: int
    dropped_tokens: int
    empty: int

    @property
    def efficiency(self) -> float:
        """Real tokens over window tokens (``windows * sequence_length``)."""
        return self.tokens / (self.windows * self.sequence_length) if self.windows else 0.0


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Bins of at most ``capacity`` that hold every item of ``lengths`` (each <= ``capacity``):
    items longest first (ties: lower index first), each into the fullest bin it fits, a new bin
    when none has room. Each bin lists its items' indexes in increasing order; bins are ordered
    by their first item. Deterministic: the same lengths give the same bins.

    Args:
        lengths: Item sizes (tokens), each in ``1 .. capacity``.
        capacity: The bin size (tokens per window).

    Returns:
        The bins, as lists of item indexes.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    room: list[tuple[int, int]] = []  # (free tokens, bin), sorted: the fullest fitting bin first
    bins: list[list[int]] = []
    for i in order:
        n = lengths[i]
        k = bisect_left(room, (n, -1))
        if k < len(room):
            free, b = room.pop(k)
            bins[b].append(i)
            free -= n
        else:
            b, free = len(bins), capacity - n
            bins.append([i])
        if free > 0:
            insort(room, (free, b))
    for items in bins:
        items.sort()
    bins.sort(key=lambda items: items[0])
    return bins


def packing_efficiency(lengths: Sequence[int], capacity: int, buffer: int | None = None) -> float:
    """Real tokens over window tokens when ``lengths`` (each <= ``capacity``) are packed by
    `best_fit_decreasing`, by runs of ``buffer`` items (None: all at once, as TRL's
    ``pack_dataset(strategy="bfd")`` packs a whole dataset).

    Args:
        lengths: Item sizes in tokens, in order.
        capacity: Tokens per window.
        buffer: Items packed together; None: all of them.

    Returns:
        The fraction of window tokens that are real tokens.
    """
    step = len(lengths) if buffer is None else buffer
    windows = sum(
        len(best_fit_decreasing(lengths[i : i + step], capacity))
        for i in range(0, len(lengths), max(step, 1))
    )
    return sum(lengths) / (windows * capacity) if windows else 0.0


def pack_view(view: DatasetView, pack: Any, *, seed: int, shuffle: Any) -> PackedView:
    """``view`` packed as ``pack`` says (``"whole"`` or a `Packing`); the loader's ``seed``
    orders the records when ``shuffle`` is on.

    Args:
        view: The stream view `from_storage` opened (one stored stream, no subset).
        pack: ``"whole"`` or a `Packing`.
        seed: The loader's seed.
        shuffle: The loader's ``shuffle`` (anything but False shuffles the records first).

    Returns:
        The packed view.

    Raises:
        ValueError: ``pack`` is neither; the view is not a plain stream with record starts.
    """
    if isinstance(pack, str) and pack == "whole":
        settings = Packing()
    elif isinstance(pack, Packing):
        settings = pack
    else:
        raise ValueError(
            f"pack={pack!r}: give pack='whole' (whole records per window) or "
            "pack=Packing(buffer=..., pad_id=..., too_long='split' or 'drop') "
            "(from guideloom.loading.packing import Packing), or leave it out"
        )
    if as_mixture(view) is not None:
        raise ValueError(
            "pack= packs the records of one stream; a Mixture's windows are not packed yet: "
            "load each source with pack='whole', or the mixture without pack="
        )
    stream = stream_view(view)
    if stream is None or view.layout != STREAM:
        raise ValueError(
            f"pack= fills windows with whole stream records, but {view.url} is a {view.layout} "
            "dataset; pack= works on plain streams (--layout stream): leave it out here"
        )
    if "tokens" not in stream.stream_format.fields:
        raise ValueError(
            f"{view.url}: pack= needs a 'tokens' field to pad; this stream has {list(stream.stream_format.fields)}"
        )
    if not stream.has_record_starts:
        raise ValueError(
            f"pack=: {view.url} has no record starts (written before GuideLoom stored them), so "
            "its records cannot be found; rewrite the dataset with this GuideLoom, or load it "
            "without pack="
        )
    packed = PackedView(view, settings, seed=seed if shuffle not in (False, None) else None)
    if not len(packed):
        raise ValueError(
            f"pack=: every record of {view.url} is longer than the window "
            f"({packed.stats.dropped} dropped with too_long='drop'), so no window is left; use "
            "too_long='split' or a longer sequence_length"
        )
    return packed


class PackedView(WrappedView):
    """Windows of ``sequence_length`` tokens, each holding whole records and padding (see the
    module docstring). Built by `pack_view`; ``stats`` says what the plan packed."""

    def __init__(self, view: Any, packing: Packing, *, seed: int | None) -> None:
        """Plan the packed windows of ``view`` (its record starts are read once).

        Args:
            view: A plain stream view with record starts.
            packing: How to pack.
            seed: Shuffles the records before packing; None keeps the stored order.
        """
        super().__init__(view)
        self.packing = packing
        self.seed = seed
        length = int(view.sequence_length)
        self._length = length
        table = view.manifest.shard_table
        tokens = np.asarray(table.tokens, dtype=np.int64)
        self._shard_starts = np.concatenate(([0], np.cumsum(tokens)[:-1])).astype(np.int64)
        self._shard_stops = self._shard_starts + tokens
        self._starts_l: list[int] = self._shard_starts.tolist()
        self._stops_l: list[int] = self._shard_stops.tolist()
        starts = self._record_starts(table)
        total = int(tokens.sum())
        lengths = np.diff(np.append(starts, total))
        self._plan(starts, lengths, length)

    # -- planning -------------------------------------------------------------------------------

    def _record_starts(self, table: Any) -> np.ndarray:
        """Every record's first token on the stream's token axis (int64, sorted): each shard's
        record-start file read whole, in one round of requests."""
        shards = [s for s, n in enumerate(table.records) if n > 0]
        size = layout.RECORD_START_DTYPE.itemsize
        requests = [
            (s, "starts", layout.HEADER_SIZE, layout.HEADER_SIZE + table.records[s] * size) for s in shards
        ]
        parts = self.view.reader.read(requests) if requests else []
        out = [
            np.frombuffer(raw, layout.RECORD_START_DTYPE).astype(np.int64) + self._shard_starts[s]
            for s, raw in zip(shards, parts)
        ]
        return np.concatenate(out) if out else np.empty(0, np.int64)

    def _plan(self, starts: np.ndarray, lengths: np.ndarray, length: int) -> None:
        """The windows: ``_item_start`` / ``_item_len`` (each packed piece's first token and
        size, window by window) and ``_window_ptr`` (window ``w``'s pieces are
        ``_window_ptr[w] : _window_ptr[w + 1]``)."""
        records = len(lengths)
        order = np.arange(records, dtype=np.int64)
        if self.seed is not None:
            order = np.random.default_rng([self.seed, 0x9ACC]).permutation(records)
        long_mask = lengths > length
        split = dropped = dropped_tokens = 0
        piece_start: list[int] = []
        piece_len: list[int] = []
        item_start: list[int] = []
        item_len: list[int] = []
        window_ptr = [0]
        buffered = 0
        empty = int((lengths == 0).sum())
        starts_l, lengths_l, long_l = starts.tolist(), lengths.tolist(), long_mask.tolist()

        def flush() -> None:
            for items in best_fit_decreasing(piece_len, length):
                for i in items:
                    item_start.append(piece_start[i])
                    item_len.append(piece_len[i])
                window_ptr.append(len(item_start))
            piece_start.clear()
            piece_len.clear()

        for r in order.tolist():
            n, a = lengths_l[r], starts_l[r]
            if n == 0:
                continue
            if long_l[r]:
                if self.packing.too_long == "drop":
                    dropped += 1
                    dropped_tokens += n
                    continue
                split += 1
                for off in range(0, n, length):
                    piece_start.append(a + off)
                    piece_len.append(min(length, n - off))
            else:
                piece_start.append(a)
                piece_len.append(n)
            buffered += 1
            if buffered == self.packing.buffer:
                flush()
                buffered = 0
        flush()
        self._item_start = np.asarray(item_start, dtype=np.int64)
        self._item_len = np.asarray(item_len, dtype=np.int64)
        self._window_ptr = np.asarray(window_ptr, dtype=np.int64)
        self.stats = PackStats(
            records=records,
            tokens=int(self._item_len.sum()),
            windows=len(window_ptr) - 1,
            sequence_length=length,
            split=split,
            dropped=dropped,
            dropped_tokens=dropped_tokens,
            empty=empty,
        )

    # -- guideloom.types.DatasetView ------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """The dataset's fingerprint with the packing named: a state saved on packed windows
        resumes only on the same packing (the plain view's samples are other windows)."""
        p = self.packing
        seed = "sequential" if self.seed is None else f"seed={self.seed}"
        return f"{self.view.fingerprint}{{pack buffer={p.buffer} too_long={p.too_long} {seed}}}"

    def __len__(self) -> int:
        return len(self._window_ptr) - 1

    def _checked(self, indexes: Sequence[int]) -> np.ndarray:
        idx = np.asarray(indexes, dtype=np.int64).reshape(-1)
        n = len(self)
        if len(idx) and (idx.min() < -n or idx.max() >= n):
            bad = int(idx[(idx < -n) | (idx >= n)][0])
            raise IndexError(f"packed window {bad} out of range: {self.view.url} packs into {n} windows")
        return np.where(idx < 0, idx + n, idx)

    def __getitem__(self, index: int) -> Any:
        batch = self.read_batch([index])
        return {name: values[0] for name, values in batch.items()}

    def __getitems__(self, indexes: Sequence[int]) -> list[Any]:
        batch = self.read_batch(indexes)
        return [{name: values[row] for name, values in batch.items()} for row in range(len(indexes))]

    def records_of(self, window: int) -> list[tuple[int, int]]:
        """The ``(first token, tokens)`` on the stream's token axis of each record (or piece)
        packed in window ``window``, in window order.

        Args:
            window: A packed window.

        Returns:
            One pair per record, in the window's order.
        """
        w = int(self._checked([window])[0])
        lo, hi = int(self._window_ptr[w]), int(self._window_ptr[w + 1])
        return list(zip(self._item_start[lo:hi].tolist(), self._item_len[lo:hi].tolist()))

    def read_batch(self, indexes: Sequence[int]) -> dict[str, np.ndarray]:
        """Packed windows ``indexes`` as ``(rows, sequence_length)`` arrays: the stream's fields
        (padded), ``loss_mask``, ``position_ids`` and ``labels`` (see the module docstring).

        Args:
            indexes: Packed windows (negative: from the end).

        Returns:
            One array per name, row ``j`` holding window ``indexes[j]``.
        """
        idx = self._checked(indexes)
        rows, length = len(idx), self._length
        fmt = self.view.stream_format
        out = np.zeros((rows, length), dtype=fmt.dtype)
        flat = out.view(np.uint8).reshape(-1).data
        isz, head = fmt.itemsize, layout.HEADER_SIZE
        # Every item (record or piece) of the batch, row by row, with array operations.
        lo, hi = self._window_ptr[idx], self._window_ptr[idx + 1]
        counts = hi - lo
        first = np.cumsum(counts) - counts
        items = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(lo - first, counts)
        a, n = self._item_start[items], self._item_len[items]
        row = np.repeat(np.arange(rows, dtype=np.int64), counts)
        ends = np.cumsum(n)
        used = np.zeros(rows, np.int64)
        np.add.at(used, row, n)
        dest = row * length + (ends - n) - np.repeat(ends[first] - n[first] if len(n) else first, counts)
        # flat positions where a record (or a row's padding) starts, in order
        pads = np.flatnonzero(used < length)
        heads = np.sort(np.concatenate((dest, pads * length + used[pads])))
        shard = np.searchsorted(self._shard_starts, a, side="right") - 1
        inside = a + n <= self._shard_stops[shard]
        off = a - self._shard_starts[shard]
        requests: list[tuple[int, str, int, int]] = []
        buffers: list[list[memoryview]] = []
        for s, x, m, d in zip(
            shard[inside].tolist(), off[inside].tolist(), n[inside].tolist(), dest[inside].tolist()
        ):
            requests.append((s, "data", head + x * isz, head + (x + m) * isz))
            buffers.append([flat[d * isz : (d + m) * isz]])
        for x, m, d in zip(a[~inside].tolist(), n[~inside].tolist(), dest[~inside].tolist()):
            self._requests(x, x + m, d * isz, flat, requests, buffers)  # across a shard boundary
        if requests:
            self.view.reader.read_into(requests, buffers)
        fields = fmt.split_fields(out)
        pad = np.arange(length)[None, :] >= used[:, None]
        tokens = fields["tokens"]
        tokens[pad] = self.packing.pad_id
        if "loss_mask" not in fields:
            fields["loss_mask"] = (~pad).astype(np.uint8)
        mask = fields["loss_mask"]
        marks = boundary_arrays(tokens, heads, mask, labels=True)
        marks["labels"][pad] = IGNORE_INDEX
        fields.update(marks)
        return fields

    def _requests(
        self,
        a: int,
        b: int,
        at: int,
        flat: memoryview,
        requests: list[tuple[int, str, int, int]],
        buffers: list[list[memoryview]],
    ) -> None:
        """Requests for tokens ``[a, b)`` of the stream into ``flat[at:]`` (bytes), one per
        shard the range touches."""
        isz, head = self.view.stream_format.itemsize, layout.HEADER_SIZE
        s = bisect_right(self._starts_l, a) - 1
        while a < b:
            stop = min(b, self._stops_l[s])
            if stop > a:
                base = self._starts_l[s]
                requests.append((s, "data", head + (a - base) * isz, head + (stop - base) * isz))
                buffers.append([flat[at : at + (stop - a) * isz]])
                at += (stop - a) * isz
                a = stop
            s += 1

    # -- guideloom.types.StreamView (what differs from the stored windows) -----------------------

    def record_starts_batch(self, indexes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where records start in the packed windows ``indexes``: ``(positions, counts)``.

        Args:
            indexes: Packed windows.

        Returns:
            Positions within each window (int64), and how many each window has.
        """
        idx = self._checked(list(np.asarray(indexes).reshape(-1)))
        positions: list[int] = []
        counts = np.empty(len(idx), np.int64)
        for k, w in enumerate(idx.tolist()):
            lens = self._item_len[self._window_ptr[w] : self._window_ptr[w + 1]]
            positions.extend((np.cumsum(lens) - lens).tolist())
            counts[k] = len(lens)
        return np.asarray(positions, dtype=np.int64), counts

    def base_indexes(self, indexes: Sequence[int] | np.ndarray) -> np.ndarray:
        """The stored window holding the first token of each packed window's first record (what
        `guideloom.trace` follows down; the other records of a packed window may lie elsewhere:
        `records_of` names them all).

        Args:
            indexes: Packed windows.

        Returns:
            Stored window numbers (int64).
        """
        idx = self._checked(list(np.asarray(indexes).reshape(-1)))
        first = self._item_start[self._window_ptr[idx]]
        inner = len(self.view)
        return np.minimum(first // self._length, max(inner - 1, 0)).astype(np.int64)

    def pieces(self, window: int) -> list[tuple[int, int, int, int]]:
        """Where packed window ``window``'s tokens are stored: ``(shard, start, stop, offset)``
        per piece, in window order (padding has none).

        Args:
            window: A packed window.

        Returns:
            The pieces, one per record and shard.
        """
        out = []
        at = 0
        for a, n in self.records_of(window):
            b = a + n
            s = bisect_right(self._starts_l, a) - 1
            while a < b:
                stop = min(b, self._stops_l[s])
                if stop > a:
                    base = self._starts_l[s]
                    out.append((s, a - base, stop - base, at))
                    at += stop - a
                    a = stop
                s += 1
        return out
