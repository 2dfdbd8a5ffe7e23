"""Read-ahead for loaders rebuilt from a view and its `BatchOrder` (``torchdata.StatefulDataLoader(
view, batch_sampler=BatchOrder(view, ...))``, accelerate's or Lightning's re-wrapping).

Such a loader asks the view for one batch at a time: one read, and one trip through a worker's
pipe, per batch, where GuideLoom's own loader groups consecutive batches into one read. A
`BatchOrder` therefore attaches a small `ReadAhead` (picklable, O(1): the order's identity and
where the current pass starts) to the view it was built on. A worker process that is asked for a
batch finds it in the pass (its first few batches, or just after the batches it read last) and
reads, with the same one-round grouped read as GuideLoom's own workers
(`guideloom.loading.fetch.BatchSource.read_group`), the batches torch will send it next: torch
deals a pass's batches round-robin to its workers (worker ``w`` of ``W`` gets batches ``w``,
``w + W``, ...), so those are every ``W``-th batch after this one. They wait in a small cache
(one group, keyed by their exact sample indexes) until asked for. Groups grow 1, 1, 2, 4, ...
batches up to the read-ahead budget (``$GUIDELOOM_READ_AHEAD_BYTES``, 4 MiB by default, as the
loader's); a byte-sized block shuffle reads this worker's batches of one window per read,
through the gaps of each block (each block one request).

Exactness never depends on the guess: a cached batch is returned only for exactly the sample
indexes it was read for, and a batch the guess did not foresee is read on its own. A wrong
guess costs a read, nothing else. ``GUIDELOOM_READ_AHEAD_BYTES=0`` turns it off.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from guideloom.loading.fetch import BatchSource
from guideloom.loading.handover import rows
from guideloom.loading.sampler import Grouping, read_ahead_budget

__all__ = ["ReadAhead"]

_SEARCH = 4  # batches searched per worker, past where a worker's next batch should be
_RETRY = 8  # requests read on their own after a failed search, before searching again


class _Track:
    """One pass's batches as ``(number, first position, batch)``, walked forward once, with a
    slot to put back one batch that was looked at but not taken."""

    def __init__(self, order: Any) -> None:
        self.order = order.order  # the epoch's order (window_of)
        self.batches: Iterator[tuple[int, list[int]]] = order._positioned()
        self.number = 0
        self.back: deque[tuple[int, int, list[int]]] = deque()
        self.read = 0  # batches read since this track was found (the ramp)

    def next(self) -> tuple[int, int, list[int]] | None:
        if self.back:
            return self.back.popleft()
        item = next(self.batches, None)
        if item is None:
            return None
        self.number += 1
        return self.number - 1, item[0], item[1]

    def find(self, key: tuple[int, ...], limit: int) -> tuple[int, int, list[int]] | None:
        """The batch ``key`` among the next ``limit`` batches (those passed over are dropped)."""
        for _ in range(limit):
            item = self.next()
            if item is None:
                return None
            if len(item[2]) == len(key) and tuple(item[2]) == key:
                return item
        return None


class ReadAhead:
    """A `BatchOrder`'s read-ahead, attached to its view (see the module).

    Args:
        order: The `BatchOrder` built on the view (its settings are copied, not kept).
    """

    def __init__(self, order: Any) -> None:
        self.order_class = type(order)  # builds the order again in a worker (pickled by name)
        self.identity = order.identity
        self.batch_size = order.batch_size
        self.rank = order.rank
        self.world_size = order.world_size
        self.drop_last = order.drop_last
        self.windows = bool(order.identity.shuffle.sized)
        self.epoch, self.start = 0, 0
        self.skipped: tuple[tuple[int, int, int], ...] = ()
        self._fresh()

    def _fresh(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._cache: dict[tuple[int, ...], Any] = {}
        self._track: _Track | None = None
        self._group_size: int | None = None
        self._sources: dict[int, BatchSource] = {}
        self._quiet = 0  # requests left before searching again

    def __getstate__(self) -> dict[str, Any]:
        keep = (
            "order_class",
            "identity",
            "batch_size",
            "rank",
            "world_size",
            "drop_last",
            "windows",
            "epoch",
            "start",
            "skipped",
        )
        return {name: self.__dict__[name] for name in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._fresh()

    def configure(self, epoch: int, start: int, skipped: tuple[tuple[int, int, int], ...]) -> None:
        """Where the order's next pass starts (what worker processes started after this see).

        Args:
            epoch: The pass's epoch.
            start: Its first position.
            skipped: The order's skipped stretches (`BatchOrder.skip_steps`).
        """
        self.epoch, self.start, self.skipped = epoch, start, skipped

    # -- reads -----------------------------------------------------------------------------
    def active(self) -> bool:
        """Whether a view's read goes through the read-ahead (not while it reads itself, nor
        inside GuideLoom's own loader, which groups its reads itself)."""
        return not getattr(self._local, "off", False)

    @contextmanager
    def off(self) -> Iterator[None]:
        """Reads in this block go straight to the view (this thread)."""
        before = self.pause()
        try:
            yield
        finally:
            self.resume(before)

    def pause(self) -> bool:
        """`off` without a context manager (once per batch read: no generator frames): reads go
        straight to the view in this thread until `resume` with what this returned."""
        local = self._local
        before = getattr(local, "off", False)
        local.off = True
        return before

    def resume(self, before: bool) -> None:
        """Undo `pause` (``before``: what it returned)."""
        self._local.off = before

    def items(self, view: Any, indexes: Any) -> Any:
        """``view.__getitems__(indexes)``, through the read-ahead.

        Args:
            view: The view this read-ahead is attached to.
            indexes: The batch's sample indexes.
        """
        source = self._sources.get(id(view))
        if source is None:
            source = BatchSource(view, batched=False)
            if self.windows:
                source.gap_budget = None  # a window's share: through the gaps of each block
            self._sources = {id(view): source}
        return self.fetch(view, indexes, source)

    def fetch(self, view: Any, indexes: Any, source: BatchSource) -> Any:
        """One batch as ``source`` reads it, from the cache or with the batches this worker
        will be asked for next (one read).

        Args:
            view: The view this read-ahead is attached to.
            indexes: The batch's sample indexes.
            source: What reads (``source.read_group``): the view as a DataLoader sees it.
        """
        key = tuple(int(i) for i in indexes)
        with self._lock:
            hit = self._cache.pop(key, None)
            if hit is not None:
                return hit
            batches = self._plan(view, key)
            with self.off():
                parts = source.read_group(batches)
            # samples as Rows: their collated batch crosses a worker's pipe by value (handover)
            parts = [rows(p) for p in parts]
            self._cache = {tuple(b): p for b, p in zip(batches[1:], parts[1:])}
            return parts[0]

    # -- the guess -------------------------------------------------------------------------
    def _track_of(self, view: Any, epoch: int, start: int) -> _Track:
        order = self.order_class._for_loader(
            view, self.identity, self.batch_size, self.rank, self.world_size, self.drop_last
        )
        order._skipped = self.skipped
        order._configure(epoch, start)
        return _Track(order)

    def _plan(self, view: Any, key: tuple[int, ...]) -> list[list[int]]:
        """The batches to read: ``key``'s, then this worker's next ones of the pass."""
        info = get_worker_info()
        workers = info.num_workers if info is not None else 1
        limit = _SEARCH * workers + _SEARCH
        found = self._track.find(key, limit) if self._track is not None else None
        if found is None:
            self._track = None
            if self._quiet > 0:
                self._quiet -= 1
                return [list(key)]
            for epoch, start in ((self.epoch, self.start), (self.epoch + 1, 0)):
                candidate = self._track_of(view, epoch, start)
                found = candidate.find(key, limit)
                if found is not None:
                    self._track = candidate
                    self.epoch, self.start = epoch, start  # this worker's: the next pass follows
                    break
            if found is None:
                self._quiet = _RETRY
                return [list(key)]
        assert self._track is not None
        track = self._track
        if self._group_size is None:
            self._group_size = self._size(view)
        size = min(self._group_size, max(1, track.read))
        window = self._window(track, found[1]) if self.windows else None
        group = [found[2]]
        while window is not None or len(group) < size:
            item = None
            for _ in range(workers):
                item = track.next()
                if item is None:
                    break
            if item is None:
                break
            if window is not None and self._window(track, item[1]) != window:
                track.back.append(item)  # the next group's first batch
                break
            group.append(item[2])
        track.read += len(group)
        return group

    @staticmethod
    def _window(track: _Track, position: int) -> int:
        return int(track.order.window_of(np.array([position], dtype=np.int64))[0])

    def _size(self, view: Any) -> int:
        budget = read_ahead_budget(None)
        return Grouping.from_options(None, budget, view, self.batch_size).size
